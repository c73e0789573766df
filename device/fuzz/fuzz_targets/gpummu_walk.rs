//! The MMU's walk and address space over hostile page tables: each input builds a GpuMmu
//! geometry (2 to 6 levels, index bits within the rules, checked by the ABI's validator; an
//! input it refuses is skipped), binds a root, and runs translations, walks, flushes and table
//! writes through one `AddressSpace` over page-table memory of the target's own
//! (`walk_input::FakeTables`: the input's bytes, with addresses outside RAM, in the VRAM window
//! and in segments that do not exist).
//!
//! Checked besides no panic: a walk reads at most one entry per level (exactly one per level
//! from the root down to where it stopped); a run is never longer than asked and never empty
//! on success (unless 0 bytes were asked for); a fault is at the address asked, for the access
//! asked, at a level inside the geometry; with no table write since the last `flush(None)` (or
//! root), every translation agrees with a fresh walk of its first and last byte and the
//! checking mode reports nothing stale; a translation repeated at once with the checking mode
//! on reports nothing the first did not; a stale report names a level of the geometry and an
//! entry that changed; `set_root` refuses exactly what its rules say.
//!
//! Input: `walk_input::Header`, then operations (`walk_input::Op`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu::{
    walk, Access, AddressSpace, FaultKind, MmuFault, Root, RootError, Run, TableAddress,
    TableMemory, Target, LINE_ENTRIES,
};
use vhost_user_wddm_gpu_fuzz::input::Reader;
use vhost_user_wddm_gpu_fuzz::walk_input::{flag, translate, FakeTables, Header, Op, MAX_OPS};
use wddm_gpu_abi::build::gpuva::{gpummu_caps, with_table_segment};
use wddm_gpu_abi::gpummu_rules::{validate_gpummu, MmuGeometry};
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_MMU_CAP_LARGE_PAGE, WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL,
    WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL, WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_VALID,
};
use wddm_gpu_abi::segment_flags::SegmentFlags;

/// A translation repeated at once is checked for new stale reports up to this length.
const TWICE_CHECKED_BYTES: u64 = 256 << 10;
/// Reads of a leaf line, which `FakeTables` makes an entry at a time.
const LINE: u64 = LINE_ENTRIES as u64;

/// Segment 1 memory (CPU-visible), segment 2 an aperture.
const SEGMENTS: [u32; 2] = [
    SegmentFlags::CPU_VISIBLE.bits(),
    SegmentFlags::APERTURE.bits(),
];

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let header = Header::read(&mut input);
    let Some(geometry) = geometry(&header) else {
        return;
    };
    let mut world = World {
        geometry,
        tables: FakeTables::new(),
        space: AddressSpace::new(header.flags & flag::CHECKING != 0),
        checking: header.flags & flag::CHECKING != 0,
        coherent: true,
        stale_seen: 0,
    };
    let root_entries = match header.root_entries {
        0 => world.root_level_entries(),
        entries => u64::from(entries),
    };
    world.set_root(
        TableAddress {
            segment: u32::from(header.root_segment % 3),
            address: u64::from(header.root_page) << 12,
        },
        root_entries,
    );
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        world.run(Op::read(&mut input));
    }
});

/// The header's geometry, if the validator accepts it.
fn geometry(header: &Header) -> Option<MmuGeometry> {
    let bits: Vec<u32> = (0..header.level_count())
        .map(|level| header.index_bits(level))
        .collect();
    let mode = if header.flags & flag::CPU_VIRTUAL != 0 {
        WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL
    } else {
        WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL
    };
    let mut caps = gpummu_caps(&bits, mode);
    for level in 0..bits.len() {
        if header.table_segments & (1 << level) != 0 {
            caps = with_table_segment(caps, level, 1);
        }
    }
    if header.flags & flag::NO_LARGE_PAGES != 0 {
        caps.flags &= !WDDM_GPU_MMU_CAP_LARGE_PAGE;
    }
    validate_gpummu(&caps, &SEGMENTS).ok()
}

fn access(raw: u8) -> Access {
    match raw % 3 {
        0 => Access::Read,
        1 => Access::Write,
        _ => Access::Execute,
    }
}

struct World {
    geometry: MmuGeometry,
    tables: FakeTables,
    space: AddressSpace,
    checking: bool,
    /// No table write since the last `flush(None)` or root: the cache holds only what memory
    /// says.
    coherent: bool,
    /// Stale translations the checking mode counted so far.
    stale_seen: u64,
}

