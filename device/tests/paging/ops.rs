//! Every packet: MAP/UNMAP_APERTURE(2), TRANSFER between every pair of endpoint kinds, FILL,
//! DISCARD/READ/WRITE_PHYSICAL, FENCE.

use std::time::Duration;

use wddm_gpu_abi::build::{self, fill, segment_access, transfer, Adl};
use wddm_gpu_abi::packet::{
    WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE, WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL,
};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_FENCE};
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_frontend_kit::{
    harness::{FRAME_LISTS, PAGE, PAGE_USIZE, RAM_SIZE, STATUS_PAGE, VRAM_GPA, VRAM_SIZE},
    pattern::pattern,
    requests::segment,
};

use crate::common::*;
use crate::place::*;

#[test]
fn map_aperture_points_pages_at_scattered_frames_from_the_frame_offset() {
    let mut h = ready("map-aperture");
    // Ten scattered frames; pages 100..106 map entries 3..9 of the list.
    let list: Vec<u64> = [17u64, 4, 5, 40, 22, 9, 31, 30, 12, 2]
        .iter()
        .map(|&i| frame(i))
        .collect();
    let contents: Vec<Vec<u8>> = (0..list.len())
        .map(|i| pattern(0x100 + i as u64, PAGE_USIZE))
        .collect();
    for (frame, content) in list.iter().zip(&contents) {
        h.write_ram(frame * PAGE, content);
    }
    h.write_frame_list(FRAME_LISTS, &list);
    let mut dma = Dma::default();
    let mut packet = map(100, 6, FRAME_LISTS, u32::try_from(list.len()).unwrap(), 3);
    packet.flags = WDDM_GPU_MAP_FLAG_CACHE_COHERENT;
    dma.push(&packet);
    let response = submit_ok(&mut h, &dma, 1);
    assert_eq!(response.bytes_transferred, 0);

    // Reading the six pages through the aperture gives frames 3..9, in list order.
    let destination = 0x20_0000;
    h.write_vram(destination, &vec![0; 6 * PAGE_USIZE]);
    submit_one_ok(
        &mut h,
        &transfer(
            6 * PAGE,
            segment(APERTURE_SEGMENT, 100 * PAGE),
            segment(VRAM_SEGMENT, destination),
        ),
        2,
    );
    let expected: Vec<u8> = contents[3..9].concat();
    assert_bytes(
        &h.read_vram(destination, 6 * PAGE_USIZE),
        &expected,
        "aperture read",
    );

    // Writing through the aperture lands in those frames only, at the right offsets.
    let data = pattern(7, usize::try_from(6 * PAGE - 0x20).unwrap());
    copy_from_vram(
        &mut h,
        &data,
        0x30_0000,
        segment(APERTURE_SEGMENT, 100 * PAGE + 0x10),
        3,
    );
    let mut expected_frames = contents.clone();
    for (index, byte) in data.iter().enumerate() {
        let at = 0x10 + index;
        expected_frames[3 + at / PAGE_USIZE][at % PAGE_USIZE] = *byte;
    }
    for (index, frame) in list.iter().enumerate() {
        assert_bytes(
            &h.read_ram(frame * PAGE, PAGE_USIZE),
            &expected_frames[index],
            &format!("list entry {index}"),
        );
    }

    // Pages 99 and 106 were not part of the request: still never mapped.
    for (address, page) in [(106 * PAGE - 0x10, 106), (99 * PAGE + 0xff0, 99)] {
        h.write_vram(0x40_0000, &[SENTINEL; 0x20]);
        let response = submit_alone(
            &mut h,
            &transfer(
                0x20,
                segment(APERTURE_SEGMENT, address),
                segment(VRAM_SEGMENT, 0x40_0000),
            ),
            4,
            SubmitStatus::UnmappedAperture,
        );
        assert_eq!(response.fault_address, page * PAGE);
        assert_eq!(h.read_vram(0x40_0000, 0x20), [SENTINEL; 0x20]);
    }

    // A request with one bad frame is refused whole: the old mapping stays.
    let bad: Vec<u64> = [frame(60), frame(61), VRAM_GPA / PAGE].to_vec();
    h.write_frame_list(FRAME_LISTS + 0x1000, &bad);
    submit_alone(
        &mut h,
        &map(100, 3, FRAME_LISTS + 0x1000, 3, 0),
        5,
        SubmitStatus::FrameInVram,
    );
    submit_one_ok(
        &mut h,
        &transfer(
            3 * PAGE,
            segment(APERTURE_SEGMENT, 100 * PAGE),
            segment(VRAM_SEGMENT, destination),
        ),
        6,
    );
    assert_bytes(
        &h.read_vram(destination, 3 * PAGE_USIZE),
        &expected_frames[3..6].concat(),
        "mapping after a refused MAP",
    );
}

