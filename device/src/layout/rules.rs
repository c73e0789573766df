//! The WDDM rules a segment layout must obey, checked on the host before any guest boots.
//! [`validate`] turns a [`LayoutSpec`] into a [`SegmentLayout`] (placing CPU-visible segments in
//! the BAR and the others in device-only VRAM), or lists every broken rule.
//!
//! The rules here speak of the `--layout` file (every broken rule at once, by file field) and
//! add the host's policy (flag combinations dxgkrnl refuses, what the backend can emulate). The
//! capset's wire rules live once in `wddm_gpu_abi::capset_rules`: the limits below come from
//! there, and the capset a valid layout publishes must pass that validator too.

use std::fmt;

use wddm_gpu_abi::caps::{
    WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_MAX_BANKS,
    WDDM_GPU_MAX_SEGMENTS_WDDM_1_3, WDDM_GPU_MAX_SEGMENTS_WDDM_2_0, WDDM_GPU_WDDM_2_0,
};
use wddm_gpu_abi::capset_rules::{segment_page_size, validate_capset, CapsetError};
use wddm_gpu_abi::gpummu_rules::{validate_gpummu_each, GpuMmuRule, MmuGeometry, RuleSource};
use wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL;
use wddm_gpu_abi::segment_flags::{
    SegmentFlags as F, SEGMENT_FLAGS_RESERVED_MASK, SEGMENT_FLAGS_WDDM2_ONLY_MASK,
};

use crate::layout::capset::build_capset;
use crate::layout::file::{LayoutSpec, SegmentSpec};
use crate::layout::{Segment, SegmentKind, SegmentLayout};

/// Segment ids are 5 bits wide; WDDM 1.x can use 1..=31.
pub const MAX_SEGMENTS_WDDM1: usize = WDDM_GPU_MAX_SEGMENTS_WDDM_1_3 as usize;
/// WDDM 2.x reserves id 31 (`DXGK_SEGMENT_ID_SYSTEMMEMORY`).
pub const MAX_SEGMENTS_WDDM2: usize = WDDM_GPU_MAX_SEGMENTS_WDDM_2_0 as usize;
/// Bank ids in `DXGK_SEGMENTBANKPREFERENCE` are 7 bits wide and 0 means "none".
pub const MAX_BANKS: usize = WDDM_GPU_MAX_BANKS as usize;
/// CPU-visible segments without a `bar_offset` are packed into the BAR at this alignment
/// (the largest WDDM page size, so any segment's pages stay naturally aligned).
pub const BAR_PACK_ALIGN: u64 = 64 << 10;
/// Device-only VRAM is host memory reserved by the backend; cap it.
pub const MAX_DEVICE_ONLY_VRAM: u64 = 64 << 30;

/// The most aperture the backend emulates, all apertures together: their translation tables
/// (8 bytes per 4 KiB page, allocated at start) take 128 MiB at this size.
pub const MAX_APERTURE_TOTAL: u64 = 64 << 30;

