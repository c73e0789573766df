//! How the engine reaches bytes: an endpoint resolved to a [`Side`] (VRAM, a frame list, or an
//! aperture through the GART) is walked in maximal runs of contiguous bytes, and runs are copied
//! with vm-memory volatile slices.

use vm_memory::bitmap::BitmapSlice;
use vm_memory::{GuestMemoryBackend, VolatileSlice};
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

use super::{DeviceMemory, Fault};
use crate::memory::gart::Gart;
use crate::memory::vram::copy_slices;

/// Bytes copied through the bounce buffer per step when source and destination overlap.
const BOUNCE_SIZE: usize = 64 << 10;

/// Where one byte lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Location {
    /// An offset in the VRAM address space.
    Vram(u64),
    /// A guest-physical address in RAM.
    Guest(u64),
}

impl Location {
    fn offset(self, by: u64) -> Self {
        match self {
            Location::Vram(a) => Location::Vram(a + by),
            Location::Guest(a) => Location::Guest(a + by),
        }
    }

    fn address(self) -> u64 {
        match self {
            Location::Vram(a) | Location::Guest(a) => a,
        }
    }
}

/// One endpoint, resolved and checked.
#[derive(Clone, Copy, Debug)]
pub(super) enum Side {
    /// Bytes from this VRAM offset on.
    Vram { offset: u64 },
    /// Bytes of the frames in `frame_lists[list]`, starting `byte_offset` into the first one.
    Frames { list: usize, byte_offset: u64 },
    /// Bytes of an aperture from this segment offset on, through the GART.
    Aperture { segment: u32, offset: u64 },
}

/// The current run of one side.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cursor {
    pub(super) location: Location,
    pub(super) run_left: u64,
}

impl Cursor {
    pub(super) const EMPTY: Cursor = Cursor {
        location: Location::Vram(0),
        run_left: 0,
    };

    pub(super) fn advance(&mut self, step: u64) {
        self.run_left -= step;
        self.location = self.location.offset(step);
    }
}

/// The run of contiguous bytes of `side` starting `position` bytes in, at most `limit` long.
/// Frame lists and apertures coalesce consecutive frames; a run never crosses a memory-table
/// region (a slice may not).
pub(super) fn run_at<M: GuestMemoryBackend>(
    side: Side,
    position: u64,
    limit: u64,
    frame_lists: &[Vec<u64>; 2],
    gart: &Gart,
    mem: &DeviceMemory<'_, M>,
) -> Result<Cursor, Fault> {
    let (address, run) = match side {
        Side::Vram { offset } => {
            return Ok(Cursor {
                location: Location::Vram(offset + position),
                run_left: limit,
            });
        }
        Side::Frames { list, byte_offset } => {
            let frames = &frame_lists[list];
            let first = byte_offset >> WDDM_GPU_PAGE_SHIFT;
            let at = byte_offset + position;
            let index = ((at >> WDDM_GPU_PAGE_SHIFT) - first) as usize;
            let in_page = at & (WDDM_GPU_PAGE_SIZE - 1);
            let mut run = WDDM_GPU_PAGE_SIZE - in_page;
            let mut next = index + 1;
            while run < limit && next < frames.len() && frames[next] == frames[next - 1] + 1 {
                run += WDDM_GPU_PAGE_SIZE;
                next += 1;
            }
            (frames[index] * WDDM_GPU_PAGE_SIZE + in_page, run)
        }
        Side::Aperture { segment, offset } => {
            let run = gart.run_at(segment, offset + position, limit)?;
            (run.address, run.length)
        }
    };
    let run = run.min(limit);
    // A run inside one page cannot cross a memory-table region (regions are whole pages; a
    // frontend's odd region makes the copy's slice lookup fault instead): only longer runs
    // pay for a region lookup here. That lookup is most of the per-page cost of scattered
    // frames.
    let in_page_room = WDDM_GPU_PAGE_SIZE - (address & (WDDM_GPU_PAGE_SIZE - 1));
    let run = if run <= in_page_room {
        run
    } else {
        run.min(mem.ram.contiguous_len(address))
    };
    if run == 0 {
        // Checked ranges always have a run: the frame is no longer RAM (the memory table
        // changed since the mapping was checked).
        return Err(Fault::FrameNotInRam { address });
    }
    Ok(Cursor {
        location: Location::Guest(address),
        run_left: run,
    })
}

