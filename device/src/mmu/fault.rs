//! Why a translation failed, as the MMU reports it: one kind per attack or mistake, the level
//! whose entry (or root) failed and the entry itself, ready for the `DmaPageFaulted` record.

use wddm_gpu_abi::context::WDDM_GPU_PAGE_FAULT_FLAG_WRITE;
use wddm_gpu_abi::gpuva::{
    WddmGpuMmuFault, WDDM_GPU_MMU_ACCESS_EXECUTE, WDDM_GPU_MMU_ACCESS_READ,
    WDDM_GPU_MMU_ACCESS_WRITE, WDDM_GPU_MMU_FAULT_ADDRESS_RANGE, WDDM_GPU_MMU_FAULT_BAD_FLAGS,
    WDDM_GPU_MMU_FAULT_BAD_SEGMENT, WDDM_GPU_MMU_FAULT_IN_VRAM_WINDOW,
    WDDM_GPU_MMU_FAULT_MISALIGNED, WDDM_GPU_MMU_FAULT_NOT_PRESENT, WDDM_GPU_MMU_FAULT_NO_EXECUTE,
    WDDM_GPU_MMU_FAULT_NO_ROOT, WDDM_GPU_MMU_FAULT_OUTSIDE_RAM, WDDM_GPU_MMU_FAULT_READ_ONLY,
    WDDM_GPU_MMU_FAULT_RESERVED_BITS, WDDM_GPU_MMU_FAULT_ROOT_OVERRUN,
};

/// What the access wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading data.
    Read,
    /// Writing data.
    Write,
    /// Fetching a DMA buffer.
    Execute,
}

impl Access {
    /// `WDDM_GPU_MMU_ACCESS_*`.
    pub fn wire(self) -> u32 {
        match self {
            Access::Read => WDDM_GPU_MMU_ACCESS_READ,
            Access::Write => WDDM_GPU_MMU_ACCESS_WRITE,
            Access::Execute => WDDM_GPU_MMU_ACCESS_EXECUTE,
        }
    }
}

/// The reason, one `WDDM_GPU_MMU_FAULT_*` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultKind {
    /// An entry on the walk is not valid.
    #[error("entry not valid")]
    NotPresent,
    /// A write through a read-only entry.
    #[error("write to a read-only page")]
    ReadOnly,
    /// A DMA-buffer fetch through a no-execute entry.
    #[error("fetch from a no-execute page")]
    NoExecute,
    /// The root index is at or past the root's `NumEntries`.
    #[error("root index past NumEntries")]
    RootOverrun,
    /// No root page table is bound.
    #[error("no root page table")]
    NoRoot,
    /// The address is past the geometry's address bits.
    #[error("address past VirtualAddressBitCount")]
    AddressRange,
    /// An entry sets reserved bits.
    #[error("entry sets reserved bits")]
    ReservedBits,
    /// A table or page in system memory is not guest RAM.
    #[error("not guest RAM")]
    OutsideRam,
    /// A table or page in system memory lies in the VRAM BAR window.
    #[error("inside the VRAM BAR window")]
    InVramWindow,
    /// A segment that does not exist, is an aperture, or does not hold the table or page.
    #[error("not in a memory segment")]
    BadSegment,
    /// A large or 64 KiB page that is not aligned to its size.
    #[error("page address not aligned to its size")]
    Misaligned,
    /// A flag where the format forbids it.
    #[error("flag not allowed at this level")]
    BadFlags,
}

impl FaultKind {
    /// `WDDM_GPU_MMU_FAULT_*`.
    pub fn wire(self) -> u32 {
        match self {
            FaultKind::NotPresent => WDDM_GPU_MMU_FAULT_NOT_PRESENT,
            FaultKind::ReadOnly => WDDM_GPU_MMU_FAULT_READ_ONLY,
            FaultKind::NoExecute => WDDM_GPU_MMU_FAULT_NO_EXECUTE,
            FaultKind::RootOverrun => WDDM_GPU_MMU_FAULT_ROOT_OVERRUN,
            FaultKind::NoRoot => WDDM_GPU_MMU_FAULT_NO_ROOT,
            FaultKind::AddressRange => WDDM_GPU_MMU_FAULT_ADDRESS_RANGE,
            FaultKind::ReservedBits => WDDM_GPU_MMU_FAULT_RESERVED_BITS,
            FaultKind::OutsideRam => WDDM_GPU_MMU_FAULT_OUTSIDE_RAM,
            FaultKind::InVramWindow => WDDM_GPU_MMU_FAULT_IN_VRAM_WINDOW,
            FaultKind::BadSegment => WDDM_GPU_MMU_FAULT_BAD_SEGMENT,
            FaultKind::Misaligned => WDDM_GPU_MMU_FAULT_MISALIGNED,
            FaultKind::BadFlags => WDDM_GPU_MMU_FAULT_BAD_FLAGS,
        }
    }
}

/// A failed translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at GPU VA {address:#x} (level {level}, entry {entry:#x}, {access:?})")]
pub struct MmuFault {
    /// Why.
    pub kind: FaultKind,
    /// The virtual address that faulted.
    pub address: u64,
    /// The level whose entry (or root) failed; 0 for the leaf.
    pub level: u32,
    /// What the access wanted.
    pub access: Access,
    /// The entry as read (0 when no entry was read).
    pub entry: u64,
}

impl MmuFault {
    /// The `DXGK_PAGE_FAULT_FLAGS` the access itself sets: `DXGK_PAGE_FAULT_WRITE` for a write.
    pub fn access_flags(&self) -> u32 {
        if self.access == Access::Write {
            WDDM_GPU_PAGE_FAULT_FLAG_WRITE
        } else {
            0
        }
    }

    /// The record a driver reads.
    pub fn wire(&self) -> WddmGpuMmuFault {
        WddmGpuMmuFault {
            virtual_address: self.address,
            kind: self.kind.wire(),
            page_table_level: self.level,
            access: self.access.wire(),
            reserved: 0,
            entry: self.entry,
        }
    }
}
