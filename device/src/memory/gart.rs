//! The GART: one translation table per aperture segment, aperture page -> guest page frame.
//!
//! Tables are flat arrays (one u64 per aperture page, so a 1 GiB aperture costs 2 MiB) and
//! start with every entry unmapped. UNMAP points entries at a dummy page, so device accesses
//! through an unmapped range keep working; only an entry that was never mapped (or was cleared
//! by a reset) faults. Callers check a whole request before calling [`Gart::map`]: these
//! methods only refuse what would break the table itself.

use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

use crate::layout::{SegmentKind, SegmentLayout};

/// Entry value of a page that was never mapped.
const NEVER_MAPPED: u64 = u64::MAX;

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
struct Table {
    segment: u32,
    entries: Vec<u64>,
}

/// The translation tables of every aperture segment.
#[derive(Clone, Debug, Default)]
pub struct Gart {
    /// Indexed by segment id - 1; `None` for memory segments.
    tables: Vec<Option<Table>>,
}

/// A run of guest-physically contiguous bytes behind an aperture range.
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
                SegmentKind::Aperture => Some(Table {
                    segment: segment.id,
                    // Layout sizes are validated page multiples; a table beyond usize cannot be
                    // allocated anyway.
                    entries: vec![NEVER_MAPPED; (segment.size >> WDDM_GPU_PAGE_SHIFT) as usize],
                }),
                SegmentKind::Memory { .. } => None,
            })
            .collect();
        Self { tables }
    }

    /// Forgets every mapping (device reset).
    pub fn clear(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.entries.fill(NEVER_MAPPED);
        }
    }

    fn table(&self, segment: u32) -> Result<&Table, GartError> {
        usize::try_from(segment.wrapping_sub(1))
            .ok()
            .and_then(|index| self.tables.get(index))
            .and_then(Option::as_ref)
            .ok_or(GartError::NotAnAperture(segment))
    }

    fn range(&mut self, segment: u32, first: u64, count: u64) -> Result<&mut [u64], GartError> {
        let out_of_range = GartError::OutOfRange {
            segment,
            first,
            count,
        };
        let index = usize::try_from(segment.wrapping_sub(1))
            .map_err(|_| GartError::NotAnAperture(segment))?;
        let table = self
            .tables
            .get_mut(index)
            .and_then(Option::as_mut)
            .ok_or(GartError::NotAnAperture(segment))?;
        let end = first.checked_add(count).ok_or(out_of_range)?;
        if end > table.entries.len() as u64 {
            return Err(out_of_range);
        }
        Ok(&mut table.entries[first as usize..end as usize])
    }

    /// Checks that `count` pages from `first` lie inside aperture `segment`.
    pub fn check_range(&self, segment: u32, first: u64, count: u64) -> Result<(), GartError> {
        let table = self.table(segment)?;
        match first.checked_add(count) {
            Some(end) if end <= table.entries.len() as u64 => Ok(()),
            _ => Err(GartError::OutOfRange {
                segment,
                first,
                count,
            }),
        }
    }

    /// Maps `frames[i]` at page `first + i`.
    pub fn map(&mut self, segment: u32, first: u64, frames: &[u64]) -> Result<(), GartError> {
        self.range(segment, first, frames.len() as u64)?
            .copy_from_slice(frames);
        Ok(())
    }

    /// Maps `count` consecutive frames from `base` at page `first` (a contiguous ADL).
    pub fn map_contiguous(
        &mut self,
        segment: u32,
        first: u64,
        count: u64,
        base: u64,
    ) -> Result<(), GartError> {
        for (i, entry) in self.range(segment, first, count)?.iter_mut().enumerate() {
            *entry = base + i as u64;
        }
        Ok(())
    }

    /// Points `count` pages from `first` at the dummy frame.
    pub fn unmap(
        &mut self,
        segment: u32,
        first: u64,
        count: u64,
        dummy: u64,
    ) -> Result<(), GartError> {
        self.range(segment, first, count)?.fill(dummy);
        Ok(())
    }

    /// Checks that every page holding `[offset, offset + length)` of the aperture is mapped.
    pub fn check_mapped(&self, segment: u32, offset: u64, length: u64) -> Result<(), GartError> {
        if length == 0 {
            return Ok(());
        }
        let table = self.table(segment)?;
        let first = offset >> WDDM_GPU_PAGE_SHIFT;
        let last = offset
            .checked_add(length - 1)
            .ok_or(GartError::OutOfRange {
                segment,
                first,
                count: 0,
            })?
            >> WDDM_GPU_PAGE_SHIFT;
        let entries =
            table
                .entries
                .get(first as usize..=last as usize)
                .ok_or(GartError::OutOfRange {
                    segment,
                    first,
                    count: last - first + 1,
                })?;
        match entries.iter().position(|&entry| entry == NEVER_MAPPED) {
            Some(index) => Err(GartError::Unmapped {
                segment,
                page: first + index as u64,
            }),
            None => Ok(()),
        }
    }

    /// The run of contiguous guest bytes behind aperture `offset`, at most `limit` long:
    /// consecutive pages mapping consecutive frames coalesce into one run.
    pub fn run_at(&self, segment: u32, offset: u64, limit: u64) -> Result<Run, GartError> {
        let table = self.table(segment)?;
        let page = offset >> WDDM_GPU_PAGE_SHIFT;
        let entries = &table.entries;
        let frame = *entries.get(page as usize).ok_or(GartError::OutOfRange {
            segment,
            first: page,
            count: 1,
        })?;
        if frame == NEVER_MAPPED {
            return Err(GartError::Unmapped { segment, page });
        }
        let in_page = offset & (WDDM_GPU_PAGE_SIZE - 1);
        let mut length = WDDM_GPU_PAGE_SIZE - in_page;
        let mut next = page as usize + 1;
        while length < limit
            && next < entries.len()
            && entries[next] == entries[next - 1].wrapping_add(1)
        {
            length += WDDM_GPU_PAGE_SIZE;
            next += 1;
        }
        Ok(Run {
            address: (frame << WDDM_GPU_PAGE_SHIFT) + in_page,
            length: length.min(limit),
        })
    }

    /// The frame an aperture page maps, `None` if never mapped (for tests and diagnostics).
    pub fn entry(&self, segment: u32, page: u64) -> Option<u64> {
        let table = self.table(segment).ok()?;
        table
            .entries
            .get(usize::try_from(page).ok()?)
            .copied()
            .filter(|&frame| frame != NEVER_MAPPED)
    }

    /// Aperture segment ids, for iteration.
    pub fn apertures(&self) -> impl Iterator<Item = u32> + '_ {
        self.tables.iter().flatten().map(|table| table.segment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gart() -> Gart {
        Gart::new(&SegmentLayout::default_for_vram(1 << 24))
    }

    #[test]
    fn only_apertures_have_tables_and_they_start_unmapped() {
        let gart = gart();
        assert_eq!(gart.apertures().collect::<Vec<_>>(), [2]);
        assert_eq!(gart.check_mapped(1, 0, 1), Err(GartError::NotAnAperture(1)));
        assert_eq!(
            gart.check_mapped(2, 0x1000, 1),
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
        gart.map(2, 4, &[100, 101, 102, 200]).unwrap();
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
        assert_eq!(gart.check_mapped(2, 4 * 4096, 4 * 4096), Ok(()));
        assert_eq!(
            gart.check_mapped(2, 4 * 4096, 4 * 4096 + 1),
            Err(GartError::Unmapped {
                segment: 2,
                page: 8
            })
        );
    }

    #[test]
    fn unmap_points_at_the_dummy_page_and_reset_clears() {
        let mut gart = gart();
        gart.map_contiguous(2, 0, 8, 1000).unwrap();
        gart.unmap(2, 2, 3, 77).unwrap();
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
        assert_eq!(gart.check_mapped(2, 0, 8 * 4096), Ok(()));
        gart.clear();
        assert_eq!(gart.entry(2, 0), None);
    }

    #[test]
    fn ranges_outside_the_aperture_are_refused() {
        let mut gart = gart();
        let pages = (512u64 << 20) >> 12;
        assert!(gart.map(2, pages - 1, &[1, 2]).is_err());
        assert!(gart.unmap(2, u64::MAX, 2, 1).is_err());
        assert!(gart.check_range(2, pages, 1).is_err());
        assert_eq!(gart.check_range(2, pages - 1, 1), Ok(()));
        assert!(gart.map_contiguous(3, 0, 1, 0).is_err());
        assert!(gart.check_mapped(2, u64::MAX - 10, 100).is_err());
    }
}
