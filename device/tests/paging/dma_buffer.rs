//! DMA buffers placed in segments: read through the GART from the aperture, and from VRAM.

use wddm_gpu_abi::build::{self, fill, transfer};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use wddm_gpu_frontend_kit::{
    harness::{FRAME_LISTS, PAGE, PAGE_USIZE, VRAM_SIZE},
    pattern::pattern,
    requests::{frames, segment, submit_command},
};

use crate::common::*;
use crate::place::*;

/// A paging submission of `[0, size)` of the DMA buffer at `address` in segment `segment_id`.
fn in_segment(segment_id: u32, address: u64, size: u32, fence: u32) -> WddmGpuCmdSubmit {
    let mut cmd = submit_command(address, size, fence);
    cmd.dma_buffer_segment_id = segment_id;
    cmd
}

#[test]
fn dma_buffer_in_the_aperture_is_read_through_the_gart() {
    let mut h = ready("dma-aperture");
    // The buffer starts 0x80 bytes before the end of aperture page 50 and runs into page 51:
    // the two pages map frames that are far apart, out of order.
    let backing = [frame(90), frame(33)];
    map_pages(&mut h, 50, &backing, FRAME_LISTS, 1);
    let data = pattern(50, 0x300);
    let source = frame(120);
    h.write_ram(source * PAGE + 0x10, &data);
    h.write_frame_list(FRAME_LISTS + 0x100, &[source]);
    h.write_vram(0x10_0000, &vec![SENTINEL; 0x500]);
    let mut dma = Dma::default();
    dma.push(&transfer(
        data.len() as u64,
        frames(FRAME_LISTS + 0x100, 1, 0x10),
        segment(VRAM_SEGMENT, 0x10_0100),
    ));
    dma.push(&fill(0xa1b2_c3d4, 0x20, segment(VRAM_SEGMENT, 0x10_0000)));
    dma.push(&build::fence(0x33));
    let place = Place::Aperture {
        address: 50 * PAGE + 0xf80,
        frames: backing.to_vec(),
    };
    place.write(&h, dma.bytes());
    let cmd = in_segment(APERTURE_SEGMENT, place_address(&place), dma.len(), 2);
    let response = h.submit(&cmd);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, 3);
    assert_eq!(response.bytes_transferred, data.len() as u64 + 0x20);
    let mut expected: Vec<u8> = [0xd4u8, 0xc3, 0xb2, 0xa1].repeat(8);
    expected.extend(vec![SENTINEL; 0xe0]);
    expected.extend_from_slice(&data);
    expected.extend(vec![SENTINEL; 0x100]);
    assert_bytes(&h.read_vram(0x10_0000, 0x500), &expected, "VRAM");

    // start/end offsets apply inside the segment buffer too: only the FILL.
    h.write_vram(0x10_0000, &vec![SENTINEL; 0x500]);
    let mut only_fill = cmd;
    only_fill.start_offset = 64;
    only_fill.end_offset = 64 + 48;
    only_fill.submission_fence_id = 3;
    let response = h.submit(&only_fill);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, 1);
    let mut expected: Vec<u8> = [0xd4u8, 0xc3, 0xb2, 0xa1].repeat(8);
    expected.extend(vec![SENTINEL; 0x4e0]);
    assert_bytes(
        &h.read_vram(0x10_0000, 0x500),
        &expected,
        "VRAM (FILL only)",
    );

    // Every page of the buffer must be mapped: one that reaches page 52 is refused.
    let response = h.submit(&in_segment(APERTURE_SEGMENT, 52 * PAGE - 0x40, 0x80, 4));
    assert_eq!(
        status(&response),
        Some(SubmitStatus::UnmappedAperture),
        "{response:?}"
    );
    assert_eq!(response.fault_address, 52 * PAGE);
    assert_eq!(response.packets_completed, 0);
}

#[test]
fn dma_buffer_in_vram_executes() {
    let mut h = ready("dma-vram");
    let list = scattered(0, 2);
    for frame in &list {
        h.write_ram(frame * PAGE, &[SENTINEL; PAGE_USIZE]);
    }
    h.write_frame_list(FRAME_LISTS, &list);
    let data = pattern(60, 0x1400);
    h.write_vram(0x20_0000, &data);
    let mut dma = Dma::default();
    dma.push(&transfer(
        data.len() as u64,
        segment(VRAM_SEGMENT, 0x20_0000),
        frames(FRAME_LISTS, 2, 0x300),
    ));
    dma.push(&fill(0x5555_aaaa, 0x10, segment(VRAM_SEGMENT, 0x30_0000)));
    let buffer = 0x80_0100;
    h.write_vram(buffer, dma.bytes());
    let response = h.submit(&in_segment(VRAM_SEGMENT, buffer, dma.len(), 7));
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, 2);
    Place::Frames {
        list: FRAME_LISTS,
        frames: list,
        byte_offset: 0x300,
    }
    .check(&h, &data, "frames");
    assert_eq!(
        h.read_vram(0x30_0000, 0x10),
        [0xaa, 0xaa, 0x55, 0x55].repeat(4)
    );

    // A buffer that runs past the segment is not reachable.
    let response = h.submit(&in_segment(VRAM_SEGMENT, VRAM_SIZE - 0x20, 0x40, 8));
    assert_eq!(
        status(&response),
        Some(SubmitStatus::BadDmaBuffer),
        "{response:?}"
    );
    assert_eq!(response.fault_address, VRAM_SIZE - 0x20);
}
