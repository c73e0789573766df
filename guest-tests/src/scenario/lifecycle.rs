//! `lifecycle`: the GPU in use while the host stops and continues the VM (QMP `stop`/`cont`) and
//! resets it (`system_reset`), synchronised with a host helper over the second serial port
//! ([`crate::sync`]). Output as in `suite`: `GUEST-TEST <name> PASS|FAIL <why>` per test,
//! `LIFECYCLE ...` lines on the way, `GUEST-SUMMARY` at the end of the last boot.
//!
//! Sync points and the host's actions:
//!
//! | point | host |
//! | --- | --- |
//! | `boot` | answers `first` on the first boot, `after-reset` on the boot after the reset |
//! | `paused-after-map`, `transfer-running` | `stop`, waits until the backend paused, 1 s, `cont`, waits until it resumed, answers `go` |
//! | `reset-point` | `system_reset`, never answers: the guest boots and runs `lifecycle` again; or, where the host cannot reset this VM, answers `no-reset` and the run ends there |
//!
//! First boot: `pause_between_map_and_use`, `pause_mid_transfer`, `reset_setup`; after the
//! reset: `after_reset_device_works`. Every sync point is reached even when the test around it
//! failed earlier, so the host's sequence never stalls. The first boot's tally goes into VRAM
//! (which survives a reset) next to the pattern `after_reset_device_works` checks, so the
//! summary of the last boot, and its exit code, cover both boots.
//!
//! After every `go` the driver waits for the BAR locator to be known again before touching the
//! BAR (in mode 2 QEMU keeps the mapping across `cont` but drops it at a reset, after which the
//! backend maps it again), and
//! checks that where the BAR is (mode, function, BAR, size, address) did not change.

use std::time::{Duration, Instant};

use wddm_gpu_abi::caps::{WddmGpuVramBar, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN};
use wddm_gpu_abi::status::{
    WddmGpuStatusPage, WDDM_GPU_EVENT_BAR_CHANGED, WDDM_GPU_EVENT_FENCE, WDDM_GPU_STATUS_MAGIC,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::cli::Options;
use crate::driver::BAR_WAIT_TIMEOUT;
use crate::engine::{expect_status, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Completion, Ticket};
use crate::kmd::Event;
use crate::packets::{self, DmaBufferBuilder};
use crate::report;
use crate::scenario::paging::{check_vram, expect_done, pattern_bytes, write_pieces, Ctx};
use crate::scenario::setup;
use crate::scenario::suite::Tally;
use crate::sync::{SyncPort, SYNC_PORT};

const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
const MIB: u64 = 1 << 20;

/// Sync points.
const BOOT: &str = "boot";
const PAUSED_AFTER_MAP: &str = "paused-after-map";
const TRANSFER_RUNNING: &str = "transfer-running";
const RESET_POINT: &str = "reset-point";
/// Answers.
const FIRST: &str = "first";
const AFTER_RESET: &str = "after-reset";
const GO: &str = "go";
/// The host's answer to `reset-point` where it does not reset the VM.
const NO_RESET: &str = "no-reset";

/// The first boot's tests, in run order.
pub const FIRST_BOOT_TESTS: [&str; 3] = [
    "pause_between_map_and_use",
    "pause_mid_transfer",
    "reset_setup",
];
/// The test of the boot after the reset.
pub const AFTER_RESET_TEST: &str = "after_reset_device_works";

/// How long the host may take to answer (guest time, which stops while the VM is stopped).
const SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the host may take to reset the VM after `reset-point`.
const RESET_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a long submission may take (plus whatever the pause adds).
const LONG_TIMEOUT: Duration = Duration::from_secs(180);

/// Aperture pages the pause test maps, and how many.
const PAUSE_PAGE: u64 = 0x200;
const PAUSE_PAGES: u64 = 16;
/// Aperture pages `reset_setup` maps, and how many.
const RESET_PAGE: u64 = 0x400;
const RESET_PAGES: u64 = 8;

/// Largest TRANSFER of the long submissions.
const MAX_CHUNK: u64 = 64 * MIB;
/// Bytes a long submission copies: a few seconds of host work at 5-8 GB/s.
const LONG_TARGET: u64 = 24 << 30;
/// Most TRANSFERs in one (64 bytes each: they fit the 64 KiB DMA buffer).
const MAX_LONG_PACKETS: u64 = 1000;
const _: () = assert!(MAX_LONG_PACKETS * 64 + 16 <= 64 << 10);
/// VRAM the tests use after the two chunks of the long submissions.
const PLAN_SPAN: u64 = 16 * MIB;
/// Bytes of the pattern the reset must keep.
const KEEP_LEN: u64 = (64 << 10) + 5;

/// Pattern tags.
const PAUSE_TAG: u64 = 0x7061_7573;
const MID_TAG: u64 = 0x6d69_6474;
const RESET_TAG: u64 = 0x7273_6574;
const KEEP_TAG: u64 = 0x6b65_6570;
const AFTER_TAG: u64 = 0x6166_7472;
/// FILL pattern of the long submission's destination before it runs.
const STALE_FILL: u32 = 0xa5a5_a5a5;

/// Where the tests work in the CPU-visible VRAM segment: the long submissions copy
/// `[0, chunk)` to `[chunk, 2 * chunk)` `packets` times; the rest lies after `2 * chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Bytes of each TRANSFER of a long submission.
    pub chunk: u64,
    /// TRANSFERs in a long submission.
    pub packets: u32,
    /// First offset after the long submissions' regions.
    pub free: u64,
}

