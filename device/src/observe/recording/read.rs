//! Reading a `--record` file back, entry by entry. The file may come from anywhere: every length,
//! count and address is checked against the caps of [`super::format`] with checked arithmetic,
//! and a short or inconsistent file is an error naming the entry and the field, never a panic
//! or an allocation the file alone decides.

use std::fmt;
use std::io::{self, Read};
use std::ops::Range;

use wddm_gpu_abi::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdSetRootPageTable,
    WddmGpuCmdSubmitVirtual,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use zerocopy::{FromBytes, Immutable, KnownLayout};

use super::format::{
    code, tag_name, ContextCommand, Entry, Header, MemoryTable, Outcome, ResetBy, Run, RunEnd,
    Submission, VirtualStart, VirtualSubmission, FLAGS_KNOWN, FLAG_DATA, MAGIC, MAX_GUEST_ADDRESS,
    MAX_LAYOUT_TEXT, MAX_PAYLOAD, MAX_REGIONS, MAX_RUNS, MAX_VRAM_SIZE, OLDEST_VERSION,
    TAG_CONTEXT, TAG_ENGINE_RESET, TAG_INJECTED_FAULT, TAG_MEMORY_TABLE, TAG_PREEMPT, TAG_RESET,
    TAG_SUBMISSION, TAG_VIRTUAL_SUBMISSION, VERSION,
};
use crate::engine::Interruption;
use crate::memory::capture::{Captured, CapturedRead, ReadKind, Store};

/// Where in the file a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The header.
    Header,
    /// Entry `index` (0 is the first after the header), with its tag.
    Entry {
        /// Its position.
        index: u64,
        /// Its tag.
        tag: u8,
    },
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Header => write!(f, "header"),
            Place::Entry { index, tag } => write!(f, "entry {index} ({})", tag_name(*tag)),
        }
    }
}

/// Why a recording cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file does not start with [`MAGIC`].
    #[error("not a vhost-user-wddm-gpu recording (no WGPUREC magic at its start)")]
    BadMagic,
    /// Another format version.
    #[error("format version {found}; this build reads versions {OLDEST_VERSION} to {VERSION}")]
    Version {
        /// The file's version.
        found: u32,
    },
    /// The file ends inside a field.
    #[error("{at}: the file ends inside field `{field}`")]
    Truncated {
        /// Where.
        at: Place,
        /// The field.
        field: &'static str,
    },
    /// A field holds a value the format does not allow.
    #[error("{at}: field `{field}` is {value:#x}: {reason}")]
    BadField {
        /// Where.
        at: Place,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Bytes left in an entry after its last field.
    #[error("{at}: {extra} byte(s) after the last field")]
    Trailing {
        /// Where.
        at: Place,
        /// How many.
        extra: u64,
    },
    /// Reading the file failed.
    #[error("{at}: {source}")]
    Io {
        /// Where.
        at: Place,
        /// Why.
        source: io::Error,
    },
}

/// Reads exactly `buf.len()` bytes; the end of the file is [`ReadError::Truncated`].
fn read_exact(
    input: &mut impl Read,
    buf: &mut [u8],
    at: Place,
    field: &'static str,
) -> Result<(), ReadError> {
    input.read_exact(buf).map_err(|source| match source.kind() {
        io::ErrorKind::UnexpectedEof => ReadError::Truncated { at, field },
        _ => ReadError::Io { at, source },
    })
}

/// Fields taken off the front of an entry's payload.
struct Fields<'a> {
    rest: &'a [u8],
    at: Place,
}

