//! The text side of `vhost-user-wddm-gpu decode KIND VALUE` and `encode KIND ARGS...`: turns the
//! raw 32-bit values a KMD writes (`PreferredSegment`, `HintedBank`, `DXGK_SEGMENTFLAGS`) into a
//! table of their fields and back.
//!
//! Numbers are `0x`-prefixed hex or decimal. A decimal number with a leading zero (`0881`) is
//! refused as ambiguous: debuggers print hex without a prefix.

use std::fmt::Write as _;
use std::str::FromStr;

use wddm_gpu_abi::preference::{
    BankPreference, Direction, PreferenceEntry, PreferenceError, PreferenceKind, SegmentPreference,
};
use wddm_gpu_abi::segment_flags::{SegmentFlags, SEGMENT_FLAGS_RESERVED_MASK, SEGMENT_FLAG_NAMES};

/// The value types `decode` and `encode` know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ValueKind {
    /// `D3DDDI_SEGMENTPREFERENCE` (`DXGK_ALLOCATIONINFO.PreferredSegment`).
    #[value(name = "segment-preference")]
    SegmentPreference,
    /// `DXGK_SEGMENTBANKPREFERENCE` (`DXGK_ALLOCATIONINFO.HintedBank`).
    #[value(name = "bank-preference")]
    BankPreference,
    /// `DXGK_SEGMENTFLAGS.Value`.
    #[value(name = "segment-flags")]
    SegmentFlags,
}

impl ValueKind {
    /// Every kind, in the order of [`ValueKind::NAMES`].
    pub const ALL: [ValueKind; 3] = [
        ValueKind::SegmentPreference,
        ValueKind::BankPreference,
        ValueKind::SegmentFlags,
    ];
    /// The command-line names.
    pub const NAMES: [&'static str; 3] = ["segment-preference", "bank-preference", "segment-flags"];

    /// Looks a kind up by its command-line name.
    pub fn from_name(name: &str) -> Result<Self, CodecError> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| CodecError::UnknownKind {
                name: name.to_string(),
            })
    }

    /// The command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            ValueKind::SegmentPreference => Self::NAMES[0],
            ValueKind::BankPreference => Self::NAMES[1],
            ValueKind::SegmentFlags => Self::NAMES[2],
        }
    }
}

impl FromStr for ValueKind {
    type Err = CodecError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::from_name(name)
    }
}

impl std::fmt::Display for ValueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a `decode` or `encode` input was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Unknown value kind.
    #[error(
        "unknown value kind {name:?}: kinds are segment-preference, bank-preference, segment-flags"
    )]
    UnknownKind {
        /// The name given.
        name: String,
    },
    /// Not a number.
    #[error("{token:?} is not a number: write hex as 0x... or decimal")]
    BadNumber {
        /// The offending token.
        token: String,
    },
    /// Decimal with a leading zero: likely hex pasted without its prefix.
    #[error("{token:?} is ambiguous: write 0x{token} for hex or {} for decimal", without_leading_zeros(.token))]
    AmbiguousNumber {
        /// The offending token.
        token: String,
    },
    /// A number wider than 32 bits.
    #[error("{token:?} does not fit in 32 bits")]
    TooWide {
        /// The offending token.
        token: String,
    },
    /// A preference argument's direction is not one of the accepted spellings.
    #[error("bad direction {direction:?} in {token:?} (slot {slot}): directions are bottom-up, top-down, 0 or 1")]
    BadDirection {
        /// The whole argument.
        token: String,
        /// The direction part.
        direction: String,
        /// Slot index.
        slot: usize,
    },
    /// A raw preference value or the entries are invalid (reserved bits, id range, count).
    #[error(transparent)]
    Preference(#[from] PreferenceError),
    /// Reserved `DXGK_SEGMENTFLAGS` bits are set.
    #[error("reserved bits {} ({bits:#010X}) are set in DXGK_SEGMENTFLAGS {value:#010X}: bits 22-31 must be 0", bit_list(*.bits))]
    ReservedFlagBits {
        /// The whole value.
        value: u32,
        /// The reserved bits that are set.
        bits: u32,
    },
    /// A segment-flag name that is not a documented member.
    #[error(
        "unknown segment flag {name:?}{hint}: valid names (case-sensitive) are {}",
        flag_name_list()
    )]
    UnknownFlag {
        /// The name given.
        name: String,
        /// `" (did you mean \"Aperture\"?)"` when only the case differs, else empty.
        hint: String,
    },
}

