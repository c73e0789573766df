//! The two text renderings of a [`StatsSnapshot`]: a table for people and the Prometheus text
//! exposition format for scrapers. (JSON is serde's.)

use std::fmt::Write as _;

use prometheus::proto::{
    Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary,
};
use prometheus::TextEncoder;

use super::display::DisplaySnapshot;
use super::{LatencySnapshot, StatsSnapshot, TrafficBytes};

pub(super) const MIB: f64 = 1024.0 * 1024.0;

/// `850 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`; `-` before the first sample.
pub(super) fn duration(ns: Option<u64>) -> String {
    let Some(ns) = ns else {
        return "-".to_string();
    };
    let value = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", value / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", value / 1e6)
    } else {
        format!("{:.2} s", value / 1e9)
    }
}

/// `512 B`, `4.0 KiB`, `12.0 MiB`, `1.50 GiB`.
pub(super) fn bytes(count: u64) -> String {
    let value = count as f64;
    if count < 1 << 10 {
        format!("{count} B")
    } else if count < 1 << 20 {
        format!("{:.1} KiB", value / 1024.0)
    } else if count < 1 << 30 {
        format!("{:.1} MiB", value / MIB)
    } else {
        format!("{:.2} GiB", value / (MIB * 1024.0))
    }
}

fn mib(count: u64) -> String {
    format!("{:.2}", count as f64 / MIB)
}

/// One row of the packet and submission tables (fixed columns).
/// The name column of the packet and submission rows: the longest packet kind
/// (`update_context_allocation`) and a space.
const NAME_WIDTH: usize = 26;

fn row(
    out: &mut String,
    name: &str,
    count: &str,
    faults: &str,
    bytes: &str,
    pages: &str,
    latency: Option<&LatencySnapshot>,
) {
    let (p50, p99, max) = match latency {
        Some(latency) => (
            duration(latency.p50_ns),
            duration(latency.p99_ns),
            duration(latency.max_ns),
        ),
        None => ("p50".into(), "p99".into(), "max".into()),
    };
    let _ = writeln!(
        out,
        "{name:<NAME_WIDTH$}{count:>10}{faults:>8}{bytes:>12}{pages:>10}{p50:>11}{p99:>11}{max:>11}"
    );
}

/// What the display could not send, once something was not sent.
pub(super) fn dropped_line(out: &mut String, display: &DisplaySnapshot) {
    if display.dropped_not_reading > 0 || display.dropped_socket_closed > 0 {
        let _ = writeln!(
            out,
            "  dropped: {} while QEMU was not reading, {} after the socket closed",
            display.dropped_not_reading, display.dropped_socket_closed
        );
    }
}

fn traffic_row(out: &mut String, name: &str, traffic: TrafficBytes, note: &str) {
    let _ = writeln!(
        out,
        "{name:<16}{:>12}{:>13}{note}",
        mib(traffic.read_bytes),
        mib(traffic.written_bytes)
    );
}

