//! The segment layout the device reports: what a KMD puts in `DXGK_QUERYSEGMENTOUT3`, and how
//! a segment GPU address resolves to storage.

use wddm_gpu_abi::caps::WDDM_GPU_WDDM_1_3;
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::segment_flags::SegmentFlags;

use crate::layout::link::LinkSpec;
use crate::support::span::Span;

/// Default aperture size.
pub const DEFAULT_APERTURE_SIZE: u64 = 512 << 20;
/// Default `PagingBufferSize`.
pub const DEFAULT_PAGING_BUFFER_SIZE: u32 = 64 << 10;

/// What backs a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// Memory segment stored in VRAM at `vram_offset` (see the `memory::vram` module for the VRAM
    /// address space: the BAR file first, device-only memory after it).
    Memory {
        /// Offset in the VRAM address space.
        vram_offset: u64,
        /// Offset inside the BAR for `CpuVisible` segments (equal to `vram_offset`); `None` for
        /// VRAM the guest CPU cannot reach.
        bar_offset: Option<u64>,
    },
    /// Aperture segment: no storage, pages are mapped into it (GART).
    Aperture,
}

/// One segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// 1-based id.
    pub id: u32,
    /// `DXGK_SEGMENTFLAGS`.
    pub flags: SegmentFlags,
    /// What backs it.
    pub kind: SegmentKind,
    /// `BaseAddress`.
    pub base_address: u64,
    /// `Size`.
    pub size: u64,
    /// `CommitLimit`.
    pub commit_limit: u64,
    /// `SystemMemoryEndAddress`.
    pub system_memory_end_address: u64,
    /// Bank end offsets (`UseBanking` only).
    pub banks: Vec<u64>,
}

/// The whole layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentLayout {
    /// `WDDM_GPU_WDDM_*`.
    pub wddm_version: u32,
    /// Segments in id order.
    pub segments: Vec<Segment>,
    /// `PagingBufferSegmentId`.
    pub paging_buffer_segment_id: u32,
    /// `PagingBufferSize`.
    pub paging_buffer_size: u32,
    /// `PagingBufferPrivateDataSize`.
    pub paging_buffer_private_data_size: u32,
    /// The GpuMmu geometry (WDDM 2.0 layouts with `[gpummu]`), offered as its own capset.
    pub gpummu: Option<MmuGeometry>,
    /// The link model (`--link`, `[link]`); never reported to the driver.
    pub link: Option<LinkSpec>,
}

/// Proof that [`SegmentLayout::resolve`] found a span inside one segment (only this module
/// makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InSegment(());

/// Bytes of one segment's storage (offsets in the VRAM address space, or inside the aperture),
/// checked to lie inside the segment.
pub type SegmentRange = Span<InSegment>;

/// A segment range resolved to its backing storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Bytes of the VRAM address space (offsets in it).
    Vram(SegmentRange),
    /// An aperture range (offsets inside the aperture segment).
    Aperture(SegmentRange),
}

impl Resolved {
    /// The range, whatever backs it.
    #[inline]
    pub fn range(self) -> SegmentRange {
        match self {
            Resolved::Vram(range) | Resolved::Aperture(range) => range,
        }
    }
}

/// Why a segment range does not resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No segment has this id.
    #[error("segment {0} does not exist")]
    NoSuchSegment(u32),
    /// `address + length` does not fit in 64 bits.
    #[error("range {address:#x}+{length:#x} in segment {segment} overflows")]
    Overflow {
        /// Segment id.
        segment: u32,
        /// GPU address asked for.
        address: u64,
        /// Length asked for.
        length: u64,
    },
    /// The range is outside the segment.
    #[error("range {address:#x}+{length:#x} is outside segment {segment}")]
    OutOfRange {
        /// Segment id.
        segment: u32,
        /// GPU address asked for.
        address: u64,
        /// Length asked for.
        length: u64,
    },
}

impl SegmentLayout {
    /// Segment 1 = CPU-visible VRAM filling the BAR; segment 2 = a cache-coherent aperture.
    pub fn default_for_vram(vram_size: u64) -> Self {
        Self {
            wddm_version: WDDM_GPU_WDDM_1_3,
            segments: vec![
                Segment {
                    id: 1,
                    flags: SegmentFlags::CPU_VISIBLE,
                    kind: SegmentKind::Memory {
                        vram_offset: 0,
                        bar_offset: Some(0),
                    },
                    base_address: 0,
                    size: vram_size,
                    commit_limit: vram_size,
                    system_memory_end_address: 0,
                    banks: Vec::new(),
                },
                Segment {
                    id: 2,
                    flags: SegmentFlags::APERTURE | SegmentFlags::CACHE_COHERENT,
                    kind: SegmentKind::Aperture,
                    base_address: 0,
                    size: DEFAULT_APERTURE_SIZE,
                    commit_limit: DEFAULT_APERTURE_SIZE,
                    system_memory_end_address: 0,
                    banks: Vec::new(),
                },
            ],
            paging_buffer_segment_id: 0,
            paging_buffer_size: DEFAULT_PAGING_BUFFER_SIZE,
            paging_buffer_private_data_size: 0,
            gpummu: None,
            link: None,
        }
    }

