//! `tdr`: the driver's timeout detection and recovery ([`crate::tdr`]) against every injection
//! of the paging node, armed by the host (`vhost-user-wddm-gpu ctl SOCKET arm ...`) at a sync
//! point over the second serial port ([`crate::sync`]), as `lifecycle` has the host drive QMP.
//! Output as in `suite`: `GUEST-TEST <name> PASS|FAIL <why>` per test, the driver's `TDR ...`
//! lines on the way, `GUEST-SUMMARY` at the end.
//!
//! Each test sets up, then syncs at its point; the host disarms whatever is left armed, arms
//! the injections of the point and answers `armed` (`not-armed` when `ctl` failed); the guest's
//! next submissions meet them:
//!
//! | point | host arms | the driver sees | test |
//! | --- | --- | --- | --- |
//! | `tdr-slow` | `slow 500ms` | the answer after 500 ms, below the TDR delay | `tdr_slow` |
//! | `tdr-lost-interrupt` | `lost-interrupt` | no answer; the status page says done; QUERY_ENGINE_STATUS releases it | `tdr_lost_interrupt` |
//! | `tdr-hang` | `hang` | no answer, the node not responsive: RESET, resubmission of what can run again, report of the rest | `tdr_hang` |
//! | `tdr-fault` | `fault packet=1 status=segment_range` | a faulted submission: report, RESET | `tdr_fault` |
//! | `tdr-slow-past-delay` | `slow 60s` | no answer, the node responsive: PREEMPT stops it, resubmitted | `tdr_slow_past_delay` |
//! | `tdr-preempt-refuse` | `slow 60s`, `preempt-refuse` | the PREEMPT stops nothing: RESET, resubmitted | `tdr_preempt_refuse` |
//! | `tdr-preempt-slow` | `slow 60s`, `preempt-slow 1s` | the PREEMPT answered a second late, then resubmitted | `tdr_preempt_slow` |
//! | `tdr-virtual-hang` | `hang node=1` | a SUBMIT_VIRTUAL unanswered: QUERY_ENGINE_STATUS of node 1 (not responsive), RESET_ENGINE answers it RESET, resubmitted | `tdr_virtual_hang` |
//! | `tdr-virtual-page-fault` | `page-fault va=0x18700000000 write` | a page fault at that VA: the `DmaPageFaulted` record and event, NODE_FAULTED until RESET_ENGINE | `tdr_virtual_page_fault` |
//! | `tdr-power-loss` | `power-loss` | SET_POWER_STATE D3 (sleep) and back: work refused below D0, the WAIT_EVENTs back as at a RESET, the VRAM segment (not `PreservedDuringStandby`) lost; the driver restores and goes on | `tdr_power_loss` |
//! | `tdr-done` | prints `ctl list`, checks every injection fired, answers `go` | | `tdr_device_works_after` |
//!
//! "Nothing lost that should have been kept": a VRAM pattern written through the BAR at the start
//! is checked after every recovery (a RESET keeps VRAM); the aperture mapping made before the
//! hang is gone after it (a RESET clears the GART) and the submission that read it is reported,
//! not resubmitted; every resubmitted submission's work is checked in VRAM. The virtual node's
//! tests need the layout's GpuMmu (scripts/test boots this scenario with `gpummu.toml`); the
//! paging node's VRAM is checked after them too (an engine reset of node 1 leaves it alone).

use std::time::Duration;

