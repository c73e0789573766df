//! Completions, faults, fences and BAR changes reach the status page and posted events.

use wddm_gpu_abi::build::{fence, fill};
use wddm_gpu_abi::ctrl::{VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, WDDM_GPU_CMD_PREEMPT};
use wddm_gpu_abi::status::*;
use wddm_gpu_abi::submit::SubmitStatus;
use zerocopy::IntoBytes;

use super::seconds_of_copying;
use crate::testkit::gpu_rig::*;
use crate::testkit::packets::{in_vram, packet_bytes};

#[test]
fn submissions_complete_on_the_engine_thread_after_the_status_page() {
    let mut rig = GpuRig::new("complete");
    rig.register_status_page();
    let page = rig.status_page();
    assert_eq!(page.magic, WDDM_GPU_STATUS_MAGIC);
    assert_eq!((page.bar_state, page.bar_address), (1, VRAM_GPA));
    let (fence, rx) = rig.submit(&packet_bytes(fill(0xa5a5_5a5a, 4096, in_vram(0x1000))), 0);
    let response = submit_response(&rx);
    assert_eq!(
        (response.status, response.submission_fence_id),
        (SubmitStatus::Ok as u32, fence)
    );
    assert_eq!(rig.vram(0x1000, 4), 0xa5a5_5a5au32.to_le_bytes());
    let page = rig.status_page();
    assert_eq!(
        (page.completed_fence, page.submissions_completed),
        (fence, 1)
    );
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(stats.submissions.count, 1);
    assert_eq!(stats.requests, 2, "the registration and the submission");
    assert_eq!(stats.refused_requests, 0);
}

#[test]
fn faults_go_to_the_status_page_ring_and_a_posted_event() {
    let mut rig = GpuRig::new("fault");
    rig.register_status_page();
    let events = rig.post_event();
    let mut bad = packet_bytes(fill(1, 16, in_vram(0)));
    bad[0] = 0x77;
    let packets = [packet_bytes(fill(1, 16, in_vram(0))), bad].concat();
    let (fence, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(response.status, SubmitStatus::UnknownOpcode as u32);
    let delivered = event(&events);
    assert_eq!(delivered.kind, WDDM_GPU_EVENT_FAULT);
    assert_eq!(
        (
            delivered.fault.fence_id,
            delivered.fault.packet_offset,
            delivered.fault.opcode
        ),
        (fence, 48, 0x77)
    );
    let page = rig.status_page();
    assert_eq!((page.fault_head, page.completed_fence), (1, fence));
    let mut record = WddmGpuFaultRecord::default();
    let ring = STATUS + u64::from(WDDM_GPU_FAULT_RING_OFFSET);
    rig.ram_read_into(ring, record.as_mut_bytes());
    assert_eq!(record, delivered.fault);
    // Nothing posted: the next fault is counted as a dropped event.
    let (_, rx) = rig.submit(&packets, 1);
    submit_response(&rx);
    assert_eq!(rig.status_page().events_dropped, 1);
    assert_eq!(rig.status_page().fault_head, 2);
}

#[test]
fn the_fault_ring_never_overwrites_unconsumed_records() {
    let mut rig = GpuRig::new("ring");
    rig.register_status_page();
    let mut bad = packet_bytes(fill(1, 16, in_vram(0)));
    bad[0] = 0x77;
    for slot in 0..=u64::from(WDDM_GPU_FAULT_RING_ENTRIES) {
        let (_, rx) = rig.submit(&bad, slot % 4);
        submit_response(&rx);
    }
    let page = rig.status_page();
    assert_eq!(
        (page.fault_head, page.faults_dropped),
        (WDDM_GPU_FAULT_RING_ENTRIES, 1)
    );
}

#[test]
fn fence_packets_complete_posted_events_in_order() {
    let mut rig = GpuRig::new("fence");
    rig.register_status_page();
    let events = [rig.post_event(), rig.post_event()];
    let packets = [
        packet_bytes(fence(700)),
        packet_bytes(fill(3, 64, in_vram(0))),
        packet_bytes(fence(701)),
    ]
    .concat();
    let (_, rx) = rig.submit(&packets, 0);
    submit_response(&rx);
    let fences: Vec<u32> = events
        .iter()
        .map(event)
        .map(|e| {
            assert_eq!(e.kind, WDDM_GPU_EVENT_FENCE);
            e.fence_id
        })
        .collect();
    assert_eq!(fences, [700, 701]);
}

#[test]
fn bar_changes_update_the_status_page_and_complete_an_event() {
    let rig = GpuRig::new("bar");
    rig.register_status_page();
    let events = rig.post_event();
    rig.map_bar(0);
    let gone = event(&events);
    assert_eq!(
        (gone.kind, gone.bar_state, gone.bar_generation),
        (WDDM_GPU_EVENT_BAR_CHANGED, 0, 2)
    );
    let events = rig.post_event();
    rig.map_bar(0xd000_0000);
    let moved = event(&events);
    assert_eq!(
        (moved.bar_state, moved.bar_generation, moved.bar_address),
        (1, 3, 0xd000_0000)
    );
    let page = rig.status_page();
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (1, 3, 0xd000_0000)
    );
}