/// One documented rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The layout has no segment.
    NoSegments,
    /// More segments than segment ids.
    TooManySegments {
        /// Segments given.
        count: usize,
        /// The maximum for this WDDM version.
        max: usize,
    },
    /// Bits 22-31 of `DXGK_SEGMENTFLAGS` are reserved.
    ReservedBits(u32),
    /// Members that exist only from WDDM 2.0 on, in a WDDM 1.3 layout.
    NeedsWddm2(String),
    /// `ReservedSysMem` is for the system.
    ReservedSysMem,
    /// No AGP aperture exists in a VM (`DXGK_QUERYSEGMENTIN` reports none).
    AgpUnavailable,
    /// `Agp` must be the only flag of its segment.
    AgpNotAlone,
    /// `CacheCoherent` is meaningful only on an aperture.
    CacheCoherentWithoutAperture,
    /// `PopulatedFromSystemMemory` is invalid on an aperture.
    PopulatedFromSystemMemoryOnAperture,
    /// Standby/hibernate flags must be 000, 100, 101 or 110.
    PowerFlags {
        /// `PreservedDuringStandby`.
        standby: bool,
        /// `PreservedDuringHibernate`.
        hibernate: bool,
        /// `PartiallyPreservedDuringHibernate`.
        partial: bool,
    },
    /// `SupportsCpuHostAperture` cannot be combined with `CpuVisible`.
    CpuHostApertureWithCpuVisible,
    /// `SupportsCachedCpuHostAperture` requires `SupportsCpuHostAperture`.
    CachedHostApertureWithoutHostAperture,
    /// This device's GART has no CPU window.
    ApertureCpuVisible,
    /// `Size` is 0.
    SizeZero,
    /// `Size` is not a multiple of the page size.
    SizeNotMultiple {
        /// The page size that applies.
        unit: u64,
    },
    /// `BaseAddress + Size` overflows the GPU address space.
    BaseAddressOverflow,
    /// A memory segment's `CommitLimit` must equal its `Size`.
    MemoryCommitLimit {
        /// The commit limit given.
        commit_limit: u64,
    },
    /// An aperture's `CommitLimit` must be at most its `Size`.
    ApertureCommitLimit {
        /// The commit limit given.
        commit_limit: u64,
    },
    /// Banks given without `UseBanking`.
    BanksWithoutUseBanking,
    /// `UseBanking` without a bank table.
    UseBankingWithoutBanks,
    /// WDDM 2.0 descriptors have no banks.
    BanksOnWddm2,
    /// More than 127 banks.
    TooManyBanks(usize),
    /// Bank ends must strictly increase.
    BanksNotIncreasing {
        /// Index of the first offending entry.
        index: usize,
    },
    /// A bank ends outside the segment.
    BankOutsideSegment {
        /// Index of the entry.
        index: usize,
    },
    /// A bank boundary is not on a page boundary.
    BankNotMultiple {
        /// Index of the entry.
        index: usize,
        /// The page size that applies.
        unit: u64,
    },
    /// `PartiallyPreservedDuringHibernate` needs `SystemMemoryEndAddress`.
    PartialHibernateWithoutEndAddress,
    /// `SystemMemoryEndAddress` lies past the segment.
    SystemMemoryEndBeyondSize,
    /// `bar_offset` on a segment that is not a CPU-visible memory segment.
    BarOffsetWithoutCpuVisible,
    /// `bar_offset` not on a page boundary.
    BarOffsetNotAligned {
        /// The page size that applies.
        unit: u64,
    },
    /// The segment does not fit in the VRAM BAR.
    OutsideBar {
        /// Where it was placed.
        offset: u64,
        /// The BAR size.
        bar_size: u64,
    },
    /// Two CPU-visible segments share BAR bytes.
    BarOverlap {
        /// The other segment's id.
        other: u32,
    },
    /// Non-CPU-visible VRAM adds up to more than the backend reserves.
    DeviceOnlyVramTooLarge {
        /// Bytes asked for in all.
        total: u64,
    },
    /// The apertures add up to more than the backend emulates.
    AperturesTooLarge {
        /// Bytes asked for in all.
        total: u64,
    },
    /// `PagingBufferSegmentId` is neither 0 nor an aperture.
    PagingBufferSegment(u32),
    /// `PagingBufferSize` is 0 or above 32 bits.
    PagingBufferSize(u64),
    /// `PagingBufferPrivateDataSize` above 32 bits.
    PagingBufferPrivateDataSize(u64),
    /// The WDDM 2.0 design guide asks for exactly one aperture segment.
    Wddm2ApertureCount(usize),
    /// The capset this layout would publish breaks a wire rule the guest checks.
    Capset(CapsetError),
    /// `[gpummu]` in a WDDM 1.3 layout: GPU virtual addressing is WDDM 2.0 and later.
    GpuMmuNeedsWddm2,
    /// `update_mode = "gpu_virtual"`: the paging node's UPDATE_PAGE_TABLE addresses tables
    /// physically (GPU_PHYSICAL), and a CPU_VIRTUAL driver writes them itself.
    GpuVirtualUpdatesNotOffered,
    /// The `[gpummu]` geometry breaks a rule.
    GpuMmu(GpuMmuRule),
}

