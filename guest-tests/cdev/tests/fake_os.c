#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fake_os.h"

#include "check.h"

#define CAP_AT 0x40u
#define CAP_LEN VIRTIO_PCI_NOTIFY_CAP_LEN /* every capability long enough for a multiplier */
#define COMMON_AT 0x0000u
#define NOTIFY_AT 0x1000u
#define ISR_AT 0x2000u
#define DEVICE_AT 0x3000u

static void *ptr(uint64_t bus) { return (void *)(uintptr_t)bus; }

static uint64_t bar_u64(fake *f, uint32_t off)
{
    uint64_t v;
    memcpy(&v, f->bar0 + off, 8);
    return v;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static void add_cap(fake *f, uint32_t at, uint32_t next, uint8_t type, uint32_t offset,
                    uint32_t length, uint32_t extra)
{
    uint8_t *c = f->config + at;
    c[0] = VIRTIO_PCI_CAP_ID_VENDOR;
    c[1] = (uint8_t)next;
    c[2] = CAP_LEN;
    c[3] = type;
    c[4] = 0; /* BAR 0 */
    put32(c + 8, offset);
    put32(c + 12, length);
    put32(c + 16, extra);
}

void fake_init(fake *f, const void *capset, uint32_t capset_size)
{
    memset(f, 0, sizeof(*f));
    f->capset = capset;
    f->capset_size = capset_size;
    put16(f->config + 0x00, VIRTIO_PCI_VENDOR_ID);
    put16(f->config + 0x02, WDDM_GPU_PCI_DEVICE_ID);
    put16(f->config + 0x06, 0x10); /* capability list */
    f->config[0x34] = CAP_AT;
    add_cap(f, CAP_AT, CAP_AT + CAP_LEN, VIRTIO_PCI_CAP_COMMON_CFG, COMMON_AT,
            VIRTIO_PCI_COMMON_CFG_LEN, 0);
    add_cap(f, CAP_AT + CAP_LEN, CAP_AT + 2 * CAP_LEN, VIRTIO_PCI_CAP_NOTIFY_CFG, NOTIFY_AT, 4, 2);
    add_cap(f, CAP_AT + 2 * CAP_LEN, CAP_AT + 3 * CAP_LEN, VIRTIO_PCI_CAP_ISR_CFG, ISR_AT, 1, 0);
    add_cap(f, CAP_AT + 3 * CAP_LEN, 0, VIRTIO_PCI_CAP_DEVICE_CFG, DEVICE_AT,
            sizeof(WddmGpuConfig), 0);
    /* device features: VERSION_1 (bit 32) in each half */
    put32(f->bar0 + COMMON_AT + VIRTIO_PCI_COMMON_DEVICE_FEATURE, 1);
    put16(f->bar0 + COMMON_AT + VIRTIO_PCI_COMMON_NUM_QUEUES, 1);
    put16(f->bar0 + COMMON_AT + VIRTIO_PCI_COMMON_QUEUE_SIZE, 64); /* the maximum */
    put32(f->bar0 + DEVICE_AT + offsetof(WddmGpuConfig, num_capsets), 1);
    f->hold_type = UINT32_MAX;
}

void fake_set_gpummu(fake *f, const WddmGpuMmuCaps *caps)
{
    f->gpummu = caps;
    f->gpummu_id = WDDM_GPU_MMU_CAPSET_ID;
    f->gpummu_version = WDDM_GPU_MMU_CAPSET_VERSION;
    f->gpummu_max_size = sizeof(WddmGpuMmuCaps);
    f->gpummu_type = VIRTIO_GPU_RESP_OK_CAPSET;
    f->gpummu_short = 0;
    put32(f->bar0 + DEVICE_AT + offsetof(WddmGpuConfig, num_capsets), 2);
}

/* ---- the OS table ---- */

static int dma_alloc(void *ctx, uint64_t size, uint64_t align, wddm_os_dma *out)
{
    fake *f = ctx;
    uint64_t rounded = (size + align - 1) & ~(align - 1);
    void *p = aligned_alloc(align, rounded);
    if (!p)
        return -1;
    memset(p, 0, rounded);
    out->cpu = p;
    out->bus = (uint64_t)(uintptr_t)p;
    out->size = rounded;
    out->os_handle = NULL;
    f->dma_live++;
    return 0;
}

static void dma_free(void *ctx, wddm_os_dma *mem)
{
    fake *f = ctx;
    free(mem->cpu);
    mem->cpu = NULL;
    f->dma_live--;
}

static volatile void *bar_map(void *ctx, uint32_t function, uint32_t bar, uint64_t offset,
                              uint64_t length)
{
    fake *f = ctx;
    if (function != 0 || bar != 0 || offset > FAKE_BAR0_SIZE || length > FAKE_BAR0_SIZE - offset)
        return NULL;
    return f->bar0 + offset;
}

static void bar_unmap(void *ctx, volatile void *va, uint64_t length)
{
    (void)ctx, (void)va, (void)length;
}

static int bar_info(void *ctx, uint32_t function, uint32_t bar, uint64_t *address,
                    uint64_t *size)
{
    fake *f = ctx;
    if (function != 0 || bar != 0)
        return -1;
    *address = (uint64_t)(uintptr_t)f->bar0;
    *size = FAKE_BAR0_SIZE;
    return 0;
}

static int config_read(void *ctx, uint32_t offset, uint32_t width, uint32_t *value)
{
    fake *f = ctx;
    if (offset + width > sizeof(f->config))
        return -1;
    *value = 0;
    memcpy(value, f->config + offset, width); /* little-endian host */
    return 0;
}

static int config_write(void *ctx, uint32_t offset, uint32_t width, uint32_t value)
{
    fake *f = ctx;
    if (offset + width > sizeof(f->config))
        return -1;
    memcpy(f->config + offset, &value, width);
    return 0;
}

static void *lock_create(void *ctx) { return &((fake *)ctx)->lock_held; }
static void lock_acquire(void *ctx, void *lock)
{
    fake *f = ctx;
    if (lock != &f->lock_held || f->lock_held)
        f->lock_misuse++; /* the library's lock is not recursive */
    f->lock_held = 1;
}
static void lock_release(void *ctx, void *lock)
{
    fake *f = ctx;
    if (lock != &f->lock_held || !f->lock_held)
        f->lock_misuse++;
    f->lock_held = 0;
}
static void lock_destroy(void *ctx, void *lock) { (void)ctx, (void)lock; }

static void stall_us(void *ctx, uint32_t us)
{
    fake *f = ctx;
    f->clock_us += us;
    fake_service(f);
}

static uint64_t now_us(void *ctx) { return ((fake *)ctx)->clock_us; }
static void barrier(void *ctx)
{
    (void)ctx;
    atomic_thread_fence(memory_order_seq_cst);
}

static void log_line(void *ctx, int level, const char *message, uint64_t a, uint64_t b)
{
    fake *f = ctx;
    f->last_log = message;
    f->last_log_level = level;
    f->last_log_a = a;
    f->last_log_b = b;
}

wddm_os fake_os_table(fake *f)
{
    wddm_os os = {
        .ctx = f,
        .dma_alloc = dma_alloc,
        .dma_free = dma_free,
        .bar_map = bar_map,
        .bar_unmap = bar_unmap,
        .bar_info = bar_info,
        .config_read = config_read,
        .config_write = config_write,
        .lock_create = lock_create,
        .lock_acquire = lock_acquire,
        .lock_release = lock_release,
        .lock_destroy = lock_destroy,
        .stall_us = stall_us,
        .now_us = now_us,
        .memory_barrier = barrier,
        .interrupt_ack = NULL,
        .log = log_line,
    };
    return os;
}

wddm_result fake_dev_up(fake *f, wddm_dev *dev)
{
    wddm_os os = fake_os_table(f);
    wddm_dev_config config = {.timeout_ms = 10, .queue_size = 64};
    return wddm_dev_init(dev, &os, &config);
}

bool fake_up_valid(fake *f, test_caps *caps, wddm_dev *dev)
{
    caps_valid(caps, 0);
    fake_init(f, caps, sizeof(*caps));
    wddm_result r = fake_dev_up(f, dev);
    CHECK_EQ(r, WDDM_OK);
    return r == WDDM_OK;
}

void fake_down_checked(fake *f, wddm_dev *dev)
{
    wddm_dev_teardown(dev);
    CHECK_EQ(f->dma_live, 0);
    CHECK_EQ(f->lock_misuse, 0);
}

/* ---- the device ---- */

static uint16_t queue_size(fake *f)
{
    uint16_t v;
    memcpy(&v, f->bar0 + COMMON_AT + VIRTIO_PCI_COMMON_QUEUE_SIZE, 2);
    return v;
}

volatile uint16_t *fake_used_idx(fake *f)
{
    volatile uint8_t *used = ptr(bar_u64(f, COMMON_AT + VIRTIO_PCI_COMMON_QUEUE_DEVICE));
    return (volatile uint16_t *)(used + VIRTQ_RING_IDX_OFFSET);
}

void fake_push_used(fake *f, uint32_t id, uint32_t len)
{
    volatile uint16_t *idx = fake_used_idx(f);
    volatile WddmGpuVirtqUsedElem *ring =
        (volatile WddmGpuVirtqUsedElem *)((volatile uint8_t *)idx - VIRTQ_RING_IDX_OFFSET +
                                          VIRTQ_RING_ENTRIES_OFFSET);
    uint16_t at = (uint16_t)(*idx & (queue_size(f) - 1));
    ring[at].id = id;
    ring[at].len = len;
    atomic_thread_fence(memory_order_seq_cst);
    *idx = (uint16_t)(*idx + 1);
}

void fake_answer_held(fake *f, uint32_t i, uint32_t len)
{
    fake_push_used(f, f->held[i].head, len);
    f->held[i] = f->held[--f->held_count];
}

void fake_answer_held_with(fake *f, uint32_t i, const void *resp, uint32_t size, uint32_t len)
{
    memcpy((void *)f->held[i].resp, resp, size);
    fake_answer_held(f, i, len);
}

/* A submission completed: the fence and the status page say so. */
static void complete(fake *f, uint32_t fence)
{
    f->last_fence = fence;
    if (f->status_page) {
        volatile WddmGpuStatusPage *page = f->status_page;
        page->completed_fence = fence;
        page->submissions_completed++;
    }
}

/* The held request of `type` that came first (for SUBMIT: one the node holds; lost ones only
 * when `only_lost`), or -1. */
static int oldest_held(fake *f, uint32_t type, bool only_lost)
{
    int best = -1;
    for (uint32_t i = 0; i < f->held_count; i++)
        if (f->held[i].type == type && (type != WDDM_GPU_CMD_SUBMIT || f->held[i].node) &&
            (!only_lost || f->held[i].lost) &&
            (best < 0 || f->held[i].seq < f->held[best].seq))
            best = (int)i;
    return best;
}

/* Answers the held SUBMITs in order (withheld ones OK, the others `status`); how many. */
static uint32_t release_submits(fake *f, bool only_lost, uint32_t status)
{
    uint32_t n = 0;
    for (int i; (i = oldest_held(f, WDDM_GPU_CMD_SUBMIT, only_lost)) >= 0; n++) {
        WddmGpuRespSubmit out = {0};
        out.hdr.type_ = WDDM_GPU_RESP_SUBMIT;
        out.submission_fence_id = f->held[i].fence;
        out.status = f->held[i].lost ? WDDM_GPU_SUBMIT_STATUS_OK : status;
        fake_answer_held_with(f, (uint32_t)i, &out, sizeof(out), sizeof(out));
    }
    return n;
}

/* QUERY_ENGINE_STATUS as the device answers it. */
static uint32_t engine_status(fake *f, const uint8_t *req, volatile uint8_t *resp)
{
    WddmGpuCmdQueryEngineStatus q;
    WddmGpuRespEngineStatus out = {0};
    memcpy(&q, req, sizeof(q));
    f->queries++;
    if (q.node_ordinal != WDDM_GPU_NODE_PAGING || q.reserved) {
        WddmGpuCtrlHdr hdr = {.type_ = VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER};
        memcpy((void *)resp, &hdr, sizeof(hdr));
        return sizeof(hdr);
    }
    out.released = release_submits(f, true, 0) + f->released_lie;
    int running = oldest_held(f, WDDM_GPU_CMD_SUBMIT, false);
    out.hdr.type_ = WDDM_GPU_RESP_ENGINE_STATUS;
    out.node_ordinal = q.node_ordinal + f->status_node_delta;
    out.flags = running >= 0 ? 0 : WDDM_GPU_ENGINE_STATUS_RESPONSIVE;
    out.current_fence = f->last_fence;
    if (running >= 0) {
        out.running_fence = f->held[running].fence;
        for (uint32_t i = 0; i < f->held_count; i++)
            out.queued += f->held[i].type == WDDM_GPU_CMD_SUBMIT && f->held[i].node;
        out.queued--;
    }
    memcpy((void *)resp, &out, sizeof(out));
    return sizeof(out);
}

/* RESET as the device does it: submissions back, WAIT_EVENTs cancelled, the page unregistered. */
static void reset_node(fake *f)
{
    f->resets++;
    release_submits(f, false, WDDM_GPU_SUBMIT_STATUS_RESET);
    for (int i; (i = oldest_held(f, WDDM_GPU_CMD_WAIT_EVENT, false)) >= 0;) {
        WddmGpuRespEvent ev = {0};
        ev.hdr.type_ = WDDM_GPU_RESP_EVENT;
        ev.kind = WDDM_GPU_EVENT_CANCELLED;
        fake_answer_held_with(f, (uint32_t)i, &ev, sizeof(ev), sizeof(ev));
    }
    f->hang_submits = f->lose_submits = false;
    f->status_page = NULL;
}

/* Writes the answer to one request; returns its length. */
static uint32_t answer(fake *f, uint32_t type, const uint8_t *req, volatile uint8_t *resp)
{
    WddmGpuCtrlHdr hdr = {0};
    switch (type) {
    case VIRTIO_GPU_CMD_GET_CAPSET_INFO: {
        WddmGpuGetCapsetInfo q;
        WddmGpuRespCapsetInfo info = {0};
        memcpy(&q, req, sizeof(q));
        info.hdr.type_ = VIRTIO_GPU_RESP_OK_CAPSET_INFO;
        if (q.capset_index == 1 && f->gpummu) {
            info.capset_id = f->gpummu_id;
            info.capset_max_version = f->gpummu_version;
            info.capset_max_size = f->gpummu_max_size;
        } else if (q.capset_index == 0) {
            info.capset_id = WDDM_GPU_CAPSET_ID;
            info.capset_max_version = WDDM_GPU_CAPSET_VERSION;
            info.capset_max_size = f->capset_size;
        } else {
            hdr.type_ = VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER;
            break;
        }
        memcpy((void *)resp, &info, sizeof(info));
        return sizeof(info);
    }
    case VIRTIO_GPU_CMD_GET_CAPSET: {
        WddmGpuGetCapset q;
        memcpy(&q, req, sizeof(q));
        if (q.capset_id == WDDM_GPU_MMU_CAPSET_ID) {
            if (!f->gpummu) {
                hdr.type_ = VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER;
                break;
            }
            hdr.type_ = f->gpummu_type;
            memcpy((void *)resp, &hdr, sizeof(hdr));
            memcpy((void *)(resp + sizeof(hdr)), f->gpummu, sizeof(*f->gpummu));
            f->gpummu_reads++;
            return (uint32_t)(sizeof(hdr) + sizeof(*f->gpummu)) - f->gpummu_short;
        }
        bool later = f->capset_later && f->clock_us >= f->capset_later_at_us;
        hdr.type_ = VIRTIO_GPU_RESP_OK_CAPSET;
        memcpy((void *)resp, &hdr, sizeof(hdr));
        memcpy((void *)(resp + sizeof(hdr)), later ? f->capset_later : f->capset, f->capset_size);
        f->capset_reads++;
        return (uint32_t)sizeof(hdr) + f->capset_size;
    }
    case WDDM_GPU_CMD_REGISTER_STATUS_PAGE: {
        WddmGpuCmdRegisterStatusPage r;
        memcpy(&r, req, sizeof(r));
        f->status_page = ptr(r.address);
        if (f->status_page) {
            WddmGpuStatusPage page = {0};
            page.magic = 0x50534457u;
            page.version = WDDM_GPU_STATUS_VERSION;
            page.fault_ring_offset = WDDM_GPU_FAULT_RING_OFFSET;
            page.fault_ring_entries = WDDM_GPU_FAULT_RING_ENTRIES;
            memcpy(f->status_page, &page, sizeof(page));
        }
        break;
    }
    case WDDM_GPU_CMD_SUBMIT: {
        WddmGpuCmdSubmit s;
        WddmGpuRespSubmit out = {0};
        memcpy(&s, req, sizeof(s));
        out.hdr.type_ = WDDM_GPU_RESP_SUBMIT;
        out.submission_fence_id = s.submission_fence_id;
        complete(f, s.submission_fence_id);
        memcpy((void *)resp, &out, sizeof(out));
        return sizeof(out);
    }
    case WDDM_GPU_CMD_QUERY_ENGINE_STATUS:
        return engine_status(f, req, resp);
    case WDDM_GPU_CMD_RESET:
        reset_node(f);
        break;
    case WDDM_GPU_CMD_CREATE_CONTEXT:
    case WDDM_GPU_CMD_DESTROY_CONTEXT:
    case WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE:
    case WDDM_GPU_CMD_RESET_ENGINE:
        f->last_context_type = type;
        memcpy(f->last_context_req, req, sizeof(f->last_context_req));
        f->context_requests++;
        hdr.type_ = f->context_type ? f->context_type : VIRTIO_GPU_RESP_OK_NODATA;
        memcpy((void *)resp, &hdr, sizeof(hdr));
        return (uint32_t)sizeof(hdr) - f->context_short;
    case WDDM_GPU_CMD_SUBMIT_VIRTUAL: {
        WddmGpuCmdSubmitVirtual s;
        WddmGpuRespSubmitVirtual out = {0};
        memcpy(&s, req, sizeof(s));
        f->last_context_type = type;
        memcpy(f->last_context_req, req, sizeof(f->last_context_req));
        f->context_requests++;
        out.hdr.type_ = f->virtual_type ? f->virtual_type : WDDM_GPU_RESP_SUBMIT_VIRTUAL;
        out.submission_fence_id = s.submission_fence_id + f->virtual_fence_delta;
        out.status = f->virtual_status;
        if (out.status == WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT)
            out.page_fault = f->virtual_fault;
        memcpy((void *)resp, &out, sizeof(out));
        return (uint32_t)sizeof(out) - f->virtual_short;
    }
    case WDDM_GPU_CMD_PREEMPT: {
        WddmGpuRespPreempt out = {0};
        out.hdr.type_ = WDDM_GPU_RESP_PREEMPT;
        memcpy((void *)resp, &out, sizeof(out));
        return sizeof(out);
    }
    default:
        break;
    }
    if (hdr.type_ == 0)
        hdr.type_ = VIRTIO_GPU_RESP_OK_NODATA;
    memcpy((void *)resp, &hdr, sizeof(hdr));
    return sizeof(hdr);
}

void fake_service(fake *f)
{
    uint64_t desc_bus = bar_u64(f, COMMON_AT + VIRTIO_PCI_COMMON_QUEUE_DESC);
    if (!desc_bus)
        return; /* no queue yet */
    volatile WddmGpuVirtqDesc *table = ptr(desc_bus);
    volatile uint8_t *avail = ptr(bar_u64(f, COMMON_AT + VIRTIO_PCI_COMMON_QUEUE_DRIVER));
    volatile uint16_t *avail_idx = (volatile uint16_t *)(avail + VIRTQ_RING_IDX_OFFSET);
    volatile uint16_t *avail_ring = (volatile uint16_t *)(avail + VIRTQ_RING_ENTRIES_OFFSET);
    uint16_t size = queue_size(f);
    while (f->seen_avail != *avail_idx) {
        uint16_t head = avail_ring[f->seen_avail & (size - 1)];
        f->seen_avail++;
        const uint8_t *req = ptr(table[head].addr);
        uint16_t in = table[head].next;
        volatile uint8_t *resp = ptr(table[in].addr);
        uint32_t type;
        memcpy(&type, req, 4);
        bool node_holds = type == WDDM_GPU_CMD_SUBMIT && (f->hang_submits || f->lose_submits);
        if (type == f->hold_type || type == WDDM_GPU_CMD_WAIT_EVENT || node_holds) {
            uint32_t fence = 0;
            if (type == WDDM_GPU_CMD_SUBMIT) {
                WddmGpuCmdSubmit s;
                memcpy(&s, req, sizeof(s));
                fence = s.submission_fence_id;
            }
            bool lost = node_holds && !f->hang_submits;
            if (lost)
                complete(f, fence);
            if (f->held_count < FAKE_HELD_MAX)
                f->held[f->held_count++] =
                    (fake_request){.head = head, .type = type, .resp = resp,
                                   .resp_cap = table[in].len, .seq = f->held_seq++,
                                   .fence = fence, .node = node_holds, .lost = lost};
            continue;
        }
        fake_push_used(f, head, answer(f, type, req, resp));
    }
    for (uint32_t i = 0; f->release_at_us && f->clock_us >= f->release_at_us && i < f->held_count;) {
        fake_request *h = &f->held[i];
        if (h->type != f->hold_type) {
            i++;
            continue;
        }
        uint8_t req[WDDM_SLOT_SIZE / 2] = {0}; /* the type; every request body reads as 0 */
        memcpy(req, &h->type, 4);
        fake_answer_held(f, i, answer(f, h->type, req, h->resp));
    }
}
