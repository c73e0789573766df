//! The standard virtio-gpu 2D device (virtio 1.2, 5.7.6): the commands, responses and
//! structures of the scanouts, 2D resources and the cursor, which Linux's `virtio_gpu`, OVMF and
//! a KMD's boot display use. The paging commands of this device are in [`crate::ctrl`].

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ctrl::WddmGpuCtrlHdr;

/// `VIRTIO_GPU_CMD_RESOURCE_CREATE_2D`.
pub const VIRTIO_GPU_CMD_RESOURCE_CREATE_2D: u32 = 0x0101;
/// `VIRTIO_GPU_CMD_RESOURCE_UNREF`.
pub const VIRTIO_GPU_CMD_RESOURCE_UNREF: u32 = 0x0102;
/// `VIRTIO_GPU_CMD_SET_SCANOUT`.
pub const VIRTIO_GPU_CMD_SET_SCANOUT: u32 = 0x0103;
/// `VIRTIO_GPU_CMD_RESOURCE_FLUSH`.
pub const VIRTIO_GPU_CMD_RESOURCE_FLUSH: u32 = 0x0104;
/// `VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D`.
pub const VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D: u32 = 0x0105;
/// `VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING`.
pub const VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING: u32 = 0x0106;
/// `VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING`.
pub const VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING: u32 = 0x0107;
/// `VIRTIO_GPU_CMD_GET_EDID`.
pub const VIRTIO_GPU_CMD_GET_EDID: u32 = 0x010a;
/// `VIRTIO_GPU_CMD_UPDATE_CURSOR` (cursor queue).
pub const VIRTIO_GPU_CMD_UPDATE_CURSOR: u32 = 0x0300;
/// `VIRTIO_GPU_CMD_MOVE_CURSOR` (cursor queue).
pub const VIRTIO_GPU_CMD_MOVE_CURSOR: u32 = 0x0301;

/// `VIRTIO_GPU_RESP_OK_EDID`.
pub const VIRTIO_GPU_RESP_OK_EDID: u32 = 0x1104;
/// `VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY`.
pub const VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY: u32 = 0x1201;
/// `VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID`.
pub const VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID: u32 = 0x1202;
/// `VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID`.
pub const VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID: u32 = 0x1203;

/// `VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM`: bytes B, G, R, A. Every 2D format has 4 bytes a pixel,
/// named by their order in memory.
pub const VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM: u32 = 1;
/// `VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM`.
pub const VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM: u32 = 2;
/// `VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM`.
pub const VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM: u32 = 3;
/// `VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM`.
pub const VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM: u32 = 4;
/// `VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM`.
pub const VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM: u32 = 67;
/// `VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM`.
pub const VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM: u32 = 68;
/// `VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM`.
pub const VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM: u32 = 121;
/// `VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM`.
pub const VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM: u32 = 134;

/// Most entries one RESOURCE_ATTACH_BACKING may carry (QEMU's limit too); more are refused
/// `VIRTIO_GPU_RESP_ERR_UNSPEC`.
pub const WDDM_GPU_MAX_BACKING_ENTRIES: u32 = 16384;

/// `struct virtio_gpu_rect`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuRect {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// `struct virtio_gpu_resource_create_2d`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuResourceCreate2d {
    /// Header, type [`VIRTIO_GPU_CMD_RESOURCE_CREATE_2D`].
    pub hdr: WddmGpuCtrlHdr,
    /// Non-zero id the driver chooses.
    pub resource_id: u32,
    /// `VIRTIO_GPU_FORMAT_*`.
    pub format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// `struct virtio_gpu_resource_unref`; `struct virtio_gpu_resource_detach_backing` has the same
/// fields ([`WddmGpuResourceDetachBacking`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuResourceUnref {
    /// Header, type [`VIRTIO_GPU_CMD_RESOURCE_UNREF`] or
    /// [`VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING`].
    pub hdr: WddmGpuCtrlHdr,
    /// The resource.
    pub resource_id: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_resource_detach_backing`.
pub type WddmGpuResourceDetachBacking = WddmGpuResourceUnref;

/// `struct virtio_gpu_set_scanout`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuSetScanout {
    /// Header, type [`VIRTIO_GPU_CMD_SET_SCANOUT`].
    pub hdr: WddmGpuCtrlHdr,
    /// The part of the resource shown.
    pub r: WddmGpuRect,
    /// The scanout.
    pub scanout_id: u32,
    /// The resource shown; 0 turns the scanout off.
    pub resource_id: u32,
}

/// `struct virtio_gpu_resource_flush`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuResourceFlush {
    /// Header, type [`VIRTIO_GPU_CMD_RESOURCE_FLUSH`].
    pub hdr: WddmGpuCtrlHdr,
    /// The changed part, in resource coordinates.
    pub r: WddmGpuRect,
    /// The resource.
    pub resource_id: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_transfer_to_host_2d`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuTransferToHost2d {
    /// Header, type [`VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D`].
    pub hdr: WddmGpuCtrlHdr,
    /// The part of the resource copied.
    pub r: WddmGpuRect,
    /// Offset in the backing of the rectangle's first pixel.
    pub offset: u64,
    /// The resource.
    pub resource_id: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_resource_attach_backing`, followed by `nr_entries` [`WddmGpuMemEntry`]s.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuResourceAttachBacking {
    /// Header, type [`VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING`].
    pub hdr: WddmGpuCtrlHdr,
    /// The resource.
    pub resource_id: u32,
    /// Entries that follow, at most [`WDDM_GPU_MAX_BACKING_ENTRIES`].
    pub nr_entries: u32,
}

/// `struct virtio_gpu_mem_entry`: one guest-physical range of a backing.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuMemEntry {
    /// Guest-physical address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_get_edid`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuGetEdid {
    /// Header, type [`VIRTIO_GPU_CMD_GET_EDID`].
    pub hdr: WddmGpuCtrlHdr,
    /// The scanout.
    pub scanout: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_resp_edid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct WddmGpuRespEdid {
    /// Header, type [`VIRTIO_GPU_RESP_OK_EDID`].
    pub hdr: WddmGpuCtrlHdr,
    /// Bytes of `edid` used.
    pub size: u32,
    /// Zero.
    pub padding: u32,
    /// The EDID blob.
    pub edid: [u8; 1024],
}

/// `struct virtio_gpu_cursor_pos`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuCursorPos {
    /// The scanout.
    pub scanout_id: u32,
    /// Column of the hot spot.
    pub x: u32,
    /// Row of the hot spot.
    pub y: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct virtio_gpu_update_cursor`, the request of both cursor commands.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WddmGpuUpdateCursor {
    /// Header, type [`VIRTIO_GPU_CMD_UPDATE_CURSOR`] or [`VIRTIO_GPU_CMD_MOVE_CURSOR`].
    pub hdr: WddmGpuCtrlHdr,
    /// Where.
    pub pos: WddmGpuCursorPos,
    /// The 64x64 image (UPDATE only); 0 hides the cursor.
    pub resource_id: u32,
    /// Hot spot column in the image (UPDATE only).
    pub hot_x: u32,
    /// Hot spot row in the image (UPDATE only).
    pub hot_y: u32,
    /// Zero.
    pub padding: u32,
}
