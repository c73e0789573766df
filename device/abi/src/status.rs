//! The status page and events: what a KMD's ISR and DPC read without polling the device.
//!
//! The driver registers one 4 KiB page of guest RAM ([`WddmGpuCmdRegisterStatusPage`]). The
//! device writes it, with release ordering, before it completes the request the update belongs
//! to: fields first, then the counters a reader checks (`fault_head`, `completed_fence`).
//!
//! Events (a fault, the BAR moving or disappearing, a FENCE packet) complete requests the driver
//! posted in advance ([`WDDM_GPU_CMD_WAIT_EVENT`](crate::ctrl::WDDM_GPU_CMD_WAIT_EVENT)); each
//! completion raises the control queue's interrupt. With no request posted, the event is counted
//! in `events_dropped` and the status page still holds its state.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::context::{WddmGpuPageFaultRecord, WddmGpuStaleTranslation};
use crate::ctrl::WddmGpuCtrlHdr;

/// `WddmGpuStatusPage::magic`: the bytes "WDSP".
pub const WDDM_GPU_STATUS_MAGIC: u32 = u32::from_le_bytes(*b"WDSP");
/// Status-page layout version.
pub const WDDM_GPU_STATUS_VERSION: u32 = 1;
/// Size of the status page.
pub const WDDM_GPU_STATUS_PAGE_SIZE: u32 = 4096;
/// Entries in the fault ring.
pub const WDDM_GPU_FAULT_RING_ENTRIES: u32 = 120;

/// `WddmGpuRespEvent::kind`: a submission faulted; `fault` holds its record.
pub const WDDM_GPU_EVENT_FAULT: u32 = 1;
/// `WddmGpuRespEvent::kind`: the VRAM BAR moved, appeared or disappeared; `bar_*` hold it.
pub const WDDM_GPU_EVENT_BAR_CHANGED: u32 = 2;
/// `WddmGpuRespEvent::kind`: a FENCE packet executed; `fence_id` holds it.
pub const WDDM_GPU_EVENT_FENCE: u32 = 3;
/// `WddmGpuRespEvent::kind`: a device reset returned the posted request unused.
pub const WDDM_GPU_EVENT_CANCELLED: u32 = 4;
/// `WddmGpuRespEvent::kind`: a vertical blank of a scanout showing VRAM; `scanout_id`,
/// `vblank_count`, `scanout_segment_id` and `scanout_address` hold it. Only delivered to a
/// posted WAIT_EVENT (a vblank nobody waits for is not counted in `events_dropped`: the next
/// one's `vblank_count` says how many were missed).
pub const WDDM_GPU_EVENT_VBLANK: u32 = 5;
/// `WddmGpuRespEvent::kind`: a node page-faulted; `page_fault` holds the record (also on the
/// status page at [`WDDM_GPU_PAGE_FAULT_OFFSET`]).
pub const WDDM_GPU_EVENT_PAGE_FAULT: u32 = 6;
/// `WddmGpuRespEvent::kind`: a SIGNAL packet wrote a monitored fence; `fence_value` holds the
/// value and `fence_address` the GPU virtual address.
pub const WDDM_GPU_EVENT_MONITORED_FENCE: u32 = 7;
/// `WddmGpuRespEvent::kind`: the checking mode found a stale translation; `stale` holds it.
pub const WDDM_GPU_EVENT_STALE_TRANSLATION: u32 = 8;
/// Offset in the status page of the latest page-fault record of each node
/// (`WDDM_GPU_NODE_COUNT` [`crate::context::WddmGpuPageFaultRecord`]s, by node ordinal), after
/// the fault ring.
pub const WDDM_GPU_PAGE_FAULT_OFFSET: u32 = 3968;
/// Offset of the fault ring in the status page.
pub const WDDM_GPU_FAULT_RING_OFFSET: u32 = 128;

/// One fault, as the device records it.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuFaultRecord {
    /// Monotonic fault number (the ring index is `sequence % WDDM_GPU_FAULT_RING_ENTRIES`).
    pub sequence: u64,
    /// The guest or segment address the fault concerns.
    pub address: u64,
    /// `submission_fence_id` of the faulting submission.
    pub fence_id: u32,
    /// DMA-buffer offset of the faulting packet.
    pub packet_offset: u32,
    /// `SubmitStatus` value: the reason.
    pub status: u32,
    /// The faulting packet's opcode (0 when the command itself was refused).
    pub opcode: u32,
}

