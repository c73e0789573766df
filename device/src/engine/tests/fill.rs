//! FILL: the pattern over exactly the range, in BAR and device-only VRAM, and nowhere else.

use wddm_gpu_abi::build::{fill, map_aperture, segment_access, transfer};
use wddm_gpu_abi::packet::{WddmGpuEndpoint, WddmGpuPacketFill, WDDM_GPU_OP_DISCARD_CONTENT};
use wddm_gpu_abi::submit::SubmitStatus;

use super::model::Model;
use super::refusals::assert_refused;
use crate::layout::SegmentKind;
use crate::testkit::engine_rig::{data_frames, Rig, VRAM_SIZE};
use crate::testkit::layouts::NON_COHERENT;
use crate::testkit::packets::{frames, in_aperture, in_vram, packet_bytes, seg, APERTURE_SEGMENT};

#[test]
fn fill_repeats_the_pattern_over_exactly_the_range() {
    let mut rig = Rig::new("fill");
    let mut model = Model::new(&rig, 16);
    let cases: [(u64, u64, u32); 9] = [
        (0x1_0003, 3 * 65536 + 0x1235, 0xA1B2_C3D4),
        (0x9_0001, 1, 0x1122_3344),
        (0x9_0011, 2, 0x5566_7788),
        (0x9_0021, 3, 0x99AA_BBCC),
        (0x9_0031, 5, 0xDDEE_FF00),
        (0xA_0000, 65536 + 2, 0xA1B2_C3D4),
        (0xC_0000, 65536 - 1, 0x0102_0304),
        (0x10_0002, (2 << 20) + 3, 0xDEAD_BEEF),
        (VRAM_SIZE - 7, 7, 0xCAFE_F00D),
    ];
    for (offset, length, pattern) in cases {
        let completion = rig.ok(&packet_bytes(fill(pattern, length, in_vram(offset))));
        assert_eq!(completion.bytes_transferred, length);
        model.fill(offset, length, pattern);
        let head = rig.vram_read(offset, length.min(8) as usize);
        let expected: Vec<u8> = pattern
            .to_le_bytes()
            .iter()
            .cycle()
            .take(head.len())
            .copied()
            .collect();
        assert_eq!(head, expected, "{offset:#x}");
        model.check(&rig);
    }
    // Several FILLs in one buffer, zero length included.
    let completion = rig.ok(&[
        packet_bytes(fill(1, 0, in_vram(0))),
        packet_bytes(fill(0x0403_0201, 70_001, in_vram(0x30_0001))),
        packet_bytes(fill(0xFFFF_FFFF, 9, in_vram(3))),
    ]
    .concat());
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (3, 70_010)
    );
    model.fill(0x30_0001, 70_001, 0x0403_0201);
    model.fill(3, 9, 0xFFFF_FFFF);
    model.check(&rig);
}

#[test]
fn fill_refuses_apertures_frame_lists_and_ranges_outside_the_segment() {
    let mut rig = Rig::new("fill-bad");
    let list = rig.list(0, &data_frames(&[1, 2]));
    rig.ok(&packet_bytes(map_aperture(
        APERTURE_SEGMENT,
        0,
        0,
        2,
        list,
        2,
        0,
    )));
    assert_refused(
        &mut rig,
        "FILL on a mapped aperture",
        packet_bytes(fill(1, 16, in_aperture(0x10))),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL on a frame list",
        packet_bytes(fill(1, 16, frames(list, 2, 0))),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL past the end",
        packet_bytes(fill(1, 11, in_vram(VRAM_SIZE - 10))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL at the end",
        packet_bytes(fill(1, 1, in_vram(VRAM_SIZE))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL overflow",
        packet_bytes(fill(1, u64::MAX, in_vram(1))),
        SubmitStatus::LengthOverflow,
    );
    assert_refused(
        &mut rig,
        "FILL bad segment",
        packet_bytes(fill(1, 1, seg(9, 0))),
        SubmitStatus::BadSegment,
    );
    let p = WddmGpuPacketFill {
        reserved: 1,
        ..fill(1, 16, in_vram(0))
    };
    assert_refused(
        &mut rig,
        "FILL reserved",
        packet_bytes(p),
        SubmitStatus::ReservedField,
    );
    // A FILL destination is a segment address: the frame fields must stay zero.
    type Corruption = fn(&mut WddmGpuEndpoint);
    let corruptions: [(&str, Corruption); 2] = [
        ("FILL endpoint reserved", |e| e.reserved = 1),
        ("FILL endpoint frame_count", |e| e.frame_count = 1),
    ];
    for (name, corrupt) in corruptions {
        let mut p = fill(1, 16, in_vram(0));
        corrupt(&mut p.destination);
        assert_refused(&mut rig, name, packet_bytes(p), SubmitStatus::ReservedField);
    }
}

/// ENGINE BUG (reported): a FILL whose destination is an aperture range that is not (fully)
/// mapped reports UNMAPPED_APERTURE, not WRONG_SEGMENT_KIND. `Engine::fill` (ops.rs) resolves
/// the destination with `resolve_endpoint`, which checks the aperture mapping, before it looks
/// at the segment kind; DISCARD_CONTENT on the same range does report WRONG_SEGMENT_KIND.
#[test]
fn fill_on_an_unmapped_aperture_is_the_wrong_segment_kind() {
    let mut rig = Rig::new("fill-unmapped");
    assert_refused(
        &mut rig,
        "DISCARD on an unmapped aperture",
        packet_bytes(segment_access(
            WDDM_GPU_OP_DISCARD_CONTENT,
            APERTURE_SEGMENT,
            0,
            0,
        )),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL on an unmapped aperture",
        packet_bytes(fill(1, 16, in_aperture(0))),
        SubmitStatus::WrongSegmentKind,
    );
}

#[test]
fn fill_and_transfer_reach_device_only_vram() {
    let mut rig = Rig::with_layout("fill-hidden", NON_COHERENT);
    let SegmentKind::Memory {
        vram_offset,
        bar_offset: None,
    } = rig.layout.segments[2].kind
    else {
        panic!("segment 3 is device-only VRAM");
    };
    assert!(vram_offset >= VRAM_SIZE);
    let base = 0x1_0000_0000u64;
    let before = rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap());
    let length = 70_000 + 3;
    let completion = rig.ok(&packet_bytes(fill(
        0x8899_AABB,
        length,
        seg(3, base + 0x1001),
    )));
    assert_eq!(completion.bytes_transferred, length);
    let got = rig.vram_read(vram_offset + 0x1000, usize::try_from(length).unwrap() + 2);
    assert_eq!(got[0], 0, "guard before");
    assert_eq!(*got.last().unwrap(), 0, "guard after");
    for (i, byte) in got[1..=usize::try_from(length).unwrap()].iter().enumerate() {
        assert_eq!(*byte, 0x8899_AABBu32.to_le_bytes()[i % 4], "byte {i}");
    }
    assert!(
        rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap()) == before,
        "the BAR changed"
    );
    // Out again through VRAM segment 1, byte for byte.
    rig.ok(&packet_bytes(transfer(
        length,
        seg(3, base + 0x1001),
        in_vram(0x2_0001),
    )));
    assert_eq!(
        rig.vram_read(0x2_0001, usize::try_from(length).unwrap()),
        got[1..=usize::try_from(length).unwrap()]
    );
    assert_refused(
        &mut rig,
        "FILL past the device-only end",
        packet_bytes(fill(1, 2, seg(3, base + (2 << 20) - 1))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL below the device-only base",
        packet_bytes(fill(1, 2, seg(3, base - 1))),
        SubmitStatus::SegmentRange,
    );
}
