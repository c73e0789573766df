//! Placement preferences a KMD returns in `DXGK_ALLOCATIONINFO`: `PreferredSegment`
//! ([`SegmentPreference`], `D3DDDI_SEGMENTPREFERENCE` = `DXGK_SEGMENTPREFERENCE`) and
//! `HintedBank` ([`BankPreference`], `DXGK_SEGMENTBANKPREFERENCE`), each a 32-bit `Value` with
//! the documented bit layout.
//!
//! Slot 0 is the highest priority. Id 0 means "no preference"; unused trailing slots are 0.
//! Segment ids are 1-based (descriptor `i` is segment `i + 1`); bank ids are 1-based too.
//! These types are bit-exact: they neither require the used slots to be contiguous nor check
//! that a segment id names an existing segment.

use core::fmt;

/// `DirectionN` of a preference slot: which end of the segment (or bank) VidMm scans for free
/// space.
///
/// The documentation disagrees on what 0 means:
/// - the older `DXGK_SEGMENTPREFERENCE` page (and the `DXGK_SEGMENTBANKPREFERENCE` page): 0 =
///   bottom-up, scanning from low addresses up; 1 = top-down, from high addresses down;
/// - the current `D3DDDI_SEGMENTPREFERENCE` page: 0 leaves the choice of end to VidMm; 1 =
///   top-down.
///
/// The variant names follow the older page. Only [`Direction::TopDown`] has an undisputed
/// meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Direction {
    /// Bit value 0: bottom-up (older page) or "VidMm chooses" (current `D3DDDI` page).
    #[default]
    BottomUp = 0,
    /// Bit value 1: top-down, from high addresses down.
    TopDown = 1,
}

impl Direction {
    /// The direction a bit value stands for.
    pub const fn from_bit(bit: bool) -> Self {
        if bit {
            Direction::TopDown
        } else {
            Direction::BottomUp
        }
    }

    /// The bit value (0 or 1).
    pub const fn bit(self) -> u32 {
        self as u32
    }

    /// `bottom-up` or `top-down`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::BottomUp => "bottom-up",
            Direction::TopDown => "top-down",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One slot of a preference: a segment (or bank) id, 0 for none, and its [`Direction`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PreferenceEntry {
    /// `SegmentIdN` / `BankN`; 0 = no preference.
    pub id: u8,
    /// `DirectionN`.
    pub direction: Direction,
}

impl PreferenceEntry {
    /// An empty slot: id 0, direction bit 0.
    pub const NONE: Self = Self::new(0, Direction::BottomUp);

    /// A slot naming `id` with `direction`.
    pub const fn new(id: u8, direction: Direction) -> Self {
        Self { id, direction }
    }

    /// Whether the slot states no preference (id 0).
    pub const fn is_none(self) -> bool {
        self.id == 0
    }
}

/// Which preference type an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreferenceKind {
    /// [`SegmentPreference`].
    Segment,
    /// [`BankPreference`].
    Bank,
}

impl PreferenceKind {
    /// The WDK type name.
    pub const fn type_name(self) -> &'static str {
        match self {
            PreferenceKind::Segment => "D3DDDI_SEGMENTPREFERENCE",
            PreferenceKind::Bank => "DXGK_SEGMENTBANKPREFERENCE",
        }
    }

    /// `segment` or `bank`, as in "segment id".
    pub const fn noun(self) -> &'static str {
        match self {
            PreferenceKind::Segment => "segment",
            PreferenceKind::Bank => "bank",
        }
    }

    /// Number of slots.
    pub const fn slots(self) -> usize {
        match self {
            PreferenceKind::Segment => SegmentPreference::SLOTS,
            PreferenceKind::Bank => BankPreference::SLOTS,
        }
    }

    /// Largest id a slot holds.
    pub const fn max_id(self) -> u8 {
        match self {
            PreferenceKind::Segment => SegmentPreference::MAX_ID,
            PreferenceKind::Bank => BankPreference::MAX_ID,
        }
    }
}

