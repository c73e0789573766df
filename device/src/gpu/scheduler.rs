//! Runs submissions in order, and stops them on request.
//!
//! A submission that finds the engine idle starts on the control-queue thread: packets run
//! there while the work they declare stays within [`INLINE_WORK`] bytes and [`INLINE_PACKETS`]
//! packets, which saves the thread
//! handoff that would otherwise dominate a short submission's round trip. The first packet
//! beyond that budget hands the rest of the submission to the engine thread, which executes
//! it and completes the request itself; so does any submission that arrives while the engine
//! is busy. PREEMPT and RESET set a flag the engine reads between chunks of at most
//! [`CHUNK`](crate::engine::CHUNK) bytes, take back everything still queued, and wait for the
//! running submission to stop, so they take effect within milliseconds even in the middle of a
//! 1 GiB transfer. Neither takes the engine's lock until the engine is idle.
//!
//! PAUSE (the frontend stopped the ring: a VM `stop`, a snapshot, a debugger) is not a stop: the
//! engine parks at its next chunk boundary, in the middle of its submission, and takes nothing
//! new from the queue; [`Scheduler::resume`] lets it go on where it stood, and a reset ends the
//! parked submission as a reset.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::context::{
    WddmGpuPageFaultRecord, WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT, WDDM_GPU_NODE_PAGING,
};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_RESP_PREEMPT, WDDM_GPU_RESP_SUBMIT};
use wddm_gpu_abi::decode::Packet;
use wddm_gpu_abi::status::{
    WddmGpuFaultRecord, WddmGpuRespEvent, WddmGpuRespPreempt, WDDM_GPU_EVENT_FAULT,
    WDDM_GPU_EVENT_FENCE,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit};
use zerocopy::IntoBytes;

use crate::engine::record::PacketRecord;
use crate::engine::{Completion, DeviceMemory, Engine, EngineHooks, Fault, Interruption, Stop};
use crate::gpu::checker::Checker;
use crate::gpu::engine_state::{EngineSignal, EngineState};
use crate::gpu::inject::spec::Action;
use crate::gpu::inject::Injector;
use crate::gpu::link::LinkModel;
use crate::gpu::reply::{answer, Mem, Notify, Reply};
use crate::gpu::status_page::CompletedBy;
use crate::layout::SegmentLayout;
use crate::memory::gart::MappedRun;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::Vram;
use crate::mmu::contexts::Contexts;
use crate::mmu::space::AddressSpace;
use crate::mmu::walk::TableAddress;
use crate::observe::recording::format::{self, Outcome, Run, RunEnd};
use crate::observe::recording::{regions_of, Recorder, Tape};
use crate::observe::stats::{PacketBatch, Stats, SubmissionRecord};
use crate::observe::trace::{LinkWait, Trace};
use crate::support::nanos::nanos;
use crate::support::sync::{lock, wait, wait_timeout};

/// What a reset does with the requests it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetBy {
    /// The driver's RESET command: dropped submissions are answered with status RESET and
    /// posted events are cancelled (answered).
    Driver,
    /// A virtio reset: the frontend drops the rings, and the requests on them go unanswered.
    Frontend,
}

/// Which thread ran a submission's last part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// The control-queue thread (short work, inline).
    ControlQueue,
    /// The engine thread.
    Engine,
}

/// Most bytes the packets run on the control-queue thread may declare (transferred, filled, or
/// read from page arrays) per kick, over all the submissions that kick brings: tens of
/// microseconds, which is also the most that thread can delay a PREEMPT or a frontend message
/// behind it, however many small submissions the guest puts on the ring.
pub const INLINE_WORK: u64 = 256 << 10;

/// Most packets that run on the control-queue thread per kick: packets that move no data
/// (FENCE, DISCARD, READ/WRITE_PHYSICAL) still cost a few microseconds each, and a DMA buffer
/// (or a ring of them) holding a million must not hold the control queue for seconds.
pub const INLINE_PACKETS: u32 = 64;

/// How far a run may get ahead of the link model before it stops to wait: short enough that a
/// PREEMPT, a FENCE packet or the answer is never early by more, long enough that small
/// packets do not each pay a sleep.
const LINK_SLICE: Duration = Duration::from_micros(100);

/// What a submission may still do on the control-queue thread.
#[derive(Clone, Copy, Debug)]
struct InlineBudget {
    bytes: u64,
    packets: u32,
}

impl InlineBudget {
    const FULL: Self = Self {
        bytes: INLINE_WORK,
        packets: INLINE_PACKETS,
    };

    /// Whether a submission may still start inline.
    fn has_room(&self) -> bool {
        self.packets > 0 && self.bytes > 0
    }
}

/// What is left of the current kick's [`InlineBudget`]. Only the control-queue thread reads and
/// writes it (kicks and submissions come from there), so plain loads and stores do: a lock
/// cost two atomic read-modify-writes each time, on every submission's path.
struct KickBudget {
    bytes: AtomicU64,
    packets: AtomicU32,
}

impl KickBudget {
    fn full() -> Self {
        Self {
            bytes: AtomicU64::new(InlineBudget::FULL.bytes),
            packets: AtomicU32::new(InlineBudget::FULL.packets),
        }
    }

    fn get(&self) -> InlineBudget {
        InlineBudget {
            bytes: self.bytes.load(Ordering::Relaxed),
            packets: self.packets.load(Ordering::Relaxed),
        }
    }

    fn set(&self, budget: InlineBudget) {
        self.bytes.store(budget.bytes, Ordering::Relaxed);
        self.packets.store(budget.packets, Ordering::Relaxed);
    }
}

