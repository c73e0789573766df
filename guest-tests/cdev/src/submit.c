/* Submission and completion: SUBMIT requests and their answers (checked to arrive in order
 * with their own fence), WAIT_EVENT events, the status page's fault ring, PREEMPT and RESET. */

#include "util.h"

static void lock(wddm_dev *dev) { dev->os.lock_acquire(dev->os.ctx, dev->lock); }
static void unlock(wddm_dev *dev) { dev->os.lock_release(dev->os.ctx, dev->lock); }

/* The completion and event rings: `capacity` entries of `size` bytes at `entries`, `count` of
 * them held, the oldest at `head`. ring_put appends one (the caller reserved the room). */
static void ring_put(void *entries, uint32_t size, uint32_t capacity, uint32_t head,
                     uint32_t *count, const void *entry)
{
    uint32_t at = (head + *count) % capacity;
    wddm_copy((uint8_t *)entries + (uint64_t)at * size, entry, size);
    (*count)++;
}

/* Takes the oldest entry into `out` under the lock: WDDM_E_EMPTY when there is none,
 * WDDM_E_DEVICE once the device is broken and the ring drained. */
static wddm_result ring_take(wddm_dev *dev, void *out, const void *entries, uint32_t size,
                             uint32_t capacity, uint32_t *head, uint32_t *count)
{
    lock(dev);
    wddm_result r = dev->broken ? WDDM_E_DEVICE : WDDM_E_EMPTY;
    if (*count) {
        wddm_copy(out, (const uint8_t *)entries + (uint64_t)*head * size, size);
        *head = (*head + 1) % capacity;
        (*count)--;
        r = WDDM_OK;
    }
    unlock(dev);
    return r;
}

wddm_result wddm_dev_submit(wddm_dev *dev, const wddm_submit *s)
{
    if (!dev || !s || !dev->initialised)
        return WDDM_E_INVALID;
    if (s->dma_buffer_size > WDDM_GPU_MAX_DMA_BUFFER_SIZE || s->start_offset > s->end_offset ||
        s->end_offset > s->dma_buffer_size || (s->flags & ~(uint32_t)WDDM_GPU_SUBMIT_FLAGS_KNOWN))
        return WDDM_E_INVALID;
    WddmGpuCmdSubmit req;
    wddm_zero(&req, sizeof(req));
    req.hdr.type_ = WDDM_GPU_CMD_SUBMIT;
    req.dma_buffer_address = s->dma_buffer_address;
    req.dma_buffer_segment_id = s->dma_buffer_segment_id;
    req.flags = s->flags;
    req.dma_buffer_size = s->dma_buffer_size;
    req.start_offset = s->start_offset;
    req.end_offset = s->end_offset;
    req.submission_fence_id = s->fence_id;
    uint32_t slot;
    lock(dev);
    wddm_result r = WDDM_E_FULL;
    if (dev->submitted - dev->completed < WDDM_COMPLETION_RING - dev->completion_count)
        r = wddm_ctrl_send_locked(dev, WDDM_KIND_SUBMIT, &req, sizeof(req), 0,
                                  sizeof(WddmGpuRespSubmit), &slot);
    if (r == WDDM_OK) {
        dev->slots[slot].fence = s->fence_id;
        dev->slots[slot].order = dev->submitted++;
    }
    unlock(dev);
    return r;
}

/* Copies an answered slot's response (`size` bytes) to `resp` and frees the slot. */
static const wddm_slot *take_answer(wddm_dev *dev, uint32_t slot, void *resp, uint32_t size)
{
    wddm_slot *s = &dev->slots[slot];
    wddm_copy(resp, wddm_slot_resp(dev, slot), size);
    s->state = WDDM_SLOT_FREE;
    return s;
}