/// Why a value or a list of entries is not a valid preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreferenceError {
    /// Reserved bits are set in a raw value.
    ReservedBits {
        /// Which preference type.
        kind: PreferenceKind,
        /// The whole raw value.
        value: u32,
        /// The reserved bits that are set.
        bits: u32,
    },
    /// An id does not fit its slot's bit field.
    IdOutOfRange {
        /// Which preference type.
        kind: PreferenceKind,
        /// Slot index (0 = highest priority).
        slot: usize,
        /// The refused id (wider than `u8` so callers parsing text can report any number).
        id: u32,
        /// Largest id the slot holds.
        max: u8,
    },
    /// More entries than the type has slots.
    TooManyEntries {
        /// Which preference type.
        kind: PreferenceKind,
        /// Entries given.
        count: usize,
        /// Slots available.
        max: usize,
    },
}

impl fmt::Display for PreferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PreferenceError::ReservedBits { kind, value, bits } => write!(
                f,
                "reserved bits {bits:#010X} are set in {} {value:#010X}: they must be 0",
                kind.type_name()
            ),
            PreferenceError::IdOutOfRange {
                kind,
                slot,
                id,
                max,
            } => write!(
                f,
                "{} id {id} in slot {slot} is out of range: ids are 0..={max}",
                kind.noun()
            ),
            PreferenceError::TooManyEntries { kind, count, max } => write!(
                f,
                "{count} {} preferences given, but {} has only {max} slots",
                kind.noun(),
                kind.type_name()
            ),
        }
    }
}

impl std::error::Error for PreferenceError {}

/// Packs `entries` into slots `stride` bits apart: the id in the low `id_bits` bits of a slot,
/// the direction in the bit above it.
fn pack(
    kind: PreferenceKind,
    entries: &[PreferenceEntry],
    stride: u32,
    id_bits: u32,
) -> Result<u32, PreferenceError> {
    let max = kind.max_id();
    if entries.len() > kind.slots() {
        return Err(PreferenceError::TooManyEntries {
            kind,
            count: entries.len(),
            max: kind.slots(),
        });
    }
    let mut value = 0u32;
    for (slot, entry) in entries.iter().enumerate() {
        if entry.id > max {
            return Err(PreferenceError::IdOutOfRange {
                kind,
                slot,
                id: u32::from(entry.id),
                max,
            });
        }
        let shift = slot_shift(slot, stride);
        value |= u32::from(entry.id) << shift;
        value |= entry.direction.bit() << (shift + id_bits);
    }
    Ok(value)
}

/// First bit of slot `slot`: `slot` is below the kind's `SLOTS` (at most 5), so it fits.
fn slot_shift(slot: usize, stride: u32) -> u32 {
    stride * u32::try_from(slot).unwrap_or(u32::MAX)
}

/// Unpacks slot `slot` (see [`pack`]).
fn unpack(value: u32, slot: usize, stride: u32, id_bits: u32) -> PreferenceEntry {
    let shift = slot_shift(slot, stride);
    let id_mask = (1u32 << id_bits) - 1;
    PreferenceEntry {
        // At most 7 id bits: fits in a u8.
        id: u8::try_from((value >> shift) & id_mask).unwrap_or(u8::MAX),
        direction: Direction::from_bit((value >> (shift + id_bits)) & 1 != 0),
    }
}

/// `D3DDDI_SEGMENTPREFERENCE` (= `DXGK_SEGMENTPREFERENCE`), `DXGK_ALLOCATIONINFO.PreferredSegment`.
///
/// | bits | field |
/// |---|---|
/// | 0-4 | `SegmentId0` (highest priority) |
/// | 5 | `Direction0` |
/// | 6-10 | `SegmentId1` |
/// | 11 | `Direction1` |
/// | 12-16 | `SegmentId2` |
/// | 17 | `Direction2` |
/// | 18-22 | `SegmentId3` |
/// | 23 | `Direction3` |
/// | 24-28 | `SegmentId4` (lowest priority) |
/// | 29 | `Direction4` |
/// | 30-31 | `Reserved`, 0 |
///
/// Ids are 0..=31, 0 = no preference. (WDDM 2 headers also define
/// `DXGK_SEGMENT_ID_SYSTEMMEMORY` as 31.) See [`Direction`] for what the direction bits mean.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SegmentPreference(u32);

impl SegmentPreference {
    /// Number of slots (`SegmentId0`..`SegmentId4`).
    pub const SLOTS: usize = 5;
    /// Largest segment id (5-bit field).
    pub const MAX_ID: u8 = 31;
    /// Bits 30-31: `Reserved`.
    pub const RESERVED_MASK: u32 = 0xC000_0000;
    /// No preference at all.
    pub const NONE: Self = Self(0);

