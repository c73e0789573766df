//! The translation cache of one address space, with hardware's contract: a translation once
//! cached is served until a flush covers it, even if the tables in memory changed; an invalid
//! entry is never cached (`InvalidTlbEntriesNotCached`). Two direct-mapped arrays, one for
//! 4 KiB pages and one for larger pages (by their 64 KiB frame), allocated once: a lookup or an
//! insert never allocates.

use std::ops::Range;

use super::walk::Walk;

/// Slots for 4 KiB pages.
const SMALL_SLOTS: usize = 1024;
/// Slots for 64 KiB and larger pages.
const LARGE_SLOTS: usize = 128;
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

/// One address space's translation cache.
pub struct Tlb {
    small: Box<[Option<Slot>]>,
    large: Box<[Option<Slot>]>,
    generation: u64,
}

impl Default for Tlb {
    fn default() -> Self {
        Self {
            small: vec![None; SMALL_SLOTS].into_boxed_slice(),
            large: vec![None; LARGE_SLOTS].into_boxed_slice(),
            generation: 1,
        }
    }
}

/// Slot index of frame `key` in an array of `slots` slots (a power of two).
fn index(key: u64, slots: usize) -> usize {
    // The mask keeps the value below `slots`, so it fits in usize.
    usize::try_from(key & (slots as u64 - 1)).unwrap_or(0)
}

impl Tlb {
    /// The cached translation of `address`, if any.
    #[inline]
    pub fn lookup(&mut self, address: u64) -> Option<Hit<'_>> {
        let generation = self.generation;
        let small_key = address >> 12;
        let large_key = address >> LARGE_INDEX_SHIFT;
        let small = index(small_key, SMALL_SLOTS);
        let large = index(large_key, LARGE_SLOTS);
        let live = |slot: &Option<Slot>, key: u64| {
            slot.as_ref().is_some_and(|slot| {
                slot.generation == generation
                    && slot.key == key
                    && address.wrapping_sub(slot.walk.page.base) < slot.walk.page.size()
            })
        };
        let slot = if live(&self.small[small], small_key) {
            &mut self.small[small]
        } else if live(&self.large[large], large_key) {
            &mut self.large[large]
        } else {
            return None;
        };
        slot.as_mut().map(|slot| Hit {
            walk: &slot.walk,
            reported: &mut slot.reported,
        })
    }

    /// Caches `walk`, which translated `address`.
    #[inline]
    pub fn insert(&mut self, address: u64, walk: Walk) {
        let (slots, key) = if walk.page.shift == 12 {
            (&mut self.small, address >> 12)
        } else {
            (&mut self.large, address >> LARGE_INDEX_SHIFT)
        };
        let slot_count = slots.len();
        slots[index(key, slot_count)] = Some(Slot {
            key,
            generation: self.generation,
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
        for slot in self.small.iter_mut().chain(self.large.iter_mut()) {
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
