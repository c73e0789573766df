//! The paging node's timeout detection and recovery (TDR), as a WDDM KMD and the GPU scheduler
//! run it between them: every submission has a timeout (the TDR delay); when it runs out the
//! driver asks the device how the node is doing (`QUERY_ENGINE_STATUS`, what
//! `DxgkDdiQueryCurrentFence` and `DxgkDdiQueryEngineStatus` send) and then:
//!
//! - the answer was released by the query, or the current fence covers the submission: a lost
//!   interrupt; the answer is taken and the driver goes on (`recovered lost interrupt fence N`);
//! - the node is not responsive (hung): the TDR path ([`PagingNode::drain`]): `RESET`
//!   (`DxgkDdiResetFromTimeout`), every submission in flight comes back (status `RESET`, the
//!   aborted fences are noted), the posted WAIT_EVENTs come back cancelled, the status page is
//!   registered again and WAIT_EVENTs posted again (`DxgkDdiRestartFromTimeout`), a FENCE
//!   submission proves the device works, then what is resubmittable is resubmitted with its
//!   fence and the rest is reported;
//! - the node is responsive and the submission still runs: the scheduler's preemption
//!   (`PREEMPT`): preempted, the submissions come back `PREEMPTED` and are resubmitted; a
//!   preemption that stops nothing while work runs (`preempted_count` 0) is a refused one: the
//!   TDR path.
//!
//! A submission that ends with a packet fault (`DXGK_INTERRUPT_DMA_FAULTED`) is reported with the
//! status page's fault records, and the TDR path follows. More than [`TDR_LIMIT`] resets in one
//! drain is `VIDEO_TDR_FAILURE`: the drain fails.
//!
//! The virtual node (node 1) has its own, engine-level TDR ([`run_virtual`]): a submission
//! unanswered after the delay is met with `QUERY_ENGINE_STATUS` of node 1 and `RESET_ENGINE`
//! (`DxgkDdiResetEngine`), which answers it `RESET`; the paging node is not touched.
//!
//! Every step prints one `TDR ...` line. Submissions given to the node must not live in the
//! engine's own DMA buffer ([`Engine::prepare`]): the FENCE that proves the device works after a
//! reset is built there (use [`Ctx::prepare_extra`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wddm_gpu_abi::build::gpuva::reset_engine;
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual, WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL,
};
use wddm_gpu_abi::status::{
    WddmGpuFaultRecord, WddmGpuRespEngineStatus, WddmGpuRespPreempt, WDDM_GPU_ENGINE_STATUS_PAUSED,
    WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use zerocopy::IntoBytes;

use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Answer, Completion, Ticket};
use crate::kmd::{describe_record, event_kind_name, Event};
use crate::packets::{self, DmaBufferBuilder};
use crate::scenario::paging::Ctx;

/// Windows' default `TdrDelay`: how long a submission may go unanswered.
pub const TDR_DELAY: Duration = Duration::from_secs(2);
/// Resets one drain may need (`TdrLimitCount`); one more is `VIDEO_TDR_FAILURE`.
pub const TDR_LIMIT: usize = 3;
/// Preemptions of one submission after its timeout before the driver takes it for hung.
pub const PREEMPT_LIMIT: u32 = 2;
/// Poll interval while waiting for an answer.
const POLL: Duration = Duration::from_micros(200);

/// A submission the driver hands the node, and whether it may run again after a reset (its DMA
/// buffer and what it reads do not depend on state a reset clears, such as aperture mappings).
#[derive(Clone, Copy, Debug)]
pub struct Submission {
    /// The SUBMIT request.
    pub cmd: WddmGpuCmdSubmit,
    /// Resubmit it after a reset aborted it; otherwise it is reported.
    pub resubmit: bool,
}

/// A submission in flight.
struct InFlight {
    sub: Submission,
    ticket: Ticket,
    /// When it was first posted.
    first_posted: Instant,
    /// When it was last posted (its timeout counts from then, or from the last completion).
    posted: Instant,
    preempted: u32,
    resubmitted_after_reset: u32,
}

