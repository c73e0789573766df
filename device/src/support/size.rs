//! Byte sizes as people write them on command lines and in layout files.

/// Parses `268435456`, `0x10000000`, `256M`, `256MiB`, `1G`, `64KiB` (binary units).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) =
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (
                u64::from_str_radix(hex, 16).map_err(|e| format!("{text:?}: {e}"))?,
                "",
            )
        } else {
            let split = text
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len());
            let number = text[..split].parse::<u64>().map_err(|_| {
                format!("{text:?} is not a size (examples: 268435456, 0x10000000, 256MiB)")
            })?;
            (number, text[split..].trim())
        };
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use KiB, MiB or GiB)"
            ))
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} does not fit in 64 bits"))
}

/// A byte count for people: `1024 GiB`, `21.9 GiB`, `512 MiB`, `4096 bytes`.
pub fn human_size(bytes: u64) -> String {
    let units = [(30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in units {
        let one = 1u64 << shift;
        if bytes >= one {
            let whole = bytes >> shift;
            let tenths = ((bytes & (one - 1)) * 10) >> shift;
            return match tenths {
                0 => format!("{whole} {unit}"),
                _ => format!("{whole}.{tenths} {unit}"),
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::{human_size, parse_size};

    #[test]
    fn human_sizes_keep_one_decimal() {
        assert_eq!(human_size(1 << 40), "1024 GiB");
        assert_eq!(human_size(23_514_693_632), "21.8 GiB");
        assert_eq!(human_size(256 << 20), "256 MiB");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(100), "100 bytes");
    }

    #[test]
    fn parses_plain_hex_and_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
    }

    #[test]
    fn refuses_garbage_units_and_overflow() {
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("0xZZ").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
