//! The GpuMmu corpus: valid geometries and geometries breaking each rule of
//! `wddm_gpu_abi::gpummu_rules` (alone, and several at once, where the first rule checked must
//! answer), with what `validate_gpummu` answers for each; the DXGK_PTE conversions
//! `wddm_gpu_pte_from_dxgk` makes and refuses; and the bytes of every GpuMmu builder of
//! `wddm_gpu_abi::build::gpuva`. This test checks the Rust side answers as the corpus says and
//! that every rule has a geometry; it keeps `cdev/tests/gpummu_corpus.h` equal to the corpus,
//! where the C library's unit test (`test_gpummu.c`) holds `gpummu.c` and `gpuva.c` to the
//! same answers and bytes. `WDDM_GPU_UPDATE_HEADERS=1 cargo test` rewrites the C file.

mod c_corpus;

use std::fmt::Write;

use wddm_gpu_abi::build::gpuva::{
    create_context, destroy_context, flush_tlb, gpummu_caps, reset_engine, set_root_page_table,
    submit_virtual, update_page_table, update_page_table_repeat, virtual_copy, virtual_fill,
    virtual_signal, with_table_segment, TableAt,
};
use wddm_gpu_abi::gpummu_rules::{validate_gpummu, GpuMmuRule, TableOwner, MAX_CONTEXTS};
use wddm_gpu_abi::gpuva::{
    wddm_gpu_pte_from_dxgk, PteConversionError, WddmGpuMmuCaps, WddmGpuPageTableLevelDesc,
    WDDM_GPU_MMU_CAP_DUAL_PTE, WDDM_GPU_MMU_CAP_NON_ALIGNED_LARGE_PAGE,
    WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
    WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL,
};
use wddm_gpu_abi::segment_flags::SegmentFlags as F;
use zerocopy::IntoBytes;

use crate::c_corpus::{hex, keep_header_current};

/// The segment flags every geometry is checked against: segment 1 CPU-visible VRAM, 2 an
/// aperture, 3 VRAM the CPU cannot reach, 4 an AGP aperture; 5 and up do not exist.
fn segments() -> [u32; 4] {
    [F::CPU_VISIBLE.bits(), F::APERTURE.bits(), 0, F::AGP.bits()]
}

fn physical(index_bits: &[u32]) -> WddmGpuMmuCaps {
    gpummu_caps(index_bits, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL)
}

fn cpu_virtual(index_bits: &[u32]) -> WddmGpuMmuCaps {
    gpummu_caps(index_bits, WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL)
}

/// Four 12-bit levels in segment 1: 60 address bits, every level otherwise valid.
fn too_wide() -> WddmGpuMmuCaps {
    (0..4).fold(physical(&[12, 12, 12, 12]), |caps, level| {
        with_table_segment(caps, level, 1)
    })
}

type Edit = fn(&mut WddmGpuMmuCaps);

