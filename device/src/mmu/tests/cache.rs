//! The translation cache's contract (served until a flush covers it; invalid entries never
//! cached) and the checking mode that reports a flush the KMD skipped.

use wddm_gpu_abi::gpuva::{WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_ZERO};

use super::*;
use crate::mmu::fault::FaultKind;
use crate::mmu::space::StaleTranslation;
use crate::mmu::walk::{walk, Root, Target, LINE_ENTRIES};
use crate::testkit::engine_rig::{DATA, RAM_SIZE, VRAM_GPA, VRAM_SIZE};

const VA: u64 = 0x4000_0000;
/// Pages of 64 KiB, in leaf tables of their own (a level-1 entry of their own).
const VA_64K: u64 = VA + (1 << 21);
const SIZE_64K: u64 = 1 << 16;

fn target(rig: &Rig, geometry: &MmuGeometry, space: &mut AddressSpace, va: u64) -> Target {
    translate(rig, geometry, space, va, 8, Access::Read)
        .unwrap()
        .target
}

/// Asserts that `va` translates to the guest RAM address `gpa`.
#[track_caller]
fn assert_serves(rig: &Rig, geometry: &MmuGeometry, space: &mut AddressSpace, va: u64, gpa: u64) {
    assert_eq!(
        target(rig, geometry, space, va),
        Target::System(gpa),
        "VA {va:#x}"
    );
}

/// How translating `va` faults (it must).
#[track_caller]
fn fault_at(rig: &Rig, geometry: &MmuGeometry, space: &mut AddressSpace, va: u64) -> FaultKind {
    translate(rig, geometry, space, va, 8, Access::Read)
        .expect_err("the translation faults")
        .kind
}

/// Points the level-1 entry above `va` at a new leaf table (in slot 1) that maps `va` to
/// `gpa`, without a flush (a KMD moving a leaf table and skipping FLUSH_TLB); returns the entry
/// before and after.
fn move_leaf_table(tables: &mut PageTables<'_>, va: u64, gpa: u64) -> (u64, u64) {
    let directory = tables.slot(va, 1, false);
    let old = tables.read_u64(directory);
    let mut moved = PageTables::new(tables.rig, tables.geometry, 1);
    moved.map(va, gpa, 0);
    let moved_directory = moved.slot(va, 1, false);
    let new = moved.read_u64(moved_directory);
    tables.rig.ram_write(directory, &new.to_le_bytes());
    (old, new)
}

#[test]
fn a_changed_entry_is_not_seen_until_a_flush_covers_it() {
    let rig = Rig::new("mmu-tlb");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(VA, DATA, 0);
    tables.map(VA + PAGE, DATA + PAGE, 0);
    let mut space = tables.space(false);
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + PAGE);
    tables.map(VA, DATA + 8 * PAGE, 0);
    tables.map(VA + PAGE, DATA + 9 * PAGE, 0);
    // Served from the cache, as hardware would.
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    // A flush of the second page only.
    space.flush(Some(VA + PAGE..VA + 2 * PAGE));
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + 9 * PAGE);
    space.flush(None);
    assert_serves(&rig, &geometry, &mut space, VA, DATA + 8 * PAGE);
}

#[test]
fn an_invalid_entry_is_never_cached() {
    let rig = Rig::new("mmu-tlb-invalid");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(VA + PAGE, DATA, 0);
    let mut space = tables.space(false);
    let missing = translate(&rig, &geometry, &mut space, VA, 8, Access::Read).unwrap_err();
    assert_eq!(missing.kind, FaultKind::NotPresent);
    tables.map(VA, DATA + PAGE, 0);
    // InvalidTlbEntriesNotCached: no flush needed for invalid to valid.
    assert_serves(&rig, &geometry, &mut space, VA, DATA + PAGE);
}

