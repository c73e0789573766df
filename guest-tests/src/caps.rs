//! Parsing and validation of the segment-layout capability set (`wddm_gpu_abi::caps`).
//!
//! The blob comes from the device, so nothing in it is trusted: every offset, count and size is
//! checked against the blob before use, and the layout must be self-consistent (ids in order,
//! bank tables inside their segment, BAR windows inside the BAR) before a KMD could hand it to
//! dxgkrnl as `DXGK_QUERYSEGMENTOUT3` (WDDM 1.3) or `DXGK_QUERYSEGMENTOUT4` (WDDM 2.0: no banks,
//! and none of the flag bits 11-21 on 1.3).

use std::mem::size_of;

use thiserror::Error;
use wddm_gpu_abi::caps::{
    WddmGpuCapsHeader, WddmGpuSegmentDesc, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM,
    WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_CAPSET_VERSION,
    WDDM_GPU_CAPS_MAGIC, WDDM_GPU_NO_BAR_OFFSET, WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0,
};
use wddm_gpu_abi::packet::{WddmGpuPacketTransfer, WDDM_GPU_PACKET_ALIGN};
use wddm_gpu_abi::segment_flags::{SegmentFlags, SEGMENT_FLAGS_RESERVED_MASK};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::FromBytes;

/// `DXGK_SEGMENTFLAGS` members WDDM 1.3 does not have (bits 11-21 are reserved there).
const WDDM2_ONLY_FLAGS: u32 = 0x003F_F800;

/// Why a capset blob was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CapsError {
    /// The blob is shorter than the header or than the header's `total_size`.
    #[error("capset blob truncated: need {need} bytes, have {have}")]
    Truncated { need: u64, have: usize },
    /// `magic` is not "WDGC".
    #[error("capset magic {0:#010x} is not WDGC")]
    BadMagic(u32),
    /// A blob version this driver does not know.
    #[error("capset blob version {0} unsupported (want {WDDM_GPU_CAPSET_VERSION})")]
    BadVersion(u32),
    /// `total_size` is smaller than the header.
    #[error("capset total_size {0} is smaller than the header")]
    BadTotalSize(u32),
    /// `wddm_version` is neither 1.3 nor 2.0.
    #[error("capset wddm_version {0:#06x} unknown")]
    BadWddmVersion(u32),
    /// `segment_desc_size` cannot hold a descriptor.
    #[error("segment_desc_size {0} is smaller than a segment descriptor")]
    DescTooSmall(u32),
    /// There are no segments.
    #[error("capset lists no segments")]
    NoSegments,
    /// A table lies (partly) outside the blob or inside the header.
    #[error(
        "{table} table [{offset:#x}, +{len:#x}) is outside the blob body (total_size {total:#x})"
    )]
    TableOutOfBounds {
        table: &'static str,
        offset: u32,
        len: u64,
        total: u32,
    },
    /// A header limit makes no sense.
    #[error("capset limit {0}")]
    BadLimit(&'static str),
    /// The VRAM BAR locator is inconsistent.
    #[error("VRAM BAR locator: {0}")]
    BadVramBar(&'static str),
    /// A segment descriptor is inconsistent.
    #[error("segment #{index}: {reason}")]
    BadSegment { index: usize, reason: String },
    /// `paging_buffer_segment_id` is neither 0 nor an aperture segment.
    #[error("paging_buffer_segment_id {0} is neither 0 nor an aperture segment")]
    BadPagingSegment(u32),
}

/// One validated segment with its slice of the bank table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The descriptor as the device sent it.
    pub desc: WddmGpuSegmentDesc,
    /// Its bank end offsets (`NbOfBanks` entries).
    pub banks: Vec<u64>,
}

impl Segment {
    /// `DXGK_SEGMENTFLAGS`.
    pub fn flags(&self) -> SegmentFlags {
        SegmentFlags::from_bits_retain(self.desc.flags)
    }

