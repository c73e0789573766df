//! The paging engine: executes the packets of a submitted DMA buffer against guest RAM, VRAM
//! and the apertures (through the [`Gart`], which the engine owns).
//!
//! Every packet is copied into device memory once (header, body, the frame entries it uses),
//! checked as a whole, and only then executed from that copy, so a guest rewriting its buffer
//! meanwhile cannot change what was checked. A bad packet ends the submission with a [`Fault`]
//! naming it; a packet addressing physical memory is checked whole, so nothing it addresses is
//! touched, while one addressing GPU virtual memory faults where its translation does, its
//! bytes before that written and counted ([`Stopped`]). Long work runs in chunks of at most
//! [`CHUNK`] bytes, and [`EngineHooks::interruption`] is asked between chunks, so a preemption or
//! a reset takes effect within one chunk (an [`Interruption`], not a fault).
//!
//! Modules: [`fault`] (why a submission stops), `access` (endpoints, runs, copies), `ops` (one
//! function per packet), [`describe`] (what a packet declares before it runs).

mod access;
pub mod describe;
pub mod fault;
mod ops;
mod page_tables;
mod paging_virtual;
mod place;
pub mod record;
pub mod virtual_engine;

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::decode::{read_header, Packet};
use wddm_gpu_abi::packet::{WddmGpuPacketHeader, WDDM_GPU_MAX_PACKET_SIZE, WDDM_GPU_PACKET_ALIGN};
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_abi::submit::{
    WddmGpuCmdSubmit, WDDM_GPU_MAX_DMA_BUFFER_SIZE, WDDM_GPU_SUBMIT_FLAGS_KNOWN,
};

use self::access::{read_side, read_vram, GuestPages, Side};
use self::describe::declared;
pub use self::fault::{Fault, Interruption, Stop, Stopped};
use self::record::PacketRecord;
use crate::layout::{ResolveError, Resolved, SegmentLayout, SegmentRange};
use crate::memory::frames::FrameList;
use crate::memory::gart::Gart;
use crate::memory::guest_ram::{GuestRam, RamRange};
use crate::memory::vram::Vram;
use crate::mmu::space::AddressSpace;

/// Most bytes one copy or fill step moves before the engine checks for preemption and reset.
pub const CHUNK: u64 = 1 << 20;

/// How a submission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// `SubmissionFenceId`.
    pub fence_id: u32,
    /// Packets fully executed.
    pub packets_completed: u32,
    /// Bytes moved (TRANSFER, the virtual-address copies) or written (the fills), the part a
    /// stopped packet moved before it stopped included.
    pub bytes_transferred: u64,
    /// Why it stopped early, and the DMA-buffer offset of the packet (the start offset when the
    /// command itself was refused).
    pub stop: Option<(u32, Stop)>,
    /// Opcode of the packet that faulted (0 when the command itself was refused).
    pub fault_opcode: u16,
    /// The DMA-buffer offset where execution stopped because [`EngineHooks::defer`] asked to
    /// run the rest elsewhere (nothing from there on ran).
    pub deferred: Option<u32>,
}

impl Completion {
    /// The fault that ended the submission, if it was one (not an interruption), at its
    /// DMA-buffer offset.
    pub fn fault(&self) -> Option<(u32, Fault)> {
        match self.stop {
            Some((offset, Stop::Fault(fault))) => Some((offset, fault)),
            _ => None,
        }
    }
}

/// What the engine reads and writes besides the GART.
pub struct DeviceMemory<'a, M> {
    /// Guest RAM (VRAM window excluded).
    pub ram: GuestRam<'a, M>,
    /// VRAM (the BAR file and device-only memory).
    pub vram: &'a Vram,
    /// The segment layout.
    pub layout: &'a SegmentLayout,
}

/// The engine's view of the rest of the device.
pub trait EngineHooks {
    /// Asked between chunks and packets: `Some` stops the submission there.
    fn interruption(&self) -> Option<Interruption> {
        None
    }

    /// A FENCE packet executed.
    fn fence(&mut self, _fence_id: u32) {}

    /// Asked before each packet with the bytes it declares it will read or write: `true`
    /// stops the submission there, to be continued from that offset (see
    /// [`Completion::deferred`]).
    fn defer(&mut self, _work: u64) -> bool {
        false
    }

    /// Asked before packet `index` (0 = the first of this run) runs: `Some` faults it instead
    /// (fault injection; see `crate::gpu::inject`).
    fn injected_fault(&mut self, _index: u32) -> Option<Fault> {
        None
    }

