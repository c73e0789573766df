//! A reset after a stop, whether the ring restarts at another index or RESET_DEVICE comes:
//! held answers and running work are dropped unanswered, and every head is free again.

use std::time::Duration;

use vhost_user_backend::VhostUserBackendMut;
use wddm_gpu_abi::ctrl::{WddmGpuRespDisplayInfo, VIRTIO_GPU_RESP_OK_DISPLAY_INFO};
use wddm_gpu_abi::status::WddmGpuRespEvent;

use super::requests::{display_info, post_long_copy, post_wait_event};
use super::rig::{Posted, Rig, Ring};
use crate::transport::queue::CONTROL_QUEUE;

const BAR_MOVED: u64 = 0xd000_0000;

/// Time for an answer that should not come (a dropped copy, a discarded event).
const SETTLE: Duration = Duration::from_millis(200);

/// A device stopped with a WAIT_EVENT's answer held by the gate and a long copy in flight,
/// both on a ring that has carried two chains (heads 0 and 2).
fn stopped_with_work(rig: &mut Rig, ring: &mut Ring<'_>) -> (Posted, u16) {
    rig.set_up(ring);
    let event = post_wait_event(ring);
    post_long_copy(rig, ring, 9);
    rig.kick(CONTROL_QUEUE);
    let stopped = rig.stop();
    assert_eq!(stopped, 2);
    rig.move_bar(BAR_MOVED);
    assert!(ring.used().is_empty());
    (event, stopped)
}

fn assert_display_info(ring: &Ring<'_>, posted: Posted) {
    let info: WddmGpuRespDisplayInfo = ring.response(posted);
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_DISPLAY_INFO);
}

#[test]
fn a_restart_at_another_index_resets_dropping_held_answers_and_running_work() {
    let mut rig = Rig::new("reset-index", false);
    let mem = rig.memory();
    let mut old = Ring::new(&mem, CONTROL_QUEUE);
    stopped_with_work(&mut rig, &mut old);

    // The guest set the ring up anew: QEMU starts it at index 0, with the heads the device held.
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let first = ring.post(&display_info(), 1024);
    let second = ring.post(&display_info(), 1024);
    assert_eq!((first.head, second.head), (0, 2));
    rig.kick(CONTROL_QUEUE);
    std::thread::sleep(SETTLE);

    let len = u32::try_from(size_of::<WddmGpuRespDisplayInfo>()).unwrap();
    assert_eq!(
        ring.used(),
        [(0, len), (2, len)],
        "a held or dropped answer reached the new ring, or a head was still claimed"
    );
    assert_display_info(&ring, first);
    assert_display_info(&ring, second);
    assert_eq!(rig.requests().1, 0, "a request was refused");
}

#[test]
fn reset_device_drops_held_answers_and_running_work() {
    let mut rig = Rig::new("reset-device", false);
    let mem = rig.memory();
    let mut ring = Ring::new(&mem, CONTROL_QUEUE);
    let (event, stopped) = stopped_with_work(&mut rig, &mut ring);

    rig.backend.reset_device();
    // Even a restart at the index the ring stopped at is no resume now: nothing held comes
    // back, and new requests are answered at once.
    rig.restart(stopped);
    let display = ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    std::thread::sleep(SETTLE);

    assert_eq!(
        ring.used(),
        [display.used_entry(size_of::<WddmGpuRespDisplayInfo>())],
        "a held or dropped answer was delivered, or the new request held"
    );
    assert_display_info(&ring, display);
    assert!(ring.untouched(event, size_of::<WddmGpuRespEvent>()));
    assert!(rig.called(CONTROL_QUEUE));
}