#[test]
fn binding_a_root_drops_the_cache() {
    let rig = Rig::new("mmu-tlb-root");
    let geometry = geometry(&[9, 9, 9]);
    let mut first = PageTables::new(&rig, geometry, 0);
    first.map(VA, DATA, 0);
    let mut second = PageTables::new(&rig, geometry, 1);
    second.map(VA, DATA + 3 * PAGE, 0);
    let mut space = first.space(false);
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    space.set_root(&geometry, second.root, 512).unwrap();
    assert_serves(&rig, &geometry, &mut space, VA, DATA + 3 * PAGE);
}

#[test]
fn checking_mode_catches_a_skipped_flush_with_the_level_and_both_entries() {
    let rig = Rig::new("mmu-checking");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(VA, DATA, 0);
    let mut space = tables.space(true);
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    let leaf = tables.slot(VA, 0, false);
    let old = tables.read_u64(leaf);
    tables.map(VA, DATA + 5 * PAGE, 0);
    let new = tables.read_u64(leaf);
    // The KMD "forgot" FLUSH_TLB: the stale translation is still served, and reported once.
    for _ in 0..3 {
        assert_serves(&rig, &geometry, &mut space, VA + 0x10, DATA + 0x10);
    }
    let (stale, count) = space.take_stale();
    assert_eq!(
        stale.collect::<Vec<_>>(),
        vec![StaleTranslation {
            address: VA + 0x10,
            level: 0,
            cached: old,
            memory: new
        }]
    );
    assert_eq!(count, 1);
    // With the flush, nothing is stale.
    space.flush(Some(VA..VA + PAGE));
    assert_serves(&rig, &geometry, &mut space, VA, DATA + 5 * PAGE);
    assert_serves(&rig, &geometry, &mut space, VA, DATA + 5 * PAGE);
    assert_eq!(space.take_stale().0.count(), 0);
}

#[test]
fn checking_mode_names_the_directory_level_that_changed() {
    let rig = Rig::new("mmu-checking-directory");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(VA, DATA, 0);
    let mut space = tables.space(true);
    target(&rig, &geometry, &mut space, VA);
    // The level-1 entry is cleared (the leaf table freed) without a flush.
    let directory = tables.slot(VA, 1, false);
    let old = tables.read_u64(directory);
    rig.ram_write(directory, &0u64.to_le_bytes());
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    let (stale, _) = space.take_stale();
    let stale: Vec<_> = stale.collect();
    assert_eq!(stale.len(), 1);
    assert_eq!(
        (stale[0].level, stale[0].cached, stale[0].memory),
        (1, old, 0)
    );
}

#[test]
fn a_cached_leaf_table_serves_its_other_pages_until_a_flush_in_both_modes() {
    for checking in [false, true] {
        let rig = Rig::new("mmu-directory-cache");
        let geometry = geometry(&[9, 9, 9]);
        let mut tables = PageTables::new(&rig, geometry, 0);
        // Two pages of one leaf table, in different lines; only the first is used.
        let other = VA + 64 * PAGE;
        tables.map(VA, DATA, 0);
        tables.map(other, DATA + PAGE, 0);
        let mut space = tables.space(checking);
        assert_serves(&rig, &geometry, &mut space, VA, DATA);
        // The level-1 entry is pointed at another leaf table, mapping the other page elsewhere,
        // without a flush: the cached leaf table still serves it, as a GPU's directory cache
        // would, and the checking mode (which changes nothing it serves) names the level.
        let (old, new) = move_leaf_table(&mut tables, other, DATA + 7 * PAGE);
        assert_serves(&rig, &geometry, &mut space, other, DATA + PAGE);
        let (stale, count) = space.take_stale();
        let stale: Vec<_> = stale
            .map(|s| (s.address, s.level, s.cached, s.memory))
            .collect();
        if checking {
            assert_eq!(stale, [(other, 1, old, new)]);
            // Reported once: the page is cached now, and a hit does not report it again.
            assert_serves(&rig, &geometry, &mut space, other, DATA + PAGE);
            assert_eq!(space.take_stale().1, count);
        } else {
            assert_eq!((stale, count), (vec![], 0));
        }
        // A flush covering any page of the leaf table drops it with the translations.
        space.flush(Some(other..other + PAGE));
        assert_serves(&rig, &geometry, &mut space, other, DATA + 7 * PAGE);
    }
}