/// (name, the rule the Rust validator answers or "" for a valid geometry, edit of
/// `physical(&[9, 9])`).
const CORPUS: &[(&str, &str, Edit)] = &[
    ("valid_two_levels", "", |_| {}),
    ("valid_six_levels_52_bits", "", |c| {
        *c = physical(&[9, 9, 9, 9, 3, 1]);
    }),
    ("valid_min_index_bits", "", |c| *c = physical(&[4, 1])),
    ("valid_no_flags", "", |c| c.flags = 0),
    ("valid_gpu_virtual", "", |c| {
        *c = gpummu_caps(&[9, 9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL);
    }),
    ("valid_cpu_virtual_leaf_in_cpu_visible", "", |c| {
        *c = with_table_segment(cpu_virtual(&[9, 9, 9]), 0, 1);
    }),
    ("valid_physical_leaf_in_hidden_vram", "", |c| {
        c.levels[0].page_table_segment_id = 3;
    }),
    ("valid_large_leaf_in_segment", "", |c| {
        *c = with_table_segment(physical(&[12, 9]), 0, 1);
    }),
    ("valid_alignment_64k", "", |c| {
        c.levels[0].page_table_alignment_in_bytes = 1 << 16;
    }),
    ("valid_alignment_2_63", "", |c| {
        c.levels[1].page_table_alignment_in_bytes = 1 << 63;
    }),
    ("valid_max_contexts_4096", "", |c| {
        c.max_contexts = MAX_CONTEXTS
    }),
    (
        "unsupported_flags_dual_pte",
        "gpummu.unsupported_flags",
        |c| {
            c.flags |= WDDM_GPU_MMU_CAP_DUAL_PTE;
        },
    ),
    (
        "unsupported_flags_non_aligned_and_high",
        "gpummu.unsupported_flags",
        |c| c.flags |= WDDM_GPU_MMU_CAP_NON_ALIGNED_LARGE_PAGE | (1 << 31),
    ),
    ("update_mode_3", "gpummu.update_mode", |c| {
        c.page_table_update_mode = 3;
    }),
    ("update_mode_max", "gpummu.update_mode", |c| {
        c.page_table_update_mode = u32::MAX;
    }),
    ("level_count_0", "gpummu.level_count", |c| {
        c.page_table_level_count = 0;
    }),
    ("level_count_1", "gpummu.level_count", |c| {
        c.page_table_level_count = 1;
    }),
    ("level_count_7", "gpummu.level_count", |c| {
        c.page_table_level_count = 7;
    }),
    ("index_bits_leaf_3", "gpummu.index_bits", |c| {
        *c = physical(&[3, 9]);
    }),
    ("index_bits_directory_0", "gpummu.index_bits", |c| {
        *c = physical(&[9, 0]);
    }),
    ("index_bits_13", "gpummu.index_bits", |c| {
        *c = with_table_segment(physical(&[13, 9]), 0, 1);
    }),
    ("index_bits_max", "gpummu.index_bits", |c| {
        c.levels[1].page_table_index_bit_count = u32::MAX;
    }),
    ("address_bits_one_more", "gpummu.address_bits", |c| {
        c.virtual_address_bit_count += 1;
    }),
    ("address_bits_zero", "gpummu.address_bits", |c| {
        c.virtual_address_bit_count = 0;
    }),
    (
        "address_bits_too_large",
        "gpummu.address_bits_too_large",
        |c| {
            *c = too_wide();
        },
    ),
    ("address_bits_53", "gpummu.address_bits_too_large", |c| {
        *c = physical(&[9, 9, 9, 9, 3, 2]);
    }),
    ("not_zero_unused_level", "gpummu.not_zero", |c| {
        c.levels[4].page_table_index_bit_count = 1;
    }),
    ("not_zero_unused_alignment", "gpummu.not_zero", |c| {
        c.levels[5].page_table_alignment_in_bytes = 4096;
    }),
    ("not_zero_reserved", "gpummu.not_zero", |c| {
        c.levels[1].reserved = 1;
    }),
    ("table_size_double", "gpummu.table_size", |c| {
        c.levels[1].page_table_size_in_bytes = 8192;
    }),
    ("table_size_zero", "gpummu.table_size", |c| {
        c.levels[0].page_table_size_in_bytes = 0;
    }),
    ("alignment_2048", "gpummu.alignment", |c| {
        c.levels[0].page_table_alignment_in_bytes = 2048;
    }),
    ("alignment_not_power_of_two", "gpummu.alignment", |c| {
        c.levels[1].page_table_alignment_in_bytes = 3 * 4096;
    }),
    ("table_segment_aperture", "gpummu.table_segment", |c| {
        *c = with_table_segment(*c, 0, 2);
    }),
    ("table_segment_agp", "gpummu.table_segment", |c| {
        *c = with_table_segment(*c, 1, 4);
    }),
    ("table_segment_missing", "gpummu.table_segment", |c| {
        c.levels[0].page_table_segment_id = 5;
    }),
    ("table_segment_max_id", "gpummu.table_segment", |c| {
        c.levels[0].page_table_segment_id = u32::MAX;
    }),
    (
        "table_segment_paging_process",
        "gpummu.table_segment",
        |c| {
            c.levels[1].paging_process_page_table_segment_id = 2;
        },
    ),
    (
        "system_table_too_large",
        "gpummu.system_table_too_large",
        |c| {
            *c = physical(&[10, 9]);
        },
    ),
    (
        "system_table_too_large_paging_process",
        "gpummu.system_table_too_large",
        |c| {
            *c = physical(&[10, 9]);
            c.levels[0].page_table_segment_id = 1;
        },
    ),
    (
        "cpu_virtual_directory_in_segment",
        "gpummu.cpu_virtual_directory_in_segment",
        |c| *c = with_table_segment(cpu_virtual(&[9, 9, 9]), 1, 1),
    ),
    (
        "table_not_cpu_visible_cpu_virtual",
        "gpummu.table_not_cpu_visible",
        |c| {
            *c = cpu_virtual(&[9, 9, 9]);
            c.levels[0].page_table_segment_id = 3;
        },
    ),
    (
        "table_not_cpu_visible_paging_process",
        "gpummu.table_not_cpu_visible",
        |c| c.levels[1].paging_process_page_table_segment_id = 3,
    ),
    ("leaf_64k_size_256", "gpummu.leaf_64k_size", |c| {
        c.leaf_page_table_size_for_64k_pages = 256;
    }),
    ("leaf_64k_size_zero", "gpummu.leaf_64k_size", |c| {
        c.leaf_page_table_size_for_64k_pages = 0;
    }),
    ("max_contexts_0", "gpummu.max_contexts", |c| {
        c.max_contexts = 0
    }),
    ("max_contexts_4097", "gpummu.max_contexts", |c| {
        c.max_contexts = MAX_CONTEXTS + 1;
    }),
    // Several rules broken: the first one checked answers.
    ("order_flags_before_mode", "gpummu.unsupported_flags", |c| {
        c.flags |= WDDM_GPU_MMU_CAP_DUAL_PTE;
        c.page_table_update_mode = 3;
    }),
    ("order_mode_before_count", "gpummu.update_mode", |c| {
        c.page_table_update_mode = 3;
        c.page_table_level_count = 9;
    }),
    ("order_count_before_contexts", "gpummu.level_count", |c| {
        c.page_table_level_count = 7;
        c.max_contexts = 0;
    }),
    ("order_contexts_before_levels", "gpummu.max_contexts", |c| {
        c.max_contexts = 0;
        c.levels[0].page_table_index_bit_count = 3;
    }),
    ("order_lower_level_first", "gpummu.index_bits", |c| {
        c.levels[0].page_table_index_bit_count = 3;
        c.levels[4].page_table_index_bit_count = 1;
    }),
    (
        "order_index_bits_before_reserved",
        "gpummu.index_bits",
        |c| {
            c.levels[1].page_table_index_bit_count = 13;
            c.levels[1].reserved = 1;
        },
    ),
    ("order_reserved_before_size", "gpummu.not_zero", |c| {
        c.levels[0].reserved = 1;
        c.levels[0].page_table_size_in_bytes = 0;
    }),
    ("order_size_before_alignment", "gpummu.table_size", |c| {
        c.levels[0].page_table_size_in_bytes = 0;
        c.levels[0].page_table_alignment_in_bytes = 3;
    }),
    ("order_alignment_before_segment", "gpummu.alignment", |c| {
        c.levels[0].page_table_alignment_in_bytes = 3;
        c.levels[0].page_table_segment_id = 2;
    }),
    (
        "order_process_before_paging_process",
        "gpummu.table_segment",
        |c| {
            c.levels[0].page_table_segment_id = 2;
            c.levels[0].paging_process_page_table_segment_id = 4;
        },
    ),
    (
        "order_system_size_before_paging_segment",
        "gpummu.system_table_too_large",
        |c| {
            *c = physical(&[10, 9]);
            c.levels[0].paging_process_page_table_segment_id = 2;
        },
    ),
    (
        "order_segment_before_cpu_virtual_directory",
        "gpummu.table_segment",
        |c| *c = with_table_segment(cpu_virtual(&[9, 9, 9]), 1, 2),
    ),
    (
        "order_cpu_virtual_directory_before_visibility",
        "gpummu.cpu_virtual_directory_in_segment",
        |c| *c = with_table_segment(cpu_virtual(&[9, 9, 9]), 1, 3),
    ),
    (
        "order_unused_level_before_address_bits",
        "gpummu.not_zero",
        |c| {
            c.levels[3].page_table_size_in_bytes = 4096;
            c.virtual_address_bit_count = 0;
        },
    ),
    (
        "order_too_large_before_address_bits",
        "gpummu.address_bits_too_large",
        |c| {
            *c = too_wide();
            c.virtual_address_bit_count = 0;
        },
    ),
    (
        "order_address_bits_before_leaf_64k",
        "gpummu.address_bits",
        |c| {
            c.virtual_address_bit_count = 31;
            c.leaf_page_table_size_for_64k_pages = 0;
        },
    ),
];

fn corpus() -> Vec<(&'static str, &'static str, WddmGpuMmuCaps)> {
    CORPUS
        .iter()
        .map(|&(name, rule, edit)| {
            let mut caps = physical(&[9, 9]);
            edit(&mut caps);
            (name, rule, caps)
        })
        .collect()
}

/// What a rule carries, as the C library's `wddm_gpummu_error` holds it: the level (`None`
/// for rules about no level), the owner of a segment id, the value that broke the rule, and
/// what the rule wanted.
fn detail(rule: &GpuMmuRule) -> (Option<u32>, Option<TableOwner>, u64, u64) {
    use GpuMmuRule as R;
    match *rule {
        R::UnsupportedFlags(bits) => (None, None, u64::from(bits), 0),
        R::UnknownUpdateMode(mode) => (None, None, u64::from(mode), 0),
        R::LevelCount(count) => (None, None, u64::from(count), 0),
        R::IndexBits { level, bits } => (Some(level), None, u64::from(bits), 0),
        R::AddressBits { have, want } => (None, None, u64::from(have), u64::from(want)),
        R::AddressBitsTooLarge(bits) => (None, None, u64::from(bits), 0),
        R::NotZero { level } => (Some(level), None, 0, 0),
        R::TableSize { level, size, want } => (Some(level), None, size, want),
        R::Alignment { level, alignment } => (Some(level), None, alignment, 0),
        R::TableSegment {
            level,
            owner,
            segment,
        }
        | R::TableNotCpuVisible {
            level,
            owner,
            segment,
        } => (Some(level), Some(owner), u64::from(segment), 0),
        R::SystemTableTooLarge { level, size } => (Some(level), None, size, 0),
        R::CpuVirtualDirectoryInSegment { level } => (Some(level), None, 0, 0),
        R::Leaf64KSize { have, want } => (None, None, u64::from(have), want),
        R::MaxContexts(count) => (None, None, u64::from(count), 0),
    }
}

#[test]
fn the_rust_validator_answers_each_geometry_with_its_rule() {
    for (name, rule, caps) in corpus() {
        match validate_gpummu(&caps, &segments()) {
            Ok(_) => assert_eq!(rule, "", "{name}: accepted"),
            Err(err) => assert_eq!(err.name(), rule, "{name}: {err}"),
        }
    }
}

#[test]
fn every_rule_has_a_broken_geometry() {
    for rule in GpuMmuRule::RULES {
        assert!(
            CORPUS.iter().any(|entry| entry.1 == rule),
            "no corpus geometry breaks {rule}"
        );
    }
    let names: Vec<_> = CORPUS.iter().map(|entry| entry.0).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "corpus names repeat");
}

