//! The paging benchmark: the device's paging operations driven through the vhost-user frontend
//! harness (the real backend binary, a real socket, real vrings) next to the limits they compare
//! with, measured in one process on one machine in one run. See `docs/performance.md`.
//!
//! Each round runs a limit, then the device doing the same work, kind after kind (contiguous
//! copy, scattered copy, aperture copy, map, unmap, the scattered copy between GPU virtual
//! addresses, page-table updates, translation in this process, submission round trip); the
//! figures are medians over the rounds, with their spread. The first round only warms up (every page is
//! touched by both processes) and checks that the device really did the work, byte for byte.
//!
//! ```text
//! cargo bench -p vhost-user-wddm-gpu --bench paging -- [--json] [--rounds N] [--no-pin]
//! ```
//!
//! With `--display` it runs the display benchmark instead (`paging/display.rs`): QEMU's C
//! vhost-user-gpu and ours on the virtio-gpu 2D command set.
//!
//! The bench pins itself, and so the backend it starts, to the CPU it starts on: the limits and
//! the device then run on the same core. The CPUs of a shared virtual machine differ by several
//! percent (their neighbours differ), which unpinned would show up as device overhead or gain.
//!
//! Figures are reported, never asserted: the run exits 0 whether a target is met or not, and
//! non-zero only when the run is broken (a device error, wrong bytes, no echo to compare with).

/// `--display`: QEMU's C vhost-user-gpu against ours on the 2D command set.
#[path = "paging/display.rs"]
mod display;
/// The GPU virtual addressing figures: VA copies, page-table updates, translation cost.
#[path = "paging/gpuva.rs"]
mod gpuva;
/// `--link`: the link model's measured times beside the modelled ones.
#[path = "paging/link.rs"]
mod link;

use std::fmt::Write as _;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use vhost_user_wddm_gpu::echo::{self, EchoPeer};
use vmm_sys_util::eventfd::EventFd;
use wddm_gpu_abi::build::{self, Endpoint};
use wddm_gpu_abi::caps::WDDM_GPU_CAPSET_ID;
use wddm_gpu_abi::packet::WDDM_GPU_MAX_FRAME_LIST_ENTRIES;
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::{
    backend_process::{SpawnOptions, TIMEOUT},
    harness::{Harness, DMA_BUFFER, PAGE, PAGE_USIZE},
    layout,
    pattern::pattern,
    requests::{frames, segment, submit_command, unknown_packet},
    stats::{median, min_max, percentile_us, round_to},
};
use zerocopy::{Immutable, IntoBytes};

const MIB: u64 = 1 << 20;

/// The layout: 256 MiB of CPU-visible VRAM (segment 1) and a 1 GiB aperture (segment 2), no
/// device-only VRAM; WDDM 2.0 with the GpuMmu of `qemu-configs/layouts/gpummu.toml` (see
/// `gpuva.rs`).
fn layout() -> String {
    layout::vram_and_aperture("256MiB", "1GiB", &gpuva::GPUMMU)
}
const VRAM_SEGMENT: u32 = 1;
const APERTURE_SEGMENT: u32 = 2;
const VRAM_BYTES: u64 = 256 * MIB;
const APERTURE_BYTES: u64 = 1024 * MIB;

/// Bytes of each copy, each way.
const COPY_BYTES: u64 = 64 * MIB;
const COPY_PAGES: u64 = COPY_BYTES / PAGE;
/// Pages of one map and one unmap: the whole aperture, one full frame list.
const MAP_PAGES: u64 = WDDM_GPU_MAX_FRAME_LIST_ENTRIES as u64;

// Guest RAM, beyond the harness's own areas (below 2 MiB).
/// The scattered frames, as one page array: [`MAP_PAGES`] entries (2 MiB). Its first
/// [`COPY_PAGES`] entries are the frame list of the scattered transfers.
const SCATTERED_LIST: u64 = 0x40_0000;
/// The contiguous frame list: [`COPY_PAGES`] consecutive frames (128 KiB).
const CONTIGUOUS_LIST: u64 = 0x60_0000;
/// The unmap's dummy page.
const DUMMY_PAGE: u64 = 0x70_0000;
/// The contiguous data: [`COPY_BYTES`].
const CONTIGUOUS_DATA: u64 = 0x100_0000;
/// The scattered frames are every other frame of the pool (so no two are adjacent), shuffled.
const POOL: u64 = 0x800_0000;
const POOL_BYTES: u64 = 2 * MAP_PAGES * PAGE;
/// Guest RAM: 2 GiB + 128 MiB, touched lazily (the benchmark touches about 130 MiB of it).
const RAM_BYTES: u64 = POOL + POOL_BYTES;

// VRAM offsets (segment addresses: `BaseAddress` is 0).
/// Destination of the copies into VRAM.
const VRAM_IN: u64 = 0;
/// Source of the copies out of VRAM.
const VRAM_OUT: u64 = 64 * MIB;
/// Destination of the aperture copy.
const VRAM_APERTURE: u64 = 128 * MIB;
/// One page the checks of the map and the unmap copy into.
const VRAM_PROBE: u64 = 192 * MIB;

