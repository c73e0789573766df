//! One aperture's translation table, in leaves of 512 entries (one 4 KiB page of entries each).
//!
//! Leaves let a large map be written once: a map reads the guest's page array straight into
//! spare leaves, checks each as it lands, and swaps them in only when every frame passed. A
//! refused map so changes nothing without the whole array first being copied aside (a 1 GiB
//! aperture's map moves its 2 MiB once instead of twice). The leaves a map replaced are the
//! next one's spares.

use std::ops::Range;

/// Entry value of a page that was never mapped.
pub(super) const NEVER_MAPPED: u64 = u64::MAX;

/// Entries in a leaf.
const LEAF_ENTRIES: usize = 512;

type Leaf = Box<[u64; LEAF_ENTRIES]>;

fn unmapped_leaf() -> Leaf {
    Box::new([NEVER_MAPPED; LEAF_ENTRIES])
}

/// The entries of one aperture, every one a checked frame or [`NEVER_MAPPED`].
#[derive(Clone, Debug)]
pub(super) struct Table {
    len: usize,
    leaves: Vec<Leaf>,
    /// Leaves a write fills before they are checked, kept from write to write.
    spares: Vec<Leaf>,
    /// A write's filled spares, in leaf order, until it commits (empty between writes; kept for
    /// its capacity).
    staged: Vec<Leaf>,
}

/// Where a range of table indices falls in the leaves: each leaf it touches, the part of the
/// range in that leaf (as indices into the leaf), and whether that part is every entry in use of
/// the leaf.
fn pieces(len: usize, range: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>, bool)> {
    let leaves = if range.is_empty() {
        0..0
    } else {
        range.start / LEAF_ENTRIES..range.end.div_ceil(LEAF_ENTRIES)
    };
    leaves.map(move |leaf| {
        let start = leaf * LEAF_ENTRIES;
        let end = (start + LEAF_ENTRIES).min(len);
        let part = range.start.max(start) - start..range.end.min(end) - start;
        let whole = part.len() == end - start;
        (leaf, part, whole)
    })
}

