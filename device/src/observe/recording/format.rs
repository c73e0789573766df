//! The `--record` file, version [`VERSION`]: what it holds and how each entry is written. Every
//! number is little-endian; `docs/record-replay.md` lists the fields in order.
//!
//! ```text
//! header   magic "WGPUREC\n", version u32, flags u32, vram_size u64, layout_len u32, layout text
//! entry    tag u8, payload_len u64, payload (one of the entries below, nothing after it)
//! ```
//!
//! The file is a host file that may come from another machine: the reader ([`super::read`])
//! checks every length, count and address against the caps declared here.

use std::ops::Range;

use wddm_gpu_abi::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdSetRootPageTable,
    WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use zerocopy::IntoBytes;

use crate::engine::{Interruption, Stop};
use crate::memory::capture::{Captured, ReadKind, Store};

/// The first eight bytes of every recording.
pub const MAGIC: [u8; 8] = *b"WGPUREC\n";

/// The format version this build writes; it reads this one and every earlier one
/// ([`OLDEST_VERSION`]): version 2 added the injected-fault entry, version 3 the virtual node
/// (context commands, virtual submissions, engine resets).
pub const VERSION: u32 = 3;

/// The oldest version this build reads.
pub const OLDEST_VERSION: u32 = 1;

/// Header flag: the bytes copies read (`--record-data`) are in the file, not only metadata.
pub const FLAG_DATA: u32 = 1;

/// Flags this version knows.
pub const FLAGS_KNOWN: u32 = FLAG_DATA;

/// Longest layout text (a layout file is a few KiB).
pub const MAX_LAYOUT_TEXT: u32 = 1 << 20;

/// Largest VRAM BAR a recording may ask the replay for (anonymous memory, touched lazily).
pub const MAX_VRAM_SIZE: u64 = 1 << 40;

/// Longest entry payload: a submission's metadata with its data reads (the recorder keeps at
/// most [`super::DATA_LIMIT`] data bytes per submission).
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// Most memory-table regions (vhost-user allows far fewer).
pub const MAX_REGIONS: u32 = 1024;

/// Highest guest-physical address a region may reach: the replay backs RAM with a sparse file
/// at guest-physical offsets.
pub const MAX_GUEST_ADDRESS: u64 = 1 << 48;

/// Most runs of one submission: one on the control-queue thread, the rest on the engine thread.
pub const MAX_RUNS: u8 = 2;

/// Entry tags.
pub const TAG_MEMORY_TABLE: u8 = 1;
/// A submission and what it read.
pub const TAG_SUBMISSION: u8 = 2;
/// A RESET (or a virtio reset): the GART is cleared.
pub const TAG_RESET: u8 = 3;
/// A PREEMPT.
pub const TAG_PREEMPT: u8 = 4;
/// A fault injection that faulted one packet of the next submission with its fence (version 2).
pub const TAG_INJECTED_FAULT: u8 = 5;
/// A context command the device accepted (version 3).
pub const TAG_CONTEXT: u8 = 6;
/// A SUBMIT_VIRTUAL and what it read (version 3).
pub const TAG_VIRTUAL_SUBMISSION: u8 = 7;
/// A RESET_ENGINE (version 3).
pub const TAG_ENGINE_RESET: u8 = 8;

/// What the file starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Whether copies' source bytes are recorded.
    pub data: bool,
    /// The VRAM BAR size the backend ran with.
    pub vram_size: u64,
    /// The `--layout` file's text; `None` for the default layout of `vram_size`.
    pub layout: Option<String>,
}

/// The guest memory a submission ran over: RAM regions and where the VRAM BAR was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryTable {
    /// Where the VRAM BAR appeared in guest-physical memory, if it did.
    pub vram_window: Option<Range<u64>>,
    /// The memory table's regions other than the VRAM BAR, as `start..end`.
    pub regions: Vec<Range<u64>>,
}