/// A VRAM slice, or the range fault when it is outside VRAM.
fn vram_slice<'a, M: GuestMemoryBackend>(
    mem: &DeviceMemory<'a, M>,
    offset: u64,
    len: usize,
) -> Result<VolatileSlice<'a, ()>, Fault> {
    mem.vram.slice(offset, len).ok_or(Fault::SegmentRange {
        segment: 0,
        address: offset,
        length: len as u64,
    })
}

/// A guest RAM slice (one memory-table region), or the frame fault when it is not RAM.
fn ram_slice<'a, M: GuestMemoryBackend>(
    mem: &DeviceMemory<'a, M>,
    address: u64,
    len: usize,
) -> Result<VolatileSlice<'a, impl BitmapSlice + 'a>, Fault> {
    mem.ram
        .slice(address, len)
        .map_err(|_| Fault::FrameNotInRam { address })
}

/// Copies `length` bytes; overlapping ranges behave as memmove.
pub(super) fn copy<M: GuestMemoryBackend>(
    src: Location,
    dst: Location,
    length: u64,
    mem: &DeviceMemory<'_, M>,
    bounce: &mut Vec<u8>,
) -> Result<(), Fault> {
    let len = usize::try_from(length).map_err(|_| Fault::LengthOverflow(length))?;
    let overlap = match (src, dst) {
        (Location::Vram(a), Location::Vram(b)) | (Location::Guest(a), Location::Guest(b)) => {
            a < b + length && b < a + length
        }
        _ => false,
    };
    if overlap {
        return copy_overlapping(src, dst, len, mem, bounce);
    }
    match (src, dst) {
        (Location::Vram(s), Location::Vram(d)) => {
            copy_slices(vram_slice(mem, s, len)?, vram_slice(mem, d, len)?)
        }
        (Location::Vram(s), Location::Guest(d)) => {
            copy_slices(vram_slice(mem, s, len)?, ram_slice(mem, d, len)?)
        }
        (Location::Guest(s), Location::Vram(d)) => {
            copy_slices(ram_slice(mem, s, len)?, vram_slice(mem, d, len)?)
        }
        (Location::Guest(s), Location::Guest(d)) => {
            copy_slices(ram_slice(mem, s, len)?, ram_slice(mem, d, len)?)
        }
    }
    Ok(())
}

/// memmove through a bounce buffer, in the direction that never reads overwritten bytes.
fn copy_overlapping<M: GuestMemoryBackend>(
    src: Location,
    dst: Location,
    len: usize,
    mem: &DeviceMemory<'_, M>,
    bounce: &mut Vec<u8>,
) -> Result<(), Fault> {
    bounce.resize(BOUNCE_SIZE, 0);
    let forward = dst.address() <= src.address();
    let mut done = 0usize;
    while done < len {
        let chunk = (len - done).min(BOUNCE_SIZE);
        let at = if forward { done } else { len - done - chunk } as u64;
        read_location(src.offset(at), &mut bounce[..chunk], mem)?;
        write_location(dst.offset(at), &bounce[..chunk], mem)?;
        done += chunk;
    }
    Ok(())
}

/// Reads `buf.len()` bytes at a location that holds them contiguously.
pub(super) fn read_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &mut [u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    match location {
        Location::Vram(offset) => vram_slice(mem, offset, buf.len())?.copy_to(buf),
        Location::Guest(address) => ram_slice(mem, address, buf.len())?.copy_to(buf),
    };
    Ok(())
}

/// Writes `buf` at a location that holds it contiguously.
fn write_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &[u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    match location {
        Location::Vram(offset) => vram_slice(mem, offset, buf.len())?.copy_from(buf),
        Location::Guest(address) => ram_slice(mem, address, buf.len())?.copy_from(buf),
    }
    Ok(())
}

/// Reads `buf.len()` bytes of `side` from `position` on, run by run.
pub(super) fn read_side<M: GuestMemoryBackend>(
    side: Side,
    position: u64,
    buf: &mut [u8],
    frame_lists: &[Vec<u64>; 2],
    gart: &Gart,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    let mut done = 0usize;
    while done < buf.len() {
        let left = (buf.len() - done) as u64;
        let cursor = run_at(side, position + done as u64, left, frame_lists, gart, mem)?;
        let step = cursor.run_left.min(left) as usize;
        read_location(cursor.location, &mut buf[done..done + step], mem)?;
        done += step;
    }
    Ok(())
}
