//! Paging packets: the hardware commands a KMD's `DxgkDdiBuildPagingBuffer` writes into a DMA
//! buffer. A buffer is a sequence of packets, each starting with a [`WddmGpuPacketHeader`] whose
//! `size` (a multiple of 8) gives the offset of the next packet, so the stream can grow new
//! opcodes and longer packets without breaking older drivers.
//!
//! Endpoints are resolved by the KMD: a segment address (segment id + GPU address, i.e. the
//! segment's `BaseAddress` + offset) or an indirect list of guest page frames (an MDL's PFN array).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// TRANSFER: copy `length` bytes from `source` to `destination` ([`WddmGpuPacketTransfer`]).
pub const WDDM_GPU_OP_TRANSFER: u16 = 1;
/// FILL: repeat a 32-bit pattern over a memory-segment range ([`WddmGpuPacketFill`]).
pub const WDDM_GPU_OP_FILL: u16 = 2;
/// DISCARD_CONTENT: notice that an allocation leaves a location; no data moves
/// ([`WddmGpuPacketSegmentAccess`]).
pub const WDDM_GPU_OP_DISCARD_CONTENT: u16 = 3;
/// READ_PHYSICAL: a 1-8 byte read that forces coherency; counted, no data moves
/// ([`WddmGpuPacketSegmentAccess`]).
pub const WDDM_GPU_OP_READ_PHYSICAL: u16 = 4;
/// WRITE_PHYSICAL: a 1-8 byte write that forces coherency; counted, no data moves
/// ([`WddmGpuPacketSegmentAccess`]).
pub const WDDM_GPU_OP_WRITE_PHYSICAL: u16 = 5;
/// MAP_APERTURE_SEGMENT: point aperture pages at guest frames ([`WddmGpuPacketMapAperture`]).
pub const WDDM_GPU_OP_MAP_APERTURE: u16 = 6;
/// UNMAP_APERTURE_SEGMENT: point aperture pages at a dummy page ([`WddmGpuPacketUnmapAperture`]).
pub const WDDM_GPU_OP_UNMAP_APERTURE: u16 = 7;
/// FENCE: report a fence as completed: status page, event, interrupt ([`WddmGpuPacketFence`]).
pub const WDDM_GPU_OP_FENCE: u16 = 8;
/// MAP_APERTURE_SEGMENT2: map from an address-descriptor list, possibly contiguous
/// ([`WddmGpuPacketMapAperture2`]).
pub const WDDM_GPU_OP_MAP_APERTURE2: u16 = 9;

/// UPDATE_PAGE_TABLE: write entries into one page table at a physical address (WDDM 2.x,
/// GPU_PHYSICAL updates; [`WddmGpuPacketUpdatePageTable`]).
pub const WDDM_GPU_OP_UPDATE_PAGE_TABLE: u16 = 10;
/// FLUSH_TLB: drop cached translations of the address spaces under one root
/// ([`WddmGpuPacketFlushTlb`]).
pub const WDDM_GPU_OP_FLUSH_TLB: u16 = 11;

/// VIRTUAL_TRANSFER: copy between two GPU virtual addresses of the paging process's address space
/// (`DXGK_BUILDPAGINGBUFFER_TRANSFERVIRTUAL`, [`WddmGpuPacketVirtualTransfer`]).
pub const WDDM_GPU_OP_VIRTUAL_TRANSFER: u16 = 12;
/// VIRTUAL_FILL: fill at a GPU virtual address of the paging process's address space
/// (`DXGK_BUILDPAGINGBUFFER_FILLVIRTUAL`, [`WddmGpuPacketVirtualFill`]).
pub const WDDM_GPU_OP_VIRTUAL_FILL: u16 = 13;
/// COPY_PAGE_TABLE_ENTRIES: copy entries between page tables addressed by GPU virtual addresses
/// of the paging process (`DXGK_BUILDPAGINGBUFFER_COPYPAGETABLEENTRIES`,
/// [`WddmGpuPacketCopyPageTableEntries`]).
pub const WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES: u16 = 14;
/// SIGNAL_MONITORED_FENCE: write a 64-bit value at a GPU virtual address of the paging process
/// and raise a MONITORED_FENCE event (`DXGK_BUILDPAGINGBUFFER_SIGNALMONITOREDFENCE`,
/// [`WddmGpuPacketSignalMonitoredFence`]).
pub const WDDM_GPU_OP_SIGNAL_MONITORED_FENCE: u16 = 15;
/// NOTIFY_RESIDENCY: an allocation became resident or was evicted; checked and counted
/// (`DXGK_BUILDPAGINGBUFFER_NOTIFYRESIDENCY`, [`WddmGpuPacketNotifyResidency`]).
pub const WDDM_GPU_OP_NOTIFY_RESIDENCY: u16 = 16;
/// UPDATE_CONTEXT_ALLOCATION: a context allocation changed; checked and counted
/// (`DXGK_BUILDPAGINGBUFFER_UPDATECONTEXTALLOCATION`, [`WddmGpuPacketUpdateContextAllocation`]).
pub const WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION: u16 = 17;

