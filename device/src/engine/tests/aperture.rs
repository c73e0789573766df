//! MAP_APERTURE, MAP_APERTURE2 and UNMAP_APERTURE: each page gets its frame, transfers through
//! the aperture move exactly those bytes, and an unmapped page stops a transfer before it moves
//! anything.

use wddm_gpu_abi::build::{fence, map_aperture, transfer, unmap_aperture};
use wddm_gpu_abi::packet::WDDM_GPU_OP_TRANSFER;

use super::model::Model;
use super::unmapped_at;
use crate::memory::gart::Run;
use crate::testkit::engine_rig::{data_frame, data_frames, Rig, APERTURE_PAGES, PAGE, PAGE_USIZE};
use crate::testkit::packets::{
    in_aperture, in_vram, map2_contiguous, map2_pages, packet_bytes, APERTURE_SEGMENT,
};

#[test]
fn map_places_each_frame_at_its_page_and_transfers_move_exactly_those_bytes() {
    let mut rig = Rig::new("map");
    let mut model = Model::new(&rig, 512);
    // 14-entry MDL; entries 3..13 are mapped at pages 100..110: scattered, with runs.
    let list = data_frames(&[500, 9, 8, 17, 18, 19, 3, 900, 901, 44, 45, 46, 700, 2]);
    let at = rig.list(0, &list);
    let before = rig.entries(0..APERTURE_PAGES.min(1024));
    let completion = rig.ok(&packet_bytes(map_aperture(
        APERTURE_SEGMENT,
        0,
        100,
        10,
        at,
        14,
        3,
    )));
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (1, 0)
    );
    model.map(100, &list[3..13]);
    for page in 0..1024 {
        let expected = match page {
            100..=109 => Some(list[3 + usize::try_from(page - 100).unwrap()]),
            _ => before[usize::try_from(page).unwrap()],
        };
        assert_eq!(
            rig.engine.gart().entry(APERTURE_SEGMENT, page),
            expected,
            "page {page}"
        );
    }
    model.check(&rig);

    // Consecutive frames behind consecutive pages coalesce into one run.
    let gart = rig.engine.gart();
    let run = |offset| gart.run_at(APERTURE_SEGMENT, offset, u64::MAX).unwrap();
    for (offset, address, length) in [
        (
            100 * PAGE + 0x10,
            data_frame(17) * PAGE + 0x10,
            3 * PAGE - 0x10,
        ),
        (103 * PAGE + 1, data_frame(3) * PAGE + 1, PAGE - 1),
        (104 * PAGE + 5, data_frame(900) * PAGE + 5, 2 * PAGE - 5),
        (106 * PAGE, data_frame(44) * PAGE, 3 * PAGE),
        (109 * PAGE, data_frame(700) * PAGE, PAGE),
    ] {
        assert_eq!(run(offset), Run { address, length }, "{offset:#x}");
    }

    // Unaligned offsets, lengths that are not page multiples; the second transfer writes frames
    // the first one read.
    let out_len = 10 * PAGE - 0x123 - 0x45;
    let in_len = 7 * PAGE + 5;
    let completion = rig.ok(&[
        packet_bytes(transfer(
            out_len,
            in_aperture(100 * PAGE + 0x123),
            in_vram(0x1_0007),
        )),
        packet_bytes(transfer(
            in_len,
            in_vram(0x20_0001),
            in_aperture(101 * PAGE + 0x7ff),
        )),
    ]
    .concat());
    assert_eq!(completion.packets_completed, 2);
    assert_eq!(completion.bytes_transferred, out_len + in_len);
    model.aperture_to_vram(100 * PAGE + 0x123, 0x1_0007, out_len);
    model.vram_to_aperture(0x20_0001, 101 * PAGE + 0x7ff, in_len);
    model.check(&rig);
    // Spot checks of the model itself: first byte out, last byte in.
    assert_eq!(
        rig.vram_read(0x1_0007, 1),
        rig.ram_read(data_frame(17) * PAGE + 0x123, 1)
    );
    let last = 101 * PAGE + 0x7ff + in_len - 1; // page 108 = frame 46
    assert_eq!(last / PAGE, 108);
    assert_eq!(
        rig.ram_read(data_frame(46) * PAGE + last % PAGE, 1),
        rig.vram_read(0x20_0001 + in_len - 1, 1)
    );
}