    /// Bytes of device-only VRAM the layout places after the BAR.
    pub fn device_only_vram(&self, bar_size: u64) -> u64 {
        self.segments
            .iter()
            .filter_map(|segment| match segment.kind {
                SegmentKind::Memory {
                    vram_offset,
                    bar_offset: None,
                } => Some(
                    vram_offset
                        .saturating_add(segment.size)
                        .saturating_sub(bar_size),
                ),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The segment with this id.
    pub fn segment(&self, id: u32) -> Option<&Segment> {
        let index = usize::try_from(id.checked_sub(1)?).ok()?;
        self.segments.get(index)
    }

    /// Resolves `length` bytes at GPU `address` of segment `id`.
    pub fn resolve(&self, id: u32, address: u64, length: u64) -> Result<Resolved, ResolveError> {
        let segment = self.segment(id).ok_or(ResolveError::NoSuchSegment(id))?;
        let out_of_range = ResolveError::OutOfRange {
            segment: id,
            address,
            length,
        };
        let overflow = ResolveError::Overflow {
            segment: id,
            address,
            length,
        };
        address.checked_add(length).ok_or(overflow)?;
        let offset = address
            .checked_sub(segment.base_address)
            .ok_or(out_of_range)?;
        let end = offset.checked_add(length).ok_or(overflow)?;
        if end > segment.size {
            return Err(out_of_range);
        }
        Ok(match segment.kind {
            SegmentKind::Memory { vram_offset, .. } => {
                let start = vram_offset.checked_add(offset).ok_or(overflow)?;
                Resolved::Vram(Span::new(InSegment(()), start, length).ok_or(overflow)?)
            }
            SegmentKind::Aperture => {
                Resolved::Aperture(Span::new(InSegment(()), offset, length).ok_or(overflow)?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_with_base(base: u64) -> SegmentLayout {
        let mut layout = SegmentLayout::default_for_vram(1 << 24);
        layout.segments[0].base_address = base;
        layout.segments[0].kind = SegmentKind::Memory {
            vram_offset: 0x1000,
            bar_offset: Some(0x1000),
        };
        layout
    }

    #[test]
    fn resolves_gpu_addresses_relative_to_base_and_bar_offset() {
        let layout = layout_with_base(0x8000_0000);
        assert_eq!(
            layout.resolve(1, 0x8000_2000, 0x100),
            Ok(Resolved::Vram(
                Span::new(InSegment(()), 0x3000, 0x100).unwrap()
            ))
        );
        assert_eq!(
            layout.resolve(2, 0x10, 0x10),
            Ok(Resolved::Aperture(
                Span::new(InSegment(()), 0x10, 0x10).unwrap()
            ))
        );
    }

    #[test]
    fn segment_ranges_accept_the_segment_edges() {
        let layout = layout_with_base(0x8000_0000);
        let whole = layout.resolve(1, 0x8000_0000, 1 << 24).unwrap().range();
        assert_eq!((whole.start(), whole.len()), (0x1000, 1 << 24));
        assert_eq!(whole.end(), 0x1000 + (1 << 24));
        assert_eq!(whole.at(5), 0x1005);
        assert_eq!(whole.at(u64::MAX), whole.end());
        let empty_at_end = layout.resolve(1, 0x8000_0000 + (1 << 24), 0).unwrap();
        assert!(empty_at_end.range().is_empty());
        assert_eq!(empty_at_end.range().start(), 0x1000 + (1 << 24));
        let aperture_end = DEFAULT_APERTURE_SIZE;
        assert_eq!(
            layout.resolve(2, aperture_end - 1, 1).map(Resolved::range),
            Ok(Span::new(InSegment(()), aperture_end - 1, 1).unwrap())
        );
        assert!(matches!(
            layout.resolve(2, aperture_end, 1),
            Err(ResolveError::OutOfRange { .. })
        ));
    }

    #[test]
    fn storage_offsets_past_64_bits_are_refused() {
        let mut layout = SegmentLayout::default_for_vram(1 << 24);
        layout.segments[0].kind = SegmentKind::Memory {
            vram_offset: u64::MAX - 0x10,
            bar_offset: None,
        };
        assert!(layout.resolve(1, 0, 0x10).is_ok());
        for (address, length) in [(0, 0x11), (0x11, 0)] {
            assert!(matches!(
                layout.resolve(1, address, length),
                Err(ResolveError::Overflow { .. })
            ));
        }
    }

    #[test]
    fn refuses_ranges_below_base_past_end_or_overflowing() {
        let layout = layout_with_base(0x8000_0000);
        for (address, length) in [(0x7fff_ffff, 1), (0x8000_0000 + (1 << 24) - 1, 2)] {
            assert!(
                matches!(
                    layout.resolve(1, address, length),
                    Err(ResolveError::OutOfRange { .. })
                ),
                "{address:#x}+{length:#x}"
            );
        }
        for (address, length) in [(0x8000_0000, u64::MAX), (u64::MAX, 1)] {
            assert!(matches!(
                layout.resolve(1, address, length),
                Err(ResolveError::Overflow { .. })
            ));
        }
        assert_eq!(layout.resolve(0, 0, 1), Err(ResolveError::NoSuchSegment(0)));
        assert_eq!(layout.resolve(3, 0, 1), Err(ResolveError::NoSuchSegment(3)));
    }
}
