//! The page-table walk: from the root to the entry that maps an address, bounded by the level
//! count (so a hostile table that points back at itself costs at most one read per level and
//! never loops), reading every entry through [`TableMemory`] so that where the tables live
//! (guest RAM, a VRAM segment, a test's map) is not the walker's business.

use std::ops::Range;

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

    /// The same store at another address (a [`Target::Zero`] stays one).
    #[inline]
    fn at(self, address: u64) -> Target {
        match self {
            Target::System(_) => Target::System(address),
            Target::Segment { segment, .. } => Target::Segment {
                segment,
                offset: address,
            },
            Target::Zero => Target::Zero,
        }
    }
}

/// What the device reads page tables and checks pages through.
pub trait TableMemory {
    /// Entry `index` of the table at `table` (the walker keeps `index` below the level's
    /// entries).
    fn read_entry(&self, table: TableAddress, index: u64) -> Result<u64, FaultKind>;

    /// Entries `first..first + out.len()` of the table at `table`, inside the table (a line
    /// of a leaf table, see [`Leaf::line`]); one read where the memory allows it.
    fn read_entries(
        &self,
        table: TableAddress,
        first: u64,
        out: &mut [u64],
    ) -> Result<(), FaultKind> {
        for (index, entry) in (first..).zip(out.iter_mut()) {
            *entry = self.read_entry(table, index)?;
        }
        Ok(())
    }

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
    /// The highest level whose entry on the walk is read-only, with that entry.
    pub read_only: Option<Denial>,
    /// The highest level whose entry on the walk is no-execute, with that entry.
    pub no_execute: Option<Denial>,
    /// The mapping entry.
    pub entry: u64,
}

/// The entry on a walk that forbids an access (read-only, no-execute) and its level: what the
/// fault record names, since that entry, not the mapping one, carries the bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The entry's level (0 = leaf).
    pub level: u32,
    /// The entry as read.
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
            Access::Write => self.read_only.map(|denial| (FaultKind::ReadOnly, denial)),
            Access::Execute => self.no_execute.map(|denial| (FaultKind::NoExecute, denial)),
        };
        match denied {
            None => Ok(()),
            Some((kind, denial)) => Err(MmuFault {
                kind,
                address,
                level: denial.level,
                access,
                entry: denial.entry,
            }),
        }
    }

    /// The page another entry of the same leaf table maps, whose bits but the address are this
    /// page's (see [`Leaf::alike`]): a denial at the mapping level names that entry.
    fn sibling(&self, base: u64, entry: u64) -> Page {
        let own = |denial: Option<Denial>| {
            denial.map(|denial| match denial.level == self.level {
                true => Denial { entry, ..denial },
                false => denial,
            })
        };
        Page {
            base,
            target: self.target.at(entry & WDDM_GPU_PTE_ADDRESS_MASK),
            entry,
            read_only: own(self.read_only),
            no_execute: own(self.no_execute),
            ..*self
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

/// Entries a translation-cache fill reads from a leaf table at once: one 64-byte line, the way
/// a GPU fetches page-table entries. The line's other entries that map a page are cached with
/// the one walked to, so a run of pages costs one walk per line rather than one per page.
pub const LINE_ENTRIES: usize = 8;

/// The entries of one line of a leaf table, as one read brought them.
#[derive(Clone, Copy, Debug)]
pub struct Line {
    /// The index of its first entry.
    first: u64,
    /// Entries read (a table shorter than a line has fewer).
    count: usize,
    entries: [u64; LINE_ENTRIES],
}

impl Line {
    /// Each entry with its index in the table.
    fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (self.first..).zip(self.entries[..self.count].iter().copied())
    }

    /// Entry `index` of the table, if the line holds it.
    fn entry(&self, index: u64) -> Option<u64> {
        let at = usize::try_from(index.checked_sub(self.first)?).ok()?;
        self.entries[..self.count].get(at).copied()
    }
}

/// Where a walk found its level-0 entry: what a fill of the rest of its line needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    table: TableAddress,
    index: u64,
    /// Entries in the leaf table.
    entries: u64,
    /// log2 of the bytes one entry maps.
    shift: u32,
    /// The highest level above the leaf whose entry is read-only, no-execute.
    read_only: Option<Denial>,
    no_execute: Option<Denial>,
}

impl Leaf {
    /// Calls `each` with the page every other entry of the line holding `walk`'s leaf entry
    /// maps (a walk to it reads the same entries above it as `walk`). Entries a walk would fault
    /// on are left out, so an invalid entry is never cached, and a line that cannot be read is
    /// no fill at all.
    /// `read` is the line if the walk already read it ([`Self::walk_within`]).
    pub fn line<T: TableMemory>(
        &self,
        walk: &Walk,
        read: Option<&Line>,
        tables: &T,
        mut each: impl FnMut(Page),
    ) {
        let Some(line) = read.copied().or_else(|| self.read_line(tables)) else {
            return;
        };
        let table_base = self.start(walk);
        let siblings = || line.entries().filter(|&(index, _)| index != self.index);
        if self.alike(walk, siblings(), tables) {
            for (index, entry) in siblings() {
                each(walk.page.sibling(table_base + (index << self.shift), entry));
            }
            return;
        }
        for (index, entry) in siblings() {
            let base = table_base + (index << self.shift);
            if let Ok(page) = self.page(entry, base, tables) {
                each(page);
            }
        }
    }

