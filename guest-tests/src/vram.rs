//! The VRAM BAR as the CPU sees it: located through the capset's BAR locator, mapped from sysfs,
//! with pattern helpers for checking what the device moved.
//!
//! Two modes (see `docs/vram-bar.md`): mode 1 puts the VRAM in BAR2 of an ivshmem function of the
//! GPU's slot; mode 2 in the shared-memory BAR of the GPU's own function 0, at the offset its
//! `VIRTIO_PCI_CAP_SHARED_MEMORY_CFG` capability (shmid 0) names.

use thiserror::Error;
use wddm_gpu_abi::caps::{WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM};
use wddm_gpu_abi::pci::{
    VIRTIO_PCI_VENDOR_ID, WDDM_GPU_IVSHMEM_PCI_DEVICE_ID, WDDM_GPU_VRAM_SHMID,
};

use crate::caps::Segment;
use crate::mmio::{MmioError, MmioWindow};
use crate::pattern;
use crate::pci::config::{self, ConfigError, SharedMemoryCap};
use crate::pci::sysfs::{PciError, PciFunction, COMMAND_MEMORY};

/// Chunk size for pattern work, so no large buffer is needed.
const CHUNK: usize = 64 << 10;

/// Locating or mapping the BAR failed.
#[derive(Debug, Error)]
pub enum VramError {
    /// The locator names a mode this driver does not know.
    #[error("VRAM BAR mode {0} not supported by this driver (1 = ivshmem, 2 = shmem)")]
    Mode(u32),
    /// The function the locator names is not an ivshmem device.
    #[error("{bdf} is {ids}, not ivshmem-plain 1af4:1110")]
    NotIvshmem { bdf: String, ids: String },
    /// Mode 2 names another function than the GPU's own.
    #[error(
        "mode 2 (shmem) locator names PCI function {0}; the shared-memory BAR is on the GPU's \
         own function 0"
    )]
    ShmemFunction(u32),
    /// The GPU function's config space cannot be parsed.
    #[error("config space of {bdf}: {source}")]
    Config { bdf: String, source: ConfigError },
    /// The shared memory region does not match the locator.
    #[error("{bdf} shared memory region {WDDM_GPU_VRAM_SHMID}: {source}")]
    Region { bdf: String, source: RegionError },
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

/// Why the shared memory region capability does not describe the VRAM the locator names.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RegionError {
    /// No capability for the region.
    #[error("no VIRTIO_PCI_CAP_SHARED_MEMORY_CFG capability with this shmid")]
    Missing,
    /// The capability names another BAR than the locator.
    #[error("the capability names BAR{cap_bar}, the locator BAR{locator_bar}")]
    OtherBar { cap_bar: u8, locator_bar: u32 },
    /// The region is not the VRAM's size.
    #[error("length {length:#x} differs from the locator's VRAM size {size:#x}")]
    Length { length: u64, size: u64 },
    /// The region does not fit its BAR.
    #[error("[{offset:#x}, +{length:#x}) does not fit BAR{bar} of {bar_size:#x} bytes")]
    OutsideBar {
        offset: u64,
        length: u64,
        bar: u32,
        bar_size: u64,
    },
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
    /// Guest-physical address of VRAM byte 0 where sysfs puts the BAR: the BAR address, plus the
    /// shared memory region's offset in it in mode 2 (the address the locator must name).
    pub bar_address: u64,
    /// Offset of VRAM byte 0 in its BAR (mode 2: the shared memory region's offset; else 0).
    pub region_offset: u64,
    /// Segment size.
    pub size: u64,
}

/// Where the VRAM is in PCI terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VramLocation {
    /// The function carrying the BAR.
    pub function: PciFunction,
    /// The BAR.
    pub bar_index: u32,
    /// Offset of VRAM byte 0 in the BAR: the shared memory region's offset (mode 2), else 0.
    pub region_offset: u64,
}

impl VramLocation {
    /// Guest-physical address of VRAM byte 0 at the BAR address sysfs shows.
    pub fn sysfs_address(&self) -> Result<u64, PciError> {
        Ok(self
            .function
            .bar_address(self.bar_index)?
            .wrapping_add(self.region_offset))
    }
}

impl std::fmt::Display for VramLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} BAR{}", self.function.bdf(), self.bar_index)?;
        if self.region_offset != 0 {
            write!(f, " + region offset {:#x}", self.region_offset)?;
        }
        Ok(())
    }
}