    /// A packet at `offset` of submission `fence` completed (the checker looks at it).
    fn ran(&mut self, _fence: u32, _offset: u32, _packet: &Packet) {}

    /// A packet ran (completely, or up to its fault).
    fn packet(&mut self, _record: &PacketRecord) {}

    /// A FLUSH_TLB executed: every address space whose root is `root` drops the translations
    /// of `range` (all of them when `None`).
    fn flush_tlb(&mut self, root: crate::mmu::walk::TableAddress, range: Option<Range<u64>>);

    /// The address space of the paging node's context (the system paging process), which the
    /// virtual-address paging packets use; `None` while no such context exists.
    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>>;

    /// A SIGNAL_MONITORED_FENCE wrote `value` at GPU VA `address`.
    fn monitored_fence(&mut self, address: u64, value: u64);
}

/// No preemption, fences ignored, no address spaces to flush: for tests and simple callers.
impl EngineHooks for () {
    fn flush_tlb(&mut self, _root: crate::mmu::walk::TableAddress, _range: Option<Range<u64>>) {}

    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        None
    }

    fn monitored_fence(&mut self, _address: u64, _value: u64) {}
}

/// Where the DMA buffer is.
#[derive(Clone, Copy, Debug)]
enum DmaBuffer {
    /// Physically contiguous guest RAM.
    Guest(RamRange),
    /// In a memory segment, at these offsets of the VRAM address space.
    Vram(SegmentRange),
    /// In an aperture, through the GART.
    Aperture(Side),
}

/// Bytes of a DMA buffer the first read of a packet brings (see [`Engine::read_packet`]): every
/// packet but the largest fits.
const FIRST_READ: u32 = 256;
const _: () = assert!(FIRST_READ <= WDDM_GPU_MAX_PACKET_SIZE);

/// Executes DMA buffers. Owns the GART and scratch space reused across submissions, so the hot
/// path does not allocate.
pub struct Engine {
    gart: Gart,
    /// The copy engine the virtual-address paging packets move bytes with.
    virtual_engine: virtual_engine::VirtualEngine,
    /// The entry a Repeat UPDATE_PAGE_TABLE writes, repeated.
    repeated: access::Repeated,
    frame_lists: [FrameList; 2],
    /// The packet being executed, copied out of the DMA buffer.
    packet: Option<Box<[u8; WDDM_GPU_MAX_PACKET_SIZE as usize]>>,
    bounce: Vec<u8>,
    fill: Vec<u8>,
}

impl Engine {
    /// An engine with empty apertures for this layout.
    pub fn new(layout: &SegmentLayout) -> Self {
        Self {
            gart: Gart::new(layout),
            virtual_engine: virtual_engine::VirtualEngine::default(),
            repeated: access::Repeated::default(),
            frame_lists: [FrameList::new(), FrameList::new()],
            packet: None,
            bounce: Vec::new(),
            fill: Vec::new(),
        }
    }

    /// The translation tables.
    pub fn gart(&self) -> &Gart {
        &self.gart
    }

    /// Device reset: every aperture mapping is forgotten.
    pub fn reset(&mut self) {
        self.gart.clear();
    }

    /// Executes `[start_offset, end_offset)` of the command's DMA buffer.
    pub fn execute<M: GuestMemoryBackend>(
        &mut self,
        cmd: &WddmGpuCmdSubmit,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
    ) -> Completion {
        self.execute_from(cmd, mem, hooks, Instant::now()).0
    }

