//! The rules of the segment-layout capability set ([`crate::caps`]), written once: the guest
//! driver checks the blob it read with [`validate_capset`], the backend checks the blob it would
//! publish with the same function. The C device library mirrors these rules in `capset.c`; the
//! capset corpus test (`guest-tests/tests/capset_corpus.rs`) feeds both the same broken blobs.
//!
//! The blob comes from the other side of a trust boundary, so the check is pure and total: no
//! I/O, no allocation, no panic on any input, every loop bounded by the segment and bank limits.
//! Which flag combinations dxgkrnl accepts (Agp, the power flags, ...) is the host's layout
//! policy (`device/src/layout/rules.rs`); a reader only needs the blob to be self-consistent.

use core::fmt;
use core::mem::size_of;

use zerocopy::FromBytes;

use crate::caps::{
    WddmGpuCapsHeader, WddmGpuSegmentDesc, WddmGpuVramBar, WDDM_GPU_BANK_TABLE_ALIGN,
    WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_CAPSET_VERSION, WDDM_GPU_CAPS_MAGIC,
    WDDM_GPU_MAX_BANKS, WDDM_GPU_MAX_BAR_INDEX, WDDM_GPU_MAX_PCI_FUNCTION,
    WDDM_GPU_MAX_SEGMENTS_WDDM_1_3, WDDM_GPU_MAX_SEGMENTS_WDDM_2_0, WDDM_GPU_NO_BAR_OFFSET,
    WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0,
};
use crate::packet::{WddmGpuPacketTransfer, WDDM_GPU_PACKET_ALIGN};
use crate::segment_flags::{
    SegmentFlags, SEGMENT_FLAGS_RESERVED_MASK, SEGMENT_FLAGS_WDDM2_ONLY_MASK,
};
use crate::{WDDM_GPU_LARGE_PAGE_SIZE, WDDM_GPU_PAGE_SIZE};

const HEADER_SIZE: usize = size_of::<WddmGpuCapsHeader>();
const BANK_ENTRY_SIZE: u64 = size_of::<u64>() as u64;

/// Most segments a layout of `wddm_version` may have, `None` for an unknown version.
pub fn max_segments(wddm_version: u32) -> Option<u32> {
    match wddm_version {
        WDDM_GPU_WDDM_1_3 => Some(WDDM_GPU_MAX_SEGMENTS_WDDM_1_3),
        WDDM_GPU_WDDM_2_0 => Some(WDDM_GPU_MAX_SEGMENTS_WDDM_2_0),
        _ => None,
    }
}

/// The page size of a segment with these `DXGK_SEGMENTFLAGS`: its size, bank ends and BAR
/// window are multiples of it.
pub fn segment_page_size(flags: u32) -> u64 {
    if SegmentFlags::from_bits_retain(flags).contains(SegmentFlags::USE_64KB_PAGES) {
        WDDM_GPU_LARGE_PAGE_SIZE
    } else {
        WDDM_GPU_PAGE_SIZE
    }
}

/// Whether `DXGK_SEGMENTFLAGS` make an aperture (no storage) rather than a memory segment.
pub fn is_aperture(flags: u32) -> bool {
    SegmentFlags::from_bits_retain(flags).intersects(SegmentFlags::APERTURE | SegmentFlags::AGP)
}

/// The `DXGK_QUERYSEGMENTOUT*` and `DXGK_SEGMENTDESCRIPTOR*` a layout of `wddm_version` is
/// reported in.
pub fn dxgk_structs(wddm_version: u32) -> (&'static str, &'static str) {
    if wddm_version == WDDM_GPU_WDDM_2_0 {
        ("DXGK_QUERYSEGMENTOUT4", "DXGK_SEGMENTDESCRIPTOR4")
    } else {
        ("DXGK_QUERYSEGMENTOUT3", "DXGK_SEGMENTDESCRIPTOR3")
    }
}

/// A header limit the device announces that a driver could not work with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitRule {
    /// `max_frame_list_entries` is 0: no frame list could be sent.
    NoFrameListEntries,
    /// `max_packet_size` cannot hold a TRANSFER packet.
    PacketSizeTooSmall(u32),
    /// `max_packet_size` is not a multiple of the packet alignment.
    PacketSizeUnaligned(u32),
}

/// A broken rule of the VRAM BAR locator (`vram_bar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VramBarRule {
    /// `mode` is not a `WDDM_GPU_BAR_MODE_*`.
    UnknownMode(u32),
    /// `reserved` is not 0.
    ReservedNotZero(u32),
    /// `pci_function` is past the last function of a slot.
    PciFunctionOutOfRange(u32),
    /// `bar_index` is past the last BAR of a function.
    BarIndexOutOfRange(u32),
    /// `state` is not a `WDDM_GPU_BAR_STATE_*`.
    UnknownState(u32),
    /// `guest_physical_address` of a KNOWN BAR is not page aligned.
    AddressNotPageAligned(u64),
    /// `guest_physical_address + size` of a KNOWN BAR overflows 64 bits.
    AddressOverflow {
        /// `guest_physical_address`.
        address: u64,
        /// `size`.
        size: u64,
    },
}

