/* The capset parser against hostile capsets: one test per rule the parser checks, each
 * asserting WDDM_E_CAPSET, the rule's own log message (so another rule catching the same blob
 * cannot pass for it) and that the caller's layout was left untouched. Then the capset corpus
 * the Rust validator (wddm-gpu-abi capset_rules) is tested with: the same verdict on each blob. */

#include <stdio.h>
#include <string.h>

#include "caps_fixture.h"
#include "capset_corpus.h"
#include "check.h"
#include "fake_os.h"
#include "../src/util.h"

typedef struct rule {
    const char *name;
    void (*mutate)(test_caps *c, uint64_t *size);
    const char *message;
} rule;

#define MUT(name, body)                                                                      \
    static void mut_##name(test_caps *c, uint64_t *size)                                     \
    {                                                                                        \
        (void)c, (void)size;                                                                 \
        body;                                                                                \
    }

/* Segment 1 (in the BAR), 2 (banked), 3 (aperture). */
#define S1 c->seg[0]
#define S2 c->seg[1]
#define S3 c->seg[2]

MUT(short_blob, *size = sizeof(WddmGpuCapsHeader) - 1)
MUT(magic, c->h.magic ^= 1)
MUT(version, c->h.version = WDDM_GPU_CAPSET_VERSION + 1)
MUT(total_below_header, c->h.total_size = sizeof(WddmGpuCapsHeader) - 8)
MUT(total_above_blob, c->h.total_size = (uint32_t)*size + 8)
MUT(wddm_version, c->h.wddm_version = 0x0201)
MUT(no_frame_list, c->h.max_frame_list_entries = 0)
MUT(packet_too_small, c->h.max_packet_size = sizeof(WddmGpuPacketTransfer) - 8)
MUT(packet_unaligned, c->h.max_packet_size = 260)
MUT(bar_mode, c->h.vram_bar.mode = 3)
MUT(bar_reserved, c->h.vram_bar.reserved = 1)
MUT(bar_function, c->h.vram_bar.pci_function = 8)
MUT(bar_index, c->h.vram_bar.bar_index = 6)
MUT(bar_state, c->h.vram_bar.state = 2)
MUT(bar_unaligned, c->h.vram_bar.guest_physical_address += 0x800;
    S1.cpu_translated_address += 0x800)
MUT(no_segments, c->h.segment_count = 0)
MUT(too_many_segments, c->h.segment_count = WDDM_MAX_SEGMENTS + 1)
MUT(desc_size_small, c->h.segment_desc_size = sizeof(WddmGpuSegmentDesc) - 8)
MUT(segments_in_header, c->h.segments_offset = 8)
MUT(segments_past_end, c->h.segment_desc_size = sizeof(WddmGpuSegmentDesc) + 64)
MUT(banks_past_end, c->h.bank_entry_count = 3)
MUT(banks_unaligned, c->h.bank_table_offset -= 4)
MUT(segment_id_order, S2.id = 3)
MUT(reserved_flag, S1.flags |= 1u << 22)
MUT(wddm2_flag_on_1_3, S2.flags |= FIX_WDDM2_BIT)
MUT(banks_on_2_0, c->h.wddm_version = WDDM_GPU_WDDM_2_0)
MUT(size_zero, S2.size = 0)
MUT(size_unaligned, S2.size += 100)
MUT(size_wraps, S3.base_address = UINT64_MAX - 4095)
MUT(commit_above_size, S2.commit_limit = S2.size + 4096)
MUT(banking_flag_without_banks, S1.flags |= WDDM_DXGK_SEGMENT_USE_BANKING)
MUT(banks_without_flag, S2.flags &= ~WDDM_DXGK_SEGMENT_USE_BANKING)
MUT(banks_past_table, S2.bank_table_index = 1)
MUT(banks_not_increasing, c->banks[1] = c->banks[0])
MUT(bank_past_segment, c->banks[1] = S2.size + 4096)
MUT(cpu_visible_outside_bar, S2.flags |= WDDM_DXGK_SEGMENT_CPU_VISIBLE)
MUT(cpu_address_outside_bar, S3.cpu_translated_address = FIX_BAR_ADDRESS)
MUT(window_past_bar, S1.bar_offset = FIX_BAR_SIZE - 4096;
    S1.cpu_translated_address = FIX_BAR_ADDRESS + S1.bar_offset)
MUT(window_wraps, S1.bar_offset = UINT64_MAX - 4095; S1.cpu_translated_address = 0)
MUT(cpu_address_wrong, S1.cpu_translated_address += 4096)
MUT(cpu_address_not_mapped, c->h.vram_bar.state = WDDM_GPU_BAR_STATE_NOT_MAPPED)
MUT(windows_overlap, S2.bar_offset = FIX_SEG1_SIZE; S2.cpu_translated_address =
    FIX_BAR_ADDRESS + FIX_SEG1_SIZE)
