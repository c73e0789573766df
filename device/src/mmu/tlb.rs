//! The translation cache of one address space, with hardware's contract: a translation once
//! cached is served until a flush covers it, even if the tables in memory changed; an invalid
//! entry is never cached (`InvalidTlbEntriesNotCached`). Two two-way set-associative arrays, one
//! for 4 KiB pages and one for larger pages (by their 64 KiB frame), allocated once: a lookup or
//! an insert never allocates.

use std::ops::Range;

use super::walk::Walk;

/// Sets for 4 KiB pages (two ways each).
const SMALL_SETS: u64 = 512;
const _: () = assert!(SMALL_SETS.is_power_of_two() && LARGE_SETS.is_power_of_two());
/// Sets for 64 KiB and larger pages (two ways each).
const LARGE_SETS: u64 = 64;
/// Ways per set.
const WAYS: usize = 2;
/// log2 of the frame a large slot is indexed by.
const LARGE_INDEX_SHIFT: u32 = 16;

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The frame number the slot was filled for.
    key: u64,
    /// Valid while it equals the cache's generation.
    generation: u64,
    /// Whether the checking mode already reported this slot stale.
    reported: bool,
    walk: Walk,
}

/// A cached translation, as [`Tlb::lookup`] finds it.
pub struct Hit<'a> {
    /// The walk it was cached from.
    pub walk: &'a Walk,
    /// Whether it was already reported stale.
    pub reported: &'a mut bool,
}

/// Two-way sets of slots with their replacement order.
struct Ways {
    slots: Box<[[Option<Slot>; WAYS]]>,
    /// Per set: the way the next insert replaces when both are live.
    victim: Box<[u8]>,
}

impl Ways {
    fn new(sets: u64) -> Self {
        debug_assert!(sets.is_power_of_two());
        let sets = usize::try_from(sets).unwrap_or(1);
        Self {
            slots: vec![[None; WAYS]; sets].into_boxed_slice(),
            victim: vec![0; sets].into_boxed_slice(),
        }
    }

    /// The set of frame `key`: higher bits folded in, so ranges a power-of-two apart (a copy's
    /// source and destination) do not share a set. Set counts are powers of two: a mask, not a
    /// division, on every lookup.
    #[inline]
    fn set(&self, key: u64) -> usize {
        let folded = key ^ (key >> 9) ^ (key >> 18) ^ (key >> 27);
        usize::try_from(folded).unwrap_or(0) & (self.slots.len() - 1)
    }
}

/// One address space's translation cache.
pub struct Tlb {
    small: Ways,
    large: Ways,
    generation: u64,
}

impl Default for Tlb {
    fn default() -> Self {
        Self {
            small: Ways::new(SMALL_SETS),
            large: Ways::new(LARGE_SETS),
            generation: 1,
        }
    }
}

impl Tlb {
    /// The cached translation of `address`, if any.
    #[inline]
    pub fn lookup(&mut self, address: u64) -> Option<Hit<'_>> {
        let generation = self.generation;
        let live = |slot: &Option<Slot>, key: u64| {
            slot.as_ref().is_some_and(|slot| {
                slot.generation == generation
                    && slot.key == key
                    && address.wrapping_sub(slot.walk.page.base) < slot.walk.page.size()
            })
        };
        let small_key = address >> 12;
        let small_set = self.small.set(small_key);
        let found = if let Some(way) =
            (0..WAYS).find(|&way| live(&self.small.slots[small_set][way], small_key))
        {
            &mut self.small.slots[small_set][way]
        } else {
            let large_key = address >> LARGE_INDEX_SHIFT;
            let large_set = self.large.set(large_key);
            let way = (0..WAYS).find(|&way| live(&self.large.slots[large_set][way], large_key))?;
            &mut self.large.slots[large_set][way]
        };
        found.as_mut().map(|slot| Hit {
            walk: &slot.walk,
            reported: &mut slot.reported,
        })
    }

    /// Caches `walk`, which translated `address`.
    #[inline]
    pub fn insert(&mut self, address: u64, walk: Walk) {
        let generation = self.generation;
        let (ways, key) = if walk.page.shift == 12 {
            (&mut self.small, address >> 12)
        } else {
            (&mut self.large, address >> LARGE_INDEX_SHIFT)
        };
        let set = ways.set(key);
        let dead = (0..WAYS).find(|&way| {
            ways.slots[set][way]
                .as_ref()
                .is_none_or(|slot| slot.generation != generation || slot.key == key)
        });
        let way = dead.unwrap_or_else(|| {
            let victim = usize::from(ways.victim[set]);
            ways.victim[set] = u8::from(victim == 0);
            victim
        });
        ways.slots[set][way] = Some(Slot {
            key,
            generation,
            reported: false,
            walk,
        });
    }

    /// Drops every translation (`FLUSH_TLB` with no range, a new root).
    pub fn flush_all(&mut self) {
        self.generation += 1;
    }

    /// Drops the translations of pages that share a byte with `range`.
    pub fn flush(&mut self, range: Range<u64>) {
        let sets = self
            .small
            .slots
            .iter_mut()
            .chain(self.large.slots.iter_mut());
        for slot in sets.flat_map(|set| set.iter_mut()) {
            let overlaps = slot.as_ref().is_some_and(|slot| {
                let page = &slot.walk.page;
                page.base < range.end && range.start < page.base.saturating_add(page.size())
            });
            if overlaps {
                *slot = None;
            }
        }
    }
}