use wddm_gpu_abi::context::{
    WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
    WDDM_GPU_PAGE_FAULT_FLAG_WRITE,
};
use wddm_gpu_abi::status::{
    WDDM_GPU_ENGINE_STATUS_RESPONSIVE, WDDM_GPU_EVENT_PAGE_FAULT, WDDM_GPU_POWER_ACTION_NONE,
    WDDM_GPU_POWER_ACTION_SLEEP, WDDM_GPU_POWER_D0, WDDM_GPU_POWER_D3, WDDM_GPU_POWER_LOST_BYTE,
};
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::cli::Options;
use crate::engine::{expect_status, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpummu::dma_page_faulted;
use crate::packets::{self, DmaBufferBuilder};
use crate::scatter::Piece;
use crate::scenario::gpuva::{expect_status as expect_virtual_status, VirtualTarget};
use crate::scenario::paging::{
    check_vram, expect_done, fill_bytes, pattern_bytes, write_pieces, Ctx,
};
use crate::scenario::setup;
use crate::scenario::suite::Tally;
use crate::sync::{SyncPort, SYNC_PORT};
use crate::tdr::{
    reset_virtual_node, run_virtual, status_text, Ended, PagingNode, Recovery, ResetReport,
    Submission, TimeoutReport, TDR_DELAY,
};

const PAGE: u64 = WDDM_GPU_PAGE_SIZE;

/// The host's answer once it armed a point's injections.
const ARMED: &str = "armed";
/// The last point, and the host's answer to it.
const DONE: &str = "tdr-done";
const GO: &str = "go";
/// How long the host may take to answer (guest time).
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// The tests, their sync points, in run order.
pub const TESTS: [(&str, &str); 10] = [
    ("tdr_slow", "tdr-slow"),
    ("tdr_lost_interrupt", "tdr-lost-interrupt"),
    ("tdr_hang", "tdr-hang"),
    ("tdr_fault", "tdr-fault"),
    ("tdr_slow_past_delay", "tdr-slow-past-delay"),
    ("tdr_preempt_refuse", "tdr-preempt-refuse"),
    ("tdr_preempt_slow", "tdr-preempt-slow"),
    ("tdr_virtual_hang", "tdr-virtual-hang"),
    ("tdr_virtual_page_fault", "tdr-virtual-page-fault"),
    ("tdr_power_loss", "tdr-power-loss"),
];
/// The last test (after `tdr-done`).
pub const FINAL_TEST: &str = "tdr_device_works_after";

/// What the host's injections take: `slow 500ms` delays, `preempt-slow 1s` delays the answer.
const SLOW: Duration = Duration::from_millis(500);
const PREEMPT_SLOW: Duration = Duration::from_secs(1);

/// Where the tests work in the VRAM segment: test `i`'s area at `AREA + i * AREA_STRIDE`.
const AREA: u64 = 16 << 20;
const AREA_STRIDE: u64 = 0x1_0000;
/// Bytes of each of the three FILLs of a submission.
const FILL_LEN: u64 = 0x1000;
/// The second area of a test (the hang test's TRANSFER from the aperture).
const SECOND: u64 = 0x8000;
const _: () = assert!(3 * FILL_LEN <= SECOND && SECOND + AP_PAGES * PAGE <= AREA_STRIDE);
/// The VRAM every reset must keep, written through the BAR at the start.
const KEEP_AT: u64 = (20 << 20) + 0x123;
const KEEP_LEN: u64 = 0x1_0005;
const KEEP_TAG: u64 = 0x7464_726b;
/// Aperture pages the hang test maps, and how many.
const AP_PAGE: u64 = 0x500;
const AP_PAGES: u64 = 2;
const AP_TAG: u64 = 0x7464_7261;

/// The device, the paging context and the node; the virtual node's target once a test made it.
struct Rig {
    e: Engine,
    c: Ctx,
    node: PagingNode,
    target: Option<VirtualTarget>,
}

/// Runs the tests of this boot; true iff nothing failed.
pub fn run(options: &Options) -> bool {
    println!("SEED {:#x}", options.seed);
    let mut tally = Tally::default();
    let mut port = match SyncPort::open(SYNC_PORT) {
        Ok(port) => port,
        Err(err) => {
            let why = Failure(format!("not run: {err}"));
            for (name, _) in TESTS {
                tally.report(name, &Err(why.clone()));
            }
            tally.report(FINAL_TEST, &Err(why));
            return tally.summary();
        }
    };
    let mut rig = rig(options);
    if let Ok(r) = &rig {
        println!(
            "TDR VRAM segment {} ({:#x} bytes), TDR delay {} ms, kept pattern at {KEEP_AT:#x}",
            r.e.segment.desc.id,
            r.e.vram.size,
            TDR_DELAY.as_millis()
        );
    }
    type Test = fn(&mut Rig, &mut SyncPort, &str) -> Outcome;
    let tests: [Test; 10] = [
        slow,
        lost_interrupt,
        hang,
        fault,
        slow_past_delay,
        preempt_refuse,
        preempt_slow,
        virtual_hang,
        virtual_page_fault,
        power_loss,
    ];
    for ((name, point), test) in TESTS.into_iter().zip(tests) {
        let outcome = match &mut rig {
            Ok(r) => test(r, &mut port, point).and_then(|()| recheck(r)),
            Err(why) => {
                // The host's sequence must not stall: every point is reached.
                let _ = port.sync(point, SYNC_TIMEOUT);
                Err(Failure(format!("not run: device setup failed: {why}")))
            }
        };
        tally.report(name, &outcome);
    }
    let answer = port.sync(DONE, SYNC_TIMEOUT);
    let outcome = answer
        .map_err(Failure::from)
        .and_then(|answer| {
            ensure(answer == GO, || {
                format!("the host answered {answer:?} at sync point {DONE}, expected {GO}")
            })
        })
        .and_then(|()| match &mut rig {
            Ok(r) => device_works_after(r).and_then(|()| recheck(r)),
            Err(why) => Err(Failure(format!("not run: device setup failed: {why}"))),
        });
    tally.report(FINAL_TEST, &outcome);
    tally.summary()
}

/// Brings the device up (BAR known, `CpuTranslatedAddress` right, VRAM mapped), makes the
/// paging context and writes the pattern every reset must keep.
fn rig(options: &Options) -> Outcome<Rig> {
    let arena = setup::arena()?;
    let mut device = setup::device(arena, options)?;
    let layout = setup::layout(&mut device)?;
    let vram = setup::vram(&device, &layout)?;
    setup::cpu_translated_matches_bar(&layout, &vram)?;
    let mut e = Engine::new(arena, device, layout, vram, options.seed)?;
    let mut c = Ctx::new(&mut e)?;
    e.require_vram(AREA, TESTS.len() as u64 * AREA_STRIDE)?;
    e.vram_write_and_verify(KEEP_AT, KEEP_LEN, KEEP_TAG)?;
    c.begin(&mut e);
    c.kmd_ready(&mut e)?;
    Ok(Rig {
        e,
        c,
        node: PagingNode::new(TDR_DELAY),
        target: None,
    })
}

/// A moved DMA page makes every DMA since then suspect: it fails the test that ran.
fn recheck(r: &Rig) -> Outcome {
    r.e.arena.recheck().map_err(Failure::from)
}

/// Syncs at `point` and expects `armed`.
fn arm(port: &mut SyncPort, point: &str) -> Outcome {
    let answer = port.sync(point, SYNC_TIMEOUT)?;
    ensure(answer == ARMED, || {
        format!("the host answered {answer:?} at sync point {point}, expected {ARMED}")
    })
}

/// `before`, the host's arming at `point` (reached even when `before` failed, so the host's
/// sequence never stalls), then `after` with what `before` set up.
fn around<T>(
    r: &mut Rig,
    port: &mut SyncPort,
    point: &str,
    before: impl FnOnce(&mut Rig) -> Outcome<T>,
    after: impl FnOnce(&mut Rig, T) -> Outcome,
) -> Outcome {
    let set_up = before(r);
    let armed = arm(port, point);
    let set_up = set_up?;
    armed?;
    after(r, set_up)
}

/// Test `point`'s VRAM area.
fn area(point: &str) -> u64 {
    let i = TESTS.iter().position(|(_, p)| *p == point).unwrap_or(0) as u64;
    AREA + i * AREA_STRIDE
}

/// The FILL patterns of a test's submission.
fn patterns(at: u64) -> [u32; 3] {
    let base = u32::try_from(at >> 12).unwrap_or(0);
    [0x1100_0000 | base, 0x2200_0000 | base, 0x3300_0000 | base]
}

/// Zeroes `[at, at + 3 * FILL_LEN)` through the BAR and builds a resubmittable submission of
/// three FILLs there (in the context's extra DMA buffer `slot`).
fn three_fills(r: &mut Rig, slot: usize, at: u64) -> Outcome<Submission> {
    r.e.require_vram(at, 3 * FILL_LEN)?;
    r.e.vram
        .write(at, &vec![0; usize::try_from(3 * FILL_LEN).unwrap()]);
    let mut b = DmaBufferBuilder::new();
    for (i, pattern) in patterns(at).into_iter().enumerate() {
        b.push(&packets::fill(
            pattern,
            FILL_LEN,
            r.e.vram_at(at + i as u64 * FILL_LEN),
        ));
    }
    let cmd = r.c.prepare_extra(&mut r.e, slot, &b)?;
    Ok(Submission {
        cmd,
        resubmit: true,
    })
}

/// Checks which of the three FILLs at `at` landed (the others still zero).
fn check_fills(e: &Engine, at: u64, landed: [bool; 3], what: &str) -> Outcome {
    for (i, pattern) in patterns(at).into_iter().enumerate() {
        let offset = at + i as u64 * FILL_LEN;
        let want = if landed[i] {
            fill_bytes(pattern, FILL_LEN)
        } else {
            vec![0; usize::try_from(FILL_LEN).unwrap()]
        };
        let how = if landed[i] {
            "ran"
        } else {
            "must not have run"
        };
        check_vram(e, offset, &want, &format!("{what}: FILL {i} ({how})"))?;
    }
    Ok(())
}

/// The VRAM written at the start is still there.
fn check_kept(e: &Engine) -> Outcome {
    e.vram
        .check_pattern(KEEP_AT, KEEP_LEN, KEEP_TAG, 0)
        .map_err(|m| Failure(format!("VRAM written before the recovery: {m}")))
}

/// Posts `sub` and drains the node.
fn run_one(r: &mut Rig, sub: Submission) -> Outcome<Recovery> {
    r.node.post(&mut r.e, sub)?;
    r.node.drain(&mut r.e, &mut r.c)
}

/// Nothing but an answer in time.
fn no_recovery(rec: &Recovery) -> Outcome {
    ensure(
        rec.timeouts.is_empty() && rec.preempts.is_empty() && rec.resets.is_empty(),
        || {
            format!(
                "expected no recovery: {} timeout(s), {} PREEMPT(s), {} reset(s)",
                rec.timeouts.len(),
                rec.preempts.len(),
                rec.resets.len()
            )
        },
    )
}

fn print_ended(test: &str, rec: &Recovery) {
    for ended in &rec.ended {
        println!("TDR {test}: {ended}");
    }
}

/// A test of one submission, three FILLs in `point`'s area: built before the host arms
/// `point`, then posted and the node drained (its endings printed as `test`'s); `check` gets
/// the area, the submission and what the drain saw.
fn one_submission(
    r: &mut Rig,
    port: &mut SyncPort,
    point: &str,
    test: &str,
    check: impl FnOnce(&mut Rig, u64, Submission, Recovery) -> Outcome,
) -> Outcome {
    let at = area(point);
    around(
        r,
        port,
        point,
        |r| three_fills(r, 0, at),
        |r, sub| {
            let rec = run_one(r, sub)?;
            print_ended(test, &rec);
            check(r, at, sub, rec)
        },
    )
}

/// The submission's three FILLs all ran, at its last answer.
fn ran_all(end: &Ended) -> bool {
    end.done.status == SubmitStatus::Ok && end.done.packets_completed == 3
}

/// The drain's first timeout (checked to be there).
fn first_timeout(rec: &Recovery) -> Outcome<&TimeoutReport> {
    rec.timeouts
        .first()
        .ok_or_else(|| Failure("no timeout".into()))
}

/// The drain's one reset (checked to be the only one).
fn one_reset(rec: &Recovery) -> Outcome<&ResetReport> {
    ensure(rec.resets.len() == 1, || {
        format!("expected one reset, got {}", rec.resets.len())
    })?;
    Ok(&rec.resets[0])
}

/// Fence `fence` (three FILLs at `at`) was stopped by one PREEMPT, then resubmitted and ran.
fn preempted_then_ran(r: &Rig, rec: &Recovery, fence: u32, at: u64) -> Outcome {
    let end = rec.of(fence)?;
    ensure(end.preempted == 1 && ran_all(end), || {
        format!("fence {fence}: {end}")
    })?;
    check_fills(&r.e, at, [true; 3], "the preempted submission, resubmitted")
}

/// `slow 500ms`: the answer comes late but below the TDR delay: no recovery, the work done.
fn slow(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_slow", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        no_recovery(&rec)?;
        let end = rec.of(fence)?;
        ensure(ran_all(end), || format!("fence {fence}: {}", end.done))?;
        ensure(end.elapsed >= SLOW, || {
            format!(
                "fence {fence} answered after {} ms: the slow injection ({} ms) did not \
                 delay it",
                end.elapsed.as_millis(),
                SLOW.as_millis()
            )
        })?;
        check_fills(&r.e, at, [true; 3], "slow submission")?;
        println!(
            "TDR tdr_slow: fence {fence} answered after {} ms, below the {} ms TDR delay: no \
             recovery, its work done",
            end.elapsed.as_millis(),
            TDR_DELAY.as_millis()
        );
        Ok(())
    })
}

