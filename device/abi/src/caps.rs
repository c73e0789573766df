//! The segment-layout capability set. A KMD reads it once with `VIRTIO_GPU_CMD_GET_CAPSET_INFO`
//! / `VIRTIO_GPU_CMD_GET_CAPSET` and has everything `DXGK_QUERYSEGMENTOUT3` (or 4) needs, plus the
//! location of the VRAM BAR so it can set `CpuTranslatedAddress`.
//!
//! Blob layout (all offsets from the blob start, all little-endian):
//!
//! | offset | content |
//! |---|---|
//! | 0 | [`WddmGpuCapsHeader`] (with the embedded [`WddmGpuVramBar`]) |
//! | `segments_offset` | `segment_count` × [`WddmGpuSegmentDesc`], `segment_desc_size` bytes apart |
//! | `bank_table_offset` | `bank_entry_count` × `u64` bank end offsets |
//!
//! Readers must use the offsets and sizes from the header, not the sizes of these structs, so the
//! blob can grow.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Capability-set id: the top of the range Linux's `virtio_gpu` accepts (1..=63; it logs
/// `invalid capset id` for anything larger), far from the registered ids (1 VIRGL .. 6 DRM).
pub const WDDM_GPU_CAPSET_ID: u32 = 63;
/// Blob version this crate describes.
pub const WDDM_GPU_CAPSET_VERSION: u32 = 1;
/// `magic`: the bytes "WDGC" read as a little-endian `u32` (a literal, so C gets it too).
pub const WDDM_GPU_CAPS_MAGIC: u32 = 0x4347_4457;

/// `wddm_version` for WDDM 1.3 (`DXGK_SEGMENTDESCRIPTOR3`).
pub const WDDM_GPU_WDDM_1_3: u32 = 0x0103;
/// `wddm_version` for WDDM 2.0 (`DXGK_SEGMENTDESCRIPTOR4`).
pub const WDDM_GPU_WDDM_2_0: u32 = 0x0200;

/// `WddmGpuVramBar::mode`: the VRAM file is BAR2 of an `ivshmem-plain` device at
/// `pci_function` of the GPU's slot (QEMU 10.x).
pub const WDDM_GPU_BAR_MODE_IVSHMEM: u32 = 1;
/// `WddmGpuVramBar::mode`: the VRAM is a virtio shared-memory region of the GPU's own function
/// (vhost-user `SHMEM`, QEMU 11.1+).
pub const WDDM_GPU_BAR_MODE_SHMEM: u32 = 2;

/// `WddmGpuVramBar::state`: the frontend has not announced the BAR (memory decode off, or the
/// guest has not set DRIVER_OK yet).
pub const WDDM_GPU_BAR_STATE_NOT_MAPPED: u32 = 0;
/// `WddmGpuVramBar::state`: `guest_physical_address` holds where the guest sees the BAR.
pub const WDDM_GPU_BAR_STATE_KNOWN: u32 = 1;

/// Most segments of a WDDM 1.3 layout: segment ids are 5 bits wide (1..=31).
pub const WDDM_GPU_MAX_SEGMENTS_WDDM_1_3: u32 = 31;
/// Most segments of a WDDM 2.0 layout: id 31 is `DXGK_SEGMENT_ID_SYSTEMMEMORY` there.
pub const WDDM_GPU_MAX_SEGMENTS_WDDM_2_0: u32 = 30;
/// Most banks of one segment: bank ids in `DXGK_SEGMENTBANKPREFERENCE` are 7 bits, 0 is "none".
pub const WDDM_GPU_MAX_BANKS: u32 = 127;
/// `bank_table_offset` is a multiple of this (the table holds `u64`s).
pub const WDDM_GPU_BANK_TABLE_ALIGN: u32 = 8;
/// Highest `WddmGpuVramBar::pci_function` (a PCI slot has functions 0..=7).
pub const WDDM_GPU_MAX_PCI_FUNCTION: u32 = 7;
/// Highest `WddmGpuVramBar::bar_index` (a PCI function has BARs 0..=5).
pub const WDDM_GPU_MAX_BAR_INDEX: u32 = 5;

/// `WddmGpuSegmentDesc::bar_offset` of a segment that is not in the BAR.
pub const WDDM_GPU_NO_BAR_OFFSET: u64 = u64::MAX;

/// Where the VRAM BAR is, as the device last learned it from the frontend.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuVramBar {
    /// `WDDM_GPU_BAR_MODE_*`.
    pub mode: u32,
    /// `WDDM_GPU_BAR_STATE_*`.
    pub state: u32,
    /// Changes whenever the BAR appears, moves or disappears; a KMD that cached
    /// `CpuTranslatedAddress` compares it.
    pub generation: u32,
    /// PCI function (of the GPU's slot) that carries the BAR.
    pub pci_function: u32,
    /// BAR index inside that function.
    pub bar_index: u32,
    /// Zero.
    pub reserved: u32,
    /// Guest-physical address of the BAR (valid when `state` is KNOWN).
    pub guest_physical_address: u64,
    /// BAR size in bytes (the VRAM file size).
    pub size: u64,
}

/// Blob header.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCapsHeader {
    /// [`WDDM_GPU_CAPS_MAGIC`].
    pub magic: u32,
    /// [`WDDM_GPU_CAPSET_VERSION`].
    pub version: u32,
    /// Bytes of the whole blob.
    pub total_size: u32,
    /// `WDDM_GPU_WDDM_*`: which descriptor form the KMD should report.
    pub wddm_version: u32,
    /// Number of segment descriptors (`NbSegment`).
    pub segment_count: u32,
    /// Bytes between consecutive segment descriptors.
    pub segment_desc_size: u32,
    /// Offset of the first segment descriptor.
    pub segments_offset: u32,
    /// Offset of the bank table.
    pub bank_table_offset: u32,
    /// Entries in the bank table (all segments together).
    pub bank_entry_count: u32,
    /// `PagingBufferSegmentId`: 0 (system memory) or an aperture segment id.
    pub paging_buffer_segment_id: u32,
    /// `PagingBufferSize`.
    pub paging_buffer_size: u32,
    /// `PagingBufferPrivateDataSize`.
    pub paging_buffer_private_data_size: u32,
    /// Most entries the device accepts in one frame list.
    pub max_frame_list_entries: u32,
    /// Largest packet the device accepts.
    pub max_packet_size: u32,
    /// The VRAM BAR locator.
    pub vram_bar: WddmGpuVramBar,
}

/// One segment, in the order of `DXGK_SEGMENTDESCRIPTOR3` ids (the first is segment 1).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuSegmentDesc {
    /// Segment id (1-based).
    pub id: u32,
    /// `DXGK_SEGMENTFLAGS.Value`.
    pub flags: u32,
    /// `BaseAddress`: the segment's base in the GPU address space; paging packets address the
    /// segment as `base_address + offset`.
    pub base_address: u64,
    /// `Size` in bytes.
    pub size: u64,
    /// `CommitLimit`.
    pub commit_limit: u64,
    /// Offset of the segment inside the VRAM BAR (`CpuVisible` memory segments), else
    /// [`WDDM_GPU_NO_BAR_OFFSET`].
    pub bar_offset: u64,
    /// `CpuTranslatedAddress`: BAR address + `bar_offset` while the BAR is KNOWN, else 0.
    pub cpu_translated_address: u64,
    /// `SystemMemoryEndAddress`.
    pub system_memory_end_address: u64,
    /// `NbOfBanks` (0 without `UseBanking`).
    pub bank_count: u32,
    /// Index of this segment's first entry in the bank table.
    pub bank_table_index: u32,
}
