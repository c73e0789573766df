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

#[cfg(test)]
mod tests {
    use super::parse_size;

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
