//! Helpers every paging topic shares: the default layout, DMA buffers, submissions that must
//! succeed, the status page, events, and the long submissions that preemption, reset and the VM
//! lifecycle stop part way.

use std::time::{Duration, Instant};

use wddm_gpu_abi::build::{self, fill, transfer, Adl, DmaBufferBuilder, Endpoint};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_RESP_EVENT, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::packet::{
    WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2, WddmGpuPacketTransfer,
    WddmGpuPacketUnmapAperture,
};
use wddm_gpu_abi::status::{
    WddmGpuRespEvent, WddmGpuStatusPage, WDDM_GPU_EVENT_FENCE, WDDM_GPU_FAULT_RING_ENTRIES,
    WDDM_GPU_FAULT_RING_OFFSET, WDDM_GPU_STATUS_MAGIC, WDDM_GPU_STATUS_PAGE_SIZE,
    WDDM_GPU_STATUS_VERSION,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit};
pub use wddm_gpu_frontend_kit::requests::{status, unknown_packet};
use wddm_gpu_frontend_kit::{
    backend_process::TIMEOUT,
    harness::{Harness, Pending, DATA, DMA_BUFFER, FRAME_LISTS, PAGE, STATUS_PAGE, VRAM_SIZE},
    pattern::pattern,
    requests::{frames, segment, submit_command},
};
use zerocopy::{Immutable, IntoBytes};

/// The default layout: segment 1 is CPU-visible VRAM, segment 2 a cache-coherent aperture, both
/// with `BaseAddress` 0 (checked by [`ready`]).
pub const VRAM_SEGMENT: u32 = 1;
pub const APERTURE_SEGMENT: u32 = 2;

/// VRAM for the long-submission tests: big enough for 16 MiB transfers.
pub const BIG_VRAM: u64 = 64 << 20;
/// One long packet: 16 MiB VRAM -> VRAM, from [`LONG_SOURCE`] to [`LONG_DESTINATION`].
pub const LONG_LENGTH: u64 = 16 << 20;
pub const LONG_SOURCE: u64 = 0;
pub const LONG_DESTINATION: u64 = 32 << 20;
/// Packets of a long submission: tens of GiB, seconds of copying unless stopped.
pub const LONG_PACKETS: u32 = 4000;
/// Guest RAM for long DMA buffers (256 KiB each), far from every other harness area.
pub const LONG_DMA: u64 = 0x300_0000;
pub const QUEUED_DMA: u64 = 0x380_0000;

/// Bytes of one TRANSFER packet: the offset of the packet after a one-TRANSFER prefix, and of
/// the packet a long submission stopped at.
pub const AFTER_PREFIX: u32 = wddm_gpu_abi::size_of_u32::<WddmGpuPacketTransfer>();

/// Bytes written around VRAM destinations and into unused frames.
pub const SENTINEL: u8 = 0xee;
/// Bytes of guard checked on each side of a VRAM range.
pub const GUARD: u64 = 256;

/// A guest frame number in the free data area.
pub fn frame(index: u64) -> u64 {
    DATA / PAGE + index
}

/// `n` frames of block `block` (16 frames per block), out of order and with one physically
/// contiguous pair, so the engine's run coalescing and its page-by-page walks are both used.
pub fn scattered(block: u64, n: usize) -> Vec<u64> {
    const ORDER: [u64; 8] = [6, 2, 3, 11, 0, 9, 14, 5];
    assert!(n <= ORDER.len());
    ORDER[..n].iter().map(|i| frame(block * 16 + i)).collect()
}

/// Compares byte for byte, reporting the first difference.
#[track_caller]
pub fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if actual == expected {
        return;
    }
    if let Some(at) = actual.iter().zip(expected).position(|(a, e)| a != e) {
        let end = (at + 16).min(actual.len());
        panic!(
            "{what}: first difference at byte {at:#x}: {:02x?} instead of {:02x?}",
            &actual[at..end],
            &expected[at..end]
        );
    }
}

// ---- packets: `wddm_gpu_abi::build` bound to the default layout's aperture ----

/// MAP_APERTURE of `page_count` aperture pages from `first_page`, from entry `frame_offset` of
/// the `frame_count`-entry list at `list`.
pub fn map(
    first_page: u64,
    page_count: u64,
    list: u64,
    frame_count: u32,
    frame_offset: u32,
) -> WddmGpuPacketMapAperture {
    build::map_aperture(
        APERTURE_SEGMENT,
        0,
        first_page,
        page_count,
        list,
        frame_count,
        frame_offset,
    )
}