/// The status page (first bytes; the fault ring follows at `fault_ring_offset`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuStatusPage {
    /// [`WDDM_GPU_STATUS_MAGIC`].
    pub magic: u32,
    /// [`WDDM_GPU_STATUS_VERSION`].
    pub version: u32,
    /// Latest completed fence (submission or FENCE packet).
    pub completed_fence: u32,
    /// Fence of the paging node's latest preempted submission (`PreemptionFenceId`).
    pub preempted_fence: u32,
    /// The paging node's latest completed fence when that preemption happened
    /// (`LastCompletedFenceId`).
    pub last_completed_at_preempt: u32,
    /// VRAM BAR state (`WDDM_GPU_BAR_STATE_*`).
    pub bar_state: u32,
    /// VRAM BAR generation.
    pub bar_generation: u32,
    /// Offset of the fault ring from the page start.
    pub fault_ring_offset: u32,
    /// VRAM BAR guest-physical address (valid when `bar_state` is KNOWN).
    pub bar_address: u64,
    /// Submissions completed since registration (any status).
    pub submissions_completed: u64,
    /// Faults recorded since registration; the next record goes to
    /// `fault_head % WDDM_GPU_FAULT_RING_ENTRIES`.
    pub fault_head: u32,
    /// Written by the driver: faults it has consumed. The device never overwrites a record the
    /// driver has not consumed; it counts it in `faults_dropped` instead.
    pub fault_tail: u32,
    /// Entries in the fault ring.
    pub fault_ring_entries: u32,
    /// Faults not recorded because the ring was full.
    pub faults_dropped: u32,
    /// Events not delivered because no WAIT_EVENT request was posted.
    pub events_dropped: u32,
    /// The virtual node's latest completed SUBMIT_VIRTUAL fence (with or without a fault; a
    /// submission refused without running, preempted or reset does not complete).
    pub virtual_completed_fence: u32,
    /// Zero.
    pub reserved: [u32; 6],
}

/// `WDDM_GPU_CMD_REGISTER_STATUS_PAGE`: `address` 0 unregisters.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdRegisterStatusPage {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// Guest-physical address of a 4 KiB-aligned page of guest RAM, or 0.
    pub address: u64,
}

/// Completion of a `WDDM_GPU_CMD_WAIT_EVENT` request (type `WDDM_GPU_RESP_EVENT`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespEvent {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// `WDDM_GPU_EVENT_*`.
    pub kind: u32,
    /// FENCE events: the fence id.
    pub fence_id: u32,
    /// BAR events: state.
    pub bar_state: u32,
    /// BAR events: generation.
    pub bar_generation: u32,
    /// BAR events: address.
    pub bar_address: u64,
    /// FAULT events: the record (also in the status page's fault ring).
    pub fault: WddmGpuFaultRecord,
    /// VBLANK events: the scanout.
    pub scanout_id: u32,
    /// VBLANK events: the segment shown from this vblank on (0 when the scanout was turned off).
    pub scanout_segment_id: u32,
    /// VBLANK events: vblanks of this scanout since its VRAM scanout was set (1 at the first).
    pub vblank_count: u64,
    /// VBLANK events: the GPU address shown from this vblank on (what
    /// `DXGKARGCB_NOTIFY_INTERRUPT_DATA.CrtcVsync.PhysicalAddress` reports).
    pub scanout_address: u64,
    /// PAGE_FAULT events: the record.
    pub page_fault: WddmGpuPageFaultRecord,
    /// MONITORED_FENCE events: the value written.
    pub fence_value: u64,
    /// MONITORED_FENCE events: where (`MonitoredFenceGpuVa`).
    pub fence_address: u64,
    /// STALE_TRANSLATION events: what the checking mode found.
    pub stale: WddmGpuStaleTranslation,
}

/// `WDDM_GPU_CMD_QUERY_ENGINE_STATUS`: how a node is doing, asked when the driver's timeout
/// ran out (`DxgkDdiQueryEngineStatus` before an engine reset, `DxgkDdiQueryCurrentFence` for an
/// interrupt that may have been lost).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdQueryEngineStatus {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// `NodeOrdinal`: the paging node (0).
    pub node_ordinal: u32,
    /// Zero.
    pub reserved: u32,
}

/// `DXGK_ENGINESTATUS.Responsive`: the node is making progress (clear while it is hung).
pub const WDDM_GPU_ENGINE_STATUS_RESPONSIVE: u32 = 0x1;
/// The frontend has the device paused (a VM stop): the node is not hung, only stopped.
pub const WDDM_GPU_ENGINE_STATUS_PAUSED: u32 = 0x2;

