//! `slice`: the layout a KMD would report, the VRAM BAR check, and one scattered round trip
//! (VRAM → shuffled guest pages → other VRAM), printed as `CHECK <name> PASS|FAIL <detail>` lines
//! and optionally one `WDDM-GUEST-JSON {...}` line. With `--bench` the paging benchmark
//! ([`crate::scenario::bench`]) runs afterwards on the same device: its tables follow the checks,
//! the JSON line gains a `guest_bench` object and the checks a `guest_bench_ok`.
//!
//! The round trip uses the first CPU-visible memory segment (segment 1 in every shipped layout),
//! at offsets inside it: its GPU addresses are `BaseAddress + offset`, its BAR bytes at
//! `bar_offset + offset`. A layout without one fails `cpu_translated_matches_bar` saying so, and
//! one too small for the offsets fails `vram_pattern_via_bar` naming the sizes.

use serde_json::{json, Map, Value};

use crate::caps::Layout;
use crate::cli::Options;
use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::report;
use crate::scatter::FrameList;
use crate::scenario::{bench, setup};

/// VRAM offset the pattern is written to (not page aligned on purpose).
const OFFSET_A: u64 = 0x10_0040;
/// VRAM offset the data comes back to.
const OFFSET_B: u64 = 0x48_01b8;
/// Transfer length: 1 MiB + 123, not a page multiple.
const LENGTH: u64 = (1 << 20) + 123;
/// Offset of the data in the first listed frame.
const BYTE_OFFSET: u32 = 0x321;

/// Every check the slice reports, in order; all are in the JSON `checks` object.
const CHECKS: [&str; 8] = [
    "device_init",
    "capset_valid",
    "cpu_translated_matches_bar",
    "vram_pattern_via_bar",
    "transfer_vram_to_pages",
    "transfer_pages_to_vram",
    "transfer_roundtrip",
    "dma_addresses_stable",
];

struct Checks {
    results: Map<String, Value>,
}

impl Checks {
    fn record(&mut self, name: &str, outcome: &Outcome<String>) {
        match outcome {
            Ok(detail) => println!("CHECK {name} PASS {detail}"),
            Err(why) => println!("CHECK {name} FAIL {why}"),
        }
        self.results
            .insert(name.into(), Value::Bool(outcome.is_ok()));
    }

    /// Reports every check not yet recorded as failed because an earlier step failed.
    fn skip_rest(&mut self, why: &Failure) {
        for name in CHECKS {
            if !self.results.contains_key(name) {
                self.record(name, &Err(Failure(format!("not run: {why}"))));
            }
        }
    }

    fn all_passed(&self) -> bool {
        self.results.values().all(|v| v == &Value::Bool(true))
    }
}

/// What the JSON line reports besides the checks.
#[derive(Default)]
struct Facts {
    layout: Option<Layout>,
    vram_bar_address: Option<u64>,
    /// Id of the segment the round trip used.
    slice_segment_id: Option<u32>,
}

