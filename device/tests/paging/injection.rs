//! Fault injection on the paging node, armed through the real `ctl` command and a plan file:
//! a hang that only a RESET ends, a slow start, a lost interrupt the driver recovers by asking
//! (QUERY_ENGINE_STATUS), a chosen packet's fault, a refused and a slow PREEMPT; and each one
//! counted in the statistics and listed by `ctl`.

use std::process::Command;
use std::time::{Duration, Instant};

use wddm_gpu_abi::build::fill;
use wddm_gpu_abi::context::WDDM_GPU_NODE_PAGING;
use wddm_gpu_abi::status::{WDDM_GPU_ENGINE_STATUS_RESPONSIVE, WDDM_GPU_EVENT_FAULT};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::harness::{Harness, DMA_BUFFER, STATUS_PAGE};
use wddm_gpu_frontend_kit::requests::{segment, submit_command};

use crate::common::*;

/// A DMA buffer of three FILLs of 0x100 bytes into VRAM from `at`.
fn three_fills(at: u64) -> Dma {
    let mut dma = Dma::default();
    for i in 0..3u64 {
        dma.push(&fill(
            0x0101_0101,
            0x100,
            segment(VRAM_SEGMENT, at + i * 0x100),
        ));
    }
    dma
}

/// Posts `dma` (written at `gpa`) with `fence`.
fn post(
    h: &mut Harness,
    dma: &Dma,
    gpa: u64,
    fence: u32,
) -> wddm_gpu_frontend_kit::harness::Pending {
    h.write_ram(gpa, dma.bytes());
    h.post_submit(&submit_command(gpa, dma.len(), fence))
}

/// Waits (bounded) until the status page's completed fence is `fence`.
fn wait_completed(h: &Harness, fence: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.status_page(STATUS_PAGE).completed_fence != fence {
        assert!(Instant::now() < deadline, "fence {fence} never completed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn ctl_arms_lists_and_disarms_and_refuses_what_is_not_an_injection() {
    let h = ready("inject-ctl");
    assert_eq!(
        h.backend.ctl_ok("arm hang fence=5"),
        "armed injection 1: hang fence=5\n"
    );
    assert_eq!(
        h.backend
            .ctl_ok("arm lost-interrupt probability=0.5 seed=9 standing"),
        "armed injection 2: lost-interrupt probability=0.5 seed=9 standing\n"
    );
    let listing = h.backend.ctl_ok("list");
    assert!(listing.contains("armed (2):"), "{listing}");
    assert!(
        listing.contains("1  hang fence=5  (seen 0, fired 0)"),
        "{listing}"
    );
    let json: serde_json::Value = serde_json::from_str(&h.backend.ctl_ok("list --json")).unwrap();
    assert_eq!(
        json["armed"][1]["spec"],
        "lost-interrupt probability=0.5 seed=9 standing"
    );

    let refused = h.backend.ctl("arm explode fence=1");
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("unknown action \"explode\""), "{stderr}");
    let refused = h.backend.ctl("arm hang fence=1 nth=2");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("at most one of fence=, nth="),
        "{refused:?}"
    );

    assert_eq!(h.backend.ctl_ok("disarm 1"), "disarmed injection 1\n");
    assert!(!h.backend.ctl("disarm 1").status.success());
    assert_eq!(h.backend.ctl_ok("disarm all"), "disarmed 1 injection(s)\n");
    assert!(h.backend.ctl_ok("list").contains("armed (0):"));
    // Through the vhost-user socket's path too: `.ctl` is appended.
    let output = h.backend.ctl("node");
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("node 0 (paging): running"));
}

