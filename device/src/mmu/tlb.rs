//! The translation cache of one address space, with hardware's contract: a translation once
//! cached is served until a flush covers it, even if the tables in memory changed; an invalid
//! entry is never cached (`InvalidTlbEntriesNotCached`). Two two-way set-associative arrays,
//! allocated once (a lookup or an insert never allocates):
//! - 4 KiB pages by line: a slot holds the pages of one line of a leaf table
//!   ([`LINE_ENTRIES`] pages, filled by one walk), with the entries above the leaf once for all
//!   of them, so a line fill writes one slot rather than eight;
//! - larger pages one a slot, by their 64 KiB frame.
//!
//! Beside them, the leaf table the last walk reached and the entries above it, as a GPU's
//! page-directory cache keeps them: a walk to another page of that table reads only the line
//! holding the page's entry. It is flushed with the translations.

use std::ops::Range;

use super::walk::{Leaf, Page, Target, Walk, LINE_ENTRIES, MAX_LEVELS};

/// Line slots (two ways each): 1,024 pages of 4 KiB.
const LINE_SETS: u64 = 64;
/// Sets for 64 KiB and larger pages (two ways each).
const LARGE_SETS: u64 = 64;
const _: () = assert!(LINE_SETS.is_power_of_two() && LARGE_SETS.is_power_of_two());
/// Ways per set.
const WAYS: usize = 2;
/// log2 of a 4 KiB page.
const SMALL_SHIFT: u32 = 12;
/// log2 of the bytes a line of 4 KiB pages maps.
const LINE_SHIFT: u32 = SMALL_SHIFT + LINE_ENTRIES.trailing_zeros();
const _: () = assert!(LINE_ENTRIES.is_power_of_two() && LINE_ENTRIES <= 8);
/// log2 of the frame a large slot is indexed by.
const LARGE_INDEX_SHIFT: u32 = 16;

/// Generation of a slot that holds nothing (the cache's starts at 1).
const EMPTY: u64 = 0;

/// Stands in a line slot for a page not cached (never served: its bit is clear).
const NO_PAGE: Page = Page {
    base: 0,
    shift: SMALL_SHIFT,
    target: Target::Zero,
    level: 0,
    read_only: None,
    no_execute: None,
    entry: 0,
};

/// The 4 KiB pages of one line of a leaf table.
#[derive(Clone, Copy, Debug)]
struct LineSlot {
    /// The line (`address >> LINE_SHIFT`).
    key: u64,
    /// Valid while it equals the cache's generation.
    generation: u64,
    /// Bit `i`: page `i` of the line is cached.
    cached: u8,
    /// Bit `i`: the checking mode already reported page `i` stale.
    reported: u8,
    /// The entries the filling walk read above the leaf (`path[0]` is each page's own entry).
    path: [u64; MAX_LEVELS],
    pages: [Page; LINE_ENTRIES],
}

const EMPTY_LINE: LineSlot = LineSlot {
    key: 0,
    generation: EMPTY,
    cached: 0,
    reported: 0,
    path: [0; MAX_LEVELS],
    pages: [NO_PAGE; LINE_ENTRIES],
};

/// One page of 64 KiB or more.
#[derive(Clone, Copy, Debug)]
struct LargeSlot {
    /// The page's 64 KiB frame (`address >> LARGE_INDEX_SHIFT`) it was filled for.
    key: u64,
    /// Valid while it equals the cache's generation.
    generation: u64,
    /// Bit 0: the checking mode already reported it stale.
    reported: u8,
    walk: Walk,
}

const EMPTY_LARGE: LargeSlot = LargeSlot {
    key: 0,
    generation: EMPTY,
    reported: 0,
    walk: Walk {
        page: NO_PAGE,
        path: [0; MAX_LEVELS],
    },
};

/// A cached translation, as [`Tlb::lookup`] finds it.
pub struct Hit<'a> {
    /// The page.
    pub page: Page,
    /// The entries read on the walk that cached it (`path[0]` is filled from the page's entry
    /// for a level-0 page).
    path: &'a [u64; MAX_LEVELS],
    /// The slot's reported bits, and the page's.
    reported: &'a mut u8,
    bit: u8,
}

