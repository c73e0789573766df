//! The WDDM 2.x paging packets that address memory by GPU virtual address, in the address space
//! of the paging node's context (the system paging process): VIRTUAL_TRANSFER, VIRTUAL_FILL,
//! COPY_PAGE_TABLE_ENTRIES and SIGNAL_MONITORED_FENCE move bytes through the MMU with the
//! virtual node's copy engine; NOTIFY_RESIDENCY and UPDATE_CONTEXT_ALLOCATION are checked and
//! counted.

use std::mem::size_of;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::decode::Packet;
use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_SIZE;
use wddm_gpu_abi::packet::{
    WddmGpuCopyRange, WddmGpuPacketCopyPageTableEntries, WddmGpuPacketNotifyResidency,
    WddmGpuPacketUpdateContextAllocation, WDDM_GPU_MAX_COPY_RANGES,
    WDDM_GPU_VIRTUAL_TRANSFER_DST_64KB, WDDM_GPU_VIRTUAL_TRANSFER_SRC_64KB,
};
use zerocopy::FromBytes;

use super::virtual_engine::{signal, VirtualHooks, VirtualMemory};
use super::{DeviceMemory, Engine, EngineHooks, Fault, Interruption, Stopped};
use crate::mmu::fault::Access;

/// `DXGK_MEMORY_TRANSFER_DIRECTION`'s largest value (LOCAL_TO_LOCAL).
const MAX_TRANSFER_DIRECTION: u32 = 2;

/// The paging engine's hooks as the copy engine sees them.
struct Through<'h, H>(&'h mut H);

impl<H: EngineHooks> VirtualHooks for Through<'_, H> {
    fn interruption(&self) -> Option<Interruption> {
        self.0.interruption()
    }

    fn monitored_fence(&mut self, address: u64, value: u64) {
        self.0.monitored_fence(address, value);
    }
}

