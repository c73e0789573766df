//! GPU virtual addressing (the WDDM 2.x GpuMmu model): the page-table entry format the device's
//! MMU reads, the geometry a KMD reports in `DXGK_GPUMMUCAPS` and `DXGK_PAGE_TABLE_LEVEL_DESC`,
//! and the reasons a translation faults.
//!
//! ## Page-table entries
//!
//! An entry is 8 bytes, as on most GPUs (and x86-64): a 4 KiB table holds 512 of them, so a
//! table in system memory (at most 4 KiB, `DXGK_PAGE_TABLE_LEVEL_DESC`) covers 9 index bits.
//! The flag bits sit where `DXGK_PTE` puts them, so a KMD converts with a mask and a shift
//! ([`wddm_gpu_pte_from_dxgk`]):
//!
//! | bits | field | `DXGK_PTE` |
//! |---|---|---|
//! | 0 | valid | `Valid` |
//! | 1 | zero: reads return 0, writes are dropped | `Zero` |
//! | 2 | cache coherent | `CacheCoherent` |
//! | 3 | read only | `ReadOnly` |
//! | 4 | no execute: a DMA buffer may not be fetched from it | `NoExecute` |
//! | 5-9 | segment: 0 = guest system memory, else a memory segment id | `Segment` |
//! | 10 | large page (levels above the leaf): the entry maps all its level covers | `LargePage` |
//! | 11 | the leaf table below holds 64 KiB pages (level 1 only) | `PageTablePageSize` = 64KB |
//! | 12-51 | address: a guest-physical address, or an offset in the segment | `PageAddress << 12` |
//! | 52-63 | reserved, zero; an entry with any of them set faults | |
//!
//! The address is kept in place (not shifted), so the walker masks instead of shifting and a
//! hex dump of a table reads as addresses. Reserved bits fault rather than being ignored, so a
//! table holding garbage (a freed page, a stale pointer) is caught at the first walk.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Capability-set id of the GpuMmu geometry ([`WddmGpuMmuCaps`], the whole blob), offered as
/// capset index 1 when the layout has a GpuMmu; next to the segment layout's 63.
pub const WDDM_GPU_MMU_CAPSET_ID: u32 = 62;
/// Blob version of that capset.
pub const WDDM_GPU_MMU_CAPSET_VERSION: u32 = 1;

/// Bytes of one page-table entry.
pub const WDDM_GPU_PTE_SIZE: u32 = 8;
/// Entry bit: the entry is valid.
pub const WDDM_GPU_PTE_VALID: u64 = 1 << 0;
/// Entry bit (with valid): the page reads as zeros and writes to it are dropped.
pub const WDDM_GPU_PTE_ZERO: u64 = 1 << 1;
/// Entry bit: accesses snoop the CPU caches.
pub const WDDM_GPU_PTE_CACHE_COHERENT: u64 = 1 << 2;
/// Entry bit: writes through the entry fault.
pub const WDDM_GPU_PTE_READ_ONLY: u64 = 1 << 3;
/// Entry bit: fetching a DMA buffer through the entry faults.
pub const WDDM_GPU_PTE_NO_EXECUTE: u64 = 1 << 4;
/// First bit of the segment field.
pub const WDDM_GPU_PTE_SEGMENT_SHIFT: u32 = 5;
/// The segment field (0 = guest system memory).
pub const WDDM_GPU_PTE_SEGMENT_MASK: u64 = 0x1f << 5;
/// Entry bit (above the leaf): the entry maps a page of its level's whole coverage.
pub const WDDM_GPU_PTE_LARGE_PAGE: u64 = 1 << 10;
/// Entry bit (level 1 only): the leaf table it points at holds 64 KiB pages.
pub const WDDM_GPU_PTE_PAGE_TABLE_64KB: u64 = 1 << 11;
/// The address field: bits 12 to 51.
pub const WDDM_GPU_PTE_ADDRESS_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Bits that must be zero.
pub const WDDM_GPU_PTE_RESERVED_MASK: u64 = 0xfff0_0000_0000_0000;

