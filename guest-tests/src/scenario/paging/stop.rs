//! PREEMPT and RESET from the guest, the way `DxgkDdiPreemptCommand` and
//! `DxgkDdiResetFromTimeout` use them: a long submission (dozens of large VRAM → VRAM
//! TRANSFERs) and a short one queued behind it are posted, then PREEMPT or RESET is sent while
//! the long one runs.

use wddm_gpu_abi::packet::WddmGpuPacketTransfer;
use wddm_gpu_abi::status::{WDDM_GPU_EVENT_CANCELLED, WDDM_GPU_EVENT_FENCE};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};

use super::ops::during;
use super::{
    check_vram, compare, expect_done, pattern_bytes, read_pieces, read_segment, write_pieces,
    write_segment, Ctx, PAGE,
};
use crate::engine::{expect_status, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Answer, Completion};
use crate::kmd::event_kind_name;
use crate::packets::{self, DmaBufferBuilder};

/// Bytes of each TRANSFER of the long submission (less on small segments).
const LONG_CHUNK: u64 = 32 << 20;
/// TRANSFERs in the long submission.
const LONG_PACKETS: u32 = 48;
/// Bytes sampled at each of three places of the copied region.
const SAMPLE: u64 = 4096;
/// Aperture pages the reset test maps.
const RESET_PAGE: u64 = 0x3800;

/// The long submission: a FENCE (its event tells the driver the submission is running), then
/// `LONG_PACKETS` TRANSFERs of `chunk` bytes back and forth between `[0, chunk)` and
/// `[chunk, 2 * chunk)` of the VRAM segment. An even count leaves both regions holding what the
/// first one held.
struct Long {
    chunk: u64,
    buffer: DmaBufferBuilder,
    samples: [u64; 3],
    tag: u64,
    start_fence: u32,
}

impl Long {
    /// Bytes of each TRANSFER on the engine's segment.
    fn chunk(e: &Engine) -> u64 {
        LONG_CHUNK.min(e.vram.size / 4 / PAGE * PAGE)
    }

    /// Builds it, taking the next fence id for its FENCE, and writes the samples.
    fn new(e: &mut Engine, tag: u64) -> Outcome<Self> {
        let chunk = Self::chunk(e);
        e.require_vram(0, 2 * chunk)?;
        let start_fence = e.fence();
        let mut buffer = DmaBufferBuilder::new();
        buffer.push(&packets::fence(start_fence));
        for i in 0..LONG_PACKETS {
            let (from, to) = if i % 2 == 0 { (0, chunk) } else { (chunk, 0) };
            buffer.push_transfer(&packets::transfer(chunk, e.vram_at(from), e.vram_at(to)));
        }
        let samples = [0, chunk / 2 + 0x123, chunk - SAMPLE];
        for s in samples {
            e.vram.write(s, &pattern_bytes(tag, s, SAMPLE));
        }
        Ok(Self {
            chunk,
            buffer,
            samples,
            tag,
            start_fence,
        })
    }

    /// Packets in all.
    fn packets(&self) -> u32 {
        LONG_PACKETS + 1
    }

    /// Waits for the FENCE event of its first packet: the engine is running it.
    fn wait_running(&self, e: &mut Engine, c: &mut Ctx) -> Outcome {
        let event = c.next_event(e, "the long submission's first packet (a FENCE)")?;
        ensure(
            event.resp.kind == WDDM_GPU_EVENT_FENCE && event.resp.fence_id == self.start_fence,
            || {
                format!(
                    "expected the FENCE {} event of the long submission, got {event}",
                    self.start_fence
                )
            },
        )
    }

    /// Bytes it moves in all.
    fn bytes(&self) -> u64 {
        self.chunk * u64::from(LONG_PACKETS)
    }

    /// Checks both regions hold the samples written at the start.
    fn check(&self, e: &Engine) -> Outcome {
        for s in self.samples {
            let want = pattern_bytes(self.tag, s, SAMPLE);
            check_vram(e, s, &want, "long submission: first region")?;
            check_vram(e, self.chunk + s, &want, "long submission: second region")?;
        }
        Ok(())
    }
}