/// VIRTUAL_TRANSFER flags bit: `DXGK_TRANSFERVIRTUALFLAGS.Src64KBPages` (informational).
pub const WDDM_GPU_VIRTUAL_TRANSFER_SRC_64KB: u32 = 1 << 0;
/// VIRTUAL_TRANSFER flags bit: `DXGK_TRANSFERVIRTUALFLAGS.Dst64KBPages` (informational).
pub const WDDM_GPU_VIRTUAL_TRANSFER_DST_64KB: u32 = 1 << 1;
/// Most ranges one COPY_PAGE_TABLE_ENTRIES may carry.
pub const WDDM_GPU_MAX_COPY_RANGES: u32 = 4096;

/// UPDATE_PAGE_TABLE flags bit: `DXGK_UPDATEPAGETABLEFLAGS.Repeat`: `entry` is written to every
/// slot.
pub const WDDM_GPU_UPDATE_FLAG_REPEAT: u32 = 1 << 0;
/// `DXGK_UPDATEPAGETABLEFLAGS.InitialUpdate` (counted).
pub const WDDM_GPU_UPDATE_FLAG_INITIAL_UPDATE: u32 = 1 << 1;
/// `DXGK_UPDATEPAGETABLEFLAGS.NotifyEviction` (counted).
pub const WDDM_GPU_UPDATE_FLAG_NOTIFY_EVICTION: u32 = 1 << 2;
/// `DXGK_UPDATEPAGETABLEFLAGS.Use64KBPages`: the table is a leaf of 64 KiB pages (1/16 of the
/// entries).
pub const WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES: u32 = 1 << 3;
/// Every UPDATE_PAGE_TABLE flag the device knows.
pub const WDDM_GPU_UPDATE_FLAGS_KNOWN: u32 = 0xf;

/// MAP flags bit: `DXGK_MAPAPERTUREFLAGS.CacheCoherent`.
pub const WDDM_GPU_MAP_FLAG_CACHE_COHERENT: u32 = 1 << 0;
/// MAP_APERTURE2 `adl_flags` bit: `DXGK_ADL_FLAGS.Contiguous` (base page + count).
pub const WDDM_GPU_ADL_FLAG_CONTIGUOUS: u32 = 1 << 0;
/// DISCARD_CONTENT flags bit: `DXGK_DISCARDCONTENTFLAGS.AllocationIsIdle`.
pub const WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE: u32 = 1 << 0;

/// Packet sizes are multiples of this.
pub const WDDM_GPU_PACKET_ALIGN: u32 = 8;
/// Largest packet the device copies in; larger sizes are refused.
pub const WDDM_GPU_MAX_PACKET_SIZE: u32 = 4096;
/// Most entries one frame list may hold: 1 GiB of 4 KiB frames (a 2 MiB list).
pub const WDDM_GPU_MAX_FRAME_LIST_ENTRIES: u32 = 262_144;

/// Starts every packet.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketHeader {
    /// `WDDM_GPU_OP_*`.
    pub opcode: u16,
    /// Opcode-specific flags; must be zero for TRANSFER.
    pub flags: u16,
    /// Bytes of the whole packet including this header: at least the opcode's struct size, a
    /// multiple of [`WDDM_GPU_PACKET_ALIGN`], at most [`WDDM_GPU_MAX_PACKET_SIZE`].
    pub size: u32,
}

