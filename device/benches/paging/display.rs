//! The display benchmark (`scripts/bench --display`): QEMU's C `vhost-user-gpu` and ours, driven
//! by the same frontend harness with the same virtio-gpu 2D commands, each with a display peer
//! that plays QEMU's display side of its GPU socket. See `docs/performance.md`.
//!
//! Set-up, once per backend: RESOURCE_CREATE_2D of a 1920x1080 B8G8R8X8 resource,
//! RESOURCE_ATTACH_BACKING of 4 KiB guest pages (every other page, so no two are adjacent),
//! SET_SCANOUT of scanout 0 to it. Then, per frame: TRANSFER_TO_HOST_2D of the whole frame and
//! RESOURCE_FLUSH of the whole frame, posted together as a guest driver does; a frame is done
//! when both are answered and its 8 MiB of UPDATEs (one, or bands) have reached the display. And the round trip of
//! a fenced no-op: RESOURCE_FLUSH of a 1x1 rectangle with VIRTIO_GPU_FLAG_FENCE, kick to
//! completion.
//!
//! Why a 1x1 fenced flush and not a fenced GET_DISPLAY_INFO: the C backend does not answer
//! GET_DISPLAY_INFO itself, it asks the display over the GPU socket and waits for the answer,
//! so that round trip would time the display peer's thread as much as the backend. A 1x1
//! flush is the same small piece of work in both (look the resource up, send a 4-byte UPDATE
//! the display does not answer), so what differs is each backend's path from kick to fenced
//! completion.
//!
//! Figures are reported, never asserted. The run fails when something is broken: a backend
//! refuses a command or answers it wrongly, dies, or the display gets other pixels, fewer
//! updates or fewer bytes than the flushes sent. Until our backend answers 2D commands it
//! refuses the first of them: the C figures are printed, with a line naming the refused
//! command, and the run exits non-zero.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use wddm_gpu_abi::build::display::{
    attach_backing, backing_entry, resource_create_2d, resource_flush, set_scanout,
    transfer_to_host_2d,
};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, VIRTIO_GPU_FLAG_FENCE, VIRTIO_GPU_RESP_OK_NODATA};
use wddm_gpu_abi::display::{WddmGpuRect, VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM};
use wddm_gpu_frontend_kit::display_peer::c_backend::{
    installed_c_backend, GlibDebug, C_VHOST_USER_GPU,
};
use wddm_gpu_frontend_kit::display_peer::{DisplayMode, DisplayPeer, DisplaySeen};
use wddm_gpu_frontend_kit::{
    backend_process::{SpawnOptions, TIMEOUT},
    harness::{Harness, Pending, Reply, DATA, PAGE, RAM_SIZE, SLOT_ROOM, VRAM_GPA},
    pattern::pattern,
    stats::{median, min_max, percentile_us, round_to},
};
use zerocopy::IntoBytes;

const WIDTH: u32 = 1920;
const HEIGHT: u32 = 1080;
const BYTES_PER_PIXEL: u64 = 4;
const FRAME_BYTES: u64 = WIDTH as u64 * HEIGHT as u64 * BYTES_PER_PIXEL;
/// Guest pages of the frame's backing (the last one partly used).
const BACKING_PAGES: u64 = FRAME_BYTES.div_ceil(PAGE);
/// The backing pages are every other page from here (the harness's free guest RAM).
const BACKING: u64 = DATA;
const RESOURCE_ID: u32 = 1;
const SCANOUT_ID: u32 = 0;
/// Frames and fenced no-ops per round.
const FRAMES_PER_ROUND: usize = 120;
const NOOPS_PER_ROUND: usize = 500;
/// Seed of the frame's pixels.
const SEED: u64 = 0xd15b_1a7e;

/// The whole frame, and the fenced no-op's rectangle.
const WHOLE_FRAME: WddmGpuRect = WddmGpuRect {
    x: 0,
    y: 0,
    width: WIDTH,
    height: HEIGHT,
};
const ONE_PIXEL: WddmGpuRect = WddmGpuRect {
    x: 0,
    y: 0,
    width: 1,
    height: 1,
};

/// The guest address of backing page `index`.
fn backing_page(index: u64) -> u64 {
    BACKING + 2 * index * PAGE
}

/// The length of backing page `index` (the last is partly used).
fn backing_length(index: u64) -> u64 {
    (FRAME_BYTES - index * PAGE).min(PAGE)
}

// ---- one backend with its display ----

/// The backends compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    C,
    Ours,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::C => "C vhost-user-gpu",
            Backend::Ours => "ours",
        }
    }
}