impl StatsSnapshot {
    /// A table for people: packets per kind, submissions, queue depth, traffic in MiB.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "uptime {:.1} s; control requests {} answered, {} refused",
            self.uptime_ns as f64 / 1e9,
            self.requests,
            self.refused_requests
        );
        out.push('\n');
        row(
            &mut out, "packet", "count", "faults", "bytes", "pages", None,
        );
        for kind in &self.packets {
            row(
                &mut out,
                &kind.kind,
                &kind.count.to_string(),
                &kind.faults.to_string(),
                &bytes(kind.bytes),
                &kind.pages.to_string(),
                Some(&kind.latency),
            );
        }

        let s = &self.submissions;
        out.push('\n');
        row(
            &mut out,
            "submissions",
            "count",
            "faults",
            "bytes",
            "packets",
            None,
        );
        row(
            &mut out,
            "execution",
            &s.count.to_string(),
            &s.faults.to_string(),
            &bytes(s.bytes),
            &s.packets.to_string(),
            Some(&s.execution),
        );
        row(
            &mut out,
            "queue wait",
            &s.queue_wait.count.to_string(),
            "",
            "",
            "",
            Some(&s.queue_wait),
        );
        for node in self.nodes.iter().filter(|node| node.node != 0) {
            row(
                &mut out,
                &format!("{} node", node.name),
                &node.submissions.to_string(),
                &node.faults.to_string(),
                &bytes(node.bytes),
                &node.packets.to_string(),
                Some(&node.execution),
            );
        }
        let _ = writeln!(
            out,
            "  inline {}, engine thread {}, preempted {}",
            s.inline, s.engine, s.preemptions
        );
        let statuses: Vec<String> = s
            .by_status
            .iter()
            .filter(|status| status.count > 0)
            .map(|status| format!("{} {}", status.status, status.count))
            .collect();
        if !statuses.is_empty() {
            let _ = writeln!(out, "  status: {}", statuses.join(", "));
        }
        for (what, counts) in [
            ("injections fired", &self.injections),
            ("checker warnings", &self.checker_warnings),
        ] {
            if !counts.is_empty() {
                let listed: Vec<String> = counts
                    .iter()
                    .map(|named| format!("{} {}", named.name, named.count))
                    .collect();
                let _ = writeln!(out, "  {what}: {}", listed.join(", "));
            }
        }

        if let Some(link) = &self.link {
            let _ = writeln!(
                out,
                "  link model ({}): {} packets given {}, the engine waited {}; {} took longer on the host",
                link.model,
                link.packets,
                duration(Some(link.modelled_ns)),
                duration(Some(link.waited_ns)),
                link.late_packets
            );
        }

        let q = &self.queue_depth;
        let depth = |value: Option<u64>| value.map_or("-".to_string(), |v| v.to_string());
        out.push('\n');
        let _ = writeln!(
            out,
            "queue depth: current {}, max {}, time-weighted mean {:.3}; at each of {} changes: p50 {}, p99 {}",
            q.current,
            q.max,
            q.mean,
            q.changes,
            depth(q.p50),
            depth(q.p99)
        );

        out.push('\n');
        let _ = writeln!(
            out,
            "{:<16}{:>12}{:>13}",
            "traffic", "read MiB", "written MiB"
        );
        for segment in &self.segments {
            let traffic = TrafficBytes {
                read_bytes: segment.read_bytes,
                written_bytes: segment.written_bytes,
            };
            let note = if segment.segment == 0 {
                "  system memory"
            } else {
                ""
            };
            traffic_row(
                &mut out,
                &format!("segment {}", segment.segment),
                traffic,
                note,
            );
            for bank in &segment.banks {
                traffic_row(
                    &mut out,
                    &format!("  bank {}", bank.bank),
                    TrafficBytes {
                        read_bytes: bank.read_bytes,
                        written_bytes: bank.written_bytes,
                    },
                    "",
                );
            }
        }
        if self.unknown_segment != TrafficBytes::default() {
            traffic_row(
                &mut out,
                "unknown segment",
                self.unknown_segment,
                "  (no such segment in the layout)",
            );
        }

        let d = &self.display;
        out.push('\n');
        let _ = writeln!(
            out,
            "display to QEMU: sockets {}, scanouts {}; updates {} ({}), streamed bands {} ({}); \
             cursor images {}, moves {}, hides {}",
            d.sockets,
            d.scanouts,
            d.updates,
            bytes(d.update_bytes),
            d.streamed_bands,
            bytes(d.streamed_bytes),
            d.cursor_images,
            d.cursor_moves,
            d.cursor_hides
        );
        dropped_line(&mut out, d);
        out
    }

    /// The Prometheus text exposition format (version 0.0.4): counters end in `_total`,
    /// latencies are summaries in seconds with `quantile="0.5"` and `"0.99"`.
    ///
    /// Written by the `prometheus` crate's `TextEncoder` from metric families built here: its
    /// data model takes already-aggregated values, summaries included. (prometheus-client, the
    /// other maintained writer, has no summary type and expects to own the live metrics.)
    pub fn to_prometheus(&self) -> String {
        let families = self.families();
        TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|error| format!("# encoding failed: {error}\n"))
    }

    fn families(&self) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        let mut add = |name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>| {
            // The encoder refuses families without samples (e.g. no banks in the layout).
            if !metrics.is_empty() {
                let mut family = MetricFamily::default();
                family.set_name(format!("wddm_gpu_{name}"));
                family.set_help(help.to_string());
                family.set_field_type(kind);
                family.set_metric(metrics);
                families.push(family);
            }
        };
        use MetricType::{COUNTER, GAUGE, SUMMARY};

        add(
            "uptime_seconds",
            "Seconds since the backend started measuring.",
            GAUGE,
            vec![gauge(&[], self.uptime_ns as f64 / 1e9)],
        );
        add(
            "control_requests_total",
            "Control-queue requests answered.",
            COUNTER,
            vec![counter(&[], self.requests)],
        );
        add(
            "control_requests_refused_total",
            "Control-queue requests answered with an error.",
            COUNTER,
            vec![counter(&[], self.refused_requests)],
        );

        let per_kind = |value: &dyn Fn(&super::PacketKindSnapshot) -> u64| {
            self.packets
                .iter()
                .map(|kind| counter(&[("kind", &kind.kind)], value(kind)))
                .collect()
        };
        add(
            "packets_total",
            "Paging packets executed, per kind.",
            COUNTER,
            per_kind(&|kind| kind.count),
        );
        add(
            "packet_faults_total",
            "Paging packets that faulted or were interrupted, per kind.",
            COUNTER,
            per_kind(&|kind| kind.faults),
        );
        add(
            "packet_bytes_total",
            "Bytes paging packets moved or wrote, per kind.",
            COUNTER,
            per_kind(&|kind| kind.bytes),
        );
        add(
            "packet_pages_total",
            "Aperture pages paging packets mapped or unmapped, per kind.",
            COUNTER,
            per_kind(&|kind| kind.pages),
        );
        add(
            "packet_latency_seconds",
            "Execution time of one paging packet, per kind.",
            SUMMARY,
            self.packets
                .iter()
                .map(|kind| summary(&[("kind", &kind.kind)], &kind.latency))
                .collect(),
        );

        let s = &self.submissions;
        add(
            "submissions_total",
            "Submissions answered, per status.",
            COUNTER,
            s.by_status
                .iter()
                .map(|status| counter(&[("status", &status.status)], status.count))
                .collect(),
        );
        add(
            "submission_faults_total",
            "Submissions that ended with a fault status (not ok, preempted or reset).",
            COUNTER,
            vec![counter(&[], s.faults)],
        );
        add(
            "submissions_inline_total",
            "Submissions run entirely on the control-queue thread.",
            COUNTER,
            vec![counter(&[], s.inline)],
        );
        add(
            "submission_bytes_total",
            "Bytes submissions moved.",
            COUNTER,
            vec![counter(&[], s.bytes)],
        );
        add(
            "submission_packets_total",
            "Packets submissions completed.",
            COUNTER,
            vec![counter(&[], s.packets)],
        );
        add(
            "preemptions_total",
            "Submissions PREEMPT took back.",
            COUNTER,
            vec![counter(&[], s.preemptions)],
        );
        add(
            "injections_total",
            "Fault injections fired, by action.",
            COUNTER,
            self.injections
                .iter()
                .map(|named| counter(&[("action", &named.name)], named.count))
                .collect(),
        );
        add(
            "checker_warnings_total",
            "Checker warnings (--check), by kind.",
            COUNTER,
            self.checker_warnings
                .iter()
                .map(|named| counter(&[("kind", &named.name)], named.count))
                .collect(),
        );
        add(
            "submission_latency_seconds",
            "Execution time of one submission (start to answer).",
            SUMMARY,
            vec![summary(&[], &s.execution)],
        );
        add(
            "submission_queue_wait_seconds",
            "Time a submission waited before it started.",
            SUMMARY,
            vec![summary(&[], &s.queue_wait)],
        );

        let per_node = |value: &dyn Fn(&super::NodeSnapshot) -> u64| {
            self.nodes
                .iter()
                .map(|node| counter(&[("node", &node.name)], value(node)))
                .collect()
        };
        add(
            "node_submissions_total",
            "Submissions answered, per engine node (paging, virtual).",
            COUNTER,
            per_node(&|node| node.submissions),
        );
        add(
            "node_submission_faults_total",
            "Submissions that ended with a fault status, per engine node.",
            COUNTER,
            per_node(&|node| node.faults),
        );
        add(
            "node_bytes_total",
            "Bytes submissions moved, per engine node.",
            COUNTER,
            per_node(&|node| node.bytes),
        );
        add(
            "node_latency_seconds",
            "Execution time of one submission, per engine node.",
            SUMMARY,
            self.nodes
                .iter()
                .map(|node| summary(&[("node", &node.name)], &node.execution))
                .collect(),
        );

        if let Some(link) = &self.link {
            add(
                "link_packets_total",
                "Packets the link model (--link) gave a time.",
                COUNTER,
                vec![counter(&[("model", &link.model)], link.packets)],
            );
            add(
                "link_modelled_seconds_total",
                "Time the link model gave packets.",
                COUNTER,
                vec![seconds_counter(&[("model", &link.model)], link.modelled_ns)],
            );
            add(
                "link_waited_seconds_total",
                "Time the engine waited for the link model beyond its own copies.",
                COUNTER,
                vec![seconds_counter(&[("model", &link.model)], link.waited_ns)],
            );
            add(
                "link_late_packets_total",
                "Packets whose copy on the host took longer than the link model.",
                COUNTER,
                vec![counter(&[("model", &link.model)], link.late_packets)],
            );
        }

        let q = &self.queue_depth;
        add(
            "queue_depth",
            "Submissions waiting or running now.",
            GAUGE,
            vec![gauge(&[], q.current as f64)],
        );
        add(
            "queue_depth_max",
            "Most submissions waiting or running at once.",
            GAUGE,
            vec![gauge(&[], q.max as f64)],
        );
        add(
            "queue_depth_mean",
            "Time-weighted mean of submissions waiting or running.",
            GAUGE,
            vec![gauge(&[], q.mean)],
        );

        let mut segment_metrics = Vec::new();
        let mut bank_metrics = Vec::new();
        for segment in &self.segments {
            let id = segment.segment.to_string();
            for (direction, value) in [
                ("read", segment.read_bytes),
                ("write", segment.written_bytes),
            ] {
                segment_metrics.push(counter(
                    &[("segment", &id), ("direction", direction)],
                    value,
                ));
            }
            for bank in &segment.banks {
                let index = bank.bank.to_string();
                for (direction, value) in [("read", bank.read_bytes), ("write", bank.written_bytes)]
                {
                    bank_metrics.push(counter(
                        &[("segment", &id), ("bank", &index), ("direction", direction)],
                        value,
                    ));
                }
            }
        }
        if self.unknown_segment != TrafficBytes::default() {
            for (direction, value) in [
                ("read", self.unknown_segment.read_bytes),
                ("write", self.unknown_segment.written_bytes),
            ] {
                segment_metrics.push(counter(
                    &[("segment", "unknown"), ("direction", direction)],
                    value,
                ));
            }
        }
        add(
            "segment_bytes_total",
            "Bytes packets read and wrote per segment (0 = system memory).",
            COUNTER,
            segment_metrics,
        );
        add(
            "bank_bytes_total",
            "Bytes packets read and wrote per bank of a banked segment.",
            COUNTER,
            bank_metrics,
        );

        let d = &self.display;
        add(
            "display_sockets_total",
            "Display sockets QEMU handed over.",
            COUNTER,
            vec![counter(&[], d.sockets)],
        );
        add(
            "display_messages_total",
            "Messages written to QEMU's display socket, per kind.",
            COUNTER,
            [
                ("scanout", d.scanouts),
                ("update", d.updates),
                ("streamed_band", d.streamed_bands),
                ("cursor_image", d.cursor_images),
                ("cursor_move", d.cursor_moves),
                ("cursor_hide", d.cursor_hides),
            ]
            .iter()
            .map(|&(kind, value)| counter(&[("kind", kind)], value))
            .collect(),
        );
        add(
            "display_pixel_bytes_total",
            "Pixel bytes written to QEMU's display socket, per kind of update.",
            COUNTER,
            vec![
                counter(&[("kind", "update")], d.update_bytes),
                counter(&[("kind", "streamed_band")], d.streamed_bytes),
            ],
        );
        add(
            "display_dropped_total",
            "Display messages dropped, per reason.",
            COUNTER,
            vec![
                counter(&[("reason", "not_reading")], d.dropped_not_reading),
                counter(&[("reason", "socket_closed")], d.dropped_socket_closed),
            ],
        );
        families
    }
}

