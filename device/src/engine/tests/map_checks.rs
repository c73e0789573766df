//! A map or unmap request is checked whole before any table entry changes.

use wddm_gpu_abi::build::{map_aperture, unmap_aperture};
use wddm_gpu_abi::packet::{
    WddmGpuPacketMapAperture2, WddmGpuPacketUnmapAperture, WDDM_GPU_ADL_FLAG_CONTIGUOUS,
    WDDM_GPU_MAP_FLAG_CACHE_COHERENT, WDDM_GPU_MAX_FRAME_LIST_ENTRIES,
};
use wddm_gpu_abi::submit::SubmitStatus;

use super::refusals::assert_refused;
use crate::layout::SegmentKind;
use crate::testkit::engine_rig::{
    data_frame, data_frames, Rig, APERTURE_PAGES, DATA, PAGE, RAM_SIZE, VRAM_GPA,
};
use crate::testkit::layouts::NON_COHERENT;
use crate::testkit::packets::{map2_contiguous, map2_pages, packet_bytes, APERTURE_SEGMENT};

#[test]
fn a_map_request_is_checked_whole_before_any_entry_changes() {
    let mut rig = Rig::new("map-checks");
    // Something to preserve: pages 0..6 and the last two pages mapped.
    let old = rig.list(0, &data_frames(&[1, 2, 3, 4, 5, 6]));
    rig.ok(&[
        packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 6, old, 6, 0)),
        packet_bytes(map2_contiguous(APERTURE_PAGES - 2, 2, data_frame(50), 2, 0)),
    ]
    .concat());
    let good: Vec<u64> = data_frames(&[100, 101, 102, 103, 104, 105, 106, 107]);
    let with_fifth = |rig: &Rig, frame: u64| {
        let mut list = good.clone();
        list[4] = frame;
        rig.list(1, &list)
    };
    let beyond_ram = RAM_SIZE / PAGE + 3;
    let in_vram = VRAM_GPA / PAGE + 2;
    for (name, fifth, expected) in [
        (
            "5th frame beyond RAM",
            beyond_ram,
            SubmitStatus::FrameNotInRam,
        ),
        ("5th frame in VRAM", in_vram, SubmitStatus::FrameInVram),
        ("5th frame overflows", u64::MAX, SubmitStatus::FrameNotInRam),
    ] {
        let list = with_fifth(&rig, fifth);
        let bad = packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 2, 8, list, 8, 0));
        assert_refused(&mut rig, name, bad, expected);
    }
    // The list's own 5th entry is bad, but only entries [offset, offset + count) matter.
    let list = with_fifth(&rig, in_vram);
    rig.ok(&[
        packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 10, 3, list, 8, 5)),
        packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 20, 4, list, 8, 0)),
    ]
    .concat());
    assert_eq!(
        rig.entries(10..13),
        [
            Some(data_frame(105)),
            Some(data_frame(106)),
            Some(data_frame(107))
        ]
    );
    let list = with_fifth(&rig, in_vram);
    assert_refused(
        &mut rig,
        "ADL page array 5th in VRAM",
        packet_bytes(map2_pages(2, 8, list, 8, 0)),
        SubmitStatus::FrameInVram,
    );
    let list = rig.list(1, &good);
    let mut flagged = packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 1, list, 8, 0));
    flagged[2] = 1; // header flags
    let too_many = WDDM_GPU_MAX_FRAME_LIST_ENTRIES + 1;
    let map2 = map2_contiguous(0, 1, data_frame(0), 1, 0);
    // (what is wrong, the packet, the status it is refused with)
    for (name, bad, expected) in [
        (
            "range past the aperture end",
            packet_bytes(map_aperture(
                APERTURE_SEGMENT,
                0,
                APERTURE_PAGES - 3,
                8,
                list,
                8,
                0,
            )),
            SubmitStatus::SegmentRange,
        ),
        (
            "first page overflows",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, u64::MAX, 2, list, 8, 0)),
            SubmitStatus::SegmentRange,
        ),
        (
            "ADL past the aperture end",
            packet_bytes(map2_contiguous(APERTURE_PAGES - 1, 2, data_frame(10), 2, 0)),
            SubmitStatus::SegmentRange,
        ),
        (
            "unknown map flag",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 2, 0, 1, list, 8, 0)),
            SubmitStatus::ReservedField,
        ),
        ("header flags", flagged, SubmitStatus::ReservedField),
        (
            "offset + count > frame_count",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 6, list, 8, 3)),
            SubmitStatus::BadFrameList,
        ),
        (
            "offset alone > frame_count",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 0, list, 8, 9)),
            SubmitStatus::BadFrameList,
        ),
        (
            "frame_count above the maximum",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 1, list, too_many, 0)),
            SubmitStatus::BadFrameList,
        ),
        (
            "list outside RAM",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 2, RAM_SIZE - 8, 2, 0)),
            SubmitStatus::BadFrameList,
        ),
        (
            "list in VRAM",
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 1, VRAM_GPA, 1, 0)),
            SubmitStatus::BadFrameList,
        ),
        // MAP_APERTURE2 rules.
        (
            "ADL too short",
            packet_bytes(map2_contiguous(0, 4, data_frame(10), 6, 3)),
            SubmitStatus::BadFrameList,
        ),
        (
            "ADL pages too short",
            packet_bytes(map2_pages(0, 4, list, 6, 3)),
            SubmitStatus::BadFrameList,
        ),
        (
            "ADL crosses the RAM end",
            packet_bytes(map2_contiguous(0, 4, RAM_SIZE / PAGE - 2, 4, 0)),
            SubmitStatus::FrameNotInRam,
        ),
        (
            "ADL in VRAM",
            packet_bytes(map2_contiguous(0, 4, in_vram, 4, 0)),
            SubmitStatus::FrameInVram,
        ),
        (
            "ADL base overflows",
            packet_bytes(map2_contiguous(0, 1, u64::MAX, 4, 2)),
            SubmitStatus::LengthOverflow,
        ),
        (
            "unknown ADL flag",
            packet_bytes(WddmGpuPacketMapAperture2 {
                adl_flags: 2 | WDDM_GPU_ADL_FLAG_CONTIGUOUS,
                ..map2
            }),
            SubmitStatus::ReservedField,
        ),
        (
            "MAP2 reserved",
            packet_bytes(WddmGpuPacketMapAperture2 {
                reserved: 1,
                ..map2
            }),
            SubmitStatus::ReservedField,
        ),
        (
            "MAP2 unknown map flag",
            packet_bytes(WddmGpuPacketMapAperture2 { flags: 4, ..map2 }),
            SubmitStatus::ReservedField,
        ),
        // UNMAP rules.
        (
            "unaligned dummy",
            packet_bytes(unmap_aperture(APERTURE_SEGMENT, 0, 2, DATA + 8)),
            SubmitStatus::BadFrameList,
        ),
        (
            "dummy in VRAM",
            packet_bytes(unmap_aperture(APERTURE_SEGMENT, 0, 2, VRAM_GPA + PAGE)),
            SubmitStatus::FrameInVram,
        ),
        (
            "dummy beyond RAM",
            packet_bytes(unmap_aperture(APERTURE_SEGMENT, 0, 2, RAM_SIZE)),
            SubmitStatus::FrameNotInRam,
        ),
        (
            "unmap reserved",
            packet_bytes(WddmGpuPacketUnmapAperture {
                reserved: 1,
                ..unmap_aperture(APERTURE_SEGMENT, 0, 1, DATA)
            }),
            SubmitStatus::ReservedField,
        ),
        (
            "unmap past the end",
            packet_bytes(unmap_aperture(
                APERTURE_SEGMENT,
                APERTURE_PAGES - 1,
                2,
                DATA,
            )),
            SubmitStatus::SegmentRange,
        ),
    ] {
        assert_refused(&mut rig, name, bad, expected);
    }
    for (segment, expected) in [
        (1, SubmitStatus::WrongSegmentKind),
        (9, SubmitStatus::BadSegment),
        (0, SubmitStatus::BadSegment),
    ] {
        let name = format!("MAP on segment {segment}");
        assert_refused(
            &mut rig,
            &name,
            packet_bytes(map_aperture(segment, 0, 0, 1, list, 8, 0)),
            expected,
        );
        let p = WddmGpuPacketMapAperture2 {
            segment_id: segment,
            ..map2
        };
        assert_refused(
            &mut rig,
            &format!("MAP2 on segment {segment}"),
            packet_bytes(p),
            expected,
        );
        let p = unmap_aperture(segment, 0, 1, DATA);
        assert_refused(
            &mut rig,
            &format!("UNMAP on segment {segment}"),
            packet_bytes(p),
            expected,
        );
    }

    // CacheCoherent is fine into the default (coherent) aperture.
    let p = map_aperture(
        APERTURE_SEGMENT,
        WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
        30,
        1,
        list,
        8,
        0,
    );
    rig.ok(&packet_bytes(p));
    assert_eq!(rig.entries(30..31), [Some(data_frame(100))]);
}

