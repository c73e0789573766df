/* The interrupt path split in two (src/interrupt.c) against the fake device: the top half reads
 * and acknowledges only (no lock taken, nothing collected, nothing in `dev` written), the
 * deferred half collects the used ring and hands each answer to the sink, and in
 * interrupt-driven mode the synchronous requests sleep in os.wait_interrupt instead of polling. */

#include <string.h>

#include "check.h"
#include "device_fixture.h"
#include "../src/util.h"

#define ISR_REG 0x2000u /* where fake_os.c puts the ISR block in BAR 0 */

static struct {
    uint32_t acks, ack_bits;
    uint32_t lock_takes;
    uint32_t waits, last_seen, wait_generation_mismatch;
    bool interrupt_on_wait; /* the "device" answers and the OS runs both halves in the wait */
    uint32_t completions, fences[8], statuses[8];
    uint32_t configs;
} rec;
static void (*real_acquire)(void *, void *);

static void count_ack(void *ctx, uint32_t bits)
{
    (void)ctx;
    rec.acks++;
    rec.ack_bits |= bits;
}

static void count_acquire(void *ctx, void *lock)
{
    rec.lock_takes++;
    real_acquire(ctx, lock);
}

/* What the OS's interrupt does when the fake device answers: the top half for the queue's
 * vector, then the deferred half with its bits. */
static void os_wait(void *ctx, const volatile uint32_t *generation, uint32_t seen,
                    uint32_t timeout_us)
{
    (void)timeout_us;
    rec.waits++;
    rec.last_seen = seen;
    if (generation != &dev.deferred_generation || *generation != seen)
        rec.wait_generation_mismatch++;
    ((fake *)ctx)->clock_us += 1000;
    if (rec.interrupt_on_wait) {
        fake_service(ctx);
        uint32_t bits = wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_QUEUE);
        (void)wddm_dev_interrupt_deferred(&dev, bits, NULL);
    }
}

static void sink_completion(void *ctx, const WddmGpuRespSubmit *c)
{
    (void)ctx;
    if (rec.completions < 8) {
        rec.fences[rec.completions] = c->submission_fence_id;
        rec.statuses[rec.completions] = c->status;
    }
    rec.completions++;
}

static void sink_config(void *ctx)
{
    (void)ctx;
    rec.configs++;
}

static bool up_instrumented(void)
{
    memset(&rec, 0, sizeof(rec));
    if (!up())
        return false;
    real_acquire = dev.os.lock_acquire;
    dev.os.lock_acquire = count_acquire;
    dev.os.interrupt_ack = count_ack;
    return true;
}

static void submit(uint32_t fence)
{
    wddm_submit s = {.dma_buffer_address = 0x100000, .dma_buffer_size = 64, .end_offset = 64,
                     .fence_id = fence};
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
}

/* Each source: what it returns, that it acknowledges through interrupt_ack only when the
 * interrupt is ours, and that it takes no lock and collects nothing. */
static void top_half_sources(void)
{
    if (!up_instrumented())
        return;
    volatile uint8_t *isr = &f.bar0[ISR_REG];
    submit(1);
    fake_service(&f); /* answered in the used ring, not collected */
    wddm_dev_counters before, after;
    CHECK_EQ(wddm_dev_get_counters(&dev, &before), WDDM_OK);
    uint32_t takes = rec.lock_takes;
    uint32_t generation = dev.deferred_generation;

    *isr = 0;
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_LINE), 0); /* another device's */
    CHECK_EQ(rec.acks, 0);
    *isr = 1;
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_LINE), WDDM_IRQ_QUEUE);
    *isr = 3;
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_LINE), WDDM_IRQ_QUEUE | WDDM_IRQ_CONFIG);
    *isr = 0x81; /* reserved bits are not handed on */
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_LINE), WDDM_IRQ_QUEUE);
    CHECK_EQ(rec.acks, 3);
    *isr = 0; /* a message is ours whatever the ISR byte says */
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_QUEUE), WDDM_IRQ_QUEUE);
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_CONFIG), WDDM_IRQ_CONFIG);
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_SHARED), WDDM_IRQ_QUEUE);
    *isr = 2;
    CHECK_EQ(wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_SHARED),
             WDDM_IRQ_QUEUE | WDDM_IRQ_CONFIG);
    CHECK_EQ(wddm_dev_interrupt_top(&dev, 7), 0);
    CHECK_EQ(wddm_dev_interrupt_top(NULL, WDDM_IRQ_SOURCE_MSIX_QUEUE), 0);
    CHECK_EQ(rec.acks, 7);
    CHECK_EQ(rec.ack_bits, WDDM_IRQ_QUEUE | WDDM_IRQ_CONFIG);

    /* The top half took no lock, collected nothing, changed no state of the library. */
    CHECK_EQ(rec.lock_takes, takes);
    CHECK_EQ(dev.completion_count, 0);
    CHECK_EQ(dev.deferred_generation, generation);
    CHECK_EQ(wddm_dev_pending(&dev), 1);
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK_EQ(after.polled, before.polled);
    CHECK_EQ(after.deferred, before.deferred);

    /* A device not up: a line interrupt cannot be ours (no register mapped). */
    wddm_dev idle;
    memset(&idle, 0, sizeof(idle));
    CHECK_EQ(wddm_dev_interrupt_top(&idle, WDDM_IRQ_SOURCE_LINE), 0);
    CHECK_EQ(wddm_dev_interrupt_deferred(&idle, WDDM_IRQ_QUEUE, NULL), WDDM_E_STATE);
    down();
}

/* The deferred half collects what the device answered and hands it to the sink in order; it
 * counts as a deferred collection, never as polling. */
