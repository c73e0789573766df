//! Layout files: `parse_layout` on arbitrary text (the input, lossily read as UTF-8), then
//! `validate` against several VRAM BAR sizes, then what the backend and `check-layout` build
//! from a valid layout (the capability-set blob, the text report).
//!
//! Checked on every layout `validate` accepts, against what `layout_rules` promises: segment
//! count and ids, every flag rule, sizes and commit limits, CPU-visible segments inside the BAR
//! without overlap, device-only VRAM after the BAR without overlap and within the cap, apertures
//! within theirs, bank tables, the paging-buffer fields; every segment resolves; and a layout
//! valid for a BAR stays valid for a larger one.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu::rules::{
    validate, BAR_PACK_ALIGN, MAX_APERTURE_TOTAL, MAX_BANKS, MAX_DEVICE_ONLY_VRAM,
    MAX_SEGMENTS_WDDM1, MAX_SEGMENTS_WDDM2,
};
use vhost_user_wddm_gpu::LayoutReport;
use vhost_user_wddm_gpu::{build_capset, MAX_CAPSET_SIZE};
use vhost_user_wddm_gpu::{parse_layout, LayoutSpec};
use vhost_user_wddm_gpu::{SegmentKind, SegmentLayout};
use wddm_gpu_abi::caps::{WddmGpuCapsHeader, WddmGpuVramBar, WDDM_GPU_WDDM_2_0};
use wddm_gpu_abi::segment_flags::{
    SegmentFlags as F, SEGMENT_FLAGS_RESERVED_MASK,
    SEGMENT_FLAGS_WDDM2_ONLY_MASK as WDDM2_ONLY_FLAGS,
};
use zerocopy::FromBytes;

/// BAR sizes every layout is validated against, smallest first.
const BAR_SIZES: [u64; 5] = [1 << 20, 16 << 20, 256 << 20, 4 << 30, 1 << 40];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(spec) = parse_layout(&text) else {
        return;
    };
    let mut valid_before = false;
    for bar_size in BAR_SIZES {
        match validate(&spec, bar_size) {
            Ok(layout) => {
                check(&spec, &layout, bar_size);
                valid_before = true;
            }
            Err(violations) => {
                assert!(!violations.is_empty());
                assert!(
                    !valid_before,
                    "valid for a smaller BAR, refused for {bar_size:#x}: {violations:?}"
                );
                for violation in &violations {
                    // Every violation renders (the messages check-layout prints).
                    let _ = violation.to_string();
                }
            }
        }
    }
});

