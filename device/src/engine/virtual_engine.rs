//! The virtual node's copy engine: runs a DMA buffer at a GPU virtual address of one context,
//! everything through the MMU. The buffer is fetched with execute access (no-execute pages
//! fault), copies and fills move runs the MMU hands out (contiguous pages as one run), and a
//! SIGNAL writes a monitored fence. A page fault stops the submission at the faulting packet.

use std::ops::Range;
use std::sync::Mutex;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuPageFaultRecord, WddmGpuRespSubmitVirtual, WddmGpuVirtualCopy,
    WddmGpuVirtualFill, WddmGpuVirtualSignal, WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT,
    WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED, WDDM_GPU_VOP_COPY,
    WDDM_GPU_VOP_FILL, WDDM_GPU_VOP_SIGNAL,
};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_RESP_SUBMIT_VIRTUAL};
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::packet::{WddmGpuPacketHeader, WDDM_GPU_MAX_PACKET_SIZE};
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::FromBytes;

use super::access::{copy, copy_run, read_location, write_location, Location, Repeated, Toward};
use super::place::{ram, ram_within, segment_offset};
use super::{
    check_buffer_window, check_packet_size, DeviceMemory, Fault, Interruption, Stop, Stopped, CHUNK,
};
use crate::memory::capture::ReadKind;
use crate::mmu::fault::{Access, FaultKind, MmuFault};
use crate::mmu::space::{AddressSpace, Run};
use crate::mmu::tables::DeviceTables;
use crate::mmu::walk::Target;
use crate::support::sync::lock;

/// How a virtual submission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtualCompletion {
    /// `submission_fence_id`.
    pub fence_id: u32,
    /// Packets that completed.
    pub packets_completed: u32,
    /// Bytes copied or filled.
    pub bytes_transferred: u64,
    /// Where and why it stopped early.
    pub stop: Option<(u32, Stop)>,
    /// The command's own fields were refused (`stop` says why): its buffer never ran, so its
    /// fence does not complete.
    pub refused: bool,
}

impl VirtualCompletion {
    /// A submission stopped at its first packet by a page fault at `address`, as an injected
    /// page fault reports it (nothing ran).
    pub fn page_fault_at(cmd: &WddmGpuCmdSubmitVirtual, address: u64, write: bool) -> Self {
        let fault = MmuFault {
            kind: FaultKind::NotPresent,
            address,
            level: 0,
            access: if write { Access::Write } else { Access::Read },
            entry: 0,
        };
        Self {
            fence_id: cmd.submission_fence_id,
            packets_completed: 0,
            bytes_transferred: 0,
            stop: Some((cmd.start_offset, Stop::Fault(Fault::Page(fault)))),
            refused: false,
        }
    }

    /// The answer the node gives: status, counts, the stopping packet's offset and, for a page
    /// fault, its record (all but `sequence`, which the node numbers).
    pub fn response(&self, cmd: &WddmGpuCmdSubmitVirtual) -> WddmGpuRespSubmitVirtual {
        let mut reply = virtual_response(self.fence_id, SubmitStatus::Ok);
        reply.packets_completed = self.packets_completed;
        reply.bytes_transferred = self.bytes_transferred;
        let Some((offset, stop)) = self.stop else {
            return reply;
        };
        reply.status = stop.status() as u32;
        reply.fault_packet_offset = offset;
        if let Stop::Fault(Fault::Page(fault)) = stop {
            reply.page_fault = WddmGpuPageFaultRecord {
                sequence: 0,
                fault: fault.wire(),
                fence_id: self.fence_id,
                flags: fault.access_flags() | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
                node_ordinal: WDDM_GPU_NODE_VIRTUAL,
                context_id: cmd.context_id,
                error_code: WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT,
                packet_offset: offset,
            };
        }
        reply
    }
}

/// A SUBMIT_VIRTUAL answer with this fence and status and nothing else.
pub fn virtual_response(fence_id: u32, status: SubmitStatus) -> WddmGpuRespSubmitVirtual {
    WddmGpuRespSubmitVirtual {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT_VIRTUAL),
        submission_fence_id: fence_id,
        status: status as u32,
        ..Default::default()
    }
}