impl Engine {
    /// Runs one of the paging node's virtual-address packets; returns the bytes it moved (on a
    /// stop, those it moved before it: a copy or fill that faults part way has written them).
    pub(super) fn paging_virtual<M: GuestMemoryBackend>(
        &mut self,
        packet: &Packet,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stopped> {
        let geometry = mem.layout.gpummu.as_ref().ok_or(Fault::Unsupported(
            "virtual-address packets need a layout with [gpummu]",
        ))?;
        let space = hooks.paging_space().ok_or(Fault::BadContext(
            "virtual-address packets need a context on the paging node",
        ))?;
        let memory = VirtualMemory {
            mem,
            geometry,
            space: &space,
        };
        let mut through = Through(hooks);
        match packet {
            Packet::VirtualTransfer(p) => {
                let known = WDDM_GPU_VIRTUAL_TRANSFER_SRC_64KB | WDDM_GPU_VIRTUAL_TRANSFER_DST_64KB;
                if p.flags & !known != 0 {
                    return Err(Fault::ReservedField("virtual_transfer.flags").into());
                }
                if p.transfer_direction > MAX_TRANSFER_DIRECTION {
                    return Err(Fault::BadCommand(
                        "virtual_transfer: transfer_direction is not a DXGK_MEMORY_TRANSFER_DIRECTION",
                    )
                    .into());
                }
                self.virtual_engine
                    .copy(p.length, p.source, p.destination, &memory, &mut through)
            }
            Packet::VirtualFill(p) => {
                if p.reserved != 0 {
                    return Err(Fault::ReservedField("virtual_fill.reserved").into());
                }
                self.virtual_engine
                    .fill(p.pattern, p.length, p.destination, &memory, &mut through)
            }
            Packet::SignalMonitoredFence(p) => {
                signal(p.address, p.value, &memory, &mut through)?;
                Ok(0)
            }
            Packet::CopyPageTableEntries(p) => self.copy_entries(p, &memory, &mut through),
            Packet::UpdateContextAllocation(p) => {
                context_allocation(p, &memory)?;
                Ok(0)
            }
            _ => Err(Fault::BadCommand("not a virtual-address packet").into()),
        }
    }

    /// COPY_PAGE_TABLE_ENTRIES: each range read from guest RAM, then copied entry array to
    /// entry array through the paging process's mappings of the tables, range after range. A
    /// stop leaves the ranges before it copied and the stopping range's entries before the
    /// fault; the bytes of both are counted.
    fn copy_entries<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketCopyPageTableEntries,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stopped> {
        if packet.reserved != 0 {
            return Err(Fault::ReservedField("copy_page_table_entries.reserved").into());
        }
        if packet.range_count > WDDM_GPU_MAX_COPY_RANGES {
            return Err(Fault::BadCommand(
                "copy_page_table_entries: range_count above the device maximum",
            )
            .into());
        }
        let mut copied = 0u64;
        for index in 0..u64::from(packet.range_count) {
            let (length, source, destination) = read_range(packet, index, memory)
                .map_err(|fault| Stopped::from(fault).after(copied))?;
            copied += self
                .virtual_engine
                .copy(length, source, destination, memory, hooks)
                .map_err(|stopped| stopped.after(copied))?;
        }
        Ok(copied)
    }

    /// NOTIFY_RESIDENCY: a resident allocation names a place inside a segment; an evicted one
    /// names none (`(0, 0)`, as the DDI says).
    pub(super) fn notify_residency<M: GuestMemoryBackend>(
        &self,
        packet: &WddmGpuPacketNotifyResidency,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        if mem.layout.gpummu.is_none() {
            return Err(Fault::Unsupported(
                "virtual-address packets need a layout with [gpummu]",
            ));
        }
        match packet.resident {
            0 if packet.segment_id == 0 && packet.segment_offset == 0 => Ok(()),
            0 => Err(Fault::BadCommand(
                "notify_residency: an eviction names no segment address",
            )),
            1 => {
                let segment = mem
                    .layout
                    .segment(packet.segment_id)
                    .ok_or(Fault::BadSegment(packet.segment_id))?;
                if packet.segment_offset >= segment.size {
                    return Err(Fault::SegmentRange {
                        segment: packet.segment_id,
                        address: packet.segment_offset,
                        length: 0,
                    });
                }
                Ok(())
            }
            _ => Err(Fault::BadCommand(
                "notify_residency: resident is not 0 or 1",
            )),
        }
    }
}

/// Range `index` of a COPY_PAGE_TABLE_ENTRIES packet, read from guest RAM: the bytes it copies,
/// from which VA, to which VA.
fn read_range<M: GuestMemoryBackend>(
    packet: &WddmGpuPacketCopyPageTableEntries,
    index: u64,
    memory: &VirtualMemory<'_, '_, M>,
) -> Result<(u64, u64, u64), Fault> {
    let range_size = size_of::<WddmGpuCopyRange>() as u64;
    let entry_size = u64::from(WDDM_GPU_PTE_SIZE);
    // At most 4096 ranges of 32 bytes: the offset cannot overflow before the check.
    let at = packet
        .ranges_address
        .checked_add(index * range_size)
        .ok_or(Fault::LengthOverflow(packet.ranges_address))?;
    let mut bytes = [0u8; size_of::<WddmGpuCopyRange>()];
    memory
        .mem
        .ram
        .read(at, &mut bytes)
        .map_err(|_| Fault::FrameNotInRam { address: at })?;
    let (range, _) = WddmGpuCopyRange::read_from_prefix(&bytes)
        .map_err(|_| Fault::FrameNotInRam { address: at })?;
    if range.reserved != 0 {
        return Err(Fault::ReservedField("copy_range.reserved"));
    }
    let length = u64::from(range.entry_count) * entry_size;
    let source = range
        .source_table
        .checked_add(u64::from(range.source_start) * entry_size)
        .ok_or(Fault::LengthOverflow(range.source_table))?;
    let destination = range
        .destination_table
        .checked_add(u64::from(range.destination_start) * entry_size)
        .ok_or(Fault::LengthOverflow(range.destination_table))?;
    Ok((length, source, destination))
}

/// UPDATE_CONTEXT_ALLOCATION: the context allocation must be mapped, writable, in the paging
/// process's address space.
fn context_allocation<M: GuestMemoryBackend>(
    packet: &WddmGpuPacketUpdateContextAllocation,
    memory: &VirtualMemory<'_, '_, M>,
) -> Result<(), Fault> {
    if packet.reserved != 0 {
        return Err(Fault::ReservedField("update_context_allocation.reserved"));
    }
    let start = packet.context_allocation;
    let end = start
        .checked_add(packet.context_allocation_size)
        .ok_or(Fault::LengthOverflow(packet.context_allocation_size))?;
    let mut at = start;
    while at < end {
        let run = memory.translate(at, end - at, Access::Write)?;
        // A run is never empty for a non-empty request.
        at += run.len.max(1);
    }
    Ok(())
}
