//! One GPU virtual address space: its bound root, its translation cache, and the checking mode
//! that notices a cached translation the tables in memory no longer agree with (the flush a
//! KMD forgot). Translation hands out the longest run of bytes contiguous in one store, so a
//! copy moves whole runs rather than pages; a walk to a leaf entry caches the valid entries of
//! its whole line ([`super::walk::LINE_ENTRIES`]), so a run of pages walks once per line.

use std::ops::Range;

use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use super::fault::{Access, MmuFault};
use super::placement::{MisplacedTable, Placement};
use super::tlb::{Fill, Tlb};
use super::walk::{
    walk_path, walk_to_leaf, Page, Root, TableAddress, TableMemory, Target, Walk, MAX_LEVELS,
};

/// Why a root was not bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// `NumEntries` is 0 or more than the root level holds.
    #[error("NumEntries {entries} is outside 1..={max}")]
    Entries {
        /// `NumEntries`.
        entries: u64,
        /// What the root level holds.
        max: u64,
    },
    /// The root's address is not 4 KiB aligned.
    #[error("root address {0:#x} is not 4 KiB aligned")]
    Unaligned(u64),
}

/// A cached translation that memory no longer agrees with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleTranslation {
    /// The address whose translation was served from the cache.
    pub address: u64,
    /// The highest level whose entry changed in memory.
    pub level: u32,
    /// That entry as cached.
    pub cached: u64,
    /// That entry in memory now (0 when the walk now faults before reaching it).
    pub memory: u64,
}

/// Bytes contiguous in one store, all allowed for the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Where the first byte is.
    pub target: Target,
    /// Bytes in the run.
    pub len: u64,
}

/// Stale translations kept for the caller to take; older ones are counted only.
const STALE_KEPT: usize = 16;

/// One address space.
pub struct AddressSpace {
    root: Option<Root>,
    tlb: Tlb,
    checking: bool,
    /// The driver asked for the checking mode (CREATE_CONTEXT's flag): it gets the events;
    /// the checker's checking alone does not send it any.
    asked: bool,
    stale: [Option<StaleTranslation>; STALE_KEPT],
    stale_count: u64,
    /// Tables the checking mode found outside their level's segments.
    placement: Placement,
}

impl AddressSpace {
    /// An address space with no root; `checking` re-walks every cached translation it serves.
    pub fn new(checking: bool) -> Self {
        Self {
            root: None,
            tlb: Tlb::default(),
            checking,
            asked: checking,
            stale: [None; STALE_KEPT],
            stale_count: 0,
            placement: Placement::default(),
        }
    }

    /// Binds a root (`DxgkDdiSetRootPageTable`) and drops every cached translation.
    pub fn set_root(
        &mut self,
        geometry: &MmuGeometry,
        table: TableAddress,
        entries: u64,
    ) -> Result<(), RootError> {
        let max = geometry
            .level(geometry.root_level())
            .map_or(0, |root| root.entries());
        if entries == 0 || entries > max {
            return Err(RootError::Entries { entries, max });
        }
        if !table.address.is_multiple_of(WDDM_GPU_PAGE_SIZE) {
            return Err(RootError::Unaligned(table.address));
        }
        self.root = Some(Root { table, entries });
        self.tlb.flush_all();
        Ok(())
    }

    /// The bound root.
    pub fn root(&self) -> Option<Root> {
        self.root
    }

    /// Turns the checking mode on or off (the checker's; what the driver asked stays).
    pub fn set_checking(&mut self, checking: bool) {
        self.checking = checking;
    }

    /// Whether the checking mode is on (asked for by the driver, or turned on by the checker).
    pub fn checking(&self) -> bool {
        self.checking
    }

    /// Whether the driver asked for the checking mode when it made the context.
    pub fn asked_for_checking(&self) -> bool {
        self.asked
    }

    /// `FLUSH_TLB`: drops the translations overlapping `range`, or all of them.
    pub fn flush(&mut self, range: Option<Range<u64>>) {
        match range {
            Some(range) => self.tlb.flush(range),
            None => self.tlb.flush_all(),
        }
    }

