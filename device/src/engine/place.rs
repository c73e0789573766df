//! Bytes named by a guest-physical address or by an offset in a memory segment (how page tables
//! and their entries address memory), checked and turned into the engine's [`Location`].

use std::ops::Range;

use vm_memory::GuestMemoryBackend;

use super::access::Location;
use super::{DeviceMemory, Fault};
use crate::layout::Resolved;
use crate::memory::guest_ram::{RamError, RamRange};

/// Guest RAM at `address`, `length` bytes long, as the engine's location.
pub(super) fn ram<M: GuestMemoryBackend>(
    mem: &DeviceMemory<'_, M>,
    address: u64,
    length: u64,
) -> Result<Location, Fault> {
    location_of(mem.ram.check(address, length), length)
}

/// [`ram`], with no memory-table lookup inside `known`, the RAM extent an earlier call found
/// (see [`GuestRam::check_within`](crate::memory::guest_ram::GuestRam::check_within)).
pub(super) fn ram_within<M: GuestMemoryBackend>(
    mem: &DeviceMemory<'_, M>,
    known: &mut Range<u64>,
    address: u64,
    length: u64,
) -> Result<Location, Fault> {
    location_of(mem.ram.check_within(known, address, length), length)
}

fn location_of(checked: Result<RamRange, RamError>, length: u64) -> Result<Location, Fault> {
    match checked {
        Ok(range) => Ok(Location::Guest(range)),
        Err(RamError::InVram { address }) => Err(Fault::FrameInVram { address }),
        Err(RamError::Overflow { .. }) => Err(Fault::LengthOverflow(length)),
        Err(RamError::NotRam { address }) => Err(Fault::FrameNotInRam { address }),
    }
}

/// `length` bytes at `offset` of memory segment `segment` (an offset from the segment's start,
/// as page tables and GPU virtual mappings address segments).
pub(super) fn segment_offset<M: GuestMemoryBackend>(
    mem: &DeviceMemory<'_, M>,
    segment: u32,
    offset: u64,
    length: u64,
) -> Result<Location, Fault> {
    let base = mem
        .layout
        .segment(segment)
        .ok_or(Fault::BadSegment(segment))?
        .base_address;
    let address = base
        .checked_add(offset)
        .ok_or(Fault::LengthOverflow(offset))?;
    let out_of_range = Fault::SegmentRange {
        segment,
        address,
        length,
    };
    match mem.layout.resolve(segment, address, length) {
        Ok(Resolved::Vram(range)) => mem
            .vram
            .range(range.start(), range.len())
            .map(Location::Vram)
            .ok_or(out_of_range),
        Ok(Resolved::Aperture(_)) => Err(Fault::WrongSegmentKind(
            "page tables and GPU virtual mappings reach memory segments, not apertures",
        )),
        Err(_) => Err(out_of_range),
    }
}
