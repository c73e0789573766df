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
//! The writer is flushed at every submission, so the file of a backend that was killed holds
//! every answered submission; the format allows the closing `]` to be missing, and
//! [`Trace::finish`] (or dropping the trace) writes it. The guest decides how many packets
//! there are, so the file stops growing at a size limit ([`DEFAULT_MAX_SIZE`] unless
//! [`Trace::with_max_size`] says otherwise); later events are counted, not written.
//!
//! Events are formatted straight into a scratch buffer reused for every event (hex fields and
//! names through `collect_str`), so recording allocates nothing per packet.

use std::fmt::Display;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use log::warn;
use serde::{Serialize, Serializer};

use crate::stats::{self, Direction, PacketRecord, SubmissionRecord, Traffic};

/// Track (`tid`) of the GPU engine, where every submission and packet goes.
const ENGINE_TRACK: u32 = 1;

/// Default size limit of the trace file (about four million packets).
pub const DEFAULT_MAX_SIZE: u64 = 1 << 30;

struct Writer {
    out: BufWriter<File>,
    /// Closed by `finish`, or given up after a write error: nothing more is written.
    done: bool,
    /// One event, formatted before it is written (reused).
    scratch: Vec<u8>,
    /// Bytes in the file so far.
    written: u64,
    /// Where the file stops growing.
    max_size: u64,
    /// Events not written because the file reached `max_size`.
    dropped: u64,
}

/// The timeline file being written.
pub struct Trace {
    base: Instant,
    pid: u32,
    writer: Mutex<Writer>,
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
    /// Creates (truncates) the trace file and writes its header.
    pub fn create(path: &Path) -> io::Result<Self> {
        let trace = Self {
            base: Instant::now(),
            pid: std::process::id(),
            writer: Mutex::new(Writer {
                out: BufWriter::new(File::create(path)?),
                done: false,
                scratch: Vec::new(),
                written: 0,
                max_size: DEFAULT_MAX_SIZE,
                dropped: 0,
            }),
        };
        {
            let mut writer = trace.lock();
            writer.out.write_all(b"[\n")?;
            trace.metadata(&mut writer, "process_name", 0, "vhost-user-wddm-gpu")?;
            trace.metadata(
                &mut writer,
                "thread_name",
                ENGINE_TRACK,
                "GPU engine (node 0)",
            )?;
            writer.out.flush()?;
        }
        Ok(trace)
    }

    /// Stops writing events once the file holds `bytes` (the closing `]` still follows).
    pub fn with_max_size(self, bytes: u64) -> Self {
        self.lock().max_size = bytes;
        self
    }

    /// Events left out because the file reached its size limit.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn metadata(&self, writer: &mut Writer, name: &str, tid: u32, value: &str) -> io::Result<()> {
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
            writer.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut writer.out, &event)?;
        Ok(())
    }

    /// Appends one complete event; a write error is logged once and ends the trace.
    fn write_event<N: Display, A: Serialize>(
        &self,
        name: N,
        cat: &'static str,
        start: Instant,
        duration: Duration,
        args: A,
        flush: bool,
    ) {
        let event = Event {
            name,
            cat,
            ph: "X",
            ts: Some(micros(start.saturating_duration_since(self.base))),
            dur: Some(micros(duration)),
            pid: self.pid,
            tid: ENGINE_TRACK,
            args,
        };
        let mut writer = self.lock();
        if writer.done {
            return;
        }
        let writer = &mut *writer;
        let result = (|| -> io::Result<()> {
            // Separator first: the file never ends in a comma, so appending `]` always
            // completes it.
            writer.scratch.clear();
            writer.scratch.extend_from_slice(b",\n");
            serde_json::to_writer(&mut writer.scratch, &event)?;
            let size = writer.scratch.len() as u64;
            if writer.written.saturating_add(size) > writer.max_size {
                if writer.dropped == 0 {
                    warn!(
                        "trace: the file reached its limit of {} bytes; later events are left out",
                        writer.max_size
                    );
                }
                writer.dropped += 1;
            } else {
                writer.out.write_all(&writer.scratch)?;
                writer.written += size;
            }
            if flush {
                writer.out.flush()?;
            }
            Ok(())
        })();
        if let Err(error) = result {
            warn!("trace: write failed, no more events are written: {error}");
            writer.done = true;
        }
    }

    /// A packet executed.
    pub fn packet(&self, packet: &PacketRecord) {
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
            packet.duration,
            args,
            false,
        );
    }

    /// A submission was answered; the file is flushed here.
    pub fn submission(&self, submission: &SubmissionRecord) {
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
            submission.duration,
            args,
            true,
        );
    }

    /// Writes the closing `]` and flushes; later events are dropped. Dropping the trace does
    /// this too.
    pub fn finish(&self) -> io::Result<()> {
        let mut writer = self.lock();
        if writer.done {
            return Ok(());
        }
        writer.done = true;
        writer.out.write_all(b"\n]\n")?;
        writer.out.flush()
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