/// One side of a data movement.
///
/// - `segment_id != 0`: `address` is a GPU address inside that segment (`BaseAddress` + offset);
///   `frame_count` and `byte_offset` must be 0.
/// - `segment_id == 0`: guest system pages. `address` is the guest-physical address of an array
///   of `frame_count` little-endian `u64` page-frame numbers (4 KiB frames, as in an MDL), and the
///   data starts `byte_offset` bytes into the first listed frame (it may exceed one page: the KMD
///   folds `MdlOffset * PAGE_SIZE` in here).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuEndpoint {
    /// Segment id (1-based), or 0 for a frame list.
    pub segment_id: u32,
    /// Frame-list entries (frame list only), at most [`WDDM_GPU_MAX_FRAME_LIST_ENTRIES`].
    pub frame_count: u32,
    /// Segment GPU address, or the guest-physical address of the frame list.
    pub address: u64,
    /// Byte offset into the listed frames (frame list only).
    pub byte_offset: u32,
    /// Must be zero.
    pub reserved: u32,
}

/// TRANSFER (`DXGK_OPERATION_TRANSFER`): the KMD has applied `TransferOffset` and `MdlOffset`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketTransfer {
    /// `opcode` = [`WDDM_GPU_OP_TRANSFER`].
    pub header: WddmGpuPacketHeader,
    /// Bytes to copy; 0 is a valid no-op.
    pub length: u64,
    /// Where the bytes come from.
    pub source: WddmGpuEndpoint,
    /// Where the bytes go.
    pub destination: WddmGpuEndpoint,
}

/// FILL (`DXGK_OPERATION_FILL`): `length` bytes of a memory segment get the little-endian
/// `pattern` repeated from the first byte (a length that is not a multiple of 4 ends mid-pattern).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketFill {
    /// `opcode` = [`WDDM_GPU_OP_FILL`].
    pub header: WddmGpuPacketHeader,
    /// `FillPattern`.
    pub pattern: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `FillSize`.
    pub length: u64,
    /// A memory-segment endpoint (`Destination`); apertures and frame lists are refused.
    pub destination: WddmGpuEndpoint,
}

/// DISCARD_CONTENT, READ_PHYSICAL and WRITE_PHYSICAL: a checked segment location; no data moves.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketSegmentAccess {
    /// `opcode` = one of the three.
    pub header: WddmGpuPacketHeader,
    /// Segment id (any kind).
    pub segment_id: u32,
    /// DISCARD: `WDDM_GPU_DISCARD_FLAG_*`; READ/WRITE_PHYSICAL: the access size, 1 to 8 bytes.
    pub flags_or_size: u32,
    /// `SegmentAddress` / `PhysicalAddress`: a GPU address inside the segment.
    pub address: u64,
}

/// MAP_APERTURE_SEGMENT: aperture page `first_page + i` maps guest frame
/// `frames[frame_offset + i]` for `i` in `0..page_count`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketMapAperture {
    /// `opcode` = [`WDDM_GPU_OP_MAP_APERTURE`].
    pub header: WddmGpuPacketHeader,
    /// The aperture segment.
    pub segment_id: u32,
    /// `WDDM_GPU_MAP_FLAG_*`.
    pub flags: u32,
    /// `OffsetInPages`: first aperture page.
    pub first_page: u64,
    /// `NumberOfPages`.
    pub page_count: u64,
    /// Guest-physical address of the u64 frame array (the MDL's PFN array).
    pub frame_list_address: u64,
    /// Entries in that array, at most `WDDM_GPU_MAX_FRAME_LIST_ENTRIES`.
    pub frame_count: u32,
    /// `MdlOffset`: index of the first frame to map.
    pub frame_offset: u32,
}

