//! `bench`: a short paging benchmark through the real device, seen from the guest. Every
//! operation is one packet in one paging SUBMIT, repeated `iterations` times; its latency is the
//! time from the kick (the control-queue notify) to the moment the polling driver sees the
//! completion on the used ring, the same path every other command of this driver waits on.
//! Each operation's result is checked once, after its last iteration (VRAM through the BAR,
//! pages through the guest mapping, aperture pages read back through the aperture), so the
//! figures are for real work.
//!
//! Operations are grouped under the backend's packet kind names (`transfer`, `fill`,
//! `discard_content`, `read_physical`, `write_physical`, `map_aperture`, `map_aperture2`,
//! `unmap_aperture`, `fence`), so the per-kind table sits next to the backend's own statistics.
//! The guest usually runs under TCG: its figures are bound by the emulated CPU, not by the
//! device.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use wddm_gpu_abi::decode::PacketKind;
use wddm_gpu_abi::packet::{
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL,
};
use wddm_gpu_abi::status::WDDM_GPU_EVENT_FENCE;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::cli::Options;
use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::Completion;
use crate::latency::{self, Samples};
use crate::packets::{self, Adl, DmaBufferBuilder};
use crate::scatter::Piece;
use crate::scenario::paging::{
    check_list, check_vram, expect_done, fill_bytes, pattern_bytes, read_pieces, write_list,
    write_pieces, Ctx,
};
use crate::scenario::setup;

const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// The backend's packet kind names every layout runs, in the order both tables list them (the
/// ABI's own list; the GpuMmu page-table packets need a `[gpummu]` layout and are not measured here).
pub const KINDS: [&str; PacketKind::PHYSICAL.len()] = {
    let mut names = [""; PacketKind::PHYSICAL.len()];
    let mut index = 0;
    while index < names.len() {
        names[index] = PacketKind::PHYSICAL[index].name();
        index += 1;
    }
    names
};

// VRAM offsets (inside the smallest shipped CPU-visible segment, 64 MiB).
const VRAM_TO: u64 = 0x40_0000;
const VRAM_FROM: u64 = 0x60_0000;
const VRAM_FROM_APERTURE: u64 = 0x80_0000;
const VRAM_FILL: u64 = 0xa0_0000;
const VRAM_SAMPLES: u64 = 0xc0_0000;
const VRAM_ACCESS: u64 = 0xe0_0000;
// Aperture pages (the paging tests' context allows the first 0x4000).
const AP_TRANSFER: u64 = 0x1000;
const AP_MAP: u64 = 0x2000;
const AP_MAP2: u64 = 0x3000;
/// Aperture pages read back to check a mapping.
const SAMPLE_PAGES: u64 = 16;
/// Distinct pages behind a large mapping (the larger mappings repeat them).
const DISTINCT_PAGES: usize = 256;

/// What one benchmarked operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// Its name in the tables.
    pub name: &'static str,
    /// The backend's kind name of its packet.
    pub kind: &'static str,
    /// Bytes one iteration moves (TRANSFER) or writes (FILL).
    pub bytes: u64,
    /// Aperture pages one iteration maps or unmaps.
    pub pages: u64,
}

impl Op {
    const fn new(name: &'static str, kind: &'static str, bytes: u64, pages: u64) -> Self {
        Self {
            name,
            kind,
            bytes,
            pages,
        }
    }
}

/// Every operation, in run order (each UNMAP after the MAP of the same range).
pub const OPS: [Op; 15] = [
    Op::new("fence", "fence", 0, 0),
    Op::new("pages_to_vram_64k", "transfer", 64 * KIB, 0),
    Op::new("pages_to_vram_1m", "transfer", MIB, 0),
    Op::new("vram_to_pages_64k", "transfer", 64 * KIB, 0),
    Op::new("vram_to_pages_1m", "transfer", MIB, 0),
    Op::new("aperture_to_vram_1m", "transfer", MIB, 0),
    Op::new("fill_1m", "fill", MIB, 0),
    Op::new("discard_content", "discard_content", 0, 0),
    Op::new("read_physical_8", "read_physical", 0, 0),
    Op::new("write_physical_8", "write_physical", 0, 0),
    Op::new("map_aperture_256", "map_aperture", 0, 256),
    Op::new("unmap_aperture_256", "unmap_aperture", 0, 256),
    Op::new("map_aperture_4096", "map_aperture", 0, 4096),
    Op::new("unmap_aperture_4096", "unmap_aperture", 0, 4096),
    Op::new("map_aperture2_256", "map_aperture2", 0, 256),
];