/// MAP_APERTURE2 of `page_count` aperture pages from `first_page`, from page `adl_offset` of
/// `adl`.
pub fn map2(
    first_page: u64,
    page_count: u64,
    adl: Adl,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    build::map_aperture2(APERTURE_SEGMENT, 0, first_page, page_count, adl, adl_offset)
}

/// UNMAP_APERTURE of `page_count` aperture pages from `first_page`, onto `dummy_page`.
pub fn unmap(first_page: u64, page_count: u64, dummy_page: u64) -> WddmGpuPacketUnmapAperture {
    build::unmap_aperture(APERTURE_SEGMENT, first_page, page_count, dummy_page)
}

/// A DMA buffer being built ([`DmaBufferBuilder`]) and the packets in it.
#[derive(Clone, Default)]
pub struct Dma {
    buffer: DmaBufferBuilder,
    pub packets: u32,
}

impl Dma {
    /// Appends a packet; returns its offset.
    pub fn push<T: IntoBytes + Immutable>(&mut self, packet: &T) -> u32 {
        self.packets += 1;
        self.buffer.push(packet)
    }

    pub fn len(&self) -> u32 {
        self.buffer.len()
    }

    pub fn bytes(&self) -> &[u8] {
        self.buffer.bytes()
    }
}

/// Writes `dma` at [`DMA_BUFFER`] and submits all of it; waits for the completion.
pub fn submit_dma(h: &mut Harness, dma: &Dma, fence: u32) -> WddmGpuRespSubmit {
    assert!(dma.bytes().len() <= 0x1_0000, "DMA buffer area is 64 KiB");
    h.write_ram(DMA_BUFFER, dma.bytes());
    let response = h.submit(&submit_command(DMA_BUFFER, dma.len(), fence));
    assert_eq!(response.submission_fence_id, fence, "{response:?}");
    response
}

/// Like [`submit_dma`], and every packet must have executed.
#[track_caller]
pub fn submit_ok(h: &mut Harness, dma: &Dma, fence: u32) -> WddmGpuRespSubmit {
    let response = submit_dma(h, dma, fence);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.packets_completed, dma.packets, "{response:?}");
    assert_eq!(
        (response.fault_packet_offset, response.fault_address),
        (0, 0),
        "{response:?}"
    );
    response
}

/// Submits `packet` alone with `fence`; it must execute (see [`submit_ok`]).
#[track_caller]
pub fn submit_one_ok<T: IntoBytes + Immutable>(
    h: &mut Harness,
    packet: &T,
    fence: u32,
) -> WddmGpuRespSubmit {
    let mut dma = Dma::default();
    dma.push(packet);
    submit_ok(h, &dma, fence)
}

/// Writes `data` into VRAM at `from` and copies it to `to` with one TRANSFER submitted with
/// `fence`, which must execute.
#[track_caller]
pub fn copy_from_vram(h: &mut Harness, data: &[u8], from: u64, to: Endpoint, fence: u32) {
    h.write_vram(from, data);
    submit_one_ok(
        h,
        &transfer(data.len() as u64, segment(VRAM_SEGMENT, from), to),
        fence,
    );
}

/// Submits `packet` alone with `fence`; the submission must end with `expected`.
#[track_caller]
pub fn submit_alone<T: IntoBytes + Immutable>(
    h: &mut Harness,
    packet: &T,
    fence: u32,
    expected: SubmitStatus,
) -> WddmGpuRespSubmit {
    let mut dma = Dma::default();
    dma.push(packet);
    let response = submit_dma(h, &dma, fence);
    assert_eq!(status(&response), Some(expected), "{response:?}");
    response
}

/// A read through aperture page 8 must fault as unmapped (the GART was cleared).
#[track_caller]
pub fn assert_aperture_page_8_unmapped(h: &mut Harness, fence: u32) -> WddmGpuRespSubmit {
    let read = transfer(
        0x10,
        segment(APERTURE_SEGMENT, 8 * PAGE),
        segment(VRAM_SEGMENT, 0x1000),
    );
    submit_alone(h, &read, fence, SubmitStatus::UnmappedAperture)
}

/// Maps aperture pages `first_page..` to `frames` (one MAP_APERTURE, list written at `list`).
pub fn map_pages(h: &mut Harness, first_page: u64, frames: &[u64], list: u64, fence: u32) {
    h.write_frame_list(list, frames);
    submit_one_ok(
        h,
        &map(
            first_page,
            frames.len() as u64,
            list,
            u32::try_from(frames.len()).unwrap(),
            0,
        ),
        fence,
    );
}

/// A backend with the default 16 MiB of VRAM, checked to have the default layout.
pub fn ready(name: &str) -> Harness {
    ready_with_vram(name, VRAM_SIZE)
}

