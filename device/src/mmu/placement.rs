//! Where a walk found its page tables, held against where the layout says a level's tables live
//! (`DXGK_PAGE_TABLE_LEVEL_DESC.PageTableSegmentId` and `PagingProcessPageTableSegmentId`). The
//! walker, as hardware, follows an entry to a table wherever it points, so a table elsewhere
//! still works; but VidMm places every page table in its level's segment, so one found in
//! another segment is a KMD bug (an entry built with the wrong segment) or a placement the
//! driver made itself. The checking mode notes each such table once, for the checker.

use wddm_gpu_abi::gpummu_rules::{MmuGeometry, TableOwner};
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_PTE_ADDRESS_MASK, WDDM_GPU_PTE_SEGMENT_MASK, WDDM_GPU_PTE_SEGMENT_SHIFT,
};

use super::walk::{Root, TableAddress, Walk};

/// A page table a walk went through outside the segments its level's tables live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MisplacedTable {
    /// The GPU virtual address whose walk went through it.
    pub address: u64,
    /// The table's level (0 = a leaf table).
    pub level: u32,
    /// Where it is.
    pub table: TableAddress,
    /// The segments the layout declares for the level: `PageTableSegmentId`, then
    /// `PagingProcessPageTableSegmentId` (0 = system memory).
    pub declared: [u32; 2],
}

/// Misplaced tables kept for the caller to take; more are dropped until it takes them.
const PENDING_KEPT: usize = 8;
/// Tables remembered as reported, so a table is reported once (a later one past this many is
/// reported again: a bound on memory, not on correctness).
const SEEN_KEPT: usize = 64;

/// What one address space's checking mode found about table placement.
#[derive(Default)]
pub struct Placement {
    pending: Vec<MisplacedTable>,
    seen: Vec<(u32, TableAddress)>,
}

impl Placement {
    /// Notes every table of `walk` (from `root`) outside its level's segments, each table once.
    pub fn check(&mut self, geometry: &MmuGeometry, root: &Root, walk: &Walk, address: u64) {
        for (level, table) in tables(geometry, root, walk) {
            let Some(desc) = geometry.level(level) else {
                continue;
            };
            let declared = [
                desc.table_segment(TableOwner::Process),
                desc.table_segment(TableOwner::PagingProcess),
            ];
            if declared.contains(&table.segment) || self.seen.contains(&(level, table)) {
                continue;
            }
            if self.seen.len() == SEEN_KEPT {
                self.seen.remove(0);
            }
            self.seen.push((level, table));
            if self.pending.len() < PENDING_KEPT {
                self.pending.push(MisplacedTable {
                    address,
                    level,
                    table,
                    declared,
                });
            }
        }
    }

    /// The misplaced tables found since the last call.
    pub fn take(&mut self) -> Vec<MisplacedTable> {
        std::mem::take(&mut self.pending)
    }
}

/// The tables `walk` read, by level: the root, then the table each directory entry above the
/// mapping level points at.
fn tables<'w>(
    geometry: &MmuGeometry,
    root: &Root,
    walk: &'w Walk,
) -> impl Iterator<Item = (u32, TableAddress)> + 'w {
    let top = geometry.root_level();
    let root_table = root.table;
    let below = (walk.page.level..top).rev().filter_map(move |level| {
        let entry = *walk.path.get(usize::try_from(level + 1).ok()?)?;
        let segment = (entry & WDDM_GPU_PTE_SEGMENT_MASK) >> WDDM_GPU_PTE_SEGMENT_SHIFT;
        Some((
            level,
            TableAddress {
                segment: u32::try_from(segment).ok()?,
                address: entry & WDDM_GPU_PTE_ADDRESS_MASK,
            },
        ))
    });
    std::iter::once((top, root_table)).chain(below)
}
