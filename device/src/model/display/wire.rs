//! The virtio-gpu 2D wire format (virtio 1.2, 5.7.6): command and response types, error codes
//! and the structures of the commands this device answers. Little-endian, as the spec says.

use wddm_gpu_abi::ctrl::WddmGpuCtrlHdr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `VIRTIO_GPU_CMD_RESOURCE_CREATE_2D`.
pub const CMD_RESOURCE_CREATE_2D: u32 = 0x0101;
/// `VIRTIO_GPU_CMD_RESOURCE_UNREF`.
pub const CMD_RESOURCE_UNREF: u32 = 0x0102;
/// `VIRTIO_GPU_CMD_SET_SCANOUT`.
pub const CMD_SET_SCANOUT: u32 = 0x0103;
/// `VIRTIO_GPU_CMD_RESOURCE_FLUSH`.
pub const CMD_RESOURCE_FLUSH: u32 = 0x0104;
/// `VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D`.
pub const CMD_TRANSFER_TO_HOST_2D: u32 = 0x0105;
/// `VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING`.
pub const CMD_RESOURCE_ATTACH_BACKING: u32 = 0x0106;
/// `VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING`.
pub const CMD_RESOURCE_DETACH_BACKING: u32 = 0x0107;
/// `VIRTIO_GPU_CMD_GET_EDID`.
pub const CMD_GET_EDID: u32 = 0x010a;
/// `VIRTIO_GPU_CMD_UPDATE_CURSOR` (cursor queue).
pub const CMD_UPDATE_CURSOR: u32 = 0x0300;
/// `VIRTIO_GPU_CMD_MOVE_CURSOR` (cursor queue).
pub const CMD_MOVE_CURSOR: u32 = 0x0301;

/// `VIRTIO_GPU_RESP_OK_EDID`.
pub const RESP_OK_EDID: u32 = 0x1104;
/// `VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY`.
pub const RESP_ERR_OUT_OF_MEMORY: u32 = 0x1201;
/// `VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID`.
pub const RESP_ERR_INVALID_SCANOUT_ID: u32 = 0x1202;
/// `VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID`.
pub const RESP_ERR_INVALID_RESOURCE_ID: u32 = 0x1203;

/// `struct virtio_gpu_rect`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct WireRect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// `struct virtio_gpu_resource_create_2d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResourceCreate2d {
    pub hdr: WddmGpuCtrlHdr,
    pub resource_id: u32,
    pub format: u32,
    pub width: u32,
    pub height: u32,
}

/// `struct virtio_gpu_resource_unref` and `struct virtio_gpu_resource_detach_backing`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResourceOnly {
    pub hdr: WddmGpuCtrlHdr,
    pub resource_id: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_set_scanout`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SetScanout {
    pub hdr: WddmGpuCtrlHdr,
    pub r: WireRect,
    pub scanout_id: u32,
    pub resource_id: u32,
}

/// `struct virtio_gpu_resource_flush`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResourceFlush {
    pub hdr: WddmGpuCtrlHdr,
    pub r: WireRect,
    pub resource_id: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_transfer_to_host_2d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct TransferToHost2d {
    pub hdr: WddmGpuCtrlHdr,
    pub r: WireRect,
    pub offset: u64,
    pub resource_id: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_resource_attach_backing`, followed by `nr_entries` [`MemEntry`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResourceAttachBacking {
    pub hdr: WddmGpuCtrlHdr,
    pub resource_id: u32,
    pub nr_entries: u32,
}

/// `struct virtio_gpu_mem_entry`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct MemEntry {
    pub addr: u64,
    pub length: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_get_edid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetEdid {
    pub hdr: WddmGpuCtrlHdr,
    pub scanout: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_resp_edid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RespEdid {
    pub hdr: WddmGpuCtrlHdr,
    pub size: u32,
    pub padding: u32,
    pub edid: [u8; 1024],
}

/// `struct virtio_gpu_cursor_pos`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CursorPos {
    pub scanout_id: u32,
    pub x: u32,
    pub y: u32,
    pub padding: u32,
}

/// `struct virtio_gpu_update_cursor` (both cursor commands).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct UpdateCursor {
    pub hdr: WddmGpuCtrlHdr,
    pub pos: CursorPos,
    pub resource_id: u32,
    pub hot_x: u32,
    pub hot_y: u32,
    pub padding: u32,
}