struct Job {
    cmd: WddmGpuCmdSubmit,
    reply: Box<dyn Reply>,
    mem: Mem,
    /// Where the VRAM BAR was in `mem`: taken with it, so a queued submission does not take
    /// frames at an old BAR address for RAM after the BAR moved.
    window: Option<Range<u64>>,
    /// When the control queue handed it over.
    queued: Instant,
    /// What ran before it was deferred to the engine thread.
    before: Option<Partial>,
    /// The fault injection it was taken with.
    injection: Option<Action>,
    /// What it read and how its runs ended, with `--record`.
    tape: Option<Box<Tape>>,
}

/// Whether an injection keeps its submission off the control-queue thread: waiting there would
/// hold the whole control queue.
fn waits(injection: Option<Action>) -> bool {
    matches!(injection, Some(Action::Hang | Action::Slow(_)))
}

/// The part of a submission that ran on the control-queue thread.
#[derive(Clone, Copy)]
struct Partial {
    /// The command's own start offset (the job's now says where the rest starts).
    start_offset: u32,
    start: Instant,
    packets_completed: u32,
    bytes_transferred: u64,
}

impl Job {
    /// The command as the driver sent it (a deferred job's start offset is where its rest
    /// starts).
    fn cmd_as_sent(&self) -> WddmGpuCmdSubmit {
        WddmGpuCmdSubmit {
            start_offset: self
                .before
                .map_or(self.cmd.start_offset, |before| before.start_offset),
            ..self.cmd
        }
    }
}

/// A finished submission's answer, not yet given.
struct SubmitAnswer {
    status: SubmitStatus,
    reply: Box<dyn Reply>,
    response: WddmGpuRespSubmit,
    record: SubmissionRecord,
    /// A lost interrupt: the answer waits until the driver asks ([`Scheduler::release_held`]).
    held: bool,
}

/// How one run of a submission ended.
enum Ran {
    /// Finished, its effects published; the answer is ready.
    Finished(SubmitAnswer),
    /// Stopped at a packet over the inline budget; the job continues from there.
    Deferred(Job),
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Job>,
    /// Fence of the submission the engine is executing.
    running: Option<u32>,
    /// Fence of a running submission that stopped because of PREEMPT.
    preempted_running: Option<u32>,
    /// Paused: nothing new starts, and the running submission parks at its next chunk.
    paused: bool,
    /// The running submission is parked (it waits for `unpark`), or waits out an injected delay.
    parked: bool,
    /// The running submission is hung (an injection): it ends only at a reset.
    hung: bool,
    shutdown: bool,
}

impl Queue {
    /// Submissions waiting or running.
    fn depth(&self) -> usize {
        self.pending.len() + usize::from(self.running.is_some())
    }
}

/// Where submissions execute: the engine, its queue and the flags that interrupt it, execution by
/// the control-queue thread (inline runs, stops) and the engine thread.
struct Execution {
    layout: Arc<SegmentLayout>,
    vram: Arc<Vram>,
    notify: Arc<Mutex<Notify>>,
    contexts: Arc<Mutex<Contexts>>,
    engine: Mutex<Engine>,
    queue: Mutex<Queue>,
    /// Signalled when work is queued or the scheduler shuts down.
    wake: Condvar,
    /// Signalled when the engine finishes a submission or parks.
    idle: Condvar,
    /// Signalled when a pause ends (resume, reset or shutdown).
    unpark: Condvar,
    interrupt: EngineSignal,
    last_completed: AtomicU32,
    /// Page faults of the paging node's virtual-address packets (the records' `sequence`).
    page_faults: AtomicU64,
    stats: Arc<Stats>,
    trace: Option<Arc<Trace>>,
    injector: Arc<Injector>,
    checker: Arc<Checker>,
    /// Answers a lost-interrupt injection holds, in completion order.
    held: Mutex<Vec<SubmitAnswer>>,
    recorder: Option<Arc<Recorder>>,
    /// The link model (`--link`): packets take the time a card's link and VRAM would.
    link: Option<LinkModel>,
    /// How long before a link wait's end the engine asks to be woken, in nanoseconds: what
    /// waking takes here, learned from the waits so far (only the engine thread waits).
    link_lead_ns: AtomicU64,
}

/// What watches and steers the engine from outside the guest: the counters, the timeline, fault
/// injection, the checker and the recording.
#[derive(Clone)]
pub struct Instruments {
    /// Counters and latencies.
    pub stats: Arc<Stats>,
    /// The `--trace` timeline.
    pub trace: Option<Arc<Trace>>,
    /// Fault injection.
    pub injector: Arc<Injector>,
    /// The `--check` checker.
    pub checker: Arc<Checker>,
    /// The `--record` file.
    pub recorder: Option<Arc<Recorder>>,
}

/// What an engine node starts with: the device's parts both nodes share.
#[derive(Clone)]
pub struct NodeParts {
    /// The segment layout.
    pub layout: Arc<SegmentLayout>,
    /// The VRAM.
    pub vram: Arc<Vram>,
    /// The status page and the posted events.
    pub notify: Arc<Mutex<Notify>>,
    /// The contexts with GPU virtual addressing.
    pub contexts: Arc<Mutex<Contexts>>,
    /// Counters, timeline, injection, checker and recording.
    pub instruments: Instruments,
}

/// The paging node at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The last completed submission fence.
    pub last_completed: u32,
    /// The fence of the running submission.
    pub running: Option<u32>,
    /// Submissions waiting behind it.
    pub queued: usize,
    /// The running submission is hung (an injection).
    pub hung: bool,
    /// The frontend paused the device.
    pub paused: bool,
    /// Answers a lost interrupt holds.
    pub held: usize,
}

