//! DISCARD_CONTENT, READ_PHYSICAL and WRITE_PHYSICAL check the location and move nothing;
//! FENCE reaches the hooks in order with the other packets.

use wddm_gpu_abi::build::{fence, fill, segment_access, transfer};
use wddm_gpu_abi::packet::{
    WddmGpuPacketSegmentAccess, WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_FENCE, WDDM_GPU_OP_READ_PHYSICAL,
    WDDM_GPU_OP_WRITE_PHYSICAL,
};
use wddm_gpu_abi::submit::SubmitStatus;
use zerocopy::IntoBytes;

use super::hooks::Hooks;
use super::model::Model;
use super::refusals::assert_refused;
use crate::engine::Fault;
use crate::testkit::engine_rig::{data_frame, data_frames, status, Rig, PAGE, VRAM_GPA, VRAM_SIZE};
use crate::testkit::packets::{frames, in_vram, packet_bytes, APERTURE_SEGMENT};

#[test]
fn segment_access_packets_check_the_location_and_move_nothing() {
    let mut rig = Rig::new("access");
    let mut model = Model::new(&rig, 16);
    rig.map_frames(2, &data_frames(&[3, 4]));
    model.map(2, &data_frames(&[3, 4]));
    let mut good = Vec::new();
    for flags in [0, WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE] {
        good.push(segment_access(
            WDDM_GPU_OP_DISCARD_CONTENT,
            1,
            0x1234,
            flags,
        ));
        good.push(segment_access(
            WDDM_GPU_OP_DISCARD_CONTENT,
            1,
            VRAM_SIZE - 1,
            flags,
        ));
    }
    for size in 1..=8 {
        for opcode in [WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL] {
            good.push(segment_access(opcode, 1, VRAM_SIZE - u64::from(size), size));
            good.push(segment_access(opcode, APERTURE_SEGMENT, 3 * PAGE - 4, size));
            // straddles mapped pages 2 and 3
        }
    }
    let packets: Vec<u8> = good.iter().flat_map(|p| p.as_bytes().to_vec()).collect();
    let completion = rig.ok(&packets);
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (u32::try_from(good.len()).unwrap(), 0)
    );
    model.check(&rig);
    assert_eq!(
        rig.entries(0..5),
        [None, None, Some(data_frame(3)), Some(data_frame(4)), None]
    );

    let refuse = |rig: &mut Rig, name: &str, p: WddmGpuPacketSegmentAccess, expected| {
        assert_refused(rig, name, packet_bytes(p), expected);
        model.check(rig);
    };
    for opcode in [WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL] {
        for size in [0, 9, u32::MAX] {
            refuse(
                &mut rig,
                &format!("{opcode} size {size}"),
                segment_access(opcode, 1, 0, size),
                SubmitStatus::ReservedField,
            );
        }
        refuse(
            &mut rig,
            "through an unmapped page",
            segment_access(opcode, APERTURE_SEGMENT, 5 * PAGE, 4),
            SubmitStatus::UnmappedAperture,
        );
        refuse(
            &mut rig,
            "into an unmapped page",
            segment_access(opcode, APERTURE_SEGMENT, 4 * PAGE - 4, 8),
            SubmitStatus::UnmappedAperture,
        );
        refuse(
            &mut rig,
            "past the segment",
            segment_access(opcode, 1, VRAM_SIZE - 4, 8),
            SubmitStatus::SegmentRange,
        );
        refuse(
            &mut rig,
            "bad segment",
            segment_access(opcode, 3, 0, 1),
            SubmitStatus::BadSegment,
        );
    }
    let discard = WDDM_GPU_OP_DISCARD_CONTENT;
    refuse(
        &mut rig,
        "DISCARD flags",
        segment_access(discard, 1, 0, 2),
        SubmitStatus::ReservedField,
    );
    refuse(
        &mut rig,
        "DISCARD on a mapped aperture",
        segment_access(discard, APERTURE_SEGMENT, 2 * PAGE, 0),
        SubmitStatus::WrongSegmentKind,
    );
    refuse(
        &mut rig,
        "DISCARD past the segment",
        segment_access(discard, 1, VRAM_SIZE, 0),
        SubmitStatus::SegmentRange,
    );
    refuse(
        &mut rig,
        "DISCARD bad segment",
        segment_access(discard, 0, 0, 0),
        SubmitStatus::BadSegment,
    );
    let mut flagged = segment_access(discard, 1, 0, 0);
    flagged.header.flags = 1;
    refuse(
        &mut rig,
        "header flags",
        flagged,
        SubmitStatus::ReservedField,
    );
    let mut small = packet_bytes(segment_access(discard, 1, 0, 0));
    small[4] = 16; // size 16 < the 24-byte structure
    assert_refused(
        &mut rig,
        "segment access too small",
        small[..16].to_vec(),
        SubmitStatus::BadPacketHeader,
    );
}

#[test]
fn fences_reach_the_hooks_in_order_with_the_other_packets() {
    let mut rig = Rig::new("fence");
    rig.vram_write(0, &[0x11; 16]);
    let out = rig.list(0, &data_frames(&[9]));
    rig.ram_write(data_frame(9) * PAGE, &[0x22; 16]);
    let mut hooks = Hooks {
        sample: Some((rig.mem.clone(), vec![VRAM_GPA, data_frame(9) * PAGE])),
        ..Default::default()
    };
    let mut bad_fence = fence(14);
    bad_fence.reserved = 1;
    let packets = [
        packet_bytes(fence(10)),
        packet_bytes(fill(0x3333_3333, 16, in_vram(0))),
        packet_bytes(fence(11)),
        packet_bytes(transfer(16, in_vram(0), frames(out, 1, 0))),
        packet_bytes(fence(12)),
        packet_bytes(fence(12)),
        packet_bytes(bad_fence),
        packet_bytes(fence(15)),
    ];
    let offset_of_bad: usize = packets[..6].iter().map(Vec::len).sum();
    let completion = rig.submit_with(&packets.concat(), &mut hooks);
    assert_eq!(
        completion.fault(),
        Some((
            u32::try_from(offset_of_bad).unwrap(),
            Fault::ReservedField("fence.reserved")
        ))
    );
    assert_eq!(completion.fault_opcode, WDDM_GPU_OP_FENCE);
    assert_eq!(completion.packets_completed, 6);
    assert_eq!(completion.bytes_transferred, 32);
    assert_eq!(hooks.fences, [10, 11, 12, 12]);
    assert_eq!(
        hooks.samples,
        [
            vec![0x11, 0x22],
            vec![0x33, 0x22],
            vec![0x33, 0x33],
            vec![0x33, 0x33]
        ]
    );
    // A header flag on FENCE is refused too, and the fence is not signalled.
    let mut flagged = fence(20);
    flagged.header.flags = 1;
    let mut hooks = Hooks::default();
    let completion = rig.submit_with(&packet_bytes(flagged), &mut hooks);
    assert_eq!(status(&completion), Some(SubmitStatus::ReservedField));
    assert!(hooks.fences.is_empty());
}