/// A broken rule of one segment descriptor (or its banks, or its BAR window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentRule {
    /// `id` is not the descriptor's position + 1.
    IdOutOfOrder {
        /// The id given.
        id: u32,
        /// The id its position calls for.
        want: u32,
    },
    /// `flags` sets bits of `SEGMENT_FLAGS_RESERVED_MASK` (these bits).
    ReservedFlags(u32),
    /// `flags` sets members of `SEGMENT_FLAGS_WDDM2_ONLY_MASK` (these bits) on WDDM 1.3.
    Wddm2OnlyFlags(u32),
    /// `bank_count` is not 0 on WDDM 2.0.
    BanksOnWddm2(u32),
    /// `size` is 0.
    SizeZero,
    /// `size` is not a multiple of the segment's page size.
    SizeNotPageMultiple {
        /// `size`.
        size: u64,
        /// The page size (64 KiB with `Use64KBPages`).
        page: u64,
    },
    /// `base_address + size` overflows 64 bits.
    BaseAddressOverflow {
        /// `base_address`.
        base_address: u64,
        /// `size`.
        size: u64,
    },
    /// `commit_limit` is above `size`.
    CommitLimitAboveSize {
        /// `commit_limit`.
        commit_limit: u64,
        /// `size`.
        size: u64,
    },
    /// `bank_count` is not 0 but `UseBanking` is clear.
    BanksWithoutUseBanking(u32),
    /// `UseBanking` is set but `bank_count` is 0.
    UseBankingWithoutBanks,
    /// `bank_count` is above `WDDM_GPU_MAX_BANKS`.
    TooManyBanks(u32),
    /// `bank_table_index + bank_count` runs past `bank_entry_count`.
    BanksOutsideTable {
        /// `bank_table_index`.
        first: u32,
        /// `bank_count`.
        count: u32,
        /// `bank_entry_count`.
        entries: u32,
    },
    /// A bank end is not above the previous one (or is 0).
    BankEndNotIncreasing {
        /// Bank number inside the segment (0-based).
        bank: u32,
        /// Its end.
        end: u64,
    },
    /// A bank ends past `size`.
    BankEndPastSize {
        /// Bank number inside the segment (0-based).
        bank: u32,
        /// Its end.
        end: u64,
        /// `size`.
        size: u64,
    },
    /// A bank end is not a multiple of the segment's page size.
    BankEndNotPageMultiple {
        /// Bank number inside the segment (0-based).
        bank: u32,
        /// Its end.
        end: u64,
        /// The page size.
        page: u64,
    },
    /// A `CpuVisible` memory segment has no `bar_offset`.
    CpuVisibleWithoutBarOffset,
    /// `cpu_translated_address` is set on a segment outside the BAR.
    CpuAddressOutsideBar(u64),
    /// `bar_offset` is not a multiple of the segment's page size.
    BarOffsetNotPageMultiple {
        /// `bar_offset`.
        bar_offset: u64,
        /// The page size.
        page: u64,
    },
    /// `bar_offset + size` runs past the BAR.
    BarWindowOutsideBar {
        /// `bar_offset`.
        bar_offset: u64,
        /// `size`.
        size: u64,
        /// `vram_bar.size`.
        bar_size: u64,
    },
    /// `cpu_translated_address` is not the BAR address + `bar_offset` (0 while not mapped).
    CpuAddressMismatch {
        /// The address given.
        got: u64,
        /// The address the locator calls for.
        want: u64,
    },
    /// The BAR window overlaps an earlier segment's.
    BarWindowOverlap {
        /// Index (0-based) of the earlier segment.
        other: usize,
    },
}

