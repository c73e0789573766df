//! How the engine reaches bytes: an endpoint resolved to a [`Side`] (VRAM, a frame list, or an
//! aperture through the GART) is walked in maximal runs of contiguous bytes, and runs are copied
//! with vm-memory volatile slices. Every run is a checked range ([`VramRange`] or [`RamRange`]),
//! so walking it needs no overflow checks.

use std::ops::Range;

use vm_memory::bitmap::BitmapSlice;
use vm_memory::{GuestMemoryBackend, VolatileSlice};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use super::{DeviceMemory, Fault};
use crate::layout::SegmentRange;
use crate::memory::capture::{ReadKind, Store};
use crate::memory::frames::FrameList;
use crate::memory::gart::Gart;
use crate::memory::guest_ram::RamRange;
use crate::memory::vram::{copy_slices, VramRange};
use crate::support::span::Span;

/// Bytes copied through the bounce buffer per step when source and destination overlap.
const BOUNCE_SIZE: usize = 64 << 10;

/// A run of bytes contiguous in one store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Location {
    /// Bytes of the VRAM address space.
    Vram(VramRange),
    /// Guest-physical bytes that were checked as RAM.
    Guest(RamRange),
}

impl Location {
    /// An empty run.
    pub(super) const EMPTY: Location = Location::Guest(RamRange::EMPTY);

    /// Bytes in the run.
    #[inline]
    pub(super) fn len(self) -> u64 {
        match self {
            Location::Vram(range) => range.len(),
            Location::Guest(range) => range.len(),
        }
    }

    /// `length` bytes from `skip` bytes in, both clamped to the run.
    #[inline]
    pub(super) fn sub(self, skip: u64, length: u64) -> Self {
        match self {
            Location::Vram(range) => Location::Vram(range.sub(skip, length)),
            Location::Guest(range) => Location::Guest(range.sub(skip, length)),
        }
    }

    /// The run without its first `step` bytes.
    #[inline]
    pub(super) fn advance(&mut self, step: u64) {
        *self = self.sub(step, u64::MAX);
    }

    /// Whether both runs are in the same store and share a byte.
    fn overlaps(self, other: Self) -> bool {
        match (self, other) {
            (Location::Vram(a), Location::Vram(b)) => a.overlaps(b),
            (Location::Guest(a), Location::Guest(b)) => a.overlaps(b),
            _ => false,
        }
    }

    /// Takes `len` bytes off the front, or the back: `(taken, rest)`.
    fn take(self, len: u64, from_back: bool) -> (Self, Self) {
        fn split<K: Copy>(span: Span<K>, len: u64, from_back: bool) -> (Span<K>, Span<K>) {
            if from_back {
                let (rest, last) = span.split_last(len);
                (last, rest)
            } else {
                (span.head(len), span.tail(len))
            }
        }
        match self {
            Location::Vram(range) => {
                let (taken, rest) = split(range, len, from_back);
                (Location::Vram(taken), Location::Vram(rest))
            }
            Location::Guest(range) => {
                let (taken, rest) = split(range, len, from_back);
                (Location::Guest(taken), Location::Guest(rest))
            }
        }
    }

    /// Where the run starts in its store.
    fn start(self) -> u64 {
        match self {
            Location::Vram(range) => range.start(),
            Location::Guest(range) => range.start(),
        }
    }
}

/// Hands a source slice's bytes to the recording, when there is one and it keeps `kind`.
#[inline]
fn capture_source<M: GuestMemoryBackend, B: BitmapSlice>(
    mem: &DeviceMemory<'_, M>,
    location: Location,
    kind: ReadKind,
    slice: &VolatileSlice<'_, B>,
) {
    let Some(capture) = mem.ram.capture() else {
        return;
    };
    let (store, address) = match location {
        Location::Vram(range) => (Store::Vram, range.start()),
        Location::Guest(range) => (Store::Ram, range.start()),
    };
    capture.slice(store, kind, address, slice);
}

