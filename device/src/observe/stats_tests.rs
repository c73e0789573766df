//! Tests of the paging-path counters and their renderings.

use std::time::{Duration, Instant};

use prometheus_parse::{LineInfo, Scrape, SummaryCount, Value};
use wddm_gpu_abi::packet::{WDDM_GPU_OP_FILL, WDDM_GPU_OP_MAP_APERTURE, WDDM_GPU_OP_TRANSFER};
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_frontend_kit::scrape::{self, sample};

use super::display::{SentMessage, Unsent};
use super::*;
use crate::layout::SegmentLayout;

/// The default layout with bank ends 1 MiB, 4 MiB, 16 MiB on segment 1 at base 0x1000_0000.
fn banked_layout() -> SegmentLayout {
    let mut layout = SegmentLayout::default_for_vram(16 << 20);
    layout.segments[0].base_address = 0x1000_0000;
    layout.segments[0].banks = vec![1 << 20, 4 << 20, 16 << 20];
    layout
}

fn packet(opcode: u16, micros: u64) -> PacketRecord {
    PacketRecord {
        opcode,
        dma_offset: 0,
        fence: 1,
        start: Instant::now(),
        duration: Duration::from_micros(micros),
        bytes: 0,
        pages: 0,
        traffic: [None, None],
        faulted: false,
    }
}

fn traffic(segment: u32, address: u64, length: u64, direction: Direction) -> Option<Traffic> {
    Some(Traffic {
        segment,
        address,
        length,
        direction,
    })
}

fn submission(status: SubmitStatus, inline: bool, wait_us: u64, run_us: u64) -> SubmissionRecord {
    let queued = Instant::now();
    SubmissionRecord {
        fence: 7,
        queued,
        start: queued + Duration::from_micros(wait_us),
        duration: Duration::from_micros(run_us),
        packets: 3,
        bytes: 4096,
        status,
        inline,
    }
}

fn kind<'a>(snapshot: &'a StatsSnapshot, name: &str) -> &'a PacketKindSnapshot {
    snapshot.packets.iter().find(|k| k.kind == name).unwrap()
}

#[test]
fn packets_are_counted_per_kind_with_latency_quantiles() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    // 100 transfers of 1..=100 µs, one of them faulted.
    for micros in 1..=100 {
        let mut record = packet(WDDM_GPU_OP_TRANSFER, micros);
        record.bytes = 4096;
        record.faulted = micros == 50;
        stats.record_packet(&record);
    }
    let mut map = packet(WDDM_GPU_OP_MAP_APERTURE, 3);
    map.pages = 16;
    stats.record_packet(&map);

    let snapshot = stats.snapshot();
    let transfer = kind(&snapshot, "transfer");
    assert_eq!(transfer.opcode, Some(WDDM_GPU_OP_TRANSFER));
    assert_eq!(
        (transfer.count, transfer.faults, transfer.bytes),
        (100, 1, 409_600)
    );
    let latency = &transfer.latency;
    assert_eq!(latency.count, 100);
    assert_eq!(latency.sum_ns, 5050 * 1000);
    assert_eq!(latency.max_ns, Some(100_000));
    // Within the histogram's 0.1 % precision.
    let p50 = latency.p50_ns.unwrap();
    assert!((49_950..=50_050).contains(&p50), "p50 {p50}");
    let p99 = latency.p99_ns.unwrap();
    assert!((98_900..=99_100).contains(&p99), "p99 {p99}");

    let map = kind(&snapshot, "map_aperture");
    assert_eq!((map.count, map.pages), (1, 16));
    let fill = kind(&snapshot, "fill");
    assert_eq!(fill.count, 0);
    assert_eq!(fill.latency, LatencySnapshot::default());
    // Every kind is listed, in report order.
    let names: Vec<&str> = snapshot.packets.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(
        names,
        [
            "transfer",
            "fill",
            "discard_content",
            "read_physical",
            "write_physical",
            "map_aperture",
            "map_aperture2",
            "unmap_aperture",
            "fence",
            "update_page_table",
            "flush_tlb",
            "virtual_transfer",
            "virtual_fill",
            "copy_page_table_entries",
            "signal_monitored_fence",
            "notify_residency",
            "update_context_allocation",
            "unknown"
        ]
    );
}