    /// Aperture (no storage) rather than memory segment.
    pub fn is_aperture(&self) -> bool {
        self.flags()
            .intersects(SegmentFlags::APERTURE | SegmentFlags::AGP)
    }

    /// "memory" or "aperture", as `DXGK_QUERYSEGMENTOUT3` classifies it.
    pub fn kind(&self) -> &'static str {
        if self.is_aperture() {
            "aperture"
        } else {
            "memory"
        }
    }

    /// Offset of the segment in the VRAM BAR, if it has one.
    pub fn bar_offset(&self) -> Option<u64> {
        (self.desc.bar_offset != WDDM_GPU_NO_BAR_OFFSET).then_some(self.desc.bar_offset)
    }

    /// A memory segment the guest CPU cannot reach (no BAR window): only TRANSFER packets
    /// read and write it.
    pub fn is_device_only(&self) -> bool {
        !self.is_aperture() && self.bar_offset().is_none()
    }

    /// GPU address of segment offset `offset` (`BaseAddress + offset`), as packets name it.
    pub fn gpu_address(&self, offset: u64) -> u64 {
        self.desc.base_address.wrapping_add(offset)
    }
}

/// A validated segment layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The blob header.
    pub header: WddmGpuCapsHeader,
    /// Segments in id order (segment `i + 1` at index `i`).
    pub segments: Vec<Segment>,
}

impl Layout {
    /// The segment with DXGK id `id`.
    pub fn segment(&self, id: u32) -> Option<&Segment> {
        self.segments.get(usize::try_from(id).ok()?.checked_sub(1)?)
    }

    /// The first CPU-visible memory segment: the VRAM a KMD maps through the BAR.
    pub fn cpu_visible_vram(&self) -> Option<&Segment> {
        self.segments
            .iter()
            .find(|s| !s.is_aperture() && s.flags().contains(SegmentFlags::CPU_VISIBLE))
    }

    /// Every memory (non-aperture) segment, CPU-visible or device-only, in id order.
    pub fn memory_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| !s.is_aperture())
    }

    /// Every segment with a window in the VRAM BAR, in id order.
    pub fn bar_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.bar_offset().is_some())
    }

    /// A segment id no segment has (one past the last).
    pub fn unused_segment_id(&self) -> u32 {
        u32::try_from(self.segments.len())
            .unwrap_or(u32::MAX - 1)
            .saturating_add(1)
    }
}

/// Parses and validates a capset blob (the GET_CAPSET payload, possibly padded past
/// `total_size`).
pub fn parse(blob: &[u8]) -> Result<Layout, CapsError> {
    let header_size = size_of::<WddmGpuCapsHeader>();
    let (header, _) =
        WddmGpuCapsHeader::read_from_prefix(blob).map_err(|_| CapsError::Truncated {
            need: header_size as u64,
            have: blob.len(),
        })?;
    if header.magic != WDDM_GPU_CAPS_MAGIC {
        return Err(CapsError::BadMagic(header.magic));
    }
    if header.version != WDDM_GPU_CAPSET_VERSION {
        return Err(CapsError::BadVersion(header.version));
    }
    let total = header.total_size;
    if (total as usize) < header_size {
        return Err(CapsError::BadTotalSize(total));
    }
    let body = blob.get(..total as usize).ok_or(CapsError::Truncated {
        need: u64::from(total),
        have: blob.len(),
    })?;
    if ![WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0].contains(&header.wddm_version) {
        return Err(CapsError::BadWddmVersion(header.wddm_version));
    }
    check_limits(&header)?;
    check_vram_bar(&header)?;

    if header.segment_count == 0 {
        return Err(CapsError::NoSegments);
    }
    let desc_size = header.segment_desc_size;
    if (desc_size as usize) < size_of::<WddmGpuSegmentDesc>() {
        return Err(CapsError::DescTooSmall(desc_size));
    }
    let seg_table = table(
        body,
        "segment",
        header.segments_offset,
        u64::from(header.segment_count) * u64::from(desc_size),
    )?;
    let bank_table = table(
        body,
        "bank",
        header.bank_table_offset,
        u64::from(header.bank_entry_count) * 8,
    )?;
    let bank_entries: Vec<u64> = bank_table
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();

    let segments = seg_table
        .chunks_exact(desc_size as usize)
        .enumerate()
        .map(|(index, raw)| parse_segment(index, raw, &header, &bank_entries))
        .collect::<Result<Vec<_>, _>>()?;
    check_bar_overlap(&segments)?;

    let paging = header.paging_buffer_segment_id;
    if paging != 0 {
        let ok = usize::try_from(paging)
            .ok()
            .and_then(|id| segments.get(id.checked_sub(1)?))
            .is_some_and(Segment::is_aperture);
        if !ok {
            return Err(CapsError::BadPagingSegment(paging));
        }
    }
    Ok(Layout { header, segments })
}

