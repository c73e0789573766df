//! Guest-physical address ranges from `/proc/iomem` (real addresses only for root), used to pick
//! addresses that are certainly not guest RAM and not any device's BAR, and free space in a PCI
//! bridge window to move a BAR to.

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
        .filter_map(parse_line)
        .collect()
}

/// Every entry of an iomem listing, nested ones included.
pub fn parse_all(text: &str) -> Vec<Range> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Range> {
    let (span, name) = line.split_once(" : ")?;
    let (start, end) = span.split_once('-')?;
    Some(Range {
        start: u64::from_str_radix(start.trim(), 16).ok()?,
        end: u64::from_str_radix(end.trim(), 16).ok()?,
        name: name.trim().to_string(),
    })
}

/// A new address for a `size`-byte BAR now at `current` (`size` a power of two, `current`
/// aligned to it): inside the innermost `PCI Bus` window that holds the BAR, aligned to `size`,
/// and clear of every listed range except that window and the ranges around it. The nearest
/// such address above the BAR wins, else the nearest below. `ranges` must hold nested entries
/// ([`parse_all`]): the other devices' BARs are nested in the window.
pub fn free_bar_slot(ranges: &[Range], current: u64, size: u64) -> Option<u64> {
    if !size.is_power_of_two() || !current.is_multiple_of(size) {
        return None;
    }
    let last = current.checked_add(size - 1)?;
    let window = ranges
        .iter()
        .filter(|r| r.name.starts_with("PCI Bus") && r.start <= current && last <= r.end)
        .min_by_key(|r| r.end - r.start)?;
    let fits = |start: u64| {
        let Some(end) = start.checked_add(size - 1) else {
            return false;
        };
        window.start <= start
            && end <= window.end
            && !ranges.iter().any(|r| {
                let encloses_window = r.start <= window.start && window.end <= r.end;
                !encloses_window && r.start <= end && start <= r.end
            })
    };
    let above = (1..)
        .map_while(|k: u64| current.checked_add(k.checked_mul(size)?))
        .take_while(|start| *start <= window.end);
    let below = (1..)
        .map_while(|k: u64| current.checked_sub(k.checked_mul(size)?))
        .take_while(|start| *start >= window.start);
    above.chain(below).find(|start| fits(*start))
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

/// This guest's iomem entries, nested ones included (empty if unreadable).
pub fn read_all() -> Vec<Range> {
    fs::read_to_string("/proc/iomem")
        .map(|text| parse_all(&text))
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

    /// The 32-bit part of a q35 guest with a 256 MiB VRAM BAR, as Linux lists it.
    const Q35_BARS: &str = "\
00000000-00000fff : Reserved
00100000-1ffdffff : System RAM
b0000000-bfffffff : PCI MMCONFIG 0000 [bus 00-ff]
  b0000000-bfffffff : Reserved
c0000000-febfffff : PCI Bus 0000:00
  c0000000-c0ffffff : 0000:00:01.0
  e0000000-efffffff : 0000:00:04.1
  fe000000-fe003fff : 0000:00:04.0
  febf0000-febf0fff : 0000:00:04.1
fec00000-fec003ff : IOAPIC 0
";

    #[test]
    fn finds_a_free_bar_slot_in_the_window() {
        let all = parse_all(Q35_BARS);
        assert_eq!(all.len(), 10);
        assert_eq!(parse(Q35_BARS).len(), 5);
        const SIZE: u64 = 0x1000_0000;
        // Above is past the window; d0000000 is free.
        assert_eq!(free_bar_slot(&all, 0xe000_0000, SIZE), Some(0xd000_0000));
        // A 64 MiB BAR at e0000000 may not land on the listed e0000000-efffffff; f0000000 is
        // the first free slot above it.
        assert_eq!(
            free_bar_slot(&all, 0xe000_0000, 0x400_0000),
            Some(0xf000_0000)
        );
        // Taking d0000000 leaves nothing: c0000000 holds 00:01.0.
        let mut crowded = all.clone();
        crowded.push(Range {
            start: 0xd000_0000,
            end: 0xd000_0fff,
            name: "0000:00:02.0".into(),
        });
        assert_eq!(free_bar_slot(&crowded, 0xe000_0000, SIZE), None);
        // Not in any window, misaligned, not a power of two.
        assert_eq!(free_bar_slot(&all, 0x1000_0000, SIZE), None);
        assert_eq!(free_bar_slot(&all, 0xe000_1000, SIZE), None);
        assert_eq!(free_bar_slot(&all, 0xe000_0000, 3 << 20), None);
    }

    #[test]
    fn finds_a_free_bar_slot_in_a_64bit_window() {
        let all = parse_all(Q35);
        assert_eq!(
            free_bar_slot(&all, 0x3800_0000_0000, 0x400_0000),
            Some(0x3800_0400_0000)
        );
    }
}