impl Rule {
    /// The layout fields the rule concerns.
    pub fn fields(&self) -> &'static str {
        use Rule::*;
        match self {
            NoSegments | TooManySegments { .. } => "segments",
            SizeZero | SizeNotMultiple { .. } => "size",
            BaseAddressOverflow => "base_address, size",
            MemoryCommitLimit { .. } | ApertureCommitLimit { .. } => "commit_limit",
            BanksWithoutUseBanking | UseBankingWithoutBanks | BanksOnWddm2 => "flags, banks",
            TooManyBanks(_)
            | BanksNotIncreasing { .. }
            | BankOutsideSegment { .. }
            | BankNotMultiple { .. } => "banks",
            PartialHibernateWithoutEndAddress => "flags, system_memory_end_address",
            SystemMemoryEndBeyondSize => "system_memory_end_address",
            BarOffsetWithoutCpuVisible => "flags, bar_offset",
            BarOffsetNotAligned { .. } | OutsideBar { .. } | BarOverlap { .. } => {
                "bar_offset, size"
            }
            DeviceOnlyVramTooLarge { .. } | AperturesTooLarge { .. } => "size",
            PagingBufferSegment(_) => "paging_buffer_segment",
            PagingBufferSize(_) => "paging_buffer_size",
            PagingBufferPrivateDataSize(_) => "paging_buffer_private_data_size",
            Wddm2ApertureCount(_) => "wddm, segments",
            Capset(_) => "capset",
            GpuMmuNeedsWddm2 => "wddm, gpummu",
            GpuVirtualUpdatesNotOffered => "gpummu.update_mode",
            GpuMmu(_) => "gpummu",
            _ => "flags",
        }
    }
}

impl Rule {
    /// Whether the rule is the WDK's (and on which page) or a limit of this device; every
    /// message ends with it.
    pub fn source(&self) -> RuleSource {
        use Rule::*;
        const FLAGS: RuleSource = RuleSource::Wdk("DXGK_SEGMENTFLAGS");
        const DESCRIPTOR: RuleSource = RuleSource::Wdk("DXGK_SEGMENTDESCRIPTOR3");
        const OUT: RuleSource = RuleSource::Wdk("DXGK_QUERYSEGMENTOUT3");
        match self {
            TooManySegments { .. } => RuleSource::Wdk("D3DDDI_SEGMENTPREFERENCE"),
            ReservedBits(_)
            | NeedsWddm2(_)
            | ReservedSysMem
            | AgpNotAlone
            | CacheCoherentWithoutAperture
            | PopulatedFromSystemMemoryOnAperture
            | PowerFlags { .. }
            | CpuHostApertureWithCpuVisible
            | CachedHostApertureWithoutHostAperture => FLAGS,
            AgpUnavailable => RuleSource::Wdk("DXGK_QUERYSEGMENTIN"),
            SizeNotMultiple { .. }
            | MemoryCommitLimit { .. }
            | ApertureCommitLimit { .. }
            | BanksWithoutUseBanking
            | UseBankingWithoutBanks
            | BanksNotIncreasing { .. }
            | BankOutsideSegment { .. }
            | BankNotMultiple { .. }
            | PartialHibernateWithoutEndAddress
            | SystemMemoryEndBeyondSize
            | OutsideBar { .. } => DESCRIPTOR,
            BanksOnWddm2 => RuleSource::Wdk("DXGK_SEGMENTDESCRIPTOR4"),
            TooManyBanks(_) => RuleSource::Wdk("DXGK_SEGMENTBANKPREFERENCE"),
            PagingBufferSegment(_) | PagingBufferSize(_) | PagingBufferPrivateDataSize(_) => OUT,
            Wddm2ApertureCount(_) => RuleSource::Wdk("the WDDM 2.0 design guide"),
            GpuMmuNeedsWddm2 => RuleSource::Wdk("DXGK_GPUMMUCAPS"),
            GpuMmu(rule) => rule.source(),
            NoSegments
            | ApertureCpuVisible
            | SizeZero
            | BaseAddressOverflow
            | BarOffsetWithoutCpuVisible
            | BarOffsetNotAligned { .. }
            | BarOverlap { .. }
            | DeviceOnlyVramTooLarge { .. }
            | AperturesTooLarge { .. }
            | Capset(_)
            | GpuVirtualUpdatesNotOffered => RuleSource::Device,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Its message ends with its source already.
            Rule::GpuMmu(rule) => write!(f, "{rule}"),
            _ => {
                self.what(f)?;
                write!(f, " [{}]", self.source())
            }
        }
    }
}

