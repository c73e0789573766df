//! Contexts with GPU virtual addressing and the virtual engine node (the WDDM 2.x GpuMmu model,
//! next to the paging node of [`crate::submit`]).
//!
//! - A context lives on a node (`DxgkDdiCreateContext`): node 0 is the paging node (at most one
//!   context there: the system paging process, whose address space the WDDM 2.x paging packets
//!   use), node 1 the virtual engine node. Ids are the driver's, below `max_contexts`.
//! - `SET_ROOT_PAGE_TABLE` binds a context's root (`DxgkDdiSetRootPageTable`) and drops its
//!   cached translations.
//! - `SUBMIT_VIRTUAL` (`DxgkDdiSubmitCommandVirtual`) runs a DMA buffer at a GPU virtual address
//!   of the context's address space on the virtual node: the buffer is fetched through the MMU
//!   (no-execute honoured) and holds the copy-engine packets of this module. It is answered
//!   when it ends, with a [`WddmGpuRespSubmitVirtual`].
//! - A page fault stops the node: the submission ends with status PAGE_FAULT and the record,
//!   the status page holds the record, a PAGE_FAULT event completes a posted WAIT_EVENT, and
//!   the node refuses work (status NODE_FAULTED) until `RESET_ENGINE` (`DxgkDdiResetEngine`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ctrl::WddmGpuCtrlHdr;
use crate::gpuva::WddmGpuMmuFault;
use crate::packet::WddmGpuPacketHeader;

/// The paging node.
pub const WDDM_GPU_NODE_PAGING: u32 = 0;
/// The virtual engine node.
pub const WDDM_GPU_NODE_VIRTUAL: u32 = 1;
/// Nodes of the device.
pub const WDDM_GPU_NODE_COUNT: u32 = 2;

/// CREATE_CONTEXT flags bit: the checking mode, which walks the tables again whenever a cached
/// translation is served and reports one memory no longer agrees with (a skipped FLUSH_TLB).
pub const WDDM_GPU_CONTEXT_FLAG_CHECK_TLB: u32 = 1 << 0;
/// Every CREATE_CONTEXT flag the device knows.
pub const WDDM_GPU_CONTEXT_FLAGS_KNOWN: u32 = WDDM_GPU_CONTEXT_FLAG_CHECK_TLB;

/// `WDDM_GPU_CMD_CREATE_CONTEXT`; answered `VIRTIO_GPU_RESP_OK_NODATA`, or
/// `ERR_INVALID_PARAMETER` (an id in use or past `max_contexts`, an unknown node or flag, a
/// second paging context, no GpuMmu in the layout).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdCreateContext {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The driver's id for it, below `max_contexts`.
    pub context_id: u32,
    /// `WDDM_GPU_NODE_*`.
    pub node_ordinal: u32,
    /// `WDDM_GPU_CONTEXT_FLAG_*`.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

/// `WDDM_GPU_CMD_DESTROY_CONTEXT`; answered `OK_NODATA` once no submission of the context runs.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdDestroyContext {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The context.
    pub context_id: u32,
    /// Zero.
    pub reserved: u32,
}

/// `WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE` (`DXGKARG_SETROOTPAGETABLE`); answered `OK_NODATA`, or
/// `ERR_INVALID_PARAMETER` (no such context, `num_entries` 0 or past the root level's entries,
/// an address not 4 KiB aligned). Where the root is is checked at each walk, as hardware does.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdSetRootPageTable {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The context.
    pub context_id: u32,
    /// `Address.SegmentId`: 0 for system memory, else a memory segment.
    pub segment_id: u32,
    /// `Address.SegmentOffset`: a guest-physical address, or an offset in the segment.
    pub address: u64,
    /// `NumEntries`: a root index at or past it faults ROOT_OVERRUN.
    pub num_entries: u32,
    /// Zero.
    pub reserved: u32,
}

/// `WDDM_GPU_CMD_SUBMIT_VIRTUAL` (`DXGKARG_SUBMITCOMMANDVIRTUAL`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdSubmitVirtual {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The context whose address space the buffer and its packets use.
    pub context_id: u32,
    /// `NodeOrdinal`: [`WDDM_GPU_NODE_VIRTUAL`].
    pub node_ordinal: u32,
    /// `DmaBufferVirtualAddress`.
    pub dma_buffer_address: u64,
    /// `DmaBufferSize`, at most `WDDM_GPU_MAX_DMA_BUFFER_SIZE`.
    pub dma_buffer_size: u32,
    /// First byte to execute.
    pub start_offset: u32,
    /// One past the last byte to execute.
    pub end_offset: u32,
    /// `SubmissionFenceId`, echoed in the completion.
    pub submission_fence_id: u32,
    /// Zero.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
}

/// `WDDM_GPU_CMD_RESET_ENGINE` (`DxgkDdiResetEngine`): drop the node's queued work and clear
/// its fault; answered `OK_NODATA` once the node is idle.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdResetEngine {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// `NodeOrdinal`: [`WDDM_GPU_NODE_VIRTUAL`].
    pub node_ordinal: u32,
    /// Zero.
    pub reserved: u32,
}