/// The long submission (from extra DMA buffer 0) and a short one behind it (buffer 1), both
/// posted, with their tickets.
struct LongThenShort {
    long: Long,
    a: WddmGpuCmdSubmit,
    b: WddmGpuCmdSubmit,
    ta: gpu::Ticket,
    tb: gpu::Ticket,
}

/// Posts a [`Long`] submission of pattern `tag`, then one of the single TRANSFER `short`;
/// returns once the long one is running (its FENCE event came).
fn post_long_then_short(
    e: &mut Engine,
    c: &mut Ctx,
    tag: u64,
    short: &WddmGpuPacketTransfer,
) -> Outcome<LongThenShort> {
    let long = Long::new(e, tag)?;
    let a = c.prepare_extra(e, 0, &long.buffer)?;
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(short);
    let b = c.prepare_extra(e, 1, &buffer)?;
    let ta = e.device.control.post_submit(&a)?;
    let tb = e.device.control.post_submit(&b)?;
    long.wait_running(e, c)?;
    Ok(LongThenShort { long, a, b, ta, tb })
}

/// Waits for a posted submission and decodes it.
fn collect(
    e: &mut Engine,
    cmd: &WddmGpuCmdSubmit,
    ticket: gpu::Ticket,
) -> Outcome<(Completion, Answer)> {
    let timeout = e.device.control.timeout();
    let answer = e.device.control.wait(ticket, timeout).map_err(|err| {
        Failure(format!(
            "submission fence {}: {err}",
            cmd.submission_fence_id
        ))
    })?;
    Ok((gpu::decode_submit(cmd, &answer.bytes)?, answer))
}

/// The device's step between two interruption checks (programming guide, section 4): a packet
/// stopped part way moved a whole number of them.
const STOP_STEP: u64 = 1 << 20;

/// Checks a submission stopped part way through the long buffer: no packet after the ones
/// reported, and in `bytes_transferred` the whole packets and the part of the stopped one it
/// moved, a whole number of 1 MiB steps short of its end.
fn stopped_part_way(long: &Long, done: &Completion, status: SubmitStatus) -> Outcome {
    expect_status(done, status)?;
    let whole = u64::from(done.packets_completed.saturating_sub(1)) * long.chunk;
    let part = done.bytes_transferred.checked_sub(whole);
    ensure(
        (1..long.packets()).contains(&done.packets_completed)
            && part.is_some_and(|part| part < long.chunk && part % STOP_STEP == 0),
        || {
            format!(
                "the long submission (a FENCE, then {LONG_PACKETS} x {:#x} bytes) should have \
                 stopped after its FENCE ran and before its end, whole packets and the stopped \
                 one's whole 1 MiB steps counted: {done}",
                long.chunk
            )
        },
    )
}