/// Rounds unless `--rounds` says otherwise (at least 5).
const DEFAULT_ROUNDS: usize = 7;
/// Round trips per round, for submissions and for the echo alike.
const ROUND_TRIPS: usize = 2_000;
/// Round trips of each kind per round kicked into an idle backend, and the pause before each
/// in which the backend goes idle.
const IDLE_ROUND_TRIPS: usize = 500;
const SETTLE: Duration = Duration::from_micros(20);
/// Seed of the scattered-frame shuffle.
const SEED: u64 = 0x5eed_0ff4_a3e5;

/// One reported figure.
struct Key {
    name: &'static str,
    /// Per-round values.
    rounds: Vec<f64>,
    /// What the figure should be, if it has a target.
    target: Option<Target>,
    /// How figures print.
    decimals: usize,
}

#[derive(Clone, Copy)]
enum Target {
    AtLeast(f64),
    AtMost(f64),
    Below(f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(limit) => value >= limit,
            Target::AtMost(limit) => value <= limit,
            Target::Below(limit) => value < limit,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(limit) => format!(">= {}", short(limit)),
            Target::AtMost(limit) => format!("<= {}", short(limit)),
            Target::Below(limit) => format!("< {}", short(limit)),
        }
    }
}

fn short(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", value / 1e6)
    } else {
        format!("{value}")
    }
}

fn gbps(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / 1e9
}

// ---- packets ----

/// A DMA buffer of one packet.
fn dma<T: IntoBytes + Immutable>(packet: &T) -> Vec<u8> {
    packet.as_bytes().to_vec()
}

fn transfer(length: u64, source: Endpoint, destination: Endpoint) -> Vec<u8> {
    dma(&build::transfer(length, source, destination))
}

fn frame_list(list: u64, frame_count: u64) -> Endpoint {
    frames(list, u32::try_from(frame_count).unwrap(), 0)
}

fn map_packet(page_count: u64, list: u64) -> Vec<u8> {
    dma(&build::map_aperture(
        APERTURE_SEGMENT,
        0,
        0,
        page_count,
        list,
        u32::try_from(page_count).unwrap(),
        0,
    ))
}

fn unmap_packet(page_count: u64) -> Vec<u8> {
    dma(&build::unmap_aperture(
        APERTURE_SEGMENT,
        0,
        page_count,
        DUMMY_PAGE,
    ))
}

fn fence_packet(fence_id: u32) -> Vec<u8> {
    dma(&build::fence(fence_id))
}

/// Every other frame of the pool, shuffled with a fixed seed (Fisher-Yates over xorshift): no
/// two listed frames are adjacent in memory, so no run of them coalesces.
fn scattered_frames() -> Vec<u64> {
    shuffled((0..MAP_PAGES).map(|i| POOL / PAGE + 2 * i).collect())
}

/// `frames` shuffled with the fixed seed.
fn shuffled(mut frames: Vec<u64>) -> Vec<u64> {
    let mut state = SEED;
    for i in (1..frames.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let j = usize::try_from(state % (i as u64 + 1)).unwrap();
        frames.swap(i, j);
    }
    frames
}

/// Compares byte for byte; a difference breaks the run.
fn check_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(at) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        panic!("{what}: wrong bytes from offset {at:#x}: the device did not do the work");
    }
}

/// The benchmark's harness, frames and bookkeeping.
struct Bench {
    h: Harness,
    scattered: Vec<u64>,
    next_fence: u32,
}

impl Bench {
    fn start() -> Self {
        let options = SpawnOptions {
            vram_size: VRAM_BYTES,
            ram_size: RAM_BYTES,
            layout: Some(layout()),
            // The latency limit the submission round trip is compared with.
            args: vec!["--bench-echo".into()],
            log_filter: "info".to_string(),
            ..SpawnOptions::default()
        };
        let mut h = Harness::ready_with_options("bench", &options);
        let capset = h.capset();
        let vram = capset.segment(VRAM_SEGMENT);
        let aperture = capset.segment(APERTURE_SEGMENT);
        assert_eq!((vram.base_address, vram.size), (0, VRAM_BYTES), "{vram:?}");
        assert_eq!(
            (aperture.base_address, aperture.size),
            (0, APERTURE_BYTES),
            "{aperture:?}"
        );

        let scattered = scattered_frames();
        h.write_frame_list(SCATTERED_LIST, &scattered);
        let contiguous: Vec<u64> = (0..COPY_PAGES)
            .map(|i| CONTIGUOUS_DATA / PAGE + i)
            .collect();
        h.write_frame_list(CONTIGUOUS_LIST, &contiguous);
        Self {
            h,
            scattered,
            next_fence: 1,
        }
    }

    /// Submits `packets` with the next fence and waits for the completion, whatever it says.
    fn submit(&mut self, packets: &[u8]) -> WddmGpuRespSubmit {
        let fence = self.next_fence;
        self.next_fence += 1;
        self.h.write_ram(DMA_BUFFER, packets);
        self.h.submit(&submit_command(
            DMA_BUFFER,
            u32::try_from(packets.len()).unwrap(),
            fence,
        ))
    }