    /// Stale translations the checking mode found since the last call, and how many were
    /// found in all (more than were kept when the count is higher).
    pub fn take_stale(&mut self) -> (impl Iterator<Item = StaleTranslation>, u64) {
        let kept = std::mem::replace(&mut self.stale, [None; STALE_KEPT]);
        (kept.into_iter().flatten(), self.stale_count)
    }

    /// Page tables the checking mode found outside the segments the layout declares for their
    /// level since the last call, each table once (the walk used them: hardware would too).
    pub fn take_misplaced(&mut self) -> Vec<MisplacedTable> {
        self.placement.take()
    }

    /// The longest run from `address` of at most `length` bytes contiguous in one store and
    /// allowed for `access`. A fault past the first page ends the run before it (the next
    /// call reports it); a fault on the first page is returned.
    pub fn translate<T: TableMemory>(
        &mut self,
        geometry: &MmuGeometry,
        tables: &T,
        address: u64,
        length: u64,
        access: Access,
    ) -> Result<Run, MmuFault> {
        let mut run = [Run {
            target: Target::Zero,
            len: 0,
        }];
        match self.translate_runs(geometry, tables, address, length, access, &mut run) {
            (0, Some(fault)) => Err(fault),
            _ => Ok(run[0]),
        }
    }

    /// The successive runs from `address` over at most `length` bytes, into `runs` (each as
    /// long as [`Self::translate`] makes it): how many were filled, and the fault at the byte
    /// after the last one if a fault ended them. Every page is looked up once, so a copy
    /// translates a batch of runs on each side and then moves them back to back.
    pub fn translate_runs<T: TableMemory>(
        &mut self,
        geometry: &MmuGeometry,
        tables: &T,
        address: u64,
        length: u64,
        access: Access,
        runs: &mut [Run],
    ) -> (usize, Option<MmuFault>) {
        if length == 0 || runs.is_empty() {
            return (0, None);
        }
        let mut count = 0;
        let mut cursor = address;
        // Saturated, `end` cannot hold the byte at u64::MAX: the first page is asked for
        // whatever `end` is, so a translation of at least one byte is a run or a fault, never
        // empty (that address is past every geometry's range).
        let end = address.saturating_add(length);
        loop {
            let page = match self.page(geometry, tables, cursor, access) {
                Ok(page) => page,
                Err(fault) => return (count, Some(fault)),
            };
            if append(runs, &mut count, &page, &mut cursor, end) == Appended::Last {
                return (count, None);
            }
            if self.checking {
                // Every page served from the cache is walked again: one at a time.
                continue;
            }
            // The rest of a cached line of 4 KiB pages follows from one lookup.
            for page in self.tlb.line_from(cursor) {
                if let Err(fault) = page.allows(cursor, access) {
                    return (count, Some(fault));
                }
                if append(runs, &mut count, page, &mut cursor, end) == Appended::Last {
                    return (count, None);
                }
            }
        }
    }