/// What the virtual engine tells the rest of the device.
pub trait VirtualHooks {
    /// Asked between chunks and packets: `Some` stops the submission.
    fn interruption(&self) -> Option<Interruption>;

    /// A SIGNAL packet wrote `value` at `address`.
    fn monitored_fence(&mut self, address: u64, value: u64);

    /// The packet at `offset` ran, to its end or to where it stopped (what the checking mode
    /// found while it ran belongs to it).
    fn packet_ran(&mut self, _offset: u32) {}
}

/// Runs a copy translates on each side before it moves them.
const BATCH: usize = 64;

const NO_RUN: Run = Run {
    target: Target::Zero,
    len: 0,
};

/// Pieces a batch is cut into at most: a piece ends where a run of either side ends.
const PIECES: usize = 2 * BATCH;

/// `len` bytes of a copy within one source run and one destination run, both located (`None`:
/// a zero page, which reads as zeros and drops writes).
#[derive(Clone, Copy)]
struct Piece {
    from: Option<Location>,
    to: Option<Location>,
    len: u64,
}

const NO_PIECE: Piece = Piece {
    from: None,
    to: None,
    len: 0,
};

/// The copy engine of the virtual node. Owns its scratch buffers, so the hot path does not
/// allocate.
pub struct VirtualEngine {
    bounce: Vec<u8>,
    repeated: Repeated,
    /// A copy's batch: the runs of its source and of its destination.
    sources: [Run; BATCH],
    destinations: [Run; BATCH],
    /// The batch cut into pieces, each within one run of each side.
    pieces: [Piece; PIECES],
}

impl Default for VirtualEngine {
    fn default() -> Self {
        Self {
            bounce: Vec::new(),
            repeated: Repeated::default(),
            sources: [NO_RUN; BATCH],
            destinations: [NO_RUN; BATCH],
            pieces: [NO_PIECE; PIECES],
        }
    }
}

/// What a batch's translation covered.
struct Batch {
    /// Runs in the engine's source and destination arrays.
    sources: usize,
    destinations: usize,
    /// Bytes from the start translated on both sides.
    covered: u64,
    /// The fault right after them, if one ended the batch.
    fault: Option<Fault>,
}

/// Bytes in `runs`.
fn total(runs: &[Run]) -> u64 {
    runs.iter().map(|run| run.len).sum()
}

/// A run of a copy with its memory located: the bytes left, and where they are (`None`: a
/// zero page, which reads as zeros and drops writes).
#[derive(Clone, Copy)]
struct Located {
    len: u64,
    at: Option<Location>,
}

impl Located {
    /// The first `limit` bytes of `run`, located (guest RAM checked against `known`, the RAM
    /// extent the batch's last check found).
    fn of<M: GuestMemoryBackend>(
        run: Run,
        limit: u64,
        memory: &VirtualMemory<'_, '_, M>,
        known: &mut Range<u64>,
    ) -> Result<Self, Fault> {
        let len = run.len.min(limit);
        let at = match run.target {
            Target::System(address) => Some(ram_within(memory.mem, known, address, len)?),
            _ => memory.location(Run { len, ..run })?,
        };
        Ok(Self { len, at })
    }

    /// What is left after the first `len` bytes, if anything.
    fn rest(mut self, len: u64) -> Option<Self> {
        self.len -= len;
        if let Some(at) = &mut self.at {
            at.advance(len);
        }
        (self.len > 0).then_some(self)
    }
}

/// What a submission runs against: memory, the geometry and the context's address space.
pub struct VirtualMemory<'a, 'm, M> {
    /// Guest RAM, VRAM and the layout.
    pub mem: &'a DeviceMemory<'m, M>,
    /// The checked geometry.
    pub geometry: &'a MmuGeometry,
    /// The context's address space (locked per translation, so a FLUSH_TLB interleaves).
    pub space: &'a Mutex<AddressSpace>,
}

impl<M: GuestMemoryBackend> VirtualMemory<'_, '_, M> {
    /// The longest run at `address` of at most `length` bytes allowed for `access`.
    pub(super) fn translate(
        &self,
        address: u64,
        length: u64,
        access: Access,
    ) -> Result<Run, Fault> {
        let tables = DeviceTables::new(&self.mem.ram, self.mem.vram, self.mem.layout);
        lock(self.space)
            .translate(self.geometry, &tables, address, length, access)
            .map_err(Fault::Page)
    }

