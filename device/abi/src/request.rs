//! One typed reading of a request from the guest: a control-queue request becomes a
//! [`ControlRequest`] (what its response must echo, and the [`ControlCommand`]), a cursor-queue
//! request a [`CursorCommand`]. The device decodes each request once, where it takes it off the
//! ring, and everything after works on these types.
//!
//! Decoding copies the fixed structures out of the bytes (which need not be aligned) and
//! allocates only for an ATTACH_BACKING's entries, whose count the request's own length bounds.

use std::fmt;
use std::mem::size_of;

use zerocopy::{FromBytes, IntoBytes};

use crate::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdResetEngine,
    WddmGpuCmdSetRootPageTable, WddmGpuCmdSubmitVirtual,
};
use crate::ctrl::{
    WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo,
    VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
    VIRTIO_GPU_FLAG_FENCE, VIRTIO_GPU_FLAG_INFO_RING_IDX, WDDM_GPU_CMD_CREATE_CONTEXT,
    WDDM_GPU_CMD_DESTROY_CONTEXT, WDDM_GPU_CMD_PREEMPT, WDDM_GPU_CMD_QUERY_ENGINE_STATUS,
    WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET, WDDM_GPU_CMD_RESET_ENGINE,
    WDDM_GPU_CMD_SET_POWER_STATE, WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE, WDDM_GPU_CMD_SET_SCANOUT_VRAM,
    WDDM_GPU_CMD_SUBMIT, WDDM_GPU_CMD_SUBMIT_VIRTUAL, WDDM_GPU_CMD_WAIT_EVENT,
};
use crate::display::{
    WddmGpuGetEdid, WddmGpuMemEntry, WddmGpuRect, WddmGpuResourceAttachBacking,
    WddmGpuResourceCreate2d, WddmGpuResourceFlush, WddmGpuResourceUnref, WddmGpuSetScanout,
    WddmGpuTransferToHost2d, WddmGpuUpdateCursor, VIRTIO_GPU_CMD_GET_EDID,
    VIRTIO_GPU_CMD_MOVE_CURSOR, VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
    VIRTIO_GPU_CMD_RESOURCE_CREATE_2D, VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING,
    VIRTIO_GPU_CMD_RESOURCE_FLUSH, VIRTIO_GPU_CMD_RESOURCE_UNREF, VIRTIO_GPU_CMD_SET_SCANOUT,
    VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D, VIRTIO_GPU_CMD_UPDATE_CURSOR, WDDM_GPU_MAX_BACKING_ENTRIES,
};
use crate::status::{
    WddmGpuCmdQueryEngineStatus, WddmGpuCmdRegisterStatusPage, WddmGpuCmdSetPowerState,
};
use crate::submit::WddmGpuCmdSubmit;

/// Largest request the device reads from a descriptor chain: an ATTACH_BACKING with its most
/// entries. Longer chains are read up to this.
pub const MAX_REQUEST_SIZE: usize = size_of::<WddmGpuResourceAttachBacking>()
    + WDDM_GPU_MAX_BACKING_ENTRIES as usize * size_of::<WddmGpuMemEntry>();