/// What a pause stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paused {
    /// Fence of the submission parked mid-way, if one was running.
    pub parked: Option<u32>,
    /// Submissions waiting behind it.
    pub queued: usize,
}

/// The engine thread and its queue.
pub struct Scheduler {
    execution: Arc<Execution>,
    /// What this kick may still run on the control-queue thread (only that thread uses it).
    kick_budget: KickBudget,
    worker: Mutex<Option<JoinHandle<()>>>,
}

struct Hooks<'a, 'm> {
    execution: &'a Execution,
    contexts: &'a Mutex<Contexts>,
    interrupt: &'a EngineSignal,
    last_completed: &'a AtomicU32,
    notify: &'a Mutex<Notify>,
    ram: &'a GuestRam<'m, GuestMemoryMmap>,
    stats: &'a Stats,
    trace: Option<&'a Trace>,
    /// Declared work still allowed on this thread; `None` on the engine thread (no limit).
    inline_budget: Option<InlineBudget>,
    /// An injected fault: the packet index in the submission, and its status.
    fault_at: Option<(u32, SubmitStatus)>,
    /// Packets of the submission run before this run (on the control-queue thread).
    packets_before: u32,
    /// The checker, while it runs.
    checker: Option<&'a Checker>,
    /// Interruption checks answered "go on" (a recording says at which check a PREEMPT or
    /// RESET stopped a run).
    checks: Cell<u32>,
    /// The link model, when one is set.
    link: Option<&'a LinkModel>,
    /// When the modelled link finishes what the run's packets gave it.
    link_until: Option<Instant>,
    /// The run's packets not recorded in the stats yet.
    packets: &'a mut PacketBatch,
}

impl Hooks<'_, '_> {
    /// Gives `record` its modelled time: from its start, or from the end of the previous
    /// packet's modelled time when the link is still busy with that.
    fn model_link(&mut self, link: &LinkModel, record: &PacketRecord) {
        let cost = link.cost(record);
        if cost.is_zero() {
            return;
        }
        let begin = self
            .link_until
            .map_or(record.start, |until| until.max(record.start));
        let until = begin + cost;
        let late = record.start + record.duration > until;
        self.link_until = Some(until);
        self.stats.link_packet(cost, late);
    }
}

impl EngineHooks for Hooks<'_, '_> {
    fn interruption(&self) -> Option<Interruption> {
        let interruption = match self.interrupt.load() {
            EngineState::Pause => self.execution.park(),
            state => state.interruption(),
        };
        if interruption.is_none() {
            self.checks.set(self.checks.get().wrapping_add(1));
        }
        interruption
    }

    /// Reported when the packet executes, while the rest of the buffer still runs. (The engine
    /// lock is held here; nothing takes the two locks in the other order.)
    fn fence(&mut self, fence_id: u32) {
        // A FENCE packet completes its fence: PREEMPT's LastCompletedFenceId must not go back
        // below a fence the driver was already told about.
        self.last_completed.store(fence_id, Ordering::Release);
        let mut notify = lock(self.notify);
        notify.status.complete(fence_id, CompletedBy::FencePacket);
        notify.signal(
            WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_FENCE,
                fence_id,
                ..Default::default()
            },
            self.ram,
        );
    }

    fn defer(&mut self, work: u64) -> bool {
        // Ahead of the link model by a slice: the run stops here so the engine thread waits
        // off the engine lock, then goes on.
        if self
            .link_until
            .is_some_and(|until| until > Instant::now() + LINK_SLICE)
        {
            return true;
        }
        match &mut self.inline_budget {
            Some(left) if work > left.bytes || left.packets == 0 => true,
            Some(left) => {
                left.bytes -= work;
                left.packets -= 1;
                false
            }
            None => false,
        }
    }

    fn injected_fault(&mut self, index: u32) -> Option<Fault> {
        let (at, status) = self.fault_at?;
        (self.packets_before.checked_add(index) == Some(at)).then_some(Fault::Injected(status))
    }

    fn ran(&mut self, fence: u32, offset: u32, packet: &Packet) {
        if let Some(checker) = self.checker {
            checker.packet(fence, offset, packet);
            // The paging process's tables a virtual-address packet walked through.
            let paging = {
                let contexts = lock(self.contexts);
                contexts.paging_context().zip(contexts.paging_space())
            };
            if let Some((context, space)) = paging {
                // Taken first: the checker's lock is never held under the space's.
                let misplaced = lock(&space).take_misplaced();
                for table in &misplaced {
                    checker.misplaced_table(fence, context, table);
                }
            }
        }
    }

    fn packet(&mut self, record: &PacketRecord) {
        self.stats.keep_packet(self.packets, record);
        if let Some(trace) = self.trace {
            trace.packet(record);
        }
        if let Some(link) = self.link {
            self.model_link(link, record);
        }
    }

    fn flush_tlb(&mut self, root: TableAddress, range: Option<Range<u64>>) {
        lock(self.contexts).flush(root, range);
    }

    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        lock(self.contexts).paging_space()
    }

    fn monitored_fence(&mut self, address: u64, value: u64) {
        lock(self.notify).monitored_fence(address, value, self.ram);
    }
}

/// A SUBMIT answer with this fence and status and nothing else.
pub(super) fn submit_response(fence_id: u32, status: SubmitStatus) -> WddmGpuRespSubmit {
    WddmGpuRespSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT),
        submission_fence_id: fence_id,
        status: status as u32,
        ..Default::default()
    }
}