/// A source slice of `location`, its bytes captured when recording.
macro_rules! source_slice {
    ($mem:expr, $location:expr, $slice:expr, $kind:expr) => {{
        let slice = $slice;
        capture_source($mem, $location, $kind, &slice);
        slice
    }};
}

/// One endpoint, resolved and checked.
#[derive(Clone, Copy, Debug)]
pub(super) enum Side {
    /// Bytes of VRAM.
    Vram(VramRange),
    /// Bytes of guest pages.
    Guest(GuestPages),
}

/// Guest pages an endpoint names.
#[derive(Clone, Copy, Debug)]
pub(super) enum GuestPages {
    /// The checked frames in `frame_lists[list]`.
    Frames { list: usize },
    /// An aperture's pages, through the GART.
    Aperture { segment: u32, range: SegmentRange },
}

/// The run of contiguous bytes of `side` starting `position` bytes in, at most `limit` long.
/// Frame lists and apertures coalesce consecutive frames, across memory-table regions that
/// touch (the copies split a run where a slice must end).
pub(super) fn run_at(
    side: Side,
    position: u64,
    limit: u64,
    frame_lists: &[FrameList; 2],
    gart: &Gart,
) -> Result<Location, Fault> {
    match side {
        Side::Vram(range) => Ok(Location::Vram(range.sub(position, limit))),
        Side::Guest(pages) => {
            guest_run_at(pages, position, limit, frame_lists, gart).map(Location::Guest)
        }
    }
}

/// [`run_at`] for guest pages. Always inlined: called out of line between two page copies, its
/// result comes back through memory, and scattered copies measured 5 to 10 % slower for it
/// (docs/performance.md, "The work between two page copies").
#[inline(always)]
fn guest_run_at(
    pages: GuestPages,
    position: u64,
    limit: u64,
    frame_lists: &[FrameList; 2],
    gart: &Gart,
) -> Result<RamRange, Fault> {
    let run = match pages {
        // A transfer stays inside the bytes its list was loaded for: past them is a device bug,
        // reported rather than panicked on.
        GuestPages::Frames { list } => {
            frame_lists[list]
                .run_at(position, limit)
                .ok_or(Fault::BadFrameList {
                    address: 0,
                    reason: "a run past the checked frames",
                })?
        }
        GuestPages::Aperture { segment, range } => {
            gart.ram_run_at(segment, range.at(position), limit)?
        }
    };
    // A run may run on into another memory-table region: what reads or copies it splits it
    // where a slice must ([`ram_in_one_slice`]). A run is never empty, or the loops that walk
    // runs would not move.
    if run.is_empty() {
        return Err(Fault::FrameNotInRam {
            address: run.start(),
        });
    }
    Ok(run)
}

/// Copies one run between guest RAM and VRAM (`ram` and `vram` as long), which never overlap:
/// a slice each way and one `memcpy`, or one per memory-table region where the guest run
/// crosses regions that touch. Always inlined into the loops that call it, for the reason
/// [`guest_run_at`] is.
#[inline(always)]
pub(super) fn copy_run<M: GuestMemoryBackend>(
    mut ram: RamRange,
    mut vram: VramRange,
    toward: Toward,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    loop {
        let piece = ram_in_one_slice(ram, mem)?;
        let in_vram = vram.head(piece.len());
        let ram_bytes = slice_of_checked_ram(mem, piece)?;
        let vram_bytes = vram_slice(mem, in_vram)?;
        match toward {
            Toward::Vram => copy_slices(
                source_slice!(mem, Location::Guest(piece), ram_bytes, ReadKind::Data),
                vram_bytes,
            ),
            Toward::Guest => copy_slices(
                source_slice!(mem, Location::Vram(in_vram), vram_bytes, ReadKind::Data),
                ram_bytes,
            ),
        }
        ram = ram.tail(piece.len());
        vram = vram.tail(piece.len());
        if ram.is_empty() {
            return Ok(());
        }
    }
}