impl Table {
    /// `len` entries, none mapped.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            leaves: (0..len.div_ceil(LEAF_ENTRIES))
                .map(|_| unmapped_leaf())
                .collect(),
            spares: Vec::new(),
            staged: Vec::new(),
        }
    }

    /// Entries in the table.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The entries in use of `index`'s leaf, and where `index` is among them; `None` past the
    /// end. Runs of consecutive frames are found inside a leaf.
    #[inline]
    pub fn leaf_of(&self, index: usize) -> Option<(&[u64], usize)> {
        (index < self.len).then(|| (self.in_use(index / LEAF_ENTRIES), index % LEAF_ENTRIES))
    }

    /// The entry at `index`, `None` past the end.
    #[inline]
    pub fn get(&self, index: usize) -> Option<u64> {
        self.leaf_of(index).map(|(entries, at)| entries[at])
    }

    fn in_use(&self, leaf: usize) -> &[u64] {
        let in_use = self.len - leaf * LEAF_ENTRIES;
        &self.leaves[leaf][..in_use.min(LEAF_ENTRIES)]
    }

    /// The entries of `range` (inside the table), a leaf's part at a time.
    pub fn pieces(&self, range: Range<usize>) -> impl Iterator<Item = &[u64]> + '_ {
        pieces(self.len, range).map(|(leaf, part, _)| &self.leaves[leaf][part])
    }

    /// Hands `write` the entries of `range` (inside the table), a leaf's part at a time.
    pub fn write_each(&mut self, range: Range<usize>, mut write: impl FnMut(&mut [u64])) {
        for (leaf, part, _) in pieces(self.len, range) {
            write(&mut self.leaves[leaf][part]);
        }
    }

    /// Every entry, in order (inspection).
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.leaves.len()).flat_map(|leaf| self.in_use(leaf).iter().copied())
    }

    /// Sets every entry to [`NEVER_MAPPED`] (a reset).
    pub fn clear(&mut self) {
        for leaf in &mut self.leaves {
            leaf.fill(NEVER_MAPPED);
        }
    }

    /// Writes the entries of `range` (inside the table) with what `read` puts in the slices it
    /// is handed, in index order and together as long as the range: all of them, or none when
    /// `read` refuses one. Each leaf's part is read into a spare first; a whole leaf is then
    /// swapped in, the part of a leaf at either end of the range copied in.
    pub fn replace<E>(
        &mut self,
        range: Range<usize>,
        mut read: impl FnMut(&mut [u64]) -> Result<(), E>,
    ) -> Result<(), E> {
        for (_, part, _) in pieces(self.len, range.clone()) {
            let mut spare = self.spares.pop().unwrap_or_else(unmapped_leaf);
            let result = read(&mut spare[part]);
            self.staged.push(spare);
            if let Err(error) = result {
                self.spares.append(&mut self.staged);
                return Err(error);
            }
        }
        let mut staged = std::mem::take(&mut self.staged);
        for ((leaf, part, whole), mut filled) in pieces(self.len, range).zip(staged.drain(..)) {
            if whole {
                std::mem::swap(&mut self.leaves[leaf], &mut filled);
            } else {
                self.leaves[leaf][part.clone()].copy_from_slice(&filled[part]);
            }
            self.spares.push(filled);
        }
        self.staged = staged;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `len` entries, entry `i` holding `i` (a map of every entry).
    fn counting(len: usize) -> Table {
        let mut table = Table::new(len);
        let mut next = 0;
        table
            .replace(0..len, |entries| -> Result<(), ()> {
                for entry in entries {
                    *entry = next;
                    next += 1;
                }
                Ok(())
            })
            .unwrap();
        table
    }

    #[test]
    fn pieces_split_a_range_at_leaf_edges_and_know_whole_leaves() {
        let split = |len, range| pieces(len, range).collect::<Vec<_>>();
        assert_eq!(split(2048, 0..0), []);
        assert_eq!(split(2048, 5..9), [(0, 5..9, false)]);
        assert_eq!(
            split(2048, 500..1600),
            [
                (0, 500..512, false),
                (1, 0..512, true),
                (2, 0..512, true),
                (3, 0..64, false)
            ]
        );
        // The last leaf of a table that is not a multiple of a leaf: whole when all its entries
        // in use are written.
        assert_eq!(split(600, 512..600), [(1, 0..88, true)]);
        assert_eq!(split(600, 0..600), [(0, 0..512, true), (1, 0..88, true)]);
        assert_eq!(split(100, 0..100), [(0, 0..100, true)]);
    }

    #[test]
    fn a_replace_writes_across_leaves_in_index_order() {
        let len = 3 * LEAF_ENTRIES + 88;
        let table = counting(len);
        assert_eq!(table.len(), len);
        assert!(table.iter().eq(0..len as u64));
        assert_eq!(table.get(len - 1), Some(len as u64 - 1));
        assert_eq!(table.get(len), None);
        let (leaf, at) = table.leaf_of(LEAF_ENTRIES + 3).unwrap();
        assert_eq!((leaf.len(), at, leaf[at]), (LEAF_ENTRIES, 3, 515));
        let (last, at) = table.leaf_of(len - 1).unwrap();
        assert_eq!((last.len(), at), (88, 87));
        let pieces: Vec<usize> = table.pieces(500..1600).map(<[u64]>::len).collect();
        assert_eq!(pieces, [12, 512, 512, 64]);
    }

    #[test]
    fn a_refused_replace_changes_nothing_and_keeps_its_spares() {
        let len = 4 * LEAF_ENTRIES;
        let mut table = counting(len);
        // Refused in the tail, after a head and two whole leaves were read.
        let mut pieces = 0;
        let refused = table.replace(100..3 * LEAF_ENTRIES + 7, |entries| {
            entries.fill(7);
            pieces += 1;
            if pieces == 4 {
                Err("bad frame")
            } else {
                Ok(())
            }
        });
        assert_eq!(refused, Err("bad frame"));
        assert!(table.iter().eq(0..len as u64));
        assert!(table.staged.is_empty());
        // The four leaves the first map replaced, and the spares the refused one read its four
        // parts into given back.
        let spares = table.spares.len();
        assert_eq!(spares, 4);
        // The next write uses them, and what it replaced becomes spare.
        table
            .replace(100..3 * LEAF_ENTRIES + 7, |entries| -> Result<(), ()> {
                entries.fill(7);
                Ok(())
            })
            .unwrap();
        assert_eq!(table.spares.len(), spares);
        let expected = (0..len as u64).map(|index| {
            if (100..3 * LEAF_ENTRIES as u64 + 7).contains(&index) {
                7
            } else {
                index
            }
        });
        assert!(table.iter().eq(expected));
        table.write_each(0..2, |entries| entries.fill(9));
        assert_eq!(
            (table.get(0), table.get(1), table.get(2)),
            (Some(9), Some(9), Some(2))
        );
        table.clear();
        assert!(table.iter().all(|entry| entry == NEVER_MAPPED));
    }
}