/// Why a capset blob was refused: the first broken rule, in blob order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapsetError {
    /// The blob is shorter than the header or than the header's `total_size`.
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes there.
        have: usize,
    },
    /// `magic` is not `WDDM_GPU_CAPS_MAGIC`.
    BadMagic(u32),
    /// `version` is not `WDDM_GPU_CAPSET_VERSION`.
    BadVersion(u32),
    /// `total_size` is smaller than the header.
    BadTotalSize(u32),
    /// `wddm_version` is neither `WDDM_GPU_WDDM_1_3` nor `WDDM_GPU_WDDM_2_0`.
    BadWddmVersion(u32),
    /// A device limit in the header.
    BadLimit(LimitRule),
    /// The VRAM BAR locator.
    BadVramBar(VramBarRule),
    /// `segment_count` is 0.
    NoSegments,
    /// `segment_desc_size` cannot hold a `WddmGpuSegmentDesc`.
    DescTooSmall(u32),
    /// A table lies (partly) outside the blob or inside the header.
    TableOutOfBounds {
        /// "segment" or "bank".
        table: &'static str,
        /// Its offset.
        offset: u32,
        /// Its length in bytes.
        len: u64,
        /// `total_size`.
        total: u32,
    },
    /// `segment_count` is above the WDDM version's maximum.
    TooManySegments {
        /// `segment_count`.
        count: u32,
        /// The maximum.
        max: u32,
    },
    /// `bank_table_offset` of a non-empty bank table is not 8-byte aligned.
    BankTableUnaligned(u32),
    /// A segment descriptor.
    BadSegment {
        /// Index of the descriptor (segment id - 1).
        index: usize,
        /// The rule it breaks.
        rule: SegmentRule,
    },
    /// `paging_buffer_segment_id` is neither 0 nor an aperture segment's id.
    BadPagingSegment(u32),
}

impl CapsetError {
    /// Every rule's name, as [`CapsetError::rule`] returns them: what a corpus of broken blobs
    /// has to cover.
    pub const RULES: [&'static str; 42] = [
        "truncated",
        "magic",
        "version",
        "total_size",
        "wddm_version",
        "limit.no_frame_list_entries",
        "limit.packet_size_too_small",
        "limit.packet_size_unaligned",
        "vram_bar.unknown_mode",
        "vram_bar.reserved_not_zero",
        "vram_bar.pci_function_out_of_range",
        "vram_bar.bar_index_out_of_range",
        "vram_bar.unknown_state",
        "vram_bar.address_not_page_aligned",
        "vram_bar.address_overflow",
        "no_segments",
        "desc_too_small",
        "table_out_of_bounds",
        "too_many_segments",
        "bank_table_unaligned",
        "segment.id_out_of_order",
        "segment.reserved_flags",
        "segment.wddm2_only_flags",
        "segment.banks_on_wddm2",
        "segment.size_zero",
        "segment.size_not_page_multiple",
        "segment.base_address_overflow",
        "segment.commit_limit_above_size",
        "segment.banks_without_use_banking",
        "segment.use_banking_without_banks",
        "segment.too_many_banks",
        "segment.banks_outside_table",
        "segment.bank_end_not_increasing",
        "segment.bank_end_past_size",
        "segment.bank_end_not_page_multiple",
        "segment.cpu_visible_without_bar_offset",
        "segment.cpu_address_outside_bar",
        "segment.bar_offset_not_page_multiple",
        "segment.bar_window_outside_bar",
        "segment.cpu_address_mismatch",
        "segment.bar_window_overlap",
        "paging_buffer_segment",
    ];

    /// A stable name of the broken rule (one of [`CapsetError::RULES`]), for tests and logs.
    pub fn rule(&self) -> &'static str {
        use CapsetError as E;
        match self {
            E::Truncated { .. } => "truncated",
            E::BadMagic(_) => "magic",
            E::BadVersion(_) => "version",
            E::BadTotalSize(_) => "total_size",
            E::BadWddmVersion(_) => "wddm_version",
            E::BadLimit(rule) => match rule {
                LimitRule::NoFrameListEntries => "limit.no_frame_list_entries",
                LimitRule::PacketSizeTooSmall(_) => "limit.packet_size_too_small",
                LimitRule::PacketSizeUnaligned(_) => "limit.packet_size_unaligned",
            },
            E::BadVramBar(rule) => match rule {
                VramBarRule::UnknownMode(_) => "vram_bar.unknown_mode",
                VramBarRule::ReservedNotZero(_) => "vram_bar.reserved_not_zero",
                VramBarRule::PciFunctionOutOfRange(_) => "vram_bar.pci_function_out_of_range",
                VramBarRule::BarIndexOutOfRange(_) => "vram_bar.bar_index_out_of_range",
                VramBarRule::UnknownState(_) => "vram_bar.unknown_state",
                VramBarRule::AddressNotPageAligned(_) => "vram_bar.address_not_page_aligned",
                VramBarRule::AddressOverflow { .. } => "vram_bar.address_overflow",
            },
            E::NoSegments => "no_segments",
            E::DescTooSmall(_) => "desc_too_small",
            E::TableOutOfBounds { .. } => "table_out_of_bounds",
            E::TooManySegments { .. } => "too_many_segments",
            E::BankTableUnaligned(_) => "bank_table_unaligned",
            E::BadSegment { rule, .. } => rule.name(),
            E::BadPagingSegment(_) => "paging_buffer_segment",
        }
    }
}