/// MAP_APERTURE_SEGMENT2: like MAP_APERTURE, from a `DXGK_ADL`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketMapAperture2 {
    /// `opcode` = [`WDDM_GPU_OP_MAP_APERTURE2`].
    pub header: WddmGpuPacketHeader,
    /// The aperture segment.
    pub segment_id: u32,
    /// `WDDM_GPU_MAP_FLAG_*`.
    pub flags: u32,
    /// `OffsetInPages`.
    pub first_page: u64,
    /// `NumberOfPages`.
    pub page_count: u64,
    /// `DXGK_ADL.Flags`: `WDDM_GPU_ADL_FLAG_*`.
    pub adl_flags: u32,
    /// `AdlOffset`: index of the first ADL page to map.
    pub adl_offset: u32,
    /// Contiguous: `BasePageNumber`; otherwise the guest-physical address of the u64 page array.
    pub adl_base: u64,
    /// `DXGK_ADL.PageCount`.
    pub adl_page_count: u32,
    /// Must be zero.
    pub reserved: u32,
}

/// UNMAP_APERTURE_SEGMENT: every page of the range then maps `dummy_page`, so device accesses
/// through it keep working (they land on the dummy page).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketUnmapAperture {
    /// `opcode` = [`WDDM_GPU_OP_UNMAP_APERTURE`].
    pub header: WddmGpuPacketHeader,
    /// The aperture segment.
    pub segment_id: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `OffsetInPages`.
    pub first_page: u64,
    /// `NumberOfPages`.
    pub page_count: u64,
    /// `DummyPage`: guest-physical address of a page in guest RAM (4 KiB aligned).
    pub dummy_page: u64,
}

/// FENCE: the fence is reported completed when this packet executes: written to the status
/// page, and delivered as an event if the driver posted one (an interrupt), so an ISR can report
/// `DXGK_INTERRUPT_DMA_COMPLETED` with it.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketFence {
    /// `opcode` = [`WDDM_GPU_OP_FENCE`].
    pub header: WddmGpuPacketHeader,
    /// The fence id (`SubmissionFenceId`).
    pub fence_id: u32,
    /// Must be zero.
    pub reserved: u32,
}

/// UPDATE_PAGE_TABLE (`DXGK_BUILDPAGINGBUFFER_UPDATEPAGETABLE` with GPU_PHYSICAL addresses):
/// `entry_count` entries from `start_index` on, in the table at `table_address` of
/// `table_segment_id`. The entries are already in the device's format (`gpuva`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketUpdatePageTable {
    /// `opcode` = [`WDDM_GPU_OP_UPDATE_PAGE_TABLE`].
    pub header: WddmGpuPacketHeader,
    /// `Flags`: `WDDM_GPU_UPDATE_FLAG_*`.
    pub flags: u32,
    /// `PageTableLevel` (0 = leaf): bounds the slots by that level's table.
    pub page_table_level: u32,
    /// `PageTableAddress.GpuPhysical.SegmentId`: 0 for system memory, else a memory segment.
    pub table_segment_id: u32,
    /// `StartIndex`.
    pub start_index: u32,
    /// `PageTableAddress.GpuPhysical.SegmentOffset`: a guest-physical address, or an offset in
    /// the segment; 8-byte aligned.
    pub table_address: u64,
    /// `NumPageTableEntries`.
    pub entry_count: u32,
    /// Must be zero.
    pub reserved: u32,
    /// Without Repeat: the guest-physical address of `entry_count` entries in guest RAM (the
    /// converted `pPageTableEntries`). With Repeat: zero.
    pub entries_address: u64,
    /// With Repeat: the entry written to every slot. Without: zero.
    pub entry: u64,
}

/// FLUSH_TLB (`DXGK_BUILDPAGINGBUFFER_FLUSHTLB`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketFlushTlb {
    /// `opcode` = [`WDDM_GPU_OP_FLUSH_TLB`].
    pub header: WddmGpuPacketHeader,
    /// `RootPageTableAddress.SegmentId`.
    pub root_segment_id: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `RootPageTableAddress.SegmentOffset`.
    pub root_address: u64,
    /// `StartVirtualAddress`; with `end_virtual_address` also 0, the whole address space.
    pub start_virtual_address: u64,
    /// `EndVirtualAddress` (exclusive).
    pub end_virtual_address: u64,
}