impl Scheduler {
    /// Starts the engine thread.
    pub fn start(parts: NodeParts) -> std::io::Result<Self> {
        let NodeParts {
            layout,
            vram,
            notify,
            contexts,
            instruments:
                Instruments {
                    stats,
                    trace,
                    injector,
                    checker,
                    recorder,
                },
        } = parts;
        let link = layout
            .link
            .clone()
            .map(|spec| LinkModel::new(spec, &layout));
        let execution = Arc::new(Execution {
            engine: Mutex::new(Engine::new(&layout)),
            layout,
            vram,
            notify,
            contexts,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            idle: Condvar::new(),
            unpark: Condvar::new(),
            interrupt: EngineSignal::new(EngineState::Run),
            last_completed: AtomicU32::new(0),
            page_faults: AtomicU64::new(0),
            stats,
            trace,
            injector,
            checker,
            held: Mutex::new(Vec::new()),
            recorder,
            link,
            link_lead_ns: AtomicU64::new(0),
        });
        let thread_shared = execution.clone();
        let worker = std::thread::Builder::new()
            .name("wddm-gpu-engine".into())
            .spawn(move || thread_shared.work())?;
        Ok(Self {
            execution,
            kick_budget: KickBudget::full(),
            worker: Mutex::new(Some(worker)),
        })
    }

    /// A new kick: the control-queue thread may run [`INLINE_WORK`] bytes and
    /// [`INLINE_PACKETS`] packets again before handing work to the engine thread.
    pub fn new_kick(&self) {
        self.kick_budget.set(InlineBudget::FULL);
    }

    /// Runs a submission: here, within what is left of this kick's inline budget, when the
    /// engine is idle; on the engine thread otherwise (or for the rest, past the budget).
    pub fn submit(&self, cmd: WddmGpuCmdSubmit, reply: Box<dyn Reply>, mem: Mem) {
        let execution = &self.execution;
        let fence = cmd.submission_fence_id;
        // The one clock reading before the engine's: when the submission was queued, when the
        // queue depth changed, and, run inline, when it started.
        let queued = Instant::now();
        let injection = execution
            .injector
            .on_submission(WDDM_GPU_NODE_PAGING, fence);
        if execution.checker.enabled() {
            let registered = lock(&execution.notify).status.registered();
            execution.checker.submission(fence, registered);
        }
        let job = Job {
            cmd,
            reply,
            mem,
            // The transport hands requests over while no memory table can change, so the
            // window read now is the one of `mem`.
            window: self.execution.vram.guest_window(),
            queued,
            before: None,
            injection,
            tape: execution
                .recorder
                .as_ref()
                .map(|recorder| Box::new(recorder.tape())),
        };
        let mut budget = Some(self.kick_budget.get());
        {
            let mut queue = lock(&execution.queue);
            let idle = queue.pending.is_empty()
                && queue.running.is_none()
                && !queue.paused
                && !queue.shutdown
                && !waits(injection)
                // The model's waits belong on the engine thread, never the control queue's.
                && execution.link.is_none()
                && budget.is_some_and(|budget| budget.has_room());
            if !idle {
                queue.pending.push_back(job);
                execution.stats.queue_depths(&[(queue.depth(), queued)]);
                execution.wake.notify_one();
                return;
            }
            // Its depth of 1 from `queued` is recorded with the depth after it, when it ends
            // or is deferred: one hold of the stats' lock instead of two.
            queue.running = Some(fence);
        }
        let ran = execution.run(job, &mut budget, queued);
        self.kick_budget.set(budget.unwrap_or(InlineBudget {
            bytes: 0,
            packets: 0,
        }));
        let answer = match ran {
            Ran::Finished(answer) => answer,
            Ran::Deferred(job) => {
                let mut queue = lock(&execution.queue);
                // A PREEMPT or RESET raised meanwhile already took back what was queued and
                // waits for this run: the rest must not slip into the queue behind it.
                match execution.interrupt.load() {
                    // A pause lets the rest wait in the queue like any other work.
                    EngineState::Run | EngineState::Pause => {
                        queue.pending.push_front(job);
                        queue.running = None;
                        execution
                            .stats
                            .queue_depths(&[(1, queued), (queue.depth(), Instant::now())]);
                        execution.wake.notify_one();
                        execution.idle.notify_all();
                        return;
                    }
                    EngineState::Preempt => {
                        drop(queue);
                        execution.stop_deferred(job, Interruption::Preempted)
                    }
                    EngineState::Reset => {
                        drop(queue);
                        execution.stop_deferred(job, Interruption::Reset)
                    }
                }
            }
        };
        // Bookkeeping first, the response last: the guest's wake-up is not delayed behind
        // this thread. Nothing can start in between: only this thread starts inline work and
        // the queue was empty.
        execution.finished(fence, answer.status, answer.record.end(), Some(queued));
        execution.answer(answer);
    }