void wddm_submit_answered(wddm_dev *dev, uint32_t slot)
{
    WddmGpuRespSubmit resp;
    const wddm_slot *s = take_answer(dev, slot, &resp, sizeof(resp));
    if (s->used_len < sizeof(resp) || resp.hdr.type_ != WDDM_GPU_RESP_SUBMIT) {
        wddm_broken(dev, "SUBMIT answer (type, len)", resp.hdr.type_, s->used_len);
        return;
    }
    if (s->order != dev->completed) {
        wddm_broken(dev, "SUBMIT answered out of order (order, expected)", s->order,
                    dev->completed);
        return;
    }
    if (resp.submission_fence_id != s->fence) {
        wddm_broken(dev, "SUBMIT answer names another fence (got, submitted)",
                    resp.submission_fence_id, s->fence);
        return;
    }
    if (resp.status > WDDM_GPU_SUBMIT_STATUS_RESET) {
        wddm_broken(dev, "SUBMIT answer status unknown", resp.status, 0);
        return;
    }
    dev->completed++;
    if (resp.status != WDDM_GPU_SUBMIT_STATUS_PREEMPTED &&
        resp.status != WDDM_GPU_SUBMIT_STATUS_RESET)
        dev->last_completed_fence = resp.submission_fence_id;
    /* Room was reserved at submit. */
    ring_put(dev->completions, sizeof(resp), WDDM_COMPLETION_RING, dev->completion_head,
             &dev->completion_count, &resp);
}

wddm_result wddm_dev_next_completion(wddm_dev *dev, WddmGpuRespSubmit *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    return ring_take(dev, out, dev->completions, sizeof(*out), WDDM_COMPLETION_RING,
                     &dev->completion_head, &dev->completion_count);
}

uint32_t wddm_dev_pending(const wddm_dev *dev) { return dev->submitted - dev->completed; }
uint32_t wddm_dev_last_completed_fence(const wddm_dev *dev) { return dev->last_completed_fence; }
uint32_t wddm_dev_events_posted(const wddm_dev *dev) { return dev->events_posted; }

wddm_result wddm_dev_post_events(wddm_dev *dev, uint32_t count)
{
    if (!dev || !dev->initialised || count > WDDM_EVENT_RING)
        return WDDM_E_INVALID;
    WddmGpuCtrlHdr req;
    wddm_zero(&req, sizeof(req));
    req.type_ = WDDM_GPU_CMD_WAIT_EVENT;
    wddm_result r = WDDM_OK;
    lock(dev);
    while (r == WDDM_OK && dev->events_posted < count &&
           dev->events_posted + dev->event_count < WDDM_EVENT_RING) {
        uint32_t slot;
        r = wddm_ctrl_send_locked(dev, WDDM_KIND_EVENT, &req, sizeof(req), 0,
                                  sizeof(WddmGpuRespEvent), &slot);
        if (r == WDDM_OK)
            dev->events_posted++;
    }
    unlock(dev);
    return r;
}

void wddm_event_answered(wddm_dev *dev, uint32_t slot)
{
    WddmGpuRespEvent ev;
    const wddm_slot *s = take_answer(dev, slot, &ev, sizeof(ev));
    dev->events_posted--;
    if (s->used_len < sizeof(WddmGpuCtrlHdr) + 8 || ev.hdr.type_ != WDDM_GPU_RESP_EVENT ||
        ev.kind < WDDM_GPU_EVENT_FAULT || ev.kind > WDDM_GPU_EVENT_STALE_TRANSLATION) {
        wddm_broken(dev, "WAIT_EVENT answer (type, kind)", ev.hdr.type_, ev.kind);
        return;
    }
    /* Room was reserved at post. */
    ring_put(dev->events, sizeof(ev), WDDM_EVENT_RING, dev->event_head, &dev->event_count, &ev);
}

wddm_result wddm_dev_next_event(wddm_dev *dev, WddmGpuRespEvent *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    return ring_take(dev, out, dev->events, sizeof(*out), WDDM_EVENT_RING, &dev->event_head,
                     &dev->event_count);
}

static wddm_result register_page(wddm_dev *dev, uint64_t address)
{
    WddmGpuCmdRegisterStatusPage req;
    WddmGpuCtrlHdr resp;
    uint32_t len;
    wddm_zero(&req, sizeof(req));
    req.hdr.type_ = WDDM_GPU_CMD_REGISTER_STATUS_PAGE;
    req.address = address;
    wddm_result r = wddm_ctrl_call(dev, &req, sizeof(req), 0, &resp, sizeof(resp), &len);
    if (r)
        return r;
    if (len < sizeof(resp) || resp.type_ != VIRTIO_GPU_RESP_OK_NODATA)
        return wddm_broken(dev, "REGISTER_STATUS_PAGE answer (type, address)", resp.type_,
                           address);
    return WDDM_OK;
}