/// `DXGK_MIN_PAGE_TABLE_LEVEL_COUNT`.
pub const WDDM_GPU_MIN_PAGE_TABLE_LEVELS: u32 = 2;
/// `DXGK_MAX_PAGE_TABLE_LEVEL_COUNT`: also the length of [`WddmGpuMmuCaps::levels`].
pub const WDDM_GPU_MAX_PAGE_TABLE_LEVELS: u32 = 6;
/// Largest `virtual_address_bit_count` the device accepts: addresses are kept below 2^52 so
/// that an address plus a length never nears 64 bits.
pub const WDDM_GPU_MAX_VIRTUAL_ADDRESS_BITS: u32 = 52;
/// Largest `page_table_index_bit_count` of one level: a 32 KiB table of 4096 entries (a limit of
/// this device). The least is [`WDDM_GPU_64KB_PAGE_INDEX_BITS`] for the leaf and 1 for every
/// other level, the root included: the WDK lets a resizable root start at 0 bits, but this
/// device sizes the root from its index bits.
pub const WDDM_GPU_MAX_PAGE_TABLE_INDEX_BITS: u32 = 12;
/// Largest page table in system memory (`DXGK_PAGE_TABLE_LEVEL_DESC`: at most 4 KB).
pub const WDDM_GPU_MAX_SYSTEM_PAGE_TABLE_SIZE: u64 = 4096;
/// Index bits a 64 KiB page takes from the leaf level (16 pages of 4 KiB).
pub const WDDM_GPU_64KB_PAGE_INDEX_BITS: u32 = 4;

/// `DXGK_GPUMMUCAPS.ReadOnlyMemorySupported`.
pub const WDDM_GPU_MMU_CAP_READ_ONLY: u32 = 1 << 0;
/// `DXGK_GPUMMUCAPS.NoExecuteMemorySupported`.
pub const WDDM_GPU_MMU_CAP_NO_EXECUTE: u32 = 1 << 1;
/// `DXGK_GPUMMUCAPS.ZeroInPteSupported`.
pub const WDDM_GPU_MMU_CAP_ZERO_IN_PTE: u32 = 1 << 2;
/// `DXGK_GPUMMUCAPS.ExplicitPageTableInvalidation`.
pub const WDDM_GPU_MMU_CAP_EXPLICIT_PAGE_TABLE_INVALIDATION: u32 = 1 << 3;
/// `DXGK_GPUMMUCAPS.CacheCoherentMemorySupported`.
pub const WDDM_GPU_MMU_CAP_CACHE_COHERENT: u32 = 1 << 4;
/// `DXGK_GPUMMUCAPS.PageTableUpdateRequireAddressSpaceIdle`.
pub const WDDM_GPU_MMU_CAP_UPDATE_REQUIRES_IDLE: u32 = 1 << 5;
/// `DXGK_GPUMMUCAPS.LargePageSupported`.
pub const WDDM_GPU_MMU_CAP_LARGE_PAGE: u32 = 1 << 6;
/// `DXGK_GPUMMUCAPS.DualPteSupported` (not offered: one leaf table per range).
pub const WDDM_GPU_MMU_CAP_DUAL_PTE: u32 = 1 << 7;
/// `DXGK_GPUMMUCAPS.AllowNonAlignedLargePageAddress` (not offered: large pages are aligned).
pub const WDDM_GPU_MMU_CAP_NON_ALIGNED_LARGE_PAGE: u32 = 1 << 8;
/// `DXGK_GPUMMUCAPS.SysMem64KBPageSupported`.
pub const WDDM_GPU_MMU_CAP_SYSMEM_64KB_PAGE: u32 = 1 << 9;
/// `DXGK_GPUMMUCAPS.InvalidTlbEntriesNotCached`: the device never caches an invalid entry.
pub const WDDM_GPU_MMU_CAP_INVALID_TLB_ENTRIES_NOT_CACHED: u32 = 1 << 10;
/// The `DXGK_GPUMMUCAPS` flags the device honours; a layout may report any subset.
pub const WDDM_GPU_MMU_CAPS_SUPPORTED: u32 = 0x0000_067f;

/// The `DXGK_GPUMMUCAPS` member name of each flag the device honours, as a layout file
/// writes them.
/// cbindgen:ignore
pub const GPUMMU_CAP_NAMES: [(&str, u32); 9] = [
    ("ReadOnlyMemorySupported", WDDM_GPU_MMU_CAP_READ_ONLY),
    ("NoExecuteMemorySupported", WDDM_GPU_MMU_CAP_NO_EXECUTE),
    ("ZeroInPteSupported", WDDM_GPU_MMU_CAP_ZERO_IN_PTE),
    (
        "ExplicitPageTableInvalidation",
        WDDM_GPU_MMU_CAP_EXPLICIT_PAGE_TABLE_INVALIDATION,
    ),
    (
        "CacheCoherentMemorySupported",
        WDDM_GPU_MMU_CAP_CACHE_COHERENT,
    ),
    (
        "PageTableUpdateRequireAddressSpaceIdle",
        WDDM_GPU_MMU_CAP_UPDATE_REQUIRES_IDLE,
    ),
    ("LargePageSupported", WDDM_GPU_MMU_CAP_LARGE_PAGE),
    ("SysMem64KBPageSupported", WDDM_GPU_MMU_CAP_SYSMEM_64KB_PAGE),
    (
        "InvalidTlbEntriesNotCached",
        WDDM_GPU_MMU_CAP_INVALID_TLB_ENTRIES_NOT_CACHED,
    ),
];