/// PREEMPT while a long submission runs and a short one waits: the answer names the running
/// one as `preempted_fence` with both counted, both come back PREEMPTED in submission order,
/// the status page records the preemption and does not complete either; both resubmitted with
/// their fence ids then complete. A PREEMPT with nothing pending answers fence 0.
pub fn preempt(e: &mut Engine, c: &mut Ctx) -> Outcome {
    c.kmd_ready(e)?;
    let end = 2 * Long::chunk(e);
    let (b_src, b_dst, b_len) = (end + 0x1000, end + 0x4_0007, 0x1_0001u64);
    e.require_vram(b_dst, b_len)?;
    let b_data = pattern_bytes(0x7072_6566, 0, b_len);
    e.vram.write(b_src, &b_data);
    e.guard_vram(b_dst, b_len, 0x7072);
    // A completed submission first, so LastCompletedFenceId is known.
    let warm_done = e.transfer(8, e.vram_at(b_src), e.vram_at(b_dst + 0x2_0000))?;
    expect_done(&warm_done, 8, 1)?;
    let last_submission = warm_done.fence;
    let before = c.status.header();
    // Fences in order: the long submission's FENCE packet, then the two submissions.
    let short = packets::transfer(b_len, e.vram_at(b_src), e.vram_at(b_dst));
    let LongThenShort { long, a, b, ta, tb } = post_long_then_short(e, c, 0x7072_6565, &short)?;
    let resp = e.device.control.preempt()?;
    let (done_a, ans_a) = collect(e, &a, ta)?;
    let (done_b, ans_b) = collect(e, &b, tb)?;
    let (fa, fb) = (a.submission_fence_id, b.submission_fence_id);
    ensure(
        resp.preempted_fence == fa && resp.preempted_count == 2,
        || {
            format!(
                "PREEMPT answered preempted_fence {} count {}; expected {fa}, 2 (long submission: \
             {done_a}; queued one: {done_b})",
                resp.preempted_fence, resp.preempted_count
            )
        },
    )?;
    stopped_part_way(&long, &done_a, SubmitStatus::Preempted)
        .map_err(during("the running submission"))?;
    expect_status(&done_b, SubmitStatus::Preempted).map_err(during("the queued submission"))?;
    ensure(
        done_b.packets_completed == 0 && done_b.bytes_transferred == 0,
        || format!("the queued submission ran before it was preempted: {done_b}"),
    )?;
    ensure(ans_a.order < ans_b.order, || {
        format!(
            "PREEMPTED completions out of submission order: fence {fa} #{}, fence {fb} #{}",
            ans_a.order, ans_b.order
        )
    })?;
    e.check_vram_guard(b_dst, b_len, 0x7072)?;
    // The long submission's FENCE packet ran (its event came): it is the latest completed
    // fence; the preempted submissions are not completed.
    let latest = long.start_fence;
    let page = c.status.header();
    ensure(
        page.preempted_fence == fa
            && page.completed_fence == latest
            && page.submissions_completed == before.submissions_completed,
        || {
            format!(
                "status page after PREEMPT: preempted_fence {} completed_fence {} \
                 submissions_completed {}; expected {fa}, {latest} (the FENCE packet that ran), \
                 {}",
                page.preempted_fence,
                page.completed_fence,
                page.submissions_completed,
                before.submissions_completed
            )
        },
    )?;
    // LastCompletedFenceId: the latest completed fence when the preemption happened, which the
    // driver already reported through the FENCE event; it must not go back to the last
    // completed submission.
    ensure(
        resp.last_completed_fence == latest && page.last_completed_at_preempt == latest,
        || {
            format!(
                "PREEMPT answered last_completed_fence {} and the status page says \
                 last_completed_at_preempt {}, but the latest completed fence was {latest}: the \
                 preempted submission's FENCE packet {latest} ran and was delivered as a FENCE \
                 event, and the status page's completed_fence is {}; {last_submission} is only \
                 the last completed submission, so DXGK_INTERRUPT_DMA_PREEMPTED's \
                 LastCompletedFenceId would go back below a fence already reported completed",
                resp.last_completed_fence, page.last_completed_at_preempt, page.completed_fence,
            )
        },
    )?;
    c.no_more_events(e, "PREEMPT")?;
    println!(
        "PAGING preempt: fence {fa} stopped after {} of {} packets (a FENCE, then {:#x}-byte \
         TRANSFERs), fence {fb} returned unrun; answer preempted_fence {} count {} \
         last_completed {}",
        done_a.packets_completed,
        long.packets(),
        long.chunk,
        resp.preempted_fence,
        resp.preempted_count,
        resp.last_completed_fence
    );

    // Resubmitted with their fence ids, both complete, in order.
    let ta = e.device.control.post_submit(&a)?;
    let tb = e.device.control.post_submit(&b)?;
    let (done_a, ans_a) = collect(e, &a, ta)?;
    let (done_b, ans_b) = collect(e, &b, tb)?;
    expect_done(&done_a, long.bytes(), long.packets()).map_err(during("resubmitted long"))?;
    expect_done(&done_b, b_len, 1).map_err(during("resubmitted short"))?;
    ensure(ans_a.order < ans_b.order, || {
        "resubmissions completed out of order".into()
    })?;
    long.check(e)?;
    long.wait_running(e, c)?;
    check_vram(e, b_dst, &b_data, "queued submission, resubmitted")?;
    e.check_vram_guard(b_dst, b_len, 0x7072)?;
    let page = c.status.header();
    ensure(
        page.completed_fence == fb
            && page.submissions_completed == before.submissions_completed + 2,
        || {
            format!(
                "status page after the resubmissions: completed_fence {} (want {fb}), \
                 submissions_completed {} (want {})",
                page.completed_fence,
                page.submissions_completed,
                before.submissions_completed + 2
            )
        },
    )?;

    // Nothing pending.
    let idle = e.device.control.preempt()?;
    ensure(
        idle.preempted_fence == 0 && idle.preempted_count == 0 && idle.last_completed_fence == fb,
        || {
            format!(
                "PREEMPT with nothing pending answered preempted_fence {} count {} \
                 last_completed {} (want 0, 0, {fb})",
                idle.preempted_fence, idle.preempted_count, idle.last_completed_fence
            )
        },
    )?;
    let after = c.status.header();
    ensure(after.preempted_fence == fa, || {
        format!(
            "an idle PREEMPT changed the status page's preempted_fence to {}",
            after.preempted_fence
        )
    })?;
    c.no_more_events(e, "the resubmissions")
}

