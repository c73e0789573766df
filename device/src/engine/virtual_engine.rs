//! The virtual node's copy engine: runs a DMA buffer at a GPU virtual address of one context,
//! everything through the MMU. The buffer is fetched with execute access (no-execute pages
//! fault), copies and fills move runs the MMU hands out (contiguous pages as one run), and a
//! SIGNAL writes a monitored fence. A page fault stops the submission at the faulting packet.

use std::sync::Mutex;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuVirtualCopy, WddmGpuVirtualFill, WddmGpuVirtualSignal,
    WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_VOP_COPY, WDDM_GPU_VOP_FILL, WDDM_GPU_VOP_SIGNAL,
};
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::packet::{WddmGpuPacketHeader, WDDM_GPU_MAX_PACKET_SIZE};
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_abi::submit::WDDM_GPU_MAX_DMA_BUFFER_SIZE;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::FromBytes;

use super::access::{copy, read_location, write_location, Location, Repeated};
use super::place::{ram, segment_offset};
use super::{check_packet_size, DeviceMemory, Fault, Interruption, Stop, CHUNK};
use crate::mmu::fault::Access;
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
}

/// What the virtual engine tells the rest of the device.
pub trait VirtualHooks {
    /// Asked between chunks and packets: `Some` stops the submission.
    fn interruption(&self) -> Option<Interruption>;

    /// A SIGNAL packet wrote `value` at `address`.
    fn monitored_fence(&mut self, address: u64, value: u64);
}

/// The copy engine of the virtual node. Owns its scratch buffers, so the hot path does not
/// allocate.
#[derive(Default)]
pub struct VirtualEngine {
    bounce: Vec<u8>,
    repeated: Repeated,
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
        let tables = DeviceTables {
            ram: &self.mem.ram,
            vram: self.mem.vram,
            layout: self.mem.layout,
        };
        lock(self.space)
            .translate(self.geometry, &tables, address, length, access)
            .map_err(Fault::Page)
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
                Some(location) => read_location(location.sub(0, len as u64), piece, self.mem)?,
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
        };
        if let Err(fault) = check_command(cmd) {
            completion.stop = Some((cmd.start_offset, fault.into()));
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
                .and_then(|size| {
                    let bytes = self.run_packet(&packet[..size as usize], memory, hooks)?;
                    Ok((size, bytes))
                });
            match result {
                Ok((size, bytes)) => {
                    completion.packets_completed += 1;
                    completion.bytes_transferred =
                        completion.bytes_transferred.saturating_add(bytes);
                    offset += size;
                }
                Err(stop) => {
                    completion.stop = Some((offset, stop));
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

    /// Runs one fetched packet; returns the bytes it moved.
    fn run_packet<M: GuestMemoryBackend>(
        &mut self,
        packet: &[u8],
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stop> {
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
    pub(super) fn copy<M: GuestMemoryBackend>(
        &mut self,
        length: u64,
        source: u64,
        destination: u64,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stop> {
        for end in [source, destination] {
            end.checked_add(length)
                .ok_or(Fault::LengthOverflow(length))?;
        }
        let mut done = 0u64;
        // How far ahead the source is translated: twice what the last step moved (at least two
        // pages), so a contiguous source copied into scattered pages is not translated to the
        // end of its chunk again for every page, and runs that are long on both sides grow back
        // to the chunk in a few steps. Every byte is translated as before, when it comes first.
        let mut reach = u64::MAX;
        while done < length {
            interruption_point(done, hooks)?;
            let step = (length - done).min(CHUNK - done % CHUNK);
            let from = memory.translate(source + done, step.min(reach), Access::Read)?;
            let to = memory.translate(destination + done, from.len, Access::Write)?;
            let len = from.len.min(to.len);
            reach = len.max(WDDM_GPU_PAGE_SIZE).saturating_mul(2);
            let (from, to) = (Run { len, ..from }, Run { len, ..to });
            match (memory.location(from)?, memory.location(to)?) {
                (Some(from), Some(to)) => copy(from, to, len, memory.mem, &mut self.bounce)?,
                (None, Some(to)) => self.repeated.write(to, &[0], memory.mem)?,
                (_, None) => {}
            }
            done += len;
        }
        Ok(length)
    }

    /// Fills `length` bytes at VA `destination` with `pattern`; returns the bytes.
    pub(super) fn fill<M: GuestMemoryBackend>(
        &mut self,
        pattern: u32,
        length: u64,
        destination: u64,
        memory: &VirtualMemory<'_, '_, M>,
        hooks: &mut impl VirtualHooks,
    ) -> Result<u64, Stop> {
        destination
            .checked_add(length)
            .ok_or(Fault::LengthOverflow(length))?;
        let pattern = pattern.to_le_bytes();
        let mut done = 0u64;
        while done < length {
            interruption_point(done, hooks)?;
            let step = (length - done).min(CHUNK - done % CHUNK);
            let run = memory.translate(destination + done, step, Access::Write)?;
            if let Some(to) = memory.location(run)? {
                // The pattern stays in phase with the fill's start: every run starts at a
                // multiple of 4 from it or the pattern is rotated to match.
                let phase = usize::try_from(done % 4).unwrap_or(0);
                let mut rotated = pattern;
                rotated.rotate_left(phase);
                self.repeated.write(to, &rotated, memory.mem)?;
            }
            done += run.len;
        }
        Ok(length)
    }
}

/// Asks for an interruption at each chunk boundary of a long copy or fill.
fn interruption_point(done: u64, hooks: &impl VirtualHooks) -> Result<(), Stop> {
    if !done.is_multiple_of(CHUNK) {
        return Ok(());
    }
    hooks
        .interruption()
        .map_or(Ok(()), |interruption| Err(interruption.into()))
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
    cmd.dma_buffer_address
        .checked_add(u64::from(cmd.dma_buffer_size))
        .ok_or(Fault::LengthOverflow(cmd.dma_buffer_address))?;
    Ok(())
}