MUT(paging_segment_missing, c->h.paging_buffer_segment_id = 4)
MUT(paging_segment_memory, c->h.paging_buffer_segment_id = 1)

static const rule rules[] = {
    {"short_blob", mut_short_blob, "capset shorter than its header"},
    {"magic", mut_magic, "capset magic"},
    {"version", mut_version, "capset version"},
    {"total_below_header", mut_total_below_header, "capset total_size (have)"},
    {"total_above_blob", mut_total_above_blob, "capset total_size (have)"},
    {"wddm_version", mut_wddm_version, "capset wddm_version"},
    {"no_frame_list", mut_no_frame_list, "capset limits (frame list, packet size)"},
    {"packet_too_small", mut_packet_too_small, "capset limits (frame list, packet size)"},
    {"packet_unaligned", mut_packet_unaligned, "capset limits (frame list, packet size)"},
    {"bar_mode", mut_bar_mode, "VRAM BAR locator (mode, function)"},
    {"bar_reserved", mut_bar_reserved, "VRAM BAR locator (mode, function)"},
    {"bar_function", mut_bar_function, "VRAM BAR locator (mode, function)"},
    {"bar_index", mut_bar_index, "VRAM BAR locator (mode, function)"},
    {"bar_state", mut_bar_state, "VRAM BAR locator state"},
    {"bar_unaligned", mut_bar_unaligned, "VRAM BAR address not page aligned"},
    {"no_segments", mut_no_segments, "capset segment_count"},
    {"too_many_segments", mut_too_many_segments, "capset segment_count"},
    {"desc_size_small", mut_desc_size_small, "segment_desc_size too small"},
    {"segments_in_header", mut_segments_in_header, "segment table outside the blob"},
    {"segments_past_end", mut_segments_past_end, "segment table outside the blob"},
    {"banks_past_end", mut_banks_past_end, "bank table outside the blob or unaligned"},
    {"banks_unaligned", mut_banks_unaligned, "bank table outside the blob or unaligned"},
    {"segment_id_order", mut_segment_id_order, "segment id out of order (id, want)"},
    {"reserved_flag", mut_reserved_flag, "segment flags set reserved bits (id, flags)"},
    {"wddm2_flag_on_1_3", mut_wddm2_flag_on_1_3, "segment flags set reserved bits (id, flags)"},
    {"banks_on_2_0", mut_banks_on_2_0, "banks on a WDDM 2.0 layout (id, banks)"},
    {"size_zero", mut_size_zero, "segment size (id, size)"},
    {"size_unaligned", mut_size_unaligned, "segment size (id, size)"},
    {"size_wraps", mut_size_wraps, "segment size (id, size)"},
    {"commit_above_size", mut_commit_above_size, "commit_limit above size (id, limit)"},
    {"banking_flag_without_banks", mut_banking_flag_without_banks, "segment banks (id, count)"},
    {"banks_without_flag", mut_banks_without_flag, "segment banks (id, count)"},
    {"banks_past_table", mut_banks_past_table, "segment banks (id, count)"},
    {"banks_not_increasing", mut_banks_not_increasing,
     "bank ends not increasing inside the segment (id, end)"},
    {"bank_past_segment", mut_bank_past_segment,
     "bank ends not increasing inside the segment (id, end)"},
    {"cpu_visible_outside_bar", mut_cpu_visible_outside_bar,
     "CpuVisible memory segment outside the BAR (id)"},
    {"cpu_address_outside_bar", mut_cpu_address_outside_bar,
     "cpu_translated_address outside the BAR (id)"},
    {"window_past_bar", mut_window_past_bar, "segment BAR window outside the BAR (id, offset)"},
    {"window_wraps", mut_window_wraps, "segment BAR window outside the BAR (id, offset)"},
    {"cpu_address_wrong", mut_cpu_address_wrong,
     "cpu_translated_address is not BAR + bar_offset (id, value)"},
    {"cpu_address_not_mapped", mut_cpu_address_not_mapped,
     "cpu_translated_address is not BAR + bar_offset (id, value)"},
    {"windows_overlap", mut_windows_overlap, "segment BAR windows overlap (ids)"},
    {"paging_segment_missing", mut_paging_segment_missing,
     "paging_buffer_segment_id is neither 0 nor an aperture"},
    {"paging_segment_memory", mut_paging_segment_memory,
     "paging_buffer_segment_id is neither 0 nor an aperture"},
};

