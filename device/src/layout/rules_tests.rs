//! One test case per rule: a valid layout with exactly that rule broken must report exactly
//! that violation (Agp alone also breaks "no AGP aperture", which is inherent).

use wddm_gpu_abi::build::gpuva::{gpummu_caps, with_table_segment};
use wddm_gpu_abi::caps::{WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0};
use wddm_gpu_abi::gpummu_rules::TableOwner;
use wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL;

use super::*;
use crate::layout::file::parse_layout;

const BAR: u64 = 256 << 20;
const MIB: u64 = 1 << 20;

fn names(flags: &[&str]) -> u32 {
    flags
        .iter()
        .map(|n| {
            F::from_member_name(n)
                .unwrap_or_else(|| panic!("{n}"))
                .bits()
        })
        .fold(0, |a, b| a | b)
}

fn memory(flags: &[&str], size: u64) -> SegmentSpec {
    SegmentSpec {
        flags: names(flags),
        size,
        ..Default::default()
    }
}

/// VRAM in the BAR, an aperture, and device-only VRAM: breaks no rule.
fn base() -> LayoutSpec {
    LayoutSpec {
        wddm_version: WDDM_GPU_WDDM_1_3,
        paging_buffer_segment_id: 2,
        paging_buffer_size: 64 << 10,
        paging_buffer_private_data_size: 0,
        segments: vec![
            memory(&["CpuVisible", "DirectFlip"], 128 * MIB),
            memory(&["Aperture", "CacheCoherent"], 512 * MIB),
            memory(&[], 64 * MIB),
        ],
        gpummu: None,
        link: None,
    }
}

fn base_wddm2() -> LayoutSpec {
    LayoutSpec {
        wddm_version: WDDM_GPU_WDDM_2_0,
        ..base()
    }
}

fn check(name: &str, spec: LayoutSpec, expected: &[(Option<u32>, Rule)]) {
    let got = validate(&spec, BAR).err().unwrap_or_default();
    let got: Vec<(Option<u32>, Rule)> = got.into_iter().map(|v| (v.segment, v.rule)).collect();
    assert_eq!(got, expected, "{name}");
}

fn with_segment(index: usize, edit: impl FnOnce(&mut SegmentSpec)) -> LayoutSpec {
    let mut spec = base();
    edit(&mut spec.segments[index]);
    spec
}

#[test]
fn the_base_layouts_are_valid_and_placed() {
    let layout = validate(&base(), BAR).unwrap();
    assert_eq!(
        layout.segments[0].kind,
        SegmentKind::Memory {
            vram_offset: 0,
            bar_offset: Some(0)
        }
    );
    assert_eq!(layout.segments[1].kind, SegmentKind::Aperture);
    assert_eq!(
        layout.segments[2].kind,
        SegmentKind::Memory {
            vram_offset: BAR,
            bar_offset: None
        }
    );
    let mut wddm2 = base_wddm2();
    wddm2.segments[0].flags |= names(&["Use64KBPages"]);
    assert!(validate(&wddm2, BAR).is_ok());
}

#[test]
fn default_layout_is_what_the_default_file_validates_to() {
    let spec = parse_layout("[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"256MiB\"\n[[segments]]\nflags = [\"Aperture\", \"CacheCoherent\"]\nsize = \"512MiB\"").unwrap();
    assert_eq!(
        validate(&spec, BAR).unwrap(),
        SegmentLayout::default_for_vram(BAR)
    );
}

#[test]
fn cpu_visible_segments_pack_in_file_order_at_64k() {
    let mut spec = base();
    spec.segments[0].size = 4 << 10;
    spec.segments.push(memory(&["CpuVisible"], 8 << 10));
    let layout = validate(&spec, BAR).unwrap();
    assert_eq!(
        layout.segments[3].kind,
        SegmentKind::Memory {
            vram_offset: 64 << 10,
            bar_offset: Some(64 << 10)
        }
    );
}

