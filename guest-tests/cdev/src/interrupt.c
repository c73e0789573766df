/* The interrupt path split in two: the top half (the ISR: read and acknowledge, nothing else)
 * and the deferred half (the DPC: collect the used ring under the lock and hand each answer
 * on). The top half runs at the interrupt's level, so it takes no lock, allocates nothing,
 * never waits, and writes nothing in `dev`: the OS layer accumulates its bits
 * (os.interrupt_ack, or the value it returns) for the deferred half. */

#include "util.h"

uint32_t wddm_dev_interrupt_top(wddm_dev *dev, uint32_t source)
{
    if (!dev)
        return 0;
    uint32_t bits;
    switch (source) {
    case WDDM_IRQ_SOURCE_MSIX_QUEUE:
        bits = WDDM_IRQ_QUEUE;
        break;
    case WDDM_IRQ_SOURCE_MSIX_CONFIG:
        bits = WDDM_IRQ_CONFIG;
        break;
    case WDDM_IRQ_SOURCE_LINE:
    case WDDM_IRQ_SOURCE_MSIX_SHARED:
        if (!dev->isr)
            return 0;
        /* Reading acknowledges (and for INTx lowers the line). */
        bits = mmio_r8(dev->isr, 0) & (WDDM_IRQ_QUEUE | WDDM_IRQ_CONFIG);
        if (source == WDDM_IRQ_SOURCE_MSIX_SHARED)
            bits |= WDDM_IRQ_QUEUE;
        break;
    default:
        return 0;
    }
    if (bits && dev->os.interrupt_ack)
        dev->os.interrupt_ack(dev->os.ctx, bits);
    return bits;
}

uint32_t wddm_dev_isr(wddm_dev *dev)
{
    if (!dev || !dev->isr)
        return 0;
    uint32_t isr = mmio_r8(dev->isr, 0); /* reading acknowledges */
    if (dev->os.interrupt_ack)
        dev->os.interrupt_ack(dev->os.ctx, isr);
    return isr;
}

wddm_result wddm_dev_interrupt_deferred(wddm_dev *dev, uint32_t bits, const wddm_irq_sink *sink)
{
    if (!dev || !dev->lock || !dev->initialised)
        return WDDM_E_STATE;
    if ((bits & WDDM_IRQ_CONFIG) && sink && sink->config_changed)
        sink->config_changed(sink->ctx);
    dev->os.lock_acquire(dev->os.ctx, dev->lock);
    wddm_result r = wddm_ctrl_poll_locked(dev);
    dev->deferred_collections++;
    dev->deferred_generation++;
    dev->os.lock_release(dev->os.ctx, dev->lock);
    if (!sink)
        return r;
    /* Each ring drained under the lock, one entry at a time, the sink called outside it. */
    if (sink->completion) {
        WddmGpuRespSubmit c;
        while (wddm_dev_next_completion(dev, &c) == WDDM_OK)
            sink->completion(sink->ctx, &c);
    }
    if (sink->virtual_completion) {
        WddmGpuRespSubmitVirtual v;
        while (wddm_dev_next_virtual_completion(dev, &v) == WDDM_OK)
            sink->virtual_completion(sink->ctx, &v);
    }
    if (sink->event) {
        WddmGpuRespEvent e;
        while (wddm_dev_next_event(dev, &e) == WDDM_OK)
            sink->event(sink->ctx, &e);
    }
    return r;
}

wddm_result wddm_dev_set_interrupt_driven(wddm_dev *dev, bool on)
{
    if (!dev || !dev->lock || !dev->initialised)
        return WDDM_E_STATE;
    if (on && !dev->os.wait_interrupt)
        return WDDM_E_INVALID;
    dev->os.lock_acquire(dev->os.ctx, dev->lock);
    dev->interrupt_driven = on;
    dev->os.lock_release(dev->os.ctx, dev->lock);
    return WDDM_OK;
}

wddm_result wddm_dev_get_counters(wddm_dev *dev, wddm_dev_counters *out)
{
    if (!dev || !out || !dev->lock)
        return WDDM_E_STATE;
    dev->os.lock_acquire(dev->os.ctx, dev->lock);
    out->polled = dev->polled_collections;
    out->deferred = dev->deferred_collections;
    dev->os.lock_release(dev->os.ctx, dev->lock);
    return WDDM_OK;
}
