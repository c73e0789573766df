//! Latency statistics for the guest benchmark: samples, nearest-rank percentiles, throughput and
//! the fixed-width text the benchmark prints. Pure logic, host-testable.

use std::time::Duration;

/// Latency samples of one operation (or of every operation of one packet kind).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    nanos: Vec<u64>,
}

impl Samples {
    /// No samples yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one sample.
    pub fn push(&mut self, latency: Duration) {
        self.nanos
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.nanos.extend_from_slice(&other.nanos);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    /// Sum of all samples.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.iter().sum())
    }

    /// The summary of the samples; `None` when there are none.
    pub fn summary(&self) -> Option<Summary> {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        let at = |p| Duration::from_nanos(percentile(&sorted, p).unwrap_or(0));
        Some(Summary {
            count: sorted.len() as u64,
            min: Duration::from_nanos(*sorted.first()?),
            p50: at(50.0),
            p99: at(99.0),
            max: Duration::from_nanos(*sorted.last()?),
            total: self.total(),
        })
    }
}

/// Nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending): the smallest sample
/// such that at least `p` % of the samples are at or below it. `None` for no samples.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // ceil(p / 100 * n), computed in integers (hundredths of a percent) to avoid float
    // rounding at exact ranks such as p99 of 100 samples.
    // A float-to-integer `as` (there is no `TryFrom` for floats) of a value clamped to 0..=10000.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let hundredths = (p.clamp(0.0, 100.0) * 100.0).round() as u128;
    let rank = (hundredths * n as u128).div_ceil(10_000).max(1) as usize;
    Some(sorted[rank.min(n) - 1])
}

/// Count, percentiles and sum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min: Duration,
    /// Median (nearest rank).
    pub p50: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
    /// Sum of all samples.
    pub total: Duration,
}

impl Summary {
    /// Mean latency.
    pub fn mean(&self) -> Duration {
        match u32::try_from(self.count) {
            Ok(n) if n > 0 => self.total / n,
            _ => Duration::ZERO,
        }
    }
}

/// Microseconds, as a float (for printing and JSON).
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `units` (bytes or pages) moved in `elapsed`, per second; `None` when nothing moved or no
/// time passed.
pub fn rate_per_sec(units: u64, elapsed: Duration) -> Option<f64> {
    let secs = elapsed.as_secs_f64();
    (units > 0 && secs > 0.0).then(|| units as f64 / secs)
}

/// Bytes per second as MB/s (10^6 bytes).
pub fn mb_per_sec(bytes: u64, elapsed: Duration) -> Option<f64> {
    rate_per_sec(bytes, elapsed).map(|r| r / 1e6)
}

/// A latency in µs for a table: one decimal below 10 000 µs, whole µs above.
pub fn us_text(d: Duration) -> String {
    let us = micros(d);
    if us < 10_000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A rate for a table (`-` when there is none): one decimal below 10 000, whole units above.
pub fn rate_text(rate: Option<f64>) -> String {
    match rate {
        None => "-".to_string(),
        Some(r) if r < 10_000.0 => format!("{r:.1}"),
        Some(r) => format!("{r:.0}"),
    }
}

/// Bytes as a short size: `64K`, `1M`, `4103`, `0`.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    match UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
    {
        Some((unit, name)) => format!("{}{name}", bytes / unit),
        None => bytes.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(50));
        assert_eq!(percentile(&sorted, 99.0), Some(99));
        assert_eq!(percentile(&sorted, 100.0), Some(100));
        assert_eq!(percentile(&sorted, 0.0), Some(1));
        let ten: Vec<u64> = (1..=10).map(|v| v * 10).collect();
        assert_eq!(percentile(&ten, 50.0), Some(50));
        // 99 % of 10 samples is 9.9: the 10th sample.
        assert_eq!(percentile(&ten, 99.0), Some(100));
        assert_eq!(percentile(&ten, 91.0), Some(100));
        assert_eq!(percentile(&ten, 90.0), Some(90));
        assert_eq!(percentile(&[7], 50.0), Some(7));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[3, 9], 50.0), Some(3));
        assert_eq!(percentile(&[], 50.0), None);
        // 1000 samples: p99 is the 990th.
        let many: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&many, 99.0), Some(990));
    }

    #[test]
    fn summary_of_unsorted_samples() {
        let mut s = Samples::new();
        assert!(s.is_empty());
        assert_eq!(s.summary(), None);
        for v in [30, 10, 20, 1000, 40] {
            s.push(us(v));
        }
        let sum = s.summary().unwrap();
        assert_eq!(sum.count, 5);
        assert_eq!(sum.min, us(10));
        assert_eq!(sum.p50, us(30));
        assert_eq!(sum.p99, us(1000));
        assert_eq!(sum.max, us(1000));
        assert_eq!(sum.total, us(1100));
        assert_eq!(sum.mean(), us(220));

        let mut all = Samples::new();
        all.extend(&s);
        all.push(us(5));
        assert_eq!(all.len(), 6);
        assert_eq!(all.summary().unwrap().min, us(5));
        assert_eq!(all.summary().unwrap().p50, us(20));
    }

    #[test]
    fn rates() {
        assert_eq!(mb_per_sec(1_000_000, Duration::from_secs(1)), Some(1.0));
        assert_eq!(mb_per_sec(0, Duration::from_secs(1)), None);
        assert_eq!(mb_per_sec(10, Duration::ZERO), None);
        assert_eq!(rate_per_sec(256, Duration::from_millis(1)), Some(256_000.0));
        // 100 x 1 MiB in 0.5 s.
        let r = mb_per_sec(100 << 20, Duration::from_millis(500)).unwrap();
        assert!((r - 209.7152).abs() < 1e-9, "{r}");
    }

    #[test]
    fn text_formats() {
        assert_eq!(us_text(Duration::from_nanos(412_345)), "412.3");
        assert_eq!(us_text(Duration::from_nanos(940)), "0.9");
        assert_eq!(us_text(Duration::from_micros(12_345)), "12345");
        assert_eq!(rate_text(None), "-");
        assert_eq!(rate_text(Some(183.26)), "183.3");
        assert_eq!(rate_text(Some(1_234_567.8)), "1234568");
        assert_eq!(size_text(64 << 10), "64K");
        assert_eq!(size_text(1 << 20), "1M");
        assert_eq!(size_text(16 << 20), "16M");
        assert_eq!(size_text(4103), "4103");
        assert_eq!(size_text(0), "0");
        assert!((micros(Duration::from_nanos(1500)) - 1.5).abs() < 1e-9);
    }
}
