/* The used ring, completions, events and the status page's fault ring against a hostile
 * device (the fake of fake_os.c): every broken rule is WDDM_E_DEVICE, marks the device broken
 * (every later call fails the same way) and hands nothing on to the KMD. */

#include <string.h>

#include "check.h"
#include "device_fixture.h"
#include "../src/util.h"

/* The device is broken: the poll and every entry point refuse, nothing is handed on. */
static void check_broken(void)
{
    WddmGpuRespSubmit c;
    WddmGpuRespEvent e;
    wddm_submit s = {.dma_buffer_size = 64, .end_offset = 64};
    CHECK(dev.broken);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_E_DEVICE);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_DEVICE);
    CHECK_EQ(wddm_dev_next_event(&dev, &e), WDDM_E_DEVICE);
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_E_DEVICE);
}

/* The device writes a used entry (id, len) that breaks a rule: the poll refuses it. */
static void hostile_used(uint32_t id, uint32_t len)
{
    fake_push_used(&f, id, len);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_E_DEVICE);
}

static uint16_t submit_one(uint32_t fence)
{
    wddm_submit s = {.dma_buffer_address = 0x100000, .dma_buffer_size = 64, .end_offset = 64,
                     .fence_id = fence};
    CHECK_EQ(wddm_dev_submit(&dev, &s), WDDM_OK);
    for (uint32_t i = 0; i < WDDM_SLOTS; i++)
        if (dev.slots[i].state == 1 /* pending */ && dev.slots[i].fence == fence)
            return dev.slots[i].head;
    CHECK(!"submission not in a slot");
    return 0;
}

static void init_and_teardown(void)
{
    if (!up())
        return;
    const wddm_layout *l = wddm_dev_layout(&dev);
    CHECK(l && l->segment_count == 3 && memcmp(&l->header, &caps.h, sizeof(caps.h)) == 0);
    CHECK_EQ(wddm_dev_status_page_register(&dev), WDDM_OK);
    CHECK(f.status_page == dev.status_mem.cpu);
    uint16_t head = submit_one(5);
    (void)head;
    fake_service(&f);
    WddmGpuRespSubmit c;
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    CHECK_EQ(c.submission_fence_id, 5);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_E_EMPTY);
    CHECK(!dev.broken);
    down();
}

static void init_refuses_hostile_capset(void)
{
    caps_valid(&caps, 0);
    caps.seg[1].commit_limit = caps.seg[1].size + 4096;
    fake_init(&f, &caps, sizeof(caps));
    CHECK_EQ(fake_dev_up(&f, &dev), WDDM_E_CAPSET);
    CHECK(wddm_dev_layout(&dev) == NULL);
    CHECK(f.last_log && strcmp(f.last_log, "commit_limit above size (id, limit)") == 0);
    CHECK_EQ(f.dma_live, 0); /* init freed what it allocated */
}

static void used_index_too_far(void)
{
    if (!up())
        return;
    submit_one(1);
    *fake_used_idx(&f) = (uint16_t)(dev.ctrl.last_used + dev.ctrl.size + 1);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_E_DEVICE);
    CHECK(f.last_log && strcmp(f.last_log, "control queue used ring broken at") == 0);
    check_broken();
    down();
}

static void used_id_out_of_range(void)
{
    static const uint32_t ids[] = {64, 0xffff, 0x10000};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        if (!up())
            return;
        submit_one(1);
        hostile_used(ids[i], sizeof(WddmGpuRespSubmit));
        check_broken();
        down();
    }
}

static void used_id_not_a_head(void)
{
    if (!up())
        return;
    uint16_t head = submit_one(1);
    hostile_used(dev.ctrl.next[head], sizeof(WddmGpuRespSubmit)); /* its 2nd descriptor */
    check_broken();
    down();
}

/* The split ring itself (below the slot lookup, which would also catch these): a used id
 * that is not a chain head in flight is refused without consuming the entry or freeing
 * descriptors. */