#[test]
fn status_pages_outside_ram_or_unaligned_are_refused() {
    let rig = GpuRig::new("badpage");
    for address in [STATUS + 8, RAM, VRAM_GPA] {
        assert_eq!(
            rig.register_status_page_at(address),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
            "{address:#x}"
        );
    }
}

#[test]
fn a_fence_packet_is_reported_while_the_rest_of_the_buffer_runs() {
    let mut rig = GpuRig::new("fence-early");
    rig.register_status_page();
    let events = rig.post_event();
    // A fence, then seconds of copying.
    let mut packets = packet_bytes(fence(900));
    packets.extend(seconds_of_copying(0));
    let (_, rx) = rig.submit(&packets, 0);
    let fenced = event(&events);
    assert_eq!((fenced.kind, fenced.fence_id), (WDDM_GPU_EVENT_FENCE, 900));
    assert_eq!(rig.status_page().completed_fence, 900);
    assert!(
        rx.try_recv().is_err(),
        "the submission is still running when its fence is reported"
    );
    // End the long tail quickly.
    let preempt = rig.command(WDDM_GPU_CMD_PREEMPT);
    preempt.recv_timeout(WAIT).unwrap();
    assert_eq!(submit_response(&rx).status, SubmitStatus::Preempted as u32);
}

/// Nothing reaches `rx` within 200 ms.
fn no_answer_yet(rx: &std::sync::mpsc::Receiver<Vec<u8>>) {
    let answer = rx.recv_timeout(std::time::Duration::from_millis(200));
    assert!(answer.is_err(), "an answer: {answer:?}");
}

fn set_scanout_vram(rig: &GpuRig, segment_id: u32, address: u64) -> u32 {
    use wddm_gpu_abi::ctrl::{
        WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, WDDM_GPU_CMD_SET_SCANOUT_VRAM,
    };
    use zerocopy::FromBytes;
    let (format, width, height, pitch) = match segment_id {
        0 => (0, 0, 0, 0),
        _ => (2, 64, 32, 256),
    };
    let cmd = WddmGpuCmdSetScanoutVram {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        scanout_id: 0,
        segment_id,
        address,
        format,
        width,
        height,
        pitch,
    };
    let response = rig.request(cmd.as_bytes(), 64).recv_timeout(WAIT).unwrap();
    WddmGpuCtrlHdr::read_from_prefix(&response).unwrap().0.type_
}

