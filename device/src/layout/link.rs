//! The link a layout models (`--link`, the layout file's `[link]`): a PCIe preset or a custom
//! bandwidth, per-transfer latency and per-page overhead, and the VRAM bandwidth. The device
//! never reports it to the driver; `crate::gpu::link` applies it.

use std::fmt;
use std::time::Duration;

/// PCIe data rate per lane after line encoding, bytes per second, by generation (1 to 5):
/// 2.5 and 5 GT/s with 8b/10b, 8, 16 and 32 GT/s with 128b/130b.
const PCIE_LANE_RATE: [u64; 5] = [
    250_000_000,
    500_000_000,
    8_000_000_000 * 128 / 130 / 8,
    16_000_000_000 * 128 / 130 / 8,
    32_000_000_000 * 128 / 130 / 8,
];

/// Lane counts a preset may name.
const PCIE_WIDTHS: [u32; 5] = [1, 2, 4, 8, 16];

/// What a preset assumes for one DMA transfer's set-up (doorbell, descriptor fetch, completion).
const PRESET_LATENCY: Duration = Duration::from_micros(1);
/// What a preset assumes for each page of a page list (one descriptor entry fetched and used).
const PRESET_PAGE_OVERHEAD: Duration = Duration::from_nanos(20);

/// A link and VRAM to model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Link bytes per second.
    pub bandwidth: u64,
    /// Per transfer that crosses the link.
    pub latency: Duration,
    /// Per 4 KiB page of system memory a transfer touches.
    pub page_overhead: Duration,
    /// VRAM bytes per second; `None`: VRAM moves at host memory speed.
    pub vram_bandwidth: Option<u64>,
    /// The preset it started from, for reports.
    pub preset: Option<String>,
}

