//! `--record FILE`: every submission of both nodes, with the bytes it read, its runs and its
//! answer, and the context commands, resets and preemptions between them, in the versioned format of [`format`], so
//! `vhost-user-wddm-gpu replay` can run them again offline.
//!
//! A submission carries a [`Tape`] while it runs (its [`ReadCapture`] rides on the engine's
//! guest RAM); the scheduler hands the finished tape over with the answer, and a writer thread
//! of its own encodes and writes it, so no file I/O happens under the engine's or the backend's
//! locks. Unlike the trace, a recording must not lose entries: when the writer is behind, the
//! executing thread waits for room in the queue ([`QUEUE_ENTRIES`]). The writer flushes when the
//! queue runs empty, so the file of a killed backend holds what it had reached.

pub mod format;
pub mod read;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Mutex;
use std::time::Instant;

use log::warn;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use wddm_gpu_abi::submit::SubmitStatus;

use self::format::{
    encode_entry, encode_header, ContextCommand, Entry, Header, MemoryTable, ResetBy, Run,
};
use crate::memory::capture::ReadCapture;
use crate::support::nanos::nanos;
use crate::support::sync::lock;
use crate::support::writer_thread::WriterThread;

/// Entries waiting for the writer, at most; past that the executing thread waits.
pub const QUEUE_ENTRIES: usize = 64;

/// Most data bytes (`--record-data`) kept per submission; beyond them the entry says how many
/// were left out, and its replay may differ in the bytes it moves (never in what it checks).
pub const DATA_LIMIT: u64 = 256 << 20;

/// What a submission collects while it runs: the bytes it read and how each run ended.
pub struct Tape {
    /// Its reads.
    pub capture: ReadCapture,
    /// Its runs so far.
    pub runs: Vec<Run>,
}

/// The regions of a guest memory table, as [`Recorder::submission`] takes them.
pub fn regions_of(mem: &GuestMemoryMmap) -> impl Iterator<Item = Range<u64>> + '_ {
    mem.iter().map(|region| {
        let start = region.start_addr().0;
        start..start.saturating_add(region.len())
    })
}

/// What the writer is handed.
enum Message {
    Entry(Entry),
    /// Answered once everything before it is in the file.
    Sync(SyncSender<()>),
}

/// The recording being written.
pub struct Recorder {
    base: Instant,
    data: bool,
    writer: WriterThread<Message>,
    /// The memory table last written, so it is written again only when it changes, and the
    /// regions of the latest submission's (reused).
    last_table: Mutex<(Option<MemoryTable>, Vec<Range<u64>>)>,
}

