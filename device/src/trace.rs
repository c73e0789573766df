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
//! [`Trace::finish`] (or dropping the trace) writes it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use log::warn;
use serde::Serialize;

use crate::stats::{self, Direction, PacketRecord, SubmissionRecord, Traffic};

/// Track (`tid`) of the GPU engine, where every submission and packet goes.
const ENGINE_TRACK: u32 = 1;

struct Writer {
    out: BufWriter<File>,
    /// Closed by `finish`, or given up after a write error: nothing more is written.
    done: bool,
}

/// The timeline file being written.
pub struct Trace {
    base: Instant,
    pid: u32,
    writer: Mutex<Writer>,
}

/// One trace event; `args` is the event's own detail.
#[derive(Serialize)]
struct Event<'a, A> {
    name: &'a str,
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
    /// Hex: segment addresses are 64-bit, beyond what JSON numbers hold exactly in viewers.
    address: String,
    length: u64,
}

impl From<&Traffic> for Place {
    fn from(traffic: &Traffic) -> Self {
        Self {
            segment: traffic.segment,
            address: format!("{:#x}", traffic.address),
            length: traffic.length,
        }
    }
}

#[derive(Serialize)]
struct PacketArgs {
    opcode: u16,
    fence: u32,
    dma_offset: String,
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
    fn write_event<A: Serialize>(
        &self,
        name: &str,
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
        let result = (|| -> io::Result<()> {
            // Separator first: the file never ends in a comma, so appending `]` always
            // completes it.
            writer.out.write_all(b",\n")?;
            serde_json::to_writer(&mut writer.out, &event)?;
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
            dma_offset: format!("{:#x}", packet.dma_offset),
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
        let name = format!("submission fence {}", submission.fence);
        self.write_event(
            &name,
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
