//! The router: which of the two sibling devices a decoded control command goes to. Display
//! commands (the standard 2D commands, GET_DISPLAY_INFO, SET_SCANOUT_VRAM) go to the display,
//! everything else to the paging GPU. The cursor queue's commands all go to the display.

use wddm_gpu_abi::ctrl::WddmGpuCmdSetScanoutVram;
use wddm_gpu_abi::request::{ControlCommand, DisplayCommand};

/// A control command, with the device that answers it.
#[derive(Debug)]
pub enum Route {
    /// To the 2D display.
    Display(DisplayRequest),
    /// To the paging GPU: never a display command.
    Gpu(ControlCommand),
}

/// A control command the display answers.
#[derive(Debug)]
pub enum DisplayRequest {
    /// GET_DISPLAY_INFO.
    Info,
    /// WDDM_GPU_CMD_SET_SCANOUT_VRAM.
    ScanoutVram(WddmGpuCmdSetScanoutVram),
    /// A standard 2D command.
    Command(DisplayCommand),
}

/// Where `command` goes.
pub fn route(command: ControlCommand) -> Route {
    match command {
        ControlCommand::GetDisplayInfo => Route::Display(DisplayRequest::Info),
        ControlCommand::SetScanoutVram(cmd) => Route::Display(DisplayRequest::ScanoutVram(cmd)),
        ControlCommand::Display(command) => Route::Display(DisplayRequest::Command(command)),
        command => Route::Gpu(command),
    }
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::build::display::{rect, resource_flush};
    use wddm_gpu_abi::ctrl::{
        WddmGpuCtrlHdr, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
        WDDM_GPU_CMD_PREEMPT, WDDM_GPU_CMD_RESET, WDDM_GPU_CMD_SET_SCANOUT_VRAM,
        WDDM_GPU_CMD_SUBMIT, WDDM_GPU_CMD_WAIT_EVENT,
    };
    use wddm_gpu_abi::request::decode_control;
    use zerocopy::IntoBytes;

    use super::*;

    fn routed(bytes: &[u8]) -> Route {
        route(decode_control(bytes).unwrap().command.unwrap())
    }

    fn header(type_: u32) -> Vec<u8> {
        let mut bytes = WddmGpuCtrlHdr::with_type(type_).as_bytes().to_vec();
        // Room for any command's body: the decode reads what its type needs.
        bytes.resize(512, 0);
        bytes
    }

    #[test]
    fn display_commands_go_to_the_display_and_the_rest_to_the_gpu() {
        assert!(matches!(
            routed(&header(VIRTIO_GPU_CMD_GET_DISPLAY_INFO)),
            Route::Display(DisplayRequest::Info)
        ));
        assert!(matches!(
            routed(&header(WDDM_GPU_CMD_SET_SCANOUT_VRAM)),
            Route::Display(DisplayRequest::ScanoutVram(_))
        ));
        assert!(matches!(
            routed(resource_flush(1, rect(0, 0, 1, 1)).as_bytes()),
            Route::Display(DisplayRequest::Command(
                DisplayCommand::ResourceFlush { .. }
            ))
        ));
        for type_ in [
            WDDM_GPU_CMD_SUBMIT,
            WDDM_GPU_CMD_WAIT_EVENT,
            WDDM_GPU_CMD_PREEMPT,
            WDDM_GPU_CMD_RESET,
            VIRTIO_GPU_CMD_GET_CAPSET_INFO,
            0x7777,
        ] {
            assert!(
                matches!(routed(&header(type_)), Route::Gpu(_)),
                "command {type_:#x} went to the display"
            );
        }
    }
}