/// How one run of a submission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// It ran to its end or to a fault.
    Finished,
    /// The control-queue thread's budget ended it; the engine thread ran the rest.
    Deferred,
    /// A PREEMPT or a reset stopped it at the interruption check after `checks` that let it go on.
    Interrupted {
        /// Which.
        by: Interruption,
        /// Interruption checks answered "go on" in this run before the one that stopped it.
        checks: u32,
    },
}

impl RunEnd {
    /// How a run that was not deferred ended, from where it stopped and the interruption checks
    /// it passed: interrupted at the next one, or finished (or faulted).
    pub fn after(stop: Option<Stop>, checks: u32) -> Self {
        match stop {
            Some(Stop::Interrupted(by)) => RunEnd::Interrupted { by, checks },
            _ => RunEnd::Finished,
        }
    }
}

/// One run of a submission: the packets it completed and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Packets completed in this run.
    pub packets: u32,
    /// How it ended.
    pub end: RunEnd,
}

/// How a submission was answered (the fields of its response, and the faulting opcode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// `SubmitStatus` as on the wire.
    pub status: u32,
    /// Packets completed.
    pub packets_completed: u32,
    /// Bytes moved or written.
    pub bytes_transferred: u64,
    /// DMA-buffer offset where it stopped (0 when it did not).
    pub fault_packet_offset: u32,
    /// The address the fault names (0 for none).
    pub fault_address: u64,
    /// Opcode of the faulting packet (0 for none).
    pub fault_opcode: u16,
}

impl Outcome {
    /// A SUBMIT_VIRTUAL's answer: the address is the page fault's virtual address (0 without
    /// one), and there is no opcode.
    pub fn of_virtual(reply: &WddmGpuRespSubmitVirtual) -> Self {
        Self {
            status: reply.status,
            packets_completed: reply.packets_completed,
            bytes_transferred: reply.bytes_transferred,
            fault_packet_offset: reply.fault_packet_offset,
            fault_address: reply.page_fault.fault.virtual_address,
            fault_opcode: 0,
        }
    }
}

/// One paging submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// Nanoseconds from the start of the recording to when the control queue handed it over.
    pub at_ns: u64,
    /// Nanoseconds it waited before it started.
    pub queue_wait_ns: u64,
    /// Nanoseconds it executed.
    pub duration_ns: u64,
    /// Whether it ran wholly on the control-queue thread.
    pub inline: bool,
    /// The command as the driver sent it.
    pub cmd: WddmGpuCmdSubmit,
    /// Its runs, in order (one or two).
    pub runs: Vec<Run>,
    /// Its answer.
    pub outcome: Outcome,
    /// What it read.
    pub captured: Captured,
}

/// How a SUBMIT_VIRTUAL was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtualStart {
    /// It ran through the virtual engine and ended so (never deferred: the node has no budget).
    Ran(RunEnd),
    /// The node was faulted: answered NODE_FAULTED without running.
    NodeFaulted,
    /// A hang or a delay (fault injections) that a PREEMPT or RESET_ENGINE ended before it ran.
    Stopped(Interruption),
    /// An injected page fault at `address` stopped it at its first packet.
    InjectedPageFault {
        /// The GPU VA.
        address: u64,
        /// A write access (else a read).
        write: bool,
    },
}

/// One SUBMIT_VIRTUAL on the virtual node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualSubmission {
    /// Nanoseconds from the start of the recording to when the node took it.
    pub at_ns: u64,
    /// Nanoseconds it executed.
    pub duration_ns: u64,
    /// The command as the driver sent it.
    pub cmd: WddmGpuCmdSubmitVirtual,
    /// How it was taken.
    pub start: VirtualStart,
    /// Its answer ([`Outcome::of_virtual`]).
    pub outcome: Outcome,
    /// What it read: its DMA buffer, the page-table entries its walks read, its copies' sources.
    pub captured: Captured,
}

/// A context command the device accepted, as the driver sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextCommand {
    /// CREATE_CONTEXT.
    Create(WddmGpuCmdCreateContext),
    /// DESTROY_CONTEXT.
    Destroy(WddmGpuCmdDestroyContext),
    /// SET_ROOT_PAGE_TABLE.
    SetRoot(WddmGpuCmdSetRootPageTable),
}