impl SegmentRule {
    fn name(&self) -> &'static str {
        use SegmentRule as R;
        match self {
            R::IdOutOfOrder { .. } => "segment.id_out_of_order",
            R::ReservedFlags(_) => "segment.reserved_flags",
            R::Wddm2OnlyFlags(_) => "segment.wddm2_only_flags",
            R::BanksOnWddm2(_) => "segment.banks_on_wddm2",
            R::SizeZero => "segment.size_zero",
            R::SizeNotPageMultiple { .. } => "segment.size_not_page_multiple",
            R::BaseAddressOverflow { .. } => "segment.base_address_overflow",
            R::CommitLimitAboveSize { .. } => "segment.commit_limit_above_size",
            R::BanksWithoutUseBanking(_) => "segment.banks_without_use_banking",
            R::UseBankingWithoutBanks => "segment.use_banking_without_banks",
            R::TooManyBanks(_) => "segment.too_many_banks",
            R::BanksOutsideTable { .. } => "segment.banks_outside_table",
            R::BankEndNotIncreasing { .. } => "segment.bank_end_not_increasing",
            R::BankEndPastSize { .. } => "segment.bank_end_past_size",
            R::BankEndNotPageMultiple { .. } => "segment.bank_end_not_page_multiple",
            R::CpuVisibleWithoutBarOffset => "segment.cpu_visible_without_bar_offset",
            R::CpuAddressOutsideBar(_) => "segment.cpu_address_outside_bar",
            R::BarOffsetNotPageMultiple { .. } => "segment.bar_offset_not_page_multiple",
            R::BarWindowOutsideBar { .. } => "segment.bar_window_outside_bar",
            R::CpuAddressMismatch { .. } => "segment.cpu_address_mismatch",
            R::BarWindowOverlap { .. } => "segment.bar_window_overlap",
        }
    }
}

impl fmt::Display for LimitRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoFrameListEntries => {
                write!(
                    f,
                    "max_frame_list_entries is 0: no frame list could be sent"
                )
            }
            Self::PacketSizeTooSmall(size) => write!(
                f,
                "max_packet_size {size} cannot hold a TRANSFER packet ({} bytes)",
                size_of::<WddmGpuPacketTransfer>()
            ),
            Self::PacketSizeUnaligned(size) => write!(
                f,
                "max_packet_size {size} is not a multiple of {WDDM_GPU_PACKET_ALIGN}"
            ),
        }
    }
}

impl fmt::Display for VramBarRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownMode(mode) => write!(
                f,
                "mode {mode} is neither IVSHMEM ({WDDM_GPU_BAR_MODE_IVSHMEM}) nor SHMEM ({WDDM_GPU_BAR_MODE_SHMEM})"
            ),
            Self::ReservedNotZero(value) => write!(f, "reserved is {value:#x}, must be 0"),
            Self::PciFunctionOutOfRange(function) => write!(
                f,
                "pci_function {function} is past the slot's last function {WDDM_GPU_MAX_PCI_FUNCTION}"
            ),
            Self::BarIndexOutOfRange(index) => write!(
                f,
                "bar_index {index} is past a function's last BAR {WDDM_GPU_MAX_BAR_INDEX}"
            ),
            Self::UnknownState(state) => write!(
                f,
                "state {state} is neither NOT_MAPPED ({WDDM_GPU_BAR_STATE_NOT_MAPPED}) nor KNOWN ({WDDM_GPU_BAR_STATE_KNOWN})"
            ),
            Self::AddressNotPageAligned(address) => write!(
                f,
                "guest_physical_address {address:#x} is not a multiple of {WDDM_GPU_PAGE_SIZE:#x}"
            ),
            Self::AddressOverflow { address, size } => write!(
                f,
                "guest_physical_address {address:#x} + size {size:#x} overflows 64 bits"
            ),
        }
    }
}

