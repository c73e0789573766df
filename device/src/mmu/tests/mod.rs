//! The MMU on real guest memory and VRAM (the engine rig's): tables written into guest RAM or
//! a VRAM segment as a KMD would, translations checked against what was written.

mod cache;
mod faults;
mod hostile;
mod properties;
mod translate;

use std::cell::Cell;

use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::build::gpuva::{gpummu_caps, pte, with_table_segment};
use wddm_gpu_abi::gpummu_rules::{validate_gpummu, MmuGeometry};
use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_PAGE_TABLE_64KB;
use wddm_gpu_abi::gpuva::{WddmGpuMmuCaps, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL};

use super::fault::FaultKind;
use super::fault::{Access, MmuFault};
use super::space::{AddressSpace, Run};
use super::tables::DeviceTables;
use super::walk::{TableAddress, TableMemory, Target};
use crate::memory::guest_ram::GuestRam;
use crate::testkit::engine_rig::{Rig, PAGE};

/// Page tables are allocated from here up (guest RAM above the rig's data pages).
pub const TABLES: u64 = 0x80_0000;
/// The rig's CPU-visible VRAM segment.
pub const VRAM_SEGMENT: u32 = 1;

/// A geometry of `index_bits` (leaf first), tables in system memory, GPU_PHYSICAL updates.
pub fn geometry(index_bits: &[u32]) -> MmuGeometry {
    checked(gpummu_caps(
        index_bits,
        WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
    ))
}

/// `caps` checked against the rig's default layout (segment 1 VRAM, segment 2 aperture).
pub fn checked(caps: WddmGpuMmuCaps) -> MmuGeometry {
    let rig_segments = [
        wddm_gpu_abi::segment_flags::SegmentFlags::CPU_VISIBLE.bits(),
        wddm_gpu_abi::segment_flags::SegmentFlags::APERTURE.bits(),
    ];
    validate_gpummu(&caps, &rig_segments).unwrap()
}

/// `caps` with every level's tables in the VRAM segment.
pub fn tables_in_vram(index_bits: &[u32]) -> MmuGeometry {
    let mut caps = gpummu_caps(index_bits, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL);
    for level in 0..index_bits.len() {
        caps = with_table_segment(caps, level, VRAM_SEGMENT);
    }
    checked(caps)
}

/// A KMD's view of one address space: a root and the tables under it, allocated page by page
/// in guest RAM (or at the start of the VRAM segment) as entries need them.
pub struct PageTables<'r> {
    pub rig: &'r Rig,
    pub geometry: MmuGeometry,
    pub root: TableAddress,
    next: u64,
}

impl<'r> PageTables<'r> {
    /// A fresh root in guest RAM at `TABLES + slot * 1 MiB` (slots keep address spaces apart).
    pub fn new(rig: &'r Rig, geometry: MmuGeometry, slot: u64) -> Self {
        let start = TABLES + slot * (1 << 20);
        Self::at(
            rig,
            geometry,
            TableAddress {
                segment: 0,
                address: start,
            },
        )
    }

    /// A fresh root at `root`; later tables follow it in the same store.
    pub fn at(rig: &'r Rig, geometry: MmuGeometry, root: TableAddress) -> Self {
        let mut tables = Self {
            rig,
            geometry,
            root,
            next: root.address,
        };
        tables.allocate();
        tables
    }

    /// A zeroed table page: its address.
    fn allocate(&mut self) -> u64 {
        let address = self.next;
        let size = self.geometry.level(0).unwrap().table_size().max(PAGE);
        self.next += size;
        self.write(address, &vec![0; usize::try_from(size).unwrap()]);
        address
    }

    fn write(&self, address: u64, bytes: &[u8]) {
        if self.root.segment == 0 {
            self.rig.ram_write(address, bytes);
        } else {
            self.rig.vram_write(address, bytes);
        }
    }

    /// The entry at `address` (a [`Self::slot`]), read from the tables' store.
    pub fn read_u64(&self, address: u64) -> u64 {
        let bytes = if self.root.segment == 0 {
            self.rig.ram_read(address, 8)
        } else {
            self.rig.vram_read(address, 8)
        };
        u64::from_le_bytes(bytes.try_into().unwrap())
    }

