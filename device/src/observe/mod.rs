//! Measurement: counters and latency histograms of the paging path, the `--trace` timeline, the
//! `--record` file of every submission of both nodes, the stats endpoint that serves them, and
//! the benchmark's eventfd echo.

pub mod echo;
pub mod endpoint;
pub mod recording;
pub mod stats;
pub mod trace;
