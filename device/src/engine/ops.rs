//! One function per packet kind.

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::decode::{DecodeError, Packet};
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::segment_flags::SegmentFlags;
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

use super::access::{copy, copy_guest_vram, fitting, run_at, GuestPages, Location, Side, Toward};
use super::{DeviceMemory, Engine, EngineHooks, Fault, Stop, Stopped, CHUNK};
use crate::layout::{Resolved, SegmentKind};
use crate::memory::capture::ReadKind;
use crate::memory::frames::{FrameError, FrameListError, FrameRun, PageArray};
use crate::memory::gart::AperturePages;
use crate::memory::guest_ram::RamError;

/// Bytes of pattern prepared for FILL (a multiple of 4, so every chunk starts in phase).
const FILL_BUFFER: usize = 64 << 10;

impl Engine {
    /// Executes one decoded packet (or fails with why it did not decode); returns the bytes it
    /// moved, or why it stopped with the bytes it had moved.
    pub(super) fn execute_packet<M: GuestMemoryBackend>(
        &mut self,
        packet: Result<Packet, DecodeError>,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stopped> {
        // Only the packets that move data run long enough to be interrupted.
        let moving_nothing = match packet.map_err(Fault::from)? {
            Packet::Transfer(p) => return self.transfer(&p, mem, hooks),
            Packet::Fill(p) => return self.fill(&p, mem, hooks),
            Packet::DiscardContent(p) | Packet::ReadPhysical(p) | Packet::WritePhysical(p) => {
                self.segment_access(&p, mem)
            }
            Packet::MapAperture(p) => self.map_aperture(&p, mem),
            Packet::MapAperture2(p) => self.map_aperture2(&p, mem),
            Packet::UnmapAperture(p) => self.unmap_aperture(&p, mem),
            Packet::Fence(p) if p.reserved != 0 => Err(Fault::ReservedField("fence.reserved")),
            Packet::Fence(p) => {
                hooks.fence(p.fence_id);
                Ok(())
            }
            Packet::UpdatePageTable(p) => return Ok(self.update_page_table(&p, mem)?),
            Packet::NotifyResidency(p) => self.notify_residency(&p, mem),
            virtual_address @ (Packet::VirtualTransfer(_)
            | Packet::VirtualFill(_)
            | Packet::CopyPageTableEntries(_)
            | Packet::SignalMonitoredFence(_)
            | Packet::UpdateContextAllocation(_)) => {
                return self.paging_virtual(&virtual_address, mem, hooks)
            }
            Packet::FlushTlb(p) => self.flush_tlb(&p, mem.layout.gpummu.is_some(), hooks),
        };
        moving_nothing?;
        Ok(0)
    }

    fn transfer<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketTransfer,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stopped> {
        let length = packet.length;
        let source = self.resolve_endpoint(0, &packet.source, length, mem)?;
        let destination = self.resolve_endpoint(1, &packet.destination, length, mem)?;
        // An upward move inside VRAM must run back to front, chunk by chunk, or each chunk
        // would overwrite source bytes a later chunk still has to read.
        if let (Side::Vram(from), Side::Vram(to)) = (source, destination) {
            if from.start() < to.start() && to.start() < from.end() {
                let (mut from, mut to) = (from, to);
                // Back to front: the bytes moved before a stop are the last ones.
                let mut moved = 0u64;
                while !from.is_empty() {
                    if let Some(stop) = hooks.interruption() {
                        return Err(Stop::from(stop).after(moved));
                    }
                    let (from_rest, from_last) = from.split_last(CHUNK);
                    let (to_rest, to_last) = to.split_last(CHUNK);
                    copy(
                        Location::Vram(from_last),
                        Location::Vram(to_last),
                        from_last.len(),
                        ReadKind::Data,
                        mem,
                        &mut self.bounce,
                    )
                    .map_err(|fault| Stop::from(fault).after(moved))?;
                    moved += from_last.len();
                    (from, to) = (from_rest, to_rest);
                }
                return Ok(length);
            }
        }
        let between_guest_and_vram = match (source, destination) {
            (Side::Guest(pages), Side::Vram(vram)) => Some((pages, vram, Toward::Vram)),
            (Side::Vram(vram), Side::Guest(pages)) => Some((pages, vram, Toward::Guest)),
            _ => None,
        };
        if let Some((pages, vram, toward)) = between_guest_and_vram {
            let mut progress = Progress::new(length);
            while !progress.is_finished() {
                progress.interruption_point(hooks)?;
                let step = progress.chunk_left();
                let in_vram = vram.sub(progress.done(), step);
                copy_guest_vram(
                    pages,
                    progress.done(),
                    in_vram,
                    toward,
                    &self.frame_lists,
                    &self.gart,
                    mem,
                )
                .map_err(|fault| progress.stopped(fault))?;
                progress.advance(step);
            }
            return Ok(length);
        }
        let (mut src, mut dst) = (Location::EMPTY, Location::EMPTY);
        let mut progress = Progress::new(length);
        while !progress.is_finished() {
            progress.interruption_point(hooks)?;
            let (done, remaining) = (progress.done(), progress.remaining());
            if src.len() == 0 {
                src = run_at(source, done, remaining, &self.frame_lists, &self.gart)
                    .map_err(|fault| progress.stopped(fault))?;
            }
            if dst.len() == 0 {
                dst = run_at(destination, done, remaining, &self.frame_lists, &self.gart)
                    .map_err(|fault| progress.stopped(fault))?;
            }
            let step = src.len().min(dst.len()).min(progress.chunk_left());
            copy(src, dst, step, ReadKind::Data, mem, &mut self.bounce)
                .map_err(|fault| progress.stopped(fault))?;
            src.advance(step);
            dst.advance(step);
            progress.advance(step);
        }
        Ok(length)
    }

    fn fill<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketFill,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stopped> {
        if packet.reserved != 0 {
            return Err(Fault::ReservedField("fill.reserved").into());
        }
        let destination = &packet.destination;
        if destination.segment_id == 0 {
            return Err(
                Fault::WrongSegmentKind("FILL writes a memory segment, not guest pages").into(),
            );
        }
        // The kind is checked first: an aperture is the wrong target whether or not it is mapped.
        let target = mem
            .layout
            .segment(destination.segment_id)
            .ok_or(Fault::BadSegment(destination.segment_id))?;
        if matches!(target.kind, SegmentKind::Aperture) {
            return Err(
                Fault::WrongSegmentKind("FILL writes a memory segment, not an aperture").into(),
            );
        }
        let length = packet.length;
        let Side::Vram(range) = self.resolve_endpoint(0, destination, length, mem)? else {
            return Err(
                Fault::WrongSegmentKind("FILL writes a memory segment, not an aperture").into(),
            );
        };
        let pattern = packet.pattern.to_le_bytes();
        if self.fill.len() != FILL_BUFFER || self.fill[..4] != pattern {
            self.fill.clear();
            self.fill
                .extend(pattern.iter().copied().cycle().take(FILL_BUFFER));
        }
        let mut progress = Progress::new(range.len());
        while !progress.is_finished() {
            progress.interruption_point(hooks)?;
            let step = range.sub(progress.done(), FILL_BUFFER as u64);
            let slice = mem.vram.range_slice(step).ok_or_else(|| {
                progress.stopped(Fault::SegmentRange {
                    segment: destination.segment_id,
                    address: destination.address,
                    length,
                })
            })?;
            slice.copy_from(&self.fill[..fitting(step.len(), FILL_BUFFER)]);
            progress.advance(step.len());
        }
        Ok(length)
    }

    /// DISCARD_CONTENT, READ_PHYSICAL, WRITE_PHYSICAL: the location is checked; no data moves.
    fn segment_access<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketSegmentAccess,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let discard = packet.header.opcode == WDDM_GPU_OP_DISCARD_CONTENT;
        let length = if discard {
            if packet.flags_or_size & !WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE != 0 {
                return Err(Fault::ReservedField("discard flags"));
            }
            1
        } else {
            if !(1..=8).contains(&packet.flags_or_size) {
                return Err(Fault::ReservedField(
                    "physical access size must be 1 to 8 bytes",
                ));
            }
            u64::from(packet.flags_or_size)
        };
        match mem
            .layout
            .resolve(packet.segment_id, packet.address, length)?
        {
            Resolved::Aperture(_) if discard => Err(Fault::WrongSegmentKind(
                "DISCARD_CONTENT names a memory-segment location",
            )),
            Resolved::Aperture(range) => Ok(self.gart.check_mapped(packet.segment_id, range)?),
            Resolved::Vram(_) => Ok(()),
        }
    }