/// The `DXGK_PAGETABLEUPDATEMODE` names a layout file writes, by value.
/// cbindgen:ignore
pub const PAGE_TABLE_UPDATE_MODE_NAMES: [(&str, u32); 3] = [
    ("cpu_virtual", WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL),
    ("gpu_virtual", WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL),
    ("gpu_physical", WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL),
];

/// `DXGK_PAGETABLEUPDATE_CPU_VIRTUAL`: the KMD writes entries with the CPU.
pub const WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL: u32 = 0;
/// `DXGK_PAGETABLEUPDATE_GPU_VIRTUAL`: the paging engine writes entries through the paging
/// process's address space.
pub const WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL: u32 = 1;
/// `DXGK_PAGETABLEUPDATE_GPU_PHYSICAL`: the paging engine writes entries at segment addresses.
pub const WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL: u32 = 2;

/// One level of the page-table tree, as `DXGK_PAGE_TABLE_LEVEL_DESC` reports it. Level 0 is
/// the leaf; the root is level `page_table_level_count - 1`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPageTableLevelDesc {
    /// `PageTableIndexBitCount`: the level's tables hold `1 << n` entries (the resizable root of
    /// a 2-level layout holds up to that many). At least 4 on the leaf and 1 elsewhere: this
    /// device reports the root's full index bits, never the 0 a resizable root may start at.
    pub page_table_index_bit_count: u32,
    /// `PageTableSegmentId`: where the level's tables live (0 = system memory).
    pub page_table_segment_id: u32,
    /// `PagingProcessPageTableSegmentId`: the same for the paging process.
    pub paging_process_page_table_segment_id: u32,
    /// Zero.
    pub reserved: u32,
    /// `PageTableSizeInBytes`: a multiple of 4096 holding every entry.
    pub page_table_size_in_bytes: u64,
    /// `PageTableAlignmentInBytes`: 0 (the segment's page size) or a power of two.
    pub page_table_alignment_in_bytes: u64,
}

/// What a KMD needs for `DXGK_GPUMMUCAPS`, `DXGK_PAGE_TABLE_LEVEL_DESC` (one per level) and
/// the GpuMmu bits of `DXGK_VIDMMCAPS` and `DXGK_NODEMETADATA`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuMmuCaps {
    /// `DXGK_GPUMMUCAPS` flag word: `WDDM_GPU_MMU_CAP_*`, a subset of
    /// [`WDDM_GPU_MMU_CAPS_SUPPORTED`].
    pub flags: u32,
    /// `PageTableUpdateMode`: `WDDM_GPU_PAGE_TABLE_UPDATE_*`.
    pub page_table_update_mode: u32,
    /// `VirtualAddressBitCount`: 12 plus every level's index bits.
    pub virtual_address_bit_count: u32,
    /// `PageTableLevelCount`: 2 to 6.
    pub page_table_level_count: u32,
    /// `LeafPageTableSizeFor64KPagesInBytes`: a leaf table of 64 KiB pages (1/16 of the entries),
    /// rounded up to a multiple of 4096.
    pub leaf_page_table_size_for_64k_pages: u32,
    /// Most contexts with GPU virtual addressing the device holds at once.
    pub max_contexts: u32,
    /// Levels, leaf first; entries past `page_table_level_count` are zero.
    pub levels: [WddmGpuPageTableLevelDesc; 6],
}