    /// Submits one packet and waits for it; returns the completion and the time from the kick
    /// to the call notification. Anything but full success breaks the run.
    fn run(&mut self, packet: &[u8], what: &str) -> (WddmGpuRespSubmit, Duration) {
        let fence = self.next_fence;
        self.next_fence += 1;
        self.h.write_ram(DMA_BUFFER, packet);
        let pending = self.h.post_submit(&submit_command(
            DMA_BUFFER,
            u32::try_from(packet.len()).unwrap(),
            fence,
        ));
        let response = self.h.wait_submit(pending);
        let took = self
            .h
            .last_round_trip()
            .expect("a submission without a kick and a notification");
        assert!(
            SubmitStatus::from_raw(response.status) == Some(SubmitStatus::Ok)
                && response.packets_completed == 1
                && response.submission_fence_id == fence,
            "{what}: the device failed: {response:?}\n---- backend log ----\n{}",
            self.h.backend.log()
        );
        (response, took)
    }

    /// A TRANSFER that must move all `length` bytes.
    fn transfer(&mut self, packet: &[u8], length: u64, what: &str) -> Duration {
        let (response, took) = self.run(packet, what);
        assert_eq!(response.bytes_transferred, length, "{what}: {response:?}");
        took
    }

    // ---- the device ----

    /// Frame list -> VRAM, then VRAM -> frame list, over the list at `list`.
    fn device_copy(&mut self, list: u64) -> Duration {
        let into = transfer(
            COPY_BYTES,
            frame_list(list, COPY_PAGES),
            segment(VRAM_SEGMENT, VRAM_IN),
        );
        let out = transfer(
            COPY_BYTES,
            segment(VRAM_SEGMENT, VRAM_OUT),
            frame_list(list, COPY_PAGES),
        );
        self.transfer(&into, COPY_BYTES, "frames -> VRAM")
            + self.transfer(&out, COPY_BYTES, "VRAM -> frames")
    }

    fn device_map(&mut self) -> Duration {
        self.run(&map_packet(MAP_PAGES, SCATTERED_LIST), "map").1
    }

    fn device_unmap(&mut self) -> Duration {
        self.run(&unmap_packet(MAP_PAGES), "unmap").1
    }

    /// Aperture (mapped) -> VRAM.
    fn device_aperture_copy(&mut self) -> Duration {
        let packet = transfer(
            COPY_BYTES,
            segment(APERTURE_SEGMENT, 0),
            segment(VRAM_SEGMENT, VRAM_APERTURE),
        );
        self.transfer(&packet, COPY_BYTES, "aperture -> VRAM")
    }

    /// `count` submissions of one FENCE each, one at a time: kick-to-completion times.
    fn submit_round_trips(&mut self, count: usize) -> Vec<Duration> {
        (0..count)
            .map(|_| {
                let packet = fence_packet(self.next_fence);
                self.run(&packet, "fence").1
            })
            .collect()
    }

    // ---- the limits: the same copies, in this process, between the same mappings ----

    /// 64 MiB RAM -> VRAM and back, contiguous.
    fn memcpy_contiguous(&self) -> Duration {
        let len = usize::try_from(COPY_BYTES).unwrap();
        let ram = self.h.ram_ptr(CONTIGUOUS_DATA, len);
        let vram_in = self.h.vram_ptr(VRAM_IN, len);
        let vram_out = self.h.vram_ptr(VRAM_OUT, len);
        let start = Instant::now();
        // SAFETY: the three ranges are checked mappings of `len` bytes that stay mapped while
        // the harness lives, and do not overlap (RAM and VRAM are different files; VRAM_IN and
        // VRAM_OUT are 64 MiB apart).
        unsafe {
            std::ptr::copy_nonoverlapping(ram, vram_in, len);
            std::ptr::copy_nonoverlapping(vram_out, ram, len);
        }
        std::hint::black_box((ram, vram_in));
        start.elapsed()
    }

    /// The same, page by page at the scattered frames; each way timed on its own (the aperture
    /// copy goes one way only, and the two ways differ by a few per cent).
    fn memcpy_scattered(&self) -> [Duration; 2] {
        let page = PAGE_USIZE;
        let ram = self.h.ram_ptr(0, usize::try_from(RAM_BYTES).unwrap());
        let vram_in = self
            .h
            .vram_ptr(VRAM_IN, usize::try_from(COPY_BYTES).unwrap());
        let vram_out = self
            .h
            .vram_ptr(VRAM_OUT, usize::try_from(COPY_BYTES).unwrap());
        let frames = &self.scattered[..usize::try_from(COPY_PAGES).unwrap()];
        let start = Instant::now();
        // SAFETY: every frame is inside guest RAM (the pool lies below RAM_BYTES) and every
        // VRAM page inside the 64 MiB ranges checked above; RAM and VRAM do not overlap.
        unsafe {
            for (i, &frame) in frames.iter().enumerate() {
                let at = ram.add(usize::try_from(frame).unwrap() * page);
                std::ptr::copy_nonoverlapping(at, vram_in.add(i * page), page);
            }
        }
        std::hint::black_box(vram_in);
        let into_vram = start.elapsed();
        let start = Instant::now();
        // SAFETY: as above.
        unsafe {
            for (i, &frame) in frames.iter().enumerate() {
                let at = ram.add(usize::try_from(frame).unwrap() * page);
                std::ptr::copy_nonoverlapping(vram_out.add(i * page), at, page);
            }
        }
        std::hint::black_box(ram);
        [into_vram, start.elapsed()]
    }

