//! `vhost-user-wddm-gpu replay FILE`: runs a `--record` file again, offline, against the
//! paging engine and the virtual node's engine of this build: no VM, no QEMU. The layout and
//! VRAM size come from the file's header; guest RAM is a sparse memory file laid out as each
//! recorded memory table says ([`ram`]); VRAM is anonymous memory. The recorded context
//! commands rebuild the contexts and their address spaces. Before each submission its recorded
//! reads are written back where they were read, then its runs execute as they did (deferred and
//! interrupted at the same points: [`hooks`]), feeding statistics and, when asked, a trace;
//! RESETs clear the GART in order, RESET_ENGINE the virtual node's fault. Each answer is
//! compared with the recorded one.

pub mod hooks;
pub mod ram;

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual, WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL,
};
use wddm_gpu_abi::submit::SubmitStatus;

use self::hooks::ReplayHooks;
use self::ram::{RamSetupError, ReplayRam};
use crate::engine::virtual_engine::{
    virtual_response, VirtualCompletion, VirtualEngine, VirtualMemory,
};
use crate::engine::{Completion, DeviceMemory, Engine, Fault, Stop};
use crate::layout::file::parse_layout;
use crate::layout::rules::validate;
use crate::layout::SegmentLayout;
use crate::memory::capture::{Captured, Store};
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::{Vram, VramError};
use crate::mmu::contexts::{ContextError, Contexts};
use crate::observe::recording::format::{
    ContextCommand, Entry, Header, Outcome, ResetBy, Run, RunEnd, Submission, VirtualStart,
    VirtualSubmission,
};
use crate::observe::recording::read::{read_header, EntryReader, ReadError};
use crate::observe::stats::{Stats, SubmissionRecord, VirtualSubmissionRecord};
use crate::observe::trace::Trace;
use crate::support::nanos::nanos;
use crate::support::sync::lock;

/// What to produce besides the statistics.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Write a `--trace` timeline of the replay here.
    pub trace: Option<PathBuf>,
    /// Write the replayed VRAM BAR's bytes here when done.
    pub dump_vram: Option<PathBuf>,
}

/// A submission whose replayed answer differs from the recorded one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The entry's position in the file.
    pub entry: u64,
    /// The node it ran on (0 paging, 1 virtual).
    pub node: u32,
    /// The submission's fence.
    pub fence: u32,
    /// What the backend answered.
    pub recorded: Outcome,
    /// What the replay answered.
    pub replayed: Outcome,
}

/// A context command the backend accepted that the replay refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The entry's position in the file.
    pub entry: u64,
    /// The command.
    pub command: &'static str,
    /// Why the replay refused it.
    pub error: ContextError,
}

/// What a replay did.
pub struct ReplayReport {
    /// The file's header.
    pub header: Header,
    /// The statistics of the replay, as the backend's `stats` shows them.
    pub stats: Stats,
    /// What was replayed and how it compared.
    pub counts: ReplayCounts,
}

/// What the replay counts as it goes.
#[derive(Debug, Default)]
pub struct ReplayCounts {
    /// Submissions replayed (both nodes).
    pub submissions: u64,
    /// Of them, the virtual node's.
    pub virtual_submissions: u64,
    /// Context commands replayed.
    pub context_commands: u64,
    /// RESET_ENGINEs replayed.
    pub engine_resets: u64,
    /// Resets replayed.
    pub resets: u64,
    /// PREEMPT commands recorded.
    pub preempts: u64,
    /// Submissions answered differently.
    pub mismatches: Vec<Mismatch>,
    /// Context commands the replay refused.
    pub refusals: Vec<Refusal>,
    /// Data bytes the recording left out (its per-submission limit), over all submissions.
    pub data_dropped: u64,
    /// Nanoseconds the recorded submissions executed, in all.
    pub recorded_ns: u64,
    /// Nanoseconds the replayed submissions executed, in all.
    pub replayed_ns: u64,
}