impl<'a> Fields<'a> {
    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], ReadError> {
        if self.rest.len() < len {
            return Err(ReadError::Truncated { at: self.at, field });
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ReadError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, ReadError> {
        Ok(self.array::<1>(field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, ReadError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, ReadError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, ReadError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn bad(&self, field: &'static str, value: u64, reason: &'static str) -> ReadError {
        ReadError::BadField {
            at: self.at,
            field,
            value,
            reason,
        }
    }

    /// A wire struct as the driver sent it (any bytes are one).
    fn command<T: FromBytes + KnownLayout + Immutable>(
        &mut self,
        field: &'static str,
    ) -> Result<T, ReadError> {
        let bytes = self.take(size_of::<T>(), field)?;
        T::read_from_bytes(bytes).map_err(|_| self.bad(field, 0, "not the command's size"))
    }

    fn boolean(&mut self, field: &'static str) -> Result<bool, ReadError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.bad(field, u64::from(other), "must be 0 or 1")),
        }
    }

    /// The payload had nothing after its last field.
    fn finish(self) -> Result<(), ReadError> {
        match self.rest.len() {
            0 => Ok(()),
            extra => Err(ReadError::Trailing {
                at: self.at,
                extra: extra as u64,
            }),
        }
    }
}

/// Reads and checks the header.
pub fn read_header(input: &mut impl Read) -> Result<Header, ReadError> {
    let at = Place::Header;
    let mut fixed = [0u8; 28];
    // A file shorter than the magic is not a recording, whatever it holds.
    read_exact(input, &mut fixed[..8], at, "magic").map_err(|error| match error {
        ReadError::Truncated { .. } => ReadError::BadMagic,
        other => other,
    })?;
    if fixed[..8] != MAGIC {
        return Err(ReadError::BadMagic);
    }
    read_exact(
        input,
        &mut fixed[8..],
        at,
        "version, flags, vram_size, layout_len",
    )?;
    let mut fields = Fields {
        rest: &fixed[8..],
        at,
    };
    let version = fields.u32("version")?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(ReadError::Version { found: version });
    }
    let flags = fields.u32("flags")?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(fields.bad("flags", u64::from(flags), "unknown flags"));
    }
    let vram_size = fields.u64("vram_size")?;
    if !vram_size.is_power_of_two() || !(1 << 20..=MAX_VRAM_SIZE).contains(&vram_size) {
        return Err(fields.bad(
            "vram_size",
            vram_size,
            "must be a power of two from 1 MiB to 1 TiB",
        ));
    }
    let layout_len = fields.u32("layout_len")?;
    if layout_len > MAX_LAYOUT_TEXT {
        return Err(fields.bad("layout_len", u64::from(layout_len), "more than 1 MiB"));
    }
    let mut text = vec![0; usize::try_from(layout_len).unwrap_or(usize::MAX)];
    read_exact(input, &mut text, at, "layout")?;
    let layout = match text.is_empty() {
        true => None,
        false => Some(String::from_utf8(text).map_err(|_| ReadError::BadField {
            at,
            field: "layout",
            value: u64::from(layout_len),
            reason: "not UTF-8 text",
        })?),
    };
    Ok(Header {
        data: flags & FLAG_DATA != 0,
        vram_size,
        layout,
    })
}

/// Reads the entries after the header, one at a time, reusing one payload buffer.
pub struct EntryReader<R> {
    input: R,
    index: u64,
    payload: Vec<u8>,
}

impl<R: Read> EntryReader<R> {
    /// Entries from `input`, which is just past the header.
    pub fn new(input: R) -> Self {
        Self {
            input,
            index: 0,
            payload: Vec::new(),
        }
    }

    /// Where the next entry is (its index), for messages about it.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The next entry; `None` at the end of the file (only between entries).
    pub fn next_entry(&mut self) -> Result<Option<Entry>, ReadError> {
        let mut tag = [0u8; 1];
        let at_tag = Place::Entry {
            index: self.index,
            tag: 0,
        };
        match self.input.read(&mut tag) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(source) => return Err(ReadError::Io { at: at_tag, source }),
        }
        let at = Place::Entry {
            index: self.index,
            tag: tag[0],
        };
        if !matches!(
            tag[0],
            TAG_MEMORY_TABLE
                | TAG_SUBMISSION
                | TAG_RESET
                | TAG_PREEMPT
                | TAG_INJECTED_FAULT
                | TAG_CONTEXT
                | TAG_VIRTUAL_SUBMISSION
                | TAG_ENGINE_RESET
        ) {
            return Err(ReadError::BadField {
                at,
                field: "tag",
                value: u64::from(tag[0]),
                reason: "no such entry",
            });
        }
        let mut length = [0u8; 8];
        read_exact(&mut self.input, &mut length, at, "payload_len")?;
        let length = u64::from_le_bytes(length);
        if length > MAX_PAYLOAD {
            return Err(ReadError::BadField {
                at,
                field: "payload_len",
                value: length,
                reason: "more than 1 GiB",
            });
        }
        // Read in bounded steps: a length the file does not back ends in Truncated, not in
        // a large allocation made up front.
        self.payload.clear();
        let taken = (&mut self.input)
            .take(length)
            .read_to_end(&mut self.payload)
            .map_err(|source| ReadError::Io { at, source })?;
        if (taken as u64) < length {
            return Err(ReadError::Truncated {
                at,
                field: "payload",
            });
        }
        let mut fields = Fields {
            rest: &self.payload,
            at,
        };
        let entry = match tag[0] {
            TAG_MEMORY_TABLE => Entry::MemoryTable(memory_table(&mut fields)?),
            TAG_SUBMISSION => Entry::Submission(submission(&mut fields)?),
            TAG_RESET => {
                let at_ns = fields.u64("at_ns")?;
                let by = match fields.u8("by")? {
                    code::RESET_DRIVER => ResetBy::Driver,
                    code::RESET_FRONTEND => ResetBy::Frontend,
                    other => return Err(fields.bad("by", u64::from(other), "not 0 or 1")),
                };
                Entry::Reset { at_ns, by }
            }
            TAG_PREEMPT => Entry::Preempt {
                at_ns: fields.u64("at_ns")?,
                count: fields.u32("count")?,
            },
            TAG_CONTEXT => Entry::Context(context(&mut fields)?),
            TAG_VIRTUAL_SUBMISSION => Entry::VirtualSubmission(virtual_submission(&mut fields)?),
            TAG_ENGINE_RESET => Entry::EngineReset {
                at_ns: fields.u64("at_ns")?,
                node: fields.u32("node")?,
            },
            _ => {
                let fence = fields.u32("fence")?;
                let packet = fields.u32("packet")?;
                let raw = fields.u32("status")?;
                let status = SubmitStatus::from_raw(raw)
                    .ok_or_else(|| fields.bad("status", u64::from(raw), "not a SubmitStatus"))?;
                Entry::InjectedFault {
                    fence,
                    packet,
                    status,
                }
            }
        };
        fields.finish()?;
        self.index += 1;
        Ok(Some(entry))
    }
}

