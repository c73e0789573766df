//! A bad TRANSFER or a bad command faults with its status and changes nothing.

use wddm_gpu_abi::build::transfer;
use wddm_gpu_abi::packet::WDDM_GPU_MAX_FRAME_LIST_ENTRIES;
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};

use super::refusals::assert_fault;
use crate::testkit::engine_rig::{
    command, scattered, status, Rig, DMA, PAGE, RAM_SIZE, VRAM_GPA, VRAM_SIZE,
};
use crate::testkit::packets::{frames, in_vram, packet_bytes, seg};

#[test]
fn every_bad_packet_faults_with_its_status_and_changes_nothing() {
    let target = in_vram(0x10_0000);
    let list_in_ram = |rig: &Rig| rig.list(0, &scattered(4));
    assert_fault(
        "unknown_opcode",
        |_| {
            let mut p = packet_bytes(transfer(16, in_vram(0), target));
            p[0] = 0x77;
            p
        },
        SubmitStatus::UnknownOpcode,
    );
    for (name, size) in [
        ("size0", 0u32),
        ("size_unaligned", 68),
        ("size_past_end", 72),
        ("size_huge", 8192),
    ] {
        assert_fault(
            name,
            move |_| {
                let mut p = transfer(16, in_vram(0), target);
                p.header.size = size;
                packet_bytes(p)
            },
            SubmitStatus::BadPacketHeader,
        );
    }
    assert_fault(
        "bad_segment",
        |_| packet_bytes(transfer(16, seg(9, 0), target)),
        SubmitStatus::BadSegment,
    );
    assert_fault(
        "segment_zero_is_frames",
        |_| packet_bytes(transfer(16, in_vram(0), frames(u64::MAX - 7, 1, 0))),
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "segment_range",
        |_| packet_bytes(transfer(2 * PAGE, in_vram(VRAM_SIZE - PAGE), target)),
        SubmitStatus::SegmentRange,
    );
    assert_fault(
        "frame_list_too_long",
        |rig| {
            let count = WDDM_GPU_MAX_FRAME_LIST_ENTRIES + 1;
            packet_bytes(transfer(16, frames(list_in_ram(rig), count, 0), target))
        },
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "frame_list_too_short",
        |rig| packet_bytes(transfer(4 * PAGE, frames(list_in_ram(rig), 4, 1), target)),
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "frame_list_outside_ram",
        |_| packet_bytes(transfer(16, frames(RAM_SIZE - 4, 1, 0), target)),
        SubmitStatus::BadFrameList,
    );
    // One frame each: beyond RAM, a frame number whose address overflows, in the VRAM window.
    for (name, frame, expected) in [
        (
            "frame_beyond_ram",
            0x7_0000_0000,
            SubmitStatus::FrameNotInRam,
        ),
        ("frame_pfn_overflow", u64::MAX, SubmitStatus::FrameNotInRam),
        (
            "frame_in_vram",
            VRAM_GPA / PAGE + 3,
            SubmitStatus::FrameInVram,
        ),
    ] {
        assert_fault(
            name,
            move |rig| packet_bytes(transfer(PAGE, frames(rig.list(0, &[frame]), 1, 0), target)),
            expected,
        );
    }
    assert_fault(
        "frame_in_vram_late_in_list",
        |rig| {
            let mut list = scattered(8);
            list[6] = VRAM_GPA / PAGE;
            packet_bytes(transfer(8 * PAGE, frames(rig.list(0, &list), 8, 0), target))
        },
        SubmitStatus::FrameInVram,
    );
    assert_fault(
        "length_overflow",
        |rig| packet_bytes(transfer(u64::MAX, frames(list_in_ram(rig), 4, 16), target)),
        SubmitStatus::LengthOverflow,
    );
    assert_fault(
        "segment_address_overflow",
        |_| packet_bytes(transfer(u64::MAX - 8, in_vram(0x10), target)),
        SubmitStatus::LengthOverflow,
    );
    assert_fault(
        "reserved_field",
        |_| {
            let mut p = transfer(16, in_vram(0), target);
            p.source.reserved = 1;
            packet_bytes(p)
        },
        SubmitStatus::ReservedField,
    );
    assert_fault(
        "unmapped_aperture_endpoint",
        |_| packet_bytes(transfer(16, seg(2, 0), target)),
        SubmitStatus::UnmappedAperture,
    );
}

#[test]
fn bad_commands_fault_before_any_packet() {
    let mut rig = Rig::new("commands");
    let good = packet_bytes(transfer(16, in_vram(0), in_vram(0x8000)));
    rig.ram_write(DMA, &good);
    let size = u32::try_from(good.len()).unwrap();
    let base = WddmGpuCmdSubmit {
        flags: 0,
        submission_fence_id: 42,
        ..command(0, DMA, size, 0, size)
    };
    let cases: [(&str, WddmGpuCmdSubmit, SubmitStatus); 8] = [
        (
            "end_past_size",
            WddmGpuCmdSubmit {
                end_offset: 65,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "start_after_end",
            WddmGpuCmdSubmit {
                start_offset: 32,
                end_offset: 16,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "unknown_flag",
            WddmGpuCmdSubmit {
                flags: 0x80,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "node",
            WddmGpuCmdSubmit {
                node_ordinal: 1,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "beyond_ram",
            WddmGpuCmdSubmit {
                dma_buffer_address: 0x7_0000_0000,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "in_vram",
            WddmGpuCmdSubmit {
                dma_buffer_address: VRAM_GPA,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "address_overflow",
            WddmGpuCmdSubmit {
                dma_buffer_address: u64::MAX - 8,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "in_unmapped_aperture",
            WddmGpuCmdSubmit {
                dma_buffer_segment_id: 2,
                ..base
            },
            SubmitStatus::UnmappedAperture,
        ),
    ];
    for (name, cmd, expected) in cases {
        let completion = rig.execute(&cmd, &mut ());
        assert_eq!(status(&completion), Some(expected), "{name}");
        assert_eq!(completion.fence_id, 42, "{name}");
        assert_eq!(completion.packets_completed, 0, "{name}");
    }
    assert_eq!(rig.execute(&base, &mut ()).stop, None);
}
