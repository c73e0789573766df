/* GPU virtual addressing: the geometry validator against the GpuMmu corpus (the Rust
 * validator's answers, gpummu_corpus.h), capset 62 read from a fake device that offers it
 * well or badly, the DXGK structures filled from a geometry, the DXGK_PTE conversion, the
 * page-fault record as DmaPageFaulted, the builders against the Rust builders' bytes, and the
 * paging-buffer appenders with hostile operations. */

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "device_fixture.h"
#include "gpummu_corpus.h"
#include "../src/util.h"

#define CORPUS_LEN (sizeof(gpummu_corpus) / sizeof(gpummu_corpus[0]))
#define SEGMENTS_LEN (sizeof(gpummu_corpus_segments) / sizeof(gpummu_corpus_segments[0]))

static bool all_bytes(const void *p, size_t n, uint8_t value)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != value)
            return false;
    return true;
}

/* The corpus geometry `name` (checked to exist). */
static const WddmGpuMmuCaps *corpus_caps(const char *name)
{
    for (size_t i = 0; i < CORPUS_LEN; i++)
        if (strcmp(gpummu_corpus[i].name, name) == 0)
            return &gpummu_corpus[i].caps;
    CHECK(!"no such corpus geometry");
    return &gpummu_corpus[0].caps;
}

/* A validated geometry from the corpus (checked). */
static void corpus_geometry(const char *name, wddm_gpummu *out)
{
    CHECK_EQ(wddm_gpummu_validate(corpus_caps(name), gpummu_corpus_segments, SEGMENTS_LEN, out,
                                  NULL),
             WDDM_OK);
}

/* ---- the validator ---- */

static const gpummu_corpus_entry *entry;

/* The Rust validator's answer for the geometry (gpummu_corpus.rs): the same rule, level,
 * owner and values, or the same acceptance and a geometry with its shifts. */
static void same_answer_as_rust(void)
{
    static wddm_gpummu out;
    wddm_gpummu_error e;
    memset(&out, 0xA5, sizeof(out));
    memset(&e, 0xA5, sizeof(e));
    wddm_result r =
        wddm_gpummu_validate(&entry->caps, gpummu_corpus_segments, SEGMENTS_LEN, &out, &e);
    const char *name = wddm_gpummu_rule_name(e.rule);
    if (entry->rule[0] == '\0') {
        CHECK_EQ(r, WDDM_OK);
        CHECK_EQ(e.rule, WDDM_GPUMMU_RULE_NONE);
        CHECK(memcmp(&out.caps, &entry->caps, sizeof(out.caps)) == 0);
        CHECK_EQ(out.level_count, entry->caps.page_table_level_count);
        uint32_t shift = 12;
        for (uint32_t level = 0; level < WDDM_GPU_MAX_PAGE_TABLE_LEVELS; level++) {
            CHECK_EQ(out.shift[level], level < out.level_count ? shift : 0);
            if (level < out.level_count)
                shift += entry->caps.levels[level].page_table_index_bit_count;
        }
        CHECK_EQ(shift, entry->caps.virtual_address_bit_count);
        return;
    }
    CHECK_EQ(r, WDDM_E_CAPSET);
    CHECK(name && strcmp(name, entry->rule) == 0);
    if (name && strcmp(name, entry->rule) != 0)
        fprintf(stderr, "  C answers \"%s\", Rust \"%s\"\n", name, entry->rule);
    CHECK_EQ(e.level, entry->level);
    CHECK_EQ(e.owner, entry->owner);
    CHECK_EQ(e.have, entry->have);
    CHECK_EQ(e.want, entry->want);
    CHECK(all_bytes(&out, sizeof(out), 0xA5)); /* a refused geometry leaves `out` as it was */
}

/* Every C rule number has a Rust name the corpus answers with; 0 is "", past the last NULL. */
static void rule_names(void)
{
    CHECK(strcmp(wddm_gpummu_rule_name(WDDM_GPUMMU_RULE_NONE), "") == 0);
    for (uint32_t rule = 1; rule <= WDDM_GPUMMU_RULE_COUNT; rule++) {
        const char *name = wddm_gpummu_rule_name(rule);
        bool answered = false;
        for (size_t i = 0; name && i < CORPUS_LEN; i++)
            answered |= strcmp(gpummu_corpus[i].rule, name) == 0;
        CHECK(answered);
        for (uint32_t other = 1; name && other < rule; other++)
            CHECK(strcmp(wddm_gpummu_rule_name(other), name) != 0);
    }
    CHECK(wddm_gpummu_rule_name(WDDM_GPUMMU_RULE_COUNT + 1) == NULL);
    CHECK(wddm_gpummu_rule_name(UINT32_MAX) == NULL);
}