/// `lost-interrupt`: the work is done and the status page says so, but no answer comes until
/// QUERY_ENGINE_STATUS releases it.
fn lost_interrupt(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_lost_interrupt", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        ensure(rec.lost_interrupts == [fence], || {
            format!(
                "expected the lost interrupt of fence {fence} recovered, got {:?}",
                rec.lost_interrupts
            )
        })?;
        ensure(rec.resets.is_empty() && rec.preempts.is_empty(), || {
            "a lost interrupt needs no PREEMPT or RESET".into()
        })?;
        let timeout = first_timeout(&rec)?;
        ensure(
            timeout.page_fence == fence
                && timeout.status.released == 1
                && timeout.status.current_fence == fence
                && timeout.status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE != 0,
            || {
                format!(
                    "at the timeout the status page said completed_fence {} and \
                     QUERY_ENGINE_STATUS {}; want {fence}, released 1, current_fence \
                     {fence}, responsive",
                    timeout.page_fence,
                    crate::tdr::status_text(&timeout.status)
                )
            },
        )?;
        let end = rec.of(fence)?;
        ensure(end.lost_interrupt && ran_all(end), || {
            format!("fence {fence}: {end}")
        })?;
        check_fills(&r.e, at, [true; 3], "submission of the lost interrupt")
    })
}