/// Why a replay could not be done (a mismatch is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be opened.
    #[error("{path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not a readable recording.
    #[error(transparent)]
    Format(#[from] ReadError),
    /// The recorded layout does not pass this build's rules.
    #[error("header: the recorded layout: {0}")]
    Layout(String),
    /// The VRAM could not be made.
    #[error("header: VRAM of the recorded size: {0}")]
    Vram(#[from] VramError),
    /// Guest RAM could not be set up.
    #[error("entry {entry}: {source}")]
    Ram {
        /// The memory-table entry.
        entry: u64,
        /// Why.
        source: RamSetupError,
    },
    /// A submission came before any memory table.
    #[error("entry {entry} (submission): no memory table before it")]
    NoMemoryTable {
        /// The entry.
        entry: u64,
    },
    /// A recorded read lies outside the memory it names.
    #[error("entry {entry} (submission): a read of {length:#x} bytes at {address:#x} is outside the recorded {store}")]
    ReadOutside {
        /// The entry.
        entry: u64,
        /// Which memory.
        store: &'static str,
        /// Where.
        address: u64,
        /// How long.
        length: u64,
    },
    /// The trace could not be created.
    #[error("--trace {0}: {1}")]
    Trace(PathBuf, io::Error),
    /// The VRAM dump could not be written.
    #[error("--dump-vram {0}: {1}")]
    Dump(PathBuf, io::Error),
}

/// The layout the recording ran with.
fn layout_of(header: &Header) -> Result<SegmentLayout, ReplayError> {
    let Some(text) = &header.layout else {
        return Ok(SegmentLayout::default_for_vram(header.vram_size));
    };
    let spec = parse_layout(text).map_err(|error| ReplayError::Layout(error.to_string()))?;
    validate(&spec, header.vram_size).map_err(|violations| {
        let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
        ReplayError::Layout(lines.join("; "))
    })
}

/// Replays the recording at `path`.
pub fn replay(path: &Path, options: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let file = File::open(path).map_err(|source| ReplayError::Open {
        path: path.to_owned(),
        source,
    })?;
    let mut input = BufReader::new(file);
    let header = read_header(&mut input)?;
    let layout = layout_of(&header)?;
    let vram = Vram::anonymous(header.vram_size, layout.device_only_vram(header.vram_size))?;
    let trace = match &options.trace {
        Some(path) => Some(Trace::create(path).map_err(|e| ReplayError::Trace(path.clone(), e))?),
        None => None,
    };
    let mut replayer = Replayer {
        engine: Engine::new(&layout),
        virtual_engine: VirtualEngine::default(),
        contexts: Contexts::new(layout.gpummu),
        node_faulted: false,
        stats: Stats::new(&layout),
        layout,
        vram,
        trace,
        ram: ReplayRam::new().map_err(|source| ReplayError::Ram { entry: 0, source })?,
        memory: None,
        injected: None,
    };
    let mut report = ReplayCounts::default();
    let mut entries = EntryReader::new(input);
    loop {
        let index = entries.index();
        let Some(entry) = entries.next_entry()? else {
            break;
        };
        match entry {
            Entry::MemoryTable(table) => {
                let mem = replayer
                    .ram
                    .table(&table)
                    .map_err(|source| ReplayError::Ram {
                        entry: index,
                        source,
                    })?;
                replayer.memory = Some((mem, table.vram_window));
            }
            // The two nodes' submissions are counted alike; each runs on its own engine.
            Entry::Submission(s) => {
                let replayed = replayer.submission(index, &s)?;
                let at = (index, WDDM_GPU_NODE_PAGING, s.cmd.submission_fence_id);
                report.count(at, (&s.outcome, s.duration_ns, &s.captured), replayed);
            }
            Entry::VirtualSubmission(s) => {
                report.virtual_submissions += 1;
                let replayed = replayer.virtual_submission(index, &s)?;
                let at = (index, WDDM_GPU_NODE_VIRTUAL, s.cmd.submission_fence_id);
                report.count(at, (&s.outcome, s.duration_ns, &s.captured), replayed);
            }
            Entry::Context(command) => {
                report.context_commands += 1;
                if let Err(error) = replayer.context(command) {
                    report.refusals.push(Refusal {
                        entry: index,
                        command: command.name(),
                        error,
                    });
                }
            }
            Entry::EngineReset { node, .. } => {
                report.engine_resets += 1;
                if node == WDDM_GPU_NODE_VIRTUAL {
                    replayer.node_faulted = false;
                }
            }
            Entry::Reset { by, .. } => {
                report.resets += 1;
                replayer.engine.reset();
                // A virtio reset also ends every context (the driver's RESET keeps them).
                if by == ResetBy::Frontend {
                    replayer.contexts.clear();
                    replayer.node_faulted = false;
                }
            }
            Entry::Preempt { count, .. } => {
                report.preempts += 1;
                replayer.stats.preempted(u64::from(count));
            }
            Entry::InjectedFault {
                fence,
                packet,
                status,
            } => replayer.injected = Some((fence, packet, status)),
        }
    }
    if let Some(trace) = &replayer.trace {
        trace
            .finish()
            .map_err(|e| ReplayError::Trace(options.trace.clone().unwrap_or_default(), e))?;
    }
    if let Some(out) = &options.dump_vram {
        dump_vram(&replayer.vram, out).map_err(|e| ReplayError::Dump(out.clone(), e))?;
    }
    Ok(ReplayReport {
        header,
        stats: replayer.stats,
        counts: report,
    })
}

impl ReplayCounts {
    /// Counts a replayed submission (entry, node and fence `at`): its recorded answer, time and
    /// reads, its replayed answer and time; keeps the answer when it differs.
    fn count(
        &mut self,
        (entry, node, fence): (u64, u32, u32),
        (recorded, recorded_ns, captured): (&Outcome, u64, &Captured),
        (replayed, replayed_ns): (Outcome, u64),
    ) {
        self.submissions += 1;
        self.data_dropped = self.data_dropped.saturating_add(captured.data_dropped);
        self.recorded_ns = self.recorded_ns.saturating_add(recorded_ns);
        self.replayed_ns = self.replayed_ns.saturating_add(replayed_ns);
        if replayed != *recorded {
            self.mismatches.push(Mismatch {
                entry,
                node,
                fence,
                recorded: *recorded,
                replayed,
            });
        }
    }
}

/// The replay's state between entries.
struct Replayer {
    engine: Engine,
    virtual_engine: VirtualEngine,
    /// The contexts the recorded context commands built.
    contexts: Contexts,
    /// A page fault stopped the virtual node (until RESET_ENGINE).
    node_faulted: bool,
    stats: Stats,
    layout: SegmentLayout,
    vram: Vram,
    trace: Option<Trace>,
    ram: ReplayRam,
    /// Guest memory of the last memory table, and where the VRAM BAR was in it.
    memory: Option<(GuestMemoryMmap, Option<Range<u64>>)>,
    /// An injected fault recorded for the next submission with this fence: the fence, the
    /// packet and its status.
    injected: Option<(u32, u32, SubmitStatus)>,
}

impl Replayer {
    /// Runs one submission as it ran; returns its answer and how long it executed.
    fn submission(
        &mut self,
        entry: u64,
        submission: &Submission,
    ) -> Result<(Outcome, u64), ReplayError> {
        let memory = restored(
            &self.memory,
            &self.vram,
            &self.layout,
            entry,
            &submission.captured,
        )?;
        let start = Instant::now();
        let mut cmd = submission.cmd;
        let (mut packets, mut bytes) = (0u32, 0u64);
        let mut last = None;
        // The fault the backend injected into this submission, faulted here at the same packet.
        let fence = submission.cmd.submission_fence_id;
        let fault_at = self
            .injected
            .take_if(|(injected, _, _)| *injected == fence)
            .map(|(_, packet, status)| (packet, status));
        for run in &submission.runs {
            let injected =
                fault_at.and_then(|(packet, status)| Some((packet.checked_sub(packets)?, status)));
            let mut hooks = ReplayHooks::new(
                *run,
                injected,
                &self.stats,
                self.trace.as_ref(),
                &self.contexts,
            );
            let completion = self.engine.execute(&cmd, &memory, &mut hooks);
            packets = packets.saturating_add(completion.packets_completed);
            bytes = bytes.saturating_add(completion.bytes_transferred);
            last = Some(completion);
            match (run.end, completion.deferred) {
                (RunEnd::Deferred, Some(offset)) => cmd.start_offset = offset,
                // A run deferred in the backend that ran on here, or the other way round: the
                // answer so far is what is compared.
                _ => break,
            }
        }
        let duration = start.elapsed();
        let outcome = outcome(last, packets, bytes);
        let record = SubmissionRecord {
            fence: submission.cmd.submission_fence_id,
            // No queue offline: the replay's own execution times, no waiting.
            queued: start,
            start,
            duration,
            packets,
            bytes,
            status: status_of(last),
            inline: submission.inline,
        };
        self.stats.record_submission(&record);
        if let Some(trace) = &self.trace {
            trace.submission(&record);
        }
        Ok((outcome, nanos(duration)))
    }

    /// Applies a context command as the backend did.
    fn context(&mut self, command: ContextCommand) -> Result<(), ContextError> {
        match command {
            ContextCommand::Create(cmd) => self.contexts.create(&cmd),
            ContextCommand::Destroy(cmd) => self.contexts.destroy(cmd.context_id),
            ContextCommand::SetRoot(cmd) => self.contexts.set_root(&cmd),
        }
    }

    /// Runs one SUBMIT_VIRTUAL as the node took it; returns its answer and how long it took.
    /// The node's own state decides as the backend's did: a faulted node runs nothing.
    fn virtual_submission(
        &mut self,
        entry: u64,
        submission: &VirtualSubmission,
    ) -> Result<(Outcome, u64), ReplayError> {
        let cmd = &submission.cmd;
        let fence = cmd.submission_fence_id;
        let start = Instant::now();
        let reply = match submission.start {
            _ if self.node_faulted => virtual_response(fence, SubmitStatus::NodeFaulted),
            VirtualStart::Stopped(by) => virtual_response(fence, Stop::Interrupted(by).status()),
            VirtualStart::InjectedPageFault { address, write } => {
                self.settle_virtual(cmd, &VirtualCompletion::page_fault_at(cmd, address, write))
            }
            // A node the recording found faulted that is not here runs the submission.
            VirtualStart::NodeFaulted => self.run_virtual(entry, submission, RunEnd::Finished)?,
            VirtualStart::Ran(end) => self.run_virtual(entry, submission, end)?,
        };
        let duration = start.elapsed();
        self.stats
            .record_virtual_submission(&VirtualSubmissionRecord::answered(&reply, duration));
        Ok((Outcome::of_virtual(&reply), nanos(duration)))
    }

    /// Runs a virtual submission through the engine, interrupted where the recorded run was.
    fn run_virtual(
        &mut self,
        entry: u64,
        submission: &VirtualSubmission,
        end: RunEnd,
    ) -> Result<WddmGpuRespSubmitVirtual, ReplayError> {
        let cmd = &submission.cmd;
        let walkable = self
            .contexts
            .walkable(cmd.context_id, WDDM_GPU_NODE_VIRTUAL);
        let Some((space, geometry)) = walkable else {
            return Ok(virtual_response(
                cmd.submission_fence_id,
                SubmitStatus::BadContext,
            ));
        };
        let memory = restored(
            &self.memory,
            &self.vram,
            &self.layout,
            entry,
            &submission.captured,
        )?;
        let virtual_memory = VirtualMemory {
            mem: &memory,
            geometry: &geometry,
            space: &space,
        };
        let run = Run { packets: 0, end };
        let mut hooks = ReplayHooks::new(run, None, &self.stats, None, &self.contexts);
        let completion = self
            .virtual_engine
            .execute(cmd, &virtual_memory, &mut hooks);
        // The checking mode's findings are the backend's to report: dropped here.
        drop(lock(&space).take_stale());
        Ok(self.settle_virtual(cmd, &completion))
    }

    /// The answer of a virtual submission that ended so; a page fault faults the node.
    fn settle_virtual(
        &mut self,
        cmd: &WddmGpuCmdSubmitVirtual,
        completion: &VirtualCompletion,
    ) -> WddmGpuRespSubmitVirtual {
        if let Some((_, Stop::Fault(Fault::Page(_)))) = completion.stop {
            self.node_faulted = true;
        }
        completion.response(cmd)
    }
}

/// The memory of the latest memory table, with `captured`'s reads written back.
fn restored<'a>(
    memory: &'a Option<(GuestMemoryMmap, Option<Range<u64>>)>,
    vram: &'a Vram,
    layout: &'a SegmentLayout,
    entry: u64,
    captured: &Captured,
) -> Result<DeviceMemory<'a, GuestMemoryMmap>, ReplayError> {
    let (mem, window) = memory
        .as_ref()
        .ok_or(ReplayError::NoMemoryTable { entry })?;
    restore_reads(entry, captured, mem, vram)?;
    Ok(DeviceMemory {
        ram: GuestRam::new(mem, window.clone()),
        vram,
        layout,
    })
}