    /// Stops the running submission at its next chunk and returns it and every queued one
    /// with status PREEMPTED, in order. The answer carries what `DXGK_INTERRUPT_DMA_PREEMPTED`
    /// needs.
    pub fn preempt(&self, mem: &Mem) -> WddmGpuRespPreempt {
        let execution = &self.execution;
        if lock(&execution.queue).hung {
            // A hung engine does not preempt: nothing stops, the driver's timeout runs out.
            return self.preempted_nothing();
        }
        let drained = execution.stop(EngineState::Preempt);
        execution.checker.preempted();
        let running = lock(&execution.queue).preempted_running.take();
        execution.interrupt.store(EngineState::Run);
        let last_completed = execution.last_completed.load(Ordering::Acquire);
        let preempted_fence = running
            .or_else(|| drained.first().map(|job| job.cmd.submission_fence_id))
            .unwrap_or(0);
        // A queue holds far fewer than u32::MAX jobs.
        let drained_count = u32::try_from(drained.len()).unwrap_or(u32::MAX);
        let preempted_count = u32::from(running.is_some()).saturating_add(drained_count);
        {
            let mut notify = lock(&execution.notify);
            execution.stats.preempted(u64::from(preempted_count));
            if preempted_count > 0 {
                notify.status.preempted(preempted_fence, last_completed);
                notify
                    .status
                    .publish(&GuestRam::new(&**mem, execution.vram.guest_window()));
            }
        }
        if let Some(recorder) = &execution.recorder {
            recorder.preempt(preempted_count);
        }
        for job in drained {
            execution.answer_drained(job, Interruption::Preempted);
        }
        // The virtual node's part is the caller's (`PagingGpu`), which preempts both.
        WddmGpuRespPreempt {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_PREEMPT),
            preempted_fence,
            last_completed_fence: last_completed,
            preempted_count,
            ..Default::default()
        }
    }

    /// A PREEMPT that stopped nothing (a hung engine, or an injected refusal): the answer
    /// reports no preempted submission and the last completed fence.
    pub fn preempted_nothing(&self) -> WddmGpuRespPreempt {
        WddmGpuRespPreempt {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_PREEMPT),
            preempted_fence: 0,
            last_completed_fence: self.execution.last_completed.load(Ordering::Acquire),
            preempted_count: 0,
            ..Default::default()
        }
    }

    /// Answers the submissions a lost-interrupt injection holds (the driver asked); returns
    /// how many.
    pub fn release_held(&self) -> u32 {
        let held = std::mem::take(&mut *lock(&self.execution.held));
        let count = u32::try_from(held.len()).unwrap_or(u32::MAX);
        for finished in held {
            answer(finished.reply, finished.response.as_bytes());
        }
        count
    }

    /// What the paging node is doing, for QUERY_ENGINE_STATUS.
    pub fn node_state(&self) -> NodeState {
        self.execution.node_state()
    }

    /// A handle that reads the node's state from another thread (live inspection).
    pub fn probe(&self) -> NodeProbe {
        NodeProbe(self.execution.clone())
    }

    /// Drops all work, clears the GART and the status-page registration; VRAM is kept.
    /// `by` says whether the dropped requests are answered.
    pub fn reset(&self, by: ResetBy) {
        let execution = &self.execution;
        // Answers a lost interrupt held are given first (the driver's RESET asks for every
        // completion), or dropped with the rings (the frontend's).
        match by {
            ResetBy::Driver => {
                self.release_held();
            }
            ResetBy::Frontend => lock(&execution.held).clear(),
        }
        let drained = execution.stop(EngineState::Reset);
        lock(&execution.engine).reset();
        execution.checker.reset(by == ResetBy::Driver);
        {
            let mut notify = lock(&execution.notify);
            notify.status.unregister();
            if by == ResetBy::Driver {
                notify.cancel_events();
            } else {
                notify.forget_events();
            }
        }
        {
            let mut queue = lock(&execution.queue);
            queue.preempted_running = None;
            queue.paused = false;
        }
        execution.interrupt.store(EngineState::Run);
        execution.wake.notify_one();
        if by == ResetBy::Driver {
            for job in drained {
                execution.answer_drained(job, Interruption::Reset);
            }
        }
        // After the drained submissions: one whose first part ran before the reset is
        // recorded as it is answered, just above, and must replay before the GART is cleared.
        if let Some(recorder) = &execution.recorder {
            recorder.reset(match by {
                ResetBy::Driver => format::ResetBy::Driver,
                ResetBy::Frontend => format::ResetBy::Frontend,
            });
        }
    }

    /// Pauses the engine: the running submission parks at its next chunk boundary and queued
    /// ones wait. Returns once the engine is parked or idle, with what it stopped.
    pub fn pause(&self) -> Paused {
        let execution = &self.execution;
        let mut queue = lock(&execution.queue);
        queue.paused = true;
        // A PREEMPT or RESET being handled keeps its flag; the pause follows it.
        execution
            .interrupt
            .replace(EngineState::Run, EngineState::Pause);
        while queue.running.is_some() && !queue.parked && !queue.hung {
            queue = wait(&execution.idle, queue);
        }
        Paused {
            parked: queue.running.filter(|_| queue.parked || queue.hung),
            queued: queue.pending.len(),
        }
    }

    /// Ends a pause: the parked submission goes on where it stood, then the queued ones.
    pub fn resume(&self) {
        let execution = &self.execution;
        let mut queue = lock(&execution.queue);
        queue.paused = false;
        execution
            .interrupt
            .replace(EngineState::Pause, EngineState::Run);
        execution.unpark.notify_all();
        execution.wake.notify_one();
    }

    /// Stops the engine thread (the backend is exiting).
    pub fn shutdown(&self) {
        {
            let mut queue = lock(&self.execution.queue);
            queue.shutdown = true;
            queue.pending.clear();
            self.execution.interrupt.store(EngineState::Reset);
        }
        self.execution.wake.notify_all();
        self.execution.unpark.notify_all();
        if let Some(worker) = lock(&self.worker).take() {
            let _ = worker.join();
        }
    }
}

/// Reads the paging node's state without holding the scheduler (the control socket's thread).
#[derive(Clone)]
pub struct NodeProbe(Arc<Execution>);

impl NodeProbe {
    /// What the paging node is doing now.
    pub fn state(&self) -> NodeState {
        self.0.node_state()
    }