static void vq_pop_refuses_non_head(void)
{
    static fake vf;
    static wddm_vq vq;
    uint16_t head, got;
    uint32_t len;
    fake_init(&vf, NULL, 0);
    wddm_os os = fake_os_table(&vf);
    CHECK_EQ(wddm_vq_init(&vq, &os, 8), WDDM_OK);
    CHECK_EQ(wddm_vq_add2(&vq, 0x1000, 16, 0x2000, 16, &head), WDDM_OK);
    volatile uint16_t *used = (volatile uint16_t *)vq.used;
    volatile uint32_t *elem = (volatile uint32_t *)(used + 2);
    const uint16_t bad[] = {vq.next[head], (uint16_t)(head + 2), 8};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        elem[0] = bad[i];
        elem[1] = 16;
        used[1] = 1;
        CHECK_EQ(wddm_vq_pop(&vq, &os, &got, &len), WDDM_E_DEVICE);
        CHECK_EQ(vq.last_used, 0);
        CHECK_EQ(vq.num_free, 6);
    }
    elem[0] = head;
    CHECK_EQ(wddm_vq_pop(&vq, &os, &got, &len), WDDM_OK);
    CHECK_EQ(got, head);
    CHECK_EQ(vq.num_free, 8);
    elem[1] = 16;
    used[1] = 2; /* the same head again */
    CHECK_EQ(wddm_vq_pop(&vq, &os, &got, &len), WDDM_E_DEVICE);
    CHECK_EQ(vq.num_free, 8);
    wddm_vq_free(&vq, &os);
    CHECK_EQ(vf.dma_live, 0);
}

static void used_id_not_in_flight(void)
{
    if (!up())
        return;
    hostile_used(0, sizeof(WddmGpuRespSubmit)); /* nothing is in flight */
    check_broken();
    down();
}

static void used_id_answered_twice(void)
{
    WddmGpuRespSubmit c;
    if (!up())
        return;
    uint16_t head = submit_one(1);
    fake_service(&f);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_OK);
    CHECK_EQ(wddm_dev_next_completion(&dev, &c), WDDM_OK);
    hostile_used(head, sizeof(WddmGpuRespSubmit));
    check_broken();
    down();
}

static void used_length_too_large(void)
{
    if (!up())
        return;
    uint16_t head = submit_one(1);
    WddmGpuRespSubmit answer = {.hdr.type_ = WDDM_GPU_RESP_SUBMIT, .submission_fence_id = 1};
    memcpy((void *)((uint8_t *)dev.slot_mem.cpu + (WDDM_SLOT_SIZE / 2)), &answer, sizeof(answer));
    hostile_used(head, sizeof(WddmGpuRespSubmit) + 1);
    CHECK(f.last_log &&
          strcmp(f.last_log, "used length longer than the response buffer (len, buffer)") == 0);
    check_broken();
    down();
}

/* The one request the fake holds, answered with `resp` (`size` bytes written, `len` used). */
static void answer_the_held(const void *resp, uint32_t size, uint32_t len)
{
    fake_service(&f);
    CHECK_EQ(f.held_count, 1);
    fake_answer_held_with(&f, 0, resp, size, len);
}

/* SUBMIT answers: held by the fake, then answered with `resp` (len bytes). */
static void hostile_submit_answer(WddmGpuRespSubmit resp, uint32_t len, const char *message)
{
    if (!up())
        return;
    f.hold_type = WDDM_GPU_CMD_SUBMIT;
    submit_one(1);
    answer_the_held(&resp, sizeof(resp), len);
    CHECK_EQ(wddm_dev_poll(&dev), WDDM_E_DEVICE);
    CHECK(f.last_log && strcmp(f.last_log, message) == 0);
    check_broken();
    down();
}

static void submit_answer_hostile(void)
{
    WddmGpuRespSubmit ok = {.hdr.type_ = WDDM_GPU_RESP_SUBMIT, .submission_fence_id = 1};
    WddmGpuRespSubmit r = ok;
    r.hdr.type_ = VIRTIO_GPU_RESP_OK_NODATA;
    hostile_submit_answer(r, sizeof(r), "SUBMIT answer (type, len)");
    hostile_submit_answer(ok, sizeof(ok) - 4, "SUBMIT answer (type, len)");
    r = ok;
    r.submission_fence_id = 2;
    hostile_submit_answer(r, sizeof(r), "SUBMIT answer names another fence (got, submitted)");
    r = ok;
    r.status = WDDM_GPU_SUBMIT_STATUS_RESET + 1;
    hostile_submit_answer(r, sizeof(r), "SUBMIT answer status unknown");
}