/// Runs the slice (then the benchmark when `with_bench`); true iff every check passed.
pub fn run(json_line: bool, with_bench: bool, options: &Options) -> bool {
    let seed = options.seed;
    println!("SEED {seed:#x}");
    let mut checks = Checks {
        results: Map::new(),
    };
    let mut facts = Facts::default();
    let engine = steps(&mut checks, &mut facts, options);
    if let Err(why) = &engine {
        checks.skip_rest(why);
    }
    let bench_report = with_bench.then(|| {
        let report = match engine {
            Ok(mut engine) => bench::run_on(&mut engine, options.iterations),
            Err(why) => Err(Failure(format!("not run: {why}"))),
        };
        bench::print_report(&report, options.hold);
        let verdict = match &report {
            Ok(r) if r.ok() => Ok(format!(
                "{} operations x {}, all {} kinds ran and were checked",
                r.ops.len(),
                r.iterations,
                bench::KINDS.len()
            )),
            Ok(r) => Err(Failure(format!(
                "failed kinds: {}",
                r.kinds()
                    .iter()
                    .filter(|k| !k.verified)
                    .map(|k| k.kind)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            Err(why) => Err(why.clone()),
        };
        checks.record("guest_bench_ok", &verdict);
        bench::report_json(&report)
    });
    if json_line {
        let mut report = json_report(&facts, &checks);
        if let Some(bench) = bench_report {
            report["guest_bench"] = bench;
        }
        println!("WDDM-GUEST-JSON {report}");
    }
    checks.all_passed()
}

/// The slice's steps; returns the engine for what runs after.
fn steps(checks: &mut Checks, facts: &mut Facts, options: &Options) -> Outcome<Engine> {
    let seed = options.seed;
    let (arena, device) = setup::arena_and_device(options);
    checks.record(
        "device_init",
        &device
            .as_ref()
            .map(|d| {
                format!(
                    "{} up, num_capsets {}",
                    d.virtio.function().bdf(),
                    d.num_capsets
                )
            })
            .map_err(Clone::clone),
    );
    let (arena, mut device) = (arena?, device?);

    let layout = setup::layout(&mut device);
    if let Ok(layout) = &layout {
        print!("{}", report::layout_text(layout));
        facts.layout = Some(layout.clone());
    }
    checks.record(
        "capset_valid",
        &layout
            .as_ref()
            .map(|l| {
                format!(
                    "{} segments, wddm_version {:#06x}",
                    l.segments.len(),
                    l.header.wddm_version
                )
            })
            .map_err(Clone::clone),
    );
    let layout = layout?;

    let vram = setup::vram(&device, &layout);
    if let Ok(vram) = &vram {
        facts.vram_bar_address = Some(vram.bar_address);
        let bar = &layout.header.vram_bar;
        if vram.region_offset == 0 {
            println!(
                "VRAM BAR (sysfs): function {} BAR{} at {:#x}",
                bar.pci_function, bar.bar_index, vram.bar_address
            );
        } else {
            println!(
                "VRAM BAR (sysfs): function {} BAR{} at {:#x}, VRAM at shared memory region \
                 offset {:#x} = {:#x}",
                bar.pci_function,
                bar.bar_index,
                vram.bar_address - vram.region_offset,
                vram.region_offset,
                vram.bar_address
            );
        }
    }
    let vram = match vram {
        Ok(vram) => vram,
        Err(why) => {
            checks.record("cpu_translated_matches_bar", &Err(why.clone()));
            return Err(why);
        }
    };
    checks.record(
        "cpu_translated_matches_bar",
        &setup::cpu_translated_matches_bar(&layout, &vram),
    );

    let mut engine = Engine::new(arena, device, layout, vram, seed)?;
    let segment = engine.segment.clone();
    let id = segment.desc.id;
    let bar_offset = segment.bar_offset().unwrap_or_default();
    facts.slice_segment_id = Some(id);
    println!(
        "VRAM segment: {id} (first CPU-visible memory segment), BaseAddress {:#x}, Size {:#x}, \
         bar_offset {bar_offset:#x}",
        segment.desc.base_address, segment.desc.size
    );
    let tag = seed ^ 0x0073_6c69_6365;
    let needed = OFFSET_A.max(OFFSET_B) + LENGTH + crate::engine::VRAM_GUARD;
    let pattern = ensure(segment.desc.size >= needed, || {
        format!(
            "segment {id} has {:#x} bytes; the slice needs {needed:#x} (offsets {OFFSET_A:#x} and \
             {OFFSET_B:#x}, {LENGTH:#x} bytes each)",
            segment.desc.size
        )
    })
    .and_then(|()| engine.vram_write_and_verify(OFFSET_A, LENGTH, tag))
    .map(|()| {
        format!(
            "{LENGTH} bytes at segment {id} offset {OFFSET_A:#x} (BAR offset {:#x}) read back \
             through the BAR",
            bar_offset + OFFSET_A
        )
    });
    checks.record("vram_pattern_via_bar", &pattern);

    let list = FrameList::shuffled(engine.pool.pieces(), BYTE_OFFSET, LENGTH, &mut engine.rng)?;
    let scatter = format!(
        "{} frames (seed {seed:#x}, {} physically consecutive neighbours), byte_offset {BYTE_OFFSET:#x}",
        list.frame_count(),
        list.consecutive_pairs()
    );
    let to_pages = engine.vram_to_pages(OFFSET_A, &list, tag).map(|done| {
        format!(
            "segment {id} GPU address {:#x} -> {scatter}: {done}",
            segment.gpu_address(OFFSET_A)
        )
    });
    checks.record("transfer_vram_to_pages", &to_pages);
    let to_vram = engine.pages_to_vram(&list, OFFSET_B, tag).map(|done| {
        format!(
            "pages -> segment {id} GPU address {:#x}, checked through the BAR with guards: {done}",
            segment.gpu_address(OFFSET_B)
        )
    });
    checks.record("transfer_pages_to_vram", &to_vram);
    let roundtrip = match (&to_pages, &to_vram) {
        (Ok(_), Ok(_)) => Ok(format!(
            "{LENGTH} bytes VRAM -> scattered pages -> VRAM, every byte checked"
        )),
        (Err(e), _) | (_, Err(e)) => Err(e.clone()),
    };
    checks.record("transfer_roundtrip", &roundtrip);

    let stable = engine
        .arena
        .recheck()
        .map(|()| {
            format!(
                "{} hugepages at unchanged physical addresses",
                engine.arena.hugepages()
            )
        })
        .map_err(Failure::from);
    checks.record("dma_addresses_stable", &stable);
    Ok(engine)
}

fn json_report(facts: &Facts, checks: &Checks) -> Value {
    let layout = facts.layout.as_ref();
    json!({
        "segments": layout.map_or(json!([]), report::segments_json),
        "vram_bar_address": facts.vram_bar_address,
        "vram_bar": layout.map(|l| report::vram_bar_json(&l.header.vram_bar)),
        "paging_buffer_segment_id": layout.map(|l| l.header.paging_buffer_segment_id),
        "paging_buffer_size": layout.map(|l| l.header.paging_buffer_size),
        "paging_buffer_private_data_size": layout.map(|l| l.header.paging_buffer_private_data_size),
        "wddm_version": layout.map(|l| l.header.wddm_version),
        "slice_segment_id": facts.slice_segment_id,
        "checks": checks.results,
    })
}