/// `len` bytes at `offset` of the body, which must not overlap the header.
fn table<'a>(
    body: &'a [u8],
    name: &'static str,
    offset: u32,
    len: u64,
) -> Result<&'a [u8], CapsError> {
    let err = CapsError::TableOutOfBounds {
        table: name,
        offset,
        len,
        total: body.len() as u32,
    };
    let start = offset as usize;
    if len > 0 && start < size_of::<WddmGpuCapsHeader>() {
        return Err(err);
    }
    let end = u64::from(offset)
        .checked_add(len)
        .filter(|end| *end <= body.len() as u64)
        .ok_or(err)?;
    Ok(&body[start..end as usize])
}

fn check_limits(h: &WddmGpuCapsHeader) -> Result<(), CapsError> {
    if h.max_frame_list_entries == 0 {
        return Err(CapsError::BadLimit("max_frame_list_entries is 0"));
    }
    if (h.max_packet_size as usize) < size_of::<WddmGpuPacketTransfer>() {
        return Err(CapsError::BadLimit(
            "max_packet_size cannot hold a TRANSFER packet",
        ));
    }
    if !h.max_packet_size.is_multiple_of(WDDM_GPU_PACKET_ALIGN) {
        return Err(CapsError::BadLimit(
            "max_packet_size is not a multiple of 8",
        ));
    }
    Ok(())
}

fn check_vram_bar(h: &WddmGpuCapsHeader) -> Result<(), CapsError> {
    let bar = &h.vram_bar;
    if ![WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM].contains(&bar.mode) {
        return Err(CapsError::BadVramBar("unknown mode"));
    }
    if bar.reserved != 0 {
        return Err(CapsError::BadVramBar("reserved field not zero"));
    }
    if bar.pci_function > 7 || bar.bar_index > 5 {
        return Err(CapsError::BadVramBar(
            "PCI function or BAR index out of range",
        ));
    }
    match bar.state {
        WDDM_GPU_BAR_STATE_NOT_MAPPED => Ok(()),
        WDDM_GPU_BAR_STATE_KNOWN
            if !bar
                .guest_physical_address
                .is_multiple_of(WDDM_GPU_PAGE_SIZE) =>
        {
            Err(CapsError::BadVramBar(
                "guest_physical_address not page aligned",
            ))
        }
        WDDM_GPU_BAR_STATE_KNOWN => Ok(()),
        _ => Err(CapsError::BadVramBar("unknown state")),
    }
}

