/* Timeout detection and recovery against the fake device answering QUERY_ENGINE_STATUS and
 * RESET as the backend does under its injections: the engine status decoded and checked, a
 * lost interrupt recovered by the query, a hang recovered by the TDR helper (aborted fences
 * resubmitted or reported, the status page and the events again), and the failures a hostile
 * device can cause. */

#include <string.h>

#include "check.h"
#include "device_fixture.h"

static wddm_submit submission(uint32_t fence)
{
    wddm_submit s = {.dma_buffer_size = 64, .end_offset = 64, .fence_id = fence};
    return s;
}

/* The device up with the status page registered and `events` WAIT_EVENTs posted. */
static bool up_registered(uint32_t events)
{
    if (!up())
        return false;
    CHECK_EQ(wddm_dev_status_page_register(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_post_events(&dev, events), WDDM_OK);
    fake_service(&f);
    return !dev.broken;
}

/* Runs the fake once and collects: what a DPC after an interrupt does. */
static void serve(void)
{
    fake_service(&f);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
}

static void engine_status_decoded(void)
{
    WddmGpuRespEngineStatus st;
    WddmGpuRespSubmit c;
    if (!up_registered(2))
        return;
    wddm_submit s = submission(5);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    serve();
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_query_engine_status(&dev, WDDM_GPU_NODE_PAGING, &st), WDDM_OK);
    CHECK_EQ(st.flags, WDDM_GPU_ENGINE_STATUS_RESPONSIVE);
    CHECK_EQ(st.current_fence, 5);
    CHECK_EQ(st.running_fence, 0);
    CHECK_EQ(st.released, 0);
    /* Another node is refused, as the device refuses it; nothing broken. */
    CHECK_EQ(wddm_dev_query_engine_status(&dev, 1, &st), WDDM_E_REFUSED);
    CHECK(!dev.broken);
    CHECK_EQ(wddm_dev_query_engine_status(&dev, WDDM_GPU_NODE_PAGING, NULL), WDDM_E_INVALID);
    down();
}

static void engine_status_of_another_node_breaks(void)
{
    WddmGpuRespEngineStatus st;
    if (!up())
        return;
    f.status_node_delta = 1;
    CHECK_EQ(wddm_dev_query_engine_status(&dev, WDDM_GPU_NODE_PAGING, &st), WDDM_E_DEVICE);
    CHECK(dev.broken);
    down();
}

/* `released` counts answers that came before the query's: a device that claims one it never
 * answered breaks the rule. */
static void released_without_answers_breaks(void)
{
    uint32_t fence = 0;
    if (!up())
        return;
    f.released_lie = 1;
    CHECK_EQ(wddm_dev_query_current_fence(&dev, &fence, NULL), WDDM_E_DEVICE);
    CHECK(dev.broken);
    down();
}

static void lost_interrupt_recovered(void)
{
    WddmGpuRespSubmit c;
    WddmGpuStatusPage page;
    uint32_t fence = 0, released = 0;
    if (!up_registered(2))
        return;
    f.lose_submits = true;
    wddm_submit a = submission(7), b = submission(8);
    CHECK_EQ(wddm_dev_submit(&dev, &a), WDDM_OK);
    CHECK_EQ(wddm_dev_submit(&dev, &b), WDDM_OK);
    serve();
    /* The work is done (the status page says so) but no answer came: the interrupt was lost. */
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_EMPTY);
    CHECK_EQ(wddm_dev_pending(&dev), 2);
    CHECK_EQ(wddm_dev_status(&dev, &page), WDDM_OK);
    CHECK_EQ(page.completed_fence, 8);
    /* DxgkDdiQueryCurrentFence: the query releases both, answered before it. */
    CHECK_EQ(wddm_dev_query_current_fence(&dev, &fence, &released), WDDM_OK);
    CHECK_EQ(fence, 8);
    CHECK_EQ(released, 2);
    CHECK_EQ(wddm_dev_pending(&dev), 0);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK_EQ(c.submission_fence_id, 7);
    CHECK_EQ(c.status, WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK_EQ(c.submission_fence_id, 8);
    CHECK_EQ(wddm_dev_last_completed_fence(&dev), 8);
    CHECK(!dev.broken);
    down();
}

/* A hang: QUERY_ENGINE_STATUS says not responsive; the TDR helper resets, every submission
 * comes back RESET, the status page and the events come back, the resubmittable ones are
 * resubmitted (and run), the other one is reported. */
