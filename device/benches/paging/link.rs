//! The link-model benchmark (`scripts/bench --link`): a backend modelling a PCIe 3.0 x4 link
//! and 4 GB/s of VRAM (`--link pcie3x4,vram=4GB/s`, both slower than this host's memory, so
//! the model sets the pace) runs uploads from a page list into VRAM and VRAM-to-VRAM copies
//! of several sizes, one submission at a time. For each size it prints the time the model gave
//! (the stats' `link.modelled_ns`) beside the time the device took (the submissions'
//! execution time in the stats, start to answer), and their ratio; the goal is within a few
//! percent. Figures are reported, never asserted; a device error breaks the run.

use std::process::ExitCode;

use serde_json::{json, Map, Value};
use wddm_gpu_abi::build::{transfer, Endpoint};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::{
    backend_process::SpawnOptions,
    harness::{Harness, DATA, DMA_BUFFER, FRAME_LISTS, PAGE},
    requests::{frames, segment, submit_command},
    stats::{median, round_to},
};
use zerocopy::IntoBytes;

const MIB: u64 = 1 << 20;
const LINK: &str = "pcie3x4,vram=4GB/s";
const VRAM_BYTES: u64 = 256 * MIB;
/// The largest copy; uploads read it from guest RAM at [`DATA`], a page list of its frames at
/// [`FRAME_LISTS`].
const MOST: u64 = 64 * MIB;
const RAM_BYTES: u64 = DATA + MOST;
/// Sizes, each submitted this many times (fewer for the large ones, which take long).
const SIZES: [(u64, usize); 5] = [
    (64 << 10, 200),
    (256 << 10, 100),
    (MIB, 50),
    (8 * MIB, 12),
    (MOST, 4),
];

/// What the stats said after some submissions.
struct Totals {
    submissions: u64,
    execution_ns: u64,
    modelled_ns: u64,
    late: u64,
}

fn totals(h: &Harness) -> Totals {
    let json: Value = serde_json::from_str(&h.backend.stats_json()).expect("stats --json");
    let number = |value: &Value| value.as_u64().expect("a count");
    Totals {
        submissions: number(&json["submissions"]["count"]),
        execution_ns: number(&json["submissions"]["execution"]["sum_ns"]),
        modelled_ns: number(&json["link"]["modelled_ns"]),
        late: number(&json["link"]["late_packets"]),
    }
}

/// One workload: what it moves and from where.
struct Workload {
    name: &'static str,
    source: fn(u64) -> Endpoint,
}

fn from_ram(length: u64) -> Endpoint {
    frames(FRAME_LISTS, u32::try_from(length / PAGE).unwrap(), 0)
}

fn from_vram(_length: u64) -> Endpoint {
    segment(1, 128 * MIB)
}

/// Submits one TRANSFER of `length` from `source` to VRAM 0, which must succeed.
fn submit(h: &mut Harness, length: u64, source: Endpoint, fence: u32) {
    let packet = transfer(length, source, segment(1, 0));
    h.write_ram(DMA_BUFFER, packet.as_bytes());
    let response: WddmGpuRespSubmit = h.submit(&submit_command(
        DMA_BUFFER,
        u32::try_from(packet.as_bytes().len()).unwrap(),
        fence,
    ));
    assert!(
        SubmitStatus::from_raw(response.status) == Some(SubmitStatus::Ok),
        "link bench: the device failed: {response:?}\n---- backend log ----\n{}",
        h.backend.log()
    );
}

pub fn run(json_output: bool, rounds: usize) -> ExitCode {
    let options = SpawnOptions {
        vram_size: VRAM_BYTES,
        ram_size: RAM_BYTES,
        args: vec!["--link".into(), LINK.into()],
        log_filter: "info".to_string(),
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("bench-link", &options);
    let list: Vec<u64> = (0..MOST / PAGE).map(|i| DATA / PAGE + i).collect();
    h.write_frame_list(FRAME_LISTS, &list);
    // Touch what the copies read and write, so first-use page faults are not measured.
    h.write_ram(DATA, &vec![0x5a; usize::try_from(MOST).unwrap()]);
    h.write_vram(0, &vec![0; usize::try_from(VRAM_BYTES).unwrap()]);

    let workloads = [
        Workload {
            name: "upload (page list -> VRAM)",
            source: from_ram,
        },
        Workload {
            name: "VRAM -> VRAM",
            source: from_vram,
        },
    ];
    let mut fence = 1u32;
    let mut table = String::new();
    let mut figures = Map::new();
    let mut worst: f64 = 0.0;
    eprintln!("link bench: --link {LINK}, {rounds} rounds");
    for workload in &workloads {
        table.push_str(&format!(
            "\n{}\n{:>10} {:>12} {:>12} {:>9} {:>10}\n",
            workload.name, "size", "modelled ms", "measured ms", "ratio", "late"
        ));
        for (length, repeats) in SIZES {
            let (mut ratios, mut modelled, mut measured) = (Vec::new(), Vec::new(), Vec::new());
            let mut late = 0;
            for _ in 0..rounds {
                let before = totals(&h);
                for _ in 0..repeats {
                    submit(&mut h, length, (workload.source)(length), fence);
                    fence += 1;
                }
                let after = totals(&h);
                let count = (after.submissions - before.submissions) as f64;
                let model = (after.modelled_ns - before.modelled_ns) as f64 / count / 1e6;
                let took = (after.execution_ns - before.execution_ns) as f64 / count / 1e6;
                ratios.push(took / model);
                modelled.push(model);
                measured.push(took);
                late += after.late - before.late;
            }
            let (ratio, modelled, measured) =
                (median(&ratios), median(&modelled), median(&measured));
            worst = worst.max((ratio - 1.0).abs());
            table.push_str(&format!(
                "{:>9}K {modelled:>12.3} {measured:>12.3} {ratio:>9.3} {late:>10}\n",
                length >> 10
            ));
            figures.insert(
                format!("{} {}K", workload.name, length >> 10),
                json!({
                    "modelled_ms": round_to(modelled, 4),
                    "measured_ms": round_to(measured, 4),
                    "ratio": round_to(ratio, 4),
                    "late_packets": late,
                }),
            );
        }
    }
    if json_output {
        let object =
            json!({ "link": LINK, "sizes": figures, "worst_deviation": round_to(worst, 4) });
        println!("{object}");
    } else {
        println!("link model {LINK}: measured execution / modelled time, median of {rounds} rounds{table}");
        println!(
            "worst deviation from the model: {:.1}% (goal: a few percent)",
            worst * 100.0
        );
    }
    ExitCode::SUCCESS
}
