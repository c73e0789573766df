//! The rules of a GpuMmu geometry ([`WddmGpuMmuCaps`]), written once: the backend checks the
//! geometry its layout file asks for, the guest driver the one it read. A geometry that passes
//! becomes an [`MmuGeometry`], the only way the device's MMU learns its shape, so the walker
//! needs no further checks on it.
//!
//! Sources: `DXGK_GPUMMUCAPS` (level count 2 to 6, `LeafPageTableSizeFor64KPagesInBytes` a
//! multiple of 4096, CPU_VIRTUAL not allowed with page directories in a local memory segment),
//! `DXGK_PAGETABLEUPDATEMODE` (its three values), `DXGK_PAGE_TABLE_LEVEL_DESC` (a page table in
//! system memory at most 4 KB, segment ids 0 or a memory segment), `gpu-virtual-address.md`
//! (level 0 is the leaf, VA bits 11:0 the byte offset, each level's index bits above). The rest
//! are the device's own limits. Every rule says which it is ([`GpuMmuRule::source`]), and its
//! message ends with it: `[WDK: page]` or `[limit of this device]`.
//!
//! [`validate_gpummu`] answers the first broken rule (the guest driver's C form,
//! `guest-tests/cdev/src/gpummu.c`, checks in the same order); [`validate_gpummu_each`] also
//! reports every other one, in that order, for `check-layout`.

use core::fmt;

use crate::capset_rules::is_aperture;
use crate::gpuva::{
    WddmGpuMmuCaps, WddmGpuPageTableLevelDesc, WDDM_GPU_64KB_PAGE_INDEX_BITS,
    WDDM_GPU_MAX_PAGE_TABLE_INDEX_BITS, WDDM_GPU_MAX_PAGE_TABLE_LEVELS,
    WDDM_GPU_MAX_SYSTEM_PAGE_TABLE_SIZE, WDDM_GPU_MAX_VIRTUAL_ADDRESS_BITS,
    WDDM_GPU_MIN_PAGE_TABLE_LEVELS, WDDM_GPU_MMU_CAPS_SUPPORTED,
    WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL, WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
    WDDM_GPU_PTE_SIZE,
};
use crate::segment_flags::SegmentFlags;
use crate::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

/// Most GPU-VA contexts a layout may ask the device to hold.
pub const MAX_CONTEXTS: u32 = 4096;

const LEVELS: usize = WDDM_GPU_MAX_PAGE_TABLE_LEVELS as usize;

/// Which of a level's two segment ids a rule is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableOwner {
    /// `PageTableSegmentId`.
    Process,
    /// `PagingProcessPageTableSegmentId`.
    PagingProcess,
}

/// Where a rule comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleSource {
    /// A rule the WDK states, on this page of its reference (a structure, or a design-guide
    /// page).
    Wdk(&'static str),
    /// A limit of this device: the WDK allows more.
    Device,
}

impl fmt::Display for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleSource::Wdk(page) => write!(f, "WDK: {page}"),
            RuleSource::Device => f.write_str("limit of this device"),
        }
    }
}