/// Which way a copy between guest pages and VRAM goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Toward {
    Vram,
    Guest,
}

/// Copies between `pages`, from `position` bytes in, and the VRAM bytes of `vram` (the copy is
/// as long as it), run by run: the path of every TRANSFER between guest pages and VRAM. Guest
/// and VRAM bytes never overlap, so each run is one slice each way and one `memcpy`, with
/// nothing between two copies but the next run's lookup ([`copy`] handles any two locations,
/// overlapping ones included, and costs scattered pages about 10 % more).
pub(super) fn copy_guest_vram<M: GuestMemoryBackend>(
    pages: GuestPages,
    position: u64,
    vram: VramRange,
    toward: Toward,
    frame_lists: &[FrameList; 2],
    gart: &Gart,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    let mut done = 0;
    while done < vram.len() {
        let at = position
            .checked_add(done)
            .ok_or(Fault::LengthOverflow(position))?;
        let run = guest_run_at(pages, at, vram.len() - done, frame_lists, gart)?;
        copy_run(run, vram.sub(done, run.len()), toward, mem)?;
        done += run.len();
    }
    Ok(())
}

/// A VRAM slice, or the range fault when it straddles the BAR and device-only memory.
fn vram_slice<'a, M: GuestMemoryBackend>(
    mem: &DeviceMemory<'a, M>,
    range: VramRange,
) -> Result<VolatileSlice<'a, ()>, Fault> {
    mem.vram.range_slice(range).ok_or(Fault::SegmentRange {
        segment: 0,
        address: range.start(),
        length: range.len(),
    })
}

/// A slice of bytes that were RAM when checked. The memory table may have changed since: when
/// they are no longer RAM (their region went away, or the VRAM window now covers them) the
/// fault is `FrameNotInRam` in both cases, the status the device has always reported here.
fn slice_of_checked_ram<'a, M: GuestMemoryBackend>(
    mem: &DeviceMemory<'a, M>,
    range: RamRange,
) -> Result<VolatileSlice<'a, impl BitmapSlice + 'a>, Fault> {
    mem.ram.slice(range).map_err(|_| Fault::FrameNotInRam {
        address: range.start(),
    })
}

/// Copies the first `length` bytes of `src` to `dst`; overlapping ranges behave as memmove.
/// `kind` says what the source bytes are to a recording (data, or entries that steer the
/// device).
pub(super) fn copy<M: GuestMemoryBackend>(
    src: Location,
    dst: Location,
    length: u64,
    kind: ReadKind,
    mem: &DeviceMemory<'_, M>,
    bounce: &mut Vec<u8>,
) -> Result<(), Fault> {
    // Slices are usize long.
    usize::try_from(length).map_err(|_| Fault::LengthOverflow(length))?;
    let (mut src, mut dst) = (src.sub(0, length), dst.sub(0, length));
    if src.overlaps(dst) {
        return copy_overlapping(src, dst, kind, mem, bounce);
    }
    // Both ends are `length` long: the loop ends when either does.
    while src.len() > 0 && dst.len() > 0 {
        let len = in_one_slice(src, mem)?
            .len()
            .min(in_one_slice(dst, mem)?.len());
        copy_in_one_slice(src.sub(0, len), dst.sub(0, len), kind, mem)?;
        src.advance(len);
        dst.advance(len);
    }
    Ok(())
}

/// The head of `location` one slice reaches: all of it, but for guest bytes that run on into
/// another memory-table region ([`ram_in_one_slice`]).
fn in_one_slice<M: GuestMemoryBackend>(
    location: Location,
    mem: &DeviceMemory<'_, M>,
) -> Result<Location, Fault> {
    match location {
        Location::Guest(range) => ram_in_one_slice(range, mem).map(Location::Guest),
        Location::Vram(_) => Ok(location),
    }
}

