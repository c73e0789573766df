//! The virtio-gpu control-queue header (virtio spec 5.7.6.7) and the command and response types
//! this device uses. Only the commands listed here are answered; every other command type gets
//! `VIRTIO_GPU_RESP_ERR_UNSPEC`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `VIRTIO_GPU_CMD_GET_DISPLAY_INFO`: answered with no enabled scanout (render-only device).
pub const VIRTIO_GPU_CMD_GET_DISPLAY_INFO: u32 = 0x0100;
/// `VIRTIO_GPU_CMD_GET_CAPSET_INFO`.
pub const VIRTIO_GPU_CMD_GET_CAPSET_INFO: u32 = 0x0108;
/// `VIRTIO_GPU_CMD_GET_CAPSET`.
pub const VIRTIO_GPU_CMD_GET_CAPSET: u32 = 0x0109;
/// `VIRTIO_GPU_RESP_OK_NODATA`.
pub const VIRTIO_GPU_RESP_OK_NODATA: u32 = 0x1100;
/// `VIRTIO_GPU_RESP_OK_DISPLAY_INFO`.
pub const VIRTIO_GPU_RESP_OK_DISPLAY_INFO: u32 = 0x1101;
/// `VIRTIO_GPU_RESP_OK_CAPSET_INFO`.
pub const VIRTIO_GPU_RESP_OK_CAPSET_INFO: u32 = 0x1102;
/// `VIRTIO_GPU_RESP_OK_CAPSET`.
pub const VIRTIO_GPU_RESP_OK_CAPSET: u32 = 0x1103;
/// `VIRTIO_GPU_RESP_ERR_UNSPEC`: unknown or malformed command.
pub const VIRTIO_GPU_RESP_ERR_UNSPEC: u32 = 0x1200;
/// `VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER`.
pub const VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER: u32 = 0x1205;