    /// The GART's mapped runs (at most `most`, and how many were left out), read between two
    /// submissions: waits at most `patience` for the engine; `None` when it stayed busy.
    pub fn gart_runs(&self, most: usize, patience: Duration) -> Option<(Vec<MappedRun>, usize)> {
        let deadline = Instant::now() + patience;
        loop {
            match self.0.engine.try_lock() {
                Ok(engine) => return Some(engine.gart().mapped_runs(most)),
                Err(TryLockError::Poisoned(poisoned)) => {
                    return Some(poisoned.into_inner().gart().mapped_runs(most))
                }
                Err(TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

impl Execution {
    /// What the paging node is doing (two short locks, never the engine's).
    fn node_state(&self) -> NodeState {
        let held = lock(&self.held).len();
        let queue = lock(&self.queue);
        NodeState {
            last_completed: self.last_completed.load(Ordering::Acquire),
            running: queue.running,
            queued: queue.pending.len(),
            hung: queue.hung,
            paused: queue.paused,
            held,
        }
    }

    /// Parks the running submission at a chunk boundary until the pause ends; then says whether
    /// it goes on (`None`) or stops (the pause ended in a reset or a shutdown).
    fn park(&self) -> Option<Interruption> {
        let mut queue = lock(&self.queue);
        queue.parked = true;
        self.idle.notify_all();
        while self.interrupt.load() == EngineState::Pause {
            queue = wait(&self.unpark, queue);
        }
        queue.parked = false;
        // Not Pause any more: Run goes on, Preempt or Reset stops.
        self.interrupt.load().interruption()
    }

    /// Raises `interrupt`, takes back the queued work and waits for the engine to go idle.
    fn stop(&self, interrupt: EngineState) -> Vec<Job> {
        // Raised under the queue lock, with the queue drained in the same critical section: the
        // engine cannot start another queued submission between the two.
        let mut queue = lock(&self.queue);
        self.interrupt.store(interrupt);
        // A parked submission wakes up to the new flag and stops.
        self.unpark.notify_all();
        let drained: Vec<Job> = queue.pending.drain(..).collect();
        // A hung submission does not stop for a PREEMPT: the PREEMPT takes what was queued.
        while queue.running.is_some() && !(queue.hung && interrupt == EngineState::Preempt) {
            queue = wait(&self.idle, queue);
        }
        drained
    }

    /// A hung submission: waits, not touching memory, until a reset (the driver's, the
    /// frontend's, or shutdown) ends it.
    fn hang(&self) -> Interruption {
        let mut queue = lock(&self.queue);
        queue.hung = true;
        self.idle.notify_all();
        while self.interrupt.load() != EngineState::Reset {
            queue = wait(&self.unpark, queue);
        }
        queue.hung = false;
        Interruption::Reset
    }

    /// An injected delay before a submission starts; a PREEMPT or a reset cuts it short and
    /// stops the submission (returned).
    fn delay(&self, delay: Duration) -> Option<Interruption> {
        self.sleep_parked(Instant::now() + delay)
    }

    /// Sleeps until `deadline` touching nothing, so counted as parked (a pause need not wait
    /// for it); returns the PREEMPT or reset that ended the sleep early, if one did.
    fn sleep_parked(&self, deadline: Instant) -> Option<Interruption> {
        let mut queue = lock(&self.queue);
        queue.parked = true;
        self.idle.notify_all();
        let stopped = loop {
            if let Some(interruption) = self.interrupt.load().interruption() {
                break Some(interruption);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            queue = wait_timeout(&self.unpark, queue, left);
        };
        queue.parked = false;
        stopped
    }

    /// Waits until the link model's `until`, off the engine lock; a PREEMPT or a reset ends the
    /// wait early (the next run's first check stops the submission).
    fn link_wait(&self, fence: u32, until: Instant) {
        let start = Instant::now();
        if until <= start {
            return;
        }
        let lead = Duration::from_nanos(self.link_lead_ns.load(Ordering::Relaxed));
        // Whatever ended it, the wait is over: the next run's check sees an interruption.
        let _ = self.sleep_parked(until.checked_sub(lead).unwrap_or(until));
        let woke = Instant::now();
        self.learn_link_lead(lead, woke, until);
        let duration = woke.saturating_duration_since(start);
        self.stats.link_wait(duration);
        if let Some(trace) = &self.trace {
            trace.link_wait(LinkWait {
                fence,
                start,
                duration,
            });
        }
    }

    /// Moves the wake-up lead a quarter of the way towards ending waits on time: longer when
    /// the wait ended late, shorter when early; at most [`LINK_SLICE`].
    fn learn_link_lead(&self, lead: Duration, woke: Instant, until: Instant) {
        let lead = nanos(lead);
        let late = nanos(woke.saturating_duration_since(until));
        let early = nanos(until.saturating_duration_since(woke));
        let next = (lead + late / 4)
            .saturating_sub(early / 4)
            .min(nanos(LINK_SLICE));
        self.link_lead_ns.store(next, Ordering::Relaxed);
    }

    /// What an injection taken with `job` does before it runs: a hang or a delay, which may
    /// end the submission unrun.
    fn injected_wait(&self, job: &Job) -> Option<Interruption> {
        match job.injection {
            Some(Action::Hang) => Some(self.hang()),
            Some(Action::Slow(delay)) => self.delay(delay),
            _ => None,
        }
    }

    /// The engine thread.
    fn work(&self) {
        if self.link.is_some() {
            crate::gpu::link::precise_sleeps();
        }
        loop {
            let job = {
                let mut queue = lock(&self.queue);
                loop {
                    if queue.shutdown {
                        return;
                    }
                    if queue.paused {
                        queue = wait(&self.wake, queue);
                        continue;
                    }
                    if let Some(job) = queue.pending.pop_front() {
                        queue.running = Some(job.cmd.submission_fence_id);
                        break job;
                    }
                    queue = wait(&self.wake, queue);
                }
            };
            let fence = job.cmd.submission_fence_id;
            if let Some(interruption) = self.injected_wait(&job) {
                let answer = self.stop_deferred(job, interruption);
                let (status, ended) = (answer.status, answer.record.end());
                self.answer(answer);
                self.finished(fence, status, ended, None);
                continue;
            }
            let mut job = job;
            let answer = loop {
                match self.run(job, &mut None, Instant::now()) {
                    Ran::Finished(answer) => break answer,
                    // Only the link model defers a run here (only inline runs have a budget):
                    // its wait is over, the rest runs now.
                    Ran::Deferred(rest) => job = rest,
                }
            };
            let (status, ended) = (answer.status, answer.record.end());
            self.answer(answer);
            self.finished(fence, status, ended, None);
        }
    }

    /// The running submission ended with `status` at `ended`: the engine is free again.
    /// `inline_since`: it started on the control-queue thread when queued then, and the depth
    /// of 1 it made is recorded here.
    fn finished(
        &self,
        fence: u32,
        status: SubmitStatus,
        ended: Instant,
        inline_since: Option<Instant>,
    ) {
        let mut queue = lock(&self.queue);
        queue.running = None;
        if status == SubmitStatus::Preempted {
            queue.preempted_running = Some(fence);
        }
        let after = (queue.depth(), ended);
        match inline_since {
            Some(queued) => self.stats.queue_depths(&[(1, queued), after]),
            None => self.stats.queue_depths(&[after]),
        }
        // Only a stop waits for idle, and it raises `interrupt` under this lock before waiting:
        // checking it here spares every other submission a futex wake (a system call).
        if self.interrupt.load() != EngineState::Run {
            self.idle.notify_all();
        }
    }

    /// Answers a queued job that a PREEMPT or RESET took back: unrun, or, for a submission whose
    /// first part ran on the control-queue thread, with what that part did.
    fn answer_drained(&self, job: Job, interruption: Interruption) {
        if job.before.is_some() {
            let answer = self.stop_deferred(job, interruption);
            self.answer(answer);
            return;
        }
        let status = Stop::Interrupted(interruption).status();
        answer(
            job.reply,
            submit_response(job.cmd.submission_fence_id, status).as_bytes(),
        );
    }

    /// Answers a deferred job that a PREEMPT or RESET caught between its two runs.
    fn stop_deferred(&self, mut job: Job, interruption: Interruption) -> SubmitAnswer {
        if let Some(tape) = &mut job.tape {
            // What an engine run stopped at its first check would do.
            tape.runs.push(Run {
                packets: 0,
                end: RunEnd::Interrupted {
                    by: interruption,
                    checks: 0,
                },
            });
        }
        let completion = Completion {
            fence_id: job.cmd.submission_fence_id,
            packets_completed: 0,
            bytes_transferred: 0,
            stop: Some((job.cmd.start_offset, interruption.into())),
            fault_opcode: 0,
            deferred: None,
        };
        // A deferred job carries the start of its first part, which `settle` reports.
        let now = Instant::now();
        self.settle(
            job,
            completion,
            now..now,
            Runner::Engine,
            &mut PacketBatch::new(),
        )
    }

    /// Executes one submission (the rest of it, for a deferred one), starting at `start`, with
    /// this inline budget; settles it unless it was deferred.
    /// `inline_budget` is left with what the run did not use.
    fn run(&self, mut job: Job, inline_budget: &mut Option<InlineBudget>, start: Instant) -> Ran {
        let capture = job.tape.as_deref().map(|tape| &tape.capture);
        let memory = DeviceMemory {
            ram: GuestRam::new(&*job.mem, job.window.clone()).recording(capture),
            vram: &self.vram,
            layout: &self.layout,
        };
        let mut packets = PacketBatch::new();
        let mut hooks = Hooks {
            execution: self,
            contexts: &self.contexts,
            interrupt: &self.interrupt,
            last_completed: &self.last_completed,
            notify: &self.notify,
            ram: &memory.ram,
            stats: &self.stats,
            trace: self.trace.as_deref(),
            inline_budget: *inline_budget,
            fault_at: match job.injection {
                Some(Action::Fault { packet, status }) => Some((packet, status)),
                _ => None,
            },
            packets_before: job.before.map_or(0, |before| before.packets_completed),
            checker: Some(&*self.checker).filter(|checker| checker.enabled()),
            checks: Cell::new(0),
            link: self.link.as_ref(),
            link_until: None,
            packets: &mut packets,
        };
        let (completion, ended) =
            lock(&self.engine).execute_from(&job.cmd, &memory, &mut hooks, start);
        // Only the control-queue thread runs with a budget.
        let runner = if inline_budget.is_some() {
            Runner::ControlQueue
        } else {
            Runner::Engine
        };
        *inline_budget = hooks.inline_budget;
        let checks = hooks.checks.get();
        // The modelled link's wait is part of the submission's time.
        let ended = match hooks.link_until {
            Some(until) => {
                self.link_wait(job.cmd.submission_fence_id, until);
                Instant::now()
            }
            None => ended,
        };
        if let Some(tape) = &mut job.tape {
            let end = match completion.deferred {
                Some(_) => RunEnd::Deferred,
                None => RunEnd::after(completion.stop.map(|(_, stop)| stop), checks),
            };
            tape.runs.push(Run {
                packets: completion.packets_completed,
                end,
            });
        }
        if let Some(offset) = completion.deferred {
            self.stats.record_packets(&mut packets);
            let before = job.before.get_or_insert(Partial {
                start_offset: job.cmd.start_offset,
                start,
                packets_completed: 0,
                bytes_transferred: 0,
            });
            before.packets_completed += completion.packets_completed;
            before.bytes_transferred += completion.bytes_transferred;
            job.cmd.start_offset = offset;
            return Ran::Deferred(job);
        }
        Ran::Finished(self.settle(job, completion, start..ended, runner, &mut packets))
    }

    /// Publishes a submission's effects and records it, after `packets` (its last ones); the
    /// answer is given by [`Self::answer`]. `runner`: the thread this last run was on.
    fn settle(
        &self,
        job: Job,
        mut completion: Completion,
        ran: Range<Instant>,
        runner: Runner,
        packets: &mut PacketBatch,
    ) -> SubmitAnswer {
        let Range { start, end: ended } = ran;
        let ram = GuestRam::new(&*job.mem, job.window.clone());
        let lost_interrupt = job.injection == Some(Action::LostInterrupt);
        // Inline: the whole submission ran on the control-queue thread.
        let inline = runner == Runner::ControlQueue && job.before.is_none();
        let start = match job.before {
            Some(before) => {
                completion.packets_completed += before.packets_completed;
                completion.bytes_transferred += before.bytes_transferred;
                before.start
            }
            None => start,
        };
        let fence = completion.fence_id;

        let mut notify = lock(&self.notify);
        let (status, fault_packet_offset, fault_address) = match completion.stop {
            None => (SubmitStatus::Ok, 0, 0),
            Some((offset, stop)) => (stop.status(), offset, stop.address()),
        };
        // Interruptions are not faults: nothing is recorded for them.
        if let Some((offset, fault)) = completion.fault() {
            crate::support::guest_log::guest_warn!(
                "submission fence {fence} faulted at DMA offset {offset:#x} (opcode {}): {fault}",
                completion.fault_opcode
            );
            let record = notify.status.record_fault(
                WddmGpuFaultRecord {
                    sequence: 0,
                    address: fault_address,
                    fence_id: fence,
                    packet_offset: offset,
                    status: status as u32,
                    opcode: u32::from(completion.fault_opcode),
                },
                &ram,
            );
            notify.signal(
                WddmGpuRespEvent {
                    kind: WDDM_GPU_EVENT_FAULT,
                    fault: record,
                    ..Default::default()
                },
                &ram,
            );
            if let Fault::Page(mmu) = fault {
                // A page fault of a virtual-address packet: the DmaPageFaulted record too, in
                // the paging node's slot. The paging node goes on (the driver recovers from a
                // faulted paging buffer with RESET).
                let sequence = self.page_faults.fetch_add(1, Ordering::Relaxed) + 1;
                let page_fault = WddmGpuPageFaultRecord {
                    sequence,
                    fault: mmu.wire(),
                    fence_id: fence,
                    flags: mmu.access_flags(),
                    node_ordinal: WDDM_GPU_NODE_PAGING,
                    context_id: lock(&self.contexts).paging_context().unwrap_or(u32::MAX),
                    error_code: WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT,
                    packet_offset: offset,
                };
                notify.page_fault(page_fault, &ram);
            }
        }
        // A faulted submission completes too (with its error): the driver decides whether to
        // recover through a reset. Preempted and reset submissions do not complete.
        if !matches!(completion.stop, Some((_, Stop::Interrupted(_)))) {
            notify.status.complete(fence, CompletedBy::Submission);
            self.last_completed.store(fence, Ordering::Release);
        }
        notify.status.publish(&ram);
        drop(notify);

        let response = WddmGpuRespSubmit {
            packets_completed: completion.packets_completed,
            fault_packet_offset,
            fault_address,
            bytes_transferred: completion.bytes_transferred,
            ..submit_response(fence, status)
        };
        let record = SubmissionRecord {
            fence,
            queued: job.queued,
            start,
            duration: ended.saturating_duration_since(start),
            packets: completion.packets_completed,
            bytes: completion.bytes_transferred,
            status,
            inline,
        };
        self.stats.record_submission_after(&record, packets);
        let cmd_as_sent = job.cmd_as_sent();
        if let (Some(recorder), Some(tape)) = (&self.recorder, job.tape) {
            if let Some(Action::Fault { packet, status }) = job.injection {
                recorder.injected_fault(fence, packet, status);
            }
            let Tape { capture, runs } = *tape;
            let submission = format::Submission {
                at_ns: recorder.since_start(job.queued),
                queue_wait_ns: nanos(record.start.saturating_duration_since(job.queued)),
                duration_ns: nanos(record.duration),
                inline,
                cmd: cmd_as_sent,
                runs,
                outcome: Outcome {
                    status: response.status,
                    packets_completed: response.packets_completed,
                    bytes_transferred: response.bytes_transferred,
                    fault_packet_offset: response.fault_packet_offset,
                    fault_address: response.fault_address,
                    fault_opcode: completion.fault_opcode,
                },
                captured: capture.take(),
            };
            recorder.submission(
                regions_of(&job.mem),
                job.window.clone(),
                format::Entry::Submission(submission),
            );
        }
        SubmitAnswer {
            status,
            reply: job.reply,
            response,
            record,
            // Only a completion is an interrupt to lose.
            held: lost_interrupt
                && !matches!(status, SubmitStatus::Preempted | SubmitStatus::Reset),
        }
    }

    /// Hands a submission to the trace (before its packets' successors, so the timeline keeps
    /// the order), then answers it.
    fn answer(&self, finished: SubmitAnswer) {
        if let Some(trace) = &self.trace {
            trace.submission(&finished.record);
        }
        if finished.held {
            lock(&self.held).push(finished);
            return;
        }
        answer(finished.reply, finished.response.as_bytes());
    }
}