fn metric(labels: &[(&str, &str)]) -> Metric {
    Metric::from_label(
        labels
            .iter()
            .map(|(name, value)| {
                let mut pair = LabelPair::default();
                pair.set_name(name.to_string());
                pair.set_value(value.to_string());
                pair
            })
            .collect(),
    )
}

fn counter(labels: &[(&str, &str)], value: u64) -> Metric {
    float_counter(labels, value as f64)
}

/// A counter of nanoseconds, in seconds.
fn seconds_counter(labels: &[(&str, &str)], ns: u64) -> Metric {
    float_counter(labels, ns as f64 / 1e9)
}

fn float_counter(labels: &[(&str, &str)], value: f64) -> Metric {
    let mut counter = Counter::default();
    counter.set_value(value);
    let mut metric = metric(labels);
    metric.set_counter(counter);
    metric
}

fn gauge(labels: &[(&str, &str)], value: f64) -> Metric {
    let mut gauge = Gauge::default();
    gauge.set_value(value);
    let mut metric = metric(labels);
    metric.set_gauge(gauge);
    metric
}

/// Quantiles are NaN before the first sample, as Prometheus' own clients write them.
fn summary(labels: &[(&str, &str)], latency: &LatencySnapshot) -> Metric {
    let seconds = |ns: Option<u64>| ns.map_or(f64::NAN, |ns| ns as f64 / 1e9);
    let quantiles = [(0.5, latency.p50_ns), (0.99, latency.p99_ns)]
        .into_iter()
        .map(|(q, ns)| {
            let mut quantile = Quantile::default();
            quantile.set_quantile(q);
            quantile.set_value(seconds(ns));
            quantile
        })
        .collect();
    let mut summary = Summary::default();
    summary.set_quantile(quantiles);
    summary.set_sample_count(latency.count);
    summary.set_sample_sum(latency.sum_ns as f64 / 1e9);
    let mut metric = metric(labels);
    metric.set_summary(summary);
    metric
}
