//! The VRAM BAR (BAR_CHANGED events, the status page) and device-only VRAM across restarts.

use wddm_gpu_abi::build::transfer;
use wddm_gpu_abi::caps::{WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_BAR_CHANGED};
use wddm_gpu_frontend_kit::{
    backend_process::{SpawnOptions, TIMEOUT},
    harness::{Harness, STATUS_PAGE, VRAM_GPA, VRAM_SIZE},
    layout::{self, Segment},
    pattern::pattern,
    requests::segment,
};

use crate::common::*;

/// CPU-visible VRAM (segment 1), device-only VRAM (segment 2), an aperture (segment 3), 16 MiB
/// each.
pub fn device_only_layout() -> String {
    let segment = |flags| Segment {
        flags,
        size: "16MiB",
    };
    layout::layout(
        "1.3",
        &[
            segment(layout::CPU_VISIBLE),
            segment(layout::DEVICE_ONLY),
            segment(layout::APERTURE),
        ],
        None,
    )
}
pub const DEVICE_ONLY_SEGMENT: u32 = 2;

/// Writes a pattern into device-only VRAM (through a CPU-visible staging area), restarts the
/// backend with `keep` as `--device-vram-path` (or none) and returns what device-only VRAM holds
/// afterwards, next to the pattern.
fn device_only_vram_after_restart(
    name: &str,
    keep: Option<&std::path::Path>,
) -> (Vec<u8>, Vec<u8>) {
    let mut args = Vec::new();
    if let Some(keep) = keep {
        args.extend(["--device-vram-path".into(), keep.as_os_str().to_owned()]);
    }
    let options = SpawnOptions {
        layout: Some(device_only_layout()),
        args,
        ..SpawnOptions::default()
    };
    let data = pattern(0xd0_0e, 0x1_0000);
    let mut h = Harness::ready_with_options(name, &options);
    copy_from_vram(&mut h, &data, 0, segment(DEVICE_ONLY_SEGMENT, 0x3000), 1);
    let mut backend = h.disconnect();
    backend.assert_exits_cleanly(TIMEOUT);

    let mut h = Harness::ready_with_options(name, &options);
    submit_one_ok(
        &mut h,
        &transfer(
            data.len() as u64,
            segment(DEVICE_ONLY_SEGMENT, 0x3000),
            segment(VRAM_SEGMENT, 0x20_0000),
        ),
        1,
    );
    let after = h.read_vram(0x20_0000, data.len());
    (after, data)
}

#[test]
fn device_only_vram_in_a_file_survives_a_backend_restart() {
    let keep = std::env::temp_dir().join(format!("wddm-device-vram-{}", std::process::id()));
    let (after, data) = device_only_vram_after_restart("device-vram-kept", Some(&keep));
    std::fs::remove_file(&keep).unwrap();
    assert_bytes(&after, &data, "device-only VRAM after a restart");
}

#[test]
fn device_only_vram_without_a_file_is_zero_after_a_backend_restart() {
    let (after, _) = device_only_vram_after_restart("device-vram-anon", None);
    assert!(
        after.iter().all(|&b| b == 0),
        "device-only VRAM kept without a file"
    );
}

/// `ctl vram OFFSET 16 --json`: the bytes as hex, or the refusal.
fn ctl_vram(h: &Harness, offset: u64, length: u64) -> Result<String, String> {
    let output = h.backend.ctl(&format!("vram {offset:#x} {length} --json"));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    Ok(json["hex"].as_str().unwrap().to_string())
}