/// VIRTUAL_TRANSFER (`DXGK_BUILDPAGINGBUFFER_TRANSFERVIRTUAL`): both addresses are in the
/// address space of the paging node's context (the system paging process).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketVirtualTransfer {
    /// `opcode` = [`WDDM_GPU_OP_VIRTUAL_TRANSFER`].
    pub header: WddmGpuPacketHeader,
    /// `Flags`: `WDDM_GPU_VIRTUAL_TRANSFER_*`.
    pub flags: u32,
    /// `TransferDirection` (`DXGK_MEMORY_TRANSFER_DIRECTION`: 0 local to system, 1 system to
    /// local, 2 local to local); recorded only.
    pub transfer_direction: u32,
    /// `TransferSizeInBytes`.
    pub length: u64,
    /// `SourceVirtualAddress`.
    pub source: u64,
    /// `DestinationVirtualAddress`.
    pub destination: u64,
}

/// VIRTUAL_FILL (`DXGK_BUILDPAGINGBUFFER_FILLVIRTUAL`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketVirtualFill {
    /// `opcode` = [`WDDM_GPU_OP_VIRTUAL_FILL`].
    pub header: WddmGpuPacketHeader,
    /// `FillPattern`.
    pub pattern: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `FillSizeInBytes`.
    pub length: u64,
    /// `DestinationVirtualAddress`.
    pub destination: u64,
}

/// One range of COPY_PAGE_TABLE_ENTRIES (`DXGK_BUILDPAGINGBUFFER_COPY_RANGE`), in guest RAM.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCopyRange {
    /// `NumPageTableEntries`.
    pub entry_count: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `SrcPageTableAddress`: a GPU virtual address of the paging process.
    pub source_table: u64,
    /// `DstPageTableAddress`.
    pub destination_table: u64,
    /// `SrcStartPteIndex`.
    pub source_start: u32,
    /// `DstStartPteIndex`.
    pub destination_start: u32,
}

/// COPY_PAGE_TABLE_ENTRIES (`DXGK_BUILDPAGINGBUFFER_COPYPAGETABLEENTRIES`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketCopyPageTableEntries {
    /// `opcode` = [`WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES`].
    pub header: WddmGpuPacketHeader,
    /// `NumRanges`, at most [`WDDM_GPU_MAX_COPY_RANGES`].
    pub range_count: u32,
    /// Must be zero.
    pub reserved: u32,
    /// Guest-physical address of `range_count` [`WddmGpuCopyRange`]s (`pRanges`).
    pub ranges_address: u64,
}

/// SIGNAL_MONITORED_FENCE (`DXGK_BUILDPAGINGBUFFER_SIGNALMONITOREDFENCE`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketSignalMonitoredFence {
    /// `opcode` = [`WDDM_GPU_OP_SIGNAL_MONITORED_FENCE`].
    pub header: WddmGpuPacketHeader,
    /// `MonitoredFenceValue`.
    pub value: u64,
    /// `MonitoredFenceGpuVa`: 8-byte aligned.
    pub address: u64,
}

/// NOTIFY_RESIDENCY (`DXGK_BUILDPAGINGBUFFER_NOTIFYRESIDENCY`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketNotifyResidency {
    /// `opcode` = [`WDDM_GPU_OP_NOTIFY_RESIDENCY`].
    pub header: WddmGpuPacketHeader,
    /// `Resident`: 1 made resident, 0 evicted.
    pub resident: u32,
    /// `PhysicalAddress.SegmentId` (0 with `Resident` 0).
    pub segment_id: u32,
    /// `PhysicalAddress.SegmentOffset` (0 with `Resident` 0).
    pub segment_offset: u64,
    /// The KMD's allocation handle, for its own bookkeeping; recorded only.
    pub allocation: u64,
}

/// UPDATE_CONTEXT_ALLOCATION (`DXGK_BUILDPAGINGBUFFER_UPDATECONTEXTALLOCATION`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPacketUpdateContextAllocation {
    /// `opcode` = [`WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION`].
    pub header: WddmGpuPacketHeader,
    /// `DriverPrivateDataSize`; recorded only.
    pub private_data_size: u32,
    /// Must be zero.
    pub reserved: u32,
    /// `ContextAllocation`: a GPU virtual address of the paging process (its scratch area).
    pub context_allocation: u64,
    /// `ContextAllocationSize`.
    pub context_allocation_size: u64,
}