impl Rule {
    /// What is broken, without the source.
    fn what(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Rule::*;
        match self {
            NoSegments => write!(f, "a layout needs at least one segment"),
            TooManySegments { count, max } => write!(f, "{count} segments, but segment ids are 5 bits wide: at most {max} for this WDDM version"),
            ReservedBits(bits) => write!(f, "reserved bits {bits:#010x} are set; DXGK_SEGMENTFLAGS bits 22-31 must be 0"),
            NeedsWddm2(names) => write!(f, "{names} exist only from WDDM 2.0 (bits 11-21 are reserved in the WDDM 1.3 DXGK_SEGMENTFLAGS); set wddm = \"2.0\" or drop them"),
            ReservedSysMem => write!(f, "ReservedSysMem is for system use; a KMD must not set it"),
            AgpUnavailable => write!(f, "Agp needs an AGP aperture from the GART driver, and a virtual PCI GPU has none (DXGK_QUERYSEGMENTIN is all zero): the adapter would fail to start"),
            AgpNotAlone => write!(f, "Agp must be the only flag of its segment, or the adapter fails to start"),
            CacheCoherentWithoutAperture => write!(f, "CacheCoherent may only be set together with Aperture"),
            PopulatedFromSystemMemoryOnAperture => write!(f, "PopulatedFromSystemMemory is invalid on an aperture segment"),
            PowerFlags { standby, hibernate, partial } => write!(
                f,
                "PreservedDuringStandby/PreservedDuringHibernate/PartiallyPreservedDuringHibernate = {}{}{} is not recognized; valid: 000, 100, 101, 110 (hibernate needs standby; full and partial hibernate exclude each other)",
                u8::from(*standby), u8::from(*hibernate), u8::from(*partial)
            ),
            CpuHostApertureWithCpuVisible => write!(f, "SupportsCpuHostAperture cannot be combined with CpuVisible"),
            CachedHostApertureWithoutHostAperture => write!(f, "SupportsCachedCpuHostAperture requires SupportsCpuHostAperture"),
            ApertureCpuVisible => write!(f, "Aperture with CpuVisible is refused: this device's GART has no CPU window that translates through it"),
            SizeZero => write!(f, "Size must not be 0"),
            SizeNotMultiple { unit } => write!(f, "Size must be a multiple of {} (the segment's page size)", human(*unit)),
            BaseAddressOverflow => write!(f, "BaseAddress + Size overflows the 64-bit GPU address space"),
            MemoryCommitLimit { commit_limit } => write!(f, "CommitLimit {commit_limit:#x} of a memory segment must equal its Size"),
            ApertureCommitLimit { commit_limit } => write!(f, "CommitLimit {commit_limit:#x} of an aperture must be at most its Size"),
            BanksWithoutUseBanking => write!(f, "a bank table is given but UseBanking is not set"),
            UseBankingWithoutBanks => write!(f, "UseBanking needs a bank table covering the segment"),
            BanksOnWddm2 => write!(f, "DXGK_SEGMENTDESCRIPTOR4 (WDDM 2.0) has no banks: drop UseBanking and banks"),
            TooManyBanks(count) => write!(f, "{count} banks, but bank ids are 7 bits wide with 0 meaning none: at most {MAX_BANKS}"),
            BanksNotIncreasing { index } => write!(f, "bank end banks[{index}] is not above the previous one: bank ends must strictly increase"),
            BankOutsideSegment { index } => write!(f, "bank end banks[{index}] is 0 or past Size: banks lie inside the segment"),
            BankNotMultiple { index, unit } => write!(f, "bank end banks[{index}] is not a multiple of {}", human(*unit)),
            PartialHibernateWithoutEndAddress => write!(f, "PartiallyPreservedDuringHibernate needs a non-zero system_memory_end_address"),
            SystemMemoryEndBeyondSize => write!(f, "system_memory_end_address lies past the segment's Size"),
            BarOffsetWithoutCpuVisible => write!(f, "bar_offset applies only to CpuVisible memory segments"),
            BarOffsetNotAligned { unit } => write!(f, "bar_offset must be a multiple of {}", human(*unit)),
            OutsideBar { offset, bar_size } => write!(f, "the segment at BAR offset {offset:#x} does not fit in the {} VRAM BAR (CpuVisible memory lives in the BAR)", human(*bar_size)),
            BarOverlap { other } => write!(f, "overlaps segment {other} in the VRAM BAR"),
            DeviceOnlyVramTooLarge { total } => write!(f, "non-CPU-visible VRAM adds up to {}, above the {} the backend reserves", human(*total), human(MAX_DEVICE_ONLY_VRAM)),
            AperturesTooLarge { total } => write!(f, "the apertures add up to {}, above the {} the backend emulates (their translation tables are allocated at start)", human(*total), human(MAX_APERTURE_TOTAL)),
            PagingBufferSegment(id) => write!(f, "PagingBufferSegmentId {id} must be 0 (system memory) or the id of an aperture segment"),
            PagingBufferSize(size) => write!(f, "PagingBufferSize {size:#x} must be non-zero and fit in 32 bits"),
            PagingBufferPrivateDataSize(size) => write!(f, "PagingBufferPrivateDataSize {size:#x} must fit in 32 bits"),
            Wddm2ApertureCount(count) => write!(f, "{count} aperture segments, but WDDM 2.0 drivers report exactly one"),
            Capset(error) => write!(f, "the published capset would be refused: {error}"),
            GpuMmuNeedsWddm2 => write!(f, "GPU virtual addressing (DXGK_GPUMMUCAPS) exists from WDDM 2.0 on: set wddm = \"2.0\" or drop [gpummu]"),
            GpuMmu(rule) => write!(f, "{rule}"),
            GpuVirtualUpdatesNotOffered => write!(f, "PageTableUpdateMode GPU_VIRTUAL is not offered: the paging node's UPDATE_PAGE_TABLE addresses page tables physically; use gpu_physical, or cpu_virtual"),
        }
    }
}