impl Plan {
    /// The plan for a segment of `size` bytes.
    pub fn new(size: u64) -> Result<Self, String> {
        let chunk = MAX_CHUNK.min(size / 4 / PAGE * PAGE);
        let too_small =
            || format!("VRAM segment of {size:#x} bytes too small for the lifecycle tests");
        if chunk < MIB {
            return Err(too_small());
        }
        let free = 2 * chunk;
        if free + PLAN_SPAN > size {
            return Err(too_small());
        }
        let packets = (LONG_TARGET / chunk).clamp(1, MAX_LONG_PACKETS) as u32;
        Ok(Self {
            chunk,
            packets,
            free,
        })
    }

    /// Destination of the aperture → VRAM transfer after the pause.
    fn pause_dst(&self) -> u64 {
        self.free + 0x10_0123
    }

    /// The pattern the reset must keep.
    fn keep(&self) -> u64 {
        self.free + 0x40_0001
    }

    /// The first boot's results.
    fn record(&self) -> u64 {
        self.free + 0x60_0000
    }

    /// Scratch for transfers after the reset.
    fn scratch(&self) -> u64 {
        self.free + 0x80_0000
    }

    /// Bytes a long submission moves.
    fn long_bytes(&self) -> u64 {
        self.chunk * u64::from(self.packets)
    }
}

/// The first boot's tally, kept in VRAM across the reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Tests passed.
    pub passed: u32,
    /// Tests failed.
    pub failed: u32,
}

/// "WDLC".
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"WDLC");
/// Bytes of an encoded record.
pub const RECORD_LEN: usize = 16;

impl Record {
    fn check(&self) -> u32 {
        RECORD_MAGIC ^ self.passed.rotate_left(8) ^ self.failed.rotate_left(16) ^ 0x5a5a_5a5a
    }

    /// Magic, passed, failed, check word.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        for (i, word) in [RECORD_MAGIC, self.passed, self.failed, self.check()]
            .iter()
            .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// The record in `bytes`, if they hold one.
    pub fn decode(bytes: &[u8; RECORD_LEN]) -> Option<Self> {
        let word = |i: usize| {
            u32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ])
        };
        let record = Self {
            passed: word(1),
            failed: word(2),
        };
        (word(0) == RECORD_MAGIC && word(3) == record.check()).then_some(record)
    }
}