pub fn ready_with_vram(name: &str, vram_size: u64) -> Harness {
    let mut h = Harness::ready_with_vram(name, vram_size);
    let capset = h.capset();
    let vram = capset.segment(VRAM_SEGMENT);
    assert_eq!((vram.base_address, vram.size), (0, vram_size));
    let aperture = capset.segment(APERTURE_SEGMENT);
    assert_eq!(aperture.base_address, 0);
    assert!(aperture.size >= 1 << 20, "{aperture:?}");
    h
}

/// Registers the status page at [`STATUS_PAGE`] (filled with garbage first) and checks the
/// initial state the device writes: header, zeroed counters, zeroed ring.
pub fn register_status_page(h: &mut Harness) -> WddmGpuStatusPage {
    h.write_ram(STATUS_PAGE, &[0xa5; WDDM_GPU_STATUS_PAGE_SIZE as usize]);
    let reply = h.register_status_page(STATUS_PAGE);
    assert_eq!(
        reply.bytes,
        WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_NODATA).as_bytes(),
        "{reply:?}"
    );
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(page.magic, WDDM_GPU_STATUS_MAGIC);
    assert_eq!(page.version, WDDM_GPU_STATUS_VERSION);
    assert_eq!(page.fault_ring_offset, WDDM_GPU_FAULT_RING_OFFSET);
    assert_eq!(page.fault_ring_entries, WDDM_GPU_FAULT_RING_ENTRIES);
    assert_eq!(
        (page.fault_head, page.fault_tail, page.faults_dropped),
        (0, 0, 0)
    );
    assert_eq!(
        (
            page.completed_fence,
            page.submissions_completed,
            page.events_dropped
        ),
        (0, 0, 0)
    );
    assert_eq!((page.virtual_completed_fence, page.reserved), (0, [0; 6]));
    let header_size = std::mem::size_of::<WddmGpuStatusPage>();
    let rest = h.read_ram(
        STATUS_PAGE + header_size as u64,
        WDDM_GPU_STATUS_PAGE_SIZE as usize - header_size,
    );
    assert!(rest.iter().all(|&b| b == 0), "status page not zeroed");
    page
}

/// The whole status page as the device last wrote it.
pub fn status_page_bytes(h: &Harness) -> Vec<u8> {
    h.read_ram(STATUS_PAGE, WDDM_GPU_STATUS_PAGE_SIZE as usize)
}

/// A WAIT_EVENT answer must be exactly `expected` with the EVENT header.
#[track_caller]
pub fn assert_event(h: &mut Harness, pending: Pending, mut expected: WddmGpuRespEvent) {
    let event = h.wait_event(pending);
    expected.hdr = WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT);
    assert_eq!(event, expected);
}

/// A WAIT_EVENT answer must be exactly the FENCE event of `fence_id`.
#[track_caller]
pub fn assert_fence_event(h: &mut Harness, pending: Pending, fence_id: u32) {
    assert_event(
        h,
        pending,
        WddmGpuRespEvent {
            kind: WDDM_GPU_EVENT_FENCE,
            fence_id,
            ..Default::default()
        },
    );
}

/// Small frames -> VRAM transfer that must succeed with `fence`, and be the latest completed
/// fence on the status page when one is registered (`page`).
pub fn assert_next_submission_works(h: &mut Harness, fence: u32, page: bool) {
    let data = pattern(u64::from(fence), 0x180);
    let source = frame(250);
    h.write_ram(source * PAGE + 0x40, &data);
    h.write_frame_list(FRAME_LISTS + 0xf000, &[source]);
    let destination = 0x0e_0000;
    h.write_vram(destination, &[0; 0x180]);
    let response = submit_one_ok(
        h,
        &transfer(
            data.len() as u64,
            frames(FRAME_LISTS + 0xf000, 1, 0x40),
            segment(VRAM_SEGMENT, destination),
        ),
        fence,
    );
    assert_eq!(response.bytes_transferred, data.len() as u64);
    assert_bytes(
        &h.read_vram(destination, data.len()),
        &data,
        "next submission",
    );
    if page {
        assert_eq!(h.status_page(STATUS_PAGE).completed_fence, fence);
    }
}

// ---- long submissions: preemption, reset, virtio reset ----

