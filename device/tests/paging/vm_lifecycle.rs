//! VM lifecycle: a ring stop is a pause, not a reset.

use std::time::{Duration, Instant};

use wddm_gpu_abi::build::{self, transfer};
use wddm_gpu_abi::caps::{WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED};
use wddm_gpu_abi::status::WDDM_GPU_EVENT_BAR_CHANGED;
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_frontend_kit::{
    harness::{FRAME_LISTS, PAGE, PAGE_USIZE, STATUS_PAGE, VRAM_GPA},
    pattern::pattern,
    requests::{frames, segment, submit_command},
};

use crate::common::*;

#[test]
fn a_vm_stop_between_a_map_and_its_use_keeps_the_gart_status_page_and_posted_events() {
    let mut h = ready_with_vram("vm-stop-map", BIG_VRAM);
    register_status_page(&mut h);
    let frames = scattered(0, 2);
    let data = pattern(0x5709, 2 * PAGE_USIZE);
    for (i, frame) in frames.iter().enumerate() {
        let part = &data[i * PAGE_USIZE..(i + 1) * PAGE_USIZE];
        h.write_ram(frame * PAGE, part);
    }
    map_pages(&mut h, 8, &frames, FRAME_LISTS, 40);
    let event = h.post_wait_event();
    h.flush_queue();

    // QEMU's `stop` then `cont`.
    let base = h.stop_device();
    assert_eq!(base, h.avail_idx(), "every request was taken");
    assert_logged(&h, "device paused");
    h.resume_device(base);

    // The map is still there: the aperture reads the pages it was given.
    h.write_vram(0x10_0000, &vec![0; data.len()]);
    submit_one_ok(
        &mut h,
        &transfer(
            data.len() as u64,
            segment(APERTURE_SEGMENT, 8 * PAGE),
            segment(VRAM_SEGMENT, 0x10_0000),
        ),
        41,
    );
    assert_bytes(
        &h.read_vram(0x10_0000, data.len()),
        &data,
        "aperture after stop/cont",
    );
    assert_logged(&h, "device resumed");
    // The WAIT_EVENT posted before the stop is answered, and the status page still written.
    submit_one_ok(&mut h, &build::fence(0x42), 42);
    assert_fence_event(&mut h, event, 0x42);
    assert_next_submission_works(&mut h, 43, true);
}

#[test]
fn a_bar_change_while_stopped_reaches_the_status_page_and_events_only_after_cont() {
    let mut h = ready("vm-stop-bar");
    register_status_page(&mut h);
    let event = h.post_wait_event();
    h.flush_queue();
    let base = h.stop_device();
    let page = status_page_bytes(&h);
    // QEMU 11.1 drops the shared-memory BAR from the memory table when it stops the device.
    h.remove_vram_region();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        status_page_bytes(&h),
        page,
        "guest RAM written while the rings were stopped"
    );
    assert!(!h.is_answered(&event), "an event answered while stopped");
    h.resume_device(base);
    let answer = h.wait_event(event);
    assert_eq!(
        (answer.kind, answer.bar_state),
        (WDDM_GPU_EVENT_BAR_CHANGED, WDDM_GPU_BAR_STATE_NOT_MAPPED),
        "{answer:?}"
    );
    assert_eq!(
        h.status_page(STATUS_PAGE).bar_state,
        WDDM_GPU_BAR_STATE_NOT_MAPPED
    );
    h.add_vram_region(VRAM_GPA);
    assert_eq!(h.capset().header.vram_bar.state, WDDM_GPU_BAR_STATE_KNOWN);
    assert_eq!(
        h.status_page(STATUS_PAGE).bar_state,
        WDDM_GPU_BAR_STATE_KNOWN
    );
}

#[test]
fn a_vm_stop_mid_transfer_parks_the_engine_holds_answers_and_cont_finishes_the_work() {
    let mut h = ready_with_vram("vm-stop-transfer", BIG_VRAM);
    register_status_page(&mut h);
    // Long enough (2.5 GiB) to be caught running by a stop even on a loaded machine, where
    // the stop can take tens of milliseconds to arrive; short enough to finish after `cont`.
    const PACKETS: u64 = 160;
    let mut dma = Dma::default();
    for _ in 0..PACKETS {
        dma.push(&transfer(
            LONG_LENGTH,
            segment(VRAM_SEGMENT, LONG_SOURCE),
            segment(VRAM_SEGMENT, LONG_DESTINATION),
        ));
    }
    let source = pattern(0x70a5, usize::try_from(LONG_LENGTH).unwrap());
    h.write_vram(LONG_SOURCE, &source);
    h.write_vram(
        LONG_DESTINATION,
        &vec![0; usize::try_from(LONG_LENGTH).unwrap()],
    );
    h.write_ram(LONG_DMA, dma.bytes());
    let long = h.post_submit(&submit_command(LONG_DMA, dma.len(), 50));
    let (queued, _) = queued_submission(&mut h, 51);
    let event = h.post_wait_event();
    // The stop must find all three taken: the queue worker gets to their kicks in its time.
    h.flush_queue();
    while h.read_vram(LONG_DESTINATION, 64) != source[..64] {
        assert!(h.backend.is_running(), "backend died:\n{}", h.backend.log());
        std::thread::sleep(Duration::from_micros(100));
    }

    let sent = Instant::now();
    let base = h.stop_device();
    println!("GET_VRING_BASE answered after {:?}", sent.elapsed());
    assert_eq!(base, h.avail_idx(), "every request was taken");
    assert_logged(&h, "engine parked mid-submission (fence 50)");
    // Nothing is written to the ring while it is stopped, and the engine waits.
    let used_at_stop = h.device_used_idx();
    let progress = h.read_vram(QUEUED_AREA, 0x200);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        h.device_used_idx(),
        used_at_stop,
        "the device wrote to the ring while it was stopped"
    );
    assert_eq!(
        h.read_vram(QUEUED_AREA, 0x200),
        progress,
        "work ran while paused"
    );

    h.resume_device(base);
    let response = h.wait_submit(long);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, dma.packets, "{response:?}");
    assert_eq!(
        response.bytes_transferred,
        PACKETS * LONG_LENGTH,
        "{response:?}"
    );
    assert_bytes(
        &h.read_vram(LONG_DESTINATION, usize::try_from(LONG_LENGTH).unwrap()),
        &source,
        "transfer finished after cont",
    );
    let response = h.wait_submit(queued);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(h.status_page(STATUS_PAGE).completed_fence, 51);
    submit_one_ok(&mut h, &build::fence(0x52), 0x52);
    assert_fence_event(&mut h, event, 0x52);
}