#[test]
fn cache_coherent_mappings_need_a_cache_coherent_aperture() {
    let mut rig = Rig::with_layout("non-coherent", NON_COHERENT);
    assert_eq!(rig.layout.segments[1].kind, SegmentKind::Aperture);
    let list = rig.list(0, &data_frames(&[7, 8]));
    let coherent = WDDM_GPU_MAP_FLAG_CACHE_COHERENT;
    let p = map_aperture(APERTURE_SEGMENT, coherent, 0, 2, list, 2, 0);
    assert_refused(
        &mut rig,
        "CacheCoherent MAP",
        packet_bytes(p),
        SubmitStatus::WrongSegmentKind,
    );
    let p = WddmGpuPacketMapAperture2 {
        flags: coherent,
        ..map2_contiguous(0, 2, data_frame(7), 2, 0)
    };
    assert_refused(
        &mut rig,
        "CacheCoherent MAP2",
        packet_bytes(p),
        SubmitStatus::WrongSegmentKind,
    );
    // Without the flag the same mapping works; the device-only segment 3 is not an aperture.
    rig.ok(&packet_bytes(map_aperture(
        APERTURE_SEGMENT,
        0,
        0,
        2,
        list,
        2,
        0,
    )));
    assert_eq!(
        rig.entries(0..3),
        [Some(data_frame(7)), Some(data_frame(8)), None]
    );
    let p = map_aperture(3, 0, 0, 2, list, 2, 0);
    assert_refused(
        &mut rig,
        "MAP on device-only VRAM",
        packet_bytes(p),
        SubmitStatus::WrongSegmentKind,
    );
    // The aperture is 1 MiB here: 256 pages.
    assert_refused(
        &mut rig,
        "past the 1 MiB aperture",
        packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 255, 2, list, 2, 0)),
        SubmitStatus::SegmentRange,
    );
}
