//! Requests the ring tests post, built from the ABI crate's structures.

use wddm_gpu_abi::build::{self, DmaBufferBuilder};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_CMD_GET_DISPLAY_INFO, WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::status::WddmGpuRespEvent;
use wddm_gpu_abi::submit::WddmGpuRespSubmit;
use zerocopy::IntoBytes;

use super::rig::{Posted, Rig, Ring, DMA};
use crate::testkit::bytes::pattern;
use crate::testkit::gpu_rig::submit_cmd;
use crate::testkit::packets::in_vram;

/// Bytes the long copy moves: far more than one kick may run inline, and enough 1 MiB chunks
/// that the engine is still at it when the ring is stopped right after the kick.
pub const COPY: u64 = 32 << 20;
/// What the copy's source starts and ends with.
pub const MARK: usize = 64 << 10;

/// GET_DISPLAY_INFO.
pub fn display_info() -> Vec<u8> {
    WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO)
        .as_bytes()
        .to_vec()
}

/// Posts a WAIT_EVENT with room for its event.
pub fn post_wait_event(ring: &mut Ring<'_>) -> Posted {
    let request = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT);
    ring.post(
        request.as_bytes(),
        u32::try_from(size_of::<WddmGpuRespEvent>()).unwrap(),
    )
}

/// Posts a SUBMIT copying VRAM `[0, COPY)` to `[COPY, 2 * COPY)` with fence `fence`; the
/// source's first and last `MARK` bytes are a pattern, returned.
pub fn post_long_copy(rig: &Rig, ring: &mut Ring<'_>, fence: u32) -> (Posted, Vec<u8>) {
    let marks = pattern(2 * MARK, 7);
    rig.vram_write(0, &marks[..MARK]);
    rig.vram_write(COPY - MARK as u64, &marks[MARK..]);
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(&build::transfer(COPY, in_vram(0), in_vram(COPY)));
    ring.write(DMA, buffer.bytes());
    let cmd = submit_cmd(DMA, buffer.bytes().len(), fence);
    let posted = ring.post(
        cmd.as_bytes(),
        u32::try_from(size_of::<WddmGpuRespSubmit>()).unwrap(),
    );
    (posted, marks)
}

/// The copy's destination starts and ends with `marks`.
pub fn assert_copied(rig: &Rig, marks: &[u8]) {
    assert!(
        rig.vram(COPY, MARK) == marks[..MARK],
        "copy's start differs"
    );
    assert!(
        rig.vram(2 * COPY - MARK as u64, MARK) == marks[MARK..],
        "copy's end differs"
    );
}
