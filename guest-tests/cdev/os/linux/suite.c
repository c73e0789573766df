/* wddm-cdev-suite: drives the real device through the C library and its Linux OS layer and
 * prints one "GUEST-TEST c_<name> PASS|FAIL <detail>" line per check (the format scripts/test
 * counts), then "GUEST-CSUMMARY <passed>/<total>". Exit code 1 when a check failed. */

#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "linux_os.h"
#include "wddm_gpu_dev.h"

static int passed, total;
static wddm_os table;
static linux_os los;
static wddm_dev dev;
static const wddm_segment *vram, *aperture;
static volatile uint8_t *vram_cpu; /* the first 4 MiB of the VRAM segment through the BAR */
#define VRAM_WINDOW (4u << 20)
static uint32_t next_fence = 1000;

static void report(const char *name, int ok, const char *fmt, ...)
{
    char detail[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    total++;
    passed += ok != 0;
    printf("GUEST-TEST c_%s %s %s\n", name, ok ? "PASS" : "FAIL", detail);
    fflush(stdout);
}

/* A paging buffer in DMA memory. */
typedef struct buffer {
    wddm_os_dma mem;
    wddm_pb pb;
} buffer;

static int new_buffer(buffer *b, uint32_t size)
{
    if (table.dma_alloc(table.ctx, size, 4096, &b->mem) != 0)
        return -1;
    return wddm_pb_init(&b->pb, wddm_dev_layout(&dev), b->mem.cpu, size) == WDDM_OK ? 0 : -1;
}

/* The paging submission of buffer `b` with fence `fence`. */
static wddm_submit paging_submission(buffer *b, uint32_t fence)
{
    wddm_submit s = {b->mem.bus, 0, WDDM_GPU_SUBMIT_FLAG_PAGING, (uint32_t)b->mem.size, 0,
                     b->pb.used, fence};
    return s;
}

static wddm_result submit(buffer *b, uint32_t fence)
{
    wddm_submit s = paging_submission(b, fence);
    return wddm_dev_submit(&dev, &s);
}

/* Polls the device once, then takes the next completion: WDDM_E_EMPTY while none came. */
static wddm_result poll_completion(WddmGpuRespSubmit *out)
{
    wddm_result r = wddm_dev_poll(&dev);
    return r ? r : wddm_dev_next_completion(&dev, out);
}

/* Polls until a completion arrives (10 s). */
static wddm_result wait_completion(WddmGpuRespSubmit *out)
{
    for (int i = 0; i < 50000; i++) {
        wddm_result r = poll_completion(out);
        if (r != WDDM_E_EMPTY)
            return r;
        table.stall_us(table.ctx, 200);
    }
    return WDDM_E_TIMEOUT;
}

/* Submits and waits: the completion's status, or -1 with `why` set. */
static long run(buffer *b, WddmGpuRespSubmit *resp, const char **why)
{
    uint32_t fence = ++next_fence;
    wddm_result r = submit(b, fence);
    if (!r)
        r = wait_completion(resp);
    if (r) {
        *why = wddm_result_name(r);
        return -1;
    }
    if (resp->submission_fence_id != fence) {
        *why = "completion for another fence";
        return -1;
    }
    return resp->status;
}

/* Brings the device up and waits for its VRAM BAR; whether the other tests can run. */
static bool test_init(void)
{
    wddm_dev_config config = {0};
    wddm_result r = wddm_dev_init(&dev, &table, &config);
    report("device_init", r == WDDM_OK, "%s: %s features %#" PRIx64 " queue size %u", los.bdf,
           wddm_result_name(r), dev.device_features, dev.ctrl.size);
    if (r != WDDM_OK)
        return false;
    /* Mode 2's BAR is mapped some time after DRIVER_OK: wait for it, as a KMD's StartDevice
     * must, before any check reads the locator. */
    uint32_t reads = 0;
    uint64_t start = table.now_us(table.ctx);
    r = wddm_dev_wait_bar_known(&dev, 10000, &reads);
    report("bar_known", r == WDDM_OK, "%s after %u capset read(s), %" PRIu64 " ms (BAR mode %u)",
           wddm_result_name(r), reads, (table.now_us(table.ctx) - start) / 1000,
           wddm_dev_layout(&dev)->header.vram_bar.mode);
    return true;
}

static void test_segments(void)
{
    const wddm_layout *l = wddm_dev_layout(&dev);
    uint32_t function, bar;
    uint64_t region, bar_addr = 0, bar_size = 0;
    char why[200] = "";
    for (uint32_t id = 1; id <= l->segment_count; id++) {
        const wddm_segment *s = wddm_layout_segment(l, id);
        if (!aperture && wddm_segment_is_aperture(s))
            aperture = s;
        if (!vram && !wddm_segment_is_aperture(s) && s->desc.bar_offset != WDDM_GPU_NO_BAR_OFFSET)
            vram = s;
    }
    if (!vram || !aperture) {
        report("capset_segments", 0, "layout lacks a CPU-visible segment or an aperture");
        return;
    }
    if (wddm_dev_vram_location(&dev, &function, &bar, &region) != WDDM_OK ||
        table.bar_info(table.ctx, function, bar, &bar_addr, &bar_size) != 0) {
        report("capset_segments", 0, "VRAM BAR (mode %u function %u BAR %u) not found",
               l->header.vram_bar.mode, l->header.vram_bar.pci_function,
               l->header.vram_bar.bar_index);
        return;
    }
    uint64_t want_cpu = bar_addr + region + vram->desc.bar_offset;
    uint64_t got_cpu = 0;
    const char *which;
    uint32_t nb = 0;
    if (l->header.wddm_version == WDDM_GPU_WDDM_1_3) {
        wddm_dxgk_segmentdescriptor3 d[WDDM_MAX_SEGMENTS];
        wddm_dxgk_querysegmentout3 q = {0};
        which = "DXGK_QUERYSEGMENTOUT3";
        if (wddm_layout_query_segment3(l, &q) || q.NbSegment != l->segment_count)
            snprintf(why, sizeof(why), "first call NbSegment %u", q.NbSegment);
        q.pSegmentDescriptor = d;
        if (!why[0] && wddm_layout_query_segment3(l, &q))
            snprintf(why, sizeof(why), "second call refused");
        nb = q.NbSegment;
        for (uint32_t i = 0; !why[0] && i < nb; i++) {
            const WddmGpuSegmentDesc *c = &l->segments[i].desc;
            if (d[i].Flags.Value != c->flags || d[i].Size != c->size ||
                d[i].BaseAddress != c->base_address || d[i].NbOfBanks != c->bank_count ||
                d[i].CommitLimit != c->commit_limit)
                snprintf(why, sizeof(why), "descriptor %u differs from the capset", i + 1);
        }
        got_cpu = d[vram->desc.id - 1].CpuTranslatedAddress;
        if (!why[0] && q.PagingBufferSize != l->header.paging_buffer_size)
            snprintf(why, sizeof(why), "PagingBufferSize %u", q.PagingBufferSize);
    } else {
        wddm_dxgk_segmentdescriptor4 d[WDDM_MAX_SEGMENTS];
        wddm_dxgk_querysegmentout4 q = {0};
        which = "DXGK_QUERYSEGMENTOUT4";
        if (wddm_layout_query_segment4(l, &q) || q.NbSegment != l->segment_count ||
            q.SegmentDescriptorStride != sizeof(d[0]))
            snprintf(why, sizeof(why), "first call NbSegment %u stride %" PRIu64, q.NbSegment,
                     q.SegmentDescriptorStride);
        q.pSegmentDescriptor = (uint8_t *)d;
        if (!why[0] && wddm_layout_query_segment4(l, &q))
            snprintf(why, sizeof(why), "second call refused");
        nb = q.NbSegment;
        for (uint32_t i = 0; !why[0] && i < nb; i++) {
            const WddmGpuSegmentDesc *c = &l->segments[i].desc;
            if (d[i].Flags.Value != c->flags || d[i].Size != c->size ||
                d[i].BaseAddress != c->base_address || d[i].CommitLimit != c->commit_limit)
                snprintf(why, sizeof(why), "descriptor %u differs from the capset", i + 1);
        }
        got_cpu = d[vram->desc.id - 1].CpuTranslatedAddress;
    }
    if (!why[0] && l->header.vram_bar.state != WDDM_GPU_BAR_STATE_KNOWN)
        snprintf(why, sizeof(why), "VRAM BAR locator not KNOWN (state %u)",
                 l->header.vram_bar.state);
    if (!why[0] && got_cpu != want_cpu)
        snprintf(why, sizeof(why), "CpuTranslatedAddress %#" PRIx64 " != sysfs BAR %#" PRIx64
                 " + region %#" PRIx64 " + bar_offset %#" PRIx64, got_cpu, bar_addr, region,
                 vram->desc.bar_offset);
    report("capset_segments", !why[0],
           "%s wddm_version %#06x NbSegment %u, segment %u CpuTranslatedAddress %#" PRIx64
           " (BAR mode %u, sysfs %#" PRIx64 " + %#" PRIx64 ")%s%s",
           which, l->header.wddm_version, nb, vram->desc.id, got_cpu, l->header.vram_bar.mode,
           bar_addr, region, why[0] ? ": " : "", why);
    if (!why[0] && vram->desc.size >= VRAM_WINDOW)
        vram_cpu = wddm_dev_map_segment(&dev, vram->desc.id, 0, VRAM_WINDOW);
}

static void test_fill(void)
{
    buffer b;
    WddmGpuRespSubmit resp;
    const char *why = "";
    const uint64_t off = 0x10003, len = (64u << 10) + 5;
    const uint32_t pattern = 0xC0DE5A17u;
    if (!vram_cpu || new_buffer(&b, 4096)) {
        report("fill_vram", 0, "no VRAM mapping or DMA memory");
        return;
    }
    for (uint64_t i = 0; i < len + 16; i++)
        vram_cpu[off - 8 + i] = 0x11;
    wddm_op_fill op = {pattern, vram->desc.id, vram->desc.base_address + off, len};
    wddm_result r = wddm_pb_fill(&b.pb, &op);
    long st = r ? -1 : run(&b, &resp, &why);
    int ok = st == WDDM_GPU_SUBMIT_STATUS_OK;
    uint64_t bad = 0;
    for (uint64_t i = 0; ok && i < len; i++) {
        uint8_t want = (uint8_t)(pattern >> (8 * (i % 4)));
        if (vram_cpu[off + i] != want) {
            ok = 0;
            bad = off + i;
        }
    }
    for (int g = 0; ok && g < 8; g++)
        if (vram_cpu[off - 8 + g] != 0x11 || vram_cpu[off + len + g] != 0x11) {
            ok = 0;
            bad = UINT64_MAX;
        }
    report("fill_vram", ok, "FILL %#x x %#" PRIx64 " bytes at segment %u + %#" PRIx64
           ": status %ld %s, BAR read back %s (first bad %#" PRIx64 ")", pattern, len,
           vram->desc.id, off, st, r ? wddm_result_name(r) : why, ok ? "matches" : "differs",
           bad);
}

/* Guest pages: `pages` 4 KiB pages of DMA memory and their PFN list. */
typedef struct pages {
    wddm_os_dma data, pfns;
    uint32_t count;
} pages;

static int new_pages(pages *p, uint32_t count)
{
    if (table.dma_alloc(table.ctx, (uint64_t)count * 4096, 4096, &p->data) ||
        table.dma_alloc(table.ctx, (uint64_t)count * 8, 4096, &p->pfns))
        return -1;
    uint64_t *pfn = p->pfns.cpu;
    /* Reverse order: the list, not contiguity, must decide where data goes. */
    for (uint32_t i = 0; i < count; i++)
        pfn[i] = (p->data.bus >> 12) + (count - 1 - i);
    p->count = count;
    return 0;
}

static uint8_t *page_byte(pages *p, uint64_t offset)
{
    uint64_t page = offset / 4096;
    return (uint8_t *)p->data.cpu + (p->count - 1 - page) * 4096 + offset % 4096;
}

static wddm_pfn_list pfn_list(const pages *p)
{
    wddm_pfn_list l = {p->pfns.bus, p->count, 0};
    return l;
}

static void test_aperture(void)
{
    enum { N = 4 };
    const uint64_t len = N * 4096 - 100, voff = 0x200000;
    pages src, dst;
    buffer b, u;
    WddmGpuRespSubmit resp;
    const char *why = "";
    if (!vram_cpu || new_pages(&src, N) || new_pages(&dst, N) || new_buffer(&b, 4096) ||
        new_buffer(&u, 4096)) {
        report("aperture_transfer", 0, "no VRAM mapping or DMA memory");
        report("aperture_unmap", 0, "not run");
        return;
    }
    for (uint64_t i = 0; i < len; i++)
        *page_byte(&src, i) = (uint8_t)(i * 7 + 3);
    memset(dst.data.cpu, 0xee, N * 4096);
    const uint64_t first_page = 16;
    wddm_op_map_aperture map = {aperture->desc.id, 0, first_page, N, pfn_list(&src), 0, 0};
    wddm_op_transfer to_vram = {0};
    to_vram.TransferSize = len;
    to_vram.Source.SegmentId = aperture->desc.id;
    to_vram.Source.SegmentAddress = aperture->desc.base_address + first_page * 4096;
    to_vram.Destination.SegmentId = vram->desc.id;
    to_vram.Destination.SegmentAddress = vram->desc.base_address + voff;
    wddm_op_transfer to_sys = {0};
    to_sys.TransferSize = len;
    to_sys.Source.SegmentId = vram->desc.id;
    to_sys.Source.SegmentAddress = vram->desc.base_address + voff;
    to_sys.Destination.Mdl = pfn_list(&dst);
    wddm_result r;
    if ((r = wddm_pb_map_aperture(&b.pb, &map)) || (r = wddm_pb_transfer(&b.pb, &to_vram)) ||
        (r = wddm_pb_transfer(&b.pb, &to_sys))) {
        report("aperture_transfer", 0, "builder refused: %s", wddm_result_name(r));
        return;
    }
    long st = run(&b, &resp, &why);
    int ok = st == WDDM_GPU_SUBMIT_STATUS_OK && resp.packets_completed == 3;
    uint64_t bad = UINT64_MAX;
    for (uint64_t i = 0; ok && i < len; i++)
        if (*page_byte(&dst, i) != (uint8_t)(i * 7 + 3) || vram_cpu[voff + i] != (uint8_t)(i * 7 + 3)) {
            ok = 0;
            bad = i;
        }
    report("aperture_transfer", ok, "MAP %u pages (reversed PFN list) at aperture page %" PRIu64
           ", TRANSFER aperture->VRAM->guest pages %#" PRIx64 " bytes: status %ld %s, packets %u, "
           "data %s (first bad %#" PRIx64 ")", N, first_page, len, st, why, resp.packets_completed,
           ok ? "identical in VRAM and the destination pages" : "differs", bad);

    wddm_op_unmap_aperture unmap = {aperture->desc.id, 0, first_page, N, dst.data.bus};
    if ((r = wddm_pb_unmap_aperture(&u.pb, &unmap)) || (r = wddm_pb_transfer(&u.pb, &to_vram))) {
        report("aperture_unmap", 0, "builder refused: %s", wddm_result_name(r));
        return;
    }
    /* After the unmap the aperture pages read the dummy page (dst's first page in memory,
     * which is its last in list order). */
    st = run(&u, &resp, &why);
    ok = st == WDDM_GPU_SUBMIT_STATUS_OK;
    const uint8_t *dummy = dst.data.cpu;
    for (uint64_t i = 0; ok && i < 4096; i++)
        if (vram_cpu[voff + i] != dummy[i])
            ok = 0;
    report("aperture_unmap", ok, "UNMAP %u pages to a dummy page, then TRANSFER from them: status "
           "%ld %s, VRAM %s the dummy page", N, st, why, ok ? "holds" : "does not hold");
}

static void test_fences(void)
{
    enum { N = 5 };
    buffer b[N];
    uint32_t fences[N];
    WddmGpuRespSubmit resp;
    char why[200] = "";
    for (int i = 0; i < N && !why[0]; i++) {
        fences[i] = ++next_fence;
        if (new_buffer(&b[i], 4096) || wddm_pb_fence(&b[i].pb, fences[i]) ||
            submit(&b[i], fences[i]))
            snprintf(why, sizeof(why), "submission %d refused", i);
    }
    for (int i = 0; i < N && !why[0]; i++) {
        wddm_result r = wait_completion(&resp);
        if (r)
            snprintf(why, sizeof(why), "completion %d: %s", i, wddm_result_name(r));
        else if (resp.submission_fence_id != fences[i] || resp.status != 0)
            snprintf(why, sizeof(why), "completion %d: fence %u status %u, expected fence %u",
                     i, resp.submission_fence_id, resp.status, fences[i]);
    }
    WddmGpuStatusPage st = {0};
    if (!why[0] && wddm_dev_status(&dev, &st) == WDDM_OK && st.completed_fence != fences[N - 1])
        snprintf(why, sizeof(why), "status page completed_fence %u", st.completed_fence);
    report("fences_in_order", !why[0], "%d submissions with FENCE packets %u..%u completed in "
           "order, last completed fence %u, status page %u%s%s", N, fences[0], fences[N - 1],
           wddm_dev_last_completed_fence(&dev), st.completed_fence, why[0] ? ": " : "", why);
}

static void test_fault(void)
{
    buffer b, g;
    WddmGpuRespSubmit resp;
    const char *why = "";
    if (new_buffer(&b, 4096) || new_buffer(&g, 4096)) {
        report("fault_record", 0, "no DMA memory");
        return;
    }
    wddm_pb_fence(&b.pb, 1); /* one good packet first: the fault is at offset 16 */
    WddmGpuPacketHeader hostile[4] = {{0x77, 0, 32}};
    wddm_pb_raw(&b.pb, hostile, sizeof(hostile));
    long st = run(&b, &resp, &why);
    WddmGpuFaultRecord rec = {0};
    wddm_result fr = wddm_dev_next_fault(&dev, &rec);
    int ok = st == WDDM_GPU_SUBMIT_STATUS_UNKNOWN_OPCODE && resp.fault_packet_offset == 16 &&
             fr == WDDM_OK && rec.status == WDDM_GPU_SUBMIT_STATUS_UNKNOWN_OPCODE &&
             rec.opcode == 0x77 && rec.packet_offset == 16 && rec.fence_id == resp.submission_fence_id;
    wddm_pb_fence(&g.pb, 2);
    WddmGpuRespSubmit after;
    long st2 = run(&g, &after, &why);
    ok = ok && st2 == WDDM_GPU_SUBMIT_STATUS_OK;
    report("fault_record", ok, "opcode 0x77 at offset 16: status %ld fault_packet_offset %u; fault "
           "record %s (seq %" PRIu64 " fence %u offset %u status %u opcode %#x); next submission "
           "status %ld", st, resp.fault_packet_offset, wddm_result_name(fr), rec.sequence,
           rec.fence_id, rec.packet_offset, rec.status, rec.opcode, st2);
}

/* Polls up to 5 s for an event of `kind`; other kinds are counted in `others`. */
static int wait_event(uint32_t kind, WddmGpuRespEvent *ev, int *others)
{
    for (int i = 0; i < 25000; i++) {
        if (wddm_dev_poll(&dev))
            return 0;
        while (wddm_dev_next_event(&dev, ev) == WDDM_OK) {
            if (ev->kind == kind)
                return 1;
            ++*others;
        }
        table.stall_us(table.ctx, 200);
    }
    return 0;
}

static void test_event(void)
{
    buffer b;
    WddmGpuRespSubmit resp;
    WddmGpuRespEvent ev = {0};
    const char *why = "";
    int others = 0;
    wddm_result r = wddm_dev_post_events(&dev, 4);
    uint32_t fence = 0x5eed;
    if (r || new_buffer(&b, 4096) || wddm_pb_fence(&b.pb, fence)) {
        report("wait_event", 0, "posting WAIT_EVENT: %s", wddm_result_name(r));
        return;
    }
    long st = run(&b, &resp, &why);
    int got = wait_event(WDDM_GPU_EVENT_FENCE, &ev, &others);
    report("wait_event", st == 0 && got && ev.fence_id == fence, "4 WAIT_EVENT posted, FENCE "
           "packet %#x: submission status %ld, FENCE event %s with fence %#x (%d other events "
           "before it)", fence, st, got ? "received" : "missing", ev.fence_id, others);
}

/* A submission long enough to be caught running: TRANSFERs VRAM -> VRAM of 1 MiB each. */
static int long_buffer(buffer *b, int copies)
{
    if (new_buffer(b, 64 << 10))
        return -1;
    uint64_t half = vram->desc.size / 2 < (8u << 20) ? vram->desc.size / 2 : (8u << 20);
    for (int i = 0; i < copies; i++) {
        wddm_op_transfer t = {0};
        t.TransferSize = half / 2;
        t.Source.SegmentId = vram->desc.id;
        t.Source.SegmentAddress = vram->desc.base_address;
        t.Destination.SegmentId = vram->desc.id;
        t.Destination.SegmentAddress = vram->desc.base_address + half;
        if (wddm_pb_transfer(&b->pb, &t))
            return -1;
    }
    return 0;
}

static void test_preempt(void)
{
    enum { N = 3 };
    buffer b[N];
    uint32_t fences[N];
    char why[200] = "";
    for (int i = 0; i < N && !why[0]; i++) {
        fences[i] = ++next_fence;
        if (long_buffer(&b[i], 64) || submit(&b[i], fences[i]))
            snprintf(why, sizeof(why), "submission %d refused", i);
    }
    WddmGpuRespPreempt p = {0};
    wddm_result r = why[0] ? WDDM_OK : wddm_dev_preempt(&dev, &p);
    if (r)
        snprintf(why, sizeof(why), "PREEMPT: %s", wddm_result_name(r));
    uint32_t preempted = 0, first_preempted = 0;
    for (int i = 0; i < N && !why[0]; i++) {
        WddmGpuRespSubmit c;
        r = wait_completion(&c);
        if (r || c.submission_fence_id != fences[i])
            snprintf(why, sizeof(why), "completion %d: %s fence %u", i, wddm_result_name(r),
                     c.submission_fence_id);
        else if (c.status == WDDM_GPU_SUBMIT_STATUS_PREEMPTED) {
            if (!preempted++)
                first_preempted = c.submission_fence_id;
        } else if (c.status != 0 || preempted)
            snprintf(why, sizeof(why), "completion %d status %u after %u preempted", i,
                     c.status, preempted);
    }
    if (!why[0] && (p.preempted_count != preempted ||
                    (preempted && p.preempted_fence != first_preempted) ||
                    (!preempted && p.preempted_fence != 0)))
        snprintf(why, sizeof(why), "answer says %u preempted from fence %u, completions %u from %u",
                 p.preempted_count, p.preempted_fence, preempted, first_preempted);
    report("preempt", !why[0], "3 long submissions then PREEMPT: preempted_fence %u "
           "last_completed_fence %u preempted_count %u, completions agree%s%s", p.preempted_fence,
           p.last_completed_fence, p.preempted_count, why[0] ? ": " : "", why);
}

static void test_reset(void)
{
    buffer b, g;
    uint32_t fence = ++next_fence;
    char why[200] = "";
    int cancelled = 0;
    if (long_buffer(&b, 64) || new_buffer(&g, 4096) || submit(&b, fence))
        snprintf(why, sizeof(why), "setup failed");
    wddm_result r = why[0] ? WDDM_OK : wddm_dev_reset(&dev);
    if (r)
        snprintf(why, sizeof(why), "RESET: %s", wddm_result_name(r));
    WddmGpuRespSubmit c = {0};
    if (!why[0] && ((r = wait_completion(&c)) || c.submission_fence_id != fence ||
                    (c.status != WDDM_GPU_SUBMIT_STATUS_RESET && c.status != 0)))
        snprintf(why, sizeof(why), "running submission: %s fence %u status %u",
                 wddm_result_name(r), c.submission_fence_id, c.status);
    /* Every posted WAIT_EVENT comes back CANCELLED. */
    for (int i = 0; i < 25000 && !why[0] && wddm_dev_events_posted(&dev); i++) {
        wddm_dev_poll(&dev);
        table.stall_us(table.ctx, 200);
    }
    WddmGpuRespEvent ev;
    while (wddm_dev_next_event(&dev, &ev) == WDDM_OK)
        cancelled += ev.kind == WDDM_GPU_EVENT_CANCELLED;
    if (!why[0] && (wddm_dev_events_posted(&dev) || cancelled == 0))
        snprintf(why, sizeof(why), "%u WAIT_EVENTs still posted, %d cancelled",
                 wddm_dev_events_posted(&dev), cancelled);
    /* The device works afterwards, and VRAM kept its contents (fill_vram's pattern). */
    const char *w = "";
    WddmGpuRespSubmit after;
    wddm_pb_fence(&g.pb, 7);
    long st = why[0] ? -1 : run(&g, &after, &w);
    if (!why[0] && st != 0)
        snprintf(why, sizeof(why), "submission after RESET: status %ld %s", st, w);
    if (!why[0] && vram_cpu && vram_cpu[0x10003] != 0x17)
        snprintf(why, sizeof(why), "VRAM lost its contents (%#x)", vram_cpu[0x10003]);
    report("reset", !why[0], "RESET during a long submission: it completed with status %u, %d "
           "WAIT_EVENTs CANCELLED, next submission OK, VRAM kept%s%s", c.status, cancelled,
           why[0] ? ": " : "", why);
}

/* ---- tdr mode: timeout detection and recovery through the library (wddm-cdev-suite tdr) ----
 * After the Rust driver's `tdr` scenario in the same boot, with the same host helper: at each
 * sync point ("GUEST-SYNC <point>" on the console, the answer read from /dev/ttyS1) the host
 * arms an injection with `vhost-user-wddm-gpu ctl`; the library's recovery calls then handle
 * it as a KMD's DxgkDdiQueryCurrentFence and DxgkDdiResetFromTimeout would. */

#define TDR_DELAY_US 2000000u /* the KMD's timeout per submission (TdrDelay) */
#define SYNC_TIMEOUT_MS 120000
static int sync_fd = -1;

/* /dev/ttyS1 raw (no echo, no line editing), blocking reads; -1 when it cannot be opened. */
static int sync_open(void)
{
    struct termios tio;
    int fd = open("/dev/ttyS1", O_RDWR | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (tcgetattr(fd, &tio) != 0) {
        close(fd);
        return -1;
    }
    cfmakeraw(&tio);
    tio.c_cflag |= CLOCAL | CREAD;
    tio.c_cc[VMIN] = 1;
    tio.c_cc[VTIME] = 0;
    int flags = fcntl(fd, F_GETFL);
    if (tcsetattr(fd, TCSANOW, &tio) != 0 || flags < 0 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Prints "GUEST-SYNC <point>" and reads the host's answer line (at most SYNC_TIMEOUT_MS); its
 * first word goes to `word`. 0 on an answer, -1 on a timeout or an error. */
static int sync_point(const char *point, char *word, size_t n)
{
    char line[256];
    size_t len = 0;
    word[0] = 0;
    if (sync_fd < 0)
        return -1;
    tcflush(sync_fd, TCIFLUSH);
    printf("GUEST-SYNC %s\n", point);
    fflush(stdout);
    uint64_t deadline = mono_ms() + SYNC_TIMEOUT_MS;
    for (;;) {
        uint64_t now = mono_ms();
        if (now >= deadline)
            return -1;
        struct pollfd p = {.fd = sync_fd, .events = POLLIN};
        int ready = poll(&p, 1, (int)(deadline - now));
        if (ready < 0)
            return -1;
        if (ready == 0)
            continue;
        char c;
        if (read(sync_fd, &c, 1) != 1)
            return -1;
        if (c != '\n' && c != '\r') {
            if (len < sizeof(line) - 1)
                line[len++] = c;
            continue;
        }
        line[len] = 0;
        len = 0;
        char first[64];
        if (sscanf(line, "%63s", first) == 1) { /* blank lines are skipped */
            snprintf(word, n, "%s", first);
            return 0;
        }
    }
}

/* Syncs at `point` and expects "armed"; why not in `why`. */
static int tdr_arm(const char *point, char *why, size_t n)
{
    char word[64];
    if (sync_point(point, word, sizeof(word)) != 0)
        snprintf(why, n, "no answer at sync point %s", point);
    else if (strcmp(word, "armed") != 0)
        snprintf(why, n, "the host answered \"%s\" at sync point %s", word, point);
    return why[0] ? -1 : 0;
}

/* A buffer of one FILL of `len` bytes with `pattern` at VRAM offset `off`, the bytes there
 * zeroed first. */
static int tdr_fill_buffer(buffer *b, uint64_t off, uint64_t len, uint32_t pattern)
{
    if (!vram_cpu || off + len > VRAM_WINDOW || new_buffer(b, 4096))
        return -1;
    for (uint64_t i = 0; i < len; i++)
        vram_cpu[off + i] = 0;
    wddm_op_fill op = {pattern, vram->desc.id, vram->desc.base_address + off, len};
    return wddm_pb_fill(&b->pb, &op) == WDDM_OK ? 0 : -1;
}

/* Whether VRAM at `off` holds the FILL (`ran`) or still zeros. */
static int tdr_fill_landed(uint64_t off, uint64_t len, uint32_t pattern, int ran)
{
    for (uint64_t i = 0; i < len; i++) {
        uint8_t want = ran ? (uint8_t)(pattern >> (8 * (i % 4))) : 0;
        if (vram_cpu[off + i] != want)
            return 0;
    }
    return 1;
}

/* Polls completions for the TDR delay: the completion, WDDM_E_TIMEOUT when none came. */
static wddm_result tdr_wait(WddmGpuRespSubmit *out)
{
    uint64_t start = table.now_us(table.ctx);
    while (table.now_us(table.ctx) - start < TDR_DELAY_US) {
        wddm_result r = poll_completion(out);
        if (r != WDDM_E_EMPTY)
            return r;
        table.stall_us(table.ctx, 200);
    }
    return WDDM_E_TIMEOUT;
}

/* lost-interrupt: the FILL runs, the status page says so, no answer comes; at the timeout
 * wddm_dev_query_current_fence releases it. */
static void test_tdr_lost_interrupt(void)
{
    buffer b;
    char why[300] = "";
    WddmGpuRespSubmit c = {0};
    WddmGpuStatusPage page = {0};
    uint32_t current = 0, released = 0, fence = ++next_fence;
    const uint64_t off = 0x100000, len = 0x3000;
    const uint32_t pattern = 0x4c4f5354u;
    if (tdr_fill_buffer(&b, off, len, pattern))
        snprintf(why, sizeof(why), "setup failed");
    char armed[200] = "";
    tdr_arm("ctdr-lost-interrupt", armed, sizeof(armed));
    if (!why[0] && armed[0])
        snprintf(why, sizeof(why), "%s", armed);
    wddm_submit s = paging_submission(&b, fence);
    wddm_result r = why[0] ? WDDM_OK : wddm_dev_submit(&dev, &s);
    if (r)
        snprintf(why, sizeof(why), "submit: %s", wddm_result_name(r));
    if (!why[0] && (r = tdr_wait(&c)) != WDDM_E_TIMEOUT)
        snprintf(why, sizeof(why), "answered within the TDR delay (%s, fence %u): the "
                 "interrupt was not lost", wddm_result_name(r), c.submission_fence_id);
    if (!why[0] && (wddm_dev_status(&dev, &page) || page.completed_fence != fence))
        snprintf(why, sizeof(why), "status page completed_fence %u, want %u (the work done)",
                 page.completed_fence, fence);
    if (!why[0] && (r = wddm_dev_query_current_fence(&dev, &current, &released)))
        snprintf(why, sizeof(why), "query_current_fence: %s", wddm_result_name(r));
    if (!why[0] && (current != fence || released != 1))
        snprintf(why, sizeof(why), "current_fence %u released %u, want %u and 1", current,
                 released, fence);
    if (!why[0] && ((r = wddm_dev_next_completion(&dev, &c)) || c.submission_fence_id != fence ||
                    c.status != WDDM_GPU_SUBMIT_STATUS_OK))
        snprintf(why, sizeof(why), "the released completion: %s fence %u status %u",
                 wddm_result_name(r), c.submission_fence_id, c.status);
    if (!why[0] && !tdr_fill_landed(off, len, pattern, 1))
        snprintf(why, sizeof(why), "the FILL is not in VRAM");
    if (!why[0])
        printf("TDR c: recovered lost interrupt fence %u (released %u)\n", fence, released);
    report("tdr_lost_interrupt", !why[0], "fence %u: no answer within %u ms, status page "
           "completed_fence %u, QUERY_ENGINE_STATUS current_fence %u released %u, completion "
           "taken, FILL in VRAM%s%s", fence, TDR_DELAY_US / 1000, page.completed_fence, current,
           released, why[0] ? ": " : "", why);
}

/* hang: two FILLs posted, the first hangs; at the timeout QUERY_ENGINE_STATUS says not
 * responsive and wddm_dev_reset_from_timeout resets, resubmits the first (resubmittable) and
 * reports the second; VRAM written before is kept. */
static void test_tdr_hang(void)
{
    buffer a, b;
    static wddm_tdr_report rep;
    char why[300] = "";
    WddmGpuRespSubmit c = {0};
    WddmGpuRespEngineStatus st = {0};
    uint32_t fa = ++next_fence, fb = ++next_fence;
    const uint64_t off_a = 0x110000, off_b = 0x118000, len = 0x2000, keep = 0x120000;
    const uint32_t pa = 0x48414e47u, pb = 0x42424242u;
    if (tdr_fill_buffer(&a, off_a, len, pa) || tdr_fill_buffer(&b, off_b, len, pb))
        snprintf(why, sizeof(why), "setup failed");
    for (uint32_t i = 0; !why[0] && i < 0x1000; i++)
        vram_cpu[keep + i] = (uint8_t)(i * 7 + 3);
    char armed[200] = "";
    tdr_arm("ctdr-hang", armed, sizeof(armed));
    if (!why[0] && armed[0])
        snprintf(why, sizeof(why), "%s", armed);
    wddm_submit sa = paging_submission(&a, fa), sb = paging_submission(&b, fb);
    wddm_result r = why[0] ? WDDM_OK : wddm_dev_submit(&dev, &sa);
    if (!r && !why[0])
        r = wddm_dev_submit(&dev, &sb);
    if (r)
        snprintf(why, sizeof(why), "submit: %s", wddm_result_name(r));
    if (!why[0] && (r = tdr_wait(&c)) != WDDM_E_TIMEOUT)
        snprintf(why, sizeof(why), "answered within the TDR delay (%s, fence %u)",
                 wddm_result_name(r), c.submission_fence_id);
    if (!why[0] && (r = wddm_dev_query_engine_status(&dev, WDDM_GPU_NODE_PAGING, &st)))
        snprintf(why, sizeof(why), "query_engine_status: %s", wddm_result_name(r));
    if (!why[0] && ((st.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE) || st.running_fence != fa ||
                    st.queued != 1))
        snprintf(why, sizeof(why), "engine status flags %#x running %u queued %u, want not "
                 "responsive, %u, 1", st.flags, st.running_fence, st.queued, fa);
    /* DxgkDdiResetFromTimeout: only the first may run again. */
    if (!why[0] && (r = wddm_dev_reset_from_timeout(&dev, &sa, 1, 4, &rep)))
        snprintf(why, sizeof(why), "reset_from_timeout: %s", wddm_result_name(r));
    if (!why[0] && (rep.aborted_count != 2 || rep.aborted[0] != fa || rep.aborted[1] != fb ||
                    rep.resubmitted_count != 1 || rep.resubmitted[0] != fa ||
                    rep.reported_count != 1 || rep.reported[0] != fb))
        snprintf(why, sizeof(why), "report: %u aborted, %u resubmitted, %u reported",
                 rep.aborted_count, rep.resubmitted_count, rep.reported_count);
    if (!why[0]) {
        r = wait_completion(&c);
        if (r || c.submission_fence_id != fa || c.status != WDDM_GPU_SUBMIT_STATUS_OK)
            snprintf(why, sizeof(why), "the resubmission: %s fence %u status %u",
                     wddm_result_name(r), c.submission_fence_id, c.status);
    }
    if (!why[0] && (!tdr_fill_landed(off_a, len, pa, 1) || !tdr_fill_landed(off_b, len, pb, 0)))
        snprintf(why, sizeof(why), "VRAM: the resubmitted FILL missing or the reported one ran");
    for (uint32_t i = 0; !why[0] && i < 0x1000; i++)
        if (vram_cpu[keep + i] != (uint8_t)(i * 7 + 3))
            snprintf(why, sizeof(why), "VRAM written before the hang changed at %#x", i);
    WddmGpuStatusPage page;
    if (!why[0] && wddm_dev_status(&dev, &page))
        snprintf(why, sizeof(why), "the status page is not registered again");
    if (!why[0])
        printf("TDR c: reset after the hang of fence %u: aborted %u, %u; resubmitted %u; "
               "reported %u\n", fa, fa, fb, fa, fb);
    report("tdr_hang", !why[0], "fences %u (resubmittable) and %u: engine not responsive, "
           "RESET, %u aborted, %u resubmitted and done, %u reported, VRAM kept, status page "
           "and %u WAIT_EVENTs again%s%s", fa, fb, rep.aborted_count, rep.resubmitted_count,
           rep.reported_count, wddm_dev_events_posted(&dev), why[0] ? ": " : "", why);
}

static int main_tdr(const char *bdf)
{
    if (linux_os_open(&los, bdf, &table)) {
        report("device_init", 0, "no GPU function usable through sysfs");
        return 1;
    }
    sync_fd = sync_open();
    if (test_init()) {
        test_segments();
        wddm_result r = wddm_dev_status_page_register(&dev);
        if (!r)
            r = wddm_dev_post_events(&dev, 4);
        report("tdr_status_page_and_events", r == WDDM_OK, "%s", wddm_result_name(r));
        test_tdr_lost_interrupt();
        test_tdr_hang();
        char word[64];
        int done = sync_point("ctdr-done", word, sizeof(word)) == 0 && strcmp(word, "go") == 0;
        report("tdr_host_done", done, "the host's answer at sync point ctdr-done: \"%s\"", word);
        wddm_dev_teardown(&dev);
    }
    if (sync_fd >= 0)
        close(sync_fd);
    linux_os_close(&los);
    printf("GUEST-CSUMMARY %d/%d passed\n", passed, total);
    return passed == total ? 0 : 1;
}

/* ---- gpuva mode: GPU virtual addressing through the library (wddm-cdev-suite gpuva) ----
 * Address spaces laid out by hand for the geometry capset 62 gives: each space has one table
 * per level on a single path from its root to one leaf table, whose slots map (in pages from
 * VA_BASE, the same VAs in every space) the virtual DMA buffer, the fence page, 8 scattered
 * DMA pages and 8 VRAM pages. Space A (context 7) also gets a 64 KB-page leaf under the next
 * level-1 slot and 64 more scattered DMA pages; space B (context 8) maps the same VAs onto
 * other DMA and VRAM pages; space C (context 9, checking mode) catches a skipped FLUSH_TLB.
 * Tables in system memory come from dma_alloc, those in the VRAM segment from the suite's
 * VRAM window. Every table write goes through gv_apply: UPDATE_PAGE_TABLE paging buffers for
 * GPU_PHYSICAL, CPU stores for CPU_VIRTUAL. */

#define GV_SRC_PAGES 8
#define GV_SLOT_DMA 0      /* leaf slots, pages from VA_BASE */
#define GV_SLOT_FENCE 1
#define GV_SLOT_SRC 16
#define GV_SLOT_DST 32
#define GV_SLOT_READ_ONLY 44
#define GV_SLOT_UNMAPPED 48
#define GV_SLOT_SRC64 64   /* space A: the 64 KB copy's source, GV_SRC64_PAGES pages */
#define GV_SRC64_PAGES 64
#define GV_64K_PAGES 4
#define GV_64K (64u << 10)
/* The VRAM window (offsets in the VRAM segment, all below VRAM_WINDOW):
 *   0x200000 + i x 0x40000  space i's tables in VRAM (A, B, C: up to 0x2c0000)
 *   0x380000  space A's 8 destination pages            0x390000  space B's
 *   0x3a0000  the read-only page (space A)             0x3a8000  space C's 8 pages
 *   0x3b0000  the paging node's FILL while the virtual node is faulted (4 KiB)
 *   0x3c0000  the four 64 KiB pages of space A's 64 KB leaf, to the window's end 0x400000 */
#define GV_VRAM_TABLES 0x200000u
#define GV_VRAM_SPACE_TABLES 0x40000u
#define GV_VRAM_DATA 0x380000u
#define GV_VRAM_DATA_B 0x390000u
#define GV_VRAM_READ_ONLY 0x3a0000u
#define GV_VRAM_DATA_C 0x3a8000u
#define GV_VRAM_PAGING 0x3b0000u
#define GV_VRAM_64K 0x3c0000u
#define GV_CONTEXT 7u
#define GV_CONTEXT_B 8u
#define GV_CONTEXT_C 9u
#define GV_WRITES 96 /* a new space: about 30; the 64 KB test: 70 */

typedef struct gv_table {
    uint32_t segment; /* 0: system memory (bus address), else the VRAM segment (offset) */
    uint64_t address;
    uint64_t size;
    volatile uint8_t *cpu;
    uint32_t index; /* the slot on the path (the child's, or the leaf's first) */
} gv_table;

/* One address space: its tables, where its VRAM tables go, what its slots map. */
typedef struct gv_space {
    char name;
    uint32_t context;
    bool created;                                   /* CREATE_CONTEXT answered OK */
    bool ready;                                     /* tables written, context bound */
    gv_table table[WDDM_GPU_MAX_PAGE_TABLE_LEVELS]; /* the path, leaf first */
    gv_table leaf64;                                /* 64 KB-page leaf (size 0: none yet) */
    uint32_t slot64;                                /* its level-1 slot */
    uint64_t va_base, va_64k;
    uint32_t root_entries;
    uint64_t vram_next, vram_end; /* the space's share of the VRAM table area */
    uint32_t src_first;           /* its source pages: gv_src_page(src_first + i) */
    uint64_t vram_dst;            /* its 8 destination VRAM pages, mapped in reverse */
} gv_space;

static struct {
    bool ready;
    wddm_gpummu mmu;
    uint32_t levels;
    gv_space a, b, c;
    wddm_os_dma src, src64, dma, fence, arrays;
    buffer pb; /* the paging buffer gv_apply and the paging checks reuse */
} gv;

/* Every table write: `count` slots from `slot` of table t (at `level`), each `entry`. */
typedef struct gv_write {
    const gv_table *t;
    uint32_t level, slot, count;
    uint64_t entry;
} gv_write;

static uint64_t gv_va(uint32_t slot) { return gv.a.va_base + (uint64_t)slot * 4096; }
static uint64_t gv_pte(uint32_t segment, uint64_t address)
{
    return WDDM_GPU_PTE_VALID |
           (((uint64_t)segment << WDDM_GPU_PTE_SEGMENT_SHIFT) & WDDM_GPU_PTE_SEGMENT_MASK) |
           (address & WDDM_GPU_PTE_ADDRESS_MASK);
}
/* Source page i: scattered over the 2 x GV_SRC_PAGES pages allocated; space A takes i 0..7,
 * space B i 8..15 (the other eight pages). */
static uint64_t gv_src_page(uint32_t i) { return (i * 5 + 3) % (2 * GV_SRC_PAGES); }
/* Destination page i of a space: its VRAM pages in reverse order. */
static uint64_t gv_dst_offset(const gv_space *s, uint32_t i)
{
    return s->vram_dst + (uint64_t)(GV_SRC_PAGES - 1 - i) * 4096;
}
static uint8_t gv_byte(uint64_t i) { return (uint8_t)(i * 13 + (i >> 12) * 7 + 0x5b); }
/* Byte j of a space's source through VA (page j / 4096 is source page src_first + that). */
static uint8_t gv_src_byte(const gv_space *s, uint64_t j)
{
    return gv_byte((uint64_t)s->src_first * 4096 + j);
}
/* The 64 KB copy's source: page i at DMA page gv_src64_page(i) (37 is prime to 64). */
static uint64_t gv_src64_page(uint32_t i) { return (i * 37 + 11) % GV_SRC64_PAGES; }
static uint8_t gv_byte64(uint64_t j) { return (uint8_t)(j * 7 + (j >> 12) * 3 + 0x64); }

static void test_gpuva_capset(void)
{
    char why[200] = "";
    wddm_gpummu_error err = {0};
    wddm_result r = wddm_dev_read_gpummu(&dev, &gv.mmu, &err);
    if (r) {
        snprintf(why, sizeof(why), "read_gpummu: %s (rule %s level %u have %#" PRIx64 ")",
                 wddm_result_name(r), wddm_gpummu_rule_name(err.rule) ? wddm_gpummu_rule_name(err.rule) : "?",
                 err.level, err.have);
        report("gpuva_capset", 0, "%s", why);
        return;
    }
    wddm_gpummu again;
    if (wddm_gpummu_validate(&gv.mmu.caps, NULL, 0, &again, NULL) == WDDM_E_INVALID)
        snprintf(why, sizeof(why), "validate refused its arguments");
    wddm_dxgk_querygpummucapsin in = {0};
    wddm_dxgk_gpummucaps caps;
    r = wddm_gpummu_query_caps(&gv.mmu, &in, &caps);
    if (r && !why[0])
        snprintf(why, sizeof(why), "query_caps: %s", wddm_result_name(r));
    if (!r)
        printf("GPUMMU DXGK_GPUMMUCAPS Flags=%#x PageTableUpdateMode=%u VirtualAddressBitCount=%u "
               "LeafPageTableSizeFor64KPagesInBytes=%#x PageTableLevelCount=%u\n",
               caps.Value, caps.PageTableUpdateMode, caps.VirtualAddressBitCount,
               caps.LeafPageTableSizeFor64KPagesInBytes, caps.PageTableLevelCount);
    gv.levels = gv.mmu.level_count;
    for (uint32_t level = 0; level <= gv.levels && !why[0]; level++) {
        wddm_dxgk_querypagetableleveldescin lin = {(uint16_t)level, 0};
        wddm_dxgk_page_table_level_desc d;
        r = wddm_gpummu_query_level_desc(&gv.mmu, &lin, &d);
        if (level == gv.levels) {
            if (r != WDDM_E_INVALID)
                snprintf(why, sizeof(why), "level %u past the count answered %s", level,
                         wddm_result_name(r));
            break;
        }
        if (r) {
            snprintf(why, sizeof(why), "level %u: %s", level, wddm_result_name(r));
            break;
        }
        printf("GPUMMU DXGK_PAGE_TABLE_LEVEL_DESC[%u] IndexBits=%u SegmentId=%u "
               "PagingProcessSegmentId=%u SizeInBytes=%#x AlignmentInBytes=%#x (shift %u)\n",
               level, d.PageTableIndexBitCount, d.PageTableSegmentId,
               d.PagingProcessPageTableSegmentId, d.PageTableSizeInBytes,
               d.PageTableAlignmentInBytes, gv.mmu.shift[level]);
        if (d.PageTableIndexBitCount != gv.mmu.caps.levels[level].page_table_index_bit_count)
            snprintf(why, sizeof(why), "level %u index bits disagree", level);
    }
    if (!why[0] && (caps.PageTableLevelCount != gv.levels ||
                    caps.VirtualAddressBitCount != gv.mmu.caps.virtual_address_bit_count))
        snprintf(why, sizeof(why), "DXGK caps disagree with the geometry");
    fflush(stdout);
    report("gpuva_capset", !why[0], "capset 62: %u levels, %u VA bits, update mode %u, "
           "max_contexts %u%s%s", gv.levels, gv.mmu.caps.virtual_address_bit_count,
           gv.mmu.caps.page_table_update_mode, gv.mmu.caps.max_contexts, why[0] ? ": " : "", why);
    gv.ready = !why[0];
}

/* A table of `size` bytes in `segment`: DMA memory for system memory, else the next aligned
 * room in the space's share of the VRAM window. */
static int gv_alloc_table(gv_space *s, gv_table *t, uint32_t level, uint32_t segment,
                          uint64_t size, uint64_t align, char *why, size_t n)
{
    t->segment = segment;
    t->size = size;
    if (align < 4096)
        align = 4096;
    if (segment == 0) {
        wddm_os_dma mem;
        if (table.dma_alloc(table.ctx, size, align, &mem)) {
            snprintf(why, n, "space %c: no DMA memory for level %u", s->name, level);
            return -1;
        }
        t->address = mem.bus;
        t->cpu = mem.cpu;
        return 0;
    }
    uint64_t at = (s->vram_next + align - 1) & ~(align - 1);
    if (!vram || segment != vram->desc.id || at + size > s->vram_end) {
        snprintf(why, n, "space %c: level %u table in segment %u: not in the VRAM window",
                 s->name, level, segment);
        return -1;
    }
    t->address = at;
    t->cpu = vram_cpu + at;
    s->vram_next = at + size;
    return 0;
}

/* Where each level's table of space `index` goes; the VA base from the geometry (the same
 * path, so the same VAs, in every space). */
static int gv_layout(gv_space *s, char name, uint32_t index, char *why, size_t n)
{
    uint32_t root = gv.levels - 1;
    s->name = name;
    s->vram_next = GV_VRAM_TABLES + (uint64_t)index * GV_VRAM_SPACE_TABLES;
    s->vram_end = s->vram_next + GV_VRAM_SPACE_TABLES;
    s->va_base = 0;
    for (uint32_t level = 0; level < gv.levels; level++) {
        const WddmGpuPageTableLevelDesc *d = &gv.mmu.caps.levels[level];
        gv_table *t = &s->table[level];
        uint64_t entries = 1ull << d->page_table_index_bit_count;
        uint64_t size = d->page_table_size_in_bytes;
        if (level == root) {
            s->root_entries = (uint32_t)entries;
            if (wddm_gpummu_root_table_size(&gv.mmu, entries, &size)) {
                snprintf(why, n, "root table size refused");
                return -1;
            }
        }
        if (gv_alloc_table(s, t, level, d->page_table_segment_id, size,
                           d->page_table_alignment_in_bytes, why, n))
            return -1;
        /* The path: a different, non-zero slot at each level (leaf slots are per page). */
        uint32_t slot = level == 0 ? 0 : (uint32_t)((3 + 5 * level) & (entries - 1));
        if (level == root && slot >= s->root_entries)
            slot = s->root_entries - 1;
        t->index = slot;
        s->va_base |= (uint64_t)slot << gv.mmu.shift[level];
        if (level == 0 && entries < GV_SLOT_SRC64 + GV_SRC64_PAGES) {
            snprintf(why, n, "leaf of %" PRIu64 " entries is too small", entries);
            return -1;
        }
    }
    return 0;
}

/* Writes `count` table writes: CPU stores for CPU_VIRTUAL; for GPU_PHYSICAL one paging
 * buffer of UPDATE_PAGE_TABLE packets (Repeat for a run of one entry, else the entry from
 * the entry array). */
static int gv_apply(const gv_write *w, uint32_t count, char *why, size_t n)
{
    if (gv.mmu.caps.page_table_update_mode == WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL) {
        for (uint32_t i = 0; i < count; i++)
            for (uint32_t k = 0; k < w[i].count; k++)
                *(volatile uint64_t *)(w[i].t->cpu + (uint64_t)(w[i].slot + k) * 8) =
                    w[i].entry;
        table.memory_barrier(table.ctx);
        return 0;
    }
    uint64_t *arrays = gv.arrays.cpu;
    wddm_result r = wddm_pb_init(&gv.pb.pb, wddm_dev_layout(&dev), gv.pb.mem.cpu,
                                 (uint32_t)gv.pb.mem.size);
    for (uint32_t i = 0; i < count && !r; i++) {
        wddm_op_update_page_table op = {0};
        op.PageTableLevel = w[i].level;
        op.SegmentId = w[i].t->segment;
        op.SegmentOffset = w[i].t->address;
        op.StartIndex = w[i].slot;
        op.NumPageTableEntries = w[i].count;
        if (w[i].count > 1) {
            op.Flags = WDDM_GPU_UPDATE_FLAG_REPEAT;
            op.Entry = w[i].entry;
        } else {
            arrays[i] = w[i].entry;
            op.EntriesBus = gv.arrays.bus + (uint64_t)i * 8;
        }
        r = wddm_pb_update_page_table(&gv.pb.pb, &op);
    }
    if (r) {
        snprintf(why, n, "building UPDATE_PAGE_TABLE: %s", wddm_result_name(r));
        return -1;
    }
    WddmGpuRespSubmit resp;
    const char *w2 = "";
    long st = run(&gv.pb, &resp, &w2);
    if (st != WDDM_GPU_SUBMIT_STATUS_OK) {
        snprintf(why, n, "paging buffer of %u UPDATE_PAGE_TABLE: status %ld %s (packet at %#x)",
                 gv.pb.pb.packets, st, w2, resp.fault_packet_offset);
        return -1;
    }
    return 0;
}

/* A new space's writes: every table zeroed whole, the path, the DMA and fence pages, its 8
 * source pages and its 8 VRAM pages. */
static uint32_t gv_space_writes(const gv_space *s, gv_write *w)
{
    uint32_t n = 0;
    for (uint32_t level = 0; level < gv.levels; level++)
        w[n++] = (gv_write){&s->table[level], level, 0, (uint32_t)(s->table[level].size / 8), 0};
    for (uint32_t level = 1; level < gv.levels; level++) {
        const gv_table *child = &s->table[level - 1];
        w[n++] = (gv_write){&s->table[level], level, s->table[level].index, 1,
                            gv_pte(child->segment, child->address)};
    }
    const gv_table *leaf = &s->table[0];
    w[n++] = (gv_write){leaf, 0, GV_SLOT_DMA, 1, gv_pte(0, gv.dma.bus)};
    w[n++] = (gv_write){leaf, 0, GV_SLOT_FENCE, 1, gv_pte(0, gv.fence.bus)};
    for (uint32_t i = 0; i < GV_SRC_PAGES; i++)
        w[n++] = (gv_write){leaf, 0, GV_SLOT_SRC + i, 1,
                            gv_pte(0, gv.src.bus + gv_src_page(s->src_first + i) * 4096)};
    for (uint32_t i = 0; i < GV_SRC_PAGES; i++)
        w[n++] = (gv_write){leaf, 0, GV_SLOT_DST + i, 1,
                            gv_pte(vram->desc.id, gv_dst_offset(s, i))};
    return n;
}

/* Lays out, writes and binds a space: CREATE_CONTEXT `context` with `flags`, then
 * SET_ROOT_PAGE_TABLE with every root entry. */
static int gv_space_up(gv_space *s, char name, uint32_t index, uint32_t context, uint32_t flags,
                       uint32_t src_first, uint64_t vram_dst, char *why, size_t n)
{
    gv_write w[GV_WRITES];
    s->context = context;
    s->src_first = src_first;
    s->vram_dst = vram_dst;
    if (gv_layout(s, name, index, why, n) || gv_apply(w, gv_space_writes(s, w), why, n))
        return -1;
    wddm_result r = wddm_dev_create_context(&dev, context, WDDM_GPU_NODE_VIRTUAL, flags);
    if (r) {
        snprintf(why, n, "CREATE_CONTEXT %u: %s", context, wddm_result_name(r));
        return -1;
    }
    s->created = true;
    const gv_table *root = &s->table[gv.levels - 1];
    r = wddm_dev_set_root_page_table(&dev, context, root->segment, root->address,
                                     s->root_entries);
    if (r) {
        snprintf(why, n, "SET_ROOT_PAGE_TABLE %u: %s", context, wddm_result_name(r));
        return -1;
    }
    s->ready = true;
    return 0;
}

/* Writes `packets` (size bytes) into the virtual DMA buffer, submits it in the context and
 * waits for the answer. */
static wddm_result gv_run(uint32_t context, const void *packets, uint32_t size,
                          WddmGpuRespSubmitVirtual *out, uint32_t *fence)
{
    memcpy(gv.dma.cpu, packets, size);
    table.memory_barrier(table.ctx);
    *fence = ++next_fence;
    WddmGpuCmdSubmitVirtual c;
    wddm_build_submit_virtual(&c, context, gv_va(GV_SLOT_DMA), size, *fence);
    wddm_result r = wddm_dev_submit_virtual(&dev, &c);
    if (!r)
        r = wddm_dev_wait_virtual_completion(&dev, out);
    if (!r && out->submission_fence_id != *fence)
        r = WDDM_E_DEVICE;
    return r;
}

/* gv_run expecting status OK: 0, or -1 with `why` set. */
static int gv_run_ok(uint32_t context, const void *packets, uint32_t size,
                     WddmGpuRespSubmitVirtual *out, const char *what, char *why, size_t n)
{
    uint32_t fence;
    wddm_result r = gv_run(context, packets, size, out, &fence);
    if (r)
        snprintf(why, n, "%s: SUBMIT_VIRTUAL %s", what, wddm_result_name(r));
    else if (out->status != WDDM_GPU_SUBMIT_STATUS_OK)
        snprintf(why, n, "%s: fence %u status %u, packets %u, fault packet %#x, fault VA %#"
                 PRIx64 " level %u kind %u", what, fence, out->status, out->packets_completed,
                 out->fault_packet_offset, out->page_fault.fault.virtual_address,
                 out->page_fault.fault.page_table_level, out->page_fault.fault.kind);
    return why[0] ? -1 : 0;
}

/* A copy of `length` bytes from src VA to dst VA, then a SIGNAL of `value` at the fence. */
static uint32_t gv_copy_signal(uint8_t *buf, uint64_t length, uint64_t src, uint64_t dst,
                               uint64_t value)
{
    WddmGpuVirtualCopy copy;
    WddmGpuVirtualSignal signal;
    wddm_build_virtual_copy(&copy, length, src, dst);
    wddm_build_virtual_signal(&signal, gv_va(GV_SLOT_FENCE) + 16, value);
    memcpy(buf, &copy, sizeof(copy));
    memcpy(buf + sizeof(copy), &signal, sizeof(signal));
    return (uint32_t)(sizeof(copy) + sizeof(signal));
}

static uint64_t gv_fence_value(void)
{
    uint64_t v;
    memcpy(&v, (uint8_t *)gv.fence.cpu + 16, 8);
    return v;
}

/* The paging node moves bytes: a FILL of one VRAM page (a pattern of its own each time)
 * read back through the BAR. 0, or -1 with `why` set. */
static int gv_paging_fill(uint32_t *pattern_out, char *why, size_t n)
{
    const uint32_t pattern = 0x9a610000u | (next_fence & 0xffffu);
    *pattern_out = pattern;
    for (uint32_t i = 0; i < 4096; i++)
        vram_cpu[GV_VRAM_PAGING + i] = 0;
    wddm_op_fill op = {pattern, vram->desc.id, vram->desc.base_address + GV_VRAM_PAGING, 4096};
    WddmGpuRespSubmit resp;
    const char *w = "";
    wddm_result r = wddm_pb_init(&gv.pb.pb, wddm_dev_layout(&dev), gv.pb.mem.cpu,
                                 (uint32_t)gv.pb.mem.size);
    if (!r)
        r = wddm_pb_fill(&gv.pb.pb, &op);
    long st = r ? -1 : run(&gv.pb, &resp, &w);
    if (st != WDDM_GPU_SUBMIT_STATUS_OK) {
        snprintf(why, n, "paging FILL while the virtual node is faulted: status %ld %s", st,
                 r ? wddm_result_name(r) : w);
        return -1;
    }
    for (uint32_t i = 0; i < 4096; i++)
        if (vram_cpu[GV_VRAM_PAGING + i] != (uint8_t)(pattern >> (8 * (i % 4)))) {
            snprintf(why, n, "paging FILL while the virtual node is faulted: byte %u is %#x",
                     i, vram_cpu[GV_VRAM_PAGING + i]);
            return -1;
        }
    return 0;
}

static void test_gpuva_copy(void)
{
    char why[300] = "";
    const uint64_t length = (uint64_t)GV_SRC_PAGES * 4096;
    const uint64_t value = 0x0123456789abcdefull;
    WddmGpuRespSubmitVirtual done = {0};
    gv_space *a = &gv.a;
    if (!gv.ready || !vram_cpu) {
        report("gpuva_copy", 0, "no geometry or no VRAM window");
        return;
    }
    if (table.dma_alloc(table.ctx, 2 * GV_SRC_PAGES * 4096, 4096, &gv.src) ||
        table.dma_alloc(table.ctx, 4096, 4096, &gv.dma) ||
        table.dma_alloc(table.ctx, 4096, 4096, &gv.fence) ||
        table.dma_alloc(table.ctx, 4096, 4096, &gv.arrays) || new_buffer(&gv.pb, 16384))
        snprintf(why, sizeof(why), "no DMA memory");
    if (!why[0]) {
        /* Every source page, space A's and space B's. */
        for (uint32_t i = 0; i < 2 * GV_SRC_PAGES; i++)
            for (uint64_t b = 0; b < 4096; b++)
                ((uint8_t *)gv.src.cpu)[gv_src_page(i) * 4096 + b] = gv_byte(i * 4096 + b);
        gv_space_up(a, 'A', 0, GV_CONTEXT, 0, 0, GV_VRAM_DATA, why, sizeof(why));
    }
    uint32_t fence = 0;
    if (!why[0]) {
        for (uint64_t b = 0; b < length; b++)
            vram_cpu[GV_VRAM_DATA + b] = 0;
        memset(gv.fence.cpu, 0, 4096);
        uint8_t packets[256];
        uint32_t size = gv_copy_signal(packets, length, gv_va(GV_SLOT_SRC), gv_va(GV_SLOT_DST),
                                       value);
        wddm_result r = gv_run(a->context, packets, size, &done, &fence);
        if (r)
            snprintf(why, sizeof(why), "SUBMIT_VIRTUAL: %s", wddm_result_name(r));
        else if (done.status != WDDM_GPU_SUBMIT_STATUS_OK)
            snprintf(why, sizeof(why), "status %u, packets %u, fault packet %#x, fault VA %#" PRIx64
                     " level %u kind %u", done.status, done.packets_completed,
                     done.fault_packet_offset, done.page_fault.fault.virtual_address,
                     done.page_fault.fault.page_table_level, done.page_fault.fault.kind);
    }
    for (uint32_t i = 0; i < GV_SRC_PAGES && !why[0]; i++)
        for (uint64_t b = 0; b < 4096; b++) {
            uint8_t got = vram_cpu[gv_dst_offset(a, i) + b];
            if (got != gv_src_byte(a, i * 4096 + b)) {
                snprintf(why, sizeof(why), "VRAM page %u byte %" PRIu64 " is %#x, want %#x", i, b,
                         got, gv_src_byte(a, i * 4096 + b));
                break;
            }
        }
    uint64_t fv = 0;
    if (!why[0] && (fv = gv_fence_value()) != value)
        snprintf(why, sizeof(why), "fence memory holds %#" PRIx64, fv);
    const gv_table *root = &a->table[gv.levels - 1];
    report("gpuva_copy", !why[0], "%u-level address space A (VA %#" PRIx64 ", root in segment "
           "%u, leaf in segment %u at %#" PRIx64 ", tables %s), SUBMIT_VIRTUAL fence %u: COPY of "
           "%u scattered DMA pages to %u VRAM pages through VAs + SIGNAL: status %u packets %u "
           "bytes %" PRIu64 ", BAR read back %s, fence value %#" PRIx64 "%s%s", gv.levels,
           a->va_base, root->segment, a->table[0].segment, a->table[0].address,
           gv.mmu.caps.page_table_update_mode == WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL
               ? "by CPU stores" : "by UPDATE_PAGE_TABLE",
           fence, GV_SRC_PAGES, GV_SRC_PAGES, done.status, done.packets_completed,
           done.bytes_transferred, why[0] ? "-" : "matches", fv, why[0] ? ": " : "", why);
    a->ready = a->ready && !why[0];
}

/* Checks a space's 8 destination pages byte by byte: logical byte k (through the VAs) is
 * 0 outside [copy_at, copy_at + copy_len), else the space's source byte k + shift; inside
 * [fill_at, fill_at + fill_len) the FILL pattern in phase from fill_at. */
static int gv_check_dst(const gv_space *s, uint64_t copy_at, uint64_t copy_len, int64_t shift,
                        uint64_t fill_at, uint64_t fill_len, uint32_t pattern, char *why,
                        size_t n)
{
    for (uint64_t k = 0; k < (uint64_t)GV_SRC_PAGES * 4096; k++) {
        uint8_t want = 0;
        if (k >= fill_at && k < fill_at + fill_len)
            want = (uint8_t)(pattern >> (8 * ((k - fill_at) % 4)));
        else if (k >= copy_at && k < copy_at + copy_len)
            want = gv_src_byte(s, (uint64_t)((int64_t)k + shift));
        uint8_t got = vram_cpu[gv_dst_offset(s, (uint32_t)(k / 4096)) + k % 4096];
        if (got != want) {
            snprintf(why, n, "space %c's VRAM: byte %" PRIu64 " (VRAM %#" PRIx64 ") is %#x, "
                     "want %#x", s->name, k, gv_dst_offset(s, (uint32_t)(k / 4096)) + k % 4096,
                     got, want);
            return -1;
        }
    }
    return 0;
}

/* A COPY + SIGNAL in space s with a WAIT_EVENT posted: status OK, the fence value in memory
 * and a MONITORED_FENCE event with the fence's VA and the value. */
static int gv_copy_signalled(const gv_space *s, uint64_t length, uint64_t src, uint64_t dst,
                             uint64_t value, char *why, size_t n)
{
    uint8_t packets[256];
    WddmGpuRespSubmitVirtual done;
    WddmGpuRespEvent ev = {0};
    int others = 0;
    char what[64];
    snprintf(what, sizeof(what), "space %c COPY + SIGNAL", s->name);
    wddm_result r = wddm_dev_post_events(&dev, 1);
    if (r) {
        snprintf(why, n, "WAIT_EVENT: %s", wddm_result_name(r));
        return -1;
    }
    memset(gv.fence.cpu, 0, 4096);
    uint32_t size = gv_copy_signal(packets, length, src, dst, value);
    if (gv_run_ok(s->context, packets, size, &done, what, why, n))
        return -1;
    if (gv_fence_value() != value) {
        snprintf(why, n, "space %c: fence memory holds %#" PRIx64 ", want %#" PRIx64, s->name,
                 gv_fence_value(), value);
        return -1;
    }
    if (!wait_event(WDDM_GPU_EVENT_MONITORED_FENCE, &ev, &others) ||
        ev.fence_address != gv_va(GV_SLOT_FENCE) + 16 || ev.fence_value != value) {
        snprintf(why, n, "space %c: MONITORED_FENCE event %s (kind %u, VA %#" PRIx64 " value %#"
                 PRIx64 ", %d others)", s->name, ev.kind ? "wrong" : "missing", ev.kind,
                 ev.fence_address, ev.fence_value, others);
        return -1;
    }
    return 0;
}

static void test_gpuva_two_spaces(void)
{
    char why[300] = "";
    gv_space *a = &gv.a, *b = &gv.b;
    const uint64_t length = (uint64_t)GV_SRC_PAGES * 4096 - 40;
    const uint32_t pattern = 0xc0de5a17u;
    const uint64_t fill_at = 4096 + 12, fill_len = 2 * 4096;
    if (!a->ready) {
        report("gpuva_two_spaces", 0, "no address space A (gpuva_copy failed)");
        return;
    }
    gv_space_up(b, 'B', 1, GV_CONTEXT_B, 0, GV_SRC_PAGES, GV_VRAM_DATA_B, why, sizeof(why));
    for (uint32_t i = 0; i < GV_SRC_PAGES && !why[0]; i++)
        for (uint32_t k = 0; k < 4096; k++) {
            vram_cpu[gv_dst_offset(a, i) + k] = 0;
            vram_cpu[gv_dst_offset(b, i) + k] = 0;
        }
    /* The same VAs in both: each COPY lands in its own space's VRAM only. */
    if (!why[0])
        gv_copy_signalled(a, length, gv_va(GV_SLOT_SRC) + 40, gv_va(GV_SLOT_DST) + 8,
                          0xa000000000000000ull | next_fence, why, sizeof(why));
    if (!why[0] && !gv_check_dst(a, 8, length, 32, 0, 0, 0, why, sizeof(why)))
        gv_check_dst(b, 0, 0, 0, 0, 0, 0, why, sizeof(why));
    if (!why[0])
        gv_copy_signalled(b, length, gv_va(GV_SLOT_SRC) + 40, gv_va(GV_SLOT_DST) + 8,
                          0xb000000000000000ull | next_fence, why, sizeof(why));
    if (!why[0] && !gv_check_dst(b, 8, length, 32, 0, 0, 0, why, sizeof(why)))
        gv_check_dst(a, 8, length, 32, 0, 0, 0, why, sizeof(why));
    /* A FILL in space B: B's VRAM only. */
    WddmGpuRespSubmitVirtual done = {0};
    if (!why[0]) {
        WddmGpuVirtualFill fill;
        wddm_build_virtual_fill(&fill, pattern, fill_len, gv_va(GV_SLOT_DST) + fill_at);
        gv_run_ok(b->context, &fill, sizeof(fill), &done, "space B FILL", why, sizeof(why));
    }
    if (!why[0] && !gv_check_dst(b, 8, length, 32, fill_at, fill_len, pattern, why, sizeof(why)))
        gv_check_dst(a, 8, length, 32, 0, 0, 0, why, sizeof(why));
    report("gpuva_two_spaces", !why[0], "spaces A (context %u, VRAM %#x) and B (context %u, "
           "VRAM %#x, own tables at every level, root %#" PRIx64 "): the same VAs, a COPY of %"
           PRIu64 " bytes (VA +40 to +8) + SIGNAL in each, MONITORED_FENCE events; each copy "
           "only in its own VRAM; FILL %#x x %" PRIu64 " at DST+%" PRIu64 " in B: %" PRIu64
           " bytes, B's %u pages checked byte by byte, A's unchanged%s%s", a->context,
           GV_VRAM_DATA, b->context, GV_VRAM_DATA_B, b->table[gv.levels - 1].address, length,
           pattern, fill_len, fill_at, done.bytes_transferred, GV_SRC_PAGES,
           why[0] ? ": " : "", why);
}

static void test_gpuva_pages_64k(void)
{
    char why[300] = "";
    gv_space *a = &gv.a;
    const uint64_t length = (uint64_t)GV_64K_PAGES * GV_64K;
    const uint32_t leaf_bits = gv.mmu.caps.levels[0].page_table_index_bit_count;
    WddmGpuRespSubmitVirtual done = {0};
    if (!a->ready) {
        report("gpuva_pages_64k", 0, "no address space A (gpuva_copy failed)");
        return;
    }
    if (gv.levels < 2 || leaf_bits < WDDM_GPU_64KB_PAGE_INDEX_BITS + 2)
        snprintf(why, sizeof(why), "no room for %u 64 KB pages in a leaf of %u index bits",
                 GV_64K_PAGES, leaf_bits);
    else if (table.dma_alloc(table.ctx, GV_SRC64_PAGES * 4096, 4096, &gv.src64))
        snprintf(why, sizeof(why), "no DMA memory");
    /* The 64 KB leaf: the leaf's segment and alignment, the geometry's size for it. */
    const gv_table *l1 = &a->table[1];
    if (!why[0] &&
        !gv_alloc_table(a, &a->leaf64, 0, gv.mmu.caps.levels[0].page_table_segment_id,
                        gv.mmu.caps.leaf_page_table_size_for_64k_pages,
                        gv.mmu.caps.levels[0].page_table_alignment_in_bytes, why, sizeof(why))) {
        uint32_t l1_entries = 1u << gv.mmu.caps.levels[1].page_table_index_bit_count;
        a->slot64 = (l1->index + 1) & (l1_entries - 1);
        /* The 64 KB leaf's VAs: the path's, level-1 slot slot64, levels 1 and 0 from 0. */
        uint64_t below =
            (1ull << (gv.mmu.shift[1] + gv.mmu.caps.levels[1].page_table_index_bit_count)) - 1;
        a->va_64k = (a->va_base & ~below) | ((uint64_t)a->slot64 << gv.mmu.shift[1]);
        gv_write w[GV_WRITES];
        uint32_t n = 0;
        w[n++] = (gv_write){&a->leaf64, 0, 0, (uint32_t)(a->leaf64.size / 8), 0};
        for (uint32_t i = 0; i < GV_64K_PAGES; i++)
            w[n++] = (gv_write){&a->leaf64, 0, i, 1,
                                gv_pte(vram->desc.id,
                                       GV_VRAM_64K + (uint64_t)(GV_64K_PAGES - 1 - i) * GV_64K)};
        w[n++] = (gv_write){l1, 1, a->slot64, 1,
                            gv_pte(a->leaf64.segment, a->leaf64.address) |
                                WDDM_GPU_PTE_PAGE_TABLE_64KB};
        /* The source: 64 scattered 4 KB pages in the 4 KB leaf. */
        for (uint32_t i = 0; i < GV_SRC64_PAGES; i++)
            w[n++] = (gv_write){&a->table[0], 0, GV_SLOT_SRC64 + i, 1,
                                gv_pte(0, gv.src64.bus + gv_src64_page(i) * 4096)};
        gv_apply(w, n, why, sizeof(why));
    }
    if (!why[0]) {
        for (uint32_t i = 0; i < GV_SRC64_PAGES; i++)
            for (uint32_t k = 0; k < 4096; k++)
                ((uint8_t *)gv.src64.cpu)[gv_src64_page(i) * 4096 + k] =
                    gv_byte64((uint64_t)i * 4096 + k);
        for (uint64_t k = 0; k < length; k++)
            vram_cpu[GV_VRAM_64K + k] = 0;
        WddmGpuVirtualCopy copy;
        wddm_build_virtual_copy(&copy, length, gv_va(GV_SLOT_SRC64), a->va_64k);
        gv_run_ok(a->context, &copy, sizeof(copy), &done, "COPY into the 64 KB pages", why,
                  sizeof(why));
    }
    for (uint32_t i = 0; i < GV_64K_PAGES && !why[0]; i++) {
        uint64_t at = GV_VRAM_64K + (uint64_t)(GV_64K_PAGES - 1 - i) * GV_64K;
        for (uint32_t k = 0; k < GV_64K; k++)
            if (vram_cpu[at + k] != gv_byte64((uint64_t)i * GV_64K + k)) {
                snprintf(why, sizeof(why), "64 KB page %u (VRAM %#" PRIx64 ") byte %u is %#x, "
                         "want %#x", i, at, k, vram_cpu[at + k],
                         gv_byte64((uint64_t)i * GV_64K + k));
                break;
            }
    }
    report("gpuva_pages_64k", !why[0], "space A: level-1 slot %u -> 64 KB leaf (%" PRIu64
           " bytes, %u entries, segment %u at %#" PRIx64 ") mapping %u VRAM 64 KB pages from %#x "
           "in reverse; COPY of %" PRIu64 " bytes from %u scattered 4 KB DMA pages to VA %#"
           PRIx64 ": status %u bytes %" PRIu64 ", BAR read back %s%s%s", a->slot64,
           a->leaf64.size, 1u << (leaf_bits - WDDM_GPU_64KB_PAGE_INDEX_BITS), a->leaf64.segment,
           a->leaf64.address, GV_64K_PAGES, GV_VRAM_64K, length, GV_SRC64_PAGES, a->va_64k,
           done.status, done.bytes_transferred, why[0] ? "-" : "matches", why[0] ? ": " : "",
           why);
}

static void test_gpuva_page_fault(void)
{
    char why[300] = "";
    gv_space *a = &gv.a;
    if (!a->ready) {
        report("gpuva_page_fault", 0, "no address space (gpuva_copy failed)");
        return;
    }
    uint8_t packets[256];
    WddmGpuVirtualCopy copy;
    const uint64_t unmapped = gv_va(GV_SLOT_UNMAPPED) + 24;
    wddm_build_virtual_copy(&copy, 8, unmapped, gv_va(GV_SLOT_DST));
    memcpy(packets, &copy, sizeof(copy));
    WddmGpuRespSubmitVirtual done = {0}, again = {0}, after = {0};
    wddm_dxgk_dma_page_faulted dxgk = {0};
    uint32_t fence = 0, fence2 = 0, fence3 = 0;
    wddm_result r = gv_run(a->context, packets, sizeof(copy), &done, &fence);
    if (r)
        snprintf(why, sizeof(why), "SUBMIT_VIRTUAL: %s", wddm_result_name(r));
    else if (done.status != WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT)
        snprintf(why, sizeof(why), "status %u, not PAGE_FAULT", done.status);
    else if ((r = wddm_page_fault_to_dxgk(&done.page_fault, &dxgk)))
        snprintf(why, sizeof(why), "page_fault_to_dxgk: %s", wddm_result_name(r));
    else {
        printf("GPUMMU DmaPageFaulted FaultedFenceId=%u FaultedVirtualAddress=%#" PRIx64
               " PageTableLevel=%u PageFaultFlags=%#x NodeOrdinal=%u FaultErrorCode=%#x "
               "FaultedPrimitiveAPISequenceNumber=%#" PRIx64 " (device: kind %u, context %u, "
               "packet at %#x)\n", dxgk.FaultedFenceId, dxgk.FaultedVirtualAddress,
               dxgk.PageTableLevel, dxgk.PageFaultFlags, dxgk.NodeOrdinal, dxgk.FaultErrorCode,
               dxgk.FaultedPrimitiveAPISequenceNumber, done.page_fault.fault.kind,
               done.page_fault.context_id, done.page_fault.packet_offset);
        fflush(stdout);
        if (dxgk.FaultedVirtualAddress != unmapped || dxgk.PageTableLevel != 0 ||
            dxgk.FaultedFenceId != fence || dxgk.NodeOrdinal != WDDM_GPU_NODE_VIRTUAL ||
            dxgk.PageFaultFlags != WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED ||
            done.page_fault.fault.kind != WDDM_GPU_MMU_FAULT_NOT_PRESENT)
            snprintf(why, sizeof(why), "DmaPageFaulted: VA %#" PRIx64 " level %u fence %u "
                     "node %u flags %#x kind %u, want VA %#" PRIx64 " level 0 fence %u flags "
                     "%#x kind NOT_PRESENT", dxgk.FaultedVirtualAddress, dxgk.PageTableLevel,
                     dxgk.FaultedFenceId, dxgk.NodeOrdinal, dxgk.PageFaultFlags,
                     done.page_fault.fault.kind, unmapped, fence,
                     WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED);
    }
    /* The node refuses work until RESET_ENGINE. */
    if (!why[0]) {
        r = gv_run(a->context, packets, sizeof(copy), &again, &fence2);
        if (r || again.status != WDDM_GPU_SUBMIT_STATUS_NODE_FAULTED)
            snprintf(why, sizeof(why), "second submission: %s status %u, not NODE_FAULTED",
                     wddm_result_name(r), again.status);
    }
    if (!why[0] && (r = wddm_dev_reset_engine(&dev)))
        snprintf(why, sizeof(why), "RESET_ENGINE: %s", wddm_result_name(r));
    /* A good submission works again: 8 bytes of source page 0 to VRAM page 0, and a SIGNAL. */
    const uint64_t value = 0xfeedface00000000ull | fence;
    if (!why[0]) {
        for (int b = 0; b < 8; b++)
            vram_cpu[gv_dst_offset(a, 0) + 100 + b] = 0;
        uint32_t size = gv_copy_signal(packets, 8, gv_va(GV_SLOT_SRC) + 100,
                                       gv_va(GV_SLOT_DST) + 100, value);
        r = gv_run(a->context, packets, size, &after, &fence3);
        if (r || after.status != WDDM_GPU_SUBMIT_STATUS_OK)
            snprintf(why, sizeof(why), "submission after RESET_ENGINE: %s status %u",
                     wddm_result_name(r), after.status);
        else if (gv_fence_value() != value)
            snprintf(why, sizeof(why), "fence after RESET_ENGINE holds %#" PRIx64,
                     gv_fence_value());
        for (int b = 0; b < 8 && !why[0]; b++)
            if (vram_cpu[gv_dst_offset(a, 0) + 100 + b] != gv_src_byte(a, 100 + (uint64_t)b))
                snprintf(why, sizeof(why), "VRAM byte %d after RESET_ENGINE differs", b);
    }
    report("gpuva_page_fault", !why[0], "COPY from unmapped VA %#" PRIx64 ": fence %u status %u, "
           "DmaPageFaulted VA %#" PRIx64 " level %u flags %#x kind %u; fence %u NODE_FAULTED "
           "(%u); RESET_ENGINE; fence %u status %u%s%s", unmapped, fence, done.status,
           dxgk.FaultedVirtualAddress, dxgk.PageTableLevel, dxgk.PageFaultFlags,
           done.page_fault.fault.kind, fence2, again.status, fence3, after.status,
           why[0] ? ": " : "", why);
}

/* After a fault: the fault's record against what the test expects, the paging node still
 * moving bytes while the virtual node is faulted, RESET_ENGINE. 0, or -1 with `why` set. */
typedef struct gv_fault_want {
    uint64_t va;
    uint32_t kind, level, flags;
} gv_fault_want;

static int gv_fault_then_reset(const WddmGpuRespSubmitVirtual *done, uint32_t fence,
                               const gv_fault_want *want, wddm_dxgk_dma_page_faulted *dxgk,
                               uint32_t *paging_pattern, char *why, size_t n)
{
    wddm_result r;
    if (done->status != WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT) {
        snprintf(why, n, "fence %u status %u, not PAGE_FAULT", fence, done->status);
        return -1;
    }
    if ((r = wddm_page_fault_to_dxgk(&done->page_fault, dxgk))) {
        snprintf(why, n, "page_fault_to_dxgk: %s", wddm_result_name(r));
        return -1;
    }
    const WddmGpuMmuFault *f = &done->page_fault.fault;
    if (f->kind != want->kind || f->page_table_level != want->level ||
        f->virtual_address != want->va || dxgk->FaultedVirtualAddress != want->va ||
        dxgk->PageTableLevel != want->level || dxgk->PageFaultFlags != want->flags ||
        dxgk->FaultedFenceId != fence || dxgk->NodeOrdinal != WDDM_GPU_NODE_VIRTUAL)
        snprintf(why, n, "record: kind %u level %u VA %#" PRIx64 ", DmaPageFaulted VA %#" PRIx64
                 " level %u flags %#x fence %u node %u; want kind %u level %u VA %#" PRIx64
                 " flags %#x fence %u", f->kind, f->page_table_level, f->virtual_address,
                 dxgk->FaultedVirtualAddress, dxgk->PageTableLevel, dxgk->PageFaultFlags,
                 dxgk->FaultedFenceId, dxgk->NodeOrdinal, want->kind, want->level, want->va,
                 want->flags, fence);
    /* The paging node and the reset, even after a wrong record: the next test needs the node. */
    char w2[200] = "";
    gv_paging_fill(paging_pattern, w2, sizeof(w2));
    if (w2[0] && !why[0])
        snprintf(why, n, "%s", w2);
    if ((r = wddm_dev_reset_engine(&dev)) && !why[0])
        snprintf(why, n, "RESET_ENGINE: %s", wddm_result_name(r));
    return why[0] ? -1 : 0;
}

static void test_gpuva_read_only(void)
{
    char why[300] = "";
    gv_space *a = &gv.a;
    if (!a->ready) {
        report("gpuva_read_only", 0, "no address space (gpuva_copy failed)");
        return;
    }
    const uint64_t va = gv_va(GV_SLOT_READ_ONLY) + 8;
    for (uint32_t k = 0; k < 4096; k++)
        vram_cpu[GV_VRAM_READ_ONLY + k] = 0x3c;
    gv_write w = {&a->table[0], 0, GV_SLOT_READ_ONLY, 1,
                  gv_pte(vram->desc.id, GV_VRAM_READ_ONLY) | WDDM_GPU_PTE_READ_ONLY};
    WddmGpuRespSubmitVirtual done = {0}, after = {0};
    wddm_dxgk_dma_page_faulted dxgk = {0};
    WddmGpuRespEvent ev = {0};
    int others = 0, got = 0;
    uint32_t fence = 0, paging = 0;
    wddm_result r = WDDM_OK;
    if (!gv_apply(&w, 1, why, sizeof(why)) && (r = wddm_dev_post_events(&dev, 1)))
        snprintf(why, sizeof(why), "WAIT_EVENT: %s", wddm_result_name(r));
    if (!why[0]) {
        WddmGpuVirtualFill fill;
        wddm_build_virtual_fill(&fill, 0x11223344u, 16, va);
        if ((r = gv_run(a->context, &fill, sizeof(fill), &done, &fence)))
            snprintf(why, sizeof(why), "SUBMIT_VIRTUAL: %s", wddm_result_name(r));
    }
    /* The same record comes as a PAGE_FAULT event. */
    if (!why[0] && done.status == WDDM_GPU_SUBMIT_STATUS_PAGE_FAULT &&
        (!(got = wait_event(WDDM_GPU_EVENT_PAGE_FAULT, &ev, &others)) ||
         memcmp(&ev.page_fault, &done.page_fault, sizeof(ev.page_fault)) != 0))
        snprintf(why, sizeof(why), "PAGE_FAULT event %s (VA %#" PRIx64 " kind %u, %d others)",
                 got ? "differs from the answer's record" : "missing",
                 ev.page_fault.fault.virtual_address, ev.page_fault.fault.kind, others);
    gv_fault_want want = {va, WDDM_GPU_MMU_FAULT_READ_ONLY, 0,
                          WDDM_GPU_PAGE_FAULT_FLAG_WRITE |
                              WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED};
    if (!why[0])
        gv_fault_then_reset(&done, fence, &want, &dxgk, &paging, why, sizeof(why));
    for (uint32_t k = 0; k < 4096 && !why[0]; k++)
        if (vram_cpu[GV_VRAM_READ_ONLY + k] != 0x3c)
            snprintf(why, sizeof(why), "the read-only page changed at byte %u (%#x)", k,
                     vram_cpu[GV_VRAM_READ_ONLY + k]);
    /* Reading through the entry works: 16 bytes to space A's destination page 0. */
    if (!why[0]) {
        for (uint32_t k = 0; k < 16; k++)
            vram_cpu[gv_dst_offset(a, 0) + 200 + k] = 0;
        WddmGpuVirtualCopy copy;
        wddm_build_virtual_copy(&copy, 16, va, gv_va(GV_SLOT_DST) + 200);
        gv_run_ok(a->context, &copy, sizeof(copy), &after, "read through it after RESET_ENGINE",
                  why, sizeof(why));
        for (uint32_t k = 0; k < 16 && !why[0]; k++)
            if (vram_cpu[gv_dst_offset(a, 0) + 200 + k] != 0x3c)
                snprintf(why, sizeof(why), "read through the read-only entry: byte %u is %#x", k,
                         vram_cpu[gv_dst_offset(a, 0) + 200 + k]);
    }
    report("gpuva_read_only", !why[0], "FILL of 16 bytes through a READ_ONLY leaf entry at VA %#"
           PRIx64 ": fence %u status %u kind %u level %u, DmaPageFaulted VA %#" PRIx64 " level %u "
           "flags %#x (WRITE|ENGINE_RESET_REQUIRED), PAGE_FAULT event %s; paging FILL %#x while "
           "faulted OK; RESET_ENGINE; page unchanged, a read through it status %u%s%s", va,
           fence, done.status, done.page_fault.fault.kind, done.page_fault.fault.page_table_level,
           dxgk.FaultedVirtualAddress, dxgk.PageTableLevel, dxgk.PageFaultFlags,
           got ? "the same record" : "-", paging, after.status, why[0] ? ": " : "", why);
}

static void test_gpuva_root_overrun(void)
{
    char why[300] = "";
    gv_space *a = &gv.a;
    if (!a->ready) {
        report("gpuva_root_overrun", 0, "no address space (gpuva_copy failed)");
        return;
    }
    /* The DMA buffer is fetched through the path's root slot, so the root is bound with the
     * entries up to that slot and the FILL goes to a VA under the next slot, just past them. */
    const uint32_t root_level = gv.levels - 1;
    const gv_table *root = &a->table[root_level];
    const uint32_t entries = root->index + 1;
    const uint32_t shift = gv.mmu.shift[root_level];
    const uint64_t va = (gv_va(GV_SLOT_DST) & ~(((uint64_t)a->root_entries - 1) << shift)) +
                        ((uint64_t)entries << shift) + 16;
    const uint64_t dst = gv_va(GV_SLOT_DST) + 16;
    WddmGpuRespSubmitVirtual done = {0}, after = {0};
    wddm_dxgk_dma_page_faulted dxgk = {0};
    uint32_t fence = 0, paging = 0;
    wddm_result r = WDDM_OK;
    if (entries >= a->root_entries)
        snprintf(why, sizeof(why), "the path uses the last root slot: no VA past NumEntries");
    else if ((r = wddm_dev_set_root_page_table(&dev, a->context, root->segment, root->address,
                                               entries)))
        snprintf(why, sizeof(why), "SET_ROOT_PAGE_TABLE with %u entries: %s", entries,
                 wddm_result_name(r));
    if (!why[0]) {
        WddmGpuVirtualFill fill;
        wddm_build_virtual_fill(&fill, 0x55aa55aau, 8, va);
        if ((r = gv_run(a->context, &fill, sizeof(fill), &done, &fence)))
            snprintf(why, sizeof(why), "SUBMIT_VIRTUAL: %s", wddm_result_name(r));
    }
    gv_fault_want want = {va, WDDM_GPU_MMU_FAULT_ROOT_OVERRUN, root_level,
                          WDDM_GPU_PAGE_FAULT_FLAG_WRITE |
                              WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED};
    if (!why[0])
        gv_fault_then_reset(&done, fence, &want, &dxgk, &paging, why, sizeof(why));
    /* The whole root again: a FILL through the path lands. */
    if (!why[0] && (r = wddm_dev_set_root_page_table(&dev, a->context, root->segment,
                                                     root->address, a->root_entries)))
        snprintf(why, sizeof(why), "SET_ROOT_PAGE_TABLE with %u entries: %s", a->root_entries,
                 wddm_result_name(r));
    if (!why[0]) {
        WddmGpuVirtualFill fill;
        wddm_build_virtual_fill(&fill, 0x55aa55aau, 8, dst);
        for (int k = 0; k < 8; k++)
            vram_cpu[gv_dst_offset(a, 0) + 16 + k] = 0;
        gv_run_ok(a->context, &fill, sizeof(fill), &after, "FILL with the whole root", why,
                  sizeof(why));
        for (int k = 0; k < 8 && !why[0]; k++)
            if (vram_cpu[gv_dst_offset(a, 0) + 16 + k] != (uint8_t)(0x55aa55aau >> (8 * (k % 4))))
                snprintf(why, sizeof(why), "FILL with the whole root: byte %d is %#x", k,
                         vram_cpu[gv_dst_offset(a, 0) + 16 + k]);
    }
    report("gpuva_root_overrun", !why[0], "SET_ROOT_PAGE_TABLE NumEntries %u (up to the path's "
           "root slot %u): FILL at VA %#" PRIx64 " (root slot %u): fence %u status %u kind %u "
           "level %u, DmaPageFaulted VA %#" PRIx64 " level %u flags %#x; paging FILL %#x while "
           "faulted OK; RESET_ENGINE; root rebound with %u entries, FILL at %#" PRIx64
           " status %u lands%s%s", entries, root->index, va, entries, fence, done.status,
           done.page_fault.fault.kind, done.page_fault.fault.page_table_level,
           dxgk.FaultedVirtualAddress, dxgk.PageTableLevel, dxgk.PageFaultFlags, paging,
           a->root_entries, dst, after.status, why[0] ? ": " : "", why);
}

/* Space C's destination page 0 against source page `page` (gv_byte's index). */
static int gv_check_page(const gv_space *s, uint32_t page, const char *what, char *why, size_t n)
{
    for (uint32_t k = 0; k < 4096; k++) {
        uint8_t got = vram_cpu[gv_dst_offset(s, 0) + k];
        if (got != gv_byte((uint64_t)page * 4096 + k)) {
            snprintf(why, n, "%s: VRAM byte %u is %#x, source page %u has %#x", what, k, got,
                     page, gv_byte((uint64_t)page * 4096 + k));
            return -1;
        }
    }
    return 0;
}

/* Space C's COPY of one page, SRC to DST, into a zeroed VRAM page. */
static int gv_copy_page(const gv_space *s, const char *what, char *why, size_t n)
{
    WddmGpuRespSubmitVirtual done;
    WddmGpuVirtualCopy copy;
    for (uint32_t k = 0; k < 4096; k++)
        vram_cpu[gv_dst_offset(s, 0) + k] = 0;
    wddm_build_virtual_copy(&copy, 4096, gv_va(GV_SLOT_SRC), gv_va(GV_SLOT_DST));
    return gv_run_ok(s->context, &copy, sizeof(copy), &done, what, why, n);
}

static void test_gpuva_stale_tlb(void)
{
    char why[300] = "";
    gv_space *c = &gv.c;
    if (!gv.a.ready) {
        report("gpuva_stale_tlb", 0, "no address space (gpuva_copy failed)");
        return;
    }
    WddmGpuRespEvent ev = {0};
    int others = 0, got = 0;
    wddm_result r = WDDM_OK;
    const uint64_t old_entry = gv_pte(0, gv.src.bus + gv_src_page(0) * 4096);
    const uint64_t new_entry = gv_pte(0, gv.src.bus + gv_src_page(1) * 4096);
    /* Space C in a context of the checking mode: SRC maps source page 0. */
    if (!gv_space_up(c, 'C', 2, GV_CONTEXT_C, WDDM_GPU_CONTEXT_FLAG_CHECK_TLB, 0,
                     GV_VRAM_DATA_C, why, sizeof(why)) &&
        !gv_copy_page(c, "first COPY", why, sizeof(why)))
        gv_check_page(c, 0, "first COPY", why, sizeof(why));
    /* SRC rewritten to source page 1 without FLUSH_TLB: the cached translation is served. */
    gv_write w = {&c->table[0], 0, GV_SLOT_SRC, 1, new_entry};
    if (!why[0] && !gv_apply(&w, 1, why, sizeof(why)) && (r = wddm_dev_post_events(&dev, 1)))
        snprintf(why, sizeof(why), "WAIT_EVENT: %s", wddm_result_name(r));
    if (!why[0] && !gv_copy_page(c, "COPY without FLUSH_TLB", why, sizeof(why)))
        gv_check_page(c, 0, "COPY without FLUSH_TLB (the old page expected)", why, sizeof(why));
    if (!why[0]) {
        got = wait_event(WDDM_GPU_EVENT_STALE_TRANSLATION, &ev, &others);
        printf("GPUMMU stale translation: VA %#" PRIx64 " level %u cached %#" PRIx64 " memory %#"
               PRIx64 " (context %u)\n", ev.stale.virtual_address, ev.stale.page_table_level,
               ev.stale.cached_entry, ev.stale.memory_entry, ev.stale.context_id);
        fflush(stdout);
        if (!got || ev.stale.virtual_address != gv_va(GV_SLOT_SRC) ||
            ev.stale.page_table_level != 0 || ev.stale.cached_entry != old_entry ||
            ev.stale.memory_entry != new_entry || ev.stale.context_id != c->context)
            snprintf(why, sizeof(why), "STALE_TRANSLATION event %s: VA %#" PRIx64 " level %u "
                     "cached %#" PRIx64 " memory %#" PRIx64 " context %u (%d other events); want "
                     "VA %#" PRIx64 " level 0 cached %#" PRIx64 " memory %#" PRIx64 " context %u",
                     got ? "wrong" : "missing", ev.stale.virtual_address,
                     ev.stale.page_table_level, ev.stale.cached_entry, ev.stale.memory_entry,
                     ev.stale.context_id, others, gv_va(GV_SLOT_SRC), old_entry, new_entry,
                     c->context);
    }
    /* FLUSH_TLB of the page on the paging node: the new entry is used. */
    long st = -1;
    if (!why[0]) {
        const gv_table *root = &c->table[gv.levels - 1];
        wddm_op_flush_tlb op = {root->segment, 0, root->address, gv_va(GV_SLOT_SRC),
                                gv_va(GV_SLOT_SRC) + 4096};
        WddmGpuRespSubmit resp;
        const char *w2 = "";
        r = wddm_pb_init(&gv.pb.pb, wddm_dev_layout(&dev), gv.pb.mem.cpu,
                         (uint32_t)gv.pb.mem.size);
        if (!r)
            r = wddm_pb_flush_tlb(&gv.pb.pb, &op);
        st = r ? -1 : run(&gv.pb, &resp, &w2);
        if (st != WDDM_GPU_SUBMIT_STATUS_OK)
            snprintf(why, sizeof(why), "FLUSH_TLB: status %ld %s", st,
                     r ? wddm_result_name(r) : w2);
    }
    if (!why[0] && !gv_copy_page(c, "COPY after FLUSH_TLB", why, sizeof(why)))
        gv_check_page(c, 1, "COPY after FLUSH_TLB (the new page expected)", why, sizeof(why));
    report("gpuva_stale_tlb", !why[0], "space C, context %u with CHECK_TLB: COPY of a page; its "
           "source entry rewritten (%#" PRIx64 " -> %#" PRIx64 ") without FLUSH_TLB: the next "
           "COPY still reads the old page, STALE_TRANSLATION event %s (VA %#" PRIx64 " level %u "
           "context %u); FLUSH_TLB of the page status %ld; the COPY then reads the new page%s%s",
           c->context, old_entry, new_entry, got ? "received" : "missing",
           ev.stale.virtual_address, ev.stale.page_table_level, ev.stale.context_id, st,
           why[0] ? ": " : "", why);
}

/* DESTROY_CONTEXT of every context the mode created; a submission to one then ends
 * BAD_CONTEXT. */
static void test_gpuva_destroy(void)
{
    char why[300] = "";
    gv_space *spaces[] = {&gv.a, &gv.b, &gv.c};
    char names[8] = "";
    uint32_t destroyed = 0;
    for (uint32_t i = 0; i < 3; i++) {
        if (!spaces[i]->created)
            continue;
        wddm_result r = wddm_dev_destroy_context(&dev, spaces[i]->context);
        if (r && !why[0])
            snprintf(why, sizeof(why), "DESTROY_CONTEXT %u: %s", spaces[i]->context,
                     wddm_result_name(r));
        spaces[i]->created = spaces[i]->ready = false;
        names[destroyed++] = spaces[i]->name;
    }
    WddmGpuRespSubmitVirtual done = {0};
    uint32_t fence = 0;
    if (!why[0] && destroyed == 0)
        snprintf(why, sizeof(why), "no context was created");
    if (!why[0]) {
        WddmGpuVirtualSignal signal;
        wddm_build_virtual_signal(&signal, gv_va(GV_SLOT_FENCE), 1);
        wddm_result r = gv_run(GV_CONTEXT, &signal, sizeof(signal), &done, &fence);
        if (r || done.status != WDDM_GPU_SUBMIT_STATUS_BAD_CONTEXT)
            snprintf(why, sizeof(why), "SUBMIT_VIRTUAL to destroyed context %u: %s status %u, "
                     "not BAD_CONTEXT", GV_CONTEXT, wddm_result_name(r), done.status);
    }
    report("gpuva_destroy", !why[0], "DESTROY_CONTEXT of %u context(s) (spaces %s); SUBMIT_VIRTUAL "
           "fence %u to context %u then: status %u (BAD_CONTEXT)%s%s", destroyed, names, fence,
           GV_CONTEXT, done.status, why[0] ? ": " : "", why);
}

static int main_gpuva(const char *bdf)
{
    if (linux_os_open(&los, bdf, &table)) {
        report("device_init", 0, "no GPU function usable through sysfs");
        return 1;
    }
    if (test_init()) {
        test_segments();
        test_gpuva_capset();
        test_gpuva_copy();
        test_gpuva_two_spaces();
        test_gpuva_pages_64k();
        test_gpuva_page_fault();
        test_gpuva_read_only();
        test_gpuva_root_overrun();
        test_gpuva_stale_tlb();
        test_gpuva_destroy();
        wddm_dev_teardown(&dev);
    }
    linux_os_close(&los);
    printf("GUEST-CSUMMARY %d/%d passed\n", passed, total);
    return passed == total ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "gpuva") == 0)
        return main_gpuva(argc > 2 ? argv[2] : NULL);
    if (argc > 1 && strcmp(argv[1], "tdr") == 0)
        return main_tdr(argc > 2 ? argv[2] : NULL);
    if (linux_os_open(&los, argc > 1 ? argv[1] : NULL, &table)) {
        report("device_init", 0, "no GPU function usable through sysfs");
        return 1;
    }
    if (test_init()) {
        wddm_result r = wddm_dev_status_page_register(&dev);
        report("status_page", r == WDDM_OK, "REGISTER_STATUS_PAGE: %s", wddm_result_name(r));
        test_segments();
        test_fill();
        test_aperture();
        test_fences();
        test_fault();
        test_event();
        test_preempt();
        test_reset();
        wddm_dev_teardown(&dev);
    }
    linux_os_close(&los);
    printf("GUEST-CSUMMARY %d/%d passed\n", passed, total);
    return passed == total ? 0 : 1;
}
