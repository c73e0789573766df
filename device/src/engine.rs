//! The paging engine: executes the packets of a submitted DMA buffer.
//!
//! Every packet is copied into device memory once (header, body, frame list), checked as a
//! whole, and only then executed from that copy, so a guest rewriting its buffer meanwhile
//! cannot change what was checked. A bad packet ends the submission with a [`Fault`] naming it;
//! nothing it addresses is touched.

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::packet::{
    WddmGpuEndpoint, WddmGpuPacketHeader, WddmGpuPacketTransfer, WDDM_GPU_MAX_FRAME_LIST_ENTRIES,
    WDDM_GPU_MAX_PACKET_SIZE, WDDM_GPU_OP_TRANSFER, WDDM_GPU_PACKET_ALIGN,
};
use wddm_gpu_abi::submit::{
    SubmitStatus, WddmGpuCmdSubmit, WDDM_GPU_MAX_DMA_BUFFER_SIZE, WDDM_GPU_SUBMIT_FLAGS_KNOWN,
};
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};
use zerocopy::{FromBytes, IntoBytes};

use crate::guest_ram::{GuestRam, RamError};
use crate::layout::{ResolveError, Resolved, SegmentLayout};
use crate::vram::{copy_slices, Vram};

/// Bytes copied through the bounce buffer per step when source and destination overlap.
const BOUNCE_SIZE: usize = 64 << 10;