    const STRIDE: u32 = 6;
    const ID_BITS: u32 = 5;

    /// Wraps a raw `Value`, refusing set reserved bits.
    pub const fn from_value(value: u32) -> Result<Self, PreferenceError> {
        let bits = value & Self::RESERVED_MASK;
        if bits != 0 {
            return Err(PreferenceError::ReservedBits {
                kind: PreferenceKind::Segment,
                value,
                bits,
            });
        }
        Ok(Self(value))
    }

    /// The raw `Value`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The five slots, highest priority first.
    pub fn entries(self) -> [PreferenceEntry; Self::SLOTS] {
        core::array::from_fn(|slot| unpack(self.0, slot, Self::STRIDE, Self::ID_BITS))
    }

    /// Builds a preference from up to five entries, highest priority first; missing trailing
    /// slots are 0.
    pub fn from_entries(entries: &[PreferenceEntry]) -> Result<Self, PreferenceError> {
        pack(
            PreferenceKind::Segment,
            entries,
            Self::STRIDE,
            Self::ID_BITS,
        )
        .map(Self)
    }
}

impl TryFrom<u32> for SegmentPreference {
    type Error = PreferenceError;

    fn try_from(value: u32) -> Result<Self, Self::Error> {
        Self::from_value(value)
    }
}

impl From<SegmentPreference> for u32 {
    fn from(preference: SegmentPreference) -> u32 {
        preference.value()
    }
}

/// `DXGK_SEGMENTBANKPREFERENCE`, `DXGK_ALLOCATIONINFO.HintedBank`. VidMm applies it to the most
/// preferred segment (`PreferredSegment.SegmentId0`) only.
///
/// | bits | field |
/// |---|---|
/// | 0-6 | `Bank0` (highest priority) |
/// | 7 | `Direction0` |
/// | 8-14 | `Bank1` |
/// | 15 | `Direction1` |
/// | 16-22 | `Bank2` |
/// | 23 | `Direction2` |
/// | 24-30 | `Bank3` (lowest priority) |
/// | 31 | `Direction3` |
///
/// Bank ids are 0..=127, 0 = no preference. There are no reserved bits. See [`Direction`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BankPreference(u32);

impl BankPreference {
    /// Number of slots (`Bank0`..`Bank3`).
    pub const SLOTS: usize = 4;
    /// Largest bank id (7-bit field).
    pub const MAX_ID: u8 = 127;
    /// No preference at all.
    pub const NONE: Self = Self(0);

    const STRIDE: u32 = 8;
    const ID_BITS: u32 = 7;

    /// Wraps a raw `Value`. Every 32-bit value is valid; the `Result` matches
    /// [`SegmentPreference::from_value`].
    pub const fn from_value(value: u32) -> Result<Self, PreferenceError> {
        Ok(Self(value))
    }

    /// The raw `Value`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The four slots, highest priority first.
    pub fn entries(self) -> [PreferenceEntry; Self::SLOTS] {
        core::array::from_fn(|slot| unpack(self.0, slot, Self::STRIDE, Self::ID_BITS))
    }

    /// Builds a preference from up to four entries, highest priority first; missing trailing
    /// slots are 0.
    pub fn from_entries(entries: &[PreferenceEntry]) -> Result<Self, PreferenceError> {
        pack(PreferenceKind::Bank, entries, Self::STRIDE, Self::ID_BITS).map(Self)
    }
}

impl From<u32> for BankPreference {
    fn from(value: u32) -> Self {
        Self(value)
    }
}

impl From<BankPreference> for u32 {
    fn from(preference: BankPreference) -> u32 {
        preference.value()
    }
}

#[cfg(test)]
mod tests {
    use Direction::{BottomUp, TopDown};

    use super::*;

    fn entry(id: u8, direction: Direction) -> PreferenceEntry {
        PreferenceEntry::new(id, direction)
    }

