//! The paging node's virtual-address packets through the paging context's address space: bytes
//! moved and checked, entries copied table to table, fences signalled, residency and context
//! allocations checked, and a fault for each thing a KMD can get wrong.

use std::sync::{Arc, Mutex};

use wddm_gpu_abi::build::gpuva::{
    copy_page_table_entries, fill_virtual, notify_residency, pte, signal_monitored_fence,
    transfer_virtual, update_context_allocation,
};
use wddm_gpu_abi::build::page_tables::PageTables;
use wddm_gpu_abi::gpuva::WDDM_GPU_MMU_FAULT_NOT_PRESENT;
use wddm_gpu_abi::packet::WddmGpuCopyRange;
use zerocopy::IntoBytes;

use super::gpummu_rig;
use super::hooks::Hooks;
use crate::engine::{Fault, Stop};
use crate::mmu::space::AddressSpace;
use crate::mmu::walk::TableAddress;
use crate::testkit::engine_rig::{Rig, DATA, PAGE, PAGE_USIZE};
use crate::testkit::packets::{packet_bytes, VRAM_SEGMENT};

const VA_DATA: u64 = 0x4000_0000;
const VA_VRAM: u64 = 0x8000_0000;

/// The paging process's tables (written by the CPU into the rig's memory): `VA_DATA` maps 8
/// scattered data pages, `VA_VRAM` 8 VRAM pages from 0x20_0000; hooks holding its space.
fn paging_process(rig: &Rig) -> (PageTables, Hooks) {
    let mut tables = PageTables::new(
        &[9, 9, 9],
        &[VRAM_SEGMENT, 0, 0],
        0x60_0000..0x70_0000,
        0x1_0000..0x10_0000,
    )
    .unwrap();
    let data: Vec<u64> = (0..8)
        .map(|i| pte(0, DATA + ((i * 5) % 8) * PAGE, 0))
        .collect();
    let vram: Vec<u64> = (0..8)
        .map(|i| pte(VRAM_SEGMENT, 0x20_0000 + i * PAGE, 0))
        .collect();
    tables.map(VA_DATA, &data).unwrap();
    tables.map(VA_VRAM, &vram).unwrap();
    store(rig, &mut tables);
    let geometry = rig.layout.gpummu.unwrap();
    let mut space = AddressSpace::new(false);
    let root = tables.root();
    space
        .set_root(
            &geometry,
            TableAddress {
                segment: root.segment,
                address: root.address,
            },
            512,
        )
        .unwrap();
    let hooks = Hooks {
        paging_space: Some(Arc::new(Mutex::new(space))),
        ..Hooks::default()
    };
    (tables, hooks)
}

/// Stores the recorded writes as a CPU_VIRTUAL driver would.
fn store(rig: &Rig, tables: &mut PageTables) {
    for write in tables.take() {
        let (table, start, entries) = write.slots();
        let at = table.address + u64::from(start) * 8;
        if table.segment == 0 {
            rig.ram_write(at, entries.as_bytes());
        } else {
            rig.vram_write(at, entries.as_bytes());
        }
    }
}

/// Data page `i` of `VA_DATA`.
fn data_page(i: u64) -> u64 {
    DATA + ((i * 5) % 8) * PAGE
}