/// DXGK_PTE inputs (`Flags`, `PageAddress`): conversions, each refusal, and inputs breaking
/// several checks at once (the first checked answers).
const PTES: &[(u64, u64)] = &[
    (0, 0),
    (0x1f, 0),
    (1 | (3 << 5), 0x12345),
    (1 | (1 << 10), 0x200),
    (1 | (1 << 17), 7),
    (0x7ff, (1 << 40) - 1),
    (1 | (2 << 11), 0),
    (1 | (0x3f << 11), 0),
    (1 | (2 << 17), 0),
    (1 | (3 << 17), 0),
    (1 | (1 << 19), 0),
    (1 | (1 << 20), 0),
    (1 << 63, 0),
    (1, 1 << 40),
    (1, u64::MAX),
    ((1 << 11) | (2 << 17) | (1 << 20), 1 << 40),
    ((3 << 17) | (1 << 19), 1 << 40),
    ((1 << 19) | (1 << 21), u64::MAX),
];

/// A conversion as the C corpus holds it: the `WDDM_PTE_*` reason and the entry or the
/// refused value.
fn pte(flags: u64, page_address: u64) -> (&'static str, u64) {
    match wddm_gpu_pte_from_dxgk(flags, page_address) {
        Ok(entry) => ("WDDM_PTE_OK", entry),
        Err(PteConversionError::PhysicalAdapterIndex(v)) => ("WDDM_PTE_PHYSICAL_ADAPTER_INDEX", v),
        Err(PteConversionError::PageTablePageSize(v)) => ("WDDM_PTE_PAGE_TABLE_PAGE_SIZE", v),
        Err(PteConversionError::UnsupportedFields(v)) => ("WDDM_PTE_UNSUPPORTED_FIELDS", v),
        Err(PteConversionError::PageAddressTooLarge(v)) => ("WDDM_PTE_PAGE_ADDRESS_TOO_LARGE", v),
    }
}