fn check(spec: &LayoutSpec, layout: &SegmentLayout, bar_size: u64) {
    let wddm2 = spec.wddm_version == WDDM_GPU_WDDM_2_0;
    let count = layout.segments.len();
    assert_eq!(count, spec.segments.len());
    assert!(count >= 1);
    assert!(
        count
            <= if wddm2 {
                MAX_SEGMENTS_WDDM2
            } else {
                MAX_SEGMENTS_WDDM1
            }
    );
    assert_eq!(layout.wddm_version, spec.wddm_version);
    assert_eq!(
        u64::from(layout.paging_buffer_size),
        spec.paging_buffer_size
    );
    assert_ne!(layout.paging_buffer_size, 0);
    assert_eq!(
        u64::from(layout.paging_buffer_private_data_size),
        spec.paging_buffer_private_data_size
    );
    assert_eq!(
        layout.paging_buffer_segment_id,
        spec.paging_buffer_segment_id
    );
    if layout.paging_buffer_segment_id != 0 {
        let paging = layout
            .segment(layout.paging_buffer_segment_id)
            .expect("the paging-buffer segment exists");
        assert!(matches!(paging.kind, SegmentKind::Aperture));
    }
    let apertures = layout
        .segments
        .iter()
        .filter(|s| matches!(s.kind, SegmentKind::Aperture))
        .count();
    if wddm2 {
        assert_eq!(apertures, 1);
    }

    let mut bar_ranges = Vec::new();
    let mut device_ranges = Vec::new();
    for (index, (segment, given)) in layout.segments.iter().zip(&spec.segments).enumerate() {
        assert_eq!(segment.id as usize, index + 1);
        let flags = segment.flags;
        assert_eq!(flags.bits(), given.flags);
        assert_eq!(given.flags & SEGMENT_FLAGS_RESERVED_MASK, 0);
        if !wddm2 {
            assert_eq!(given.flags & WDDM2_ONLY_FLAGS, 0);
        }
        assert!(!flags.contains(F::RESERVED_SYS_MEM));
        assert!(!flags.contains(F::AGP));
        let aperture = flags.contains(F::APERTURE);
        assert!(!flags.contains(F::CACHE_COHERENT) || aperture);
        assert!(!(aperture && flags.contains(F::POPULATED_FROM_SYSTEM_MEMORY)));
        assert!(!(aperture && flags.contains(F::CPU_VISIBLE)));
        let (standby, hibernate, partial) = (
            flags.contains(F::PRESERVED_DURING_STANDBY),
            flags.contains(F::PRESERVED_DURING_HIBERNATE),
            flags.contains(F::PARTIALLY_PRESERVED_DURING_HIBERNATE),
        );
        assert!(!((hibernate || partial) && !standby) && !(hibernate && partial));
        assert!(!(flags.contains(F::SUPPORTS_CPU_HOST_APERTURE) && flags.contains(F::CPU_VISIBLE)));
        assert!(
            !flags.contains(F::SUPPORTS_CACHED_CPU_HOST_APERTURE)
                || flags.contains(F::SUPPORTS_CPU_HOST_APERTURE)
        );

        let unit = if flags.contains(F::USE_64KB_PAGES) {
            64 << 10
        } else {
            4 << 10
        };
        assert_eq!(segment.size, given.size);
        assert_eq!(segment.base_address, given.base_address);
        assert!(segment.size > 0 && segment.size % unit == 0);
        assert!(segment.base_address.checked_add(segment.size).is_some());
        assert_eq!(
            segment.commit_limit,
            given.commit_limit.unwrap_or(given.size)
        );
        if aperture {
            assert!(segment.commit_limit <= segment.size);
        } else {
            assert_eq!(segment.commit_limit, segment.size);
        }
        assert!(
            !flags.contains(F::PARTIALLY_PRESERVED_DURING_HIBERNATE)
                || segment.system_memory_end_address != 0
        );
        assert!(segment.system_memory_end_address <= segment.size);

        // Banks: only with UseBanking (never on WDDM 2.0), strictly increasing page
        // multiples inside the segment, the last one its end.
        if flags.contains(F::USE_BANKING) {
            assert!(!wddm2);
            let banks = &segment.banks;
            assert!(!banks.is_empty() && banks.len() <= MAX_BANKS);
            assert_eq!(*banks.last().unwrap(), segment.size);
            assert!(banks[0] > 0);
            assert!(banks.windows(2).all(|w| w[0] < w[1]));
            assert!(banks.iter().all(|b| b % unit == 0));
        } else {
            assert!(segment.banks.is_empty());
            assert!(given.banks.as_ref().is_none_or(|b| b.is_empty()));
        }

        match segment.kind {
            SegmentKind::Aperture => {
                assert!(aperture);
                assert!(given.bar_offset.is_none());
            }
            SegmentKind::Memory {
                vram_offset,
                bar_offset: Some(bar_offset),
            } => {
                assert!(!aperture && flags.contains(F::CPU_VISIBLE));
                assert_eq!(vram_offset, bar_offset);
                if let Some(given) = given.bar_offset {
                    assert_eq!(bar_offset, given);
                }
                assert_eq!(bar_offset % unit, 0);
                let end = bar_offset + segment.size;
                assert!(
                    end <= bar_size,
                    "segment {} ends at {end:#x}, past the BAR",
                    segment.id
                );
                bar_ranges.push((segment.id, bar_offset, end));
            }
            SegmentKind::Memory {
                vram_offset,
                bar_offset: None,
            } => {
                assert!(!aperture && !flags.contains(F::CPU_VISIBLE));
                assert!(given.bar_offset.is_none());
                assert!(vram_offset >= bar_size);
                assert_eq!((vram_offset - bar_size) % BAR_PACK_ALIGN, 0);
                let end = vram_offset
                    .checked_add(segment.size)
                    .expect("VRAM offsets fit");
                device_ranges.push((segment.id, vram_offset, end));
            }
        }

        // The whole segment resolves, and nothing past it.
        let resolved = layout.resolve(segment.id, segment.base_address, segment.size);
        assert!(
            resolved.is_ok(),
            "segment {} does not resolve: {resolved:?}",
            segment.id
        );
        assert!(layout
            .resolve(segment.id, segment.base_address + segment.size, 1)
            .is_err());
    }
    for ranges in [&bar_ranges, &device_ranges] {
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                assert!(
                    a.2 <= b.1 || b.2 <= a.1,
                    "segments {} and {} overlap",
                    a.0,
                    b.0
                );
            }
        }
    }
    assert!(layout.device_only_vram(bar_size) <= MAX_DEVICE_ONLY_VRAM);
    // What the GART allocates at start (8 bytes per aperture page) stays bounded.
    let aperture_bytes: u64 = layout
        .segments
        .iter()
        .filter(|s| matches!(s.kind, SegmentKind::Aperture))
        .fold(0, |total, s| total.saturating_add(s.size));
    assert!(
        aperture_bytes <= MAX_APERTURE_TOTAL,
        "{aperture_bytes:#x} bytes of apertures"
    );

    // What the device reports: the capset blob and the check-layout report.
    let blob = build_capset(layout, &WddmGpuVramBar::default());
    assert!(blob.len() <= MAX_CAPSET_SIZE as usize);
    let (header, _) = WddmGpuCapsHeader::read_from_prefix(&blob).expect("capset header");
    assert_eq!(header.total_size as usize, blob.len());
    assert_eq!(header.segment_count as usize, count);
    assert_eq!(
        header.bank_entry_count as usize,
        layout.segments.iter().map(|s| s.banks.len()).sum::<usize>()
    );
    let report = LayoutReport::new(layout, bar_size);
    assert!(!report.text().is_empty());
}
