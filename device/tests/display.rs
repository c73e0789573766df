//! The standard virtio-gpu side of the device through the real backend binary: response headers
//! echo the request's fence, the 2D command set answers good and hostile requests, and the
//! display socket QEMU hands over carries what the guest shows.

use std::time::{Duration, Instant};

use wddm_gpu_abi::build::display::{
    attach_backing, backing_entry, get_edid, rect, resource_create_2d, resource_flush, set_scanout,
    transfer_to_host_2d,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCmdSetScanoutVram, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_OK_NODATA,
    WDDM_GPU_CMD_SET_SCANOUT_VRAM, WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_CMD_GET_DISPLAY_INFO, VIRTIO_GPU_RESP_ERR_UNSPEC,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::ctrl::{VIRTIO_GPU_FLAG_FENCE, VIRTIO_GPU_FLAG_INFO_RING_IDX};
use wddm_gpu_abi::display::{
    WddmGpuResourceAttachBacking, VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
    VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM as BGRA, VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM,
    VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID, VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
    VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY, VIRTIO_GPU_RESP_OK_EDID,
};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_VBLANK};
use wddm_gpu_frontend_kit::{
    backend_process::SpawnOptions,
    harness::{Harness, BUFFER_SIZE, DATA, DMA_BUFFER, VRAM_GPA},
    requests::submit_command,
};
use zerocopy::{Immutable, IntoBytes};

const HDR_SIZE: usize = std::mem::size_of::<WddmGpuCtrlHdr>();

/// A request header with a fence.
fn fenced(type_: u32, fence_id: u64, ctx_id: u32, ring_idx: u8) -> WddmGpuCtrlHdr {
    WddmGpuCtrlHdr {
        type_,
        flags: VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX,
        fence_id,
        ctx_id,
        ring_idx,
        padding: [0; 3],
    }
}

/// The response header carries the request's fence fields back, whatever the answer.
fn assert_echoes(response: WddmGpuCtrlHdr, request: WddmGpuCtrlHdr, type_: u32) {
    assert_eq!(response.type_, type_, "{response:?}");
    assert_eq!(response.flags, request.flags, "{response:?}");
    assert_eq!(response.fence_id, request.fence_id, "{response:?}");
    assert_eq!(response.ctx_id, request.ctx_id, "{response:?}");
    assert_eq!(response.ring_idx, request.ring_idx, "{response:?}");
}

#[test]
fn responses_echo_the_request_fence_flag_id_context_and_ring() {
    let mut h = Harness::ready("fence-echo");
    // An answer made at once.
    let request = fenced(VIRTIO_GPU_CMD_GET_DISPLAY_INFO, 0x1234_5678_9abc, 7, 3);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), request, VIRTIO_GPU_RESP_OK_DISPLAY_INFO);
    // An error answer.
    let request = fenced(0xdead_beef, 99, 1, 63);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), request, VIRTIO_GPU_RESP_ERR_UNSPEC);
    // An answer made later, by the engine thread (an empty submission).
    let mut command = submit_command(DMA_BUFFER, 0, 5);
    command.hdr = fenced(command.hdr.type_, 41, 0, 0);
    let reply = h.request(command.as_bytes(), BUFFER_SIZE);
    assert_echoes(reply.hdr(), command.hdr, WDDM_GPU_RESP_SUBMIT);
    // Without a fence nothing is set.
    let request = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO);
    let reply = h.request(request.as_bytes(), BUFFER_SIZE);
    assert_eq!(reply.hdr().flags, 0);
    assert!(reply.bytes.len() > HDR_SIZE);
}

