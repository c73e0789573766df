//! The page-table walk: from the root to the entry that maps an address, bounded by the level
//! count (so a hostile table that points back at itself costs at most one read per level and
//! never loops), reading every entry through [`TableMemory`] so that where the tables live
//! (guest RAM, a VRAM segment, a test's map) is not the walker's business.

use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_64KB_PAGE_INDEX_BITS, WDDM_GPU_MMU_CAP_LARGE_PAGE, WDDM_GPU_PTE_ADDRESS_MASK,
    WDDM_GPU_PTE_LARGE_PAGE, WDDM_GPU_PTE_NO_EXECUTE, WDDM_GPU_PTE_PAGE_TABLE_64KB,
    WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_RESERVED_MASK, WDDM_GPU_PTE_SEGMENT_MASK,
    WDDM_GPU_PTE_SEGMENT_SHIFT, WDDM_GPU_PTE_VALID, WDDM_GPU_PTE_ZERO,
};

use super::fault::{Access, FaultKind, MmuFault};

/// Most levels a geometry has.
pub const MAX_LEVELS: usize = 6;

/// log2 of a 64 KiB page.
const SHIFT_64K: u32 = 16;

/// Where a page table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableAddress {
    /// 0 for guest system memory, else a memory segment id.
    pub segment: u32,
    /// A guest-physical address, or an offset in the segment.
    pub address: u64,
}

/// Where a page's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Guest system memory at this guest-physical address.
    System(u64),
    /// A memory segment at this offset.
    Segment {
        /// Segment id.
        segment: u32,
        /// Offset in the segment.
        offset: u64,
    },
    /// Reads return zeros, writes are dropped (`DXGK_PTE.Zero`).
    Zero,
}

impl Target {
    /// The same store `bytes` further on (`None` for [`Target::Zero`] or past 64 bits).
    #[inline]
    pub fn advanced(self, bytes: u64) -> Option<Target> {
        match self {
            Target::System(address) => address.checked_add(bytes).map(Target::System),
            Target::Segment { segment, offset } => offset
                .checked_add(bytes)
                .map(|offset| Target::Segment { segment, offset }),
            Target::Zero => Some(Target::Zero),
        }
    }
}

/// What the device reads page tables and checks pages through.
pub trait TableMemory {
    /// Entry `index` of the table at `table` (the walker keeps `index` below the level's
    /// entries).
    fn read_entry(&self, table: TableAddress, index: u64) -> Result<u64, FaultKind>;

    /// Whether the `size` bytes at `target` are storage a page may map.
    fn check_page(&self, target: Target, size: u64) -> Result<(), FaultKind>;
}

/// The root a context binds (`DxgkDdiSetRootPageTable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// Where the root table is.
    pub table: TableAddress,
    /// `NumEntries`: a root index at or past it faults.
    pub entries: u64,
}

/// One mapped page, as a walk found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// The first virtual address of the page.
    pub base: u64,
    /// log2 of its size (12, 16, or a large page's level coverage).
    pub shift: u32,
    /// Where its first byte is.
    pub target: Target,
    /// The level of the entry that maps it.
    pub level: u32,
    /// The highest level whose entry on the walk is read-only.
    pub read_only: Option<u32>,
    /// The highest level whose entry on the walk is no-execute.
    pub no_execute: Option<u32>,
    /// The mapping entry.
    pub entry: u64,
}

impl Page {
    /// Bytes of the page.
    #[inline]
    pub fn size(&self) -> u64 {
        1 << self.shift
    }

    /// Whether `access` is allowed; the fault names the level whose entry forbids it.
    #[inline]
    pub fn allows(&self, address: u64, access: Access) -> Result<(), MmuFault> {
        let denied = match access {
            Access::Read => None,
            Access::Write => self.read_only.map(|level| (FaultKind::ReadOnly, level)),
            Access::Execute => self.no_execute.map(|level| (FaultKind::NoExecute, level)),
        };
        match denied {
            None => Ok(()),
            Some((kind, level)) => Err(MmuFault {
                kind,
                address,
                level,
                access,
                entry: self.entry,
            }),
        }
    }

    /// Where `address` (inside the page) is.
    #[inline]
    pub fn target_of(&self, address: u64) -> Target {
        let within = address - self.base;
        self.target.advanced(within).unwrap_or(Target::Zero)
    }
}

/// A finished walk: the page and every entry read on the way (by level), for the checking mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The page.
    pub page: Page,
    /// `path[level]`: the entry read at that level (0 below the mapping level).
    pub path: [u64; MAX_LEVELS],
}