/// Runs the lifecycle sequence of this boot; true iff nothing failed (on the boot after the
/// reset: in both boots).
pub fn run(options: &Options) -> bool {
    println!("SEED {:#x}", options.seed);
    let mut tally = Tally::default();
    let not_run = |tally: &mut Tally, why: String| {
        let why = Failure(format!("not run: {why}"));
        for name in FIRST_BOOT_TESTS {
            tally.report(name, &Err(why.clone()));
        }
    };
    let mut port = match SyncPort::open(SYNC_PORT) {
        Ok(port) => port,
        Err(err) => {
            not_run(&mut tally, err.to_string());
            return tally.summary();
        }
    };
    match port.sync(BOOT, SYNC_TIMEOUT) {
        Ok(answer) if answer == FIRST => first_boot(&mut tally, &mut port, options),
        Ok(answer) if answer == AFTER_RESET => after_reset(&mut tally, options),
        Ok(answer) => not_run(
            &mut tally,
            format!(
                "the host answered {answer:?} at sync point {BOOT} (want {FIRST} or {AFTER_RESET})"
            ),
        ),
        Err(err) => not_run(&mut tally, err.to_string()),
    }
    tally.summary()
}

/// The device with what the tests need.
struct Rig {
    e: Engine,
    c: Ctx,
    plan: Plan,
}

impl Rig {
    /// Brings the device up: capset valid, BAR known, `CpuTranslatedAddress` right, VRAM mapped,
    /// the paging context (status page, aperture) made.
    fn new(options: &Options) -> Outcome<Self> {
        let arena = setup::arena()?;
        let mut device = setup::device(arena, options)?;
        let layout = setup::layout(&mut device)?;
        let bar = layout.header.vram_bar;
        ensure(bar.state == WDDM_GPU_BAR_STATE_KNOWN, || {
            format!(
                "the VRAM BAR is not known {} s after DRIVER_OK: {}",
                BAR_WAIT_TIMEOUT.as_secs(),
                report::vram_bar_text(&bar)
            )
        })?;
        let vram = setup::vram(&device, &layout)?;
        let matches = setup::cpu_translated_matches_bar(&layout, &vram)?;
        println!("LIFECYCLE cpu_translated_matches_bar: {matches}");
        let mut e = Engine::new(arena, device, layout, vram, options.seed)?;
        let plan = Plan::new(e.vram.size).map_err(Failure)?;
        let c = Ctx::new(&mut e)?;
        println!(
            "LIFECYCLE VRAM segment {} ({:#x} bytes, {}), long submissions {} x {:#x} bytes",
            e.segment.desc.id,
            e.vram.size,
            e.vram.describe(bar.bar_index),
            plan.packets,
            plan.chunk
        );
        Ok(Self { e, c, plan })
    }
}

/// The rig, or why a test cannot run.
fn rig_of(rig: &mut Outcome<Rig>) -> Outcome<&mut Rig> {
    rig.as_mut()
        .map_err(|why| Failure(format!("not run: device setup failed: {why}")))
}

/// `before`, the host's pause at `point` (reached even when `before` or the rig failed, so the
/// host's sequence never stalls), then `after` with what `before` set up.
fn across_pause<T>(
    rig: &mut Outcome<Rig>,
    port: &mut SyncPort,
    point: &str,
    before: impl FnOnce(&mut Rig) -> Outcome<T>,
    after: impl FnOnce(&mut Rig, T) -> Outcome,
) -> Outcome {
    let set_up = rig_of(rig).and_then(before);
    let answer = sync_go(port, point);
    let set_up = set_up?;
    answer?;
    after(rig_of(rig)?, set_up)
}

/// Syncs at `point` and expects `go`.
fn sync_go(port: &mut SyncPort, point: &str) -> Outcome {
    let answer = port.sync(point, SYNC_TIMEOUT)?;
    ensure(answer == GO, || {
        format!("the host answered {answer:?} at sync point {point}, expected {GO}")
    })
}

