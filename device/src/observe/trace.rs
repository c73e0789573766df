//! `--trace FILE`: every submission and packet as a Chrome trace-event JSON timeline, which
//! Perfetto and chrome://tracing open.
//!
//! The file is the format's JSON array form: `[`, metadata events naming the process and the
//! engine track, then one complete event (`"ph":"X"`) per packet and per submission, each on
//! its own line. Submissions execute one at a time (inline on the control-queue thread only
//! while the engine is idle), so all of them and their packets share one track, where packets
//! nest inside their submission's span. Timestamps are microseconds since the trace was
//! created.
//!
//! Recording queues a copy of the record (bounded: [`QUEUE_RECORDS`]; a full queue drops events
//! and counts them); a writer thread of its own formats and writes, so no file I/O happens under
//! the engine's or the backend's locks. The writer flushes at every submission, so the file of
//! a backend that was killed holds the submissions it had reached; the format allows the
//! closing `]` to be missing, and [`Trace::finish`] (or dropping the trace) writes it. The guest decides how many packets
//! there are, so the file stops growing at a size limit ([`DEFAULT_MAX_SIZE`] unless
//! [`Trace::with_max_size`] says otherwise); later events are counted, not written.
//!
//! Events are formatted straight into a scratch buffer reused for every event (hex fields and
//! names through `collect_str`), so recording allocates nothing per packet.

use std::fmt::Display;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::warn;
use serde::{Serialize, Serializer};

use crate::engine::record::{Direction, PacketRecord, Traffic};
use crate::observe::stats::{self, SubmissionRecord};
use crate::support::writer_thread::WriterThread;

/// Track (`tid`) of the GPU engine, where every submission and packet goes.
const ENGINE_TRACK: u32 = 1;

/// Default size limit of the trace file (about four million packets).
pub const DEFAULT_MAX_SIZE: u64 = 1 << 30;

/// Records waiting for the writer thread, at most: a guest whose packets outrun the disk loses
/// events (counted), never memory or the engine's time.
pub const QUEUE_RECORDS: usize = 16 * 1024;

/// What the engine and the scheduler hand to the writer thread.
enum Record {
    Packet(PacketRecord),
    Submission(SubmissionRecord),
    Mark(Mark),
    LinkWait(LinkWait),
    /// Answered once everything sent before it is in the file (tests).
    Sync(SyncSender<()>),
}

/// A moment on the timeline, shown as an instant event on the engine's track: a fault
/// injection firing (`inject ACTION`, category `injection`) or a checker warning (`check KIND`,
/// category `checker`).
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    /// When.
    pub at: Instant,
    /// The injection's action, or the warning's kind.
    pub name: &'static str,
    /// The submission it is about, if any.
    pub fence: Option<u32>,
    /// What made it.
    pub source: MarkSource,
}

/// What made a [`Mark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkSource {
    /// A fault injection fired.
    Injection {
        /// The injection's id.
        id: u32,
    },
    /// The checker (`--check`) warned.
    Checker {
        /// The packet's offset in its DMA buffer, when the warning is about a packet.
        packet_offset: Option<u32>,
    },
}

/// The engine waiting out the link model's time (`--link`): a span on the engine's track.
#[derive(Clone, Copy, Debug)]
pub struct LinkWait {
    /// The submission.
    pub fence: u32,
    /// When the wait began.
    pub start: Instant,
    /// How long it lasted.
    pub duration: Duration,
}

#[derive(Serialize)]
struct LinkWaitArgs {
    fence: u32,
}

#[derive(Serialize)]
struct MarkArgs {
    injection: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u32>,
}

#[derive(Serialize)]
struct CheckArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packet_offset: Option<u32>,
}

/// The file side, owned by the writer thread.
struct Writer {
    out: BufWriter<File>,
    base: Instant,
    pid: u32,
    /// Given up after a write error: nothing more is written.
    failed: bool,
    /// One event, formatted before it is written (reused).
    scratch: Vec<u8>,
    /// Bytes in the file so far.
    written: u64,
    shared: Arc<TraceLimits>,
}

/// The file's size limit and the counts of events dropped (over it, or behind a full queue),
/// shared by the writer thread and the recording side.
struct TraceLimits {
    /// Where the file stops growing.
    max_size: AtomicU64,
    /// Events not written because the file reached `max_size`.
    over_size: AtomicU64,
    /// Events not queued because the writer thread was behind.
    queue_full: AtomicU64,
}

/// The timeline file being written. Recording only queues a copy of the record; formatting and
/// file I/O happen on a writer thread of their own, never under the engine's or the backend's
/// locks.
pub struct Trace {
    writer: WriterThread<Record>,
    shared: Arc<TraceLimits>,
}

