//! The virtual_engine target's world and input: a smaller [`World`] whose layouts have a GpuMmu,
//! the steps an input is made of, and what the target checks memory against: every byte a
//! virtual submission may write ([`Writable`], found by enumerating the page tables under the
//! root) and a snapshot of guest RAM and VRAM to compare with.

use std::collections::HashSet;
use std::ops::Range;

use vhost_user_wddm_gpu::{
    walk, Access, DeviceTables, GuestRam, Resolved, Root, SegmentLayout, TableAddress, TableMemory,
    Target,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_64KB_PAGE_INDEX_BITS, WDDM_GPU_PTE_ADDRESS_MASK, WDDM_GPU_PTE_LARGE_PAGE,
    WDDM_GPU_PTE_PAGE_TABLE_64KB, WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_RESERVED_MASK,
    WDDM_GPU_PTE_SEGMENT_MASK, WDDM_GPU_PTE_SEGMENT_SHIFT, WDDM_GPU_PTE_VALID, WDDM_GPU_PTE_ZERO,
};
use wddm_gpu_frontend_kit::layout::{self, Gpummu, Segment};

use crate::engine_world::{fixed_layout, Sizes, World};

/// The memory: 512 KiB of RAM, a 256 KiB hole, 256 KiB more RAM; the VRAM file (1 MiB, the
/// smallest there is; the layouts use its first 256 KiB) at 16 MiB; 256 KiB of device-only
/// VRAM. Small, so a snapshot of all of it per virtual submission is cheap.
pub const SIZES: Sizes = Sizes {
    ram_low_end: 0x8_0000,
    ram_high: 0xc_0000,
    ram_high_size: 0x4_0000,
    vram_gpa: 0x100_0000,
    vram_size: 0x10_0000,
    device_only: 0x4_0000,
};

/// Where paging DMA buffers are written (guest RAM, below the hole).
pub const PAGING_DMA: u64 = 0x7_0000;

/// The segments of the layouts: 256 KiB of CPU-visible VRAM (segment 1), a 1 MiB aperture
/// (segment 2) and 256 KiB of device-only VRAM (segment 3).
const SEGMENTS: [Segment; 3] = [
    Segment {
        flags: layout::CPU_VISIBLE,
        size: "256KiB",
    },
    Segment {
        flags: layout::APERTURE,
        size: "1MiB",
    },
    Segment {
        flags: layout::DEVICE_ONLY,
        size: "256KiB",
    },
];

/// A 4-level 48-bit GpuMmu as the shipped `gpummu.toml` has it: leaf tables in the CPU-visible
/// VRAM segment, directories in system memory.
pub const FOUR_LEVELS: Gpummu = Gpummu::four_levels(4);

/// A small 3-level GpuMmu (27 address bits: 4, 5 and 6 index bits; large pages of 64 KiB at
/// level 1 and 2 MiB at level 2), the processes' leaf tables in device-only VRAM.
pub const SMALL: Gpummu = Gpummu {
    index_bits: &[4, 5, 6],
    table_segments: &[3, 0, 0],
    paging_process_table_segments: &[0, 0, 0],
    max_contexts: 4,
};

/// A 2-level GpuMmu (a resizable root), every table in system memory (the layout says nothing
/// of table segments).
pub const TWO_LEVELS: Gpummu = Gpummu {
    index_bits: &[9, 9],
    table_segments: &[],
    paging_process_table_segments: &[],
    max_contexts: 4,
};

/// The layouts, in the order the input's first byte selects them: WDDM 2.0 with
/// [`FOUR_LEVELS`] and [`SMALL`] over the three [`SEGMENTS`], and [`TWO_LEVELS`] over the first
/// two (no device-only VRAM).
pub fn layouts() -> [String; 3] {
    [
        layout::layout("2.0", &SEGMENTS, Some(&FOUR_LEVELS)),
        layout::layout("2.0", &SEGMENTS, Some(&SMALL)),
        layout::layout("2.0", &SEGMENTS[..2], Some(&TWO_LEVELS)),
    ]
}

/// The world: [`SIZES`] and [`layouts`].
pub fn world() -> World {
    let layouts = layouts()
        .iter()
        .map(|text| fixed_layout(text, SIZES.vram_size))
        .collect();
    World::with("virtual.vram", SIZES, layouts)
}

/// Step opcodes of the virtual_engine target's input (each a byte, then its fields).
pub mod step {
    /// Guest RAM bytes: u32 address (modulo the RAM span), blob.
    pub const RAM: u8 = 0;
    /// VRAM bytes: u32 offset (modulo the VRAM, device-only included), blob.
    pub const VRAM: u8 = 1;
    /// A paging submission: u32 fence, u8 stop (interrupt at that check, 0: only when long),
    /// blob of paging packets (written at [`super::PAGING_DMA`]).
    pub const PAGING: u8 = 2;
    /// SET_ROOT_PAGE_TABLE: u8 segment (modulo 4), u64 address, u16 `NumEntries`.
    pub const ROOT: u8 = 3;
    /// A virtual submission: u32 guest-physical address (modulo the RAM span) the blob is
    /// written at, u64 the DMA buffer's GPU VA, u32 fence, u8 stop (bit 7: a reset rather than
    /// a preemption), blob.
    pub const VIRTUAL: u8 = 4;
    /// [`VIRTUAL`], then raw command fields: u32 dma_buffer_size, start_offset, end_offset, and
    /// u8 flags, reserved (each modulo 2) and node_ordinal (modulo 3).
    pub const VIRTUAL_RAW: u8 = 5;
    /// FLUSH_TLB of the context directly: u64 start, u64 end (both 0: everything; else
    /// skipped unless start < end).
    pub const FLUSH: u8 = 6;
    /// The checking mode: u8 (bit 0: on).
    pub const CHECKING: u8 = 7;
}

