//! Paging-path measurement: counters and latency histograms per packet kind, submissions,
//! faults, preemptions, queue depth, and traffic per segment and bank.
//!
//! The engine reports one [`PacketRecord`] per executed packet and the scheduler one
//! [`SubmissionRecord`] per answered submission; nothing is recorded per page. [`Stats`] is
//! shared by the engine, the scheduler and the stats endpoint, which reads a [`StatsSnapshot`]
//! while the GPU runs.

use std::time::{Duration, Instant};

use wddm_gpu_abi::submit::SubmitStatus;

use crate::layout::SegmentLayout;

/// Which way bytes moved at one endpoint of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The packet read these bytes.
    Read,
    /// The packet wrote these bytes.
    Write,
}

/// Bytes one packet moved at one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// Segment id; 0 for guest system memory (a frame list).
    pub segment: u32,
    /// Segment GPU address of the first byte (`BaseAddress` + offset); for segment 0, the
    /// byte offset into the frame list.
    pub address: u64,
    /// Bytes.
    pub length: u64,
    /// Read or written.
    pub direction: Direction,
}

/// One packet the engine executed (completely or up to its fault).
#[derive(Clone, Copy, Debug)]
pub struct PacketRecord {
    /// `WDDM_GPU_OP_*` (unknown opcodes are recorded too).
    pub opcode: u16,
    /// Offset of the packet in its DMA buffer.
    pub dma_offset: u32,
    /// Fence of the submission the packet belongs to.
    pub fence: u32,
    /// When execution started.
    pub start: Instant,
    /// How long it ran.
    pub duration: Duration,
    /// Bytes moved (TRANSFER) or written (FILL).
    pub bytes: u64,
    /// Aperture pages mapped or unmapped (MAP_APERTURE, MAP_APERTURE2, UNMAP_APERTURE).
    pub pages: u64,
    /// Where bytes were read and written: source then destination; `None` where the packet
    /// moved no data.
    pub traffic: [Option<Traffic>; 2],
    /// The packet faulted (or was interrupted) instead of completing.
    pub faulted: bool,
}

/// One submission the scheduler answered.
#[derive(Clone, Copy, Debug)]
pub struct SubmissionRecord {
    /// `SubmissionFenceId`.
    pub fence: u32,
    /// When the control queue handed it over.
    pub queued: Instant,
    /// When execution started.
    pub start: Instant,
    /// Execution time (queueing excluded).
    pub duration: Duration,
    /// Packets completed.
    pub packets: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// How it ended.
    pub status: SubmitStatus,
    /// Whether it ran on the control-queue thread (short work) rather than the engine thread.
    pub inline: bool,
}

/// Shared measurement state. All methods take `&self`: the engine thread, the control-queue
/// thread and the stats endpoint use it concurrently.
pub struct Stats {
    _started: Instant,
}

impl Stats {
    /// Empty counters for this layout (its segments and banks).
    pub fn new(_layout: &SegmentLayout) -> Self {
        Self {
            _started: Instant::now(),
        }
    }

    /// A packet executed.
    pub fn record_packet(&self, _packet: &PacketRecord) {}

    /// A submission was answered.
    pub fn record_submission(&self, _submission: &SubmissionRecord) {}

    /// Submissions waiting or running changed to `depth`.
    pub fn queue_depth(&self, _depth: usize) {}

    /// `count` submissions were preempted.
    pub fn preempted(&self, _count: u64) {}
}