/// Walks the tables under `root` for `address`. Permissions are not checked here (a cached
/// page is checked the same way, see [`Page::allows`]); everything about the tables and the
/// mapped storage is.
pub fn walk<T: TableMemory>(
    geometry: &MmuGeometry,
    root: &Root,
    address: u64,
    access: Access,
    tables: &T,
) -> Result<Walk, MmuFault> {
    let mut path = [0; MAX_LEVELS];
    let page = walk_path(geometry, root, address, access, tables, &mut path)?;
    Ok(Walk { page, path })
}

/// [`walk`], leaving every entry it read in `path` (by level) whether it succeeds or not.
pub fn walk_path<T: TableMemory>(
    geometry: &MmuGeometry,
    root: &Root,
    address: u64,
    access: Access,
    tables: &T,
    path: &mut [u64; MAX_LEVELS],
) -> Result<Page, MmuFault> {
    let top = geometry.root_level();
    let fault = |kind, level, entry| MmuFault {
        kind,
        address,
        level,
        access,
        entry,
    };
    if address >= geometry.address_limit() {
        return Err(fault(FaultKind::AddressRange, top, 0));
    }
    let mut table = root.table;
    let mut leaf_64k = false;
    let mut read_only = None;
    let mut no_execute = None;
    for level in (0..=top).rev() {
        let Some(desc) = geometry.level(level) else {
            break;
        };
        let (shift, bits) = if level == 0 && leaf_64k {
            (SHIFT_64K, desc.index_bits() - WDDM_GPU_64KB_PAGE_INDEX_BITS)
        } else {
            (desc.shift(), desc.index_bits())
        };
        let index = (address >> shift) & ((1 << bits) - 1);
        if level == top && index >= root.entries {
            return Err(fault(FaultKind::RootOverrun, level, 0));
        }
        let entry = tables
            .read_entry(table, index)
            .map_err(|kind| fault(kind, level, 0))?;
        path[level as usize] = entry;
        if entry & WDDM_GPU_PTE_RESERVED_MASK != 0 {
            return Err(fault(FaultKind::ReservedBits, level, entry));
        }
        if entry & WDDM_GPU_PTE_VALID == 0 {
            return Err(fault(FaultKind::NotPresent, level, entry));
        }
        if entry & WDDM_GPU_PTE_READ_ONLY != 0 {
            read_only = read_only.or(Some(level));
        }
        if entry & WDDM_GPU_PTE_NO_EXECUTE != 0 {
            no_execute = no_execute.or(Some(level));
        }
        let large = entry & WDDM_GPU_PTE_LARGE_PAGE != 0;
        let table_64k = entry & WDDM_GPU_PTE_PAGE_TABLE_64KB != 0;
        let maps_page = level == 0 || large || entry & WDDM_GPU_PTE_ZERO != 0;
        let bad_flags = (level == 0 && (large || table_64k))
            || (large && geometry.caps().flags & WDDM_GPU_MMU_CAP_LARGE_PAGE == 0)
            || (table_64k && (level != 1 || large));
        if bad_flags {
            return Err(fault(FaultKind::BadFlags, level, entry));
        }
        let segment =
            u32::try_from((entry & WDDM_GPU_PTE_SEGMENT_MASK) >> WDDM_GPU_PTE_SEGMENT_SHIFT)
                .unwrap_or(u32::MAX);
        let target_address = entry & WDDM_GPU_PTE_ADDRESS_MASK;
        if !maps_page {
            table = TableAddress {
                segment,
                address: target_address,
            };
            leaf_64k = table_64k;
            continue;
        }
        let shift = if level == 0 { shift } else { desc.shift() };
        let size = 1u64 << shift;
        let target = if entry & WDDM_GPU_PTE_ZERO != 0 {
            Target::Zero
        } else {
            if target_address & (size - 1) != 0 {
                return Err(fault(FaultKind::Misaligned, level, entry));
            }
            let target = match segment {
                0 => Target::System(target_address),
                segment => Target::Segment {
                    segment,
                    offset: target_address,
                },
            };
            tables
                .check_page(target, size)
                .map_err(|kind| fault(kind, level, entry))?;
            target
        };
        let page = Page {
            base: address & !(size - 1),
            shift,
            target,
            level,
            read_only,
            no_execute,
            entry,
        };
        return Ok(page);
    }
    // Unreachable with a checked geometry: every walk ends at level 0.
    Err(fault(FaultKind::NotPresent, 0, 0))
}
