//! The GART: one translation table per aperture segment, aperture page -> guest page frame.
//!
//! Tables hold one u64 per aperture page (a 1 GiB aperture costs 2 MiB), in leaves of 512
//! ([`table`]), and start with every entry unmapped. UNMAP points entries at a dummy page, so
//! device accesses through an unmapped range keep working; only an entry that was never mapped
//! (or was cleared by a reset) faults. The page range comes as [`AperturePages`] (built by
//! [`Gart::check_range`]) and the frames as a [`FrameRun`] or a [`PageArray`] whose every frame
//! is checked before any entry changes, so every entry holds a checked frame and walking entries
//! needs no overflow checks.

mod table;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

use self::table::{Table, NEVER_MAPPED};
use super::frames::{checked_frames_run, FrameListError, FrameRun, PageArray};
use super::guest_ram::RamRange;
use crate::layout::{SegmentKind, SegmentLayout, SegmentRange};

/// Why a table operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GartError {
    /// The segment is not an aperture.
    #[error("segment {0} is not an aperture")]
    NotAnAperture(u32),
    /// The page range is outside the aperture.
    #[error("pages {first:#x}+{count:#x} are outside aperture segment {segment}")]
    OutOfRange {
        /// Aperture segment id.
        segment: u32,
        /// First page.
        first: u64,
        /// Page count.
        count: u64,
    },
    /// An access reached a page that was never mapped.
    #[error("aperture segment {segment} page {page:#x} was never mapped")]
    Unmapped {
        /// Aperture segment id.
        segment: u32,
        /// The page.
        page: u64,
    },
}

/// One aperture's table.
#[derive(Clone, Debug)]
struct ApertureTable {
    segment: u32,
    entries: Table,
}

/// The translation tables of every aperture segment.
#[derive(Clone, Debug, Default)]
pub struct Gart {
    /// Indexed by segment id - 1; `None` for memory segments.
    tables: Vec<Option<ApertureTable>>,
}

/// `count` pages from `first` of aperture `segment`, checked by [`Gart::check_range`] to lie
/// inside its table: `first + count` fits and is at most the table's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AperturePages {
    segment: u32,
    first: u64,
    count: u64,
}

impl AperturePages {
    /// The aperture segment id.
    #[inline]
    pub fn segment(self) -> u32 {
        self.segment
    }

    /// First page.
    #[inline]
    pub fn first(self) -> u64 {
        self.first
    }

    /// Pages in the range.
    #[inline]
    pub fn count(self) -> u64 {
        self.count
    }

    /// One past the last page.
    #[inline]
    pub fn end(self) -> u64 {
        self.first + self.count
    }

    /// The page `index` pages in, clamped to the end.
    #[inline]
    fn page(self, index: usize) -> u64 {
        self.first + (index as u64).min(self.count)
    }

    /// The table indices (they fit: the table holds them).
    #[inline]
    fn indices(self) -> std::ops::Range<usize> {
        let index = |page: u64| usize::try_from(page).unwrap_or(usize::MAX);
        index(self.first)..index(self.end())
    }
}

/// A run of guest-physically contiguous bytes behind an aperture range, as plain values for
/// tests to compare (the engine walks [`Gart::ram_run_at`]'s checked ranges).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Guest-physical address of the first byte.
    pub address: u64,
    /// Bytes in the run.
    pub length: u64,
}

impl Gart {
    /// Empty tables for the layout's apertures.
    pub fn new(layout: &SegmentLayout) -> Self {
        let tables = layout
            .segments
            .iter()
            .map(|segment| match segment.kind {
                SegmentKind::Aperture => Some(ApertureTable {
                    segment: segment.id,
                    // Layout sizes are validated page multiples; a table beyond usize cannot be
                    // allocated anyway.
                    entries: Table::new((segment.size >> WDDM_GPU_PAGE_SHIFT) as usize),
                }),
                SegmentKind::Memory { .. } => None,
            })
            .collect();
        Self { tables }
    }

