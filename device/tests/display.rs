//! The standard virtio-gpu side of the device through the real backend binary: response headers
//! echo the request's fence, the 2D command set answers good and hostile requests, and the
//! display socket QEMU hands over carries what the guest shows.

mod harness;

use harness::{submit_command, Harness, BUFFER_SIZE, DMA_BUFFER};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_CMD_GET_DISPLAY_INFO, VIRTIO_GPU_RESP_ERR_UNSPEC,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO, WDDM_GPU_RESP_SUBMIT,
};
use zerocopy::IntoBytes;

const HDR_SIZE: usize = std::mem::size_of::<WddmGpuCtrlHdr>();
const VIRTIO_GPU_FLAG_FENCE: u32 = 1;
const VIRTIO_GPU_FLAG_INFO_RING_IDX: u32 = 2;

/// A request header with a fence.
fn fenced(type_: u32, fence_id: u64, ctx_id: u32, ring_idx: u8) -> WddmGpuCtrlHdr {
    WddmGpuCtrlHdr {
        type_,
        flags: VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX,
        fence_id,
        ctx_id,
        ring_idx,
        padding: [0; 3],
    }
}

/// The response header carries the request's fence fields back, whatever the answer.
fn assert_echoes(response: WddmGpuCtrlHdr, request: WddmGpuCtrlHdr, type_: u32) {
    assert_eq!(response.type_, type_, "{response:?}");
    assert_eq!(response.flags, request.flags, "{response:?}");
    assert_eq!(response.fence_id, request.fence_id, "{response:?}");
    assert_eq!(response.ctx_id, request.ctx_id, "{response:?}");
    assert_eq!(response.ring_idx, request.ring_idx, "{response:?}");
}

#[test]
fn responses_echo_the_request_fence_flag_id_context_and_ring() {
    let mut h = Harness::ready("fence-echo");
    // An answer made at once.
    let request = fenced(VIRTIO_GPU_CMD_GET_DISPLAY_INFO, 0x1234_5678_9abc, 7, 3);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), request, VIRTIO_GPU_RESP_OK_DISPLAY_INFO);
    // An error answer.
    let request = fenced(0xdead_beef, 99, 1, 63);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), request, VIRTIO_GPU_RESP_ERR_UNSPEC);
    // An answer made later, by the engine thread (an empty submission).
    let mut command = submit_command(DMA_BUFFER, 0, 5);
    command.hdr = fenced(command.hdr.type_, 41, 0, 0);
    let reply = h.request(command.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), command.hdr, WDDM_GPU_RESP_SUBMIT);
    // Without a fence nothing is set.
    let request = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_eq!(reply.hdr().flags, 0);
    assert!(reply.bytes.len() > HDR_SIZE);
}