impl fmt::Display for SegmentRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SegmentRule as R;
        match self {
            R::IdOutOfOrder { id, want } => {
                write!(f, "id {id} out of order (want {want}: ids count from 1 in blob order)")
            }
            R::ReservedFlags(bits) => write!(
                f,
                "flags set reserved bits {bits:#010x} (DXGK_SEGMENTFLAGS bits 22-31 are 0)"
            ),
            R::Wddm2OnlyFlags(bits) => write!(
                f,
                "flags set bits {bits:#010x}, which exist only from WDDM 2.0 (bits 11-21 are reserved in the WDDM 1.3 DXGK_SEGMENTFLAGS)"
            ),
            R::BanksOnWddm2(count) => write!(
                f,
                "bank_count {count} on a WDDM 2.0 layout (DXGK_SEGMENTDESCRIPTOR4 has no banks)"
            ),
            R::SizeZero => write!(f, "size is 0"),
            R::SizeNotPageMultiple { size, page } => {
                write!(f, "size {size:#x} is not a multiple of the page size {page:#x}")
            }
            R::BaseAddressOverflow { base_address, size } => write!(
                f,
                "base_address {base_address:#x} + size {size:#x} overflows the 64-bit GPU address space"
            ),
            R::CommitLimitAboveSize { commit_limit, size } => {
                write!(f, "commit_limit {commit_limit:#x} exceeds size {size:#x}")
            }
            R::BanksWithoutUseBanking(count) => {
                write!(f, "bank_count {count} without the UseBanking flag")
            }
            R::UseBankingWithoutBanks => write!(f, "UseBanking is set but bank_count is 0"),
            R::TooManyBanks(count) => write!(
                f,
                "bank_count {count} is above {WDDM_GPU_MAX_BANKS} (bank ids are 7 bits, 0 is none)"
            ),
            R::BanksOutsideTable {
                first,
                count,
                entries,
            } => write!(
                f,
                "banks [{first}, +{count}) run past the bank table ({entries} entries)"
            ),
            R::BankEndNotIncreasing { bank, end } => write!(
                f,
                "bank {bank} ends at {end:#x}, not above the previous bank's end (bank ends strictly increase from above 0)"
            ),
            R::BankEndPastSize { bank, end, size } => {
                write!(f, "bank {bank} ends at {end:#x}, past size {size:#x}")
            }
            R::BankEndNotPageMultiple { bank, end, page } => write!(
                f,
                "bank {bank} ends at {end:#x}, not a multiple of the page size {page:#x}"
            ),
            R::CpuVisibleWithoutBarOffset => {
                write!(f, "CpuVisible memory segment has no bar_offset")
            }
            R::CpuAddressOutsideBar(address) => write!(
                f,
                "cpu_translated_address {address:#x} set on a segment outside the BAR (must be 0)"
            ),
            R::BarOffsetNotPageMultiple { bar_offset, page } => write!(
                f,
                "bar_offset {bar_offset:#x} is not a multiple of the page size {page:#x}"
            ),
            R::BarWindowOutsideBar {
                bar_offset,
                size,
                bar_size,
            } => write!(
                f,
                "BAR window [{bar_offset:#x}, +{size:#x}) exceeds the BAR size {bar_size:#x}"
            ),
            R::CpuAddressMismatch { got, want } => write!(
                f,
                "cpu_translated_address {got:#x} is not the BAR address + bar_offset ({want:#x}; 0 while the BAR is not mapped)"
            ),
            R::BarWindowOverlap { other } => write!(f, "BAR window overlaps segment #{other}'s"),
        }
    }
}

impl fmt::Display for CapsetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CapsetError as E;
        match self {
            E::Truncated { need, have } => {
                write!(f, "capset blob truncated: need {need} bytes, have {have}")
            }
            E::BadMagic(magic) => write!(
                f,
                "capset magic {magic:#010x} is not WDGC ({WDDM_GPU_CAPS_MAGIC:#010x})"
            ),
            E::BadVersion(version) => write!(
                f,
                "capset blob version {version} unsupported (want {WDDM_GPU_CAPSET_VERSION})"
            ),
            E::BadTotalSize(total) => write!(
                f,
                "capset total_size {total} is smaller than the header ({HEADER_SIZE} bytes)"
            ),
            E::BadWddmVersion(version) => write!(
                f,
                "capset wddm_version {version:#06x} unknown (want {WDDM_GPU_WDDM_1_3:#06x} or {WDDM_GPU_WDDM_2_0:#06x})"
            ),
            E::BadLimit(rule) => write!(f, "capset limit: {rule}"),
            E::BadVramBar(rule) => write!(f, "VRAM BAR locator: {rule}"),
            E::NoSegments => write!(f, "capset lists no segments"),
            E::DescTooSmall(size) => write!(
                f,
                "segment_desc_size {size} is smaller than a segment descriptor ({} bytes)",
                size_of::<WddmGpuSegmentDesc>()
            ),
            E::TableOutOfBounds {
                table,
                offset,
                len,
                total,
            } => write!(
                f,
                "{table} table [{offset:#x}, +{len:#x}) is outside the blob body (total_size {total:#x})"
            ),
            E::TooManySegments { count, max } => write!(
                f,
                "segment_count {count} is above {max}, the most segment ids this WDDM version has"
            ),
            E::BankTableUnaligned(offset) => write!(
                f,
                "bank_table_offset {offset:#x} is not a multiple of {WDDM_GPU_BANK_TABLE_ALIGN}"
            ),
            E::BadSegment { index, rule } => write!(f, "segment #{index}: {rule}"),
            E::BadPagingSegment(id) => write!(
                f,
                "paging_buffer_segment_id {id} is neither 0 nor an aperture segment"
            ),
        }
    }
}

impl std::error::Error for CapsetError {}

/// A capset blob that passed [`validate_capset`]; only that function makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidCapset<'a> {
    header: WddmGpuCapsHeader,
    segment_table: &'a [u8],
    bank_table: &'a [u8],
}

