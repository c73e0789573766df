//! Guest page frames that were checked: a run of contiguous frames ([`FrameRun`]), a frame list
//! copied out of the guest ([`FrameList`]), and a guest page array read piece by piece into
//! wherever its frames go ([`PageArray`]). A checked frame `f` is guest RAM outside the
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
    #[cfg(test)]
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
        let loaded = self.read(ram, address, first, count);
        match loaded {
            Ok(()) => self.start = start,
            Err(_) => self.clear(),
        }
        loaded
    }

    /// Copies the entries in, a cache-sized chunk at a time, each checked while it is in the
    /// cache (a separate pass would read the whole list again).
    fn read<M: GuestMemoryBackend>(
        &mut self,
        ram: &GuestRam<'_, M>,
        address: u64,
        first: u64,
        count: u64,
    ) -> Result<(), FrameListError> {
        let mut array = PageArray::new(ram, address, first)?;
        let count = usize::try_from(count).map_err(|_| FrameListError::ArrayNotRam)?;
        // Every entry is overwritten below: a list of the same length as the last is not
        // zeroed first (a 262,144-frame map would write 2 MiB for nothing).
        self.frames.resize(count, 0);
        for chunk in self.frames.chunks_mut(CHECK_CHUNK_ENTRIES) {
            array.read_into(chunk)?;
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

/// A guest array of little-endian frame numbers, read in pieces in order, every frame of a piece
/// checked as it lands.
pub struct PageArray<'r, 'a, M: GuestMemoryBackend> {
    ram: &'r GuestRam<'a, M>,
    /// The address of the next entry.
    next: u64,
    /// The extent of the first frame, once read (`None` inside when that frame is not RAM).
    extent: Option<Option<ExtentFrames>>,
}

impl<'r, 'a, M: GuestMemoryBackend> PageArray<'r, 'a, M> {
    /// The array at `address`, from entry `first` on.
    pub fn new(ram: &'r GuestRam<'a, M>, address: u64, first: u64) -> Result<Self, FrameListError> {
        let next = first
            .checked_mul(8)
            .and_then(|bytes| address.checked_add(bytes))
            .ok_or(FrameListError::ArrayOverflow { first })?;
        Ok(Self {
            ram,
            next,
            extent: None,
        })
    }

    /// Reads the next `frames.len()` entries into `frames` and checks them. A piece in the RAM
    /// extent of the array's first frame (the usual case) is settled by a pass the compiler
    /// vectorizes; any other is walked run by run, which names the frame at fault.
    pub fn read_into(&mut self, frames: &mut [u64]) -> Result<(), FrameListError> {
        if frames.is_empty() {
            return Ok(());
        }
        let bytes = frames.as_mut_bytes();
        self.ram
            .read(self.next, bytes)
            .map_err(|_| FrameListError::ArrayNotRam)?;
        self.next = self
            .next
            .checked_add(bytes.len() as u64)
            .ok_or(FrameListError::ArrayNotRam)?;
        for frame in frames.iter_mut() {
            *frame = u64::from_le(*frame);
        }
        let ram = self.ram;
        let extent = *self
            .extent
            .get_or_insert_with(|| ExtentFrames::of(frames[0], ram));
        if !extent.is_some_and(|extent| extent.holds(frames)) {
            walk_frames(frames, ram)?;
        }
        Ok(())
    }
}

/// The run of contiguous bytes of checked `frames` from `in_page` bytes into `frames[index]`, at
/// most `limit` long; `None` when `index` is past the end. Every frame must have been checked
/// (by [`FrameList::load`], [`PageArray::read_into`] or [`FrameRun::check`]): consecutive
/// checked frames end at a 64-bit address, so the sums below fit.
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

/// Checks that every frame is guest RAM and not VRAM, one run of consecutive frames at a time,
/// naming the frame at fault. Runs inside the RAM extent the previous lookup found need no
/// lookup of their own.
fn walk_frames<M: GuestMemoryBackend>(
    frames: &[u64],
    ram: &GuestRam<'_, M>,
) -> Result<(), FrameListError> {
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

/// Entries read and checked at a time: 32 KiB, well inside a core's L1 data cache.
const CHECK_CHUNK_ENTRIES: usize = 4096;

/// The frames of a RAM extent, `lowest..=highest`: the usual list (guest RAM is one region below
/// the PCI hole, or the frames are in one of them) lies in the extent of its first frame, and is
/// settled by a pass the compiler vectorizes instead of a walk run by run.
#[derive(Clone, Copy)]
struct ExtentFrames {
    lowest: u64,
    highest: u64,
}

impl ExtentFrames {
    /// The frames of the RAM extent holding `frame`, if it is RAM.
    fn of<M: GuestMemoryBackend>(frame: u64, ram: &GuestRam<'_, M>) -> Option<Self> {
        let extent = ram.ram_extent(frame.checked_mul(WDDM_GPU_PAGE_SIZE)?)?;
        Some(Self {
            lowest: extent.start.div_ceil(WDDM_GPU_PAGE_SIZE),
            highest: (extent.end / WDDM_GPU_PAGE_SIZE).checked_sub(1)?,
        })
    }

    /// Whether every frame is inside. Subtractions and ORs only (x86-64's baseline has no 64-bit
    /// compare or min/max to vectorize): a frame inside leaves both `frame - lowest` and
    /// `highest - frame` below 2^63, and one outside makes one of them wrap to 2^63 or more (an
    /// extent spans less than 2^52 frames).
    fn holds(self, frames: &[u64]) -> bool {
        let outside = frames.iter().fold(0, |outside, &frame| {
            outside | frame.wrapping_sub(self.lowest) | self.highest.wrapping_sub(frame)
        });
        outside >> 63 == 0
    }
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
        let in_first_extent = |frames: &[u64]| {
            ExtentFrames::of(frames[0], &ram).is_some_and(|extent| extent.holds(frames))
        };
        assert!(in_first_extent(&[0xff, 3, 0, 0x80]));
        assert!(in_first_extent(&[0x2000, 0x20ff]));
        // The other region, past the first region's end, below the second's start, the VRAM
        // window, past 2^63 or at the top (where a subtraction wraps back), overflow: each left
        // to the walk run by run.
        assert!(!in_first_extent(&[3, 0x2000]));
        assert!(!in_first_extent(&[3, 0x100]));
        assert!(!in_first_extent(&[0x2000, 0x1fff]));
        assert!(!in_first_extent(&[0x3000]));
        assert!(!in_first_extent(&[3, 1 << 63 | 3]));
        assert!(!in_first_extent(&[0x2000, u64::MAX - 0x2000]));
        assert!(!in_first_extent(&[3, u64::MAX]));
        assert!(!in_first_extent(&[u64::MAX]));
        // Lists across both regions still load, by the walk.
        let mut list = FrameList::new();
        list_at(&mem, 0x8000, &[3, 0x2000]);
        list.load(&ram, 0x8000, 0, 2, 0).unwrap();
        assert_eq!(list.frames(), [3, 0x2000]);
    }

    #[test]
    fn a_long_list_is_checked_in_every_chunk() {
        let mem = mem();
        let ram = ram(&mem);
        let count = 2 * CHECK_CHUNK_ENTRIES + 5;
        let mut frames: Vec<u64> = (0..count as u64).map(|i| i % 0x100).collect();
        list_at(&mem, 0x4_0000, &frames);
        let mut list = FrameList::new();
        list.load(&ram, 0x4_0000, 0, count as u64, 0).unwrap();
        assert_eq!(list.frames(), frames);
        // A bad frame in the second chunk, then in the short last one: refused, named.
        for at in [CHECK_CHUNK_ENTRIES + 7, count - 1] {
            let mut bad = frames.clone();
            bad[at] = 0x3000;
            list_at(&mem, 0x4_0000, &bad);
            assert_eq!(
                list.load(&ram, 0x4_0000, 0, count as u64, 0),
                Err(FrameListError::Frame(RamError::InVram {
                    address: 0x300_0000
                }))
            );
            assert!(list.frames().is_empty());
        }
        // The other region in a later chunk only: loaded by the walk.
        frames[count - 2] = 0x20ff;
        list_at(&mem, 0x4_0000, &frames);
        list.load(&ram, 0x4_0000, 0, count as u64, 0).unwrap();
        assert_eq!(list.frames(), frames);
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
