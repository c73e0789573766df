//! A byte span whose end fits in 64 bits, carrying the proof of the check that built it.
//!
//! `Span<K>` is only built with a `K`, a token the checking module alone can make (a unit struct
//! with a private field): holding a `Span<K>` proves that check passed. Its arithmetic needs no
//! overflow checks because `start + len` fitting is part of every check, and sub-spans stay
//! inside the span they came from.

/// `len` bytes from `start`, checked by whoever can make a `K`; `start + len` fits in 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span<K> {
    start: u64,
    len: u64,
    proof: K,
}

impl<K: Copy> Span<K> {
    /// The span, if its end fits in 64 bits; `proof` is the token of the check that was made.
    #[inline]
    pub fn new(proof: K, start: u64, len: u64) -> Option<Self> {
        start.checked_add(len)?;
        Some(Self { start, len, proof })
    }

    /// An empty span at 0.
    #[inline]
    pub const fn empty(proof: K) -> Self {
        Self {
            start: 0,
            len: 0,
            proof,
        }
    }

    /// First byte.
    #[inline]
    pub fn start(self) -> u64 {
        self.start
    }

    /// Bytes in the span.
    #[inline]
    pub fn len(self) -> u64 {
        self.len
    }

    /// Whether the span is empty.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// One past the last byte.
    #[inline]
    pub fn end(self) -> u64 {
        self.start + self.len
    }

    /// The last byte; `None` when the span is empty.
    #[inline]
    pub fn last(self) -> Option<u64> {
        self.len
            .checked_sub(1)
            .map(|before_end| self.start + before_end)
    }

    /// The byte `position` bytes in, clamped to the end.
    #[inline]
    pub fn at(self, position: u64) -> u64 {
        self.start + position.min(self.len)
    }

    /// The first `len` bytes (all of them if `len` is larger).
    #[inline]
    pub fn head(self, len: u64) -> Self {
        Self {
            len: self.len.min(len),
            ..self
        }
    }

    /// The span without its first `skip` bytes (empty at the end if `skip` is larger).
    #[inline]
    pub fn tail(self, skip: u64) -> Self {
        let skip = self.len.min(skip);
        Self {
            start: self.start + skip,
            len: self.len - skip,
            proof: self.proof,
        }
    }

    /// `len` bytes from `skip` bytes in, both clamped to the span.
    #[inline]
    pub fn sub(self, skip: u64, len: u64) -> Self {
        self.tail(skip).head(len)
    }

    /// The span cut before its last `len` bytes (all of it if shorter): `(rest, last)`.
    #[inline]
    pub fn split_last(self, len: u64) -> (Self, Self) {
        let keep = self.len - self.len.min(len);
        (self.head(keep), self.tail(keep))
    }

    /// Whether the spans share a byte.
    #[inline]
    pub fn overlaps(self, other: Self) -> bool {
        !self.is_empty()
            && !other.is_empty()
            && self.start < other.end()
            && other.start < self.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Checked;

    #[test]
    fn spans_refuse_an_end_past_64_bits_and_accept_the_edge() {
        assert_eq!(Span::new(Checked, u64::MAX, 1), None);
        assert_eq!(Span::new(Checked, 1, u64::MAX), None);
        let last = Span::new(Checked, u64::MAX - 1, 1).unwrap();
        assert_eq!(last.end(), u64::MAX);
        let all = Span::new(Checked, 0, u64::MAX).unwrap();
        assert_eq!((all.start(), all.len(), all.end()), (0, u64::MAX, u64::MAX));
        assert_eq!(
            Span::new(Checked, u64::MAX, 0).map(Span::end),
            Some(u64::MAX)
        );
        assert!(Span::empty(Checked).is_empty());
        assert_eq!(last.last(), Some(u64::MAX - 1));
        assert_eq!(Span::new(Checked, 7, 0).unwrap().last(), None);
    }

    #[test]
    fn sub_spans_stay_inside() {
        let span = Span::new(Checked, u64::MAX - 0x100, 0x100).unwrap();
        assert_eq!(span.head(0x10).end(), u64::MAX - 0xf0);
        assert_eq!(span.head(u64::MAX), span);
        let tail = span.tail(u64::MAX);
        assert_eq!((tail.start(), tail.len()), (u64::MAX, 0));
        let sub = span.sub(0x80, u64::MAX);
        assert_eq!((sub.start(), sub.end()), (u64::MAX - 0x80, u64::MAX));
        assert_eq!(span.at(0x20), u64::MAX - 0xe0);
        assert_eq!(span.at(u64::MAX), u64::MAX);
        let (rest, last) = span.split_last(0x30);
        assert_eq!(
            (rest.len(), last.start(), last.len()),
            (0xd0, u64::MAX - 0x30, 0x30)
        );
        let (none, all) = span.split_last(u64::MAX);
        assert_eq!((none.len(), all), (0, span));
    }

    #[test]
    fn overlap_is_sharing_a_byte() {
        let span = |start, len| Span::new(Checked, start, len).unwrap();
        assert!(span(0, 10).overlaps(span(9, 1)));
        assert!(!span(0, 10).overlaps(span(10, 1)));
        assert!(!span(5, 0).overlaps(span(0, 10)));
        assert!(span(3, 2).overlaps(span(0, 10)));
    }
}