#[test]
fn every_pte_refusal_is_in_the_corpus() {
    let reasons: Vec<_> = PTES
        .iter()
        .map(|&(flags, page)| pte(flags, page).0)
        .collect();
    for reason in [
        "WDDM_PTE_OK",
        "WDDM_PTE_PHYSICAL_ADAPTER_INDEX",
        "WDDM_PTE_PAGE_TABLE_PAGE_SIZE",
        "WDDM_PTE_UNSUPPORTED_FIELDS",
        "WDDM_PTE_PAGE_ADDRESS_TOO_LARGE",
    ] {
        assert!(reasons.contains(&reason), "no PTE answered {reason}");
    }
}

/// One argument of a C builder call, as the C literal of its type.
enum Arg {
    U32(u32),
    U64(u64),
}

impl Arg {
    fn c(&self) -> String {
        match self {
            Arg::U32(v) => format!("{v:#x}u"),
            Arg::U64(v) => format!("{v:#x}ull"),
        }
    }
}

/// A builder's bytes: the C function, the C type it fills, its arguments after the output,
/// and what the Rust builder made of the same values.
struct Vector {
    name: &'static str,
    function: &'static str,
    c_type: &'static str,
    args: Vec<Arg>,
    bytes: Vec<u8>,
}

/// Every builder once (FLUSH_TLB twice: a range and everything), with values that fill every
/// byte of their fields, so a field written to the wrong place shows.
fn vectors() -> Vec<Vector> {
    use Arg::{U32, U64};
    let (level, segment, table, start, count) = (3, 0x1d, 0x8877_6655_4433_2000, 0x101, 0x1ff);
    let at = TableAt {
        segment,
        address: table,
    };
    let (entries, entry) = (0x1122_3344_5566_7008, 0x000f_edcb_a987_6e1f);
    let (id, node, flags) = (0x0bad_cafe, 1, 0x8000_0001);
    let (root_entries, va, size, fence) = (0x200, 0x7fff_0000_1000, 0x0001_0008, 0xfeed_f00d);
    let (va_start, va_end) = (0x0000_1234_5678_9000, 0x000f_0000_0000_0000);
    let (length, source, destination) = (0x0123_4567_89ab_cdef, 0x1111_2222_3333_4444, va_end);
    let (pattern, value) = (0xa5c3_0f96, 0xffee_ddcc_bbaa_9988);
    let vector = |name, function, c_type, args, bytes: &[u8]| Vector {
        name,
        function,
        c_type,
        args,
        bytes: bytes.to_vec(),
    };
    vec![
        vector(
            "update_page_table",
            "wddm_build_update_page_table",
            "WddmGpuPacketUpdatePageTable",
            vec![
                U32(level),
                U32(segment),
                U64(table),
                U32(start),
                U32(count),
                U64(entries),
            ],
            update_page_table(level, at, start, count, entries).as_bytes(),
        ),
        vector(
            "update_page_table_repeat",
            "wddm_build_update_page_table_repeat",
            "WddmGpuPacketUpdatePageTable",
            vec![
                U32(level),
                U32(segment),
                U64(table),
                U32(start),
                U32(count),
                U64(entry),
            ],
            update_page_table_repeat(level, at, start, count, entry).as_bytes(),
        ),
        vector(
            "flush_tlb_range",
            "wddm_build_flush_tlb",
            "WddmGpuPacketFlushTlb",
            vec![U32(segment), U64(table), U64(va_start), U64(va_end)],
            flush_tlb(at, Some(va_start..va_end)).as_bytes(),
        ),
        vector(
            "flush_tlb_all",
            "wddm_build_flush_tlb",
            "WddmGpuPacketFlushTlb",
            vec![U32(segment), U64(table), U64(0), U64(0)],
            flush_tlb(at, None).as_bytes(),
        ),
        vector(
            "create_context",
            "wddm_build_create_context",
            "WddmGpuCmdCreateContext",
            vec![U32(id), U32(node), U32(flags)],
            create_context(id, node, flags).as_bytes(),
        ),
        vector(
            "destroy_context",
            "wddm_build_destroy_context",
            "WddmGpuCmdDestroyContext",
            vec![U32(id)],
            destroy_context(id).as_bytes(),
        ),
        vector(
            "set_root_page_table",
            "wddm_build_set_root_page_table",
            "WddmGpuCmdSetRootPageTable",
            vec![U32(id), U32(segment), U64(table), U32(root_entries)],
            set_root_page_table(id, at, root_entries).as_bytes(),
        ),
        vector(
            "submit_virtual",
            "wddm_build_submit_virtual",
            "WddmGpuCmdSubmitVirtual",
            vec![U32(id), U64(va), U32(size), U32(fence)],
            submit_virtual(id, va, size, fence).as_bytes(),
        ),
        vector(
            "reset_engine",
            "wddm_build_reset_engine",
            "WddmGpuCmdResetEngine",
            vec![],
            reset_engine().as_bytes(),
        ),
        vector(
            "virtual_copy",
            "wddm_build_virtual_copy",
            "WddmGpuVirtualCopy",
            vec![U64(length), U64(source), U64(destination)],
            virtual_copy(length, source, destination).as_bytes(),
        ),
        vector(
            "virtual_fill",
            "wddm_build_virtual_fill",
            "WddmGpuVirtualFill",
            vec![U32(pattern), U64(length), U64(destination)],
            virtual_fill(pattern, length, destination).as_bytes(),
        ),
        vector(
            "virtual_signal",
            "wddm_build_virtual_signal",
            "WddmGpuVirtualSignal",
            vec![U64(va), U64(value)],
            virtual_signal(va, value).as_bytes(),
        ),
    ]
}