impl Recorder {
    /// Creates (truncates) the file, writes its header and starts the writer thread.
    pub fn create(path: &Path, header: &Header) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        let mut bytes = Vec::new();
        encode_header(header, &mut bytes).map_err(io::Error::other)?;
        out.write_all(&bytes)?;
        out.flush()?;
        let writer = WriterThread::start("wddm-gpu-record", QUEUE_ENTRIES, move |messages| {
            write_entries(out, messages)
        })?;
        Ok(Self {
            base: Instant::now(),
            data: header.data,
            writer,
            last_table: Mutex::new((None, Vec::new())),
        })
    }

    /// A capture for a new submission's reads.
    pub fn capture(&self) -> ReadCapture {
        ReadCapture::new(self.data, DATA_LIMIT)
    }

    /// A tape for a new paging submission.
    pub fn tape(&self) -> Tape {
        Tape {
            capture: self.capture(),
            runs: Vec::with_capacity(usize::from(format::MAX_RUNS)),
        }
    }

    /// Nanoseconds from the start of the recording to `at`.
    pub fn since_start(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.base))
    }

    fn send(&self, message: Message) {
        // Waits for room: a recording loses nothing. Fails only once the writer ended.
        self.writer.send(message);
    }

    /// A submission (paging or virtual) ran over this memory table: the table goes first when
    /// it changed. Both are sent under the table's lock, so a submission of the other node
    /// cannot come between them.
    pub fn submission(
        &self,
        regions: impl Iterator<Item = Range<u64>>,
        vram_window: Option<Range<u64>>,
        submission: Entry,
    ) {
        let mut last = lock(&self.last_table);
        let (table, scratch) = &mut *last;
        scratch.clear();
        scratch.extend(regions.filter(|region| Some(region) != vram_window.as_ref()));
        let same = table
            .as_ref()
            .is_some_and(|table| table.vram_window == vram_window && table.regions == *scratch);
        if !same {
            let changed = MemoryTable {
                vram_window,
                regions: scratch.clone(),
            };
            *table = Some(changed.clone());
            self.send(Message::Entry(Entry::MemoryTable(changed)));
        }
        self.send(Message::Entry(submission));
    }

    /// The device accepted a context command.
    pub fn context(&self, command: ContextCommand) {
        self.send(Message::Entry(Entry::Context(command)));
    }

    /// RESET_ENGINE of `node` ended its work.
    pub fn engine_reset(&self, node: u32) {
        let at_ns = self.since_start(Instant::now());
        self.send(Message::Entry(Entry::EngineReset { at_ns, node }));
    }

    /// The next submission with `fence` ran with packet `packet` faulted `status` by a fault
    /// injection (written just before that submission).
    pub fn injected_fault(&self, fence: u32, packet: u32, status: SubmitStatus) {
        self.send(Message::Entry(Entry::InjectedFault {
            fence,
            packet,
            status,
        }));
    }

    /// The GART was cleared by a reset.
    pub fn reset(&self, by: ResetBy) {
        let at_ns = self.since_start(Instant::now());
        self.send(Message::Entry(Entry::Reset { at_ns, by }));
    }

    /// A PREEMPT stopped `count` submissions.
    pub fn preempt(&self, count: u32) {
        let at_ns = self.since_start(Instant::now());
        self.send(Message::Entry(Entry::Preempt { at_ns, count }));
    }

    /// Waits until everything recorded so far is in the file.
    pub fn sync(&self) {
        let (done, wait) = sync_channel(1);
        self.send(Message::Sync(done));
        let _ = wait.recv();
    }

    /// Writes what is queued and stops the writer; later entries are dropped. Dropping the
    /// recorder does this too.
    pub fn finish(&self) -> io::Result<()> {
        self.writer.finish()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Err(error) = self.finish() {
            warn!("record: {error}");
        }
    }
}

/// The writer thread: encodes and writes entries until the queue closes, flushing whenever it
/// runs empty. A write error is logged and ends the recording (entries are then discarded).
fn write_entries(mut out: BufWriter<File>, messages: Receiver<Message>) -> io::Result<()> {
    let mut scratch = Vec::new();
    let mut failed = None;
    let mut next = messages.recv().ok();
    while let Some(message) = next {
        match message {
            Message::Entry(entry) if failed.is_none() => {
                scratch.clear();
                let written = encode_entry(&entry, &mut scratch)
                    .map_err(io::Error::other)
                    .and_then(|()| out.write_all(&scratch));
                if let Err(error) = written {
                    warn!(
                        "record: {} entry not written, recording stopped: {error}",
                        entry.name()
                    );
                    failed = Some(error);
                }
            }
            Message::Entry(_) => {}
            Message::Sync(done) => {
                let _ = out.flush();
                let _ = done.send(());
            }
        }
        next = match messages.try_recv() {
            Ok(message) => Some(message),
            Err(TryRecvError::Empty) => {
                if failed.is_none() {
                    if let Err(error) = out.flush() {
                        warn!("record: flush failed, recording stopped: {error}");
                        failed = Some(error);
                    }
                }
                messages.recv().ok()
            }
            Err(TryRecvError::Disconnected) => None,
        };
    }
    match failed {
        Some(error) => Err(error),
        None => out.flush(),
    }
}

#[cfg(test)]
mod format_tests;