wddm_result wddm_dev_status_page_register(wddm_dev *dev)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    if (!dev->status_mem.cpu &&
        (dev->os.dma_alloc(dev->os.ctx, WDDM_PAGE, WDDM_PAGE, &dev->status_mem) != 0 ||
         !dev->status_mem.cpu))
        return WDDM_E_OS;
    wddm_zero(dev->status_mem.cpu, WDDM_PAGE);
    wddm_result r = register_page(dev, dev->status_mem.bus);
    dev->status_registered = r == WDDM_OK;
    return r;
}

wddm_result wddm_dev_status_page_unregister(wddm_dev *dev)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    wddm_result r = register_page(dev, 0);
    if (r == WDDM_OK)
        dev->status_registered = false;
    return r;
}

wddm_result wddm_dev_status(wddm_dev *dev, WddmGpuStatusPage *out)
{
    if (!dev || !out || !dev->status_registered)
        return WDDM_E_STATE;
    volatile WddmGpuStatusPage *page = dev->status_mem.cpu;
    uint32_t head = page->fault_head; /* first, then the rest it covers */
    dev->os.memory_barrier(dev->os.ctx);
    wddm_copy(out, page, sizeof(*out));
    out->fault_head = head;
    if (out->magic != 0x50534457u || out->version != WDDM_GPU_STATUS_VERSION ||
        out->fault_ring_offset != WDDM_GPU_FAULT_RING_OFFSET ||
        out->fault_ring_entries != WDDM_GPU_FAULT_RING_ENTRIES)
        return wddm_broken(dev, "status page header (magic, ring offset)", out->magic,
                           out->fault_ring_offset);
    return WDDM_OK;
}

wddm_result wddm_dev_next_fault(wddm_dev *dev, WddmGpuFaultRecord *out)
{
    WddmGpuStatusPage st;
    wddm_result r = wddm_dev_status(dev, &st);
    if (r)
        return r;
    uint32_t pending = st.fault_head - st.fault_tail;
    if (pending == 0)
        return WDDM_E_EMPTY;
    if (pending > WDDM_GPU_FAULT_RING_ENTRIES)
        return wddm_broken(dev, "fault ring indices (head, tail)", st.fault_head, st.fault_tail);
    const volatile uint8_t *page = dev->status_mem.cpu;
    uint32_t at = WDDM_GPU_FAULT_RING_OFFSET +
                  (st.fault_tail % WDDM_GPU_FAULT_RING_ENTRIES) * sizeof(WddmGpuFaultRecord);
    wddm_copy(out, page + at, sizeof(*out));
    if (out->sequence != st.fault_tail)
        return wddm_broken(dev, "fault record sequence (got, expected)", out->sequence,
                           st.fault_tail);
    dev->os.memory_barrier(dev->os.ctx);
    ((volatile WddmGpuStatusPage *)dev->status_mem.cpu)->fault_tail = st.fault_tail + 1;
    return WDDM_OK;
}

wddm_result wddm_dev_preempt(wddm_dev *dev, WddmGpuRespPreempt *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCtrlHdr req;
    uint32_t len;
    wddm_zero(&req, sizeof(req));
    req.type_ = WDDM_GPU_CMD_PREEMPT;
    wddm_result r = wddm_ctrl_call(dev, &req, sizeof(req), 0, out, sizeof(*out), &len);
    if (r)
        return r;
    if (len < sizeof(*out) || out->hdr.type_ != WDDM_GPU_RESP_PREEMPT)
        return wddm_broken(dev, "PREEMPT answer (type, len)", out->hdr.type_, len);
    return WDDM_OK;
}

wddm_result wddm_dev_reset(wddm_dev *dev)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCtrlHdr req, resp;
    uint32_t len;
    wddm_zero(&req, sizeof(req));
    req.type_ = WDDM_GPU_CMD_RESET;
    wddm_result r = wddm_ctrl_call(dev, &req, sizeof(req), 0, &resp, sizeof(resp), &len);
    if (r)
        return r;
    if (len < sizeof(resp) || resp.type_ != VIRTIO_GPU_RESP_OK_NODATA)
        return wddm_broken(dev, "RESET answer (type, len)", resp.type_, len);
    dev->status_registered = false; /* the reset unregistered it */
    return WDDM_OK;
}