impl Hit<'_> {
    /// The walk the page was cached from.
    pub fn walk(&self) -> Walk {
        let mut path = *self.path;
        if self.page.level == 0 {
            path[0] = self.page.entry;
        }
        Walk {
            page: self.page,
            path,
        }
    }

    /// Whether the checking mode already reported this translation stale.
    pub fn reported(&self) -> bool {
        *self.reported & self.bit != 0
    }

    /// Notes that the checking mode reported it.
    pub fn report(&mut self) {
        *self.reported |= self.bit;
    }
}

/// Two-way sets of slots (a slot of generation [`EMPTY`] holds nothing) with their replacement
/// order.
struct Ways<S> {
    slots: Box<[[S; WAYS]]>,
    /// Per set: the way the next insert replaces when both are live.
    victim: Box<[u8]>,
}

impl<S: Copy> Ways<S> {
    fn new(sets: u64, empty: S) -> Self {
        debug_assert!(sets.is_power_of_two());
        let sets = usize::try_from(sets).unwrap_or(1);
        Self {
            slots: vec![[empty; WAYS]; sets].into_boxed_slice(),
            victim: vec![0; sets].into_boxed_slice(),
        }
    }

    /// The set of `key`: higher bits folded in, so ranges a power-of-two apart (a copy's source
    /// and destination) do not share a set. Set counts are powers of two: a mask, not a
    /// division, on every lookup.
    #[inline]
    fn set(&self, key: u64) -> usize {
        let folded = key ^ (key >> 6) ^ (key >> 12) ^ (key >> 18) ^ (key >> 27);
        usize::try_from(folded).unwrap_or(0) & (self.slots.len() - 1)
    }

    /// The way of `set` whose slot `is` (its key, its life), if any.
    #[inline]
    fn find(&self, set: usize, is: impl Fn(&S) -> bool) -> Option<usize> {
        (0..WAYS).find(|&way| is(&self.slots[set][way]))
    }

    /// The way an insert into `set` fills: a dead one (`dead` tells), else the victim.
    fn place(&mut self, set: usize, dead: impl Fn(&S) -> bool) -> usize {
        let free = (0..WAYS).find(|&way| dead(&self.slots[set][way]));
        free.unwrap_or_else(|| {
            let victim = usize::from(self.victim[set]);
            self.victim[set] = u8::from(victim == 0);
            victim
        })
    }
}

/// A leaf table a walk reached: where it is, the walk (the entries above it), and the addresses
/// it maps (`start..end`, its span kept for the lookup).
#[derive(Clone, Copy)]
struct Directory {
    generation: u64,
    start: u64,
    end: u64,
    leaf: Leaf,
    walk: Walk,
}

/// Where a line fill puts its pages ([`Tlb::insert`]): a concrete type, so that putting a page
/// is inlined into the fill's loop rather than called through a pointer.
pub struct LineSink<'a>(Sink<'a>);

enum Sink<'a> {
    /// 4 KiB pages: the slot of their line.
    Small {
        slot: &'a mut LineSlot,
        key: u64,
        fill: Fill,
    },
    /// Larger pages: a slot each, with the entries above the leaf as the walk read them.
    Large {
        tlb: &'a mut Tlb,
        path: [u64; MAX_LEVELS],
        fill: Fill,
    },
}

/// What a fill's walk is known to have read above the leaf, which decides whether a page it
/// caches again keeps the checking mode's mark that it was reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Nothing known to be stale (a walk of memory, or the checking mode off): marks are
    /// cleared, and a later change to a page is news.
    Fresh,
    /// Cached entries above the leaf that memory no longer holds, as the checking mode just
    /// found and reported: every page of the line shares them, so a page that is still cached
    /// keeps its mark rather than being reported again for them.
    ThroughStaleDirectory,
}

