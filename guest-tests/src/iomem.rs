//! Guest-physical address ranges from `/proc/iomem` (real addresses only for root), used to pick
//! addresses that are certainly not guest RAM and not any device's BAR.

use std::fs;

const GIB: u64 = 1 << 30;
/// Used when `/proc/iomem` is unreadable or shows zeros: far above any test guest's RAM.
const FALLBACK_UNBACKED: u64 = 1 << 40;

/// A top-level `/proc/iomem` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// What the kernel calls it ("System RAM", "PCI Bus 0000:00", ...).
    pub name: String,
}

/// Top-level entries of an iomem listing (nested entries are indented and skipped).
pub fn parse(text: &str) -> Vec<Range> {
    text.lines()
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| {
            let (span, name) = line.split_once(" : ")?;
            let (start, end) = span.split_once('-')?;
            Some(Range {
                start: u64::from_str_radix(start.trim(), 16).ok()?,
                end: u64::from_str_radix(end.trim(), 16).ok()?,
                name: name.trim().to_string(),
            })
        })
        .collect()
}

/// One past the highest System RAM byte.
pub fn ram_end(ranges: &[Range]) -> Option<u64> {
    ranges
        .iter()
        .filter(|r| r.name == "System RAM")
        .map(|r| r.end.saturating_add(1))
        .max()
        .filter(|end| *end > 1)
}

/// One past the end of the guest RAM block holding the highest System RAM: firmware keeps the
/// last pages of low RAM as "Reserved" or ACPI ranges, which are still RAM to the device, so
/// adjacent ranges of those kinds are included.
pub fn ram_block_end(ranges: &[Range]) -> Option<u64> {
    let mut sorted: Vec<&Range> = ranges.iter().collect();
    sorted.sort_by_key(|r| r.start);
    let top = sorted.iter().rposition(|r| r.name == "System RAM")?;
    let mut end = sorted[top].end.checked_add(1)?;
    for r in &sorted[top + 1..] {
        let firmware = r.name == "Reserved" || r.name.starts_with("ACPI");
        if r.start != end || !firmware {
            break;
        }
        end = r.end.checked_add(1)?;
    }
    (end > 1).then_some(end)
}

/// A 1 GiB-aligned address above every listed range: neither RAM nor a BAR.
pub fn unbacked_address(ranges: &[Range]) -> u64 {
    ranges
        .iter()
        .map(|r| r.end)
        .max()
        .filter(|end| *end > 0)
        .map_or(FALLBACK_UNBACKED, |end| (end / GIB + 1) * GIB)
}

/// This guest's top-level iomem entries (empty if unreadable).
pub fn read() -> Vec<Range> {
    fs::read_to_string("/proc/iomem")
        .map(|text| parse(&text))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q35: &str = "\
00000000-00000fff : Reserved
00001000-0009fbff : System RAM
000f0000-000fffff : Reserved
  000f0000-000fffff : System ROM
00100000-1ffdffff : System RAM
  0b000000-0be02ba6 : Kernel code
1ffe0000-1fffffff : Reserved
b0000000-bfffffff : PCI MMCONFIG 0000 [bus 00-ff]
fd000000-fdffffff : PCI Bus 0000:00
380000000000-3807ffffffff : PCI Bus 0000:00
  380000000000-380003ffffff : 0000:00:04.1
";

    #[test]
    fn parses_top_level_entries() {
        let ranges = parse(Q35);
        assert_eq!(ranges.len(), 8);
        assert_eq!(ranges[3].name, "System RAM");
        assert_eq!(ram_end(&ranges), Some(0x1ffe_0000));
        assert_eq!(ram_block_end(&ranges), Some(0x2000_0000));
        assert_eq!(unbacked_address(&ranges), 0x3808_0000_0000);
    }

    #[test]
    fn falls_back_without_addresses() {
        let hidden = "00000000-00000000 : System RAM\n";
        assert_eq!(ram_end(&parse(hidden)), None);
        assert_eq!(ram_block_end(&parse(hidden)), None);
        assert_eq!(unbacked_address(&parse(hidden)), FALLBACK_UNBACKED);
        assert_eq!(unbacked_address(&[]), FALLBACK_UNBACKED);
    }
}