/// What breaks a run.
#[derive(Debug)]
enum Broken {
    /// A command answered with something other than OK_NODATA.
    Refused { command: &'static str, answer: u32 },
    /// Anything else: wrong pixels, missing updates, a dead backend, a protocol error.
    Wrong(String),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Refused { command, answer } => {
                write!(f, "{command} was refused (answer {})", answer_name(*answer))
            }
            Broken::Wrong(why) => f.write_str(why),
        }
    }
}

fn answer_name(answer: u32) -> String {
    let name = match answer {
        0x1200 => "ERR_UNSPEC",
        0x1201 => "ERR_OUT_OF_MEMORY",
        0x1202 => "ERR_INVALID_SCANOUT_ID",
        0x1203 => "ERR_INVALID_RESOURCE_ID",
        0x1204 => "ERR_INVALID_CONTEXT_ID",
        0x1205 => "ERR_INVALID_PARAMETER",
        _ => "an unexpected type",
    };
    format!("{name}, {answer:#06x}")
}

/// One backend, its harness and its display, with what the display must have received.
struct Device {
    backend: Backend,
    h: Harness,
    display: DisplayPeer,
    /// Flushes so far, and the pixel bytes they must have put on the display.
    flushes: u64,
    expected_bytes: u64,
    next_fence: u64,
}

impl Device {
    /// Starts `backend` the way QEMU starts a vhost-user-gpu device: realize, the GPU socket
    /// when the guest sets DRIVER_OK, then features, memory table and the control queue; then
    /// the driver's set-up commands.
    fn start(backend: Backend, c_program: &Path) -> Result<Self, Broken> {
        let (display, socket) = DisplayPeer::start(DisplayMode {
            width: WIDTH,
            height: HEIGHT,
        });
        let mut h = match backend {
            Backend::C => {
                Harness::spawn_c_backend("display-c", c_program, RAM_SIZE, GlibDebug::Off)
            }
            Backend::Ours => Harness::spawn_with_options(
                "display-ours",
                &SpawnOptions {
                    log_filter: "info".to_string(),
                    ..SpawnOptions::default()
                },
            ),
        };
        h.realize();
        h.set_gpu_socket(socket);
        h.start_features();
        // QEMU announces ours with its VRAM BAR; the C device has none.
        h.set_mem_table((backend == Backend::Ours).then_some(VRAM_GPA));
        h.setup_control_queue();
        let mut device = Self {
            backend,
            h,
            display,
            flushes: 0,
            expected_bytes: 0,
            next_fence: 1,
        };
        device.set_up_scanout()?;
        Ok(device)
    }

    /// Sends `request` alone and waits for its answer, which must be OK_NODATA.
    fn command(&mut self, command: &'static str, request: &[u8]) -> Result<Reply, Broken> {
        let reply = self.h.request(request, SLOT_ROOM);
        self.expect_ok(command, reply)
    }

    fn expect_ok(&self, command: &'static str, reply: Reply) -> Result<Reply, Broken> {
        if reply.bytes.len() < std::mem::size_of::<WddmGpuCtrlHdr>() {
            return Err(Broken::Wrong(format!(
                "{command}: a {}-byte answer",
                reply.bytes.len()
            )));
        }
        match reply.hdr().type_ {
            VIRTIO_GPU_RESP_OK_NODATA => Ok(reply),
            answer => Err(Broken::Refused { command, answer }),
        }
    }

    /// Waits for a posted command's answer, which must be OK_NODATA.
    fn wait_ok(&mut self, command: &'static str, pending: Pending) -> Result<Reply, Broken> {
        let reply = self
            .h
            .wait_reply_for(&pending, TIMEOUT)
            .map_err(|why| Broken::Wrong(format!("{command}: {why}")))?;
        self.expect_ok(command, reply)
    }