/// One level as the positional C initializer of a `WddmGpuPageTableLevelDesc`.
fn c_level(d: &WddmGpuPageTableLevelDesc) -> String {
    format!(
        "{{{}, {}, {}, {}, {:#x}ull, {:#x}ull}}",
        d.page_table_index_bit_count,
        d.page_table_segment_id,
        d.paging_process_page_table_segment_id,
        d.reserved,
        d.page_table_size_in_bytes,
        d.page_table_alignment_in_bytes
    )
}

/// A geometry as a C initializer of `WddmGpuMmuCaps` (levels up to the last non-zero one).
fn c_caps(caps: &WddmGpuMmuCaps) -> String {
    let used = caps
        .levels
        .iter()
        .rposition(|level| *level != WddmGpuPageTableLevelDesc::default())
        .map_or(0, |last| last + 1);
    let levels: Vec<String> = caps.levels[..used].iter().map(c_level).collect();
    let levels = if levels.is_empty() {
        String::new() // `{}` is no C11 initializer: the levels are zero-initialized
    } else {
        format!(", .levels = {{{}}}", levels.join(",\n        "))
    };
    format!(
        "{{.flags = {:#x}u, .page_table_update_mode = {:#x}u, .virtual_address_bit_count = {}u,\n      \
         .page_table_level_count = {}u, .leaf_page_table_size_for_64k_pages = {:#x}u,\n      \
         .max_contexts = {}u{}}}",
        caps.flags,
        caps.page_table_update_mode,
        caps.virtual_address_bit_count,
        caps.page_table_level_count,
        caps.leaf_page_table_size_for_64k_pages,
        caps.max_contexts,
        levels
    )
}