/// What the hang test set up: the aperture pages and their data, and the two submissions.
struct Hang {
    pieces: Vec<Piece>,
    data: Vec<u8>,
    a: Submission,
    b: Submission,
}

/// `hang`: the first of two submissions never ends and the node is not responsive: RESET; the
/// one that only writes VRAM is resubmitted, the one that reads the aperture (cleared by the
/// reset) reported; VRAM kept, the mapping gone; mapped again, the reported work runs.
fn hang(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    let at = area(point);
    let second = at + SECOND;
    around(
        r,
        port,
        point,
        |r| hang_setup(r, at, second),
        |r, h| hang_check(r, h, at, second),
    )
}

fn hang_setup(r: &mut Rig, at: u64, second: u64) -> Outcome<Hang> {
    let (e, c) = (&mut r.e, &mut r.c);
    c.begin(e);
    c.kmd_ready(e)?;
    let pieces = c.pieces(usize::try_from(AP_PAGES).unwrap())?;
    let data = pattern_bytes(AP_TAG, 0, AP_PAGES * PAGE);
    write_pieces(e, &pieces, &data);
    c.map(e, AP_PAGE, &pieces)?;
    let len = AP_PAGES * PAGE;
    e.require_vram(second, len)?;
    // The mapping works before the hang.
    let done = e.transfer(len, c.ap(AP_PAGE * PAGE), e.vram_at(second))?;
    expect_done(&done, len, 1).map_err(|f| Failure(format!("aperture -> VRAM: {f}")))?;
    check_vram(e, second, &data, "aperture -> VRAM before the hang")?;
    e.vram
        .write(second, &vec![0; usize::try_from(len).unwrap()]);
    let a = three_fills(r, 0, at)?;
    let mut b = DmaBufferBuilder::new();
    b.push_transfer(&packets::transfer(
        len,
        r.c.ap(AP_PAGE * PAGE),
        r.e.vram_at(second),
    ));
    let cmd = r.c.prepare_extra(&mut r.e, 1, &b)?;
    println!(
        "TDR tdr_hang: {AP_PAGES} pages mapped at aperture page {AP_PAGE:#x}; fence {} (three \
         FILLs, resubmittable) and fence {} (a TRANSFER from those pages: not resubmittable, a \
         reset clears the mapping) to post",
        a.cmd.submission_fence_id, cmd.submission_fence_id
    );
    Ok(Hang {
        pieces,
        data,
        a,
        b: Submission {
            cmd,
            resubmit: false,
        },
    })
}

