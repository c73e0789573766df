//! Long submissions stopped part way: PREEMPT, RESET, and a virtio reset by the frontend.

use std::time::{Duration, Instant};

use wddm_gpu_abi::build::{self, transfer};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_RESP_PREEMPT, WDDM_GPU_RESP_SUBMIT};
use wddm_gpu_abi::status::{
    WddmGpuRespEvent, WddmGpuRespPreempt, WDDM_GPU_EVENT_CANCELLED, WDDM_GPU_EVENT_FAULT,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::{
    harness::{FRAME_LISTS, PAGE, STATUS_PAGE},
    pattern::pattern,
    requests::{segment, submit_command},
};

use crate::common::*;
use crate::place::*;

#[test]
fn preempt_mid_transfer_returns_the_running_and_queued_submissions() {
    let mut h = ready_with_vram("preempt", BIG_VRAM);
    register_status_page(&mut h);
    assert_next_submission_works(&mut h, 100, true);
    let event = h.post_wait_event();

    let long = long_submission(&mut h, LONG_DMA, 200, None);
    let started = wait_until_running(&h);
    let (queued, queued_cmd) = queued_submission(&mut h, 201);
    // The control queue answers while the engine is busy.
    h.assert_still_serving();
    assert!(!h.is_answered(&long), "the long submission ended early");
    // Let a few packets complete, so the resubmission below resumes part way (not asserted:
    // timing only makes the check more interesting).
    std::thread::sleep(Duration::from_millis(20));
    let sent = Instant::now();
    let preempt = h.post_preempt();
    let answer = h.wait_reply(preempt);
    let preempt_took = sent.elapsed();
    let long = h.wait_reply(long);
    let queued = h.wait_reply(queued);
    println!("long submission running after {started:?}; PREEMPT answered {preempt_took:?} after it was sent");

    let running: WddmGpuRespSubmit = long.exact();
    assert_stopped_part_way(&running, 200, SubmitStatus::Preempted);
    println!(
        "preempted after {} of {LONG_PACKETS} packets",
        running.packets_completed
    );
    let queued_response: WddmGpuRespSubmit = queued.exact();
    assert_eq!(
        queued_response,
        WddmGpuRespSubmit {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT),
            submission_fence_id: 201,
            status: SubmitStatus::Preempted as u32,
            ..Default::default()
        }
    );
    assert!(long.order < queued.order, "returned in submission order");
    assert_eq!(
        h.read_vram(QUEUED_AREA, 0x200),
        [SENTINEL; 0x200],
        "queued one ran"
    );
    assert_eq!(answer.hdr().type_, WDDM_GPU_RESP_PREEMPT);
    assert_eq!(
        answer.exact::<WddmGpuRespPreempt>(),
        WddmGpuRespPreempt {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_PREEMPT),
            preempted_fence: 200,
            last_completed_fence: 100,
            preempted_count: 2,
            reserved: 0,
            // The virtual node had nothing: no fence of its own completed or preempted.
            virtual_preempted_fence: 0,
            virtual_last_completed_fence: 0,
            virtual_preempted_count: 0,
            virtual_reserved: 0,
        }
    );
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(
        (page.preempted_fence, page.last_completed_at_preempt),
        (200, 100)
    );
    assert_eq!(page.completed_fence, 100, "preempted work is not completed");
    assert_eq!(page.submissions_completed, 1);
    assert_eq!(page.fault_head, 0, "a preemption is not a fault");
    assert!(!h.is_answered(&event), "a preemption is not an event");

    // Resubmission with the original fences: the queued one, then the rest of the long one
    // from the packet it stopped at (two packets of it).
    let response = h.submit(&queued_cmd);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(
        h.read_vram(QUEUED_AREA, 0x200),
        [0x0d, 0xf0, 0xad, 0x0b].repeat(0x80)
    );
    let mut rest = submit_command(LONG_DMA, LONG_PACKETS * AFTER_PREFIX, 200);
    rest.start_offset = running.fault_packet_offset;
    rest.end_offset = running.fault_packet_offset + 2 * AFTER_PREFIX;
    let response = h.submit(&rest);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, 2);
    assert_eq!(response.bytes_transferred, 2 * LONG_LENGTH);
    let page = h.status_page(STATUS_PAGE);
    assert_eq!((page.completed_fence, page.submissions_completed), (200, 3));
}

#[test]
fn preempt_with_nothing_pending_returns_nothing() {
    let mut h = ready("preempt-idle");
    register_status_page(&mut h);
    assert_next_submission_works(&mut h, 5, true);
    let before = status_page_bytes(&h);
    let preempt = h.post_preempt();
    assert_eq!(
        h.wait_preempt(preempt),
        WddmGpuRespPreempt {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_PREEMPT),
            preempted_fence: 0,
            last_completed_fence: 5,
            preempted_count: 0,
            reserved: 0,
            // The virtual node had nothing: no fence of its own completed or preempted.
            virtual_preempted_fence: 0,
            virtual_last_completed_fence: 0,
            virtual_preempted_count: 0,
            virtual_reserved: 0,
        }
    );
    assert_eq!(status_page_bytes(&h), before, "status page changed");
    assert_next_submission_works(&mut h, 6, true);
}