/// A broken rule of a GpuMmu geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuMmuRule {
    /// `flags` sets bits the device does not honour.
    UnsupportedFlags(u32),
    /// `page_table_update_mode` is not a `WDDM_GPU_PAGE_TABLE_UPDATE_*`.
    UnknownUpdateMode(u32),
    /// `page_table_level_count` is outside 2..=6.
    LevelCount(u32),
    /// A level's `page_table_index_bit_count` is outside the device's range: the leaf needs at
    /// least 4 (a 64 KiB page's 16 entries), a directory or the root at least 1 (the WDK lets a
    /// resizable root start at 0; this device sizes the root from its index bits), no level
    /// more than 12.
    IndexBits {
        /// The level.
        level: u32,
        /// Its index bits.
        bits: u32,
    },
    /// `virtual_address_bit_count` is not 12 plus the index bits of every level.
    AddressBits {
        /// `virtual_address_bit_count`.
        have: u32,
        /// What the levels add up to.
        want: u32,
    },
    /// The levels add up to more than 52 address bits.
    AddressBitsTooLarge(u32),
    /// A level past `page_table_level_count`, or a level's `reserved`, is not zero.
    NotZero {
        /// The level.
        level: u32,
    },
    /// `page_table_size_in_bytes` is not the level's entries rounded up to 4096 bytes.
    TableSize {
        /// The level.
        level: u32,
        /// Its size.
        size: u64,
        /// The size its entries need.
        want: u64,
    },
    /// `page_table_alignment_in_bytes` is neither 0 nor a power of two of at least 4096.
    Alignment {
        /// The level.
        level: u32,
        /// Its alignment.
        alignment: u64,
    },
    /// A table segment id is neither 0 nor a memory segment of the layout.
    TableSegment {
        /// The level.
        level: u32,
        /// Which id.
        owner: TableOwner,
        /// The id.
        segment: u32,
    },
    /// A level in system memory has tables larger than 4 KiB.
    SystemTableTooLarge {
        /// The level.
        level: u32,
        /// Its table size.
        size: u64,
    },
    /// CPU_VIRTUAL updates with a page directory (level 1 or above) in a memory segment.
    CpuVirtualDirectoryInSegment {
        /// The level.
        level: u32,
    },
    /// A table the CPU must write (every table with CPU_VIRTUAL, the paging process's always)
    /// lies in a segment without `CpuVisible`.
    TableNotCpuVisible {
        /// The level.
        level: u32,
        /// Which id.
        owner: TableOwner,
        /// The id.
        segment: u32,
    },
    /// `leaf_page_table_size_for_64k_pages` is not the 64 KiB leaf's entries rounded up to
    /// 4096 bytes.
    Leaf64KSize {
        /// The value given.
        have: u32,
        /// The value the leaf level calls for.
        want: u64,
    },
    /// `max_contexts` is 0 or above [`MAX_CONTEXTS`].
    MaxContexts(u32),
}

impl GpuMmuRule {
    /// Every rule's name, as [`GpuMmuRule::name`] returns them.
    pub const RULES: [&'static str; 15] = [
        "gpummu.unsupported_flags",
        "gpummu.update_mode",
        "gpummu.level_count",
        "gpummu.index_bits",
        "gpummu.address_bits",
        "gpummu.address_bits_too_large",
        "gpummu.not_zero",
        "gpummu.table_size",
        "gpummu.alignment",
        "gpummu.table_segment",
        "gpummu.system_table_too_large",
        "gpummu.cpu_virtual_directory_in_segment",
        "gpummu.table_not_cpu_visible",
        "gpummu.leaf_64k_size",
        "gpummu.max_contexts",
    ];

    /// A stable name of the rule (one of [`GpuMmuRule::RULES`]), for tests and logs.
    pub fn name(&self) -> &'static str {
        use GpuMmuRule as R;
        match self {
            R::UnsupportedFlags(_) => "gpummu.unsupported_flags",
            R::UnknownUpdateMode(_) => "gpummu.update_mode",
            R::LevelCount(_) => "gpummu.level_count",
            R::IndexBits { .. } => "gpummu.index_bits",
            R::AddressBits { .. } => "gpummu.address_bits",
            R::AddressBitsTooLarge(_) => "gpummu.address_bits_too_large",
            R::NotZero { .. } => "gpummu.not_zero",
            R::TableSize { .. } => "gpummu.table_size",
            R::Alignment { .. } => "gpummu.alignment",
            R::TableSegment { .. } => "gpummu.table_segment",
            R::SystemTableTooLarge { .. } => "gpummu.system_table_too_large",
            R::CpuVirtualDirectoryInSegment { .. } => "gpummu.cpu_virtual_directory_in_segment",
            R::TableNotCpuVisible { .. } => "gpummu.table_not_cpu_visible",
            R::Leaf64KSize { .. } => "gpummu.leaf_64k_size",
            R::MaxContexts(_) => "gpummu.max_contexts",
        }
    }

    /// Whether the rule is the WDK's (and on which page) or a limit of this device.
    pub fn source(&self) -> RuleSource {
        use GpuMmuRule as R;
        match self {
            R::UnknownUpdateMode(_) => RuleSource::Wdk("DXGK_PAGETABLEUPDATEMODE"),
            R::LevelCount(_) => RuleSource::Wdk("DXGK_GPUMMUCAPS.PageTableLevelCount"),
            R::AddressBits { .. } => RuleSource::Wdk("gpu-virtual-address.md"),
            R::TableSegment { .. } | R::SystemTableTooLarge { .. } => {
                RuleSource::Wdk("DXGK_PAGE_TABLE_LEVEL_DESC")
            }
            R::CpuVirtualDirectoryInSegment { .. } => {
                RuleSource::Wdk("DXGK_GPUMMUCAPS.PageTableUpdateMode")
            }
            R::Leaf64KSize { .. } => {
                RuleSource::Wdk("DXGK_GPUMMUCAPS.LeafPageTableSizeFor64KPagesInBytes")
            }
            R::UnsupportedFlags(_)
            | R::IndexBits { .. }
            | R::AddressBitsTooLarge(_)
            | R::NotZero { .. }
            | R::TableSize { .. }
            | R::Alignment { .. }
            | R::TableNotCpuVisible { .. }
            | R::MaxContexts(_) => RuleSource::Device,
        }
    }
}