    fn check_aperture<M: GuestMemoryBackend>(
        &self,
        segment: u32,
        flags: u32,
        first_page: u64,
        page_count: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<AperturePages, Fault> {
        let target = mem
            .layout
            .segment(segment)
            .ok_or(Fault::BadSegment(segment))?;
        if !matches!(target.kind, SegmentKind::Aperture) {
            return Err(Fault::WrongSegmentKind(
                "aperture mapping on a memory segment",
            ));
        }
        if flags & !WDDM_GPU_MAP_FLAG_CACHE_COHERENT != 0 {
            return Err(Fault::ReservedField("map flags"));
        }
        if flags & WDDM_GPU_MAP_FLAG_CACHE_COHERENT != 0
            && !target.flags.contains(SegmentFlags::CACHE_COHERENT)
        {
            return Err(Fault::WrongSegmentKind(
                "CacheCoherent mapping into a non-coherent aperture",
            ));
        }
        Ok(self.gart.check_range(segment, first_page, page_count)?)
    }

    fn map_aperture<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketMapAperture,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let pages = self.check_aperture(
            packet.segment_id,
            packet.flags,
            packet.first_page,
            packet.page_count,
            mem,
        )?;
        self.map_page_array(
            pages,
            packet.frame_list_address,
            packet.frame_count,
            packet.frame_offset,
            packet.page_count,
            mem,
        )
    }