/* WAIT_EVENT answers (the fake holds every WAIT_EVENT). */
static void event_answer(WddmGpuRespEvent ev, uint32_t len, wddm_result want)
{
    if (!up())
        return;
    CHECK_EQ(wddm_dev_post_events(&dev, 1), WDDM_OK);
    answer_the_held(&ev, sizeof(ev), len);
    CHECK_EQ(wddm_dev_poll(&dev), want);
    CHECK_EQ(wddm_dev_events_posted(&dev), 0);
    if (want == WDDM_OK) {
        WddmGpuRespEvent out;
        CHECK_EQ(wddm_dev_next_event(&dev, &out), WDDM_OK);
        CHECK(memcmp(&out, &ev, sizeof(out)) == 0);
        CHECK_EQ(wddm_dev_next_event(&dev, &out), WDDM_E_EMPTY);
    } else {
        CHECK(f.last_log && strcmp(f.last_log, "WAIT_EVENT answer (type, kind)") == 0);
        check_broken();
    }
    down();
}

static void events_hostile(void)
{
    WddmGpuRespEvent ok = {.hdr.type_ = WDDM_GPU_RESP_EVENT, .kind = WDDM_GPU_EVENT_FENCE,
                           .fence_id = 9};
    WddmGpuRespEvent e = ok;
    event_answer(ok, sizeof(ok), WDDM_OK);
    /* The GpuMmu kinds, their payloads handed on whole (zeroed first: compared bytewise). */
    WddmGpuRespEvent g;
    memset(&g, 0, sizeof(g));
    g.hdr.type_ = WDDM_GPU_RESP_EVENT;
    g.kind = WDDM_GPU_EVENT_PAGE_FAULT;
    g.page_fault.fault.virtual_address = 0x40001018;
    g.page_fault.fault.kind = WDDM_GPU_MMU_FAULT_READ_ONLY;
    g.page_fault.fence_id = 77;
    event_answer(g, sizeof(g), WDDM_OK);
    memset(&g.page_fault, 0, sizeof(g.page_fault));
    g.kind = WDDM_GPU_EVENT_MONITORED_FENCE;
    g.fence_value = 0x0123456789abcdefull;
    g.fence_address = 0x40001010;
    event_answer(g, sizeof(g), WDDM_OK);
    g.fence_value = g.fence_address = 0;
    g.kind = WDDM_GPU_EVENT_STALE_TRANSLATION;
    g.stale.virtual_address = 0x40010000;
    g.stale.cached_entry = 0x123001;
    g.stale.memory_entry = 0x456001;
    g.stale.context_id = 9;
    event_answer(g, sizeof(g), WDDM_OK);
    e.kind = 0;
    event_answer(e, sizeof(e), WDDM_E_DEVICE);
    e.kind = WDDM_GPU_EVENT_STALE_TRANSLATION + 1;
    event_answer(e, sizeof(e), WDDM_E_DEVICE);
    e = ok;
    e.hdr.type_ = WDDM_GPU_RESP_SUBMIT;
    event_answer(e, sizeof(e), WDDM_E_DEVICE);
    event_answer(ok, sizeof(WddmGpuCtrlHdr) + 4, WDDM_E_DEVICE); /* the kind cut off */
}

/* The status page, registered; the fault ring written as the device would. */
static volatile WddmGpuStatusPage *page_up(void)
{
    if (!up())
        return NULL;
    CHECK_EQ(wddm_dev_status_page_register(&dev), WDDM_OK);
    return f.status_page;
}

static void put_record(volatile WddmGpuStatusPage *page, uint32_t index, uint64_t sequence)
{
    WddmGpuFaultRecord rec = {.sequence = sequence, .address = 0xabc000, .fence_id = 4,
                              .packet_offset = 48, .status = WDDM_GPU_SUBMIT_STATUS_UNKNOWN_OPCODE,
                              .opcode = 0x77};
    memcpy((uint8_t *)page + WDDM_GPU_FAULT_RING_OFFSET + index * sizeof(rec), &rec,
           sizeof(rec));
}