/// A range `start..end` of guest-physical addresses: page-aligned, not empty, below
/// [`MAX_GUEST_ADDRESS`].
fn guest_range(
    fields: &mut Fields<'_>,
    start_field: &'static str,
    end_field: &'static str,
) -> Result<Range<u64>, ReadError> {
    const PAGE: u64 = 4096;
    let start = fields.u64(start_field)?;
    let end = fields.u64(end_field)?;
    if !start.is_multiple_of(PAGE) {
        return Err(fields.bad(start_field, start, "not 4 KiB aligned"));
    }
    if end <= start || !end.is_multiple_of(PAGE) {
        return Err(fields.bad(end_field, end, "not a 4 KiB aligned end after the start"));
    }
    if end > MAX_GUEST_ADDRESS {
        return Err(fields.bad(end_field, end, "past the 256 TiB the replay backs"));
    }
    Ok(start..end)
}

fn memory_table(fields: &mut Fields<'_>) -> Result<MemoryTable, ReadError> {
    let has_window = fields.boolean("has_vram_window")?;
    let window = if has_window {
        Some(guest_range(fields, "vram_window.start", "vram_window.end")?)
    } else {
        fields.u64("vram_window.start")?;
        fields.u64("vram_window.end")?;
        None
    };
    let count = fields.u32("region_count")?;
    if count > MAX_REGIONS {
        return Err(fields.bad("region_count", u64::from(count), "more than 1024"));
    }
    let mut regions: Vec<Range<u64>> = Vec::new();
    for _ in 0..count {
        let region = guest_range(fields, "region.start", "region.end")?;
        if regions
            .iter()
            .any(|other| other.start < region.end && region.start < other.end)
        {
            return Err(fields.bad("region.start", region.start, "overlaps another region"));
        }
        regions.push(region);
    }
    Ok(MemoryTable {
        vram_window: window,
        regions,
    })
}

