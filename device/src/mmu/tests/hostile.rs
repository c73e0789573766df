//! Tables written to attack the walker: loops, tables that are their own pages, walks that
//! must stay bounded by the level count.

use wddm_gpu_abi::build::gpuva::pte;

use super::*;
use crate::mmu::fault::FaultKind;
use crate::mmu::walk::{walk, Root, Target};

#[test]
fn a_table_pointing_at_itself_ends_after_one_read_per_level() {
    let rig = Rig::new("mmu-self-loop");
    for bits in [&[9, 9][..], &[9, 9, 9, 9], &[6; 6]] {
        let geometry = geometry(bits);
        let root = TableAddress {
            segment: 0,
            address: TABLES,
        };
        // Every slot of the one table points back at the table: every index of every level.
        let entry = pte(0, TABLES, 0);
        let table: Vec<u8> = (0..512).flat_map(|_| entry.to_le_bytes()).collect();
        rig.ram_write(TABLES, &table);
        let root = Root {
            table: root,
            entries: 512,
        };
        let va = 0x1234_5678 & (geometry.address_limit() - 1);
        let (result, reads) = counting(&rig, |tables| {
            let result = walk(&geometry, &root, va, Access::Read, tables);
            (result, tables.reads.get())
        });
        // The leaf maps the table page itself as data: a valid page, found in bounded time.
        assert_eq!(result.unwrap().page.target, Target::System(TABLES));
        assert_eq!(reads, geometry.level_count(), "{bits:?}");
    }
}

#[test]
fn a_root_in_the_wrong_segment_faults_instead_of_reading_it() {
    let rig = Rig::new("mmu-wrong-root");
    let geometry = geometry(&[9, 9, 9]);
    let mut space = AddressSpace::new(false);
    // Past the end of the VRAM segment, and inside the aperture.
    for root in [
        TableAddress {
            segment: VRAM_SEGMENT,
            address: rig.vram.size(),
        },
        TableAddress {
            segment: 2,
            address: 0x1000,
        },
    ] {
        space.set_root(&geometry, root, 512).unwrap();
        let record = translate(&rig, &geometry, &mut space, 0, 8, Access::Read).unwrap_err();
        assert_eq!((record.kind, record.level), (FaultKind::BadSegment, 2));
    }
}

#[test]
fn a_translation_of_a_huge_length_is_bounded_by_the_mapped_pages() {
    let rig = Rig::new("mmu-huge-length");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(0, crate::testkit::engine_rig::DATA, 0);
    let mut space = tables.space(false);
    let run = translate(&rig, &geometry, &mut space, 0, u64::MAX, Access::Read).unwrap();
    assert_eq!(run.len, PAGE);
    let top = translate(
        &rig,
        &geometry,
        &mut space,
        u64::MAX - 4,
        u64::MAX,
        Access::Read,
    );
    assert_eq!(top.unwrap_err().kind, FaultKind::AddressRange);
    // The last byte of the 64-bit space, which a saturated end cannot include: a fault, not
    // an empty run (the gpummu_walk fuzz target found it).
    for length in [1, 8, u64::MAX] {
        let last = translate(&rig, &geometry, &mut space, u64::MAX, length, Access::Read);
        assert_eq!(last.unwrap_err().kind, FaultKind::AddressRange, "{length}");
    }
    let nothing = translate(&rig, &geometry, &mut space, u64::MAX, 0, Access::Read);
    assert_eq!(nothing.unwrap().len, 0);
}