#[test]
fn transfer_moves_every_byte_between_every_pair_of_endpoint_kinds() {
    let mut h = ready("transfer-matrix");
    let length: u64 = 2 * PAGE + 0x321;
    // Sources and destinations never share storage; every place has spare bytes or frames
    // around the data, which must keep the sentinel.
    let sources = [
        Place::Vram(0x10_0123),
        Place::Aperture {
            address: 16 * PAGE + 0x234,
            frames: scattered(0, 4),
        },
        Place::Frames {
            list: FRAME_LISTS,
            frames: scattered(1, 5),
            // Past the whole first frame: the KMD folds MdlOffset * PAGE_SIZE in here.
            byte_offset: 0x1100,
        },
    ];
    let destinations = [
        Place::Vram(0x40_0456),
        Place::Aperture {
            address: 48 * PAGE + 0x567,
            frames: scattered(2, 4),
        },
        Place::Frames {
            list: FRAME_LISTS + 0x100,
            frames: scattered(3, 4),
            byte_offset: 0x89,
        },
    ];
    for (index, place) in sources.iter().chain(&destinations).enumerate() {
        place.prepare(&mut h, FRAME_LISTS + 0x1000 + 0x100 * index as u64, 1);
    }
    let mut fence = 10;
    for source in &sources {
        for destination in &destinations {
            fence += 1;
            let what = format!("{} -> {}", source.name(), destination.name());
            let data = pattern(u64::from(fence), usize::try_from(length).unwrap());
            source.write(&h, &data);
            destination.clear(&h, length);
            let response = submit_one_ok(
                &mut h,
                &transfer(length, source.endpoint(), destination.endpoint()),
                fence,
            );
            assert_eq!(response.bytes_transferred, length, "{what}");
            destination.check(&h, &data, &what);
            assert_bytes(
                &source.read(&h, usize::try_from(length).unwrap()),
                &data,
                &format!("{what}: source"),
            );
        }
    }
}

#[test]
fn overlapping_vram_transfers_behave_as_memmove() {
    let mut h = ready("memmove");
    let length = 3 * PAGE_USIZE + 0x77;
    for (from, to) in [(0x10_0000u64, 0x10_0801u64), (0x20_0801, 0x20_0000)] {
        let data = pattern(from, length);
        copy_from_vram(&mut h, &data, from, segment(VRAM_SEGMENT, to), 1);
        assert_bytes(
            &h.read_vram(to, length),
            &data,
            &format!("{from:#x} -> {to:#x}"),
        );
    }
}

