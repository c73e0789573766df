/* The paging-buffer builder with hostile operations: out-of-range and overflowing offsets,
 * lengths, page counts, PFN lists, and too little room. Each refusal must return its own
 * error and leave the buffer, its guard bytes after the end, and the counters untouched. */

#include <string.h>

#include "caps_fixture.h"
#include "check.h"

#define BUF 512
#define GUARD 64
#define FILLER 0x5A
#define PFNS 0x10000ull  /* a PFN array's bus address (never dereferenced by the builder) */
#define APERTURE 3
#define PAGE 4096ull

static wddm_layout layout;
static _Alignas(8) uint8_t mem[BUF + GUARD];
static wddm_pb pb;

typedef struct pb_case {
    const char *name;
    wddm_result (*op)(void);
    wddm_result want;
} pb_case;

static wddm_result fill(uint32_t id, uint64_t address, uint64_t size)
{
    wddm_op_fill op = {.FillPattern = 0x11223344, .DestinationSegmentId = id,
                       .DestinationSegmentAddress = address, .FillSize = size};
    return wddm_pb_fill(&pb, &op);
}

/* A TRANSFER from segment 1 into an MDL of `count` pages. */
static wddm_result to_mdl(uint64_t src, uint64_t offset, uint64_t size, uint64_t bus,
                          uint32_t count, uint32_t byte_offset, uint32_t mdl_offset)
{
    wddm_op_transfer op = {0};
    op.TransferOffset = offset;
    op.TransferSize = size;
    op.Source.SegmentId = 1;
    op.Source.SegmentAddress = src;
    op.Destination.Mdl = (wddm_pfn_list){.bus = bus, .count = count, .byte_offset = byte_offset};
    op.MdlOffset = mdl_offset;
    return wddm_pb_transfer(&pb, &op);
}

static wddm_result map(uint32_t id, uint64_t first, uint64_t pages, uint64_t bus, uint32_t count,
                       uint32_t mdl_offset, uint32_t coherent)
{
    wddm_op_map_aperture op = {.SegmentId = id, .CacheCoherent = coherent,
                               .OffsetInPages = first, .NumberOfPages = pages,
                               .Mdl = {.bus = bus, .count = count}, .MdlOffset = mdl_offset};
    return wddm_pb_map_aperture(&pb, &op);
}

static wddm_result map2(uint32_t contiguous, uint64_t base, uint32_t adl_pages, uint32_t adl_offset,
                        uint64_t pages)
{
    wddm_op_map_aperture2 op = {.SegmentId = APERTURE, .OffsetInPages = 0,
                                .NumberOfPages = pages, .AdlContiguous = contiguous,
                                .AdlPageCount = adl_pages, .AdlBase = base,
                                .AdlOffset = adl_offset};
    return wddm_pb_map_aperture2(&pb, &op);
}

static wddm_result unmap(uint64_t first, uint64_t pages, uint64_t dummy)
{
    wddm_op_unmap_aperture op = {.SegmentId = APERTURE, .OffsetInPages = first,
                                 .NumberOfPages = pages, .DummyPage = dummy};
    return wddm_pb_unmap_aperture(&pb, &op);
}

static wddm_result physical(uint32_t id, uint64_t address, uint32_t size)
{
    wddm_op_physical op = {.SegmentId = id, .Size = size, .PhysicalAddress = address};
    return wddm_pb_write_physical(&pb, &op);
}

static wddm_result discard(uint32_t id, uint64_t address, uint32_t idle)
{
    wddm_op_discard op = {.SegmentId = id, .AllocationIsIdle = idle, .SegmentAddress = address};
    return wddm_pb_discard(&pb, &op);
}

#define CASE(name, want, expr)                                                               \
    static wddm_result op_##name(void) { return expr; }
