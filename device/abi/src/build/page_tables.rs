//! A KMD's page-table manager in miniature, for the guest driver and the tests: it lays out the
//! tables of one address space (each level in the segment the geometry puts it, allocated from
//! areas the caller gives) and records every entry it writes as a [`TableWrite`], new tables
//! first invalidated whole, as VidMm has a KMD do. A GPU_PHYSICAL driver turns the writes into
//! UPDATE_PAGE_TABLE packets ([`packets`]); a CPU_VIRTUAL driver stores them itself.

use std::collections::HashMap;
use std::ops::Range;

use super::gpuva::{pte, update_page_table, update_page_table_repeat, TableAt};
use super::DmaBufferBuilder;
use crate::gpuva::{WDDM_GPU_64KB_PAGE_INDEX_BITS, WDDM_GPU_PTE_PAGE_TABLE_64KB};

/// Bytes of every table this manager allocates (at most 9 index bits a level).
pub const TABLE_BYTES: u64 = 4096;

/// Entries to write into one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableWrite {
    /// `entries` from slot `start` on.
    Entries {
        /// The table's level.
        level: u32,
        /// The table.
        table: TableAt,
        /// First slot.
        start: u32,
        /// The entries.
        entries: Vec<u64>,
    },
    /// `entry` in `count` slots from `start` on (a new table invalidated whole).
    Repeat {
        /// The table's level.
        level: u32,
        /// The table.
        table: TableAt,
        /// First slot.
        start: u32,
        /// Slots.
        count: u32,
        /// The entry.
        entry: u64,
    },
}

impl TableWrite {
    /// The table, its first slot and the entries, the Repeat form spelled out.
    pub fn slots(&self) -> (TableAt, u32, Vec<u64>) {
        match self {
            TableWrite::Entries {
                table,
                start,
                entries,
                ..
            } => (*table, *start, entries.clone()),
            TableWrite::Repeat {
                table,
                start,
                count,
                entry,
                ..
            } => (*table, *start, vec![*entry; *count as usize]),
        }
    }
}

/// Allocation cursor over an area.
#[derive(Clone, Debug)]
struct Area {
    next: u64,
    end: u64,
}

impl Area {
    fn take(&mut self, bytes: u64) -> Option<u64> {
        let at = self.next;
        (at.checked_add(bytes)? <= self.end).then(|| {
            self.next = at + bytes;
            at
        })
    }
}

/// Why the manager could not go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageTablesError {
    /// The area for a level's tables (`segment`) is used up.
    AreaFull {
        /// 0 for system memory, else the segment.
        segment: u32,
    },
}

/// The tables of one address space.
pub struct PageTables {
    index_bits: Vec<u32>,
    table_segments: Vec<u32>,
    ram: Area,
    vram: Area,
    root: TableAt,
    children: HashMap<(u32, u64, u64), TableAt>,
    writes: Vec<TableWrite>,
}

impl PageTables {
    /// Tables of `index_bits` (leaf first, at most 9 bits a level), level `l` in segment
    /// `table_segments[l]`: from `ram` (guest-physical) when 0, else from `vram` (offsets in
    /// that segment).
    pub fn new(
        index_bits: &[u32],
        table_segments: &[u32],
        ram: Range<u64>,
        vram: Range<u64>,
    ) -> Result<Self, PageTablesError> {
        let mut tables = Self {
            index_bits: index_bits.to_vec(),
            table_segments: table_segments.to_vec(),
            ram: Area {
                next: ram.start,
                end: ram.end,
            },
            vram: Area {
                next: vram.start,
                end: vram.end,
            },
            root: TableAt {
                segment: 0,
                address: 0,
            },
            children: HashMap::new(),
            writes: Vec::new(),
        };
        tables.root = tables.allocate(tables.root_level())?;
        Ok(tables)
    }

    /// The root.
    pub fn root(&self) -> TableAt {
        self.root
    }

    /// The root level.
    pub fn root_level(&self) -> u32 {
        u32::try_from(self.index_bits.len().saturating_sub(1)).unwrap_or(0)
    }

    /// Entries of the root (what SET_ROOT_PAGE_TABLE's `NumEntries` covers).
    pub fn root_entries(&self) -> u32 {
        1 << self.bits(self.root_level())
    }

    fn bits(&self, level: u32) -> u32 {
        self.index_bits.get(level as usize).copied().unwrap_or(0)
    }

    fn shift(&self, level: u32) -> u32 {
        12 + self.index_bits.iter().take(level as usize).sum::<u32>()
    }

    fn index(&self, va: u64, level: u32, leaf_64k: bool) -> u64 {
        if leaf_64k {
            let bits = self.bits(0) - WDDM_GPU_64KB_PAGE_INDEX_BITS;
            (va >> 16) & ((1 << bits) - 1)
        } else {
            (va >> self.shift(level)) & ((1 << self.bits(level)) - 1)
        }
    }

