/* The control queue's requests: WDDM_SLOTS slots of DMA memory (request in the first half,
 * response in the second), one per request in flight. The poll (the DPC) hands answered
 * SUBMIT and WAIT_EVENT slots to submit.c; synchronous requests are waited for here. */

#include "util.h"

#define HALF (WDDM_SLOT_SIZE / 2)

wddm_result wddm_ctrl_init(wddm_dev *dev)
{
    if (dev->os.dma_alloc(dev->os.ctx, (uint64_t)WDDM_SLOTS * WDDM_SLOT_SIZE, WDDM_PAGE,
                          &dev->slot_mem) != 0 ||
        !dev->slot_mem.cpu)
        return WDDM_E_OS;
    wddm_zero(dev->slot_mem.cpu, (uint64_t)WDDM_SLOTS * WDDM_SLOT_SIZE);
    return WDDM_OK;
}

uint64_t wddm_slot_bus(const wddm_dev *dev, uint32_t slot)
{
    return dev->slot_mem.bus + (uint64_t)slot * WDDM_SLOT_SIZE;
}

volatile uint8_t *wddm_slot_resp(wddm_dev *dev, uint32_t slot)
{
    return (volatile uint8_t *)dev->slot_mem.cpu + (uint64_t)slot * WDDM_SLOT_SIZE + HALF;
}

wddm_result wddm_ctrl_send_locked(wddm_dev *dev, uint8_t kind, const void *req, uint32_t req_len,
                                  uint64_t resp_bus, uint32_t resp_len, uint32_t *slot_out)
{
    if (dev->broken)
        return WDDM_E_DEVICE;
    if (req_len > HALF || (!resp_bus && resp_len > HALF))
        return WDDM_E_INVALID;
    uint32_t slot = 0;
    while (slot < WDDM_SLOTS && dev->slots[slot].state != WDDM_SLOT_FREE)
        slot++;
    if (slot == WDDM_SLOTS)
        return WDDM_E_FULL;
    uint8_t *base = (uint8_t *)dev->slot_mem.cpu + (uint64_t)slot * WDDM_SLOT_SIZE;
    wddm_copy(base, req, req_len);
    wddm_zero(base + HALF, HALF);
    uint64_t rbus = resp_bus ? resp_bus : wddm_slot_bus(dev, slot) + HALF;
    uint16_t head;
    wddm_result r = wddm_vq_add2(&dev->ctrl, wddm_slot_bus(dev, slot), req_len, rbus, resp_len,
                                 &head);
    if (r)
        return r;
    wddm_slot *s = &dev->slots[slot];
    s->state = WDDM_SLOT_PENDING;
    s->kind = kind;
    s->head = head;
    s->used_len = 0;
    s->resp_len = resp_len;
    wddm_vq_kick(&dev->ctrl, &dev->os);
    *slot_out = slot;
    return WDDM_OK;
}

wddm_result wddm_ctrl_poll_locked(wddm_dev *dev)
{
    if (dev->broken)
        return WDDM_E_DEVICE;
    for (;;) {
        uint16_t head;
        uint32_t len;
        wddm_result r = wddm_vq_pop(&dev->ctrl, &dev->os, &head, &len);
        if (r == WDDM_E_EMPTY)
            return WDDM_OK;
        if (r)
            return wddm_broken(dev, "control queue used ring broken at", dev->ctrl.last_used, 0);
        uint32_t slot = 0;
        while (slot < WDDM_SLOTS &&
               !(dev->slots[slot].state == WDDM_SLOT_PENDING && dev->slots[slot].head == head))
            slot++;
        if (slot == WDDM_SLOTS)
            return wddm_broken(dev, "used entry names no pending request, head", head, 0);
        wddm_slot *s = &dev->slots[slot];
        if (len > s->resp_len)
            return wddm_broken(dev, "used length longer than the response buffer (len, buffer)",
                               len, s->resp_len);
        s->state = WDDM_SLOT_ANSWERED;
        s->used_len = len;
        if (s->kind == WDDM_KIND_ABANDONED) {
            wddm_log(dev, WDDM_OS_LOG_WARN, "late answer to a timed-out request, slot", slot,
                     len);
            s->state = WDDM_SLOT_FREE; /* the device is done with its buffers */
        } else if (s->kind == WDDM_KIND_SUBMIT)
            wddm_submit_answered(dev, slot);
        else if (s->kind == WDDM_KIND_EVENT)
            wddm_event_answered(dev, slot);
        else if (s->kind == WDDM_KIND_VIRTUAL)
            wddm_virtual_answered(dev, slot);
        if (dev->broken)
            return WDDM_E_DEVICE;
    }
}