/// Finds the VRAM the locator names: mode 1, BAR `bar_index` of the ivshmem function
/// `pci_function` of the GPU's slot; mode 2, BAR `bar_index` of the GPU's own function 0, at the
/// offset of its shared memory region 0, which must be in that BAR, fit it and have the VRAM's
/// size.
pub fn locate(gpu: &PciFunction, bar: &WddmGpuVramBar) -> Result<VramLocation, VramError> {
    match bar.mode {
        WDDM_GPU_BAR_MODE_IVSHMEM => {
            let function = gpu.sibling(bar.pci_function);
            let ids = function.ids()?;
            if ids != (VIRTIO_PCI_VENDOR_ID, WDDM_GPU_IVSHMEM_PCI_DEVICE_ID) {
                return Err(VramError::NotIvshmem {
                    bdf: function.bdf().to_string(),
                    ids: format!("{:04x}:{:04x}", ids.0, ids.1),
                });
            }
            Ok(VramLocation {
                function,
                bar_index: bar.bar_index,
                region_offset: 0,
            })
        }
        WDDM_GPU_BAR_MODE_SHMEM => {
            if bar.pci_function != 0 {
                return Err(VramError::ShmemFunction(bar.pci_function));
            }
            let function = gpu.sibling(0);
            let bdf = function.bdf().to_string();
            let caps = config::shared_memory_caps(&function.config()?).map_err(|source| {
                VramError::Config {
                    bdf: bdf.clone(),
                    source,
                }
            })?;
            let bar_size = function.bar_size(bar.bar_index)?;
            let region_offset = shm_region(&caps, bar, bar_size)
                .map_err(|source| VramError::Region { bdf, source })?;
            Ok(VramLocation {
                function,
                bar_index: bar.bar_index,
                region_offset,
            })
        }
        other => Err(VramError::Mode(other)),
    }
}