    /// [`Self::execute`], begun at `started` (the caller's clock reading, which the first
    /// packet's start shares); also returns when the last packet ended (`started` if none ran).
    /// A packet's end is the next one's start: one clock reading a packet, which on a virtual
    /// machine's clock is tens of nanoseconds a submission saves.
    pub fn execute_from<M: GuestMemoryBackend>(
        &mut self,
        cmd: &WddmGpuCmdSubmit,
        mem: &DeviceMemory<'_, M>,
        hooks: &mut impl EngineHooks,
        started: Instant,
    ) -> (Completion, Instant) {
        let mut completion = Completion {
            fence_id: cmd.submission_fence_id,
            packets_completed: 0,
            bytes_transferred: 0,
            stop: None,
            fault_opcode: 0,
            deferred: None,
        };
        let buffer = match self.check_command(cmd, mem) {
            Ok(buffer) => buffer,
            Err(fault) => {
                completion.stop = Some((cmd.start_offset, fault.into()));
                return (completion, started);
            }
        };
        let mut offset = cmd.start_offset;
        let mut clock = started;
        // Reused from submission to submission rather than zeroed again each time (4 KiB).
        let mut packet = self
            .packet
            .take()
            .unwrap_or_else(|| Box::new([0; WDDM_GPU_MAX_PACKET_SIZE as usize]));
        while offset < cmd.end_offset {
            if let Some(interruption) = hooks.interruption() {
                completion.stop = Some((offset, interruption.into()));
                break;
            }
            let PacketAt { header, size, next } =
                match self.read_packet(cmd, buffer, offset, mem, &mut packet) {
                    Ok(read) => read,
                    Err(fault) => {
                        completion.stop = Some((offset, fault.into()));
                        completion.fault_opcode = u16::from_le_bytes([packet[0], packet[1]]);
                        break;
                    }
                };
            // The one read of the packet's body: weighed, then executed, from this.
            let body = Packet::read_body(&header, &packet[..size as usize]);
            let declared = declared(&header, body.as_ref().ok());
            if hooks.defer(declared.work) {
                completion.deferred = Some(offset);
                break;
            }
            let start = clock;
            let packet = Packet::checked(&header, body);
            let result = match hooks.injected_fault(completion.packets_completed) {
                Some(fault) => Err(Stopped::from(fault)),
                None => self.execute_packet(packet, mem, hooks),
            };
            let bytes = match &result {
                Ok(bytes) => *bytes,
                Err(stopped) => stopped.done,
            };
            if let (Ok(_), Ok(packet)) = (&result, &packet) {
                hooks.ran(cmd.submission_fence_id, offset, packet);
            }
            hooks.packet(&PacketRecord {
                opcode: declared.opcode,
                dma_offset: offset,
                fence: cmd.submission_fence_id,
                start,
                duration: {
                    clock = Instant::now();
                    clock.saturating_duration_since(start)
                },
                bytes,
                pages: if result.is_ok() { declared.pages } else { 0 },
                // Interrupted or faulted packets moved a part of what they declared: no
                // traffic is claimed (their bytes are counted).
                traffic: if result.is_ok() {
                    declared.traffic
                } else {
                    [None, None]
                },
                faulted: result.is_err(),
            });
            // A packet that stopped part way left its first bytes written: they count.
            completion.bytes_transferred = completion.bytes_transferred.saturating_add(bytes);
            match result {
                Ok(_) => {
                    completion.packets_completed += 1;
                    offset = next;
                }
                Err(stopped) => {
                    completion.stop = Some((offset, stopped.stop));
                    completion.fault_opcode = declared.opcode;
                    break;
                }
            }
        }
        self.packet = Some(packet);
        (completion, clock)
    }