    /// [`AddressSpace::translate_runs`] in the space, which the caller holds locked.
    fn translate_runs(
        &self,
        space: &mut AddressSpace,
        address: u64,
        length: u64,
        access: Access,
        runs: &mut [Run],
    ) -> (usize, Option<Fault>) {
        let tables = DeviceTables::new(&self.mem.ram, self.mem.vram, self.mem.layout);
        let (count, fault) =
            space.translate_runs(self.geometry, &tables, address, length, access, runs);
        (count, fault.map(Fault::Page))
    }

    /// Where a run's bytes are; `None` for a zero page.
    pub(super) fn location(&self, run: Run) -> Result<Option<Location>, Fault> {
        match run.target {
            Target::System(address) => ram(self.mem, address, run.len).map(Some),
            Target::Segment { segment, offset } => {
                segment_offset(self.mem, segment, offset, run.len).map(Some)
            }
            Target::Zero => Ok(None),
        }
    }

    /// Reads `buf.len()` bytes at `address`.
    fn read(&self, address: u64, buf: &mut [u8], access: Access) -> Result<(), Stop> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = address
                .checked_add(done as u64)
                .ok_or(Fault::LengthOverflow(address))?;
            let run = self.translate(at, (buf.len() - done) as u64, access)?;
            let len = usize::try_from(run.len)
                .unwrap_or(usize::MAX)
                .min(buf.len() - done);
            let piece = &mut buf[done..done + len];
            match self.location(run)? {
                Some(location) => read_location(
                    location.sub(0, len as u64),
                    piece,
                    ReadKind::Metadata,
                    self.mem,
                )?,
                None => piece.fill(0),
            }
            done += len;
        }
        Ok(())
    }
}

