//! The virtual engine node: SUBMIT_VIRTUAL work of the contexts on node 1, run one submission at
//! a time on its own thread by the [`VirtualEngine`], beside the paging node's engine thread, so
//! both run at once and a fault here never stops paging.
//!
//! - A page fault stops the submission, records the `DmaPageFaulted` data (the answer, the
//!   status page's slot of node 1, a PAGE_FAULT event) and leaves the node faulted: every
//!   submission after it is answered NODE_FAULTED until RESET_ENGINE (`DxgkDdiResetEngine`).
//! - RESET_ENGINE stops the running submission at its next chunk, answers it and the queued
//!   ones RESET, clears the fault, and is answered once the node is idle.
//! - A pause (the VM stops) parks the node at its next chunk; a device reset drops its work
//!   unanswered (the rings are being reset) and forgets the fault.
//! - Fault injection (`crate::gpu::inject`): a hung submission ends only at RESET_ENGINE or a
//!   reset (a PREEMPT stops nothing), a slow one starts late, an injected page fault is
//!   reported as a real one.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::warn;
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual, WddmGpuStaleTranslation,
    WDDM_GPU_NODE_VIRTUAL,
};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_STALE_TRANSLATION};
use wddm_gpu_abi::submit::SubmitStatus;
use zerocopy::IntoBytes;

use crate::engine::virtual_engine::{
    virtual_response as response, VirtualCompletion, VirtualEngine, VirtualHooks, VirtualMemory,
};
use crate::engine::{DeviceMemory, Fault, Interruption, Stop};
use crate::gpu::checker::Checker;
use crate::gpu::inject::spec::Action;
use crate::gpu::inject::Injector;
use crate::gpu::reply::{answer, Mem, Notify, Reply};
use crate::gpu::scheduler::{Instruments, NodeParts};
use crate::layout::SegmentLayout;
use crate::memory::capture::ReadCapture;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::Vram;
use crate::mmu::contexts::Contexts;
use crate::mmu::space::AddressSpace;
use crate::observe::recording::format::{Entry, Outcome, RunEnd, VirtualStart, VirtualSubmission};
use crate::observe::recording::{regions_of, Recorder};
use crate::observe::stats::{Stats, VirtualSubmissionRecord};
use crate::support::nanos::nanos;
use crate::support::sync::{lock, wait, wait_timeout};

/// A queued submission.
struct Job {
    cmd: WddmGpuCmdSubmitVirtual,
    reply: Box<dyn Reply>,
    mem: Mem,
}

/// Who stops the node's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stopping {
    /// PREEMPT: work is answered PREEMPTED (it may be submitted again); a fault stays.
    Preempt,
    /// RESET_ENGINE: work is answered RESET.
    Engine,
    /// A device reset: work is dropped unanswered.
    Device,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    running: bool,
    /// The running submission's fence (live inspection).
    running_fence: u32,
    parked: bool,
    paused: bool,
    /// The running submission is hung (an injection): only RESET_ENGINE or a reset ends it.
    hung: bool,
    stopping: Option<Stopping>,
    faulted: bool,
    /// The fence of the running submission a PREEMPT stopped (answered PREEMPTED), since the
    /// PREEMPT began.
    preempted_running: Option<u32>,
    shutdown: bool,
    page_faults: u64,
}

struct Shared {
    layout: Arc<SegmentLayout>,
    vram: Arc<Vram>,
    notify: Arc<Mutex<Notify>>,
    contexts: Arc<Mutex<Contexts>>,
    injector: Arc<Injector>,
    checker: Arc<Checker>,
    stats: Arc<Stats>,
    /// `--record`: each answered submission, with what it read, and each RESET_ENGINE.
    recorder: Option<Arc<Recorder>>,
    state: Mutex<State>,
    /// Work queued, a pause ended, a stop or shutdown began.
    wake: Condvar,
    /// The running submission ended or parked.
    idle: Condvar,
}

/// The virtual node at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VirtualNodeState {
    /// The running submission's fence.
    pub running_fence: Option<u32>,
    /// Submissions waiting.
    pub queued: usize,
    /// A page fault stopped the node (until RESET_ENGINE).
    pub faulted: bool,
    /// The running submission is hung (an injection).
    pub hung: bool,
    /// The frontend paused the device.
    pub paused: bool,
    /// Page faults since the device started.
    pub page_faults: u64,
}

/// Reads the virtual node's state from another thread (live inspection).
#[derive(Clone)]
pub struct VirtualProbe(Arc<Shared>);