    /// Points aperture `pages` at the entries from `frame_offset` on of the `frame_count`-entry
    /// PFN array at `list_address` (MAP_APERTURE, and MAP_APERTURE2 with a page-array ADL). The
    /// entries go from the guest's array straight into the table, every one checked before any
    /// entry changes.
    fn map_page_array<M: GuestMemoryBackend>(
        &mut self,
        pages: AperturePages,
        list_address: u64,
        frame_count: u32,
        frame_offset: u32,
        page_count: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        check_entry_count(list_address, frame_count)?;
        let end = u64::from(frame_offset)
            .checked_add(page_count)
            .ok_or(Fault::LengthOverflow(page_count))?;
        if end > u64::from(frame_count) {
            return Err(Fault::BadFrameList {
                address: list_address,
                reason: "too few frames for MdlOffset + NumberOfPages",
            });
        }
        let refused = |error| frame_list_fault(list_address, error);
        let mut array =
            PageArray::new(&mem.ram, list_address, u64::from(frame_offset)).map_err(refused)?;
        self.gart.map(pages, &mut array).map_err(refused)
    }

    fn map_aperture2<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketMapAperture2,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        if packet.reserved != 0 || packet.adl_flags & !WDDM_GPU_ADL_FLAG_CONTIGUOUS != 0 {
            return Err(Fault::ReservedField("ADL flags or reserved"));
        }
        let pages = self.check_aperture(
            packet.segment_id,
            packet.flags,
            packet.first_page,
            packet.page_count,
            mem,
        )?;
        if packet.adl_flags & WDDM_GPU_ADL_FLAG_CONTIGUOUS == 0 {
            return self.map_page_array(
                pages,
                packet.adl_base,
                packet.adl_page_count,
                packet.adl_offset,
                packet.page_count,
                mem,
            );
        }
        let short = Fault::BadFrameList {
            address: packet.adl_base,
            reason: "too few ADL pages for AdlOffset + NumberOfPages",
        };
        let end = u64::from(packet.adl_offset)
            .checked_add(packet.page_count)
            .ok_or(short)?;
        if end > u64::from(packet.adl_page_count) {
            return Err(short);
        }
        let first_frame = packet
            .adl_base
            .checked_add(u64::from(packet.adl_offset))
            .ok_or(Fault::LengthOverflow(packet.adl_base))?;
        let run = FrameRun::check(&mem.ram, first_frame, packet.page_count).map_err(frame_fault)?;
        self.gart.map_contiguous(pages, run)?;
        Ok(())
    }

    fn unmap_aperture<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketUnmapAperture,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        if packet.reserved != 0 {
            return Err(Fault::ReservedField("unmap.reserved"));
        }
        let pages = self.check_aperture(
            packet.segment_id,
            0,
            packet.first_page,
            packet.page_count,
            mem,
        )?;
        if !packet.dummy_page.is_multiple_of(WDDM_GPU_PAGE_SIZE) {
            return Err(Fault::BadFrameList {
                address: packet.dummy_page,
                reason: "the dummy page is not 4 KiB aligned",
            });
        }
        let dummy = FrameRun::check(&mem.ram, packet.dummy_page >> WDDM_GPU_PAGE_SHIFT, 1)
            .map_err(frame_fault)?;
        self.gart.unmap(pages, dummy);
        Ok(())
    }

    /// Resolves and checks one endpoint of `length` bytes; frame lists are copied into
    /// `frame_lists[slot]`.
    fn resolve_endpoint<M: GuestMemoryBackend>(
        &mut self,
        slot: usize,
        endpoint: &WddmGpuEndpoint,
        length: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<Side, Fault> {
        if endpoint.reserved != 0 {
            return Err(Fault::ReservedField("endpoint.reserved"));
        }
        if endpoint.segment_id == 0 {
            self.load_frame_list(slot, endpoint, length, mem)?;
            return Ok(Side::Guest(GuestPages::Frames { list: slot }));
        }
        if endpoint.frame_count != 0 || endpoint.byte_offset != 0 {
            return Err(Fault::ReservedField("endpoint.frame_count/byte_offset"));
        }
        let segment = endpoint.segment_id;
        // `resolve` refuses a VRAM offset whose end overflows (LENGTH_OVERFLOW).
        match mem.layout.resolve(segment, endpoint.address, length)? {
            Resolved::Vram(range) => mem
                .vram
                .range(range.start(), range.len())
                .map(Side::Vram)
                .ok_or(Fault::SegmentRange {
                    segment,
                    address: endpoint.address,
                    length,
                }),
            Resolved::Aperture(range) => {
                self.gart.check_mapped(segment, range)?;
                Ok(Side::Guest(GuestPages::Aperture { segment, range }))
            }
        }
    }

    /// Copies the frames a transfer touches into device memory and checks them.
    fn load_frame_list<M: GuestMemoryBackend>(
        &mut self,
        slot: usize,
        endpoint: &WddmGpuEndpoint,
        length: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let address = endpoint.address;
        let count = endpoint.frame_count;
        check_entry_count(address, count)?;
        let start = u64::from(endpoint.byte_offset);
        let end = start
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?;
        if end > page_bytes(count) {
            return Err(Fault::BadFrameList {
                address,
                reason: "too few frames for offset + length",
            });
        }
        if length == 0 {
            self.frame_lists[slot].clear();
            return Ok(());
        }
        // Only the frames the bytes touch are read: from the one holding `start` on.
        let in_first = start & (WDDM_GPU_PAGE_SIZE - 1);
        let pages = in_first
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?
            .div_ceil(WDDM_GPU_PAGE_SIZE);
        self.frame_lists[slot]
            .load(
                &mem.ram,
                address,
                start >> WDDM_GPU_PAGE_SHIFT,
                pages,
                in_first,
            )
            .map_err(|error| frame_list_fault(address, error))
    }
}