/// One segment of a [`ValidCapset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidSegment<'a> {
    desc: WddmGpuSegmentDesc,
    /// Its `bank_count` entries of the bank table.
    banks: &'a [u8],
}

impl<'a> ValidCapset<'a> {
    /// The header (with the VRAM BAR locator).
    pub fn header(&self) -> &WddmGpuCapsHeader {
        &self.header
    }

    /// The segments in id order (segment `i + 1` first at position `i`).
    pub fn segments(&self) -> impl Iterator<Item = ValidSegment<'a>> + 'a {
        let bank_table = self.bank_table;
        descriptors(self.segment_table, self.header.segment_desc_size).map(move |desc| {
            ValidSegment {
                desc,
                banks: bank_bytes(bank_table, &desc).unwrap_or_default(),
            }
        })
    }

    /// The segment with id `id`.
    pub fn segment(&self, id: u32) -> Option<ValidSegment<'a>> {
        let index = usize::try_from(id.checked_sub(1)?).ok()?;
        self.segments().nth(index)
    }
}

impl ValidSegment<'_> {
    /// The descriptor as the blob holds it.
    pub fn desc(&self) -> &WddmGpuSegmentDesc {
        &self.desc
    }

    /// Its bank end offsets (`bank_count` of them, strictly increasing, the last at most `size`).
    pub fn bank_ends(&self) -> impl Iterator<Item = u64> + '_ {
        bank_ends(self.banks)
    }
}

/// Checks a capset blob (a GET_CAPSET payload, possibly padded past `total_size`) against every
/// rule of the wire format and returns the first broken one.
pub fn validate_capset(blob: &[u8]) -> Result<ValidCapset<'_>, CapsetError> {
    let (header, _) =
        WddmGpuCapsHeader::read_from_prefix(blob).map_err(|_| CapsetError::Truncated {
            need: HEADER_SIZE as u64,
            have: blob.len(),
        })?;
    if header.magic != WDDM_GPU_CAPS_MAGIC {
        return Err(CapsetError::BadMagic(header.magic));
    }
    if header.version != WDDM_GPU_CAPSET_VERSION {
        return Err(CapsetError::BadVersion(header.version));
    }
    let total = header.total_size;
    let total_len = usize::try_from(total).unwrap_or(usize::MAX);
    if total_len < HEADER_SIZE {
        return Err(CapsetError::BadTotalSize(total));
    }
    let body = blob.get(..total_len).ok_or(CapsetError::Truncated {
        need: u64::from(total),
        have: blob.len(),
    })?;
    let max_segments = max_segments(header.wddm_version)
        .ok_or(CapsetError::BadWddmVersion(header.wddm_version))?;
    check_limits(&header).map_err(CapsetError::BadLimit)?;
    check_vram_bar(&header.vram_bar).map_err(CapsetError::BadVramBar)?;

    if header.segment_count == 0 {
        return Err(CapsetError::NoSegments);
    }
    let desc_size = header.segment_desc_size;
    if (desc_size as usize) < size_of::<WddmGpuSegmentDesc>() {
        return Err(CapsetError::DescTooSmall(desc_size));
    }
    let segment_table = table(
        body,
        "segment",
        header.segments_offset,
        u64::from(header.segment_count) * u64::from(desc_size),
    )?;
    let bank_table = table(
        body,
        "bank",
        header.bank_table_offset,
        u64::from(header.bank_entry_count) * BANK_ENTRY_SIZE,
    )?;
    // Checked after the tables so that a count the blob cannot hold reads as out of bounds.
    if header.segment_count > max_segments {
        return Err(CapsetError::TooManySegments {
            count: header.segment_count,
            max: max_segments,
        });
    }
    if header.bank_entry_count != 0
        && !header
            .bank_table_offset
            .is_multiple_of(WDDM_GPU_BANK_TABLE_ALIGN)
    {
        return Err(CapsetError::BankTableUnaligned(header.bank_table_offset));
    }

    for (index, desc) in descriptors(segment_table, desc_size).enumerate() {
        let bad = |rule| CapsetError::BadSegment { index, rule };
        check_segment(index, &desc, &header, bank_table).map_err(bad)?;
        // At most 31 segments: the quadratic overlap check stays small.
        let mut earlier = descriptors(segment_table, desc_size).take(index);
        if let Some(other) = earlier.position(|o| windows_overlap(&desc, &o)) {
            return Err(bad(SegmentRule::BarWindowOverlap { other }));
        }
    }

    let paging = header.paging_buffer_segment_id;
    if paging != 0 {
        let aperture = paging
            .checked_sub(1)
            .and_then(|index| descriptors(segment_table, desc_size).nth(index as usize))
            .is_some_and(|desc| is_aperture(desc.flags));
        if !aperture {
            return Err(CapsetError::BadPagingSegment(paging));
        }
    }
    Ok(ValidCapset {
        header,
        segment_table,
        bank_table,
    })
}

