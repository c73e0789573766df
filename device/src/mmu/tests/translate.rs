//! Translations that succeed: every level count, system and VRAM pages, 4 KiB, 64 KiB and large
//! pages, zero pages, runs coalesced across contiguous pages.

use wddm_gpu_abi::build::gpuva::pte;
use wddm_gpu_abi::gpuva::{WDDM_GPU_PTE_LARGE_PAGE, WDDM_GPU_PTE_ZERO};

use super::*;
use crate::mmu::walk::Target;
use crate::testkit::engine_rig::{data_frame, DATA};

#[test]
fn translates_4k_pages_at_every_level_count() {
    let rig = Rig::new("mmu-levels");
    for bits in [
        &[9, 9][..],
        &[9, 9, 9],
        &[9, 9, 9, 9],
        &[8, 8, 8, 8, 8],
        &[6; 6],
    ] {
        let geometry = geometry(bits);
        let mut tables = PageTables::new(&rig, geometry, 0);
        // An address with a non-zero index at every level.
        let va = (1..=geometry.root_level())
            .map(|level| 1u64 << geometry.level(level).unwrap().shift())
            .sum::<u64>()
            + 0x3000;
        tables.map(va, data_frame(5) * PAGE, 0);
        let mut space = tables.space(false);
        let run = translate(&rig, &geometry, &mut space, va + 0x10, 0x100, Access::Read).unwrap();
        assert_eq!(
            run,
            Run {
                target: Target::System(data_frame(5) * PAGE + 0x10),
                len: 0x100
            },
            "{bits:?}"
        );
    }
}

#[test]
fn contiguous_pages_form_one_run_and_a_gap_ends_it() {
    let rig = Rig::new("mmu-runs");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    let va = 0x4000_0000;
    for page in 0..4 {
        tables.map(va + page * PAGE, DATA + page * PAGE, 0);
    }
    // Page 4 maps elsewhere: the run stops before it.
    tables.map(va + 4 * PAGE, DATA + 10 * PAGE, 0);
    let mut space = tables.space(false);
    let run = translate(&rig, &geometry, &mut space, va + 8, 8 * PAGE, Access::Write).unwrap();
    assert_eq!(run.target, Target::System(DATA + 8));
    assert_eq!(run.len, 4 * PAGE - 8);
    let next = translate(
        &rig,
        &geometry,
        &mut space,
        va + 4 * PAGE,
        PAGE,
        Access::Write,
    );
    assert_eq!(next.unwrap().target, Target::System(DATA + 10 * PAGE));
}

#[test]
fn vram_pages_are_offsets_in_their_segment() {
    let rig = Rig::new("mmu-vram");
    let geometry = geometry(&[9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.set(0x20_0000, 0, pte(VRAM_SEGMENT, 0x3000, 0));
    let mut space = tables.space(false);
    let run = translate(&rig, &geometry, &mut space, 0x20_0004, 4, Access::Read).unwrap();
    assert_eq!(
        run.target,
        Target::Segment {
            segment: VRAM_SEGMENT,
            offset: 0x3004
        }
    );
}

#[test]
fn tables_in_a_vram_segment_are_walked_there() {
    let rig = Rig::new("mmu-vram-tables");
    let geometry = tables_in_vram(&[9, 9, 9]);
    let root = TableAddress {
        segment: VRAM_SEGMENT,
        address: 0x10_0000,
    };
    let mut tables = PageTables::at(&rig, geometry, root);
    tables.map(0x1234_5000, DATA, 0);
    let mut space = tables.space(false);
    let run = translate(&rig, &geometry, &mut space, 0x1234_5000, PAGE, Access::Read).unwrap();
    assert_eq!(run.target, Target::System(DATA));
}

#[test]
fn a_64k_leaf_table_maps_64k_pages() {
    let rig = Rig::new("mmu-64k");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    let va = 0x8000_0000 + 3 * 0x1_0000;
    tables.set_64k(va, pte(VRAM_SEGMENT, 0x2_0000, 0));
    let mut space = tables.space(false);
    let run = translate(
        &rig,
        &geometry,
        &mut space,
        va + 0x1234,
        0x2_0000,
        Access::Read,
    )
    .unwrap();
    assert_eq!(
        run,
        Run {
            target: Target::Segment {
                segment: VRAM_SEGMENT,
                offset: 0x2_1234
            },
            // The page ends at 64 KiB; the next one is not mapped.
            len: 0x1_0000 - 0x1234
        }
    );
}

#[test]
fn a_large_page_maps_its_level_coverage() {
    let rig = Rig::new("mmu-large");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    // Level 1 covers 2 MiB: map VA 0x60_0000 to VRAM offset 0x20_0000.
    tables.set(
        0x60_0000,
        1,
        pte(VRAM_SEGMENT, 0x20_0000, WDDM_GPU_PTE_LARGE_PAGE),
    );
    let mut space = tables.space(false);
    let run = translate(
        &rig,
        &geometry,
        &mut space,
        0x60_0000,
        4 << 20,
        Access::Read,
    )
    .unwrap();
    assert_eq!(
        run,
        Run {
            target: Target::Segment {
                segment: VRAM_SEGMENT,
                offset: 0x20_0000
            },
            len: 2 << 20
        }
    );
}

#[test]
fn zero_pages_translate_to_zero_at_any_level() {
    let rig = Rig::new("mmu-zero");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.set(0x1000, 0, pte(0, 0, WDDM_GPU_PTE_ZERO));
    tables.set(0x4000_0000, 1, pte(0, 0, WDDM_GPU_PTE_ZERO));
    let mut space = tables.space(false);
    let leaf = translate(&rig, &geometry, &mut space, 0x1000, PAGE, Access::Write).unwrap();
    assert_eq!(
        leaf,
        Run {
            target: Target::Zero,
            len: PAGE
        }
    );
    let directory = translate(
        &rig,
        &geometry,
        &mut space,
        0x4000_0000,
        8 << 20,
        Access::Read,
    );
    assert_eq!(
        directory.unwrap(),
        Run {
            target: Target::Zero,
            len: 2 << 20
        }
    );
}