#[test]
fn transfer_fill_and_signal_move_bytes_through_the_paging_process() {
    let mut rig = gpummu_rig("pv-move");
    let (_tables, mut hooks) = paging_process(&rig);
    for i in 0..8 {
        rig.ram_write(
            data_page(i),
            &vec![u8::try_from(i + 1).unwrap(); PAGE_USIZE],
        );
    }
    let mut bytes = packet_bytes(transfer_virtual(8 * PAGE - 16, VA_DATA + 16, VA_VRAM));
    bytes.extend(packet_bytes(fill_virtual(
        0x0a0b_0c0d,
        12,
        VA_VRAM + 8 * PAGE - 12,
    )));
    bytes.extend(packet_bytes(signal_monitored_fence(VA_DATA + 8, 0x77)));
    let completion = rig.submit_with(&bytes, &mut hooks);
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.bytes_transferred, 8 * PAGE - 16 + 12);
    let vram = rig.vram_read(0x20_0000, 8 * PAGE_USIZE);
    for (offset, byte) in vram.iter().enumerate().take(8 * PAGE_USIZE - 16) {
        let position = offset as u64 + 16;
        assert_eq!(u64::from(*byte), position / PAGE + 1, "VRAM byte {offset}");
    }
    assert_eq!(
        &vram[8 * PAGE_USIZE - 12..],
        &0x0a0b_0c0du32.to_le_bytes().repeat(3)[..]
    );
    assert_eq!(rig.ram_read(data_page(0) + 8, 8), 0x77u64.to_le_bytes());
    assert_eq!(hooks.monitored, vec![(VA_DATA + 8, 0x77)]);
}

/// The paging process maps two leaf tables' VRAM, the source's and the destination's, at VA
/// 0xc000_0000 (the tables themselves, for COPY_PAGE_TABLE_ENTRIES); their VRAM offsets.
fn map_two_leaf_tables(rig: &Rig, tables: &mut PageTables) -> (u64, u64) {
    let (source_table, destination_table) = (0x2_0000, 0x2_1000);
    tables
        .map(
            0xc000_0000,
            &[
                pte(VRAM_SEGMENT, source_table, 0),
                pte(VRAM_SEGMENT, destination_table, 0),
            ],
        )
        .unwrap();
    store(rig, tables);
    (source_table, destination_table)
}

#[test]
fn copy_page_table_entries_copies_through_the_tables_mappings() {
    let mut rig = gpummu_rig("pv-copy-entries");
    let (mut tables, mut hooks) = paging_process(&rig);
    let (source_table, destination_table) = map_two_leaf_tables(&rig, &mut tables);
    let entries: Vec<u64> = (0..4).map(|i| pte(0, DATA + i * PAGE, 0)).collect();
    rig.vram_write(source_table + 10 * 8, entries.as_bytes());
    let range = WddmGpuCopyRange {
        entry_count: 4,
        reserved: 0,
        source_table: 0xc000_0000,
        destination_table: 0xc000_1000,
        source_start: 10,
        destination_start: 500,
    };
    rig.ram_write(DATA + 0x10_0000, range.as_bytes());
    let completion = rig.submit_with(
        &packet_bytes(copy_page_table_entries(1, DATA + 0x10_0000)),
        &mut hooks,
    );
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(
        rig.vram_read(destination_table + 500 * 8, 32),
        entries.as_bytes()
    );
}

#[test]
fn a_fault_names_the_faulting_address_and_the_rest_is_checked() {
    let mut rig = gpummu_rig("pv-faults");
    let (_tables, mut hooks) = paging_process(&rig);
    let unmapped = VA_DATA + 8 * PAGE + 4;
    let completion = rig.submit_with(
        &packet_bytes(transfer_virtual(16, unmapped, VA_VRAM)),
        &mut hooks,
    );
    let Some((0, Stop::Fault(Fault::Page(fault)))) = completion.stop else {
        panic!("{completion:?}");
    };
    assert_eq!(fault.address, unmapped);
    assert_eq!(fault.kind.wire(), WDDM_GPU_MMU_FAULT_NOT_PRESENT);
    // The context allocation must be mapped all through.
    let ok = rig.submit_with(
        &packet_bytes(update_context_allocation(VA_VRAM, 8 * PAGE)),
        &mut hooks,
    );
    assert_eq!(ok.stop, None);
    let short = rig.submit_with(
        &packet_bytes(update_context_allocation(VA_VRAM, 9 * PAGE)),
        &mut hooks,
    );
    assert!(
        matches!(short.stop, Some((0, Stop::Fault(Fault::Page(f)))) if f.address == VA_VRAM + 8 * PAGE),
        "{short:?}"
    );
    // Residency: a place inside a segment, or none for an eviction.
    for (packet, fault) in [
        (notify_residency(Some((VRAM_SEGMENT, 0x1000)), 7), None),
        (notify_residency(None, 7), None),
        (
            notify_residency(Some((9, 0)), 7),
            Some(Fault::BadSegment(9)),
        ),
        (
            notify_residency(Some((VRAM_SEGMENT, 1 << 40)), 7),
            Some(Fault::SegmentRange {
                segment: VRAM_SEGMENT,
                address: 1 << 40,
                length: 0,
            }),
        ),
    ] {
        let completion = rig.submit_with(&packet_bytes(packet), &mut hooks);
        assert_eq!(completion.stop, fault.map(|f| (0, f.into())), "{packet:?}");
    }
}