fn hang_check(r: &mut Rig, h: Hang, at: u64, second: u64) -> Outcome {
    let (fa, fb) = (h.a.cmd.submission_fence_id, h.b.cmd.submission_fence_id);
    r.node.post(&mut r.e, h.a)?;
    r.node.post(&mut r.e, h.b)?;
    let rec = r.node.drain(&mut r.e, &mut r.c)?;
    print_ended("tdr_hang", &rec);
    let timeout = first_timeout(&rec)?;
    ensure(
        timeout.fence == fa
            && timeout.status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE == 0
            && timeout.status.running_fence == fa
            && timeout.status.queued == 1
            && timeout.status.released == 0,
        || {
            format!(
                "at fence {}'s timeout QUERY_ENGINE_STATUS said {}; want not responsive, fence \
                 {fa} running, 1 queued, nothing released",
                timeout.fence,
                crate::tdr::status_text(&timeout.status)
            )
        },
    )?;
    let reset = one_reset(&rec)?;
    ensure(
        reset.aborted == [fa, fb] && reset.resubmitted == [fa] && reset.reported == [fb],
        || {
            format!(
                "reset: aborted {:?}, resubmitted {:?}, reported {:?}; want [{fa}, {fb}], \
                 [{fa}], [{fb}]",
                reset.aborted, reset.resubmitted, reset.reported
            )
        },
    )?;
    let a = rec.of(fa)?;
    ensure(ran_all(a) && a.resubmitted_after_reset == 1, || {
        format!("fence {fa}: {a}")
    })?;
    let b = rec.of(fb)?;
    ensure(b.reported && b.done.status == SubmitStatus::Reset, || {
        format!("fence {fb}: {b}")
    })?;
    // The page registered again counts what ran since: the FENCE that proved the device works
    // and the resubmission.
    let page = r.c.status.header();
    ensure(page.submissions_completed == 2, || {
        format!(
            "the status page registered after the reset counts {} submissions completed, want 2 \
             (the FENCE after the reset and fence {fa})",
            page.submissions_completed
        )
    })?;
    // Kept: VRAM; the resubmitted work landed; the reported one did not run.
    check_kept(&r.e)?;
    check_fills(&r.e, at, [true; 3], "the hung submission, resubmitted")?;
    let len = AP_PAGES * PAGE;
    check_vram(
        &r.e,
        second,
        &vec![0; usize::try_from(len).unwrap()],
        "the reported submission (must not have run)",
    )?;
    // Cleared: the aperture mapping.
    let done =
        r.e.transfer(len, r.c.ap(AP_PAGE * PAGE), r.e.vram_at(second))?;
    expect_status(&done, SubmitStatus::UnmappedAperture)
        .map_err(|f| Failure(format!("TRANSFER from pages mapped before the reset: {f}")))?;
    ensure(done.fault_address == AP_PAGE * PAGE, || {
        format!("fault_address should name aperture page {AP_PAGE:#x}: {done}")
    })?;
    // That fault's record and events are this test's: consumed here.
    r.c.status.consume_faults();
    r.c.kmd_ready(&mut r.e)?;
    // Recovery of the reported work: map again, submit again.
    r.c.map(&mut r.e, AP_PAGE, &h.pieces)?;
    let again = run_one(
        r,
        Submission {
            cmd: h.b.cmd,
            resubmit: false,
        },
    )?;
    no_recovery(&again)?;
    let end = again.of(fb)?;
    expect_done(&end.done, len, 1).map_err(|f| Failure(format!("fence {fb} again: {f}")))?;
    check_vram(&r.e, second, &h.data, "the reported submission, run again")?;
    println!(
        "TDR tdr_hang: VRAM kept, aperture mapping cleared, fence {fa} resubmitted and done, \
         fence {fb} reported, then run again after mapping its pages again"
    );
    Ok(())
}