#[test]
fn hostile_records_are_bucketed_and_saturate_without_panicking() {
    let stats = Stats::new(&banked_layout());
    for opcode in [0, 0x3ff, 0x7fff, u16::MAX] {
        let mut record = packet(opcode, 1);
        record.duration = Duration::MAX;
        record.bytes = u64::MAX;
        record.pages = u64::MAX;
        record.dma_offset = u32::MAX;
        record.traffic = [
            traffic(u32::MAX, u64::MAX, u64::MAX, Direction::Read),
            traffic(1, u64::MAX, u64::MAX, Direction::Write),
        ];
        stats.record_packet(&record);
    }
    let mut backwards = submission(SubmitStatus::Ok, false, 0, 1);
    // Started "before" it was queued: the wait saturates at zero.
    backwards.queued = backwards.start + Duration::from_secs(1);
    backwards.duration = Duration::MAX;
    stats.record_submission(&backwards);
    stats.queue_depths(&[(usize::MAX, Instant::now())]);
    stats.preempted(u64::MAX);
    stats.preempted(1);

    let snapshot = stats.snapshot();
    let unknown = kind(&snapshot, "unknown");
    assert_eq!(unknown.count, 4);
    assert_eq!(unknown.bytes, u64::MAX);
    assert_eq!(unknown.pages, u64::MAX);
    assert_eq!(unknown.latency.max_ns, Some(u64::MAX));
    assert_eq!(unknown.latency.sum_ns, u64::MAX);
    assert_eq!(snapshot.unknown_segment.read_bytes, u64::MAX);
    assert_eq!(snapshot.segments[1].written_bytes, u64::MAX);
    assert_eq!(snapshot.submissions.queue_wait.max_ns, Some(0));
    assert_eq!(snapshot.submissions.preemptions, u64::MAX);
    assert_eq!(snapshot.queue_depth.max, u64::MAX);
    // Renderings cope with extreme values too.
    assert!(snapshot.to_table().contains("unknown"));
    assert!(snapshot.to_prometheus().contains("wddm_gpu_packets_total"));
    serde_json::to_string(&snapshot).unwrap();
}

#[test]
fn traffic_is_split_across_banks_by_segment_offset() {
    let stats = Stats::new(&banked_layout());
    let base = 0x1000_0000u64;
    let mut record = packet(WDDM_GPU_OP_TRANSFER, 1);
    // Read 3 MiB from 512 KiB into segment 1: 512 KiB in bank 0, 2.5 MiB in bank 1.
    // Write 8 KiB to system memory (segment 0 has no banks).
    record.traffic = [
        traffic(1, base + (512 << 10), 3 << 20, Direction::Read),
        traffic(0, 0x2000, 8 << 10, Direction::Write),
    ];
    stats.record_packet(&record);
    // Write 2 MiB straddling the end of bank 1 and bank 2: 1 MiB in bank 2, 1 MiB past it.
    let mut fill = packet(WDDM_GPU_OP_FILL, 1);
    fill.traffic = [
        None,
        traffic(1, base + (15 << 20), 2 << 20, Direction::Write),
    ];
    stats.record_packet(&fill);
    // Below the segment base: counted for the segment, in no bank.
    let mut below = packet(WDDM_GPU_OP_FILL, 1);
    below.traffic = [traffic(1, 0x10, 0x10, Direction::Write), None];
    stats.record_packet(&below);
    // Exactly bank 1.
    let mut exact = packet(WDDM_GPU_OP_TRANSFER, 1);
    exact.traffic = [
        traffic(1, base + (1 << 20), 3 << 20, Direction::Write),
        None,
    ];
    stats.record_packet(&exact);

    let snapshot = stats.snapshot();
    let system = &snapshot.segments[0];
    assert_eq!(system.segment, 0);
    assert_eq!((system.read_bytes, system.written_bytes), (0, 8 << 10));
    let vram = &snapshot.segments[1];
    assert_eq!(vram.segment, 1);
    assert_eq!(vram.read_bytes, 3 << 20);
    assert_eq!(vram.written_bytes, (2 << 20) + 0x10 + (3 << 20));
    let banks: Vec<(u64, u64)> = vram
        .banks
        .iter()
        .map(|bank| (bank.read_bytes, bank.written_bytes))
        .collect();
    assert_eq!(
        banks,
        [(512 << 10, 0), ((5 << 20) / 2, 3 << 20), (0, 1 << 20)]
    );
    assert_eq!(vram.banks[2].end_offset, 16 << 20);
    assert!(snapshot.segments[2].banks.is_empty());
    assert_eq!(snapshot.unknown_segment, TrafficBytes::default());
}

