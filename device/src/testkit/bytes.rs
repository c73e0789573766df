//! Byte patterns that tell every offset apart, so a byte moved to the wrong place shows.

/// `len` bytes made from `seed` and each byte's position (no period shorter than 16 MiB).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let [b0, b1, b2, ..] = i.to_le_bytes();
            b0.wrapping_mul(31).wrapping_add(seed) ^ b1 ^ b2
        })
        .collect()
}

/// The first index where `a` and `b` differ (slice equality is a memcmp; the position is searched
/// only when it fails).
pub fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    (a != b)
        .then(|| a.iter().zip(b).position(|(x, y)| x != y))
        .flatten()
}