#[test]
fn banks_get_their_last_end_appended() {
    let spec = with_segment(0, |s| {
        s.flags |= names(&["UseBanking"]);
        s.banks = Some(vec![32 * MIB, 64 * MIB]);
    });
    assert_eq!(
        validate(&spec, BAR).unwrap().segments[0].banks,
        vec![32 * MIB, 64 * MIB, 128 * MIB]
    );
    let spec = with_segment(0, |s| {
        s.flags |= names(&["UseBanking"]);
        s.banks = Some(vec![32 * MIB, 128 * MIB]);
    });
    assert_eq!(
        validate(&spec, BAR).unwrap().segments[0].banks,
        vec![32 * MIB, 128 * MIB]
    );
}

#[test]
fn each_rule_is_reported_alone() {
    let seg = |id, rule| (Some(id), rule);
    let whole = |rule| (None, rule);
    check(
        "no segments",
        LayoutSpec {
            segments: vec![],
            paging_buffer_segment_id: 0,
            ..base()
        },
        &[whole(Rule::NoSegments)],
    );
    let mut many = base();
    many.segments = (0..32).map(|_| memory(&[], 4096)).collect();
    many.paging_buffer_segment_id = 0;
    check(
        "32 segments",
        many,
        &[whole(Rule::TooManySegments { count: 32, max: 31 })],
    );
    let mut many2 = base_wddm2();
    many2.segments.extend((0..28).map(|_| memory(&[], 4096)));
    check(
        "31 segments on 2.0",
        many2,
        &[whole(Rule::TooManySegments { count: 31, max: 30 })],
    );
    for (bits, valid) in [
        ([false, false, false], true),
        ([true, false, false], true),
        ([true, false, true], true),
        ([true, true, false], true),
        ([true, true, true], false),
        ([false, true, true], false),
        ([false, true, false], false),
        ([false, false, true], false),
    ] {
        let [standby, hibernate, partial] = bits;
        let spec = with_segment(2, |s| {
            for (on, name) in [
                (standby, "PreservedDuringStandby"),
                (hibernate, "PreservedDuringHibernate"),
                (partial, "PartiallyPreservedDuringHibernate"),
            ] {
                if on {
                    s.flags |= names(&[name]);
                }
            }
            s.system_memory_end_address = 4096;
        });
        let expected = if valid {
            vec![]
        } else {
            vec![seg(
                3,
                Rule::PowerFlags {
                    standby,
                    hibernate,
                    partial,
                },
            )]
        };
        check(&format!("power {bits:?}"), spec, &expected);
    }
    check(
        "memory commit",
        with_segment(2, |s| s.commit_limit = Some(32 * MIB)),
        &[seg(
            3,
            Rule::MemoryCommitLimit {
                commit_limit: 32 * MIB,
            },
        )],
    );
    check(
        "aperture commit below size is fine",
        with_segment(1, |s| s.commit_limit = Some(256 * MIB)),
        &[],
    );
    check(
        "aperture commit",
        with_segment(1, |s| s.commit_limit = Some(1024 * MIB)),
        &[seg(
            2,
            Rule::ApertureCommitLimit {
                commit_limit: 1024 * MIB,
            },
        )],
    );
    let banking = |banks: Vec<u64>| {
        with_segment(2, |s| {
            s.flags |= names(&["UseBanking"]);
            s.banks = Some(banks);
        })
    };
    check(
        "128 banks",
        banking((1..=128).map(|i| i * 4096).collect()),
        &[seg(3, Rule::TooManyBanks(129))],
    );
    check(
        "127 ends plus the implied last end",
        banking((1..=127).map(|i| i * 4096).collect()),
        &[seg(3, Rule::TooManyBanks(128))],
    );
    check(
        "127 banks ending at size",
        banking((1..=126).map(|i| i * 4096).chain([64 * MIB]).collect()),
        &[],
    );
    check(
        "banks decreasing",
        banking(vec![32 * MIB, 16 * MIB]),
        &[seg(3, Rule::BanksNotIncreasing { index: 1 })],
    );
    check(
        "banks equal",
        banking(vec![32 * MIB, 32 * MIB]),
        &[seg(3, Rule::BanksNotIncreasing { index: 1 })],
    );
    check(
        "bank past size",
        banking(vec![32 * MIB, 65 * MIB]),
        &[seg(3, Rule::BankOutsideSegment { index: 1 })],
    );
    check(
        "bank at 0",
        banking(vec![0]),
        &[seg(3, Rule::BankOutsideSegment { index: 0 })],
    );
    check(
        "bank unaligned",
        banking(vec![32 * MIB + 512]),
        &[seg(
            3,
            Rule::BankNotMultiple {
                index: 0,
                unit: 4096,
            },
        )],
    );
    check(
        "partial hibernate without end",
        with_segment(2, |s| {
            s.flags |= names(&[
                "PreservedDuringStandby",
                "PartiallyPreservedDuringHibernate",
            ])
        }),
        &[seg(3, Rule::PartialHibernateWithoutEndAddress)],
    );
    check(
        "outside BAR",
        with_segment(0, |s| s.bar_offset = Some(192 * MIB)),
        &[seg(
            1,
            Rule::OutsideBar {
                offset: 192 * MIB,
                bar_size: BAR,
            },
        )],
    );
    let mut overlap = base();
    overlap.segments.push(SegmentSpec {
        bar_offset: Some(64 * MIB),
        ..memory(&["CpuVisible"], 64 * MIB)
    });
    check(
        "BAR overlap",
        overlap,
        &[seg(4, Rule::BarOverlap { other: 1 })],
    );
    check(
        "device-only VRAM too large",
        with_segment(2, |s| s.size = 65 << 30),
        &[whole(Rule::DeviceOnlyVramTooLarge { total: 65 << 30 })],
    );
    // Found by fuzzing: an aperture of 2^62 bytes passed every rule and the backend then died
    // allocating its translation table.
    check(
        "apertures too large",
        with_segment(1, |s| s.size = 0x4000_0000_0000_0000),
        &[whole(Rule::AperturesTooLarge {
            total: 0x4000_0000_0000_0000,
        })],
    );
    check(
        "paging segment is memory",
        LayoutSpec {
            paging_buffer_segment_id: 1,
            ..base()
        },
        &[whole(Rule::PagingBufferSegment(1))],
    );
    check(
        "paging segment missing",
        LayoutSpec {
            paging_buffer_segment_id: 9,
            ..base()
        },
        &[whole(Rule::PagingBufferSegment(9))],
    );
    check(
        "paging size 0",
        LayoutSpec {
            paging_buffer_size: 0,
            ..base()
        },
        &[whole(Rule::PagingBufferSize(0))],
    );
    check(
        "paging private size",
        LayoutSpec {
            paging_buffer_private_data_size: 1 << 32,
            ..base()
        },
        &[whole(Rule::PagingBufferPrivateDataSize(1 << 32))],
    );
    let mut two_apertures = base_wddm2();
    two_apertures.segments.push(memory(&["Aperture"], 4096));
    check(
        "2.0 with two apertures",
        two_apertures,
        &[whole(Rule::Wddm2ApertureCount(2))],
    );
    check(
        "Agp with others",
        with_segment(2, |s| s.flags = names(&["Agp", "PitchAlignment"])),
        &[seg(3, Rule::AgpUnavailable), seg(3, Rule::AgpNotAlone)],
    );
    // One segment of a base layout edited, one violation reported against that segment.
    type Edit = fn(&mut SegmentSpec);
    type Layout = fn() -> LayoutSpec;
    let single: [(&str, Layout, usize, Edit, Rule); 20] = [
        (
            "reserved bits",
            base,
            2,
            |s| s.flags |= 0x0040_0000,
            Rule::ReservedBits(0x0040_0000),
        ),
        (
            "2.0 flag on 1.3",
            base,
            2,
            |s| s.flags |= names(&["LocalBudgetGroup"]),
            Rule::NeedsWddm2("LocalBudgetGroup".into()),
        ),
        (
            "ReservedSysMem",
            base_wddm2,
            2,
            |s| s.flags |= names(&["ReservedSysMem"]),
            Rule::ReservedSysMem,
        ),
        (
            "Agp alone",
            base,
            2,
            |s| s.flags = names(&["Agp"]),
            Rule::AgpUnavailable,
        ),
        (
            "CacheCoherent on memory",
            base,
            2,
            |s| s.flags |= names(&["CacheCoherent"]),
            Rule::CacheCoherentWithoutAperture,
        ),
        (
            "PopulatedFromSystemMemory on aperture",
            base,
            1,
            |s| s.flags |= names(&["PopulatedFromSystemMemory"]),
            Rule::PopulatedFromSystemMemoryOnAperture,
        ),
        (
            "host aperture + CpuVisible",
            base_wddm2,
            0,
            |s| s.flags |= names(&["SupportsCpuHostAperture"]),
            Rule::CpuHostApertureWithCpuVisible,
        ),
        (
            "cached host aperture alone",
            base_wddm2,
            2,
            |s| s.flags |= names(&["SupportsCachedCpuHostAperture"]),
            Rule::CachedHostApertureWithoutHostAperture,
        ),
        (
            "Aperture + CpuVisible",
            base,
            1,
            |s| s.flags |= names(&["CpuVisible"]),
            Rule::ApertureCpuVisible,
        ),
        ("size 0", base, 2, |s| s.size = 0, Rule::SizeZero),
        (
            "size not 4K",
            base,
            2,
            |s| s.size = 4097,
            Rule::SizeNotMultiple { unit: 4096 },
        ),
        (
            "size not 64K",
            base_wddm2,
            2,
            |s| {
                s.flags |= names(&["Use64KBPages"]);
                s.size = 68 << 10
            },
            Rule::SizeNotMultiple { unit: 64 << 10 },
        ),
        (
            "base overflow",
            base,
            2,
            |s| s.base_address = u64::MAX - 4095,
            Rule::BaseAddressOverflow,
        ),
        (
            "banks without UseBanking",
            base,
            2,
            |s| s.banks = Some(vec![32 * MIB]),
            Rule::BanksWithoutUseBanking,
        ),
        (
            "UseBanking without banks",
            base,
            2,
            |s| s.flags |= names(&["UseBanking"]),
            Rule::UseBankingWithoutBanks,
        ),
        (
            "banks on 2.0",
            base_wddm2,
            2,
            |s| {
                s.flags |= names(&["UseBanking"]);
                s.banks = Some(vec![32 * MIB])
            },
            Rule::BanksOnWddm2,
        ),
        (
            "end address past size",
            base,
            2,
            |s| s.system_memory_end_address = 65 * MIB,
            Rule::SystemMemoryEndBeyondSize,
        ),
        (
            "bar_offset on aperture",
            base,
            1,
            |s| s.bar_offset = Some(0),
            Rule::BarOffsetWithoutCpuVisible,
        ),
        (
            "bar_offset on hidden VRAM",
            base,
            2,
            |s| s.bar_offset = Some(0),
            Rule::BarOffsetWithoutCpuVisible,
        ),
        (
            "bar_offset unaligned",
            base,
            0,
            |s| s.bar_offset = Some(100),
            Rule::BarOffsetNotAligned { unit: 4096 },
        ),
    ];
    for (name, layout, index, edit, rule) in single {
        let mut spec = layout();
        edit(&mut spec.segments[index]);
        check(name, spec, &[seg(u32::try_from(index).unwrap() + 1, rule)]);
    }
}

