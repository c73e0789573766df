//! Deterministic test bytes: what a test writes, it can compute again to check.

/// Deterministic bytes that differ at every offset (xorshift), seeded per use.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 24) & 0xff) as u8
        })
        .collect()
}
