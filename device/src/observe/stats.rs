//! Paging-path measurement: counters and latency histograms per packet kind, submissions,
//! faults, preemptions, queue depth, and traffic per segment and bank; beside them, what the
//! display sent to QEMU ([`display`]).
//!
//! The engine reports one [`PacketRecord`] per executed packet and the scheduler one
//! [`SubmissionRecord`] per answered submission; nothing is recorded per page. [`Stats`] is
//! shared by the engine, the scheduler and the stats endpoint, which reads a [`StatsSnapshot`]
//! while the GPU runs.
//!
//! Every value in a record may come from the guest (opcodes, addresses, lengths): recording
//! uses saturating arithmetic, buckets unknown opcodes and segments, and never allocates, so a
//! hostile record cannot panic or slow the engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use wddm_gpu_abi::context::{
    WddmGpuRespSubmitVirtual, WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL,
};
use wddm_gpu_abi::decode::PacketKind;
use wddm_gpu_abi::submit::SubmitStatus;

use self::display::{DisplayCounters, DisplaySnapshot};
use crate::engine::record::{Direction, PacketRecord, Traffic};
use crate::layout::SegmentLayout;
use crate::support::nanos::nanos;
use crate::support::sync::lock;

pub mod display;
pub mod live;
mod render;
pub mod watch;

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

impl SubmissionRecord {
    /// When execution ended.
    pub fn end(&self) -> Instant {
        self.start + self.duration
    }
}

/// One submission the virtual node (node 1) answered.
#[derive(Clone, Copy, Debug)]
pub struct VirtualSubmissionRecord {
    /// Execution time (queueing excluded).
    pub duration: Duration,
    /// Packets completed.
    pub packets: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// How it ended.
    pub status: SubmitStatus,
}

impl VirtualSubmissionRecord {
    /// The record of a SUBMIT_VIRTUAL the node answered with `reply` after `duration`.
    pub fn answered(reply: &WddmGpuRespSubmitVirtual, duration: Duration) -> Self {
        Self {
            duration,
            packets: reply.packets_completed,
            bytes: reply.bytes_transferred,
            // The node writes its own answers: the status is always one it knows.
            status: SubmitStatus::from_raw(reply.status).unwrap_or(SubmitStatus::Ok),
        }
    }
}

/// Counters per packet kind: one per [`PacketKind`], in report order, then one that takes every
/// other opcode.
const KIND_BUCKETS: usize = PacketKind::ALL.len() + 1;

/// The report name of the bucket that takes opcodes naming no kind.
const UNKNOWN_KIND: &str = "unknown";

/// The bucket of an opcode (unknown opcodes share the last one).
fn kind_bucket(opcode: u16) -> usize {
    PacketKind::ALL
        .iter()
        .position(|kind| kind.opcode() == opcode)
        .unwrap_or(PacketKind::ALL.len())
}

/// The report name of a packet opcode: `transfer`, `fill`, ..., or `unknown`.
pub fn kind_name(opcode: u16) -> &'static str {
    PacketKind::from_opcode(opcode).map_or(UNKNOWN_KIND, PacketKind::name)
}

/// Counts one packet in `inner` (the caller holds the lock).
fn add_packet(inner: &mut Inner, packet: &PacketRecord) {
    let kind = &mut inner.kinds[kind_bucket(packet.opcode)];
    kind.count = kind.count.saturating_add(1);
    if packet.faulted {
        kind.faults = kind.faults.saturating_add(1);
    }
    kind.bytes = kind.bytes.saturating_add(packet.bytes);
    kind.pages = kind.pages.saturating_add(packet.pages);
    kind.latency.record(packet.duration);
    for traffic in packet.traffic.iter().flatten() {
        if traffic.length == 0 {
            continue;
        }
        let segment = usize::try_from(traffic.segment)
            .ok()
            .and_then(|index| inner.segments.get_mut(index));
        match segment {
            Some(segment) => segment.add(traffic),
            None => inner.unknown_segment.add(traffic.direction, traffic.length),
        }
    }
}