static void validate_arguments(void)
{
    wddm_gpummu out;
    wddm_gpummu_error e;
    const WddmGpuMmuCaps *caps = corpus_caps("valid_two_levels");
    CHECK_EQ(wddm_gpummu_validate(NULL, gpummu_corpus_segments, SEGMENTS_LEN, &out, &e),
             WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_validate(caps, gpummu_corpus_segments, SEGMENTS_LEN, NULL, &e),
             WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_validate(caps, NULL, 1, &out, &e), WDDM_E_INVALID);
    /* Every table in system memory: no segment needed; the error is optional. */
    CHECK_EQ(wddm_gpummu_validate(caps, NULL, 0, &out, NULL), WDDM_OK);
    /* A segment id past the flags given is no memory segment. */
    CHECK_EQ(wddm_gpummu_validate(corpus_caps("valid_large_leaf_in_segment"), NULL, 0, &out, &e),
             WDDM_E_CAPSET);
    CHECK_EQ(e.rule, WDDM_GPUMMU_RULE_TABLE_SEGMENT);
    /* Only `segment_count` flags are read, however many the array holds: the leaf in segment
     * 1 of one segment passes, segment 2 is missing though its flags would allow it. */
    const uint32_t visible[2] = {WDDM_DXGK_SEGMENT_CPU_VISIBLE, WDDM_DXGK_SEGMENT_CPU_VISIBLE};
    WddmGpuMmuCaps moved = *corpus_caps("valid_large_leaf_in_segment");
    CHECK_EQ(wddm_gpummu_validate(&moved, visible, 1, &out, &e), WDDM_OK);
    moved.levels[0].page_table_segment_id = 2;
    moved.levels[0].paging_process_page_table_segment_id = 2;
    CHECK_EQ(wddm_gpummu_validate(&moved, visible, 1, &out, &e), WDDM_E_CAPSET);
    CHECK_EQ(e.rule, WDDM_GPUMMU_RULE_TABLE_SEGMENT);
    CHECK_EQ(e.have, 2);
    CHECK_EQ(wddm_gpummu_validate(&moved, visible, 2, &out, &e), WDDM_OK);
    CHECK_EQ(wddm_gpummu_validate(corpus_caps("max_contexts_0"), NULL, 0, &out, NULL),
             WDDM_E_CAPSET);
}

/* ---- capset 62 from the device ---- */

static WddmGpuMmuCaps mmu;

/* The device up on a WDDM 2.0 (or 1.3) segment capset, offering `mmu` as capset 62. */
static bool up_with_gpummu(int wddm2, const WddmGpuMmuCaps *offered)
{
    mmu = *offered;
    caps_valid(&caps, wddm2);
    fake_init(&f, &caps, sizeof(caps));
    fake_set_gpummu(&f, &mmu);
    wddm_result r = fake_dev_up(&f, &dev);
    CHECK_EQ(r, WDDM_OK);
    return r == WDDM_OK;
}

static void read_valid(void)
{
    wddm_gpummu out;
    wddm_gpummu_error e;
    /* The leaf in segment 1, CPU-visible in the fixture's WDDM 2.0 capset. */
    if (!up_with_gpummu(1, corpus_caps("valid_cpu_virtual_leaf_in_cpu_visible")))
        return;
    memset(&e, 0xA5, sizeof(e));
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, &e), WDDM_OK);
    CHECK(memcmp(&out.caps, &mmu, sizeof(mmu)) == 0);
    CHECK_EQ(out.level_count, 3);
    CHECK_EQ(out.shift[2], 30);
    CHECK_EQ(e.rule, WDDM_GPUMMU_RULE_NONE);
    CHECK_EQ(f.gpummu_reads, 1);
    CHECK(!dev.broken);
    /* Read again (a KMD may, after a reset): the same answer. */
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_OK);
    CHECK_EQ(f.gpummu_reads, 2);
    down();
}

/* No GpuMmu offered: not an error of the device, nothing asked, nothing broken. */
static void read_absent(void)
{
    wddm_gpummu out;
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_dev_read_gpummu(NULL, &out, NULL), WDDM_E_INVALID);
    if (!up())
        return;
    CHECK_EQ(wddm_dev_read_gpummu(&dev, NULL, NULL), WDDM_E_INVALID);
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_E_STATE); /* num_capsets 1 */
    CHECK_EQ(f.gpummu_reads, 0);
    CHECK(!dev.broken);
    CHECK(all_bytes(&out, sizeof(out), 0xA5));
    down();
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_E_STATE); /* torn down */
    /* Capset index 1 is some other capset: not ours to read. */
    if (!up_with_gpummu(1, corpus_caps("valid_two_levels")))
        return;
    f.gpummu_id = WDDM_GPU_MMU_CAPSET_ID - 1;
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_E_STATE);
    CHECK(f.last_log && strcmp(f.last_log, "capset index 1 is not the GpuMmu capset (id)") == 0);
    CHECK_EQ(f.gpummu_reads, 0);
    CHECK(!dev.broken);
    down();
}

typedef struct hostile_read {
    const char *name;
    void (*mutate)(void);
    wddm_result want;
    const char *message;
} hostile_read;

static void no_capset_behind_index_1(void) { f.gpummu = NULL; }
static void info_version_0(void) { f.gpummu_version = 0; }
static void info_size_short(void) { f.gpummu_max_size = sizeof(WddmGpuMmuCaps) - 8; }
static void answer_refused(void) { f.gpummu_type = VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER; }
static void answer_short(void) { f.gpummu_short = 8; }
static void answer_header_only(void) { f.gpummu_short = sizeof(WddmGpuMmuCaps); }
static void breaks_max_contexts(void) { mmu.max_contexts = 0; }
/* Segment 3 of the fixture is an aperture: the flags come from the segment capset. */
static void leaf_in_aperture(void) { mmu.levels[0].page_table_segment_id = 3; }
/* Segment 2 of the fixture's WDDM 2.0 capset is VRAM the CPU cannot reach. */
static void paging_tables_hidden(void) { mmu.levels[1].paging_process_page_table_segment_id = 2; }