/// The head of `range` one slice reaches: all of it, but for bytes that run on into another
/// memory-table region (QEMU announces sections that touch as separate regions). Regions are
/// whole pages, so only a range longer than the rest of its first page pays for a lookup.
#[inline(always)]
fn ram_in_one_slice<M: GuestMemoryBackend>(
    range: RamRange,
    mem: &DeviceMemory<'_, M>,
) -> Result<RamRange, Fault> {
    let address = range.start();
    let in_page_room = WDDM_GPU_PAGE_SIZE - (address & (WDDM_GPU_PAGE_SIZE - 1));
    if range.len() <= in_page_room {
        return Ok(range);
    }
    match mem.ram.contiguous_len(address) {
        // No longer RAM: the memory table changed since the range was checked.
        0 => Err(Fault::FrameNotInRam { address }),
        len => Ok(range.head(len)),
    }
}

/// Copies `src` over `dst`, as long and each inside one slice.
fn copy_in_one_slice<M: GuestMemoryBackend>(
    src: Location,
    dst: Location,
    kind: ReadKind,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    match (src, dst) {
        (Location::Vram(s), Location::Vram(d)) => copy_slices(
            source_slice!(mem, src, vram_slice(mem, s)?, kind),
            vram_slice(mem, d)?,
        ),
        (Location::Vram(s), Location::Guest(d)) => copy_slices(
            source_slice!(mem, src, vram_slice(mem, s)?, kind),
            slice_of_checked_ram(mem, d)?,
        ),
        (Location::Guest(s), Location::Vram(d)) => copy_slices(
            source_slice!(mem, src, slice_of_checked_ram(mem, s)?, kind),
            vram_slice(mem, d)?,
        ),
        (Location::Guest(s), Location::Guest(d)) => copy_slices(
            source_slice!(mem, src, slice_of_checked_ram(mem, s)?, kind),
            slice_of_checked_ram(mem, d)?,
        ),
    }
    Ok(())
}

/// `min(len, cap)` as a `usize`: the part of a `len`-byte run that fits a `cap`-byte buffer.
pub(super) fn fitting(len: u64, cap: usize) -> usize {
    usize::try_from(len).map_or(cap, |len| len.min(cap))
}

/// memmove through a bounce buffer, in the direction that never reads overwritten bytes.
fn copy_overlapping<M: GuestMemoryBackend>(
    src: Location,
    dst: Location,
    kind: ReadKind,
    mem: &DeviceMemory<'_, M>,
    bounce: &mut Vec<u8>,
) -> Result<(), Fault> {
    bounce.resize(BOUNCE_SIZE, 0);
    let from_back = dst.start() > src.start();
    let (mut src, mut dst) = (src, dst);
    while src.len() > 0 {
        let chunk = src.len().min(BOUNCE_SIZE as u64);
        let (src_piece, src_rest) = src.take(chunk, from_back);
        let (dst_piece, dst_rest) = dst.take(chunk, from_back);
        let buf = &mut bounce[..fitting(src_piece.len(), BOUNCE_SIZE)];
        read_location(src_piece, buf, kind, mem)?;
        write_location(dst_piece, buf, mem)?;
        (src, dst) = (src_rest, dst_rest);
    }
    Ok(())
}

/// Reads a run into `buf`, which is as long as the run; `kind` is what the bytes are to a
/// recording.
pub(super) fn read_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &mut [u8],
    kind: ReadKind,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    debug_assert_eq!(location.len(), buf.len() as u64);
    slice_pieces(location, buf.len(), mem, |piece, at| {
        let head = &mut buf[at];
        let store = match piece {
            Location::Vram(range) => {
                vram_slice(mem, range)?.copy_to(head);
                Store::Vram
            }
            Location::Guest(range) => {
                slice_of_checked_ram(mem, range)?.copy_to(head);
                Store::Ram
            }
        };
        // The bytes as read, not read again: what the engine goes on with is what is kept.
        if let Some(capture) = mem.ram.capture() {
            capture.bytes(store, kind, piece.start(), head);
        }
        Ok(())
    })
}