/// Bytes of `count` pages (a 32-bit count always fits).
fn page_bytes(count: u32) -> u64 {
    u64::from(count) << WDDM_GPU_PAGE_SHIFT
}

/// Refuses a frame list at `address` of more than the device's maximum of entries.
fn check_entry_count(address: u64, count: u32) -> Result<(), Fault> {
    if count > WDDM_GPU_MAX_FRAME_LIST_ENTRIES {
        return Err(Fault::BadFrameList {
            address,
            reason: "more entries than the device maximum",
        });
    }
    Ok(())
}

/// The fault for a frame list at `address` that was refused.
fn frame_list_fault(address: u64, error: FrameListError) -> Fault {
    match error {
        FrameListError::ArrayOverflow { first } => Fault::LengthOverflow(first),
        FrameListError::ArrayNotRam => Fault::BadFrameList {
            address,
            reason: "not inside guest RAM",
        },
        // The frame number itself is reported, as the device always has.
        FrameListError::FrameOverflow { frame } => Fault::FrameNotInRam { address: frame },
        FrameListError::Frame(error) => ram_fault(error),
    }
}

/// The fault for a refused run of frames.
fn frame_fault(error: FrameError) -> Fault {
    match error {
        // The frame number itself is reported, as the device always has.
        FrameError::FrameOverflow { frame } => Fault::FrameNotInRam { address: frame },
        FrameError::LengthOverflow { pages } => Fault::LengthOverflow(pages),
        FrameError::Ram(error) => ram_fault(error),
    }
}

