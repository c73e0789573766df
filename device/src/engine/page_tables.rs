//! The WDDM 2.x page-table packets of the paging node: UPDATE_PAGE_TABLE writes entries into a
//! table at a physical address (GPU_PHYSICAL updates), FLUSH_TLB drops cached translations. The
//! entries are data to the paging engine; the MMU checks them when it walks.

use std::ops::Range;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::gpummu_rules::{MmuGeometry, TableOwner};
use wddm_gpu_abi::gpuva::{WDDM_GPU_64KB_PAGE_INDEX_BITS, WDDM_GPU_PTE_SIZE};
use wddm_gpu_abi::packet::{
    WddmGpuPacketFlushTlb, WddmGpuPacketUpdatePageTable, WDDM_GPU_UPDATE_FLAGS_KNOWN,
    WDDM_GPU_UPDATE_FLAG_REPEAT, WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES,
};

use super::access::copy;
use super::place::{ram, segment_offset};
use super::{DeviceMemory, Engine, EngineHooks, Fault};
use crate::memory::capture::ReadKind;
use crate::mmu::walk::TableAddress;

/// The geometry, or the packet is refused: the layout has no GpuMmu.
fn geometry<'a, M>(mem: &'a DeviceMemory<'_, M>) -> Result<&'a MmuGeometry, Fault> {
    mem.layout.gpummu.as_ref().ok_or(Fault::Unsupported(
        "page-table packets need a layout with [gpummu]",
    ))
}

impl Engine {
    /// UPDATE_PAGE_TABLE: the slots must lie inside one table of the level, in a segment the
    /// level's tables live in; returns the bytes written.
    pub(super) fn update_page_table<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketUpdatePageTable,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<u64, Fault> {
        let geometry = geometry(mem)?;
        if packet.flags & !WDDM_GPU_UPDATE_FLAGS_KNOWN != 0 {
            return Err(Fault::ReservedField("update_page_table.flags"));
        }
        if packet.reserved != 0 {
            return Err(Fault::ReservedField("update_page_table.reserved"));
        }
        let repeat = packet.flags & WDDM_GPU_UPDATE_FLAG_REPEAT != 0;
        if (repeat && packet.entries_address != 0) || (!repeat && packet.entry != 0) {
            return Err(Fault::ReservedField(
                "update_page_table: entry with Repeat, entries_address without",
            ));
        }
        let level = geometry
            .level(packet.page_table_level)
            .ok_or(Fault::BadCommand(
                "update_page_table: page_table_level past the geometry's levels",
            ))?;
        let leaf_64k = packet.flags & WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES != 0;
        if leaf_64k && packet.page_table_level != 0 {
            return Err(Fault::BadCommand(
                "update_page_table: Use64KBPages is for leaf tables",
            ));
        }
        let entries = if leaf_64k {
            level.entries() >> WDDM_GPU_64KB_PAGE_INDEX_BITS
        } else {
            level.entries()
        };
        let (start, count) = (u64::from(packet.start_index), u64::from(packet.entry_count));
        if start.saturating_add(count) > entries {
            return Err(Fault::BadCommand(
                "update_page_table: start_index + entry_count past the table's entries",
            ));
        }
        let segment = packet.table_segment_id;
        if segment != level.table_segment(TableOwner::Process)
            && segment != level.table_segment(TableOwner::PagingProcess)
        {
            return Err(Fault::WrongSegmentKind(
                "update_page_table: the level's tables live in another segment",
            ));
        }
        let entry_size = u64::from(WDDM_GPU_PTE_SIZE);
        if !packet.table_address.is_multiple_of(entry_size) {
            return Err(Fault::BadCommand(
                "update_page_table: table_address is not 8-byte aligned",
            ));
        }
        // `start + count <= 4096` (12 index bits at most), so neither product overflows.
        let offset = packet
            .table_address
            .checked_add(start * entry_size)
            .ok_or(Fault::LengthOverflow(packet.table_address))?;
        let length = count * entry_size;
        let table = if segment == 0 {
            ram(mem, offset, length)?
        } else {
            segment_offset(mem, segment, offset, length)?
        };
        if repeat {
            self.repeated
                .write(table, &packet.entry.to_le_bytes(), mem)?;
        } else {
            let source = ram(mem, packet.entries_address, length)?;
            // The entries steer the MMU: kept by a recording as metadata.
            copy(
                source,
                table,
                length,
                ReadKind::Metadata,
                mem,
                &mut self.bounce,
            )?;
        }
        Ok(length)
    }

    /// FLUSH_TLB: every address space under the root drops the translations of the range.
    pub(super) fn flush_tlb(
        &mut self,
        packet: &WddmGpuPacketFlushTlb,
        layout_has_gpummu: bool,
        hooks: &mut impl EngineHooks,
    ) -> Result<(), Fault> {
        if !layout_has_gpummu {
            return Err(Fault::Unsupported(
                "page-table packets need a layout with [gpummu]",
            ));
        }
        if packet.reserved != 0 {
            return Err(Fault::ReservedField("flush_tlb.reserved"));
        }
        let (start, end) = (packet.start_virtual_address, packet.end_virtual_address);
        let range: Option<Range<u64>> = match (start, end) {
            (0, 0) => None,
            (start, end) if start < end => Some(start..end),
            _ => {
                return Err(Fault::BadCommand(
                    "flush_tlb: start_virtual_address must be below end_virtual_address",
                ))
            }
        };
        hooks.flush_tlb(
            TableAddress {
                segment: packet.root_segment_id,
                address: packet.root_address,
            },
            range,
        );
        Ok(())
    }
}