impl fmt::Display for TableOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TableOwner::Process => "page_table_segment_id",
            TableOwner::PagingProcess => "paging_process_page_table_segment_id",
        })
    }
}

impl fmt::Display for GpuMmuRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.what(f)?;
        write!(f, " [{}]", self.source())
    }
}

impl GpuMmuRule {
    /// What is broken, without the source.
    fn what(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GpuMmuRule as R;
        match *self {
            R::UnsupportedFlags(bits) => write!(
                f,
                "flags {bits:#x} are not honoured by the device (it honours \
                 {WDDM_GPU_MMU_CAPS_SUPPORTED:#x}; DualPteSupported and \
                 AllowNonAlignedLargePageAddress are not offered)"
            ),
            R::UnknownUpdateMode(mode) => write!(
                f,
                "page_table_update_mode {mode} is not CPU_VIRTUAL (0), GPU_VIRTUAL (1) or \
                 GPU_PHYSICAL (2)"
            ),
            R::LevelCount(count) => write!(
                f,
                "page_table_level_count {count} is outside {WDDM_GPU_MIN_PAGE_TABLE_LEVELS}..=\
                 {WDDM_GPU_MAX_PAGE_TABLE_LEVELS} (DXGK_MIN/MAX_PAGE_TABLE_LEVEL_COUNT)"
            ),
            R::IndexBits { level, bits } if bits > WDDM_GPU_MAX_PAGE_TABLE_INDEX_BITS => write!(
                f,
                "level {level}: page_table_index_bit_count {bits} is above \
                 {WDDM_GPU_MAX_PAGE_TABLE_INDEX_BITS}: the device's tables hold at most 4096 \
                 entries (32 KiB)"
            ),
            R::IndexBits { level: 0, bits } => write!(
                f,
                "level 0: page_table_index_bit_count {bits} is below \
                 {WDDM_GPU_64KB_PAGE_INDEX_BITS}: the leaf must hold the 16 entries of a 64 KiB \
                 page"
            ),
            R::IndexBits { level, bits } => write!(
                f,
                "level {level}: page_table_index_bit_count {bits} is below 1: a page directory \
                 or root has at least 2 entries here (the WDK lets a resizable root, with 2 \
                 levels, start at 0 index bits and grow it through DxgkDdiGetRootPageTableSize; \
                 this device sizes the root from its index bits: give the root's full index \
                 bit count)"
            ),
            R::AddressBits { have, want } => write!(
                f,
                "virtual_address_bit_count {have} is not 12 plus every level's index bits \
                 ({want})"
            ),
            R::AddressBitsTooLarge(bits) => write!(
                f,
                "the levels cover {bits} address bits, more than the device's \
                 {WDDM_GPU_MAX_VIRTUAL_ADDRESS_BITS}"
            ),
            R::NotZero { level } => write!(
                f,
                "level {level}: must be zero (past page_table_level_count, or its reserved \
                 field)"
            ),
            R::TableSize { level, size, want } => write!(
                f,
                "level {level}: page_table_size_in_bytes {size:#x} is not its entries (8 bytes \
                 each) rounded up to 4096 bytes ({want:#x})"
            ),
            R::Alignment { level, alignment } => write!(
                f,
                "level {level}: page_table_alignment_in_bytes {alignment:#x} is neither 0 nor \
                 a power of two of at least 4096"
            ),
            R::TableSegment {
                level,
                owner,
                segment,
            } => write!(
                f,
                "level {level}: {owner} {segment} is neither 0 (system memory) nor a memory \
                 segment"
            ),
            R::SystemTableTooLarge { level, size } => write!(
                f,
                "level {level}: tables in system memory may be at most 4 KB, these are \
                 {size:#x} bytes"
            ),
            R::CpuVirtualDirectoryInSegment { level } => write!(
                f,
                "level {level}: a page directory in a local memory segment rules out \
                 CPU_VIRTUAL updates"
            ),
            R::TableNotCpuVisible {
                level,
                owner,
                segment,
            } => write!(
                f,
                "level {level}: {owner} {segment} is not CpuVisible, but the CPU writes these \
                 tables (CPU_VIRTUAL updates, or the paging process's initial update)"
            ),
            R::Leaf64KSize { have, want } => write!(
                f,
                "leaf_page_table_size_for_64k_pages {have:#x} is not the 64 KiB leaf's \
                 entries rounded up to 4096 bytes ({want:#x})"
            ),
            R::MaxContexts(count) => {
                write!(f, "max_contexts {count} is outside 1..={MAX_CONTEXTS}")
            }
        }
    }
}