    // ---- data and checks (the first round) ----

    /// The bytes of the scattered frames, in list order.
    fn gather(&self, frames: &[u64]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(frames.len() * PAGE_USIZE);
        for &frame in frames {
            bytes.extend_from_slice(&self.h.read_ram(frame * PAGE, PAGE_USIZE));
        }
        bytes
    }

    fn scatter(&self, frames: &[u64], bytes: &[u8]) {
        for (&frame, page) in frames.iter().zip(bytes.chunks(PAGE_USIZE)) {
            self.h.write_ram(frame * PAGE, page);
        }
    }

    /// Fills the sources, runs every device operation once and checks what it wrote.
    fn warm_up_and_check(&mut self) {
        let len = usize::try_from(COPY_BYTES).unwrap();
        let frames = self.scattered[..usize::try_from(COPY_PAGES).unwrap()].to_vec();
        let to_vram = pattern(1, len);
        let from_vram = pattern(2, len);
        let scattered_data = pattern(3, len);

        // Contiguous: RAM -> VRAM_IN, VRAM_OUT -> RAM.
        self.h.write_ram(CONTIGUOUS_DATA, &to_vram);
        self.h.write_vram(VRAM_OUT, &from_vram);
        self.h.write_vram(VRAM_IN, &vec![0; len]);
        self.device_copy(CONTIGUOUS_LIST);
        check_bytes(&self.h.read_vram(VRAM_IN, len), &to_vram, "frames -> VRAM");
        check_bytes(
            &self.h.read_ram(CONTIGUOUS_DATA, len),
            &from_vram,
            "VRAM -> frames",
        );

        // Scattered: the same over the scattered frames.
        self.scatter(&frames, &scattered_data);
        self.h.write_vram(VRAM_IN, &vec![0; len]);
        self.device_copy(SCATTERED_LIST);
        check_bytes(
            &self.h.read_vram(VRAM_IN, len),
            &scattered_data,
            "scattered frames -> VRAM",
        );
        check_bytes(
            &self.gather(&frames),
            &from_vram,
            "VRAM -> scattered frames",
        );

        // Map the whole aperture, copy through it, check its last page, unmap, check that the
        // last page reads the dummy page.
        let last = *self.scattered.last().unwrap();
        let last_page = pattern(4, PAGE_USIZE);
        let dummy = pattern(5, PAGE_USIZE);
        self.h.write_ram(last * PAGE, &last_page);
        self.h.write_ram(DUMMY_PAGE, &dummy);
        self.h.write_vram(VRAM_APERTURE, &vec![0; len]);
        self.device_map();
        self.device_aperture_copy();
        check_bytes(
            &self.h.read_vram(VRAM_APERTURE, len),
            &from_vram,
            "aperture -> VRAM",
        );
        let probe = transfer(
            PAGE,
            segment(APERTURE_SEGMENT, (MAP_PAGES - 1) * PAGE),
            segment(VRAM_SEGMENT, VRAM_PROBE),
        );
        let check_probe = |bench: &mut Self, copy: &str, expected: &[u8], what: &str| {
            bench.transfer(&probe, PAGE, copy);
            check_bytes(&bench.h.read_vram(VRAM_PROBE, PAGE_USIZE), expected, what);
        };
        check_probe(
            self,
            "last aperture page -> VRAM",
            &last_page,
            "map: last aperture page",
        );
        self.device_unmap();
        check_probe(
            self,
            "unmapped aperture page -> VRAM",
            &dummy,
            "unmap: last aperture page",
        );

        // The limits touch the same pages in this process.
        self.memcpy_contiguous();
        self.memcpy_scattered();
        self.submit_round_trips(100);
    }
}

/// What precedes each measured round trip ([`alternate_round_trips`]).
#[derive(Clone, Copy)]
enum Before {
    /// An unmeasured round trip of the same kind: the device's work after a submission's
    /// interrupt (its tail) delays whatever is kicked next, and is charged to the next
    /// submission, as a driver submitting back to back meets it, never to the echo, whose
    /// limit must be that of an idle backend.
    SameKind,
    /// A pause, as a guest's kick usually finds the backend: it finishes what the round trip
    /// before left and waits in epoll_wait, its caches cooled by the sleep.
    Pause(Duration),
}

/// `count` echo and submission round trips, alternated so both meet the same placement of the
/// two threads on the CPUs (which moves between rounds), each measured one after `before`;
/// their times (no echoes without one).
fn alternate_round_trips(
    bench: &mut Bench,
    echo: &Result<EchoPeer, String>,
    count: usize,
    before: Before,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut pings, mut rtts) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for _ in 0..count {
        if let Ok(peer) = echo {
            match before {
                Before::SameKind => drop(echo_round_trip(peer)),
                Before::Pause(pause) => std::thread::sleep(pause),
            }
            pings.push(echo_round_trip(peer));
        }
        match before {
            Before::SameKind => drop(bench.submit_round_trips(1)),
            Before::Pause(pause) => std::thread::sleep(pause),
        }
        rtts.extend(bench.submit_round_trips(1));
    }
    (pings, rtts)
}