/// RESET while a long submission runs and a short one waits: answered OK_NODATA, both come back
/// RESET (in order), every posted WAIT_EVENT comes back CANCELLED, the status page is no longer
/// written, every aperture mapping is gone (TRANSFERs through it and a DMA buffer in it fail
/// with UnmappedAperture), and VRAM keeps its contents. Then the driver recovers: registers the
/// page again, posts events, maps its DMA buffer, and the device works.
pub fn reset(e: &mut Engine, c: &mut Ctx) -> Outcome {
    c.kmd_ready(e)?;
    let end = 2 * Long::chunk(e);
    // Pages mapped before the reset, used through the aperture-resident DMA buffer.
    let q = c.pieces(3)?;
    let q_bytes = pattern_bytes(0x7265_7366, 0, 3 * PAGE);
    write_pieces(e, &q, &q_bytes);
    c.map(e, RESET_PAGE, &q)?;
    let scratch = end + 0x10_0000;
    e.require_vram(scratch, 4 * PAGE)?;
    // Run from the aperture-resident DMA buffer before the reset and again after recovery.
    let mut read_back = DmaBufferBuilder::new();
    read_back.push_transfer(&packets::transfer(
        3 * PAGE,
        c.ap(RESET_PAGE * PAGE),
        e.vram_at(scratch),
    ));
    let done = c.run_in_aperture(e, &read_back)?;
    expect_done(&done, 3 * PAGE, 1).map_err(during("before the reset: aperture -> VRAM"))?;
    check_vram(e, scratch, &q_bytes, "before the reset: aperture -> VRAM")?;
    // VRAM the reset must keep: the engine's segment and every other memory segment.
    let kept_at = end + 0x20_0001;
    let kept = pattern_bytes(0x7265_7367, 0, 0x1_0000);
    e.require_vram(kept_at, kept.len() as u64)?;
    e.vram.write(kept_at, &kept);
    let others: Vec<_> = e
        .layout
        .memory_segments()
        .filter(|s| s.desc.id != e.segment.desc.id && s.desc.size >= 0x10_0000)
        .cloned()
        .collect();
    let other_kept = pattern_bytes(0x7265_7368, 0, 0x3001);
    for s in &others {
        write_segment(e, c, s, 0x8_0003, &other_kept)?;
    }

    // Fences in order: the long submission's FENCE packet, then the two submissions.
    let short = packets::transfer(PAGE, e.vram_at(kept_at), e.vram_at(scratch));
    let LongThenShort { long, a, b, ta, tb } = post_long_then_short(e, c, 0x7265_7365, &short)?;
    let (fa, fb) = (a.submission_fence_id, b.submission_fence_id);
    let posted = c.events.posted();
    c.reset(e)?;
    let (done_a, ans_a) = collect(e, &a, ta)?;
    let (done_b, ans_b) = collect(e, &b, tb)?;
    stopped_part_way(&long, &done_a, SubmitStatus::Reset)
        .map_err(during("the running submission"))?;
    expect_status(&done_b, SubmitStatus::Reset).map_err(during("the queued submission"))?;
    ensure(done_b.packets_completed == 0, || {
        format!("the queued submission ran: {done_b}")
    })?;
    ensure(ans_a.order < ans_b.order, || {
        format!(
            "RESET completions out of submission order: #{} then #{}",
            ans_a.order, ans_b.order
        )
    })?;
    let timeout = e.device.control.timeout();
    let cancelled = c.events.collect_all(&mut e.device.control, timeout)?;
    ensure(
        cancelled.len() == posted
            && cancelled
                .iter()
                .all(|ev| ev.resp.kind == WDDM_GPU_EVENT_CANCELLED),
        || {
            let kinds: Vec<&str> = cancelled
                .iter()
                .map(|ev| event_kind_name(ev.resp.kind))
                .collect();
            format!(
                "{posted} WAIT_EVENTs were posted; the reset returned {} ({})",
                cancelled.len(),
                kinds.join(", ")
            )
        },
    )?;
    let page_after_reset = c.status.header();

    // Every mapping is gone: a TRANSFER through the aperture, and the DMA buffer in it.
    let done = e.transfer(3 * PAGE, c.ap(RESET_PAGE * PAGE), e.vram_at(scratch))?;
    expect_status(&done, SubmitStatus::UnmappedAperture).map_err(during(
        "after the reset: TRANSFER from pages mapped before it",
    ))?;
    ensure(done.fault_address == RESET_PAGE * PAGE, || {
        format!("fault_address should name aperture page {RESET_PAGE:#x}: {done}")
    })?;
    let mut b = DmaBufferBuilder::new();
    b.push_transfer(&packets::transfer(
        8,
        e.vram_at(kept_at),
        e.vram_at(scratch),
    ));
    let cmd = c.prepare_in_aperture_unmapped(e, &b)?;
    let done = e.submit(&cmd)?;
    expect_status(&done, SubmitStatus::UnmappedAperture)
        .map_err(during("after the reset: a DMA buffer in the aperture"))?;
    compare(
        "pages mapped before the reset",
        &read_pieces(e, &q),
        &q_bytes,
        0,
    )?;
    let page = c.status.header();
    ensure(page == page_after_reset, || {
        format!(
            "the device wrote the status page after the reset unregistered it (fault_head {} -> \
             {}, completed_fence {} -> {})",
            page_after_reset.fault_head,
            page.fault_head,
            page_after_reset.completed_fence,
            page.completed_fence
        )
    })?;

    // VRAM kept.
    check_vram(e, kept_at, &kept, "VRAM written before the reset")?;
    for s in &others {
        let got = read_segment(e, c, s, 0x8_0003, other_kept.len() as u64)?;
        compare(
            &format!("segment {} written before the reset", s.desc.id),
            &got,
            &other_kept,
            0x8_0003,
        )?;
    }

    // Recovery: register again, post events, map the DMA buffer again, run from it.
    c.kmd_ready(e)?;
    c.map(e, RESET_PAGE, &q)?;
    let done = c.run_in_aperture(e, &read_back)?;
    expect_done(&done, 3 * PAGE, 1).map_err(during("after recovery: aperture -> VRAM"))?;
    check_vram(e, scratch, &q_bytes, "after recovery")?;
    let page = c.status.header();
    ensure(
        page.completed_fence == done.fence && page.fault_head == 0,
        || {
            format!(
                "re-registered status page: completed_fence {} (want {}), fault_head {}",
                page.completed_fence, done.fence, page.fault_head
            )
        },
    )?;
    c.no_more_events(e, "recovery")?;
    println!(
        "PAGING reset: fence {fa} stopped after {} of {} packets, fence {fb} dropped, {posted} \
         WAIT_EVENTs cancelled, mappings gone, VRAM kept",
        done_a.packets_completed,
        long.packets()
    );
    e.healthy(0x7265_7369)
}