/// A broken rule, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The segment id, or `None` for the layout as a whole.
    pub segment: Option<u32>,
    /// The rule.
    pub rule: Rule,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.segment {
            Some(id) => write!(f, "segment {id} ({}): {}", self.rule.fields(), self.rule),
            None => write!(f, "layout ({}): {}", self.rule.fields(), self.rule),
        }
    }
}

/// Sizes as people read them.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

fn flag_rules(flags: u32, wddm2: bool, out: &mut Vec<Rule>) {
    let set = F::from_bits_truncate(flags);
    let has = |flag: F| set.contains(flag);
    if flags & SEGMENT_FLAGS_RESERVED_MASK != 0 {
        out.push(Rule::ReservedBits(flags & SEGMENT_FLAGS_RESERVED_MASK));
    }
    if !wddm2 && flags & SEGMENT_FLAGS_WDDM2_ONLY_MASK != 0 {
        out.push(Rule::NeedsWddm2(
            F::from_bits_truncate(flags & SEGMENT_FLAGS_WDDM2_ONLY_MASK).names(),
        ));
    }
    if has(F::RESERVED_SYS_MEM) {
        out.push(Rule::ReservedSysMem);
    }
    if has(F::AGP) {
        out.push(Rule::AgpUnavailable);
        if set != F::AGP {
            out.push(Rule::AgpNotAlone);
        }
    }
    if has(F::CACHE_COHERENT) && !has(F::APERTURE) {
        out.push(Rule::CacheCoherentWithoutAperture);
    }
    if has(F::POPULATED_FROM_SYSTEM_MEMORY) && has(F::APERTURE) {
        out.push(Rule::PopulatedFromSystemMemoryOnAperture);
    }
    let (standby, hibernate, partial) = (
        has(F::PRESERVED_DURING_STANDBY),
        has(F::PRESERVED_DURING_HIBERNATE),
        has(F::PARTIALLY_PRESERVED_DURING_HIBERNATE),
    );
    if (hibernate || partial) && !standby || hibernate && partial {
        out.push(Rule::PowerFlags {
            standby,
            hibernate,
            partial,
        });
    }
    if has(F::SUPPORTS_CPU_HOST_APERTURE) && has(F::CPU_VISIBLE) {
        out.push(Rule::CpuHostApertureWithCpuVisible);
    }
    if has(F::SUPPORTS_CACHED_CPU_HOST_APERTURE) && !has(F::SUPPORTS_CPU_HOST_APERTURE) {
        out.push(Rule::CachedHostApertureWithoutHostAperture);
    }
    if has(F::APERTURE) && has(F::CPU_VISIBLE) {
        out.push(Rule::ApertureCpuVisible);
    }
}

