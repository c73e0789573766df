//! Scheduling: short work answered inline, long work on the engine thread, budgets per kick,
//! preemption and reset taking work back.

use std::time::Duration;

use wddm_gpu_abi::build::{fence, fill, map_aperture, transfer};
use wddm_gpu_abi::ctrl::*;
use wddm_gpu_abi::status::{WddmGpuRespPreempt, WDDM_GPU_EVENT_CANCELLED};
use wddm_gpu_abi::submit::*;
use zerocopy::{FromBytes, IntoBytes};

use super::seconds_of_copying;
use crate::gpu::scheduler::{INLINE_PACKETS, INLINE_WORK};
use crate::testkit::gpu_rig::*;
use crate::testkit::packets::{in_aperture, in_vram, packet_bytes, APERTURE_SEGMENT};

#[test]
fn preempt_stops_long_work_and_returns_queued_work_in_order() {
    let mut rig = GpuRig::new("preempt");
    rig.register_status_page();
    let (done_fence, rx) = rig.submit(&packet_bytes(fill(9, 4096, in_vram(0))), 0);
    submit_response(&rx);
    // 64 copies of 48 MiB: seconds of work, far more than a preemption needs.
    let long = seconds_of_copying(0);
    let (long_fence, long_rx) = rig.submit(&long, 1);
    let (queued_fence, queued_rx) = rig.submit(&packet_bytes(fill(1, 16, in_vram(0))), 2);
    std::thread::sleep(Duration::from_millis(50));
    let preempt = rig.command(WDDM_GPU_CMD_PREEMPT);
    let answer = WddmGpuRespPreempt::read_from_prefix(&preempt.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0;
    assert_eq!(answer.hdr.type_, WDDM_GPU_RESP_PREEMPT);
    assert_eq!(
        (
            answer.preempted_fence,
            answer.last_completed_fence,
            answer.preempted_count
        ),
        (long_fence, done_fence, 2)
    );
    let long_response = submit_response(&long_rx);
    assert_eq!(long_response.status, SubmitStatus::Preempted as u32);
    assert!(long_response.packets_completed < 64, "{long_response:?}");
    let queued = submit_response(&queued_rx);
    assert_eq!(
        (queued.status, queued.submission_fence_id),
        (SubmitStatus::Preempted as u32, queued_fence)
    );
    let page = rig.status_page();
    assert_eq!(
        (
            page.preempted_fence,
            page.last_completed_at_preempt,
            page.completed_fence
        ),
        (long_fence, done_fence, done_fence)
    );
    // The engine runs again: resubmitted work completes.
    let (_, rx) = rig.submit(&packet_bytes(fill(2, 16, in_vram(0))), 3);
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
}

#[test]
fn reset_drops_work_clears_the_gart_and_registration_and_keeps_vram() {
    let mut rig = GpuRig::new("reset");
    rig.register_status_page();
    let events = rig.post_event();
    let frames: Vec<u64> = (0..4u64).map(|i| DATA / 4096 + i).collect();
    rig.ram_write(LISTS, frames.as_bytes());
    let mapping = packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 4, LISTS, 4, 0));
    let (_, rx) = rig.submit(
        &[
            mapping,
            packet_bytes(fill(0x1234_5678, 4096, in_vram(0x5000))),
        ]
        .concat(),
        0,
    );
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
    let long = seconds_of_copying(0x10_0000);
    let (_, long_rx) = rig.submit(&long, 1);
    let (_, queued_rx) = rig.submit(&packet_bytes(fill(1, 16, in_vram(0))), 2);
    std::thread::sleep(Duration::from_millis(50));
    let reset = rig.command(WDDM_GPU_CMD_RESET);
    assert_eq!(
        WddmGpuCtrlHdr::read_from_prefix(&reset.recv_timeout(WAIT).unwrap())
            .unwrap()
            .0
            .type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    assert_eq!(submit_response(&long_rx).status, SubmitStatus::Reset as u32);
    assert_eq!(
        submit_response(&queued_rx).status,
        SubmitStatus::Reset as u32
    );
    assert_eq!(event(&events).kind, WDDM_GPU_EVENT_CANCELLED);
    // VRAM kept, GART cleared, status page no longer written.
    assert_eq!(rig.vram(0x5000, 4), 0x1234_5678u32.to_le_bytes());
    let before = rig.status_page();
    let through_aperture = packet_bytes(transfer(16, in_aperture(0), in_vram(0)));
    let (_, rx) = rig.submit(&through_aperture, 3);
    assert_eq!(
        submit_response(&rx).status,
        SubmitStatus::UnmappedAperture as u32
    );
    assert_eq!(rig.status_page(), before);
}

#[test]
fn short_submissions_are_answered_on_the_calling_thread() {
    let mut rig = GpuRig::new("inline");
    rig.register_status_page();
    let (fence, rx) = rig.submit(&packet_bytes(fence(77)), 0);
    // No engine-thread hop: the answer is there when the control queue's call returns.
    let response = WddmGpuRespSubmit::read_from_prefix(&rx.try_recv().unwrap())
        .unwrap()
        .0;
    assert_eq!(
        (response.status, response.submission_fence_id),
        (SubmitStatus::Ok as u32, fence)
    );
    assert_eq!(rig.status_page().completed_fence, fence);
}

