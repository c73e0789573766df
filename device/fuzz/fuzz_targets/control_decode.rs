//! The control-queue decoder (`wddm_gpu_abi::request`) on arbitrary request bytes (what a guest puts in a control
//! descriptor chain, up to `MAX_REQUEST_SIZE`).
//!
//! Checked: a request decodes to the command its header names, from the bytes where the wire
//! format puts each field; a refusal is exactly "shorter than the command's structure".

#![no_main]

use libfuzzer_sys::fuzz_target;
use wddm_gpu_abi::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdResetEngine,
    WddmGpuCmdSetRootPageTable, WddmGpuCmdSubmitVirtual,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo,
    VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
    WDDM_GPU_CMD_CREATE_CONTEXT, WDDM_GPU_CMD_DESTROY_CONTEXT, WDDM_GPU_CMD_PREEMPT,
    WDDM_GPU_CMD_QUERY_ENGINE_STATUS, WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET,
    WDDM_GPU_CMD_RESET_ENGINE, WDDM_GPU_CMD_SET_POWER_STATE, WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE,
    WDDM_GPU_CMD_SET_SCANOUT_VRAM, WDDM_GPU_CMD_SUBMIT, WDDM_GPU_CMD_SUBMIT_VIRTUAL,
    WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::display::{
    VIRTIO_GPU_CMD_GET_EDID, VIRTIO_GPU_CMD_RESOURCE_CREATE_2D,
    VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING,
};
use wddm_gpu_abi::request::{
    decode_control, ControlCommand, ControlRequest, DecodeError, FenceEcho, MAX_REQUEST_SIZE,
};
use wddm_gpu_abi::status::{
    WddmGpuCmdQueryEngineStatus, WddmGpuCmdRegisterStatusPage, WddmGpuCmdSetPowerState,
};
use wddm_gpu_abi::submit::WddmGpuCmdSubmit;
use zerocopy::{FromBytes, IntoBytes};

/// The standard 2D commands (RESOURCE_CREATE_2D to DETACH_BACKING, and GET_EDID), decoded by
/// the display module with their own structures.
fn is_display_command(type_: u32) -> bool {
    (VIRTIO_GPU_CMD_RESOURCE_CREATE_2D..=VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING).contains(&type_)
        || type_ == VIRTIO_GPU_CMD_GET_EDID
}

fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn le64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    // The transport never hands over more than this.
    let bytes = &data[..data.len().min(MAX_REQUEST_SIZE)];
    let decoded = decode_control(bytes);
    assert_eq!(
        decoded,
        decode_control(bytes),
        "decoding is a pure function"
    );
    let hdr_size = std::mem::size_of::<WddmGpuCtrlHdr>();
    let needed = |type_: u32| match type_ {
        VIRTIO_GPU_CMD_GET_CAPSET_INFO => std::mem::size_of::<WddmGpuGetCapsetInfo>(),
        VIRTIO_GPU_CMD_GET_CAPSET => std::mem::size_of::<WddmGpuGetCapset>(),
        WDDM_GPU_CMD_SUBMIT => std::mem::size_of::<WddmGpuCmdSubmit>(),
        WDDM_GPU_CMD_REGISTER_STATUS_PAGE => std::mem::size_of::<WddmGpuCmdRegisterStatusPage>(),
        WDDM_GPU_CMD_SET_SCANOUT_VRAM => std::mem::size_of::<WddmGpuCmdSetScanoutVram>(),
        WDDM_GPU_CMD_CREATE_CONTEXT => std::mem::size_of::<WddmGpuCmdCreateContext>(),
        WDDM_GPU_CMD_DESTROY_CONTEXT => std::mem::size_of::<WddmGpuCmdDestroyContext>(),
        WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE => std::mem::size_of::<WddmGpuCmdSetRootPageTable>(),
        WDDM_GPU_CMD_SUBMIT_VIRTUAL => std::mem::size_of::<WddmGpuCmdSubmitVirtual>(),
        WDDM_GPU_CMD_RESET_ENGINE => std::mem::size_of::<WddmGpuCmdResetEngine>(),
        WDDM_GPU_CMD_QUERY_ENGINE_STATUS => std::mem::size_of::<WddmGpuCmdQueryEngineStatus>(),
        WDDM_GPU_CMD_SET_POWER_STATE => std::mem::size_of::<WddmGpuCmdSetPowerState>(),
        _ => hdr_size,
    };
    let request = match decoded {
        Err(DecodeError::Truncated { type_, len, needed }) => {
            assert_eq!((type_, len, needed), (0, bytes.len(), hdr_size));
            assert!(len < hdr_size, "refused a {len}-byte request with a header");
            return;
        }
        Ok(request) => request,
    };
    let (hdr, _) = WddmGpuCtrlHdr::read_from_prefix(bytes).unwrap();
    assert_eq!(request.echo, FenceEcho::of(&hdr));
    let ControlRequest { command, .. } = request;
    let command = match command {
        Err(DecodeError::Truncated {
            type_,
            len,
            needed: n,
        }) => {
            assert_eq!(len, bytes.len());
            assert_eq!(type_, le32(bytes, 0));
            if !is_display_command(type_) {
                assert_eq!(n, needed(type_));
            }
            assert!(len < n, "refused a {len}-byte request needing {n}");
            return;
        }
        Ok(command) => command,
    };
    assert!(bytes.len() >= hdr_size);
    let type_ = le32(bytes, 0);
    assert!(
        bytes.len() >= needed(type_),
        "decoded a truncated {type_:#x}"
    );
    match command {
        ControlCommand::GetDisplayInfo => assert_eq!(type_, VIRTIO_GPU_CMD_GET_DISPLAY_INFO),
        ControlCommand::GetCapsetInfo(index) => {
            assert_eq!(type_, VIRTIO_GPU_CMD_GET_CAPSET_INFO);
            assert_eq!(index, le32(bytes, 24));
        }
        ControlCommand::GetCapset { id, version } => {
            assert_eq!(type_, VIRTIO_GPU_CMD_GET_CAPSET);
            assert_eq!((id, version), (le32(bytes, 24), le32(bytes, 28)));
        }
        ControlCommand::Display(_) => assert!(is_display_command(type_), "{type_:#x}"),
        ControlCommand::Submit(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_SUBMIT);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::RegisterStatusPage(address) => {
            assert_eq!(type_, WDDM_GPU_CMD_REGISTER_STATUS_PAGE);
            assert_eq!(address, le64(bytes, 24));
        }
        ControlCommand::SetScanoutVram(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_SET_SCANOUT_VRAM);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::CreateContext(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_CREATE_CONTEXT);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::DestroyContext(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_DESTROY_CONTEXT);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::SetRootPageTable(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::SubmitVirtual(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_SUBMIT_VIRTUAL);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::ResetEngine(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_RESET_ENGINE);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::SetPowerState(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_SET_POWER_STATE);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::QueryEngineStatus(cmd) => {
            assert_eq!(type_, WDDM_GPU_CMD_QUERY_ENGINE_STATUS);
            assert_eq!(cmd.as_bytes(), &bytes[..cmd.as_bytes().len()]);
        }
        ControlCommand::WaitEvent => assert_eq!(type_, WDDM_GPU_CMD_WAIT_EVENT),
        ControlCommand::Preempt => assert_eq!(type_, WDDM_GPU_CMD_PREEMPT),
        ControlCommand::Reset => assert_eq!(type_, WDDM_GPU_CMD_RESET),
        ControlCommand::Unknown(unknown) => {
            assert_eq!(unknown, type_);
            assert!(
                ![
                    VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
                    VIRTIO_GPU_CMD_GET_CAPSET_INFO,
                    VIRTIO_GPU_CMD_GET_CAPSET,
                    WDDM_GPU_CMD_SUBMIT,
                    WDDM_GPU_CMD_REGISTER_STATUS_PAGE,
                    WDDM_GPU_CMD_WAIT_EVENT,
                    WDDM_GPU_CMD_PREEMPT,
                    WDDM_GPU_CMD_RESET,
                    WDDM_GPU_CMD_SET_SCANOUT_VRAM,
                    WDDM_GPU_CMD_CREATE_CONTEXT,
                    WDDM_GPU_CMD_DESTROY_CONTEXT,
                    WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE,
                    WDDM_GPU_CMD_SUBMIT_VIRTUAL,
                    WDDM_GPU_CMD_RESET_ENGINE,
                    WDDM_GPU_CMD_QUERY_ENGINE_STATUS,
                    WDDM_GPU_CMD_SET_POWER_STATE,
                ]
                .contains(&unknown)
                    && !is_display_command(unknown)
            );
        }
    }
});