    /// The resource, its backing (with the frame's pixels written into it) and the scanout.
    fn set_up_scanout(&mut self) -> Result<(), Broken> {
        let create =
            resource_create_2d(RESOURCE_ID, VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM, WIDTH, HEIGHT);
        self.command("RESOURCE_CREATE_2D", create.as_bytes())?;

        let pixels = pattern(SEED, usize::try_from(FRAME_BYTES).unwrap());
        let mut entries = Vec::with_capacity(usize::try_from(BACKING_PAGES).unwrap());
        for index in 0..BACKING_PAGES {
            let (at, length) = (index * PAGE, backing_length(index));
            self.h.write_ram(
                backing_page(index),
                &pixels[usize::try_from(at).unwrap()..usize::try_from(at + length).unwrap()],
            );
            entries.push(backing_entry(
                backing_page(index),
                u32::try_from(length).unwrap(),
            ));
        }
        self.command(
            "RESOURCE_ATTACH_BACKING",
            &attach_backing(RESOURCE_ID, &entries),
        )?;

        let scanout = set_scanout(SCANOUT_ID, RESOURCE_ID, WHOLE_FRAME);
        self.command("SET_SCANOUT", scanout.as_bytes())?;
        let shown = (SCANOUT_ID, WIDTH, HEIGHT);
        self.display
            .wait_until(TIMEOUT, "the SCANOUT message", |seen| {
                seen.scanout == Some(shown)
            })
            .map_err(Broken::Wrong)?;

        // The first frame, checked pixel for pixel on the screen its UPDATEs painted (the X
        // byte is undefined and not compared).
        self.display.capture_screen();
        self.frame()?;
        let shown = self
            .display
            .take_screen()
            .ok_or_else(|| Broken::Wrong("the first frame's screen was not captured".into()))?;
        let differs = shown
            .chunks_exact(4)
            .zip(pixels.chunks_exact(4))
            .position(|(got, sent)| got[..3] != sent[..3]);
        if let Some(pixel) = differs {
            return Err(Broken::Wrong(format!(
                "the display shows other pixels than the guest's from pixel {pixel} (x {}, y {})",
                u32::try_from(pixel).unwrap() % WIDTH,
                u32::try_from(pixel).unwrap() / WIDTH
            )));
        }
        Ok(())
    }

    /// One frame: TRANSFER_TO_HOST_2D and RESOURCE_FLUSH of the whole frame, posted together;
    /// done when both are answered and the display has the frame. Returns how long it took.
    fn frame(&mut self) -> Result<Duration, Broken> {
        let start = Instant::now();
        let transfer_request = transfer_to_host_2d(RESOURCE_ID, WHOLE_FRAME, 0);
        let transfer = self.h.post(transfer_request.as_bytes(), SLOT_ROOM);
        let flush_request = resource_flush(RESOURCE_ID, WHOLE_FRAME);
        let flushed = self.h.post(flush_request.as_bytes(), SLOT_ROOM);
        self.wait_ok("TRANSFER_TO_HOST_2D", transfer)?;
        self.wait_ok("RESOURCE_FLUSH", flushed)?;
        self.flushes += 1;
        self.expected_bytes += FRAME_BYTES;
        self.display
            .wait_update_bytes(self.expected_bytes, TIMEOUT)
            .map_err(Broken::Wrong)?;
        Ok(start.elapsed())
    }

    /// One fenced RESOURCE_FLUSH of a 1x1 rectangle, alone: kick to completion.
    fn noop(&mut self) -> Result<Duration, Broken> {
        let fence_id = self.next_fence;
        self.next_fence += 1;
        let mut request = resource_flush(RESOURCE_ID, ONE_PIXEL);
        request.hdr.flags = VIRTIO_GPU_FLAG_FENCE;
        request.hdr.fence_id = fence_id;
        let pending = self.h.post(request.as_bytes(), SLOT_ROOM);
        let reply = self.wait_ok("fenced RESOURCE_FLUSH", pending)?;
        let answer = reply.hdr();
        if answer.flags & VIRTIO_GPU_FLAG_FENCE == 0 || answer.fence_id != fence_id {
            return Err(Broken::Wrong(format!(
                "fenced RESOURCE_FLUSH {fence_id}: answered without its fence ({answer:?})"
            )));
        }
        self.flushes += 1;
        self.expected_bytes += BYTES_PER_PIXEL;
        self.h
            .last_round_trip()
            .ok_or_else(|| Broken::Wrong("a no-op without a kick and a notification".into()))
    }

    /// After the rounds: the backend still runs and the display got every update, byte for
    /// byte. Returns what the display saw.
    fn check_end(&mut self) -> Result<DisplaySeen, Broken> {
        let (flushes, bytes) = (self.flushes, self.expected_bytes);
        let seen = self
            .display
            .wait_update_bytes(bytes, TIMEOUT)
            .map_err(Broken::Wrong)?;
        // Whole UPDATEs or bands, every flushed byte exactly once.
        if seen.update_bytes != bytes || seen.updates < flushes {
            return Err(Broken::Wrong(format!(
                "the display got {} updates of {} bytes in all; {flushes} flushes of {bytes}",
                seen.updates, seen.update_bytes
            )));
        }
        if !self.h.backend.is_running() {
            return Err(Broken::Wrong(format!(
                "{} died:\n{}",
                self.backend.name(),
                self.h.backend.log()
            )));
        }
        Ok(seen)
    }
}

// ---- the rounds and the report ----