/// `fault packet=1 status=segment_range`: the first FILL ran, the second faulted; reported and
/// reset; submitted again, all three run.
fn fault(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_fault", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        let packet = sub.cmd.end_offset / 3;
        let (done, records) = rec
            .faults
            .first()
            .ok_or_else(|| Failure(format!("fence {fence} did not fault")))?;
        ensure(
            done.fence == fence
                && done.status == SubmitStatus::SegmentRange
                && done.packets_completed == 1
                && done.fault_packet_offset == packet,
            || {
                format!(
                    "want fence {fence} faulted with segment_range at packet offset \
                     {packet:#x} after 1 packet: {done}"
                )
            },
        )?;
        ensure(
            records
                .iter()
                .any(|rec| rec.fence_id == fence && rec.packet_offset == packet),
            || {
                format!(
                    "no fault record of fence {fence} at packet offset {packet:#x} on the \
                     status page ({} record(s))",
                    records.len()
                )
            },
        )?;
        ensure(
            rec.resets.len() == 1 && rec.resets[0].aborted.is_empty(),
            || {
                format!(
                    "expected one reset after the fault, aborting nothing: {:?}",
                    rec.resets
                        .iter()
                        .map(|r| (&r.why, &r.aborted))
                        .collect::<Vec<_>>()
                )
            },
        )?;
        check_kept(&r.e)?;
        check_fills(&r.e, at, [true, false, false], "the faulted submission")?;
        // Submitted again after the recovery, all of it runs.
        let mut again = three_fills(r, 0, at)?;
        again.cmd.submission_fence_id = fence;
        let rec = run_one(r, again)?;
        no_recovery(&rec)?;
        let end = rec.of(fence)?;
        ensure(ran_all(end), || {
            format!("fence {fence} again: {}", end.done)
        })?;
        check_fills(&r.e, at, [true; 3], "the faulted submission, run again")
    })
}

/// `slow 60s`: past the TDR delay the node is responsive and the submission runs: PREEMPT stops
/// it, resubmitted it runs.
fn slow_past_delay(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_slow_past_delay", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        let timeout = first_timeout(&rec)?;
        ensure(
            timeout.status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE != 0
                && timeout.status.running_fence == fence,
            || {
                format!(
                    "at the timeout QUERY_ENGINE_STATUS said {}; want responsive, fence \
                     {fence} running",
                    crate::tdr::status_text(&timeout.status)
                )
            },
        )?;
        ensure(
            rec.preempts.len() == 1
                && rec.preempts[0].resp.preempted_count == 1
                && rec.preempts[0].resp.preempted_fence == fence
                && rec.resets.is_empty(),
            || {
                format!(
                    "want one PREEMPT stopping fence {fence} and no reset: {:?}, {} reset(s)",
                    rec.preempts.iter().map(|p| p.resp).collect::<Vec<_>>(),
                    rec.resets.len()
                )
            },
        )?;
        preempted_then_ran(r, &rec, fence, at)
    })
}

/// `slow 60s` and `preempt-refuse`: the PREEMPT after the timeout stops nothing: the TDR path;
/// resubmitted, the submission runs.
fn preempt_refuse(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_preempt_refuse", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        ensure(
            rec.preempts.len() == 1 && rec.preempts[0].resp.preempted_count == 0,
            || {
                format!(
                    "want one refused PREEMPT: {:?}",
                    rec.preempts.iter().map(|p| p.resp).collect::<Vec<_>>()
                )
            },
        )?;
        let reset = one_reset(&rec)?;
        ensure(
            reset.why.contains("refused")
                && reset.aborted == [fence]
                && reset.resubmitted == [fence],
            || {
                format!(
                    "reset ({}): aborted {:?}, resubmitted {:?}; want [{fence}] both",
                    reset.why, reset.aborted, reset.resubmitted
                )
            },
        )?;
        let end = rec.of(fence)?;
        ensure(end.resubmitted_after_reset == 1 && ran_all(end), || {
            format!("fence {fence}: {end}")
        })?;
        check_kept(&r.e)?;
        check_fills(
            &r.e,
            at,
            [true; 3],
            "the submission, resubmitted after the reset",
        )
    })
}