impl ContextCommand {
    /// The command's name in messages.
    pub fn name(&self) -> &'static str {
        match self {
            ContextCommand::Create(_) => "CREATE_CONTEXT",
            ContextCommand::Destroy(_) => "DESTROY_CONTEXT",
            ContextCommand::SetRoot(_) => "SET_ROOT_PAGE_TABLE",
        }
    }
}

/// Who reset the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetBy {
    /// The driver's RESET command.
    Driver,
    /// A virtio reset by the frontend.
    Frontend,
}

/// One entry after the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The guest memory the following submissions ran over (written when it changes).
    MemoryTable(MemoryTable),
    /// A submission.
    Submission(Submission),
    /// A reset, `at_ns` from the start of the recording.
    Reset {
        /// When.
        at_ns: u64,
        /// By whom.
        by: ResetBy,
    },
    /// A PREEMPT that stopped `count` submissions.
    Preempt {
        /// When.
        at_ns: u64,
        /// Submissions it stopped (running and queued).
        count: u32,
    },
    /// The `fault packet=I status=NAME` injection the next submission with `fence` was taken
    /// with: its packet `packet` (0 = the first) faulted with `status` instead of running.
    InjectedFault {
        /// The submission's fence.
        fence: u32,
        /// The packet's index in the submission.
        packet: u32,
        /// The status it faulted with.
        status: SubmitStatus,
    },
    /// A context command the device accepted.
    Context(ContextCommand),
    /// A SUBMIT_VIRTUAL.
    VirtualSubmission(VirtualSubmission),
    /// A RESET_ENGINE of `node` (answered once the node's work ended).
    EngineReset {
        /// When.
        at_ns: u64,
        /// The node.
        node: u32,
    },
}

impl Entry {
    /// The entry's name in messages.
    pub fn name(&self) -> &'static str {
        tag_name(self.tag())
    }

    fn tag(&self) -> u8 {
        match self {
            Entry::MemoryTable(_) => TAG_MEMORY_TABLE,
            Entry::Submission(_) => TAG_SUBMISSION,
            Entry::Reset { .. } => TAG_RESET,
            Entry::Preempt { .. } => TAG_PREEMPT,
            Entry::InjectedFault { .. } => TAG_INJECTED_FAULT,
            Entry::Context(_) => TAG_CONTEXT,
            Entry::VirtualSubmission(_) => TAG_VIRTUAL_SUBMISSION,
            Entry::EngineReset { .. } => TAG_ENGINE_RESET,
        }
    }
}

/// The name of an entry tag in messages.
pub fn tag_name(tag: u8) -> &'static str {
    match tag {
        TAG_MEMORY_TABLE => "memory table",
        TAG_SUBMISSION => "submission",
        TAG_RESET => "reset",
        TAG_PREEMPT => "preempt",
        TAG_INJECTED_FAULT => "injected fault",
        TAG_CONTEXT => "context",
        TAG_VIRTUAL_SUBMISSION => "virtual submission",
        TAG_ENGINE_RESET => "engine reset",
        _ => "unknown",
    }
}

/// Wire values of the small enumerations.
pub(super) mod code {
    use super::{Interruption, ReadKind, ResetBy, RunEnd, Store, VirtualStart};

    pub const STORE_RAM: u8 = 0;
    pub const STORE_VRAM: u8 = 1;
    pub const KIND_METADATA: u8 = 0;
    pub const KIND_DATA: u8 = 1;
    pub const END_FINISHED: u8 = 0;
    pub const END_DEFERRED: u8 = 1;
    pub const END_PREEMPTED: u8 = 2;
    pub const END_RESET: u8 = 3;
    pub const RESET_DRIVER: u8 = 0;
    pub const RESET_FRONTEND: u8 = 1;
    pub const CONTEXT_CREATE: u8 = 0;
    pub const CONTEXT_DESTROY: u8 = 1;
    pub const CONTEXT_SET_ROOT: u8 = 2;
    pub const START_RAN: u8 = 0;
    pub const START_NODE_FAULTED: u8 = 1;
    pub const START_STOPPED: u8 = 2;
    pub const START_INJECTED_PAGE_FAULT: u8 = 3;