/// Why a submission stopped. Each maps to one wire [`SubmitStatus`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The command's own fields are inconsistent.
    #[error("bad submit command: {0}")]
    BadCommand(&'static str),
    /// The DMA buffer is not in guest RAM.
    #[error("DMA buffer {address:#x}+{size:#x} is not guest RAM")]
    BadDmaBuffer {
        /// Buffer address.
        address: u64,
        /// Buffer size.
        size: u32,
    },
    /// A packet header is malformed.
    #[error("bad packet header (size {size}, {reason})")]
    BadPacketHeader {
        /// Size the header claimed.
        size: u32,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// Unknown opcode.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    /// No such segment.
    #[error("segment {0} does not exist")]
    BadSegment(u32),
    /// Range outside its segment.
    #[error("range {address:#x}+{length:#x} is outside segment {segment}")]
    SegmentRange {
        /// Segment id.
        segment: u32,
        /// GPU address.
        address: u64,
        /// Length.
        length: u64,
    },
    /// A frame list is unusable as a whole.
    #[error("frame list at {address:#x}: {reason}")]
    BadFrameList {
        /// Frame-list address.
        address: u64,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A listed frame is not guest RAM.
    #[error("frame at {address:#x} is not guest RAM")]
    FrameNotInRam {
        /// Physical address of the frame's bytes in use.
        address: u64,
    },
    /// A listed frame is in the VRAM BAR.
    #[error("frame at {address:#x} is inside the VRAM BAR")]
    FrameInVram {
        /// Physical address inside the BAR.
        address: u64,
    },
    /// Arithmetic on guest numbers overflowed.
    #[error("length {0:#x} overflows")]
    LengthOverflow(u64),
    /// A reserved field is set.
    #[error("reserved field {0} is not zero")]
    ReservedField(&'static str),
    /// Valid but not supported by this device version.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

impl Fault {
    /// The wire status.
    pub fn status(&self) -> SubmitStatus {
        match self {
            Fault::BadCommand(_) => SubmitStatus::BadCommand,
            Fault::BadDmaBuffer { .. } => SubmitStatus::BadDmaBuffer,
            Fault::BadPacketHeader { .. } => SubmitStatus::BadPacketHeader,
            Fault::UnknownOpcode(_) => SubmitStatus::UnknownOpcode,
            Fault::BadSegment(_) => SubmitStatus::BadSegment,
            Fault::SegmentRange { .. } => SubmitStatus::SegmentRange,
            Fault::BadFrameList { .. } => SubmitStatus::BadFrameList,
            Fault::FrameNotInRam { .. } => SubmitStatus::FrameNotInRam,
            Fault::FrameInVram { .. } => SubmitStatus::FrameInVram,
            Fault::LengthOverflow(_) => SubmitStatus::LengthOverflow,
            Fault::ReservedField(_) => SubmitStatus::ReservedField,
            Fault::Unsupported(_) => SubmitStatus::Unsupported,
        }
    }

    /// The address the fault concerns, or 0.
    pub fn address(&self) -> u64 {
        match *self {
            Fault::BadDmaBuffer { address, .. }
            | Fault::SegmentRange { address, .. }
            | Fault::BadFrameList { address, .. }
            | Fault::FrameNotInRam { address }
            | Fault::FrameInVram { address } => address,
            _ => 0,
        }
    }
}

impl From<ResolveError> for Fault {
    fn from(error: ResolveError) -> Self {
        match error {
            ResolveError::NoSuchSegment(id) => Fault::BadSegment(id),
            ResolveError::Overflow { length, .. } => Fault::LengthOverflow(length),
            ResolveError::OutOfRange {
                segment,
                address,
                length,
            } => Fault::SegmentRange {
                segment,
                address,
                length,
            },
        }
    }
}

/// How a submission ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// `SubmissionFenceId`.
    pub fence_id: u32,
    /// Packets fully executed.
    pub packets_completed: u32,
    /// Bytes moved.
    pub bytes_transferred: u64,
    /// The fault and the DMA-buffer offset of the packet that raised it.
    pub fault: Option<(u32, Fault)>,
}

/// What the engine reads and writes.
pub struct DeviceMemory<'a, M> {
    /// Guest RAM (VRAM window excluded).
    pub ram: GuestRam<'a, M>,
    /// The VRAM file.
    pub vram: &'a Vram,
    /// The segment layout.
    pub layout: &'a SegmentLayout,
}

/// Where one byte of an endpoint lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    Vram(u64),
    Guest(u64),
}

/// One endpoint of a transfer, resolved and checked.
enum Side {
    Vram { offset: u64 },
    Frames { list: usize, byte_offset: u64 },
}

/// Walks an endpoint in maximal runs of contiguous bytes.
struct Cursor {
    location: Location,
    run_left: u64,
    position: u64,
}

/// Executes DMA buffers. Holds scratch space reused across submissions so the hot path does
/// not allocate.
#[derive(Default)]
pub struct Engine {
    frame_lists: [Vec<u64>; 2],
    bounce: Vec<u8>,
}

impl Engine {
    /// Executes `[start_offset, end_offset)` of the command's DMA buffer.
    pub fn execute<M: GuestMemoryBackend>(
        &mut self,
        cmd: &WddmGpuCmdSubmit,
        mem: &DeviceMemory<'_, M>,
    ) -> Completion {
        let mut completion = Completion {
            fence_id: cmd.submission_fence_id,
            packets_completed: 0,
            bytes_transferred: 0,
            fault: None,
        };
        if let Err(fault) = check_command(cmd, mem) {
            completion.fault = Some((cmd.start_offset, fault));
            return completion;
        }
        let mut offset = cmd.start_offset;
        let mut packet = [0u8; WDDM_GPU_MAX_PACKET_SIZE as usize];
        while offset < cmd.end_offset {
            let result = read_packet(cmd, offset, mem, &mut packet)
                .and_then(|size| Ok((size, self.execute_packet(&packet[..size as usize], mem)?)));
            match result {
                Ok((size, bytes)) => {
                    completion.packets_completed += 1;
                    completion.bytes_transferred += bytes;
                    // read_packet checked offset + size <= end_offset.
                    offset += size;
                }
                Err(fault) => {
                    completion.fault = Some((offset, fault));
                    break;
                }
            }
        }
        completion
    }

    fn execute_packet<M: GuestMemoryBackend>(
        &mut self,
        packet: &[u8],
        mem: &DeviceMemory<'_, M>,
    ) -> Result<u64, Fault> {
        let (header, _) =
            WddmGpuPacketHeader::read_from_prefix(packet).map_err(|_| Fault::BadPacketHeader {
                size: 0,
                reason: "truncated",
            })?;
        match header.opcode {
            WDDM_GPU_OP_TRANSFER => {
                let (transfer, _) =
                    WddmGpuPacketTransfer::read_from_prefix(packet).map_err(|_| {
                        Fault::BadPacketHeader {
                            size: header.size,
                            reason: "smaller than a TRANSFER packet",
                        }
                    })?;
                self.transfer(&transfer, mem)
            }
            opcode => Err(Fault::UnknownOpcode(opcode)),
        }
    }

    fn transfer<M: GuestMemoryBackend>(
        &mut self,
        packet: &WddmGpuPacketTransfer,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<u64, Fault> {
        if packet.header.flags != 0 {
            return Err(Fault::ReservedField("transfer.flags"));
        }
        let length = packet.length;
        let source = self.resolve(0, &packet.source, length, mem)?;
        let destination = self.resolve(1, &packet.destination, length, mem)?;
        if length == 0 {
            return Ok(0);
        }
        let mut src = Cursor::new();
        let mut dst = Cursor::new();
        let mut done = 0u64;
        while done < length {
            let remaining = length - done;
            if src.run_left == 0 {
                src = self.run_at(&source, done, remaining, mem);
            }
            if dst.run_left == 0 {
                dst = self.run_at(&destination, done, remaining, mem);
            }
            let step = src.run_left.min(dst.run_left).min(remaining);
            if step == 0 {
                // Checked ranges always have a run; a zero step means the memory table changed
                // under us, which the transport prevents. Refuse rather than spin.
                return Err(Fault::FrameNotInRam {
                    address: match src.location {
                        Location::Guest(a) | Location::Vram(a) => a,
                    },
                });
            }
            self.copy(src.location, dst.location, step, mem)?;
            src.advance(step);
            dst.advance(step);
            done += step;
        }
        Ok(length)
    }

    /// Resolves and checks one endpoint; frame lists are copied into `frame_lists[slot]`.
    fn resolve<M: GuestMemoryBackend>(
        &mut self,
        slot: usize,
        endpoint: &WddmGpuEndpoint,
        length: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<Side, Fault> {
        if endpoint.reserved != 0 {
            return Err(Fault::ReservedField("endpoint.reserved"));
        }
        if endpoint.segment_id != 0 {
            if endpoint.frame_count != 0 || endpoint.byte_offset != 0 {
                return Err(Fault::ReservedField("endpoint.frame_count/byte_offset"));
            }
            return match mem
                .layout
                .resolve(endpoint.segment_id, endpoint.address, length)?
            {
                Resolved::Vram { offset } => {
                    let end = offset
                        .checked_add(length)
                        .ok_or(Fault::LengthOverflow(length))?;
                    if end > mem.vram.total_size() {
                        return Err(Fault::SegmentRange {
                            segment: endpoint.segment_id,
                            address: endpoint.address,
                            length,
                        });
                    }
                    Ok(Side::Vram { offset })
                }
                Resolved::Aperture { .. } => {
                    Err(Fault::Unsupported("aperture endpoints need the GART"))
                }
            };
        }
        self.load_frame_list(slot, endpoint, length, mem)?;
        Ok(Side::Frames {
            list: slot,
            byte_offset: u64::from(endpoint.byte_offset),
        })
    }

    /// Copies the frames a transfer touches into device memory and checks each run of them.
    fn load_frame_list<M: GuestMemoryBackend>(
        &mut self,
        slot: usize,
        endpoint: &WddmGpuEndpoint,
        length: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let address = endpoint.address;
        let count = endpoint.frame_count;
        if count > WDDM_GPU_MAX_FRAME_LIST_ENTRIES {
            return Err(Fault::BadFrameList {
                address,
                reason: "more entries than the device maximum",
            });
        }
        let start = u64::from(endpoint.byte_offset);
        let end = start
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?;
        if end > u64::from(count) * WDDM_GPU_PAGE_SIZE {
            return Err(Fault::BadFrameList {
                address,
                reason: "too few frames for offset + length",
            });
        }
        let list = &mut self.frame_lists[slot];
        list.clear();
        if length == 0 {
            return Ok(());
        }
        let first = start >> WDDM_GPU_PAGE_SHIFT;
        let last = (end - 1) >> WDDM_GPU_PAGE_SHIFT;
        // count <= 262144, so these fit comfortably.
        let touched = (last - first + 1) as usize;
        list.resize(touched, 0);
        let list_address = address
            .checked_add(first * 8)
            .ok_or(Fault::LengthOverflow(first))?;
        mem.ram
            .read(list_address, list.as_mut_slice().as_mut_bytes())
            .map_err(|_| Fault::BadFrameList {
                address,
                reason: "not inside guest RAM",
            })?;
        for frame in list.iter_mut() {
            *frame = u64::from_le(*frame);
        }
        // Check the bytes in use, run by run: the first and last frames may be partial.
        let mut index = 0;
        while index < touched {
            let mut run_end = index + 1;
            while run_end < touched && list[run_end] == list[run_end - 1].wrapping_add(1) {
                run_end += 1;
            }
            let frame_address = list[index]
                .checked_mul(WDDM_GPU_PAGE_SIZE)
                .filter(|a| {
                    a.checked_add(WDDM_GPU_PAGE_SIZE * (run_end - index) as u64)
                        .is_some()
                })
                .ok_or(Fault::FrameNotInRam {
                    address: list[index],
                })?;
            let run_bytes = WDDM_GPU_PAGE_SIZE * (run_end - index) as u64;
            match mem.ram.check(frame_address, run_bytes) {
                Ok(()) => {}
                Err(RamError::InVram { address }) => return Err(Fault::FrameInVram { address }),
                Err(RamError::NotRam { address }) => return Err(Fault::FrameNotInRam { address }),
                Err(RamError::Overflow { address, .. }) => {
                    return Err(Fault::FrameNotInRam { address })
                }
            }
            index = run_end;
        }
        Ok(())
    }

    /// The run of contiguous bytes of `side` starting `position` bytes in, at most `limit` long.
    fn run_at<M: GuestMemoryBackend>(
        &self,
        side: &Side,
        position: u64,
        limit: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Cursor {
        match *side {
            Side::Vram { offset } => Cursor {
                location: Location::Vram(offset + position),
                run_left: limit,
                position,
            },
            Side::Frames { list, byte_offset } => {
                let frames = &self.frame_lists[list];
                let first = byte_offset >> WDDM_GPU_PAGE_SHIFT;
                let at = byte_offset + position;
                let index = ((at >> WDDM_GPU_PAGE_SHIFT) - first) as usize;
                let in_page = at & (WDDM_GPU_PAGE_SIZE - 1);
                let address = frames[index] * WDDM_GPU_PAGE_SIZE + in_page;
                let mut run = WDDM_GPU_PAGE_SIZE - in_page;
                let mut next = index + 1;
                while run < limit && next < frames.len() && frames[next] == frames[next - 1] + 1 {
                    run += WDDM_GPU_PAGE_SIZE;
                    next += 1;
                }
                // A run may span two memory-table regions; a slice may not.
                let run = run.min(limit).min(mem.ram.contiguous_len(address));
                Cursor {
                    location: Location::Guest(address),
                    run_left: run,
                    position,
                }
            }
        }
    }

    fn copy<M: GuestMemoryBackend>(
        &mut self,
        src: Location,
        dst: Location,
        length: u64,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let len = usize::try_from(length).map_err(|_| Fault::LengthOverflow(length))?;
        let overlap = match (src, dst) {
            (Location::Vram(a), Location::Vram(b)) | (Location::Guest(a), Location::Guest(b)) => {
                a < b + length && b < a + length
            }
            _ => false,
        };
        if overlap {
            return self.copy_overlapping(src, dst, len, mem);
        }
        let vram_slice = |offset: u64, len: usize| {
            mem.vram.slice(offset, len).ok_or(Fault::SegmentRange {
                segment: 0,
                address: offset,
                length: len as u64,
            })
        };
        let ram_slice = |address: u64, len: usize| {
            mem.ram
                .slice(address, len)
                .map_err(|_| Fault::FrameNotInRam { address })
        };
        match (src, dst) {
            (Location::Vram(s), Location::Vram(d)) => {
                copy_slices(vram_slice(s, len)?, vram_slice(d, len)?)
            }
            (Location::Vram(s), Location::Guest(d)) => {
                copy_slices(vram_slice(s, len)?, ram_slice(d, len)?)
            }
            (Location::Guest(s), Location::Vram(d)) => {
                copy_slices(ram_slice(s, len)?, vram_slice(d, len)?)
            }
            (Location::Guest(s), Location::Guest(d)) => {
                copy_slices(ram_slice(s, len)?, ram_slice(d, len)?)
            }
        }
        Ok(())
    }

    /// memmove semantics through a bounce buffer, in the direction that never reads bytes
    /// already overwritten.
    fn copy_overlapping<M: GuestMemoryBackend>(
        &mut self,
        src: Location,
        dst: Location,
        len: usize,
        mem: &DeviceMemory<'_, M>,
    ) -> Result<(), Fault> {
        let mut bounce = std::mem::take(&mut self.bounce);
        bounce.resize(BOUNCE_SIZE, 0);
        let forward = match (src, dst) {
            (Location::Vram(s), Location::Vram(d)) | (Location::Guest(s), Location::Guest(d)) => {
                d <= s
            }
            _ => true,
        };
        let mut result = Ok(());
        let mut done = 0usize;
        while done < len && result.is_ok() {
            let chunk = (len - done).min(BOUNCE_SIZE);
            let at = if forward { done } else { len - done - chunk };
            let shift = |location: Location| match location {
                Location::Vram(a) => Location::Vram(a + at as u64),
                Location::Guest(a) => Location::Guest(a + at as u64),
            };
            result = read_location(shift(src), &mut bounce[..chunk], mem)
                .and_then(|()| write_location(shift(dst), &bounce[..chunk], mem));
            done += chunk;
        }
        self.bounce = bounce;
        result
    }
}

impl Cursor {
    fn new() -> Self {
        Self {
            location: Location::Vram(0),
            run_left: 0,
            position: 0,
        }
    }

    fn advance(&mut self, step: u64) {
        self.run_left -= step;
        self.position += step;
        self.location = match self.location {
            Location::Vram(a) => Location::Vram(a + step),
            Location::Guest(a) => Location::Guest(a + step),
        };
    }
}

fn read_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &mut [u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    match location {
        Location::Vram(offset) => {
            let slice = mem
                .vram
                .slice(offset, buf.len())
                .ok_or(Fault::SegmentRange {
                    segment: 0,
                    address: offset,
                    length: buf.len() as u64,
                })?;
            slice.copy_to(buf);
            Ok(())
        }
        Location::Guest(address) => mem
            .ram
            .read(address, buf)
            .map_err(|_| Fault::FrameNotInRam { address }),
    }
}

fn write_location<M: GuestMemoryBackend>(
    location: Location,
    buf: &[u8],
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    match location {
        Location::Vram(offset) => {
            let slice = mem
                .vram
                .slice(offset, buf.len())
                .ok_or(Fault::SegmentRange {
                    segment: 0,
                    address: offset,
                    length: buf.len() as u64,
                })?;
            slice.copy_from(buf);
            Ok(())
        }
        Location::Guest(address) => {
            let slice = mem
                .ram
                .slice(address, buf.len())
                .map_err(|_| Fault::FrameNotInRam { address })?;
            slice.copy_from(buf);
            Ok(())
        }
    }
}

/// Checks the command fields and that the whole DMA buffer is guest RAM.
fn check_command<M: GuestMemoryBackend>(
    cmd: &WddmGpuCmdSubmit,
    mem: &DeviceMemory<'_, M>,
) -> Result<(), Fault> {
    if cmd.flags & !WDDM_GPU_SUBMIT_FLAGS_KNOWN != 0 {
        return Err(Fault::BadCommand("unknown flags"));
    }
    if cmd.reserved != 0 {
        return Err(Fault::BadCommand("reserved is not zero"));
    }
    if cmd.node_ordinal != 0 {
        return Err(Fault::BadCommand("node_ordinal must be 0 (one engine)"));
    }
    if cmd.dma_buffer_size > WDDM_GPU_MAX_DMA_BUFFER_SIZE {
        return Err(Fault::BadCommand(
            "dma_buffer_size above the device maximum",
        ));
    }
    if cmd.start_offset > cmd.end_offset || cmd.end_offset > cmd.dma_buffer_size {
        return Err(Fault::BadCommand(
            "offsets must satisfy start <= end <= dma_buffer_size",
        ));
    }
    if cmd.dma_buffer_segment_id != 0 {
        return Err(Fault::Unsupported("DMA buffers in a segment"));
    }
    mem.ram
        .check(cmd.dma_buffer_address, u64::from(cmd.dma_buffer_size))
        .map_err(|_| Fault::BadDmaBuffer {
            address: cmd.dma_buffer_address,
            size: cmd.dma_buffer_size,
        })
}

/// Copies the packet at `offset` into `packet` and returns its size.
fn read_packet<M: GuestMemoryBackend>(
    cmd: &WddmGpuCmdSubmit,
    offset: u32,
    mem: &DeviceMemory<'_, M>,
    packet: &mut [u8; WDDM_GPU_MAX_PACKET_SIZE as usize],
) -> Result<u32, Fault> {
    let header_size = std::mem::size_of::<WddmGpuPacketHeader>() as u32;
    let available = cmd.end_offset - offset;
    if available < header_size {
        return Err(Fault::BadPacketHeader {
            size: 0,
            reason: "header runs past end_offset",
        });
    }
    // check_command proved the whole buffer is RAM, and offset < end_offset <= size.
    let address = cmd.dma_buffer_address + u64::from(offset);
    let read = |buf: &mut [u8]| {
        mem.ram.read(address, buf).map_err(|_| Fault::BadDmaBuffer {
            address: cmd.dma_buffer_address,
            size: cmd.dma_buffer_size,
        })
    };
    read(&mut packet[..header_size as usize])?;
    let (header, _) =
        WddmGpuPacketHeader::read_from_prefix(&packet[..]).map_err(|_| Fault::BadPacketHeader {
            size: 0,
            reason: "truncated",
        })?;
    let size = header.size;
    let reason = if size < header_size {
        Some("smaller than the header")
    } else if size % WDDM_GPU_PACKET_ALIGN != 0 {
        Some("not a multiple of 8")
    } else if size > WDDM_GPU_MAX_PACKET_SIZE {
        Some("larger than the device maximum")
    } else if size > available {
        Some("runs past end_offset")
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(Fault::BadPacketHeader { size, reason });
    }
    // One read of the whole packet: what executes is this copy.
    read(&mut packet[..size as usize])?;
    Ok(size)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
