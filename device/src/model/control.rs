//! Control-queue wire decoding: request bytes to a typed [`ControlRequest`].

use wddm_gpu_abi::ctrl::{
    WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo,
    VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
    WDDM_GPU_CMD_PREEMPT, WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET,
    WDDM_GPU_CMD_SET_SCANOUT_VRAM, WDDM_GPU_CMD_SUBMIT, WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::status::WddmGpuCmdRegisterStatusPage;
use wddm_gpu_abi::submit::WddmGpuCmdSubmit;
use zerocopy::FromBytes;

use crate::model::decode::body;
pub use crate::model::decode::DecodeError;
use crate::model::display::command::{self as display_command, DisplayCommand};
use crate::model::display::resource::MAX_BACKING_ENTRIES;
use crate::model::display::wire::{MemEntry, ResourceAttachBacking};

/// Largest request the device reads from a control descriptor chain: an ATTACH_BACKING with
/// its most entries.
pub const MAX_REQUEST_SIZE: usize = std::mem::size_of::<ResourceAttachBacking>()
    + MAX_BACKING_ENTRIES as usize * std::mem::size_of::<MemEntry>();

/// A decoded control request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlRequest {
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
    /// Any other type.
    Unknown(u32),
}

/// Decodes a request.
pub fn decode(bytes: &[u8]) -> Result<ControlRequest, DecodeError> {
    let (hdr, _) = WddmGpuCtrlHdr::read_from_prefix(bytes).map_err(|_| DecodeError::Truncated {
        type_: 0,
        len: bytes.len(),
        needed: std::mem::size_of::<WddmGpuCtrlHdr>(),
    })?;
    if let Some(command) = display_command::decode(hdr.type_, bytes) {
        return command.map(ControlRequest::Display);
    }
    Ok(match hdr.type_ {
        VIRTIO_GPU_CMD_GET_DISPLAY_INFO => ControlRequest::GetDisplayInfo,
        VIRTIO_GPU_CMD_GET_CAPSET_INFO => ControlRequest::GetCapsetInfo(
            body::<WddmGpuGetCapsetInfo>(hdr.type_, bytes)?.capset_index,
        ),
        VIRTIO_GPU_CMD_GET_CAPSET => {
            let cmd = body::<WddmGpuGetCapset>(hdr.type_, bytes)?;
            ControlRequest::GetCapset {
                id: cmd.capset_id,
                version: cmd.capset_version,
            }
        }
        WDDM_GPU_CMD_SUBMIT => ControlRequest::Submit(body(hdr.type_, bytes)?),
        WDDM_GPU_CMD_REGISTER_STATUS_PAGE => ControlRequest::RegisterStatusPage(
            body::<WddmGpuCmdRegisterStatusPage>(hdr.type_, bytes)?.address,
        ),
        WDDM_GPU_CMD_WAIT_EVENT => ControlRequest::WaitEvent,
        WDDM_GPU_CMD_PREEMPT => ControlRequest::Preempt,
        WDDM_GPU_CMD_RESET => ControlRequest::Reset,
        WDDM_GPU_CMD_SET_SCANOUT_VRAM => ControlRequest::SetScanoutVram(body(hdr.type_, bytes)?),
        other => ControlRequest::Unknown(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn decodes_known_commands_and_refuses_truncated_ones() {
        let info = WddmGpuGetCapsetInfo {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
            capset_index: 3,
            padding: 0,
        };
        assert_eq!(
            decode(info.as_bytes()),
            Ok(ControlRequest::GetCapsetInfo(3))
        );
        assert!(matches!(
            decode(&info.as_bytes()[..30]),
            Err(DecodeError::Truncated { needed: 32, .. })
        ));
        let submit = WddmGpuCmdSubmit {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
            submission_fence_id: 5,
            ..Default::default()
        };
        assert!(
            matches!(decode(submit.as_bytes()), Ok(ControlRequest::Submit(s)) if s.submission_fence_id == 5)
        );
        assert!(decode(&submit.as_bytes()[..63]).is_err());
        assert!(decode(&[0u8; 10]).is_err());
        assert_eq!(
            decode(WddmGpuCtrlHdr::with_type(0x0200).as_bytes()),
            Ok(ControlRequest::Unknown(0x0200))
        );
    }
}