static void hang_reset_resubmit_report(void)
{
    static wddm_tdr_report rep;
    WddmGpuRespEngineStatus st;
    WddmGpuRespSubmit c;
    WddmGpuRespEvent ev;
    WddmGpuStatusPage page;
    if (!up_registered(3))
        return;
    f.hang_submits = true;
    wddm_submit s[3] = {submission(10), submission(11), submission(12)};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(wddm_dev_submit(&dev, &s[i]), WDDM_OK);
    serve();
    CHECK_EQ(wddm_dev_query_engine_status(&dev, WDDM_GPU_NODE_PAGING, &st), WDDM_OK);
    CHECK_EQ(st.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE, 0);
    CHECK_EQ(st.running_fence, 10);
    CHECK_EQ(st.queued, 2);
    uint32_t resets = f.resets;
    /* Fences 10 and 11 may run again; 12 may not (the KMD says so by leaving it out). */
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, s, 2, 3, &rep), WDDM_OK);
    CHECK_EQ(f.resets, resets + 1);
    CHECK(rep.status_valid);
    CHECK_EQ(rep.status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE, 0);
    CHECK_EQ(rep.aborted_count, 3);
    CHECK(rep.aborted[0] == 10 && rep.aborted[1] == 11 && rep.aborted[2] == 12);
    CHECK_EQ(rep.completed_count, 0);
    CHECK_EQ(rep.resubmitted_count, 2);
    CHECK(rep.resubmitted[0] == 10 && rep.resubmitted[1] == 11);
    CHECK_EQ(rep.reported_count, 1);
    CHECK_EQ(rep.reported[0], 12);
    /* The status page registered again (a fresh one), three WAIT_EVENTs posted again. */
    CHECK(f.status_page != NULL);
    CHECK_EQ(wddm_dev_status(&dev, &page), WDDM_OK);
    CHECK_EQ(wddm_dev_events_posted(&dev), 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(wddm_dev_next_event(&dev, &ev), WDDM_OK);
        CHECK_EQ(ev.kind, WDDM_GPU_EVENT_CANCELLED);
    }
    /* The resubmissions run (the device is no longer hung). */
    serve();
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK(c.submission_fence_id == 10 && c.status == WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK(c.submission_fence_id == 11 && c.status == WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_EMPTY);
    CHECK_EQ(wddm_dev_status(&dev, &page), WDDM_OK);
    CHECK_EQ(page.completed_fence, 11);
    CHECK(!dev.broken);
    down();
}

/* A submission whose answer a lost interrupt holds when the TDR comes: the query before the
 * reset releases it, so it is reported as completed (it ran), neither aborted nor resubmitted. */
static void tdr_takes_a_withheld_answer_as_completed(void)
{
    static wddm_tdr_report rep;
    if (!up_registered(1))
        return;
    f.lose_submits = true;
    wddm_submit s = submission(20);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    serve();
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, &s, 1, 1, &rep), WDDM_OK);
    CHECK_EQ(rep.status.released, 1);
    CHECK_EQ(rep.aborted_count, 0);
    CHECK_EQ(rep.completed_count, 1);
    CHECK(rep.completed[0].submission_fence_id == 20 &&
          rep.completed[0].status == WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(rep.resubmitted_count, 0);
    CHECK_EQ(wddm_dev_pending(&dev), 0);
    down();
}

/* A RESET that is never answered: the helper gives up after the timeout. */
static void tdr_reset_unanswered_times_out(void)
{
    static wddm_tdr_report rep;
    if (!up_registered(1))
        return;
    f.hang_submits = true;
    wddm_submit s = submission(30);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    serve();
    f.hold_type = WDDM_GPU_CMD_RESET;
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, &s, 1, 1, &rep), WDDM_E_TIMEOUT);
    CHECK_EQ(rep.resubmitted_count, 0);
    CHECK(!dev.broken);
    down();
}

/* The RESET answered, but a submission never comes back: the helper gives up after the
 * timeout instead of waiting for ever, and resubmits nothing. */
static void tdr_submission_never_back_times_out(void)
{
    static wddm_tdr_report rep;
    if (!up_registered(0))
        return;
    f.hold_type = WDDM_GPU_CMD_SUBMIT; /* held by the test, not by the node: RESET misses it */
    wddm_submit s = submission(40);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    serve();
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, &s, 1, 0, &rep), WDDM_E_TIMEOUT);
    CHECK_EQ(rep.resubmitted_count, 0);
    CHECK_EQ(wddm_dev_pending(&dev), 1);
    down();
}

static void tdr_refuses_bad_arguments(void)
{
    static wddm_tdr_report rep;
    if (!up())
        return;
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, NULL, 1, 0, &rep), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, NULL, 0, WDDM_EVENT_RING + 1, &rep),
             WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_reset_from_timeout(&dev, NULL, 0, 0, NULL), WDDM_E_INVALID);
    CHECK_EQ(f.resets, 0);
    down();
}

void tdr_tests(void)
{
    run_test("tdr_engine_status_decoded", engine_status_decoded);
    run_test("tdr_engine_status_of_another_node_breaks", engine_status_of_another_node_breaks);
    run_test("tdr_released_without_answers_breaks", released_without_answers_breaks);
    run_test("tdr_lost_interrupt_recovered", lost_interrupt_recovered);
    run_test("tdr_hang_reset_resubmit_report", hang_reset_resubmit_report);
    run_test("tdr_takes_a_withheld_answer_as_completed", tdr_takes_a_withheld_answer_as_completed);
    run_test("tdr_reset_unanswered_times_out", tdr_reset_unanswered_times_out);
    run_test("tdr_submission_never_back_times_out", tdr_submission_never_back_times_out);
    run_test("tdr_refuses_bad_arguments", tdr_refuses_bad_arguments);
}