#[test]
fn vblanks_of_a_vram_scanout_complete_posted_events_with_the_address_shown() {
    use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
    use zerocopy::FromBytes;
    let rig = GpuRig::new("vblank");
    rig.register_status_page();
    // The aperture (segment 2) is refused, and nothing starts.
    assert_eq!(
        set_scanout_vram(&rig, 2, 0),
        VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER
    );
    let waiting = rig.post_event();
    no_answer_yet(&waiting);
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x10000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let event = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        WddmGpuRespEvent::read_from_bytes(&rx.recv_timeout(WAIT).unwrap()).unwrap()
    };
    let first = event(waiting);
    assert_eq!(first.kind, WDDM_GPU_EVENT_VBLANK);
    assert_eq!(
        (
            first.scanout_id,
            first.scanout_segment_id,
            first.scanout_address
        ),
        (0, 1, 0x10000)
    );
    // At 60 Hz: 30 more vblanks take about half a second, counted without gaps while posted.
    let started = std::time::Instant::now();
    let mut last = first.vblank_count;
    for _ in 0..30 {
        let next = event(rig.post_event());
        assert!(next.vblank_count > last, "{next:?} after {last}");
        last = next.vblank_count;
    }
    let elapsed = started.elapsed();
    assert!(elapsed.as_millis() >= 400, "30 vblanks in {elapsed:?}");
    // A flip: the events report the new address from the vblank it takes effect on.
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x80000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let flipped = (0..3)
        .map(|_| event(rig.post_event()))
        .find(|e| e.scanout_address == 0x80000)
        .expect("the flip within 3 vblanks");
    assert!(flipped.vblank_count > last);
    // Vblanks nobody waited for are not counted as dropped events.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(rig.status_page().events_dropped, 0);
    // Off: one last event with segment 0, then none.
    assert_eq!(set_scanout_vram(&rig, 0, 0), VIRTIO_GPU_RESP_OK_NODATA);
    let last_event = (0..3)
        .map(|_| event(rig.post_event()))
        .find(|e| e.scanout_segment_id == 0)
        .expect("the last vblank");
    assert_eq!(last_event.scanout_address, 0);
    let after = rig.post_event();
    no_answer_yet(&after);
}

#[test]
fn vblanks_come_again_after_a_reset_that_followed_a_pause() {
    use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
    let rig = GpuRig::new("vblank-reset");
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x10000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    assert_eq!(event(&rig.post_event()).kind, WDDM_GPU_EVENT_VBLANK);
    // QEMU's reset: the rings stop (a pause), then the device is reset.
    let _ = rig.gpu.pause();
    rig.gpu.device_reset();
    // The reset turned the scanout off: nothing to report.
    let quiet = rig.post_event();
    no_answer_yet(&quiet);
    // Shown again: the vblanks tick (they stayed paused before).
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x10000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let again = quiet
        .recv_timeout(WAIT)
        .expect("a vblank after the reset and a new SET_SCANOUT_VRAM");
    let again = <WddmGpuRespEvent as zerocopy::FromBytes>::read_from_bytes(&again).unwrap();
    assert_eq!(
        (again.kind, again.scanout_segment_id, again.scanout_address),
        (WDDM_GPU_EVENT_VBLANK, 1, 0x10000)
    );
}

#[test]
fn a_vblank_that_changes_the_scanout_waits_for_the_next_wait_event() {
    use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
    // Long enough for many vblanks at 60 Hz, even on a loaded machine.
    let none_posted = || std::thread::sleep(std::time::Duration::from_millis(300));
    let rig = GpuRig::new("vblank-kept");
    // Shown while no WAIT_EVENT is posted: the flip's vblank is kept, and the ones after it
    // replace it, so the next WAIT_EVENT gets the newest.
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x10000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    none_posted();
    let shown = event(&rig.post_event());
    assert_eq!(
        (shown.kind, shown.scanout_segment_id, shown.scanout_address),
        (WDDM_GPU_EVENT_VBLANK, 1, 0x10000)
    );
    assert!(shown.vblank_count > 1, "{shown:?}");
    // Turned off while none is posted (a driver reposts only after it read its events): the
    // last VBLANK has no successor, so it waits for the next WAIT_EVENT, and then nothing.
    assert_eq!(set_scanout_vram(&rig, 0, 0), VIRTIO_GPU_RESP_OK_NODATA);
    none_posted();
    let off = event(&rig.post_event());
    assert_eq!((off.scanout_segment_id, off.scanout_address), (0, 0));
    no_answer_yet(&rig.post_event());
    // Vblanks nobody waited for are not counted as dropped events.
    assert_eq!(rig.status_page().events_dropped, 0);
}

#[test]
fn a_device_reset_forgets_a_kept_vblank() {
    use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
    let rig = GpuRig::new("vblank-kept-reset");
    assert_eq!(
        set_scanout_vram(&rig, 1, 0x10000),
        VIRTIO_GPU_RESP_OK_NODATA
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    // QEMU's reset: the rings stop, then the device is reset; the scanout is off and what was
    // kept from before is gone with it.
    let _ = rig.gpu.pause();
    rig.gpu.device_reset();
    no_answer_yet(&rig.post_event());
}