/// The descriptors of a segment table whose bounds were checked (`desc_size` is at least a
/// descriptor, so every chunk holds one).
fn descriptors(
    segment_table: &[u8],
    desc_size: u32,
) -> impl Iterator<Item = WddmGpuSegmentDesc> + '_ {
    segment_table
        .chunks_exact((desc_size as usize).max(1))
        .filter_map(|raw| WddmGpuSegmentDesc::read_from_prefix(raw).ok())
        .map(|(desc, _)| desc)
}

/// The bank table bytes of one segment, if they lie inside the table.
fn bank_bytes<'a>(bank_table: &'a [u8], desc: &WddmGpuSegmentDesc) -> Option<&'a [u8]> {
    let start = u64::from(desc.bank_table_index).checked_mul(BANK_ENTRY_SIZE)?;
    let len = u64::from(desc.bank_count).checked_mul(BANK_ENTRY_SIZE)?;
    let end = start.checked_add(len)?;
    bank_table.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

fn bank_ends(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(size_of::<u64>())
        .map(|entry| entry.try_into().map_or(0, u64::from_le_bytes))
}

/// `len` bytes at `offset` of the body; a non-empty table must not overlap the header.
fn table<'a>(
    body: &'a [u8],
    name: &'static str,
    offset: u32,
    len: u64,
) -> Result<&'a [u8], CapsetError> {
    let err = CapsetError::TableOutOfBounds {
        table: name,
        offset,
        len,
        total: u32::try_from(body.len()).unwrap_or(u32::MAX),
    };
    let start = offset as usize;
    if len > 0 && start < HEADER_SIZE {
        return Err(err);
    }
    let end = u64::from(offset)
        .checked_add(len)
        .and_then(|end| usize::try_from(end).ok())
        .ok_or(err)?;
    body.get(start..end).ok_or(err)
}

fn check_limits(h: &WddmGpuCapsHeader) -> Result<(), LimitRule> {
    if h.max_frame_list_entries == 0 {
        return Err(LimitRule::NoFrameListEntries);
    }
    if (h.max_packet_size as usize) < size_of::<WddmGpuPacketTransfer>() {
        return Err(LimitRule::PacketSizeTooSmall(h.max_packet_size));
    }
    if !h.max_packet_size.is_multiple_of(WDDM_GPU_PACKET_ALIGN) {
        return Err(LimitRule::PacketSizeUnaligned(h.max_packet_size));
    }
    Ok(())
}

fn check_vram_bar(bar: &WddmGpuVramBar) -> Result<(), VramBarRule> {
    if ![WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM].contains(&bar.mode) {
        return Err(VramBarRule::UnknownMode(bar.mode));
    }
    if bar.reserved != 0 {
        return Err(VramBarRule::ReservedNotZero(bar.reserved));
    }
    if bar.pci_function > WDDM_GPU_MAX_PCI_FUNCTION {
        return Err(VramBarRule::PciFunctionOutOfRange(bar.pci_function));
    }
    if bar.bar_index > WDDM_GPU_MAX_BAR_INDEX {
        return Err(VramBarRule::BarIndexOutOfRange(bar.bar_index));
    }
    match bar.state {
        WDDM_GPU_BAR_STATE_NOT_MAPPED => Ok(()),
        WDDM_GPU_BAR_STATE_KNOWN => {
            let address = bar.guest_physical_address;
            if !address.is_multiple_of(WDDM_GPU_PAGE_SIZE) {
                Err(VramBarRule::AddressNotPageAligned(address))
            } else if address.checked_add(bar.size).is_none() {
                Err(VramBarRule::AddressOverflow {
                    address,
                    size: bar.size,
                })
            } else {
                Ok(())
            }
        }
        state => Err(VramBarRule::UnknownState(state)),
    }
}