impl LineSink<'_> {
    /// Caches `page`, one of the line's.
    #[inline]
    pub fn put(&mut self, page: Page) {
        match &mut self.0 {
            Sink::Small { slot, key, fill } => {
                // Siblings lie in the same line; anything else is not cached.
                if page.shift == SMALL_SHIFT && page.base >> LINE_SHIFT == *key {
                    let bit = line_bit(page.base);
                    // A flushed page's mark goes with it: cached again, it is news.
                    let keeps_mark = *fill == Fill::ThroughStaleDirectory && slot.cached & bit != 0;
                    if !keeps_mark {
                        slot.reported &= !bit;
                    }
                    slot.pages[line_index(page.base)] = page;
                    slot.cached |= bit;
                }
            }
            Sink::Large { tlb, path, fill } => {
                let mut path = *path;
                path[0] = page.entry;
                tlb.insert_large(page.base, Walk { page, path }, *fill);
            }
        }
    }
}

/// A cached leaf table, as [`Tlb::directory`] finds it.
pub struct CachedLeaf<'a> {
    /// Where the table is.
    pub leaf: &'a Leaf,
    /// The walk that reached it.
    pub walk: &'a Walk,
}

/// One address space's translation cache.
pub struct Tlb {
    lines: Ways<LineSlot>,
    large: Ways<LargeSlot>,
    directory: Option<Directory>,
    generation: u64,
}

impl Default for Tlb {
    fn default() -> Self {
        Self {
            lines: Ways::new(LINE_SETS, EMPTY_LINE),
            large: Ways::new(LARGE_SETS, EMPTY_LARGE),
            directory: None,
            generation: 1,
        }
    }
}

/// Which page of its line `address` is in.
#[inline]
fn line_index(address: u64) -> usize {
    // Below LINE_ENTRIES: it fits.
    usize::try_from((address >> SMALL_SHIFT) & (LINE_ENTRIES as u64 - 1)).unwrap_or(0)
}

/// [`line_index`] as a bit.
#[inline]
fn line_bit(address: u64) -> u8 {
    1 << line_index(address)
}