fn min_index_bits(level: u32) -> u32 {
    if level == 0 {
        WDDM_GPU_64KB_PAGE_INDEX_BITS
    } else {
        1
    }
}

/// Bytes of a table of `entries` entries, rounded up to whole 4 KiB pages.
pub fn table_bytes(entries: u64) -> u64 {
    (entries * u64::from(WDDM_GPU_PTE_SIZE)).next_multiple_of(WDDM_GPU_PAGE_SIZE)
}

/// One level of a checked geometry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmuLevel {
    index_bits: u32,
    shift: u32,
    table_segment: u32,
    paging_process_table_segment: u32,
    table_size: u64,
}

impl MmuLevel {
    /// Index bits (the level's tables hold `1 << index_bits` entries at most).
    #[inline]
    pub fn index_bits(&self) -> u32 {
        self.index_bits
    }

    /// The lowest VA bit the level indexes: an entry covers `1 << shift` bytes.
    #[inline]
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// Entries of one table (the most a resizable root may hold).
    #[inline]
    pub fn entries(&self) -> u64 {
        1 << self.index_bits
    }

    /// Bytes one entry covers.
    pub fn coverage(&self) -> u64 {
        1 << self.shift
    }

    /// Where the level's tables live (0 = system memory).
    pub fn table_segment(&self, owner: TableOwner) -> u32 {
        match owner {
            TableOwner::Process => self.table_segment,
            TableOwner::PagingProcess => self.paging_process_table_segment,
        }
    }

    /// Bytes of one table.
    pub fn table_size(&self) -> u64 {
        self.table_size
    }
}

/// A geometry that passed [`validate_gpummu`]: every shift below 52, every index in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmuGeometry {
    caps: WddmGpuMmuCaps,
    levels: [MmuLevel; LEVELS],
    level_count: u32,
}

impl MmuGeometry {
    /// The caps it was checked from.
    #[inline]
    pub fn caps(&self) -> &WddmGpuMmuCaps {
        &self.caps
    }

    /// `PageTableLevelCount`.
    #[inline]
    pub fn level_count(&self) -> u32 {
        self.level_count
    }

    /// The root's level.
    #[inline]
    pub fn root_level(&self) -> u32 {
        self.level_count - 1
    }

