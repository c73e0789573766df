/* Contexts and the virtual node against the fake device: the four synchronous context
 * commands (their bytes, OK_NODATA, refusals, wrong and short answers, timeouts) and
 * SUBMIT_VIRTUAL (posted at once, its answer collected by the poll and checked: type, length,
 * fence, status; the answer ring's room; the page-fault record carried through). */

#include <string.h>

#include "check.h"
#include "device_fixture.h"

static WddmGpuCmdSubmitVirtual virtual_cmd(uint32_t id, uint32_t fence)
{
    WddmGpuCmdSubmitVirtual c;
    wddm_build_submit_virtual(&c, id, 0x400000, 64, fence);
    return c;
}

static bool same_request(const void *built, size_t size)
{
    return memcmp(f.last_context_req, built, size) == 0;
}

static void commands_sent_as_built(void)
{
    if (!up())
        return;
    WddmGpuCmdCreateContext cc;
    WddmGpuCmdSetRootPageTable sr;
    WddmGpuCmdResetEngine re;
    WddmGpuCmdDestroyContext dc;
    wddm_build_create_context(&cc, 3, WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_CONTEXT_FLAG_CHECK_TLB);
    wddm_build_set_root_page_table(&sr, 3, 1, 0x123000, 512);
    wddm_build_reset_engine(&re);
    wddm_build_destroy_context(&dc, 3);
    CHECK_EQ(wddm_dev_create_context(&dev, 3, WDDM_GPU_NODE_VIRTUAL,
                                     WDDM_GPU_CONTEXT_FLAG_CHECK_TLB), WDDM_OK);
    CHECK_EQ(f.last_context_type, WDDM_GPU_CMD_CREATE_CONTEXT);
    CHECK(same_request(&cc, sizeof(cc)));
    CHECK_EQ(wddm_dev_set_root_page_table(&dev, 3, 1, 0x123000, 512), WDDM_OK);
    CHECK_EQ(f.last_context_type, WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE);
    CHECK(same_request(&sr, sizeof(sr)));
    CHECK_EQ(wddm_dev_reset_engine(&dev), WDDM_OK);
    CHECK_EQ(f.last_context_type, WDDM_GPU_CMD_RESET_ENGINE);
    CHECK(same_request(&re, sizeof(re)));
    CHECK_EQ(wddm_dev_destroy_context(&dev, 3), WDDM_OK);
    CHECK_EQ(f.last_context_type, WDDM_GPU_CMD_DESTROY_CONTEXT);
    CHECK(same_request(&dc, sizeof(dc)));
    CHECK_EQ(f.context_requests, 4);
    CHECK(!dev.broken);
    down();
}

