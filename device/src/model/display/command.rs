//! Decoding of the 2D commands (control queue) and the cursor commands (cursor queue).

use zerocopy::FromBytes;

use super::wire::{
    GetEdid, MemEntry, ResourceAttachBacking, ResourceCreate2d, ResourceFlush, ResourceOnly,
    SetScanout, TransferToHost2d, UpdateCursor, WireRect, CMD_GET_EDID, CMD_MOVE_CURSOR,
    CMD_RESOURCE_ATTACH_BACKING, CMD_RESOURCE_CREATE_2D, CMD_RESOURCE_DETACH_BACKING,
    CMD_RESOURCE_FLUSH, CMD_RESOURCE_UNREF, CMD_SET_SCANOUT, CMD_TRANSFER_TO_HOST_2D,
    CMD_UPDATE_CURSOR,
};
use crate::model::decode::{body, DecodeError};

/// A 2D command of the control queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisplayCommand {
    GetEdid {
        scanout: u32,
    },
    ResourceCreate2d {
        resource_id: u32,
        format: u32,
        width: u32,
        height: u32,
    },
    ResourceUnref {
        resource_id: u32,
    },
    SetScanout {
        scanout_id: u32,
        resource_id: u32,
        rect: WireRect,
    },
    ResourceFlush {
        resource_id: u32,
        rect: WireRect,
    },
    TransferToHost2d {
        resource_id: u32,
        rect: WireRect,
        offset: u64,
    },
    /// The entries that follow the command (`nr_entries` of them, all present).
    AttachBacking {
        resource_id: u32,
        entries: Vec<MemEntry>,
    },
    DetachBacking {
        resource_id: u32,
    },
}

/// A cursor-queue command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorCommand {
    /// A new image (resource 0 hides the cursor) at a position.
    Update {
        scanout_id: u32,
        x: u32,
        y: u32,
        resource_id: u32,
        hot_x: u32,
        hot_y: u32,
    },
    /// A new position.
    Move { scanout_id: u32, x: u32, y: u32 },
}

/// Decodes a 2D command of type `type_`; `None` for a type that is not one.
pub fn decode(type_: u32, bytes: &[u8]) -> Option<Result<DisplayCommand, DecodeError>> {
    Some(match type_ {
        CMD_GET_EDID => {
            body::<GetEdid>(type_, bytes).map(|c| DisplayCommand::GetEdid { scanout: c.scanout })
        }
        CMD_RESOURCE_CREATE_2D => {
            body::<ResourceCreate2d>(type_, bytes).map(|c| DisplayCommand::ResourceCreate2d {
                resource_id: c.resource_id,
                format: c.format,
                width: c.width,
                height: c.height,
            })
        }
        CMD_RESOURCE_UNREF => {
            body::<ResourceOnly>(type_, bytes).map(|c| DisplayCommand::ResourceUnref {
                resource_id: c.resource_id,
            })
        }
        CMD_SET_SCANOUT => body::<SetScanout>(type_, bytes).map(|c| DisplayCommand::SetScanout {
            scanout_id: c.scanout_id,
            resource_id: c.resource_id,
            rect: c.r,
        }),
        CMD_RESOURCE_FLUSH => {
            body::<ResourceFlush>(type_, bytes).map(|c| DisplayCommand::ResourceFlush {
                resource_id: c.resource_id,
                rect: c.r,
            })
        }
        CMD_TRANSFER_TO_HOST_2D => {
            body::<TransferToHost2d>(type_, bytes).map(|c| DisplayCommand::TransferToHost2d {
                resource_id: c.resource_id,
                rect: c.r,
                offset: c.offset,
            })
        }
        CMD_RESOURCE_ATTACH_BACKING => attach_backing(bytes),
        CMD_RESOURCE_DETACH_BACKING => {
            body::<ResourceOnly>(type_, bytes).map(|c| DisplayCommand::DetachBacking {
                resource_id: c.resource_id,
            })
        }
        _ => return None,
    })
}

/// ATTACH_BACKING with every one of its `nr_entries` entries (the request must hold them).
fn attach_backing(bytes: &[u8]) -> Result<DisplayCommand, DecodeError> {
    let type_ = CMD_RESOURCE_ATTACH_BACKING;
    let command = body::<ResourceAttachBacking>(type_, bytes)?;
    let rest = &bytes[std::mem::size_of::<ResourceAttachBacking>()..];
    let entry_size = std::mem::size_of::<MemEntry>();
    let count = usize::try_from(command.nr_entries).unwrap_or(usize::MAX);
    let needed = count
        .checked_mul(entry_size)
        .and_then(|entries| entries.checked_add(std::mem::size_of::<ResourceAttachBacking>()))
        .unwrap_or(usize::MAX);
    let entry_bytes = count
        .checked_mul(entry_size)
        .filter(|len| *len <= rest.len());
    let Some(entry_bytes) = entry_bytes else {
        return Err(DecodeError::Truncated {
            type_,
            len: bytes.len(),
            needed,
        });
    };
    // Read entry by entry: the request's bytes need not be aligned for the entries.
    let entries = rest[..entry_bytes]
        .chunks_exact(entry_size)
        .filter_map(|chunk| MemEntry::read_from_bytes(chunk).ok())
        .collect();
    Ok(DisplayCommand::AttachBacking {
        resource_id: command.resource_id,
        entries,
    })
}

/// Decodes a cursor-queue command; `None` for another type.
pub fn decode_cursor(bytes: &[u8]) -> Option<Result<CursorCommand, DecodeError>> {
    let type_ = u32::read_from_prefix(bytes).map(|(t, _)| t).unwrap_or(0);
    if type_ != CMD_UPDATE_CURSOR && type_ != CMD_MOVE_CURSOR {
        return None;
    }
    Some(body::<UpdateCursor>(type_, bytes).map(|c| {
        let (scanout_id, x, y) = (c.pos.scanout_id, c.pos.x, c.pos.y);
        if type_ == CMD_UPDATE_CURSOR {
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
        }
    }))
}