/// How a submission ended.
#[derive(Clone, Copy, Debug)]
pub struct Ended {
    /// Its fence.
    pub fence: u32,
    /// Its last answer.
    pub done: Completion,
    /// The answer was withheld and taken after QUERY_ENGINE_STATUS released it.
    pub lost_interrupt: bool,
    /// Times a PREEMPT after its timeout stopped it (it was resubmitted each time).
    pub preempted: u32,
    /// Times a reset aborted it and it was resubmitted.
    pub resubmitted_after_reset: u32,
    /// A reset aborted it and it was not resubmittable: reported, not run.
    pub reported: bool,
    /// From its first post to its last answer.
    pub elapsed: Duration,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fence {}: {} after {} ms (lost interrupt {}, preempted {}, resubmitted after reset \
             {}, reported {})",
            self.fence,
            self.done.status.name(),
            self.elapsed.as_millis(),
            self.lost_interrupt,
            self.preempted,
            self.resubmitted_after_reset,
            self.reported
        )
    }
}

/// One reset of the TDR path.
#[derive(Clone, Debug, Default)]
pub struct ResetReport {
    /// Why the driver reset the node.
    pub why: String,
    /// Fences that came back with status RESET.
    pub aborted: Vec<u32>,
    /// Of those, the ones resubmitted.
    pub resubmitted: Vec<u32>,
    /// Of those, the ones reported (not resubmittable).
    pub reported: Vec<u32>,
    /// The events the posted WAIT_EVENTs brought back (CANCELLED, and any taken before).
    pub events: Vec<Event>,
    /// The fence of the FENCE submission that proved the device works after it.
    pub probe_fence: u32,
}

/// One PREEMPT of the recovery.
#[derive(Clone, Copy, Debug)]
pub struct PreemptReport {
    /// The answer.
    pub resp: WddmGpuRespPreempt,
    /// From sending it to its answer.
    pub took: Duration,
}

/// One timeout.
#[derive(Clone, Copy, Debug)]
pub struct TimeoutReport {
    /// The submission that timed out.
    pub fence: u32,
    /// The status page's completed fence when it did (0 without a registered page).
    pub page_fence: u32,
    /// What QUERY_ENGINE_STATUS answered.
    pub status: WddmGpuRespEngineStatus,
}

/// What a drain did.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Every submission, in the order they ended.
    pub ended: Vec<Ended>,
    /// Each timeout and the engine status it found.
    pub timeouts: Vec<TimeoutReport>,
    /// Each lost interrupt recovered (the fence).
    pub lost_interrupts: Vec<u32>,
    /// Each PREEMPT sent after a timeout.
    pub preempts: Vec<PreemptReport>,
    /// Each reset.
    pub resets: Vec<ResetReport>,
    /// Faulted submissions: the completion and the status page's fault records taken for it.
    pub faults: Vec<(Completion, Vec<WddmGpuFaultRecord>)>,
}

impl Recovery {
    /// How fence `fence` ended.
    pub fn of(&self, fence: u32) -> Outcome<&Ended> {
        self.ended
            .iter()
            .find(|e| e.fence == fence)
            .ok_or_else(|| Failure(format!("fence {fence} never ended")))
    }
}

/// How a virtual-node submission ended under [`run_virtual`].
#[derive(Clone, Copy, Debug)]
pub struct VirtualRun {
    /// Its answer: in time, or the one RESET_ENGINE brought.
    pub answer: WddmGpuRespSubmitVirtual,
    /// When it timed out: what QUERY_ENGINE_STATUS of node 1 answered before RESET_ENGINE.
    pub timeout: Option<WddmGpuRespEngineStatus>,
}