    /// Where the entry for `va` at `level` is, creating the tables above it (`leaf_64k`: the
    /// level-1 entry on the way points at a 64 KiB leaf table).
    pub fn slot(&mut self, va: u64, level: u32, leaf_64k: bool) -> u64 {
        let mut table = self.root.address;
        let mut level_now = self.geometry.root_level();
        loop {
            let desc = *self.geometry.level(level_now).unwrap();
            let (shift, bits) = if level_now == 0 && leaf_64k {
                (16, desc.index_bits() - 4)
            } else {
                (desc.shift(), desc.index_bits())
            };
            let slot = table + ((va >> shift) & ((1 << bits) - 1)) * 8;
            if level_now == level {
                return slot;
            }
            let entry = self.read_u64(slot);
            let next = if entry == 0 {
                let fresh = self.allocate();
                let size_flag = if level_now == 1 && leaf_64k {
                    WDDM_GPU_PTE_PAGE_TABLE_64KB
                } else {
                    0
                };
                self.write(
                    slot,
                    &pte(self.root.segment, fresh, size_flag).to_le_bytes(),
                );
                fresh
            } else {
                entry & wddm_gpu_abi::gpuva::WDDM_GPU_PTE_ADDRESS_MASK
            };
            table = next;
            level_now -= 1;
        }
    }

    /// Writes `entry` for `va` at `level`.
    pub fn set(&mut self, va: u64, level: u32, entry: u64) {
        let slot = self.slot(va, level, false);
        self.write(slot, &entry.to_le_bytes());
    }

    /// Writes `entry` for `va` in a 64 KiB leaf table.
    pub fn set_64k(&mut self, va: u64, entry: u64) {
        let slot = self.slot(va, 0, true);
        self.write(slot, &entry.to_le_bytes());
    }

    /// Maps the 4 KiB page at `va` to guest-physical `gpa` with `flags`.
    pub fn map(&mut self, va: u64, gpa: u64, flags: u64) {
        self.set(va, 0, pte(0, gpa, flags));
    }

    /// An address space bound to this root with `entries` root entries (all when `None`).
    pub fn space(&self, checking: bool) -> AddressSpace {
        let mut space = AddressSpace::new(checking);
        let entries = self
            .geometry
            .level(self.geometry.root_level())
            .unwrap()
            .entries();
        space.set_root(&self.geometry, self.root, entries).unwrap();
        space
    }
}

/// Translates through the rig's memory.
pub fn translate(
    rig: &Rig,
    geometry: &MmuGeometry,
    space: &mut AddressSpace,
    va: u64,
    length: u64,
    access: Access,
) -> Result<Run, MmuFault> {
    let ram = GuestRam::new(&rig.mem, rig.vram.guest_window());
    let tables = DeviceTables::new(&ram, &rig.vram, &rig.layout);
    space.translate(geometry, &tables, va, length, access)
}

/// Runs `f` over the rig's device tables, wrapped to count the entries read.
pub fn counting<R>(
    rig: &Rig,
    f: impl FnOnce(&Counting<'_, DeviceTables<'_, GuestMemoryMmap<()>>>) -> R,
) -> R {
    let ram = GuestRam::new(&rig.mem, rig.vram.guest_window());
    let tables = DeviceTables::new(&ram, &rig.vram, &rig.layout);
    f(&Counting {
        inner: &tables,
        reads: Cell::new(0),
    })
}

/// Counts the entries a walk reads.
pub struct Counting<'a, T> {
    pub inner: &'a T,
    pub reads: Cell<u32>,
}

impl<T: TableMemory> TableMemory for Counting<'_, T> {
    fn read_entry(&self, table: TableAddress, index: u64) -> Result<u64, FaultKind> {
        self.reads.set(self.reads.get() + 1);
        self.inner.read_entry(table, index)
    }

    fn check_page(&self, target: Target, size: u64) -> Result<(), FaultKind> {
        self.inner.check_page(target, size)
    }
}