/// Waits until the BAR locator is known again (mode 2: the backend maps the VRAM again once the
/// device runs), at the address the engine maps, and takes the layout read.
fn bar_known(e: &mut Engine, test: &str) -> Outcome {
    const STEP: &str = "after the pause";
    let before = e.layout.header.vram_bar;
    let wait = e
        .device
        .wait_bar_known(BAR_WAIT_TIMEOUT)
        .map_err(|err| Failure(format!("{STEP}: capset: {err}")))?;
    println!(
        "LIFECYCLE {test}: VRAM BAR wait {STEP}: {wait} (generation before: {})",
        before.generation
    );
    let bar = wait.layout.header.vram_bar;
    ensure(wait.known, || {
        format!("{STEP}: the VRAM BAR is not known again: {wait}")
    })?;
    // Where the BAR is (mode, function, BAR) is hardware: a pause cannot change it.
    let place = |b: &WddmGpuVramBar| (b.mode, b.pci_function, b.bar_index, b.size);
    ensure(place(&bar) == place(&before), || {
        format!(
            "{STEP}: the locator changed across the pause: was {}, now {}",
            report::vram_bar_text(&before),
            report::vram_bar_text(&bar)
        )
    })?;
    ensure(bar.guest_physical_address == e.vram.bar_address, || {
        format!(
            "{STEP}: the locator names {:#x}, the VRAM is at {:#x}",
            bar.guest_physical_address, e.vram.bar_address
        )
    })?;
    let segment = wait
        .layout
        .segment(e.segment.desc.id)
        .ok_or_else(|| Failure(format!("{STEP}: the VRAM segment left the layout")))?;
    ensure(segment.desc == e.segment.desc, || {
        format!(
            "{STEP}: the VRAM segment changed: was {:?}, now {:?}",
            e.segment.desc, segment.desc
        )
    })?;
    e.layout = wait.layout;
    Ok(())
}

/// A long submission: `plan.packets` TRANSFERs of `plan.chunk` bytes from `[0, chunk)` to
/// `[chunk, 2 * chunk)` of the VRAM segment, after a FENCE `start_fence` when given (its event
/// says the engine runs it). Copying the same source over and over leaves the destination
/// holding the source, however often it ran.
fn long_buffer(e: &Engine, plan: &Plan, start_fence: Option<u32>) -> DmaBufferBuilder {
    let mut b = DmaBufferBuilder::new();
    if let Some(fence) = start_fence {
        b.push(&packets::fence(fence));
    }
    for _ in 0..plan.packets {
        b.push_transfer(&packets::transfer(
            plan.chunk,
            e.vram_at(0),
            e.vram_at(plan.chunk),
        ));
    }
    b
}

/// Writes the long submission's source pattern through the BAR and FILLs its destination with
/// something else.
fn prepare_long(e: &mut Engine, plan: &Plan, tag: u64) -> Outcome {
    e.require_vram(0, 2 * plan.chunk)?;
    e.vram.fill_pattern(0, plan.chunk, tag);
    let done = e.run_one(&packets::fill(
        STALE_FILL,
        plan.chunk,
        e.vram_at(plan.chunk),
    ))?;
    expect_status(&done, SubmitStatus::Ok)
        .map_err(|f| Failure(format!("FILL of the destination: {f}")))?;
    let mut head = [0u8; 8];
    e.vram.read(plan.chunk, &mut head);
    ensure(head == [0xa5; 8], || {
        format!("the FILLed destination reads {head:02x?} through the BAR")
    })
}

/// The next event that is not BAR_CHANGED (those come with a VM pause in mode 2); returns it
/// with every event taken.
fn next_non_bar_event(e: &mut Engine, c: &mut Ctx, what: &str) -> Outcome<(Event, Vec<Event>)> {
    let mut seen = Vec::new();
    loop {
        let event = c.next_event(e, what)?;
        seen.push(event);
        if event.resp.kind != WDDM_GPU_EVENT_BAR_CHANGED {
            return Ok((event, seen));
        }
    }
}

