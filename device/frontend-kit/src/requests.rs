//! Requests and packets the tests, the benchmark and the fuzz target post, built from
//! `wddm_gpu_abi`'s wire structs and builders.

use wddm_gpu_abi::build::Endpoint;
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_CMD_SUBMIT};
use wddm_gpu_abi::packet::WddmGpuPacketFence;
use wddm_gpu_abi::submit::{
    SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING,
};

/// A paging submission of `[0, size)` of the DMA buffer at `address`.
pub fn submit_command(address: u64, size: u32, fence_id: u32) -> WddmGpuCmdSubmit {
    WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: address,
        dma_buffer_segment_id: 0,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: size,
        start_offset: 0,
        end_offset: size,
        submission_fence_id: fence_id,
        node_ordinal: 0,
        reserved: 0,
    }
}

/// The status a completion reports (`None` for a value this build does not know).
pub fn status(response: &WddmGpuRespSubmit) -> Option<SubmitStatus> {
    SubmitStatus::from_raw(response.status)
}

/// A 16-byte packet with an opcode the device does not know: a FENCE's bytes (header, then
/// zeros) under another opcode. Only tests need it, so it is not in `build`.
pub fn unknown_packet(opcode: u16) -> WddmGpuPacketFence {
    let mut packet = wddm_gpu_abi::build::fence(0);
    packet.header.opcode = opcode;
    packet
}

/// A segment endpoint.
pub fn segment(id: u32, address: u64) -> Endpoint {
    Endpoint::Segment { id, address }
}

/// A frame-list endpoint.
pub fn frames(list_address: u64, frame_count: u32, byte_offset: u32) -> Endpoint {
    Endpoint::Frames {
        list_address,
        frame_count,
        byte_offset,
    }
}