/// Posts a submission of `extra` packets (if any) and then [`LONG_PACKETS`] 16 MiB VRAM ->
/// VRAM transfers from a DMA buffer at `gpa`, after marking the source so that
/// [`wait_until_running`] sees the copy start.
pub fn long_submission(h: &mut Harness, gpa: u64, fence: u32, extra: Option<Dma>) -> Pending {
    let mut dma = extra.unwrap_or_default();
    let packet = transfer(
        LONG_LENGTH,
        segment(VRAM_SEGMENT, LONG_SOURCE),
        segment(VRAM_SEGMENT, LONG_DESTINATION),
    );
    for _ in 0..LONG_PACKETS {
        dma.push(&packet);
    }
    // Touch both ranges first, so the copy is not slowed by first-use page faults.
    h.write_vram(
        LONG_SOURCE,
        &vec![0x3c; usize::try_from(LONG_LENGTH).unwrap()],
    );
    h.write_vram(
        LONG_DESTINATION,
        &vec![0; usize::try_from(LONG_LENGTH).unwrap()],
    );
    h.write_vram(LONG_SOURCE, &pattern(0x10e, 64));
    h.write_ram(gpa, dma.bytes());
    h.post_submit(&submit_command(gpa, dma.len(), fence))
}

/// For the resets: a backend with [`BIG_VRAM`], the status page registered, aperture pages 8
/// and 9 mapped (with `fence`), a WAIT_EVENT posted, and a long submission (`fence + 1`)
/// running. Returns the harness, the WAIT_EVENT and the long submission.
pub fn running_over_a_mapped_gart(name: &str, fence: u32) -> (Harness, Pending, Pending) {
    let mut h = ready_with_vram(name, BIG_VRAM);
    register_status_page(&mut h);
    map_pages(&mut h, 8, &scattered(0, 2), FRAME_LISTS, fence);
    let event = h.post_wait_event();
    let long = long_submission(&mut h, LONG_DMA, fence + 1, None);
    wait_until_running(&h);
    (h, event, long)
}

/// Waits (bounded) until the long submission's first bytes reached the destination: the
/// engine is executing it.
pub fn wait_until_running(h: &Harness) -> Duration {
    let start = Instant::now();
    let marker = pattern(0x10e, 64);
    while h.read_vram(LONG_DESTINATION, 64) != marker {
        assert!(
            start.elapsed() < TIMEOUT,
            "the long submission never started:\n{}",
            h.backend.log()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    start.elapsed()
}

/// A small submission (two FILLs of [`QUEUED_AREA`]) to queue behind a long one.
pub const QUEUED_AREA: u64 = 60 << 20;
pub fn queued_submission(h: &mut Harness, fence: u32) -> (Pending, WddmGpuCmdSubmit) {
    let mut dma = Dma::default();
    dma.push(&fill(
        0x0bad_f00d,
        0x100,
        segment(VRAM_SEGMENT, QUEUED_AREA),
    ));
    dma.push(&fill(
        0x0bad_f00d,
        0x100,
        segment(VRAM_SEGMENT, QUEUED_AREA + 0x100),
    ));
    h.write_ram(QUEUED_DMA, dma.bytes());
    h.write_vram(QUEUED_AREA, &[SENTINEL; 0x200]);
    let cmd = submit_command(QUEUED_DMA, dma.len(), fence);
    (h.post_submit(&cmd), cmd)
}

#[track_caller]
pub fn assert_stopped(response: &WddmGpuRespSubmit, fence: u32, expected: SubmitStatus) {
    assert_eq!(response.hdr.type_, WDDM_GPU_RESP_SUBMIT);
    assert_eq!(response.submission_fence_id, fence);
    assert_eq!(status(response), Some(expected), "{response:?}");
    assert_eq!(response.fault_address, 0, "{response:?}");
}

/// The running one stopped part way: whole packets counted with the whole 1 MiB chunks the
/// stopped one moved, stopped at the next one.
#[track_caller]
pub fn assert_stopped_part_way(response: &WddmGpuRespSubmit, fence: u32, expected: SubmitStatus) {
    assert_stopped(response, fence, expected);
    assert!(
        response.packets_completed < LONG_PACKETS,
        "ran to the end: {response:?}"
    );
    let part = response
        .bytes_transferred
        .checked_sub(u64::from(response.packets_completed) * LONG_LENGTH);
    assert!(
        part.is_some_and(|part| part < LONG_LENGTH && part % (1 << 20) == 0),
        "{response:?}"
    );
    assert_eq!(
        response.fault_packet_offset,
        response.packets_completed * AFTER_PREFIX,
        "{response:?}"
    );
}

// ---- VM lifecycle: a ring stop is a pause, not a reset ----

/// The backend log must have said `what` (it logs every pause, resume and reset).
#[track_caller]
pub fn assert_logged(h: &Harness, what: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while !h.backend.log().contains(what) {
        assert!(
            Instant::now() < deadline,
            "the backend never logged {what:?}:\n{}",
            h.backend.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