#[test]
fn a_ring_restarted_at_another_index_is_a_reset_that_drops_held_answers() {
    let (mut h, event, long) = running_over_a_mapped_gart("restart-other-index", 60);
    let base = h.stop_device();
    assert_logged(&h, "engine parked mid-submission (fence 61)");
    assert_ne!(base, 0);
    let used_at_stop = h.device_used_idx();

    // What QEMU 11.1 does after a guest reset of vhost-user-test-device-pci: no RESET_DEVICE,
    // the rings set up anew from index 0.
    h.abandon(event);
    h.abandon(long);
    h.start_device_anew();
    h.assert_still_serving();
    assert_logged(&h, "device reset: control queue restarted at avail index 0");
    let response = {
        let mut dma = Dma::default();
        dma.push(&transfer(
            0x10,
            segment(APERTURE_SEGMENT, 8 * PAGE),
            segment(VRAM_SEGMENT, 0x1000),
        ));
        submit_dma(&mut h, &dma, 62)
    };
    assert_eq!(
        status(&response),
        Some(SubmitStatus::UnmappedAperture),
        "the GART survived a reset: {response:?}"
    );
    // The held answers (the long submission's RESET, nothing for the WAIT_EVENT) were dropped:
    // the new ring holds only the new requests' answers.
    assert!(
        h.device_used_idx() <= 2,
        "old answers written to the new ring (used index was {used_at_stop} at the stop)"
    );
    assert_next_submission_works(&mut h, 63, false);
}

#[test]
fn reset_device_while_stopped_resets_and_the_next_start_serves() {
    let mut h = ready_with_vram("stopped-reset", BIG_VRAM);
    map_pages(&mut h, 8, &scattered(0, 2), FRAME_LISTS, 70);
    let long = long_submission(&mut h, LONG_DMA, 71, None);
    wait_until_running(&h);
    // QEMU 10's vhost-user-gpu-pci on a guest reset: GET_VRING_BASE, then RESET_DEVICE.
    h.stop_device();
    h.reset_device();
    assert_logged(&h, "device reset (RESET_DEVICE)");
    h.abandon(long);
    h.start_device_anew();
    assert_aperture_page_8_unmapped(&mut h, 72);
    assert_next_submission_works(&mut h, 73, false);
}

#[test]
fn a_queued_submission_sees_the_bar_where_it_was_when_it_was_queued() {
    let mut h = ready_with_vram("queued-bar-window", BIG_VRAM);
    // Something to wait behind: 1 GiB of VRAM copies.
    let mut long = Dma::default();
    for _ in 0..64 {
        long.push(&transfer(
            LONG_LENGTH,
            segment(VRAM_SEGMENT, LONG_SOURCE),
            segment(VRAM_SEGMENT, LONG_DESTINATION),
        ));
    }
    h.write_ram(LONG_DMA, long.bytes());
    let running = h.post_submit(&submit_command(LONG_DMA, long.len(), 80));
    // Queued behind it: pages at the BAR's address, which are VRAM, not RAM.
    h.write_frame_list(FRAME_LISTS, &[VRAM_GPA / PAGE + 5]);
    let mut dma = Dma::default();
    dma.push(&transfer(
        0x100,
        frames(FRAME_LISTS, 1, 0),
        segment(VRAM_SEGMENT, QUEUED_AREA),
    ));
    h.write_ram(QUEUED_DMA, dma.bytes());
    h.write_vram(QUEUED_AREA, &[SENTINEL; 0x100]);
    let queued = h.post_submit(&submit_command(QUEUED_DMA, dma.len(), 81));
    h.flush_queue();
    // The BAR moves while it waits; its memory snapshot still maps the old address.
    h.remove_vram_region();
    h.add_vram_region(VRAM_GPA - BIG_VRAM);
    let response = h.wait_submit(running);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    let response = h.wait_submit(queued);
    assert_eq!(
        status(&response),
        Some(SubmitStatus::FrameInVram),
        "frames at the old BAR address passed as RAM: {response:?}"
    );
    assert_eq!(h.read_vram(QUEUED_AREA, 0x100), [SENTINEL; 0x100]);
}