fn events_text(events: &[Event]) -> String {
    events
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

// ---- first boot ------------------------------------------------------------------------------

fn first_boot(tally: &mut Tally, port: &mut SyncPort, options: &Options) {
    let mut rig = Rig::new(options);
    if let Err(why) = &rig {
        println!("LIFECYCLE device setup failed: {why}");
    }
    let outcome = pause_between_map_and_use(&mut rig, port);
    tally.report(FIRST_BOOT_TESTS[0], &recheck(&rig, outcome));
    let outcome = pause_mid_transfer(&mut rig, port);
    tally.report(FIRST_BOOT_TESTS[1], &recheck(&rig, outcome));
    let outcome = reset_setup(&mut rig);
    tally.report(FIRST_BOOT_TESTS[2], &recheck(&rig, outcome));
    if let Ok(r) = &rig {
        let record = Record {
            passed: tally.passed,
            failed: tally.failed,
        };
        r.e.vram.write(r.plan.record(), &record.encode());
        println!(
            "LIFECYCLE first boot: {} passed, {} failed (kept in VRAM at {:#x} for the summary \
             after the reset)",
            record.passed,
            record.failed,
            r.plan.record()
        );
    }
    let why = match port.sync(RESET_POINT, RESET_TIMEOUT) {
        Ok(answer) if answer == NO_RESET => {
            println!("LIFECYCLE the host does not reset this VM: {AFTER_RESET_TEST} is not run");
            return;
        }
        Ok(answer) => format!(
            "the host answered {answer:?} at sync point {RESET_POINT} instead of resetting the VM"
        ),
        Err(err) => format!("the VM was not reset: {err}"),
    };
    tally.report(AFTER_RESET_TEST, &Err(Failure(why)));
}

/// A moved DMA page makes every DMA since then suspect: it fails the test that ran.
fn recheck(rig: &Outcome<Rig>, outcome: Outcome) -> Outcome {
    outcome.and_then(|()| match rig {
        Ok(r) => r.e.arena.recheck().map_err(Failure::from),
        Err(_) => Ok(()),
    })
}

/// What `pause_between_map_and_use` set up before the pause.
struct Mapped {
    data: Vec<u8>,
    page: WddmGpuStatusPage,
    posted: usize,
}

/// Status page registered, WAIT_EVENTs posted, pages mapped into the aperture; the VM pauses;
/// then the mapping, the registration and the posted requests must still work.
fn pause_between_map_and_use(rig: &mut Outcome<Rig>, port: &mut SyncPort) -> Outcome {
    across_pause(
        rig,
        port,
        PAUSED_AFTER_MAP,
        map_before_pause,
        use_after_pause,
    )
}

const PAUSE_SKEW: u64 = 0x123;
const PAUSE_GUARD_TAG: u64 = 0x6775_6172;

fn pause_len() -> u64 {
    PAUSE_PAGES * PAGE - PAUSE_SKEW - 0x45
}

fn map_before_pause(r: &mut Rig) -> Outcome<Mapped> {
    let (e, c) = (&mut r.e, &mut r.c);
    c.begin(e);
    c.kmd_ready(e)?;
    let pieces = c.pieces(usize::try_from(PAUSE_PAGES).unwrap())?;
    let data = pattern_bytes(PAUSE_TAG, 0, PAUSE_PAGES * PAGE);
    write_pieces(e, &pieces, &data);
    c.map(e, PAUSE_PAGE, &pieces)?;
    let dst = r.plan.pause_dst();
    e.require_vram(dst, pause_len())?;
    e.guard_vram(dst, pause_len(), PAUSE_GUARD_TAG);
    let page = c.status.header();
    let posted = c.events.posted();
    println!(
        "LIFECYCLE {}: {PAUSE_PAGES} pages mapped at aperture page {PAUSE_PAGE:#x}, status page \
         {:#x} registered (completed_fence {}), {posted} WAIT_EVENTs posted",
        FIRST_BOOT_TESTS[0],
        c.status.phys(),
        page.completed_fence
    );
    Ok(Mapped { data, page, posted })
}

fn use_after_pause(r: &mut Rig, m: Mapped) -> Outcome {
    const TEST: &str = FIRST_BOOT_TESTS[0];
    let (e, c, plan) = (&mut r.e, &mut r.c, r.plan);
    bar_known(e, TEST)?;
    // The GART mapping survived: aperture -> VRAM.
    let (dst, len) = (plan.pause_dst(), pause_len());
    let done = e.transfer(len, c.ap(PAUSE_PAGE * PAGE + PAUSE_SKEW), e.vram_at(dst))?;
    expect_done(&done, len, 1)
        .map_err(|f| Failure(format!("aperture -> VRAM after the pause: {f}")))?;
    let skew = usize::try_from(PAUSE_SKEW).unwrap();
    check_vram(
        e,
        dst,
        &m.data[skew..skew + usize::try_from(len).unwrap()],
        "aperture -> VRAM after the pause",
    )?;
    e.check_vram_guard(dst, len, PAUSE_GUARD_TAG)?;

    // A FENCE: the WAIT_EVENTs posted before the pause get its event, the status page shows it.
    let fence = e.fence();
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::fence(fence));
    let mut cmd = e.prepare(&b)?;
    cmd.submission_fence_id = fence;
    let done = e.submit(&cmd)?;
    expect_done(&done, 0, 1).map_err(|f| Failure(format!("FENCE submission: {f}")))?;
    let (event, seen) = next_non_bar_event(e, c, "the FENCE packet after the pause")?;
    println!(
        "LIFECYCLE {TEST}: events after the pause: {}",
        events_text(&seen)
    );
    ensure(
        event.resp.kind == WDDM_GPU_EVENT_FENCE && event.resp.fence_id == fence,
        || format!("expected the FENCE {fence} event, got {event}"),
    )?;
    ensure(seen.len() <= m.posted, || {
        format!(
            "the FENCE event was event #{} after the pause: it answered a WAIT_EVENT posted \
             after the pause, not one of the {} posted before",
            seen.len(),
            m.posted
        )
    })?;
    let page = c.status.header();
    let generation = e.layout.header.vram_bar.generation;
    ensure(
        page.magic == WDDM_GPU_STATUS_MAGIC
            && page.completed_fence == fence
            && page.submissions_completed == m.page.submissions_completed + 2
            && page.bar_state == WDDM_GPU_BAR_STATE_KNOWN
            && page.bar_address == e.vram.bar_address
            && page.bar_generation == generation,
        || {
            format!(
                "status page after the pause: magic {:#x}, completed_fence {} (want {fence}), \
                 submissions_completed {} (want {} + 2), bar_state {}, bar_address {:#x} (want \
                 {:#x}), bar_generation {} (the capset's: {generation})",
                page.magic,
                page.completed_fence,
                page.submissions_completed,
                m.page.submissions_completed,
                page.bar_state,
                page.bar_address,
                e.vram.bar_address,
                page.bar_generation
            )
        },
    )?;
    println!(
        "LIFECYCLE {TEST}: GART mapping, status page (completed_fence {fence}, bar_generation {}) \
         and posted WAIT_EVENTs survived the pause",
        page.bar_generation
    );
    Ok(())
}