static void commands_before_init(void)
{
    wddm_dev cold;
    memset(&cold, 0, sizeof(cold));
    CHECK_EQ(wddm_dev_create_context(&cold, 1, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_destroy_context(&cold, 1), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_set_root_page_table(&cold, 1, 0, 0x1000, 1), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_reset_engine(&cold), WDDM_E_INVALID);
    WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 1);
    WddmGpuRespSubmitVirtual out;
    CHECK_EQ(wddm_dev_submit_virtual(&cold, &c), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_next_virtual_completion(&cold, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_wait_virtual_completion(&cold, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_create_context(NULL, 1, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_submit_virtual(NULL, &c), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_virtual_pending(NULL), 0);
}

/* Every ERR_* answer is a refusal: E_REFUSED, logged, the device still usable. */
static void refusals(void)
{
    static const uint32_t errors[] = {VIRTIO_GPU_RESP_ERR_UNSPEC,
                                      VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
                                      VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER};
    if (!up())
        return;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        f.context_type = errors[i];
        CHECK_EQ(wddm_dev_create_context(&dev, 5000, 1, 0), WDDM_E_REFUSED);
        CHECK_EQ(f.last_log_a, errors[i]);
        CHECK_EQ(f.last_log_b, 5000);
        CHECK_EQ(wddm_dev_set_root_page_table(&dev, 9, 0, 0x1001, 0), WDDM_E_REFUSED);
        CHECK_EQ(wddm_dev_destroy_context(&dev, 9), WDDM_E_REFUSED);
        CHECK_EQ(wddm_dev_reset_engine(&dev), WDDM_E_REFUSED);
        CHECK(!dev.broken);
    }
    f.context_type = 0;
    CHECK_EQ(wddm_dev_create_context(&dev, 1, 1, 0), WDDM_OK);
    CHECK(strcmp(wddm_result_name(WDDM_E_REFUSED), "E_REFUSED") == 0);
    down();
}

/* An answer of another type (not OK_NODATA, not ERR_*) or a short one breaks the device. */
static void wrong_answers(void)
{
    static const uint32_t types[] = {WDDM_GPU_RESP_SUBMIT_VIRTUAL, VIRTIO_GPU_RESP_OK_CAPSET,
                                     VIRTIO_GPU_RESP_ERR_UNSPEC - 1,
                                     VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER + 1};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (!up())
            return;
        f.context_type = types[i];
        CHECK_EQ(wddm_dev_set_root_page_table(&dev, 1, 0, 0x1000, 1), WDDM_E_DEVICE);
        CHECK(dev.broken);
        f.context_type = 0;
        CHECK_EQ(wddm_dev_create_context(&dev, 1, 1, 0), WDDM_E_DEVICE);
        down();
    }
    if (!up())
        return;
    f.context_short = 1;
    CHECK_EQ(wddm_dev_reset_engine(&dev), WDDM_E_DEVICE);
    CHECK(dev.broken);
    down();
}

static void command_timeout(void)
{
    if (!up())
        return;
    f.hold_type = WDDM_GPU_CMD_RESET_ENGINE;
    CHECK_EQ(wddm_dev_reset_engine(&dev), WDDM_E_TIMEOUT);
    CHECK_EQ(wddm_dev_abandoned(&dev), 1);
    CHECK(!dev.broken);
    /* The late answer frees the slot; the next command works. */
    f.release_at_us = f.clock_us;
    f.hold_type = WDDM_GPU_CMD_RESET_ENGINE;
    fake_service(&f);
    f.hold_type = 0;
    CHECK_EQ(wddm_dev_create_context(&dev, 1, 1, 0), WDDM_OK);
    CHECK_EQ(wddm_dev_abandoned(&dev), 0);
    down();
}

static void submit_virtual_collected(void)
{
    WddmGpuRespSubmitVirtual out;
    if (!up())
        return;
    f.hold_type = WDDM_GPU_CMD_SUBMIT_VIRTUAL;
    WddmGpuCmdSubmitVirtual c = virtual_cmd(2, 41);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), 1);
    fake_service(&f);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_E_EMPTY); /* not answered */
    /* The answer arrives ("the interrupt"); the poll collects it. */
    CHECK_EQ(f.held_count, 1);
    WddmGpuRespSubmitVirtual answer = {.hdr.type_ = WDDM_GPU_RESP_SUBMIT_VIRTUAL,
                                       .submission_fence_id = 41,
                                       .packets_completed = 2,
                                       .bytes_transferred = 0x8000};
    fake_answer_held_with(&f, 0, &answer, sizeof(answer), sizeof(answer));
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), 0);
    CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(out.submission_fence_id, 41);
    CHECK_EQ(out.status, WDDM_GPU_SUBMIT_STATUS_OK);
    CHECK_EQ(out.packets_completed, 2);
    CHECK_EQ(out.bytes_transferred, 0x8000);
    CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_E_EMPTY);
    /* SUBMIT completions are a ring of their own. */
    WddmGpuRespSubmit plain;
    CHECK_EQ(wddm_dev_next_completion(&dev, &plain), WDDM_E_EMPTY);
    /* The synchronous wait, answered by the fake at once. */
    f.hold_type = 0;
    c = virtual_cmd(2, 42);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(f.last_context_type, WDDM_GPU_CMD_SUBMIT_VIRTUAL);
    CHECK(same_request(&c, sizeof(c)));
    CHECK_EQ(out.submission_fence_id, 42);
    CHECK(!dev.broken);
    down();
}

static void submit_virtual_refuses_commands(void)
{
    if (!up())
        return;
    WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 1);
    c.hdr.type_ = WDDM_GPU_CMD_SUBMIT;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    c = virtual_cmd(1, 1);
    c.start_offset = 65;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    c = virtual_cmd(1, 1);
    c.end_offset = 65;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    c = virtual_cmd(1, 1);
    c.dma_buffer_size = c.end_offset = WDDM_GPU_MAX_DMA_BUFFER_SIZE + 1;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    c = virtual_cmd(1, 1);
    c.flags = 1;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    c = virtual_cmd(1, 1);
    c.reserved = 1;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, NULL), WDDM_E_INVALID);
    CHECK_EQ(f.context_requests, 0);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), 0);
    down();
}

/* Hostile answers: each breaks the device (the poll says E_DEVICE, nothing is queued). */
typedef struct hostile {
    uint32_t type, fence_delta, status, short_by;
} hostile;

static void hostile_answers(void)
{
    static const hostile cases[] = {
        {WDDM_GPU_RESP_SUBMIT, 0, 0, 0},            /* a SUBMIT answer */
        {VIRTIO_GPU_RESP_OK_NODATA, 0, 0, 0},       /* a header only, of the wrong type */
        {0, 1, 0, 0},                               /* another fence */
        {0, 0, WDDM_GPU_SUBMIT_STATUS_BAD_CONTEXT + 1, 0}, /* an unknown status */
        {0, 0, 0, 8},                               /* short by 8 */
        {0, 0, 0, sizeof(WddmGpuRespSubmitVirtual) - sizeof(WddmGpuCtrlHdr)}, /* header only */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        WddmGpuRespSubmitVirtual out;
        if (!up())
            return;
        f.virtual_type = cases[i].type;
        f.virtual_fence_delta = cases[i].fence_delta;
        f.virtual_status = cases[i].status;
        f.virtual_short = cases[i].short_by;
        WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 7);
        CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
        CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_E_DEVICE);
        CHECK(dev.broken);
        CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_E_DEVICE);
        CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_DEVICE);
        down();
    }
}