static const hostile_read hostile_reads[] = {
    {"info_refused", no_capset_behind_index_1, WDDM_E_DEVICE,
     "GET_CAPSET_INFO 1 answer (type, len)"},
    {"info_version_0", info_version_0, WDDM_E_DEVICE, "GpuMmu capset info (version, max_size)"},
    {"info_size_short", info_size_short, WDDM_E_DEVICE, "GpuMmu capset info (version, max_size)"},
    {"answer_refused", answer_refused, WDDM_E_DEVICE, "GET_CAPSET GpuMmu answer (type, len)"},
    {"answer_short", answer_short, WDDM_E_DEVICE, "GET_CAPSET GpuMmu answer (type, len)"},
    {"answer_header_only", answer_header_only, WDDM_E_DEVICE,
     "GET_CAPSET GpuMmu answer (type, len)"},
    {"rule_max_contexts", breaks_max_contexts, WDDM_E_CAPSET, "gpummu.max_contexts"},
    {"rule_table_segment", leaf_in_aperture, WDDM_E_CAPSET, "gpummu.table_segment"},
    {"rule_table_not_cpu_visible", paging_tables_hidden, WDDM_E_CAPSET,
     "gpummu.table_not_cpu_visible"},
};

static const hostile_read *hostile;

/* Each refusal: its result, its own log message, the device broken, `out` untouched. */
static void read_hostile(void)
{
    wddm_gpummu out;
    if (!up_with_gpummu(1, corpus_caps("valid_two_levels")))
        return;
    hostile->mutate();
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), hostile->want);
    CHECK(f.last_log && strcmp(f.last_log, hostile->message) == 0);
    if (f.last_log && strcmp(f.last_log, hostile->message) != 0)
        fprintf(stderr, "  refused by \"%s\", expected \"%s\"\n", f.last_log, hostile->message);
    CHECK(dev.broken);
    CHECK(all_bytes(&out, sizeof(out), 0xA5));
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_E_DEVICE); /* broken stays broken */
    down();
}

/* The rule's log line carries the value and the level; `error` names the rule. */
static void read_rule_detail(void)
{
    wddm_gpummu out;
    wddm_gpummu_error e;
    if (!up_with_gpummu(1, corpus_caps("valid_two_levels")))
        return;
    mmu.levels[1].page_table_alignment_in_bytes = 2048;
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, &e), WDDM_E_CAPSET);
    CHECK_EQ(e.rule, WDDM_GPUMMU_RULE_ALIGNMENT);
    CHECK_EQ(e.level, 1);
    CHECK_EQ(e.have, 2048);
    CHECK_EQ(f.last_log_a, 2048);
    CHECK_EQ(f.last_log_b, 1);
    CHECK_EQ(f.last_log_level, WDDM_OS_LOG_ERROR);
    down();
}

/* GPU virtual addressing exists from WDDM 2.0 on: capset 62 beside a WDDM 1.3 layout is a
 * device breaking the contract. */
static void read_on_wddm13(void)
{
    wddm_gpummu out;
    if (!up_with_gpummu(0, corpus_caps("valid_two_levels")))
        return;
    CHECK_EQ(wddm_dev_read_gpummu(&dev, &out, NULL), WDDM_E_CAPSET);
    CHECK(f.last_log &&
          strcmp(f.last_log, "GpuMmu capset with a WDDM 1.3 layout (wddm_version)") == 0);
    CHECK(dev.broken);
    down();
}

/* ---- the DXGK structures ---- */