#define CASES(X)                                                                             \
    X(fill_segment_0, WDDM_E_INVALID, fill(0, 0, 4096))                                      \
    X(fill_segment_past_count, WDDM_E_INVALID, fill(4, 0, 4096))                             \
    X(fill_aperture, WDDM_E_INVALID, fill(APERTURE, FIX_APERTURE_BASE, 4096))                \
    X(fill_past_segment_end, WDDM_E_RANGE, fill(1, FIX_SEG1_SIZE - 4, 8))                    \
    X(fill_below_segment_base, WDDM_E_RANGE, fill(2, FIX_SEG2_BASE - 8, 8))                  \
    X(fill_address_wraps, WDDM_E_RANGE, fill(1, UINT64_MAX - 3, 8))                          \
    X(fill_size_wraps, WDDM_E_RANGE, fill(1, 4096, UINT64_MAX))                              \
    X(transfer_offset_wraps, WDDM_E_RANGE, to_mdl(8, UINT64_MAX, 8, PFNS, 1, 0, 0))          \
    X(transfer_past_segment_end, WDDM_E_RANGE,                                               \
      to_mdl(FIX_SEG1_SIZE - PAGE, 0, 2 * PAGE, PFNS, 2, 0, 0))                              \
    X(transfer_pfn_list_unaligned, WDDM_E_INVALID, to_mdl(0, 0, 8, PFNS + 4, 1, 0, 0))       \
    X(transfer_pfn_list_too_long, WDDM_E_INVALID, to_mdl(0, 0, 8, PFNS, FIX_MAX_FRAMES + 1, 0, 0)) \
    X(transfer_byte_offset_a_page, WDDM_E_INVALID, to_mdl(0, 0, 8, PFNS, 1, 4096, 0))        \
    X(transfer_mdl_offset_wraps, WDDM_E_RANGE, to_mdl(0, 0, 8, PFNS, 4, 0, UINT32_MAX))      \
    X(transfer_pfn_list_short, WDDM_E_RANGE, to_mdl(0, 0, 3 * PAGE, PFNS, 2, 0, 0))          \
    X(transfer_byte_offset_past_list, WDDM_E_RANGE, to_mdl(0, 0, PAGE, PFNS, 1, 100, 0))     \
    X(transfer_mdl_offset_past_list, WDDM_E_RANGE, to_mdl(0, 0, PAGE, PFNS, 2, 0, 2))        \
    X(transfer_size_huge, WDDM_E_RANGE, to_mdl(0, 0, UINT64_MAX, PFNS, 2, 0, 0))            \
    X(discard_idle_flag, WDDM_E_INVALID, discard(1, 0, 2))                                   \
    X(discard_aperture, WDDM_E_INVALID, discard(APERTURE, FIX_APERTURE_BASE, 0))             \
    X(discard_past_segment, WDDM_E_RANGE, discard(1, FIX_SEG1_SIZE + PAGE, 0))               \
    X(physical_size_0, WDDM_E_INVALID, physical(1, 0, 0))                                    \
    X(physical_size_9, WDDM_E_INVALID, physical(1, 0, 9))                                    \
    X(physical_past_segment, WDDM_E_RANGE, physical(1, FIX_SEG1_SIZE - 4, 8))                \
    X(physical_address_wraps, WDDM_E_RANGE, physical(1, UINT64_MAX - 3, 8))                  \
    X(map_memory_segment, WDDM_E_INVALID, map(1, 0, 1, PFNS, 1, 0, 0))                       \
    X(map_no_segment, WDDM_E_INVALID, map(0, 0, 1, PFNS, 1, 0, 0))                           \
    X(map_coherent_flag_2, WDDM_E_INVALID, map(APERTURE, 0, 1, PFNS, 1, 0, 2))               \
    X(map_coherent_into_noncoherent, WDDM_E_INVALID, map(APERTURE, 0, 1, PFNS, 1, 0, 1))     \
    X(map_pages_past_aperture, WDDM_E_RANGE,                                                 \
      map(APERTURE, FIX_APERTURE_PAGES - 4, 8, PFNS, 8, 0, 0))                               \
    X(map_pages_wrap, WDDM_E_RANGE, map(APERTURE, UINT64_MAX, 2, PFNS, 2, 0, 0))             \
    X(map_past_pfn_list, WDDM_E_RANGE, map(APERTURE, 0, 4, PFNS, 4, 1, 0))                   \
    X(map_pfn_list_unaligned, WDDM_E_INVALID, map(APERTURE, 0, 1, PFNS + 2, 1, 0, 0))        \
    X(map_pfn_list_too_long, WDDM_E_INVALID, map(APERTURE, 0, 1, PFNS, FIX_MAX_FRAMES + 1, 0, 0)) \
    X(map2_contiguous_flag_2, WDDM_E_INVALID, map2(2, 0x100, 4, 0, 4))                       \
    X(map2_page_array_unaligned, WDDM_E_INVALID, map2(0, PFNS + 4, 4, 0, 4))                 \
    X(map2_page_array_too_long, WDDM_E_INVALID, map2(0, PFNS, FIX_MAX_FRAMES + 1, 0, 4))     \
    X(map2_past_adl, WDDM_E_RANGE, map2(1, 0x100, 4, 1, 4))                                  \
    X(map2_pages_past_aperture, WDDM_E_RANGE, map2(1, 0x100, 4096, 0, FIX_APERTURE_PAGES + 1)) \
    X(unmap_dummy_unaligned, WDDM_E_INVALID, unmap(0, 1, 0x2000 + 8))                        \
    X(unmap_pages_past_aperture, WDDM_E_RANGE, unmap(FIX_APERTURE_PAGES, 1, 0x2000))         \
    X(unmap_pages_wrap, WDDM_E_RANGE, unmap(2, UINT64_MAX - 1, 0x2000))                      \
    X(unmap_memory_segment, WDDM_E_INVALID,                                                  \
      wddm_pb_unmap_aperture(&pb, &(wddm_op_unmap_aperture){.SegmentId = 1, .NumberOfPages = 1}))