#[test]
fn submissions_count_statuses_faults_paths_and_waits() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    stats.record_submission(&submission(SubmitStatus::Ok, true, 0, 10));
    stats.record_submission(&submission(SubmitStatus::Ok, false, 100, 2000));
    stats.record_submission(&submission(SubmitStatus::SegmentRange, false, 50, 5));
    stats.record_submission(&submission(SubmitStatus::Preempted, false, 10, 5));
    stats.record_submission(&submission(SubmitStatus::Reset, false, 10, 5));
    stats.preempted(2);
    stats.request(RequestOutcome::Taken);
    stats.request(RequestOutcome::Refused);
    stats.request(RequestOutcome::Taken);

    let snapshot = stats.snapshot();
    let s = &snapshot.submissions;
    assert_eq!((s.count, s.inline, s.engine), (5, 1, 4));
    assert_eq!(s.faults, 1);
    assert_eq!(s.preemptions, 2);
    assert_eq!((s.bytes, s.packets), (5 * 4096, 15));
    let count = |name: &str| {
        s.by_status
            .iter()
            .find(|status| status.status == name)
            .unwrap()
            .count
    };
    assert_eq!(count("ok"), 2);
    assert_eq!(count(SubmitStatus::SegmentRange.name()), 1);
    assert_eq!(s.by_status.len(), SubmitStatus::ALL.len());
    assert_eq!(s.execution.count, 5);
    assert_eq!(s.execution.max_ns, Some(2_000_000));
    assert_eq!(s.queue_wait.max_ns, Some(100_000));
    assert_eq!(s.queue_wait.sum_ns, 170_000);
    assert_eq!((snapshot.requests, snapshot.refused_requests), (3, 1));
    assert!(!is_fault(SubmitStatus::Ok));
    assert!(!is_fault(SubmitStatus::Preempted));
    assert!(!is_fault(SubmitStatus::Reset));
    assert!(is_fault(SubmitStatus::UnmappedAperture));
}

#[test]
fn queue_depth_keeps_current_max_changes_and_a_time_weighted_mean() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    assert_eq!(stats.snapshot().queue_depth.p50, None);
    // A replayed timeline, so a test thread descheduled for a while cannot skew the mean.
    let start = Instant::now();
    for (step, depth) in [1, 2, 3, 2, 1, 0].into_iter().enumerate() {
        stats.queue_depths(&[(depth, start + Duration::from_micros(step as u64))]);
    }
    stats.queue_depths(&[(4, start + Duration::from_millis(1))]);
    let q = stats
        .snapshot_at(start + Duration::from_secs(10))
        .queue_depth;
    assert_eq!((q.current, q.max, q.changes), (4, 4, 7));
    assert_eq!(q.p50, Some(2));
    assert_eq!(q.p99, Some(4));
    // Depth 4 for nearly all of the uptime (which began a moment before `start`).
    assert!(q.mean > 3.0 && q.mean <= 4.0, "mean {}", q.mean);
}

