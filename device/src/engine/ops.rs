//! One function per packet kind.

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::decode::Packet;
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::segment_flags::SegmentFlags;
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};
use zerocopy::IntoBytes;

use super::access::{copy, run_at, Cursor, Location, Side};
use super::{DeviceMemory, Engine, EngineHooks, Fault, Stop, CHUNK};
use crate::layout::{Resolved, SegmentKind};
use crate::memory::guest_ram::RamError;

/// Bytes of pattern prepared for FILL (a multiple of 4, so every chunk starts in phase).
const FILL_BUFFER: usize = 64 << 10;

impl Engine {
    /// Executes one packet; returns the bytes it moved.
    pub(super) fn execute_packet<M: GuestMemoryBackend>(
        &mut self,
        packet: &[u8],
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stop> {
        // Only the packets that move data run long enough to be interrupted.
        let moving_nothing = match Packet::decode(packet).map_err(Fault::from)? {
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
        };
        moving_nothing?;
        Ok(0)
    }

    fn transfer<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketTransfer,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stop> {
        let length = packet.length;
        let source = self.resolve_endpoint(0, &packet.source, length, mem)?;
        let destination = self.resolve_endpoint(1, &packet.destination, length, mem)?;
        // An upward move inside VRAM must run back to front, chunk by chunk, or each chunk
        // would overwrite source bytes a later chunk still has to read.
        if let (Side::Vram { offset: from }, Side::Vram { offset: to }) = (source, destination) {
            if from < to && to < from + length {
                let mut left = length;
                while left > 0 {
                    if let Some(stop) = hooks.interruption() {
                        return Err(stop.into());
                    }
                    let step = left.min(CHUNK);
                    left -= step;
                    copy(
                        Location::Vram(from + left),
                        Location::Vram(to + left),
                        step,
                        mem,
                        &mut self.bounce,
                    )?;
                }
                return Ok(length);
            }
        }
        let (mut src, mut dst) = (Cursor::EMPTY, Cursor::EMPTY);
        let mut done = 0u64;
        while done < length {
            if done.is_multiple_of(CHUNK) {
                if let Some(stop) = hooks.interruption() {
                    return Err(stop.into());
                }
            }
            let remaining = length - done;
            // Steps end at chunk boundaries so the interruption check above sees each one.
            let limit = remaining.min(CHUNK - done % CHUNK);
            if src.run_left == 0 {
                src = run_at(source, done, remaining, &self.frame_lists, &self.gart, mem)?;
            }
            if dst.run_left == 0 {
                dst = run_at(
                    destination,
                    done,
                    remaining,
                    &self.frame_lists,
                    &self.gart,
                    mem,
                )?;
            }
            let step = src.run_left.min(dst.run_left).min(limit);
            copy(src.location, dst.location, step, mem, &mut self.bounce)?;
            src.advance(step);
            dst.advance(step);
            done += step;
        }
        Ok(length)
    }

    fn fill<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketFill,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Result<u64, Stop> {
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
        let Side::Vram { offset } = self.resolve_endpoint(0, destination, length, mem)? else {
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
        let mut done = 0u64;
        while done < length {
            if done.is_multiple_of(CHUNK) {
                if let Some(stop) = hooks.interruption() {
                    return Err(stop.into());
                }
            }
            let step = (length - done).min(FILL_BUFFER as u64) as usize;
            let slice = mem
                .vram
                .slice(offset + done, step)
                .ok_or(Fault::SegmentRange {
                    segment: destination.segment_id,
                    address: destination.address,
                    length,
                })?;
            slice.copy_from(&self.fill[..step]);
            done += step as u64;
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
            Resolved::Aperture { .. } if discard => Err(Fault::WrongSegmentKind(
                "DISCARD_CONTENT names a memory-segment location",
            )),
            Resolved::Aperture { offset } => {
                Ok(self.gart.check_mapped(packet.segment_id, offset, length)?)
            }
            Resolved::Vram { .. } => Ok(()),
        }
    }

    fn check_aperture<M: GuestMemoryBackend>(
        &self,
        segment: u32,
        flags: u32,
        first_page: u64,
        page_count: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
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
        self.check_aperture(
            packet.segment_id,
            packet.flags,
            packet.first_page,
            packet.page_count,
            mem,
        )?;
        self.load_page_array(
            packet.frame_list_address,
            packet.frame_count,
            packet.frame_offset,
            packet.page_count,
            mem,
        )?;
        self.gart
            .map(packet.segment_id, packet.first_page, &self.frame_lists[0])?;
        Ok(())
    }

    fn map_aperture2<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketMapAperture2,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        if packet.reserved != 0 || packet.adl_flags & !WDDM_GPU_ADL_FLAG_CONTIGUOUS != 0 {
            return Err(Fault::ReservedField("ADL flags or reserved"));
        }
        self.check_aperture(
            packet.segment_id,
            packet.flags,
            packet.first_page,
            packet.page_count,
            mem,
        )?;
        if packet.adl_flags & WDDM_GPU_ADL_FLAG_CONTIGUOUS == 0 {
            self.load_page_array(
                packet.adl_base,
                packet.adl_page_count,
                packet.adl_offset,
                packet.page_count,
                mem,
            )?;
            self.gart
                .map(packet.segment_id, packet.first_page, &self.frame_lists[0])?;
            return Ok(());
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
        let address = first_frame
            .checked_mul(WDDM_GPU_PAGE_SIZE)
            .ok_or(Fault::FrameNotInRam {
                address: first_frame,
            })?;
        let bytes = packet
            .page_count
            .checked_mul(WDDM_GPU_PAGE_SIZE)
            .ok_or(Fault::LengthOverflow(packet.page_count))?;
        check_ram(mem, address, bytes)?;
        self.gart.map_contiguous(
            packet.segment_id,
            packet.first_page,
            packet.page_count,
            first_frame,
        )?;
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
        self.check_aperture(
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
        check_ram(mem, packet.dummy_page, WDDM_GPU_PAGE_SIZE)?;
        self.gart.unmap(
            packet.segment_id,
            packet.first_page,
            packet.page_count,
            packet.dummy_page >> WDDM_GPU_PAGE_SHIFT,
        )?;
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
            return Ok(Side::Frames {
                list: slot,
                byte_offset: u64::from(endpoint.byte_offset),
            });
        }
        if endpoint.frame_count != 0 || endpoint.byte_offset != 0 {
            return Err(Fault::ReservedField("endpoint.frame_count/byte_offset"));
        }
        let segment = endpoint.segment_id;
        match mem.layout.resolve(segment, endpoint.address, length)? {
            Resolved::Vram { offset } => {
                let end = offset
                    .checked_add(length)
                    .ok_or(Fault::LengthOverflow(length))?;
                if end > mem.vram.total_size() {
                    return Err(Fault::SegmentRange {
                        segment,
                        address: endpoint.address,
                        length,
                    });
                }
                Ok(Side::Vram { offset })
            }
            Resolved::Aperture { offset } => {
                self.gart.check_mapped(segment, offset, length)?;
                Ok(Side::Aperture { segment, offset })
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
        if count > WDDM_GPU_MAX_FRAME_LIST_ENTRIES {
            return Err(Fault::BadFrameList {
                address,
                reason: "more entries than the device maximum",
            });
        }
        let start = u64::from(endpoint.byte_offset);
        let end = start
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?;
        if end > u64::from(count) * WDDM_GPU_PAGE_SIZE {
            return Err(Fault::BadFrameList {
                address,
                reason: "too few frames for offset + length",
            });
        }
        if length == 0 {
            self.frame_lists[slot].clear();
            return Ok(());
        }
        let first = start >> WDDM_GPU_PAGE_SHIFT;
        let last = (end - 1) >> WDDM_GPU_PAGE_SHIFT;
        read_frames(
            &mut self.frame_lists[slot],
            address,
            first,
            last - first + 1,
            mem,
        )?;
        check_frames(&self.frame_lists[slot], mem)
    }

    /// Copies `page_count` entries from index `offset` of a `count`-entry page array into
    /// `frame_lists[0]` and checks them (MAP and the page-array ADL form).
    fn load_page_array<M: GuestMemoryBackend>(
        &mut self,
        address: u64,
        count: u32,
        offset: u32,
        page_count: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        if count > WDDM_GPU_MAX_FRAME_LIST_ENTRIES {
            return Err(Fault::BadFrameList {
                address,
                reason: "more entries than the device maximum",
            });
        }
        let end = u64::from(offset)
            .checked_add(page_count)
            .ok_or(Fault::LengthOverflow(page_count))?;
        if end > u64::from(count) {
            return Err(Fault::BadFrameList {
                address,
                reason: "too few frames for MdlOffset + NumberOfPages",
            });
        }
        read_frames(
            &mut self.frame_lists[0],
            address,
            u64::from(offset),
            page_count,
            mem,
        )?;
        check_frames(&self.frame_lists[0], mem)
    }
}

/// Reads `count` little-endian u64 frame numbers from index `first` of the array at `address`.
fn read_frames<M: GuestMemoryBackend>(
    list: &mut Vec<u64>,
    address: u64,
    first: u64,
    count: u64,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    // Callers bound `first + count` by WDDM_GPU_MAX_FRAME_LIST_ENTRIES.
    list.clear();
    list.resize(count as usize, 0);
    let at = address
        .checked_add(first * 8)
        .ok_or(Fault::LengthOverflow(first))?;
    mem.ram
        .read(at, list.as_mut_slice().as_mut_bytes())
        .map_err(|_| Fault::BadFrameList {
            address,
            reason: "not inside guest RAM",
        })?;
    for frame in list.iter_mut() {
        *frame = u64::from_le(*frame);
    }
    Ok(())
}

/// Checks that every frame is guest RAM and not VRAM, one run of consecutive frames at a time.
/// Runs inside the RAM extent the previous lookup found need no lookup of their own, which
/// keeps a 262,144-frame map at a few nanoseconds per frame.
fn check_frames<M: GuestMemoryBackend>(
    frames: &[u64],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    let mut known_ram = 0..0;
    let mut index = 0;
    while index < frames.len() {
        let mut end = index + 1;
        while end < frames.len() && frames[end] == frames[end - 1].wrapping_add(1) {
            end += 1;
        }
        let bytes = WDDM_GPU_PAGE_SIZE * (end - index) as u64;
        let (address, last) = frames[index]
            .checked_mul(WDDM_GPU_PAGE_SIZE)
            .and_then(|a| Some((a, a.checked_add(bytes)?)))
            .ok_or(Fault::FrameNotInRam {
                address: frames[index],
            })?;
        if address < known_ram.start || last > known_ram.end {
            check_ram(mem, address, bytes)?;
            known_ram = mem.ram.ram_extent(address).unwrap_or(0..0);
        }
        index = end;
    }
    Ok(())
}

fn check_ram<M: GuestMemoryBackend>(
    mem: &DeviceMemory<'_, M>,
    address: u64,
    length: u64,
) -> Result<(), Fault> {
    mem.ram.check(address, length).map_err(|error| match error {
        RamError::InVram { address } => Fault::FrameInVram { address },
        RamError::NotRam { address } | RamError::Overflow { address, .. } => {
            Fault::FrameNotInRam { address }
        }
    })
}