static void query_caps(void)
{
    wddm_gpummu g;
    wddm_dxgk_gpummucaps out;
    wddm_dxgk_querygpummucapsin in = {.PhysicalAdapterIndex = 0};
    corpus_geometry("valid_gpu_virtual", &g);
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_gpummu_query_caps(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.Value, WDDM_GPU_MMU_CAPS_SUPPORTED);
    CHECK_EQ(out.PageTableUpdateMode, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL);
    CHECK_EQ(out.VirtualAddressBitCount, 39);
    CHECK_EQ(out.LeafPageTableSizeFor64KPagesInBytes, 4096);
    CHECK_EQ(out.PageTableLevelCount, 3);
    CHECK_EQ(out.LegacyBehaviors, 0);
    /* Another physical adapter, or a missing argument: refused, the output untouched. */
    in.PhysicalAdapterIndex = 1;
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_gpummu_query_caps(&g, &in, &out), WDDM_E_INVALID);
    CHECK(all_bytes(&out, sizeof(out), 0xA5));
    in.PhysicalAdapterIndex = 0;
    CHECK_EQ(wddm_gpummu_query_caps(NULL, &in, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_query_caps(&g, NULL, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_query_caps(&g, &in, NULL), WDDM_E_INVALID);
    corpus_geometry("valid_no_flags", &g);
    CHECK_EQ(wddm_gpummu_query_caps(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.Value, 0);
}

static void query_level_desc(void)
{
    wddm_gpummu g;
    wddm_dxgk_page_table_level_desc out;
    wddm_dxgk_querypagetableleveldescin in = {0};
    corpus_geometry("valid_cpu_virtual_leaf_in_cpu_visible", &g);
    for (uint16_t level = 0; level < 3; level++) {
        const WddmGpuPageTableLevelDesc *d = &g.caps.levels[level];
        in.LevelIndex = level;
        memset(&out, 0xA5, sizeof(out));
        CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
        CHECK_EQ(out.PageTableIndexBitCount, 9);
        CHECK_EQ(out.PageTableSegmentId, d->page_table_segment_id);
        CHECK_EQ(out.PagingProcessPageTableSegmentId, d->paging_process_page_table_segment_id);
        CHECK_EQ(out.PageTableSizeInBytes, 4096);
        CHECK_EQ(out.PageTableAlignmentInBytes, 0);
    }
    CHECK_EQ(g.caps.levels[0].page_table_segment_id, 1);
    in.LevelIndex = 0;
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.PageTableSegmentId, 1);
    CHECK_EQ(out.PagingProcessPageTableSegmentId, 1);
    /* Refusals leave the output as it was. */
    const struct {
        uint16_t level, adapter;
    } bad[] = {{3, 0}, {6, 0}, {UINT16_MAX, 0}, {0, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        in = (wddm_dxgk_querypagetableleveldescin){bad[i].level, bad[i].adapter};
        memset(&out, 0xA5, sizeof(out));
        CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_E_INVALID);
        CHECK(all_bytes(&out, sizeof(out), 0xA5));
    }
    in = (wddm_dxgk_querypagetableleveldescin){0, 0};
    CHECK_EQ(wddm_gpummu_query_level_desc(NULL, &in, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, NULL, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, NULL), WDDM_E_INVALID);
    /* A valid alignment of 2^63 does not fit DXGK_PAGE_TABLE_LEVEL_DESC's UINT. */
    corpus_geometry("valid_alignment_2_63", &g);
    in.LevelIndex = 1;
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_E_RANGE);
    CHECK(all_bytes(&out, sizeof(out), 0xA5));
    in.LevelIndex = 0;
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
    corpus_geometry("valid_alignment_64k", &g);
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.PageTableAlignmentInBytes, 65536);
    /* The processes' leaf tables in segment 3, the paging process's in system memory. */
    corpus_geometry("valid_physical_leaf_in_hidden_vram", &g);
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.PageTableSegmentId, 3);
    CHECK_EQ(out.PagingProcessPageTableSegmentId, 0);
    corpus_geometry("valid_large_leaf_in_segment", &g);
    CHECK_EQ(wddm_gpummu_query_level_desc(&g, &in, &out), WDDM_OK);
    CHECK_EQ(out.PageTableIndexBitCount, 12);
    CHECK_EQ(out.PageTableSizeInBytes, 32768);
}

static void root_table_size(void)
{
    wddm_gpummu g;
    uint64_t bytes = 0;
    corpus_geometry("valid_two_levels", &g);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 1, &bytes), WDDM_OK);
    CHECK_EQ(bytes, 4096);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 512, &bytes), WDDM_OK);
    CHECK_EQ(bytes, 4096);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 0, &bytes), WDDM_OK);
    CHECK_EQ(bytes, 0);
    bytes = 7;
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 513, &bytes), WDDM_E_RANGE);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, UINT64_MAX, &bytes), WDDM_E_RANGE);
    CHECK_EQ(bytes, 7);
    corpus_geometry("valid_min_index_bits", &g); /* a root of 2 entries */
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 2, &bytes), WDDM_OK);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 3, &bytes), WDDM_E_RANGE);
    CHECK_EQ(wddm_gpummu_root_table_size(NULL, 1, &bytes), WDDM_E_INVALID);
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 1, NULL), WDDM_E_INVALID);
    g.level_count = 0; /* not a validated geometry */
    CHECK_EQ(wddm_gpummu_root_table_size(&g, 1, &bytes), WDDM_E_INVALID);
}

/* ---- DXGK_PTE ---- */

/* Each conversion as wddm_gpu_pte_from_dxgk makes or refuses it (gpummu_corpus.rs). */
static void pte_corpus(void)
{
    size_t n = sizeof(gpummu_pte_vectors) / sizeof(gpummu_pte_vectors[0]);
    for (size_t i = 0; i < n; i++) {
        const gpummu_pte_vector *v = &gpummu_pte_vectors[i];
        wddm_dxgk_pte pte = {.Flags = v->flags, .PageAddress = v->page_address};
        uint64_t entry = 0xA5A5A5A5A5A5A5A5ull;
        wddm_pte_error e = {0};
        wddm_result r = wddm_pte_from_dxgk(&pte, &entry, &e);
        if (v->reason == WDDM_PTE_OK) {
            CHECK_EQ(r, WDDM_OK);
            CHECK_EQ(entry, v->value);
        } else {
            CHECK_EQ(r, WDDM_E_INVALID);
            CHECK_EQ(e.reason, v->reason);
            CHECK_EQ(e.value, v->value);
            CHECK_EQ(entry, 0xA5A5A5A5A5A5A5A5ull);
        }
        if (check_failures)
            fprintf(stderr, "  vector %zu: flags %#llx page %#llx\n", i,
                    (unsigned long long)v->flags, (unsigned long long)v->page_address);
    }
    wddm_dxgk_pte pte = {1, 0};
    uint64_t entry;
    CHECK_EQ(wddm_pte_from_dxgk(NULL, &entry, NULL), WDDM_E_INVALID);
    CHECK_EQ(wddm_pte_from_dxgk(&pte, NULL, NULL), WDDM_E_INVALID);
    pte.Flags = 1ull << 20;
    CHECK_EQ(wddm_pte_from_dxgk(&pte, &entry, NULL), WDDM_E_INVALID); /* error optional */
}