/// What one operation measured, and whether its result was right.
#[derive(Clone, Debug)]
pub struct OpResult {
    /// The operation.
    pub op: Op,
    /// Kick-to-completion latencies of the iterations that ran.
    pub samples: Samples,
    /// Ok once the result was checked; the failure otherwise (the samples before it stay).
    pub outcome: Outcome,
}

/// The whole benchmark.
#[derive(Clone, Debug)]
pub struct Report {
    /// Iterations asked for per operation.
    pub iterations: u32,
    /// Every operation, in run order.
    pub ops: Vec<OpResult>,
    /// Wall time of the whole benchmark (setup and checks included).
    pub elapsed: Duration,
}

/// One kind's operations together.
#[derive(Clone, Debug)]
pub struct KindRow {
    /// Backend kind name.
    pub kind: &'static str,
    /// All samples of its operations.
    pub samples: Samples,
    /// Bytes its iterations moved.
    pub bytes: u64,
    /// Pages its iterations mapped or unmapped.
    pub pages: u64,
    /// Operations of this kind.
    pub ops: usize,
    /// Every one of them ran and was checked.
    pub verified: bool,
}

impl OpResult {
    /// Bytes all iterations moved.
    pub fn total_bytes(&self) -> u64 {
        self.op.bytes * self.samples.len() as u64
    }

    /// Pages all iterations mapped or unmapped.
    pub fn total_pages(&self) -> u64 {
        self.op.pages * self.samples.len() as u64
    }

    /// Ran every iteration and was checked.
    pub fn verified(&self, iterations: u32) -> bool {
        self.outcome.is_ok() && self.samples.len() == iterations as usize
    }
}

impl Report {
    /// One row per backend kind, in [`KINDS`] order (kinds no operation measured included).
    pub fn kinds(&self) -> Vec<KindRow> {
        KINDS
            .iter()
            .map(|&kind| {
                let mut row = KindRow {
                    kind,
                    samples: Samples::new(),
                    bytes: 0,
                    pages: 0,
                    ops: 0,
                    verified: true,
                };
                for r in self.ops.iter().filter(|r| r.op.kind == kind) {
                    row.samples.extend(&r.samples);
                    row.bytes += r.total_bytes();
                    row.pages += r.total_pages();
                    row.ops += 1;
                    row.verified &= r.verified(self.iterations);
                }
                row.verified &= row.ops > 0 && !row.samples.is_empty();
                row
            })
            .collect()
    }

    /// Every kind ran and every operation was checked.
    pub fn ok(&self) -> bool {
        self.kinds().iter().all(|k| k.verified)
    }