impl VirtualEngine {
    /// Executes `[start_offset, end_offset)` of the command's DMA buffer.
    pub fn execute<M: GuestMemoryBackend>(
        &mut self,
        cmd: &WddmGpuCmdSubmitVirtual,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> VirtualCompletion {
        let mut completion = VirtualCompletion {
            fence_id: cmd.submission_fence_id,
            packets_completed: 0,
            bytes_transferred: 0,
            stop: None,
            refused: false,
        };
        if let Err(fault) = check_command(cmd) {
            completion.stop = Some((cmd.start_offset, fault.into()));
            completion.refused = true;
            return completion;
        }
        let mut offset = cmd.start_offset;
        let mut packet = [0u8; WDDM_GPU_MAX_PACKET_SIZE as usize];
        while offset < cmd.end_offset {
            if let Some(interruption) = hooks.interruption() {
                completion.stop = Some((offset, interruption.into()));
                break;
            }
            let result = self
                .fetch(cmd, offset, memory, &mut packet)
                .map_err(Stopped::from)
                .and_then(|size| {
                    let bytes = self.run_packet(&packet[..size as usize], memory, hooks)?;
                    Ok((size, bytes))
                });
            hooks.packet_ran(offset);
            match result {
                Ok((size, bytes)) => {
                    completion.packets_completed += 1;
                    completion.bytes_transferred =
                        completion.bytes_transferred.saturating_add(bytes);
                    offset += size;
                }
                Err(stopped) => {
                    // A packet that stopped part way left its first bytes written: they count.
                    completion.bytes_transferred =
                        completion.bytes_transferred.saturating_add(stopped.done);
                    completion.stop = Some((offset, stopped.stop));
                    break;
                }
            }
        }
        completion
    }

    /// Fetches the packet at `offset` through the MMU (execute access); returns its size.
    fn fetch<M: GuestMemoryBackend>(
        &self,
        cmd: &WddmGpuCmdSubmitVirtual,
        offset: u32,
        memory: &VirtualMemory<'_, '_, M>,
        packet: &mut [u8; WDDM_GPU_MAX_PACKET_SIZE as usize],
    ) -> Result<u32, Stop> {
        let header_size = size_of_u32::<WddmGpuPacketHeader>();
        let available = cmd.end_offset - offset;
        let bad = |size, reason| Fault::BadPacketHeader { size, reason };
        if available < header_size {
            return Err(bad(0, "header runs past end_offset").into());
        }
        // Checked against the address bits when the command was: no overflow.
        let address = cmd.dma_buffer_address + u64::from(offset);
        memory.read(
            address,
            &mut packet[..header_size as usize],
            Access::Execute,
        )?;
        let (header, _) = WddmGpuPacketHeader::read_from_prefix(&packet[..])
            .map_err(|_| bad(0, "header truncated"))?;
        let size = header.size;
        check_packet_size(size, available)?;
        memory.read(
            address + u64::from(header_size),
            &mut packet[header_size as usize..size as usize],
            Access::Execute,
        )?;
        Ok(size)
    }

    /// Runs one fetched packet; returns the bytes it moved (on a stop, those it moved before).
    fn run_packet<M: GuestMemoryBackend>(
        &mut self,
        packet: &[u8],
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stopped> {
        let (header, _) =
            WddmGpuPacketHeader::read_from_prefix(packet).map_err(|_| Fault::BadPacketHeader {
                size: 0,
                reason: "header truncated",
            })?;
        if header.flags != 0 {
            return Err(Fault::ReservedField("virtual packet header flags").into());
        }
        let too_small = |reason| Fault::BadPacketHeader {
            size: header.size,
            reason,
        };
        match header.opcode {
            WDDM_GPU_VOP_COPY => {
                let (p, _) = WddmGpuVirtualCopy::read_from_prefix(packet)
                    .map_err(|_| too_small("smaller than a COPY packet"))?;
                self.copy(p.length, p.source, p.destination, memory, hooks)
            }
            WDDM_GPU_VOP_FILL => {
                let (p, _) = WddmGpuVirtualFill::read_from_prefix(packet)
                    .map_err(|_| too_small("smaller than a FILL packet"))?;
                if p.reserved != 0 {
                    return Err(Fault::ReservedField("virtual fill.reserved").into());
                }
                self.fill(p.pattern, p.length, p.destination, memory, hooks)
            }
            WDDM_GPU_VOP_SIGNAL => {
                let (p, _) = WddmGpuVirtualSignal::read_from_prefix(packet)
                    .map_err(|_| too_small("smaller than a SIGNAL packet"))?;
                signal(p.address, p.value, memory, hooks)?;
                Ok(0)
            }
            other => Err(Fault::UnknownOpcode(other).into()),
        }
    }

    /// Copies `length` bytes from VA `source` to VA `destination`; returns the bytes.
    ///
    /// A batch at a time: up to [`BATCH`] runs of each side translated under one lock of the
    /// space, then copied back to back, which keeps the copies' memory traffic together (page
    /// by page, translating between the copies ran at half the speed). Bytes before a fault
    /// are copied and the fault is the first one in copy order, as if translated byte by byte:
    /// the destination is translated only where the source was, so its fault comes first.
    pub(super) fn copy<M: GuestMemoryBackend>(
        &mut self,
        length: u64,
        source: u64,
        destination: u64,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stopped> {
        for end in [source, destination] {
            end.checked_add(length)
                .ok_or(Fault::LengthOverflow(length))?;
        }
        let mut done = 0u64;
        while done < length {
            interruption_point(done, hooks)?;
            // At most a batch of pages, so a long run on one side is not translated again for
            // every batch the other side's short runs fill.
            let step = (length - done)
                .min(CHUNK - done % CHUNK)
                .min(BATCH as u64 * WDDM_GPU_PAGE_SIZE);
            let batch = self.translate_batch(source + done, destination + done, step, memory);
            let moved = self
                .copy_batch(&batch, memory)
                .map_err(|stopped| stopped.after(done))?;
            done += moved;
            match batch.fault {
                // The fault lies right after the bytes translated: reported once they all moved
                // (a batch copied only in part is translated again from where it stopped).
                Some(fault) if moved == batch.covered => return Err(Stop::from(fault).after(done)),
                // Unreachable: a translation of at least one byte is a run or a fault, and a
                // batch's first piece always moves. A guard all the same, since a loop that
                // moves nothing would never end.
                _ if moved == 0 => {
                    return Err(
                        Stop::from(Fault::BadCommand("virtual copy: nothing translated"))
                            .after(done),
                    )
                }
                _ => {}
            }
        }
        Ok(length)
    }

    /// Translates up to `length` bytes from `source` and to `destination` into the batch.
    fn translate_batch<M: GuestMemoryBackend>(
        &mut self,
        source: u64,
        destination: u64,
        length: u64,
        memory: &VirtualMemory<'_, '_, M>,
    ) -> Batch {
        let mut space = lock(memory.space);
        let (sources, source_fault) =
            memory.translate_runs(&mut space, source, length, Access::Read, &mut self.sources);
        let readable = total(&self.sources[..sources]);
        let (destinations, destination_fault) = memory.translate_runs(
            &mut space,
            destination,
            readable,
            Access::Write,
            &mut self.destinations,
        );
        let writable = total(&self.destinations[..destinations]);
        let fault = if destination_fault.is_some() {
            destination_fault
        } else if writable == readable {
            source_fault
        } else {
            None
        };
        Batch {
            sources,
            destinations,
            covered: writable,
            fault,
        }
    }

    /// Copies the bytes `batch` covered; returns them (on a fault, the bytes copied before it).
    /// The batch is planned, then its pieces are copied back to back: between two copies
    /// nothing is stored, so nothing waits there for the last copy's stores to drain
    /// (docs/performance.md, "A batch planned, then copied").
    fn copy_batch<M: GuestMemoryBackend>(
        &mut self,
        batch: &Batch,
        memory: &VirtualMemory<'_, '_, M>,
    ) -> Result<u64, Stopped> {
        let (count, locating_fault) = self.plan(batch, memory);
        let mut moved = 0u64;
        for piece in &self.pieces[..count] {
            let len = piece.len;
            let copied = match (piece.from, piece.to) {
                (Some(Location::Guest(source)), Some(Location::Vram(destination))) => copy_run(
                    source.head(len),
                    destination.head(len),
                    Toward::Vram,
                    memory.mem,
                ),
                (Some(Location::Vram(source)), Some(Location::Guest(destination))) => copy_run(
                    destination.head(len),
                    source.head(len),
                    Toward::Guest,
                    memory.mem,
                ),
                (Some(source), Some(destination)) => copy(
                    source,
                    destination,
                    len,
                    ReadKind::Data,
                    memory.mem,
                    &mut self.bounce,
                ),
                (None, Some(destination)) => {
                    self.repeated
                        .write(destination.sub(0, len), &[0], memory.mem)
                }
                (_, None) => Ok(()),
            };
            copied.map_err(|fault| Stop::from(fault).after(moved))?;
            moved += len;
        }
        match locating_fault {
            Some(fault) => Err(Stop::from(fault).after(moved)),
            None => Ok(moved),
        }
    }

    /// Cuts the bytes `batch` covered into pieces, each within one source run and one
    /// destination run, both located (memory checked and resolved): how many, and the fault
    /// that ended them early when locating a run failed (the pieces before it are still
    /// copied, as a copy byte by byte would have). A piece ends at least one run, so the
    /// pieces of a batch fit.
    fn plan<M: GuestMemoryBackend>(
        &mut self,
        batch: &Batch,
        memory: &VirtualMemory<'_, '_, M>,
    ) -> (usize, Option<Fault>) {
        let length = batch.covered;
        let mut sources = self.sources[..batch.sources].iter();
        let mut destinations = self.destinations[..batch.destinations].iter();
        // A run is located only as far as the batch copies (a source run may reach past it).
        let mut known = 0..0;
        let mut next = |runs: &mut std::slice::Iter<'_, Run>, planned: u64| {
            runs.next()
                .map(|&run| Located::of(run, length - planned, memory, &mut known))
                .transpose()
        };
        let mut from = match next(&mut sources, 0) {
            Ok(located) => located,
            Err(fault) => return (0, Some(fault)),
        };
        let mut to = match next(&mut destinations, 0) {
            Ok(located) => located,
            Err(fault) => return (0, Some(fault)),
        };
        // What is left of a run past a piece `len` long, or else the next run, located.
        let mut advance = |run: Located, len: u64, runs: &mut std::slice::Iter<'_, Run>, at| {
            match run.rest(len) {
                Some(rest) => Ok(Some(rest)),
                None => next(runs, at),
            }
        };
        let mut count = 0;
        let mut planned = 0u64;
        while let (Some(f), Some(t)) = (from, to) {
            let Some(piece) = self.pieces.get_mut(count) else {
                debug_assert!(false, "more pieces than runs");
                break;
            };
            let len = f.len.min(t.len).min(length - planned);
            *piece = Piece {
                from: f.at,
                to: t.at,
                len,
            };
            count += 1;
            planned += len;
            if planned == length {
                break;
            }
            // Source first: its fault comes first in copy order.
            from = match advance(f, len, &mut sources, planned) {
                Ok(located) => located,
                Err(fault) => return (count, Some(fault)),
            };
            to = match advance(t, len, &mut destinations, planned) {
                Ok(located) => located,
                Err(fault) => return (count, Some(fault)),
            };
        }
        (count, None)
    }

    /// Fills `length` bytes at VA `destination` with `pattern`; returns the bytes.
    pub(super) fn fill<M: GuestMemoryBackend>(
        &mut self,
        pattern: u32,
        length: u64,
        destination: u64,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stopped> {
        destination
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?;
        let pattern = pattern.to_le_bytes();
        let mut done = 0u64;
        while done < length {
            interruption_point(done, hooks)?;
            let step = (length - done).min(CHUNK - done % CHUNK);
            // A fault here leaves the runs before it filled: `done` bytes.
            let stopped = |fault: Fault| Stop::from(fault).after(done);
            let run = memory
                .translate(destination + done, step, Access::Write)
                .map_err(stopped)?;
            if let Some(to) = memory.location(run).map_err(stopped)? {
                // The pattern stays in phase with the fill's start: every run starts at a
                // multiple of 4 from it or the pattern is rotated to match.
                let phase = usize::try_from(done % 4).unwrap_or(0);
                let mut rotated = pattern;
                rotated.rotate_left(phase);
                self.repeated
                    .write(to, &rotated, memory.mem)
                    .map_err(stopped)?;
            }
            done += run.len;
        }
        Ok(length)
    }
}

/// Asks for an interruption at each chunk boundary of a long copy or fill (`done` bytes of it
/// moved).
fn interruption_point(done: u64, hooks: &impl VirtualHooks) -> Result<(), Stopped> {
    if !done.is_multiple_of(CHUNK) {
        return Ok(());
    }
    hooks.interruption().map_or(Ok(()), |interruption| {
        Err(Stop::from(interruption).after(done))
    })
}

/// A monitored fence signal: `value` lands at the 8-byte aligned VA `address`, then the fence
/// is reported.
pub(super) fn signal<M: GuestMemoryBackend>(
    address: u64,
    value: u64,
    memory: &VirtualMemory<'_, '_, M>,
    hooks: &mut impl VirtualHooks,
) -> Result<(), Stop> {
    if !address.is_multiple_of(8) {
        return Err(Fault::BadCommand("signal: address is not 8-byte aligned").into());
    }
    let run = memory.translate(address, 8, Access::Write)?;
    if let Some(to) = memory.location(run)? {
        write_location(to, &value.to_le_bytes(), memory.mem)?;
    }
    hooks.monitored_fence(address, value);
    Ok(())
}

/// The command's own fields.
fn check_command(cmd: &WddmGpuCmdSubmitVirtual) -> Result<(), Fault> {
    if cmd.flags != 0 || cmd.reserved != 0 {
        return Err(Fault::ReservedField("submit_virtual flags or reserved"));
    }
    if cmd.node_ordinal != WDDM_GPU_NODE_VIRTUAL {
        return Err(Fault::BadCommand(
            "submit_virtual: node_ordinal must be 1 (the virtual node)",
        ));
    }
    check_buffer_window(cmd.dma_buffer_size, cmd.start_offset, cmd.end_offset)?;
    cmd.dma_buffer_address
        .checked_add(u64::from(cmd.dma_buffer_size))
        .ok_or(Fault::LengthOverflow(cmd.dma_buffer_address))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::guest_ram::GuestRam;
    use crate::testkit::engine_rig::{Rig, DATA, PAGE, PAGE_USIZE, RAM_SIZE};
    use crate::testkit::packets::VRAM_SEGMENT;

    /// Runs `batch` of the engine's runs through `copy_batch` over the rig's memory (the
    /// batch's runs are given, not translated: no address space is bound).
    fn copy_batch(rig: &Rig, engine: &mut VirtualEngine, batch: &Batch) -> Result<u64, Stopped> {
        let memory = DeviceMemory {
            ram: GuestRam::new(&rig.mem, rig.vram.guest_window()),
            vram: &rig.vram,
            layout: &rig.layout,
        };
        let space = Mutex::new(AddressSpace::new(false));
        let virtual_memory = VirtualMemory {
            mem: &memory,
            geometry: rig.layout.gpummu.as_ref().unwrap(),
            space: &space,
        };
        engine.copy_batch(batch, &virtual_memory)
    }

    /// A batch whose second source run translated but is not RAM when located (the walk
    /// checks every target, so only a device bug gets here): the first run's page is copied,
    /// then the locating fault is returned with that page counted, as a copy byte by byte
    /// would end.
    #[test]
    fn a_run_that_cannot_be_located_ends_the_batch_after_the_pieces_before_it() {
        let rig = super::super::tests::gpummu_rig("ve-plan-fault");
        rig.ram_write(DATA, &[0x5a; PAGE_USIZE]);
        rig.vram_write(0, &[0; 2 * PAGE_USIZE]);
        let mut engine = VirtualEngine::default();
        engine.sources[..2].copy_from_slice(&[
            Run {
                target: Target::System(DATA),
                len: PAGE,
            },
            Run {
                target: Target::System(RAM_SIZE),
                len: PAGE,
            },
        ]);
        engine.destinations[0] = Run {
            target: Target::Segment {
                segment: VRAM_SEGMENT,
                offset: 0,
            },
            len: 2 * PAGE,
        };
        let batch = Batch {
            sources: 2,
            destinations: 1,
            covered: 2 * PAGE,
            fault: None,
        };
        let result = copy_batch(&rig, &mut engine, &batch);
        assert_eq!(
            result,
            Err(Stop::from(Fault::FrameNotInRam { address: RAM_SIZE }).after(PAGE))
        );
        assert_eq!(rig.vram_read(0, PAGE_USIZE), vec![0x5a; PAGE_USIZE]);
        assert_eq!(rig.vram_read(PAGE, PAGE_USIZE), vec![0; PAGE_USIZE]);
    }

    /// Runs of both sides that end in turn (the destination's half a page out of step): 64 a
    /// side cut into 127 pieces, every one copied.
    #[test]
    fn a_batch_whose_runs_all_end_in_turn_copies_every_piece() {
        let rig = super::super::tests::gpummu_rig("ve-plan-pieces");
        let mut engine = VirtualEngine::default();
        let half = PAGE / 2;
        let mut expected = Vec::new();
        for (i, run) in (0u64..).zip(engine.sources.iter_mut()) {
            let bytes: Vec<u8> = (0..PAGE).map(|b| ((b + 3 * i) % 251) as u8).collect();
            rig.ram_write(DATA + 2 * i * PAGE, &bytes);
            expected.extend(bytes);
            *run = Run {
                target: Target::System(DATA + 2 * i * PAGE),
                len: PAGE,
            };
        }
        // Every other VRAM page, the first run half a page long and the last a page and a half.
        for (i, run) in (0u64..).zip(engine.destinations.iter_mut()) {
            let len = match i {
                0 => half,
                i if i == BATCH as u64 - 1 => PAGE + half,
                _ => PAGE,
            };
            *run = Run {
                target: Target::Segment {
                    segment: VRAM_SEGMENT,
                    offset: 2 * i * PAGE,
                },
                len,
            };
        }
        let covered = BATCH as u64 * PAGE;
        assert_eq!(total(&engine.destinations), covered);
        let batch = Batch {
            sources: BATCH,
            destinations: BATCH,
            covered,
            fault: None,
        };
        assert_eq!(copy_batch(&rig, &mut engine, &batch), Ok(covered));
        let mut copied = Vec::new();
        for (i, run) in (0u64..).zip(&engine.destinations) {
            copied.extend(rig.vram_read(2 * i * PAGE, usize::try_from(run.len).unwrap()));
        }
        assert_eq!(copied, expected);
    }
}