fn submission(fields: &mut Fields<'_>) -> Result<Submission, ReadError> {
    let at_ns = fields.u64("at_ns")?;
    let queue_wait_ns = fields.u64("queue_wait_ns")?;
    let duration_ns = fields.u64("duration_ns")?;
    let inline = fields.boolean("inline")?;
    let cmd: WddmGpuCmdSubmit = fields.command("command")?;
    let run_count = fields.u8("run_count")?;
    if run_count == 0 || run_count > MAX_RUNS {
        return Err(fields.bad("run_count", u64::from(run_count), "must be 1 or 2"));
    }
    let mut runs = Vec::with_capacity(usize::from(run_count));
    for index in 0..run_count {
        let packets = fields.u32("run.packets")?;
        let end = fields.u8("run.end")?;
        let checks = fields.u32("run.checks")?;
        let end = run_end(fields, "run.end", end, checks)?;
        // Only a run that was not the last can have been deferred, and the last must not be.
        let last = index + 1 == run_count;
        if (end == RunEnd::Deferred) == last {
            return Err(fields.bad(
                "run.end",
                u64::from(code::end(end)),
                "only a run before the last is deferred",
            ));
        }
        runs.push(Run { packets, end });
    }
    let outcome = outcome(fields)?;
    let captured = captured(fields)?;
    Ok(Submission {
        at_ns,
        queue_wait_ns,
        duration_ns,
        inline,
        cmd,
        runs,
        outcome,
        captured,
    })
}

/// A run's end from its wire code and its interruption checks.
fn run_end(
    fields: &Fields<'_>,
    field: &'static str,
    end: u8,
    checks: u32,
) -> Result<RunEnd, ReadError> {
    Ok(match end {
        code::END_FINISHED => RunEnd::Finished,
        code::END_DEFERRED => RunEnd::Deferred,
        code::END_PREEMPTED => RunEnd::Interrupted {
            by: Interruption::Preempted,
            checks,
        },
        code::END_RESET => RunEnd::Interrupted {
            by: Interruption::Reset,
            checks,
        },
        other => return Err(fields.bad(field, u64::from(other), "not 0 to 3")),
    })
}

fn virtual_submission(fields: &mut Fields<'_>) -> Result<VirtualSubmission, ReadError> {
    let at_ns = fields.u64("at_ns")?;
    let duration_ns = fields.u64("duration_ns")?;
    let cmd: WddmGpuCmdSubmitVirtual = fields.command("command")?;
    let start = fields.u8("start")?;
    let end = fields.u8("end")?;
    let checks = fields.u32("checks")?;
    let address = fields.u64("address")?;
    let write = fields.boolean("write")?;
    let end = run_end(fields, "end", end, checks)?;
    // Fields a start does not use are zero, so each start has one spelling.
    let unused = |used: bool, field: &'static str, value: u64| match used || value == 0 {
        true => Ok(()),
        false => Err(fields.bad(field, value, "must be 0 for this start")),
    };
    let start = match start {
        code::START_RAN => {
            if end == RunEnd::Deferred {
                return Err(fields.bad(
                    "end",
                    u64::from(code::END_DEFERRED),
                    "the virtual node defers nothing",
                ));
            }
            VirtualStart::Ran(end)
        }
        code::START_NODE_FAULTED => {
            unused(false, "end", u64::from(code::end(end)))?;
            VirtualStart::NodeFaulted
        }
        code::START_STOPPED => match end {
            RunEnd::Interrupted { by, checks: 0 } => VirtualStart::Stopped(by),
            _ => {
                return Err(fields.bad(
                    "end",
                    u64::from(code::end(end)),
                    "a stopped submission ends preempted or reset, at check 0",
                ))
            }
        },
        code::START_INJECTED_PAGE_FAULT => {
            unused(false, "end", u64::from(code::end(end)))?;
            VirtualStart::InjectedPageFault { address, write }
        }
        other => return Err(fields.bad("start", u64::from(other), "not 0 to 3")),
    };
    if !matches!(start, VirtualStart::InjectedPageFault { .. }) {
        unused(false, "address", address)?;
        unused(false, "write", u64::from(write))?;
    }
    if !matches!(start, VirtualStart::Ran(_)) {
        unused(false, "checks", u64::from(checks))?;
    }
    let outcome = outcome(fields)?;
    let captured = captured(fields)?;
    Ok(VirtualSubmission {
        at_ns,
        duration_ns,
        cmd,
        start,
        outcome,
        captured,
    })
}

