//! Every fault kind, with the level and entry the record carries.

use wddm_gpu_abi::build::gpuva::pte;
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_PTE_LARGE_PAGE, WDDM_GPU_PTE_NO_EXECUTE, WDDM_GPU_PTE_PAGE_TABLE_64KB,
    WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_VALID,
};

use super::*;
use crate::mmu::fault::FaultKind;
use crate::mmu::space::RootError;
use crate::testkit::engine_rig::{DATA, RAM_SIZE, VRAM_GPA};

const VA: u64 = 0x4020_3000;

/// A 3-level space with `VA` mapped to `DATA` by an entry with `flags`.
fn mapped(rig: &Rig, flags: u64) -> (MmuGeometry, AddressSpace) {
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(rig, geometry, 0);
    tables.map(VA, DATA, flags);
    let space = tables.space(false);
    (geometry, space)
}

#[track_caller]
fn fault(
    rig: &Rig,
    geometry: &MmuGeometry,
    space: &mut AddressSpace,
    va: u64,
    access: Access,
) -> MmuFault {
    translate(rig, geometry, space, va, 8, access).unwrap_err()
}

#[test]
fn an_invalid_entry_faults_at_its_level() {
    let rig = Rig::new("mmu-not-present");
    let (geometry, mut space) = mapped(&rig, 0);
    // Another leaf slot of the same table, another level-1 slot, another root slot.
    for (va, level) in [(VA + PAGE, 0), (VA + (2 << 20), 1), (VA + (1 << 30), 2)] {
        let record = fault(&rig, &geometry, &mut space, va, Access::Read);
        assert_eq!(
            (record.kind, record.level, record.entry),
            (FaultKind::NotPresent, level, 0)
        );
        assert_eq!(record.address, va);
    }
}

#[test]
fn permissions_fault_with_the_level_that_forbids() {
    let rig = Rig::new("mmu-permissions");
    let (geometry, mut space) = mapped(&rig, WDDM_GPU_PTE_READ_ONLY | WDDM_GPU_PTE_NO_EXECUTE);
    assert!(translate(&rig, &geometry, &mut space, VA, 8, Access::Read).is_ok());
    let write = fault(&rig, &geometry, &mut space, VA, Access::Write);
    assert_eq!((write.kind, write.level), (FaultKind::ReadOnly, 0));
    assert_eq!(
        write.wire().access,
        wddm_gpu_abi::gpuva::WDDM_GPU_MMU_ACCESS_WRITE
    );
    let fetch = fault(&rig, &geometry, &mut space, VA, Access::Execute);
    assert_eq!((fetch.kind, fetch.level), (FaultKind::NoExecute, 0));
    // Read-only set on a directory entry covers everything below it.
    let mut tables = PageTables::new(&rig, geometry, 1);
    tables.map(VA, DATA, 0);
    let directory = tables.slot(VA, 1, false);
    let entry = tables.read_u64(directory);
    rig.ram_write(directory, &(entry | WDDM_GPU_PTE_READ_ONLY).to_le_bytes());
    let mut space = tables.space(false);
    let write = fault(&rig, &geometry, &mut space, VA, Access::Write);
    assert_eq!((write.kind, write.level), (FaultKind::ReadOnly, 1));
}