fn parse_segment(
    index: usize,
    raw: &[u8],
    header: &WddmGpuCapsHeader,
    bank_entries: &[u64],
) -> Result<Segment, CapsError> {
    let bad = |reason: String| CapsError::BadSegment { index, reason };
    let (desc, _) = WddmGpuSegmentDesc::read_from_prefix(raw)
        .map_err(|_| bad("descriptor truncated".into()))?;
    if desc.id as usize != index + 1 {
        return Err(bad(format!(
            "id {} out of order (want {})",
            desc.id,
            index + 1
        )));
    }
    if desc.flags & SEGMENT_FLAGS_RESERVED_MASK != 0 {
        return Err(bad(format!("flags {:#x} set reserved bits", desc.flags)));
    }
    if header.wddm_version == WDDM_GPU_WDDM_1_3 && desc.flags & WDDM2_ONLY_FLAGS != 0 {
        return Err(bad(format!(
            "flags {:#x} set bits 11-21, reserved in the WDDM 1.3 DXGK_SEGMENTFLAGS",
            desc.flags
        )));
    }
    if header.wddm_version == WDDM_GPU_WDDM_2_0 && desc.bank_count != 0 {
        return Err(bad(format!(
            "{} banks on a WDDM 2.0 layout (DXGK_SEGMENTDESCRIPTOR4 has no banks)",
            desc.bank_count
        )));
    }
    if desc.size == 0 || desc.size % WDDM_GPU_PAGE_SIZE != 0 {
        return Err(bad(format!(
            "size {:#x} is not a non-zero page multiple",
            desc.size
        )));
    }
    if desc.base_address.checked_add(desc.size).is_none() {
        return Err(bad("base_address + size overflows".into()));
    }
    if desc.commit_limit > desc.size {
        return Err(bad(format!(
            "commit_limit {:#x} exceeds size {:#x}",
            desc.commit_limit, desc.size
        )));
    }
    let banks = segment_banks(&desc, bank_entries).map_err(bad)?;
    let segment = Segment { desc, banks };
    check_segment_bar(&segment, header).map_err(bad)?;
    Ok(segment)
}

fn segment_banks(desc: &WddmGpuSegmentDesc, entries: &[u64]) -> Result<Vec<u64>, String> {
    let banking = SegmentFlags::from_bits_retain(desc.flags).contains(SegmentFlags::USE_BANKING);
    if banking != (desc.bank_count != 0) {
        return Err(format!(
            "bank_count {} disagrees with the UseBanking flag",
            desc.bank_count
        ));
    }
    let start = desc.bank_table_index as usize;
    let banks = start
        .checked_add(desc.bank_count as usize)
        .and_then(|end| entries.get(start..end))
        .ok_or_else(|| {
            format!(
                "banks [{start}, +{}) outside the bank table ({} entries)",
                desc.bank_count,
                entries.len()
            )
        })?;
    let mut previous = 0;
    for &end in banks {
        if end <= previous || end > desc.size {
            return Err(format!(
                "bank end {end:#x} not increasing or past the segment size {:#x}",
                desc.size
            ));
        }
        previous = end;
    }
    Ok(banks.to_vec())
}

fn check_segment_bar(segment: &Segment, header: &WddmGpuCapsHeader) -> Result<(), String> {
    let desc = &segment.desc;
    let bar = &header.vram_bar;
    let Some(offset) = segment.bar_offset() else {
        if !segment.is_aperture() && segment.flags().contains(SegmentFlags::CPU_VISIBLE) {
            return Err("CpuVisible memory segment has no bar_offset".into());
        }
        return if desc.cpu_translated_address == 0 {
            Ok(())
        } else {
            Err("cpu_translated_address set on a segment outside the BAR".into())
        };
    };
    if offset
        .checked_add(desc.size)
        .is_none_or(|end| end > bar.size)
    {
        return Err(format!(
            "BAR window [{offset:#x}, +{:#x}) exceeds the BAR size {:#x}",
            desc.size, bar.size
        ));
    }
    let expected = if bar.state == WDDM_GPU_BAR_STATE_KNOWN {
        bar.guest_physical_address.wrapping_add(offset)
    } else {
        0
    };
    if desc.cpu_translated_address != expected {
        return Err(format!(
            "cpu_translated_address {:#x} != BAR address {:#x} + bar_offset {offset:#x}",
            desc.cpu_translated_address, bar.guest_physical_address
        ));
    }
    Ok(())
}

