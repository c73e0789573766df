//! Numbers as people type them on command lines and control requests: decimal, or hex with a
//! `0x` prefix.

/// Parses `4096` or `0x1000`; `None` for anything else (or a value past 64 bits).
pub fn parse_u64(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_and_hex_parse_and_the_rest_is_refused() {
        assert_eq!(parse_u64("4096"), Some(4096));
        assert_eq!(parse_u64("0x1000"), Some(4096));
        assert_eq!(parse_u64("0X1000"), Some(4096));
        assert_eq!(parse_u64("0xffffffffffffffff"), Some(u64::MAX));
        for bad in ["ten", "", "0x", "0x1g", "-1", "0x10000000000000000"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }
}
