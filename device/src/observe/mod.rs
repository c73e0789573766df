//! Measurement: counters and latency histograms of the paging path, the `--trace` timeline, the
//! stats endpoint that serves them, and the benchmark's eventfd echo.

pub mod echo;
pub mod endpoint;
pub mod stats;
pub mod trace;