/// Byte ranges a virtual submission may write: of guest RAM (guest-physical) and of VRAM
/// (offsets in the VRAM address space), sorted and merged.
#[derive(Clone, Debug, Default)]
pub struct Writable {
    /// Guest RAM.
    pub ram: Vec<Range<u64>>,
    /// VRAM.
    pub vram: Vec<Range<u64>>,
}

fn merge(ranges: &mut Vec<Range<u64>>) {
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges.drain(..) {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    *ranges = merged;
}

fn covers(ranges: &[Range<u64>], at: u64) -> bool {
    let i = ranges.partition_point(|range| range.end <= at);
    ranges.get(i).is_some_and(|range| range.start <= at)
}

fn overlaps(ranges: &[Range<u64>], other: &Range<u64>) -> bool {
    ranges
        .iter()
        .any(|range| range.start < other.end && other.start < range.end)
}

impl Writable {
    /// Adds what `other` holds.
    pub fn extend(&mut self, other: &Writable) {
        self.ram.extend(other.ram.iter().cloned());
        self.vram.extend(other.vram.iter().cloned());
        merge(&mut self.ram);
        merge(&mut self.vram);
    }

    /// Whether guest-physical `address` may be written.
    pub fn ram_covers(&self, address: u64) -> bool {
        covers(&self.ram, address)
    }

    /// Whether VRAM offset `offset` may be written.
    pub fn vram_covers(&self, offset: u64) -> bool {
        covers(&self.vram, offset)
    }
}

/// Where `[offset, offset + length)` of memory segment `segment` is in VRAM, if it is.
fn segment_vram(
    layout: &SegmentLayout,
    segment: u32,
    offset: u64,
    length: u64,
) -> Option<Range<u64>> {
    let base = layout.segment(segment)?.base_address;
    match layout.resolve(segment, base.checked_add(offset)?, length) {
        Ok(Resolved::Vram(range)) => Some(range.start()..range.start() + length),
        _ => None,
    }
}

/// What the tables under `root` map: the bytes writes may reach and the bytes the tables
/// themselves occupy.
#[derive(Clone, Debug, Default)]
pub struct Mapped {
    /// Storage of pages writable through some address.
    pub writable: Writable,
    /// Storage of the tables read.
    pub tables: Writable,
}

impl Mapped {
    /// Whether a write could change a table: then what is mapped may change while a
    /// submission runs.
    pub fn tables_writable(&self) -> bool {
        self.tables
            .ram
            .iter()
            .any(|range| overlaps(&self.writable.ram, range))
            || self
                .tables
                .vram
                .iter()
                .any(|range| overlaps(&self.writable.vram, range))
    }
}

/// Every page writable under `root`, found by walking every table reachable from it (each
/// table once per level, 64 KiB leaf bit and read-only path) and asking the MMU's own [`walk`]
/// about every entry that maps a page; `None` when that takes more than `budget` entry reads.
pub fn mapped<M: vm_memory::GuestMemoryBackend>(
    geometry: &MmuGeometry,
    root: &Root,
    tables: &DeviceTables<'_, M>,
    layout: &SegmentLayout,
    budget: u32,
) -> Option<Mapped> {
    let mut out = Mapped::default();
    let mut reads = 0u32;
    let top = geometry.root_level();
    let mut stack = vec![(root.table, top, 0u64, false, false)];
    let mut visited = HashSet::new();
    while let Some((table, level, prefix, leaf_64k, read_only)) = stack.pop() {
        if !visited.insert((table, level, leaf_64k, read_only)) {
            continue;
        }
        let desc = geometry.level(level)?;
        let (shift, bits) = if level == 0 && leaf_64k {
            (16, desc.index_bits() - WDDM_GPU_64KB_PAGE_INDEX_BITS)
        } else {
            (desc.shift(), desc.index_bits())
        };
        let mut count = 1u64 << bits;
        if level == top {
            count = count.min(root.entries);
        }
        let bytes = count * 8;
        if table.segment == 0 {
            out.tables
                .ram
                .push(table.address..table.address.saturating_add(bytes));
        } else if let Some(range) = segment_vram(layout, table.segment, table.address, bytes) {
            out.tables.vram.push(range);
        }
        for index in 0..count {
            reads += 1;
            if reads > budget {
                return None;
            }
            let Ok(entry) = tables.read_entry(table, index) else {
                continue;
            };
            if entry & WDDM_GPU_PTE_VALID == 0 || entry & WDDM_GPU_PTE_RESERVED_MASK != 0 {
                continue;
            }
            let va = prefix | (index << shift);
            let read_only = read_only || entry & WDDM_GPU_PTE_READ_ONLY != 0;
            if level > 0 && entry & (WDDM_GPU_PTE_LARGE_PAGE | WDDM_GPU_PTE_ZERO) == 0 {
                let segment = u32::try_from(
                    (entry & WDDM_GPU_PTE_SEGMENT_MASK) >> WDDM_GPU_PTE_SEGMENT_SHIFT,
                )
                .unwrap();
                let child = TableAddress {
                    segment,
                    address: entry & WDDM_GPU_PTE_ADDRESS_MASK,
                };
                let child_64k = entry & WDDM_GPU_PTE_PAGE_TABLE_64KB != 0;
                stack.push((child, level - 1, va, child_64k, read_only));
                continue;
            }
            if read_only || entry & WDDM_GPU_PTE_ZERO != 0 {
                continue;
            }
            reads += top - level + 1;
            let Ok(found) = walk(geometry, root, va, Access::Write, tables) else {
                continue;
            };
            if found.page.allows(va, Access::Write).is_err() {
                continue;
            }
            let size = found.page.size();
            match found.page.target {
                Target::System(address) => {
                    out.writable.ram.push(address..address.saturating_add(size));
                }
                Target::Segment { segment, offset } => {
                    if let Some(range) = segment_vram(layout, segment, offset, size) {
                        out.writable.vram.push(range);
                    }
                }
                Target::Zero => {}
            }
        }
    }
    for ranges in [
        &mut out.writable.ram,
        &mut out.writable.vram,
        &mut out.tables.ram,
        &mut out.tables.vram,
    ] {
        merge(ranges);
    }
    Some(out)
}

/// Guest RAM and VRAM as they were, in buffers allocated once and reused.
pub struct Snapshot {
    /// Each RAM region: its guest-physical start and bytes.
    ram: Vec<(u64, Vec<u8>)>,
    /// The BAR and the device-only VRAM: offset and bytes.
    vram: Vec<(u64, Vec<u8>)>,
}

/// Bytes compared at a time.
const PAGE: usize = 4096;

impl Snapshot {
    /// Buffers for a world of `sizes`.
    pub fn new(sizes: &Sizes) -> Self {
        let buffer = |(start, len): (u64, u64)| (start, vec![0; usize::try_from(len).unwrap()]);
        Self {
            ram: sizes.ram_regions().into_iter().map(buffer).collect(),
            vram: [(0, sizes.vram_size), (sizes.vram_size, sizes.device_only)]
                .into_iter()
                .filter(|&(_, len)| len > 0)
                .map(buffer)
                .collect(),
        }
    }

    /// Copies every byte of the world's RAM and VRAM.
    pub fn capture(&mut self, world: &World) {
        for (start, bytes) in &mut self.ram {
            world
                .mem
                .read_slice(bytes, GuestAddress(*start))
                .expect("RAM region");
        }
        for (offset, bytes) in &mut self.vram {
            world
                .vram
                .slice(*offset, bytes.len())
                .expect("VRAM")
                .copy_to(&mut bytes[..]);
        }
    }

    /// The first byte of the world that differs from the snapshot and `writable` does not
    /// cover: "RAM" or "VRAM" and its address or offset.
    pub fn first_unwritable_change(
        &self,
        world: &World,
        writable: &Writable,
    ) -> Option<(&'static str, u64)> {
        let mut now = [0u8; PAGE];
        for (start, before) in &self.ram {
            for (page, was) in before.chunks(PAGE).enumerate() {
                let at = start + (page * PAGE) as u64;
                let now = &mut now[..was.len()];
                world
                    .mem
                    .read_slice(now, GuestAddress(at))
                    .expect("RAM region");
                if let Some(i) = first_change(was, now, |i| writable.ram_covers(at + i)) {
                    return Some(("RAM", at + i));
                }
            }
        }
        for (offset, before) in &self.vram {
            for (page, was) in before.chunks(PAGE).enumerate() {
                let at = offset + (page * PAGE) as u64;
                let now = &mut now[..was.len()];
                world
                    .vram
                    .slice(at, now.len())
                    .expect("VRAM")
                    .copy_to(&mut now[..]);
                if let Some(i) = first_change(was, now, |i| writable.vram_covers(at + i)) {
                    return Some(("VRAM", at + i));
                }
            }
        }
        None
    }
}

/// The first offset where `a` and `b` differ and `allowed` says no.
fn first_change(a: &[u8], b: &[u8], allowed: impl Fn(u64) -> bool) -> Option<u64> {
    if a == b {
        return None;
    }
    a.iter()
        .zip(b)
        .enumerate()
        .find(|&(i, (p, q))| p != q && !allowed(i as u64))
        .map(|(i, _)| i as u64)
}

/// Guest RAM of the world (the VRAM window excluded), as the device sees it.
pub fn guest_ram(world: &World) -> GuestRam<'_, GuestMemoryMmap<()>> {
    GuestRam::new(&world.mem, world.vram.guest_window())
}
