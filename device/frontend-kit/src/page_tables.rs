//! The ABI's page-table manager (`wddm_gpu_abi::build::page_tables`) with the guest RAM its
//! entry arrays go to, for tests, benchmarks and fuzz seeds that drive a GPU_PHYSICAL KMD's
//! updates: [`PageTables::take`] gives the arrays to write and the UPDATE_PAGE_TABLE packets to
//! run. A test setting up tables that cannot fit is a broken test: this panics instead.

use std::ops::Range;

use wddm_gpu_abi::build::gpuva::TableAt;
use wddm_gpu_abi::build::page_tables::{packets, EntryArrays, PageTables as TableLayout};
use wddm_gpu_abi::build::DmaBufferBuilder;

/// What [`PageTables`] wants written and run.
#[derive(Debug, Default)]
pub struct PendingUpdates {
    /// Entry arrays: (guest-physical address, bytes) to write into RAM first.
    pub arrays: EntryArrays,
    /// The paging DMA buffer of UPDATE_PAGE_TABLE packets.
    pub packets: DmaBufferBuilder,
}

/// The tables of one address space, written with UPDATE_PAGE_TABLE.
pub struct PageTables {
    layout: TableLayout,
    arrays: Range<u64>,
}

impl PageTables {
    /// Tables of `index_bits` (leaf first), level `l` in segment `table_segments[l]` (0: from
    /// `ram`, else from `vram`); each take's entry arrays from `arrays.start` on.
    pub fn new(
        index_bits: &[u32],
        table_segments: &[u32],
        ram: Range<u64>,
        vram: Range<u64>,
        arrays: Range<u64>,
    ) -> Self {
        Self {
            layout: TableLayout::new(index_bits, table_segments, ram, vram)
                .expect("the table areas hold a root"),
            arrays,
        }
    }

    /// The root.
    pub fn root(&self) -> TableAt {
        self.layout.root()
    }

    /// Entries of the root.
    pub fn root_entries(&self) -> u32 {
        self.layout.root_entries()
    }

    /// Leaf entries for the 4 KiB pages from `va` on.
    pub fn map(&mut self, va: u64, entries: &[u64]) {
        self.layout
            .map(va, entries)
            .expect("the table areas hold the mappings");
    }

    /// `entry` at `level` for `va`.
    pub fn set(&mut self, va: u64, level: u32, entry: u64) {
        self.layout
            .set(va, level, entry)
            .expect("the table areas hold the mappings");
    }

    /// The writes recorded since the last call, as arrays and packets.
    pub fn take(&mut self) -> PendingUpdates {
        let (packets, arrays) =
            packets(&self.layout.take(), self.arrays.clone()).expect("the array area holds them");
        PendingUpdates { arrays, packets }
    }
}