/// Device-specific command: execute a DMA buffer of paging packets ([`crate::submit`]).
/// Far from the spec's 0x01xx-0x03xx command ranges.
pub const WDDM_GPU_CMD_SUBMIT: u32 = 0x8001;
/// Device-specific response to [`WDDM_GPU_CMD_SUBMIT`]; its `status` says how it ended.
pub const WDDM_GPU_RESP_SUBMIT: u32 = 0x9001;
/// Register (or, with address 0, unregister) the status page
/// ([`crate::status::WddmGpuCmdRegisterStatusPage`]); answered `VIRTIO_GPU_RESP_OK_NODATA`.
pub const WDDM_GPU_CMD_REGISTER_STATUS_PAGE: u32 = 0x8002;
/// Post a request the device completes at the next event (header only; the response buffer
/// holds a [`crate::status::WddmGpuRespEvent`]).
pub const WDDM_GPU_CMD_WAIT_EVENT: u32 = 0x8003;
/// Stop the running submission at the next chunk boundary and return every pending one with
/// status PREEMPTED (header only; answered with [`crate::status::WddmGpuRespPreempt`]).
pub const WDDM_GPU_CMD_PREEMPT: u32 = 0x8004;
/// `DxgkDdiResetFromTimeout`: drop all work, clear the GART and the status-page registration,
/// keep VRAM (header only; answered `VIRTIO_GPU_RESP_OK_NODATA` once done).
pub const WDDM_GPU_CMD_RESET: u32 = 0x8005;
/// Scan out a VRAM range on a scanout (`DxgkDdiSetVidPnSourceAddress`,
/// [`WddmGpuCmdSetScanoutVram`]); answered `VIRTIO_GPU_RESP_OK_NODATA`. The new address is shown
/// from the next vblank on.
pub const WDDM_GPU_CMD_SET_SCANOUT_VRAM: u32 = 0x8006;
/// Create a context on a node ([`crate::context::WddmGpuCmdCreateContext`]).
pub const WDDM_GPU_CMD_CREATE_CONTEXT: u32 = 0x8007;
/// Destroy a context ([`crate::context::WddmGpuCmdDestroyContext`]).
pub const WDDM_GPU_CMD_DESTROY_CONTEXT: u32 = 0x8008;
/// Bind a context's root page table ([`crate::context::WddmGpuCmdSetRootPageTable`]).
pub const WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE: u32 = 0x8009;
/// Run a DMA buffer at a GPU virtual address on the virtual node
/// ([`crate::context::WddmGpuCmdSubmitVirtual`]).
pub const WDDM_GPU_CMD_SUBMIT_VIRTUAL: u32 = 0x800a;
/// Reset a node ([`crate::context::WddmGpuCmdResetEngine`]).
pub const WDDM_GPU_CMD_RESET_ENGINE: u32 = 0x800b;
/// A node's progress (`DxgkDdiQueryEngineStatus`, `DxgkDdiQueryCurrentFence`,
/// [`crate::status::WddmGpuCmdQueryEngineStatus`]); answered with
/// [`crate::status::WddmGpuRespEngineStatus`]. Asking also releases the submission answers a
/// lost interrupt withheld.
pub const WDDM_GPU_CMD_QUERY_ENGINE_STATUS: u32 = 0x800c;
/// A device power transition (`DxgkDdiSetPowerState` for the adapter,
/// [`crate::status::WddmGpuCmdSetPowerState`]); answered `VIRTIO_GPU_RESP_OK_NODATA` once done.
pub const WDDM_GPU_CMD_SET_POWER_STATE: u32 = 0x800d;
/// Response type of QUERY_ENGINE_STATUS.
pub const WDDM_GPU_RESP_ENGINE_STATUS: u32 = 0x9005;
/// Response type of SUBMIT_VIRTUAL ([`crate::context::WddmGpuRespSubmitVirtual`]).
pub const WDDM_GPU_RESP_SUBMIT_VIRTUAL: u32 = 0x9004;
/// Response type of a completed WAIT_EVENT.
pub const WDDM_GPU_RESP_EVENT: u32 = 0x9002;
/// Response type of PREEMPT.
pub const WDDM_GPU_RESP_PREEMPT: u32 = 0x9003;

/// `VIRTIO_GPU_FLAG_FENCE` in [`WddmGpuCtrlHdr::flags`]: the driver wants to know when the
/// command's work is done; the response, sent only then, echoes the flag and `fence_id`.
pub const VIRTIO_GPU_FLAG_FENCE: u32 = 1 << 0;
/// `VIRTIO_GPU_FLAG_INFO_RING_IDX`: `ring_idx` names the context's fence ring.
pub const VIRTIO_GPU_FLAG_INFO_RING_IDX: u32 = 1 << 1;

/// Maximum number of scanouts in `VIRTIO_GPU_RESP_OK_DISPLAY_INFO`.
pub const VIRTIO_GPU_MAX_SCANOUTS: usize = 16;

/// `struct virtio_gpu_ctrl_hdr`: starts every request and response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCtrlHdr {
    /// Command or response type.
    pub type_: u32,
    /// `VIRTIO_GPU_FLAG_*`; a response echoes the request's FENCE and INFO_RING_IDX flags.
    pub flags: u32,
    /// virtio-gpu fence id, echoed in the response (WDDM fences travel in the submission
    /// command).
    pub fence_id: u64,
    /// virtio-gpu context id, echoed in the response.
    pub ctx_id: u32,
    /// virtio-gpu ring index, echoed in the response.
    pub ring_idx: u8,
    /// Must be zero.
    pub padding: [u8; 3],
}

impl WddmGpuCtrlHdr {
    /// A header carrying only a type.
    pub fn with_type(type_: u32) -> Self {
        Self {
            type_,
            ..Self::default()
        }
    }
}