static void deferred_half_completes(void)
{
    if (!up_instrumented())
        return;
    wddm_dev_counters before, after;
    CHECK_EQ(wddm_dev_get_counters(&dev, &before), WDDM_OK);
    submit(10);
    submit(11);
    submit(12);
    fake_service(&f);
    wddm_irq_sink sink = {.completion = sink_completion, .config_changed = sink_config};
    uint32_t generation = dev.deferred_generation;
    uint32_t bits = wddm_dev_interrupt_top(&dev, WDDM_IRQ_SOURCE_MSIX_QUEUE);
    CHECK_EQ(wddm_dev_interrupt_deferred(&dev, bits, &sink), WDDM_OK);
    CHECK_EQ(rec.completions, 3);
    CHECK_EQ(rec.fences[0], 10);
    CHECK_EQ(rec.fences[1], 11);
    CHECK_EQ(rec.fences[2], 12);
    CHECK_EQ(rec.statuses[2], WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(rec.configs, 0);
    CHECK_EQ(dev.deferred_generation, generation + 1);
    CHECK_EQ(wddm_dev_pending(&dev), 0);
    CHECK_EQ(wddm_dev_last_completed_fence(&dev), 12);
    WddmGpuRespSubmit c;
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_EMPTY); /* all handed on */
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK_EQ(after.polled, before.polled);
    CHECK_EQ(after.deferred, before.deferred + 1);

    /* The configuration bit reaches the sink; a run with nothing answered hands on nothing. */
    CHECK_EQ(wddm_dev_interrupt_deferred(&dev, WDDM_IRQ_CONFIG, &sink), WDDM_OK);
    CHECK_EQ(rec.configs, 1);
    CHECK_EQ(rec.completions, 3);

    /* Without a sink entry the answers stay in their ring. */
    submit(13);
    fake_service(&f);
    wddm_irq_sink no_completion = {.config_changed = sink_config};
    CHECK_EQ(wddm_dev_interrupt_deferred(&dev, WDDM_IRQ_QUEUE, &no_completion), WDDM_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK_EQ(c.submission_fence_id, 13);

    /* wddm_dev_poll is the polling path: counted as such. */
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK_EQ(after.polled, before.polled + 1);
    down();
}

/* A hostile used entry seen by the deferred half breaks the device like the poll does, and the
 * answers taken before it are still handed on. */
static void deferred_half_hostile(void)
{
    if (!up_instrumented())
        return;
    submit(20);
    fake_service(&f);
    fake_push_used(&f, dev.ctrl.size + 3u, 8); /* an id past the ring */
    wddm_irq_sink sink = {.completion = sink_completion};
    CHECK_EQ(wddm_dev_interrupt_deferred(&dev, WDDM_IRQ_QUEUE, &sink), WDDM_E_DEVICE);
    CHECK(dev.broken);
    CHECK_EQ(rec.completions, 1);
    CHECK_EQ(rec.fences[0], 20);
    CHECK_EQ(wddm_dev_interrupt_deferred(&dev, WDDM_IRQ_QUEUE, &sink), WDDM_E_DEVICE);
    down();
}

/* Interrupt-driven synchronous requests: they sleep in os.wait_interrupt (with the generation
 * they last saw) until the deferred half collected the answer, and never poll. */
static void interrupt_driven_sync(void)
{
    if (!up_instrumented())
        return;
    CHECK_EQ(wddm_dev_set_interrupt_driven(&dev, true), WDDM_E_INVALID); /* no wait_interrupt */
    CHECK(!dev.interrupt_driven);
    dev.os.wait_interrupt = os_wait;
    CHECK_EQ(wddm_dev_set_interrupt_driven(&dev, true), WDDM_OK);
    wddm_dev_counters before, after;
    CHECK_EQ(wddm_dev_get_counters(&dev, &before), WDDM_OK);

    rec.interrupt_on_wait = true;
    CHECK_EQ(wddm_dev_status_page_register(&dev), WDDM_OK);
    CHECK(f.status_page != NULL);
    CHECK(rec.waits >= 1);
    CHECK_EQ(rec.wait_generation_mismatch, 0);
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK_EQ(after.polled, before.polled);
    CHECK(after.deferred > before.deferred);

    /* No interrupt comes: the request times out after its waits, still without polling, and
     * its slot is abandoned (the device may answer later). */
    rec.interrupt_on_wait = false;
    f.hold_type = WDDM_GPU_CMD_REGISTER_STATUS_PAGE; /* unregistering is a REGISTER of 0 */
    uint32_t waits = rec.waits;
    CHECK_EQ(wddm_dev_status_page_unregister(&dev), WDDM_E_TIMEOUT);
    CHECK(rec.waits > waits);
    CHECK_EQ(wddm_dev_abandoned(&dev), 1);
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK_EQ(after.polled, before.polled);

    /* Back to polling: counted as such. */
    CHECK_EQ(wddm_dev_set_interrupt_driven(&dev, false), WDDM_OK);
    f.hold_type = UINT32_MAX;
    CHECK_EQ(wddm_dev_status_page_register(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_get_counters(&dev, &after), WDDM_OK);
    CHECK(after.polled > before.polled);
    down();
}

void interrupt_tests(void)
{
    run_test("interrupt_top_half_reads_and_acknowledges_only", top_half_sources);
    run_test("interrupt_deferred_half_hands_completions_on", deferred_half_completes);
    run_test("interrupt_deferred_half_hostile_used_entry", deferred_half_hostile);
    run_test("interrupt_driven_sync_requests_never_poll", interrupt_driven_sync);
}