/// A request's bytes.
fn bytes(request: impl IntoBytes + Immutable) -> Vec<u8> {
    request.as_bytes().to_vec()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

/// A 4x2 R8G8B8A8 resource `id` backed at DATA, its pixels transferred, shown on scanout 0 and
/// flushed; returns its pixels.
fn show_resource(h: &mut Harness, id: u32) -> Vec<u8> {
    let pixels: Vec<u8> = (0..8u8)
        .flat_map(|i| [i, 0x10 + i, 0x20 + i, 0xff])
        .collect();
    h.write_ram(DATA, &pixels);
    let whole = rect(0, 0, 4, 2);
    let steps = [
        bytes(resource_create_2d(
            id,
            VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM,
            4,
            2,
        )),
        attach_backing(
            id,
            &[backing_entry(DATA, u32::try_from(pixels.len()).unwrap())],
        ),
        bytes(transfer_to_host_2d(id, whole, 0)),
        bytes(set_scanout(0, id, whole)),
        bytes(resource_flush(id, whole)),
    ];
    for step in steps {
        let reply = h.request(&step, BUFFER_SIZE);
        assert_eq!(
            reply.hdr().type_,
            VIRTIO_GPU_RESP_OK_NODATA,
            "{step:x?}\n{}",
            h.backend.log()
        );
    }
    pixels
}

#[test]
fn edid_hostile_2d_requests_and_a_reset_dropping_resources() {
    let mut h = Harness::ready("display-hostile");
    let reply = h.request(&bytes(get_edid(0)), BUFFER_SIZE);
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_EDID);
    let edid = &reply.bytes[HDR_SIZE + 8..HDR_SIZE + 8 + 128];
    assert_eq!(words(&reply.bytes[HDR_SIZE..HDR_SIZE + 4]), vec![128]);
    assert_eq!(edid.iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0);
    assert_eq!(&edid[..8], &[0, 255, 255, 255, 255, 255, 255, 0]);
    let refused = [
        (bytes(get_edid(1)), VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID),
        (
            bytes(resource_create_2d(5, BGRA, 65535, 65535)),
            VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
        ),
        (
            bytes(resource_create_2d(5, BGRA, 16, 16)),
            VIRTIO_GPU_RESP_OK_NODATA,
        ),
        // Backing in the VRAM window.
        (
            attach_backing(5, &[backing_entry(VRAM_GPA, 4096)]),
            VIRTIO_GPU_RESP_ERR_UNSPEC,
        ),
        // More entries than the request holds.
        (
            bytes(WddmGpuResourceAttachBacking {
                hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING),
                resource_id: 5,
                nr_entries: 1000,
            }),
            VIRTIO_GPU_RESP_ERR_UNSPEC,
        ),
        (
            bytes(set_scanout(3, 5, rect(0, 0, 16, 16))),
            VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            bytes(resource_flush(6, rect(0, 0, 16, 16))),
            VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
        ),
    ];
    for (request, expected) in refused {
        let reply = h.request(&request, BUFFER_SIZE);
        assert_eq!(reply.hdr().type_, expected, "{request:x?}");
    }
    // The whole path answers OK: create, backing, transfer, scanout, flush.
    show_resource(&mut h, 1);
    // A reset drops every resource.
    h.stop_device();
    h.reset_device();
    h.start_device_anew();
    for id in [1, 5] {
        let reply = h.request(&bytes(resource_flush(id, rect(0, 0, 1, 1))), BUFFER_SIZE);
        assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID);
    }
    assert!(h.backend.is_running());
}

fn set_scanout_vram(scanout_id: u32, segment_id: u32, address: u64, pitch: u32) -> Vec<u8> {
    WddmGpuCmdSetScanoutVram {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        scanout_id,
        segment_id,
        address,
        format: 2,
        width: 64,
        height: 16,
        pitch,
    }
    .as_bytes()
    .to_vec()
}

fn next_vblank(h: &mut Harness) -> WddmGpuRespEvent {
    let wait = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT);
    let pending = h.post(wait.as_bytes(), 256);
    let event: WddmGpuRespEvent = h.wait_reply(pending).exact();
    assert_eq!(event.kind, WDDM_GPU_EVENT_VBLANK, "{event:?}");
    event
}

#[test]
fn a_vram_scanout_flips_at_vblanks_reported_at_the_configured_rate() {
    let options = SpawnOptions {
        args: vec!["--vblank-hz".into(), "30".into()],
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("vram-scanout", &options);
    let vram_size = 16 << 20;
    let refused = [
        (
            set_scanout_vram(1, 1, 0, 256),
            VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
        ),
        // The aperture is not VRAM.
        (
            set_scanout_vram(0, 2, 0, 256),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            set_scanout_vram(0, 1, vram_size - 2048, 256),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            set_scanout_vram(0, 1, 0, 255),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            set_scanout_vram(0, 7, 0, 256),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
    ];
    for (request, expected) in refused {
        let reply = h.request(&request, BUFFER_SIZE);
        assert_eq!(reply.hdr().type_, expected, "{request:x?}");
    }
    assert!(h.backend.log().contains("SET_SCANOUT_VRAM on scanout 0"));
    let first_at = 0x1_0000;
    let reply = h.request(&set_scanout_vram(0, 1, first_at, 256), BUFFER_SIZE);
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_NODATA);
    let first = next_vblank(&mut h);
    assert_eq!(
        (
            first.scanout_id,
            first.scanout_segment_id,
            first.scanout_address
        ),
        (0, 1, first_at)
    );
    // 15 more at 30 Hz: about half a second, counters rising.
    let started = Instant::now();
    let mut last = first.vblank_count;
    for _ in 0..15 {
        let event = next_vblank(&mut h);
        assert!(event.vblank_count > last);
        last = event.vblank_count;
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(5),
        "15 vblanks at 30 Hz took {elapsed:?}"
    );
    // The flip shows in the event of the vblank it takes effect at.
    let second_at = 0x40_0000;
    let reply = h.request(&set_scanout_vram(0, 1, second_at, 256), BUFFER_SIZE);
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_NODATA);
    let flipped = (0..3)
        .map(|_| next_vblank(&mut h))
        .find(|event| event.scanout_address == second_at)
        .expect("the flip within 3 vblanks");
    assert!(flipped.vblank_count > last);
    assert!(h.backend.is_running());
}