/// A READ_ONLY or NO_EXECUTE fault names the level and the entry that carries the bit: the
/// level-1 entry when it is set there, not the leaf entry the walk ended at; the leaf's own
/// entry when the leaf carries it, also for a page cached with its line.
#[test]
fn a_permission_fault_names_the_entry_that_carries_the_bit() {
    let rig = Rig::new("mmu-permission-entry");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 1);
    tables.map(VA, DATA, 0);
    let leaf_slot = tables.slot(VA, 0, false);
    let leaf = tables.read_u64(leaf_slot);
    let directory = tables.slot(VA, 1, false);
    let carrying = tables.read_u64(directory) | WDDM_GPU_PTE_READ_ONLY | WDDM_GPU_PTE_NO_EXECUTE;
    rig.ram_write(directory, &carrying.to_le_bytes());
    let mut space = tables.space(false);
    for (access, kind) in [
        (Access::Write, FaultKind::ReadOnly),
        (Access::Execute, FaultKind::NoExecute),
    ] {
        let record = fault(&rig, &geometry, &mut space, VA, access);
        assert_eq!((record.kind, record.level), (kind, 1));
        assert_eq!(
            record.entry, carrying,
            "names the level-1 entry, not {leaf:#x}"
        );
        assert_eq!(record.wire().entry, carrying);
    }
    // The leaf carries the bit: two pages of one line, the second cached by the first's walk.
    let rig = Rig::new("mmu-permission-leaf-entry");
    let mut tables = PageTables::new(&rig, geometry, 1);
    let flags = WDDM_GPU_PTE_READ_ONLY;
    tables.map(VA, DATA, flags);
    tables.map(VA + PAGE, DATA + 2 * PAGE, flags);
    let second_slot = tables.slot(VA + PAGE, 0, false);
    let second = tables.read_u64(second_slot);
    let mut space = tables.space(false);
    assert!(translate(&rig, &geometry, &mut space, VA, 8, Access::Read).is_ok());
    let record = fault(&rig, &geometry, &mut space, VA + PAGE, Access::Write);
    assert_eq!((record.kind, record.level), (FaultKind::ReadOnly, 0));
    assert_eq!(record.entry, second);
}

#[test]
fn root_overrun_no_root_and_address_range() {
    let rig = Rig::new("mmu-root");
    let geometry = geometry(&[9, 9, 9]);
    let tables = PageTables::new(&rig, geometry, 0);
    let mut space = AddressSpace::new(false);
    let none = fault(&rig, &geometry, &mut space, VA, Access::Read);
    assert_eq!((none.kind, none.level), (FaultKind::NoRoot, 2));
    space.set_root(&geometry, tables.root, 1).unwrap();
    // Root index 1 with NumEntries 1.
    let overrun = fault(&rig, &geometry, &mut space, 1 << 30, Access::Read);
    assert_eq!((overrun.kind, overrun.level), (FaultKind::RootOverrun, 2));
    let range = fault(&rig, &geometry, &mut space, 1 << 39, Access::Read);
    assert_eq!((range.kind, range.level), (FaultKind::AddressRange, 2));
    assert_eq!(
        space.set_root(&geometry, tables.root, 0),
        Err(RootError::Entries {
            entries: 0,
            max: 512
        })
    );
    assert_eq!(
        space.set_root(&geometry, tables.root, 513),
        Err(RootError::Entries {
            entries: 513,
            max: 512
        })
    );
    let unaligned = TableAddress {
        segment: 0,
        address: tables.root.address + 8,
    };
    assert_eq!(
        space.set_root(&geometry, unaligned, 1),
        Err(RootError::Unaligned(unaligned.address))
    );
}

#[test]
fn reserved_bits_and_misplaced_flags_fault() {
    let rig = Rig::new("mmu-flags");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    let reserved = pte(0, DATA, 0) | (1 << 60);
    tables.set(VA, 0, reserved);
    tables.set(VA + PAGE, 0, pte(0, DATA, WDDM_GPU_PTE_LARGE_PAGE));
    tables.set(VA + 2 * PAGE, 0, pte(0, DATA, WDDM_GPU_PTE_PAGE_TABLE_64KB));
    tables.set(
        VA + (1 << 30),
        2,
        pte(0, DATA, WDDM_GPU_PTE_PAGE_TABLE_64KB),
    );
    let mut space = tables.space(false);
    let cases = [
        (VA, FaultKind::ReservedBits, 0),
        (VA + PAGE, FaultKind::BadFlags, 0),
        (VA + 2 * PAGE, FaultKind::BadFlags, 0),
        (VA + (1 << 30), FaultKind::BadFlags, 2),
    ];
    for (va, kind, level) in cases {
        let record = fault(&rig, &geometry, &mut space, va, Access::Read);
        assert_eq!((record.kind, record.level), (kind, level), "{va:#x}");
    }
    assert_eq!(
        fault(&rig, &geometry, &mut space, VA, Access::Read).entry,
        reserved
    );
}