/// The fault for frame bytes that are not guest RAM.
fn ram_fault(error: RamError) -> Fault {
    match error {
        RamError::InVram { address } => Fault::FrameInVram { address },
        RamError::NotRam { address } | RamError::Overflow { address, .. } => {
            Fault::FrameNotInRam { address }
        }
    }
}

// FILL steps of FILL_BUFFER bytes meet every chunk boundary.
const _: () = assert!(CHUNK.is_multiple_of(FILL_BUFFER as u64));

/// How far a packet of `length` bytes has got: `done <= length` always, so the arithmetic
/// below needs no checks.
#[derive(Clone, Copy, Debug)]
struct Progress {
    done: u64,
    length: u64,
}

impl Progress {
    fn new(length: u64) -> Self {
        Self { done: 0, length }
    }

    fn done(self) -> u64 {
        self.done
    }

    fn remaining(self) -> u64 {
        self.length - self.done
    }

    fn is_finished(self) -> bool {
        self.done == self.length
    }

    /// What is left of the current chunk: steps end at chunk boundaries so that
    /// [`Self::interruption_point`] sees each one.
    fn chunk_left(self) -> u64 {
        self.remaining().min(CHUNK - self.done % CHUNK)
    }

    fn advance(&mut self, step: u64) {
        self.done += step.min(self.remaining());
    }

    /// `stop`, reached with the bytes done so far moved.
    fn stopped(self, stop: impl Into<Stop>) -> Stopped {
        stop.into().after(self.done)
    }

    /// At a chunk boundary, asks whether to stop (preemption or reset).
    fn interruption_point(self, hooks: &impl EngineHooks) -> Result<(), Stopped> {
        if !self.done.is_multiple_of(CHUNK) {
            return Ok(());
        }
        match hooks.interruption() {
            Some(interruption) => Err(self.stopped(interruption)),
            None => Ok(()),
        }
    }
}