#[test]
fn fill_repeats_the_pattern_from_the_first_byte_and_ends_mid_pattern() {
    let mut h = ready("fill");
    let pattern_value: u32 = 0xdead_beef;
    let bytes = pattern_value.to_le_bytes();
    // Odd addresses; lengths below, across and far past the device's 64 KiB fill buffer and
    // its 1 MiB chunk, ending at every phase of the pattern; and 0.
    let cases: [(u64, u64); 5] = [
        (0x10_0001, 3),
        (0x11_0002, 0x1_0003),
        (0x20_0003, (1 << 20) + 0x1_0001),
        (0x40_0000, 0x1000),
        (0x50_0000, 0),
    ];
    let mut dma = Dma::default();
    for &(address, length) in &cases {
        h.write_vram(
            address - GUARD,
            &vec![SENTINEL; usize::try_from(length + 2 * GUARD).unwrap()],
        );
        dma.push(&fill(pattern_value, length, segment(VRAM_SEGMENT, address)));
    }
    let response = submit_ok(&mut h, &dma, 1);
    let total: u64 = cases.iter().map(|c| c.1).sum();
    assert_eq!(response.bytes_transferred, total);
    for &(address, length) in &cases {
        let mut expected = vec![SENTINEL; usize::try_from(GUARD).unwrap()];
        expected.extend((0..usize::try_from(length).unwrap()).map(|i| bytes[i % 4]));
        expected.extend(vec![SENTINEL; usize::try_from(GUARD).unwrap()]);
        assert_bytes(
            &h.read_vram(
                address - GUARD,
                usize::try_from(length + 2 * GUARD).unwrap(),
            ),
            &expected,
            &format!("FILL at {address:#x}+{length:#x}"),
        );
    }
}

#[test]
fn discard_read_and_write_physical_check_locations_and_move_no_data() {
    let mut h = ready("segment-access");
    let backing = frame(70);
    h.write_ram(backing * PAGE, &pattern(70, PAGE_USIZE));
    map_pages(&mut h, 7, &[backing], FRAME_LISTS, 1);
    let vram_before = h.read_vram(0, usize::try_from(VRAM_SIZE).unwrap());
    let frame_before = h.read_ram(backing * PAGE, PAGE_USIZE);

    let mut dma = Dma::default();
    dma.push(&segment_access(
        WDDM_GPU_OP_DISCARD_CONTENT,
        VRAM_SEGMENT,
        0x1000,
        WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
    ));
    dma.push(&segment_access(
        WDDM_GPU_OP_DISCARD_CONTENT,
        VRAM_SEGMENT,
        VRAM_SIZE - 1,
        0,
    ));
    dma.push(&segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        VRAM_SEGMENT,
        0x2000,
        8,
    ));
    dma.push(&segment_access(
        WDDM_GPU_OP_WRITE_PHYSICAL,
        VRAM_SEGMENT,
        VRAM_SIZE - 1,
        1,
    ));
    dma.push(&segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        APERTURE_SEGMENT,
        7 * PAGE + 0xffc,
        4,
    ));
    dma.push(&segment_access(
        WDDM_GPU_OP_WRITE_PHYSICAL,
        APERTURE_SEGMENT,
        7 * PAGE + 0xff8,
        8,
    ));
    let response = submit_ok(&mut h, &dma, 2);
    assert_eq!(response.bytes_transferred, 0);
    assert!(
        h.read_vram(0, usize::try_from(VRAM_SIZE).unwrap()) == vram_before,
        "VRAM changed"
    );
    assert_bytes(
        &h.read_ram(backing * PAGE, PAGE_USIZE),
        &frame_before,
        "aperture frame",
    );

    // The locations are checked.
    let refused = [
        (
            segment_access(WDDM_GPU_OP_WRITE_PHYSICAL, VRAM_SEGMENT, 0, 9),
            SubmitStatus::ReservedField,
        ),
        (
            segment_access(WDDM_GPU_OP_READ_PHYSICAL, VRAM_SEGMENT, 0, 0),
            SubmitStatus::ReservedField,
        ),
        (
            segment_access(WDDM_GPU_OP_DISCARD_CONTENT, VRAM_SEGMENT, 0, 2),
            SubmitStatus::ReservedField,
        ),
        (
            segment_access(WDDM_GPU_OP_DISCARD_CONTENT, APERTURE_SEGMENT, 7 * PAGE, 0),
            SubmitStatus::WrongSegmentKind,
        ),
        (
            segment_access(WDDM_GPU_OP_READ_PHYSICAL, VRAM_SEGMENT, VRAM_SIZE - 1, 2),
            SubmitStatus::SegmentRange,
        ),
        (
            segment_access(WDDM_GPU_OP_READ_PHYSICAL, APERTURE_SEGMENT, 8 * PAGE - 2, 4),
            SubmitStatus::UnmappedAperture,
        ),
        (
            segment_access(WDDM_GPU_OP_WRITE_PHYSICAL, 9, 0, 4),
            SubmitStatus::BadSegment,
        ),
    ];
    for (packet, expected) in refused {
        let mut dma = Dma::default();
        dma.push(&packet);
        let response = submit_dma(&mut h, &dma, 3);
        assert_eq!(
            status(&response),
            Some(expected),
            "{packet:?}: {response:?}"
        );
        assert_eq!(response.packets_completed, 0);
    }
    assert!(
        h.read_vram(0, usize::try_from(VRAM_SIZE).unwrap()) == vram_before,
        "VRAM changed"
    );
}

