//! Tests of the live view: rates between two snapshots, the latency bars, restarts.

use std::time::{Duration, Instant};

use wddm_gpu_abi::packet::WDDM_GPU_OP_TRANSFER;
use wddm_gpu_abi::submit::SubmitStatus;

use super::*;
use crate::engine::record::{Direction, PacketRecord, Traffic};
use crate::layout::SegmentLayout;
use crate::observe::stats::{Stats, SubmissionRecord, VirtualSubmissionRecord};

fn transfer(bytes: u64, micros: u64) -> PacketRecord {
    PacketRecord {
        opcode: WDDM_GPU_OP_TRANSFER,
        dma_offset: 0,
        fence: 1,
        start: Instant::now(),
        duration: Duration::from_micros(micros),
        bytes,
        pages: 0,
        traffic: [
            Some(Traffic {
                segment: 0,
                address: 0,
                length: bytes,
                direction: Direction::Read,
            }),
            Some(Traffic {
                segment: 1,
                address: 0,
                length: bytes,
                direction: Direction::Write,
            }),
        ],
        faulted: false,
    }
}

fn paging_submission(status: SubmitStatus, bytes: u64) -> SubmissionRecord {
    let now = Instant::now();
    SubmissionRecord {
        fence: 1,
        queued: now,
        start: now,
        duration: Duration::from_micros(20),
        packets: 1,
        bytes,
        status,
        inline: false,
    }
}

fn virtual_submission(status: SubmitStatus) -> VirtualSubmissionRecord {
    VirtualSubmissionRecord {
        duration: Duration::from_micros(5),
        packets: 2,
        bytes: 1 << 20,
        status,
    }
}

/// The line that starts with `name` (its first column).
fn line<'a>(frame: &'a str, name: &str) -> &'a str {
    frame
        .lines()
        .find(|line| line.starts_with(name))
        .unwrap_or_else(|| panic!("no line starting {name:?} in:\n{frame}"))
}

/// The numeric columns of a table line after its name column.
fn columns(line: &str) -> Vec<f64> {
    line.get(16..)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect()
}

#[test]
fn rates_are_the_growth_over_the_device_clock_between_frames() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    let start = Instant::now();
    let mut view = LiveView::new("gpu.sock.stats");
    let first = view.frame(stats.snapshot_at(start + Duration::from_secs(1)));
    assert!(first.contains("rates since start"), "{first}");

    // Two seconds of device time: 10 MiB moved by 4 transfers, 4 paging submissions (one
    // faulted), 6 virtual ones.
    for _ in 0..4 {
        stats.record_packet(&transfer(10 << 18, 100));
    }
    for status in [
        SubmitStatus::Ok,
        SubmitStatus::Ok,
        SubmitStatus::Ok,
        SubmitStatus::SegmentRange,
    ] {
        stats.record_submission(&paging_submission(status, 10 << 18));
    }
    for _ in 0..6 {
        stats.record_virtual_submission(&virtual_submission(SubmitStatus::Ok));
    }
    let second = view.frame(stats.snapshot_at(start + Duration::from_secs(3)));
    assert!(second.contains("rates over the last 2.00 s"), "{second}");

    // subm/s, faults/s, MiB/s, pkts/s, then the window's mean latency in µs.
    assert_eq!(
        columns(line(&second, "0 paging")),
        vec![2.0, 0.5, 5.0, 2.0, 20.0]
    );
    assert_eq!(
        columns(line(&second, "1 virtual")),
        vec![3.0, 0.0, 3.0, 6.0, 5.0]
    );
    assert_eq!(
        columns(line(&second, "transfer")),
        vec![2.0, 0.0, 5.0, 0.0, 100.0]
    );
    assert_eq!(
        columns(line(&second, "system memory")),
        vec![5.0, 0.0, 10.0],
        "reads of system memory per second, then all it moved (MiB)"
    );
    assert!(second.contains("ok 1.5/s, segment_range 0.5/s"), "{second}");
    // The window's mean latency beside the rates.
    assert!(line(&second, "transfer").ends_with("100.0 µs"), "{second}");

    // A quiet window: the rates drop to zero, the mean has no sample.
    let third = view.frame(stats.snapshot_at(start + Duration::from_secs(4)));
    assert_eq!(columns(line(&third, "0 paging")), vec![0.0, 0.0, 0.0, 0.0]);
    assert!(
        line(&third, "transfer").trim_end().ends_with('-'),
        "{third}"
    );
    assert!(third.contains("statuses: none"), "{third}");
}

#[test]
fn a_restarted_backend_starts_the_rates_again() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    let start = Instant::now();
    for _ in 0..8 {
        stats.record_submission(&paging_submission(SubmitStatus::Ok, 0));
    }
    let mut view = LiveView::new("gpu");
    view.frame(stats.snapshot_at(start + Duration::from_secs(8)));

    // A new backend (uptime went back): its counts are rated over its own uptime, never as a
    // negative difference.
    let restarted = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    for _ in 0..2 {
        restarted.record_submission(&paging_submission(SubmitStatus::Ok, 0));
    }
    let frame = view.frame(restarted.snapshot_at(Instant::now() + Duration::from_secs(1)));
    assert!(frame.contains("rates since start"), "{frame}");
    let rate = columns(line(&frame, "0 paging"))[0];
    assert!(rate > 1.0 && rate <= 2.0, "{rate} in:\n{frame}");
}

#[test]
fn latency_bars_are_logarithmic_and_ordered() {
    let sample = |p50: u64, p99: u64, max: u64| LatencySnapshot {
        count: 1,
        sum_ns: p50,
        p50_ns: Some(p50),
        p99_ns: Some(p99),
        max_ns: Some(max),
    };
    // 10 µs is one decade (5 cells) in, 1 ms three (15), 100 ms five (25).
    let drawn = bar(&sample(10_000, 1_000_000, 100_000_000));
    assert_eq!(
        drawn,
        format!(
            "[{}{}{}{}]",
            "#".repeat(5),
            "=".repeat(10),
            "-".repeat(10),
            " ".repeat(5)
        )
    );
    // Below the scale draws nothing, above it fills the bar.
    assert_eq!(
        bar(&sample(10, 10, 10)),
        format!("[{}]", " ".repeat(BAR_CELLS))
    );
    assert_eq!(
        bar(&sample(5_000_000_000, 6_000_000_000, 7_000_000_000)),
        format!("[{}]", "#".repeat(BAR_CELLS))
    );
    // Before the first sample the bar is empty.
    assert_eq!(
        bar(&LatencySnapshot::default()),
        format!("[{}]", " ".repeat(BAR_CELLS))
    );
}

#[test]
fn injections_and_warnings_show_what_the_window_added() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    let mut view = LiveView::new("gpu");
    stats.injected("hang");
    let first = view.frame(stats.snapshot());
    assert!(first.contains("injections fired: hang 1 (+1)"), "{first}");
    assert!(first.contains("checker warnings: none"), "{first}");
    stats.injected("slow");
    stats.checker_warning("map-over-live");
    let second = view.frame(stats.snapshot());
    assert!(
        second.contains("injections fired: hang 1, slow 1 (+1)"),
        "{second}"
    );
    assert!(
        second.contains("checker warnings: map-over-live 1 (+1)"),
        "{second}"
    );
}

#[test]
fn every_line_fits_a_100_column_terminal() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    stats.record_packet(&transfer(u64::MAX / 2, 3_600_000_000));
    stats.record_submission(&paging_submission(SubmitStatus::Ok, u64::MAX));
    let frame = LiveView::new("a-long-socket-name.sock.stats").frame(stats.snapshot());
    for line in frame.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
}