#[test]
fn a_hung_submission_ends_only_at_reset_and_the_next_one_runs() {
    let mut h = ready("inject-hang");
    register_status_page(&mut h);
    assert_next_submission_works(&mut h, 10, true);
    h.backend.ctl_ok("arm hang fence=11");
    let hung = post(&mut h, &three_fills(0x1000), DMA_BUFFER, 11);
    let queued = post(&mut h, &three_fills(0x2000), DMA_BUFFER + 0x1000, 12);
    std::thread::sleep(Duration::from_millis(200));
    h.assert_still_serving();
    assert!(!h.is_answered(&hung), "a hung submission was answered");
    assert!(!h.is_answered(&queued), "a submission ran past a hung one");

    // What DxgkDdiQueryEngineStatus would see: not responsive, fence 11 running.
    let status = h.query_engine_status(WDDM_GPU_NODE_PAGING);
    assert_eq!(
        status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
        0,
        "{status:?}"
    );
    assert_eq!(
        (status.current_fence, status.running_fence),
        (10, 11),
        "{status:?}"
    );
    assert!(h.backend.ctl_ok("node").contains("HUNG"));
    // A hung engine does not preempt.
    let preempt = h.post_preempt();
    let preempted = h.wait_preempt(preempt);
    assert_eq!(preempted.preempted_count, 0, "{preempted:?}");
    assert_eq!(preempted.last_completed_fence, 10, "{preempted:?}");
    assert!(!h.is_answered(&hung));

    // DxgkDdiResetFromTimeout: both come back RESET, and the engine works again.
    let reset = h.post_reset();
    h.wait_reset(reset);
    for (pending, fence) in [(hung, 11), (queued, 12)] {
        let response: WddmGpuRespSubmit = h.wait_reply(pending).exact();
        assert_stopped(&response, fence, SubmitStatus::Reset);
    }
    register_status_page(&mut h);
    assert_next_submission_works(&mut h, 13, true);
    let status = h.query_engine_status(WDDM_GPU_NODE_PAGING);
    assert_ne!(
        status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
        0,
        "{status:?}"
    );
    let listing = h.backend.ctl_ok("list");
    assert!(
        listing.contains("injection 1 hang on fence 11"),
        "{listing}"
    );
    assert!(
        listing.contains("armed (0):"),
        "a one-shot stays armed: {listing}"
    );
    let stats = h.backend.stats_table();
    assert!(stats.contains("injections fired: hang 1"), "{stats}");
}

#[test]
fn ctl_gart_lists_the_aperture_mappings_as_runs() {
    let mut h = ready("inspect-gart");
    let frames = [frame(40), frame(41), frame(42), frame(90)];
    map_pages(
        &mut h,
        8,
        &frames,
        wddm_gpu_frontend_kit::harness::FRAME_LISTS,
        1,
    );
    let gart = h.backend.ctl_ok("gart");
    assert_eq!(
        gart,
        format!(
            "aperture mappings (2 runs):\n  segment 2 pages 0x8..0xb (3 pages) -> guest frames {:#x}..{:#x} (GPA {:#x})\n  segment 2 pages 0xb..0xc (1 page) -> guest frames {:#x}..{:#x} (GPA {:#x})\n",
            frame(40),
            frame(43),
            frame(40) * 4096,
            frame(90),
            frame(91),
            frame(90) * 4096
        )
    );
    let json: serde_json::Value = serde_json::from_str(&h.backend.ctl_ok("gart --json")).unwrap();
    assert_eq!(json["runs"][0]["pages"], 3, "{json}");
}

#[test]
fn a_slow_submission_starts_late_and_a_preempt_cuts_the_wait_short() {
    let mut h = ready("inject-slow");
    h.backend.ctl_ok("arm slow 300ms nth=2");
    submit_ok(&mut h, &three_fills(0x1000), 20);
    let sent = Instant::now();
    submit_ok(&mut h, &three_fills(0x1000), 21);
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );

    h.backend.ctl_ok("arm slow 60s");
    let slow = post(&mut h, &three_fills(0x1000), DMA_BUFFER, 22);
    std::thread::sleep(Duration::from_millis(100));
    let preempt = h.post_preempt();
    let preempted = h.wait_preempt(preempt);
    assert_eq!(
        (preempted.preempted_fence, preempted.preempted_count),
        (22, 1),
        "{preempted:?}"
    );
    let response: WddmGpuRespSubmit = h.wait_reply(slow).exact();
    assert_stopped(&response, 22, SubmitStatus::Preempted);
    // Resubmitted, it runs (the injection was a one-shot).
    submit_ok(&mut h, &three_fills(0x1000), 22);
}

#[test]
fn a_lost_interrupt_completes_on_the_status_page_and_is_answered_when_the_driver_asks() {
    let mut h = ready("inject-lost");
    register_status_page(&mut h);
    h.backend.ctl_ok("arm lost-interrupt fence=31");
    h.write_vram(0x1000, &[0; 0x300]);
    let lost = post(&mut h, &three_fills(0x1000), DMA_BUFFER, 31);
    wait_completed(&h, 31);
    assert_eq!(
        h.read_vram(0x1000, 0x300),
        vec![1; 0x300],
        "the work was done"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(!h.is_answered(&lost), "the lost completion was answered");
    assert!(h
        .backend
        .ctl_ok("node")
        .contains("answers held by a lost interrupt 1"));

    // DxgkDdiQueryCurrentFence: the fence is 31, and the held answer comes first.
    let engine = h.query_engine_status(WDDM_GPU_NODE_PAGING);
    assert_eq!(
        (engine.current_fence, engine.released),
        (31, 1),
        "{engine:?}"
    );
    let response: WddmGpuRespSubmit = h.wait_reply(lost).exact();
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, 3);
    let again = h.query_engine_status(WDDM_GPU_NODE_PAGING);
    assert_eq!(again.released, 0, "{again:?}");
}