/// Checks size, commit limit, banks and the hibernate end address; returns the bank table as
/// reported (`NbOfBanks` entries, the last equal to `Size`).
fn shape_rules(spec: &SegmentSpec, wddm2: bool, out: &mut Vec<Rule>) -> Vec<u64> {
    let flags = F::from_bits_truncate(spec.flags);
    let aperture = flags.contains(F::APERTURE);
    let unit = segment_page_size(spec.flags);
    if spec.size == 0 {
        out.push(Rule::SizeZero);
    } else if !spec.size.is_multiple_of(unit) {
        out.push(Rule::SizeNotMultiple { unit });
    }
    if spec.base_address.checked_add(spec.size).is_none() {
        out.push(Rule::BaseAddressOverflow);
    }
    let commit_limit = spec.commit_limit.unwrap_or(spec.size);
    if aperture && commit_limit > spec.size {
        out.push(Rule::ApertureCommitLimit { commit_limit });
    } else if !aperture && commit_limit != spec.size {
        out.push(Rule::MemoryCommitLimit { commit_limit });
    }
    if flags.contains(F::PARTIALLY_PRESERVED_DURING_HIBERNATE)
        && spec.system_memory_end_address == 0
    {
        out.push(Rule::PartialHibernateWithoutEndAddress);
    }
    if spec.system_memory_end_address > spec.size {
        out.push(Rule::SystemMemoryEndBeyondSize);
    }

    let banking = flags.contains(F::USE_BANKING);
    let given = spec.banks.as_deref().unwrap_or_default();
    if wddm2 && (banking || !given.is_empty()) {
        out.push(Rule::BanksOnWddm2);
        return Vec::new();
    }
    if !banking {
        if !given.is_empty() {
            out.push(Rule::BanksWithoutUseBanking);
        }
        return Vec::new();
    }
    if given.is_empty() {
        out.push(Rule::UseBankingWithoutBanks);
        return Vec::new();
    }
    // The docs disagree on the table's length (banks 1..n or 1..n-1). Reporting all n ends,
    // the last equal to Size, satisfies both readings, so an omitted last end is appended.
    let mut banks = given.to_vec();
    if banks.last().is_some_and(|&last| last < spec.size) {
        banks.push(spec.size);
    }
    if banks.len() > MAX_BANKS {
        out.push(Rule::TooManyBanks(banks.len()));
    }
    for (index, &end) in given.iter().enumerate() {
        if index > 0 && end <= given[index - 1] {
            out.push(Rule::BanksNotIncreasing { index });
        } else if end == 0 || end > spec.size {
            out.push(Rule::BankOutsideSegment { index });
        } else if end % unit != 0 {
            out.push(Rule::BankNotMultiple { index, unit });
        }
    }
    banks
}