/// What `pause_mid_transfer` posted before the pause.
struct Running {
    cmd: WddmGpuCmdSubmit,
    ticket: Ticket,
    posted_at: Instant,
}

/// A long VRAM → VRAM submission posted, the VM paused while it runs; it must then complete
/// whole and right.
fn pause_mid_transfer(rig: &mut Outcome<Rig>, port: &mut SyncPort) -> Outcome {
    across_pause(rig, port, TRANSFER_RUNNING, post_long, finish_long)
}

fn post_long(r: &mut Rig) -> Outcome<Running> {
    let (e, c, plan) = (&mut r.e, &mut r.c, r.plan);
    prepare_long(e, &plan, MID_TAG)?;
    let b = long_buffer(e, &plan, None);
    let cmd = c.prepare_extra(e, 0, &b)?;
    let ticket = e.device.control.post_submit(&cmd)?;
    println!(
        "LIFECYCLE {}: fence {} posted: {} TRANSFERs of {:#x} bytes VRAM -> VRAM",
        FIRST_BOOT_TESTS[1], cmd.submission_fence_id, plan.packets, plan.chunk
    );
    Ok(Running {
        cmd,
        ticket,
        posted_at: Instant::now(),
    })
}

fn finish_long(r: &mut Rig, run: Running) -> Outcome {
    const TEST: &str = FIRST_BOOT_TESTS[1];
    let (e, plan) = (&mut r.e, r.plan);
    let at_go = run.posted_at.elapsed();
    let answer = match e.device.control.try_take(run.ticket)? {
        Some(answer) => {
            println!(
                "LIFECYCLE {TEST}: already complete when the host answered go ({} ms after \
                 posting, guest time)",
                at_go.as_millis()
            );
            answer
        }
        None => {
            println!(
                "LIFECYCLE {TEST}: still running when the host answered go ({} ms after posting, \
                 guest time)",
                at_go.as_millis()
            );
            e.device
                .control
                .wait(run.ticket, LONG_TIMEOUT)
                .map_err(|err| Failure(format!("the long submission: {err}")))?
        }
    };
    let done = gpu::decode_submit(&run.cmd, &answer.bytes)?;
    println!(
        "LIFECYCLE {TEST}: {done} ({} ms after posting, guest time)",
        run.posted_at.elapsed().as_millis()
    );
    expect_done(&done, plan.long_bytes(), plan.packets)?;
    bar_known(e, TEST)?;
    e.vram
        .check_pattern(plan.chunk, plan.chunk, MID_TAG, 0)
        .map_err(|m| Failure(format!("destination through the BAR: {m}")))?;
    for at in [0, plan.chunk / 2 + 0x321, plan.chunk - PAGE] {
        e.vram
            .check_pattern(at, PAGE, MID_TAG, at)
            .map_err(|m| Failure(format!("source through the BAR: {m}")))?;
    }
    Ok(())
}