    /// Id `max_id` alone in slot `i` packs (through `pack`) to the documented field mask
    /// `id_masks[i]`; the direction alone to the bit `dir_bits[i]`. One mask per slot.
    fn assert_slot_masks(
        pack: impl Fn(&[PreferenceEntry]) -> u32,
        max_id: u8,
        id_masks: &[u32],
        dir_bits: &[u32],
    ) {
        assert_eq!(id_masks.len(), dir_bits.len());
        for slot in 0..id_masks.len() {
            let mut entries = vec![PreferenceEntry::NONE; id_masks.len()];
            entries[slot] = entry(max_id, BottomUp);
            assert_eq!(pack(&entries), id_masks[slot], "slot {slot} id");
            entries[slot] = entry(0, TopDown);
            assert_eq!(pack(&entries), dir_bits[slot], "slot {slot} direction");
        }
    }

    #[test]
    fn segment_preference_two_slots() {
        // SegmentId0 = 1 at bits 0-4:   1 << 0  = 0x001
        // Direction0 = 0 at bit 5:      0
        // SegmentId1 = 2 at bits 6-10:  2 << 6  = 0x080
        // Direction1 = 1 at bit 11:     1 << 11 = 0x800
        // total 0x001 + 0x080 + 0x800 = 0x881
        let pref =
            SegmentPreference::from_entries(&[entry(1, BottomUp), entry(2, TopDown)]).unwrap();
        assert_eq!(pref.value(), 0x0000_0881);
        let entries = pref.entries();
        assert_eq!(entries[0], entry(1, BottomUp));
        assert_eq!(entries[1], entry(2, TopDown));
        assert_eq!(entries[2..], [PreferenceEntry::NONE; 3]);
    }

    #[test]
    fn segment_preference_all_slots_full() {
        // Each slot is 6 bits (5 id bits all ones for 31, plus the direction bit), five slots:
        // bits 0-29 all set = 0x3FFF_FFFF.
        let pref = SegmentPreference::from_entries(&[entry(31, TopDown); 5]).unwrap();
        assert_eq!(pref.value(), 0x3FFF_FFFF);
        assert_eq!(pref.entries(), [entry(31, TopDown); 5]);
    }

    #[test]
    fn segment_preference_slot_masks_match_the_documentation() {
        assert_slot_masks(
            |entries| SegmentPreference::from_entries(entries).unwrap().value(),
            31,
            &[0x1F, 0x7C0, 0x1_F000, 0x7C_0000, 0x1F00_0000],
            &[0x20, 0x800, 0x2_0000, 0x80_0000, 0x2000_0000],
        );
        // SegmentId2 = 5 (5 << 12 = 0x5000) with Direction2 (1 << 17 = 0x2_0000): 0x2_5000.
        let pref = SegmentPreference::from_entries(&[
            PreferenceEntry::NONE,
            PreferenceEntry::NONE,
            entry(5, TopDown),
        ])
        .unwrap();
        assert_eq!(pref.value(), 0x0002_5000);
        // SegmentId4 = 1 (1 << 24) alone.
        assert_eq!(
            SegmentPreference::from_value(0x0100_0000)
                .unwrap()
                .entries()[4],
            entry(1, BottomUp)
        );
    }

    #[test]
    fn segment_preference_refuses_reserved_bits() {
        for value in [0x4000_0000, 0x8000_0000, 0xC000_0881, 0xFFFF_FFFF] {
            let err = SegmentPreference::from_value(value).unwrap_err();
            assert_eq!(
                err,
                PreferenceError::ReservedBits {
                    kind: PreferenceKind::Segment,
                    value,
                    bits: value & 0xC000_0000,
                }
            );
        }
        assert_eq!(
            SegmentPreference::from_value(0x4000_0000)
                .unwrap_err()
                .to_string(),
            "reserved bits 0x40000000 are set in D3DDDI_SEGMENTPREFERENCE 0x40000000: they must be 0"
        );
        assert_eq!(
            SegmentPreference::try_from(0x3FFF_FFFF).unwrap().value(),
            0x3FFF_FFFF
        );
    }