/// Walks `location` a piece inside one slice at a time ([`in_one_slice`]), each with where its
/// bytes sit in a buffer of `len` bytes that stands for the whole location.
fn slice_pieces<M: GuestMemoryBackend>(
    location: Location,
    len: usize,
    mem: &DeviceMemory<'_, M>,
    mut each: impl FnMut(Location, Range<usize>) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let (mut location, mut done) = (location, 0);
    while done < len && location.len() > 0 {
        let piece = in_one_slice(location, mem)?;
        let step = fitting(piece.len(), len - done);
        each(piece.sub(0, step as u64), done..done + step)?;
        location.advance(step as u64);
        done += step;
    }
    Ok(())
}

/// Bytes of a repeated pattern written per step.
const REPEAT_SIZE: usize = 64 << 10;

/// One unit (a fill pattern, a page-table entry, a zero byte) repeated over a buffer that is kept
/// while the unit stays the same, so repeated writes of it do not rebuild it.
#[derive(Default)]
pub(super) struct Repeated {
    unit: Vec<u8>,
    bytes: Vec<u8>,
}

impl Repeated {
    /// Writes `unit` again and again over `to`, from its first byte on. `unit` is 1, 4 or 8
    /// bytes long (it divides the buffer, so every step starts in phase).
    pub(super) fn write<M: GuestMemoryBackend>(
        &mut self,
        to: Location,
        unit: &[u8],
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        debug_assert!(!unit.is_empty() && REPEAT_SIZE.is_multiple_of(unit.len()));
        if self.unit != unit {
            self.unit.clear();
            self.unit.extend_from_slice(unit);
            self.bytes.clear();
            self.bytes
                .extend(unit.iter().copied().cycle().take(REPEAT_SIZE));
        }
        let mut rest = to;
        while rest.len() > 0 {
            let step = rest.len().min(REPEAT_SIZE as u64);
            write_location(
                rest.sub(0, step),
                &self.bytes[..fitting(step, REPEAT_SIZE)],
                mem,
            )?;
            rest = rest.sub(step, u64::MAX);
        }
        Ok(())
    }
}

/// Writes `buf` over a run as long as it.
pub(super) fn write_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &[u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    debug_assert_eq!(location.len(), buf.len() as u64);
    slice_pieces(location, buf.len(), mem, |piece, at| {
        let head = &buf[at];
        match piece {
            Location::Vram(range) => vram_slice(mem, range)?.copy_from(head),
            Location::Guest(range) => slice_of_checked_ram(mem, range)?.copy_from(head),
        };
        Ok(())
    })
}

/// Reads `buf.len()` bytes at `offset` of the VRAM address space, which the layout placed but
/// nothing checked against the VRAM file (a DMA buffer in a memory segment): bytes outside it
/// are the range fault.
pub(super) fn read_vram<M: GuestMemoryBackend>(
    offset: u64,
    buf: &mut [u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    let range = mem
        .vram
        .range(offset, buf.len() as u64)
        .ok_or(Fault::SegmentRange {
            segment: 0,
            address: offset,
            length: buf.len() as u64,
        })?;
    read_location(Location::Vram(range), buf, ReadKind::Metadata, mem)
}

/// Reads `buf.len()` bytes of `side` from `position` on, run by run.
pub(super) fn read_side<M: GuestMemoryBackend>(
    side: Side,
    position: u64,
    buf: &mut [u8],
    frame_lists: &[FrameList; 2],
    gart: &Gart,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    let (mut rest, mut at) = (buf, position);
    while !rest.is_empty() {
        let run = run_at(side, at, rest.len() as u64, frame_lists, gart)?;
        let (now, later) = rest.split_at_mut(fitting(run.len(), rest.len()));
        read_location(run.sub(0, now.len() as u64), now, ReadKind::Metadata, mem)?;
        at = at
            .checked_add(now.len() as u64)
            .ok_or(Fault::LengthOverflow(position))?;
        rest = later;
    }
    Ok(())
}