#[test]
fn a_line_refilled_through_a_stale_directory_is_not_reported_again() {
    let rig = Rig::new("mmu-stale-directory-refill");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    // Pages 0 and 1 of one line cached, with their leaf table as the cached directory.
    tables.map(VA, DATA, 0);
    tables.map(VA + PAGE, DATA + PAGE, 0);
    let mut space = tables.space(true);
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + PAGE);
    // Without a flush: the level-1 entry moves to another leaf table, and page 2 of the line
    // is mapped in the old one (not cached: it was invalid).
    let page_2 = tables.slot(VA + 2 * PAGE, 0, false);
    move_leaf_table(&mut tables, VA, DATA + 7 * PAGE);
    rig.ram_write(page_2, &pte(0, DATA + 2 * PAGE, 0).to_le_bytes());
    // Pages 0 and 1 are served from the cache, page 2 through the cached leaf table, whose
    // line fill caches pages 0 and 1 again through the same stale level-1 entry: each of the
    // three is reported once, however often the run is translated.
    for _ in 0..3 {
        assert_eq!(
            translate(&rig, &geometry, &mut space, VA, 3 * PAGE, Access::Read),
            Ok(Run {
                target: Target::System(DATA),
                len: 3 * PAGE
            })
        );
    }
    let (stale, count) = space.take_stale();
    let mut addresses: Vec<u64> = stale.map(|found| found.address).collect();
    addresses.sort_unstable();
    assert_eq!(addresses, [VA, VA + PAGE, VA + 2 * PAGE]);
    assert_eq!(count, 3);
}

#[test]
fn a_flushed_page_cached_again_through_a_stale_directory_is_reported_again() {
    let rig = Rig::new("mmu-flushed-refill");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    let other_line = VA + 64 * PAGE;
    tables.map(VA, DATA, 0);
    tables.map(VA + PAGE, DATA + PAGE, 0);
    tables.map(other_line, DATA + 3 * PAGE, 0);
    let page_2 = tables.slot(VA + 2 * PAGE, 0, false);
    let mut space = tables.space(true);
    assert_serves(&rig, &geometry, &mut space, VA, DATA);
    // Page 1's entry changes without a flush: reported (level 0), then flushed alone.
    tables.map(VA + PAGE, DATA + 5 * PAGE, 0);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + PAGE);
    space.flush(Some(VA + PAGE..VA + 2 * PAGE));
    // The leaf table is cached again by a walk to another of its lines; then its directory
    // entry moves without a flush, and page 2 is mapped in the old table.
    assert_serves(&rig, &geometry, &mut space, other_line, DATA + 3 * PAGE);
    move_leaf_table(&mut tables, VA, DATA + 7 * PAGE);
    rig.ram_write(page_2, &pte(0, DATA + 2 * PAGE, 0).to_le_bytes());
    // Page 2 through the cached leaf table (reported, level 1); its line fill caches page 1
    // again, a new translation since the flush: served from the cache, it is reported too.
    assert_serves(&rig, &geometry, &mut space, VA + 2 * PAGE, DATA + 2 * PAGE);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + 5 * PAGE);
    assert_serves(&rig, &geometry, &mut space, VA + PAGE, DATA + 5 * PAGE);
    let (stale, count) = space.take_stale();
    let found: Vec<(u64, u32)> = stale.map(|found| (found.address, found.level)).collect();
    assert_eq!(found, [(VA + PAGE, 0), (VA + 2 * PAGE, 1), (VA + PAGE, 1)]);
    assert_eq!(count, 3);
}