#[test]
fn ctl_vram_reads_device_only_vram_past_the_bar_as_docs_say() {
    let options = SpawnOptions {
        layout: Some(device_only_layout()),
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("ctl-vram-device-only", &options);
    let data = pattern(0x7e57, 0x1000);
    copy_from_vram(&mut h, &data, 0, segment(DEVICE_ONLY_SEGMENT, 0x3000), 1);
    // The first device-only segment starts at the BAR's end (check-layout's vram_offset).
    let start = VRAM_SIZE;
    let hex: String = data[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(ctl_vram(&h, start + 0x3000, 16), Ok(hex));
    // One dump never straddles the BAR's end, nor runs past the device-only VRAM.
    let straddle = ctl_vram(&h, start - 8, 16).unwrap_err();
    assert!(straddle.contains("straddles the BAR's end"), "{straddle}");
    let past = ctl_vram(&h, start + (16 << 20), 16).unwrap_err();
    assert!(past.contains("outside the VRAM"), "{past}");
    let guide = include_str!("../../../docs/fault-injection.md");
    assert!(guide.contains("past the BAR's end is device-only VRAM"));
}

// ---- the VRAM BAR ----

#[test]
fn bar_removal_and_re_add_deliver_bar_changed_events_and_update_the_status_page() {
    let mut h = ready("bar-events");
    let page = register_status_page(&mut h);
    let bar = h.capset().header.vram_bar;
    assert_eq!(bar.state, WDDM_GPU_BAR_STATE_KNOWN);
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (bar.state, bar.generation, VRAM_GPA)
    );
    let removed = h.post_wait_event();
    let added = h.post_wait_event();
    let spare = h.post_wait_event();
    // The BAR changes through the vhost-user socket, not the queue: the device must have taken
    // the WAIT_EVENTs first.
    h.flush_queue();

    h.remove_vram_region();
    let now = h.capset().header.vram_bar;
    assert_eq!(now.state, WDDM_GPU_BAR_STATE_NOT_MAPPED);
    assert_ne!(now.generation, bar.generation);
    assert_event(
        &mut h,
        removed,
        WddmGpuRespEvent {
            kind: WDDM_GPU_EVENT_BAR_CHANGED,
            bar_state: WDDM_GPU_BAR_STATE_NOT_MAPPED,
            bar_generation: now.generation,
            bar_address: 0,
            ..Default::default()
        },
    );
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (WDDM_GPU_BAR_STATE_NOT_MAPPED, now.generation, 0)
    );

    let moved_to = 0xd000_0000;
    h.add_vram_region(moved_to);
    let again = h.capset().header.vram_bar;
    assert_eq!(
        (again.state, again.guest_physical_address),
        (WDDM_GPU_BAR_STATE_KNOWN, moved_to)
    );
    assert_ne!(again.generation, now.generation);
    assert_event(
        &mut h,
        added,
        WddmGpuRespEvent {
            kind: WDDM_GPU_EVENT_BAR_CHANGED,
            bar_state: WDDM_GPU_BAR_STATE_KNOWN,
            bar_generation: again.generation,
            bar_address: moved_to,
            ..Default::default()
        },
    );
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (WDDM_GPU_BAR_STATE_KNOWN, again.generation, moved_to)
    );
    assert_eq!(page.events_dropped, 0);

    // Work is unaffected, and produces no BAR event.
    assert_next_submission_works(&mut h, 40, true);
    assert!(!h.is_answered(&spare), "an event without a change");

    h.remove_vram_region();
    let gone = h.capset().header.vram_bar;
    assert_event(
        &mut h,
        spare,
        WddmGpuRespEvent {
            kind: WDDM_GPU_EVENT_BAR_CHANGED,
            bar_state: WDDM_GPU_BAR_STATE_NOT_MAPPED,
            bar_generation: gone.generation,
            bar_address: 0,
            ..Default::default()
        },
    );
    // With no WAIT_EVENT posted, the change is still on the status page.
    h.add_vram_region(VRAM_GPA);
    let last = h.capset().header.vram_bar;
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (WDDM_GPU_BAR_STATE_KNOWN, last.generation, VRAM_GPA)
    );
}

/// BACKEND BUG (kept failing on purpose): an event that finds no posted WAIT_EVENT is counted
/// in `events_dropped` only after the status page was published, so the page does not show
/// it until some later, unrelated update. `Gpu::memory_changed` (device/src/gpu.rs) calls
/// `notify.status.publish(&ram)` and then `notify.deliver(..)`, whose `None` arm
/// (`Notify::deliver`) bumps the counter in the device's copy only. After a BAR change with
/// nothing posted, the BAR fields on the page are new but `events_dropped` is stale; a driver
/// that gets no interrupt for it (nothing was posted) has only the page to learn about it.
/// (`scheduler.rs` `Hooks::fence` has the same order: publish, then deliver; there the end of
/// the submission publishes again, so the count is only late.)
#[test]
fn bar_change_with_no_wait_event_posted_is_counted_on_the_status_page() {
    let mut h = ready("bar-dropped");
    register_status_page(&mut h);
    h.remove_vram_region();
    let bar = h.capset().header.vram_bar;
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (WDDM_GPU_BAR_STATE_NOT_MAPPED, bar.generation, 0)
    );
    assert_eq!(
        page.events_dropped, 1,
        "the dropped BAR_CHANGED event is not counted on the status page"
    );
    // Any later publication shows it.
    assert_next_submission_works(&mut h, 1, true);
    assert_eq!(h.status_page(STATUS_PAGE).events_dropped, 1);
}