/// The status a completion is answered with.
fn status_of(completion: Option<Completion>) -> SubmitStatus {
    match completion.and_then(|completion| completion.stop) {
        Some((_, stop)) => stop.status(),
        None => SubmitStatus::Ok,
    }
}

/// The answer the backend gives for a completion, as `Execution::settle` forms it, with the
/// packets and bytes of every run.
fn outcome(completion: Option<Completion>, packets: u32, bytes: u64) -> Outcome {
    let (fault_packet_offset, fault_address) = match completion.and_then(|c| c.stop) {
        Some((offset, stop)) => (offset, stop.address()),
        None => (0, 0),
    };
    Outcome {
        status: status_of(completion) as u32,
        packets_completed: packets,
        bytes_transferred: bytes,
        fault_packet_offset,
        fault_address,
        fault_opcode: completion.map_or(0, |c| c.fault_opcode),
    }
}

/// Writes a submission's recorded reads back where they were read, last first, so that where
/// it read one place twice the first read's bytes are there when it starts (a later read of
/// bytes the submission itself wrote finds them written by the replay too).
fn restore_reads(
    entry: u64,
    captured: &Captured,
    mem: &GuestMemoryMmap,
    vram: &Vram,
) -> Result<(), ReplayError> {
    // The reader checked that the lengths add up to the bytes; each read's end is its start.
    let mut end = captured.bytes.len();
    for read in captured.reads.iter().rev() {
        let outside = |store| ReplayError::ReadOutside {
            entry,
            store,
            address: read.address,
            length: read.length,
        };
        let length = usize::try_from(read.length).map_err(|_| outside("memory"))?;
        let start = end - length;
        let bytes = &captured.bytes[start..end];
        end = start;
        match read.store {
            Store::Ram => mem
                .write_slice(bytes, GuestAddress(read.address))
                .map_err(|_| outside("guest RAM"))?,
            Store::Vram => write_vram(vram, read.address, bytes).ok_or(outside("VRAM"))?,
        }
    }
    Ok(())
}