#[test]
fn concurrent_recorders_lose_nothing() {
    let stats = std::sync::Arc::new(Stats::new(&SegmentLayout::default_for_vram(16 << 20)));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let stats = stats.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    stats.record_packet(&packet(WDDM_GPU_OP_TRANSFER, 1));
                    stats.record_submission(&submission(SubmitStatus::Ok, false, 1, 1));
                    let _ = stats.snapshot();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let snapshot = stats.snapshot();
    assert_eq!(kind(&snapshot, "transfer").count, 4000);
    assert_eq!(snapshot.submissions.count, 4000);
}

#[test]
fn a_batch_records_every_packet_it_kept_by_the_time_its_submission_is_recorded() {
    let stats = Stats::new(&SegmentLayout::default_for_vram(16 << 20));
    let mut batch = PacketBatch::new();
    // Two full batches and three more: the full ones are recorded as they fill.
    for micros in 1..=2 * PacketBatch::CAPACITY as u64 + 3 {
        stats.keep_packet(&mut batch, &packet(WDDM_GPU_OP_TRANSFER, micros));
    }
    let transfers = |stats: &Stats| kind(&stats.snapshot(), "transfer").count;
    assert_eq!(transfers(&stats), 2 * PacketBatch::CAPACITY as u64);
    assert!(!batch.is_empty());
    stats.record_submission_after(&submission(SubmitStatus::Ok, true, 1, 1), &mut batch);
    assert!(batch.is_empty());
    assert_eq!(transfers(&stats), 2 * PacketBatch::CAPACITY as u64 + 3);
    assert_eq!(stats.snapshot().submissions.count, 1);
    // An empty batch records nothing more.
    stats.record_packets(&mut batch);
    assert_eq!(transfers(&stats), 2 * PacketBatch::CAPACITY as u64 + 3);
}

/// A snapshot with some of everything.
fn busy_snapshot() -> StatsSnapshot {
    let stats = Stats::new(&banked_layout());
    for micros in [10, 20, 30, 40] {
        let mut record = packet(WDDM_GPU_OP_TRANSFER, micros);
        record.bytes = 1 << 20;
        record.traffic = [
            traffic(0, 0, 1 << 20, Direction::Read),
            traffic(1, 0x1000_0000, 1 << 20, Direction::Write),
        ];
        stats.record_packet(&record);
    }
    stats.record_submission(&submission(SubmitStatus::Ok, false, 5, 250));
    stats.record_submission(&submission(SubmitStatus::BadSegment, true, 1, 3));
    stats.queue_depths(&[(1, Instant::now())]);
    stats.queue_depths(&[(0, Instant::now())]);
    stats.request(RequestOutcome::Taken);
    let display = stats.display();
    display.socket();
    display.sent(SentMessage::Scanout);
    display.sent(SentMessage::Update { bytes: 4096 });
    display.sent(SentMessage::StreamedBand { bytes: 3 << 20 });
    display.sent(SentMessage::StreamedBand { bytes: 1 << 20 });
    display.sent(SentMessage::CursorImage);
    display.sent(SentMessage::CursorMove);
    display.unsent(Unsent::NotReading);
    stats.snapshot()
}

/// Every line is a HELP, TYPE or sample line the parser accepts (it skips what it cannot
/// read, so parsing alone would not catch a malformed line).
fn parse_strictly(text: &str) -> Scrape {
    assert!(text.ends_with('\n'));
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Doc { .. } => {}
            LineInfo::Type { metric_name, .. } => {
                assert!(typed.insert(metric_name), "second TYPE line: {line}");
            }
            LineInfo::Sample {
                metric_name, value, ..
            } => {
                let family = ["_sum", "_count"]
                    .iter()
                    .find_map(|suffix| metric_name.strip_suffix(suffix))
                    .filter(|family| typed.contains(*family))
                    .unwrap_or(metric_name);
                assert!(typed.contains(family), "sample before its TYPE: {line}");
                assert!(
                    value == "NaN" || value.parse::<f64>().is_ok(),
                    "value: {line}"
                );
            }
            other => panic!("not a metric line: {line:?} ({other:?})"),
        }
    }
    scrape::parse(text)
}