/// Runs a SUBMIT_VIRTUAL with the TDR delay, as the OS's engine-level TDR does for node 1: an
/// answer in time is returned as it is; none means a timeout: `QUERY_ENGINE_STATUS` of node 1
/// (`DxgkDdiQueryEngineStatus`), then `RESET_ENGINE` (`DxgkDdiResetEngine`), whose answer must
/// bring the submission back.
pub fn run_virtual(
    e: &mut Engine,
    cmd: &WddmGpuCmdSubmitVirtual,
    delay: Duration,
) -> Outcome<VirtualRun> {
    let fence = cmd.submission_fence_id;
    let ticket = e.device.control.post_submit_virtual(cmd)?;
    if let Some(answer) = wait_until(e, ticket, Instant::now() + delay)? {
        let answer = gpu::decode_submit_virtual(cmd, &answer.bytes)?;
        return Ok(VirtualRun {
            answer,
            timeout: None,
        });
    }
    let status = e
        .device
        .control
        .query_engine_status(WDDM_GPU_NODE_VIRTUAL)?;
    println!(
        "TDR virtual node: fence {fence} timed out after {} ms; engine status {}",
        delay.as_millis(),
        status_text(&status)
    );
    reset_virtual_node(e)?;
    let answer = wait_until(e, ticket, Instant::now() + delay)?
        .ok_or_else(|| Failure(format!("fence {fence}: no answer after RESET_ENGINE")))?;
    let answer = gpu::decode_submit_virtual(cmd, &answer.bytes)?;
    println!(
        "TDR virtual node: RESET_ENGINE; fence {fence} answered {}",
        SubmitStatus::from_raw(answer.status).map_or("?", SubmitStatus::name)
    );
    Ok(VirtualRun {
        answer,
        timeout: Some(status),
    })
}

/// RESET_ENGINE of the virtual node (`DxgkDdiResetEngine`), which must be answered OK.
pub fn reset_virtual_node(e: &mut Engine) -> Outcome {
    ensure(
        e.device
            .control
            .command("RESET_ENGINE", reset_engine().as_bytes())?,
        || "RESET_ENGINE refused".into(),
    )
}

/// Whether fence `current` is at or past `fence` (fences wrap).
pub fn fence_reached(current: u32, fence: u32) -> bool {
    current.wrapping_sub(fence) < 0x8000_0000
}

/// The engine status in words.
pub fn status_text(s: &WddmGpuRespEngineStatus) -> String {
    let mut flags = Vec::new();
    if s.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE != 0 {
        flags.push("RESPONSIVE");
    }
    if s.flags & WDDM_GPU_ENGINE_STATUS_PAUSED != 0 {
        flags.push("PAUSED");
    }
    if flags.is_empty() {
        flags.push("not responsive");
    }
    format!(
        "{} current_fence {} running_fence {} queued {} released {}",
        flags.join("|"),
        s.current_fence,
        s.running_fence,
        s.queued,
        s.released
    )
}

/// The paging node with its submissions in flight and the TDR delay.
pub struct PagingNode {
    /// How long a submission may go unanswered.
    pub delay: Duration,
    in_flight: VecDeque<InFlight>,
    last_progress: Instant,
}

impl PagingNode {
    /// A node whose submissions time out after `delay`.
    pub fn new(delay: Duration) -> Self {
        Self {
            delay,
            in_flight: VecDeque::new(),
            last_progress: Instant::now(),
        }
    }

    /// Submissions posted and not yet ended.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Posts a submission (`DxgkDdiSubmitCommand`); [`Self::drain`] waits for it.
    pub fn post(&mut self, e: &mut Engine, sub: Submission) -> Outcome {
        let ticket = e.device.control.post_submit(&sub.cmd)?;
        let now = Instant::now();
        if self.in_flight.is_empty() {
            self.last_progress = now;
        }
        self.in_flight.push_back(InFlight {
            sub,
            ticket,
            first_posted: now,
            posted: now,
            preempted: 0,
            resubmitted_after_reset: 0,
        });
        Ok(())
    }

    /// Waits for every submission in flight, recovering from timeouts, lost interrupts, faults
    /// and refused preemptions as described in the module; returns what happened. Fails when the
    /// device breaks a rule on the way, a recovery step fails, or the resets exceed
    /// [`TDR_LIMIT`].
    pub fn drain(&mut self, e: &mut Engine, c: &mut Ctx) -> Outcome<Recovery> {
        let mut rec = Recovery::default();
        while let Some(front) = self.in_flight.front() {
            let deadline = front.posted.max(self.last_progress) + self.delay;
            let ticket = front.ticket;
            match wait_until(e, ticket, deadline)? {
                Some(answer) => self.answered(e, c, &mut rec, &answer, false)?,
                None => self.timed_out(e, c, &mut rec)?,
            }
        }
        Ok(rec)
    }