#[test]
fn messages_name_the_segment_fields_and_rule() {
    let spec = with_segment(1, |s| s.flags |= names(&["CpuVisible"]));
    let lines: Vec<String> = validate(&spec, BAR)
        .unwrap_err()
        .iter()
        .map(|v| v.to_string())
        .collect();
    assert_eq!(lines, ["segment 2 (flags): Aperture with CpuVisible is refused: this device's GART has no CPU window that translates through it [limit of this device]"]);
}

#[test]
fn every_valid_layout_publishes_a_capset_the_guest_accepts() {
    let mut wddm2 = base_wddm2();
    wddm2.segments[0].flags |= names(&["Use64KBPages"]);
    let banked = with_segment(2, |s| {
        s.flags |= names(&["UseBanking"]);
        s.banks = Some(vec![32 * MIB]);
    });
    for spec in [base(), wddm2, banked] {
        let layout = validate(&spec, BAR).unwrap();
        assert_eq!(published_capset_rules(&layout, BAR), Ok(()));
    }
    // A layout the file rules never let through: the capset check still names its segment.
    let mut broken = validate(&base(), BAR).unwrap();
    broken.segments[1].commit_limit = broken.segments[1].size + 4096;
    let violations = published_capset_rules(&broken, BAR).unwrap_err();
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].segment, Some(2));
    assert_eq!(
        violations[0].rule.to_string(),
        "the published capset would be refused: segment #1: commit_limit 0x20001000 exceeds size 0x20000000 [limit of this device]"
    );
}