/// The latency summary's quantiles of one packet kind.
fn latency_quantiles(scrape: &Scrape, kind: &str) -> Vec<SummaryCount> {
    match sample(scrape, "wddm_gpu_packet_latency_seconds", &[("kind", kind)]) {
        Value::Summary(quantiles) => quantiles,
        other => panic!("not a summary: {other:?}"),
    }
}

#[test]
fn prometheus_output_parses_with_the_right_values() {
    let text = busy_snapshot().to_prometheus();
    let scrape = parse_strictly(&text);
    assert!(text.contains("# TYPE wddm_gpu_packets_total counter"));
    assert!(text.contains("# TYPE wddm_gpu_packet_latency_seconds summary"));
    assert!(scrape.docs.contains_key("wddm_gpu_packets_total"));

    let quantiles = latency_quantiles(&scrape, "transfer");
    assert_eq!(quantiles.len(), 2);
    assert_eq!(quantiles[0].quantile, 0.5);
    assert!(
        (quantiles[0].count - 20e-6).abs() < 0.05e-6,
        "{quantiles:?}"
    );
    assert_eq!(quantiles[1].quantile, 0.99);
    assert!(
        (quantiles[1].count - 40e-6).abs() < 0.05e-6,
        "{quantiles:?}"
    );
    let Value::Untyped(sum) = sample(
        &scrape,
        "wddm_gpu_packet_latency_seconds_sum",
        &[("kind", "transfer")],
    ) else {
        panic!("sum");
    };
    assert!((sum - 100e-6).abs() < 1e-12, "{sum}");
    // No samples yet: NaN quantiles, zero count.
    let empty = latency_quantiles(&scrape, "fence");
    assert!(empty.iter().all(|q| q.count.is_nan()));

    // Plain counters, gauges and counts: (metric, labels, value).
    type Labels = &'static [(&'static str, &'static str)];
    let expected: [(&str, Labels, Value); 18] = [
        (
            "wddm_gpu_packets_total",
            &[("kind", "transfer")],
            Value::Counter(4.0),
        ),
        (
            "wddm_gpu_packet_bytes_total",
            &[("kind", "transfer")],
            Value::Counter(4.0 * 1048576.0),
        ),
        (
            "wddm_gpu_packets_total",
            &[("kind", "fill")],
            Value::Counter(0.0),
        ),
        (
            "wddm_gpu_packet_latency_seconds_count",
            &[("kind", "transfer")],
            Value::Untyped(4.0),
        ),
        (
            "wddm_gpu_submissions_total",
            &[("status", "ok")],
            Value::Counter(1.0),
        ),
        ("wddm_gpu_submission_faults_total", &[], Value::Counter(1.0)),
        (
            "wddm_gpu_submissions_inline_total",
            &[],
            Value::Counter(1.0),
        ),
        ("wddm_gpu_control_requests_total", &[], Value::Counter(1.0)),
        ("wddm_gpu_queue_depth_max", &[], Value::Gauge(1.0)),
        (
            "wddm_gpu_segment_bytes_total",
            &[("segment", "0"), ("direction", "read")],
            Value::Counter(4.0 * 1048576.0),
        ),
        (
            "wddm_gpu_segment_bytes_total",
            &[("segment", "1"), ("direction", "write")],
            Value::Counter(4.0 * 1048576.0),
        ),
        (
            "wddm_gpu_bank_bytes_total",
            &[("segment", "1"), ("bank", "0"), ("direction", "write")],
            Value::Counter(4.0 * 1048576.0),
        ),
        (
            "wddm_gpu_bank_bytes_total",
            &[("segment", "1"), ("bank", "1"), ("direction", "read")],
            Value::Counter(0.0),
        ),
        ("wddm_gpu_display_sockets_total", &[], Value::Counter(1.0)),
        (
            "wddm_gpu_display_messages_total",
            &[("kind", "streamed_band")],
            Value::Counter(2.0),
        ),
        (
            "wddm_gpu_display_messages_total",
            &[("kind", "cursor_hide")],
            Value::Counter(0.0),
        ),
        (
            "wddm_gpu_display_pixel_bytes_total",
            &[("kind", "streamed_band")],
            Value::Counter(4.0 * 1048576.0),
        ),
        (
            "wddm_gpu_display_dropped_total",
            &[("reason", "not_reading")],
            Value::Counter(1.0),
        ),
    ];
    for (metric, labels, value) in expected {
        assert_eq!(
            sample(&scrape, metric, labels),
            value,
            "{metric} {labels:?}"
        );
    }
}