impl VirtualProbe {
    /// What the virtual node is doing now (its state lock, briefly).
    pub fn state(&self) -> VirtualNodeState {
        let state = lock(&self.0.state);
        VirtualNodeState {
            running_fence: state.running.then_some(state.running_fence),
            queued: state.jobs.len(),
            faulted: state.faulted,
            hung: state.hung,
            paused: state.paused,
            page_faults: state.page_faults,
        }
    }
}

/// What a stop of the node answered: `PreemptionFenceId` (the running submission it stopped,
/// else the first queued one; 0 when none) and how many submissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodePreemption {
    /// The first submission answered.
    pub first_fence: u32,
    /// Submissions answered.
    pub count: u32,
}

/// The virtual node and its thread.
pub struct VirtualNode {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl VirtualNode {
    /// Starts the node's thread.
    pub fn start(parts: NodeParts) -> std::io::Result<Self> {
        // The node marks nothing on the trace: its submissions are counted in the stats.
        let NodeParts {
            layout,
            vram,
            notify,
            contexts,
            instruments:
                Instruments {
                    stats,
                    injector,
                    checker,
                    recorder,
                    trace: _,
                },
        } = parts;
        let shared = Arc::new(Shared {
            layout,
            vram,
            notify,
            contexts,
            injector,
            checker,
            stats,
            recorder,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            idle: Condvar::new(),
        });
        let thread_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name("wddm-gpu-virtual".into())
            .spawn(move || thread_shared.work())?;
        Ok(Self {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// A handle that reads the node's state from another thread.
    pub fn probe(&self) -> VirtualProbe {
        VirtualProbe(self.shared.clone())
    }

    /// Queues a SUBMIT_VIRTUAL; it is answered when it ends.
    pub fn submit(&self, cmd: WddmGpuCmdSubmitVirtual, reply: Box<dyn Reply>, mem: Mem) {
        lock(&self.shared.state)
            .jobs
            .push_back(Job { cmd, reply, mem });
        self.shared.wake.notify_all();
    }

    /// PREEMPT (`DxgkDdiPreemptCommand`): returns once the node is idle, its running and queued
    /// work answered PREEMPTED; returns what the node's `DXGK_INTERRUPT_DMA_PREEMPTED` needs.
    pub fn preempt(&self) -> NodePreemption {
        self.stop(Stopping::Preempt)
    }

    /// RESET_ENGINE: returns once the node is idle, its work answered RESET and its fault gone.
    pub fn reset_engine(&self) {
        self.stop(Stopping::Engine);
    }

    /// Device reset: the node's work is dropped unanswered, its fault forgotten.
    pub fn device_reset(&self) {
        self.stop(Stopping::Device);
    }

    /// Stops the running submission at its next chunk and takes the queued ones; returns the
    /// first it answered and how many (the running one counted for PREEMPT only; none for a
    /// device reset).
    fn stop(&self, by: Stopping) -> NodePreemption {
        let mut state = lock(&self.shared.state);
        state.stopping = Some(by);
        state.preempted_running = None;
        self.shared.wake.notify_all();
        // A hung submission does not stop for a PREEMPT, which takes only what was queued.
        while state.running && !state.shutdown && !(state.hung && by == Stopping::Preempt) {
            state = wait(&self.shared.idle, state);
        }
        let jobs: Vec<Job> = state.jobs.drain(..).collect();
        let running_preempted = std::mem::take(&mut state.preempted_running);
        if by != Stopping::Preempt {
            state.faulted = false;
        }
        if let (Stopping::Engine, Some(recorder)) = (by, &self.shared.recorder) {
            // Under the state lock: the node's next submission is recorded after it.
            recorder.engine_reset(WDDM_GPU_NODE_VIRTUAL);
        }
        state.stopping = None;
        if by == Stopping::Device {
            // A device reset ends a pause, as it does for the paging node: the rings start anew.
            state.paused = false;
        }
        drop(state);
        let status = match by {
            Stopping::Preempt => SubmitStatus::Preempted,
            Stopping::Engine => SubmitStatus::Reset,
            Stopping::Device => return NodePreemption::default(),
        };
        let answered = NodePreemption {
            first_fence: running_preempted
                .or_else(|| jobs.first().map(|job| job.cmd.submission_fence_id))
                .unwrap_or(0),
            // A queue holds far fewer than u32::MAX jobs.
            count: u32::try_from(jobs.len())
                .unwrap_or(u32::MAX)
                .saturating_add(u32::from(running_preempted.is_some())),
        };
        for job in jobs {
            answer_submit(job.reply, &response(job.cmd.submission_fence_id, status));
        }
        answered
    }

    /// The VM stopped: the node parks at its next chunk boundary (or stays idle).
    pub fn pause(&self) {
        let mut state = lock(&self.shared.state);
        state.paused = true;
        while state.running && !state.parked && !state.hung && !state.shutdown {
            state = wait(&self.shared.idle, state);
        }
    }

    /// The VM runs again.
    pub fn resume(&self) {
        lock(&self.shared.state).paused = false;
        self.shared.wake.notify_all();
    }

    /// Ends the thread (work still queued is dropped).
    pub fn shutdown(&self) {
        {
            let mut state = lock(&self.shared.state);
            state.shutdown = true;
            state.stopping = Some(Stopping::Device);
        }
        self.shared.wake.notify_all();
        if let Some(worker) = lock(&self.worker).take() {
            let _ = worker.join();
        }
    }
}

impl Drop for VirtualNode {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The answer of a submission a stop ended before it ran, and how it is recorded; `None` for a
/// device reset's drop.
fn stopped_answer(fence: u32, by: Stopping) -> Option<Answered> {
    let (status, interruption) = match by {
        Stopping::Preempt => (SubmitStatus::Preempted, Interruption::Preempted),
        Stopping::Engine => (SubmitStatus::Reset, Interruption::Reset),
        Stopping::Device => return None,
    };
    Some((response(fence, status), VirtualStart::Stopped(interruption)))
}

/// A submission's answer and how it was taken (for `--record`).
type Answered = (WddmGpuRespSubmitVirtual, VirtualStart);

fn answer_submit(reply: Box<dyn Reply>, response: &WddmGpuRespSubmitVirtual) {
    answer(reply, response.as_bytes());
}

/// The node's view while a submission runs.
struct Hooks<'a, 'm> {
    shared: &'a Shared,
    cmd: &'a WddmGpuCmdSubmitVirtual,
    space: &'a Mutex<AddressSpace>,
    /// The context's checking mode is on: what it finds is reported packet by packet.
    checking: bool,
    ram: &'a GuestRam<'m, vm_memory::GuestMemoryMmap>,
    /// Interruption checks answered "go on" (a replay stops at the same one).
    checks: Cell<u32>,
}

impl VirtualHooks for Hooks<'_, '_> {
    fn interruption(&self) -> Option<Interruption> {
        let mut state = lock(&self.shared.state);
        loop {
            if state.stopping == Some(Stopping::Preempt) {
                return Some(Interruption::Preempted);
            }
            if state.stopping.is_some() || state.shutdown {
                return Some(Interruption::Reset);
            }
            if !state.paused {
                self.checks.set(self.checks.get().saturating_add(1));
                return None;
            }
            state.parked = true;
            self.shared.idle.notify_all();
            state = wait(&self.shared.wake, state);
            state.parked = false;
        }
    }

    fn monitored_fence(&mut self, address: u64, value: u64) {
        lock(&self.shared.notify).monitored_fence(address, value, self.ram);
    }

    fn packet_ran(&mut self, offset: u32) {
        if self.checking {
            self.shared
                .report_stale(self.cmd, Some(offset), self.space, self.ram);
        }
    }
}

impl Shared {
    fn work(&self) {
        // One copy engine for the thread's life: its scratch (a batch's runs and pieces, the
        // bounce buffer, the fill's pattern) is made once, not per submission.
        let mut engine = VirtualEngine::default();
        loop {
            let (job, faulted) = {
                let mut state = lock(&self.state);
                loop {
                    if state.shutdown {
                        return;
                    }
                    if !state.paused && state.stopping.is_none() {
                        if let Some(job) = state.jobs.pop_front() {
                            state.running = true;
                            state.running_fence = job.cmd.submission_fence_id;
                            break (job, state.faulted);
                        }
                    }
                    state = wait(&self.wake, state);
                }
            };
            let fence = job.cmd.submission_fence_id;
            let started = Instant::now();
            let capture = self.recorder.as_ref().map(|recorder| recorder.capture());
            let answered = if faulted {
                Some((
                    response(fence, SubmitStatus::NodeFaulted),
                    VirtualStart::NodeFaulted,
                ))
            } else {
                match self.injector.on_submission(WDDM_GPU_NODE_VIRTUAL, fence) {
                    Some(Action::Hang) => stopped_answer(fence, self.hang()),
                    Some(Action::Slow(delay)) => match self.delay(delay) {
                        Some(by) => stopped_answer(fence, by),
                        None => self.run(&job, capture.as_ref(), &mut engine),
                    },
                    Some(Action::PageFault { address, write }) => self
                        .injected_page_fault(&job, address, write)
                        .map(|reply| (reply, VirtualStart::InjectedPageFault { address, write })),
                    _ => self.run(&job, capture.as_ref(), &mut engine),
                }
            };
            // Answered before the node counts as idle: a RESET_ENGINE is answered after it.
            let dropped = lock(&self.state).stopping == Some(Stopping::Device);
            let preempted = answered
                .as_ref()
                .is_some_and(|(reply, _)| reply.status == SubmitStatus::Preempted as u32);
            if let (Some((reply, start)), false) = (answered, dropped) {
                let duration = started.elapsed();
                // Recorded before it is answered: what the driver sends after the answer comes
                // after it in the file, as the paging node's submissions do.
                if let Some(recorder) = &self.recorder {
                    let submission = VirtualSubmission {
                        at_ns: recorder.since_start(started),
                        duration_ns: nanos(duration),
                        cmd: job.cmd,
                        start,
                        outcome: Outcome::of_virtual(&reply),
                        captured: capture.as_ref().map(ReadCapture::take).unwrap_or_default(),
                    };
                    recorder.submission(
                        regions_of(&job.mem),
                        self.vram.guest_window(),
                        Entry::VirtualSubmission(submission),
                    );
                }
                answer_submit(job.reply, &reply);
                self.stats
                    .record_virtual_submission(&VirtualSubmissionRecord::answered(
                        &reply, duration,
                    ));
            }
            let mut state = lock(&self.state);
            state.running = false;
            if preempted {
                state.preempted_running = Some(fence);
            }
            drop(state);
            self.idle.notify_all();
        }
    }

    /// An injected hang: waits, touching nothing, until RESET_ENGINE, a reset or shutdown
    /// (not a PREEMPT: a hung engine does not preempt); returns which.
    fn hang(&self) -> Stopping {
        let mut state = lock(&self.state);
        state.hung = true;
        self.idle.notify_all();
        let by = loop {
            if state.shutdown {
                break Stopping::Device;
            }
            if let Some(by @ (Stopping::Engine | Stopping::Device)) = state.stopping {
                break by;
            }
            state = wait(&self.wake, state);
        };
        state.hung = false;
        by
    }

    /// An injected delay before the submission starts; returns the stop that cut it short, if
    /// one did (the submission then does not run).
    fn delay(&self, delay: Duration) -> Option<Stopping> {
        let deadline = Instant::now() + delay;
        let mut state = lock(&self.state);
        // Waiting touches nothing: a pause need not wait for it.
        state.parked = true;
        self.idle.notify_all();
        let stopped = loop {
            if let Some(by) = state.stopping {
                break Some(by);
            }
            if state.shutdown {
                break Some(Stopping::Device);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            state = wait_timeout(&self.wake, state, left);
        };
        state.parked = false;
        stopped
    }

    /// An injected page fault at `address`: the submission stops at its first packet and the
    /// fault is reported as a translation's would be.
    fn injected_page_fault(
        &self,
        job: &Job,
        address: u64,
        write: bool,
    ) -> Option<WddmGpuRespSubmitVirtual> {
        let completion = VirtualCompletion::page_fault_at(&job.cmd, address, write);
        let ram = GuestRam::new(&*job.mem, self.vram.guest_window());
        self.finish(&job.cmd, &completion, &ram)
    }

    /// Runs one submission on `engine`, its reads kept in `capture` when recording; `None`
    /// when a device reset dropped it.
    fn run(
        &self,
        job: &Job,
        capture: Option<&ReadCapture>,
        engine: &mut VirtualEngine,
    ) -> Option<Answered> {
        let cmd = &job.cmd;
        let walkable = lock(&self.contexts).walkable(cmd.context_id, WDDM_GPU_NODE_VIRTUAL);
        let Some((space, geometry)) = walkable else {
            crate::support::guest_log::guest_warn!(
                "SUBMIT_VIRTUAL fence {}: context {} does not exist on the virtual node",
                cmd.submission_fence_id,
                cmd.context_id
            );
            let reply = response(cmd.submission_fence_id, SubmitStatus::BadContext);
            return Some((reply, VirtualStart::Ran(RunEnd::Finished)));
        };
        let ram = GuestRam::new(&*job.mem, self.vram.guest_window()).recording(capture);
        let memory = DeviceMemory {
            ram,
            vram: &self.vram,
            layout: &self.layout,
        };
        let virtual_memory = VirtualMemory {
            mem: &memory,
            geometry: &geometry,
            space: &space,
        };
        let mut hooks = Hooks {
            shared: self,
            cmd,
            space: &space,
            checking: lock(&space).checking(),
            ram: &memory.ram,
            checks: Cell::new(0),
        };
        let completion = engine.execute(cmd, &virtual_memory, &mut hooks);
        // What was found outside any packet (a refused command's checks read nothing).
        self.report_stale(cmd, None, &space, &memory.ram);
        let end = RunEnd::after(completion.stop.map(|(_, stop)| stop), hooks.checks.get());
        let reply = self.finish(cmd, &completion, &memory.ram)?;
        Some((reply, VirtualStart::Ran(end)))
    }

    /// Reports what the checking mode found while the submission ran: a log line and a
    /// STALE_TRANSLATION event each stale translation; with the checker, a warning each
    /// misplaced page table.
    fn report_stale(
        &self,
        cmd: &WddmGpuCmdSubmitVirtual,
        packet_offset: Option<u32>,
        space: &Mutex<AddressSpace>,
        ram: &GuestRam<'_, vm_memory::GuestMemoryMmap>,
    ) {
        let (stale, total, asked, misplaced) = {
            let mut space = lock(space);
            let asked = space.asked_for_checking();
            let (stale, total) = space.take_stale();
            (stale, total, asked, space.take_misplaced())
        };
        if self.checker.enabled() {
            for table in &misplaced {
                self.checker
                    .misplaced_table(cmd.submission_fence_id, cmd.context_id, table);
            }
        }
        for found in stale {
            warn!(
                "context {}: stale translation served for GPU VA {:#x}: level {} entry was {:#x} when cached, is {:#x} in memory (a missing FLUSH_TLB; {total} found so far)",
                cmd.context_id, found.address, found.level, found.cached, found.memory
            );
            if self.checker.enabled() {
                self.checker.stale(
                    cmd.submission_fence_id,
                    packet_offset,
                    cmd.context_id,
                    found.address,
                    found.level,
                );
            }
            // Only a context that asked for the checking mode is told (the checker's own
            // checking changes nothing the guest sees).
            if !asked {
                continue;
            }
            lock(&self.notify).signal(
                WddmGpuRespEvent {
                    kind: WDDM_GPU_EVENT_STALE_TRANSLATION,
                    stale: WddmGpuStaleTranslation {
                        virtual_address: found.address,
                        cached_entry: found.cached,
                        memory_entry: found.memory,
                        context_id: cmd.context_id,
                        page_table_level: found.level,
                    },
                    ..Default::default()
                },
                ram,
            );
        }
    }

    fn finish(
        &self,
        cmd: &WddmGpuCmdSubmitVirtual,
        completion: &VirtualCompletion,
        ram: &GuestRam<'_, vm_memory::GuestMemoryMmap>,
    ) -> Option<WddmGpuRespSubmitVirtual> {
        let mut reply = completion.response(cmd);
        // A submission that ran to its end or to its fault completes its fence, published
        // before the answer as the paging node does; one refused by its own fields never ran
        // and a preempted or reset one was not finished, so neither completes (WDDM reports
        // DMA_COMPLETED for work the GPU finished; a faulted one's fence completes as
        // `DmaPageFaulted` has the driver advance to `FaultedFenceId`).
        let interrupted = matches!(completion.stop, Some((_, Stop::Interrupted(_))));
        if !interrupted && !completion.refused {
            let mut notify = lock(&self.notify);
            notify.status.complete_virtual(cmd.submission_fence_id);
            notify.status.publish(ram);
        }
        let Some((offset, stop)) = completion.stop else {
            return Some(reply);
        };
        match stop {
            Stop::Interrupted(_) => {
                if lock(&self.state).stopping == Some(Stopping::Device) {
                    return None;
                }
            }
            Stop::Fault(Fault::Page(fault)) => {
                reply.page_fault.sequence = {
                    let mut state = lock(&self.state);
                    state.faulted = true;
                    state.page_faults += 1;
                    state.page_faults
                };
                crate::support::guest_log::guest_warn!(
                    "virtual node page fault, context {} fence {} packet at {offset:#x}: {fault}; the node refuses work until RESET_ENGINE",
                    cmd.context_id,
                    cmd.submission_fence_id
                );
                lock(&self.notify).page_fault(reply.page_fault, ram);
            }
            Stop::Fault(fault) => {
                crate::support::guest_log::guest_warn!(
                    "SUBMIT_VIRTUAL fence {} context {}: packet at {offset:#x}: {fault}",
                    cmd.submission_fence_id,
                    cmd.context_id
                );
            }
        }
        Some(reply)
    }
}