    /// Checks the command's fields and that the whole DMA buffer is reachable.
    fn check_command<M: GuestMemoryBackend>(
        &self,
        cmd: &WddmGpuCmdSubmit,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<DmaBuffer, Fault> {
        if cmd.flags & !WDDM_GPU_SUBMIT_FLAGS_KNOWN != 0 {
            return Err(Fault::BadCommand("unknown flags"));
        }
        if cmd.reserved != 0 {
            return Err(Fault::BadCommand("reserved is not zero"));
        }
        if cmd.node_ordinal != 0 {
            return Err(Fault::BadCommand("node_ordinal must be 0 (one engine)"));
        }
        check_buffer_window(cmd.dma_buffer_size, cmd.start_offset, cmd.end_offset)?;
        let bad_buffer = Fault::BadDmaBuffer {
            address: cmd.dma_buffer_address,
            size: cmd.dma_buffer_size,
        };
        let size = u64::from(cmd.dma_buffer_size);
        if cmd.dma_buffer_segment_id == 0 {
            let range = mem
                .ram
                .check(cmd.dma_buffer_address, size)
                .map_err(|_| bad_buffer)?;
            return Ok(DmaBuffer::Guest(range));
        }
        let segment = cmd.dma_buffer_segment_id;
        match mem.layout.resolve(segment, cmd.dma_buffer_address, size) {
            // Checked against the VRAM file as packets are read.
            Ok(Resolved::Vram(range)) => Ok(DmaBuffer::Vram(range)),
            Ok(Resolved::Aperture(range)) => {
                self.gart.check_mapped(segment, range)?;
                Ok(DmaBuffer::Aperture(Side::Guest(GuestPages::Aperture {
                    segment,
                    range,
                })))
            }
            Err(ResolveError::NoSuchSegment(id)) => Err(Fault::BadSegment(id)),
            Err(_) => Err(bad_buffer),
        }
    }

    /// Copies the packet at `offset` into `packet`; returns its header (read once, the copy's
    /// own), its size and where the next packet starts.
    fn read_packet<M: GuestMemoryBackend>(
        &self,
        cmd: &WddmGpuCmdSubmit,
        buffer: DmaBuffer,
        offset: u32,
        mem: &DeviceMemory<'_, M>,
        packet: &mut [u8; WDDM_GPU_MAX_PACKET_SIZE as usize],
    ) -> Result<PacketAt, Fault> {
        let header_size = size_of_u32::<WddmGpuPacketHeader>();
        let available = cmd.end_offset.saturating_sub(offset);
        packet[..2].fill(0);
        if available < header_size {
            return Err(Fault::BadPacketHeader {
                size: 0,
                reason: "header runs past end_offset",
            });
        }
        let read = |position: u64, buf: &mut [u8]| match buffer {
            DmaBuffer::Guest(range) => {
                mem.ram
                    .read(range.at(position), buf)
                    .map_err(|_| Fault::BadDmaBuffer {
                        address: cmd.dma_buffer_address,
                        size: cmd.dma_buffer_size,
                    })
            }
            DmaBuffer::Vram(range) => read_vram(range.at(position), buf, mem),
            DmaBuffer::Aperture(side) => {
                read_side(side, position, buf, &self.frame_lists, &self.gart, mem)
            }
        };
        let position = u64::from(offset);
        // The first read brings the header and, for most packets, the rest with it: up to
        // `FIRST_READ` bytes, never past `end_offset` (the buffer was checked to its end). Not
        // through an aperture, whose pages an earlier packet may have remapped: there the
        // header alone, so a page the packet does not reach cannot fault it.
        let first = match buffer {
            DmaBuffer::Guest(_) | DmaBuffer::Vram(_) => available.min(FIRST_READ),
            DmaBuffer::Aperture(_) => header_size,
        };
        read(position, &mut packet[..first as usize])?;
        let header = read_header(&packet[..])?;
        let size = header.size;
        check_packet_size(size, available)?;
        // `size <= available` above, so the next offset is at most `end_offset`.
        let next = offset.checked_add(size).ok_or(Fault::BadPacketHeader {
            size,
            reason: "runs past end_offset",
        })?;
        // The rest of the packet after what was read: what executes is this copy, with that
        // header, so a guest rewriting its buffer meanwhile changes nothing checked.
        if size > first {
            read(
                position + u64::from(first),
                &mut packet[first as usize..size as usize],
            )?;
        }
        Ok(PacketAt { header, size, next })
    }
}

/// A submission's DMA buffer size and the offsets it runs between, the same rule for SUBMIT
/// and SUBMIT_VIRTUAL: at most the device's maximum, and start <= end <= size.
fn check_buffer_window(size: u32, start: u32, end: u32) -> Result<(), Fault> {
    if size > WDDM_GPU_MAX_DMA_BUFFER_SIZE {
        return Err(Fault::BadCommand(
            "dma_buffer_size above the device maximum",
        ));
    }
    if start > end || end > size {
        return Err(Fault::BadCommand(
            "offsets must satisfy start <= end <= dma_buffer_size",
        ));
    }
    Ok(())
}

/// The rules of a packet header's `size`, with `available` bytes left before `end_offset` (both
/// engines read their DMA buffers packet by packet under them).
pub(crate) fn check_packet_size(size: u32, available: u32) -> Result<(), Fault> {
    let reason = if size < size_of_u32::<WddmGpuPacketHeader>() {
        "smaller than the header"
    } else if !size.is_multiple_of(WDDM_GPU_PACKET_ALIGN) {
        "not a multiple of 8"
    } else if size > WDDM_GPU_MAX_PACKET_SIZE {
        "larger than the device maximum"
    } else if size > available {
        "runs past end_offset"
    } else {
        return Ok(());
    };
    Err(Fault::BadPacketHeader { size, reason })
}

/// A packet read from the DMA buffer: its header, its size, and the offset of the next packet.
#[derive(Clone, Copy)]
struct PacketAt {
    header: WddmGpuPacketHeader,
    size: u32,
    next: u32,
}

#[cfg(test)]
mod tests;