#[test]
fn unmap_aperture_points_the_range_at_the_dummy_page() {
    let mut h = ready("unmap");
    let mapped = scattered(0, 4);
    let dummy = frame(100);
    for frame in &mapped {
        h.write_ram(frame * PAGE, &[SENTINEL; PAGE_USIZE]);
    }
    h.write_ram(dummy * PAGE, &[0x11; PAGE_USIZE]);
    map_pages(&mut h, 20, &mapped, FRAME_LISTS, 1);

    // Pages 21 and 22 go to the dummy page, and page 30, which was never mapped.
    let mut dma = Dma::default();
    dma.push(&unmap(21, 2, dummy * PAGE));
    dma.push(&unmap(30, 1, dummy * PAGE));
    submit_ok(&mut h, &dma, 2);

    // Writing pages 20 (second half) and 21: page 20's frame gets its half, the dummy page
    // gets page 21, the frames that pages 21 and 22 used to map keep their bytes.
    let data = pattern(5, 0x1800);
    copy_from_vram(
        &mut h,
        &data,
        0x10_0000,
        segment(APERTURE_SEGMENT, 20 * PAGE + 0x800),
        3,
    );
    let mut page20 = vec![SENTINEL; 0x800];
    page20.extend_from_slice(&data[..0x800]);
    assert_bytes(
        &h.read_ram(mapped[0] * PAGE, PAGE_USIZE),
        &page20,
        "page 20",
    );
    assert_bytes(
        &h.read_ram(dummy * PAGE, PAGE_USIZE),
        &data[0x800..],
        "dummy page",
    );
    for (index, frame) in mapped[1..].iter().enumerate() {
        assert_eq!(
            h.read_ram(frame * PAGE, PAGE_USIZE),
            vec![SENTINEL; PAGE_USIZE],
            "frame formerly at page {}",
            21 + index
        );
    }

    // Reading pages 22, 23 and 30: the dummy page, page 23's frame, the dummy page again.
    h.write_ram(mapped[3] * PAGE, &pattern(23, PAGE_USIZE));
    let mut dma = Dma::default();
    dma.push(&transfer(
        2 * PAGE,
        segment(APERTURE_SEGMENT, 22 * PAGE),
        segment(VRAM_SEGMENT, 0x20_0000),
    ));
    dma.push(&transfer(
        PAGE,
        segment(APERTURE_SEGMENT, 30 * PAGE),
        segment(VRAM_SEGMENT, 0x20_0000 + 2 * PAGE),
    ));
    submit_ok(&mut h, &dma, 4);
    let expected = [
        data[0x800..].to_vec(),
        pattern(23, PAGE_USIZE),
        data[0x800..].to_vec(),
    ]
    .concat();
    assert_bytes(&h.read_vram(0x20_0000, 3 * PAGE_USIZE), &expected, "reads");

    // A bad dummy page is refused and changes nothing.
    for (dummy_page, expected) in [
        (dummy * PAGE + 8, SubmitStatus::BadFrameList),
        (VRAM_GPA, SubmitStatus::FrameInVram),
        (RAM_SIZE, SubmitStatus::FrameNotInRam),
    ] {
        let mut dma = Dma::default();
        dma.push(&unmap(23, 1, dummy_page));
        let response = submit_dma(&mut h, &dma, 5);
        assert_eq!(status(&response), Some(expected), "{response:?}");
        assert_eq!(response.fault_address, dummy_page);
    }
    submit_one_ok(
        &mut h,
        &transfer(
            PAGE,
            segment(APERTURE_SEGMENT, 23 * PAGE),
            segment(VRAM_SEGMENT, 0x30_0000),
        ),
        6,
    );
    assert_bytes(
        &h.read_vram(0x30_0000, PAGE_USIZE),
        &pattern(23, PAGE_USIZE),
        "page 23 after refused unmaps",
    );
}

