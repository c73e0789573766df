/* Synchronous requests that time out: the slot stays in flight (its buffers belong to the
 * device) as abandoned, and is reclaimed when the device finally answers; until then a device
 * that never answers costs slots, not correctness. */

#include <string.h>

#include "check.h"
#include "device_fixture.h"

static uint32_t busy_slots(void)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < WDDM_SLOTS; i++)
        n += dev.slots[i].state != 0;
    return n;
}

static void answer_held_preempt(uint32_t i, uint32_t len)
{
    WddmGpuRespPreempt r = {.hdr.type_ = WDDM_GPU_RESP_PREEMPT, .preempted_fence = 77};
    fake_answer_held_with(&f, i, &r, sizeof(r), len);
}

/* The device up, with the fake holding (not answering) every PREEMPT. */
static bool up_holding_preempts(void)
{
    if (!up())
        return false;
    f.hold_type = WDDM_GPU_CMD_PREEMPT;
    return true;
}

/* No slot is busy, none abandoned. */
static void check_slots_free(void)
{
    CHECK_EQ(wddm_dev_abandoned(&dev), 0);
    CHECK_EQ(busy_slots(), 0);
}

/* After the late answers: the device is not broken and answers a PREEMPT again. */
static void check_recovered(void)
{
    WddmGpuRespPreempt out;
    CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_OK);
    CHECK(!dev.broken);
}

static void reclaimed_on_late_answer(void)
{
    WddmGpuRespPreempt out;
    WddmGpuRespSubmit c;
    WddmGpuRespEvent e;
    if (!up_holding_preempts())
        return;
    uint64_t start = f.clock_us;
    CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_E_TIMEOUT);
    CHECK(f.clock_us - start >= 10000); /* waited the configured 10 ms */
    CHECK_EQ(wddm_dev_abandoned(&dev), 1);
    CHECK_EQ(busy_slots(), 1);
    CHECK(!dev.broken);
    CHECK_EQ(f.held_count, 1);

    f.hold_type = UINT32_MAX;
    answer_held_preempt(0, sizeof(WddmGpuRespPreempt));
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    check_slots_free();
    CHECK(f.last_log && strcmp(f.last_log, "late answer to a timed-out request, slot") == 0);
    /* The late answer is nobody's: no completion, no event. */
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_EMPTY);
    CHECK_EQ(wddm_dev_next_event(&dev, &e), WDDM_E_EMPTY);
    check_recovered();
    down();
}

static void timeouts_exhaust_then_recover(void)
{
    WddmGpuRespPreempt out;
    wddm_submit s = {.dma_buffer_size = 64, .end_offset = 64, .fence_id = 3};
    if (!up_holding_preempts())
        return;
    for (uint32_t i = 0; i < WDDM_SLOTS; i++)
        CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_E_TIMEOUT);
    CHECK_EQ(wddm_dev_abandoned(&dev), WDDM_SLOTS);
    CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_E_FULL);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_E_FULL);
    f.hold_type = UINT32_MAX;
    while (f.held_count)
        answer_held_preempt(f.held_count - 1, sizeof(WddmGpuRespPreempt)); /* any order */
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    check_slots_free();
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    check_recovered();
    down();
}

static void late_answer_too_long(void)
{
    WddmGpuRespPreempt out;
    if (!up_holding_preempts())
        return;
    CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_E_TIMEOUT);
    answer_held_preempt(0, sizeof(WddmGpuRespPreempt) + 8);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_E_DEVICE);
    CHECK(dev.broken);
    down();
}

/* An answer that arrives in the last wait before the deadline is taken, not abandoned: the
 * poll after the deadline runs before the timeout is declared. */
static void answer_at_deadline_taken(void)
{
    WddmGpuRespPreempt out;
    if (!up_holding_preempts())
        return;
    f.release_at_us = f.clock_us + 10000 + 200;
    CHECK_EQ(wddm_dev_preempt(&dev, &out), WDDM_OK);
    check_slots_free();
    down();
}