    pub fn store(store: Store) -> u8 {
        match store {
            Store::Ram => STORE_RAM,
            Store::Vram => STORE_VRAM,
        }
    }

    pub fn kind(kind: ReadKind) -> u8 {
        match kind {
            ReadKind::Metadata => KIND_METADATA,
            ReadKind::Data => KIND_DATA,
        }
    }

    pub fn end(end: RunEnd) -> u8 {
        match end {
            RunEnd::Finished => END_FINISHED,
            RunEnd::Deferred => END_DEFERRED,
            RunEnd::Interrupted { by, .. } => interruption(by),
        }
    }

    pub fn interruption(by: Interruption) -> u8 {
        match by {
            Interruption::Preempted => END_PREEMPTED,
            Interruption::Reset => END_RESET,
        }
    }

    pub fn start(start: VirtualStart) -> u8 {
        match start {
            VirtualStart::Ran(_) => START_RAN,
            VirtualStart::NodeFaulted => START_NODE_FAULTED,
            VirtualStart::Stopped(_) => START_STOPPED,
            VirtualStart::InjectedPageFault { .. } => START_INJECTED_PAGE_FAULT,
        }
    }

    pub fn reset_by(by: ResetBy) -> u8 {
        match by {
            ResetBy::Driver => RESET_DRIVER,
            ResetBy::Frontend => RESET_FRONTEND,
        }
    }
}

/// Appends little-endian fields to a buffer.
struct Out<'a>(&'a mut Vec<u8>);

impl Out<'_> {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// Why something could not be written in this format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A count or length past what the format (or its reader) takes.
    #[error("{field} is {value}, more than the format takes ({max})")]
    TooLarge {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The most the format takes.
        max: u64,
    },
}

fn fits(field: &'static str, value: u64, max: u64) -> Result<(), EncodeError> {
    if value > max {
        return Err(EncodeError::TooLarge { field, value, max });
    }
    Ok(())
}

/// The header's bytes.
pub fn encode_header(header: &Header, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let layout = header.layout.as_deref().unwrap_or("").as_bytes();
    fits(
        "layout text",
        layout.len() as u64,
        u64::from(MAX_LAYOUT_TEXT),
    )?;
    let mut out = Out(out);
    out.bytes(&MAGIC);
    out.u32(VERSION);
    out.u32(if header.data { FLAG_DATA } else { 0 });
    out.u64(header.vram_size);
    // Checked just above against a u32 cap.
    out.u32(u32::try_from(layout.len()).unwrap_or(u32::MAX));
    out.bytes(layout);
    Ok(())
}

/// An entry's bytes (tag, length, payload) appended to `out`.
pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = out.len();
    out.push(entry.tag());
    out.extend_from_slice(&[0; 8]);
    let payload_start = out.len();
    let mut o = Out(out);
    match entry {
        Entry::MemoryTable(table) => {
            fits(
                "regions",
                table.regions.len() as u64,
                u64::from(MAX_REGIONS),
            )?;
            match &table.vram_window {
                Some(window) => {
                    o.u8(1);
                    o.u64(window.start);
                    o.u64(window.end);
                }
                None => {
                    o.u8(0);
                    o.u64(0);
                    o.u64(0);
                }
            }
            o.u32(u32::try_from(table.regions.len()).unwrap_or(u32::MAX));
            for region in &table.regions {
                o.u64(region.start);
                o.u64(region.end);
            }
        }
        Entry::Submission(submission) => encode_submission(submission, &mut o)?,
        Entry::Reset { at_ns, by } => {
            o.u64(*at_ns);
            o.u8(code::reset_by(*by));
        }
        Entry::Preempt { at_ns, count } => {
            o.u64(*at_ns);
            o.u32(*count);
        }
        Entry::InjectedFault {
            fence,
            packet,
            status,
        } => {
            o.u32(*fence);
            o.u32(*packet);
            o.u32(*status as u32);
        }
        Entry::Context(command) => match command {
            ContextCommand::Create(cmd) => {
                o.u8(code::CONTEXT_CREATE);
                o.bytes(cmd.as_bytes());
            }
            ContextCommand::Destroy(cmd) => {
                o.u8(code::CONTEXT_DESTROY);
                o.bytes(cmd.as_bytes());
            }
            ContextCommand::SetRoot(cmd) => {
                o.u8(code::CONTEXT_SET_ROOT);
                o.bytes(cmd.as_bytes());
            }
        },
        Entry::VirtualSubmission(submission) => encode_virtual(submission, &mut o)?,
        Entry::EngineReset { at_ns, node } => {
            o.u64(*at_ns);
            o.u32(*node);
        }
    }
    let payload = (out.len() - payload_start) as u64;
    if let Err(error) = fits("payload", payload, MAX_PAYLOAD) {
        out.truncate(start);
        return Err(error);
    }
    out[start + 1..payload_start].copy_from_slice(&payload.to_le_bytes());
    Ok(())
}