/// Why a request could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its command's structure (or than a header: type 0).
    Truncated {
        /// Command type (0 if even the header is missing).
        type_: u32,
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { type_, len, needed } => write!(
                f,
                "request type {type_:#x} is {len} bytes, shorter than its {needed}-byte structure"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// The `T` at the start of a request of type `type_`.
fn body<T: FromBytes>(type_: u32, bytes: &[u8]) -> Result<T, DecodeError> {
    T::read_from_prefix(bytes)
        .map(|(value, _)| value)
        .map_err(|_| DecodeError::Truncated {
            type_,
            len: bytes.len(),
            needed: size_of::<T>(),
        })
}

/// The request header fields every response carries back (virtio 1.2 5.7.6.7): the fence flags,
/// `fence_id`, `ctx_id` and `ring_idx`. Linux's virtio_gpu matches a fenced request's answer by
/// them; without them its fence waits run into their timeout. A response is sent only once the
/// command's work is done, so echoing the fence in it is what signals the fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceEcho {
    flags: u32,
    fence_id: u64,
    ctx_id: u32,
    ring_idx: u8,
}

impl FenceEcho {
    /// What a response to a request with this header echoes.
    pub fn of(hdr: &WddmGpuCtrlHdr) -> Self {
        Self {
            flags: hdr.flags & (VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX),
            fence_id: hdr.fence_id,
            ctx_id: hdr.ctx_id,
            ring_idx: hdr.ring_idx,
        }
    }

    /// Whether the driver asked to be told when the work is done.
    pub fn is_fenced(&self) -> bool {
        self.flags & VIRTIO_GPU_FLAG_FENCE != 0
    }

    /// Writes the fields into a response that holds a whole header (one cut short to a tiny
    /// buffer is left as it is).
    pub fn stamp(self, response: &mut [u8]) {
        let Ok((mut hdr, _)) = WddmGpuCtrlHdr::read_from_prefix(response) else {
            return;
        };
        hdr.flags |= self.flags;
        hdr.fence_id = self.fence_id;
        hdr.ctx_id = self.ctx_id;
        hdr.ring_idx = self.ring_idx;
        // The response's bytes need not be aligned for the header: written back as bytes.
        response[..size_of::<WddmGpuCtrlHdr>()].copy_from_slice(hdr.as_bytes());
    }
}

/// A control-queue request: what its response echoes, and what it asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlRequest {
    /// The header fields the response carries back.
    pub echo: FenceEcho,
    /// The command, or why its body could not be read (the header could).
    pub command: Result<ControlCommand, DecodeError>,
}

/// A decoded control command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlCommand {
    /// `GET_DISPLAY_INFO`.
    GetDisplayInfo,
    /// `GET_CAPSET_INFO` for this index.
    GetCapsetInfo(u32),
    /// `GET_CAPSET` for this id and version.
    GetCapset {
        /// Capset id.
        id: u32,
        /// Version.
        version: u32,
    },
    /// A 2D command of the standard device (GET_EDID, resources, scanouts, flushes).
    Display(DisplayCommand),
    /// The device's submission command.
    Submit(WddmGpuCmdSubmit),
    /// Register (non-zero) or unregister (0) the status page at this address.
    RegisterStatusPage(u64),
    /// A request to complete at the next event.
    WaitEvent,
    /// Preempt the running and pending submissions.
    Preempt,
    /// Reset the engine (`DxgkDdiResetFromTimeout`).
    Reset,
    /// Scan out a VRAM surface (`DxgkDdiSetVidPnSourceAddress`).
    SetScanoutVram(WddmGpuCmdSetScanoutVram),
    /// Create a context with GPU virtual addressing (`DxgkDdiCreateContext`).
    CreateContext(WddmGpuCmdCreateContext),
    /// Destroy a context (`DxgkDdiDestroyContext`).
    DestroyContext(WddmGpuCmdDestroyContext),
    /// Bind a context's root page table (`DxgkDdiSetRootPageTable`).
    SetRootPageTable(WddmGpuCmdSetRootPageTable),
    /// Run a DMA buffer at a GPU virtual address (`DxgkDdiSubmitCommandVirtual`).
    SubmitVirtual(WddmGpuCmdSubmitVirtual),
    /// Reset a node (`DxgkDdiResetEngine`).
    ResetEngine(WddmGpuCmdResetEngine),
    /// How a node is doing (`DxgkDdiQueryEngineStatus`, `DxgkDdiQueryCurrentFence`).
    QueryEngineStatus(WddmGpuCmdQueryEngineStatus),
    /// A device power transition (`DxgkDdiSetPowerState`).
    SetPowerState(WddmGpuCmdSetPowerState),
    /// Any other type.
    Unknown(u32),
}

/// A 2D command of the control queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisplayCommand {
    /// `GET_EDID`.
    GetEdid {
        /// The scanout.
        scanout: u32,
    },
    /// `RESOURCE_CREATE_2D`.
    ResourceCreate2d {
        /// The new resource's id.
        resource_id: u32,
        /// `VIRTIO_GPU_FORMAT_*`.
        format: u32,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// `RESOURCE_UNREF`.
    ResourceUnref {
        /// The resource.
        resource_id: u32,
    },
    /// `SET_SCANOUT`.
    SetScanout {
        /// The scanout.
        scanout_id: u32,
        /// The resource shown, 0 for none.
        resource_id: u32,
        /// The part shown.
        rect: WddmGpuRect,
    },
    /// `RESOURCE_FLUSH`.
    ResourceFlush {
        /// The resource.
        resource_id: u32,
        /// The changed part.
        rect: WddmGpuRect,
    },
    /// `TRANSFER_TO_HOST_2D`.
    TransferToHost2d {
        /// The resource.
        resource_id: u32,
        /// The part copied.
        rect: WddmGpuRect,
        /// Backing offset of the rectangle's first pixel.
        offset: u64,
    },
    /// `RESOURCE_ATTACH_BACKING` with the entries that follow the command (`nr_entries` of
    /// them, all present).
    AttachBacking {
        /// The resource.
        resource_id: u32,
        /// The backing's guest ranges, unchecked.
        entries: Vec<WddmGpuMemEntry>,
    },
    /// `RESOURCE_DETACH_BACKING`.
    DetachBacking {
        /// The resource.
        resource_id: u32,
    },
}