    /// Level `level` (0 = leaf); `None` past the root.
    #[inline]
    pub fn level(&self, level: u32) -> Option<&MmuLevel> {
        self.levels[..self.level_count as usize].get(level as usize)
    }

    /// `VirtualAddressBitCount`.
    pub fn address_bits(&self) -> u32 {
        self.caps.virtual_address_bit_count
    }

    /// One past the highest GPU virtual address.
    #[inline]
    pub fn address_limit(&self) -> u64 {
        1 << self.caps.virtual_address_bit_count
    }

    /// Whether the root is resized by the KMD (`DxgkDdiGetRootPageTableSize`): 2 levels.
    pub fn resizable_root(&self) -> bool {
        self.level_count == WDDM_GPU_MIN_PAGE_TABLE_LEVELS
    }

    /// `DxgkDdiGetRootPageTableSize`: bytes of a root of `entries` entries (`None` past the
    /// root level's entries).
    pub fn root_table_size(&self, entries: u64) -> Option<u64> {
        let root = self.levels[self.root_level() as usize];
        (entries <= root.entries()).then(|| table_bytes(entries))
    }
}

/// Checks a geometry; `segment_flags[i]` holds the `DXGK_SEGMENTFLAGS` of segment `i + 1`.
/// Answers the first broken rule (the one the guest driver's C form answers too).
pub fn validate_gpummu(
    caps: &WddmGpuMmuCaps,
    segment_flags: &[u32],
) -> Result<MmuGeometry, GpuMmuRule> {
    validate_gpummu_each(caps, segment_flags, |_| {})
}

/// [`validate_gpummu`], telling `broken` every broken rule in the order they are checked (the
/// first is the one answered). A rule that leaves later ones meaningless ends the check: a
/// level count outside 2..=6 (there are no levels to check), a level's index bits (its table
/// size, and the address bits, follow from them).
pub fn validate_gpummu_each(
    caps: &WddmGpuMmuCaps,
    segment_flags: &[u32],
    mut broken: impl FnMut(GpuMmuRule),
) -> Result<MmuGeometry, GpuMmuRule> {
    let mut first = None;
    let mut report = |rule: GpuMmuRule| {
        first.get_or_insert(rule);
        broken(rule);
    };
    let geometry = check_geometry(caps, segment_flags, &mut report);
    match (first, geometry) {
        (Some(rule), _) => Err(rule),
        (None, Some(geometry)) => Ok(geometry),
        // `check_geometry` gives no geometry only after reporting the level count.
        (None, None) => Err(GpuMmuRule::LevelCount(caps.page_table_level_count)),
    }
}

/// Every rule, in order, each broken one told to `report`; the geometry when the levels could
/// be walked (it is valid only if nothing was reported).
fn check_geometry(
    caps: &WddmGpuMmuCaps,
    segment_flags: &[u32],
    report: &mut impl FnMut(GpuMmuRule),
) -> Option<MmuGeometry> {
    let unsupported = caps.flags & !WDDM_GPU_MMU_CAPS_SUPPORTED;
    if unsupported != 0 {
        report(GpuMmuRule::UnsupportedFlags(unsupported));
    }
    let mode = caps.page_table_update_mode;
    if mode > WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL {
        report(GpuMmuRule::UnknownUpdateMode(mode));
    }
    let count = caps.page_table_level_count;
    if !(WDDM_GPU_MIN_PAGE_TABLE_LEVELS..=WDDM_GPU_MAX_PAGE_TABLE_LEVELS).contains(&count) {
        report(GpuMmuRule::LevelCount(count));
        return None;
    }
    if caps.max_contexts == 0 || caps.max_contexts > MAX_CONTEXTS {
        report(GpuMmuRule::MaxContexts(caps.max_contexts));
    }
    let mut levels = [MmuLevel::default(); LEVELS];
    let mut shift = WDDM_GPU_PAGE_SHIFT;
    let mut bits_valid = true;
    for (level, desc) in (0u32..).zip(&caps.levels) {
        if level >= count {
            if *desc != WddmGpuPageTableLevelDesc::default() {
                report(GpuMmuRule::NotZero { level });
            }
            continue;
        }
        match check_level(level, desc, shift, caps, segment_flags, report) {
            Some(checked) => {
                levels[level as usize] = checked;
                shift += desc.page_table_index_bit_count;
            }
            None => bits_valid = false,
        }
    }
    if !bits_valid {
        return None;
    }
    if shift > WDDM_GPU_MAX_VIRTUAL_ADDRESS_BITS {
        report(GpuMmuRule::AddressBitsTooLarge(shift));
    } else if caps.virtual_address_bit_count != shift {
        report(GpuMmuRule::AddressBits {
            have: caps.virtual_address_bit_count,
            want: shift,
        });
    }
    let leaf_64k_entries = levels[0].entries() >> WDDM_GPU_64KB_PAGE_INDEX_BITS;
    let want = table_bytes(leaf_64k_entries);
    if u64::from(caps.leaf_page_table_size_for_64k_pages) != want {
        report(GpuMmuRule::Leaf64KSize {
            have: caps.leaf_page_table_size_for_64k_pages,
            want,
        });
    }
    Some(MmuGeometry {
        caps: *caps,
        levels,
        level_count: count,
    })
}

