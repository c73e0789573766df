//! The live view `stats --watch` draws: what changed between two snapshots, as rates per second
//! of the device's own clock (its uptime), beside the latency distributions as small bars.
//!
//! Pure: it reads [`StatsSnapshot`]s (the `stats --json` object) and returns text, so the view
//! costs the device one snapshot per frame and nothing it does not already count. The terminal
//! (redrawing in place, restoring it on exit) is the caller's.

use std::fmt::Write as _;

use super::render::{bytes, dropped_line, duration, MIB};
use super::{LatencySnapshot, NamedCount, NodeSnapshot, PacketKindSnapshot, StatsSnapshot};

/// Width of a latency bar: five cells a decade from 1 µs to 1 s.
const BAR_CELLS: usize = 30;
const BAR_CELLS_PER_DECADE: f64 = 5.0;
/// The bar's left end, in nanoseconds.
const BAR_START_NS: f64 = 1_000.0;

/// Draws frames from successive snapshots of one backend.
#[derive(Debug)]
pub struct LiveView {
    source: String,
    previous: Option<StatsSnapshot>,
}

/// What a rate is taken over.
struct Window<'a> {
    before: Option<&'a StatsSnapshot>,
    seconds: f64,
}

impl Window<'_> {
    /// Per second of `value`'s growth since the window's start (since the backend started for
    /// the first frame).
    fn rate(&self, value: impl Fn(&StatsSnapshot) -> u64, now: &StatsSnapshot) -> f64 {
        let start = self.before.map_or(0, &value);
        value(now).saturating_sub(start) as f64 / self.seconds
    }
}

impl LiveView {
    /// A view of the backend whose stats endpoint is `source` (named in the title).
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            previous: None,
        }
    }

    /// The next frame: rates since the previous snapshot (since the backend started for the
    /// first, or when the backend restarted in between).
    pub fn frame(&mut self, now: StatsSnapshot) -> String {
        let before = self
            .previous
            .take()
            .filter(|before| before.uptime_ns < now.uptime_ns);
        let span_ns = now
            .uptime_ns
            .saturating_sub(before.as_ref().map_or(0, |before| before.uptime_ns))
            .max(1);
        let window = Window {
            before: before.as_ref(),
            seconds: span_ns as f64 / 1e9,
        };
        let text = render(&self.source, &window, &now);
        self.previous = Some(now);
        text
    }
}