fn encode_submission(submission: &Submission, o: &mut Out<'_>) -> Result<(), EncodeError> {
    let Submission {
        at_ns,
        queue_wait_ns,
        duration_ns,
        inline,
        cmd,
        runs,
        outcome,
        captured,
    } = submission;
    fits("runs", runs.len() as u64, u64::from(MAX_RUNS))?;
    o.u64(*at_ns);
    o.u64(*queue_wait_ns);
    o.u64(*duration_ns);
    o.u8(u8::from(*inline));
    o.bytes(cmd.as_bytes());
    o.u8(u8::try_from(runs.len()).unwrap_or(u8::MAX));
    for run in runs {
        o.u32(run.packets);
        o.u8(code::end(run.end));
        o.u32(match run.end {
            RunEnd::Interrupted { checks, .. } => checks,
            _ => 0,
        });
    }
    encode_outcome(outcome, o);
    encode_captured(captured, o)
}

fn encode_virtual(submission: &VirtualSubmission, o: &mut Out<'_>) -> Result<(), EncodeError> {
    let VirtualSubmission {
        at_ns,
        duration_ns,
        cmd,
        start,
        outcome,
        captured,
    } = submission;
    o.u64(*at_ns);
    o.u64(*duration_ns);
    o.bytes(cmd.as_bytes());
    o.u8(code::start(*start));
    let (end, checks, address, write) = match *start {
        VirtualStart::Ran(end) => (
            code::end(end),
            match end {
                RunEnd::Interrupted { checks, .. } => checks,
                _ => 0,
            },
            0,
            false,
        ),
        VirtualStart::Stopped(by) => (code::interruption(by), 0, 0, false),
        VirtualStart::NodeFaulted => (0, 0, 0, false),
        VirtualStart::InjectedPageFault { address, write } => (0, 0, address, write),
    };
    o.u8(end);
    o.u32(checks);
    o.u64(address);
    o.u8(u8::from(write));
    encode_outcome(outcome, o);
    encode_captured(captured, o)
}

fn encode_outcome(outcome: &Outcome, o: &mut Out<'_>) {
    o.u32(outcome.status);
    o.u32(outcome.packets_completed);
    o.u64(outcome.bytes_transferred);
    o.u32(outcome.fault_packet_offset);
    o.u64(outcome.fault_address);
    o.u16(outcome.fault_opcode);
}

fn encode_captured(captured: &Captured, o: &mut Out<'_>) -> Result<(), EncodeError> {
    fits("reads", captured.reads.len() as u64, u64::from(u32::MAX))?;
    o.u64(captured.data_dropped);
    o.u32(u32::try_from(captured.reads.len()).unwrap_or(u32::MAX));
    for read in &captured.reads {
        o.u8(code::store(read.store));
        o.u8(code::kind(read.kind));
        o.u64(read.address);
        o.u64(read.length);
    }
    o.bytes(&captured.bytes);
    Ok(())
}