    /// The front submission's answer arrived (after a lost interrupt when `lost`).
    fn answered(
        &mut self,
        e: &mut Engine,
        c: &mut Ctx,
        rec: &mut Recovery,
        answer: &Answer,
        lost: bool,
    ) -> Outcome {
        let f = self
            .in_flight
            .pop_front()
            .ok_or_else(|| Failure("an answer with nothing in flight".into()))?;
        self.last_progress = Instant::now();
        let done = gpu::decode_submit(&f.sub.cmd, &answer.bytes)?;
        let ended = ended(&f, done, lost, false);
        match done.status {
            SubmitStatus::Ok => {
                rec.ended.push(ended);
                Ok(())
            }
            SubmitStatus::Preempted | SubmitStatus::Reset => Err(Failure(format!(
                "fence {} came back {} though the driver sent no PREEMPT or RESET: {done}",
                done.fence,
                done.status.name()
            ))),
            _ => {
                // DXGK_INTERRUPT_DMA_FAULTED: report, then the TDR path.
                let records = if c.registered {
                    c.status.consume_faults()
                } else {
                    Vec::new()
                };
                println!("TDR fence {} faulted: {done}", done.fence);
                for r in &records {
                    println!("TDR   fault record: {}", describe_record(r));
                }
                rec.faults.push((done, records));
                rec.ended.push(ended);
                self.reset(
                    e,
                    c,
                    rec,
                    format!(
                        "fence {} faulted with status {} at packet offset {:#x}",
                        done.fence,
                        done.status.name(),
                        done.fault_packet_offset
                    ),
                )
            }
        }
    }

    /// The front submission's timeout ran out.
    fn timed_out(&mut self, e: &mut Engine, c: &mut Ctx, rec: &mut Recovery) -> Outcome {
        let (fence, ticket, waited, preempted) = {
            let f = &self.in_flight[0];
            (
                f.sub.cmd.submission_fence_id,
                f.ticket,
                f.posted.elapsed(),
                f.preempted,
            )
        };
        let page_fence = if c.registered {
            c.status.header().completed_fence
        } else {
            0
        };
        // DxgkDdiQueryCurrentFence / DxgkDdiQueryEngineStatus.
        let status = e.device.control.query_engine_status(WDDM_GPU_NODE_PAGING)?;
        println!(
            "TDR timeout: fence {fence} unanswered after {} ms (status page completed_fence \
             {page_fence}); QUERY_ENGINE_STATUS: {}",
            waited.as_millis(),
            status_text(&status)
        );
        rec.timeouts.push(TimeoutReport {
            fence,
            page_fence,
            status,
        });
        if status.released > 0 || fence_reached(status.current_fence, fence) {
            // Every released answer came before the query's: it must be on the used ring now.
            let answer = e.device.control.try_take(ticket)?.ok_or_else(|| {
                Failure(format!(
                    "QUERY_ENGINE_STATUS says fence {fence} completed (current_fence {}, \
                     released {}) but its answer is not on the used ring",
                    status.current_fence, status.released
                ))
            })?;
            println!(
                "TDR recovered lost interrupt fence {fence} (released {}, current_fence {})",
                status.released, status.current_fence
            );
            rec.lost_interrupts.push(fence);
            return self.answered(e, c, rec, &answer, true);
        }
        if status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE == 0 {
            return self.reset(
                e,
                c,
                rec,
                format!("engine not responsive, fence {} hung", status.running_fence),
            );
        }
        if preempted >= PREEMPT_LIMIT {
            return self.reset(
                e,
                c,
                rec,
                format!("fence {fence} still unanswered after {preempted} preemption(s)"),
            );
        }
        // The scheduler's preemption request (DxgkDdiPreemptCommand).
        let sent = Instant::now();
        let resp = e.device.control.preempt()?;
        let took = sent.elapsed();
        println!(
            "TDR preempt: answered after {} ms: preempted_fence {} preempted_count {} \
             last_completed_fence {}",
            took.as_millis(),
            resp.preempted_fence,
            resp.preempted_count,
            resp.last_completed_fence
        );
        rec.preempts.push(PreemptReport { resp, took });
        if resp.preempted_count == 0 {
            // It may have ended on its own meanwhile.
            if let Some(answer) = e.device.control.try_take(ticket)? {
                return self.answered(e, c, rec, &answer, false);
            }
            return self.reset(
                e,
                c,
                rec,
                format!("PREEMPT refused (preempted_count 0) while fence {fence} runs"),
            );
        }
        self.resubmit_preempted(e, rec)
    }