#[test]
fn without_checking_mode_nothing_is_rewalked() {
    let rig = Rig::new("mmu-no-checking");
    let geometry = geometry(&[9, 9, 9]);
    let mut tables = PageTables::new(&rig, geometry, 0);
    tables.map(VA, DATA, 0);
    let mut space = tables.space(false);
    target(&rig, &geometry, &mut space, VA);
    tables.map(VA, DATA + PAGE, 0);
    target(&rig, &geometry, &mut space, VA);
    assert_eq!(space.take_stale().1, 0);
    space.set_checking(true);
    target(&rig, &geometry, &mut space, VA);
    assert_eq!(space.take_stale().1, 1);
}

#[test]
fn a_walk_caches_the_valid_entries_of_its_line_and_no_others() {
    let rig = Rig::new("mmu-tlb-line");
    line_fill(&rig, PageTables::new(&rig, geometry(&[9, 9, 9]), 0));
}

#[test]
fn a_line_of_a_leaf_table_in_vram_is_cached_alike() {
    let rig = Rig::new("mmu-tlb-line-vram");
    let geometry = tables_in_vram(&[9, 9, 9]);
    let root = TableAddress {
        segment: VRAM_SEGMENT,
        address: 0,
    };
    line_fill(&rig, PageTables::at(&rig, geometry, root));
}

#[test]
fn a_line_fill_checks_each_page_that_leaves_the_ram_extent_the_others_lay_in() {
    // One line: the last page of RAM, the page after it (no RAM), a page of the VRAM BAR
    // window (RAM in the memory table, never a page), then RAM again. The fill checks the
    // first against the memory table and the rest against the extent it found, looking up
    // again only what lies outside it.
    let rig = Rig::new("mmu-tlb-line-extent");
    let mut tables = PageTables::new(&rig, geometry(&[9, 9, 9]), 0);
    let geometry = tables.geometry;
    let pages = [RAM_SIZE - PAGE, RAM_SIZE, VRAM_GPA, DATA];
    for (page, gpa) in (0..).zip(pages) {
        tables.map(VA + page * PAGE, gpa, 0);
    }
    let mut space = tables.space(false);
    assert_serves(&rig, &geometry, &mut space, VA, RAM_SIZE - PAGE);
    assert_serves(&rig, &geometry, &mut space, VA + 3 * PAGE, DATA);
    // A page outside RAM is neither cached nor served.
    for (page, kind) in [(1, FaultKind::OutsideRam), (2, FaultKind::InVramWindow)] {
        let fault = fault_at(&rig, &geometry, &mut space, VA + page * PAGE);
        assert_eq!(fault, kind, "page {page}");
    }
}

#[test]
fn a_line_fill_checks_each_page_that_leaves_the_segment_the_others_lay_in() {
    // One line: the first and the last page of the VRAM segment, the page after its end, and a
    // page of the aperture (a segment, but not memory). The fill resolves the first and holds
    // the others against the segment it found, resolving again only what lies outside it.
    let rig = Rig::new("mmu-tlb-line-segment");
    let mut tables = PageTables::new(&rig, geometry(&[9, 9, 9]), 0);
    let geometry = tables.geometry;
    let pages = [
        pte(VRAM_SEGMENT, 0, 0),
        pte(VRAM_SEGMENT, VRAM_SIZE - PAGE, 0),
        pte(VRAM_SEGMENT, VRAM_SIZE, 0),
        pte(VRAM_SEGMENT + 1, 0, 0),
    ];
    for (page, entry) in (0..).zip(pages) {
        tables.set(VA + page * PAGE, 0, entry);
    }
    let mut space = tables.space(false);
    for (page, offset) in [(0, 0), (1, VRAM_SIZE - PAGE)] {
        assert_eq!(
            target(&rig, &geometry, &mut space, VA + page * PAGE),
            Target::Segment {
                segment: VRAM_SEGMENT,
                offset
            }
        );
    }
    // A page outside a memory segment is neither cached nor served.
    for page in [2, 3] {
        let fault = fault_at(&rig, &geometry, &mut space, VA + page * PAGE);
        assert_eq!(fault, FaultKind::BadSegment, "page {page}");
    }
}

