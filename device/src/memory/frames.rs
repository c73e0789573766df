//! Guest page frames that were checked: a run of contiguous frames ([`FrameRun`]) and a frame
//! list copied out of the guest ([`FrameList`]). A checked frame `f` is guest RAM outside the
//! VRAM window and `(f + 1) * WDDM_GPU_PAGE_SIZE` fits in 64 bits, so walking checked frames
//! needs no overflow checks.

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};
use zerocopy::IntoBytes;

use super::guest_ram::{GuestRam, RamError, RamRange};

/// Why frames are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame's address does not fit in 64 bits.
    #[error("frame {frame:#x} has no 64-bit address")]
    FrameOverflow {
        /// The frame number.
        frame: u64,
    },
    /// The run's byte length does not fit in 64 bits.
    #[error("{pages:#x} pages overflow")]
    LengthOverflow {
        /// Pages asked for.
        pages: u64,
    },
    /// The bytes are not guest RAM (or run past 64 bits).
    #[error(transparent)]
    Ram(#[from] RamError),
}

/// Why a frame list is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameListError {
    /// `address + 8 * first` does not fit in 64 bits.
    #[error("entry {first:#x} of the list has no 64-bit address")]
    ArrayOverflow {
        /// First entry index read.
        first: u64,
    },
    /// The entries are not readable guest RAM.
    #[error("the list is not inside guest RAM")]
    ArrayNotRam,
    /// A listed frame has no 64-bit address, or its run of consecutive frames does not fit.
    #[error("frame {frame:#x} has no 64-bit address")]
    FrameOverflow {
        /// The first frame of the run.
        frame: u64,
    },
    /// A listed frame is not guest RAM.
    #[error(transparent)]
    Frame(RamError),
}

/// `pages` contiguous guest frames from `first`, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRun {
    bytes: RamRange,
}

impl FrameRun {
    /// Checks `pages` frames from frame number `first`.
    pub fn check<M: GuestMemoryBackend>(
        ram: &GuestRam<'_, M>,
        first: u64,
        pages: u64,
    ) -> Result<Self, FrameError> {
        let address = first
            .checked_mul(WDDM_GPU_PAGE_SIZE)
            .ok_or(FrameError::FrameOverflow { frame: first })?;
        let length = pages
            .checked_mul(WDDM_GPU_PAGE_SIZE)
            .ok_or(FrameError::LengthOverflow { pages })?;
        Ok(Self {
            bytes: ram.check(address, length)?,
        })
    }

    /// The first frame number.
    #[inline]
    pub fn first(self) -> u64 {
        self.bytes.start() >> WDDM_GPU_PAGE_SHIFT
    }

    /// Frames in the run.
    #[inline]
    pub fn pages(self) -> u64 {
        self.bytes.len() >> WDDM_GPU_PAGE_SHIFT
    }

    /// The frame numbers.
    #[inline]
    pub fn frames(self) -> std::ops::Range<u64> {
        self.first()..self.bytes.end() >> WDDM_GPU_PAGE_SHIFT
    }

    /// The frames' bytes.
    #[inline]
    pub fn bytes(self) -> RamRange {
        self.bytes
    }
}

/// A frame list copied into device memory with every frame checked; a reusable buffer (the
/// hot path does not allocate once it has grown). Its bytes in use start `start` bytes into the
/// first frame.
#[derive(Clone, Debug, Default)]
pub struct FrameList {
    frames: Vec<u64>,
    start: u64,
}

impl FrameList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties the list.
    pub fn clear(&mut self) {
        self.frames.clear();
        self.start = 0;
    }

    /// The checked frames.
    #[inline]
    pub fn frames(&self) -> &[u64] {
        &self.frames
    }

    /// Copies `count` little-endian frame numbers from entry `first` of the array at `address`,
    /// checks them, and has the bytes in use start `start` bytes into the first one. A refused
    /// list is left empty, so a list only ever holds checked frames.
    pub fn load<M: GuestMemoryBackend>(
        &mut self,
        ram: &GuestRam<'_, M>,
        address: u64,
        first: u64,
        count: u64,
        start: u64,
    ) -> Result<(), FrameListError> {
        let loaded = self.read(ram, address, first, count).and_then(|()| {
            check_frames(&self.frames, ram)?;
            Ok(())
        });
        match loaded {
            Ok(()) => self.start = start,
            Err(_) => self.clear(),
        }
        loaded
    }

    fn read<M: GuestMemoryBackend>(
        &mut self,
        ram: &GuestRam<'_, M>,
        address: u64,
        first: u64,
        count: u64,
    ) -> Result<(), FrameListError> {
        let at = first
            .checked_mul(8)
            .and_then(|bytes| address.checked_add(bytes))
            .ok_or(FrameListError::ArrayOverflow { first })?;
        let count = usize::try_from(count).map_err(|_| FrameListError::ArrayNotRam)?;
        // Every entry is overwritten below: a list of the same length as the last is not
        // zeroed first (a 262,144-frame map would write 2 MiB for nothing).
        self.frames.resize(count, 0);
        ram.read(at, self.frames.as_mut_slice().as_mut_bytes())
            .map_err(|_| FrameListError::ArrayNotRam)?;
        for frame in self.frames.iter_mut() {
            *frame = u64::from_le(*frame);
        }
        Ok(())
    }

    /// The run of contiguous bytes `position` bytes into the list's bytes in use, at most
    /// `limit` long (consecutive frames coalesce); `None` past the end of the list.
    #[inline]
    pub fn run_at(&self, position: u64, limit: u64) -> Option<RamRange> {
        let at = self.start.checked_add(position)?;
        let index = usize::try_from(at >> WDDM_GPU_PAGE_SHIFT).ok()?;
        let in_page = at & (WDDM_GPU_PAGE_SIZE - 1);
        checked_frames_run(&self.frames, index, in_page, limit)
    }
}