CASES(CASE)
#define ENTRY(name, want, expr) {#name, op_##name, want},
static const pb_case cases[] = {CASES(ENTRY)};

static void fresh(uint32_t size)
{
    memset(mem, FILLER, sizeof(mem));
    CHECK_EQ(wddm_pb_init(&pb, &layout, mem, size), WDDM_OK);
}

static bool untouched_from(size_t from)
{
    for (size_t i = from; i < sizeof(mem); i++)
        if (mem[i] != FILLER)
            return false;
    return true;
}

static const pb_case *current;

static void refused(void)
{
    fresh(BUF);
    CHECK_EQ(current->op(), current->want);
    CHECK(untouched_from(0));
    CHECK_EQ(pb.used, 0);
    CHECK_EQ(pb.packets, 0);
    /* After a packet, the same refusal leaves that packet and the rest alone. */
    fresh(BUF);
    CHECK_EQ(wddm_pb_fence(&pb, 7), WDDM_OK);
    uint32_t used = pb.used;
    uint8_t before[BUF];
    memcpy(before, mem, BUF);
    CHECK_EQ(current->op(), current->want);
    CHECK(memcmp(before, mem, BUF) == 0);
    CHECK(untouched_from(used));
    CHECK_EQ(pb.used, used);
    CHECK_EQ(pb.packets, 1);
}

/* The buffer's end: a packet that does not fit is WDDM_E_FULL with nothing written; one that
 * fits exactly is written up to the end and not a byte past it. */