#[test]
fn work_past_the_inline_budget_continues_on_the_engine_thread() {
    let mut rig = GpuRig::new("deferred");
    let big = INLINE_WORK * 4;
    let mut packets = packet_bytes(fill(0x1111_1111, 4096, in_vram(0)));
    packets.extend(packet_bytes(fill(0x2222_2222, 4096, in_vram(0x1000))));
    packets.extend(packet_bytes(fill(0x3333_3333, big, in_vram(0x10_0000))));
    packets.extend(packet_bytes(fill(0x4444_4444, 4096, in_vram(0x2000))));
    let (fence, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(
        (
            response.status,
            response.submission_fence_id,
            response.packets_completed,
            response.bytes_transferred
        ),
        (SubmitStatus::Ok as u32, fence, 4, 3 * 4096 + big)
    );
    assert_eq!(rig.vram(0, 4), 0x1111_1111u32.to_le_bytes());
    assert_eq!(rig.vram(0x1000, 4), 0x2222_2222u32.to_le_bytes());
    assert_eq!(
        rig.vram(0x10_0000 + big - 4, 4),
        0x3333_3333u32.to_le_bytes()
    );
    assert_eq!(rig.vram(0x2000, 4), 0x4444_4444u32.to_le_bytes());
    // Later short work runs inline again, after the deferred part.
    let (_, rx) = rig.submit(&packet_bytes(fill(5, 16, in_vram(0x3000))), 1);
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
}

#[test]
fn resets_racing_deferred_submissions_never_lose_or_hang_work() {
    let rig = GpuRig::new("defer-race");
    let mut packets = packet_bytes(fence(1));
    packets.extend(packet_bytes(fill(7, INLINE_WORK * 8, in_vram(0))));
    rig.ram_write(DMA, &packets);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rig.gpu.device_reset();
                std::thread::yield_now();
            }
        });
        for fence in 1..=200u32 {
            let cmd = submit_cmd(DMA, packets.len(), fence);
            let rx = rig.request(cmd.as_bytes(), 64);
            // Either answered (done, or stopped by the reset) or dropped with the rings; a
            // lost wake-up would leave the engine stuck and the next submission unanswered.
            if let Ok(bytes) = rx.recv_timeout(WAIT) {
                let response = WddmGpuRespSubmit::read_from_prefix(&bytes).unwrap().0;
                assert_eq!(response.submission_fence_id, fence);
                assert!(
                    [SubmitStatus::Ok as u32, SubmitStatus::Reset as u32]
                        .contains(&response.status),
                    "{response:?}"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Still alive: a last submission completes.
    rig.ram_write(DMA, &packet_bytes(fence(5)));
    let cmd = submit_cmd(DMA, 16, 1000);
    let response = submit_response(&rig.request(cmd.as_bytes(), 64));
    assert_eq!(response.status, SubmitStatus::Ok as u32);
}

#[test]
fn a_buffer_of_many_small_packets_leaves_the_control_queue_after_the_packet_budget() {
    let mut rig = GpuRig::new("packet-budget");
    let count = INLINE_PACKETS as usize * 4;
    let packets: Vec<u8> = (0..count)
        .flat_map(|i| packet_bytes(fence(u32::try_from(i).unwrap() + 1)))
        .collect();
    let (_, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(
        (response.status, response.packets_completed),
        (SubmitStatus::Ok as u32, u32::try_from(count).unwrap())
    );
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(
        (stats.submissions.inline, stats.submissions.engine),
        (0, 1),
        "the rest ran on the engine thread"
    );
}

#[test]
fn the_inline_budget_is_shared_by_every_submission_of_one_kick() {
    let rig = GpuRig::new("kick-budget");
    let piece = INLINE_WORK / 4;
    let packets = packet_bytes(fill(0x5555_5555, piece, in_vram(0)));
    rig.ram_write(DMA, &packets);
    let command = |fence: u32| submit_cmd(DMA, packets.len(), fence);
    // Eight submissions in one kick: four fit the kick's inline budget, the rest go to the
    // engine thread, so a ring full of small submissions cannot hold the control queue.
    let commands: Vec<_> = (1..=8u32).map(command).collect();
    let requests: Vec<_> = commands.iter().map(|cmd| (cmd.as_bytes(), 64)).collect();
    let answers = rig.requests_in_one_kick(&requests);
    for (fence, rx) in (1..=8u32).zip(&answers) {
        let response = submit_response(rx);
        assert_eq!(
            (response.status, response.submission_fence_id),
            (SubmitStatus::Ok as u32, fence)
        );
    }
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(
        (stats.submissions.inline, stats.submissions.engine),
        (4, 4),
        "inline versus engine thread"
    );
    // The engine thread answers before it marks itself free; an engine still busy would
    // rightly queue the next submission, so wait for it to be idle first.
    let deadline = std::time::Instant::now() + WAIT;
    while rig.gpu.stats().snapshot().queue_depth.current != 0 {
        assert!(std::time::Instant::now() < deadline, "engine never idle");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The next kick may run inline again.
    let rx = rig.request(command(9).as_bytes(), 64);
    assert!(rx.try_recv().is_ok(), "answered on the calling thread");
}

#[test]
fn a_reset_taking_back_a_deferred_submission_counts_what_ran_inline() {
    let mut rig = GpuRig::new("drained-deferred");
    for round in 0..300 {
        // A FENCE runs inline; the fill is over the budget and waits for the engine thread.
        let mut packets = packet_bytes(fence(round + 1));
        packets.extend(packet_bytes(fill(7, INLINE_WORK * 64, in_vram(0))));
        let (fence, rx) = rig.submit(&packets, 0);
        // The reset may find it queued (not yet taken by the engine thread) or running.
        let reset = rig.command(WDDM_GPU_CMD_RESET);
        reset.recv_timeout(WAIT).unwrap();
        let response = submit_response(&rx);
        assert_eq!(response.submission_fence_id, fence);
        if response.status == SubmitStatus::Reset as u32 {
            assert!(
                response.packets_completed >= 1,
                "round {round}: the FENCE that ran inline is not counted: {response:?}"
            );
        }
    }
}
