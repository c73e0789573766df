//! A GPU_PHYSICAL KMD's page-table manager in miniature: it lays out the tables of one address
//! space (each level in the segment the geometry puts it, allocated from areas the caller gives)
//! and writes every entry with UPDATE_PAGE_TABLE packets, new tables first invalidated with a
//! Repeat update, as VidMm has a KMD do. The caller writes [`PendingUpdates::arrays`] into guest
//! RAM and submits [`PendingUpdates::packets`] on the paging node.

use std::collections::HashMap;
use std::ops::Range;

use wddm_gpu_abi::build::gpuva::{pte, update_page_table, update_page_table_repeat, TableAt};
use wddm_gpu_abi::build::DmaBufferBuilder;
use zerocopy::IntoBytes;

const TABLE_BYTES: u64 = 4096;

/// Allocation cursor over an area.
#[derive(Clone, Debug)]
struct Area {
    next: u64,
    end: u64,
}

impl Area {
    fn new(range: Range<u64>) -> Self {
        Self {
            next: range.start,
            end: range.end,
        }
    }

    fn take(&mut self, bytes: u64) -> u64 {
        let at = self.next;
        assert!(at + bytes <= self.end, "page-table area exhausted");
        self.next += bytes;
        at
    }
}

/// What [`PageTables`] wants written and run.
#[derive(Debug, Default)]
pub struct PendingUpdates {
    /// Entry arrays: (guest-physical address, bytes) to write into RAM first.
    pub arrays: Vec<(u64, Vec<u8>)>,
    /// The paging DMA buffer of UPDATE_PAGE_TABLE packets.
    pub packets: DmaBufferBuilder,
}

/// The tables of one address space.
pub struct PageTables {
    index_bits: Vec<u32>,
    table_segments: Vec<u32>,
    ram: Area,
    vram: Area,
    arrays: Area,
    root: TableAt,
    children: HashMap<(u32, u64, u64), TableAt>,
    pending: PendingUpdates,
}

impl PageTables {
    /// Tables of `index_bits` (leaf first, at most 9 bits a level: 4 KiB tables), level `l` in
    /// segment `table_segments[l]` (0: from `ram`, else from `vram`, offsets in that segment);
    /// entry arrays go to `arrays` (guest RAM).
    pub fn new(
        index_bits: &[u32],
        table_segments: &[u32],
        ram: Range<u64>,
        vram: Range<u64>,
        arrays: Range<u64>,
    ) -> Self {
        assert_eq!(index_bits.len(), table_segments.len());
        let mut tables = Self {
            index_bits: index_bits.to_vec(),
            table_segments: table_segments.to_vec(),
            ram: Area::new(ram),
            vram: Area::new(vram),
            arrays: Area::new(arrays),
            root: TableAt {
                segment: 0,
                address: 0,
            },
            children: HashMap::new(),
            pending: PendingUpdates::default(),
        };
        let root_level = tables.root_level();
        tables.root = tables.allocate(root_level);
        tables
    }

    /// The root.
    pub fn root(&self) -> TableAt {
        self.root
    }

    /// The root level.
    pub fn root_level(&self) -> u32 {
        u32::try_from(self.index_bits.len()).unwrap() - 1
    }

    /// Entries of the root (what SET_ROOT_PAGE_TABLE's `NumEntries` covers).
    pub fn root_entries(&self) -> u32 {
        1 << self.index_bits[self.root_level() as usize]
    }

    fn shift(&self, level: u32) -> u32 {
        12 + self.index_bits[..level as usize].iter().sum::<u32>()
    }

    fn index(&self, va: u64, level: u32) -> u64 {
        (va >> self.shift(level)) & ((1 << self.index_bits[level as usize]) - 1)
    }

    /// A new table for `level`, invalidated by a Repeat update.
    fn allocate(&mut self, level: u32) -> TableAt {
        let segment = self.table_segments[level as usize];
        let address = if segment == 0 {
            self.ram.take(TABLE_BYTES)
        } else {
            self.vram.take(TABLE_BYTES)
        };
        let table = TableAt { segment, address };
        let entries = 1u32 << self.index_bits[level as usize];
        self.pending
            .packets
            .push(&update_page_table_repeat(level, table, 0, entries, 0));
        table
    }

    /// The level-0 table holding `va`, created (with the directories above) if missing.
    fn leaf_table(&mut self, va: u64) -> TableAt {
        let mut table = self.root;
        for level in (1..=self.root_level()).rev() {
            let index = self.index(va, level);
            let key = (level, table.address, index);
            table = match self.children.get(&key) {
                Some(child) => *child,
                None => {
                    let child = self.allocate(level - 1);
                    self.children.insert(key, child);
                    self.write(level, table, index, &[pte(child.segment, child.address, 0)]);
                    child
                }
            };
        }
        table
    }

    /// One UPDATE_PAGE_TABLE of `entries` from slot `start` of `table`.
    fn write(&mut self, level: u32, table: TableAt, start: u64, entries: &[u64]) {
        let bytes = entries.as_bytes().to_vec();
        let at = self.arrays.take(bytes.len() as u64);
        let start = u32::try_from(start).unwrap();
        let count = u32::try_from(entries.len()).unwrap();
        self.pending
            .packets
            .push(&update_page_table(level, table, start, count, at));
        self.pending.arrays.push((at, bytes));
    }

    /// Leaf entries for the 4 KiB pages from `va` on, one per entry (split at leaf-table ends).
    pub fn map(&mut self, va: u64, entries: &[u64]) {
        let per_table = 1u64 << self.index_bits[0];
        let mut done = 0usize;
        while done < entries.len() {
            let page_va = va + (done as u64) * 4096;
            let index = self.index(page_va, 0);
            let left_in_table = usize::try_from(per_table - index).unwrap();
            let take = left_in_table.min(entries.len() - done);
            let table = self.leaf_table(page_va);
            self.write(0, table, index, &entries[done..done + take]);
            done += take;
        }
    }

    /// The entry `entry` at `level` for `va` (a large page, a zero range, an invalid entry).
    pub fn set(&mut self, va: u64, level: u32, entry: u64) {
        if level == 0 {
            self.map(va, &[entry]);
            return;
        }
        let mut table = self.root;
        for at in ((level + 1)..=self.root_level()).rev() {
            let index = self.index(va, at);
            let key = (at, table.address, index);
            table = match self.children.get(&key) {
                Some(child) => *child,
                None => {
                    let child = self.allocate(at - 1);
                    self.children.insert(key, child);
                    self.write(at, table, index, &[pte(child.segment, child.address, 0)]);
                    child
                }
            };
        }
        let index = self.index(va, level);
        self.write(level, table, index, &[entry]);
    }

    /// Takes what is to be written and run.
    pub fn take(&mut self) -> PendingUpdates {
        std::mem::take(&mut self.pending)
    }
}