/// Packet records kept while a run goes on and recorded together: one hold of the lock for up
/// to [`PacketBatch::CAPACITY`] packets, or for a submission's last ones with the submission
/// ([`Stats::record_submission_after`]). Each hold is two atomic read-modify-writes, which a
/// one-packet submission paid twice. Not `Copy`: a run borrows its batch, never copies it.
pub struct PacketBatch {
    records: [Option<PacketRecord>; PacketBatch::CAPACITY],
    len: usize,
}

impl PacketBatch {
    /// Packets a batch holds before it must be recorded: few enough that the counters a live
    /// view reads lag a run by no more than these.
    pub const CAPACITY: usize = 8;

    /// No packets.
    pub const fn new() -> Self {
        Self {
            records: [None; Self::CAPACITY],
            len: 0,
        }
    }

    /// Keeps `record`; true when the batch is full ([`Stats::keep_packet`] records it then).
    fn push(&mut self, record: PacketRecord) -> bool {
        if let Some(slot) = self.records.get_mut(self.len) {
            *slot = Some(record);
            self.len += 1;
        }
        self.len >= Self::CAPACITY
    }

    /// Whether no packet is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The kept packets, in order; the batch is empty after.
    fn drain(&mut self) -> impl Iterator<Item = PacketRecord> + '_ {
        let len = std::mem::take(&mut self.len);
        self.records[..len].iter_mut().filter_map(Option::take)
    }
}

/// Whether a submission status is a fault (the driver's or the guest's error), rather than a
/// success or an ending the driver asked for (PREEMPT, RESET).
pub fn is_fault(status: SubmitStatus) -> bool {
    !matches!(
        status,
        SubmitStatus::Ok | SubmitStatus::Preempted | SubmitStatus::Reset
    )
}

/// Latencies above this (one hour) are counted at this value in the histogram; the exact
/// maximum and sum are kept beside it.
const LATENCY_MAX_NS: u64 = 3_600_000_000_000;
/// Histogram precision: three significant digits (0.1 %).
const SIGNIFICANT_DIGITS: u8 = 3;
/// Queue depths above this are counted at this value in the depth histogram.
const DEPTH_MAX: u64 = 1 << 20;