#[test]
fn a_line_checked_as_one_span_serves_what_walks_page_by_page_would() {
    // Lines whose entries differ in their addresses alone are checked as one span. One that
    // fails (a page past RAM's end, in the VRAM window, past the segment's end, misaligned) or
    // an entry that differs in another bit (read-only) sends the line entry by entry. Either
    // way each page translates, or faults, as a walk of it alone does, and the line's valid
    // pages are cached by the walk that read it.
    let rig = Rig::new("mmu-tlb-line-span");
    let mut tables = PageTables::new(&rig, geometry(&[9, 9, 9]), 0);
    let geometry = tables.geometry;
    let ram = |page: u64| pte(0, DATA + page * PAGE, 0);
    let vram = |page: u64| pte(VRAM_SEGMENT, page * PAGE, 0);
    let lines = [
        [3, 9, 1, 30, 2, 7, 12, 5].map(ram),
        [
            ram(3),
            ram(9),
            pte(0, RAM_SIZE, 0),
            ram(4),
            pte(0, VRAM_GPA, 0),
            ram(1),
            ram(6),
            ram(2),
        ],
        [
            ram(3),
            ram(9),
            pte(0, DATA, WDDM_GPU_PTE_READ_ONLY),
            ram(4),
            ram(8),
            ram(1),
            ram(6),
            ram(2),
        ],
        [5, 0, 1, 2, 3, 4, 6, VRAM_SIZE / PAGE - 1].map(vram),
        [5, 0, 1, 2, 3, 4, 6, VRAM_SIZE / PAGE].map(vram),
        [0, 1, 2, 3, 4, 5, 6, 7].map(|page| pte(0, DATA + page * PAGE, WDDM_GPU_PTE_ZERO)),
    ];
    // 64 KiB pages: aligned, then one that is not.
    let ram_64k = |page: u64| pte(0, DATA + page * SIZE_64K, 0);
    let lines_64k = [
        [7, 0, 3, 1, 6, 2, 5, 4].map(ram_64k),
        [
            ram_64k(7),
            ram_64k(0),
            ram_64k(3) + PAGE,
            ram_64k(1),
            ram_64k(6),
            ram_64k(2),
            ram_64k(5),
            ram_64k(4),
        ],
    ];
    let line_bytes = (LINE_ENTRIES as u64) * PAGE;
    let line_bytes_64k = (LINE_ENTRIES as u64) * SIZE_64K;
    let mut starts = Vec::new();
    for (line, entries) in (0..).zip(&lines) {
        for (page, &entry) in (0..).zip(entries) {
            tables.set(VA + line * line_bytes + page * PAGE, 0, entry);
        }
        starts.push((VA + line * line_bytes, PAGE));
    }
    for (line, entries) in (0..).zip(&lines_64k) {
        for (page, &entry) in (0..).zip(entries) {
            tables.set_64k(VA_64K + line * line_bytes_64k + page * SIZE_64K, entry);
        }
        starts.push((VA_64K + line * line_bytes_64k, SIZE_64K));
    }
    let root = Root {
        table: tables.root,
        entries: geometry.level(geometry.root_level()).unwrap().entries(),
    };
    let mut space = tables.space(false);
    counting(&rig, |counting| {
        for &(start, size) in &starts {
            for access in [Access::Read, Access::Write] {
                space.flush(None);
                let pages = (0..LINE_ENTRIES as u64).map(|page| start + page * size);
                let mut reads = None;
                for va in pages {
                    let expected = walk(&geometry, &root, va, access, counting.inner)
                        .and_then(|walk| walk.page.allows(va, access).map(|()| walk.page.target))
                        .map_err(|fault| fault.kind);
                    let before = counting.reads.get();
                    let served = space
                        .translate(&geometry, counting, va, 1, access)
                        .map(|run| run.target)
                        .map_err(|fault| fault.kind);
                    assert_eq!(served, expected, "VA {va:#x}, {access:?}");
                    // The first page's walk reads the line; a valid page after it is served
                    // without a read.
                    let read = counting.reads.get() - before;
                    match (reads, expected) {
                        (None, _) => reads = Some(read),
                        (Some(_), Ok(_)) => assert_eq!(read, 0, "VA {va:#x}, {access:?}"),
                        (Some(_), Err(_)) => {}
                    }
                }
            }
        }
    });
}