impl World {
    fn root_level_entries(&self) -> u64 {
        let root = self.geometry.root_level();
        self.geometry.level(root).unwrap().entries()
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Translate {
                va,
                length,
                access: raw,
                flags,
            } => {
                let va = if flags & translate::IN_RANGE != 0 {
                    va & (self.geometry.address_limit() - 1)
                } else {
                    va
                };
                let length = if flags & translate::SHORT != 0 {
                    length % (256 << 10)
                } else {
                    length
                };
                self.translate(va, length, access(raw));
                if flags & translate::TWICE != 0 {
                    let before = self.stale_seen;
                    let checked = self.checking;
                    self.translate(va, length, access(raw));
                    // At most 66 pages of at least 4 KiB: no two-way set of the cache gets a
                    // third, so the first translation evicted nothing it used, and the second
                    // meets the very entries the first did.
                    if checked && length <= TWICE_CHECKED_BYTES {
                        assert_eq!(
                            self.stale_seen, before,
                            "a translation repeated at once found a stale translation the first did not report"
                        );
                    }
                }
            }
            Op::Walk {
                va,
                access: raw,
                in_range,
            } => {
                let va = if in_range {
                    va & (self.geometry.address_limit() - 1)
                } else {
                    va
                };
                if let Some(root) = self.space.root() {
                    let _ = self.fresh_walk(&root, va, access(raw));
                }
            }
            Op::FlushAll => {
                self.space.flush(None);
                self.coherent = true;
            }
            Op::Flush { start, end } => {
                if start < end {
                    self.space.flush(Some(start..end));
                }
            }
            Op::WriteEntry { offset, entry } => {
                self.tables.write(offset & !7, &entry.to_le_bytes());
                self.coherent = false;
            }
            Op::WriteBytes { offset, bytes } => {
                self.tables.write(offset, &bytes);
                self.coherent = false;
            }
            Op::Checking(on) => {
                self.space.set_checking(on);
                self.checking = on;
            }
            Op::SetRoot {
                segment,
                address,
                entries,
            } => self.set_root(
                TableAddress {
                    segment: u32::from(segment % 3),
                    address,
                },
                u64::from(entries),
            ),
        }
    }

    /// `set_root`, which must refuse exactly a `NumEntries` outside 1..=the root level's
    /// entries, then an address not 4 KiB aligned.
    fn set_root(&mut self, table: TableAddress, entries: u64) {
        let max = self.root_level_entries();
        let result = self.space.set_root(&self.geometry, table, entries);
        let want = if entries == 0 || entries > max {
            Err(RootError::Entries { entries, max })
        } else if !table.address.is_multiple_of(4096) {
            Err(RootError::Unaligned(table.address))
        } else {
            Ok(())
        };
        assert_eq!(result, want, "set_root({table:?}, {entries})");
        if result.is_ok() {
            assert_eq!(self.space.root(), Some(Root { table, entries }));
            self.coherent = true;
        }
    }

    /// A walk of `va` on its own: its reads and what it found, checked.
    fn fresh_walk(
        &self,
        root: &Root,
        va: u64,
        access: Access,
    ) -> Result<vhost_user_wddm_gpu::Walk, MmuFault> {
        self.tables.take_reads();
        let result = walk(&self.geometry, root, va, access, &self.tables);
        let reads = self.tables.take_reads();
        let top = self.geometry.root_level();
        assert!(
            reads <= self.geometry.level_count(),
            "{reads} reads for {va:#x}"
        );
        match &result {
            Ok(found) => {
                let page = &found.page;
                assert!(page.level <= top);
                assert_eq!(reads, top - page.level + 1, "{found:?}");
                assert!(page.shift >= 12 && page.shift < 64, "{found:?}");
                assert!(page.base <= va && va - page.base < page.size(), "{found:?}");
                assert_eq!(page.base % page.size(), 0, "{found:?}");
                assert_eq!(page.entry, found.path[page.level as usize]);
                for level in 0..=top {
                    let entry = found.path[level as usize];
                    if level < page.level {
                        assert_eq!(entry, 0, "{found:?}");
                    } else {
                        assert_ne!(entry & WDDM_GPU_PTE_VALID, 0, "{found:?}");
                    }
                }
                if let Some(denial) = page.read_only {
                    let level = denial.level;
                    assert!(level >= page.level && level <= top);
                    // The record names the entry that carries the bit, at its level.
                    assert_eq!(denial.entry, found.path[level as usize], "{found:?}");
                    assert_ne!(denial.entry & WDDM_GPU_PTE_READ_ONLY, 0);
                }
                if page.target != Target::Zero {
                    assert_eq!(self.tables.check_page(page.target, page.size()), Ok(()));
                }
            }
            Err(fault) => {
                self.check_fault(fault, va, access);
                match fault.kind {
                    FaultKind::AddressRange | FaultKind::RootOverrun => assert_eq!(reads, 0),
                    _ => assert_eq!(reads, top - fault.level + 1, "{fault:?}"),
                }
            }
        }
        result
    }

    /// What every fault of a translation of `va` for `access` must be.
    fn check_fault(&self, fault: &MmuFault, va: u64, access: Access) {
        assert!(fault.level <= self.geometry.root_level(), "{fault:?}");
        assert_eq!(fault.address, va, "{fault:?}");
        assert_eq!(fault.access, access, "{fault:?}");
        if fault.kind == FaultKind::NoRoot {
            assert!(self.space.root().is_none());
        }
    }

    /// A translation through the address space, checked.
    fn translate(&mut self, va: u64, length: u64, access: Access) {
        self.tables.take_reads();
        let result = self
            .space
            .translate(&self.geometry, &self.tables, va, length, access);
        let reads = u64::from(self.tables.take_reads());
        let levels = u64::from(self.geometry.level_count());
        match &result {
            Ok(run) => {
                assert!(run.len <= length, "{run:?} for {length} bytes");
                assert!(
                    run.len > 0 || length == 0,
                    "an empty run for {length} bytes"
                );
                // One walk (or checking walk) per page visited: the pages of the run, at least
                // 4 KiB each, and the one that ended it; a walk to a leaf reads its line too
                // (an entry at a time here).
                let pages = run.len / 4096 + 3;
                assert!(
                    reads <= (levels + LINE).saturating_mul(pages),
                    "{reads} reads for a run of {} bytes",
                    run.len
                );
            }
            Err(fault) => {
                self.check_fault(fault, va, access);
                // A walk, and its line when the walk found a page the access may not use.
                assert!(
                    reads <= levels + LINE,
                    "{reads} reads for a fault on the first page"
                );
            }
        }
        let (stale, total) = self.space.take_stale();
        for found in stale {
            assert!(found.level <= self.geometry.root_level(), "{found:?}");
            assert_ne!(found.cached, found.memory, "{found:?}");
            assert!(
                found.address >= va && found.address - va < length.max(1),
                "{found:?} outside {va:#x}+{length:#x}"
            );
        }
        assert!(total >= self.stale_seen);
        if self.coherent {
            assert_eq!(
                total, self.stale_seen,
                "stale translations with no table write since the last full flush"
            );
            if let Some(root) = self.space.root() {
                self.agrees_with_memory(&root, va, length, access, &result);
            }
        }
        self.stale_seen = total;
    }

    /// With the cache holding only what memory says: the translation is what fresh walks of
    /// its first and last byte find.
    fn agrees_with_memory(
        &self,
        root: &Root,
        va: u64,
        length: u64,
        access: Access,
        result: &Result<Run, MmuFault>,
    ) {
        let first = self
            .fresh_walk(root, va, access)
            .and_then(|found| found.page.allows(va, access).map(|()| found));
        match (result, first) {
            (Ok(run), Ok(found)) if length > 0 => {
                let page = &found.page;
                assert_eq!(run.target, page.target_of(va), "{run:?} {found:?}");
                let in_page = page.base + page.size() - va;
                assert!(run.len >= in_page.min(length), "{run:?} {found:?}");
                let last = va + run.len - 1;
                let found = self
                    .fresh_walk(root, last, access)
                    .and_then(|found| found.page.allows(last, access).map(|()| found))
                    .unwrap_or_else(|fault| {
                        panic!("the run {run:?} from {va:#x} ends in {fault:?}")
                    });
                let want = run.target.advanced(run.len - 1);
                assert_eq!(Some(found.page.target_of(last)), want, "{run:?} {found:?}");
            }
            (Ok(run), _) if length == 0 => assert_eq!(run.len, 0),
            (Err(fault), Err(fresh)) => assert_eq!(*fault, fresh),
            (result, fresh) => {
                panic!(
                    "the translation {result:?} of {va:#x} disagrees with a fresh walk: {fresh:?}"
                )
            }
        }
    }
}