/* A PAGE_FAULT answer carries its record, which converts to DmaPageFaulted; NODE_FAULTED and
 * BAD_CONTEXT are answers like any other. */
static void page_fault_answer(void)
{
    WddmGpuRespSubmitVirtual out;
    wddm_dxgk_dma_page_faulted dxgk;
    if (!up())
        return;
    f.virtual_status = WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT;
    f.virtual_fault.sequence = 1;
    f.virtual_fault.fault.virtual_address = 0x1234567018ull;
    f.virtual_fault.fault.page_table_level = 0;
    f.virtual_fault.fence_id = 9;
    f.virtual_fault.flags = WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED;
    f.virtual_fault.node_ordinal = WDDM_GPU_NODE_VIRTUAL;
    WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 9);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(out.status, WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT);
    CHECK_EQ(wddm_page_fault_to_dxgk(&out.page_fault, &dxgk), WDDM_OK);
    CHECK_EQ(dxgk.FaultedVirtualAddress, 0x1234567018ull);
    CHECK_EQ(dxgk.FaultedFenceId, 9);
    CHECK_EQ(dxgk.PageTableLevel, 0);
    CHECK_EQ(dxgk.NodeOrdinal, WDDM_GPU_NODE_VIRTUAL);
    f.virtual_status = WDDM_GPU_SUBMIT_STATUS_NODE_FAULTED;
    c = virtual_cmd(1, 10);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(out.status, WDDM_GPU_SUBMIT_STATUS_NODE_FAULTED);
    f.virtual_status = WDDM_GPU_SUBMIT_STATUS_BAD_CONTEXT;
    c = virtual_cmd(1, 11);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(out.status, WDDM_GPU_SUBMIT_STATUS_BAD_CONTEXT);
    CHECK(!dev.broken);
    down();
}

/* The answer ring has room for WDDM_VIRTUAL_COMPLETION_RING answers: posting past it (answers
 * not taken count) is E_FULL until one is taken. */
static void answer_ring_full(void)
{
    WddmGpuRespSubmitVirtual out;
    if (!up())
        return;
    f.hold_type = WDDM_GPU_CMD_SUBMIT_VIRTUAL;
    WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 0); /* fence 0: the fake's release reads 0 */
    for (uint32_t i = 0; i < WDDM_VIRTUAL_COMPLETION_RING; i++)
        CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_FULL);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), WDDM_VIRTUAL_COMPLETION_RING);
    f.release_at_us = f.clock_us;
    fake_service(&f);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), 0);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_E_FULL); /* answers not taken */
    CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_OK);
    f.release_at_us = 0;
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    for (uint32_t i = 1; i < WDDM_VIRTUAL_COMPLETION_RING; i++)
        CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_OK);
    CHECK_EQ(wddm_dev_next_virtual_completion(&dev, &out), WDDM_E_EMPTY);
    CHECK(!dev.broken);
    down();
}

static void wait_times_out(void)
{
    WddmGpuRespSubmitVirtual out;
    if (!up())
        return;
    f.hold_type = WDDM_GPU_CMD_SUBMIT_VIRTUAL;
    WddmGpuCmdSubmitVirtual c = virtual_cmd(1, 3);
    CHECK_EQ(wddm_dev_submit_virtual(&dev, &c), WDDM_OK);
    uint64_t start = f.clock_us;
    CHECK_EQ(wddm_dev_wait_virtual_completion(&dev, &out), WDDM_E_TIMEOUT);
    CHECK(f.clock_us - start >= 10000);
    CHECK_EQ(wddm_dev_virtual_pending(&dev), 1);
    CHECK(!dev.broken);
    down();
}

void context_tests(void)
{
    run_test("context_commands_sent_as_built", commands_sent_as_built);
    run_test("context_commands_before_init", commands_before_init);
    run_test("context_refusals", refusals);
    run_test("context_wrong_answers", wrong_answers);
    run_test("context_command_timeout", command_timeout);
    run_test("context_submit_virtual_collected", submit_virtual_collected);
    run_test("context_submit_virtual_refuses_commands", submit_virtual_refuses_commands);
    run_test("context_submit_virtual_hostile_answers", hostile_answers);
    run_test("context_submit_virtual_page_fault", page_fault_answer);
    run_test("context_submit_virtual_ring_full", answer_ring_full);
    run_test("context_submit_virtual_wait_times_out", wait_times_out);
}