/* An array converts whole or not at all, naming the entry refused. */
static void pte_array(void)
{
    wddm_dxgk_pte ptes[4] = {
        {0x1, 0x100}, {0x1 | (1ull << 17), 0x200}, {0x1 | (2ull << 5), 0x300}, {0x1, 0x400}};
    uint64_t out[5];
    wddm_pte_error e;
    memset(out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_ptes_from_dxgk(ptes, 4, out, &e), WDDM_OK);
    CHECK_EQ(out[0], 0x100001);
    CHECK_EQ(out[1], 0x200001 | WDDM_GPU_PTE_PAGE_TABLE_64KB);
    CHECK_EQ(out[2], 0x300041);
    CHECK_EQ(out[3], 0x400001);
    CHECK(all_bytes(&out[4], 8, 0xA5)); /* nothing past count */
    ptes[2].Flags |= 1ull << 12;      /* PhysicalAdapterIndex 2 */
    memset(out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_ptes_from_dxgk(ptes, 4, out, &e), WDDM_E_INVALID);
    CHECK_EQ(e.reason, WDDM_PTE_PHYSICAL_ADAPTER_INDEX);
    CHECK_EQ(e.index, 2);
    CHECK_EQ(e.value, 2);
    CHECK(all_bytes(out, sizeof(out), 0xA5)); /* not even the entries before it */
    ptes[3].PageAddress = 1ull << 40;
    CHECK_EQ(wddm_ptes_from_dxgk(ptes, 4, out, &e), WDDM_E_INVALID);
    CHECK_EQ(e.index, 2); /* the first one refused */
    CHECK_EQ(wddm_ptes_from_dxgk(ptes, 2, out, NULL), WDDM_OK);
    CHECK_EQ(wddm_ptes_from_dxgk(NULL, 0, NULL, NULL), WDDM_OK);
    CHECK_EQ(wddm_ptes_from_dxgk(NULL, 1, out, NULL), WDDM_E_INVALID);
    CHECK_EQ(wddm_ptes_from_dxgk(ptes, 1, NULL, NULL), WDDM_E_INVALID);
}

/* ---- DmaPageFaulted ---- */

static WddmGpuPageFaultRecord fault_record(void)
{
    WddmGpuPageFaultRecord r;
    memset(&r, 0, sizeof(r));
    r.sequence = 3;
    r.fault.virtual_address = 0x0000123456789abcull;
    r.fault.kind = WDDM_GPU_MMU_FAULT_READ_ONLY;
    r.fault.page_table_level = 2;
    r.fault.access = WDDM_GPU_MMU_ACCESS_WRITE;
    r.fault.entry = 0x1234509ull;
    r.fence_id = 77;
    r.flags = WDDM_GPU_PAGE_FAULT_FLAG_WRITE | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED;
    r.node_ordinal = WDDM_GPU_NODE_VIRTUAL;
    r.context_id = 5;
    r.error_code = WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT;
    r.packet_offset = 64;
    return r;
}

static void page_fault(void)
{
    WddmGpuPageFaultRecord r = fault_record();
    wddm_dxgk_dma_page_faulted out;
    memset(&out, 0xA5, sizeof(out));
    CHECK_EQ(wddm_page_fault_to_dxgk(&r, &out), WDDM_OK);
    CHECK_EQ(out.FaultedFenceId, 77);
    CHECK_EQ(out._pad0, 0);
    CHECK_EQ(out.FaultedPrimitiveAPISequenceNumber, UINT64_MAX);
    CHECK_EQ(out.FaultedPipelineStage, 0);
    CHECK_EQ(out.FaultedBindTableEntry, UINT32_MAX);
    CHECK_EQ(out.PageFaultFlags, 0x9);
    CHECK_EQ(out._pad1, 0);
    CHECK_EQ(out.FaultedVirtualAddress, 0x0000123456789abcull);
    CHECK_EQ(out.NodeOrdinal, 1);
    CHECK_EQ(out.EngineOrdinal, 0);
    CHECK_EQ(out.PageTableLevel, 2);
    CHECK_EQ(out.FaultErrorCode, 0);
    CHECK(out.FaultedProcessHandle == NULL);
    /* FENCE_INVALID: FaultedFenceId 0, as DXGK_PAGE_FAULT_FLAGS asks. */
    r.flags = WDDM_GPU_PAGE_FAULT_FLAG_FENCE_INVALID |
              WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED;
    r.fault.page_table_level = 5;
    r.node_ordinal = WDDM_GPU_NODE_PAGING;
    r.error_code = 0x3; /* a device-specific code passes through */
    CHECK_EQ(wddm_page_fault_to_dxgk(&r, &out), WDDM_OK);
    CHECK_EQ(out.FaultedFenceId, 0);
    CHECK_EQ(out.PageFaultFlags, 0xa);
    CHECK_EQ(out.PageTableLevel, 5);
    CHECK_EQ(out.NodeOrdinal, 0);
    CHECK_EQ(out.FaultErrorCode, 3);
    CHECK_EQ(wddm_page_fault_to_dxgk(NULL, &out), WDDM_E_INVALID);
    CHECK_EQ(wddm_page_fault_to_dxgk(&r, NULL), WDDM_E_INVALID);
}