    /// The page holding `address`, from the cache or a walk, with `access` checked.
    fn page<T: TableMemory>(
        &mut self,
        geometry: &MmuGeometry,
        tables: &T,
        address: u64,
        access: Access,
    ) -> Result<Page, MmuFault> {
        let root = self.root.ok_or(MmuFault {
            kind: super::fault::FaultKind::NoRoot,
            address,
            level: geometry.root_level(),
            access,
            entry: 0,
        })?;
        let checking = self.checking;
        if let Some(mut hit) = self.tlb.lookup(address) {
            let page = hit.page;
            if checking && !hit.reported() {
                let cached = hit.walk();
                let mut path = [0; MAX_LEVELS];
                let fresh = walk_path(geometry, &root, address, access, tables, &mut path);
                if let Some(stale) = disagreement(&cached, fresh.ok().as_ref(), &path, address) {
                    hit.report();
                    self.record_stale(stale);
                }
            }
            page.allows(address, access)?;
            return Ok(page);
        }
        // Past a cached leaf table only the line holding the page's entry is read, the entries
        // above it as cached (a GPU's page-directory cache).
        let (fresh, leaf, line, above_cached) = match self.tlb.directory(address) {
            Some(cached) => {
                let (walk, leaf, line) =
                    cached
                        .leaf
                        .walk_within(cached.walk, address, access, tables)?;
                (walk, Some(leaf), line, true)
            }
            None => {
                let (walk, leaf) = walk_to_leaf(geometry, &root, address, access, tables)?;
                if checking {
                    // A whole walk reads every table above the page: where each lives.
                    self.placement.check(geometry, &root, &walk, address);
                }
                (walk, leaf, None, false)
            }
        };
        // The checking mode holds such a walk against a whole one now, as it does a hit: a
        // directory entry changed without a flush is reported the first time it is used.
        let (stale, fill) = if checking && above_cached {
            let mut path = [0; MAX_LEVELS];
            let now = walk_path(geometry, &root, address, access, tables, &mut path);
            // The line is filled through the cached entries above the leaf: whether memory
            // still holds them decides for all its pages, whatever this page reads.
            let fill = if path[1..] == fresh.path[1..] {
                Fill::Fresh
            } else {
                Fill::ThroughStaleDirectory
            };
            (
                disagreement(&fresh, now.ok().as_ref(), &path, address),
                fill,
            )
        } else {
            (None, Fill::Fresh)
        };
        self.tlb.insert(address, fresh, fill, |sink| {
            if let Some(leaf) = leaf {
                leaf.line(&fresh, line.as_ref(), tables, |page| sink.put(page));
            }
        });
        // A walk past the cached leaf table leaves it as it is.
        if let (Some(leaf), false) = (leaf, above_cached) {
            self.tlb.remember_directory(&fresh, leaf);
        }
        if let Some(stale) = stale {
            if let Some(mut hit) = self.tlb.lookup(address) {
                hit.report();
            }
            self.record_stale(stale);
        }
        fresh.page.allows(address, access)?;
        Ok(fresh.page)
    }

    fn record_stale(&mut self, stale: StaleTranslation) {
        // The ring keeps the first ones found: the earliest missed flush is the one to fix.
        if let Some(slot) = self.stale.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some(stale);
        }
        self.stale_count += 1;
    }
}

/// Whether [`append`] left room to go on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Appended {
    More,
    /// `end` reached, or `runs` full (the next call looks the page up again).
    Last,
}

/// Adds the bytes of `page` from `cursor` (inside it) up to `end` to the runs: onto the last
/// run when they continue it, else as a new run; moves `cursor` past them.
#[inline]
fn append(
    runs: &mut [Run],
    count: &mut usize,
    page: &Page,
    cursor: &mut u64,
    end: u64,
) -> Appended {
    let step = (page.base + page.size()).min(end) - *cursor;
    let target = page.target_of(*cursor);
    match count.checked_sub(1).and_then(|last| runs.get_mut(last)) {
        Some(run) if run.target.advanced(run.len) == Some(target) => run.len += step,
        _ => match runs.get_mut(*count) {
            Some(run) => {
                *run = Run { target, len: step };
                *count += 1;
            }
            None => return Appended::Last,
        },
    }
    *cursor += step;
    if *cursor >= end {
        Appended::Last
    } else {
        Appended::More
    }
}

/// Where a cached walk and a fresh one (`page`, or `None` when it faulted, having read
/// `path`) disagree, if they do: the highest level whose entry changed.
fn disagreement(
    cached: &Walk,
    page: Option<&Page>,
    path: &[u64; MAX_LEVELS],
    address: u64,
) -> Option<StaleTranslation> {
    if page == Some(&cached.page) {
        return None;
    }
    (0..MAX_LEVELS).rev().find_map(|level| {
        let (was, now) = (cached.path[level], path[level]);
        (was != now).then(|| StaleTranslation {
            address,
            level: u32::try_from(level).unwrap_or(0),
            cached: was,
            memory: now,
        })
    })
}