    /// Whether every one of `siblings` differs from `walk`'s entry in its address alone, each
    /// address aligned to the page, and the storage from the lowest address to the end of the
    /// highest page passes one check: then each makes the page [`Self::page`] would make of it
    /// (the same bits pass the same checks, and a page inside a checked span is checked), so
    /// a line of one allocation's pages is checked once rather than entry by entry.
    fn alike<T: TableMemory>(
        &self,
        walk: &Walk,
        siblings: impl Iterator<Item = (u64, u64)>,
        tables: &T,
    ) -> bool {
        let bits = walk.page.entry & !WDDM_GPU_PTE_ADDRESS_MASK;
        let size = 1u64 << self.shift;
        let (mut lowest, mut highest, mut differ) = (u64::MAX, 0, 0);
        for (_, entry) in siblings {
            let address = entry & WDDM_GPU_PTE_ADDRESS_MASK;
            differ |= ((entry & !WDDM_GPU_PTE_ADDRESS_MASK) ^ bits) | (address & (size - 1));
            lowest = lowest.min(address);
            highest = highest.max(address);
        }
        if differ != 0 || walk.page.level != 0 || walk.page.shift != self.shift {
            return false;
        }
        match (walk.page.target, highest.checked_sub(lowest)) {
            // No sibling, or zero pages (no storage).
            (_, None) | (Target::Zero, _) => true,
            (target, Some(spread)) => spread
                .checked_add(size)
                .is_some_and(|span| tables.check_page(target.at(lowest), span).is_ok()),
        }
    }

    /// The virtual addresses the leaf table maps (`walk` is the walk that found it).
    pub fn span(&self, walk: &Walk) -> Range<u64> {
        let start = self.start(walk);
        start..start.saturating_add(self.entries << self.shift)
    }

    /// The first virtual address the leaf table maps.
    #[inline]
    fn start(&self, walk: &Walk) -> u64 {
        walk.page.base - (self.index << self.shift)
    }

    /// The walk to `address` (inside [`Self::span`]) through this leaf table, the entries above
    /// it taken as `walk` read them: what a walk reads past a cached directory. Its own entry is
    /// read and checked as a full walk reads and checks it.
    pub fn walk_within<T: TableMemory>(
        &self,
        walk: &Walk,
        address: u64,
        access: Access,
        tables: &T,
    ) -> Result<(Walk, Leaf, Option<Line>), MmuFault> {
        let fault = |kind, entry| MmuFault {
            kind,
            address,
            level: 0,
            access,
            entry,
        };
        let start = self.start(walk);
        let index = (address - start) >> self.shift;
        let leaf = Leaf { index, ..*self };
        // The entry comes with its line, which the fill then needs no second read for; alone
        // only when the line cannot be read whole.
        let line = leaf.read_line(tables);
        let raw = match line.and_then(|line| line.entry(index)) {
            Some(raw) => raw,
            None => tables
                .read_entry(self.table, index)
                .map_err(|kind| fault(kind, 0))?,
        };
        let page = self
            .page(raw, start + (index << self.shift), tables)
            .map_err(|kind| fault(kind, raw))?;
        let mut path = walk.path;
        path[0] = raw;
        Ok((Walk { page, path }, leaf, line))
    }

    /// The line holding this leaf's entry, in one read; `None` when it cannot be read whole.
    fn read_line<T: TableMemory>(&self, tables: &T) -> Option<Line> {
        let line_entries = LINE_ENTRIES as u64;
        let first = self.index & !(line_entries - 1);
        let count = line_entries.min(self.entries.saturating_sub(first));
        let mut line = Line {
            first,
            count: usize::try_from(count).ok()?,
            entries: [0; LINE_ENTRIES],
        };
        let entries = line.entries.get_mut(..line.count)?;
        tables.read_entries(self.table, first, entries).ok()?;
        Some(line)
    }

    /// The page leaf entry `entry` maps at `base`, checked as the walk checks it.
    fn page<T: TableMemory>(&self, entry: u64, base: u64, tables: &T) -> Result<Page, FaultKind> {
        let decoded = Entry::check(entry)?;
        if decoded.large || decoded.table_64k {
            return Err(FaultKind::BadFlags);
        }
        Ok(Page {
            base,
            shift: self.shift,
            target: decoded.target(1 << self.shift, tables)?,
            level: 0,
            read_only: self.read_only.or(decoded.denial(decoded.read_only, 0)),
            no_execute: self.no_execute.or(decoded.denial(decoded.no_execute, 0)),
            entry,
        })
    }
}

