//! The VRAM BAR as the CPU sees it: located through the capset's BAR locator, mapped from sysfs,
//! with pattern helpers for checking what the device moved.

use thiserror::Error;
use wddm_gpu_abi::caps::{WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM};

use crate::caps::Segment;
use crate::driver::{IVSHMEM_DEVICE, VIRTIO_VENDOR};
use crate::mmio::{MmioError, MmioWindow};
use crate::pattern;
use crate::pci::sysfs::{PciError, PciFunction, COMMAND_MEMORY};

/// Chunk size for pattern work, so no large buffer is needed.
const CHUNK: usize = 64 << 10;

/// Locating or mapping the BAR failed.
#[derive(Debug, Error)]
pub enum VramError {
    /// The locator names a mode this driver cannot map.
    #[error("VRAM BAR mode {0} not supported by this driver (only ivshmem)")]
    Mode(u32),
    /// The function the locator names is not an ivshmem device.
    #[error("{bdf} is {ids}, not ivshmem-plain 1af4:1110")]
    NotIvshmem { bdf: String, ids: String },
    /// sysfs access failed.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The segment window does not fit the mapped BAR.
    #[error(transparent)]
    Mmio(#[from] MmioError),
    /// The segment has no BAR window.
    #[error("segment {0} is not in the VRAM BAR")]
    NotInBar(u32),
}

/// The first byte where VRAM differs from what was expected.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("segment offset {offset:#x}: read {got:#04x}, expected {want:#04x}")]
pub struct Mismatch {
    /// Segment offset.
    pub offset: u64,
    /// Byte read.
    pub got: u8,
    /// Byte expected.
    pub want: u8,
}

/// The BAR-mapped window of one CPU-visible segment (or of any BAR range).
#[derive(Clone, Copy, Debug)]
pub struct Vram {
    window: MmioWindow,
    /// BAR address from sysfs.
    pub bar_address: u64,
    /// Segment size.
    pub size: u64,
}

/// The PCI function carrying the VRAM BAR, checked to be ivshmem.
pub fn bar_function(gpu: &PciFunction, bar: &WddmGpuVramBar) -> Result<PciFunction, VramError> {
    if bar.mode != WDDM_GPU_BAR_MODE_IVSHMEM {
        return Err(VramError::Mode(bar.mode));
    }
    let function = gpu.sibling(bar.pci_function);
    let ids = function.ids()?;
    if ids != (VIRTIO_VENDOR, IVSHMEM_DEVICE) {
        return Err(VramError::NotIvshmem {
            bdf: function.bdf().to_string(),
            ids: format!("{:04x}:{:04x}", ids.0, ids.1),
        });
    }
    Ok(function)
}

impl Vram {
    /// Maps `segment`'s window of the BAR named by the locator.
    pub fn open(
        gpu: &PciFunction,
        bar: &WddmGpuVramBar,
        segment: &Segment,
    ) -> Result<Self, VramError> {
        let offset = segment
            .bar_offset()
            .ok_or(VramError::NotInBar(segment.desc.id))?;
        Self::open_window(gpu, bar, offset, segment.desc.size)
    }

    /// Maps `[offset, offset + size)` of the BAR named by the locator, whatever segment (or
    /// none) is there; offsets of the result are relative to `offset`.
    pub fn open_window(
        gpu: &PciFunction,
        bar: &WddmGpuVramBar,
        offset: u64,
        size: u64,
    ) -> Result<Self, VramError> {
        let function = bar_function(gpu, bar)?;
        function.update_command(COMMAND_MEMORY, 0)?;
        let bar_address = function.bar_address(bar.bar_index)?;
        let window = function.map_bar(bar.bar_index)?.sub(offset, size)?;
        Ok(Self {
            window,
            bar_address,
            size,
        })
    }

    /// Maps `segment`'s window of a BAR at guest-physical `bar_address` through `/dev/mem`: for
    /// a BAR reprogrammed through config space, which the kernel's `resourceN` file does not
    /// follow.
    pub fn map_physical(bar_address: u64, segment: &Segment) -> Result<Self, VramError> {
        let offset = segment
            .bar_offset()
            .ok_or(VramError::NotInBar(segment.desc.id))?;
        let window = MmioWindow::map_physical(bar_address.wrapping_add(offset), segment.desc.size)?;
        Ok(Self {
            window,
            bar_address,
            size: segment.desc.size,
        })
    }

    /// True if `[offset, offset + len)` lies inside the segment.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.size)
    }

    /// Copies `data` into the segment at `offset` through the BAR.
    pub fn write(&self, offset: u64, data: &[u8]) {
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            self.window.write_bytes(offset as usize + i * CHUNK, chunk);
        }
    }

    /// Reads `out.len()` bytes of the segment from `offset` through the BAR.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(CHUNK).enumerate() {
            self.window.read_bytes(offset as usize + i * CHUNK, chunk);
        }
    }

    /// Writes pattern `tag` over `[offset, offset + len)` (pattern position 0 at `offset`).
    pub fn fill_pattern(&self, offset: u64, len: u64, tag: u64) {
        let mut chunk = vec![0u8; CHUNK];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            pattern::fill(tag, done, &mut chunk[..n]);
            self.window
                .write_bytes((offset + done) as usize, &chunk[..n]);
            done += n as u64;
        }
    }

    /// Checks `[offset, offset + len)` holds pattern `tag` from position `start`.
    pub fn check_pattern(
        &self,
        offset: u64,
        len: u64,
        tag: u64,
        start: u64,
    ) -> Result<(), Mismatch> {
        let mut chunk = vec![0u8; CHUNK];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            self.window
                .read_bytes((offset + done) as usize, &mut chunk[..n]);
            if let Some(i) = pattern::first_mismatch(tag, start + done, &chunk[..n]) {
                let pos = start + done + i as u64;
                return Err(Mismatch {
                    offset: offset + done + i as u64,
                    got: chunk[i],
                    want: pattern::byte_at(tag, pos),
                });
            }
            done += n as u64;
        }
        Ok(())
    }
}