#[test]
fn map_aperture2_contiguous_and_page_array_forms() {
    let mut rig = Rig::new("map2");
    let mut model = Model::new(&rig, 512);
    // Contiguous: BasePageNumber data_frame(200), 8 pages, AdlOffset 3 -> pages 10..15 map data_frame(203..208).
    rig.ok(&packet_bytes(map2_contiguous(10, 5, data_frame(200), 8, 3)));
    model.map(10, &data_frames(&[203, 204, 205, 206, 207]));
    model.check(&rig);
    assert_eq!(
        rig.entries(9..16),
        [
            None,
            Some(data_frame(203)),
            Some(data_frame(204)),
            Some(data_frame(205)),
            Some(data_frame(206)),
            Some(data_frame(207)),
            None
        ]
    );
    let run = rig
        .engine
        .gart()
        .run_at(APERTURE_SEGMENT, 10 * PAGE + 9, u64::MAX)
        .unwrap();
    assert_eq!(
        run,
        Run {
            address: data_frame(203) * PAGE + 9,
            length: 5 * PAGE - 9
        }
    );

    // Page array: 6 entries, AdlOffset 1, 4 pages at page 30.
    let list = data_frames(&[1, 640, 12, 13, 77, 5]);
    let at = rig.list(0, &list);
    rig.ok(&packet_bytes(map2_pages(30, 4, at, 6, 1)));
    model.map(30, &list[1..5]);
    model.check(&rig);

    let length = 3 * PAGE + 0x311;
    rig.ok(&[
        packet_bytes(transfer(
            length,
            in_vram(0x3_0003),
            in_aperture(10 * PAGE + 0x80),
        )),
        packet_bytes(transfer(
            length,
            in_aperture(30 * PAGE + 0x9),
            in_vram(0x8_0001),
        )),
        packet_bytes(transfer(
            4 * PAGE - 1,
            in_aperture(30 * PAGE + 1),
            in_aperture(11 * PAGE),
        )),
    ]
    .concat());
    model.vram_to_aperture(0x3_0003, 10 * PAGE + 0x80, length);
    model.aperture_to_vram(30 * PAGE + 0x9, 0x8_0001, length);
    model.copy(
        4 * PAGE - 1,
        |m, i| m.aperture(30 * PAGE + 1 + i),
        |m, i| m.aperture(11 * PAGE + i),
    );
    model.check(&rig);

    // Remapping replaces entries; a contiguous ADL of one page works.
    rig.ok(&packet_bytes(map2_contiguous(12, 1, data_frame(900), 1, 0)));
    model.map(12, &[data_frame(900)]);
    model.check(&rig);
}

