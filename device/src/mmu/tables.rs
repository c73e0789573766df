//! The device's page-table memory: tables and pages in guest RAM (never inside the VRAM BAR
//! window: VRAM is mapped by its segment) or in a memory segment of the layout. Every entry read
//! is bounds-checked against the memory table or the segment; no entry is cached here (only the
//! RAM extent and the segment the last page checks found, while the snapshot of the memory
//! table they came from is borrowed). When a `--record` capture rides on guest RAM, every entry
//! read is kept in it, VRAM's too.

use std::cell::Cell;
use std::ops::Range;

use vm_memory::{Bytes, GuestMemoryBackend};
use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_SIZE;

use super::fault::FaultKind;
use super::walk::{TableAddress, TableMemory, Target, LINE_ENTRIES};
use crate::layout::{Resolved, SegmentLayout};
use crate::memory::capture::{ReadKind, Store};
use crate::memory::guest_ram::{GuestRam, RamError};
use crate::memory::vram::Vram;

/// Tables and pages as the device sees them.
pub struct DeviceTables<'a, M> {
    /// Guest RAM (VRAM window excluded).
    pub ram: &'a GuestRam<'a, M>,
    /// VRAM.
    pub vram: &'a Vram,
    /// The segment layout.
    pub layout: &'a SegmentLayout,
    /// The RAM extent ([`GuestRam::ram_extent`]) of the last system page checked: the pages of
    /// a line, which mostly share it, are checked without a memory-table lookup each. It
    /// stays right while this lives: `ram` is a snapshot of the memory table.
    known_ram: Cell<Range<u64>>,
    /// The memory segment the last checked page lay in, and its size: pages of a line mostly
    /// lie in one, and need no resolve of their own.
    known_segment: Cell<Option<(u32, u64)>>,
}

impl<'a, M> DeviceTables<'a, M> {
    /// The tables and pages of `ram`, `vram` and `layout`.
    pub fn new(ram: &'a GuestRam<'a, M>, vram: &'a Vram, layout: &'a SegmentLayout) -> Self {
        Self {
            ram,
            vram,
            layout,
            known_ram: Cell::new(0..0),
            known_segment: Cell::new(None),
        }
    }
}

impl<M> DeviceTables<'_, M> {
    /// The VRAM-space range of `length` bytes at `offset` of memory segment `segment`.
    fn segment_range(&self, segment: u32, offset: u64, length: u64) -> Result<u64, FaultKind> {
        let base = self
            .layout
            .segment(segment)
            .map(|segment| segment.base_address)
            .ok_or(FaultKind::BadSegment)?;
        let address = base.checked_add(offset).ok_or(FaultKind::BadSegment)?;
        match self.layout.resolve(segment, address, length) {
            Ok(Resolved::Vram(range)) => Ok(range.start()),
            Ok(Resolved::Aperture(_)) | Err(_) => Err(FaultKind::BadSegment),
        }
    }
}

/// Bytes of the most entries read at once (a line of a leaf table).
const LINE_BYTES: usize = 64;
const _: () = assert!(LINE_BYTES == LINE_ENTRIES * WDDM_GPU_PTE_SIZE as usize);

fn ram_fault(error: RamError) -> FaultKind {
    match error {
        RamError::InVram { .. } => FaultKind::InVramWindow,
        RamError::Overflow { .. } | RamError::NotRam { .. } => FaultKind::OutsideRam,
    }
}

impl<M: GuestMemoryBackend> TableMemory for DeviceTables<'_, M> {
    fn read_entry(&self, table: TableAddress, index: u64) -> Result<u64, FaultKind> {
        if table.segment == 0 {
            // The walker keeps `index` below 2^12, so the product cannot overflow.
            let address = table
                .address
                .checked_add(index * u64::from(WDDM_GPU_PTE_SIZE))
                .ok_or(FaultKind::OutsideRam)?;
            return self.ram.read_u64(address).map_err(ram_fault);
        }
        let mut entry = [0];
        self.read_entries(table, index, &mut entry)?;
        Ok(entry[0])
    }

    fn read_entries(
        &self,
        table: TableAddress,
        first: u64,
        out: &mut [u64],
    ) -> Result<(), FaultKind> {
        let mut bytes = [0u8; LINE_BYTES];
        let size = usize::try_from(WDDM_GPU_PTE_SIZE).unwrap_or(8);
        let bytes = bytes
            .get_mut(..out.len().saturating_mul(size))
            .ok_or(FaultKind::BadSegment)?;
        // The walker keeps indexes below 2^12, so the product cannot overflow.
        let offset = first * u64::from(WDDM_GPU_PTE_SIZE);
        if table.segment == 0 {
            let address = table
                .address
                .checked_add(offset)
                .ok_or(FaultKind::OutsideRam)?;
            self.ram.read(address, bytes).map_err(ram_fault)?;
        } else {
            let start = table
                .address
                .checked_add(offset)
                .ok_or(FaultKind::BadSegment)?;
            let vram_offset = self.segment_range(table.segment, start, bytes.len() as u64)?;
            self.vram
                .slice(vram_offset, bytes.len())
                .ok_or(FaultKind::BadSegment)?
                .read_slice(bytes, 0)
                .map_err(|_| FaultKind::BadSegment)?;
            // Guest RAM's reads keep themselves; VRAM's are handed over here.
            if let Some(capture) = self.ram.capture() {
                capture.bytes(Store::Vram, ReadKind::Metadata, vram_offset, bytes);
            }
        }
        for (entry, chunk) in out.iter_mut().zip(bytes.chunks_exact(size)) {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(chunk);
            *entry = u64::from_le_bytes(raw);
        }
        Ok(())
    }

    fn check_page(&self, target: Target, size: u64) -> Result<(), FaultKind> {
        match target {
            Target::System(address) => {
                let mut known = self.known_ram.take();
                let checked = self.ram.check_within(&mut known, address, size);
                self.known_ram.set(known);
                checked.map(drop).map_err(ram_fault)
            }
            Target::Segment { segment, offset } => {
                let inside = |(known, known_size)| {
                    known == segment
                        && offset
                            .checked_add(size)
                            .is_some_and(|end| end <= known_size)
                };
                if self.known_segment.get().is_some_and(inside) {
                    return Ok(());
                }
                self.segment_range(segment, offset, size)?;
                // A memory segment: the resolve above found the bytes in it.
                let segment_size = self.layout.segment(segment).map_or(0, |s| s.size);
                self.known_segment.set(Some((segment, segment_size)));
                Ok(())
            }
            Target::Zero => Ok(()),
        }
    }
}