fn context(fields: &mut Fields<'_>) -> Result<ContextCommand, ReadError> {
    Ok(match fields.u8("command")? {
        code::CONTEXT_CREATE => {
            ContextCommand::Create(fields.command::<WddmGpuCmdCreateContext>("create_context")?)
        }
        code::CONTEXT_DESTROY => {
            ContextCommand::Destroy(fields.command::<WddmGpuCmdDestroyContext>("destroy_context")?)
        }
        code::CONTEXT_SET_ROOT => ContextCommand::SetRoot(
            fields.command::<WddmGpuCmdSetRootPageTable>("set_root_page_table")?,
        ),
        other => return Err(fields.bad("command", u64::from(other), "not 0 to 2")),
    })
}

/// An answer's fields.
fn outcome(fields: &mut Fields<'_>) -> Result<Outcome, ReadError> {
    Ok(Outcome {
        status: fields.u32("status")?,
        packets_completed: fields.u32("packets_completed")?,
        bytes_transferred: fields.u64("bytes_transferred")?,
        fault_packet_offset: fields.u32("fault_packet_offset")?,
        fault_address: fields.u64("fault_address")?,
        fault_opcode: fields.u16("fault_opcode")?,
    })
}

/// A submission's reads and their bytes: the rest of the entry.
fn captured(fields: &mut Fields<'_>) -> Result<Captured, ReadError> {
    let data_dropped = fields.u64("data_dropped")?;
    let read_count = fields.u32("read_count")?;
    // Each read takes 18 bytes of the payload: a count the payload cannot hold is refused
    // before anything is allocated for it.
    const READ_SIZE: u64 = 18;
    if u64::from(read_count).saturating_mul(READ_SIZE) > fields.rest.len() as u64 {
        return Err(fields.bad(
            "read_count",
            u64::from(read_count),
            "more reads than the entry holds",
        ));
    }
    let mut reads = Vec::with_capacity(usize::try_from(read_count).unwrap_or(0));
    let mut total = 0u64;
    for _ in 0..read_count {
        let store = match fields.u8("read.store")? {
            code::STORE_RAM => Store::Ram,
            code::STORE_VRAM => Store::Vram,
            other => return Err(fields.bad("read.store", u64::from(other), "not 0 or 1")),
        };
        let kind = match fields.u8("read.kind")? {
            code::KIND_METADATA => ReadKind::Metadata,
            code::KIND_DATA => ReadKind::Data,
            other => return Err(fields.bad("read.kind", u64::from(other), "not 0 or 1")),
        };
        let address = fields.u64("read.address")?;
        let length = fields.u64("read.length")?;
        if address.checked_add(length).is_none() {
            return Err(fields.bad("read.length", length, "runs past 64 bits"));
        }
        total = total
            .checked_add(length)
            .ok_or_else(|| fields.bad("read.length", length, "reads add up past 64 bits"))?;
        reads.push(CapturedRead {
            store,
            kind,
            address,
            length,
        });
    }
    if total != fields.rest.len() as u64 {
        return Err(fields.bad(
            "read bytes",
            fields.rest.len() as u64,
            "not the sum of the reads' lengths",
        ));
    }
    let bytes = fields.take(fields.rest.len(), "read bytes")?.to_vec();
    Ok(Captured {
        reads,
        bytes,
        data_dropped,
    })
}