#[test]
fn large_pages_need_the_cap_and_alignment() {
    let rig = Rig::new("mmu-large-rules");
    let mut caps = wddm_gpu_abi::build::gpuva::gpummu_caps(
        &[9, 9, 9],
        wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
    );
    caps.flags &= !wddm_gpu_abi::gpuva::WDDM_GPU_MMU_CAP_LARGE_PAGE;
    let no_large = checked(caps);
    let mut tables = PageTables::new(&rig, no_large, 0);
    tables.set(
        0x60_0000,
        1,
        pte(VRAM_SEGMENT, 0x20_0000, WDDM_GPU_PTE_LARGE_PAGE),
    );
    let mut space = tables.space(false);
    let record = fault(&rig, &no_large, &mut space, 0x60_0000, Access::Read);
    assert_eq!((record.kind, record.level), (FaultKind::BadFlags, 1));

    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 1);
    tables.set(
        0x60_0000,
        1,
        pte(VRAM_SEGMENT, 0x1_0000, WDDM_GPU_PTE_LARGE_PAGE),
    );
    tables.set_64k(0x8000_0000, pte(VRAM_SEGMENT, 0x1000, 0));
    let mut space = tables.space(false);
    let large = fault(&rig, &geometry, &mut space, 0x60_0000, Access::Read);
    assert_eq!((large.kind, large.level), (FaultKind::Misaligned, 1));
    let small = fault(&rig, &geometry, &mut space, 0x8000_0000, Access::Read);
    assert_eq!((small.kind, small.level), (FaultKind::Misaligned, 0));
}

#[test]
fn pages_outside_ram_in_the_vram_window_or_past_a_segment_fault() {
    let rig = Rig::new("mmu-storage");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    let vram_size = rig.vram.size();
    let cases = [
        (pte(0, RAM_SIZE + PAGE, 0), FaultKind::OutsideRam),
        (pte(0, VRAM_GPA, 0), FaultKind::InVramWindow),
        (pte(2, 0, 0), FaultKind::BadSegment),
        (pte(9, 0, 0), FaultKind::BadSegment),
        (pte(VRAM_SEGMENT, vram_size, 0), FaultKind::BadSegment),
    ];
    for (index, (entry, _)) in (0u64..).zip(&cases) {
        tables.set(VA + index * PAGE, 0, *entry);
    }
    let mut space = tables.space(false);
    for (index, (entry, kind)) in (0u64..).zip(cases) {
        let record = fault(&rig, &geometry, &mut space, VA + index * PAGE, Access::Read);
        assert_eq!((record.kind, record.level, record.entry), (kind, 0, entry));
    }
}

#[test]
fn tables_outside_ram_in_the_vram_window_or_an_aperture_fault() {
    let rig = Rig::new("mmu-table-storage");
    let geometry = geometry(&[9, 9, 9]);
    let cases = [
        (
            TableAddress {
                segment: 0,
                address: RAM_SIZE,
            },
            FaultKind::OutsideRam,
        ),
        (
            TableAddress {
                segment: 0,
                address: VRAM_GPA,
            },
            FaultKind::InVramWindow,
        ),
        (
            TableAddress {
                segment: 2,
                address: 0,
            },
            FaultKind::BadSegment,
        ),
        (
            TableAddress {
                segment: 7,
                address: 0,
            },
            FaultKind::BadSegment,
        ),
    ];
    for (root, kind) in cases {
        let mut space = AddressSpace::new(false);
        space.set_root(&geometry, root, 512).unwrap();
        let record = fault(&rig, &geometry, &mut space, VA, Access::Read);
        assert_eq!((record.kind, record.level), (kind, 2), "{root:?}");
    }
    // A directory entry pointing outside RAM faults at the level below it, where the read failed.
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.set(VA, 1, WDDM_GPU_PTE_VALID | RAM_SIZE);
    let mut space = tables.space(false);
    let record = fault(&rig, &geometry, &mut space, VA, Access::Read);
    assert_eq!((record.kind, record.level), (FaultKind::OutsideRam, 0));
}
