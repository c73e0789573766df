//! A ring stop pauses the device: nothing is written to the rings until they run again, and a
//! restart at the index the control ring stopped at resumes, held answers first, in order.

use wddm_gpu_abi::ctrl::WDDM_GPU_RESP_SUBMIT;
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_BAR_CHANGED};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};

use super::requests::{assert_copied, post_long_copy, post_wait_event, COPY};
use super::rig::Rig;
use crate::transport::queue::CONTROL_QUEUE;

const BAR_MOVED: u64 = 0xd000_0000;
const BAR_MOVED_AGAIN: u64 = 0xc000_0000;

#[test]
fn a_restart_where_the_ring_stopped_resumes_and_delivers_held_answers_in_order() {
    let mut rig = Rig::new("pause", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let first = post_wait_event(&mut ring);
    let second = post_wait_event(&mut ring);
    let (submit, marks) = post_long_copy(&rig, &mut ring, 7);
    rig.kick(CONTROL_QUEUE);
    let stopped = rig.stop();
    assert_eq!(stopped, 3);
    assert!(
        ring.used().is_empty(),
        "answered before the stop (the copy must still be running)"
    );

    // Two BAR moves while paused (memory tables on the request thread): each completes a posted
    // WAIT_EVENT, whose answer the gate holds; the copy stays parked.
    rig.move_bar(BAR_MOVED);
    rig.move_bar(BAR_MOVED_AGAIN);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        ring.used().is_empty(),
        "written while the rings are stopped"
    );
    assert!(ring.untouched(first, size_of::<WddmGpuRespEvent>()));
    assert!(ring.untouched(second, size_of::<WddmGpuRespEvent>()));

    rig.restart(stopped);
    let used = ring.wait_used(3);
    assert_eq!(
        used,
        [
            first.used_entry(size_of::<WddmGpuRespEvent>()),
            second.used_entry(size_of::<WddmGpuRespEvent>()),
            submit.used_entry(size_of::<WddmGpuRespSubmit>()),
        ],
        "held answers first, in the order they completed, then the resumed copy"
    );
    assert!(
        rig.called(CONTROL_QUEUE),
        "the call eventfd was not signalled"
    );
    let event: WddmGpuRespEvent = ring.response(first);
    assert_eq!(
        (event.kind, event.bar_address),
        (WDDM_GPU_EVENT_BAR_CHANGED, BAR_MOVED)
    );
    let event: WddmGpuRespEvent = ring.response(second);
    assert_eq!(
        (event.kind, event.bar_address),
        (WDDM_GPU_EVENT_BAR_CHANGED, BAR_MOVED_AGAIN)
    );
    let done: WddmGpuRespSubmit = ring.response(submit);
    assert_eq!(done.hdr.type_, WDDM_GPU_RESP_SUBMIT);
    assert_eq!(done.submission_fence_id, 7);
    assert_eq!(done.status, SubmitStatus::Ok as u32);
    assert_eq!(done.bytes_transferred, COPY);
    assert_copied(&rig, &marks);
}