impl Tlb {
    /// The cached translation of `address`, if any.
    #[inline]
    pub fn lookup(&mut self, address: u64) -> Option<Hit<'_>> {
        let generation = self.generation;
        let line_key = address >> LINE_SHIFT;
        let bit = line_bit(address);
        let line_set = self.lines.set(line_key);
        let line = |slot: &LineSlot| {
            slot.generation == generation && slot.key == line_key && slot.cached & bit != 0
        };
        if let Some(way) = self.lines.find(line_set, line) {
            let slot = &mut self.lines.slots[line_set][way];
            return Some(Hit {
                page: slot.pages[line_index(address)],
                path: &slot.path,
                reported: &mut slot.reported,
                bit,
            });
        }
        let large_key = address >> LARGE_INDEX_SHIFT;
        let large_set = self.large.set(large_key);
        let large = |slot: &LargeSlot| {
            slot.generation == generation
                && slot.key == large_key
                && address.wrapping_sub(slot.walk.page.base) < slot.walk.page.size()
        };
        let way = self.large.find(large_set, large)?;
        let slot = &mut self.large.slots[large_set][way];
        Some(Hit {
            page: slot.walk.page,
            path: &slot.walk.path,
            reported: &mut slot.reported,
            bit: 1,
        })
    }

    /// The cached 4 KiB pages of `address`'s line, from the one holding `address` on, as long
    /// as they are cached (none when that one is not): pages one lookup serves in a row.
    #[inline]
    pub fn line_from(&self, address: u64) -> impl Iterator<Item = &Page> {
        let generation = self.generation;
        let key = address >> LINE_SHIFT;
        let set = self.lines.set(key);
        let slot = self
            .lines
            .find(set, |slot| slot.generation == generation && slot.key == key)
            .map(|way| &self.lines.slots[set][way]);
        let cached = slot.map_or(0, |slot| slot.cached);
        // Pages from `address`'s on, up to the first one not cached.
        let from = line_index(address);
        let run = (cached >> from).trailing_ones() as usize;
        slot.into_iter()
            .flat_map(move |slot| slot.pages[from..from + run].iter())
    }

    /// Caches `walk`, which translated `address`, and the pages `line` puts into the
    /// [`LineSink`] it is given: the other valid entries of its leaf line, which a walk reaches
    /// through the same entries above. A 4 KiB page's line is written into one slot, its pages
    /// as they come. `fill` says whether pages cached again keep their marks.
    #[inline]
    pub fn insert(
        &mut self,
        address: u64,
        walk: Walk,
        fill: Fill,
        line: impl FnOnce(&mut LineSink<'_>),
    ) {
        if walk.page.shift != SMALL_SHIFT {
            self.insert_large(address, walk, fill);
            line(&mut LineSink(Sink::Large {
                tlb: self,
                path: walk.path,
                fill,
            }));
            return;
        }
        let generation = self.generation;
        let key = walk.page.base >> LINE_SHIFT;
        let set = self.lines.set(key);
        // A slot of this line filled through the same entries above the leaf goes on; one
        // filled through others (tables changed without a flush) is started again.
        let same_line = |slot: &LineSlot| {
            slot.generation == generation && slot.key == key && slot.path[1..] == walk.path[1..]
        };
        let way = match self.lines.find(set, same_line) {
            Some(way) => way,
            None => {
                let way = self
                    .lines
                    .place(set, |slot| slot.generation != generation || slot.key == key);
                let slot = &mut self.lines.slots[set][way];
                slot.key = key;
                slot.generation = generation;
                slot.cached = 0;
                slot.reported = 0;
                slot.path = walk.path;
                way
            }
        };
        let mut sink = LineSink(Sink::Small {
            slot: &mut self.lines.slots[set][way],
            key,
            fill,
        });
        sink.put(walk.page);
        line(&mut sink);
    }

    fn insert_large(&mut self, address: u64, walk: Walk, fill: Fill) {
        let generation = self.generation;
        let key = address >> LARGE_INDEX_SHIFT;
        let set = self.large.set(key);
        // The slot this frame has if it is cached (whichever way it is in), else a dead one
        // or the victim: one slot a frame, so a mark is never left behind in another.
        let live = self
            .large
            .find(set, |slot| slot.generation == generation && slot.key == key);
        let way =
            live.unwrap_or_else(|| self.large.place(set, |slot| slot.generation != generation));
        let slot = &mut self.large.slots[set][way];
        let reported = match fill {
            Fill::ThroughStaleDirectory if live.is_some() => slot.reported,
            _ => 0,
        };
        *slot = LargeSlot {
            key,
            generation,
            reported,
            walk,
        };
    }

    /// The cached leaf table that maps `address`, if any.
    #[inline]
    pub fn directory(&self, address: u64) -> Option<CachedLeaf<'_>> {
        self.directory
            .as_ref()
            .filter(|cached| {
                cached.generation == self.generation
                    && cached.start <= address
                    && address < cached.end
            })
            .map(|cached| CachedLeaf {
                leaf: &cached.leaf,
                walk: &cached.walk,
            })
    }

    /// Caches the leaf table `walk` reached.
    #[inline]
    pub fn remember_directory(&mut self, walk: &Walk, leaf: Leaf) {
        let span = leaf.span(walk);
        self.directory = Some(Directory {
            generation: self.generation,
            start: span.start,
            end: span.end,
            leaf,
            walk: *walk,
        });
    }

    /// Drops every translation (`FLUSH_TLB` with no range, a new root).
    pub fn flush_all(&mut self) {
        self.generation += 1;
    }

    /// Drops the translations of pages that share a byte with `range`.
    pub fn flush(&mut self, range: Range<u64>) {
        let overlaps = |page: &Page| {
            page.base < range.end && range.start < page.base.saturating_add(page.size())
        };
        for line in self.lines.slots.iter_mut().flat_map(|set| set.iter_mut()) {
            for (index, page) in line.pages.iter().enumerate() {
                if overlaps(page) {
                    line.cached &= !(1 << index);
                }
            }
        }
        for slot in self.large.slots.iter_mut().flat_map(|set| set.iter_mut()) {
            if slot.generation != EMPTY && overlaps(&slot.walk.page) {
                slot.generation = EMPTY;
            }
        }
        if self
            .directory
            .is_some_and(|cached| cached.start < range.end && range.start < cached.end)
        {
            self.directory = None;
        }
    }
}
