/* Contexts and the virtual node: CREATE_CONTEXT, DESTROY_CONTEXT, SET_ROOT_PAGE_TABLE and
 * RESET_ENGINE sent and waited for; SUBMIT_VIRTUAL posted, its answer collected by the poll
 * (the DPC) into a ring of its own, as SUBMIT completions are. */

#include "util.h"

static void lock(wddm_dev *dev) { dev->os.lock_acquire(dev->os.ctx, dev->lock); }
static void unlock(wddm_dev *dev) { dev->os.lock_release(dev->os.ctx, dev->lock); }

/* The ERR_* answers a context command may get: a refusal, the device still sane. */
static bool is_refusal(uint32_t type)
{
    return type >= VIRTIO_GPU_RESP_ERR_UNSPEC && type <= VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER;
}

/* Sends a context command and waits for OK_NODATA. */
static wddm_result command(wddm_dev *dev, const char *name, const void *req, uint32_t size,
                           uint64_t detail)
{
    WddmGpuCtrlHdr resp;
    uint32_t len;
    wddm_result r = wddm_ctrl_call(dev, req, size, 0, &resp, sizeof(resp), &len);
    if (r)
        return r;
    if (len < sizeof(resp))
        return wddm_broken(dev, name, resp.type_, len);
    if (resp.type_ == VIRTIO_GPU_RESP_OK_NODATA)
        return WDDM_OK;
    if (is_refusal(resp.type_)) {
        wddm_log(dev, WDDM_OS_LOG_WARN, name, resp.type_, detail);
        return WDDM_E_REFUSED;
    }
    return wddm_broken(dev, name, resp.type_, len);
}

wddm_result wddm_dev_create_context(wddm_dev *dev, uint32_t id, uint32_t node, uint32_t flags)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCmdCreateContext c;
    wddm_build_create_context(&c, id, node, flags);
    return command(dev, "CREATE_CONTEXT answer (type, context)", &c, sizeof(c), id);
}

wddm_result wddm_dev_destroy_context(wddm_dev *dev, uint32_t id)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCmdDestroyContext c;
    wddm_build_destroy_context(&c, id);
    return command(dev, "DESTROY_CONTEXT answer (type, context)", &c, sizeof(c), id);
}

wddm_result wddm_dev_set_root_page_table(wddm_dev *dev, uint32_t id, uint32_t root_segment,
                                         uint64_t root_address, uint32_t num_entries)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCmdSetRootPageTable c;
    wddm_build_set_root_page_table(&c, id, root_segment, root_address, num_entries);
    return command(dev, "SET_ROOT_PAGE_TABLE answer (type, context)", &c, sizeof(c), id);
}

wddm_result wddm_dev_reset_engine(wddm_dev *dev)
{
    if (!dev || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCmdResetEngine c;
    wddm_build_reset_engine(&c);
    return command(dev, "RESET_ENGINE answer (type, node)", &c, sizeof(c), c.node_ordinal);
}

wddm_result wddm_dev_submit_virtual(wddm_dev *dev, const WddmGpuCmdSubmitVirtual *cmd)
{
    if (!dev || !cmd || !dev->initialised)
        return WDDM_E_INVALID;
    if (cmd->hdr.type_ != WDDM_GPU_CMD_SUBMIT_VIRTUAL ||
        cmd->dma_buffer_size > WDDM_GPU_MAX_DMA_BUFFER_SIZE ||
        cmd->start_offset > cmd->end_offset || cmd->end_offset > cmd->dma_buffer_size ||
        cmd->flags || cmd->reserved)
        return WDDM_E_INVALID;
    uint32_t slot;
    lock(dev);
    wddm_result r = WDDM_E_FULL;
    if (dev->virtual_submitted - dev->virtual_completed <
        WDDM_VIRTUAL_COMPLETION_RING - dev->virtual_count)
        r = wddm_ctrl_send_locked(dev, WDDM_KIND_VIRTUAL, cmd, sizeof(*cmd), 0,
                                  sizeof(WddmGpuRespSubmitVirtual), &slot);
    if (r == WDDM_OK) {
        dev->slots[slot].fence = cmd->submission_fence_id;
        dev->slots[slot].order = dev->virtual_submitted++;
    }
    unlock(dev);
    return r;
}

void wddm_virtual_answered(wddm_dev *dev, uint32_t slot)
{
    WddmGpuRespSubmitVirtual resp;
    wddm_slot *s = &dev->slots[slot];
    wddm_copy(&resp, wddm_slot_resp(dev, slot), sizeof(resp));
    s->state = WDDM_SLOT_FREE;
    if (s->used_len < sizeof(resp) || resp.hdr.type_ != WDDM_GPU_RESP_SUBMIT_VIRTUAL) {
        wddm_broken(dev, "SUBMIT_VIRTUAL answer (type, len)", resp.hdr.type_, s->used_len);
        return;
    }
    if (resp.submission_fence_id != s->fence) {
        wddm_broken(dev, "SUBMIT_VIRTUAL answer names another fence (got, submitted)",
                    resp.submission_fence_id, s->fence);
        return;
    }
    if (resp.status > WDDM_GPU_SUBMIT_STATUS_BAD_CONTEXT) {
        wddm_broken(dev, "SUBMIT_VIRTUAL answer status unknown", resp.status, 0);
        return;
    }
    dev->virtual_completed++;
    /* Room was reserved at submit. */
    uint32_t at = (dev->virtual_head + dev->virtual_count) % WDDM_VIRTUAL_COMPLETION_RING;
    wddm_copy(&dev->virtual_completions[at], &resp, sizeof(resp));
    dev->virtual_count++;
}

wddm_result wddm_dev_next_virtual_completion(wddm_dev *dev, WddmGpuRespSubmitVirtual *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    lock(dev);
    wddm_result r = dev->broken ? WDDM_E_DEVICE : WDDM_E_EMPTY;
    if (dev->virtual_count) {
        wddm_copy(out, &dev->virtual_completions[dev->virtual_head], sizeof(*out));
        dev->virtual_head = (dev->virtual_head + 1) % WDDM_VIRTUAL_COMPLETION_RING;
        dev->virtual_count--;
        r = WDDM_OK;
    }
    unlock(dev);
    return r;
}

wddm_result wddm_dev_wait_virtual_completion(wddm_dev *dev, WddmGpuRespSubmitVirtual *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    uint64_t start = dev->os.now_us(dev->os.ctx);
    for (;;) {
        bool expired = dev->os.now_us(dev->os.ctx) - start > (uint64_t)dev->timeout_ms * 1000;
        wddm_result r = wddm_dev_poll(dev);
        if (r == WDDM_OK)
            r = wddm_dev_next_virtual_completion(dev, out);
        if (r != WDDM_E_EMPTY)
            return r;
        if (expired)
            return WDDM_E_TIMEOUT;
        dev->os.stall_us(dev->os.ctx, 200);
    }
}

uint32_t wddm_dev_virtual_pending(const wddm_dev *dev)
{
    return dev ? dev->virtual_submitted - dev->virtual_completed : 0;
}