fn check_segment(
    index: usize,
    desc: &WddmGpuSegmentDesc,
    header: &WddmGpuCapsHeader,
    bank_table: &[u8],
) -> Result<(), SegmentRule> {
    let want = u32::try_from(index).map_or(u32::MAX, |i| i.saturating_add(1));
    if desc.id != want {
        return Err(SegmentRule::IdOutOfOrder { id: desc.id, want });
    }
    let wddm2 = header.wddm_version == WDDM_GPU_WDDM_2_0;
    if desc.flags & SEGMENT_FLAGS_RESERVED_MASK != 0 {
        return Err(SegmentRule::ReservedFlags(
            desc.flags & SEGMENT_FLAGS_RESERVED_MASK,
        ));
    }
    if !wddm2 && desc.flags & SEGMENT_FLAGS_WDDM2_ONLY_MASK != 0 {
        return Err(SegmentRule::Wddm2OnlyFlags(
            desc.flags & SEGMENT_FLAGS_WDDM2_ONLY_MASK,
        ));
    }
    if wddm2 && desc.bank_count != 0 {
        return Err(SegmentRule::BanksOnWddm2(desc.bank_count));
    }
    let page = segment_page_size(desc.flags);
    if desc.size == 0 {
        return Err(SegmentRule::SizeZero);
    }
    if !desc.size.is_multiple_of(page) {
        return Err(SegmentRule::SizeNotPageMultiple {
            size: desc.size,
            page,
        });
    }
    if desc.base_address.checked_add(desc.size).is_none() {
        return Err(SegmentRule::BaseAddressOverflow {
            base_address: desc.base_address,
            size: desc.size,
        });
    }
    if desc.commit_limit > desc.size {
        return Err(SegmentRule::CommitLimitAboveSize {
            commit_limit: desc.commit_limit,
            size: desc.size,
        });
    }
    check_banks(desc, header, bank_table, page)?;
    check_bar_window(desc, &header.vram_bar, page)
}

fn check_banks(
    desc: &WddmGpuSegmentDesc,
    header: &WddmGpuCapsHeader,
    bank_table: &[u8],
    page: u64,
) -> Result<(), SegmentRule> {
    let banking = SegmentFlags::from_bits_retain(desc.flags).contains(SegmentFlags::USE_BANKING);
    match (banking, desc.bank_count) {
        (false, 0) => return Ok(()),
        (false, count) => return Err(SegmentRule::BanksWithoutUseBanking(count)),
        (true, 0) => return Err(SegmentRule::UseBankingWithoutBanks),
        (true, count) if count > WDDM_GPU_MAX_BANKS => {
            return Err(SegmentRule::TooManyBanks(count))
        }
        (true, _) => {}
    }
    let banks = bank_bytes(bank_table, desc).ok_or(SegmentRule::BanksOutsideTable {
        first: desc.bank_table_index,
        count: desc.bank_count,
        entries: header.bank_entry_count,
    })?;
    let mut previous = 0;
    for (bank, end) in (0u32..).zip(bank_ends(banks)) {
        if end <= previous {
            return Err(SegmentRule::BankEndNotIncreasing { bank, end });
        }
        if end > desc.size {
            return Err(SegmentRule::BankEndPastSize {
                bank,
                end,
                size: desc.size,
            });
        }
        if !end.is_multiple_of(page) {
            return Err(SegmentRule::BankEndNotPageMultiple { bank, end, page });
        }
        previous = end;
    }
    Ok(())
}

fn check_bar_window(
    desc: &WddmGpuSegmentDesc,
    bar: &WddmGpuVramBar,
    page: u64,
) -> Result<(), SegmentRule> {
    let cpu_visible_memory = !is_aperture(desc.flags)
        && SegmentFlags::from_bits_retain(desc.flags).contains(SegmentFlags::CPU_VISIBLE);
    let offset = desc.bar_offset;
    if offset == WDDM_GPU_NO_BAR_OFFSET {
        if cpu_visible_memory {
            return Err(SegmentRule::CpuVisibleWithoutBarOffset);
        }
        if desc.cpu_translated_address != 0 {
            return Err(SegmentRule::CpuAddressOutsideBar(
                desc.cpu_translated_address,
            ));
        }
        return Ok(());
    }
    if !offset.is_multiple_of(page) {
        return Err(SegmentRule::BarOffsetNotPageMultiple {
            bar_offset: offset,
            page,
        });
    }
    if offset
        .checked_add(desc.size)
        .is_none_or(|end| end > bar.size)
    {
        return Err(SegmentRule::BarWindowOutsideBar {
            bar_offset: offset,
            size: desc.size,
            bar_size: bar.size,
        });
    }
    // The locator check made address + size fit, and offset < size here.
    let want = if bar.state == WDDM_GPU_BAR_STATE_KNOWN {
        bar.guest_physical_address.saturating_add(offset)
    } else {
        0
    };
    if desc.cpu_translated_address != want {
        return Err(SegmentRule::CpuAddressMismatch {
            got: desc.cpu_translated_address,
            want,
        });
    }
    Ok(())
}

/// Whether two segments' BAR windows share bytes (both windows already checked to fit the BAR).
fn windows_overlap(a: &WddmGpuSegmentDesc, b: &WddmGpuSegmentDesc) -> bool {
    if a.bar_offset == WDDM_GPU_NO_BAR_OFFSET || b.bar_offset == WDDM_GPU_NO_BAR_OFFSET {
        return false;
    }
    let end = |d: &WddmGpuSegmentDesc| d.bar_offset.saturating_add(d.size);
    a.bar_offset < end(b) && b.bar_offset < end(a)
}

#[cfg(test)]
mod tests;