static void buffer_full(void)
{
    const uint32_t fill_size = sizeof(WddmGpuPacketFill);
    fresh(fill_size - 8);
    CHECK_EQ(fill(1, 0, 64), WDDM_E_FULL);
    CHECK(untouched_from(0));
    CHECK_EQ(pb.used, 0);

    fresh(fill_size + sizeof(WddmGpuPacketFence) - 1);
    CHECK_EQ(fill(1, 0, 64), WDDM_OK);
    CHECK_EQ(wddm_pb_fence(&pb, 1), WDDM_E_FULL);
    CHECK_EQ(to_mdl(0, 0, 8, PFNS, 1, 0, 0), WDDM_E_FULL);
    static const uint8_t raw[16];
    CHECK_EQ(wddm_pb_raw(&pb, raw, sizeof(raw)), WDDM_E_FULL);
    CHECK_EQ(pb.used, fill_size);
    CHECK_EQ(pb.packets, 1);
    CHECK(untouched_from(fill_size));

    fresh(fill_size);
    CHECK_EQ(fill(1, 0, 64), WDDM_OK);
    CHECK_EQ(pb.used, fill_size);
    CHECK(untouched_from(fill_size));
    WddmGpuPacketFill p;
    memcpy(&p, mem, sizeof(p));
    CHECK_EQ(p.header.opcode, WDDM_GPU_OP_FILL);
    CHECK_EQ(p.header.size, fill_size);
    CHECK_EQ(p.pattern, 0x11223344);
    CHECK_EQ(p.length, 64);
    CHECK_EQ(p.destination.segment_id, 1);
}

/* A valid TRANSFER lands as the packet the programming guide describes (the accepted side of
 * the checks above: the boundaries themselves pass). */
static void transfer_packet(void)
{
    fresh(BUF);
    CHECK_EQ(to_mdl(FIX_SEG1_SIZE - 2 * PAGE, PAGE, PAGE, PFNS, 3, 16, 1), WDDM_OK);
    WddmGpuPacketTransfer p;
    memcpy(&p, mem, sizeof(p));
    CHECK_EQ(p.header.opcode, WDDM_GPU_OP_TRANSFER);
    CHECK_EQ(p.header.size, sizeof(p));
    CHECK_EQ(p.length, PAGE);
    CHECK_EQ(p.source.segment_id, 1);
    CHECK_EQ(p.source.address, FIX_SEG1_SIZE - PAGE);
    CHECK_EQ(p.destination.segment_id, 0);
    CHECK_EQ(p.destination.address, PFNS);
    CHECK_EQ(p.destination.frame_count, 3);
    CHECK_EQ(p.destination.byte_offset, PAGE + 16);
    CHECK(untouched_from(sizeof(p)));
    CHECK_EQ(map(APERTURE, FIX_APERTURE_PAGES - 2, 2, PFNS, 3, 1, 0), WDDM_OK);
    CHECK_EQ(unmap(FIX_APERTURE_PAGES - 1, 1, 0x2000), WDDM_OK);
    CHECK_EQ(map2(1, 0x100, 4, 2, 2), WDDM_OK);
    CHECK_EQ(pb.packets, 4);
}

/* An MDL offset past 4 GiB does not fit the endpoint's 32-bit byte_offset: refused even when
 * the list (on a device allowing such long lists) would cover it. */
static void byte_offset_past_4g(void)
{
    wddm_layout saved = layout;
    layout.header.max_frame_list_entries = 0x200000; /* 8 GiB of pages */
    fresh(BUF);
    CHECK_EQ(to_mdl(0, 0, 8, PFNS, 0x110000, 0, 0x100000), WDDM_E_RANGE);
    CHECK(untouched_from(0));
    CHECK_EQ(to_mdl(0, 0, 8, PFNS, 0x110000, 0, 0xfffff), WDDM_OK); /* just below: fits */
    layout = saved;
}

static void parse_layout(void)
{
    test_caps c;
    caps_layout(&layout, &c, 0);
}

void paging_tests(void)
{
    run_test("paging_layout", parse_layout);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        current = &cases[i];
        run_test_named("paging_refuses_", current->name, refused);
    }
    run_test("paging_refuses_byte_offset_past_4g", byte_offset_past_4g);
    run_test("paging_buffer_full", buffer_full);
    run_test("paging_transfer_packet", transfer_packet);
}
