use super::*;
use crate::build::gpuva::{gpummu_caps, with_table_segment};
use crate::gpuva::{
    WDDM_GPU_MMU_CAP_DUAL_PTE, WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL,
    WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
};
use crate::segment_flags::SegmentFlags;

/// Segment 1: CPU-visible VRAM; segment 2: an aperture; segment 3: VRAM the CPU cannot reach.
fn segments() -> [u32; 3] {
    [
        SegmentFlags::CPU_VISIBLE.bits(),
        SegmentFlags::APERTURE.bits(),
        0,
    ]
}

fn check(caps: &WddmGpuMmuCaps) -> Result<MmuGeometry, GpuMmuRule> {
    validate_gpummu(caps, &segments())
}

fn physical(index_bits: &[u32]) -> WddmGpuMmuCaps {
    gpummu_caps(index_bits, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL)
}

#[test]
fn every_level_count_from_two_to_six_passes() {
    for count in 2..=6usize {
        // As wide as the 52 address bits allow: 9 bits up to 4 levels, then 8 and 6.
        let per_level = [9, 9, 9, 8, 6][count - 2];
        let bits = vec![per_level; count];
        let geometry = check(&physical(&bits)).unwrap();
        assert_eq!(geometry.level_count(), u32::try_from(count).unwrap());
        let levels: Vec<_> = (0..geometry.level_count())
            .map(|level| geometry.level(level).unwrap().shift())
            .collect();
        let want: Vec<u32> = (0..u32::try_from(count).unwrap())
            .map(|level| 12 + per_level * level)
            .collect();
        assert_eq!(levels, want);
        assert!(geometry.level(geometry.level_count()).is_none());
        assert_eq!(geometry.resizable_root(), count == 2);
    }
}

#[test]
fn level_counts_outside_two_to_six_are_refused() {
    for bits in [&[9][..], &[4, 4, 4, 4, 4, 4, 4]] {
        let mut caps = physical(&[9, 9]);
        caps.page_table_level_count = u32::try_from(bits.len()).unwrap();
        assert_eq!(
            check(&caps),
            Err(GpuMmuRule::LevelCount(caps.page_table_level_count))
        );
    }
}

#[test]
fn address_bits_must_add_up() {
    let mut caps = physical(&[9, 9, 9]);
    caps.virtual_address_bit_count = 40;
    assert_eq!(
        check(&caps),
        Err(GpuMmuRule::AddressBits { have: 40, want: 39 })
    );
    let wide = with_table_segment(
        with_table_segment(with_table_segment(physical(&[12, 12, 12, 12]), 0, 1), 1, 1),
        2,
        1,
    );
    let wide = with_table_segment(wide, 3, 1);
    assert_eq!(check(&wide), Err(GpuMmuRule::AddressBitsTooLarge(60)));
}

#[test]
fn index_bits_have_their_range() {
    assert_eq!(
        check(&physical(&[3, 9])),
        Err(GpuMmuRule::IndexBits { level: 0, bits: 3 })
    );
    assert_eq!(
        check(&physical(&[9, 0])),
        Err(GpuMmuRule::IndexBits { level: 1, bits: 0 })
    );
    assert_eq!(
        check(&with_table_segment(physical(&[13, 9]), 0, 1)),
        Err(GpuMmuRule::IndexBits { level: 0, bits: 13 })
    );
    assert!(check(&physical(&[4, 1])).is_ok());
}

#[test]
fn system_tables_are_at_most_4k() {
    assert_eq!(
        check(&physical(&[10, 9])),
        Err(GpuMmuRule::SystemTableTooLarge {
            level: 0,
            size: 8192
        })
    );
    let geometry = check(&with_table_segment(physical(&[10, 9]), 0, 1)).unwrap();
    assert_eq!(geometry.level(0).unwrap().table_size(), 8192);
}

#[test]
fn table_segments_are_memory_segments() {
    for segment in [2, 4] {
        let caps = with_table_segment(physical(&[9, 9]), 0, segment);
        assert_eq!(
            check(&caps),
            Err(GpuMmuRule::TableSegment {
                level: 0,
                owner: TableOwner::Process,
                segment
            })
        );
    }
    let mut caps = physical(&[9, 9]);
    caps.levels[0].page_table_segment_id = 3;
    assert!(
        check(&caps).is_ok(),
        "GPU_PHYSICAL may use any memory segment"
    );
}