fn render(source: &str, window: &Window<'_>, now: &StatsSnapshot) -> String {
    let mut out = String::new();
    let over = match window.before {
        Some(_) => format!("rates over the last {:.2} s", window.seconds),
        None => "rates since start".to_string(),
    };
    let _ = writeln!(
        out,
        "vhost-user-wddm-gpu {source}  up {}  {over}  (Ctrl-C quits)",
        uptime(now.uptime_ns)
    );
    let q = &now.queue_depth;
    let _ = writeln!(
        out,
        "requests {:.1}/s ({:.1} refused/s)   paging queue depth now {}, max {}, mean {:.2}",
        window.rate(|s| s.requests, now),
        window.rate(|s| s.refused_requests, now),
        q.current,
        q.max,
        q.mean
    );

    rate_table(&mut out, window, now, &NODES, |node| {
        Some(format!("{} {}", node.node, node.name))
    });
    let _ = writeln!(
        out,
        "  preempted {:.1}/s   statuses: {}",
        window.rate(|s| s.submissions.preemptions, now),
        status_rates(window, now)
    );
    // A kind that has never run has nothing to show.
    rate_table(&mut out, window, now, &PACKETS, |kind| {
        (kind.count > 0).then(|| kind.kind.clone())
    });

    out.push('\n');
    let _ = writeln!(
        out,
        "{:<16}{:>14}{:>14}{:>16}",
        "segment", "read MiB/s", "write MiB/s", "total moved"
    );
    for (index, segment) in now.segments.iter().enumerate() {
        let name = if segment.segment == 0 {
            "system memory".to_string()
        } else {
            format!("segment {}", segment.segment)
        };
        let _ = writeln!(
            out,
            "{name:<16}{:>14.1}{:>14.1}{:>16}",
            window.rate(|s| s.segments.get(index).map_or(0, |g| g.read_bytes), now) / MIB,
            window.rate(
                |s| s.segments.get(index).map_or(0, |g| g.written_bytes),
                now
            ) / MIB,
            bytes(segment.read_bytes.saturating_add(segment.written_bytes)),
        );
    }

    out.push('\n');
    let _ = writeln!(
        out,
        "{:<16}{}  p50 / p99 / max since start",
        "latency",
        scale()
    );
    let latencies = now
        .nodes
        .iter()
        .map(|node| (format!("{} node", node.name), &node.execution))
        .chain(
            now.packets
                .iter()
                .filter(|kind| kind.count > 0)
                .map(|kind| (kind.kind.clone(), &kind.latency)),
        );
    for (name, latency) in latencies {
        let _ = writeln!(
            out,
            "{name:<16}{}  {} / {} / {}",
            bar(latency),
            duration(latency.p50_ns),
            duration(latency.p99_ns),
            duration(latency.max_ns)
        );
    }

    out.push('\n');
    for (what, counts, before) in [
        (
            "injections fired",
            &now.injections,
            window.before.map(|before| &before.injections),
        ),
        (
            "checker warnings",
            &now.checker_warnings,
            window.before.map(|before| &before.checker_warnings),
        ),
    ] {
        let _ = writeln!(out, "{what}: {}", named_with_news(counts, before));
    }
    if let Some(link) = &now.link {
        let field = |value: fn(&super::LinkSnapshot) -> u64| {
            move |s: &StatsSnapshot| s.link.as_ref().map_or(0, value)
        };
        // Nanoseconds per second of device time: the share of the window.
        let share = |value| window.rate(value, now) / 1e9 * 100.0;
        let _ = writeln!(
            out,
            "link model ({}): modelled {:.1}% of the time, waited {:.1}%, {:.1} packets/s slower on the host",
            link.model,
            share(field(|l| l.modelled_ns)),
            share(field(|l| l.waited_ns)),
            window.rate(field(|l| l.late_packets), now)
        );
    }
    let _ = writeln!(
        out,
        "display to QEMU: {:.1} updates/s, {:.1} MiB/s, {:.1} cursor moves/s",
        window.rate(|s| s.display.updates, now),
        window.rate(
            |s| s
                .display
                .update_bytes
                .saturating_add(s.display.streamed_bytes),
            now
        ) / MIB,
        window.rate(|s| s.display.cursor_moves, now),
    );
    dropped_line(&mut out, &now.display);
    out
}

/// A table of rates, one row per item of a list in the snapshot: four counters per second
/// (the third bytes, shown in MiB) and the mean latency of the window's samples.
struct RateTable<T: 'static> {
    heading: [&'static str; 6],
    items: fn(&StatsSnapshot) -> &[T],
    counters: [fn(&T) -> u64; 4],
    latency: fn(&T) -> &LatencySnapshot,
}

const NODES: RateTable<NodeSnapshot> = RateTable {
    heading: ["node", "subm/s", "faults/s", "MiB/s", "pkts/s", "mean now"],
    items: |s| &s.nodes,
    counters: [|n| n.submissions, |n| n.faults, |n| n.bytes, |n| n.packets],
    latency: |n| &n.execution,
};

const PACKETS: RateTable<PacketKindSnapshot> = RateTable {
    heading: [
        "packet", "pkts/s", "faults/s", "MiB/s", "pages/s", "mean now",
    ],
    items: |s| &s.packets,
    counters: [|k| k.count, |k| k.faults, |k| k.bytes, |k| k.pages],
    latency: |k| &k.latency,
};