/* The fixture's capset with the VRAM BAR not mapped yet (mode 2 before the backend's map). */
static test_caps unmapped;

static bool up_with_bar_unmapped(void)
{
    caps_valid(&caps, 0);
    unmapped = caps;
    unmapped.h.vram_bar.mode = WDDM_GPU_BAR_MODE_SHMEM;
    unmapped.h.vram_bar.state = WDDM_GPU_BAR_STATE_NOT_MAPPED;
    unmapped.h.vram_bar.guest_physical_address = 0;
    for (uint32_t i = 0; i < 3; i++) /* no CPU address until the BAR is known */
        unmapped.seg[i].cpu_translated_address = 0;
    fake_init(&f, &unmapped, sizeof(unmapped));
    wddm_result r = fake_dev_up(&f, &dev);
    CHECK_EQ(r, WDDM_OK);
    return r == WDDM_OK;
}

/* Mode 1: known at DRIVER_OK, so the wait reads nothing more. */
static void bar_wait_returns_at_once_when_known(void)
{
    uint32_t reads = 0;
    if (!up())
        return;
    uint32_t before = f.capset_reads;
    CHECK_EQ(wddm_dev_wait_bar_known(&dev, 1000, &reads), WDDM_OK);
    CHECK_EQ(reads, 1u);
    CHECK_EQ(f.capset_reads, before);
    down();
}

/* Mode 2: the capset is read again until the locator says KNOWN, and the layout is that one. */
static void bar_wait_reads_until_known(void)
{
    uint32_t reads = 0;
    if (!up_with_bar_unmapped())
        return;
    CHECK_EQ(wddm_dev_layout(&dev)->header.vram_bar.state, WDDM_GPU_BAR_STATE_NOT_MAPPED);
    caps.h.vram_bar.mode = WDDM_GPU_BAR_MODE_SHMEM;
    f.capset_later = &caps;
    f.capset_later_at_us = f.clock_us + 35 * 1000;
    CHECK_EQ(wddm_dev_wait_bar_known(&dev, 1000, &reads), WDDM_OK);
    CHECK_EQ(reads, 5u); /* init's, then every 10 ms until 35 ms have passed */
    const wddm_layout *l = wddm_dev_layout(&dev);
    CHECK_EQ(l->header.vram_bar.state, WDDM_GPU_BAR_STATE_KNOWN);
    CHECK_EQ(l->header.vram_bar.guest_physical_address, FIX_BAR_ADDRESS);
    down(); /* the capset buffer is reused, not allocated again: no DMA memory left */
}

/* A BAR that never maps: the wait gives up at its timeout, the layout still says not mapped. */
static void bar_wait_times_out(void)
{
    uint32_t reads = 0;
    if (!up_with_bar_unmapped())
        return;
    uint64_t start = f.clock_us;
    CHECK_EQ(wddm_dev_wait_bar_known(&dev, 100, &reads), WDDM_E_TIMEOUT);
    CHECK(f.clock_us - start >= 100 * 1000);
    CHECK_EQ(reads, 11u);
    CHECK_EQ(wddm_dev_layout(&dev)->header.vram_bar.state, WDDM_GPU_BAR_STATE_NOT_MAPPED);
    down();
}

void timeout_tests(void)
{
    run_test("bar_wait_returns_at_once_when_known", bar_wait_returns_at_once_when_known);
    run_test("bar_wait_reads_until_known", bar_wait_reads_until_known);
    run_test("bar_wait_times_out", bar_wait_times_out);
    run_test("sync_timeout_slot_reclaimed_on_late_answer", reclaimed_on_late_answer);
    run_test("sync_timeouts_exhaust_slots_then_recover", timeouts_exhaust_then_recover);
    run_test("sync_timeout_late_answer_too_long", late_answer_too_long);
    run_test("sync_answer_at_the_deadline_taken", answer_at_deadline_taken);
}
