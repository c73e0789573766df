//! Summaries of repeated measurements, as the benchmarks report them.

use std::time::Duration;

use serde_json::{json, Value};

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The smallest and the largest of `values`: their spread.
pub fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

/// Percentile `p` (0-100) of samples, in microseconds.
pub fn percentile_us(samples: &mut [Duration], p: usize) -> f64 {
    samples.sort_unstable();
    let index = (samples.len() * p / 100).min(samples.len() - 1);
    samples[index].as_secs_f64() * 1e6
}

/// `value` as a JSON number with `decimals` decimals (an integer for 0), so reports do not
/// carry float noise.
pub fn round_to(value: f64, decimals: usize) -> Value {
    if decimals == 0 {
        // A float-to-integer `as` saturates, as wanted (there is no `TryFrom` for floats).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return json!(value.round() as u64);
    }
    let scale = 10f64.powi(i32::try_from(decimals).unwrap());
    json!((value * scale).round() / scale)
}