#[test]
fn without_a_paging_context_or_a_gpummu_the_packets_are_refused() {
    let mut rig = gpummu_rig("pv-no-context");
    let completion = rig.submit(&packet_bytes(fill_virtual(0, 8, VA_DATA)));
    assert_eq!(
        completion.stop,
        Some((
            0,
            Fault::BadContext("virtual-address packets need a context on the paging node").into()
        ))
    );
    let mut plain = Rig::new("pv-no-gpummu");
    let completion = plain.submit(&packet_bytes(fill_virtual(0, 8, VA_DATA)));
    assert_eq!(
        completion.stop,
        Some((
            0,
            Fault::Unsupported("virtual-address packets need a layout with [gpummu]").into()
        ))
    );
}

#[test]
fn a_zero_page_copied_after_a_fill_writes_zeros() {
    use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_ZERO;

    let mut rig = gpummu_rig("pv-zero-after-fill");
    let (mut tables, mut hooks) = paging_process(&rig);
    let zero_va = 0xc000_0000;
    tables
        .set(zero_va, 0, pte(0, 0, WDDM_GPU_PTE_ZERO))
        .unwrap();
    store(&rig, &mut tables);
    // A fill whose pattern starts with a zero byte, then a copy from a zero page: the copy must
    // write zeros, not the fill's bytes.
    let mut bytes = packet_bytes(fill_virtual(0x3322_1100, 64, VA_VRAM));
    bytes.extend(packet_bytes(transfer_virtual(64, zero_va, VA_VRAM)));
    let completion = rig.submit_with(&bytes, &mut hooks);
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(rig.vram_read(0x20_0000, 64), vec![0; 64]);
}

/// Pages of the copies that span several of the copy engine's batches.
const BIG_PAGES: u64 = 150;
const VA_BIG: u64 = 0xc000_0000;
const VA_VRAM_BIG: u64 = 0xd000_0000;
const VRAM_BIG: u64 = 0x28_0000;

/// `VA_BIG` mapped onto [`BIG_PAGES`] scattered data pages (filled with a pattern),
/// `VA_VRAM_BIG` onto as many VRAM pages (zeroed); the source's bytes.
fn big_copy(rig: &Rig, tables: &mut PageTables) -> Vec<u8> {
    let frames = crate::testkit::engine_rig::scattered(usize::try_from(BIG_PAGES).unwrap());
    let source: Vec<u8> = (0..BIG_PAGES * PAGE)
        .map(|i| u8::try_from((i * 7 + i / PAGE) % 251).unwrap())
        .collect();
    for (page, frame) in frames.iter().enumerate() {
        let bytes = &source[page * PAGE_USIZE..(page + 1) * PAGE_USIZE];
        rig.ram_write(frame * PAGE, bytes);
    }
    let entries: Vec<u64> = frames.iter().map(|frame| pte(0, frame * PAGE, 0)).collect();
    tables.map(VA_BIG, &entries).unwrap();
    let vram: Vec<u64> = (0..BIG_PAGES)
        .map(|i| pte(VRAM_SEGMENT, VRAM_BIG + i * PAGE, 0))
        .collect();
    tables.map(VA_VRAM_BIG, &vram).unwrap();
    store(rig, tables);
    rig.vram_write(
        VRAM_BIG,
        &vec![0; usize::try_from(BIG_PAGES * PAGE).unwrap()],
    );
    source
}

