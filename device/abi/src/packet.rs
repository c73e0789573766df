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