/// A cursor-queue command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorCommand {
    /// A new image (resource 0 hides the cursor) at a position.
    Update {
        /// The scanout.
        scanout_id: u32,
        /// Column.
        x: u32,
        /// Row.
        y: u32,
        /// The image's resource, 0 to hide.
        resource_id: u32,
        /// Hot spot column.
        hot_x: u32,
        /// Hot spot row.
        hot_y: u32,
    },
    /// A new position.
    Move {
        /// The scanout.
        scanout_id: u32,
        /// Column.
        x: u32,
        /// Row.
        y: u32,
    },
    /// Any other type.
    Unknown(u32),
}

/// Decodes a control-queue request; an error only when it is shorter than a header.
pub fn decode_control(bytes: &[u8]) -> Result<ControlRequest, DecodeError> {
    let hdr = body::<WddmGpuCtrlHdr>(0, bytes)?;
    Ok(ControlRequest {
        echo: FenceEcho::of(&hdr),
        command: control_command(hdr.type_, bytes),
    })
}

fn control_command(type_: u32, bytes: &[u8]) -> Result<ControlCommand, DecodeError> {
    if let Some(command) = display_command(type_, bytes) {
        return command.map(ControlCommand::Display);
    }
    Ok(match type_ {
        VIRTIO_GPU_CMD_GET_DISPLAY_INFO => ControlCommand::GetDisplayInfo,
        VIRTIO_GPU_CMD_GET_CAPSET_INFO => {
            ControlCommand::GetCapsetInfo(body::<WddmGpuGetCapsetInfo>(type_, bytes)?.capset_index)
        }
        VIRTIO_GPU_CMD_GET_CAPSET => {
            let cmd = body::<WddmGpuGetCapset>(type_, bytes)?;
            ControlCommand::GetCapset {
                id: cmd.capset_id,
                version: cmd.capset_version,
            }
        }
        WDDM_GPU_CMD_SUBMIT => ControlCommand::Submit(body(type_, bytes)?),
        WDDM_GPU_CMD_REGISTER_STATUS_PAGE => ControlCommand::RegisterStatusPage(
            body::<WddmGpuCmdRegisterStatusPage>(type_, bytes)?.address,
        ),
        WDDM_GPU_CMD_WAIT_EVENT => ControlCommand::WaitEvent,
        WDDM_GPU_CMD_PREEMPT => ControlCommand::Preempt,
        WDDM_GPU_CMD_RESET => ControlCommand::Reset,
        WDDM_GPU_CMD_SET_SCANOUT_VRAM => ControlCommand::SetScanoutVram(body(type_, bytes)?),
        WDDM_GPU_CMD_CREATE_CONTEXT => ControlCommand::CreateContext(body(type_, bytes)?),
        WDDM_GPU_CMD_DESTROY_CONTEXT => ControlCommand::DestroyContext(body(type_, bytes)?),
        WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE => ControlCommand::SetRootPageTable(body(type_, bytes)?),
        WDDM_GPU_CMD_SUBMIT_VIRTUAL => ControlCommand::SubmitVirtual(body(type_, bytes)?),
        WDDM_GPU_CMD_RESET_ENGINE => ControlCommand::ResetEngine(body(type_, bytes)?),
        WDDM_GPU_CMD_QUERY_ENGINE_STATUS => ControlCommand::QueryEngineStatus(body(type_, bytes)?),
        WDDM_GPU_CMD_SET_POWER_STATE => ControlCommand::SetPowerState(body(type_, bytes)?),
        other => ControlCommand::Unknown(other),
    })
}

