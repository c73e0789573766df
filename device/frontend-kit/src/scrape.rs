//! The stats endpoint's Prometheus text as the tests read it: parsed with `prometheus-parse`,
//! and one sample looked up by metric and labels.

use prometheus_parse::{Scrape, Value};

/// Parses Prometheus text (the parser skips lines it cannot read: a test that needs every
/// line well-formed checks them itself).
pub fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|line| Ok(line.to_string()))).unwrap()
}

/// The value of the sample of `metric` that carries every one of `labels` (it may carry
/// others too); panics naming them when there is none.
pub fn sample(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Value {
    scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == metric
                && labels
                    .iter()
                    .all(|(name, value)| sample.labels.get(name) == Some(value))
        })
        .unwrap_or_else(|| panic!("no {metric} {labels:?}"))
        .value
        .clone()
}