/// Kick the echo, wait for its call the way the harness waits (poll, then read).
fn echo_round_trip(peer: &EchoPeer) -> Duration {
    let start = Instant::now();
    peer.kick.write(1).unwrap();
    wait_call(&peer.call);
    start.elapsed()
}

fn wait_call(call: &EventFd) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut pollfd = libc::pollfd {
            fd: call.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, which outlives the call.
        let ready = unsafe { libc::poll(&mut pollfd, 1, 1000) };
        if ready > 0 && call.read().is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "the echo never answered");
    }
}

/// Connects to the backend's echo, waiting a little for its stats socket.
fn connect_echo(bench: &Bench) -> Result<EchoPeer, String> {
    let socket = bench.h.backend.stats_socket();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match echo::connect(&socket) {
            Ok(peer) => return Ok(peer),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!(
                    "no eventfd echo at the backend's stats socket ({error})"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Pins this thread (and the processes it starts) to the CPU it runs on; returns that CPU.
fn pin_to_current_cpu() -> std::io::Result<usize> {
    // SAFETY: sched_getcpu takes nothing and returns a CPU number or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    let cpu = usize::try_from(cpu).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: an all-zero cpu_set_t is a valid empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from the kernel and is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the set outlives the call; 0 is this thread.
    let result = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cpu)
}

struct Options {
    json: bool,
    rounds: usize,
    pin: bool,
    /// `--soak N`: run N mixed submissions instead of the rounds.
    soak: Option<u64>,
    /// `--display`: run the display benchmark (`display.rs`) instead.
    display: bool,
    /// `--link`: run the link-model benchmark (`link.rs`) instead.
    link: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        json: false,
        rounds: DEFAULT_ROUNDS,
        pin: true,
        soak: None,
        display: false,
        link: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => options.json = true,
            "--no-pin" => options.pin = false,
            "--display" => options.display = true,
            "--link" => options.link = true,
            "--rounds" => {
                let value = args.next().ok_or("--rounds needs a number")?;
                options.rounds = value
                    .parse()
                    .map_err(|_| format!("--rounds {value}: not a number"))?;
                if options.rounds < 5 {
                    return Err("--rounds: at least 5".to_string());
                }
            }
            "--soak" => {
                let value = args.next().ok_or("--soak needs a number of submissions")?;
                let count: u64 = value
                    .parse()
                    .map_err(|_| format!("--soak {value}: not a number"))?;
                if count < SOAK_KINDS * SOAK_SAMPLES {
                    return Err(format!(
                        "--soak: at least {} submissions",
                        SOAK_KINDS * SOAK_SAMPLES
                    ));
                }
                options.soak = Some(count);
            }
            // cargo bench passes --bench to harness-less benchmarks.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(why) => {
            eprintln!(
                "paging bench: {why}\nusage: paging [--json] [--rounds N] [--no-pin] [--soak N | --display | --link]"
            );
            return ExitCode::from(2);
        }
    };
    if options.display {
        return display::run(options.json, options.rounds);
    }
    if options.link {
        return link::run(options.json, options.rounds);
    }
    let rounds = options.rounds;
    let cpu = if options.pin {
        match pin_to_current_cpu() {
            Ok(cpu) => Some(cpu),
            Err(error) => {
                eprintln!("paging bench: cannot pin to one CPU ({error}); running unpinned");
                None
            }
        }
    } else {
        None
    };
    let mut bench = Bench::start();
    eprintln!("paging bench: warming up and checking the device's bytes");
    bench.warm_up_and_check();
    if let Some(submissions) = options.soak {
        return soak(&mut bench, submissions, options.json);
    }
    let gpu_va = bench.setup_gpu_va();
    bench.warm_up_and_check_gpu_va(&gpu_va);
    let mut translation = gpuva::Translation::new();
    let echo = connect_echo(&bench);
    if let Err(why) = &echo {
        eprintln!("paging bench: {why}; the round-trip limit is missing");
    }

    let copy_bytes = 2 * COPY_BYTES;
    let mut memcpy = Vec::new();
    let mut transfer = Vec::new();
    let mut scattered_memcpy = Vec::new();
    let mut scattered_memcpy_into_vram = Vec::new();
    let mut scattered_transfer = Vec::new();
    let mut aperture = Vec::new();
    let mut map = Vec::new();
    let mut unmap = Vec::new();
    let mut pingpong_p50 = Vec::new();
    let (mut idle_pingpong_p50, mut idle_rtt_p50) = (Vec::new(), Vec::new());
    let mut rtt_p50 = Vec::new();
    let mut rtt_p99 = Vec::new();
    let (mut transfer_ratio, mut scattered_ratio, mut aperture_ratio, mut rtt_ratio) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut va_copy = Vec::new();
    let mut va_copy_ratio = Vec::new();
    let mut update = Vec::new();
    let mut translate_miss = Vec::new();
    let mut translate_hit = Vec::new();

    for round in 0..rounds {
        eprintln!("paging bench: round {}/{rounds}", round + 1);
        let limit = gbps(copy_bytes, bench.memcpy_contiguous());
        let device = gbps(copy_bytes, bench.device_copy(CONTIGUOUS_LIST));
        memcpy.push(limit);
        transfer.push(device);
        transfer_ratio.push(device / limit);

        let [into_vram, out_of_vram] = bench.memcpy_scattered();
        let limit = gbps(copy_bytes, into_vram + out_of_vram);
        let limit_into_vram = gbps(COPY_BYTES, into_vram);
        let device = gbps(copy_bytes, bench.device_copy(SCATTERED_LIST));
        scattered_memcpy.push(limit);
        scattered_memcpy_into_vram.push(limit_into_vram);
        scattered_transfer.push(device);
        scattered_ratio.push(device / limit);

        map.push(MAP_PAGES as f64 / bench.device_map().as_secs_f64());
        let through = gbps(COPY_BYTES, bench.device_aperture_copy());
        aperture.push(through);
        // Against this round's scattered limit the same way (the same 64 MiB, into VRAM).
        aperture_ratio.push(through / limit_into_vram);
        unmap.push(MAP_PAGES as f64 / bench.device_unmap().as_secs_f64());

        // The same bytes as the scattered transfers, between GPU virtual addresses, against
        // this round's scattered transfer.
        let through_mmu = gbps(copy_bytes, bench.device_va_copy());
        va_copy.push(through_mmu);
        va_copy_ratio.push(through_mmu / scattered_transfer[scattered_transfer.len() - 1]);
        update.push(gpu_va.update_entries as f64 / bench.device_update(&gpu_va).as_secs_f64());
        translate_miss.push(translation.miss_ns());
        translate_hit.push(translation.hit_ns());

        let (mut pings, mut rtts) =
            alternate_round_trips(&mut bench, &echo, ROUND_TRIPS, Before::SameKind);
        if !pings.is_empty() {
            pingpong_p50.push(percentile_us(&mut pings, 50));
        }
        rtt_p50.push(percentile_us(&mut rtts, 50));
        rtt_p99.push(percentile_us(&mut rtts, 99));
        if let Some(&ping) = pingpong_p50.last() {
            rtt_ratio.push(rtt_p50[rtt_p50.len() - 1] / ping);
        }

        // The same two kicked into an idle backend; reported, not judged.
        let (mut pings, mut rtts) =
            alternate_round_trips(&mut bench, &echo, IDLE_ROUND_TRIPS, Before::Pause(SETTLE));
        if !pings.is_empty() {
            idle_pingpong_p50.push(percentile_us(&mut pings, 50));
        }
        idle_rtt_p50.push(percentile_us(&mut rtts, 50));
    }

    let rss_mib = bench
        .h
        .backend
        .status_kib_field("RssAnon")
        .expect("RssAnon of the backend") as f64
        / MIB as f64;
    if !bench.h.backend.is_running() {
        eprintln!("paging bench: the backend died:\n{}", bench.h.backend.log());
        return ExitCode::FAILURE;
    }

    // Ratios are of the medians; the per-round ratios give their spread.
    let ratio = |num: &[f64], den: &[f64], per_round: Vec<f64>| -> (f64, Vec<f64>) {
        (median(num) / median(den), per_round)
    };
    let mut keys = Vec::new();
    let mut push = |name, rounds: Vec<f64>, target, decimals| {
        keys.push((
            Key {
                name,
                rounds,
                target,
                decimals,
            },
            None::<f64>,
        ))
    };
    push("memcpy_gbps", memcpy.clone(), None, 2);
    push("scattered_memcpy_gbps", scattered_memcpy.clone(), None, 2);
    push(
        "scattered_memcpy_into_vram_gbps",
        scattered_memcpy_into_vram.clone(),
        None,
        2,
    );
    push("transfer_gbps", transfer.clone(), None, 2);
    push(
        "scattered_transfer_gbps",
        scattered_transfer.clone(),
        None,
        2,
    );
    push("aperture_transfer_gbps", aperture.clone(), None, 2);
    push("va_copy_gbps", va_copy.clone(), None, 2);
    push(
        "update_page_table_entries_per_s",
        update,
        Some(Target::AtLeast(200e6)),
        0,
    );
    push("translate_miss_ns_per_page", translate_miss, None, 1);
    push("translate_hit_ns_per_page", translate_hit, None, 1);
    push("map_pages_per_s", map, Some(Target::AtLeast(500e6)), 0);
    push("unmap_pages_per_s", unmap, Some(Target::AtLeast(50e6)), 0);
    push("submit_rtt_us_p50", rtt_p50.clone(), None, 2);
    push("submit_rtt_us_p99", rtt_p99, None, 1);
    if !pingpong_p50.is_empty() {
        push("pingpong_us_p50", pingpong_p50.clone(), None, 2);
    }
    push("submit_rtt_idle_us_p50", idle_rtt_p50, None, 2);
    if !idle_pingpong_p50.is_empty() {
        push("pingpong_idle_us_p50", idle_pingpong_p50, None, 2);
    }
    push(
        "backend_rss_mib",
        vec![rss_mib],
        Some(Target::Below(16.0)),
        1,
    );
    let mut ratios = vec![
        (
            "transfer_vs_memcpy",
            ratio(&transfer, &memcpy, transfer_ratio),
            Target::AtLeast(0.95),
        ),
        (
            "scattered_vs_memcpy",
            ratio(&scattered_transfer, &scattered_memcpy, scattered_ratio),
            Target::AtLeast(0.95),
        ),
        (
            "aperture_vs_memcpy",
            ratio(&aperture, &scattered_memcpy_into_vram, aperture_ratio),
            Target::AtLeast(0.95),
        ),
        (
            "va_copy_vs_scattered_transfer",
            ratio(&va_copy, &scattered_transfer, va_copy_ratio),
            Target::AtLeast(0.9),
        ),
    ];
    if !pingpong_p50.is_empty() {
        ratios.push((
            "submit_rtt_vs_pingpong",
            ratio(&rtt_p50, &pingpong_p50, rtt_ratio),
            Target::AtMost(1.1),
        ));
    }
    for (name, (value, per_round), target) in ratios {
        keys.push((
            Key {
                name,
                rounds: per_round,
                target: Some(target),
                decimals: 3,
            },
            Some(value),
        ));
    }
    // Report order: each figure, then its ratio.
    let order = [
        "memcpy_gbps",
        "transfer_gbps",
        "transfer_vs_memcpy",
        "scattered_memcpy_gbps",
        "scattered_transfer_gbps",
        "scattered_vs_memcpy",
        "scattered_memcpy_into_vram_gbps",
        "aperture_transfer_gbps",
        "aperture_vs_memcpy",
        "va_copy_gbps",
        "va_copy_vs_scattered_transfer",
        "update_page_table_entries_per_s",
        "translate_miss_ns_per_page",
        "translate_hit_ns_per_page",
        "map_pages_per_s",
        "unmap_pages_per_s",
        "pingpong_us_p50",
        "submit_rtt_us_p50",
        "submit_rtt_us_p99",
        "submit_rtt_vs_pingpong",
        "pingpong_idle_us_p50",
        "submit_rtt_idle_us_p50",
        "backend_rss_mib",
    ];
    keys.sort_by_key(|(key, _)| order.iter().position(|&name| name == key.name));

    let value_of = |(key, fixed): &(Key, Option<f64>)| fixed.unwrap_or_else(|| median(&key.rounds));
    if options.json {
        let mut object = Map::new();
        let mut spread = Map::new();
        let mut checks = Map::new();
        for entry in &keys {
            let (key, _) = entry;
            let value = value_of(entry);
            object.insert(key.name.to_string(), round_to(value, key.decimals));
            let (lo, hi) = min_max(&key.rounds);
            spread.insert(
                key.name.to_string(),
                json!({ "min": round_to(lo, key.decimals), "max": round_to(hi, key.decimals) }),
            );
            if let Some(target) = key.target {
                checks.insert(
                    key.name.to_string(),
                    json!({ "target": target.text(), "pass": target.met(value) }),
                );
            }
        }
        object.insert("rounds".to_string(), json!(rounds));
        object.insert("round_trips_per_round".to_string(), json!(ROUND_TRIPS));
        object.insert("pinned_cpu".to_string(), json!(cpu));
        object.insert("spread".to_string(), Value::Object(spread));
        object.insert("targets".to_string(), Value::Object(checks));
        if let Err(why) = &echo {
            object.insert("error".to_string(), json!(why));
        }
        println!("{}", Value::Object(object));
    } else {
        let mut table = String::new();
        let _ = writeln!(
            table,
            "{:<32} {:>14} {:>8} {:>6}   min .. max over {rounds} rounds",
            "key", "median", "target", ""
        );
        for entry in &keys {
            let (key, _) = entry;
            let value = value_of(entry);
            let (lo, hi) = min_max(&key.rounds);
            let (target, verdict) = match key.target {
                Some(target) if target.met(value) => (target.text(), "PASS"),
                Some(target) => (target.text(), "MISS"),
                None => (String::new(), ""),
            };
            let d = key.decimals;
            let spread = if key.rounds.len() > 1 {
                format!("{lo:.d$} .. {hi:.d$}")
            } else {
                "(after the run)".to_string()
            };
            let _ = writeln!(
                table,
                "{:<32} {value:>14.d$} {target:>8} {verdict:>6}   {spread}",
                key.name
            );
        }
        let pinned = match cpu {
            Some(cpu) => format!("bench and backend pinned to CPU {cpu}"),
            None => "unpinned".to_string(),
        };
        let _ = writeln!(
            table,
            "copies: 64 MiB each way; GB/s = 1e9 bytes/s; round trips: {ROUND_TRIPS} per round; {pinned}"
        );
        print!("{table}");
    }
    if echo.is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// A figure for JSON: an integer without decimals, else rounded to `decimals`.
/// Kinds of work the soak cycles through.
const SOAK_KINDS: u64 = 8;
/// RSS samples the soak takes.
const SOAK_SAMPLES: u64 = 20;
/// The soak's RSS is flat when it grew by at most this much after the first tenth of the run
/// (allocator noise; a leak of even 16 bytes a submission grows 16 MB over a million).
const SOAK_FLAT_KIB: u64 = 1024;

/// `--soak N`: N submissions and requests of mixed kinds (FENCE, frames -> VRAM, VRAM -> VRAM,
/// map and unmap, a faulting packet, WAIT_EVENT answered by a FENCE, capset queries, PREEMPT
/// with nothing running), one at a time, each checked; the backend's RSS is sampled along the
/// way and printed. Exits non-zero when the device answered wrongly or died; a growing RSS is
/// reported, not asserted (a benchmark, not a timed test).
fn soak(bench: &mut Bench, submissions: u64, json: bool) -> ExitCode {
    let rss = |bench: &Bench| {
        bench
            .h
            .backend
            .status_kib_field("RssAnon")
            .expect("RssAnon of the backend")
            / 1024
    };
    let unknown = dma(&unknown_packet(0x7777));
    let small_in = transfer(
        PAGE,
        frame_list(CONTIGUOUS_LIST, 1),
        segment(VRAM_SEGMENT, VRAM_PROBE),
    );
    let vram_copy = transfer(
        64 << 10,
        segment(VRAM_SEGMENT, VRAM_PROBE),
        segment(VRAM_SEGMENT, VRAM_PROBE + MIB),
    );
    let mut map_unmap = map_packet(4, SCATTERED_LIST);
    map_unmap.extend(unmap_packet(4));
    let every = submissions / SOAK_SAMPLES;
    let mut samples = Vec::new();
    let start = Instant::now();
    eprintln!("paging bench: soak of {submissions} submissions and requests of {SOAK_KINDS} kinds");
    for i in 0..submissions {
        match i % SOAK_KINDS {
            0 => {
                let fence = bench.next_fence;
                bench.run(&fence_packet(fence), "soak fence");
            }
            1 => {
                bench.transfer(&small_in, PAGE, "soak frames -> VRAM");
            }
            2 => {
                bench.transfer(&vram_copy, 64 << 10, "soak VRAM -> VRAM");
            }
            3 => {
                let response = bench.submit(&map_unmap);
                assert_eq!(
                    (
                        SubmitStatus::from_raw(response.status),
                        response.packets_completed
                    ),
                    (Some(SubmitStatus::Ok), 2),
                    "soak map + unmap: {response:?}"
                );
            }
            4 => {
                let response = bench.submit(&unknown);
                assert_eq!(
                    SubmitStatus::from_raw(response.status),
                    Some(SubmitStatus::UnknownOpcode),
                    "soak faulting packet: {response:?}"
                );
            }
            5 => {
                let event = bench.h.post_wait_event();
                let fence = bench.next_fence;
                bench.run(&fence_packet(fence), "soak fence for an event");
                let answer = bench.h.wait_event(event);
                assert_eq!(answer.fence_id, fence, "soak event: {answer:?}");
            }
            6 => {
                let info = bench.h.capset_info();
                assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
            }
            _ => {
                let preempt = bench.h.post_preempt();
                let answer = bench.h.wait_preempt(preempt);
                assert_eq!(answer.preempted_count, 0, "soak preempt: {answer:?}");
            }
        }
        if (i + 1) % every == 0 {
            let kib = rss(bench);
            eprintln!(
                "paging bench: soak {:>9} done, backend RssAnon {kib} KiB ({:.1} s)",
                i + 1,
                start.elapsed().as_secs_f64()
            );
            samples.push((i + 1, kib));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    if !bench.h.backend.is_running() {
        eprintln!("paging bench: the backend died:\n{}", bench.h.backend.log());
        return ExitCode::FAILURE;
    }
    // From the end of the first tenth: the allocator has found its working set by then.
    let settled = samples[samples.len() / 10].1;
    let last = samples[samples.len() - 1].1;
    let peak = samples.iter().map(|&(_, kib)| kib).max().unwrap_or(last);
    let growth = last.saturating_sub(settled);
    let flat = peak.saturating_sub(settled) <= SOAK_FLAT_KIB;
    if json {
        let value = json!({
            "soak_submissions": submissions,
            "soak_seconds": round_to(seconds, 1),
            "soak_per_s": round_to(submissions as f64 / seconds, 0),
            "soak_rss_anon_kib": samples.iter().map(|&(done, kib)| json!([done, kib])).collect::<Vec<_>>(),
            "soak_rss_growth_kib": growth,
            "soak_rss_peak_over_settled_kib": peak.saturating_sub(settled),
            "soak_rss_flat": flat,
        });
        println!("{value}");
    } else {
        println!(
            "soak: {submissions} submissions and requests in {seconds:.1} s ({:.0}/s)",
            submissions as f64 / seconds
        );
        println!("  backend RssAnon after the first tenth {settled} KiB, peak {peak} KiB, at the end {last} KiB");
        println!(
            "  growth after the first tenth: {growth} KiB (peak {} KiB over it): {}",
            peak.saturating_sub(settled),
            if flat { "flat" } else { "GROWING" }
        );
    }
    ExitCode::SUCCESS
}