#[test]
fn an_injected_fault_stops_the_chosen_packet_with_the_chosen_status() {
    let mut h = ready("inject-fault");
    register_status_page(&mut h);
    let event = h.post_wait_event();
    h.backend
        .ctl_ok("arm fault packet=1 status=segment_range fence=41");
    h.write_vram(0x1000, &[0; 0x300]);
    let dma = three_fills(0x1000);
    let response = submit_dma(&mut h, &dma, 41);
    assert_eq!(
        status(&response),
        Some(SubmitStatus::SegmentRange),
        "{response:?}"
    );
    assert_eq!(response.packets_completed, 1);
    assert_eq!(
        response.fault_packet_offset,
        dma.len() / 3,
        "the second packet"
    );
    let vram = h.read_vram(0x1000, 0x300);
    assert_eq!(&vram[..0x100], &[1; 0x100][..], "the first packet ran");
    assert_eq!(
        &vram[0x100..],
        &[0; 0x200][..],
        "the faulted packet and the rest did not"
    );
    // Recorded as any fault is: the ring, the event, and `ctl faults`.
    let signalled = h.wait_event(event);
    assert_eq!(signalled.kind, WDDM_GPU_EVENT_FAULT);
    assert_eq!(signalled.fault.fence_id, 41);
    assert_eq!(
        h.status_page(STATUS_PAGE).fault_head,
        1,
        "one record in the ring"
    );
    let faults = h.backend.ctl_ok("faults");
    assert!(faults.contains("fence 41"), "{faults}");
    assert!(faults.contains("status segment_range"), "{faults}");
}

#[test]
fn a_refused_preempt_stops_nothing_and_a_slow_one_is_answered_late() {
    let mut h = ready_with_vram("inject-preempt", BIG_VRAM);
    let long = long_submission(&mut h, LONG_DMA, 50, None);
    wait_until_running(&h);
    h.backend.ctl_ok("arm preempt-refuse");
    let preempt = h.post_preempt();
    let refused = h.wait_preempt(preempt);
    assert_eq!(refused.preempted_count, 0, "{refused:?}");
    assert!(
        !h.is_answered(&long),
        "a refused PREEMPT stopped the submission"
    );

    h.backend.ctl_ok("arm preempt-slow 300ms");
    let sent = Instant::now();
    let preempt = h.post_preempt();
    let late = h.wait_preempt(preempt);
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );
    assert_eq!(
        (late.preempted_fence, late.preempted_count),
        (50, 1),
        "{late:?}"
    );
    let response: WddmGpuRespSubmit = h.wait_reply(long).exact();
    assert_stopped_part_way(&response, 50, SubmitStatus::Preempted);
    let stats = h.backend.stats_table();
    assert!(
        stats.contains("injections fired: preempt-refuse 1, preempt-slow 1"),
        "{stats}"
    );
}