    /// The tables, one `GUEST-BENCH` line each.
    pub fn text(&self) -> String {
        let mut out = format!(
            "GUEST-BENCH {} iterations per operation, one packet per paging SUBMIT; latency = kick \
             (queue notify) -> completion seen on the used ring by this polling driver\n\
             GUEST-BENCH guest-side figures: in a TCG guest they are bound by the emulated CPU, \
             not by the device; MB/s = 10^6 bytes per second of summed latency\n",
            self.iterations
        );
        out += &format!(
            "GUEST-BENCH op   {:<16} {:<20} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10}  check\n",
            "kind", "operation", "size", "count", "p50_us", "p99_us", "max_us", "MB/s", "pages/s"
        );
        for r in &self.ops {
            let sum = r.samples.summary();
            let size = if r.op.pages > 0 {
                format!("{}p", r.op.pages)
            } else if r.op.bytes > 0 {
                latency::size_text(r.op.bytes)
            } else {
                "-".to_string()
            };
            let check = match &r.outcome {
                Ok(()) if r.verified(self.iterations) => "ok".to_string(),
                Ok(()) => format!(
                    "FAIL {} of {} iterations ran",
                    r.samples.len(),
                    self.iterations
                ),
                Err(why) => format!("FAIL {why}"),
            };
            out += &format!(
                "GUEST-BENCH op   {:<16} {:<20} {:>6} {:>6} {} {:>10}  {check}\n",
                r.op.kind,
                r.op.name,
                size,
                r.samples.len(),
                latency_columns(sum.as_ref()),
                rates(r.total_bytes(), r.total_pages(), &r.samples),
            );
        }
        out += &format!(
            "GUEST-BENCH took {:.1} s in all (setup and checks included)\n",
            self.elapsed.as_secs_f64()
        );
        out += &format!(
            "GUEST-BENCH kind {:<16} {:>6} {:>11} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}  check\n",
            "kind", "count", "bytes", "pages", "p50_us", "p99_us", "max_us", "MB/s", "pages/s"
        );
        for k in self.kinds() {
            out += &format!(
                "GUEST-BENCH kind {:<16} {:>6} {:>11} {:>7} {} {:>10}  {}\n",
                k.kind,
                k.samples.len(),
                k.bytes,
                k.pages,
                latency_columns(k.samples.summary().as_ref()),
                rates(k.bytes, k.pages, &k.samples),
                if k.verified { "ok" } else { "FAIL" },
            );
        }
        out
    }

    /// The `guest_bench` JSON object.
    pub fn json(&self) -> Value {
        let ops: Vec<Value> = self
            .ops
            .iter()
            .map(|r| {
                let mut v = stats_json(&r.samples, r.total_bytes(), r.total_pages());
                v.insert("name".into(), json!(r.op.name));
                v.insert("kind".into(), json!(r.op.kind));
                v.insert("bytes_per_op".into(), json!(r.op.bytes));
                v.insert("pages_per_op".into(), json!(r.op.pages));
                v.insert("verified".into(), json!(r.verified(self.iterations)));
                v.insert(
                    "error".into(),
                    r.outcome.as_ref().err().map_or(Value::Null, |f| json!(f.0)),
                );
                Value::Object(v)
            })
            .collect();
        let kinds: Map<String, Value> = self
            .kinds()
            .into_iter()
            .map(|k| {
                let mut v = stats_json(&k.samples, k.bytes, k.pages);
                v.insert("operations".into(), json!(k.ops));
                v.insert("verified".into(), json!(k.verified));
                (k.kind.to_string(), Value::Object(v))
            })
            .collect();
        json!({
            "iterations": self.iterations,
            "seconds": round3(self.elapsed.as_secs_f64()),
            "latency": "kick (queue notify) to completion seen on the used ring, guest clock",
            "kinds": kinds,
            "operations": ops,
            "ok": self.ok(),
        })
    }
}

fn latency_columns(sum: Option<&latency::Summary>) -> String {
    match sum {
        Some(s) => format!(
            "{:>9} {:>9} {:>9}",
            latency::us_text(s.p50),
            latency::us_text(s.p99),
            latency::us_text(s.max)
        ),
        None => format!("{:>9} {:>9} {:>9}", "-", "-", "-"),
    }
}

/// The MB/s and pages/s columns (over the summed latency).
fn rates(bytes: u64, pages: u64, samples: &Samples) -> String {
    let total = samples.total();
    format!(
        "{:>9} {:>10}",
        latency::rate_text(latency::mb_per_sec(bytes, total)),
        latency::rate_text(latency::rate_per_sec(pages, total))
    )
}