/// Writes a value through its `Display` (no intermediate string).
fn display<T: Display, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Writes a number as `0x...` text: segment addresses are 64-bit, beyond what JSON numbers
/// hold exactly in viewers.
fn hex<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{value:#x}"))
}

/// The name of a submission's event.
struct SubmissionName(u32);

impl Display for SubmissionName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "submission fence {}", self.0)
    }
}

/// One trace event; `args` is the event's own detail.
#[derive(Serialize)]
struct Event<N: Display, A> {
    #[serde(serialize_with = "display")]
    name: N,
    cat: &'static str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    args: A,
}

#[derive(Serialize)]
struct NameArgs<'a> {
    name: &'a str,
}

/// One endpoint of a packet: where it read or wrote.
#[derive(Serialize)]
struct Place {
    segment: u32,
    #[serde(serialize_with = "hex")]
    address: u64,
    length: u64,
}

impl From<&Traffic> for Place {
    fn from(traffic: &Traffic) -> Self {
        Self {
            segment: traffic.segment,
            address: traffic.address,
            length: traffic.length,
        }
    }
}

#[derive(Serialize)]
struct PacketArgs {
    opcode: u16,
    fence: u32,
    #[serde(serialize_with = "hex")]
    dma_offset: u64,
    bytes: u64,
    pages: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Place>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination: Option<Place>,
    faulted: bool,
}

#[derive(Serialize)]
struct SubmissionArgs {
    fence: u32,
    status: &'static str,
    packets: u32,
    bytes: u64,
    inline: bool,
    queue_wait_us: f64,
}

/// Microseconds with nanosecond fractions, printed without binary noise (`12.345`).
fn micros(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e3
}

impl Trace {
    /// Creates (truncates) the trace file, writes its header and starts the writer thread.
    pub fn create(path: &Path) -> io::Result<Self> {
        let shared = Arc::new(TraceLimits {
            max_size: AtomicU64::new(DEFAULT_MAX_SIZE),
            over_size: AtomicU64::new(0),
            queue_full: AtomicU64::new(0),
        });
        let mut writer = Writer {
            out: BufWriter::new(File::create(path)?),
            base: Instant::now(),
            pid: std::process::id(),
            failed: false,
            scratch: Vec::new(),
            written: 0,
            shared: shared.clone(),
        };
        writer.out.write_all(b"[\n")?;
        writer.metadata("process_name", 0, "vhost-user-wddm-gpu")?;
        writer.metadata("thread_name", ENGINE_TRACK, "GPU engine (node 0)")?;
        writer.out.flush()?;
        Ok(Self {
            writer: WriterThread::start("wddm-gpu-trace", QUEUE_RECORDS, move |records| {
                writer.run(records)
            })?,
            shared,
        })
    }

    /// Stops writing events once the file holds `bytes` (the closing `]` still follows).
    pub fn with_max_size(self, bytes: u64) -> Self {
        self.shared.max_size.store(bytes, Ordering::Relaxed);
        self
    }

    /// Events left out: the file reached its size limit, or the writer thread was behind.
    pub fn dropped(&self) -> u64 {
        self.shared.over_size.load(Ordering::Relaxed)
            + self.shared.queue_full.load(Ordering::Relaxed)
    }

    /// Queues a record for the writer thread without waiting; a full queue drops it (counted,
    /// and logged once).
    fn record(&self, record: Record) {
        if self.writer.send_or_drop(record)
            && self.shared.queue_full.fetch_add(1, Ordering::Relaxed) == 0
        {
            warn!("trace: the writer is behind; events are left out (counted) until it catches up");
        }
    }

    /// A packet executed.
    pub fn packet(&self, packet: &PacketRecord) {
        self.record(Record::Packet(*packet));
    }

    /// A submission was answered; the file is flushed when the writer reaches it.
    pub fn submission(&self, submission: &SubmissionRecord) {
        self.record(Record::Submission(*submission));
    }

    /// A fault injection fired, or the checker warned.
    pub fn mark(&self, mark: Mark) {
        self.record(Record::Mark(mark));
    }

    /// The engine waited for the link model.
    pub fn link_wait(&self, wait: LinkWait) {
        self.record(Record::LinkWait(wait));
    }

    /// Waits until everything recorded so far is in the file.
    pub fn sync(&self) {
        let (done, wait) = sync_channel(1);
        if self.writer.send(Record::Sync(done)) {
            let _ = wait.recv();
        }
    }

    /// Writes what is queued, then the closing `]`, and stops the writer thread; later events
    /// are dropped. Dropping the trace does this too.
    pub fn finish(&self) -> io::Result<()> {
        self.writer.finish()
    }
}