#[test]
fn prometheus_output_without_banks_has_no_empty_family() {
    let text = Stats::new(&SegmentLayout::default_for_vram(16 << 20))
        .snapshot()
        .to_prometheus();
    parse_strictly(&text);
    assert!(!text.contains("wddm_gpu_bank_bytes_total"));
}

#[test]
fn table_has_fixed_columns_units_and_every_section() {
    let table = busy_snapshot().to_table();
    let header = table
        .lines()
        .find(|line| line.starts_with("packet "))
        .unwrap();
    for column in ["count", "faults", "bytes", "pages", "p50", "p99", "max"] {
        assert!(header.contains(column), "{header}");
    }
    let transfer = table
        .lines()
        .find(|line| line.starts_with("transfer"))
        .unwrap();
    assert_eq!(transfer.chars().count(), header.chars().count(), "{table}");
    assert!(transfer.contains("4.0 MiB"), "{transfer}");
    assert!(transfer.contains("20.0 µs"), "{transfer}");
    assert!(transfer.contains("40.0 µs"), "{transfer}");
    let fill = table.lines().find(|line| line.starts_with("fill")).unwrap();
    assert!(fill.trim_end().ends_with('-'), "{fill}");
    assert!(table.contains("status: ok 1, bad_segment 1"), "{table}");
    assert!(table.contains("queue depth: current 0, max 1"), "{table}");
    assert!(table.contains("read MiB"));
    let segment1 = table
        .lines()
        .find(|line| line.starts_with("segment 1"))
        .unwrap();
    assert!(segment1.contains("4.00"), "{segment1}");
    assert!(table.contains("  bank 2"), "{table}");
    assert!(
        table.contains(
            "display to QEMU: sockets 1, scanouts 1; updates 1 (4.0 KiB), streamed bands 2 \
             (4.0 MiB); cursor images 1, moves 1, hides 0"
        ),
        "{table}"
    );
    assert!(
        table.contains("dropped: 1 while QEMU was not reading, 0 after the socket closed"),
        "{table}"
    );
}

#[test]
fn json_holds_every_section() {
    let json = serde_json::to_value(busy_snapshot()).unwrap();
    assert_eq!(json["packets"][0]["kind"], "transfer");
    assert_eq!(json["packets"][0]["count"], 4);
    assert_eq!(json["packets"][0]["latency"]["max_ns"], 40_000);
    assert_eq!(json["submissions"]["count"], 2);
    assert_eq!(json["queue_depth"]["max"], 1);
    assert_eq!(json["segments"][1]["banks"][0]["written_bytes"], 4 << 20);
    assert!(json["uptime_ns"].as_u64().is_some());
    assert_eq!(json["display"]["streamed_bands"], 2);
    assert_eq!(json["display"]["streamed_bytes"], 4 << 20);
    assert_eq!(json["display"]["cursor_images"], 1);
    assert_eq!(json["display"]["dropped_not_reading"], 1);
}

#[test]
fn kind_names_follow_the_opcodes() {
    assert_eq!(kind_name(WDDM_GPU_OP_TRANSFER), "transfer");
    assert_eq!(kind_name(WDDM_GPU_OP_FILL), "fill");
    assert_eq!(kind_name(0), "unknown");
    assert_eq!(kind_name(u16::MAX), "unknown");
}