fn stats_json(samples: &Samples, bytes: u64, pages: u64) -> Map<String, Value> {
    let sum = samples.summary();
    let us = |f: fn(&latency::Summary) -> Duration| {
        sum.as_ref()
            .map_or(Value::Null, |s| json!(round3(latency::micros(f(s)))))
    };
    let total = samples.total();
    let mut v = Map::new();
    v.insert("count".into(), json!(samples.len()));
    v.insert("bytes".into(), json!(bytes));
    v.insert("pages".into(), json!(pages));
    v.insert("p50_us".into(), us(|s| s.p50));
    v.insert("p99_us".into(), us(|s| s.p99));
    v.insert("max_us".into(), us(|s| s.max));
    v.insert("mean_us".into(), us(|s| s.mean()));
    v.insert(
        "mb_per_s".into(),
        json!(latency::mb_per_sec(bytes, total).map(round3)),
    );
    v.insert(
        "pages_per_s".into(),
        json!(latency::rate_per_sec(pages, total).map(round3)),
    );
    v
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Aperture pages `0..count` read back to check a mapping: [`SAMPLE_PAGES`] spread evenly,
/// the first and the last included.
pub fn sample_pages(count: u64) -> Vec<u64> {
    if count <= SAMPLE_PAGES {
        return (0..count).collect();
    }
    let mut pages: Vec<u64> = (0..SAMPLE_PAGES)
        .map(|i| i * (count - 1) / (SAMPLE_PAGES - 1))
        .collect();
    pages.dedup();
    pages
}

// ---- running ---------------------------------------------------------------------------------

/// `bench`: brings the device up and runs the benchmark; prints the tables (and with `json`
/// one `WDDM-GUEST-JSON {"guest_bench": ...}` line). True iff every kind ran and was checked.
pub fn run(json_line: bool, options: &Options) -> bool {
    let report = engine(options).and_then(|mut e| run_on(&mut e, options.iterations));
    print_report(&report, options.hold);
    if json_line {
        println!(
            "WDDM-GUEST-JSON {}",
            json!({ "guest_bench": report_json(&report) })
        );
    }
    report.is_ok_and(|r| r.ok())
}

/// Prints the tables, or why the benchmark could not run; then `GUEST-BENCH-DONE`, and waits
/// `hold` with the device up (the host may read the backend's statistics meanwhile).
pub fn print_report(report: &Outcome<Report>, hold: Duration) {
    match report {
        Ok(r) => print!("{}", r.text()),
        Err(why) => println!("GUEST-BENCH FAIL {why}"),
    }
    if !hold.is_zero() {
        println!("GUEST-BENCH-DONE holding the device {}s", hold.as_secs());
        std::thread::sleep(hold);
    }
}

/// The `guest_bench` object, or `{"ok": false, "error": ...}` when the benchmark did not run.
pub fn report_json(report: &Outcome<Report>) -> Value {
    match report {
        Ok(r) => r.json(),
        Err(why) => json!({ "ok": false, "error": why.0 }),
    }
}

fn engine(options: &Options) -> Outcome<Engine> {
    let arena = setup::arena()?;
    let mut device = setup::device(arena, options)?;
    let layout = setup::layout(&mut device)?;
    let vram = setup::vram(&device, &layout)?;
    Engine::new(arena, device, layout, vram, options.seed)
}

/// Runs every operation `iterations` times on an initialised engine. Fails only when the
/// benchmark cannot start (no aperture, no status page); an operation that fails is reported
/// in its own result.
pub fn run_on(e: &mut Engine, iterations: u32) -> Outcome<Report> {
    let start = Instant::now();
    let mut c = Ctx::new(e)?;
    // Run as a KMD does: status page registered, WAIT_EVENT requests posted.
    c.kmd_ready(e)?;
    println!(
        "GUEST-BENCH VRAM segment {}, aperture segment {}; {} operations x {iterations}",
        e.segment.desc.id,
        c.ap_id(),
        OPS.len()
    );
    let mut ops = Vec::new();
    for op in OPS {
        c.begin(e);
        let mut samples = Samples::new();
        let outcome = run_op(e, &mut c, &op, iterations, &mut samples)
            .and_then(|()| e.arena.recheck().map_err(Failure::from));
        ops.push(OpResult {
            op,
            samples,
            outcome,
        });
    }
    Ok(Report {
        iterations,
        ops,
        elapsed: start.elapsed(),
    })
}

/// Submits `buffer` `n` times, recording each kick-to-completion latency; every completion must
/// be OK with `bytes` moved and one packet done. `after` runs (untimed) after each one.
fn repeat(
    e: &mut Engine,
    n: u32,
    buffer: &DmaBufferBuilder,
    bytes: u64,
    samples: &mut Samples,
    mut after: impl FnMut(&mut Engine, &Completion) -> Outcome,
) -> Outcome {
    for i in 0..n {
        let cmd = e.prepare(buffer)?;
        let done = e.submit(&cmd)?;
        let took = e
            .device
            .control
            .last_round_trip()
            .ok_or_else(|| Failure("no kick-to-completion time for the submission".into()))?;
        expect_done(&done, bytes, 1).map_err(|f| Failure(format!("iteration {i}: {f}")))?;
        samples.push(took);
        after(e, &done)?;
    }
    Ok(())
}

fn no_after(_: &mut Engine, _: &Completion) -> Outcome {
    Ok(())
}

fn run_op(e: &mut Engine, c: &mut Ctx, op: &Op, n: u32, samples: &mut Samples) -> Outcome {
    let tag = 0x6265_6e63_6800 ^ op.name.len() as u64 ^ (op.bytes << 8) ^ (op.pages << 32);
    match op.name {
        "fence" => fence(e, c, n, samples),
        "pages_to_vram_64k" | "pages_to_vram_1m" => {
            let len = op.bytes;
            e.require_vram(VRAM_TO, len)?;
            let list = c.list(0, len)?;
            let data = pattern_bytes(tag, 0, len);
            write_list(e, &list, &data);
            e.vram.fill_pattern(VRAM_TO, len, !tag);
            let mut b = DmaBufferBuilder::new();
            b.push_transfer(&packets::transfer(
                len,
                c.frames(&list)?,
                e.vram_at(VRAM_TO),
            ));
            repeat(e, n, &b, len, samples, no_after)?;
            check_vram(e, VRAM_TO, &data, op.name)
        }
        "vram_to_pages_64k" | "vram_to_pages_1m" => {
            let len = op.bytes;
            e.require_vram(VRAM_FROM, len)?;
            let data = pattern_bytes(tag, 0, len);
            e.vram.write(VRAM_FROM, &data);
            let list = c.list(0, len)?;
            write_list(e, &list, &vec![0; usize::try_from(len).unwrap()]);
            let mut b = DmaBufferBuilder::new();
            b.push_transfer(&packets::transfer(
                len,
                e.vram_at(VRAM_FROM),
                c.frames(&list)?,
            ));
            repeat(e, n, &b, len, samples, no_after)?;
            check_list(e, &list, &data, op.name)
        }
        "aperture_to_vram_1m" => {
            let len = op.bytes;
            e.require_vram(VRAM_FROM_APERTURE, len)?;
            let pieces = c.pieces((len / PAGE) as usize)?;
            let data = pattern_bytes(tag, 0, len);
            write_pieces(e, &pieces, &data);
            c.map(e, AP_TRANSFER, &pieces)?;
            e.vram.fill_pattern(VRAM_FROM_APERTURE, len, !tag);
            let mut b = DmaBufferBuilder::new();
            b.push_transfer(&packets::transfer(
                len,
                c.ap(AP_TRANSFER * PAGE),
                e.vram_at(VRAM_FROM_APERTURE),
            ));
            repeat(e, n, &b, len, samples, no_after)?;
            check_vram(e, VRAM_FROM_APERTURE, &data, op.name)
        }
        "fill_1m" => {
            let (len, pattern) = (op.bytes, 0x5a3c_96e1);
            e.require_vram(VRAM_FILL, len)?;
            e.vram.fill_pattern(VRAM_FILL, len, tag);
            let mut b = DmaBufferBuilder::new();
            b.push(&packets::fill(pattern, len, e.vram_at(VRAM_FILL)));
            repeat(e, n, &b, len, samples, no_after)?;
            check_vram(e, VRAM_FILL, &fill_bytes(pattern, len), op.name)
        }
        "discard_content" | "read_physical_8" | "write_physical_8" => {
            let (opcode, arg) = match op.kind {
                "discard_content" => (WDDM_GPU_OP_DISCARD_CONTENT, 0),
                "read_physical" => (WDDM_GPU_OP_READ_PHYSICAL, 8),
                _ => (WDDM_GPU_OP_WRITE_PHYSICAL, 8),
            };
            e.require_vram(VRAM_ACCESS, PAGE)?;
            let data = pattern_bytes(tag, 0, PAGE);
            e.vram.write(VRAM_ACCESS, &data);
            let mut b = DmaBufferBuilder::new();
            b.push(&packets::segment_access(
                opcode,
                e.segment.desc.id,
                e.segment.gpu_address(VRAM_ACCESS + 0x40),
                arg,
            ));
            repeat(e, n, &b, 0, samples, no_after)?;
            // They move nothing: the bytes they name stay as they were.
            check_vram(e, VRAM_ACCESS, &data, op.name)
        }
        "map_aperture_256" | "map_aperture_4096" => {
            let (mapped, b) = map_setup(e, c, op.pages, tag, |c, pieces| {
                c.map_packet(AP_MAP, pieces, 0, pieces.len() as u64)
                    .map(|p| {
                        let mut b = DmaBufferBuilder::new();
                        b.push(&p);
                        b
                    })
            })?;
            repeat(e, n, &b, 0, samples, no_after)?;
            check_mapping(e, c, AP_MAP, op.pages, op.name, |e, i| {
                read_pieces(
                    e,
                    &mapped[usize::try_from(i).unwrap()..=usize::try_from(i).unwrap()],
                )
            })
        }
        "unmap_aperture_256" | "unmap_aperture_4096" => {
            let dummy = pattern_bytes(tag, 0, PAGE);
            c.dummy.write(0, &dummy);
            let mut b = DmaBufferBuilder::new();
            b.push(&packets::unmap_aperture(
                c.ap_id(),
                AP_MAP,
                op.pages,
                c.dummy.phys(),
            ));
            repeat(e, n, &b, 0, samples, no_after)?;
            check_mapping(e, c, AP_MAP, op.pages, op.name, |_, _| dummy.clone())
        }
        "map_aperture2_256" => {
            let (mapped, b) = map_setup(e, c, op.pages, tag, |c, pieces| {
                let address = c.place_piece_pfns(pieces)?;
                let mut b = DmaBufferBuilder::new();
                b.push(&packets::map_aperture2(
                    c.ap_id(),
                    c.map_flags,
                    AP_MAP2,
                    pieces.len() as u64,
                    Adl::Pages {
                        address,
                        page_count: u32::try_from(pieces.len()).unwrap(),
                    },
                    0,
                ));
                Ok(b)
            })?;
            repeat(e, n, &b, 0, samples, no_after)?;
            check_mapping(e, c, AP_MAP2, op.pages, op.name, |e, i| {
                read_pieces(
                    e,
                    &mapped[usize::try_from(i).unwrap()..=usize::try_from(i).unwrap()],
                )
            })
        }
        other => Err(Failure(format!("no benchmark operation {other}"))),
    }
}

/// `count` pages to map: [`DISTINCT_PAGES`] fresh scattered pages (or fewer), each with its own
/// pattern, repeated as needed. Returns them with the buffer `packet` builds to map them.
fn map_setup(
    e: &mut Engine,
    c: &mut Ctx,
    count: u64,
    tag: u64,
    packet: impl FnOnce(&mut Ctx, &[Piece]) -> Outcome<DmaBufferBuilder>,
) -> Outcome<(Vec<Piece>, DmaBufferBuilder)> {
    let distinct = c.pieces(DISTINCT_PAGES.min(usize::try_from(count).unwrap()))?;
    write_pieces(
        e,
        &distinct,
        &pattern_bytes(tag, 0, distinct.len() as u64 * PAGE),
    );
    let mapped: Vec<Piece> = distinct
        .iter()
        .copied()
        .cycle()
        .take(usize::try_from(count).unwrap())
        .collect();
    let b = packet(c, &mapped)?;
    Ok((mapped, b))
}

/// Reads [`sample_pages`] of aperture pages `first_page..first_page + count` into VRAM with one
/// submission (a TRANSFER per page) and compares each with `want(page index)`.
fn check_mapping(
    e: &mut Engine,
    c: &mut Ctx,
    first_page: u64,
    count: u64,
    what: &str,
    want: impl Fn(&Engine, u64) -> Vec<u8>,
) -> Outcome {
    let pages = sample_pages(count);
    let len = pages.len() as u64 * PAGE;
    e.require_vram(VRAM_SAMPLES, len)?;
    e.vram.fill_pattern(VRAM_SAMPLES, len, 0x5eed ^ first_page);
    let mut b = DmaBufferBuilder::new();
    for (k, page) in pages.iter().enumerate() {
        b.push_transfer(&packets::transfer(
            PAGE,
            c.ap((first_page + page) * PAGE),
            e.vram_at(VRAM_SAMPLES + k as u64 * PAGE),
        ));
    }
    let done = e.run(&b)?;
    expect_done(&done, len, u32::try_from(pages.len()).unwrap())
        .map_err(|f| Failure(format!("{what}: reading aperture pages back: {f}")))?;
    for (k, page) in pages.iter().enumerate() {
        check_vram(
            e,
            VRAM_SAMPLES + k as u64 * PAGE,
            &want(e, *page),
            &format!("{what}: aperture page {:#x}", first_page + page),
        )?;
    }
    Ok(())
}

/// A submission holding one FENCE: after each, the FENCE event (collected as a DPC would) must
/// carry the packet's fence; after the last, the status page must show the submission's fence.
fn fence(e: &mut Engine, c: &mut Ctx, n: u32, samples: &mut Samples) -> Outcome {
    c.kmd_ready(e)?;
    let mut last_submission = 0;
    for i in 0..n {
        let id = e.fence();
        let mut b = DmaBufferBuilder::new();
        b.push(&packets::fence(id));
        repeat(e, 1, &b, 0, samples, |e, done| {
            last_submission = done.fence;
            let events = c.events.drain(&mut e.device.control)?;
            ensure(
                events
                    .iter()
                    .any(|ev| ev.resp.kind == WDDM_GPU_EVENT_FENCE && ev.resp.fence_id == id),
                || {
                    let got: Vec<String> = events.iter().map(ToString::to_string).collect();
                    format!(
                        "iteration {i}: no FENCE event for fence {id} (got: {})",
                        if got.is_empty() {
                            "none".to_string()
                        } else {
                            got.join("; ")
                        }
                    )
                },
            )
        })?;
    }
    let page = c.status.header();
    ensure(page.completed_fence == last_submission, || {
        format!(
            "status page completed_fence {}, expected the last submission's {last_submission}",
            page.completed_fence
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(op: Op, us: &[u64], outcome: Outcome) -> OpResult {
        let mut samples = Samples::new();
        for v in us {
            samples.push(Duration::from_micros(*v));
        }
        OpResult {
            op,
            samples,
            outcome,
        }
    }

    fn full_report() -> Report {
        Report {
            iterations: 2,
            ops: OPS
                .iter()
                .map(|op| result(*op, &[100, 300], Ok(())))
                .collect(),
            elapsed: Duration::from_millis(1500),
        }
    }

    #[test]
    fn every_backend_kind_is_benchmarked() {
        for kind in KINDS {
            assert!(OPS.iter().any(|op| op.kind == kind), "{kind}");
        }
        for op in OPS {
            assert!(KINDS.contains(&op.kind), "{}", op.name);
        }
        let mut names: Vec<&str> = OPS.iter().map(|op| op.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPS.len());
    }

    #[test]
    fn sampled_pages_cover_both_ends() {
        assert_eq!(sample_pages(3), vec![0, 1, 2]);
        let p = sample_pages(256);
        assert_eq!(p.len(), 16);
        assert_eq!((p[0], p[15]), (0, 255));
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        let p = sample_pages(4096);
        assert_eq!((p.len(), p[0], p[15]), (16, 0, 4095));
        assert_eq!(p[1], 273);
    }

    #[test]
    fn kinds_aggregate_their_operations() {
        let report = full_report();
        assert!(report.ok());
        let kinds = report.kinds();
        assert_eq!(
            kinds.iter().map(|k| k.kind).collect::<Vec<_>>(),
            KINDS.to_vec()
        );
        let transfer = &kinds[0];
        assert_eq!(transfer.ops, 5);
        assert_eq!(transfer.samples.len(), 10);
        assert_eq!(transfer.bytes, 2 * (2 * 64 * KIB + 3 * MIB));
        let map = kinds.iter().find(|k| k.kind == "map_aperture").unwrap();
        assert_eq!((map.pages, map.bytes), (2 * (256 + 4096), 0));
        let s = map.samples.summary().unwrap();
        assert_eq!(
            (s.p50, s.max),
            (Duration::from_micros(100), Duration::from_micros(300))
        );
    }

    #[test]
    fn a_failed_or_short_operation_fails_its_kind() {
        let mut report = full_report();
        report.ops[6].outcome = Err(Failure("VRAM differs".into()));
        let mut short = report.clone();
        short.ops[6].outcome = Ok(());
        short.ops[6].samples = Samples::new();
        for r in [&report, &short] {
            assert!(!r.ok());
            let fill = r.kinds().into_iter().find(|k| k.kind == "fill").unwrap();
            assert!(!fill.verified);
        }
        let json = report.json();
        assert_eq!(json["ok"], json!(false));
        assert_eq!(json["kinds"]["fill"]["verified"], json!(false));
        assert_eq!(json["kinds"]["transfer"]["verified"], json!(true));
        assert_eq!(json["operations"][6]["error"], json!("VRAM differs"));
        assert!(
            report.text().contains("FAIL VRAM differs"),
            "{}",
            report.text()
        );
        assert_eq!(short.json()["kinds"]["fill"]["count"], json!(0));
        assert_eq!(short.json()["kinds"]["fill"]["p50_us"], Value::Null);
    }

    #[test]
    fn text_and_json_name_every_kind() {
        let report = full_report();
        let text = report.text();
        for kind in KINDS {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("GUEST-BENCH kind {kind} ")))
                .unwrap_or_else(|| panic!("no kind line for {kind}:\n{text}"));
            assert!(line.ends_with(" ok"), "{line}");
        }
        let fill = text.lines().find(|l| l.contains(" fill_1m ")).unwrap();
        // 2 x 1 MiB in 400 µs of summed latency.
        assert!(
            fill.contains("   1M      2     100.0     300.0     300.0    5242.9"),
            "{fill}"
        );
        let map = text
            .lines()
            .find(|l| l.contains(" map_aperture_4096 "))
            .unwrap();
        assert!(map.contains(" 4096p ") && map.contains("20480000"), "{map}");
        let json = report.json();
        assert_eq!(json["ok"], json!(true));
        assert_eq!(json["iterations"], json!(2));
        assert_eq!(json["seconds"], json!(1.5));
        assert!(text.contains("GUEST-BENCH took 1.5 s in all"), "{text}");
        for kind in KINDS {
            let k = &json["kinds"][kind];
            assert_eq!(
                k["count"],
                json!(if kind == "transfer" {
                    10
                } else if kind == "map_aperture" || kind == "unmap_aperture" {
                    4
                } else {
                    2
                }),
                "{kind}"
            );
            assert_eq!(k["p50_us"], json!(100.0), "{kind}");
            assert_eq!(k["p99_us"], json!(300.0), "{kind}");
            assert_eq!(k["max_us"], json!(300.0), "{kind}");
        }
        assert_eq!(json["operations"].as_array().unwrap().len(), OPS.len());
        assert_eq!(json["operations"][2]["mb_per_s"], json!(5242.88));
    }

    #[test]
    fn a_benchmark_that_did_not_start_is_not_ok() {
        let v = report_json(&Err(Failure("the layout has no aperture segment".into())));
        assert_eq!(v["ok"], json!(false));
        assert_eq!(v["error"], json!("the layout has no aperture segment"));
    }
}