/* A wddm_dev whose only use is the log callback the parser reports through. */
static void log_dev(wddm_dev *dev, fake *f)
{
    memset(dev, 0, sizeof(*dev));
    fake_init(f, NULL, 0);
    dev->os = fake_os_table(f);
}

static bool untouched(const wddm_layout *l)
{
    const uint8_t *p = (const uint8_t *)l;
    for (size_t i = 0; i < sizeof(*l); i++)
        if (p[i] != 0xA5)
            return false;
    return true;
}

static const rule *current;

static void hostile_capset(void)
{
    static fake f;
    static wddm_dev dev;
    static wddm_layout layout;
    test_caps c;
    uint64_t size = sizeof(c);
    log_dev(&dev, &f);
    caps_valid(&c, 0);
    current->mutate(&c, &size);
    memset(&layout, 0xA5, sizeof(layout));
    CHECK_EQ(wddm_capset_parse(&layout, &c, size, &dev), WDDM_E_CAPSET);
    CHECK(f.last_log && strcmp(f.last_log, current->message) == 0);
    if (f.last_log && strcmp(f.last_log, current->message) != 0)
        fprintf(stderr, "  refused by \"%s\", expected \"%s\"\n", f.last_log, current->message);
    CHECK(untouched(&layout));
    /* The public entry point refuses it the same way. */
    CHECK_EQ(wddm_layout_parse(&layout, &c, size), WDDM_E_CAPSET);
    CHECK(untouched(&layout));
}

static void valid_capsets(void)
{
    static fake f;
    static wddm_dev dev;
    static wddm_layout layout;
    for (int wddm2 = 0; wddm2 < 2; wddm2++) {
        test_caps c;
        caps_valid(&c, wddm2);
        log_dev(&dev, &f);
        CHECK_EQ(wddm_capset_parse(&layout, &c, sizeof(c), &dev), WDDM_OK);
        CHECK(f.last_log == NULL);
        CHECK_EQ(layout.segment_count, 3);
        CHECK(memcmp(&layout.header, &c.h, sizeof(c.h)) == 0);
        for (int i = 0; i < 3; i++)
            CHECK(memcmp(&layout.segments[i].desc, &c.seg[i], sizeof(c.seg[i])) == 0);
        CHECK(wddm2 ? layout.segments[1].banks == NULL : layout.segments[1].banks == c.banks);
        /* Padding past total_size is allowed. */
        uint8_t padded[sizeof(c) + 16];
        memset(padded, 0xEE, sizeof(padded));
        memcpy(padded, &c, sizeof(c));
        CHECK_EQ(wddm_layout_parse(&layout, padded, sizeof(padded)), WDDM_OK);
    }
    CHECK_EQ(wddm_layout_parse(NULL, &f, 1), WDDM_E_INVALID);
    CHECK_EQ(wddm_layout_parse(&layout, NULL, 1), WDDM_E_INVALID);
}

static const capset_corpus_entry *corpus_entry;

/* The Rust validator accepts the valid blobs and refuses each broken one (capset_corpus.rs). */
static void same_verdict_as_rust(void)
{
    /* DMA memory is page aligned: give the blob the alignment the parser may rely on. */
    static uint64_t aligned[(WDDM_MAX_CAPSET_SIZE + 7) / 8];
    static wddm_layout layout;
    const capset_corpus_entry *e = corpus_entry;
    CHECK(e->size <= sizeof(aligned));
    if (e->size > sizeof(aligned))
        return;
    /* The base cut or zero-padded to the entry's size, then the bytes its rule changes. */
    memset(aligned, 0, e->size);
    memcpy(aligned, corpus_base, e->size < sizeof(corpus_base) ? e->size : sizeof(corpus_base));
    for (uint32_t i = 0; i < e->patch_count; i++) {
        const capset_patch *p = &e->patches[i];
        CHECK((uint32_t)p->offset + p->len <= e->size && p->len <= sizeof(p->bytes));
        if ((uint32_t)p->offset + p->len > e->size || p->len > sizeof(p->bytes))
            return;
        memcpy((uint8_t *)aligned + p->offset, p->bytes, p->len);
    }
    bool valid = e->rule[0] == '\0';
    CHECK_EQ(wddm_layout_parse(&layout, aligned, e->size),
             valid ? WDDM_OK : WDDM_E_CAPSET);
}

void capset_tests(void)
{
    run_test("capset_valid_1_3_and_2_0", valid_capsets);
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        current = &rules[i];
        run_test_named("capset_refuses_", current->name, hostile_capset);
    }
    for (size_t i = 0; i < sizeof(capset_corpus) / sizeof(capset_corpus[0]); i++) {
        corpus_entry = &capset_corpus[i];
        run_test_named("capset_corpus_", corpus_entry->name, same_verdict_as_rust);
    }
}
