//! Deterministic data patterns. Every byte depends on a tag and its position, so data left over
//! from an earlier test (another tag) or copied to the wrong offset never matches by accident.

/// Fills `buf` with the pattern `tag` from logical position `start` on.
pub fn fill(tag: u64, start: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(tag, start + i as u64);
    }
}

/// The pattern byte `tag` has at logical position `pos`.
pub fn byte_at(tag: u64, pos: u64) -> u8 {
    let word = mix(tag ^ (pos >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    ((word >> ((pos & 7) * 8)) & 0xff) as u8
}

/// Position of the first byte of `buf` that differs from pattern `tag` (starting at `start`).
pub fn first_mismatch(tag: u64, start: u64, buf: &[u8]) -> Option<usize> {
    buf.iter()
        .enumerate()
        .position(|(i, b)| *b != byte_at(tag, start + i as u64))
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check() {
        let mut buf = vec![0u8; 1000];
        fill(5, 17, &mut buf);
        assert_eq!(first_mismatch(5, 17, &buf), None);
        assert!(first_mismatch(6, 17, &buf).is_some());
        assert!(first_mismatch(5, 18, &buf).is_some());
        buf[999] ^= 1;
        assert_eq!(first_mismatch(5, 17, &buf), Some(999));
    }
}