/// One level's rules, each broken one told to `report`; `None` when its index bits are out of
/// range (nothing else about it can be checked then).
fn check_level(
    level: u32,
    desc: &WddmGpuPageTableLevelDesc,
    shift: u32,
    caps: &WddmGpuMmuCaps,
    segment_flags: &[u32],
    report: &mut impl FnMut(GpuMmuRule),
) -> Option<MmuLevel> {
    let bits = desc.page_table_index_bit_count;
    if !(min_index_bits(level)..=WDDM_GPU_MAX_PAGE_TABLE_INDEX_BITS).contains(&bits) {
        report(GpuMmuRule::IndexBits { level, bits });
        return None;
    }
    if desc.reserved != 0 {
        report(GpuMmuRule::NotZero { level });
    }
    let want = table_bytes(1 << bits);
    let size = desc.page_table_size_in_bytes;
    if size != want {
        report(GpuMmuRule::TableSize { level, size, want });
    }
    let alignment = desc.page_table_alignment_in_bytes;
    if alignment != 0 && (!alignment.is_power_of_two() || alignment < WDDM_GPU_PAGE_SIZE) {
        report(GpuMmuRule::Alignment { level, alignment });
    }
    let cpu_virtual = caps.page_table_update_mode == WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL;
    let mut reported_size = false;
    let mut reported_directory = false;
    for (owner, segment) in [
        (TableOwner::Process, desc.page_table_segment_id),
        (
            TableOwner::PagingProcess,
            desc.paging_process_page_table_segment_id,
        ),
    ] {
        if segment == 0 {
            // One line for the level, whichever of its ids put it in system memory.
            if size > WDDM_GPU_MAX_SYSTEM_PAGE_TABLE_SIZE && !reported_size {
                reported_size = true;
                report(GpuMmuRule::SystemTableTooLarge { level, size });
            }
            continue;
        }
        let Some(flags) = usize::try_from(segment - 1)
            .ok()
            .and_then(|index| segment_flags.get(index))
            .copied()
            .filter(|&flags| !is_aperture(flags))
        else {
            report(GpuMmuRule::TableSegment {
                level,
                owner,
                segment,
            });
            continue;
        };
        if cpu_virtual && level > 0 {
            if !reported_directory {
                reported_directory = true;
                report(GpuMmuRule::CpuVirtualDirectoryInSegment { level });
            }
            continue;
        }
        let cpu_writes = cpu_virtual || owner == TableOwner::PagingProcess;
        if cpu_writes && !SegmentFlags::from_bits_retain(flags).contains(SegmentFlags::CPU_VISIBLE)
        {
            report(GpuMmuRule::TableNotCpuVisible {
                level,
                owner,
                segment,
            });
        }
    }
    Some(MmuLevel {
        index_bits: bits,
        shift,
        table_segment: desc.page_table_segment_id,
        paging_process_table_segment: desc.paging_process_page_table_segment_id,
        table_size: size,
    })
}

#[cfg(test)]
mod tests;