#[test]
fn cpu_virtual_keeps_directories_in_system_memory_and_leaves_cpu_visible() {
    let cpu = gpummu_caps(&[9, 9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL);
    assert!(check(&with_table_segment(cpu, 0, 1)).is_ok());
    assert_eq!(
        check(&with_table_segment(cpu, 1, 1)),
        Err(GpuMmuRule::CpuVirtualDirectoryInSegment { level: 1 })
    );
    let mut hidden = cpu;
    hidden.levels[0].page_table_segment_id = 3;
    assert_eq!(
        check(&hidden),
        Err(GpuMmuRule::TableNotCpuVisible {
            level: 0,
            owner: TableOwner::Process,
            segment: 3
        })
    );
    let mut paging = physical(&[9, 9]);
    paging.levels[1].paging_process_page_table_segment_id = 3;
    assert_eq!(
        check(&paging),
        Err(GpuMmuRule::TableNotCpuVisible {
            level: 1,
            owner: TableOwner::PagingProcess,
            segment: 3
        })
    );
}

#[test]
fn sizes_alignment_and_the_64k_leaf_follow_the_entries() {
    let mut caps = physical(&[9, 9]);
    caps.levels[1].page_table_size_in_bytes = 8192;
    assert_eq!(
        check(&caps),
        Err(GpuMmuRule::TableSize {
            level: 1,
            size: 8192,
            want: 4096
        })
    );
    let mut caps = physical(&[9, 9]);
    caps.levels[0].page_table_alignment_in_bytes = 2048;
    assert_eq!(
        check(&caps),
        Err(GpuMmuRule::Alignment {
            level: 0,
            alignment: 2048
        })
    );
    caps.levels[0].page_table_alignment_in_bytes = 65536;
    assert!(check(&caps).is_ok());
    caps.leaf_page_table_size_for_64k_pages = 256;
    assert_eq!(
        check(&caps),
        Err(GpuMmuRule::Leaf64KSize {
            have: 256,
            want: 4096
        })
    );
}

#[test]
fn unused_levels_flags_modes_and_contexts_are_checked() {
    let mut caps = physical(&[9, 9]);
    caps.levels[4].page_table_index_bit_count = 1;
    assert_eq!(check(&caps), Err(GpuMmuRule::NotZero { level: 4 }));
    let mut caps = physical(&[9, 9]);
    caps.levels[1].reserved = 1;
    assert_eq!(check(&caps), Err(GpuMmuRule::NotZero { level: 1 }));
    let mut caps = physical(&[9, 9]);
    caps.flags |= WDDM_GPU_MMU_CAP_DUAL_PTE;
    assert_eq!(
        check(&caps),
        Err(GpuMmuRule::UnsupportedFlags(WDDM_GPU_MMU_CAP_DUAL_PTE))
    );
    let mut caps = physical(&[9, 9]);
    caps.page_table_update_mode = 3;
    assert_eq!(check(&caps), Err(GpuMmuRule::UnknownUpdateMode(3)));
    for contexts in [0, MAX_CONTEXTS + 1] {
        let mut caps = physical(&[9, 9]);
        caps.max_contexts = contexts;
        assert_eq!(check(&caps), Err(GpuMmuRule::MaxContexts(contexts)));
    }
}

/// One rule of each kind, in `GpuMmuRule::RULES`' order.
fn one_of_each_rule() -> Vec<GpuMmuRule> {
    vec![
        GpuMmuRule::UnsupportedFlags(1 << 7),
        GpuMmuRule::UnknownUpdateMode(9),
        GpuMmuRule::LevelCount(7),
        GpuMmuRule::IndexBits { level: 0, bits: 2 },
        GpuMmuRule::AddressBits { have: 1, want: 2 },
        GpuMmuRule::AddressBitsTooLarge(60),
        GpuMmuRule::NotZero { level: 5 },
        GpuMmuRule::TableSize {
            level: 0,
            size: 1,
            want: 4096,
        },
        GpuMmuRule::Alignment {
            level: 0,
            alignment: 3,
        },
        GpuMmuRule::TableSegment {
            level: 0,
            owner: TableOwner::Process,
            segment: 2,
        },
        GpuMmuRule::SystemTableTooLarge {
            level: 0,
            size: 8192,
        },
        GpuMmuRule::CpuVirtualDirectoryInSegment { level: 1 },
        GpuMmuRule::TableNotCpuVisible {
            level: 0,
            owner: TableOwner::PagingProcess,
            segment: 3,
        },
        GpuMmuRule::Leaf64KSize { have: 1, want: 2 },
        GpuMmuRule::MaxContexts(0),
    ]
}

#[test]
fn every_rule_has_a_name_and_a_message_naming_its_field() {
    let rules = one_of_each_rule();
    let names: Vec<_> = rules.iter().map(GpuMmuRule::name).collect();
    assert_eq!(names, GpuMmuRule::RULES);
    for rule in rules {
        let text = rule.to_string();
        let field = rule.name().trim_start_matches("gpummu.");
        assert!(!text.is_empty(), "{field}");
    }
    assert!(GpuMmuRule::TableNotCpuVisible {
        level: 0,
        owner: TableOwner::PagingProcess,
        segment: 3,
    }
    .to_string()
    .contains("paging_process_page_table_segment_id"));
}

#[test]
fn root_size_follows_the_entries_asked_for() {
    let geometry = check(&physical(&[9, 9])).unwrap();
    assert_eq!(geometry.root_table_size(1), Some(4096));
    assert_eq!(geometry.root_table_size(512), Some(4096));
    assert_eq!(geometry.root_table_size(513), None);
    assert_eq!(geometry.address_limit(), 1 << 30);
}

/// Every rule `validate_gpummu_each` reports, in order.
fn all_broken(caps: &WddmGpuMmuCaps) -> Vec<GpuMmuRule> {
    let mut broken = Vec::new();
    let first = validate_gpummu_each(caps, &segments(), |rule| broken.push(rule));
    assert_eq!(
        first.err(),
        broken.first().copied(),
        "the first is the answer"
    );
    assert_eq!(
        check(caps).err(),
        broken.first().copied(),
        "as validate_gpummu"
    );
    broken
}

#[test]
fn every_broken_rule_is_reported_in_the_order_checked() {
    let mut caps = physical(&[9, 9, 9]);
    caps.flags |= WDDM_GPU_MMU_CAP_DUAL_PTE;
    caps.max_contexts = 0;
    caps.levels[0].page_table_alignment_in_bytes = 2048;
    caps.levels[1].page_table_size_in_bytes = 8192;
    caps.levels[2] = with_table_segment(caps, 2, 2).levels[2];
    caps.leaf_page_table_size_for_64k_pages = 256;
    assert_eq!(
        all_broken(&caps),
        [
            GpuMmuRule::UnsupportedFlags(WDDM_GPU_MMU_CAP_DUAL_PTE),
            GpuMmuRule::MaxContexts(0),
            GpuMmuRule::Alignment {
                level: 0,
                alignment: 2048
            },
            GpuMmuRule::TableSize {
                level: 1,
                size: 8192,
                want: 4096
            },
            GpuMmuRule::SystemTableTooLarge {
                level: 1,
                size: 8192
            },
            GpuMmuRule::TableSegment {
                level: 2,
                owner: TableOwner::Process,
                segment: 2
            },
            GpuMmuRule::TableSegment {
                level: 2,
                owner: TableOwner::PagingProcess,
                segment: 2
            },
            GpuMmuRule::Leaf64KSize {
                have: 256,
                want: 4096
            },
        ]
    );
    assert!(all_broken(&physical(&[9, 9, 9])).is_empty());
}

#[test]
fn a_rule_that_leaves_the_rest_meaningless_ends_the_check() {
    let mut caps = physical(&[9, 9]);
    caps.page_table_level_count = 7;
    caps.max_contexts = 0;
    assert_eq!(all_broken(&caps), [GpuMmuRule::LevelCount(7)]);
    // Bad index bits on two levels: each is reported, the address bits are not (they follow).
    let mut caps = physical(&[3, 0]);
    caps.virtual_address_bit_count = 1;
    assert_eq!(
        all_broken(&caps),
        [
            GpuMmuRule::IndexBits { level: 0, bits: 3 },
            GpuMmuRule::IndexBits { level: 1, bits: 0 },
        ]
    );
}

#[test]
fn a_root_of_0_index_bits_is_this_devices_limit_not_the_leafs() {
    let root = GpuMmuRule::IndexBits { level: 1, bits: 0 };
    assert_eq!(check(&physical(&[9, 0])), Err(root));
    let text = root.to_string();
    assert!(text.contains("resizable root"), "{text}");
    assert!(text.contains("DxgkDdiGetRootPageTableSize"), "{text}");
    assert!(!text.contains("64 KiB"), "{text}");
    assert_eq!(root.source(), RuleSource::Device);
    let leaf = GpuMmuRule::IndexBits { level: 0, bits: 3 }.to_string();
    assert!(leaf.contains("64 KiB page"), "{leaf}");
    let wide = GpuMmuRule::IndexBits { level: 1, bits: 13 }.to_string();
    assert!(wide.contains("above 12"), "{wide}");
    assert!(!wide.contains("64 KiB"), "{wide}");
}

#[test]
fn every_message_ends_with_its_source() {
    // Each kind, and the index-bit bounds whose messages differ by level (leaf, root, wide).
    let mut rules = one_of_each_rule();
    rules.extend([
        GpuMmuRule::IndexBits { level: 1, bits: 0 },
        GpuMmuRule::IndexBits { level: 2, bits: 13 },
    ]);
    for rule in rules {
        let text = rule.to_string();
        let tail = match rule.source() {
            RuleSource::Wdk(page) => {
                assert!(!page.is_empty());
                format!(" [WDK: {page}]")
            }
            RuleSource::Device => " [limit of this device]".to_string(),
        };
        assert!(text.ends_with(&tail), "{text}");
        assert_eq!(text.matches('[').count(), 1, "one source: {text}");
    }
}
