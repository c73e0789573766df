//! Properties over random tables: a KMD that flushes what it changes always sees memory, and
//! the checking mode stays quiet for it; random entry values never panic a walk or read more
//! than one entry per level.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::mmu::fault::FaultKind;
use crate::mmu::walk::{walk, Root, Target};
use crate::testkit::engine_rig::{DATA, DATA_SIZE};

#[derive(Clone, Debug)]
enum Op {
    Map { page: u64, frame: u64 },
    Unmap { page: u64 },
    Translate { page: u64, offset: u64 },
}

/// Virtual pages spread over several leaf and level-1 tables.
fn virtual_page() -> impl Strategy<Value = u64> {
    (0u64..4, 0u64..3, 0u64..8).prop_map(|(top, middle, low)| (top << 18) | (middle << 9) | low)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (virtual_page(), 0..DATA_SIZE / PAGE).prop_map(|(page, frame)| Op::Map { page, frame }),
        virtual_page().prop_map(|page| Op::Unmap { page }),
        (virtual_page(), 0..PAGE).prop_map(|(page, offset)| Op::Translate { page, offset }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_kmd_that_flushes_what_it_changes_sees_memory(ops in prop::collection::vec(op(), 1..60)) {
        let rig = Rig::new("mmu-prop-flush");
        let geometry = geometry(&[9, 9, 9]);
        let mut tables = PageTables::new(&rig, geometry, 0);
        let mut space = tables.space(true);
        let mut model = BTreeMap::new();
        for op in ops {
            match op {
                Op::Map { page, frame } => {
                    tables.map(page * PAGE, DATA + frame * PAGE, 0);
                    space.flush(Some(page * PAGE..(page + 1) * PAGE));
                    model.insert(page, DATA + frame * PAGE);
                }
                Op::Unmap { page } => {
                    tables.set(page * PAGE, 0, 0);
                    space.flush(Some(page * PAGE..(page + 1) * PAGE));
                    model.remove(&page);
                }
                Op::Translate { page, offset } => {
                    let va = page * PAGE + offset;
                    let result = translate(&rig, &geometry, &mut space, va, 1, Access::Read);
                    match model.get(&page) {
                        Some(&gpa) => prop_assert_eq!(
                            result.unwrap(),
                            Run { target: Target::System(gpa + offset), len: 1 }
                        ),
                        None => prop_assert_eq!(result.unwrap_err().kind, FaultKind::NotPresent),
                    }
                }
            }
        }
        prop_assert_eq!(space.take_stale().1, 0);
    }

    #[test]
    fn random_entries_never_panic_and_read_one_entry_per_level(
        entries in prop::collection::vec(any::<u64>(), 512),
        low_bits in prop::collection::vec(0u64..8, 512),
        va in any::<u64>(),
        levels in 2usize..=6,
    ) {
        let rig = Rig::new("mmu-prop-garbage");
        let bits = vec![6; levels];
        let geometry = geometry(&bits);
        // Entries that point back into the table region half of the time, garbage otherwise.
        let table: Vec<u8> = entries
            .iter()
            .zip(&low_bits)
            .flat_map(|(&entry, &low)| {
                let entry = if entry & 1 == 0 {
                    entry
                } else {
                    (entry & 0xfff) | (TABLES + low * PAGE)
                };
                entry.to_le_bytes()
            })
            .collect();
        for table_page in 0..8 {
            rig.ram_write(TABLES + table_page * PAGE, &table);
        }
        let root = Root { table: TableAddress { segment: 0, address: TABLES }, entries: 64 };
        let reads = counting(&rig, |tables| {
            let _ = walk(&geometry, &root, va, Access::Write, tables);
            tables.reads.get()
        });
        prop_assert!(reads <= geometry.level_count());
    }
}