/// `WddmGpuMmuFault::kind`: an entry on the walk is not valid.
pub const WDDM_GPU_MMU_FAULT_NOT_PRESENT: u32 = 1;
/// `WddmGpuMmuFault::kind`: a write through a read-only entry.
pub const WDDM_GPU_MMU_FAULT_READ_ONLY: u32 = 2;
/// `WddmGpuMmuFault::kind`: a DMA buffer fetched through a no-execute entry.
pub const WDDM_GPU_MMU_FAULT_NO_EXECUTE: u32 = 3;
/// `WddmGpuMmuFault::kind`: the root index is at or past the root's `NumEntries`.
pub const WDDM_GPU_MMU_FAULT_ROOT_OVERRUN: u32 = 4;
/// `WddmGpuMmuFault::kind`: the context has no root page table.
pub const WDDM_GPU_MMU_FAULT_NO_ROOT: u32 = 5;
/// `WddmGpuMmuFault::kind`: the address is at or above `2^VirtualAddressBitCount`.
pub const WDDM_GPU_MMU_FAULT_ADDRESS_RANGE: u32 = 6;
/// `WddmGpuMmuFault::kind`: an entry sets reserved bits.
pub const WDDM_GPU_MMU_FAULT_RESERVED_BITS: u32 = 7;
/// `WddmGpuMmuFault::kind`: a table or page in system memory is not guest RAM.
pub const WDDM_GPU_MMU_FAULT_OUTSIDE_RAM: u32 = 8;
/// `WddmGpuMmuFault::kind`: a table or page in system memory lies in the VRAM BAR window (VRAM
/// is mapped by its segment, never by its guest-physical address).
pub const WDDM_GPU_MMU_FAULT_IN_VRAM_WINDOW: u32 = 9;
/// `WddmGpuMmuFault::kind`: a segment that does not exist, is an aperture, or does not hold the
/// addressed table or page.
pub const WDDM_GPU_MMU_FAULT_BAD_SEGMENT: u32 = 10;
/// `WddmGpuMmuFault::kind`: a large or 64 KiB page whose address is not aligned to its size.
pub const WDDM_GPU_MMU_FAULT_MISALIGNED: u32 = 11;
/// `WddmGpuMmuFault::kind`: a flag where the format forbids it (`LargePage` at the leaf or
/// without `LargePageSupported`, the 64 KiB table bit off level 1).
pub const WDDM_GPU_MMU_FAULT_BAD_FLAGS: u32 = 12;

/// `WddmGpuMmuFault::access`: a read.
pub const WDDM_GPU_MMU_ACCESS_READ: u32 = 0;
/// `WddmGpuMmuFault::access`: a write.
pub const WDDM_GPU_MMU_ACCESS_WRITE: u32 = 1;
/// `WddmGpuMmuFault::access`: a DMA buffer fetch.
pub const WDDM_GPU_MMU_ACCESS_EXECUTE: u32 = 2;

/// Why one translation faulted: what a KMD needs for `DXGKARGCB_NOTIFY_INTERRUPT_DATA`'s
/// `DmaPageFaulted` (`FaultedVirtualAddress`, `PageTableLevel`, the write flag) and a precise
/// reason for the engineer.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuMmuFault {
    /// The faulting GPU virtual address.
    pub virtual_address: u64,
    /// `WDDM_GPU_MMU_FAULT_*`.
    pub kind: u32,
    /// The page-table level whose entry (or root) faulted; 0 for the leaf. For READ_ONLY and
    /// NO_EXECUTE, the highest level whose entry carries the bit.
    pub page_table_level: u32,
    /// `WDDM_GPU_MMU_ACCESS_*`.
    pub access: u32,
    /// Zero.
    pub reserved: u32,
    /// The entry at `page_table_level` as read from memory: the one that faulted, or for
    /// READ_ONLY and NO_EXECUTE the one carrying the bit (0 for a root overrun or a missing
    /// root).
    pub entry: u64,
}

/// Why a `DXGK_PTE` has no device entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PteConversionError {
    /// `PhysicalAdapterIndex` is not 0 (the device is one adapter).
    PhysicalAdapterIndex(u64),
    /// `PageTablePageSize` is neither 4KB (0) nor 64KB (1).
    PageTablePageSize(u64),
    /// `SystemReserved0`, `BlockAccessMode` or a newer field is set.
    UnsupportedFields(u64),
    /// `PageAddress` does not fit the 40-bit address field.
    PageAddressTooLarge(u64),
}

/// `DXGK_PTE.Flags` bits the device entry carries unchanged (Valid to LargePage).
const DXGK_PTE_DIRECT_BITS: u64 = 0x7ff;
/// `DXGK_PTE.PhysicalAdapterIndex`: bits 11 to 16.
const DXGK_PTE_ADAPTER_SHIFT: u32 = 11;
/// `DXGK_PTE.PageTablePageSize`: bits 17 and 18.
const DXGK_PTE_PAGE_TABLE_PAGE_SIZE_SHIFT: u32 = 17;