/// Why a `--link` text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LinkSpecError {
    #[error("{0:?} is neither a preset (pcie1x1 ... pcie5x16) nor a KEY=VALUE (bandwidth, latency, page, vram)")]
    UnknownWord(String),
    #[error("{key}: {value:?} is not a rate such as 12GB/s, 900MB/s or 14.5GiB/s")]
    BadRate { key: &'static str, value: String },
    #[error("{key}: {value:?} is not a duration such as 1us, 250ns or 2ms")]
    BadDuration { key: &'static str, value: String },
    #[error("{key}: a rate must be from 1 KB/s to 100 TB/s, not {value:?}")]
    RateOutOfRange { key: &'static str, value: String },
    #[error("{key}: a duration must be at most 1 s, not {value:?}")]
    DurationOutOfRange { key: &'static str, value: String },
    #[error("no link bandwidth: name a preset (pcie4x16) or give bandwidth=RATE")]
    NoBandwidth,
    #[error("{0} is given twice")]
    Repeated(&'static str),
}

/// The range of a rate (bytes per second): beyond any link either way, and a packet's modelled
/// time stays finite.
const RATES: std::ops::RangeInclusive<u64> = 1_000..=100_000_000_000_000;
/// The most a latency or page overhead may be.
const MAX_DURATION: Duration = Duration::from_secs(1);

/// `pcie4x16` and the like: the link's data rate.
fn preset_rate(name: &str) -> Option<u64> {
    let (generation, width) = name.strip_prefix("pcie")?.split_once('x')?;
    let generation: usize = generation.parse().ok()?;
    let width: u32 = width.parse().ok()?;
    let lane = PCIE_LANE_RATE.get(generation.checked_sub(1)?)?;
    PCIE_WIDTHS
        .contains(&width)
        .then(|| lane * u64::from(width))
}

/// `12GB/s` (decimal, as link speeds are quoted), `14.5GiB/s` (binary), `900MB/s`, `1TB/s`:
/// bytes per second, in whole bytes.
fn parse_rate(key: &'static str, text: &str) -> Result<u64, LinkSpecError> {
    let bad = || LinkSpecError::BadRate {
        key,
        value: text.to_string(),
    };
    let per_second = text.strip_suffix("/s").ok_or_else(bad)?;
    let split = per_second
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (number, unit) = per_second.split_at(split);
    let scale: u128 = match unit {
        "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    // Whole and fractional digits, at most nine decimals: exact in integers.
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.len() > 9 || !fraction.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let digits: u128 = format!("{whole}{fraction}").parse().map_err(|_| bad())?;
    let divisor = 10u128.pow(u32::try_from(fraction.len()).map_err(|_| bad())?);
    let out_of_range = || LinkSpecError::RateOutOfRange {
        key,
        value: text.to_string(),
    };
    let rate = digits
        .checked_mul(scale)
        .map(|bytes| bytes / divisor)
        .and_then(|rate| u64::try_from(rate).ok())
        .ok_or_else(out_of_range)?;
    if !RATES.contains(&rate) {
        return Err(out_of_range());
    }
    Ok(rate)
}

fn parse_duration(key: &'static str, text: &str) -> Result<Duration, LinkSpecError> {
    let duration = humantime::parse_duration(text).map_err(|_| LinkSpecError::BadDuration {
        key,
        value: text.to_string(),
    })?;
    if duration > MAX_DURATION {
        return Err(LinkSpecError::DurationOutOfRange {
            key,
            value: text.to_string(),
        });
    }
    Ok(duration)
}

/// Sets `slot` once.
fn once<T>(slot: &mut Option<T>, key: &'static str, value: T) -> Result<(), LinkSpecError> {
    if slot.replace(value).is_some() {
        return Err(LinkSpecError::Repeated(key));
    }
    Ok(())
}

impl LinkSpec {
    /// Parses `pcie4x16`, `pcie3x8,vram=448GB/s`, `bandwidth=12GB/s,latency=2us,page=40ns`:
    /// a preset and/or KEY=VALUE words separated by commas; a key given after a preset
    /// replaces what the preset says.
    pub fn parse(text: &str) -> Result<Self, LinkSpecError> {
        // The preset named, and its rate.
        let mut preset: Option<(&str, u64)> = None;
        let (mut bandwidth, mut latency, mut page, mut vram) = (None, None, None, None);
        for word in text
            .split(',')
            .map(str::trim)
            .filter(|word| !word.is_empty())
        {
            match word.split_once('=') {
                Some(("bandwidth", value)) => {
                    once(&mut bandwidth, "bandwidth", parse_rate("bandwidth", value)?)?;
                }
                Some(("latency", value)) => {
                    once(&mut latency, "latency", parse_duration("latency", value)?)?;
                }
                Some(("page", value)) => once(&mut page, "page", parse_duration("page", value)?)?,
                Some(("vram", value)) => once(&mut vram, "vram", parse_rate("vram", value)?)?,
                Some(_) => return Err(LinkSpecError::UnknownWord(word.to_string())),
                None => {
                    let rate = preset_rate(word)
                        .ok_or_else(|| LinkSpecError::UnknownWord(word.to_string()))?;
                    once(&mut preset, "a preset", (word, rate))?;
                }
            }
        }
        let bandwidth = bandwidth
            .or(preset.map(|(_, rate)| rate))
            .ok_or(LinkSpecError::NoBandwidth)?;
        // A custom link without a latency or page overhead has none; a preset's are assumed.
        let assumed = |value: Option<Duration>, preset_value| {
            value.unwrap_or(if preset.is_some() {
                preset_value
            } else {
                Duration::ZERO
            })
        };
        Ok(Self {
            bandwidth,
            latency: assumed(latency, PRESET_LATENCY),
            page_overhead: assumed(page, PRESET_PAGE_OVERHEAD),
            vram_bandwidth: vram,
            preset: preset.map(|(name, _)| name.to_string()),
        })
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(preset) = &self.preset {
            write!(f, "{preset}: ")?;
        }
        write!(
            f,
            "{:.2} GB/s, {:?} a transfer, {:?} a page",
            self.bandwidth as f64 / 1e9,
            self.latency,
            self.page_overhead
        )?;
        match self.vram_bandwidth {
            Some(vram) => write!(f, ", VRAM {:.1} GB/s", vram as f64 / 1e9),
            None => write!(f, ", VRAM at host speed"),
        }
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