/// `slow 60s` and `preempt-slow 1s`: the PREEMPT takes effect but answers a second late (below
/// the driver's control timeout: no TDR); resubmitted, the submission runs.
fn preempt_slow(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    one_submission(r, port, point, "tdr_preempt_slow", |r, at, sub, rec| {
        let fence = sub.cmd.submission_fence_id;
        ensure(rec.preempts.len() == 1 && rec.resets.is_empty(), || {
            format!(
                "want one PREEMPT and no reset: {} PREEMPT(s), {} reset(s)",
                rec.preempts.len(),
                rec.resets.len()
            )
        })?;
        let p = rec.preempts[0];
        ensure(
            p.took >= PREEMPT_SLOW
                && p.resp.preempted_count == 1
                && p.resp.preempted_fence == fence,
            || {
                format!(
                    "the PREEMPT answered after {} ms (want at least {} ms) with {:?}; want \
                     fence {fence} preempted",
                    p.took.as_millis(),
                    PREEMPT_SLOW.as_millis(),
                    p.resp
                )
            },
        )?;
        preempted_then_ran(r, &rec, fence, at)
    })
}

/// After every recovery: VRAM kept, the status page and events work, a scattered round trip.
/// Makes the virtual node's target (a context mapping [`VirtualTarget::VA`] to VRAM in the
/// virtual tests' area) unless an earlier test did.
fn make_target(r: &mut Rig) -> Outcome {
    if r.target.is_none() {
        r.target = Some(VirtualTarget::new(&mut r.e, area("tdr-virtual-hang"))?);
    }
    Ok(())
}

/// The target [`make_target`] made.
fn made_target(target: &Option<VirtualTarget>) -> Outcome<&VirtualTarget> {
    target
        .as_ref()
        .ok_or_else(|| Failure("no virtual-node context".into()))
}

/// A hang on node 1: the engine-level TDR ([`run_virtual`]) finds the node not responsive with
/// the submission running, RESET_ENGINE answers it RESET without running it, and it runs when
/// submitted again.
fn virtual_hang(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    around(r, port, point, make_target, |r, ()| {
        let target = made_target(&r.target)?;
        let pattern = 0x7668_6e67;
        let cmd = target.fill(&mut r.e, pattern);
        let fence = cmd.submission_fence_id;
        let run = run_virtual(&mut r.e, &cmd, TDR_DELAY)?;
        let status = run.timeout.ok_or_else(|| {
            Failure(format!(
                "fence {fence} was answered while node 1 hung: {:?}",
                run.answer
            ))
        })?;
        ensure(
            status.node_ordinal == WDDM_GPU_NODE_VIRTUAL
                && status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE == 0
                && status.running_fence == fence,
            || format!("node 1 at the timeout: {}", status_text(&status)),
        )?;
        expect_virtual_status(&run.answer, SubmitStatus::Reset)?;
        ensure(!target.filled(&r.e, pattern), || {
            format!("fence {fence} ran although it hung")
        })?;
        let again = target.fill(&mut r.e, pattern);
        let run = run_virtual(&mut r.e, &again, TDR_DELAY)?;
        ensure(run.timeout.is_none(), || {
            format!("the resubmission timed out too: {:?}", run.answer)
        })?;
        expect_virtual_status(&run.answer, SubmitStatus::Ok)?;
        ensure(target.filled(&r.e, pattern), || {
            format!(
                "fence {} answered OK but the page is not filled",
                again.submission_fence_id
            )
        })?;
        println!(
            "TDR tdr_virtual_hang: fence {fence} reset by RESET_ENGINE, resubmitted as fence {} and ran",
            again.submission_fence_id
        );
        check_kept(&r.e)
    })
}

/// A page fault on node 1 at the VA the host named: the `DmaPageFaulted` record in the answer
/// and a PAGE_FAULT event, work refused until the engine reset the record asks for
/// (`DXGK_PAGE_FAULT_ENGINE_RESET_REQUIRED`), then work runs.
fn virtual_page_fault(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    around(r, port, point, make_target, |r, ()| {
        let target = made_target(&r.target)?;
        let pattern = 0x7066_6c74;
        // Events of earlier tests taken, so the next one is this test's.
        r.c.kmd_ready(&mut r.e)?;
        let cmd = target.fill(&mut r.e, pattern);
        let run = run_virtual(&mut r.e, &cmd, TDR_DELAY)?;
        ensure(run.timeout.is_none(), || {
            "the faulting submission timed out".into()
        })?;
        expect_virtual_status(&run.answer, SubmitStatus::PageFault)?;
        let record = run.answer.page_fault;
        let payload = dma_page_faulted(&record);
        println!(
            "TDR tdr_virtual_page_fault: fence {} DmaPageFaulted FaultedVirtualAddress={:#x} PageFaultFlags={:#x} NodeOrdinal={}",
            payload.faulted_fence_id,
            payload.faulted_virtual_address,
            payload.page_fault_flags,
            payload.node_ordinal
        );
        ensure(
            payload.faulted_virtual_address == VirtualTarget::VA
                && payload.faulted_fence_id == cmd.submission_fence_id
                && payload.page_fault_flags
                    == WDDM_GPU_PAGE_FAULT_FLAG_WRITE
                        | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED
                && payload.node_ordinal == WDDM_GPU_NODE_VIRTUAL,
            || format!("unexpected record {record:?}"),
        )?;
        // The driver's posted WAIT_EVENTs (the paging context keeps them) bring the record.
        let event =
            r.c.next_event(&mut r.e, "the virtual node's page fault")?
                .resp;
        ensure(
            event.kind == WDDM_GPU_EVENT_PAGE_FAULT && event.page_fault == record,
            || format!("event {} carries {:?}", event.kind, event.page_fault),
        )?;
        ensure(!target.filled(&r.e, pattern), || {
            "the faulted fill wrote the page".into()
        })?;
        // Refused until the OS resets the engine (DxgkDdiResetEngine).
        let refused = target.fill(&mut r.e, pattern);
        expect_virtual_status(
            &run_virtual(&mut r.e, &refused, TDR_DELAY)?.answer,
            SubmitStatus::NodeFaulted,
        )?;
        let status =
            r.e.device
                .control
                .query_engine_status(WDDM_GPU_NODE_VIRTUAL)?;
        ensure(
            status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE != 0 && status.running_fence == 0,
            || format!("a faulted node 1: {}", status_text(&status)),
        )?;
        reset_virtual_node(&mut r.e)?;
        let again = target.fill(&mut r.e, pattern);
        expect_virtual_status(
            &run_virtual(&mut r.e, &again, TDR_DELAY)?.answer,
            SubmitStatus::Ok,
        )?;
        ensure(target.filled(&r.e, pattern), || {
            "after RESET_ENGINE the fill did not land".into()
        })?;
        check_kept(&r.e)
    })
}