/// The C form of the corpus.
fn c_corpus() -> String {
    let mut out = String::from(
        "/* Generated by guest-tests/tests/gpummu_corpus.rs; do not edit (regenerate with
 * WDDM_GPU_UPDATE_HEADERS=1 cargo test -p wddm-guest-tests --test gpummu_corpus).
 * The GpuMmu corpus: geometries with what wddm-gpu-abi's validate_gpummu answers for each
 * (rule \"\" for a valid one) against gpummu_corpus_segments; DXGK_PTE conversions as
 * wddm_gpu_pte_from_dxgk makes them; the bytes of each wddm-gpu-abi build::gpuva builder,
 * with the arguments the C builder of the same name is called with. A level initializer is
 * {index bits, segment, paging-process segment, reserved, size, alignment}. */

#ifndef CDEV_TEST_GPUMMU_CORPUS_H
#define CDEV_TEST_GPUMMU_CORPUS_H

#include <stdint.h>

#include \"wddm_gpu_dev.h\"

typedef struct gpummu_corpus_entry {
    const char *name;
    const char *rule; /* GpuMmuRule::name, \"\" for a valid geometry */
    uint32_t level;   /* the rule's level, or WDDM_GPUMMU_NO_LEVEL */
    uint32_t owner;   /* WDDM_GPUMMU_OWNER_* of a segment rule, else 0 */
    uint64_t have;
    uint64_t want;
    WddmGpuMmuCaps caps;
} gpummu_corpus_entry;

typedef struct gpummu_pte_vector {
    uint64_t flags;
    uint64_t page_address;
    uint32_t reason; /* WDDM_PTE_* */
    uint64_t value;  /* the entry (WDDM_PTE_OK) or the refused value */
} gpummu_pte_vector;

",
    );
    let flags = segments();
    let _ = writeln!(
        out,
        "/* Segment 1 CPU-visible VRAM, 2 an aperture, 3 VRAM the CPU cannot reach, 4 an AGP \
         aperture. */\nstatic const uint32_t gpummu_corpus_segments[{}] = {{{}}};\n",
        flags.len(),
        flags
            .iter()
            .map(|f| format!("{f:#x}u"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str("static const gpummu_corpus_entry gpummu_corpus[] = {\n");
    for (name, rule, caps) in corpus() {
        let (level, owner, have, want) = match validate_gpummu(&caps, &flags) {
            Ok(_) => (None, None, 0, 0),
            Err(err) => {
                assert_eq!(err.name(), rule, "{name}");
                detail(&err)
            }
        };
        let level = level.map_or("WDDM_GPUMMU_NO_LEVEL".to_string(), |l| format!("{l}u"));
        let owner = match owner {
            None => "0u",
            Some(TableOwner::Process) => "WDDM_GPUMMU_OWNER_PROCESS",
            Some(TableOwner::PagingProcess) => "WDDM_GPUMMU_OWNER_PAGING_PROCESS",
        };
        let _ = writeln!(
            out,
            "    {{\"{name}\", \"{rule}\", {level}, {owner}, {have:#x}ull, {want:#x}ull,\n     {}}},",
            c_caps(&caps)
        );
    }
    out.push_str("};\n\nstatic const gpummu_pte_vector gpummu_pte_vectors[] = {\n");
    for &(flags, page_address) in PTES {
        let (reason, value) = pte(flags, page_address);
        let _ = writeln!(
            out,
            "    {{{flags:#x}ull, {page_address:#x}ull, {reason}, {value:#x}ull}},"
        );
    }
    out.push_str(
        "};\n\n/* The builders: GPUMMU_VECTOR_<NAME>_ARGS are the arguments after the output. */\n",
    );
    let vectors = vectors();
    for v in &vectors {
        let args: Vec<String> = v.args.iter().map(Arg::c).collect();
        let call = if args.is_empty() {
            format!("{}(&out)", v.function)
        } else {
            format!("{}(&out, {})", v.function, args.join(", "))
        };
        let upper = v.name.to_uppercase();
        let _ = writeln!(out, "/* {} out; {call} */", v.c_type);
        if !args.is_empty() {
            let _ = writeln!(
                out,
                "#define GPUMMU_VECTOR_{upper}_ARGS {}",
                args.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "static const uint8_t gpummu_vector_{}[{}] = {{",
            v.name,
            v.bytes.len()
        );
        for line in v.bytes.chunks(16) {
            let _ = writeln!(out, "    {},", hex(line));
        }
        out.push_str("};\n");
    }
    let _ = writeln!(
        out,
        "#define GPUMMU_VECTOR_COUNT {}\n\n#endif",
        vectors.len()
    );
    out
}

#[test]
fn c_corpus_is_current() {
    keep_header_current("gpummu_corpus.h", "gpummu_corpus", &c_corpus());
}
