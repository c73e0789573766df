//! The submission command: the device counterpart of `DxgkDdiSubmitCommand`. It names a DMA
//! buffer holding paging packets; the device executes `[start_offset, end_offset)` of it and
//! answers with a [`WddmGpuRespSubmit`] carrying the fence id and a [`SubmitStatus`].

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ctrl::WddmGpuCtrlHdr;

/// `flags` bit: this is a paging submission (`DXGK_SUBMITCOMMANDFLAGS.Paging`).
pub const WDDM_GPU_SUBMIT_FLAG_PAGING: u32 = 1 << 0;
/// All `flags` bits the device knows; any other bit set is refused.
pub const WDDM_GPU_SUBMIT_FLAGS_KNOWN: u32 = WDDM_GPU_SUBMIT_FLAG_PAGING;
/// Largest DMA buffer (`dma_buffer_size`) the device accepts.
pub const WDDM_GPU_MAX_DMA_BUFFER_SIZE: u32 = 16 << 20;

/// Request: type [`crate::ctrl::WDDM_GPU_CMD_SUBMIT`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdSubmit {
    /// Header, type [`crate::ctrl::WDDM_GPU_CMD_SUBMIT`].
    pub hdr: WddmGpuCtrlHdr,
    /// `DmaBufferPhysicalAddress`: with `dma_buffer_segment_id` 0, the guest-physical address of
    /// a physically contiguous buffer in guest RAM.
    pub dma_buffer_address: u64,
    /// `DmaBufferSegmentId`: 0 = guest system memory; otherwise the buffer lives in that segment
    /// (an aperture, read through the GART, or VRAM) and `dma_buffer_address` is its segment
    /// address (`BaseAddress` + offset).
    pub dma_buffer_segment_id: u32,
    /// `WDDM_GPU_SUBMIT_FLAG_*`.
    pub flags: u32,
    /// `DmaBufferSize`: bytes of the whole buffer, at most [`WDDM_GPU_MAX_DMA_BUFFER_SIZE`].
    pub dma_buffer_size: u32,
    /// `DmaBufferSubmissionStartOffset`: first byte to execute.
    pub start_offset: u32,
    /// `DmaBufferSubmissionEndOffset`: one past the last byte to execute.
    pub end_offset: u32,
    /// `SubmissionFenceId`, echoed in the completion.
    pub submission_fence_id: u32,
    /// `NodeOrdinal` (engine); only node 0 exists.
    pub node_ordinal: u32,
    /// Must be zero.
    pub reserved: u32,
}

/// Completion: type [`crate::ctrl::WDDM_GPU_RESP_SUBMIT`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespSubmit {
    /// Header, type [`crate::ctrl::WDDM_GPU_RESP_SUBMIT`].
    pub hdr: WddmGpuCtrlHdr,
    /// The request's `submission_fence_id`.
    pub submission_fence_id: u32,
    /// A [`SubmitStatus`] value.
    pub status: u32,
    /// Packets executed completely before the submission ended.
    pub packets_completed: u32,
    /// Offset in the DMA buffer of the packet that failed (0 on success).
    pub fault_packet_offset: u32,
    /// The guest or segment address the failure concerns, when there is one.
    pub fault_address: u64,
    /// Bytes moved by the submission: its whole packets', and those a packet that stopped part
    /// way (a fault of a GPU-virtual-address packet, a PREEMPT or RESET between chunks) moved
    /// before it stopped. A physically addressed packet that faults moved none.
    pub bytes_transferred: u64,
}

/// How a submission ended (`WddmGpuRespSubmit::status`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubmitStatus {
    /// Every packet executed.
    Ok = 0,
    /// The command itself is malformed (flags, reserved fields, offsets, node).
    BadCommand = 1,
    /// The DMA buffer range is not inside guest RAM.
    BadDmaBuffer = 2,
    /// A packet header is truncated, misaligned or runs past `end_offset`.
    BadPacketHeader = 3,
    /// A packet has an opcode the device does not know.
    UnknownOpcode = 4,
    /// A packet names a segment the layout does not have.
    BadSegment = 5,
    /// A segment range falls outside its segment.
    SegmentRange = 6,
    /// A frame list is too long, too short for the length, or not inside guest RAM.
    BadFrameList = 7,
    /// A listed frame is outside guest RAM.
    FrameNotInRam = 8,
    /// A listed frame lies in the VRAM BAR: frame lists describe system memory only.
    FrameInVram = 9,
    /// `address + length` (segment endpoints) or `byte_offset + length` (frame lists) does not
    /// fit in 64 bits. Checked before range rules, so such a packet never reports SegmentRange.
    LengthOverflow = 10,
    /// A reserved field in a packet is not zero.
    ReservedField = 11,
    /// The request is valid but names something this device version does not do.
    Unsupported = 12,
    /// An access went through an aperture page that was never mapped.
    UnmappedAperture = 13,
    /// The packet needs the other kind of segment (e.g. FILL on an aperture, MAP on memory).
    WrongSegmentKind = 14,
    /// A PREEMPT stopped the submission; it may be submitted again.
    Preempted = 15,
    /// A device reset dropped the submission.
    Reset = 16,
    /// A GPU virtual address did not translate (the page-fault record says why).
    PageFault = 17,
    /// The node faulted earlier and refuses work until RESET_ENGINE.
    NodeFaulted = 18,
    /// The context does not exist, has no root, or lives on another node.
    BadContext = 19,
}

impl SubmitStatus {
    /// Every status, in value order.
    pub const ALL: [SubmitStatus; 20] = [
        Self::Ok,
        Self::BadCommand,
        Self::BadDmaBuffer,
        Self::BadPacketHeader,
        Self::UnknownOpcode,
        Self::BadSegment,
        Self::SegmentRange,
        Self::BadFrameList,
        Self::FrameNotInRam,
        Self::FrameInVram,
        Self::LengthOverflow,
        Self::ReservedField,
        Self::Unsupported,
        Self::UnmappedAperture,
        Self::WrongSegmentKind,
        Self::Preempted,
        Self::Reset,
        Self::PageFault,
        Self::NodeFaulted,
        Self::BadContext,
    ];

    /// Decodes a wire value.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }

    /// Stable lower-case name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::BadCommand => "bad_command",
            Self::BadDmaBuffer => "bad_dma_buffer",
            Self::BadPacketHeader => "bad_packet_header",
            Self::UnknownOpcode => "unknown_opcode",
            Self::BadSegment => "bad_segment",
            Self::SegmentRange => "segment_range",
            Self::BadFrameList => "bad_frame_list",
            Self::FrameNotInRam => "frame_not_in_ram",
            Self::FrameInVram => "frame_in_vram",
            Self::LengthOverflow => "length_overflow",
            Self::ReservedField => "reserved_field",
            Self::Unsupported => "unsupported",
            Self::UnmappedAperture => "unmapped_aperture",
            Self::WrongSegmentKind => "wrong_segment_kind",
            Self::Preempted => "preempted",
            Self::Reset => "reset",
            Self::PageFault => "page_fault",
            Self::NodeFaulted => "node_faulted",
            Self::BadContext => "bad_context",
        }
    }
}