/// A sleep transition with `power-loss` armed (`DxgkDdiSetPowerState` to D3 for
/// `PowerActionSleep`, then back to D0): below D0 a submission is refused unrun and the posted
/// WAIT_EVENTs come back as at a RESET; back at D0 the VRAM segment, not
/// `PreservedDuringStandby`, holds the lost byte where the test wrote and where the kept
/// pattern was. The driver then does what VidMm and its restart would: the kept pattern is
/// written again, the status page registered again, the virtual node's tables (in VRAM) made
/// anew when next needed.
fn power_loss(r: &mut Rig, port: &mut SyncPort, point: &str) -> Outcome {
    let before = |r: &mut Rig| {
        let at = area(point);
        r.e.vram_write_and_verify(at, PAGE, 0x7077_726c)?;
        Ok(at)
    };
    around(r, port, point, before, |r, at| {
        let control = &mut r.e.device.control;
        ensure(
            control.set_power_state(WDDM_GPU_POWER_D3, WDDM_GPU_POWER_ACTION_SLEEP)?,
            || "SET_POWER_STATE to D3 refused".into(),
        )?;
        r.c.forget_device_state();
        r.target = None;
        let timeout = control.timeout();
        let events = r.c.events.collect_all(control, timeout)?;
        let fence = r.e.fence();
        let mut b = DmaBufferBuilder::new();
        b.push(&packets::fence(fence));
        let cmd = r.e.prepare(&b)?;
        expect_status(&r.e.submit(&cmd)?, SubmitStatus::BadCommand)?;
        ensure(
            r.e.device
                .control
                .set_power_state(WDDM_GPU_POWER_D0, WDDM_GPU_POWER_ACTION_NONE)?,
            || "SET_POWER_STATE to D0 refused".into(),
        )?;
        for (offset, what) in [(at, "the test's page"), (KEEP_AT, "the kept pattern")] {
            let mut page = [0u8; 4096];
            r.e.vram.read(offset, &mut page);
            ensure(
                page.iter().all(|&byte| byte == WDDM_GPU_POWER_LOST_BYTE),
                || format!("{what} at {offset:#x} was not lost: {:02x?}", &page[..16]),
            )?;
        }
        println!(
            "TDR tdr_power_loss: D3 (sleep): fence {fence} refused unrun, {} WAIT_EVENT(s) came \
             back; D0: the VRAM segment reads {WDDM_GPU_POWER_LOST_BYTE:#04x} (not PreservedDuringStandby)",
            events.len()
        );
        r.e.vram_write_and_verify(KEEP_AT, KEEP_LEN, KEEP_TAG)?;
        r.c.kmd_ready(&mut r.e)?;
        Ok(())
    })
}

fn device_works_after(r: &mut Rig) -> Outcome {
    check_kept(&r.e)?;
    r.c.kmd_ready(&mut r.e)?;
    r.e.healthy(0x7464_7277)?;
    let page = r.c.status.header();
    println!(
        "TDR {FINAL_TEST}: VRAM kept, status page completed_fence {}, a scattered round trip \
         works",
        page.completed_fence
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_are_apart_and_below_the_kept_pattern() {
        let areas: Vec<u64> = TESTS.iter().map(|(_, p)| area(p)).collect();
        for pair in areas.windows(2) {
            assert_eq!(pair[1] - pair[0], AREA_STRIDE);
        }
        assert!(areas[areas.len() - 1] + AREA_STRIDE <= KEEP_AT);
        assert_ne!(patterns(AREA)[0], patterns(AREA + AREA_STRIDE)[0]);
    }
}