    /// After a PREEMPT that stopped something: every submission in flight comes back
    /// (PREEMPTED, or completed before the preemption); the preempted ones are resubmitted in
    /// order with their fences.
    fn resubmit_preempted(&mut self, e: &mut Engine, rec: &mut Recovery) -> Outcome {
        let mut again = Vec::new();
        for (mut f, done) in self.collect_in_flight(e, "the PREEMPT")? {
            let fence = f.sub.cmd.submission_fence_id;
            match done.status {
                SubmitStatus::Preempted => {
                    f.preempted += 1;
                    again.push(f);
                }
                SubmitStatus::Ok => rec.ended.push(ended(&f, done, false, false)),
                _ => {
                    return Err(Failure(format!(
                        "fence {fence} after the PREEMPT: expected preempted or ok, got {done}"
                    )))
                }
            }
        }
        let fences: Vec<u32> = again
            .iter()
            .map(|f| f.sub.cmd.submission_fence_id)
            .collect();
        self.post_again(e, again)?;
        println!("TDR resubmitted preempted fences {fences:?}");
        Ok(())
    }

    /// Every submission in flight with its answer, each waited for (at most the device's
    /// timeout) now that `after` (a PREEMPT or a RESET) brings them all back.
    fn collect_in_flight(
        &mut self,
        e: &mut Engine,
        after: &str,
    ) -> Outcome<Vec<(InFlight, Completion)>> {
        let timeout = e.device.control.timeout();
        std::mem::take(&mut self.in_flight)
            .into_iter()
            .map(|f| {
                let fence = f.sub.cmd.submission_fence_id;
                let answer = e
                    .device
                    .control
                    .wait(f.ticket, timeout)
                    .map_err(|err| Failure(format!("fence {fence} after {after}: {err}")))?;
                let done = gpu::decode_submit(&f.sub.cmd, &answer.bytes)?;
                Ok((f, done))
            })
            .collect()
    }

    /// Posts `again` once more, in order, as in flight from now on.
    fn post_again(&mut self, e: &mut Engine, again: Vec<InFlight>) -> Outcome {
        for mut f in again {
            f.ticket = e.device.control.post_submit(&f.sub.cmd)?;
            f.posted = Instant::now();
            self.in_flight.push_back(f);
        }
        self.last_progress = Instant::now();
        Ok(())
    }