#[test]
fn gpummu_needs_wddm2_and_a_geometry_that_passes_the_guest_validator() {
    let caps = gpummu_caps(&[9, 9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL);
    let on_wddm13 = LayoutSpec {
        gpummu: Some(caps),
        ..base()
    };
    check(
        "gpummu on 1.3",
        on_wddm13,
        &[(None, Rule::GpuMmuNeedsWddm2)],
    );
    // Segment 2 is the aperture: no page table may live there.
    let in_aperture = LayoutSpec {
        gpummu: Some(with_table_segment(caps, 0, 2)),
        ..base_wddm2()
    };
    // Both of the level's segment ids name it: one line each.
    let rule = |owner| GpuMmuRule::TableSegment {
        level: 0,
        owner,
        segment: 2,
    };
    check(
        "table in the aperture",
        in_aperture.clone(),
        &[
            (None, Rule::GpuMmu(rule(TableOwner::Process))),
            (None, Rule::GpuMmu(rule(TableOwner::PagingProcess))),
        ],
    );
    let lines: Vec<String> = validate(&in_aperture, BAR)
        .unwrap_err()
        .iter()
        .map(|v| v.to_string())
        .collect();
    assert_eq!(
        lines,
        [
            "layout (gpummu): level 0: page_table_segment_id 2 is neither 0 (system memory) nor a memory segment [WDK: DXGK_PAGE_TABLE_LEVEL_DESC]",
            "layout (gpummu): level 0: paging_process_page_table_segment_id 2 is neither 0 (system memory) nor a memory segment [WDK: DXGK_PAGE_TABLE_LEVEL_DESC]",
        ]
    );
    let layout = validate(
        &LayoutSpec {
            gpummu: Some(with_table_segment(caps, 0, 1)),
            ..base_wddm2()
        },
        BAR,
    )
    .unwrap();
    let geometry = layout.gpummu.unwrap();
    assert_eq!(
        geometry
            .level(0)
            .unwrap()
            .table_segment(TableOwner::Process),
        1
    );
    assert_eq!(geometry.address_bits(), 39);
}

#[test]
fn every_broken_gpummu_rule_is_a_violation_of_its_own() {
    let mut caps = gpummu_caps(&[9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL);
    caps.page_table_update_mode = wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL;
    caps.max_contexts = 0;
    caps.levels[1].page_table_alignment_in_bytes = 100;
    let spec = LayoutSpec {
        gpummu: Some(caps),
        ..base_wddm2()
    };
    check(
        "three gpummu rules at once",
        spec,
        &[
            (None, Rule::GpuVirtualUpdatesNotOffered),
            (None, Rule::GpuMmu(GpuMmuRule::MaxContexts(0))),
            (
                None,
                Rule::GpuMmu(GpuMmuRule::Alignment {
                    level: 1,
                    alignment: 100,
                }),
            ),
        ],
    );
}

#[test]
fn a_root_of_0_index_bits_is_refused_as_this_devices_limit() {
    let spec = LayoutSpec {
        gpummu: Some(gpummu_caps(
            &[9, 0],
            WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
        )),
        ..base_wddm2()
    };
    let violations = validate(&spec, BAR).unwrap_err();
    let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("layout (gpummu): level 1: page_table_index_bit_count 0"));
    assert!(lines[0].contains("resizable root"), "{}", lines[0]);
    assert!(!lines[0].contains("64 KiB"), "{}", lines[0]);
    assert!(lines[0].ends_with("[limit of this device]"), "{}", lines[0]);
}

#[test]
fn every_message_says_whether_it_is_a_wdk_rule_or_this_devices_limit() {
    let rules = [
        Rule::NoSegments,
        Rule::TooManySegments { count: 32, max: 31 },
        Rule::ReservedBits(1 << 22),
        Rule::NeedsWddm2("Use64KBPages".into()),
        Rule::ReservedSysMem,
        Rule::AgpUnavailable,
        Rule::AgpNotAlone,
        Rule::CacheCoherentWithoutAperture,
        Rule::PopulatedFromSystemMemoryOnAperture,
        Rule::PowerFlags {
            standby: false,
            hibernate: true,
            partial: false,
        },
        Rule::CpuHostApertureWithCpuVisible,
        Rule::CachedHostApertureWithoutHostAperture,
        Rule::ApertureCpuVisible,
        Rule::SizeZero,
        Rule::SizeNotMultiple { unit: 4096 },
        Rule::BaseAddressOverflow,
        Rule::MemoryCommitLimit { commit_limit: 1 },
        Rule::ApertureCommitLimit { commit_limit: 1 },
        Rule::BanksWithoutUseBanking,
        Rule::UseBankingWithoutBanks,
        Rule::BanksOnWddm2,
        Rule::TooManyBanks(128),
        Rule::BanksNotIncreasing { index: 1 },
        Rule::BankOutsideSegment { index: 1 },
        Rule::BankNotMultiple {
            index: 1,
            unit: 4096,
        },
        Rule::PartialHibernateWithoutEndAddress,
        Rule::SystemMemoryEndBeyondSize,
        Rule::BarOffsetWithoutCpuVisible,
        Rule::BarOffsetNotAligned { unit: 4096 },
        Rule::OutsideBar {
            offset: 0,
            bar_size: BAR,
        },
        Rule::BarOverlap { other: 1 },
        Rule::DeviceOnlyVramTooLarge { total: 1 << 40 },
        Rule::AperturesTooLarge { total: 1 << 40 },
        Rule::PagingBufferSegment(3),
        Rule::PagingBufferSize(0),
        Rule::PagingBufferPrivateDataSize(1 << 33),
        Rule::Wddm2ApertureCount(2),
        Rule::Capset(CapsetError::BadSegment {
            index: 0,
            rule: wddm_gpu_abi::capset_rules::SegmentRule::IdOutOfOrder { id: 2, want: 1 },
        }),
        Rule::GpuMmuNeedsWddm2,
        Rule::GpuVirtualUpdatesNotOffered,
        Rule::GpuMmu(GpuMmuRule::MaxContexts(0)),
        Rule::GpuMmu(GpuMmuRule::LevelCount(9)),
    ];
    for rule in rules {
        let text = rule.to_string();
        let tail = match rule.source() {
            RuleSource::Wdk(page) => format!(" [WDK: {page}]"),
            RuleSource::Device => " [limit of this device]".to_string(),
        };
        assert!(text.ends_with(&tail), "{text}");
        let sources =
            text.matches("[WDK: ").count() + text.matches("[limit of this device]").count();
        assert_eq!(sources, 1, "one source: {text}");
    }
}