    #[test]
    fn segment_preference_refuses_bad_entries() {
        let err =
            SegmentPreference::from_entries(&[entry(1, BottomUp), entry(32, TopDown)]).unwrap_err();
        assert_eq!(
            err,
            PreferenceError::IdOutOfRange {
                kind: PreferenceKind::Segment,
                slot: 1,
                id: 32,
                max: 31,
            }
        );
        assert_eq!(
            err.to_string(),
            "segment id 32 in slot 1 is out of range: ids are 0..=31"
        );
        let err = SegmentPreference::from_entries(&[entry(1, BottomUp); 6]).unwrap_err();
        assert_eq!(
            err,
            PreferenceError::TooManyEntries {
                kind: PreferenceKind::Segment,
                count: 6,
                max: 5,
            }
        );
        assert_eq!(
            err.to_string(),
            "6 segment preferences given, but D3DDDI_SEGMENTPREFERENCE has only 5 slots"
        );
        assert_eq!(
            SegmentPreference::from_entries(&[]).unwrap(),
            SegmentPreference::NONE
        );
    }

    #[test]
    fn segment_preference_round_trips() {
        let edges = [
            0,
            1,
            0x20,
            0x881,
            0x2_5000,
            0x2AAA_AAAA,
            0x1555_5555,
            0x3FFF_FFFF,
        ];
        let spread = (0..=0x3FFF_FFFFu32).step_by(9_973);
        for value in edges.into_iter().chain(spread) {
            let pref = SegmentPreference::from_value(value).unwrap();
            let back = SegmentPreference::from_entries(&pref.entries()).unwrap();
            assert_eq!(back.value(), value, "{value:#010x}");
        }
        for slot in 0..SegmentPreference::SLOTS {
            for id in 0..=31 {
                for direction in [BottomUp, TopDown] {
                    let mut entries = [PreferenceEntry::NONE; 5];
                    entries[slot] = entry(id, direction);
                    let pref = SegmentPreference::from_entries(&entries).unwrap();
                    assert_eq!(pref.entries(), entries);
                }
            }
        }
    }

    #[test]
    fn bank_preference_values() {
        // Bank0 = 3 (bits 0-6) | Direction0 (bit 7 = 0x80) | Bank3 = 127 (127 << 24 = 0x7F00_0000)
        // = 0x03 + 0x80 + 0x7F00_0000 = 0x7F00_0083.
        let pref = BankPreference::from_entries(&[
            entry(3, TopDown),
            PreferenceEntry::NONE,
            PreferenceEntry::NONE,
            entry(127, BottomUp),
        ])
        .unwrap();
        assert_eq!(pref.value(), 0x7F00_0083);
        assert_eq!(pref.entries()[0], entry(3, TopDown));
        assert_eq!(pref.entries()[3], entry(127, BottomUp));
        // Every slot full: all 32 bits.
        assert_eq!(
            BankPreference::from_entries(&[entry(127, TopDown); 4])
                .unwrap()
                .value(),
            0xFFFF_FFFF
        );
        assert_slot_masks(
            |entries| BankPreference::from_entries(entries).unwrap().value(),
            127,
            &[0x7F, 0x7F00, 0x7F_0000, 0x7F00_0000],
            &[0x80, 0x8000, 0x80_0000, 0x8000_0000],
        );
    }

    #[test]
    fn bank_preference_refuses_bad_entries() {
        let err = BankPreference::from_entries(&[entry(128, BottomUp)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bank id 128 in slot 0 is out of range: ids are 0..=127"
        );
        let err = BankPreference::from_entries(&[entry(1, BottomUp); 5]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "5 bank preferences given, but DXGK_SEGMENTBANKPREFERENCE has only 4 slots"
        );
    }

    #[test]
    fn bank_preference_round_trips() {
        let edges = [0, 0x83, 0x7F00_0083, 0x8000_0000, 0xAAAA_AAAA, 0xFFFF_FFFF];
        let spread = (0..=u32::MAX).step_by(40_009);
        for value in edges.into_iter().chain(spread) {
            let pref = BankPreference::from_value(value).unwrap();
            assert_eq!(u32::from(BankPreference::from(value)), value);
            let back = BankPreference::from_entries(&pref.entries()).unwrap();
            assert_eq!(back.value(), value, "{value:#010x}");
        }
    }

    #[test]
    fn direction_bits() {
        assert_eq!(Direction::from_bit(false), BottomUp);
        assert_eq!(Direction::from_bit(true), TopDown);
        assert_eq!(BottomUp.bit(), 0);
        assert_eq!(TopDown.bit(), 1);
        assert_eq!(TopDown.to_string(), "top-down");
    }
}
