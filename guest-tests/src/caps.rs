//! The segment-layout capability set (`wddm_gpu_abi::caps`) as the guest driver keeps it.
//!
//! The blob comes from the device, so nothing in it is trusted: [`parse`] runs the ABI crate's
//! validator (`wddm_gpu_abi::capset_rules`, the one set of capset rules the backend and the C
//! library follow too) and only then copies the checked view into owned [`Layout`] and
//! [`Segment`]s the scenarios query.

use wddm_gpu_abi::caps::{WddmGpuCapsHeader, WddmGpuSegmentDesc, WDDM_GPU_NO_BAR_OFFSET};
/// Why a capset blob was refused: the ABI validator's error.
pub use wddm_gpu_abi::capset_rules::CapsetError as CapsError;
use wddm_gpu_abi::capset_rules::{self, validate_capset};
use wddm_gpu_abi::segment_flags::SegmentFlags;

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
        capset_rules::is_aperture(self.desc.flags)
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

/// Validates a capset blob (the GET_CAPSET payload, possibly padded past `total_size`) and
/// keeps what it describes.
pub fn parse(blob: &[u8]) -> Result<Layout, CapsError> {
    let capset = validate_capset(blob)?;
    let segments = capset
        .segments()
        .map(|segment| Segment {
            desc: *segment.desc(),
            banks: segment.bank_ends().collect(),
        })
        .collect();
    Ok(Layout {
        header: *capset.header(),
        segments,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::mem::size_of;

    use wddm_gpu_abi::caps::{
        WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_STATE_KNOWN,
        WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_CAPSET_VERSION, WDDM_GPU_CAPS_MAGIC,
        WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0,
    };
    use zerocopy::{FromBytes, IntoBytes};

    use super::*;

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
            total_size: u32::try_from(total).unwrap(),
            wddm_version,
            segment_count: u32::try_from(segs.len()).unwrap(),
            segment_desc_size: u32::try_from(desc_size).unwrap(),
            segments_offset: u32::try_from(header_size).unwrap(),
            bank_table_offset: u32::try_from(bank_offset).unwrap(),
            bank_entry_count: u32::try_from(banks.len()).unwrap(),
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
