//! Durations as the `u64` nanoseconds the statistics, the trace and the recording count in.

use std::time::Duration;

/// Nanoseconds of `duration`, saturated at `u64::MAX` (about 584 years).
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