    /// Forgets every mapping (device reset).
    pub fn clear(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.entries.clear();
        }
    }

    fn table(&self, segment: u32) -> Result<&ApertureTable, GartError> {
        usize::try_from(segment.wrapping_sub(1))
            .ok()
            .and_then(|index| self.tables.get(index))
            .and_then(Option::as_ref)
            .ok_or(GartError::NotAnAperture(segment))
    }

    /// The table of checked pages (it exists and holds them).
    fn entries_mut(&mut self, pages: AperturePages) -> Option<&mut Table> {
        usize::try_from(pages.segment.wrapping_sub(1))
            .ok()
            .and_then(|index| self.tables.get_mut(index))
            .and_then(Option::as_mut)
            .map(|table| &mut table.entries)
    }

    /// Checks that `count` pages from `first` lie inside aperture `segment`.
    pub fn check_range(
        &self,
        segment: u32,
        first: u64,
        count: u64,
    ) -> Result<AperturePages, GartError> {
        let table = self.table(segment)?;
        match first.checked_add(count) {
            Some(end) if end <= table.entries.len() as u64 => Ok(AperturePages {
                segment,
                first,
                count,
            }),
            _ => Err(GartError::OutOfRange {
                segment,
                first,
                count,
            }),
        }
    }

    /// Maps the next `pages.count()` frames of `array` at `pages`, in order; a refused frame
    /// leaves every entry as it was.
    pub fn map<M: GuestMemoryBackend>(
        &mut self,
        pages: AperturePages,
        array: &mut PageArray<'_, '_, M>,
    ) -> Result<(), FrameListError> {
        match self.entries_mut(pages) {
            Some(entries) => entries.replace(pages.indices(), |piece| array.read_into(piece)),
            None => Ok(()),
        }
    }

    /// Maps the frames of `run` at `pages` (a contiguous ADL); the run must hold
    /// `pages.count()` frames.
    pub fn map_contiguous(&mut self, pages: AperturePages, run: FrameRun) -> Result<(), GartError> {
        if run.pages() != pages.count {
            return Err(GartError::OutOfRange {
                segment: pages.segment,
                first: pages.first,
                count: run.pages(),
            });
        }
        if let Some(entries) = self.entries_mut(pages) {
            let mut frames = run.frames();
            entries.write_each(pages.indices(), |piece| {
                for (entry, frame) in piece.iter_mut().zip(&mut frames) {
                    *entry = frame;
                }
            });
        }
        Ok(())
    }

    /// Points `pages` at the dummy frame (the first of `dummy`).
    pub fn unmap(&mut self, pages: AperturePages, dummy: FrameRun) {
        if let Some(entries) = self.entries_mut(pages) {
            entries.write_each(pages.indices(), |piece| piece.fill(dummy.first()));
        }
    }

    /// Checks that every page holding the bytes of `range` in aperture `segment` is mapped.
    pub fn check_mapped(&self, segment: u32, range: SegmentRange) -> Result<(), GartError> {
        let Some(last) = range.last() else {
            return Ok(());
        };
        let first = range.start() >> WDDM_GPU_PAGE_SHIFT;
        // The last byte is at or after the first: the page count is at least 1.
        let pages = self.check_range(segment, first, (last >> WDDM_GPU_PAGE_SHIFT) - first + 1)?;
        let table = self.table(segment)?;
        match table
            .entries
            .pieces(pages.indices())
            .flatten()
            .position(|&entry| entry == NEVER_MAPPED)
        {
            Some(index) => Err(GartError::Unmapped {
                segment,
                page: pages.page(index),
            }),
            None => Ok(()),
        }
    }

    /// [`Self::ram_run_at`] as plain values.
    #[cfg(test)]
    pub fn run_at(&self, segment: u32, offset: u64, limit: u64) -> Result<Run, GartError> {
        let run = self.ram_run_at(segment, offset, limit)?;
        Ok(Run {
            address: run.start(),
            length: run.len(),
        })
    }

    /// The run of contiguous guest bytes behind aperture `offset`, at most `limit` long:
    /// consecutive pages mapping consecutive frames coalesce into one run of checked frames.
    #[inline]
    pub fn ram_run_at(&self, segment: u32, offset: u64, limit: u64) -> Result<RamRange, GartError> {
        let table = self.table(segment)?;
        let page = offset >> WDDM_GPU_PAGE_SHIFT;
        let out_of_range = GartError::OutOfRange {
            segment,
            first: page,
            count: 1,
        };
        let index = usize::try_from(page).map_err(|_| out_of_range)?;
        match table.entries.leaf_of(index) {
            None => Err(out_of_range),
            Some((entries, at)) if entries[at] == NEVER_MAPPED => {
                Err(GartError::Unmapped { segment, page })
            }
            // Mapped entries hold checked frames (never NEVER_MAPPED, which no checked frame
            // reaches), so the run's sums fit. A run ends at its leaf's end at the latest.
            Some((entries, at)) => {
                checked_frames_run(entries, at, offset & (WDDM_GPU_PAGE_SIZE - 1), limit)
                    .ok_or(out_of_range)
            }
        }
    }

    /// The frame an aperture page maps, `None` if never mapped (for tests and diagnostics).
    pub fn entry(&self, segment: u32, page: u64) -> Option<u64> {
        let table = self.table(segment).ok()?;
        table
            .entries
            .get(usize::try_from(page).ok()?)
            .filter(|&frame| frame != NEVER_MAPPED)
    }

    /// The mapped pages of every aperture as runs of consecutive pages mapping consecutive
    /// frames (an UNMAP's pages, all on one dummy frame, are runs of one page), at most `most`
    /// runs; and how many runs were left out. Live inspection; never on a hot path.
    pub fn mapped_runs(&self, most: usize) -> (Vec<MappedRun>, usize) {
        let mut runs: Vec<MappedRun> = Vec::new();
        let mut left_out = 0;
        for table in self.tables.iter().flatten() {
            let mut current: Option<MappedRun> = None;
            for (page, frame) in (0u64..).zip(table.entries.iter()) {
                let extends = current.as_ref().is_some_and(|run| {
                    frame != NEVER_MAPPED
                        && run.first_page + run.pages == page
                        && run.first_frame.checked_add(run.pages) == Some(frame)
                });
                if extends {
                    if let Some(run) = current.as_mut() {
                        run.pages += 1;
                    }
                    continue;
                }
                if let Some(run) = current.take() {
                    push_bounded(&mut runs, &mut left_out, run, most);
                }
                if frame != NEVER_MAPPED {
                    current = Some(MappedRun {
                        segment: table.segment,
                        first_page: page,
                        pages: 1,
                        first_frame: frame,
                    });
                }
            }
            if let Some(run) = current {
                push_bounded(&mut runs, &mut left_out, run, most);
            }
        }
        (runs, left_out)
    }

    /// Aperture segment ids, for iteration.
    pub fn apertures(&self) -> impl Iterator<Item = u32> + '_ {
        self.tables.iter().flatten().map(|table| table.segment)
    }
}