#[test]
fn unmap_points_the_range_at_the_dummy_page() {
    let mut rig = Rig::new("unmap");
    let mut model = Model::new(&rig, 512);
    let list = data_frames(&[5, 6, 7, 300, 301, 302, 303, 9]);
    rig.map_frames(20, &list);
    model.map(20, &list);
    let dummy = data_frame(1000);
    let completion = rig.ok(&packet_bytes(unmap_aperture(
        APERTURE_SEGMENT,
        22,
        3,
        dummy * PAGE,
    )));
    assert_eq!(completion.packets_completed, 1);
    model.map(22, &[dummy; 3]);
    assert_eq!(
        rig.entries(19..29),
        [
            None,
            Some(data_frame(5)),
            Some(data_frame(6)),
            Some(dummy),
            Some(dummy),
            Some(dummy),
            Some(data_frame(302)),
            Some(data_frame(303)),
            Some(data_frame(9)),
            None
        ]
    );
    model.check(&rig);
    let dummy_bytes = rig.ram_read(dummy * PAGE, PAGE_USIZE);

    // Reads through the range read the dummy page, three times over.
    let length = 5 * PAGE - 0x200;
    rig.ok(&packet_bytes(transfer(
        length,
        in_aperture(21 * PAGE + 0x100),
        in_vram(0x8000),
    )));
    model.aperture_to_vram(21 * PAGE + 0x100, 0x8000, length);
    model.check(&rig);
    for k in 0..3u64 {
        let page_at = 0x8000 + (PAGE - 0x100) + k * PAGE;
        assert_eq!(
            rig.vram_read(page_at, PAGE_USIZE),
            dummy_bytes,
            "page {}",
            22 + k
        );
    }

    // Writes through the range land in the dummy page (the last write of each byte wins) and
    // nowhere else: the frames mapped there before are untouched (model check).
    let length = 3 * PAGE - 0x30;
    rig.ok(&packet_bytes(transfer(
        length,
        in_vram(0x4_0000),
        in_aperture(22 * PAGE + 0x10),
    )));
    model.vram_to_aperture(0x4_0000, 22 * PAGE + 0x10, length);
    model.check(&rig);
    let dummy_after = rig.ram_read(dummy * PAGE, PAGE_USIZE);
    let tail = usize::try_from(PAGE - 0x20).unwrap();
    // [0, PAGE - 0x20) comes from the part written through page 24, the rest through page 23.
    assert_eq!(
        dummy_after[..tail],
        rig.vram_read(0x4_0000 + 2 * PAGE - 0x10, tail)[..]
    );
    assert_eq!(
        dummy_after[tail..],
        rig.vram_read(0x4_0000 + 2 * PAGE - 0x30, 0x20)[..]
    );

    // Unmapping pages that were never mapped makes them usable (they read the dummy page).
    rig.ok(&packet_bytes(unmap_aperture(
        APERTURE_SEGMENT,
        40,
        2,
        dummy * PAGE,
    )));
    model.map(40, &[dummy; 2]);
    rig.ok(&packet_bytes(transfer(
        2 * PAGE,
        in_aperture(40 * PAGE),
        in_vram(0x10_0000),
    )));
    model.aperture_to_vram(40 * PAGE, 0x10_0000, 2 * PAGE);
    model.check(&rig);
    assert_eq!(rig.vram_read(0x10_0000 + PAGE, PAGE_USIZE), dummy_after);
}

#[test]
fn an_unmapped_page_anywhere_in_the_range_faults_before_any_byte_moves() {
    let mut rig = Rig::new("unmapped");
    let mut model = Model::new(&rig, 512);
    let list = data_frames(&[60, 61, 900, 4]);
    rig.map_frames(40, &list);
    model.map(40, &list);
    // Pages 40..44 mapped, 44 never: each transfer covers 40..=44.
    let length = 5 * PAGE - 0x20;
    let good = packet_bytes(fence(1));
    for (name, bad) in [
        (
            "vram -> aperture",
            transfer(length, in_vram(0x1_0000), in_aperture(40 * PAGE + 0x10)),
        ),
        (
            "aperture -> vram",
            transfer(length, in_aperture(40 * PAGE + 0x10), in_vram(0x1_0000)),
        ),
        (
            "aperture -> aperture",
            transfer(4 * PAGE, in_aperture(40 * PAGE), in_aperture(41 * PAGE + 1)),
        ),
        (
            "last byte only",
            transfer(1, in_vram(0), in_aperture(45 * PAGE - 1)),
        ),
    ] {
        let completion = rig.submit(&[good.clone(), packet_bytes(bad)].concat());
        // Pages 40..44 are mapped, 44 never was.
        let expected_page = 44;
        assert_eq!(completion.fault(), unmapped_at(16, expected_page), "{name}");
        assert_eq!(completion.fault_opcode, WDDM_GPU_OP_TRANSFER, "{name}");
        assert_eq!(
            completion.fault().unwrap().1.address(),
            expected_page * PAGE,
            "{name}"
        );
        assert_eq!(
            (completion.packets_completed, completion.bytes_transferred),
            (1, 0),
            "{name}"
        );
        model.check(&rig);
    }
    // A reset forgets every mapping.
    rig.engine.reset();
    model.gart.fill(None);
    let completion = rig.submit(&packet_bytes(transfer(
        16,
        in_aperture(41 * PAGE),
        in_vram(0),
    )));
    assert_eq!(completion.fault(), unmapped_at(0, 41));
    model.check(&rig);
}