/// `"0881"` → `"881"`, `"00"` → `"0"`.
fn without_leading_zeros(token: &str) -> &str {
    match token.trim_start_matches('0') {
        "" => "0",
        rest => rest,
    }
}

/// `"22, 23, 31"`.
fn bit_list(bits: u32) -> String {
    (0..32)
        .filter(|bit| bits & (1 << bit) != 0)
        .map(|bit| bit.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn flag_name_list() -> String {
    SEGMENT_FLAG_NAMES
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `0x...` hex or decimal into a `u32`.
fn parse_u32(token: &str) -> Result<u32, CodecError> {
    let text = token.trim();
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    let bad = || CodecError::BadNumber {
        token: text.to_string(),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    if radix == 10 && digits.len() > 1 && digits.starts_with('0') {
        return Err(CodecError::AmbiguousNumber {
            token: text.to_string(),
        });
    }
    u32::from_str_radix(digits, radix).map_err(|_| CodecError::TooWide {
        token: text.to_string(),
    })
}

/// Parses a direction spelling.
fn parse_direction(text: &str) -> Option<Direction> {
    match text {
        "bottom-up" | "0" => Some(Direction::BottomUp),
        "top-down" | "1" => Some(Direction::TopDown),
        _ => None,
    }
}

/// Decodes `text` (a raw value) into a table of its fields, one per line, ending in a newline.
pub fn decode(kind: ValueKind, text: &str) -> Result<String, CodecError> {
    let value = parse_u32(text)?;
    Ok(match kind {
        ValueKind::SegmentPreference => {
            let pref = SegmentPreference::from_value(value)?;
            preference_table(PreferenceKind::Segment, value, &pref.entries())
        }
        ValueKind::BankPreference => {
            let pref = BankPreference::from_value(value)?;
            preference_table(PreferenceKind::Bank, value, &pref.entries())
        }
        ValueKind::SegmentFlags => flags_table(value)?,
    })
}

fn preference_table(kind: PreferenceKind, value: u32, entries: &[PreferenceEntry]) -> String {
    let (id_field, noun) = match kind {
        PreferenceKind::Segment => ("SegmentId", "segment"),
        PreferenceKind::Bank => ("Bank", "bank"),
    };
    let mut out = format!("Value = {value:#010X} ({})\n", kind.type_name());
    let mut used_zero_direction = false;
    for (slot, entry) in entries.iter().enumerate() {
        let target = if entry.is_none() {
            "no preference".to_string()
        } else if kind == PreferenceKind::Segment && entry.id == SegmentPreference::MAX_ID {
            format!(
                "{noun} {}, DXGK_SEGMENT_ID_SYSTEMMEMORY in WDDM 2 headers",
                entry.id
            )
        } else {
            format!("{noun} {}", entry.id)
        };
        used_zero_direction |= !entry.is_none() && entry.direction == Direction::BottomUp;
        let _ = writeln!(
            out,
            "{id_field}{slot} = {} ({target}), Direction{slot} = {} ({})",
            entry.id,
            entry.direction.bit(),
            entry.direction
        );
    }
    if kind == PreferenceKind::Segment && used_zero_direction {
        out.push_str(
            "Note: the current D3DDDI_SEGMENTPREFERENCE page says Direction 0 leaves the end to \
             VidMm; the older DXGK_SEGMENTPREFERENCE page says bottom-up.\n",
        );
    }
    out
}

fn flags_table(value: u32) -> Result<String, CodecError> {
    let bits = value & SEGMENT_FLAGS_RESERVED_MASK;
    if bits != 0 {
        return Err(CodecError::ReservedFlagBits { value, bits });
    }
    let flags = SegmentFlags::from_bits_retain(value);
    let mut out = format!("Value = {value:#010X} (DXGK_SEGMENTFLAGS)\n");
    if flags.is_empty() {
        out.push_str("(no flags set)\n");
    }
    for (name, flag) in SEGMENT_FLAG_NAMES {
        if flags.contains(flag) {
            let bit = flag.bits().trailing_zeros();
            let note = if flag == SegmentFlags::RESERVED_SYS_MEM {
                "  (system use: a KMD must not set it)"
            } else {
                ""
            };
            let _ = writeln!(out, "bit {bit:>2}  {:#010X}  {name}{note}", flag.bits());
        }
    }
    Ok(out)
}

/// Encodes `args` into a value, returned as `0x%08X` with no newline (the whole stdout of
/// `encode`).
///
/// - segment-preference: `ID` or `ID:DIR` per slot, highest priority first, up to 5, ids
///   0..=31; DIR is `bottom-up`, `top-down`, `0` or `1` (default bottom-up / 0).
/// - bank-preference: the same with bank ids 0..=127, up to 4.
/// - segment-flags: documented member names (case-sensitive), as separate arguments or joined
///   with `|`. No arguments encodes 0.
pub fn encode(kind: ValueKind, args: &[String]) -> Result<String, CodecError> {
    let value = match kind {
        ValueKind::SegmentPreference => {
            SegmentPreference::from_entries(&parse_entries(PreferenceKind::Segment, args)?)?.value()
        }
        ValueKind::BankPreference => {
            BankPreference::from_entries(&parse_entries(PreferenceKind::Bank, args)?)?.value()
        }
        ValueKind::SegmentFlags => encode_flags(args)?,
    };
    Ok(format!("{value:#010X}"))
}

fn parse_entries(
    kind: PreferenceKind,
    args: &[String],
) -> Result<Vec<PreferenceEntry>, CodecError> {
    if args.len() > kind.slots() {
        return Err(PreferenceError::TooManyEntries {
            kind,
            count: args.len(),
            max: kind.slots(),
        }
        .into());
    }
    args.iter()
        .enumerate()
        .map(|(slot, arg)| {
            let (id_text, direction) = match arg.split_once(':') {
                Some((id_text, dir_text)) => {
                    let direction =
                        parse_direction(dir_text).ok_or_else(|| CodecError::BadDirection {
                            token: arg.clone(),
                            direction: dir_text.to_string(),
                            slot,
                        })?;
                    (id_text, direction)
                }
                None => (arg.as_str(), Direction::BottomUp),
            };
            let id = parse_u32(id_text)?;
            let max = kind.max_id();
            match u8::try_from(id) {
                Ok(id) if id <= max => Ok(PreferenceEntry::new(id, direction)),
                _ => Err(PreferenceError::IdOutOfRange {
                    kind,
                    slot,
                    id,
                    max,
                }
                .into()),
            }
        })
        .collect()
}

fn encode_flags(args: &[String]) -> Result<u32, CodecError> {
    let mut flags = SegmentFlags::empty();
    for name in args.iter().flat_map(|arg| arg.split('|')) {
        let flag = SegmentFlags::from_member_name(name).ok_or_else(|| {
            let hint = SEGMENT_FLAG_NAMES
                .iter()
                .find(|(member, _)| member.eq_ignore_ascii_case(name))
                .map(|(member, _)| format!(" (did you mean {member:?}?)"))
                .unwrap_or_default();
            CodecError::UnknownFlag {
                name: name.to_string(),
                hint,
            }
        })?;
        flags |= flag;
    }
    Ok(flags.bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn kind_names() {
        for (kind, name) in ValueKind::ALL.into_iter().zip(ValueKind::NAMES) {
            assert_eq!(ValueKind::from_name(name).unwrap(), kind);
            assert_eq!(name.parse::<ValueKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), name);
            let clap_name = clap::ValueEnum::to_possible_value(&kind).unwrap();
            assert_eq!(clap_name.get_name(), name);
        }
        let err = ValueKind::from_name("segment_flags").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown value kind \"segment_flags\": kinds are segment-preference, bank-preference, segment-flags"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u32("0x881"), Ok(0x881));
        assert_eq!(parse_u32("0X00000881"), Ok(0x881));
        assert_eq!(parse_u32("2177"), Ok(2177));
        assert_eq!(parse_u32("0"), Ok(0));
        assert_eq!(parse_u32(" 7 "), Ok(7));
        assert_eq!(parse_u32("0xFFFFFFFF"), Ok(u32::MAX));
        assert_eq!(parse_u32("4294967295"), Ok(u32::MAX));
        for bad in ["", "0x", "x12", "12abc", "-1", "+1", "0xG", "1.5"] {
            let err = parse_u32(bad).unwrap_err();
            assert_eq!(err, CodecError::BadNumber { token: bad.into() });
        }
        assert_eq!(
            parse_u32("abc").unwrap_err().to_string(),
            "\"abc\" is not a number: write hex as 0x... or decimal"
        );
        assert_eq!(
            parse_u32("0x100000000").unwrap_err().to_string(),
            "\"0x100000000\" does not fit in 32 bits"
        );
        assert_eq!(
            parse_u32("4294967296").unwrap_err().to_string(),
            "\"4294967296\" does not fit in 32 bits"
        );
        assert_eq!(
            parse_u32("00000881").unwrap_err().to_string(),
            "\"00000881\" is ambiguous: write 0x00000881 for hex or 881 for decimal"
        );
        assert_eq!(
            parse_u32("00").unwrap_err().to_string(),
            "\"00\" is ambiguous: write 0x00 for hex or 0 for decimal"
        );
    }

    #[test]
    fn decodes_segment_preference() {
        // SegmentId0 = 1, SegmentId1 = 2 top-down: 1 | 2 << 6 | 1 << 11 = 0x881.
        let table = decode(ValueKind::SegmentPreference, "0x881").unwrap();
        assert_eq!(
            table,
            "Value = 0x00000881 (D3DDDI_SEGMENTPREFERENCE)\n\
             SegmentId0 = 1 (segment 1), Direction0 = 0 (bottom-up)\n\
             SegmentId1 = 2 (segment 2), Direction1 = 1 (top-down)\n\
             SegmentId2 = 0 (no preference), Direction2 = 0 (bottom-up)\n\
             SegmentId3 = 0 (no preference), Direction3 = 0 (bottom-up)\n\
             SegmentId4 = 0 (no preference), Direction4 = 0 (bottom-up)\n\
             Note: the current D3DDDI_SEGMENTPREFERENCE page says Direction 0 leaves the end to \
             VidMm; the older DXGK_SEGMENTPREFERENCE page says bottom-up.\n"
        );
        // Decimal input, all top-down, id 31 annotated, no note.
        let table = decode(ValueKind::SegmentPreference, &0x3FFF_FFFFu32.to_string()).unwrap();
        assert!(table.starts_with("Value = 0x3FFFFFFF"));
        assert!(table.contains(
            "SegmentId4 = 31 (segment 31, DXGK_SEGMENT_ID_SYSTEMMEMORY in WDDM 2 headers), Direction4 = 1 (top-down)\n"
        ));
        assert!(!table.contains("Note"));
        assert_eq!(
            decode(ValueKind::SegmentPreference, "0")
                .unwrap()
                .lines()
                .nth(1),
            Some("SegmentId0 = 0 (no preference), Direction0 = 0 (bottom-up)")
        );
    }

    #[test]
    fn decode_refuses_reserved_preference_bits() {
        let err = decode(ValueKind::SegmentPreference, "0x40000881").unwrap_err();
        assert_eq!(
            err,
            CodecError::Preference(PreferenceError::ReservedBits {
                kind: PreferenceKind::Segment,
                value: 0x4000_0881,
                bits: 0x4000_0000,
            })
        );
        assert_eq!(
            err.to_string(),
            "reserved bits 0x40000000 are set in D3DDDI_SEGMENTPREFERENCE 0x40000881: they must be 0"
        );
        assert!(matches!(
            decode(ValueKind::SegmentPreference, "zz"),
            Err(CodecError::BadNumber { .. })
        ));
    }

    #[test]
    fn decodes_bank_preference() {
        // Bank0 = 3 top-down, Bank3 = 127: 3 | 0x80 | 127 << 24 = 0x7F000083.
        let table = decode(ValueKind::BankPreference, "0x7F000083").unwrap();
        assert_eq!(
            table,
            "Value = 0x7F000083 (DXGK_SEGMENTBANKPREFERENCE)\n\
             Bank0 = 3 (bank 3), Direction0 = 1 (top-down)\n\
             Bank1 = 0 (no preference), Direction1 = 0 (bottom-up)\n\
             Bank2 = 0 (no preference), Direction2 = 0 (bottom-up)\n\
             Bank3 = 127 (bank 127), Direction3 = 0 (bottom-up)\n"
        );
        assert!(decode(ValueKind::BankPreference, "0xFFFFFFFF").is_ok());
    }

    #[test]
    fn decodes_segment_flags() {
        let table = decode(ValueKind::SegmentFlags, "0x11").unwrap();
        assert_eq!(
            table,
            "Value = 0x00000011 (DXGK_SEGMENTFLAGS)\n\
             bit  0  0x00000001  Aperture\n\
             bit  4  0x00000010  CacheCoherent\n"
        );
        assert_eq!(
            decode(ValueKind::SegmentFlags, "0").unwrap(),
            "Value = 0x00000000 (DXGK_SEGMENTFLAGS)\n(no flags set)\n"
        );
        let table = decode(ValueKind::SegmentFlags, "0x00201000").unwrap();
        assert!(table
            .contains("bit 12  0x00001000  ReservedSysMem  (system use: a KMD must not set it)\n"));
        assert!(table.contains("bit 21  0x00200000  PopulatedByReservedDDRByFirmware\n"));
    }

    #[test]
    fn decode_refuses_reserved_flag_bits() {
        let err = decode(ValueKind::SegmentFlags, "0x80C00011").unwrap_err();
        assert_eq!(
            err,
            CodecError::ReservedFlagBits {
                value: 0x80C0_0011,
                bits: 0x80C0_0000,
            }
        );
        assert_eq!(
            err.to_string(),
            "reserved bits 22, 23, 31 (0x80C00000) are set in DXGK_SEGMENTFLAGS 0x80C00011: bits 22-31 must be 0"
        );
    }

    #[test]
    fn encodes_segment_preference() {
        // 2:top-down | 1 | 5:bottom-up = 2 | 1 << 5 | 1 << 6 | 5 << 12 = 0x5062.
        assert_eq!(
            encode(
                ValueKind::SegmentPreference,
                &args(&["2:top-down", "1", "5:bottom-up"])
            )
            .unwrap(),
            "0x00005062"
        );
        assert_eq!(
            encode(ValueKind::SegmentPreference, &args(&["1:0", "2:1"])).unwrap(),
            "0x00000881"
        );
        assert_eq!(
            encode(ValueKind::SegmentPreference, &args(&["31:1"; 5])).unwrap(),
            "0x3FFFFFFF"
        );
        assert_eq!(
            encode(ValueKind::SegmentPreference, &args(&["0x1f:top-down"])).unwrap(),
            "0x0000003F"
        );
        assert_eq!(
            encode(ValueKind::SegmentPreference, &[]).unwrap(),
            "0x00000000"
        );
    }

    #[test]
    fn encode_refuses_bad_segment_preferences() {
        let err = encode(ValueKind::SegmentPreference, &args(&["32"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "segment id 32 in slot 0 is out of range: ids are 0..=31"
        );
        let err = encode(ValueKind::SegmentPreference, &args(&["1", "4096:1"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "segment id 4096 in slot 1 is out of range: ids are 0..=31"
        );
        let err = encode(ValueKind::SegmentPreference, &args(&["1"; 6])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "6 segment preferences given, but D3DDDI_SEGMENTPREFERENCE has only 5 slots"
        );
        let err = encode(ValueKind::SegmentPreference, &args(&["1", "2:up"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad direction \"up\" in \"2:up\" (slot 1): directions are bottom-up, top-down, 0 or 1"
        );
        let err = encode(ValueKind::SegmentPreference, &args(&["2:"])).unwrap_err();
        assert!(matches!(err, CodecError::BadDirection { slot: 0, .. }));
        let err = encode(ValueKind::SegmentPreference, &args(&["two:top-down"])).unwrap_err();
        assert_eq!(
            err,
            CodecError::BadNumber {
                token: "two".into()
            }
        );
        let err = encode(ValueKind::SegmentPreference, &args(&[":1"])).unwrap_err();
        assert_eq!(err, CodecError::BadNumber { token: "".into() });
    }

    #[test]
    fn encodes_bank_preference() {
        assert_eq!(
            encode(
                ValueKind::BankPreference,
                &args(&["3:top-down", "0", "0", "127"])
            )
            .unwrap(),
            "0x7F000083"
        );
        let err = encode(ValueKind::BankPreference, &args(&["1", "128"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bank id 128 in slot 1 is out of range: ids are 0..=127"
        );
        let err = encode(ValueKind::BankPreference, &args(&["1"; 5])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "5 bank preferences given, but DXGK_SEGMENTBANKPREFERENCE has only 4 slots"
        );
        let err = encode(ValueKind::BankPreference, &args(&["1:sideways"])).unwrap_err();
        assert!(matches!(err, CodecError::BadDirection { slot: 0, .. }));
    }

    #[test]
    fn encodes_segment_flags() {
        assert_eq!(
            encode(
                ValueKind::SegmentFlags,
                &args(&["Aperture", "CacheCoherent"])
            )
            .unwrap(),
            "0x00000011"
        );
        assert_eq!(
            encode(ValueKind::SegmentFlags, &args(&["Aperture|CacheCoherent"])).unwrap(),
            "0x00000011"
        );
        assert_eq!(encode(ValueKind::SegmentFlags, &[]).unwrap(), "0x00000000");
        // Every documented name encodes to its bit, and decode lists it back.
        for (name, flag) in SEGMENT_FLAG_NAMES {
            let text = encode(ValueKind::SegmentFlags, &args(&[name])).unwrap();
            assert_eq!(text, format!("{:#010X}", flag.bits()));
            assert!(decode(ValueKind::SegmentFlags, &text)
                .unwrap()
                .contains(name));
        }
    }

    #[test]
    fn encode_refuses_unknown_flags() {
        let err = encode(ValueKind::SegmentFlags, &args(&["Aperture", "aperture"])).unwrap_err();
        assert_eq!(
            err,
            CodecError::UnknownFlag {
                name: "aperture".into(),
                hint: " (did you mean \"Aperture\"?)".into(),
            }
        );
        let message = err.to_string();
        assert!(message.starts_with(
            "unknown segment flag \"aperture\" (did you mean \"Aperture\"?): valid names (case-sensitive) are Aperture, Agp, CpuVisible,"
        ));
        assert!(message.ends_with("PopulatedByReservedDDRByFirmware"));
        let err = encode(ValueKind::SegmentFlags, &args(&["Bogus"])).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("unknown segment flag \"Bogus\": valid names"));
        // An empty name (e.g. a trailing `|`) is refused too.
        let err = encode(ValueKind::SegmentFlags, &args(&["Aperture|"])).unwrap_err();
        assert!(matches!(err, CodecError::UnknownFlag { ref name, .. } if name.is_empty()));
    }

    #[test]
    fn round_trips_through_text() {
        for value in [0u32, 0x881, 0x5062, 0x2_5000, 0x3FFF_FFFF] {
            let entries = SegmentPreference::from_value(value).unwrap().entries();
            let arguments: Vec<String> = entries
                .iter()
                .map(|entry| format!("{}:{}", entry.id, entry.direction))
                .collect();
            assert_eq!(
                encode(ValueKind::SegmentPreference, &arguments).unwrap(),
                format!("{value:#010X}")
            );
        }
        for value in [0u32, 0x83, 0x7F00_0083, 0xFFFF_FFFF] {
            let entries = BankPreference::from_value(value).unwrap().entries();
            let arguments: Vec<String> = entries
                .iter()
                .map(|entry| format!("{}:{}", entry.id, entry.direction.bit()))
                .collect();
            assert_eq!(
                encode(ValueKind::BankPreference, &arguments).unwrap(),
                format!("{value:#010X}")
            );
        }
        let names = SegmentFlags::from_bits_retain(0x3F_FFFF).names();
        assert_eq!(
            encode(ValueKind::SegmentFlags, &[names]).unwrap(),
            "0x003FFFFF"
        );
    }
}