/* A record the device may not send is refused, DmaPageFaulted untouched. */
static void page_fault_hostile(void)
{
    static const struct {
        uint32_t flags, node, level;
    } bad[] = {
        {WDDM_DXGK_PAGE_FAULT_ADAPTER_RESET_REQUIRED | 0x8, 1, 0}, /* the device never asks */
        {0x10 | 0x8, 1, 0},                                          /* FATAL_HARDWARE_ERROR */
        {0x80000008u, 1, 0},
        {WDDM_GPU_PAGE_FAULT_FLAG_FENCE_INVALID, 1, 0}, /* no reset flag with it */
        {0x8, WDDM_GPU_NODE_COUNT, 0},
        {0x8, UINT32_MAX, 0},
        {0x8, 1, WDDM_GPU_MAX_PAGE_TABLE_LEVELS},
        {0x8, 1, UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        WddmGpuPageFaultRecord r = fault_record();
        wddm_dxgk_dma_page_faulted out;
        r.flags = bad[i].flags;
        r.node_ordinal = bad[i].node;
        r.fault.page_table_level = bad[i].level;
        memset(&out, 0xA5, sizeof(out));
        CHECK_EQ(wddm_page_fault_to_dxgk(&r, &out), WDDM_E_DEVICE);
        CHECK(all_bytes(&out, sizeof(out), 0xA5));
    }
}

/* ---- the builders ---- */

/* The builder `function` called with GPUMMU_VECTOR_<NAME>_ARGS makes gpummu_vector_<name>. */
#define SAME_BYTES(type, function, NAME, name)                                                \
    do {                                                                                     \
        type out_;                                                                           \
        memset(&out_, 0xEE, sizeof(out_));                                                   \
        CHECK_EQ(function(&out_, GPUMMU_VECTOR_##NAME##_ARGS), WDDM_OK);                     \
        CHECK_EQ(sizeof(out_), sizeof(gpummu_vector_##name));                                \
        CHECK(memcmp(&out_, gpummu_vector_##name, sizeof(out_)) == 0);                       \
        compared++;                                                                          \
    } while (0)

/* Every builder makes the bytes the Rust builder makes of the same values. */
static void builders_match_rust(void)
{
    uint32_t compared = 0;
    SAME_BYTES(WddmGpuPacketUpdatePageTable, wddm_build_update_page_table, UPDATE_PAGE_TABLE, update_page_table);
    SAME_BYTES(WddmGpuPacketUpdatePageTable, wddm_build_update_page_table_repeat, UPDATE_PAGE_TABLE_REPEAT, update_page_table_repeat);
    SAME_BYTES(WddmGpuPacketFlushTlb, wddm_build_flush_tlb, FLUSH_TLB_RANGE, flush_tlb_range);
    SAME_BYTES(WddmGpuPacketFlushTlb, wddm_build_flush_tlb, FLUSH_TLB_ALL, flush_tlb_all);
    SAME_BYTES(WddmGpuCmdCreateContext, wddm_build_create_context, CREATE_CONTEXT, create_context);
    SAME_BYTES(WddmGpuCmdDestroyContext, wddm_build_destroy_context, DESTROY_CONTEXT, destroy_context);
    SAME_BYTES(WddmGpuCmdSetRootPageTable, wddm_build_set_root_page_table, SET_ROOT_PAGE_TABLE, set_root_page_table);
    SAME_BYTES(WddmGpuCmdSubmitVirtual, wddm_build_submit_virtual, SUBMIT_VIRTUAL, submit_virtual);
    SAME_BYTES(WddmGpuVirtualCopy, wddm_build_virtual_copy, VIRTUAL_COPY, virtual_copy);
    SAME_BYTES(WddmGpuVirtualFill, wddm_build_virtual_fill, VIRTUAL_FILL, virtual_fill);
    SAME_BYTES(WddmGpuVirtualSignal, wddm_build_virtual_signal, VIRTUAL_SIGNAL, virtual_signal);
    WddmGpuCmdResetEngine reset;
    memset(&reset, 0xEE, sizeof(reset));
    CHECK_EQ(wddm_build_reset_engine(&reset), WDDM_OK);
    CHECK_EQ(sizeof(reset), sizeof(gpummu_vector_reset_engine));
    CHECK(memcmp(&reset, gpummu_vector_reset_engine, sizeof(reset)) == 0);
    compared++;
    CHECK_EQ(compared, GPUMMU_VECTOR_COUNT); /* a vector the corpus gained is compared too */
}

static void builders_refuse_null(void)
{
    CHECK_EQ(wddm_build_update_page_table(NULL, 0, 0, 0, 0, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_update_page_table_repeat(NULL, 0, 0, 0, 0, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_flush_tlb(NULL, 0, 0, 0, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_create_context(NULL, 0, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_destroy_context(NULL, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_set_root_page_table(NULL, 0, 0, 0, 1), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_submit_virtual(NULL, 0, 0, 8, 1), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_reset_engine(NULL), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_virtual_copy(NULL, 1, 0, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_virtual_fill(NULL, 0, 1, 0), WDDM_E_INVALID);
    CHECK_EQ(wddm_build_virtual_signal(NULL, 0, 0), WDDM_E_INVALID);
}

/* ---- the paging-buffer appenders ---- */

#define BUF 256
#define GUARD 64
#define FILLER 0x5A
#define ENTRIES_BUS 0x7000ull

static wddm_layout layout2, layout13;
static _Alignas(8) uint8_t mem[BUF + GUARD];
static wddm_pb pb;

static void fresh(const wddm_layout *layout, uint32_t size)
{
    memset(mem, FILLER, sizeof(mem));
    CHECK_EQ(wddm_pb_init(&pb, layout, mem, size), WDDM_OK);
}

static bool untouched_from(uint32_t offset)
{
    return all_bytes(mem + offset, sizeof(mem) - offset, FILLER);
}

static wddm_op_update_page_table upt_op(void)
{
    return (wddm_op_update_page_table){.PageTableLevel = 1, .Flags = 0, .SegmentId = 1,
                                       .StartIndex = 3, .SegmentOffset = 0x2000,
                                       .NumPageTableEntries = 4, .EntriesBus = ENTRIES_BUS};
}

static wddm_op_flush_tlb flush_op(void)
{
    return (wddm_op_flush_tlb){.SegmentId = 0, .SegmentOffset = 0x123000,
                               .StartVirtualAddress = 0x10000, .EndVirtualAddress = 0x20000};
}

static void pb_layouts(void)
{
    test_caps c;
    caps_layout(&layout2, &c, 1);
    caps_layout(&layout13, &c, 0);
}

static void pb_update_page_table(void)
{
    WddmGpuPacketUpdatePageTable p, want;
    wddm_op_update_page_table op = upt_op();
    pb_layouts();
    fresh(&layout2, BUF);
    CHECK_EQ(wddm_pb_update_page_table(&pb, &op), WDDM_OK);
    CHECK_EQ(wddm_build_update_page_table(&want, 1, 1, 0x2000, 3, 4, ENTRIES_BUS), WDDM_OK);
    memcpy(&p, mem, sizeof(p));
    CHECK(memcmp(&p, &want, sizeof(p)) == 0);
    CHECK(untouched_from(sizeof(p)));
    /* Repeat with the other known flags, into system memory (segment 0). */
    op = upt_op();
    op.Flags = WDDM_GPU_UPDATE_FLAG_REPEAT | WDDM_GPU_UPDATE_FLAG_INITIAL_UPDATE |
               WDDM_GPU_UPDATE_FLAG_NOTIFY_EVICTION | WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES;
    op.SegmentId = 0;
    op.EntriesBus = 0;
    op.Entry = 0x1234001;
    CHECK_EQ(wddm_pb_update_page_table(&pb, &op), WDDM_OK);
    CHECK_EQ(wddm_build_update_page_table_repeat(&want, 1, 0, 0x2000, 3, 4, 0x1234001), WDDM_OK);
    want.flags = 0xf;
    memcpy(&p, mem + sizeof(p), sizeof(p));
    CHECK(memcmp(&p, &want, sizeof(p)) == 0);
    CHECK_EQ(pb.packets, 2);
    CHECK_EQ(pb.used, 2 * sizeof(p));
    /* Segment 2 of the WDDM 2.0 fixture: VRAM the CPU cannot reach is a memory segment. */
    op = upt_op();
    op.SegmentId = 2;
    CHECK_EQ(wddm_pb_update_page_table(&pb, &op), WDDM_OK);
}

typedef struct pb_case {
    const char *name;
    void (*mutate)(wddm_op_update_page_table *upt, wddm_op_flush_tlb *flush);
    bool flush; /* which of the two operations */
    wddm_result want;
} pb_case;

static void upt_unknown_flag(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->Flags = 1u << 4;
}
static void upt_aperture(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->SegmentId = 3;
}
static void upt_missing_segment(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->SegmentId = 4;
}
static void upt_max_segment(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->SegmentId = UINT32_MAX;
}
static void upt_misaligned(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->SegmentOffset = 0x2004;
}
static void upt_entries_misaligned(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->EntriesBus = ENTRIES_BUS + 4;
}
static void upt_array_with_entry(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->Entry = 1;
}
static void upt_repeat_with_array(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)f_;
    u->Flags = WDDM_GPU_UPDATE_FLAG_REPEAT;
}
static void flush_aperture(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->SegmentId = 3;
}
static void flush_missing_segment(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->SegmentId = 9;
}
static void flush_root_misaligned(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->SegmentOffset = 0x123800;
}
static void flush_empty(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->EndVirtualAddress = f_->StartVirtualAddress;
}
static void flush_reversed(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->StartVirtualAddress = UINT64_MAX;
}
static void flush_end_only_zero(wddm_op_update_page_table *u, wddm_op_flush_tlb *f_)
{
    (void)u;
    f_->EndVirtualAddress = 0;
}
static const pb_case pb_cases[] = {
    {"upt_unknown_flag", upt_unknown_flag, false, WDDM_E_INVALID},
    {"upt_aperture", upt_aperture, false, WDDM_E_INVALID},
    {"upt_missing_segment", upt_missing_segment, false, WDDM_E_INVALID},
    {"upt_max_segment", upt_max_segment, false, WDDM_E_INVALID},
    {"upt_misaligned_table", upt_misaligned, false, WDDM_E_INVALID},
    {"upt_misaligned_entries", upt_entries_misaligned, false, WDDM_E_INVALID},
    {"upt_array_with_entry", upt_array_with_entry, false, WDDM_E_INVALID},
    {"upt_repeat_with_array", upt_repeat_with_array, false, WDDM_E_INVALID},
    {"flush_aperture", flush_aperture, true, WDDM_E_INVALID},
    {"flush_missing_segment", flush_missing_segment, true, WDDM_E_INVALID},
    {"flush_root_misaligned", flush_root_misaligned, true, WDDM_E_INVALID},
    {"flush_empty_range", flush_empty, true, WDDM_E_INVALID},
    {"flush_reversed_range", flush_reversed, true, WDDM_E_INVALID},
    {"flush_end_only_zero", flush_end_only_zero, true, WDDM_E_INVALID},
};

/* Each refused operation: its error, and the buffer, guard and counters as they were, also
 * after a packet already in the buffer. */
static void pb_refusals(void)
{
    pb_layouts();
    for (size_t i = 0; i < sizeof(pb_cases) / sizeof(pb_cases[0]); i++) {
        const pb_case *c = &pb_cases[i];
        for (int after_packet = 0; after_packet < 2; after_packet++) {
            wddm_op_update_page_table u = upt_op();
            wddm_op_flush_tlb fl = flush_op();
            fresh(&layout2, BUF);
            if (after_packet)
                CHECK_EQ(wddm_pb_fence(&pb, 1), WDDM_OK);
            uint32_t used = pb.used, packets = pb.packets;
            c->mutate(&u, &fl);
            wddm_result r = c->flush ? wddm_pb_flush_tlb(&pb, &fl)
                                     : wddm_pb_update_page_table(&pb, &u);
            CHECK_EQ(r, c->want);
            if (r != c->want)
                fprintf(stderr, "  case %s\n", c->name);
            CHECK_EQ(pb.used, used);
            CHECK_EQ(pb.packets, packets);
            CHECK(untouched_from(used));
        }
    }
    /* A WDDM 1.3 layout has no GpuMmu; NULL arguments; no room. */
    wddm_op_update_page_table u = upt_op();
    wddm_op_flush_tlb fl = flush_op();
    fresh(&layout13, BUF);
    CHECK_EQ(wddm_pb_update_page_table(&pb, &u), WDDM_E_STATE);
    CHECK_EQ(wddm_pb_flush_tlb(&pb, &fl), WDDM_E_STATE);
    CHECK(untouched_from(0));
    fresh(&layout2, sizeof(WddmGpuPacketUpdatePageTable) - 8);
    CHECK_EQ(wddm_pb_update_page_table(&pb, &u), WDDM_E_FULL);
    CHECK_EQ(wddm_pb_flush_tlb(&pb, &fl), WDDM_OK); /* 40 bytes fit in 48 */
    CHECK_EQ(wddm_pb_flush_tlb(&pb, &fl), WDDM_E_FULL);
    CHECK(untouched_from(sizeof(WddmGpuPacketFlushTlb)));
    CHECK_EQ(wddm_pb_update_page_table(NULL, &u), WDDM_E_INVALID);
    CHECK_EQ(wddm_pb_update_page_table(&pb, NULL), WDDM_E_INVALID);
    CHECK_EQ(wddm_pb_flush_tlb(NULL, &fl), WDDM_E_INVALID);
    CHECK_EQ(wddm_pb_flush_tlb(&pb, NULL), WDDM_E_INVALID);
}

static void pb_flush_tlb(void)
{
    WddmGpuPacketFlushTlb p, want;
    wddm_op_flush_tlb op = flush_op();
    pb_layouts();
    fresh(&layout2, BUF);
    CHECK_EQ(wddm_pb_flush_tlb(&pb, &op), WDDM_OK);
    CHECK_EQ(wddm_build_flush_tlb(&want, 0, 0x123000, 0x10000, 0x20000), WDDM_OK);
    memcpy(&p, mem, sizeof(p));
    CHECK(memcmp(&p, &want, sizeof(p)) == 0);
    /* Everything (0, 0), under a root in a memory segment. */
    op = (wddm_op_flush_tlb){.SegmentId = 1, .SegmentOffset = 0x4000};
    CHECK_EQ(wddm_pb_flush_tlb(&pb, &op), WDDM_OK);
    CHECK_EQ(wddm_build_flush_tlb(&want, 1, 0x4000, 0, 0), WDDM_OK);
    memcpy(&p, mem + sizeof(p), sizeof(p));
    CHECK(memcmp(&p, &want, sizeof(p)) == 0);
    CHECK_EQ(pb.packets, 2);
    CHECK(untouched_from(2 * sizeof(p)));
}

void gpummu_tests(void)
{
    run_test("gpummu_rule_names", rule_names);
    run_test("gpummu_validate_arguments", validate_arguments);
    for (size_t i = 0; i < CORPUS_LEN; i++) {
        entry = &gpummu_corpus[i];
        run_test_named("gpummu_corpus_", entry->name, same_answer_as_rust);
    }
    run_test("gpummu_read_valid", read_valid);
    run_test("gpummu_read_absent", read_absent);
    for (size_t i = 0; i < sizeof(hostile_reads) / sizeof(hostile_reads[0]); i++) {
        hostile = &hostile_reads[i];
        run_test_named("gpummu_read_refuses_", hostile->name, read_hostile);
    }
    run_test("gpummu_read_rule_detail", read_rule_detail);
    run_test("gpummu_read_on_wddm13", read_on_wddm13);
    run_test("gpummu_query_caps", query_caps);
    run_test("gpummu_query_level_desc", query_level_desc);
    run_test("gpummu_root_table_size", root_table_size);
    run_test("gpummu_pte_corpus", pte_corpus);
    run_test("gpummu_pte_array", pte_array);
    run_test("gpummu_page_fault", page_fault);
    run_test("gpummu_page_fault_hostile", page_fault_hostile);
    run_test("gpummu_builders_match_rust", builders_match_rust);
    run_test("gpummu_builders_refuse_null", builders_refuse_null);
    run_test("gpummu_pb_update_page_table", pb_update_page_table);
    run_test("gpummu_pb_flush_tlb", pb_flush_tlb);
    run_test("gpummu_pb_refusals", pb_refusals);
}