impl Writer {
    /// An instant event of an injection or a checker warning, each in its own category.
    fn mark(&mut self, mark: &Mark) {
        match mark.source {
            MarkSource::Injection { id } => self.write_event(
                format_args!("inject {}", mark.name),
                "injection",
                mark.at,
                None,
                MarkArgs {
                    injection: id,
                    fence: mark.fence,
                },
                true,
            ),
            MarkSource::Checker { packet_offset } => self.write_event(
                format_args!("check {}", mark.name),
                "checker",
                mark.at,
                None,
                CheckArgs {
                    fence: mark.fence,
                    packet_offset,
                },
                true,
            ),
        }
    }

    /// The writer thread: writes records until the queue closes, then ends the file.
    fn run(mut self, records: Receiver<Record>) -> io::Result<()> {
        for record in records {
            match record {
                Record::Packet(packet) => self.packet(&packet),
                Record::Submission(submission) => self.submission(&submission),
                Record::Mark(mark) => self.mark(&mark),
                Record::LinkWait(wait) => self.write_event(
                    "link wait",
                    "link",
                    wait.start,
                    Some(wait.duration),
                    LinkWaitArgs { fence: wait.fence },
                    false,
                ),
                Record::Sync(done) => {
                    let _ = self.out.flush();
                    let _ = done.send(());
                }
            }
        }
        if self.failed {
            return Ok(());
        }
        let dropped = self.shared.queue_full.load(Ordering::Relaxed);
        if dropped > 0 {
            warn!("trace: {dropped} event(s) left out while the writer was behind");
        }
        self.out.write_all(b"\n]\n")?;
        self.out.flush()
    }

    fn metadata(&mut self, name: &str, tid: u32, value: &str) -> io::Result<()> {
        let event = Event {
            name,
            cat: "__metadata",
            ph: "M",
            ts: None,
            dur: None,
            pid: self.pid,
            tid,
            args: NameArgs { name: value },
        };
        // The header ends with this event; `write_event` puts the separator before each next.
        if tid != 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, &event)?;
        Ok(())
    }

    /// Appends one complete event (`"X"`), or an instant one (`"i"`) when it has no duration;
    /// a write error is logged once and ends the trace.
    fn write_event<N: Display, A: Serialize>(
        &mut self,
        name: N,
        cat: &'static str,
        start: Instant,
        duration: Option<Duration>,
        args: A,
        flush: bool,
    ) {
        if self.failed {
            return;
        }
        let event = Event {
            name,
            cat,
            ph: if duration.is_some() { "X" } else { "i" },
            ts: Some(micros(start.saturating_duration_since(self.base))),
            dur: duration.map(micros),
            pid: self.pid,
            tid: ENGINE_TRACK,
            args,
        };
        let result = (|| -> io::Result<()> {
            // Separator first: the file never ends in a comma, so appending `]` always
            // completes it.
            self.scratch.clear();
            self.scratch.extend_from_slice(b",\n");
            serde_json::to_writer(&mut self.scratch, &event)?;
            let size = self.scratch.len() as u64;
            let max_size = self.shared.max_size.load(Ordering::Relaxed);
            if self.written.saturating_add(size) > max_size {
                if self.shared.over_size.fetch_add(1, Ordering::Relaxed) == 0 {
                    warn!(
                        "trace: the file reached its limit of {max_size} bytes; later events are left out"
                    );
                }
            } else {
                self.out.write_all(&self.scratch)?;
                self.written += size;
            }
            if flush {
                self.out.flush()?;
            }
            Ok(())
        })();
        if let Err(error) = result {
            warn!("trace: write failed, no more events are written: {error}");
            self.failed = true;
        }
    }

    fn packet(&mut self, packet: &PacketRecord) {
        let place = |direction: Direction| {
            packet
                .traffic
                .iter()
                .flatten()
                .find(|traffic| traffic.direction == direction)
                .map(Place::from)
        };
        let args = PacketArgs {
            opcode: packet.opcode,
            fence: packet.fence,
            dma_offset: u64::from(packet.dma_offset),
            bytes: packet.bytes,
            pages: packet.pages,
            source: place(Direction::Read),
            destination: place(Direction::Write),
            faulted: packet.faulted,
        };
        self.write_event(
            stats::kind_name(packet.opcode),
            "packet",
            packet.start,
            Some(packet.duration),
            args,
            false,
        );
    }

    fn submission(&mut self, submission: &SubmissionRecord) {
        let args = SubmissionArgs {
            fence: submission.fence,
            status: submission.status.name(),
            packets: submission.packets,
            bytes: submission.bytes,
            inline: submission.inline,
            queue_wait_us: micros(
                submission
                    .start
                    .saturating_duration_since(submission.queued),
            ),
        };
        self.write_event(
            SubmissionName(submission.fence),
            "submission",
            submission.start,
            Some(submission.duration),
            args,
            true,
        );
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if let Err(error) = self.finish() {
            warn!("trace: cannot finish the file: {error}");
        }
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