/// Validates a layout for a VRAM BAR of `bar_size` bytes.
pub fn validate(spec: &LayoutSpec, bar_size: u64) -> Result<SegmentLayout, Vec<Violation>> {
    let wddm2 = spec.wddm_version == WDDM_GPU_WDDM_2_0;
    let mut violations = Vec::new();
    let mut layout_rule = |rule| {
        violations.push(Violation {
            segment: None,
            rule,
        })
    };

    let max = if wddm2 {
        MAX_SEGMENTS_WDDM2
    } else {
        MAX_SEGMENTS_WDDM1
    };
    if spec.segments.is_empty() {
        layout_rule(Rule::NoSegments);
    } else if spec.segments.len() > max {
        layout_rule(Rule::TooManySegments {
            count: spec.segments.len(),
            max,
        });
    }
    let is_aperture = |flags: u32| F::from_bits_truncate(flags).contains(F::APERTURE);
    let apertures = spec
        .segments
        .iter()
        .filter(|s| is_aperture(s.flags))
        .count();
    if wddm2 && apertures != 1 {
        layout_rule(Rule::Wddm2ApertureCount(apertures));
    }
    let paging = spec.paging_buffer_segment_id;
    let paging_ok = paging == 0
        || usize::try_from(paging)
            .ok()
            .and_then(|id| spec.segments.get(id.wrapping_sub(1)))
            .is_some_and(|s| is_aperture(s.flags));
    if !paging_ok {
        layout_rule(Rule::PagingBufferSegment(paging));
    }
    if spec.paging_buffer_size == 0 || spec.paging_buffer_size > u64::from(u32::MAX) {
        layout_rule(Rule::PagingBufferSize(spec.paging_buffer_size));
    }
    if spec.paging_buffer_private_data_size > u64::from(u32::MAX) {
        layout_rule(Rule::PagingBufferPrivateDataSize(
            spec.paging_buffer_private_data_size,
        ));
    }

    let mut segments = Vec::with_capacity(spec.segments.len());
    let mut bar_cursor = 0u64;
    let mut device_only_total = 0u64;
    let mut aperture_total = 0u64;
    let mut placed: Vec<(u32, u64, u64)> = Vec::new(); // (id, BAR start, BAR end)
    for (segment, id) in spec.segments.iter().zip(1u32..) {
        let mut rules = Vec::new();
        flag_rules(segment.flags, wddm2, &mut rules);
        let banks = shape_rules(segment, wddm2, &mut rules);
        let flags = F::from_bits_truncate(segment.flags);
        let unit = segment_page_size(segment.flags);
        let aperture = flags.contains(F::APERTURE);
        let cpu_visible_memory = flags.contains(F::CPU_VISIBLE) && !aperture;

        let kind = if aperture {
            if segment.bar_offset.is_some() {
                rules.push(Rule::BarOffsetWithoutCpuVisible);
            }
            aperture_total = aperture_total.saturating_add(segment.size);
            SegmentKind::Aperture
        } else if cpu_visible_memory {
            let offset = match segment.bar_offset {
                Some(offset) => {
                    if offset % unit != 0 {
                        rules.push(Rule::BarOffsetNotAligned { unit });
                    }
                    offset
                }
                None => bar_cursor
                    .div_ceil(BAR_PACK_ALIGN)
                    .saturating_mul(BAR_PACK_ALIGN),
            };
            match offset.checked_add(segment.size) {
                Some(end) if end <= bar_size => {
                    if let Some(&(other, _, _)) = placed
                        .iter()
                        .find(|&&(_, start, stop)| offset < stop && start < end)
                    {
                        rules.push(Rule::BarOverlap { other });
                    }
                    placed.push((id, offset, end));
                    bar_cursor = bar_cursor.max(end);
                }
                _ => rules.push(Rule::OutsideBar { offset, bar_size }),
            }
            SegmentKind::Memory {
                vram_offset: offset,
                bar_offset: Some(offset),
            }
        } else {
            if segment.bar_offset.is_some() {
                rules.push(Rule::BarOffsetWithoutCpuVisible);
            }
            let vram_offset = bar_size.saturating_add(device_only_total);
            device_only_total = device_only_total.saturating_add(
                segment
                    .size
                    .div_ceil(BAR_PACK_ALIGN)
                    .saturating_mul(BAR_PACK_ALIGN),
            );
            SegmentKind::Memory {
                vram_offset,
                bar_offset: None,
            }
        };
        violations.extend(rules.into_iter().map(|rule| Violation {
            segment: Some(id),
            rule,
        }));
        segments.push(Segment {
            id,
            flags,
            kind,
            base_address: segment.base_address,
            size: segment.size,
            commit_limit: segment.commit_limit.unwrap_or(segment.size),
            system_memory_end_address: segment.system_memory_end_address,
            banks,
        });
    }
    if device_only_total > MAX_DEVICE_ONLY_VRAM {
        violations.push(Violation {
            segment: None,
            rule: Rule::DeviceOnlyVramTooLarge {
                total: device_only_total,
            },
        });
    }
    if aperture_total > MAX_APERTURE_TOTAL {
        violations.push(Violation {
            segment: None,
            rule: Rule::AperturesTooLarge {
                total: aperture_total,
            },
        });
    }
    let gpummu = spec
        .gpummu
        .as_ref()
        .and_then(|caps| gpummu_rules(caps, spec, wddm2, &mut violations));
    if !violations.is_empty() {
        return Err(violations);
    }
    let layout = SegmentLayout {
        wddm_version: spec.wddm_version,
        segments,
        paging_buffer_segment_id: paging,
        // Checked above to fit.
        paging_buffer_size: u32::try_from(spec.paging_buffer_size).unwrap_or(u32::MAX),
        paging_buffer_private_data_size: u32::try_from(spec.paging_buffer_private_data_size)
            .unwrap_or(u32::MAX),
        gpummu,
        link: spec.link.clone(),
    };
    published_capset_rules(&layout, bar_size)?;
    Ok(layout)
}