wddm_result wddm_dev_poll(wddm_dev *dev)
{
    if (!dev || !dev->lock)
        return WDDM_E_STATE;
    dev->os.lock_acquire(dev->os.ctx, dev->lock);
    dev->polled_collections++;
    wddm_result r = wddm_ctrl_poll_locked(dev);
    dev->os.lock_release(dev->os.ctx, dev->lock);
    return r;
}

wddm_result wddm_ctrl_call(wddm_dev *dev, const void *req, uint32_t req_len, uint64_t resp_bus,
                           void *resp, uint32_t resp_len, uint32_t *used_len)
{
    uint32_t slot;
    dev->os.lock_acquire(dev->os.ctx, dev->lock);
    wddm_result r =
        wddm_ctrl_send_locked(dev, WDDM_KIND_SYNC, req, req_len, resp_bus, resp_len, &slot);
    dev->os.lock_release(dev->os.ctx, dev->lock);
    if (r)
        return r;
    uint64_t start = dev->os.now_us(dev->os.ctx);
    for (;;) {
        bool expired = dev->os.now_us(dev->os.ctx) - start > (uint64_t)dev->timeout_ms * 1000;
        dev->os.lock_acquire(dev->os.ctx, dev->lock);
        /* Interrupt-driven: the deferred half collects the answer; only look at the slot. */
        bool sleep = dev->interrupt_driven;
        uint32_t seen = dev->deferred_generation;
        if (sleep) {
            r = dev->broken ? WDDM_E_DEVICE : WDDM_OK;
        } else {
            dev->polled_collections++;
            r = wddm_ctrl_poll_locked(dev);
        }
        wddm_slot *s = &dev->slots[slot];
        bool done = s->state == WDDM_SLOT_ANSWERED;
        if (r == WDDM_OK && done) {
            /* The poll checked used_len against the buffer (resp_len). */
            if (!resp_bus)
                wddm_copy(resp, wddm_slot_resp(dev, slot), resp_len);
            *used_len = s->used_len;
            s->state = WDDM_SLOT_FREE;
        } else if (s->state == WDDM_SLOT_PENDING && (r || expired)) {
            /* Its buffers still belong to the device: the poll frees it once answered. */
            s->kind = WDDM_KIND_ABANDONED;
            if (!r) {
                wddm_log(dev, WDDM_OS_LOG_ERROR, "control request timed out, slot", slot, 0);
                r = WDDM_E_TIMEOUT;
            }
        }
        dev->os.lock_release(dev->os.ctx, dev->lock);
        if (r || done)
            return r;
        if (sleep)
            dev->os.wait_interrupt(dev->os.ctx, &dev->deferred_generation, seen,
                                   WDDM_WAIT_SLICE_US);
        else
            dev->os.stall_us(dev->os.ctx, 200);
    }
}

uint32_t wddm_dev_abandoned(const wddm_dev *dev)
{
    uint32_t n = 0;
    for (uint32_t i = 0; dev && i < WDDM_SLOTS; i++)
        n += dev->slots[i].state == WDDM_SLOT_PENDING && dev->slots[i].kind == WDDM_KIND_ABANDONED;
    return n;
}