    /// A new table for `level`, invalidated whole.
    fn allocate(&mut self, level: u32) -> Result<TableAt, PageTablesError> {
        let segment = self
            .table_segments
            .get(level as usize)
            .copied()
            .unwrap_or(0);
        let area = if segment == 0 {
            &mut self.ram
        } else {
            &mut self.vram
        };
        let address = area
            .take(TABLE_BYTES)
            .ok_or(PageTablesError::AreaFull { segment })?;
        let table = TableAt { segment, address };
        self.writes.push(TableWrite::Repeat {
            level,
            table,
            start: 0,
            count: 1 << self.bits(level),
            entry: 0,
        });
        Ok(table)
    }

    /// The table of `level` on the way to `va`, created with the directories above it if
    /// missing (`leaf_64k`: the level-1 entry points at a 64 KiB leaf table).
    fn table(&mut self, va: u64, level: u32, leaf_64k: bool) -> Result<TableAt, PageTablesError> {
        let mut table = self.root;
        for at in ((level + 1)..=self.root_level()).rev() {
            let index = self.index(va, at, false);
            let key = (at, table.address, index);
            table = match self.children.get(&key) {
                Some(child) => *child,
                None => {
                    let child = self.allocate(at - 1)?;
                    self.children.insert(key, child);
                    let size = if at == 1 && leaf_64k {
                        WDDM_GPU_PTE_PAGE_TABLE_64KB
                    } else {
                        0
                    };
                    self.write(
                        at,
                        table,
                        index,
                        vec![pte(child.segment, child.address, size)],
                    );
                    child
                }
            };
        }
        Ok(table)
    }

    fn write(&mut self, level: u32, table: TableAt, start: u64, entries: Vec<u64>) {
        self.writes.push(TableWrite::Entries {
            level,
            table,
            start: u32::try_from(start).unwrap_or(u32::MAX),
            entries,
        });
    }

    /// Leaf entries for the 4 KiB pages from `va` on, one per entry (split at leaf-table ends).
    pub fn map(&mut self, va: u64, entries: &[u64]) -> Result<(), PageTablesError> {
        self.map_pages(va, entries, false)
    }

    /// Leaf entries for the 64 KiB pages from `va` on, in 64 KiB leaf tables.
    pub fn map_64k(&mut self, va: u64, entries: &[u64]) -> Result<(), PageTablesError> {
        self.map_pages(va, entries, true)
    }

    fn map_pages(
        &mut self,
        va: u64,
        entries: &[u64],
        leaf_64k: bool,
    ) -> Result<(), PageTablesError> {
        let (page, index_bits) = if leaf_64k {
            (1u64 << 16, self.bits(0) - WDDM_GPU_64KB_PAGE_INDEX_BITS)
        } else {
            (1u64 << 12, self.bits(0))
        };
        let per_table = 1u64 << index_bits;
        let mut done = 0usize;
        while done < entries.len() {
            let page_va = va + (done as u64) * page;
            let index = self.index(page_va, 0, leaf_64k);
            let left = usize::try_from(per_table - index).unwrap_or(usize::MAX);
            let take = left.min(entries.len() - done);
            let table = self.table(page_va, 0, leaf_64k)?;
            self.write(0, table, index, entries[done..done + take].to_vec());
            done += take;
        }
        Ok(())
    }

    /// `entry` at `level` for `va` (a large page, a zero range, an invalid entry).
    pub fn set(&mut self, va: u64, level: u32, entry: u64) -> Result<(), PageTablesError> {
        let table = self.table(va, level, false)?;
        let index = self.index(va, level, false);
        self.write(level, table, index, vec![entry]);
        Ok(())
    }

    /// Takes the writes recorded since the last call, in order.
    pub fn take(&mut self) -> Vec<TableWrite> {
        std::mem::take(&mut self.writes)
    }
}

/// Entry arrays to place in guest RAM before the packets reading them run: `(address, bytes)`.
pub type EntryArrays = Vec<(u64, Vec<u8>)>;