/// State a reset must clear (aperture mappings, status page, posted WAIT_EVENTs, a running
/// submission) and VRAM it must keep; the host then resets the VM.
/// Maps [`RESET_PAGES`] guest pages holding pattern `tag` at aperture page [`RESET_PAGE`],
/// copies them to VRAM at `scratch` and checks the bytes there (`when`, for messages).
fn map_and_copy_to_vram(
    e: &mut Engine,
    c: &mut Ctx,
    tag: u64,
    scratch: u64,
    when: &str,
) -> Outcome<Completion> {
    let pieces = c.pieces(usize::try_from(RESET_PAGES).unwrap())?;
    let data = pattern_bytes(tag, 0, RESET_PAGES * PAGE);
    write_pieces(e, &pieces, &data);
    c.map(e, RESET_PAGE, &pieces)?;
    let done = e.transfer(
        RESET_PAGES * PAGE,
        c.ap(RESET_PAGE * PAGE),
        e.vram_at(scratch),
    )?;
    expect_done(&done, RESET_PAGES * PAGE, 1)
        .map_err(|f| Failure(format!("aperture -> VRAM {when}: {f}")))?;
    check_vram(e, scratch, &data, &format!("aperture -> VRAM {when}"))?;
    Ok(done)
}

fn reset_setup(rig: &mut Outcome<Rig>) -> Outcome {
    const TEST: &str = FIRST_BOOT_TESTS[2];
    let r = rig_of(rig)?;
    let (e, c, plan) = (&mut r.e, &mut r.c, r.plan);
    c.begin(e);
    c.kmd_ready(e)?;
    let scratch = plan.scratch();
    e.require_vram(scratch, RESET_PAGES * PAGE)?;
    map_and_copy_to_vram(e, c, RESET_TAG, scratch, "before the reset")?;
    e.vram_write_and_verify(plan.keep(), KEEP_LEN, KEEP_TAG)?;

    prepare_long(e, &plan, RESET_TAG)?;
    let start_fence = e.fence();
    let b = long_buffer(e, &plan, Some(start_fence));
    let cmd = c.prepare_extra(e, 1, &b)?;
    e.device.control.post_submit(&cmd)?;
    let (event, seen) = next_non_bar_event(e, c, "the long submission's first packet (a FENCE)")?;
    ensure(
        event.resp.kind == WDDM_GPU_EVENT_FENCE && event.resp.fence_id == start_fence,
        || {
            format!(
                "expected the FENCE {start_fence} event of the long submission, got {}",
                events_text(&seen)
            )
        },
    )?;
    println!(
        "LIFECYCLE {TEST}: {RESET_PAGES} pages mapped at aperture page {RESET_PAGE:#x}, status \
         page registered, {} WAIT_EVENTs posted, VRAM pattern at {:#x}, fence {} running ({} x \
         {:#x} bytes)",
        c.events.posted(),
        plan.keep(),
        cmd.submission_fence_id,
        plan.packets,
        plan.chunk
    );
    Ok(())
}

// ---- after the reset -------------------------------------------------------------------------

fn after_reset(tally: &mut Tally, options: &Options) {
    let mut first = None;
    let outcome = after_reset_device_works(options, &mut first);
    tally.report(AFTER_RESET_TEST, &outcome);
    if let Some(record) = first {
        println!(
            "LIFECYCLE first boot (from VRAM): {} passed, {} failed",
            record.passed, record.failed
        );
        tally.passed += record.passed;
        tally.failed += record.failed;
    }
}