#[test]
fn reset_mid_transfer_drops_work_cancels_events_clears_the_gart_and_keeps_vram() {
    let mut h = ready_with_vram("reset", BIG_VRAM);
    register_status_page(&mut h);
    let mapped = scattered(0, 2);
    map_pages(&mut h, 8, &mapped, FRAME_LISTS, 10);
    // VRAM written by the device before the reset.
    let kept = pattern(0x4e, 0x3000);
    let source = scattered(1, 3);
    let place = Place::Frames {
        list: FRAME_LISTS + 0x100,
        frames: source,
        byte_offset: 0,
    };
    place.prepare(&mut h, 0, 0);
    place.write(&h, &kept);
    let kept_at = 61 << 20;
    submit_one_ok(
        &mut h,
        &transfer(
            kept.len() as u64,
            place.endpoint(),
            segment(VRAM_SEGMENT, kept_at),
        ),
        11,
    );
    let events = [h.post_wait_event(), h.post_wait_event()];

    let long = long_submission(&mut h, LONG_DMA, 20, None);
    wait_until_running(&h);
    let (queued, _) = queued_submission(&mut h, 21);
    let sent = Instant::now();
    let reset = h.post_reset();
    h.wait_reset(reset);
    println!("RESET answered {:?} after it was sent", sent.elapsed());
    let long = h.wait_reply(long);
    let queued = h.wait_reply(queued);
    let running: WddmGpuRespSubmit = long.exact();
    assert_stopped_part_way(&running, 20, SubmitStatus::Reset);
    println!(
        "reset after {} of {LONG_PACKETS} packets",
        running.packets_completed
    );
    assert_eq!(
        queued.exact::<WddmGpuRespSubmit>(),
        WddmGpuRespSubmit {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT),
            submission_fence_id: 21,
            status: SubmitStatus::Reset as u32,
            ..Default::default()
        }
    );
    assert!(long.order < queued.order, "returned in submission order");
    assert_eq!(h.read_vram(QUEUED_AREA, 0x200), [SENTINEL; 0x200]);
    for event in events {
        assert_event(
            &mut h,
            event,
            WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_CANCELLED,
                ..Default::default()
            },
        );
    }

    // The status page is no longer registered: nothing more is written to it.
    let page_after_reset = status_page_bytes(&h);
    // The aperture mapping is gone.
    let event = h.post_wait_event();
    let response = assert_aperture_page_8_unmapped(&mut h, 22);
    assert_eq!(response.fault_address, 8 * PAGE);
    // Events still work after a reset.
    let fault: WddmGpuRespEvent = h.wait_reply(event).exact();
    assert_eq!(
        (fault.kind, fault.fault.fence_id),
        (WDDM_GPU_EVENT_FAULT, 22)
    );
    // VRAM kept its contents.
    assert_bytes(&h.read_vram(kept_at, kept.len()), &kept, "VRAM after reset");
    assert_next_submission_works(&mut h, 23, false);
    assert_eq!(
        status_page_bytes(&h),
        page_after_reset,
        "status page written after the reset"
    );
    // Registering again starts afresh.
    register_status_page(&mut h);
    assert_next_submission_works(&mut h, 24, true);
}

#[test]
fn virtio_reset_mid_submission_keeps_the_backend_serving_with_a_clear_gart() {
    let (mut h, event, long) = running_over_a_mapped_gart("virtio-reset", 30);
    let (queued, _) = queued_submission(&mut h, 32);
    // Let the device take the queued request from the ring.
    h.flush_queue();
    let heads = [
        (event.head, "WAIT_EVENT"),
        (long.head, "long"),
        (queued.head, "queued"),
    ];

    // What QEMU 11.1 does when the guest resets vhost-user-test-device-pci: GET_VRING_BASE
    // (the device pauses), then new rings from index 0 (which makes the pause a reset).
    let sent = Instant::now();
    let base = h.stop_control_queue();
    println!(
        "GET_VRING_BASE answered {:?} after it was sent",
        sent.elapsed()
    );
    assert_eq!(base, u32::from(h.avail_idx()), "every request was taken");
    let used_at_stop = h.device_used_idx();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        h.device_used_idx(),
        used_at_stop,
        "the device wrote to the ring after GET_VRING_BASE"
    );
    // Nothing is answered while the ring is stopped: the running submission parks and its
    // answer, like every pending one, is dropped with the ring at the restart.
    for index in h.collected_used()..used_at_stop {
        let used = h.used_entry(index);
        let (_, what) = heads
            .iter()
            .find(|(head, _)| u32::from(*head) == used.id)
            .unwrap_or_else(|| panic!("unexpected used entry {used:?}"));
        println!("answered while stopping: {what} ({used:?})");
        assert_eq!(*what, "long", "a pending request was answered: {used:?}");
        let response: WddmGpuRespSubmit = h.read_reply(&long, used).exact();
        assert_stopped_part_way(&response, 31, SubmitStatus::Reset);
    }
    h.abandon(event);
    h.abandon(long);
    h.abandon(queued);
    assert_eq!(h.read_vram(QUEUED_AREA, 0x200), [SENTINEL; 0x200]);

    h.setup_control_queue();
    assert!(h.backend.is_running(), "backend died:\n{}", h.backend.log());
    h.assert_still_serving();
    // The GART was cleared, and the status page unregistered.
    let page = status_page_bytes(&h);
    assert_aperture_page_8_unmapped(&mut h, 33);
    assert_next_submission_works(&mut h, 34, false);
    assert_eq!(
        status_page_bytes(&h),
        page,
        "status page written after the reset"
    );
    // Work, events and the status page all work on the new ring.
    register_status_page(&mut h);
    let event = h.post_wait_event();
    submit_one_ok(&mut h, &build::fence(0x35), 35);
    assert_fence_event(&mut h, event, 0x35);
}