/// FLUSH_TLB of the whole paging process, after its tables changed.
fn flush(hooks: &Hooks) {
    hooks
        .paging_space
        .as_ref()
        .unwrap()
        .lock()
        .unwrap()
        .flush(None);
}

#[test]
fn a_copy_over_more_pages_than_a_batch_moves_every_byte() {
    let mut rig = gpummu_rig("pv-big-copy");
    let (mut tables, mut hooks) = paging_process(&rig);
    let source = big_copy(&rig, &mut tables);
    // Unaligned on both sides, so every run is split against the other side's pages.
    let length = (BIG_PAGES - 1) * PAGE - 100;
    let completion = rig.submit_with(
        &packet_bytes(transfer_virtual(length, VA_BIG + 50, VA_VRAM_BIG + 30)),
        &mut hooks,
    );
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.bytes_transferred, length);
    let copied = rig.vram_read(VRAM_BIG + 30, usize::try_from(length).unwrap());
    let expected = &source[50..50 + usize::try_from(length).unwrap()];
    let first_bad = copied.iter().zip(expected).position(|(a, b)| a != b);
    assert_eq!(first_bad, None);
}

#[test]
fn a_copy_that_faults_past_a_batch_copies_the_bytes_before_and_reports_the_first_fault() {
    use wddm_gpu_abi::gpuva::{WDDM_GPU_MMU_FAULT_READ_ONLY, WDDM_GPU_PTE_READ_ONLY};

    let mut rig = gpummu_rig("pv-big-copy-fault");
    let (mut tables, mut hooks) = paging_process(&rig);
    let source = big_copy(&rig, &mut tables);
    let length = BIG_PAGES * PAGE;
    let run = |rig: &mut Rig, hooks: &mut Hooks| {
        let completion = rig.submit_with(
            &packet_bytes(transfer_virtual(length, VA_BIG, VA_VRAM_BIG)),
            hooks,
        );
        let Some((0, Stop::Fault(Fault::Page(fault)))) = completion.stop else {
            panic!("{completion:?}");
        };
        (fault, completion.bytes_transferred)
    };
    let copied_up_to = |rig: &Rig, end: u64| {
        let vram = rig.vram_read(VRAM_BIG, usize::try_from(length).unwrap());
        let end = usize::try_from(end).unwrap();
        assert!(vram[..end] == source[..end], "bytes before the fault");
        assert!(
            vram[end..].iter().all(|&b| b == 0),
            "bytes from the fault on"
        );
    };

    // The source's page 130 unmapped: 130 pages copied, a fault there.
    tables.set(VA_BIG + 130 * PAGE, 0, 0).unwrap();
    store(&rig, &mut tables);
    flush(&hooks);
    let (fault, bytes) = run(&mut rig, &mut hooks);
    assert_eq!(fault.address, VA_BIG + 130 * PAGE);
    assert_eq!(fault.kind.wire(), WDDM_GPU_MMU_FAULT_NOT_PRESENT);
    copied_up_to(&rig, 130 * PAGE);
    assert_eq!(
        bytes,
        130 * PAGE,
        "bytes_transferred counts what was copied"
    );

    // The destination's page 70 read-only too: its fault comes first in copy order.
    rig.vram_write(VRAM_BIG, &vec![0; usize::try_from(length).unwrap()]);
    tables
        .set(
            VA_VRAM_BIG + 70 * PAGE,
            0,
            pte(VRAM_SEGMENT, VRAM_BIG + 70 * PAGE, WDDM_GPU_PTE_READ_ONLY),
        )
        .unwrap();
    store(&rig, &mut tables);
    flush(&hooks);
    let (fault, bytes) = run(&mut rig, &mut hooks);
    assert_eq!(fault.address, VA_VRAM_BIG + 70 * PAGE);
    assert_eq!(fault.kind.wire(), WDDM_GPU_MMU_FAULT_READ_ONLY);
    copied_up_to(&rig, 70 * PAGE);
    assert_eq!(bytes, 70 * PAGE, "bytes_transferred counts what was copied");
}