/// The device initialises again (capset valid, BAR known in either mode), the aperture mappings
/// made before the reset are gone, a fresh map and transfer work, and VRAM kept what the first
/// boot wrote. Sets `first` to the first boot's results found in VRAM.
fn after_reset_device_works(options: &Options, first: &mut Option<Record>) -> Outcome {
    let mut r = Rig::new(options)?;
    let (e, c, plan) = (&mut r.e, &mut r.c, r.plan);
    let mode = e.layout.header.vram_bar.mode;
    println!(
        "LIFECYCLE {AFTER_RESET_TEST}: device up again, VRAM BAR known ({})",
        if mode == WDDM_GPU_BAR_MODE_SHMEM {
            "shmem"
        } else {
            "ivshmem"
        }
    );
    e.vram
        .check_pattern(plan.keep(), KEEP_LEN, KEEP_TAG, 0)
        .map_err(|m| Failure(format!("VRAM written before the reset: {m}")))?;
    let mut raw = [0u8; RECORD_LEN];
    e.vram.read(plan.record(), &mut raw);
    *first = Record::decode(&raw);
    // Consumed: a later boot must not count it again.
    e.vram.write(plan.record(), &[0; RECORD_LEN]);
    ensure(first.is_some(), || {
        format!(
            "the first boot's results at VRAM offset {:#x} are gone (read {raw:02x?})",
            plan.record()
        )
    })?;

    // The mappings made before the reset are gone.
    let scratch = plan.scratch();
    e.require_vram(scratch, PAUSE_PAGES * PAGE)?;
    for (page, pages) in [(PAUSE_PAGE, PAUSE_PAGES), (RESET_PAGE, RESET_PAGES)] {
        let done = e.transfer(pages * PAGE, c.ap(page * PAGE), e.vram_at(scratch))?;
        expect_status(&done, SubmitStatus::UnmappedAperture).map_err(|f| {
            Failure(format!(
                "TRANSFER from aperture page {page:#x}, mapped before the reset: {f}"
            ))
        })?;
        ensure(done.fault_address == page * PAGE, || {
            format!("fault_address should name aperture page {page:#x}: {done}")
        })?;
    }

    // A fresh registration, map and transfer work.
    c.begin(e);
    c.kmd_ready(e)?;
    let done = map_and_copy_to_vram(e, c, AFTER_TAG, scratch, "after the reset")?;
    let page = c.status.header();
    ensure(page.completed_fence == done.fence, || {
        format!(
            "the status page registered after the reset says completed_fence {}, want {}",
            page.completed_fence, done.fence
        )
    })?;
    e.healthy(AFTER_TAG)?;
    println!(
        "LIFECYCLE {AFTER_RESET_TEST}: mappings made before the reset gone, VRAM kept, a fresh \
         status page, map and transfers work"
    );
    e.arena.recheck().map_err(Failure::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_the_segment() {
        let plan = Plan::new(256 * MIB).unwrap();
        assert_eq!(plan.chunk, 64 * MIB);
        assert_eq!(plan.packets, 384);
        assert_eq!(plan.free, 128 * MIB);
        assert!(plan.scratch() + PAUSE_PAGES * PAGE <= plan.free + PLAN_SPAN);
        assert!(plan.keep() + KEEP_LEN <= plan.record());
        assert!(plan.record() + RECORD_LEN as u64 <= plan.scratch());
        assert!(plan.pause_dst() + pause_len() <= plan.keep());
        let small = Plan::new(64 * MIB).unwrap();
        assert_eq!((small.chunk, small.packets), (16 * MIB, 1000));
        assert!(small.free + PLAN_SPAN <= 64 * MIB);
        assert!(Plan::new(16 * MIB).is_err());
        assert!(Plan::new(0).is_err());
    }

    #[test]
    fn records_round_trip_and_reject_garbage() {
        let record = Record {
            passed: 2,
            failed: 1,
        };
        assert_eq!(Record::decode(&record.encode()), Some(record));
        assert_eq!(Record::decode(&[0; RECORD_LEN]), None);
        assert_eq!(Record::decode(&[0xff; RECORD_LEN]), None);
        let mut bad = record.encode();
        bad[4] ^= 1;
        assert_eq!(Record::decode(&bad), None);
    }
}