fn histogram(max: u64) -> Histogram<u64> {
    // Constant, valid bounds: construction cannot fail.
    Histogram::new_with_bounds(1, max, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// A latency distribution in nanoseconds.
struct Latency {
    histogram: Histogram<u64>,
    sum_ns: u64,
    max_ns: u64,
}

impl Latency {
    fn new() -> Self {
        Self {
            histogram: histogram(LATENCY_MAX_NS),
            sum_ns: 0,
            max_ns: 0,
        }
    }

    fn record(&mut self, duration: Duration) {
        let ns = nanos(duration);
        // Clamped to the histogram's range; the preallocated counts never grow.
        self.histogram.saturating_record(ns);
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    fn snapshot(&self) -> LatencySnapshot {
        let count = self.histogram.len();
        // A bucket's reported value is its highest equivalent value, which may exceed the
        // exact maximum; never report a quantile above it.
        let quantile =
            |q: f64| (count > 0).then(|| self.histogram.value_at_quantile(q).min(self.max_ns));
        LatencySnapshot {
            count,
            sum_ns: self.sum_ns,
            p50_ns: quantile(0.5),
            p99_ns: quantile(0.99),
            max_ns: (count > 0).then_some(self.max_ns),
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Bytes {
    read: u64,
    written: u64,
}

impl Bytes {
    fn add(&mut self, direction: Direction, length: u64) {
        let counter = match direction {
            Direction::Read => &mut self.read,
            Direction::Write => &mut self.written,
        };
        *counter = counter.saturating_add(length);
    }
}

struct KindStats {
    count: u64,
    faults: u64,
    bytes: u64,
    pages: u64,
    latency: Latency,
}

struct Bank {
    /// End offset relative to the segment start (`Segment::banks`).
    end: u64,
    bytes: Bytes,
}

struct SegmentTraffic {
    id: u32,
    base_address: u64,
    bytes: Bytes,
    banks: Vec<Bank>,
}

impl SegmentTraffic {
    /// Adds a range to the segment and to every bank it overlaps (split at bank ends).
    fn add(&mut self, traffic: &Traffic) {
        self.bytes.add(traffic.direction, traffic.length);
        if self.banks.is_empty() {
            return;
        }
        // A range below the segment base is counted for the segment, in no bank.
        let Some(start) = traffic.address.checked_sub(self.base_address) else {
            return;
        };
        let end = start.saturating_add(traffic.length);
        let first = self.banks.partition_point(|bank| bank.end <= start);
        let mut bank_start = match first.checked_sub(1) {
            Some(previous) => self.banks.get(previous).map_or(0, |bank| bank.end),
            None => 0,
        };
        for bank in self.banks.iter_mut().skip(first) {
            if bank_start >= end {
                break;
            }
            let overlap = end.min(bank.end).saturating_sub(start.max(bank_start));
            if overlap > 0 {
                bank.bytes.add(traffic.direction, overlap);
            }
            bank_start = bank.end;
        }
    }
}

struct Submissions {
    count: u64,
    inline: u64,
    by_status: [u64; SubmitStatus::ALL.len()],
    bytes: u64,
    packets: u64,
    execution: Latency,
    queue_wait: Latency,
    preemptions: u64,
}

/// What the link model (`--link`) did.
#[derive(Default)]
struct LinkCounters {
    packets: u64,
    modelled_ns: u64,
    waited_ns: u64,
    late: u64,
}

/// Submissions the virtual node answered.
struct VirtualNodeCounters {
    count: u64,
    faults: u64,
    packets: u64,
    bytes: u64,
    execution: Latency,
}

struct QueueDepth {
    current: u64,
    max: u64,
    changes: u64,
    /// Depth at each change (event-weighted).
    histogram: Histogram<u64>,
    /// Integral of depth over time, in depth·nanoseconds, up to `since`.
    area: u128,
    since: Instant,
}

impl QueueDepth {
    /// Depth·nanoseconds up to `now`, the current depth included.
    fn area_until(&self, now: Instant) -> u128 {
        let elapsed = u128::from(nanos(now.saturating_duration_since(self.since)));
        self.area
            .saturating_add(u128::from(self.current).saturating_mul(elapsed))
    }
}

struct Inner {
    kinds: [KindStats; KIND_BUCKETS],
    submissions: Submissions,
    virtual_node: VirtualNodeCounters,
    /// The model's description and counters, when a link is modelled.
    link: Option<(String, LinkCounters)>,
    queue: QueueDepth,
    /// Index = segment id; 0 is system memory.
    segments: Vec<SegmentTraffic>,
    /// Traffic naming a segment the layout does not have.
    unknown_segment: Bytes,
    /// Fault injections fired, by action name, in first-fired order.
    injections: Vec<(&'static str, u64)>,
    /// Checker warnings, by kind, in first-found order.
    warnings: Vec<(&'static str, u64)>,
}

/// What became of one control request, as the request counters see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Answered, or taken to be answered later.
    Taken,
    /// Answered with an error response.
    Refused,
}

/// Shared measurement state. All methods take `&self`: the engine thread, the control-queue
/// thread and the stats endpoint use it concurrently.
///
/// One mutex guards everything: it is taken once per packet, submission or queue change, for a
/// few counter updates and histogram increments (no allocation), and by [`Stats::snapshot`]
/// for a few quantile lookups. Rendering happens on the snapshot, outside the lock.
pub struct Stats {
    started: Instant,
    inner: Mutex<Inner>,
    /// Control requests taken, and of those refused: counted on every request, outside the
    /// lock (one atomic add, not a lock's two read-modify-writes).
    requests: AtomicU64,
    refused: AtomicU64,
    display: Arc<DisplayCounters>,
}

impl Stats {
    /// Empty counters for this layout (its segments and banks).
    pub fn new(layout: &SegmentLayout) -> Self {
        let started = Instant::now();
        let mut segments = vec![SegmentTraffic {
            id: 0,
            base_address: 0,
            bytes: Bytes::default(),
            banks: Vec::new(),
        }];
        // `SegmentLayout::segment` resolves id N to `segments[N - 1]`; index N here.
        segments.extend(layout.segments.iter().map(|segment| {
            SegmentTraffic {
                id: segment.id,
                base_address: segment.base_address,
                bytes: Bytes::default(),
                banks: segment
                    .banks
                    .iter()
                    .map(|&end| Bank {
                        end,
                        bytes: Bytes::default(),
                    })
                    .collect(),
            }
        }));
        let kinds = std::array::from_fn(|_| KindStats {
            count: 0,
            faults: 0,
            bytes: 0,
            pages: 0,
            latency: Latency::new(),
        });
        Self {
            started,
            inner: Mutex::new(Inner {
                kinds,
                submissions: Submissions {
                    count: 0,
                    inline: 0,
                    by_status: [0; SubmitStatus::ALL.len()],
                    bytes: 0,
                    packets: 0,
                    execution: Latency::new(),
                    queue_wait: Latency::new(),
                    preemptions: 0,
                },
                virtual_node: VirtualNodeCounters {
                    count: 0,
                    faults: 0,
                    packets: 0,
                    bytes: 0,
                    execution: Latency::new(),
                },
                link: layout
                    .link
                    .as_ref()
                    .map(|spec| (spec.to_string(), LinkCounters::default())),
                queue: QueueDepth {
                    current: 0,
                    max: 0,
                    changes: 0,
                    histogram: histogram(DEPTH_MAX),
                    area: 0,
                    since: started,
                },
                segments,
                unknown_segment: Bytes::default(),
                injections: Vec::new(),
                warnings: Vec::new(),
            }),
            display: Arc::default(),
            requests: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The display's counters, for the display's socket writer.
    pub fn display(&self) -> Arc<DisplayCounters> {
        self.display.clone()
    }

    /// The counters survive a panic elsewhere while the lock was held: they stay readable.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// A packet executed.
    pub fn record_packet(&self, packet: &PacketRecord) {
        add_packet(&mut self.lock(), packet);
    }

    /// A packet executed: kept in `batch`, which is recorded when it fills.
    pub fn keep_packet(&self, batch: &mut PacketBatch, packet: &PacketRecord) {
        if batch.push(*packet) {
            self.record_packets(batch);
        }
    }

    /// The packets of `batch`, under one hold of the lock; leaves it empty.
    pub fn record_packets(&self, batch: &mut PacketBatch) {
        if !batch.is_empty() {
            let mut inner = self.lock();
            for packet in batch.drain() {
                add_packet(&mut inner, &packet);
            }
        }
    }

    /// A submission was answered.
    pub fn record_submission(&self, submission: &SubmissionRecord) {
        self.record_submission_after(submission, &mut PacketBatch::new());
    }

    /// The last packets of a submission (`batch`, left empty) and the submission, under one
    /// hold of the lock.
    pub fn record_submission_after(&self, submission: &SubmissionRecord, batch: &mut PacketBatch) {
        let mut inner = self.lock();
        for packet in batch.drain() {
            add_packet(&mut inner, &packet);
        }
        let s = &mut inner.submissions;
        s.count = s.count.saturating_add(1);
        if submission.inline {
            s.inline = s.inline.saturating_add(1);
        }
        if let Some(count) = s.by_status.get_mut(submission.status as usize) {
            *count = count.saturating_add(1);
        }
        s.bytes = s.bytes.saturating_add(submission.bytes);
        s.packets = s.packets.saturating_add(u64::from(submission.packets));
        s.execution.record(submission.duration);
        s.queue_wait.record(
            submission
                .start
                .saturating_duration_since(submission.queued),
        );
    }

    /// A virtual-node submission was answered.
    pub fn record_virtual_submission(&self, submission: &VirtualSubmissionRecord) {
        let mut inner = self.lock();
        let node = &mut inner.virtual_node;
        node.count = node.count.saturating_add(1);
        if is_fault(submission.status) {
            node.faults = node.faults.saturating_add(1);
        }
        node.packets = node.packets.saturating_add(u64::from(submission.packets));
        node.bytes = node.bytes.saturating_add(submission.bytes);
        node.execution.record(submission.duration);
    }

    /// The link model gave a packet `modelled` time; `late`: the host's own copy took longer.
    pub fn link_packet(&self, modelled: Duration, late: bool) {
        if let Some((_, link)) = &mut self.lock().link {
            link.packets = link.packets.saturating_add(1);
            link.modelled_ns = link.modelled_ns.saturating_add(nanos(modelled));
            link.late = link.late.saturating_add(u64::from(late));
        }
    }

    /// The engine waited `waited` for the link model.
    pub fn link_wait(&self, waited: Duration) {
        if let Some((_, link)) = &mut self.lock().link {
            link.waited_ns = link.waited_ns.saturating_add(nanos(waited));
        }
    }

    /// Changes of the number of submissions waiting or running, in order: `(depth, when)`,
    /// under one hold of the lock (tests replay a timeline with it).
    pub(crate) fn queue_depths(&self, changes: &[(usize, Instant)]) {
        let mut inner = self.lock();
        let queue = &mut inner.queue;
        for &(depth, now) in changes {
            let depth = u64::try_from(depth).unwrap_or(u64::MAX);
            queue.area = queue.area_until(now);
            queue.since = now;
            queue.current = depth;
            queue.max = queue.max.max(depth);
            queue.changes = queue.changes.saturating_add(1);
            queue.histogram.saturating_record(depth);
        }
    }

    /// `count` submissions were preempted.
    pub fn preempted(&self, count: u64) {
        let mut inner = self.lock();
        inner.submissions.preemptions = inner.submissions.preemptions.saturating_add(count);
    }

    /// A fault injection fired (`action` is its name).
    pub fn injected(&self, action: &'static str) {
        count_named(&mut self.lock().injections, action);
    }

    /// The checker warned (`kind` is the warning's name).
    pub fn checker_warning(&self, kind: &'static str) {
        count_named(&mut self.lock().warnings, kind);
    }

    /// A control request was taken: answered, or (for submissions and events) to be answered.
    pub fn request(&self, outcome: RequestOutcome) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if outcome == RequestOutcome::Refused {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Everything so far, as plain values.
    pub fn snapshot(&self) -> StatsSnapshot {
        self.snapshot_at(Instant::now())
    }

    /// [`Self::snapshot`] as of a given instant.
    pub(crate) fn snapshot_at(&self, now: Instant) -> StatsSnapshot {
        let inner = self.lock();
        let uptime_ns = nanos(now.saturating_duration_since(self.started));
        let buckets = PacketKind::ALL
            .iter()
            .map(|kind| (kind.name(), Some(kind.opcode())))
            .chain([(UNKNOWN_KIND, None)]);
        let packets = buckets
            .zip(&inner.kinds)
            .map(|((name, opcode), kind)| PacketKindSnapshot {
                kind: name.to_string(),
                opcode,
                count: kind.count,
                faults: kind.faults,
                bytes: kind.bytes,
                pages: kind.pages,
                latency: kind.latency.snapshot(),
            })
            .collect();
        let s = &inner.submissions;
        let by_status: Vec<StatusCount> = SubmitStatus::ALL
            .iter()
            .zip(&s.by_status)
            .map(|(&status, &count)| StatusCount {
                status: status.name().to_string(),
                fault: is_fault(status),
                count,
            })
            .collect();
        let faults = by_status
            .iter()
            .filter(|status| status.fault)
            .fold(0u64, |sum, status| sum.saturating_add(status.count));
        let submissions = SubmissionsSnapshot {
            count: s.count,
            inline: s.inline,
            engine: s.count.saturating_sub(s.inline),
            faults,
            preemptions: s.preemptions,
            bytes: s.bytes,
            packets: s.packets,
            by_status,
            execution: s.execution.snapshot(),
            queue_wait: s.queue_wait.snapshot(),
        };
        let virtual_node = &inner.virtual_node;
        let nodes = vec![
            NodeSnapshot {
                node: WDDM_GPU_NODE_PAGING,
                name: "paging".to_string(),
                submissions: submissions.count,
                faults: submissions.faults,
                packets: submissions.packets,
                bytes: submissions.bytes,
                execution: submissions.execution.clone(),
            },
            NodeSnapshot {
                node: WDDM_GPU_NODE_VIRTUAL,
                name: "virtual".to_string(),
                submissions: virtual_node.count,
                faults: virtual_node.faults,
                packets: virtual_node.packets,
                bytes: virtual_node.bytes,
                execution: virtual_node.execution.snapshot(),
            },
        ];
        let queue = &inner.queue;
        let area = queue.area_until(now);
        let depth_quantile =
            |q: f64| (queue.changes > 0).then(|| queue.histogram.value_at_quantile(q));
        let queue_depth = QueueDepthSnapshot {
            current: queue.current,
            max: queue.max,
            mean: if uptime_ns == 0 {
                0.0
            } else {
                area as f64 / uptime_ns as f64
            },
            changes: queue.changes,
            p50: depth_quantile(0.5),
            p99: depth_quantile(0.99),
        };
        let segments = inner
            .segments
            .iter()
            .map(|segment| SegmentSnapshot {
                segment: segment.id,
                read_bytes: segment.bytes.read,
                written_bytes: segment.bytes.written,
                banks: segment
                    .banks
                    .iter()
                    .enumerate()
                    .map(|(index, bank)| BankSnapshot {
                        bank: index,
                        end_offset: bank.end,
                        read_bytes: bank.bytes.read,
                        written_bytes: bank.bytes.written,
                    })
                    .collect(),
            })
            .collect();
        StatsSnapshot {
            uptime_ns,
            requests: self.requests.load(Ordering::Relaxed),
            refused_requests: self.refused.load(Ordering::Relaxed),
            packets,
            submissions,
            nodes,
            queue_depth,
            segments,
            unknown_segment: TrafficBytes {
                read_bytes: inner.unknown_segment.read,
                written_bytes: inner.unknown_segment.written,
            },
            display: self.display.snapshot(),
            injections: named_counts(&inner.injections),
            checker_warnings: named_counts(&inner.warnings),
            link: inner.link.as_ref().map(|(model, link)| LinkSnapshot {
                model: model.clone(),
                packets: link.packets,
                modelled_ns: link.modelled_ns,
                waited_ns: link.waited_ns,
                late_packets: link.late,
            }),
        }
    }
}

/// Adds one to `name`'s count.
fn count_named(counts: &mut Vec<(&'static str, u64)>, name: &'static str) {
    match counts.iter_mut().find(|(seen, _)| *seen == name) {
        Some((_, count)) => *count = count.saturating_add(1),
        None => counts.push((name, 1)),
    }
}

fn named_counts(counts: &[(&'static str, u64)]) -> Vec<NamedCount> {
    counts
        .iter()
        .map(|&(name, count)| NamedCount {
            name: name.to_string(),
            count,
        })
        .collect()
}

/// How often one named thing happened: a fault-injection action fired, a checker warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCount {
    /// The name (`hang`, `map-over-live`, ...).
    pub name: String,
    /// Times.
    pub count: u64,
}

/// A latency distribution; quantiles and maximum are `None` before the first sample.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySnapshot {
    /// Samples.
    pub count: u64,
    /// Sum of all samples.
    pub sum_ns: u64,
    /// Median (within 0.1 %).
    pub p50_ns: Option<u64>,
    /// 99th percentile (within 0.1 %).
    pub p99_ns: Option<u64>,
    /// Largest sample (exact).
    pub max_ns: Option<u64>,
}

/// One packet kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketKindSnapshot {
    /// `transfer`, `fill`, ..., `unknown`.
    pub kind: String,
    /// `WDDM_GPU_OP_*`; `None` for the unknown-opcode bucket.
    pub opcode: Option<u16>,
    /// Packets executed (completely or up to a fault).
    pub count: u64,
    /// Of those, packets that faulted or were interrupted.
    pub faults: u64,
    /// Bytes moved or written.
    pub bytes: u64,
    /// Aperture pages mapped or unmapped.
    pub pages: u64,
    /// Execution time per packet.
    pub latency: LatencySnapshot,
}

/// Submissions that ended with one status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCount {
    /// `SubmitStatus::name`.
    pub status: String,
    /// Whether this status counts as a fault.
    pub fault: bool,
    /// Submissions.
    pub count: u64,
}

/// Submissions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmissionsSnapshot {
    /// Submissions answered.
    pub count: u64,
    /// Of those, run entirely on the control-queue thread.
    pub inline: u64,
    /// Of those, finished on the engine thread.
    pub engine: u64,
    /// Of those, ended with a fault status (not ok, preempted or reset).
    pub faults: u64,
    /// Submissions PREEMPT took back (running or queued).
    pub preemptions: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Packets completed.
    pub packets: u64,
    /// Count per status, every status listed.
    pub by_status: Vec<StatusCount>,
    /// Execution time (start to answer).
    pub execution: LatencySnapshot,
    /// Queue wait (handed over to start).
    pub queue_wait: LatencySnapshot,
}

/// One engine node's submissions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Node ordinal: 0 paging, 1 virtual.
    pub node: u32,
    /// `paging` or `virtual`.
    pub name: String,
    /// Submissions answered.
    pub submissions: u64,
    /// Of those, ended with a fault status.
    pub faults: u64,
    /// Packets completed.
    pub packets: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Execution time (start to answer).
    pub execution: LatencySnapshot,
}

/// Submissions waiting or running.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueDepthSnapshot {
    /// Now.
    pub current: u64,
    /// Highest so far.
    pub max: u64,
    /// Time-weighted mean since start.
    pub mean: f64,
    /// Changes recorded.
    pub changes: u64,
    /// Median of the depth at each change (event-weighted).
    pub p50: Option<u64>,
    /// 99th percentile of the depth at each change (event-weighted).
    pub p99: Option<u64>,
}

/// Bytes read and written somewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficBytes {
    /// Bytes packets read.
    pub read_bytes: u64,
    /// Bytes packets wrote.
    pub written_bytes: u64,
}

/// Traffic in one bank of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BankSnapshot {
    /// Bank index.
    pub bank: usize,
    /// End offset relative to the segment start.
    pub end_offset: u64,
    /// Bytes packets read in this bank.
    pub read_bytes: u64,
    /// Bytes packets wrote in this bank.
    pub written_bytes: u64,
}

/// Traffic in one segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSnapshot {
    /// Segment id; 0 = guest system memory (frame lists).
    pub segment: u32,
    /// Bytes packets read in this segment.
    pub read_bytes: u64,
    /// Bytes packets wrote in this segment.
    pub written_bytes: u64,
    /// Per bank (`UseBanking` segments only).
    pub banks: Vec<BankSnapshot>,
}

/// What the link model did (`--link`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSnapshot {
    /// The model, as `--link` described it.
    pub model: String,
    /// Packets it gave a time (those that moved bytes).
    pub packets: u64,
    /// The time it gave them.
    pub modelled_ns: u64,
    /// The time the engine waited beyond its own copies.
    pub waited_ns: u64,
    /// Packets whose own copy took longer than the model (the host was the slower).
    pub late_packets: u64,
}

/// Everything [`Stats`] holds at one moment; rendered by [`StatsSnapshot::to_table`],
/// [`StatsSnapshot::to_prometheus`] and serde (JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Since [`Stats::new`].
    pub uptime_ns: u64,
    /// Control requests answered.
    pub requests: u64,
    /// Of those, refused (error responses).
    pub refused_requests: u64,
    /// Per packet kind, in report order.
    pub packets: Vec<PacketKindSnapshot>,
    /// Submissions (of the paging node).
    pub submissions: SubmissionsSnapshot,
    /// Per engine node: the paging node's submissions again, then the virtual node's.
    pub nodes: Vec<NodeSnapshot>,
    /// Queue depth.
    pub queue_depth: QueueDepthSnapshot,
    /// Per segment, system memory (0) first.
    pub segments: Vec<SegmentSnapshot>,
    /// Traffic naming a segment the layout does not have.
    pub unknown_segment: TrafficBytes,
    /// What the display sent to QEMU.
    pub display: DisplaySnapshot,
    /// Fault injections fired, by action (only those that fired).
    pub injections: Vec<NamedCount>,
    /// Checker warnings, by kind (only those found).
    pub checker_warnings: Vec<NamedCount>,
    /// The link model's work; absent without `--link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkSnapshot>,
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