/// Per-round figures of one backend.
#[derive(Default)]
struct Figures {
    frames_per_s: Vec<f64>,
    frame_us_p50: Vec<f64>,
    frame_us_p99: Vec<f64>,
    noop_us_p50: Vec<f64>,
    noop_us_p99: Vec<f64>,
}

impl Figures {
    fn round(&mut self, device: &mut Device) -> Result<(), Broken> {
        let start = Instant::now();
        let mut frames = (0..FRAMES_PER_ROUND)
            .map(|_| device.frame())
            .collect::<Result<Vec<_>, _>>()?;
        let took = start.elapsed();
        self.frames_per_s
            .push(FRAMES_PER_ROUND as f64 / took.as_secs_f64());
        self.frame_us_p50.push(percentile_us(&mut frames, 50));
        self.frame_us_p99.push(percentile_us(&mut frames, 99));
        let mut noops = (0..NOOPS_PER_ROUND)
            .map(|_| device.noop())
            .collect::<Result<Vec<_>, _>>()?;
        self.noop_us_p50.push(percentile_us(&mut noops, 50));
        self.noop_us_p99.push(percentile_us(&mut noops, 99));
        Ok(())
    }

    /// (key, per-round values, decimals, goal of ours / C).
    fn keys(&self) -> [(&'static str, &Vec<f64>, usize, Option<Goal>); 5] {
        [
            (
                "frames_per_s",
                &self.frames_per_s,
                1,
                Some(Goal::AtLeast(1.5)),
            ),
            ("frame_us_p50", &self.frame_us_p50, 0, None),
            ("frame_us_p99", &self.frame_us_p99, 0, None),
            (
                "noop_rtt_us_p50",
                &self.noop_us_p50,
                1,
                Some(Goal::AtMost(1.0)),
            ),
            ("noop_rtt_us_p99", &self.noop_us_p99, 1, None),
        ]
    }
}

/// A goal for the ratio ours / C.
#[derive(Clone, Copy)]
enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

impl Goal {
    fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtLeast(limit) => ratio >= limit,
            Goal::AtMost(limit) => ratio <= limit,
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtLeast(limit) => format!(">= {limit}"),
            Goal::AtMost(limit) => format!("<= {limit}"),
        }
    }
}

/// What one backend's run came to.
struct Outcome {
    figures: Figures,
    /// What the display received (every update checked).
    received: DisplaySeen,
    flushes: u64,
}