#[test]
fn map_aperture2_maps_contiguous_and_page_array_adls() {
    let mut h = ready("map2");
    // Contiguous ADL: base frame B, 8 pages; AdlOffset 2, 4 pages at aperture page 60.
    let base = frame(200);
    for i in 0..8 {
        h.write_ram((base + i) * PAGE, &pattern(0x200 + i, PAGE_USIZE));
    }
    // Page-array ADL: 6 scattered frames; AdlOffset 1, 3 pages at aperture page 70.
    let array = scattered(5, 6);
    for frame in &array {
        h.write_ram(frame * PAGE, &[SENTINEL; PAGE_USIZE]);
    }
    h.write_frame_list(FRAME_LISTS + 0x800, &array);
    let mut dma = Dma::default();
    dma.push(&map2(
        60,
        4,
        Adl::Contiguous {
            base_page: base,
            page_count: 8,
        },
        2,
    ));
    dma.push(&map2(
        70,
        3,
        Adl::Pages {
            address: FRAME_LISTS + 0x800,
            page_count: 6,
        },
        1,
    ));
    submit_ok(&mut h, &dma, 1);

    let mut dma = Dma::default();
    dma.push(&transfer(
        4 * PAGE,
        segment(APERTURE_SEGMENT, 60 * PAGE),
        segment(VRAM_SEGMENT, 0x10_0000),
    ));
    let data = pattern(9, 3 * PAGE_USIZE - 0x30);
    h.write_vram(0x20_0000, &data);
    dma.push(&transfer(
        data.len() as u64,
        segment(VRAM_SEGMENT, 0x20_0000),
        segment(APERTURE_SEGMENT, 70 * PAGE + 0x30),
    ));
    submit_ok(&mut h, &dma, 2);
    let expected: Vec<u8> = (2..6)
        .flat_map(|i| pattern(0x200 + i, PAGE_USIZE))
        .collect();
    assert_bytes(
        &h.read_vram(0x10_0000, 4 * PAGE_USIZE),
        &expected,
        "contiguous ADL",
    );
    Place::Aperture {
        address: 70 * PAGE + 0x30,
        frames: array[1..4].to_vec(),
    }
    .check(&h, &data, "page-array ADL");
    for index in [0, 4, 5] {
        assert_eq!(
            h.read_ram(array[index] * PAGE, PAGE_USIZE),
            vec![SENTINEL; PAGE_USIZE],
            "ADL entry {index} is not mapped"
        );
    }

    // Pages after each mapping are still never mapped; short ADLs are refused.
    for (packet, expected) in [
        (
            transfer(
                1,
                segment(APERTURE_SEGMENT, 64 * PAGE),
                segment(VRAM_SEGMENT, 0),
            ),
            SubmitStatus::UnmappedAperture,
        ),
        (
            transfer(
                1,
                segment(APERTURE_SEGMENT, 73 * PAGE),
                segment(VRAM_SEGMENT, 0),
            ),
            SubmitStatus::UnmappedAperture,
        ),
    ] {
        let mut dma = Dma::default();
        dma.push(&packet);
        assert_eq!(status(&submit_dma(&mut h, &dma, 3)), Some(expected));
    }
    for packet in [
        map2(
            80,
            7,
            Adl::Contiguous {
                base_page: base,
                page_count: 8,
            },
            2,
        ),
        map2(
            80,
            6,
            Adl::Pages {
                address: FRAME_LISTS + 0x800,
                page_count: 6,
            },
            1,
        ),
    ] {
        let mut dma = Dma::default();
        dma.push(&packet);
        let response = submit_dma(&mut h, &dma, 4);
        assert_eq!(
            status(&response),
            Some(SubmitStatus::BadFrameList),
            "{packet:?}"
        );
    }
}