static void fault_ring_valid(void)
{
    WddmGpuFaultRecord out;
    volatile WddmGpuStatusPage *page = page_up();
    if (!page)
        return;
    CHECK_EQ(wddm_dev_next_fault(&dev, &out), WDDM_E_EMPTY);
    /* The ring wraps: record 120 lives at index 0. */
    page->fault_head = page->fault_tail = WDDM_GPU_FAULT_RING_ENTRIES;
    put_record(page, 0, WDDM_GPU_FAULT_RING_ENTRIES);
    page->fault_head = WDDM_GPU_FAULT_RING_ENTRIES + 1;
    CHECK_EQ(wddm_dev_next_fault(&dev, &out), WDDM_OK);
    CHECK_EQ(out.sequence, WDDM_GPU_FAULT_RING_ENTRIES);
    CHECK_EQ(out.opcode, 0x77);
    CHECK_EQ(out.packet_offset, 48);
    CHECK_EQ(page->fault_tail, WDDM_GPU_FAULT_RING_ENTRIES + 1);
    CHECK_EQ(wddm_dev_next_fault(&dev, &out), WDDM_E_EMPTY);
    CHECK(!dev.broken);
    down();
}

static void hostile_fault_ring(uint32_t head, uint32_t tail, uint64_t sequence, uint32_t magic,
                               const char *message)
{
    WddmGpuFaultRecord out;
    volatile WddmGpuStatusPage *page = page_up();
    if (!page)
        return;
    put_record(page, tail % WDDM_GPU_FAULT_RING_ENTRIES, sequence);
    page->fault_tail = tail;
    page->fault_head = head;
    page->magic = magic;
    memset(&out, 0xEE, sizeof(out));
    CHECK_EQ(wddm_dev_next_fault(&dev, &out), WDDM_E_DEVICE);
    CHECK(f.last_log && strcmp(f.last_log, message) == 0);
    CHECK_EQ(page->fault_tail, tail); /* nothing consumed */
    CHECK(dev.broken);
    down();
}

static void fault_ring_hostile(void)
{
    const uint32_t magic = 0x50534457u, n = WDDM_GPU_FAULT_RING_ENTRIES;
    hostile_fault_ring(n + 1, 0, 0, magic, "fault ring indices (head, tail)");
    hostile_fault_ring(0, 1, 1, magic, "fault ring indices (head, tail)"); /* tail past head */
    hostile_fault_ring(UINT32_MAX, 5, 5, magic, "fault ring indices (head, tail)");
    hostile_fault_ring(3, 2, 7, magic, "fault record sequence (got, expected)");
    hostile_fault_ring(1, 0, 0, magic ^ 1, "status page header (magic, ring offset)");
}

static void fault_ring_unregistered(void)
{
    WddmGpuFaultRecord out;
    if (!up())
        return;
    CHECK_EQ(wddm_dev_next_fault(&dev, &out), WDDM_E_STATE);
    down();
}

void ring_tests(void)
{
    run_test("device_init_and_teardown", init_and_teardown);
    run_test("device_init_refuses_hostile_capset", init_refuses_hostile_capset);
    run_test("used_index_too_far", used_index_too_far);
    run_test("used_id_out_of_range", used_id_out_of_range);
    run_test("used_id_not_a_head", used_id_not_a_head);
    run_test("used_id_not_in_flight", used_id_not_in_flight);
    run_test("vq_pop_refuses_non_head", vq_pop_refuses_non_head);
    run_test("used_id_answered_twice", used_id_answered_twice);
    run_test("used_length_too_large", used_length_too_large);
    run_test("submit_answer_hostile", submit_answer_hostile);
    run_test("events_hostile", events_hostile);
    run_test("fault_ring_valid_wraps", fault_ring_valid);
    run_test("fault_ring_hostile", fault_ring_hostile);
    run_test("fault_ring_unregistered", fault_ring_unregistered);
}