#[test]
fn a_plan_file_arms_its_injections_at_start_and_a_bad_line_stops_the_start() {
    let dir = std::env::temp_dir().join(format!("wddm-inject-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.txt");
    std::fs::write(
        &plan,
        "# a TDR test\nhang nth=3\n\nlost-interrupt fence=9 # the ninth\n",
    )
    .unwrap();
    let options = SpawnOptions {
        args: vec!["--inject-plan".into(), plan.clone().into_os_string()],
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("inject-plan", &options);
    let listing = h.backend.ctl_ok("list");
    assert!(listing.contains("1  hang nth=3"), "{listing}");
    assert!(listing.contains("2  lost-interrupt fence=9"), "{listing}");
    submit_ok(&mut h, &three_fills(0x1000), 1);
    assert!(h
        .backend
        .ctl_ok("list")
        .contains("1  hang nth=3  (seen 1, fired 0)"));
    drop(h);

    std::fs::write(&plan, "hang\nslow fast\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
        .arg("--socket-path")
        .arg(dir.join("bad.sock"))
        .arg("--inject-plan")
        .arg(&plan)
        .output()
        .unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 2: duration \"fast\""), "{stderr}");
    // Refused before anything was made: no socket, and no VRAM file the backend named.
    assert_eq!(left, ["plan.txt"], "{stderr}");
}

#[test]
fn a_power_loss_takes_what_the_power_action_does_not_preserve() {
    use wddm_gpu_abi::ctrl::{VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_OK_NODATA};
    use wddm_gpu_abi::status::{
        WDDM_GPU_POWER_ACTION_HIBERNATE, WDDM_GPU_POWER_ACTION_NONE, WDDM_GPU_POWER_ACTION_SLEEP,
        WDDM_GPU_POWER_D0, WDDM_GPU_POWER_D3, WDDM_GPU_POWER_LOST_BYTE,
    };

    use crate::vram::{device_only_layout, DEVICE_ONLY_SEGMENT};

    let options = SpawnOptions {
        layout: Some(device_only_layout()),
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("inject-power", &options);
    register_status_page(&mut h);
    // CPU-visible VRAM (no Preserved flag) and device-only VRAM (PreservedDuringStandby).
    let visible = wddm_gpu_frontend_kit::pattern::pattern(0x9071, 0x2000);
    let kept = wddm_gpu_frontend_kit::pattern::pattern(0x9072, 0x2000);
    copy_from_vram(
        &mut h,
        &kept,
        0x10_0000,
        segment(DEVICE_ONLY_SEGMENT, 0x3000),
        1,
    );
    h.write_vram(0, &visible);
    let ok = |reply: wddm_gpu_frontend_kit::harness::Reply| {
        assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_NODATA, "{reply:?}")
    };

    h.backend.ctl_ok("arm power-loss");
    ok(h.set_power_state(WDDM_GPU_POWER_D3, WDDM_GPU_POWER_ACTION_SLEEP));
    // Below D0 nothing runs.
    let refused = submit_dma(&mut h, &three_fills(0x4000), 2);
    assert_eq!(
        status(&refused),
        Some(SubmitStatus::BadCommand),
        "{refused:?}"
    );
    assert_eq!(
        h.read_vram(0, 0x2000),
        vec![WDDM_GPU_POWER_LOST_BYTE; 0x2000],
        "standby kept CPU-visible VRAM"
    );
    ok(h.set_power_state(WDDM_GPU_POWER_D0, WDDM_GPU_POWER_ACTION_NONE));
    submit_one_ok(
        &mut h,
        &wddm_gpu_abi::build::transfer(
            0x2000,
            segment(DEVICE_ONLY_SEGMENT, 0x3000),
            segment(VRAM_SEGMENT, 0x20_0000),
        ),
        3,
    );
    assert!(
        h.read_vram(0x20_0000, 0x2000) == kept,
        "the preserved segment was lost"
    );
    // The power-down dropped the status page registration, as RESET does: fence 3 is not
    // published there.
    assert_eq!(h.status_page(STATUS_PAGE).completed_fence, 1);
    assert!(h
        .backend
        .ctl_ok("list")
        .contains("injection 1 power-loss on a power-down"));

    // Hibernation without the injection: everything kept (the device's memory is the host's).
    h.write_vram(0, &visible);
    ok(h.set_power_state(WDDM_GPU_POWER_D3, WDDM_GPU_POWER_ACTION_HIBERNATE));
    ok(h.set_power_state(WDDM_GPU_POWER_D0, WDDM_GPU_POWER_ACTION_NONE));
    assert!(h.read_vram(0, 0x2000) == visible);
    // With it, hibernation takes the standby-only segment too.
    h.backend.ctl_ok("arm power-loss");
    ok(h.set_power_state(WDDM_GPU_POWER_D3, WDDM_GPU_POWER_ACTION_HIBERNATE));
    ok(h.set_power_state(WDDM_GPU_POWER_D0, WDDM_GPU_POWER_ACTION_NONE));
    submit_one_ok(
        &mut h,
        &wddm_gpu_abi::build::transfer(
            0x2000,
            segment(DEVICE_ONLY_SEGMENT, 0x3000),
            segment(VRAM_SEGMENT, 0x20_0000),
        ),
        4,
    );
    assert_eq!(
        h.read_vram(0x20_0000, 0x2000),
        vec![WDDM_GPU_POWER_LOST_BYTE; 0x2000]
    );
    assert_eq!(
        h.set_power_state(7, 0).hdr().type_,
        VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER
    );
}
