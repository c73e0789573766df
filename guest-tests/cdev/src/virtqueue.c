/* The split virtqueue (virtio 1.x, 2.7): descriptor table, available and used rings in one
 * page of DMA memory. The used ring is written by the device, so every entry is checked: the
 * index may advance by at most the queue size, and an id must be a chain head we put in flight
 * (our own copy of the chain is freed, never the device-writable table). */

#include "util.h"

static volatile WddmGpuVirtqDesc *desc_at(wddm_vq *vq, uint16_t i)
{
    return (volatile WddmGpuVirtqDesc *)vq->desc + i;
}
static volatile uint16_t *avail_ring_idx(wddm_vq *vq)
{
    return (volatile uint16_t *)((volatile uint8_t *)vq->avail + VIRTQ_RING_IDX_OFFSET);
}
static volatile uint16_t *avail_entry(wddm_vq *vq, uint16_t i)
{
    return (volatile uint16_t *)((volatile uint8_t *)vq->avail + VIRTQ_RING_ENTRIES_OFFSET) + i;
}
static volatile uint16_t *used_idx(wddm_vq *vq)
{
    return (volatile uint16_t *)((volatile uint8_t *)vq->used + VIRTQ_RING_IDX_OFFSET);
}
static volatile WddmGpuVirtqUsedElem *used_elem(wddm_vq *vq, uint16_t i)
{
    return (volatile WddmGpuVirtqUsedElem *)((volatile uint8_t *)vq->used +
                                             VIRTQ_RING_ENTRIES_OFFSET) + i;
}

wddm_result wddm_vq_init(wddm_vq *vq, const wddm_os *os, uint16_t size)
{
    if (size == 0 || size > WDDM_VQ_MAX_SIZE || (size & (size - 1)) != 0)
        return WDDM_E_INVALID;
    wddm_zero(vq, sizeof(*vq));
    if (os->dma_alloc(os->ctx, WDDM_PAGE, WDDM_PAGE, &vq->ring) != 0 || !vq->ring.cpu)
        return WDDM_E_OS;
    wddm_zero(vq->ring.cpu, WDDM_PAGE);
    vq->size = size;
    vq->desc = vq->ring.cpu;
    vq->avail = (uint8_t *)vq->ring.cpu + WDDM_VQ_AVAIL_OFFSET;
    vq->used = (uint8_t *)vq->ring.cpu + WDDM_VQ_USED_OFFSET;
    for (uint16_t i = 0; i < size; i++)
        vq->next[i] = (uint16_t)(i + 1 < size ? i + 1 : 0);
    vq->free_head = 0;
    vq->num_free = size;
    return WDDM_OK;
}

void wddm_vq_free(wddm_vq *vq, const wddm_os *os)
{
    if (vq->ring.cpu)
        os->dma_free(os->ctx, &vq->ring);
    vq->ring.cpu = NULL;
}

static uint16_t take_desc(wddm_vq *vq)
{
    uint16_t i = vq->free_head;
    vq->free_head = vq->next[i];
    vq->num_free--;
    return i;
}

wddm_result wddm_vq_add2(wddm_vq *vq, uint64_t out_bus, uint32_t out_len, uint64_t in_bus,
                         uint32_t in_len, uint16_t *head)
{
    if (vq->num_free < 2)
        return WDDM_E_FULL;
    uint16_t a = take_desc(vq), b = take_desc(vq);
    vq->next[a] = b;
    volatile WddmGpuVirtqDesc *da = desc_at(vq, a), *db = desc_at(vq, b);
    da->addr = out_bus;
    da->len = out_len;
    da->flags = VIRTQ_DESC_F_NEXT;
    da->next = b;
    db->addr = in_bus;
    db->len = in_len;
    db->flags = VIRTQ_DESC_F_WRITE;
    db->next = 0;
    vq->chain_len[a] = 2;
    *avail_entry(vq, (uint16_t)(vq->avail_idx & (vq->size - 1))) = a;
    vq->avail_idx++;
    *head = a;
    return WDDM_OK;
}

void wddm_vq_kick(wddm_vq *vq, const wddm_os *os)
{
    os->memory_barrier(os->ctx); /* descriptors and ring entry before the index */
    *avail_ring_idx(vq) = vq->avail_idx;
    os->memory_barrier(os->ctx); /* index before the notification */
    *vq->notify = vq->queue_index;
}

wddm_result wddm_vq_pop(wddm_vq *vq, const wddm_os *os, uint16_t *head, uint32_t *len)
{
    uint16_t idx = *used_idx(vq);
    uint16_t ahead = (uint16_t)(idx - vq->last_used);
    if (ahead == 0)
        return WDDM_E_EMPTY;
    if (ahead > vq->size)
        return WDDM_E_DEVICE;
    os->memory_barrier(os->ctx); /* the index before the entry it covers */
    volatile WddmGpuVirtqUsedElem *e = used_elem(vq, (uint16_t)(vq->last_used & (vq->size - 1)));
    uint32_t id = e->id;
    *len = e->len;
    if (id >= vq->size || vq->chain_len[id] == 0)
        return WDDM_E_DEVICE;
    vq->last_used++;
    /* Free our copy of the chain. */
    uint16_t i = (uint16_t)id, n = vq->chain_len[id];
    vq->chain_len[id] = 0;
    for (uint16_t k = 0; k < n; k++) {
        uint16_t next = vq->next[i];
        vq->next[i] = vq->free_head;
        vq->free_head = i;
        vq->num_free++;
        i = next;
    }
    *head = (uint16_t)id;
    return WDDM_OK;
}
