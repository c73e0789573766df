/* Timeout detection and recovery (programming guide and docs/fault-injection.md): the engine
 * status query a KMD sends when a submission's timeout ran out, the lost-interrupt recovery of
 * DxgkDdiQueryCurrentFence, and the TDR helper of DxgkDdiResetFromTimeout and
 * DxgkDdiRestartFromTimeout (RESET, every submission back, the status page and the WAIT_EVENTs
 * again, resubmission or report). */

#include "util.h"

static void lock(wddm_dev *dev) { dev->os.lock_acquire(dev->os.ctx, dev->lock); }
static void unlock(wddm_dev *dev) { dev->os.lock_release(dev->os.ctx, dev->lock); }

static uint32_t completed_count(wddm_dev *dev)
{
    lock(dev);
    uint32_t n = dev->completed;
    unlock(dev);
    return n;
}

wddm_result wddm_dev_query_engine_status(wddm_dev *dev, uint32_t node,
                                         WddmGpuRespEngineStatus *out)
{
    if (!dev || !out || !dev->initialised)
        return WDDM_E_INVALID;
    WddmGpuCmdQueryEngineStatus req;
    uint32_t len;
    wddm_zero(&req, sizeof(req));
    req.hdr.type_ = WDDM_GPU_CMD_QUERY_ENGINE_STATUS;
    req.node_ordinal = node;
    uint32_t before = completed_count(dev);
    wddm_result r = wddm_ctrl_call(dev, &req, sizeof(req), 0, out, sizeof(*out), &len);
    if (r)
        return r;
    if (len >= sizeof(WddmGpuCtrlHdr) && out->hdr.type_ == VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER) {
        wddm_log(dev, WDDM_OS_LOG_WARN, "QUERY_ENGINE_STATUS refused, node", node, 0);
        return WDDM_E_REFUSED;
    }
    if (len < sizeof(*out) || out->hdr.type_ != WDDM_GPU_RESP_ENGINE_STATUS)
        return wddm_broken(dev, "QUERY_ENGINE_STATUS answer (type, len)", out->hdr.type_, len);
    if (out->node_ordinal != node)
        return wddm_broken(dev, "QUERY_ENGINE_STATUS answered for another node (got, asked)",
                           out->node_ordinal, node);
    if (out->flags & ~(uint32_t)(WDDM_GPU_ENGINE_STATUS_RESPONSIVE | WDDM_GPU_ENGINE_STATUS_PAUSED))
        return wddm_broken(dev, "QUERY_ENGINE_STATUS unknown flags", out->flags, 0);
    /* Every answer it released was answered before it: the poll of the call has them. */
    uint32_t arrived = completed_count(dev) - before;
    if (out->released > arrived)
        return wddm_broken(dev, "QUERY_ENGINE_STATUS released more answers than arrived "
                                "(released, arrived)",
                           out->released, arrived);
    return WDDM_OK;
}

wddm_result wddm_dev_query_current_fence(wddm_dev *dev, uint32_t *current_fence,
                                         uint32_t *released)
{
    if (!current_fence)
        return WDDM_E_INVALID;
    WddmGpuRespEngineStatus st;
    wddm_result r = wddm_dev_query_engine_status(dev, WDDM_GPU_NODE_PAGING, &st);
    if (r)
        return r;
    if (st.released)
        wddm_log(dev, WDDM_OS_LOG_WARN, "lost interrupt recovered (released, current fence)",
                 st.released, st.current_fence);
    *current_fence = st.current_fence;
    if (released)
        *released = st.released;
    return WDDM_OK;
}

static bool listed(const uint32_t *list, uint32_t count, uint32_t fence)
{
    for (uint32_t i = 0; i < count; i++)
        if (list[i] == fence)
            return true;
    return false;
}

wddm_result wddm_dev_reset_from_timeout(wddm_dev *dev, const wddm_submit *resubmittable,
                                        uint32_t count, uint32_t events,
                                        wddm_tdr_report *report)
{
    if (!dev || !report || !dev->initialised || (count && !resubmittable) ||
        count > WDDM_COMPLETION_RING || events > WDDM_EVENT_RING)
        return WDDM_E_INVALID;
    wddm_zero(report, sizeof(*report));
    /* For the record, and to release answers a lost interrupt holds: they ran. */
    wddm_result r = wddm_dev_query_engine_status(dev, WDDM_GPU_NODE_PAGING, &report->status);
    if (r == WDDM_E_DEVICE)
        return r;
    report->status_valid = r == WDDM_OK;
    bool registered = dev->status_registered;
    r = wddm_dev_reset(dev);
    if (r)
        return r;
    /* Every submission comes back (RESET, or completed before it took effect), every posted
     * WAIT_EVENT as CANCELLED. */
    uint64_t start = dev->os.now_us(dev->os.ctx);
    for (;;) {
        r = wddm_dev_poll(dev);
        if (r)
            return r;
        lock(dev);
        bool done = dev->submitted == dev->completed && dev->events_posted == 0;
        unlock(dev);
        if (done)
            break;
        if (dev->os.now_us(dev->os.ctx) - start > (uint64_t)dev->timeout_ms * 1000) {
            wddm_log(dev, WDDM_OS_LOG_ERROR,
                     "after RESET: submissions or WAIT_EVENTs still unanswered (submissions, "
                     "events)",
                     wddm_dev_pending(dev), dev->events_posted);
            return WDDM_E_TIMEOUT;
        }
        dev->os.stall_us(dev->os.ctx, 200);
    }
    WddmGpuRespSubmit c;
    while (wddm_dev_next_completion(dev, &c) == WDDM_OK) {
        if (c.status == WDDM_GPU_SUBMIT_STATUS_RESET)
            report->aborted[report->aborted_count++] = c.submission_fence_id;
        else
            report->completed[report->completed_count++] = c;
    }
    /* DxgkDdiRestartFromTimeout: the status page and the WAIT_EVENTs again. */
    if (registered && (r = wddm_dev_status_page_register(dev)) != WDDM_OK)
        return r;
    if (events && (r = wddm_dev_post_events(dev, events)) != WDDM_OK)
        return r;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t fence = resubmittable[i].fence_id;
        if (!listed(report->aborted, report->aborted_count, fence) ||
            listed(report->resubmitted, report->resubmitted_count, fence))
            continue;
        if ((r = wddm_dev_submit(dev, &resubmittable[i])) != WDDM_OK)
            return r;
        report->resubmitted[report->resubmitted_count++] = fence;
    }
    for (uint32_t i = 0; i < report->aborted_count; i++)
        if (!listed(report->resubmitted, report->resubmitted_count, report->aborted[i]))
            report->reported[report->reported_count++] = report->aborted[i];
    wddm_log(dev, WDDM_OS_LOG_WARN, "TDR: reset (aborted, resubmitted)", report->aborted_count,
             report->resubmitted_count);
    return WDDM_OK;
}