/// Completion of `WDDM_GPU_CMD_QUERY_ENGINE_STATUS` (type `WDDM_GPU_RESP_ENGINE_STATUS`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespEngineStatus {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The node asked about.
    pub node_ordinal: u32,
    /// `WDDM_GPU_ENGINE_STATUS_*`.
    pub flags: u32,
    /// `CurrentFence`: the last completed submission fence.
    pub current_fence: u32,
    /// The running submission's fence (0 when none runs).
    pub running_fence: u32,
    /// Submissions waiting behind it.
    pub queued: u32,
    /// Submission answers this query released (their completions were withheld: an
    /// interrupt lost); each is answered before this response.
    pub released: u32,
}

/// `DEVICE_POWER_STATE.PowerDeviceD0`: working.
pub const WDDM_GPU_POWER_D0: u32 = 1;
/// `DEVICE_POWER_STATE.PowerDeviceD3`: off (D1 and D2, 2 and 3, are low-power states the
/// device treats as D3).
pub const WDDM_GPU_POWER_D3: u32 = 4;
/// `POWER_ACTION.PowerActionNone`: a device power-down of its own (an idle adapter).
pub const WDDM_GPU_POWER_ACTION_NONE: u32 = 0;
/// `POWER_ACTION.PowerActionSleep`: the system sleeps (S1-S3); `PreservedDuringStandby`
/// segments keep their contents.
pub const WDDM_GPU_POWER_ACTION_SLEEP: u32 = 2;
/// `POWER_ACTION.PowerActionHibernate`: the system hibernates (S4); `PreservedDuringHibernate`
/// segments keep their contents.
pub const WDDM_GPU_POWER_ACTION_HIBERNATE: u32 = 3;
/// `POWER_ACTION.PowerActionShutdown`: the system shuts down; no segment keeps its contents.
pub const WDDM_GPU_POWER_ACTION_SHUTDOWN: u32 = 4;
/// What every byte of a memory segment reads after a power-down lost its contents (the
/// `power-loss` fault injection): not zero, so a missing restore shows.
pub const WDDM_GPU_POWER_LOST_BYTE: u8 = 0xde;

/// `WDDM_GPU_CMD_SET_POWER_STATE`: the adapter's `DxgkDdiSetPowerState` (`DevicePowerState`,
/// `ActionType`). Going below D0 stops both nodes as RESET does (their work is answered RESET,
/// the GART and the status page registration are cleared) and refuses submissions until D0.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdSetPowerState {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// `WDDM_GPU_POWER_D0` ... `WDDM_GPU_POWER_D3` (`DEVICE_POWER_STATE`, 1 to 4).
    pub device_power_state: u32,
    /// `WDDM_GPU_POWER_ACTION_*` (`POWER_ACTION`).
    pub action: u32,
}

/// Completion of `WDDM_GPU_CMD_PREEMPT` (type `WDDM_GPU_RESP_PREEMPT`): what
/// `DXGK_INTERRUPT_DMA_PREEMPTED` needs, per node (its `NodeOrdinal`, `PreemptionFenceId`,
/// `LastCompletedFenceId`). PREEMPT preempts both nodes; a driver reports one DMA_PREEMPTED
/// for each node whose count is not 0. Each node's fences are its own: the paging node's
/// SUBMIT fences, the virtual node's SUBMIT_VIRTUAL fences.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespPreempt {
    /// Header.
    pub hdr: WddmGpuCtrlHdr,
    /// The paging node's (node 0) `PreemptionFenceId`: its first submission that did not
    /// complete (0 when none was pending).
    pub preempted_fence: u32,
    /// The paging node's `LastCompletedFenceId`: its latest completed fence (FENCE packets
    /// included), the status page's `completed_fence`.
    pub last_completed_fence: u32,
    /// The paging node's submissions returned with status PREEMPTED.
    pub preempted_count: u32,
    /// Zero.
    pub reserved: u32,
    /// The virtual node's (node 1) `PreemptionFenceId`: its first SUBMIT_VIRTUAL that did not
    /// complete, the running one if a PREEMPT stopped it, else the first queued (0 when none
    /// was pending).
    pub virtual_preempted_fence: u32,
    /// The virtual node's `LastCompletedFenceId`: its latest completed SUBMIT_VIRTUAL fence,
    /// the status page's `virtual_completed_fence`.
    pub virtual_last_completed_fence: u32,
    /// The virtual node's submissions returned with status PREEMPTED.
    pub virtual_preempted_count: u32,
    /// Zero.
    pub virtual_reserved: u32,
}