/// UPDATE_PAGE_TABLE packets for `writes` (GPU_PHYSICAL), with the entry arrays they read,
/// placed from guest-physical `arrays.start` on.
pub fn packets(
    writes: &[TableWrite],
    arrays: Range<u64>,
) -> Result<(DmaBufferBuilder, EntryArrays), PageTablesError> {
    let mut area = Area {
        next: arrays.start,
        end: arrays.end,
    };
    let mut packets = DmaBufferBuilder::new();
    let mut placed = Vec::new();
    for write in writes {
        match write {
            TableWrite::Entries {
                level,
                table,
                start,
                entries,
            } => {
                let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
                let at = area
                    .take(bytes.len() as u64)
                    .ok_or(PageTablesError::AreaFull { segment: 0 })?;
                let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
                packets.push(&update_page_table(*level, *table, *start, count, at));
                placed.push((at, bytes));
            }
            TableWrite::Repeat {
                level,
                table,
                start,
                count,
                entry,
            } => {
                packets.push(&update_page_table_repeat(
                    *level, *table, *start, *count, *entry,
                ));
            }
        }
    }
    Ok((packets, placed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpuva::WDDM_GPU_PTE_VALID;

    fn three_levels() -> PageTables {
        PageTables::new(
            &[9, 9, 9],
            &[1, 0, 0],
            0x10_0000..0x20_0000,
            0x8000..0x10_0000,
        )
        .unwrap()
    }

    #[test]
    fn a_mapping_makes_its_directories_once_and_splits_at_table_ends() {
        let mut tables = three_levels();
        let root = tables.root();
        assert_eq!(
            root,
            TableAt {
                segment: 0,
                address: 0x10_0000
            }
        );
        // Two pages before the end of a leaf table and two after it.
        let va = (1 << 30) + (510 << 12);
        tables.map(va, &[11, 12, 13, 14]).unwrap();
        let writes = tables.take();
        let entries: Vec<(u32, TableAt, u32, usize)> = writes
            .iter()
            .filter_map(|write| match write {
                TableWrite::Entries {
                    level,
                    table,
                    start,
                    entries,
                } => Some((*level, *table, *start, entries.len())),
                TableWrite::Repeat { .. } => None,
            })
            .collect();
        let level1 = TableAt {
            segment: 0,
            address: 0x10_1000,
        };
        let leaf_a = TableAt {
            segment: 1,
            address: 0x8000,
        };
        let leaf_b = TableAt {
            segment: 1,
            address: 0x9000,
        };
        assert_eq!(
            entries,
            vec![
                (2, root, 1, 1),
                (1, level1, 0, 1),
                (0, leaf_a, 510, 2),
                (1, level1, 1, 1),
                (0, leaf_b, 0, 2),
            ]
        );
        // Every new table was invalidated whole before anything pointed at it.
        let repeats = writes
            .iter()
            .filter(|write| {
                matches!(
                    write,
                    TableWrite::Repeat {
                        count: 512,
                        entry: 0,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(repeats, 4);
        // Mapping again reuses the tables.
        tables.map(va, &[21]).unwrap();
        assert_eq!(tables.take().len(), 1);
    }

    #[test]
    fn a_64k_mapping_marks_its_leaf_table_in_the_directory() {
        let mut tables = three_levels();
        tables.map_64k(0x20_0000, &[pte(1, 0x1_0000, 0)]).unwrap();
        let writes = tables.take();
        let directory = writes.iter().find_map(|write| match write {
            TableWrite::Entries {
                level: 1, entries, ..
            } => Some(entries[0]),
            _ => None,
        });
        let entry = directory.unwrap();
        assert_ne!(entry & WDDM_GPU_PTE_PAGE_TABLE_64KB, 0);
        assert_ne!(entry & WDDM_GPU_PTE_VALID, 0);
        let leaf = writes.iter().find_map(|write| match write {
            TableWrite::Entries {
                level: 0, start, ..
            } => Some(*start),
            _ => None,
        });
        // A 64 KiB leaf table has 9 - 4 = 5 index bits (32 pages, 2 MiB): VA 0x20_0000 is 64 KiB
        // page 32, slot 0 of the next leaf table.
        assert_eq!(leaf, Some(0));
    }

    #[test]
    fn packets_read_their_entries_from_arrays_placed_in_order() {
        let mut tables = three_levels();
        tables.map(0, &[7, 8]).unwrap();
        let writes = tables.take();
        let (buffer, arrays) = packets(&writes, 0x40_0000..0x40_1000).unwrap();
        assert_eq!(
            arrays.len(),
            3,
            "a directory entry per level and the two leaf entries"
        );
        assert_eq!(arrays[0].0, 0x40_0000);
        assert_eq!(
            arrays[2].1,
            [7u64.to_le_bytes(), 8u64.to_le_bytes()].concat()
        );
        // Three Repeat and three array updates, 56 bytes each.
        assert_eq!(buffer.len(), 6 * 56);
        let full = packets(&writes, 0x40_0000..0x40_0008);
        assert_eq!(full.err(), Some(PageTablesError::AreaFull { segment: 0 }));
        let small = PageTables::new(&[9, 9], &[0, 0], 0..0x1000, 0..0);
        let mut small = small.unwrap();
        assert_eq!(
            small.map(0, &[1]),
            Err(PageTablesError::AreaFull { segment: 0 })
        );
    }
}