/// The run of contiguous bytes of checked `frames` from `in_page` bytes into `frames[index]`, at
/// most `limit` long; `None` when `index` is past the end. Every frame must have been checked
/// (by [`FrameList::load`] or [`FrameRun::check`]): consecutive checked frames end at a 64-bit
/// address, so the sums below fit.
#[inline]
pub(super) fn checked_frames_run(
    frames: &[u64],
    index: usize,
    in_page: u64,
    limit: u64,
) -> Option<RamRange> {
    let frame = *frames.get(index)?;
    debug_assert!(in_page < WDDM_GPU_PAGE_SIZE);
    let mut length = WDDM_GPU_PAGE_SIZE - in_page;
    let mut next = index + 1;
    while length < limit && next < frames.len() && frames[next] == frames[next - 1] + 1 {
        length += WDDM_GPU_PAGE_SIZE;
        next += 1;
    }
    RamRange::checked_before((frame << WDDM_GPU_PAGE_SHIFT) + in_page, length.min(limit))
}

/// Checks that every frame is guest RAM and not VRAM, one run of consecutive frames at a time.
/// Runs inside the RAM extent the previous lookup found need no lookup of their own, which
/// keeps a 262,144-frame map at a few nanoseconds per frame.
fn check_frames<M: GuestMemoryBackend>(
    frames: &[u64],
    ram: &GuestRam<'_, M>,
) -> Result<(), FrameListError> {
    if within_one_extent(frames, ram) {
        return Ok(());
    }
    let mut known_ram = 0..0;
    let mut index = 0;
    while index < frames.len() {
        let mut end = index + 1;
        while end < frames.len() && frames[end] == frames[end - 1].wrapping_add(1) {
            end += 1;
        }
        let frame = frames[index];
        let overflow = FrameListError::FrameOverflow { frame };
        // A list holds at most WDDM_GPU_MAX_FRAME_LIST_ENTRIES frames: the length fits.
        let bytes = u64::try_from(end - index)
            .ok()
            .and_then(|pages| pages.checked_mul(WDDM_GPU_PAGE_SIZE))
            .ok_or(overflow)?;
        let address = frame.checked_mul(WDDM_GPU_PAGE_SIZE).ok_or(overflow)?;
        // A run past 64 bits is the frame's overflow, not a RAM error.
        address.checked_add(bytes).ok_or(overflow)?;
        ram.check_within(&mut known_ram, address, bytes)
            .map_err(FrameListError::Frame)?;
        index = end;
    }
    Ok(())
}

/// Whether every frame lies in the RAM extent of the lowest one: the usual list (guest RAM is
/// one region below the PCI hole, or the frames are in one of them) settled by a min/max pass
/// the compiler vectorizes, instead of a walk run by run. `false` sends the list to that walk,
/// which finds the frame at fault.
fn within_one_extent<M: GuestMemoryBackend>(frames: &[u64], ram: &GuestRam<'_, M>) -> bool {
    let (lowest, highest) = frames
        .iter()
        .fold((u64::MAX, 0), |(lowest, highest), &frame| {
            (lowest.min(frame), highest.max(frame))
        });
    let (Some(start), Some(end)) = (
        lowest.checked_mul(WDDM_GPU_PAGE_SIZE),
        highest
            .checked_add(1)
            .and_then(|after| after.checked_mul(WDDM_GPU_PAGE_SIZE)),
    ) else {
        return false;
    };
    ram.ram_extent(start)
        .is_some_and(|extent| extent.start <= start && end <= extent.end)
}