/// Writes bytes at a VRAM offset, split where the BAR ends and device-only memory begins
/// (reads that touched are kept as one).
fn write_vram(vram: &Vram, offset: u64, bytes: &[u8]) -> Option<()> {
    let range = vram.range(offset, bytes.len() as u64)?;
    let split = usize::try_from(vram.size().saturating_sub(range.start()))
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let (bar, local) = bytes.split_at(split);
    if !bar.is_empty() {
        vram.slice(offset, bar.len())?.copy_from(bar);
    }
    if !local.is_empty() {
        vram.slice(offset + bar.len() as u64, local.len())?
            .copy_from(local);
    }
    Some(())
}

/// The VRAM BAR's bytes, in steps.
fn dump_vram(vram: &Vram, path: &Path) -> io::Result<()> {
    const STEP: usize = 1 << 20;
    let mut out = io::BufWriter::new(File::create(path)?);
    let mut buf = vec![0u8; STEP];
    let mut offset = 0u64;
    while offset < vram.size() {
        let len = usize::try_from(vram.size() - offset).map_or(STEP, |left| left.min(STEP));
        let slice = vram
            .slice(offset, len)
            .ok_or_else(|| io::Error::other("VRAM slice"))?;
        slice.copy_to(&mut buf[..len]);
        out.write_all(&buf[..len])?;
        offset += len as u64;
    }
    out.flush()
}
