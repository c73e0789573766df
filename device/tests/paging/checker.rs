//! The device-side checker (`--check`) on a deliberately sloppy driver: each warning provoked
//! once, listed by `ctl warnings`, counted in the statistics and summed up when the backend
//! exits; and silent without `--check`.

use wddm_gpu_abi::build::{self, fill, transfer};
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::backend_process::TIMEOUT;
use wddm_gpu_frontend_kit::harness::{Harness, FRAME_LISTS, PAGE};
use wddm_gpu_frontend_kit::requests::segment;

use crate::common::*;
use crate::vram::{device_only_layout, DEVICE_ONLY_SEGMENT};

/// The aperture of [`device_only_layout`].
const APERTURE: u32 = 3;

/// A backend with [`device_only_layout`] and `extra` arguments.
fn backend(name: &str, extra: &[&str]) -> Harness {
    Harness::ready_with_options(
        name,
        &SpawnOptions {
            layout: Some(device_only_layout()),
            args: extra.iter().map(|arg| (*arg).into()).collect(),
            ..SpawnOptions::default()
        },
    )
}

/// The sloppy driver: every mistake the checker knows of, once, each a legal submission.
fn sloppy_driver(h: &mut Harness) {
    register_status_page(h);
    submit_one_ok(h, &fill(0x11, 0x100, segment(VRAM_SEGMENT, 0)), 1);
    // DxgkDdiResetFromTimeout, and work before the status page is registered again.
    let reset = h.post_reset();
    h.wait_reset(reset);
    submit_one_ok(h, &fill(0x11, 0x100, segment(VRAM_SEGMENT, 0)), 2);
    register_status_page(h);
    h.write_frame_list(FRAME_LISTS, &scattered(0, 4));
    let map = |first, count| build::map_aperture(APERTURE, 0, first, count, FRAME_LISTS, 4, 0);
    submit_one_ok(h, &map(0, 2), 3);
    // Pages 0 and 1 are still mapped: mapped over.
    submit_one_ok(h, &map(1, 2), 4);
    submit_one_ok(
        h,
        &build::unmap_aperture(APERTURE, 0, 4, frame(100) * PAGE),
        5,
    );
    // Through an unmapped page: the dummy page.
    submit_one_ok(
        h,
        &transfer(
            0x10,
            segment(APERTURE, 0x1000),
            segment(VRAM_SEGMENT, 0x1000),
        ),
        6,
    );
    // The same fence again.
    submit_one_ok(h, &fill(0x22, 0x100, segment(VRAM_SEGMENT, 0)), 6);
    // Device-only VRAM nothing wrote, read; then a page written first and read: no warning.
    submit_one_ok(
        h,
        &transfer(
            0x40,
            segment(DEVICE_ONLY_SEGMENT, 0x5000),
            segment(VRAM_SEGMENT, 0x2000),
        ),
        7,
    );
    submit_one_ok(
        h,
        &fill(0x33, 0x1000, segment(DEVICE_ONLY_SEGMENT, 0x8000)),
        8,
    );
    submit_one_ok(
        h,
        &transfer(
            0x1000,
            segment(DEVICE_ONLY_SEGMENT, 0x8000),
            segment(VRAM_SEGMENT, 0x3000),
        ),
        9,
    );
}

#[test]
fn a_sloppy_driver_gets_one_warning_per_mistake_and_a_summary_at_exit() {
    let mut h = backend("checker-sloppy", &["--check"]);
    sloppy_driver(&mut h);
    let warnings = h.backend.ctl_ok("warnings");
    assert!(
        warnings.contains(
            "warnings: map-over-live 1, dummy-page-access 1, fence-backwards 1, unwritten-vram-read 1, no-status-page 1, stale-translation 0, misplaced-page-table 0"
        ),
        "{warnings}"
    );
    for expected in [
        "no-status-page: submission fence 2: no status page is registered since the RESET",
        "map-over-live: submission fence 4, packet at 0x0: aperture segment 3: 1 of pages 0x1+0x2 were mapped",
        "dummy-page-access: submission fence 6, packet at 0x0: reads aperture segment 3 page 0x1, unmapped",
        "fence-backwards: submission fence 6: the previous submission's fence was 6",
        "unwritten-vram-read: submission fence 7, packet at 0x0: reads device-only VRAM at offset 0x1005000",
    ] {
        assert!(warnings.contains(expected), "missing {expected:?} in:\n{warnings}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&h.backend.ctl_ok("warnings --json")).unwrap();
    assert_eq!(json["latest"].as_array().map(Vec::len), Some(5), "{json}");
    let stats = h.backend.stats_table();
    assert!(
        stats.contains("checker warnings: no-status-page 1, map-over-live 1, dummy-page-access 1, fence-backwards 1, unwritten-vram-read 1"),
        "{stats}"
    );
    let mut backend = h.disconnect();
    backend.assert_exits_cleanly(TIMEOUT);
    let log = backend.log();
    assert!(
        log.contains("checker summary: 5 warning(s): map-over-live 1, dummy-page-access 1"),
        "{log}"
    );
}

#[test]
fn without_check_the_same_driver_gets_no_warning() {
    let mut h = backend("checker-off", &[]);
    sloppy_driver(&mut h);
    let warnings = h.backend.ctl_ok("warnings");
    assert!(warnings.starts_with("the checker is off"), "{warnings}");
    assert!(warnings.contains("map-over-live 0"), "{warnings}");
    let mut backend = h.disconnect();
    backend.assert_exits_cleanly(TIMEOUT);
    let log = backend.log();
    assert!(
        !log.contains("checker:") && !log.contains("checker summary"),
        "{log}"
    );
}