/// Decodes a 2D command of type `type_`; `None` for a type that is not one.
fn display_command(type_: u32, bytes: &[u8]) -> Option<Result<DisplayCommand, DecodeError>> {
    Some(match type_ {
        VIRTIO_GPU_CMD_GET_EDID => body::<WddmGpuGetEdid>(type_, bytes)
            .map(|c| DisplayCommand::GetEdid { scanout: c.scanout }),
        VIRTIO_GPU_CMD_RESOURCE_CREATE_2D => {
            body::<WddmGpuResourceCreate2d>(type_, bytes).map(|c| {
                DisplayCommand::ResourceCreate2d {
                    resource_id: c.resource_id,
                    format: c.format,
                    width: c.width,
                    height: c.height,
                }
            })
        }
        VIRTIO_GPU_CMD_RESOURCE_UNREF => {
            body::<WddmGpuResourceUnref>(type_, bytes).map(|c| DisplayCommand::ResourceUnref {
                resource_id: c.resource_id,
            })
        }
        VIRTIO_GPU_CMD_SET_SCANOUT => {
            body::<WddmGpuSetScanout>(type_, bytes).map(|c| DisplayCommand::SetScanout {
                scanout_id: c.scanout_id,
                resource_id: c.resource_id,
                rect: c.r,
            })
        }
        VIRTIO_GPU_CMD_RESOURCE_FLUSH => {
            body::<WddmGpuResourceFlush>(type_, bytes).map(|c| DisplayCommand::ResourceFlush {
                resource_id: c.resource_id,
                rect: c.r,
            })
        }
        VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D => {
            body::<WddmGpuTransferToHost2d>(type_, bytes).map(|c| {
                DisplayCommand::TransferToHost2d {
                    resource_id: c.resource_id,
                    rect: c.r,
                    offset: c.offset,
                }
            })
        }
        VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING => attach_backing(bytes),
        VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING => {
            body::<WddmGpuResourceUnref>(type_, bytes).map(|c| DisplayCommand::DetachBacking {
                resource_id: c.resource_id,
            })
        }
        _ => return None,
    })
}

/// ATTACH_BACKING with every one of its `nr_entries` entries (the request must hold them).
fn attach_backing(bytes: &[u8]) -> Result<DisplayCommand, DecodeError> {
    let type_ = VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING;
    let command = body::<WddmGpuResourceAttachBacking>(type_, bytes)?;
    let rest = &bytes[size_of::<WddmGpuResourceAttachBacking>()..];
    let entry_size = size_of::<WddmGpuMemEntry>();
    let count = usize::try_from(command.nr_entries).unwrap_or(usize::MAX);
    let truncated = || DecodeError::Truncated {
        type_,
        len: bytes.len(),
        needed: count
            .checked_mul(entry_size)
            .and_then(|entries| entries.checked_add(size_of::<WddmGpuResourceAttachBacking>()))
            .unwrap_or(usize::MAX),
    };
    // Checked against the bytes present before anything is allocated for them.
    let entry_bytes = count
        .checked_mul(entry_size)
        .filter(|len| *len <= rest.len())
        .ok_or_else(truncated)?;
    let entries = rest[..entry_bytes]
        .chunks_exact(entry_size)
        .filter_map(|chunk| WddmGpuMemEntry::read_from_bytes(chunk).ok())
        .collect();
    Ok(DisplayCommand::AttachBacking {
        resource_id: command.resource_id,
        entries,
    })
}

/// Decodes a cursor-queue request.
pub fn decode_cursor(bytes: &[u8]) -> Result<CursorCommand, DecodeError> {
    let type_ = body::<WddmGpuCtrlHdr>(0, bytes)?.type_;
    if type_ != VIRTIO_GPU_CMD_UPDATE_CURSOR && type_ != VIRTIO_GPU_CMD_MOVE_CURSOR {
        return Ok(CursorCommand::Unknown(type_));
    }
    let c = body::<WddmGpuUpdateCursor>(type_, bytes)?;
    let (scanout_id, x, y) = (c.pos.scanout_id, c.pos.x, c.pos.y);
    Ok(if type_ == VIRTIO_GPU_CMD_UPDATE_CURSOR {
        CursorCommand::Update {
            scanout_id,
            x,
            y,
            resource_id: c.resource_id,
            hot_x: c.hot_x,
            hot_y: c.hot_y,
        }
    } else {
        CursorCommand::Move { scanout_id, x, y }
    })
}

#[cfg(test)]
mod tests;