/// One entry's fields, as every level reads them.
struct Entry {
    raw: u64,
    read_only: bool,
    no_execute: bool,
    large: bool,
    table_64k: bool,
    zero: bool,
    segment: u32,
    address: u64,
}

impl Entry {
    /// The entry's fields, once its reserved bits and valid bit are checked.
    fn check(raw: u64) -> Result<Self, FaultKind> {
        if raw & WDDM_GPU_PTE_RESERVED_MASK != 0 {
            return Err(FaultKind::ReservedBits);
        }
        if raw & WDDM_GPU_PTE_VALID == 0 {
            return Err(FaultKind::NotPresent);
        }
        Ok(Self {
            raw,
            read_only: raw & WDDM_GPU_PTE_READ_ONLY != 0,
            no_execute: raw & WDDM_GPU_PTE_NO_EXECUTE != 0,
            large: raw & WDDM_GPU_PTE_LARGE_PAGE != 0,
            table_64k: raw & WDDM_GPU_PTE_PAGE_TABLE_64KB != 0,
            zero: raw & WDDM_GPU_PTE_ZERO != 0,
            segment: u32::try_from((raw & WDDM_GPU_PTE_SEGMENT_MASK) >> WDDM_GPU_PTE_SEGMENT_SHIFT)
                .unwrap_or(u32::MAX),
            address: raw & WDDM_GPU_PTE_ADDRESS_MASK,
        })
    }

    /// A denial by this entry at `level` when its bit (`set`) is on.
    fn denial(&self, set: bool, level: u32) -> Option<Denial> {
        set.then_some(Denial {
            level,
            entry: self.raw,
        })
    }

    /// Where the page of `size` bytes this entry maps is, with the storage checked.
    fn target<T: TableMemory>(&self, size: u64, tables: &T) -> Result<Target, FaultKind> {
        if self.zero {
            return Ok(Target::Zero);
        }
        if self.address & (size - 1) != 0 {
            return Err(FaultKind::Misaligned);
        }
        let target = match self.segment {
            0 => Target::System(self.address),
            segment => Target::Segment {
                segment,
                offset: self.address,
            },
        };
        tables.check_page(target, size)?;
        Ok(target)
    }
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
    walk_to_leaf(geometry, root, address, access, tables).map(|(walk, _)| walk)
}

/// [`walk`], with where its level-0 entry was (`None` for a page an upper level maps), for a
/// fill of the rest of that entry's line ([`Leaf::line`]).
pub fn walk_to_leaf<T: TableMemory>(
    geometry: &MmuGeometry,
    root: &Root,
    address: u64,
    access: Access,
    tables: &T,
) -> Result<(Walk, Option<Leaf>), MmuFault> {
    let mut path = [0; MAX_LEVELS];
    let mut leaf = None;
    let page = walk_inner(
        geometry, root, address, access, tables, &mut path, &mut leaf,
    )?;
    Ok((Walk { page, path }, leaf))
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
    walk_inner(geometry, root, address, access, tables, path, &mut None)
}

fn walk_inner<T: TableMemory>(
    geometry: &MmuGeometry,
    root: &Root,
    address: u64,
    access: Access,
    tables: &T,
    path: &mut [u64; MAX_LEVELS],
    leaf: &mut Option<Leaf>,
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
        let raw = tables
            .read_entry(table, index)
            .map_err(|kind| fault(kind, level, 0))?;
        path[level as usize] = raw;
        let entry = Entry::check(raw).map_err(|kind| fault(kind, level, raw))?;
        let (above_read_only, above_no_execute) = (read_only, no_execute);
        read_only = read_only.or(entry.denial(entry.read_only, level));
        no_execute = no_execute.or(entry.denial(entry.no_execute, level));
        let maps_page = level == 0 || entry.large || entry.zero;
        let bad_flags = (level == 0 && (entry.large || entry.table_64k))
            || (entry.large && geometry.caps().flags & WDDM_GPU_MMU_CAP_LARGE_PAGE == 0)
            || (entry.table_64k && (level != 1 || entry.large));
        if bad_flags {
            return Err(fault(FaultKind::BadFlags, level, raw));
        }
        if !maps_page {
            table = TableAddress {
                segment: entry.segment,
                address: entry.address,
            };
            leaf_64k = entry.table_64k;
            continue;
        }
        let shift = if level == 0 { shift } else { desc.shift() };
        let size = 1u64 << shift;
        let target = entry
            .target(size, tables)
            .map_err(|kind| fault(kind, level, raw))?;
        if level == 0 && level != top {
            *leaf = Some(Leaf {
                table,
                index,
                entries: 1 << bits,
                shift,
                read_only: above_read_only,
                no_execute: above_no_execute,
            });
        }
        let page = Page {
            base: address & !(size - 1),
            shift,
            target,
            level,
            read_only,
            no_execute,
            entry: entry.raw,
        };
        return Ok(page);
    }
    // Unreachable with a checked geometry: every walk ends at level 0.
    Err(fault(FaultKind::NotPresent, 0, 0))
}