    /// The TDR path: RESET, the in-flight submissions collected, the status page and events
    /// again, the device proved to work, resubmission or report.
    fn reset(&mut self, e: &mut Engine, c: &mut Ctx, rec: &mut Recovery, why: String) -> Outcome {
        ensure(rec.resets.len() < TDR_LIMIT, || {
            format!(
                "VIDEO_TDR_FAILURE: a reset number {} needed ({why}); the limit is {TDR_LIMIT}",
                rec.resets.len() + 1
            )
        })?;
        println!("TDR reset: {why}");
        let posted = c.events.posted();
        // DxgkDdiResetFromTimeout.
        c.reset(e)?;
        let mut report = ResetReport {
            why,
            ..ResetReport::default()
        };
        let mut again = Vec::new();
        for (mut f, done) in self.collect_in_flight(e, "the RESET")? {
            let fence = f.sub.cmd.submission_fence_id;
            match done.status {
                SubmitStatus::Reset => {
                    report.aborted.push(fence);
                    if f.sub.resubmit {
                        f.resubmitted_after_reset += 1;
                        report.resubmitted.push(fence);
                        again.push(f);
                    } else {
                        report.reported.push(fence);
                        rec.ended.push(ended(&f, done, false, true));
                    }
                }
                // Completed before the reset took effect (a withheld answer the RESET released,
                // or one that ended meanwhile): it ran.
                SubmitStatus::Ok => rec.ended.push(ended(&f, done, false, false)),
                _ => {
                    println!("TDR fence {fence} ended with a fault at the reset: {done}");
                    rec.ended.push(ended(&f, done, false, false));
                }
            }
        }
        let timeout = e.device.control.timeout();
        report.events = c.events.collect_all(&mut e.device.control, timeout)?;
        let kinds: Vec<&str> = report
            .events
            .iter()
            .map(|ev| event_kind_name(ev.resp.kind))
            .collect();
        println!(
            "TDR reset answered: aborted fences {:?}; {posted} WAIT_EVENT(s) were posted, came \
             back: {}",
            report.aborted,
            kinds.join(", ")
        );
        // DxgkDdiRestartFromTimeout: the status page and the WAIT_EVENTs again.
        c.kmd_ready(e)?;
        report.probe_fence = probe(e)?;
        println!(
            "TDR restart: status page {:#x} registered again, {} WAIT_EVENT(s) posted, FENCE {} \
             ran: the device works",
            c.status.phys(),
            c.events.posted(),
            report.probe_fence
        );
        self.post_again(e, again)?;
        println!(
            "TDR resubmitted fences {:?}; reported (not resubmittable) fences {:?}",
            report.resubmitted, report.reported
        );
        rec.resets.push(report);
        Ok(())
    }
}

/// How `f` ended with `done`.
fn ended(f: &InFlight, done: Completion, lost: bool, reported: bool) -> Ended {
    Ended {
        fence: f.sub.cmd.submission_fence_id,
        done,
        lost_interrupt: lost,
        preempted: f.preempted,
        resubmitted_after_reset: f.resubmitted_after_reset,
        reported,
        elapsed: f.first_posted.elapsed(),
    }
}

/// The answer to `ticket`, or `None` once `deadline` passed.
fn wait_until(e: &mut Engine, ticket: Ticket, deadline: Instant) -> Outcome<Option<Answer>> {
    loop {
        if let Some(answer) = e.device.control.try_take(ticket)? {
            return Ok(Some(answer));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// A FENCE submission (from the engine's own DMA buffer) answered OK: the device works. Returns
/// its fence.
fn probe(e: &mut Engine) -> Outcome<u32> {
    let fence = e.fence();
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::fence(fence));
    let cmd = e.prepare(&b)?;
    let done = e
        .submit(&cmd)
        .map_err(|f| Failure(format!("the FENCE after the reset: {f}")))?;
    ensure(done.status == SubmitStatus::Ok, || {
        format!("the FENCE after the reset: {done}")
    })?;
    Ok(fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_reached_across_the_wrap() {
        assert!(fence_reached(5, 5));
        assert!(fence_reached(6, 5));
        assert!(!fence_reached(4, 5));
        assert!(!fence_reached(0, 1));
        assert!(fence_reached(2, u32::MAX));
        assert!(!fence_reached(u32::MAX, 2));
    }

    #[test]
    fn status_in_words() {
        let s = WddmGpuRespEngineStatus {
            flags: WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
            current_fence: 3,
            running_fence: 4,
            queued: 1,
            released: 0,
            ..WddmGpuRespEngineStatus::default()
        };
        assert_eq!(
            status_text(&s),
            "RESPONSIVE current_fence 3 running_fence 4 queued 1 released 0"
        );
        let hung = WddmGpuRespEngineStatus { flags: 0, ..s };
        assert!(status_text(&hung).starts_with("not responsive "));
    }
}