/// Eight pages of one leaf line and the first of the next, translated through `tables`.
fn line_fill(rig: &Rig, mut tables: PageTables<'_>) {
    let geometry = tables.geometry;
    // Entries 0..8 of one leaf line: page 5 invalid, page 6 with a reserved bit; page 8 (the
    // next line) mapped too.
    for page in (0..9).filter(|&page| page != 5) {
        tables.map(VA + page * PAGE, DATA + (16 + page) * PAGE, 0);
    }
    // And page 16, two lines on in the same leaf table.
    tables.map(VA + 16 * PAGE, DATA + 32 * PAGE, 0);
    tables.set(VA + 6 * PAGE, 0, pte(0, DATA, 0) | 1 << 60);
    let mut space = tables.space(false);
    counting(rig, |counting| {
        let run = |space: &mut AddressSpace, page: u64| {
            space.translate(&geometry, counting, VA + page * PAGE, 8, Access::Read)
        };
        let assert_serves = |space: &mut AddressSpace, page: u64, gpa: u64| {
            assert_eq!(
                run(space, page).unwrap().target,
                Target::System(gpa),
                "page {page}"
            );
        };
        // The walk (three levels) and the line (the counting memory reads it an entry at a time).
        let (walk, line) = (3, u32::try_from(LINE_ENTRIES).unwrap());
        assert_serves(&mut space, 2, DATA + 18 * PAGE);
        assert_eq!(counting.reads.get(), walk + line);
        for page in [0, 1, 3, 4, 7] {
            assert_serves(&mut space, page, DATA + (16 + page) * PAGE);
        }
        assert_eq!(
            counting.reads.get(),
            walk + line,
            "the line's valid pages were cached"
        );
        // The invalid and the reserved entry were not: each is read again, and faults. The leaf
        // table the walk reached is cached (a page-directory cache): only their lines are read,
        // no entry above them.
        assert_eq!(run(&mut space, 5).unwrap_err().kind, FaultKind::NotPresent);
        assert_eq!(
            run(&mut space, 6).unwrap_err().kind,
            FaultKind::ReservedBits
        );
        assert_eq!(counting.reads.get(), walk + 3 * line);
        // Another line of the same leaf table: the line alone, which holds its entry and fills
        // the cache without a second read.
        assert_serves(&mut space, 8, DATA + 24 * PAGE);
        assert_eq!(counting.reads.get(), walk + 4 * line);
        // A flush covering any page the leaf table maps drops the cached table with the
        // translations: the next line is walked whole.
        space.flush(Some(VA + 8 * PAGE..VA + 9 * PAGE));
        assert_serves(&mut space, 16, DATA + 32 * PAGE);
        assert_eq!(counting.reads.get(), 2 * walk + 5 * line);
        // A cached neighbour is served until a flush covers it...
        tables.map(VA + 7 * PAGE, DATA + 41 * PAGE, 0);
        assert_serves(&mut space, 7, DATA + 23 * PAGE);
        space.flush(Some(VA + 7 * PAGE..VA + 8 * PAGE));
        assert_serves(&mut space, 7, DATA + 41 * PAGE);
        // ...or until another walk refetches its line, as a GPU's would: mapping page 5 needs no
        // flush (it was never cached), and its walk brings page 4's new entry along.
        tables.map(VA + 4 * PAGE, DATA + 42 * PAGE, 0);
        tables.map(VA + 5 * PAGE, DATA + 40 * PAGE, 0);
        assert_serves(&mut space, 4, DATA + 20 * PAGE);
        assert_serves(&mut space, 5, DATA + 40 * PAGE);
        assert_serves(&mut space, 4, DATA + 42 * PAGE);
    });
}