/// `DXGK_PAGE_FAULT_WRITE`.
pub const WDDM_GPU_PAGE_FAULT_FLAG_WRITE: u32 = 0x1;
/// `DXGK_PAGE_FAULT_FENCE_INVALID`.
pub const WDDM_GPU_PAGE_FAULT_FLAG_FENCE_INVALID: u32 = 0x2;
/// `DXGK_PAGE_FAULT_ENGINE_RESET_REQUIRED`: the node refuses work until RESET_ENGINE.
pub const WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED: u32 = 0x8;
/// `DXGK_FAULT_ERROR_CODE` with `IsDeviceSpecificCode` 0 and general code
/// `DXGK_GENERAL_ERROR_PAGE_FAULT` (0): the OS reads the VA and level.
pub const WDDM_GPU_FAULT_ERROR_CODE_PAGE_FAULT: u32 = 0;

/// What `DXGKARGCB_NOTIFY_INTERRUPT_DATA.DmaPageFaulted` carries, and the device's reason.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuPageFaultRecord {
    /// Page faults of this node since the status page was registered (0: none yet).
    pub sequence: u64,
    /// The translation that failed: `FaultedVirtualAddress`, `PageTableLevel`, the access.
    pub fault: WddmGpuMmuFault,
    /// `FaultedFenceId`: the submission's fence (see `flags`).
    pub fence_id: u32,
    /// `DXGK_PAGE_FAULT_FLAGS` (`WDDM_GPU_PAGE_FAULT_FLAG_*`).
    pub flags: u32,
    /// `NodeOrdinal`.
    pub node_ordinal: u32,
    /// The context whose address space faulted.
    pub context_id: u32,
    /// `FaultErrorCode.Value`.
    pub error_code: u32,
    /// Offset in the DMA buffer of the faulting packet.
    pub packet_offset: u32,
}

/// What the checking mode (`WDDM_GPU_CONTEXT_FLAG_CHECK_TLB`) found: a cached translation was
/// served that the tables in memory no longer agree with, because no FLUSH_TLB covered the
/// change.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuStaleTranslation {
    /// The GPU virtual address translated from the cache.
    pub virtual_address: u64,
    /// The entry as cached, at the highest level that changed.
    pub cached_entry: u64,
    /// That entry in memory now (0 when the walk no longer reaches it).
    pub memory_entry: u64,
    /// The context.
    pub context_id: u32,
    /// The level whose entry changed (0 = leaf).
    pub page_table_level: u32,
}

/// Completion of `SUBMIT_VIRTUAL` (type `WDDM_GPU_RESP_SUBMIT_VIRTUAL`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespSubmitVirtual {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The request's `submission_fence_id`.
    pub submission_fence_id: u32,
    /// A `SubmitStatus` value.
    pub status: u32,
    /// Packets executed completely.
    pub packets_completed: u32,
    /// Offset of the packet that failed (0 on success).
    pub fault_packet_offset: u32,
    /// Bytes copied or filled: the whole packets', and those the packet that stopped (a page
    /// fault, PREEMPT or RESET_ENGINE) moved before it stopped, in address order.
    pub bytes_transferred: u64,
    /// With status PAGE_FAULT: the record (also on the status page and in the event).
    pub page_fault: WddmGpuPageFaultRecord,
}

/// Virtual-node packet: copy `length` bytes from `source` to `destination`, both GPU virtual
/// addresses ([`WddmGpuVirtualCopy`]).
pub const WDDM_GPU_VOP_COPY: u16 = 0x101;
/// Virtual-node packet: fill `length` bytes at `destination` with a 32-bit pattern
/// ([`WddmGpuVirtualFill`]).
pub const WDDM_GPU_VOP_FILL: u16 = 0x102;
/// Virtual-node packet: write a 64-bit value at a GPU virtual address and raise a
/// MONITORED_FENCE event (a monitored fence signal, [`WddmGpuVirtualSignal`]).
pub const WDDM_GPU_VOP_SIGNAL: u16 = 0x103;

/// `WDDM_GPU_VOP_COPY`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuVirtualCopy {
    /// Header (flags zero).
    pub header: WddmGpuPacketHeader,
    /// Bytes.
    pub length: u64,
    /// Source VA.
    pub source: u64,
    /// Destination VA.
    pub destination: u64,
}

/// `WDDM_GPU_VOP_FILL`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuVirtualFill {
    /// Header (flags zero).
    pub header: WddmGpuPacketHeader,
    /// The pattern, repeated from the destination on (a length not a multiple of 4 ends with
    /// its first bytes).
    pub pattern: u32,
    /// Zero.
    pub reserved: u32,
    /// Bytes.
    pub length: u64,
    /// Destination VA.
    pub destination: u64,
}

/// `WDDM_GPU_VOP_SIGNAL`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuVirtualSignal {
    /// Header (flags zero).
    pub header: WddmGpuPacketHeader,
    /// `MonitoredFenceValue`.
    pub value: u64,
    /// `MonitoredFenceGpuVa`: 8-byte aligned.
    pub address: u64,
}