/// A VIRTUAL_FILL that runs off the end of its mapping fills the pages before the fault, and
/// the answer counts them after the whole packets before it.
#[test]
fn a_fill_that_faults_part_way_fills_and_counts_the_bytes_before() {
    let mut rig = gpummu_rig("pv-fill-part");
    let (_tables, mut hooks) = paging_process(&rig);
    rig.vram_write(0x20_0000, &vec![0; 8 * PAGE_USIZE]);
    // 8 pages are mapped at VA_VRAM: 100 bytes before their end, 300 past it.
    let start = VA_VRAM + 8 * PAGE - 100;
    let mut bytes = packet_bytes(fill_virtual(0x1111_1111, 64, VA_VRAM));
    bytes.extend(packet_bytes(fill_virtual(0x2222_2222, 400, start)));
    let completion = rig.submit_with(&bytes, &mut hooks);
    let Some((_, Stop::Fault(Fault::Page(fault)))) = completion.stop else {
        panic!("{completion:?}");
    };
    assert_eq!(fault.address, VA_VRAM + 8 * PAGE);
    assert_eq!(completion.packets_completed, 1);
    assert_eq!(completion.bytes_transferred, 64 + 100);
    assert_eq!(
        rig.vram_read(0x20_0000 + 8 * PAGE - 100, 100),
        vec![0x22; 100]
    );
}

/// COPY_PAGE_TABLE_ENTRIES copies range after range: a fault in the second range leaves the
/// first copied and the second's entries before the faulting page, and counts both.
#[test]
fn copy_page_table_entries_that_faults_part_way_counts_the_entries_before() {
    let mut rig = gpummu_rig("pv-copy-entries-part");
    let (mut tables, mut hooks) = paging_process(&rig);
    // The destination table is mapped, the page after it is not.
    let (source_table, destination_table) = map_two_leaf_tables(&rig, &mut tables);
    let entries: Vec<u64> = (0..16).map(|i| pte(0, DATA + i * PAGE, 0)).collect();
    rig.vram_write(source_table, entries.as_bytes());
    rig.vram_write(destination_table, &[0; PAGE_USIZE]);
    let ranges = [
        WddmGpuCopyRange {
            entry_count: 4,
            reserved: 0,
            source_table: 0xc000_0000,
            destination_table: 0xc000_1000,
            source_start: 0,
            destination_start: 0,
        },
        // Slots 510 and 511 are in the table, 512 and on past its page: unmapped.
        WddmGpuCopyRange {
            entry_count: 6,
            reserved: 0,
            source_table: 0xc000_0000,
            destination_table: 0xc000_1000,
            source_start: 4,
            destination_start: 510,
        },
    ];
    rig.ram_write(DATA + 0x10_0000, ranges.as_bytes());
    let completion = rig.submit_with(
        &packet_bytes(copy_page_table_entries(2, DATA + 0x10_0000)),
        &mut hooks,
    );
    let Some((0, Stop::Fault(Fault::Page(fault)))) = completion.stop else {
        panic!("{completion:?}");
    };
    assert_eq!(fault.address, 0xc000_2000);
    assert_eq!(completion.packets_completed, 0);
    assert_eq!(completion.bytes_transferred, (4 + 2) * 8);
    assert_eq!(
        rig.vram_read(destination_table, 32),
        entries[..4].as_bytes()
    );
    assert_eq!(
        rig.vram_read(destination_table + 510 * 8, 16),
        entries[4..6].as_bytes()
    );
}