/// Aperture pages mapping consecutive guest frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MappedRun {
    /// Aperture segment id.
    pub segment: u32,
    /// First aperture page.
    pub first_page: u64,
    /// Pages in the run.
    pub pages: u64,
    /// The guest frame the first page maps.
    pub first_frame: u64,
}

fn push_bounded(runs: &mut Vec<MappedRun>, left_out: &mut usize, run: MappedRun, most: usize) {
    if runs.len() < most {
        runs.push(run);
    } else {
        *left_out += 1;
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    use super::*;
    use crate::memory::guest_ram::{GuestRam, RamError};

    const PAGES: u64 = (512u64 << 20) >> 12;

    fn gart() -> Gart {
        Gart::new(&SegmentLayout::default_for_vram(1 << 24))
    }

    /// `length` bytes at `offset` of segment `segment`, resolved by the default layout.
    fn bytes(segment: u32, offset: u64, length: u64) -> SegmentRange {
        SegmentLayout::default_for_vram(1 << 24)
            .resolve(segment, offset, length)
            .unwrap()
            .range()
    }

    fn mem() -> GuestMemoryMmap<()> {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 24)]).unwrap()
    }

    /// Maps `frames` at `first` of aperture 2 through a checked list.
    fn map(gart: &mut Gart, mem: &GuestMemoryMmap<()>, first: u64, frames: &[u64]) {
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(0)).unwrap();
        let ram = GuestRam::new(mem, None);
        let pages = gart.check_range(2, first, frames.len() as u64).unwrap();
        gart.map(pages, &mut PageArray::new(&ram, 0, 0).unwrap())
            .unwrap();
    }

    fn run(mem: &GuestMemoryMmap<()>, first: u64, pages: u64) -> FrameRun {
        FrameRun::check(&GuestRam::new(mem, None), first, pages).unwrap()
    }

    #[test]
    fn only_apertures_have_tables_and_they_start_unmapped() {
        let gart = gart();
        assert_eq!(gart.apertures().collect::<Vec<_>>(), [2]);
        assert_eq!(
            gart.check_mapped(1, bytes(1, 0, 1)),
            Err(GartError::NotAnAperture(1))
        );
        assert_eq!(
            gart.check_mapped(2, bytes(2, 0x1000, 1)),
            Err(GartError::Unmapped {
                segment: 2,
                page: 1
            })
        );
        assert_eq!(gart.entry(2, 0), None);
    }

    #[test]
    fn runs_coalesce_consecutive_frames_and_stop_at_gaps() {
        let mut gart = gart();
        let mem = mem();
        map(&mut gart, &mem, 4, &[100, 101, 102, 200]);
        assert_eq!(
            gart.run_at(2, 4 * 4096 + 10, u64::MAX),
            Ok(Run {
                address: 100 * 4096 + 10,
                length: 3 * 4096 - 10
            })
        );
        assert_eq!(
            gart.run_at(2, 7 * 4096, u64::MAX),
            Ok(Run {
                address: 200 * 4096,
                length: 4096
            })
        );
        assert_eq!(
            gart.run_at(2, 4 * 4096, 5000),
            Ok(Run {
                address: 100 * 4096,
                length: 5000
            })
        );
        assert_eq!(
            gart.run_at(2, 8 * 4096, 1),
            Err(GartError::Unmapped {
                segment: 2,
                page: 8
            })
        );
        assert_eq!(gart.check_mapped(2, bytes(2, 4 * 4096, 4 * 4096)), Ok(()));
        assert_eq!(
            gart.check_mapped(2, bytes(2, 4 * 4096, 4 * 4096 + 1)),
            Err(GartError::Unmapped {
                segment: 2,
                page: 8
            })
        );
    }

    #[test]
    fn unmap_points_at_the_dummy_page_and_reset_clears() {
        let mut gart = gart();
        let mem = mem();
        let all = gart.check_range(2, 0, 8).unwrap();
        gart.map_contiguous(all, run(&mem, 1000, 8)).unwrap();
        gart.unmap(gart.check_range(2, 2, 3).unwrap(), run(&mem, 77, 1));
        let entries: Vec<_> = (0..8).map(|p| gart.entry(2, p)).collect();
        assert_eq!(
            entries,
            [
                Some(1000),
                Some(1001),
                Some(77),
                Some(77),
                Some(77),
                Some(1005),
                Some(1006),
                Some(1007)
            ]
        );
        assert_eq!(gart.check_mapped(2, bytes(2, 0, 8 * 4096)), Ok(()));
        // As inspection shows it: the dummy page's pages are runs of one.
        let run_of = |first_page, pages, first_frame| MappedRun {
            segment: 2,
            first_page,
            pages,
            first_frame,
        };
        assert_eq!(
            gart.mapped_runs(100),
            (
                vec![
                    run_of(0, 2, 1000),
                    run_of(2, 1, 77),
                    run_of(3, 1, 77),
                    run_of(4, 1, 77),
                    run_of(5, 3, 1005)
                ],
                0
            )
        );
        assert_eq!(
            gart.mapped_runs(2),
            (vec![run_of(0, 2, 1000), run_of(2, 1, 77)], 3)
        );
        gart.clear();
        assert_eq!(gart.entry(2, 0), None);
        assert_eq!(gart.mapped_runs(100), (vec![], 0));
    }

    #[test]
    fn ranges_outside_the_aperture_are_refused() {
        let gart = gart();
        assert!(gart.check_range(2, PAGES - 1, 2).is_err());
        assert!(gart.check_range(2, u64::MAX, 2).is_err());
        assert!(gart.check_range(2, PAGES, 1).is_err());
        assert!(gart.check_range(3, 0, 1).is_err());
        // A range running past 64 bits cannot even be built; one from a larger aperture runs
        // past the table.
        assert!(SegmentLayout::default_for_vram(1 << 24)
            .resolve(2, u64::MAX - 10, 100)
            .is_err());
        let mut larger = SegmentLayout::default_for_vram(1 << 24);
        larger.segments[1].size *= 2;
        let past = larger.resolve(2, (PAGES << 12) - 1, 2).unwrap().range();
        assert_eq!(
            gart.check_mapped(2, past),
            Err(GartError::OutOfRange {
                segment: 2,
                first: PAGES - 1,
                count: 2
            })
        );
        assert!(gart.run_at(2, PAGES << 12, 1).is_err());
        assert!(gart.run_at(2, u64::MAX, 1).is_err());
    }

    #[test]
    fn page_ranges_accept_the_edges() {
        let gart = gart();
        let last = gart.check_range(2, PAGES - 1, 1).unwrap();
        assert_eq!(
            (last.segment(), last.first(), last.count()),
            (2, PAGES - 1, 1)
        );
        assert_eq!(last.end(), PAGES);
        assert_eq!(
            gart.check_range(2, 0, PAGES).map(AperturePages::end),
            Ok(PAGES)
        );
        assert_eq!(
            gart.check_range(2, PAGES, 0).map(AperturePages::count),
            Ok(0)
        );
        assert_eq!(gart.check_range(1, 0, 0), Err(GartError::NotAnAperture(1)));
    }

    #[test]
    fn maps_need_as_many_frames_as_pages() {
        let mut gart = gart();
        let mem = mem();
        let pages = gart.check_range(2, 0, 2).unwrap();
        assert!(gart.map_contiguous(pages, run(&mem, 5, 3)).is_err());
        assert_eq!(gart.entry(2, 0), None);
    }

    #[test]
    fn a_map_across_leaves_is_whole_or_refused_whole() {
        let mut gart = gart();
        let mem = mem();
        // 1,500 pages from page 100: part of a leaf, two whole ones, part of a fourth.
        let frames: Vec<u64> = (0..1500).map(|i| 0x100 + 2 * i).collect();
        map(&mut gart, &mem, 100, &frames);
        let mapped: Vec<_> = (100..1600).map(|page| gart.entry(2, page)).collect();
        assert_eq!(mapped, frames.iter().map(|&f| Some(f)).collect::<Vec<_>>());
        assert_eq!((gart.entry(2, 99), gart.entry(2, 1600)), (None, None));
        // A frame past RAM in the last part: refused, and no page changed, not even those of
        // the parts and leaves read before it.
        let mut bad = frames.clone();
        bad[1499] = 1 << 20;
        let bytes: Vec<u8> = bad.iter().flat_map(|f| f.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(0x8000)).unwrap();
        let ram = GuestRam::new(&mem, None);
        let pages = gart.check_range(2, 0, 1500).unwrap();
        let refused = gart.map(pages, &mut PageArray::new(&ram, 0x8000, 0).unwrap());
        assert_eq!(
            refused,
            Err(FrameListError::Frame(RamError::NotRam { address: 1 << 32 }))
        );
        assert_eq!(gart.entry(2, 0), None);
        let unchanged: Vec<_> = (100..1600).map(|page| gart.entry(2, page)).collect();
        assert_eq!(unchanged, mapped);
        // Runs of consecutive frames end at a leaf's end.
        let all = gart.check_range(2, 0, 1024).unwrap();
        gart.map_contiguous(all, run(&mem, 0x800, 1024)).unwrap();
        assert_eq!(
            gart.run_at(2, 500 * 4096, u64::MAX),
            Ok(Run {
                address: 0x800 * 4096 + 500 * 4096,
                length: 12 * 4096
            })
        );
    }
}