/// The offset of the VRAM in its BAR in mode 2: the first shared memory capability with shmid
/// [`WDDM_GPU_VRAM_SHMID`] must name the locator's BAR, have the VRAM's size and fit the BAR's
/// `bar_size` bytes.
pub fn shm_region(
    caps: &[SharedMemoryCap],
    bar: &WddmGpuVramBar,
    bar_size: u64,
) -> Result<u64, RegionError> {
    let cap = caps
        .iter()
        .find(|c| c.id == WDDM_GPU_VRAM_SHMID)
        .ok_or(RegionError::Missing)?;
    if u32::from(cap.bar) != bar.bar_index {
        return Err(RegionError::OtherBar {
            cap_bar: cap.bar,
            locator_bar: bar.bar_index,
        });
    }
    if cap.length != bar.size {
        return Err(RegionError::Length {
            length: cap.length,
            size: bar.size,
        });
    }
    if cap
        .offset
        .checked_add(cap.length)
        .is_none_or(|end| end > bar_size)
    {
        return Err(RegionError::OutsideBar {
            offset: cap.offset,
            length: cap.length,
            bar: bar.bar_index,
            bar_size,
        });
    }
    Ok(cap.offset)
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
        let location = locate(gpu, bar)?;
        location.function.update_command(COMMAND_MEMORY, 0)?;
        let bar_address = location.sysfs_address()?;
        let start = location
            .region_offset
            .checked_add(offset)
            .ok_or(MmioError::OutOfBounds {
                offset,
                len: size,
                bar_len: 0,
            })?;
        let window = location
            .function
            .map_bar(location.bar_index)?
            .sub(start, size)?;
        Ok(Self {
            window,
            bar_address,
            region_offset: location.region_offset,
            size,
        })
    }

    /// Maps `segment`'s window of the VRAM in a BAR at guest-physical `bar_address`, VRAM byte 0
    /// at `region_offset` in it (0 in mode 1), through `/dev/mem`: for a BAR reprogrammed through
    /// config space, which the kernel's `resourceN` file does not follow.
    pub fn map_physical(
        bar_address: u64,
        region_offset: u64,
        segment: &Segment,
    ) -> Result<Self, VramError> {
        let offset = segment
            .bar_offset()
            .ok_or(VramError::NotInBar(segment.desc.id))?;
        let vram_address = bar_address.wrapping_add(region_offset);
        let window =
            MmioWindow::map_physical(vram_address.wrapping_add(offset), segment.desc.size)?;
        Ok(Self {
            window,
            bar_address: vram_address,
            region_offset,
            size: segment.desc.size,
        })
    }

    /// Where VRAM byte 0 is, for messages: `sysfs BAR<i> <address>`, with the region offset in
    /// mode 2.
    pub fn describe(&self, bar_index: u32) -> String {
        if self.region_offset == 0 {
            format!("sysfs BAR{bar_index} {:#x}", self.bar_address)
        } else {
            format!(
                "sysfs BAR{bar_index} {:#x} + region offset {:#x}",
                self.bar_address.wrapping_sub(self.region_offset),
                self.region_offset
            )
        }
    }

    /// True if `[offset, offset + len)` lies inside the segment.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.size)
    }

    /// Copies `data` into the segment at `offset` through the BAR.
    pub fn write(&self, offset: u64, data: &[u8]) {
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            self.window
                .write_bytes(usize::try_from(offset).unwrap() + i * CHUNK, chunk);
        }
    }

    /// Reads `out.len()` bytes of the segment from `offset` through the BAR.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(CHUNK).enumerate() {
            self.window
                .read_bytes(usize::try_from(offset).unwrap() + i * CHUNK, chunk);
        }
    }

    /// Writes pattern `tag` over `[offset, offset + len)` (pattern position 0 at `offset`).
    pub fn fill_pattern(&self, offset: u64, len: u64, tag: u64) {
        let mut chunk = vec![0u8; CHUNK];
        let mut done = 0;
        while done < len {
            let n = usize::try_from((len - done).min(CHUNK as u64)).unwrap();
            pattern::fill(tag, done, &mut chunk[..n]);
            self.window
                .write_bytes(usize::try_from(offset + done).unwrap(), &chunk[..n]);
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
            let n = usize::try_from((len - done).min(CHUNK as u64)).unwrap();
            self.window
                .read_bytes(usize::try_from(offset + done).unwrap(), &mut chunk[..n]);
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

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::caps::WDDM_GPU_BAR_STATE_NOT_MAPPED;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn shmem_locator() -> WddmGpuVramBar {
        WddmGpuVramBar {
            mode: WDDM_GPU_BAR_MODE_SHMEM,
            state: WDDM_GPU_BAR_STATE_NOT_MAPPED,
            generation: 1,
            pci_function: 0,
            bar_index: 4,
            reserved: 0,
            guest_physical_address: 0,
            size: 256 * MIB,
        }
    }

    fn cap(id: u8, bar: u8, offset: u64, length: u64) -> SharedMemoryCap {
        SharedMemoryCap {
            id,
            bar,
            offset,
            length,
        }
    }

    #[test]
    fn finds_the_vram_region() {
        let bar = shmem_locator();
        assert_eq!(
            shm_region(&[cap(0, 4, 0, 256 * MIB)], &bar, 256 * MIB),
            Ok(0)
        );
        // Another region first; shmid 0 at an offset of a larger BAR.
        let caps = [cap(1, 4, 0, 256 * MIB), cap(0, 4, 256 * MIB, 256 * MIB)];
        assert_eq!(shm_region(&caps, &bar, 512 * MIB), Ok(256 * MIB));
    }

    #[test]
    fn refuses_regions_that_do_not_match_the_locator() {
        let bar = shmem_locator();
        assert_eq!(shm_region(&[], &bar, 256 * MIB), Err(RegionError::Missing));
        assert_eq!(
            shm_region(&[cap(1, 4, 0, 256 * MIB)], &bar, 256 * MIB),
            Err(RegionError::Missing)
        );
        assert_eq!(
            shm_region(&[cap(0, 2, 0, 256 * MIB)], &bar, 256 * MIB),
            Err(RegionError::OtherBar {
                cap_bar: 2,
                locator_bar: 4
            })
        );
        assert_eq!(
            shm_region(&[cap(0, 4, 0, 128 * MIB)], &bar, 256 * MIB),
            Err(RegionError::Length {
                length: 128 * MIB,
                size: 256 * MIB
            })
        );
        for (offset, bar_size) in [(4096, 256 * MIB), (0, 128 * MIB), (u64::MAX - 5, u64::MAX)] {
            assert!(
                matches!(
                    shm_region(&[cap(0, 4, offset, 256 * MIB)], &bar, bar_size),
                    Err(RegionError::OutsideBar { .. })
                ),
                "offset {offset:#x} in a {bar_size:#x}-byte BAR"
            );
        }
    }
}
