//! UPDATE_PAGE_TABLE and FLUSH_TLB on the paging engine: entries land where the level's tables
//! live, Repeat fills, every refusal names its rule, and a flush reaches the hooks.

use wddm_gpu_abi::build::gpuva::{
    flush_tlb, pte, update_page_table, update_page_table_repeat, TableAt,
};
use wddm_gpu_abi::packet::{WddmGpuPacketUpdatePageTable, WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES};
use zerocopy::IntoBytes;

use super::gpummu_rig;
use super::hooks::Hooks;
use crate::engine::Fault;
use crate::mmu::walk::TableAddress;
use crate::testkit::engine_rig::{Rig, DATA, PAGE, VRAM_SIZE};
use crate::testkit::packets::{packet_bytes, VRAM_SEGMENT};

const RAM_TABLE: TableAt = TableAt {
    segment: 0,
    address: 0x60_0000,
};
const VRAM_TABLE: TableAt = TableAt {
    segment: VRAM_SEGMENT,
    address: 0x1_0000,
};
/// Entry arrays in RAM.
const ARRAY: u64 = DATA + 0x10_0000;

fn entries(count: u64) -> Vec<u64> {
    (0..count).map(|i| pte(0, DATA + i * PAGE, 0)).collect()
}

#[test]
fn entries_land_in_ram_and_vram_tables_from_their_start_index() {
    let mut rig = gpummu_rig("pt-update");
    let written = entries(5);
    rig.ram_write(ARRAY, written.as_bytes());
    rig.ok(&packet_bytes(update_page_table(1, RAM_TABLE, 7, 5, ARRAY)));
    rig.ok(&packet_bytes(update_page_table(
        0, VRAM_TABLE, 510, 2, ARRAY,
    )));
    assert_eq!(
        rig.ram_read(RAM_TABLE.address + 7 * 8, 40),
        written.as_bytes()
    );
    assert_eq!(rig.ram_read(RAM_TABLE.address + 6 * 8, 8), [0; 8]);
    assert_eq!(
        rig.vram_read(VRAM_TABLE.address + 510 * 8, 16),
        written[..2].as_bytes()
    );
}

#[test]
fn repeat_writes_one_entry_to_every_slot() {
    let mut rig = gpummu_rig("pt-repeat");
    let entry = pte(0, DATA, 0);
    let completion = rig.ok(&packet_bytes(update_page_table_repeat(
        0, VRAM_TABLE, 0, 512, entry,
    )));
    assert_eq!(completion.bytes_transferred, 4096);
    let table = rig.vram_read(VRAM_TABLE.address, 4096);
    assert!(table.chunks(8).all(|slot| slot == entry.to_le_bytes()));
}

#[track_caller]
fn refused(rig: &mut Rig, packet: WddmGpuPacketUpdatePageTable, fault: Fault) {
    let completion = rig.submit(&packet_bytes(packet));
    assert_eq!(completion.stop, Some((0, fault.into())), "{packet:?}");
}

#[test]
fn every_broken_rule_is_refused_by_name() {
    let mut rig = gpummu_rig("pt-refusals");
    rig.ram_write(ARRAY, entries(512).as_bytes());
    let good = update_page_table(1, RAM_TABLE, 0, 1, ARRAY);
    let cases = [
        (
            WddmGpuPacketUpdatePageTable {
                flags: 1 << 7,
                ..good
            },
            Fault::ReservedField("update_page_table.flags"),
        ),
        (
            WddmGpuPacketUpdatePageTable {
                reserved: 1,
                ..good
            },
            Fault::ReservedField("update_page_table.reserved"),
        ),
        (
            WddmGpuPacketUpdatePageTable { entry: 1, ..good },
            Fault::ReservedField("update_page_table: entry with Repeat, entries_address without"),
        ),
        (
            WddmGpuPacketUpdatePageTable {
                page_table_level: 3,
                ..good
            },
            Fault::BadCommand("update_page_table: page_table_level past the geometry's levels"),
        ),
        (
            update_page_table(1, RAM_TABLE, 500, 13, ARRAY),
            Fault::BadCommand(
                "update_page_table: start_index + entry_count past the table's entries",
            ),
        ),
        (
            WddmGpuPacketUpdatePageTable {
                flags: WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES,
                ..update_page_table(0, VRAM_TABLE, 30, 3, ARRAY)
            },
            Fault::BadCommand(
                "update_page_table: start_index + entry_count past the table's entries",
            ),
        ),
        (
            WddmGpuPacketUpdatePageTable {
                flags: WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES,
                ..good
            },
            Fault::BadCommand("update_page_table: Use64KBPages is for leaf tables"),
        ),
        (
            update_page_table(0, RAM_TABLE, 0, 1, ARRAY),
            Fault::WrongSegmentKind(
                "update_page_table: the level's tables live in another segment",
            ),
        ),
        (
            update_page_table(
                1,
                TableAt {
                    segment: 0,
                    address: RAM_TABLE.address + 4,
                },
                0,
                1,
                ARRAY,
            ),
            Fault::BadCommand("update_page_table: table_address is not 8-byte aligned"),
        ),
        (
            update_page_table(1, RAM_TABLE, 0, 1, 1 << 40),
            Fault::FrameNotInRam { address: 1 << 40 },
        ),
        (
            update_page_table(
                0,
                TableAt {
                    segment: VRAM_SEGMENT,
                    address: VRAM_SIZE,
                },
                0,
                1,
                ARRAY,
            ),
            Fault::SegmentRange {
                segment: VRAM_SEGMENT,
                address: VRAM_SIZE,
                length: 8,
            },
        ),
    ];
    for (packet, fault) in cases {
        refused(&mut rig, packet, fault);
    }
    // Nothing was written by any refused packet.
    assert_eq!(rig.ram_read(RAM_TABLE.address, 8), [0; 8]);
}

#[test]
fn page_table_packets_need_a_gpummu_layout() {
    let mut rig = Rig::new("pt-no-gpummu");
    let unsupported = Fault::Unsupported("page-table packets need a layout with [gpummu]");
    refused(
        &mut rig,
        update_page_table(0, RAM_TABLE, 0, 1, ARRAY),
        unsupported,
    );
    let completion = rig.submit(&packet_bytes(flush_tlb(RAM_TABLE, None)));
    assert_eq!(completion.stop, Some((0, unsupported.into())));
}

#[test]
fn a_flush_reaches_the_hooks_with_its_root_and_range() {
    let mut rig = gpummu_rig("pt-flush");
    let mut hooks = Hooks::default();
    let mut bytes = packet_bytes(flush_tlb(RAM_TABLE, None));
    bytes.extend(packet_bytes(flush_tlb(VRAM_TABLE, Some(0x1000..0x3000))));
    let completion = rig.submit_with(&bytes, &mut hooks);
    assert_eq!(completion.stop, None);
    assert_eq!(
        hooks.flushes,
        vec![
            (
                TableAddress {
                    segment: 0,
                    address: RAM_TABLE.address
                },
                None
            ),
            (
                TableAddress {
                    segment: VRAM_SEGMENT,
                    address: VRAM_TABLE.address
                },
                Some(0x1000..0x3000)
            ),
        ]
    );
    let mut backwards = flush_tlb(RAM_TABLE, None);
    (
        backwards.start_virtual_address,
        backwards.end_virtual_address,
    ) = (0x3000, 0x1000);
    let backwards = rig.submit(&packet_bytes(backwards));
    assert_eq!(
        backwards.stop,
        Some((
            0,
            Fault::BadCommand("flush_tlb: start_virtual_address must be below end_virtual_address")
                .into()
        ))
    );
}