/// `struct virtio_gpu_get_capset_info`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuGetCapsetInfo {
    /// Header, type [`VIRTIO_GPU_CMD_GET_CAPSET_INFO`].
    pub hdr: WddmGpuCtrlHdr,
    /// Index below the config's `num_capsets`.
    pub capset_index: u32,
    /// Must be zero.
    pub padding: u32,
}

/// `struct virtio_gpu_resp_capset_info`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespCapsetInfo {
    /// Header, type [`VIRTIO_GPU_RESP_OK_CAPSET_INFO`].
    pub hdr: WddmGpuCtrlHdr,
    /// Capability-set id ([`crate::caps::WDDM_GPU_CAPSET_ID`]).
    pub capset_id: u32,
    /// Highest blob version the device can produce.
    pub capset_max_version: u32,
    /// Largest blob size in bytes.
    pub capset_max_size: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_get_capset`; the response is a header followed by the blob.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuGetCapset {
    /// Header, type [`VIRTIO_GPU_CMD_GET_CAPSET`].
    pub hdr: WddmGpuCtrlHdr,
    /// Capability-set id.
    pub capset_id: u32,
    /// Blob version wanted.
    pub capset_version: u32,
}

/// `struct virtio_gpu_display_one`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuDisplayOne {
    /// Rectangle x, y, width, height.
    pub rect: [u32; 4],
    /// Non-zero when the scanout is enabled.
    pub enabled: u32,
    /// Scanout flags.
    pub flags: u32,
}

/// `struct virtio_gpu_resp_display_info`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRespDisplayInfo {
    /// Header, type [`VIRTIO_GPU_RESP_OK_DISPLAY_INFO`].
    pub hdr: WddmGpuCtrlHdr,
    /// One entry per possible scanout; all disabled on this render-only device.
    pub pmodes: [WddmGpuDisplayOne; VIRTIO_GPU_MAX_SCANOUTS],
}

/// `struct virtio_gpu_config`, the device configuration space (read through vhost-user
/// GET_CONFIG; QEMU overwrites all but `num_capsets`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuConfig {
    /// Pending events (QEMU-owned).
    pub events_read: u32,
    /// Events to clear (QEMU-owned).
    pub events_clear: u32,
    /// Number of scanouts (QEMU-owned).
    pub num_scanouts: u32,
    /// Number of capability sets: 1, the segment layout.
    pub num_capsets: u32,
}

/// [`WddmGpuCmdSetScanoutVram::segment_id`] 0: the scanout stops showing VRAM (it is disabled).
pub const WDDM_GPU_SCANOUT_VRAM_OFF: u32 = 0;

/// `WDDM_GPU_CMD_SET_SCANOUT_VRAM`: show `height` rows of `width` pixels, `pitch` bytes apart,
/// read from VRAM segment `segment_id` at GPU `address` (a CPU-visible or device-only memory
/// segment; `pitch * height` bytes must lie inside it). `format` is a 2D
/// `VIRTIO_GPU_FORMAT_*` (4 bytes per pixel). `segment_id` [`WDDM_GPU_SCANOUT_VRAM_OFF`] turns
/// the scanout off; the other fields must then be zero.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCmdSetScanoutVram {
    /// Header, type [`WDDM_GPU_CMD_SET_SCANOUT_VRAM`].
    pub hdr: WddmGpuCtrlHdr,
    /// Scanout index, below the config's `num_scanouts` (`VidPnSourceId`).
    pub scanout_id: u32,
    /// Memory segment holding the surface, or [`WDDM_GPU_SCANOUT_VRAM_OFF`].
    pub segment_id: u32,
    /// GPU address of the first pixel in that segment (`PrimarySegment`/`PrimaryAddress`).
    pub address: u64,
    /// `VIRTIO_GPU_FORMAT_*` of the surface.
    pub format: u32,
    /// Visible width in pixels.
    pub width: u32,
    /// Visible height in pixels.
    pub height: u32,
    /// Bytes from one row to the next, at least `width * 4`.
    pub pitch: u32,
}