/// Converts a `DXGK_PTE` (its `Flags` quadword and its `PageAddress`, a 4 KiB frame number) to
/// the device's entry, as a KMD's `DxgkDdiBuildPagingBuffer(UPDATE_PAGE_TABLE)` does.
pub const fn wddm_gpu_pte_from_dxgk(
    flags: u64,
    page_address: u64,
) -> Result<u64, PteConversionError> {
    let adapter = (flags >> DXGK_PTE_ADAPTER_SHIFT) & 0x3f;
    if adapter != 0 {
        return Err(PteConversionError::PhysicalAdapterIndex(adapter));
    }
    let page_table_page_size = (flags >> DXGK_PTE_PAGE_TABLE_PAGE_SIZE_SHIFT) & 0x3;
    if page_table_page_size > 1 {
        return Err(PteConversionError::PageTablePageSize(page_table_page_size));
    }
    let unsupported = flags >> 19;
    if unsupported != 0 {
        return Err(PteConversionError::UnsupportedFields(unsupported << 19));
    }
    if page_address > (WDDM_GPU_PTE_ADDRESS_MASK >> 12) {
        return Err(PteConversionError::PageAddressTooLarge(page_address));
    }
    let size_bit = if page_table_page_size == 1 {
        WDDM_GPU_PTE_PAGE_TABLE_64KB
    } else {
        0
    };
    Ok((flags & DXGK_PTE_DIRECT_BITS) | size_bit | (page_address << 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_bits_sit_where_dxgk_pte_puts_them() {
        // DXGK_PTE: Valid 0, Zero 1, CacheCoherent 2, ReadOnly 3, NoExecute 4, Segment 5-9,
        // LargePage 10 (d3dukmdt.h).
        assert_eq!(wddm_gpu_pte_from_dxgk(0x1f, 0), Ok(0x1f));
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (3 << 5), 0x12345),
            Ok(WDDM_GPU_PTE_VALID | (3 << WDDM_GPU_PTE_SEGMENT_SHIFT) | 0x1234_5000)
        );
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (1 << 10), 0x200),
            Ok(WDDM_GPU_PTE_VALID | WDDM_GPU_PTE_LARGE_PAGE | 0x20_0000)
        );
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (1 << 17), 7),
            Ok(WDDM_GPU_PTE_VALID | WDDM_GPU_PTE_PAGE_TABLE_64KB | 0x7000)
        );
    }

    #[test]
    fn fields_the_device_cannot_hold_are_refused() {
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (2 << 11), 0),
            Err(PteConversionError::PhysicalAdapterIndex(2))
        );
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (2 << 17), 0),
            Err(PteConversionError::PageTablePageSize(2))
        );
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1 | (1 << 20), 0),
            Err(PteConversionError::UnsupportedFields(1 << 20))
        );
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1, 1 << 40),
            Err(PteConversionError::PageAddressTooLarge(1 << 40))
        );
        let top = (1u64 << 40) - 1;
        assert_eq!(
            wddm_gpu_pte_from_dxgk(1, top),
            Ok(1 | WDDM_GPU_PTE_ADDRESS_MASK)
        );
    }

    #[test]
    fn the_fields_tile_the_entry() {
        let fields = [
            WDDM_GPU_PTE_VALID,
            WDDM_GPU_PTE_ZERO,
            WDDM_GPU_PTE_CACHE_COHERENT,
            WDDM_GPU_PTE_READ_ONLY,
            WDDM_GPU_PTE_NO_EXECUTE,
            WDDM_GPU_PTE_SEGMENT_MASK,
            WDDM_GPU_PTE_LARGE_PAGE,
            WDDM_GPU_PTE_PAGE_TABLE_64KB,
            WDDM_GPU_PTE_ADDRESS_MASK,
            WDDM_GPU_PTE_RESERVED_MASK,
        ];
        let mut seen = 0u64;
        for field in fields {
            assert_eq!(seen & field, 0, "{field:#x} overlaps");
            seen |= field;
        }
        assert_eq!(seen, u64::MAX);
        let named = GPUMMU_CAP_NAMES.iter().fold(0, |bits, (_, bit)| bits | bit);
        assert_eq!(named, WDDM_GPU_MMU_CAPS_SUPPORTED);
        assert_eq!(
            WDDM_GPU_MMU_CAPS_SUPPORTED,
            WDDM_GPU_MMU_CAP_READ_ONLY
                | WDDM_GPU_MMU_CAP_NO_EXECUTE
                | WDDM_GPU_MMU_CAP_ZERO_IN_PTE
                | WDDM_GPU_MMU_CAP_EXPLICIT_PAGE_TABLE_INVALIDATION
                | WDDM_GPU_MMU_CAP_CACHE_COHERENT
                | WDDM_GPU_MMU_CAP_UPDATE_REQUIRES_IDLE
                | WDDM_GPU_MMU_CAP_LARGE_PAGE
                | WDDM_GPU_MMU_CAP_SYSMEM_64KB_PAGE
                | WDDM_GPU_MMU_CAP_INVALID_TLB_ENTRIES_NOT_CACHED
        );
    }
}
