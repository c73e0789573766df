//! Building the standard 2D requests ([`crate::display`]) as a driver sends them: the backend's
//! tests, its benchmark's display client and the fuzz seeds build them here. Each returns the
//! wire struct, so a hostile test can corrupt any field before sending it.

use zerocopy::IntoBytes;

use crate::ctrl::WddmGpuCtrlHdr;
use crate::display::{
    WddmGpuGetEdid, WddmGpuMemEntry, WddmGpuRect, WddmGpuResourceAttachBacking,
    WddmGpuResourceCreate2d, WddmGpuResourceDetachBacking, WddmGpuResourceFlush,
    WddmGpuResourceUnref, WddmGpuSetScanout, WddmGpuTransferToHost2d, WddmGpuUpdateCursor,
    VIRTIO_GPU_CMD_GET_EDID, VIRTIO_GPU_CMD_MOVE_CURSOR, VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
    VIRTIO_GPU_CMD_RESOURCE_CREATE_2D, VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING,
    VIRTIO_GPU_CMD_RESOURCE_FLUSH, VIRTIO_GPU_CMD_RESOURCE_UNREF, VIRTIO_GPU_CMD_SET_SCANOUT,
    VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D, VIRTIO_GPU_CMD_UPDATE_CURSOR,
};

/// A rectangle.
pub fn rect(x: u32, y: u32, width: u32, height: u32) -> WddmGpuRect {
    WddmGpuRect {
        x,
        y,
        width,
        height,
    }
}

/// GET_EDID of `scanout`.
pub fn get_edid(scanout: u32) -> WddmGpuGetEdid {
    WddmGpuGetEdid {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_EDID),
        scanout,
        padding: 0,
    }
}

/// RESOURCE_CREATE_2D.
pub fn resource_create_2d(
    resource_id: u32,
    format: u32,
    width: u32,
    height: u32,
) -> WddmGpuResourceCreate2d {
    WddmGpuResourceCreate2d {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_CREATE_2D),
        resource_id,
        format,
        width,
        height,
    }
}

/// RESOURCE_UNREF.
pub fn resource_unref(resource_id: u32) -> WddmGpuResourceUnref {
    WddmGpuResourceUnref {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_UNREF),
        resource_id,
        padding: 0,
    }
}

/// RESOURCE_DETACH_BACKING.
pub fn detach_backing(resource_id: u32) -> WddmGpuResourceDetachBacking {
    WddmGpuResourceDetachBacking {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING),
        resource_id,
        padding: 0,
    }
}

/// One backing range.
pub fn backing_entry(addr: u64, length: u32) -> WddmGpuMemEntry {
    WddmGpuMemEntry {
        addr,
        length,
        padding: 0,
    }
}

/// RESOURCE_ATTACH_BACKING followed by its entries: the request's bytes.
pub fn attach_backing(resource_id: u32, entries: &[WddmGpuMemEntry]) -> Vec<u8> {
    let command = WddmGpuResourceAttachBacking {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING),
        resource_id,
        nr_entries: u32::try_from(entries.len()).unwrap_or(u32::MAX),
    };
    let mut bytes = command.as_bytes().to_vec();
    bytes.extend_from_slice(entries.as_bytes());
    bytes
}

/// TRANSFER_TO_HOST_2D of `r`, whose first pixel is `offset` bytes into the backing.
pub fn transfer_to_host_2d(
    resource_id: u32,
    r: WddmGpuRect,
    offset: u64,
) -> WddmGpuTransferToHost2d {
    WddmGpuTransferToHost2d {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D),
        r,
        offset,
        resource_id,
        padding: 0,
    }
}

/// SET_SCANOUT showing `r` of the resource (0: none) on `scanout_id`.
pub fn set_scanout(scanout_id: u32, resource_id: u32, r: WddmGpuRect) -> WddmGpuSetScanout {
    WddmGpuSetScanout {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_SET_SCANOUT),
        r,
        scanout_id,
        resource_id,
    }
}

/// RESOURCE_FLUSH of `r`.
pub fn resource_flush(resource_id: u32, r: WddmGpuRect) -> WddmGpuResourceFlush {
    WddmGpuResourceFlush {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_FLUSH),
        r,
        resource_id,
        padding: 0,
    }
}

/// UPDATE_CURSOR: the 64x64 image of `resource_id` (0 hides it) with its hot spot at (`x`, `y`).
pub fn update_cursor(
    scanout_id: u32,
    (x, y): (u32, u32),
    resource_id: u32,
    (hot_x, hot_y): (u32, u32),
) -> WddmGpuUpdateCursor {
    let mut command = move_cursor(scanout_id, (x, y));
    command.hdr.type_ = VIRTIO_GPU_CMD_UPDATE_CURSOR;
    command.resource_id = resource_id;
    command.hot_x = hot_x;
    command.hot_y = hot_y;
    command
}

/// MOVE_CURSOR to (`x`, `y`).
pub fn move_cursor(scanout_id: u32, (x, y): (u32, u32)) -> WddmGpuUpdateCursor {
    let mut command = WddmGpuUpdateCursor {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_MOVE_CURSOR),
        ..Default::default()
    };
    command.pos.scanout_id = scanout_id;
    command.pos.x = x;
    command.pos.y = y;
    command
}