#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    use super::*;

    const PAGE: u64 = WDDM_GPU_PAGE_SIZE;

    /// 1 MiB of RAM, a hole, 1 MiB more; the VRAM window at 0x300_0000.
    fn mem() -> GuestMemoryMmap<()> {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x10_0000),
            (GuestAddress(0x200_0000), 0x10_0000),
        ])
        .unwrap()
    }

    fn ram(mem: &GuestMemoryMmap<()>) -> GuestRam<'_, GuestMemoryMmap<()>> {
        GuestRam::new(mem, Some(0x300_0000..0x310_0000))
    }

    fn list_at(mem: &GuestMemoryMmap<()>, address: u64, frames: &[u64]) {
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(address)).unwrap();
    }

    #[test]
    fn frame_runs_accept_ram_up_to_the_region_end() {
        let mem = mem();
        let ram = ram(&mem);
        let run = FrameRun::check(&ram, 0, 0x100).unwrap();
        assert_eq!((run.first(), run.pages()), (0, 0x100));
        assert_eq!(run.frames(), 0..0x100);
        assert_eq!(run.bytes().end(), 0x10_0000);
        let last = FrameRun::check(&ram, 0x20ff, 1).unwrap();
        assert_eq!(last.bytes().start(), 0x20f_f000);
        assert_eq!(FrameRun::check(&ram, 5, 0).unwrap().pages(), 0);
    }

    #[test]
    fn frame_runs_refuse_overflow_holes_and_vram() {
        let mem = mem();
        let ram = ram(&mem);
        assert_eq!(
            FrameRun::check(&ram, 1 << 52, 1),
            Err(FrameError::FrameOverflow { frame: 1 << 52 })
        );
        assert_eq!(
            FrameRun::check(&ram, 0, 1 << 52),
            Err(FrameError::LengthOverflow { pages: 1 << 52 })
        );
        assert!(matches!(
            FrameRun::check(&ram, (1 << 52) - 1, 2),
            Err(FrameError::Ram(RamError::Overflow { .. }))
        ));
        assert_eq!(
            FrameRun::check(&ram, 0xff, 2),
            Err(FrameError::Ram(RamError::NotRam { address: 0x10_0000 }))
        );
        assert_eq!(
            FrameRun::check(&ram, 0x3000, 1),
            Err(FrameError::Ram(RamError::InVram {
                address: 0x300_0000
            }))
        );
    }

    #[test]
    fn lists_load_checked_frames_and_walk_them_in_coalesced_runs() {
        let mem = mem();
        let ram = ram(&mem);
        list_at(&mem, 0x8000, &[7, 0x10, 0x11, 0x12, 0x2000, 0xff]);
        let mut list = FrameList::new();
        // Entries 1..=5, bytes in use from 0x10 into the first.
        list.load(&ram, 0x8000, 1, 5, 0x10).unwrap();
        assert_eq!(list.frames(), [0x10, 0x11, 0x12, 0x2000, 0xff]);
        assert_eq!(
            list.run_at(0, u64::MAX),
            RamRange::checked_before(0x1_0010, 3 * PAGE - 0x10)
        );
        assert_eq!(
            list.run_at(3 * PAGE - 0x10, 5),
            RamRange::checked_before(0x200_0000, 5)
        );
        // The last frame ends the list.
        assert_eq!(
            list.run_at(4 * PAGE + 1, u64::MAX),
            RamRange::checked_before(0xf_f011, PAGE - 0x11)
        );
        assert_eq!(list.run_at(5 * PAGE, 1), None);
        assert_eq!(list.run_at(u64::MAX, 1), None);
    }

    #[test]
    fn one_extent_settles_a_list_only_when_every_frame_is_inside_it() {
        let mem = mem();
        let ram = ram(&mem);
        assert!(within_one_extent(&[0xff, 3, 0x80], &ram));
        assert!(within_one_extent(&[0x2000, 0x20ff], &ram));
        // Two regions, a frame past the first region's end, the VRAM window, overflow, nothing:
        // each left to the walk run by run.
        assert!(!within_one_extent(&[3, 0x2000], &ram));
        assert!(!within_one_extent(&[3, 0x100], &ram));
        assert!(!within_one_extent(&[0x3000], &ram));
        assert!(!within_one_extent(&[3, u64::MAX], &ram));
        assert!(!within_one_extent(&[], &ram));
        // Lists across both regions still load, by the walk.
        let mut list = FrameList::new();
        list_at(&mem, 0x8000, &[3, 0x2000]);
        list.load(&ram, 0x8000, 0, 2, 0).unwrap();
        assert_eq!(list.frames(), [3, 0x2000]);
    }

    #[test]
    fn refused_lists_are_left_empty() {
        let mem = mem();
        let ram = ram(&mem);
        let mut list = FrameList::new();
        list_at(&mem, 0x8000, &[1, 2]);
        list.load(&ram, 0x8000, 0, 2, 0).unwrap();
        for (frames, error) in [
            (
                [3, 0x3000],
                FrameListError::Frame(RamError::InVram {
                    address: 0x300_0000,
                }),
            ),
            (
                [3, 0x100],
                FrameListError::Frame(RamError::NotRam { address: 0x10_0000 }),
            ),
            (
                [3, u64::MAX],
                FrameListError::FrameOverflow { frame: u64::MAX },
            ),
            (
                [(1 << 52) - 1, 1 << 52],
                FrameListError::FrameOverflow {
                    frame: (1 << 52) - 1,
                },
            ),
        ] {
            list_at(&mem, 0x8000, &frames);
            assert_eq!(list.load(&ram, 0x8000, 0, 2, 0), Err(error));
            assert!(list.frames().is_empty());
        }
        assert_eq!(
            list.load(&ram, u64::MAX - 8, 2, 1, 0),
            Err(FrameListError::ArrayOverflow { first: 2 })
        );
        assert_eq!(
            list.load(&ram, 0xf_fff8, 0, 2, 0),
            Err(FrameListError::ArrayNotRam)
        );
    }
}