/// The `[gpummu]` geometry, checked by the one validator the guest uses too; every broken rule
/// is a violation of its own.
fn gpummu_rules(
    caps: &wddm_gpu_abi::gpuva::WddmGpuMmuCaps,
    spec: &LayoutSpec,
    wddm2: bool,
    violations: &mut Vec<Violation>,
) -> Option<MmuGeometry> {
    let mut layout_rule = |rule| {
        violations.push(Violation {
            segment: None,
            rule,
        })
    };
    let mut usable = true;
    if !wddm2 {
        layout_rule(Rule::GpuMmuNeedsWddm2);
        usable = false;
    }
    if caps.page_table_update_mode == WDDM_GPU_PAGE_TABLE_UPDATE_GPU_VIRTUAL {
        layout_rule(Rule::GpuVirtualUpdatesNotOffered);
        usable = false;
    }
    let flags: Vec<u32> = spec.segments.iter().map(|segment| segment.flags).collect();
    let geometry = validate_gpummu_each(caps, &flags, |rule| layout_rule(Rule::GpuMmu(rule))).ok();
    geometry.filter(|_| usable)
}

/// The capset the device will publish for `layout` must pass the guest's validator. Before the
/// frontend announces the BAR the locator is NOT_MAPPED; where it then lands moves no segment.
fn published_capset_rules(layout: &SegmentLayout, bar_size: u64) -> Result<(), Vec<Violation>> {
    let unmapped_bar = WddmGpuVramBar {
        mode: WDDM_GPU_BAR_MODE_IVSHMEM,
        state: WDDM_GPU_BAR_STATE_NOT_MAPPED,
        size: bar_size,
        ..WddmGpuVramBar::default()
    };
    let blob = build_capset(layout, &unmapped_bar);
    validate_capset(&blob).map(drop).map_err(|error| {
        let segment = match error {
            CapsetError::BadSegment { index, .. } => u32::try_from(index)
                .ok()
                .and_then(|index| index.checked_add(1)),
            _ => None,
        };
        vec![Violation {
            segment,
            rule: Rule::Capset(error),
        }]
    })
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
