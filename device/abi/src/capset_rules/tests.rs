//! The validator's own properties; one blob per rule is in the capset corpus test, which runs
//! the C library over the same blobs.

use zerocopy::IntoBytes;

use super::*;

const MIB: u64 = 1 << 20;
const BAR_ADDRESS: u64 = 0xfe00_0000;

/// CPU-visible VRAM (banked) in the BAR and an aperture holding the paging buffer.
fn valid_blob() -> Vec<u8> {
    let segments = [
        WddmGpuSegmentDesc {
            id: 1,
            flags: (SegmentFlags::CPU_VISIBLE | SegmentFlags::USE_BANKING).bits(),
            size: 16 * MIB,
            commit_limit: 16 * MIB,
            bar_offset: 0,
            cpu_translated_address: BAR_ADDRESS,
            bank_count: 2,
            ..Default::default()
        },
        WddmGpuSegmentDesc {
            id: 2,
            flags: SegmentFlags::APERTURE.bits(),
            size: 4 * MIB,
            commit_limit: 4 * MIB,
            bar_offset: WDDM_GPU_NO_BAR_OFFSET,
            ..Default::default()
        },
    ];
    let banks = [8 * MIB, 16 * MIB];
    let bank_table_offset = HEADER_SIZE + size_of_val(&segments);
    let header = WddmGpuCapsHeader {
        magic: WDDM_GPU_CAPS_MAGIC,
        version: WDDM_GPU_CAPSET_VERSION,
        total_size: u32::try_from(bank_table_offset + size_of_val(&banks)).unwrap(),
        wddm_version: WDDM_GPU_WDDM_1_3,
        segment_count: 2,
        segment_desc_size: u32::try_from(size_of::<WddmGpuSegmentDesc>()).unwrap(),
        segments_offset: u32::try_from(HEADER_SIZE).unwrap(),
        bank_table_offset: u32::try_from(bank_table_offset).unwrap(),
        bank_entry_count: 2,
        paging_buffer_segment_id: 2,
        paging_buffer_size: 64 << 10,
        max_frame_list_entries: 1,
        max_packet_size: 4096,
        vram_bar: WddmGpuVramBar {
            mode: WDDM_GPU_BAR_MODE_IVSHMEM,
            state: WDDM_GPU_BAR_STATE_KNOWN,
            guest_physical_address: BAR_ADDRESS,
            size: 16 * MIB,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut blob = header.as_bytes().to_vec();
    blob.extend_from_slice(segments.as_bytes());
    blob.extend_from_slice(banks.as_bytes());
    blob
}

#[test]
fn a_valid_blob_reads_back_through_the_checked_view() {
    let blob = valid_blob();
    let capset = validate_capset(&blob).unwrap();
    assert_eq!(capset.header().segment_count, 2);
    let ids: Vec<u32> = capset.segments().map(|s| s.desc().id).collect();
    assert_eq!(ids, [1, 2]);
    let banked = capset.segment(1).unwrap();
    assert_eq!(banked.bank_ends().collect::<Vec<_>>(), [8 * MIB, 16 * MIB]);
    assert_eq!(capset.segment(2).unwrap().bank_ends().count(), 0);
    assert!(capset.segment(0).is_none() && capset.segment(3).is_none());
}

/// Every prefix and every single-byte change of a valid blob: an answer, never a panic (a small
/// xorshift picks the byte values, so the run is the same every time).
#[test]
fn any_input_gets_an_answer() {
    let blob = valid_blob();
    for len in 0..=blob.len() {
        let _ = validate_capset(&blob[..len]);
    }
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    for position in 0..blob.len() {
        for _ in 0..8 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut broken = blob.clone();
            broken[position] = state.to_le_bytes()[0];
            if let Err(err) = validate_capset(&broken) {
                assert!(CapsetError::RULES.contains(&err.rule()), "{err:?}");
                assert!(!err.to_string().is_empty());
            }
        }
    }
}

#[test]
fn rule_names_are_unique() {
    for (i, name) in CapsetError::RULES.iter().enumerate() {
        assert!(!CapsetError::RULES[i + 1..].contains(name), "{name}");
    }
}

#[test]
fn the_exported_constants_say_what_they_are_built_from() {
    assert_eq!(WDDM_GPU_CAPS_MAGIC, u32::from_le_bytes(*b"WDGC"));
    let wddm2_members = SegmentFlags::all().bits() & !((1 << 11) - 1);
    assert_eq!(SEGMENT_FLAGS_WDDM2_ONLY_MASK, wddm2_members);
    assert_eq!(max_segments(0x0300), None);
    assert_eq!(
        segment_page_size(SegmentFlags::USE_64KB_PAGES.bits()),
        WDDM_GPU_LARGE_PAGE_SIZE
    );
}

#[test]
fn messages_name_the_segment_field_and_rule() {
    let err = CapsetError::BadSegment {
        index: 1,
        rule: SegmentRule::CommitLimitAboveSize {
            commit_limit: 0x2000,
            size: 0x1000,
        },
    };
    assert_eq!(
        err.to_string(),
        "segment #1: commit_limit 0x2000 exceeds size 0x1000"
    );
    assert_eq!(err.rule(), "segment.commit_limit_above_size");
}
