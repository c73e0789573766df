//! `DXGK_SEGMENTFLAGS`: the 32-bit `Value` of a segment descriptor's flags, each member at its
//! documented bit (WDK `d3dkmddi.h`).

bitflags::bitflags! {
    /// `DXGK_SEGMENTFLAGS.Value`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SegmentFlags: u32 {
        /// Address window without storage; pages are mapped into it (GART).
        const APERTURE = 1 << 0;
        /// AGP aperture managed by the GART driver.
        const AGP = 1 << 1;
        /// The CPU reaches the segment at `CpuTranslatedAddress`.
        const CPU_VISIBLE = 1 << 2;
        /// The segment is split into banks.
        const USE_BANKING = 1 << 3;
        /// Aperture stays coherent with cacheable pages mapped into it.
        const CACHE_COHERENT = 1 << 4;
        /// Allocations use `PitchAlignedSize` here.
        const PITCH_ALIGNMENT = 1 << 5;
        /// Memory segment built from system memory the driver took at start.
        const POPULATED_FROM_SYSTEM_MEMORY = 1 << 6;
        /// Contents kept across standby.
        const PRESERVED_DURING_STANDBY = 1 << 7;
        /// Contents kept across hibernate.
        const PRESERVED_DURING_HIBERNATE = 1 << 8;
        /// Contents partly kept across hibernate (`SystemMemoryEndAddress`).
        const PARTIALLY_PRESERVED_DURING_HIBERNATE = 1 << 9;
        /// Direct Flip allocations can be pinned and scanned out here.
        const DIRECT_FLIP = 1 << 10;
        /// 64 KiB pages (WDDM 2.0).
        const USE_64KB_PAGES = 1 << 11;
        /// Reserved for system use; a KMD must not set it.
        const RESERVED_SYS_MEM = 1 << 12;
        /// CPU access through a programmable host aperture (WDDM 2.0).
        const SUPPORTS_CPU_HOST_APERTURE = 1 << 13;
        /// That host aperture is cache coherent.
        const SUPPORTS_CACHED_CPU_HOST_APERTURE = 1 << 14;
        /// Application budget target (deprecated by the budget groups).
        const APPLICATION_TARGET = 1 << 15;
        /// Video protected regions supported.
        const VPR_SUPPORTED = 1 << 16;
        /// Protected-region contents kept across standby.
        const VPR_PRESERVED_DURING_STANDBY = 1 << 17;
        /// Hardware-protected allocations are encrypted when paged.
        const ENCRYPTED_PAGING_SUPPORTED = 1 << 18;
        /// Counts against the local budget.
        const LOCAL_BUDGET_GROUP = 1 << 19;
        /// Counts against the non-local budget.
        const NON_LOCAL_BUDGET_GROUP = 1 << 20;
        /// Populated from DDR the firmware reserved (WDDM 2.9).
        const POPULATED_BY_RESERVED_DDR_BY_FIRMWARE = 1 << 21;
    }
}

/// Bits 22-31: `Reserved`, always zero.
pub const SEGMENT_FLAGS_RESERVED_MASK: u32 = 0xFFC0_0000;
/// Bits 11-21 (`Use64KBPages` .. `PopulatedByReservedDDRByFirmware`): members that exist only
/// from WDDM 2.0 on; the WDDM 1.3 `DXGK_SEGMENTFLAGS` reserves them.
pub const SEGMENT_FLAGS_WDDM2_ONLY_MASK: u32 = 0x003F_F800;

/// The documented member names (as in `d3dkmddi.h`), in bit order.
pub const SEGMENT_FLAG_NAMES: [(&str, SegmentFlags); 22] = [
    ("Aperture", SegmentFlags::APERTURE),
    ("Agp", SegmentFlags::AGP),
    ("CpuVisible", SegmentFlags::CPU_VISIBLE),
    ("UseBanking", SegmentFlags::USE_BANKING),
    ("CacheCoherent", SegmentFlags::CACHE_COHERENT),
    ("PitchAlignment", SegmentFlags::PITCH_ALIGNMENT),
    (
        "PopulatedFromSystemMemory",
        SegmentFlags::POPULATED_FROM_SYSTEM_MEMORY,
    ),
    (
        "PreservedDuringStandby",
        SegmentFlags::PRESERVED_DURING_STANDBY,
    ),
    (
        "PreservedDuringHibernate",
        SegmentFlags::PRESERVED_DURING_HIBERNATE,
    ),
    (
        "PartiallyPreservedDuringHibernate",
        SegmentFlags::PARTIALLY_PRESERVED_DURING_HIBERNATE,
    ),
    ("DirectFlip", SegmentFlags::DIRECT_FLIP),
    ("Use64KBPages", SegmentFlags::USE_64KB_PAGES),
    ("ReservedSysMem", SegmentFlags::RESERVED_SYS_MEM),
    (
        "SupportsCpuHostAperture",
        SegmentFlags::SUPPORTS_CPU_HOST_APERTURE,
    ),
    (
        "SupportsCachedCpuHostAperture",
        SegmentFlags::SUPPORTS_CACHED_CPU_HOST_APERTURE,
    ),
    ("ApplicationTarget", SegmentFlags::APPLICATION_TARGET),
    ("VprSupported", SegmentFlags::VPR_SUPPORTED),
    (
        "VprPreservedDuringStandby",
        SegmentFlags::VPR_PRESERVED_DURING_STANDBY,
    ),
    (
        "EncryptedPagingSupported",
        SegmentFlags::ENCRYPTED_PAGING_SUPPORTED,
    ),
    ("LocalBudgetGroup", SegmentFlags::LOCAL_BUDGET_GROUP),
    ("NonLocalBudgetGroup", SegmentFlags::NON_LOCAL_BUDGET_GROUP),
    (
        "PopulatedByReservedDDRByFirmware",
        SegmentFlags::POPULATED_BY_RESERVED_DDR_BY_FIRMWARE,
    ),
];

impl SegmentFlags {
    /// The documented names of the set bits, joined with `|` (e.g. `Aperture|CacheCoherent`).
    pub fn names(self) -> String {
        let names: Vec<&str> = SEGMENT_FLAG_NAMES
            .iter()
            .filter(|(_, flag)| self.contains(*flag))
            .map(|(name, _)| *name)
            .collect();
        if names.is_empty() {
            "0".to_string()
        } else {
            names.join("|")
        }
    }

    /// Looks a member up by its documented name.
    pub fn from_member_name(name: &str) -> Option<Self> {
        SEGMENT_FLAG_NAMES
            .iter()
            .find(|(member, _)| *member == name)
            .map(|(_, flag)| *flag)
    }
}