/// Writes `table` after a blank line; `name` names a row, or leaves it out (`None`).
fn rate_table<T>(
    out: &mut String,
    window: &Window<'_>,
    now: &StatsSnapshot,
    table: &RateTable<T>,
    name: impl Fn(&T) -> Option<String>,
) {
    let [first, columns @ .., last] = table.heading;
    out.push('\n');
    let _ = write!(out, "{first:<16}");
    for column in columns {
        let _ = write!(out, "{column:>10}");
    }
    let _ = writeln!(out, "{last:>12}");
    for (index, item) in (table.items)(now).iter().enumerate() {
        let Some(name) = name(item) else {
            continue;
        };
        let _ = write!(out, "{name:<16}");
        for (column, counter) in table.counters.iter().enumerate() {
            let rate = window.rate(|s| (table.items)(s).get(index).map_or(0, counter), now);
            let shown = if column == 2 { rate / MIB } else { rate };
            let _ = write!(out, "{shown:>10.1}");
        }
        let before = window
            .before
            .and_then(|before| (table.items)(before).get(index))
            .map(table.latency);
        let _ = writeln!(out, "{:>12}", interval_mean(before, (table.latency)(item)));
    }
}

/// `3:04:05` (hours unbounded).
fn uptime(ns: u64) -> String {
    let seconds = ns / 1_000_000_000;
    format!(
        "{}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// The mean of the samples taken in the window; `-` when it took none.
fn interval_mean(before: Option<&LatencySnapshot>, now: &LatencySnapshot) -> String {
    let (count_before, sum_before) = before.map_or((0, 0), |before| (before.count, before.sum_ns));
    let count = now.count.saturating_sub(count_before);
    if count == 0 {
        return "-".to_string();
    }
    duration(Some(now.sum_ns.saturating_sub(sum_before) / count))
}

/// The submission statuses seen in the window, with their rates: `ok 120.0/s, fault 1.0/s`.
fn status_rates(window: &Window<'_>, now: &StatsSnapshot) -> String {
    let listed: Vec<String> = now
        .submissions
        .by_status
        .iter()
        .enumerate()
        .filter_map(|(index, status)| {
            let rate = window.rate(
                |s| {
                    s.submissions
                        .by_status
                        .get(index)
                        .map_or(0, |status| status.count)
                },
                now,
            );
            (rate > 0.0).then(|| format!("{} {rate:.1}/s", status.status))
        })
        .collect();
    if listed.is_empty() {
        "none".to_string()
    } else {
        listed.join(", ")
    }
}

/// `hang 2 (+1), slow 1`: each count, with what the window added.
fn named_with_news(now: &[NamedCount], before: Option<&Vec<NamedCount>>) -> String {
    if now.is_empty() {
        return "none".to_string();
    }
    let listed: Vec<String> = now
        .iter()
        .map(|named| {
            let earlier = before
                .and_then(|before| before.iter().find(|seen| seen.name == named.name))
                .map_or(0, |seen| seen.count);
            match named.count.saturating_sub(earlier) {
                0 => format!("{} {}", named.name, named.count),
                new => format!("{} {} (+{new})", named.name, named.count),
            }
        })
        .collect();
    listed.join(", ")
}

/// How many of the bar's cells a latency fills: those whose lower edge it exceeds
/// (logarithmic: cell `i` starts at 1 µs × 10^(i / 5)).
fn cell(ns: u64) -> usize {
    let ns = ns as f64;
    (0u32..)
        .take(BAR_CELLS)
        .take_while(|&index| {
            ns > BAR_START_NS * 10f64.powf(f64::from(index) / BAR_CELLS_PER_DECADE)
        })
        .count()
}

/// `[####====--      ]`: `#` up to the median, `=` up to the 99th percentile, `-` up to the
/// maximum, on a logarithmic scale from 1 µs to 1 s (longer fills the bar); blank before the
/// first sample.
fn bar(latency: &LatencySnapshot) -> String {
    let (Some(p50), Some(p99), Some(max)) = (latency.p50_ns, latency.p99_ns, latency.max_ns) else {
        return format!("[{}]", " ".repeat(BAR_CELLS));
    };
    let (p50, p99, max) = (cell(p50), cell(p99), cell(max));
    let cells: String = (1..=BAR_CELLS)
        .map(|index| match index {
            _ if index <= p50 => '#',
            _ if index <= p99 => '=',
            _ if index <= max => '-',
            _ => ' ',
        })
        .collect();
    format!("[{cells}]")
}

/// The bar's scale, a mark every second decade above the bar's cells: ` 1µs       100µs ...`.
fn scale() -> String {
    format!(" {:<10}{:<10}{:<10}1s", "1µs", "100µs", "10ms")
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
