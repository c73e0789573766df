//! A started device answers on the used ring and raises the queue's interrupt, with EVENT_IDX
//! and without.

use wddm_gpu_abi::caps::WDDM_GPU_CAPSET_ID;
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapsetInfo, WddmGpuRespCapsetInfo, WddmGpuRespDisplayInfo,
    VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_RESP_OK_CAPSET_INFO,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO,
};
use zerocopy::IntoBytes;

use super::requests::display_info;
use super::rig::Rig;
use crate::transport::queue::CONTROL_QUEUE;

fn capset_info() -> WddmGpuGetCapsetInfo {
    WddmGpuGetCapsetInfo {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
        capset_index: 0,
        padding: 0,
    }
}

/// Two requests of one kick are answered on the used ring in order, each with its whole
/// response; the call eventfd is signalled.
fn answers_in_order(event_idx: bool) {
    let mut rig = Rig::new("start", event_idx);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let capset = ring.post(capset_info().as_bytes(), 256);
    let display = ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);

    assert_eq!(
        ring.used(),
        [
            capset.used_entry(size_of::<WddmGpuRespCapsetInfo>()),
            display.used_entry(size_of::<WddmGpuRespDisplayInfo>()),
        ]
    );
    let info: WddmGpuRespCapsetInfo = ring.response(capset);
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_CAPSET_INFO);
    assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
    let info: WddmGpuRespDisplayInfo = ring.response(display);
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_DISPLAY_INFO);
    assert!(
        rig.called(CONTROL_QUEUE),
        "the call eventfd was not signalled"
    );
    assert_eq!(rig.requests(), (2, 0));
}

#[test]
fn requests_are_answered_on_the_used_ring_and_signalled() {
    answers_in_order(false);
}

#[test]
fn requests_are_answered_on_the_used_ring_and_signalled_with_event_idx() {
    answers_in_order(true);
}

/// With EVENT_IDX the device asks for the next kick (`avail_event`) once it has drained the
/// ring, and signals only when the used index passes the driver's `used_event`.
#[test]
fn event_idx_decides_the_interrupt_and_rearms_the_kick() {
    let mut rig = Rig::new("event-idx", true);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(ring.avail_event(), 1, "notifications not enabled again");
    assert!(rig.called(CONTROL_QUEUE));

    // The driver wants an interrupt once the used index passes 1: the second answer.
    ring.set_used_event(1);
    ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(ring.used().len(), 2);
    assert_eq!(ring.avail_event(), 2);
    assert!(
        rig.called(CONTROL_QUEUE),
        "no interrupt once used_event was passed"
    );

    // Only after it passes 5: the third answer is not signalled.
    ring.set_used_event(5);
    ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(ring.used().len(), 3);
    assert!(!rig.called(CONTROL_QUEUE), "signalled against used_event");
}