/// Runs the display benchmark: `rounds` rounds, each the C backend then ours.
pub fn run(json: bool, rounds: usize) -> ExitCode {
    let Some(c_program) = installed_c_backend() else {
        eprintln!(
            "display bench: {C_VHOST_USER_GPU} is missing (Debian package qemu-system-gui; scripts/bench --display installs it)"
        );
        return ExitCode::FAILURE;
    };
    eprintln!("display bench: starting {} and ours", c_program.display());
    let mut c = Device::start(Backend::C, &c_program);
    let mut ours = Device::start(Backend::Ours, &c_program);
    let mut c_figures = Figures::default();
    let mut our_figures = Figures::default();
    for round in 0..rounds {
        eprintln!("display bench: round {}/{rounds}", round + 1);
        if let Ok(device) = &mut c {
            if let Err(broken) = c_figures.round(device) {
                c = Err(broken);
            }
        }
        if let Ok(device) = &mut ours {
            if let Err(broken) = our_figures.round(device) {
                ours = Err(broken);
            }
        }
    }
    let finish = |device: Result<Device, Broken>, figures: Figures| {
        device.and_then(|mut device| {
            let received = device.check_end()?;
            Ok(Outcome {
                figures,
                received,
                flushes: device.flushes,
            })
        })
    };
    let c = finish(c, c_figures);
    let ours = finish(ours, our_figures);
    report(json, rounds, &c, &ours);
    if c.is_ok() && ours.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn figures_of(outcome: &Result<Outcome, Broken>) -> Option<&Figures> {
    outcome.as_ref().ok().map(|outcome| &outcome.figures)
}

fn report(json: bool, rounds: usize, c: &Result<Outcome, Broken>, ours: &Result<Outcome, Broken>) {
    let setup = format!(
        "{WIDTH}x{HEIGHT} B8G8R8X8, backing in {BACKING_PAGES} scattered 4 KiB pages; per round \
         {FRAMES_PER_ROUND} frames (TRANSFER_TO_HOST_2D + RESOURCE_FLUSH of the whole frame) and \
         {NOOPS_PER_ROUND} fenced 1x1 RESOURCE_FLUSHes; {rounds} rounds, medians"
    );
    let (c_figures, our_figures) = (figures_of(c), figures_of(ours));
    let template = Figures::default();
    let keys = c_figures.or(our_figures).unwrap_or(&template).keys();
    if json {
        let mut object = Map::new();
        for (side, outcome) in [("c", c), ("ours", ours)] {
            match outcome {
                Ok(outcome) => {
                    let mut values = Map::new();
                    for (name, per_round, decimals, _) in outcome.figures.keys() {
                        values.insert(name.to_string(), round_to(median(per_round), decimals));
                    }
                    values.insert("updates_received".into(), json!(outcome.received.updates));
                    values.insert("flushes".into(), json!(outcome.flushes));
                    values.insert(
                        "bytes_received".into(),
                        json!(outcome.received.update_bytes),
                    );
                    values.insert(
                        "display_protocol_features".into(),
                        json!(outcome.received.protocol_features),
                    );
                    object.insert(side.to_string(), Value::Object(values));
                }
                Err(broken) => {
                    object.insert(format!("{side}_error"), json!(broken.to_string()));
                }
            }
        }
        if let (Some(c), Some(ours)) = (c_figures, our_figures) {
            let mut ratios = Map::new();
            for ((name, c_rounds, _, goal), (_, our_rounds, _, _)) in
                c.keys().into_iter().zip(ours.keys())
            {
                let ratio = median(our_rounds) / median(c_rounds);
                let mut entry = Map::new();
                entry.insert("ratio".into(), round_to(ratio, 3));
                if let Some(goal) = goal {
                    entry.insert("goal".into(), json!(goal.text()));
                    entry.insert("met".into(), json!(goal.met(ratio)));
                }
                ratios.insert(name.to_string(), Value::Object(entry));
            }
            object.insert("ours_vs_c".into(), Value::Object(ratios));
        }
        object.insert("setup".into(), json!(setup));
        println!("{}", Value::Object(object));
        return;
    }
    let mut table = String::new();
    let _ = writeln!(table, "display bench: {setup}");
    let _ = writeln!(
        table,
        "{:<18} {:>18} {:>12} {:>9} {:>8} {:>6}   C min .. max | ours min .. max",
        "key", "C vhost-user-gpu", "ours", "ours / C", "goal", ""
    );
    for (index, (name, _, decimals, goal)) in keys.into_iter().enumerate() {
        let d = decimals;
        let column = |figures: Option<&Figures>| {
            figures.map(|f| {
                let per_round = f.keys()[index].1.clone();
                (median(&per_round), min_max(&per_round))
            })
        };
        let (c_value, our_value) = (column(c_figures), column(our_figures));
        let show = |value: Option<(f64, (f64, f64))>| match value {
            Some((median, _)) => format!("{median:.d$}"),
            None => "-".to_string(),
        };
        let spread = |value: Option<(f64, (f64, f64))>| match value {
            Some((_, (lo, hi))) => format!("{lo:.d$} .. {hi:.d$}"),
            None => "-".to_string(),
        };
        let (ratio, verdict) = match (c_value, our_value) {
            (Some((c, _)), Some((o, _))) => {
                let ratio = o / c;
                let verdict = match goal {
                    Some(goal) if goal.met(ratio) => "PASS",
                    Some(_) => "MISS",
                    None => "",
                };
                (format!("{ratio:.3}"), verdict)
            }
            _ => ("-".to_string(), ""),
        };
        let goal = goal.map(Goal::text).unwrap_or_default();
        let _ = writeln!(
            table,
            "{name:<18} {:>18} {:>12} {ratio:>9} {goal:>8} {verdict:>6}   {} | {}",
            show(c_value),
            show(our_value),
            spread(c_value),
            spread(our_value)
        );
    }
    for (backend, outcome) in [(Backend::C, c), (Backend::Ours, ours)] {
        let _ = match outcome {
            Ok(outcome) => writeln!(
                table,
                "{}: the display received {} updates for {} flushes, {:.2} GB (every flushed byte once, the first frame's screen compared pixel for pixel); display protocol features {}",
                backend.name(),
                outcome.received.updates,
                outcome.flushes,
                outcome.received.update_bytes as f64 / 1e9,
                match outcome.received.protocol_features {
                    Some(features) => format!("{features:#x}"),
                    None => "never negotiated".to_string(),
                }
            ),
            Err(broken @ Broken::Refused { .. }) if backend == Backend::Ours => writeln!(
                table,
                "ours: not measured: {broken} (our backend does not answer the 2D command set yet)"
            ),
            Err(broken) => writeln!(table, "{}: BROKEN: {broken}", backend.name()),
        };
    }
    print!("{table}");
}