#[test]
fn fence_packet_completes_a_posted_wait_event_and_the_status_page() {
    let mut h = ready("fence");
    register_status_page(&mut h);
    let first = h.post_wait_event();
    let second = h.post_wait_event();

    // Patch-style: the fence at the end of the buffer.
    let mut dma = Dma::default();
    dma.push(&fill(0x0102_0304, 0x100, segment(VRAM_SEGMENT, 0x1000)));
    dma.push(&build::fence(0x77));
    submit_ok(&mut h, &dma, 0x10);
    assert_fence_event(&mut h, first, 0x77);
    // The submission completed after its FENCE packet: its fence is the latest completed.
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(page.completed_fence, 0x10);
    assert_eq!(page.submissions_completed, 1);
    assert_eq!(page.events_dropped, 0);
    assert!(!h.is_answered(&second), "one FENCE packet, one event");

    // A buffer with nothing but its fence, Patch-style with the submission's own id.
    submit_one_ok(&mut h, &build::fence(0x11), 0x11);
    assert_fence_event(&mut h, second, 0x11);
    assert_eq!(h.status_page(STATUS_PAGE).completed_fence, 0x11);

    // Without a posted WAIT_EVENT the event is counted as dropped.
    submit_one_ok(&mut h, &build::fence(0x12), 0x12);
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(page.events_dropped, 1);
    assert_eq!(page.completed_fence, 0x12);
}

/// The guide (section 4) reports a FENCE "when the packet executes": a FENCE followed by long
/// work must come while the work still runs. (Until 4965673 the scheduler collected fences
/// and reported them only when the whole submission ended; this test failed then.)
#[test]
fn fence_packet_is_reported_when_it_executes_not_when_the_submission_ends() {
    let mut h = ready_with_vram("fence-early", BIG_VRAM);
    register_status_page(&mut h);
    let event = h.post_wait_event();
    let mut dma = Dma::default();
    dma.push(&build::fence(0x78));
    let long = long_submission(&mut h, LONG_DMA, 0x20, Some(dma));
    wait_until_running(&h);
    // The FENCE packet has executed: the next packet is copying. Its event must come now,
    // while the submission still runs.
    let early = h.wait_reply_for(&event, Duration::from_secs(2));
    let running_at_event = !h.is_answered(&long);
    let page = h.status_page(STATUS_PAGE);
    let preempt = h.post_preempt();
    let ended = h.wait_submit(long);
    h.wait_preempt(preempt);
    let event = match early {
        Ok(reply) => reply,
        Err(_) => {
            let late = h.wait_reply(event);
            panic!(
                "the FENCE event came only when the submission ended ({:?}; event {:?})",
                status(&ended),
                late.bytes
            );
        }
    };
    assert!(running_at_event, "submission already ended at the event");
    let event: WddmGpuRespEvent = event.exact();
    assert_eq!((event.kind, event.fence_id), (WDDM_GPU_EVENT_FENCE, 0x78));
    assert_eq!(page.completed_fence, 0x78);
}