fn check_bar_overlap(segments: &[Segment]) -> Result<(), CapsError> {
    let windows: Vec<(usize, u64, u64)> = segments
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s.bar_offset()?, s.desc.size)))
        .collect();
    for (n, &(i, a, a_len)) in windows.iter().enumerate() {
        for &(j, b, b_len) in &windows[n + 1..] {
            if a < b + b_len && b < a + a_len {
                return Err(CapsError::BadSegment {
                    index: j,
                    reason: format!("BAR window overlaps segment #{i}"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wddm_gpu_abi::caps::{WddmGpuVramBar, WDDM_GPU_CAPSET_VERSION};
    use zerocopy::IntoBytes;

    pub(crate) const MIB: u64 = 1 << 20;
    pub(crate) const BAR: u64 = 0xfe00_0000_0000;

    /// The backend's default layout: 256 MiB CPU-visible VRAM, 512 MiB aperture.
    pub(crate) fn default_blob() -> Vec<u8> {
        build(&[vram_desc(), aperture_desc()], &[])
    }

    pub(crate) fn vram_desc() -> WddmGpuSegmentDesc {
        WddmGpuSegmentDesc {
            id: 1,
            flags: SegmentFlags::CPU_VISIBLE.bits(),
            base_address: 0,
            size: 256 * MIB,
            commit_limit: 256 * MIB,
            bar_offset: 0,
            cpu_translated_address: BAR,
            ..Default::default()
        }
    }

    pub(crate) fn aperture_desc() -> WddmGpuSegmentDesc {
        WddmGpuSegmentDesc {
            id: 2,
            flags: (SegmentFlags::APERTURE | SegmentFlags::CACHE_COHERENT).bits(),
            base_address: 256 * MIB,
            size: 512 * MIB,
            commit_limit: 512 * MIB,
            bar_offset: WDDM_GPU_NO_BAR_OFFSET,
            ..Default::default()
        }
    }

    /// Device-only VRAM (id 2, 512 MiB at GPU address 4 GiB, no BAR; `flags`) and the
    /// default aperture as id 3: what follows [`vram_desc`] in the three-segment layouts.
    pub(crate) fn device_only_then_aperture(flags: u32) -> [WddmGpuSegmentDesc; 2] {
        let local = WddmGpuSegmentDesc {
            id: 2,
            flags,
            base_address: 0x1_0000_0000,
            size: 512 * MIB,
            commit_limit: 512 * MIB,
            bar_offset: WDDM_GPU_NO_BAR_OFFSET,
            ..Default::default()
        };
        let mut aperture = aperture_desc();
        aperture.id = 3;
        [local, aperture]
    }

    /// A WDDM 1.3 blob.
    pub(crate) fn build(segs: &[WddmGpuSegmentDesc], banks: &[u64]) -> Vec<u8> {
        build_version(WDDM_GPU_WDDM_1_3, segs, banks)
    }

    /// A blob of `wddm_version`.
    pub(crate) fn build_version(
        wddm_version: u32,
        segs: &[WddmGpuSegmentDesc],
        banks: &[u64],
    ) -> Vec<u8> {
        let header_size = size_of::<WddmGpuCapsHeader>();
        let desc_size = size_of::<WddmGpuSegmentDesc>();
        let bank_offset = header_size + std::mem::size_of_val(segs);
        let total = bank_offset + banks.len() * 8;
        let header = WddmGpuCapsHeader {
            magic: WDDM_GPU_CAPS_MAGIC,
            version: WDDM_GPU_CAPSET_VERSION,
            total_size: total as u32,
            wddm_version,
            segment_count: segs.len() as u32,
            segment_desc_size: desc_size as u32,
            segments_offset: header_size as u32,
            bank_table_offset: bank_offset as u32,
            bank_entry_count: banks.len() as u32,
            paging_buffer_segment_id: 0,
            paging_buffer_size: 64 << 10,
            paging_buffer_private_data_size: 0,
            max_frame_list_entries: 262_144,
            max_packet_size: 4096,
            vram_bar: WddmGpuVramBar {
                mode: WDDM_GPU_BAR_MODE_IVSHMEM,
                state: WDDM_GPU_BAR_STATE_KNOWN,
                generation: 1,
                pci_function: 1,
                bar_index: 2,
                reserved: 0,
                guest_physical_address: BAR,
                size: 256 * MIB,
            },
        };
        let mut blob = header.as_bytes().to_vec();
        for s in segs {
            blob.extend_from_slice(s.as_bytes());
        }
        for b in banks {
            blob.extend_from_slice(&b.to_le_bytes());
        }
        blob
    }

    fn header_of(blob: &mut [u8]) -> WddmGpuCapsHeader {
        WddmGpuCapsHeader::read_from_prefix(blob).unwrap().0
    }

    fn with_header(mut blob: Vec<u8>, edit: impl FnOnce(&mut WddmGpuCapsHeader)) -> Vec<u8> {
        let mut h = header_of(&mut blob);
        edit(&mut h);
        blob[..size_of::<WddmGpuCapsHeader>()].copy_from_slice(h.as_bytes());
        blob
    }

    #[test]
    fn parses_default_layout() {
        let layout = parse(&default_blob()).unwrap();
        assert_eq!(layout.segments.len(), 2);
        let vram = layout.cpu_visible_vram().unwrap();
        assert_eq!(vram.desc.id, 1);
        assert_eq!(vram.kind(), "memory");
        assert_eq!(vram.bar_offset(), Some(0));
        let aperture = layout.segment(2).unwrap();
        assert_eq!(aperture.kind(), "aperture");
        assert_eq!(aperture.bar_offset(), None);
        assert!(layout.segment(0).is_none() && layout.segment(3).is_none());
    }

    #[test]
    fn accepts_padding_after_total_size() {
        let mut blob = default_blob();
        blob.resize(blob.len() + 100, 0xAA);
        assert!(parse(&blob).is_ok());
    }

    #[test]
    fn parses_banks() {
        let mut vram = vram_desc();
        vram.flags |= SegmentFlags::USE_BANKING.bits();
        vram.bank_count = 2;
        vram.bank_table_index = 1;
        let blob = build(&[vram, aperture_desc()], &[7, 128 * MIB, 256 * MIB]);
        let layout = parse(&blob).unwrap();
        assert_eq!(layout.segments[0].banks, vec![128 * MIB, 256 * MIB]);
    }

    #[test]
    fn rejects_truncated_blobs() {
        let blob = default_blob();
        for len in [0, 10, size_of::<WddmGpuCapsHeader>() - 1, blob.len() - 1] {
            assert!(
                matches!(parse(&blob[..len]), Err(CapsError::Truncated { .. })),
                "length {len}"
            );
        }
    }

    #[test]
    fn rejects_bad_header_fields() {
        let cases: Vec<(Vec<u8>, CapsError)> = vec![
            (
                with_header(default_blob(), |h| h.magic = 0),
                CapsError::BadMagic(0),
            ),
            (
                with_header(default_blob(), |h| h.version = 2),
                CapsError::BadVersion(2),
            ),
            (
                with_header(default_blob(), |h| h.total_size = 8),
                CapsError::BadTotalSize(8),
            ),
            (
                with_header(default_blob(), |h| h.wddm_version = 0x0300),
                CapsError::BadWddmVersion(0x0300),
            ),
            (
                with_header(default_blob(), |h| h.segment_desc_size = 8),
                CapsError::DescTooSmall(8),
            ),
            (
                with_header(default_blob(), |h| h.segment_count = 0),
                CapsError::NoSegments,
            ),
        ];
        for (blob, want) in cases {
            assert_eq!(parse(&blob), Err(want));
        }
    }

    #[test]
    fn rejects_tables_outside_the_blob() {
        let big_count = with_header(default_blob(), |h| h.segment_count = 3);
        assert!(matches!(
            parse(&big_count),
            Err(CapsError::TableOutOfBounds {
                table: "segment",
                ..
            })
        ));
        let huge_count = with_header(default_blob(), |h| h.segment_count = u32::MAX);
        assert!(matches!(
            parse(&huge_count),
            Err(CapsError::TableOutOfBounds { .. })
        ));
        let wrapping = with_header(default_blob(), |h| h.segments_offset = u32::MAX - 8);
        assert!(matches!(
            parse(&wrapping),
            Err(CapsError::TableOutOfBounds { .. })
        ));
        let in_header = with_header(default_blob(), |h| h.segments_offset = 8);
        assert!(matches!(
            parse(&in_header),
            Err(CapsError::TableOutOfBounds { .. })
        ));
        let banks = with_header(default_blob(), |h| h.bank_entry_count = 1);
        assert!(matches!(
            parse(&banks),
            Err(CapsError::TableOutOfBounds { table: "bank", .. })
        ));
    }

    #[test]
    fn rejects_inconsistent_segments() {
        let mut bad_id = vram_desc();
        bad_id.id = 2;
        let mut reserved = vram_desc();
        reserved.flags |= 1 << 31;
        let mut odd_size = vram_desc();
        odd_size.size = 4095;
        let mut commit = vram_desc();
        commit.commit_limit = commit.size + 4096;
        let mut past_bar = vram_desc();
        past_bar.bar_offset = 4096;
        let mut no_bar = vram_desc();
        no_bar.bar_offset = WDDM_GPU_NO_BAR_OFFSET;
        let mut cpu_addr = vram_desc();
        cpu_addr.cpu_translated_address = BAR + 4096;
        let mut banks_no_flag = vram_desc();
        banks_no_flag.bank_count = 1;
        for desc in [
            bad_id,
            reserved,
            odd_size,
            commit,
            past_bar,
            no_bar,
            cpu_addr,
            banks_no_flag,
        ] {
            let blob = build(&[desc, aperture_desc()], &[256 * MIB]);
            assert!(
                matches!(parse(&blob), Err(CapsError::BadSegment { index: 0, .. })),
                "{desc:?} accepted: {:?}",
                parse(&blob)
            );
        }
    }

    #[test]
    fn flags_and_banks_follow_the_wddm_version() {
        // Bits 11-21 exist only from WDDM 2.0 on.
        let mut vram = vram_desc();
        vram.flags |= SegmentFlags::USE_64KB_PAGES.bits();
        let wddm2 = build_version(WDDM_GPU_WDDM_2_0, &[vram, aperture_desc()], &[]);
        assert!(parse(&wddm2).is_ok());
        let wddm13 = build(&[vram, aperture_desc()], &[]);
        assert!(matches!(
            parse(&wddm13),
            Err(CapsError::BadSegment { index: 0, .. })
        ));
        // DXGK_SEGMENTDESCRIPTOR4 has no banks.
        let mut banked = vram_desc();
        banked.flags |= SegmentFlags::USE_BANKING.bits();
        banked.bank_count = 2;
        let banks = [128 * MIB, 256 * MIB];
        assert!(parse(&build(&[banked, aperture_desc()], &banks)).is_ok());
        let wddm2 = build_version(WDDM_GPU_WDDM_2_0, &[banked, aperture_desc()], &banks);
        assert!(matches!(
            parse(&wddm2),
            Err(CapsError::BadSegment { index: 0, .. })
        ));
    }

    #[test]
    fn device_only_segments_and_gpu_addresses() {
        let [local, aperture] = device_only_then_aperture(0);
        let layout = parse(&build(&[vram_desc(), local, aperture], &[])).unwrap();
        let memory: Vec<u32> = layout.memory_segments().map(|s| s.desc.id).collect();
        assert_eq!(memory, vec![1, 2]);
        let bar: Vec<u32> = layout.bar_segments().map(|s| s.desc.id).collect();
        assert_eq!(bar, vec![1]);
        let local = layout.segment(2).unwrap();
        assert!(local.is_device_only() && !layout.segment(1).unwrap().is_device_only());
        assert!(!layout.segment(3).unwrap().is_device_only());
        assert_eq!(local.gpu_address(0x10), 0x1_0000_0010);
        assert_eq!(layout.unused_segment_id(), 4);
        // A device-only segment with a CPU address is refused.
        let mut cpu = layout.segment(2).unwrap().desc;
        cpu.cpu_translated_address = BAR;
        assert!(parse(&build(&[vram_desc(), cpu, aperture], &[])).is_err());
    }

    #[test]
    fn rejects_bad_banks() {
        let mut vram = vram_desc();
        vram.flags |= SegmentFlags::USE_BANKING.bits();
        vram.bank_count = 2;
        for banks in [[128 * MIB, 64 * MIB], [128 * MIB, 512 * MIB]] {
            let blob = build(&[vram, aperture_desc()], &banks);
            assert!(matches!(parse(&blob), Err(CapsError::BadSegment { .. })));
        }
        vram.bank_table_index = 1;
        let blob = build(&[vram, aperture_desc()], &[MIB, 2 * MIB]);
        assert!(matches!(parse(&blob), Err(CapsError::BadSegment { .. })));
    }

    #[test]
    fn rejects_overlapping_bar_windows_and_bad_paging_segment() {
        let mut second = vram_desc();
        second.id = 2;
        second.size = 128 * MIB;
        second.commit_limit = 0;
        second.bar_offset = 64 * MIB;
        second.cpu_translated_address = BAR + 64 * MIB;
        let mut first = vram_desc();
        first.size = 128 * MIB;
        first.commit_limit = 128 * MIB;
        let blob = build(&[first, second], &[]);
        assert!(matches!(
            parse(&blob),
            Err(CapsError::BadSegment { index: 1, .. })
        ));

        let paging_vram = with_header(default_blob(), |h| h.paging_buffer_segment_id = 1);
        assert_eq!(parse(&paging_vram), Err(CapsError::BadPagingSegment(1)));
        let paging_missing = with_header(default_blob(), |h| h.paging_buffer_segment_id = 3);
        assert_eq!(parse(&paging_missing), Err(CapsError::BadPagingSegment(3)));
        let paging_aperture = with_header(default_blob(), |h| h.paging_buffer_segment_id = 2);
        assert!(parse(&paging_aperture).is_ok());
    }

    #[test]
    fn rejects_bad_vram_bar() {
        let unknown_mode = with_header(default_blob(), |h| h.vram_bar.mode = 9);
        assert!(matches!(
            parse(&unknown_mode),
            Err(CapsError::BadVramBar(_))
        ));
        let unknown_state = with_header(default_blob(), |h| h.vram_bar.state = 7);
        assert!(matches!(
            parse(&unknown_state),
            Err(CapsError::BadVramBar(_))
        ));
        // Not mapped: the CPU address must then be 0, which the default blob's is not.
        let not_mapped = with_header(default_blob(), |h| {
            h.vram_bar.state = WDDM_GPU_BAR_STATE_NOT_MAPPED
        });
        assert!(matches!(
            parse(&not_mapped),
            Err(CapsError::BadSegment { .. })
        ));
        let small_bar = with_header(default_blob(), |h| h.vram_bar.size = MIB);
        assert!(matches!(
            parse(&small_bar),
            Err(CapsError::BadSegment { .. })
        ));
    }
}
