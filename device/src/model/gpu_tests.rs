//! The device model through its request interface, with replies collected on a channel:
//! submissions on the engine thread, the status page, events, preemption and reset.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestRegionMmap,
    MmapRegion,
};
use wddm_gpu_abi::ctrl::*;
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::status::*;
use wddm_gpu_abi::submit::*;
use zerocopy::{FromBytes, IntoBytes};

use super::*;
use crate::memory::vram::BarMode;

const RAM: u64 = 64 << 20;
const VRAM: u64 = 128 << 20;
const VRAM_GPA: u64 = 0xe000_0000;
const DMA: u64 = 0x40_0000;
const STATUS: u64 = 0x20_0000;
const LISTS: u64 = 0x30_0000;
const DATA: u64 = 0x100_0000;
const WAIT: Duration = Duration::from_secs(20);

struct TestReply {
    room: usize,
    tx: Sender<Vec<u8>>,
}

impl Reply for TestReply {
    fn room(&self) -> usize {
        self.room
    }
    fn send(self: Box<Self>, response: &[u8]) {
        let _ = self.tx.send(response.to_vec());
    }
}

struct Rig {
    gpu: Gpu,
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    path: PathBuf,
    fence: u32,
    bar: Cell<u64>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn packet<T: IntoBytes + zerocopy::Immutable>(value: &T) -> Vec<u8> {
    value.as_bytes().to_vec()
}

fn header(opcode: u16, size: usize) -> WddmGpuPacketHeader {
    WddmGpuPacketHeader {
        opcode,
        flags: 0,
        size: size as u32,
    }
}

fn fill(address: u64, length: u64, pattern: u32) -> Vec<u8> {
    packet(&WddmGpuPacketFill {
        header: header(WDDM_GPU_OP_FILL, 48),
        pattern,
        reserved: 0,
        length,
        destination: WddmGpuEndpoint {
            segment_id: 1,
            address,
            ..Default::default()
        },
    })
}

fn vram_copy(from: u64, to: u64, length: u64) -> Vec<u8> {
    packet(&WddmGpuPacketTransfer {
        header: header(WDDM_GPU_OP_TRANSFER, 64),
        length,
        source: WddmGpuEndpoint {
            segment_id: 1,
            address: from,
            ..Default::default()
        },
        destination: WddmGpuEndpoint {
            segment_id: 1,
            address: to,
            ..Default::default()
        },
    })
}

fn fence_packet(fence_id: u32) -> Vec<u8> {
    packet(&WddmGpuPacketFence {
        header: header(WDDM_GPU_OP_FENCE, 16),
        fence_id,
        reserved: 0,
    })
}

impl Rig {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("wddm-gpu-test-{}-{name}", std::process::id()));
        let vram = Vram::create(&path, VRAM, 0, BarMode::Ivshmem).unwrap();
        let gpu = Gpu::new(SegmentLayout::default_for_vram(VRAM), vram).unwrap();
        let ram = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
        let rig = Self {
            gpu,
            atomic: GuestMemoryAtomic::new(ram),
            path,
            fence: 0,
            bar: Cell::new(0),
        };
        rig.map_bar(VRAM_GPA);
        rig
    }

    /// Announces the VRAM BAR at `address` (as QEMU does after DRIVER_OK), or removes it (0).
    fn map_bar(&self, address: u64) {
        let mut next = (*self.atomic.memory()).clone();
        if self.bar.get() != 0 {
            next = next
                .remove_region(GuestAddress(self.bar.get()), VRAM)
                .unwrap()
                .0;
        }
        if address != 0 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
                .unwrap();
            let region = GuestRegionMmap::new(
                MmapRegion::from_file(FileOffset::new(file, 0), VRAM as usize).unwrap(),
                GuestAddress(address),
            )
            .unwrap();
            next = next.insert_region(std::sync::Arc::new(region)).unwrap();
        }
        self.bar.set(address);
        let _ = self.atomic.lock().map(|guard| guard.replace(next));
        self.gpu.memory_changed(&self.atomic.memory());
    }

    /// One request brought by a kick of its own, as the transport hands them over.
    fn request(&self, bytes: &[u8], room: usize) -> Receiver<Vec<u8>> {
        self.gpu.new_kick();
        self.request_same_kick(bytes, room)
    }

    /// One more request of the kick before.
    fn request_same_kick(&self, bytes: &[u8], room: usize) -> Receiver<Vec<u8>> {
        let (tx, rx) = channel();
        self.gpu.handle(
            bytes,
            Box::new(TestReply { room, tx }),
            self.atomic.memory(),
        );
        rx
    }

    fn post_event(&self) -> Receiver<Vec<u8>> {
        self.request(
            WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT).as_bytes(),
            256,
        )
    }

    fn register_status_page(&self) {
        let cmd = WddmGpuCmdRegisterStatusPage {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
            address: STATUS,
        };
        let response = self.request(cmd.as_bytes(), 64).recv_timeout(WAIT).unwrap();
        assert_eq!(
            WddmGpuCtrlHdr::read_from_prefix(&response).unwrap().0.type_,
            VIRTIO_GPU_RESP_OK_NODATA
        );
    }

    fn status_page(&self) -> WddmGpuStatusPage {
        let mut page = WddmGpuStatusPage::default();
        self.atomic
            .memory()
            .read_slice(page.as_mut_bytes(), GuestAddress(STATUS))
            .unwrap();
        page
    }

    /// Queues a submission of `packets` (written at `DMA + slot * 1 MiB`).
    fn submit(&mut self, packets: &[u8], slot: u64) -> (u32, Receiver<Vec<u8>>) {
        let address = DMA + slot * (1 << 20);
        self.atomic
            .memory()
            .write_slice(packets, GuestAddress(address))
            .unwrap();
        self.fence += 1;
        let cmd = submit_cmd(address, packets.len(), self.fence);
        (self.fence, self.request(cmd.as_bytes(), 64))
    }

    fn vram(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.gpu
            .vram()
            .slice(offset, len)
            .unwrap()
            .copy_to(&mut out[..]);
        out
    }
}

/// A paging submission of the `size` bytes of packets at `address`.
fn submit_cmd(address: u64, size: usize, fence: u32) -> WddmGpuCmdSubmit {
    WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: address,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: size as u32,
        end_offset: size as u32,
        submission_fence_id: fence,
        ..Default::default()
    }
}

fn submit_response(rx: &Receiver<Vec<u8>>) -> WddmGpuRespSubmit {
    WddmGpuRespSubmit::read_from_prefix(&rx.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0
}

fn event(rx: &Receiver<Vec<u8>>) -> WddmGpuRespEvent {
    WddmGpuRespEvent::read_from_prefix(&rx.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0
}

#[test]
fn submissions_complete_on_the_engine_thread_after_the_status_page() {
    let mut rig = Rig::new("complete");
    rig.register_status_page();
    let page = rig.status_page();
    assert_eq!(page.magic, WDDM_GPU_STATUS_MAGIC);
    assert_eq!((page.bar_state, page.bar_address), (1, VRAM_GPA));
    let (fence, rx) = rig.submit(&fill(0x1000, 4096, 0xa5a5_5a5a), 0);
    let response = submit_response(&rx);
    assert_eq!(
        (response.status, response.submission_fence_id),
        (SubmitStatus::Ok as u32, fence)
    );
    assert_eq!(rig.vram(0x1000, 4), 0xa5a5_5a5au32.to_le_bytes());
    let page = rig.status_page();
    assert_eq!(
        (page.completed_fence, page.submissions_completed),
        (fence, 1)
    );
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(stats.submissions.count, 1);
    assert_eq!(stats.requests, 2, "the registration and the submission");
    assert_eq!(stats.refused_requests, 0);
}

#[test]
fn faults_go_to_the_status_page_ring_and_a_posted_event() {
    let mut rig = Rig::new("fault");
    rig.register_status_page();
    let events = rig.post_event();
    let mut bad = fill(0, 16, 1);
    bad[0] = 0x77;
    let packets = [fill(0, 16, 1), bad].concat();
    let (fence, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(response.status, SubmitStatus::UnknownOpcode as u32);
    let delivered = event(&events);
    assert_eq!(delivered.kind, WDDM_GPU_EVENT_FAULT);
    assert_eq!(
        (
            delivered.fault.fence_id,
            delivered.fault.packet_offset,
            delivered.fault.opcode
        ),
        (fence, 48, 0x77)
    );
    let page = rig.status_page();
    assert_eq!((page.fault_head, page.completed_fence), (1, fence));
    let mut record = WddmGpuFaultRecord::default();
    rig.atomic
        .memory()
        .read_slice(
            record.as_mut_bytes(),
            GuestAddress(STATUS + u64::from(WDDM_GPU_FAULT_RING_OFFSET)),
        )
        .unwrap();
    assert_eq!(record, delivered.fault);
    // Nothing posted: the next fault is counted as a dropped event.
    let (_, rx) = rig.submit(&packets, 1);
    submit_response(&rx);
    assert_eq!(rig.status_page().events_dropped, 1);
    assert_eq!(rig.status_page().fault_head, 2);
}

#[test]
fn the_fault_ring_never_overwrites_unconsumed_records() {
    let mut rig = Rig::new("ring");
    rig.register_status_page();
    let mut bad = fill(0, 16, 1);
    bad[0] = 0x77;
    for slot in 0..=u64::from(WDDM_GPU_FAULT_RING_ENTRIES) {
        let (_, rx) = rig.submit(&bad, slot % 4);
        submit_response(&rx);
    }
    let page = rig.status_page();
    assert_eq!(
        (page.fault_head, page.faults_dropped),
        (WDDM_GPU_FAULT_RING_ENTRIES, 1)
    );
}

#[test]
fn fence_packets_complete_posted_events_in_order() {
    let mut rig = Rig::new("fence");
    rig.register_status_page();
    let events = [rig.post_event(), rig.post_event()];
    let packets = [fence_packet(700), fill(0, 64, 3), fence_packet(701)].concat();
    let (_, rx) = rig.submit(&packets, 0);
    submit_response(&rx);
    let fences: Vec<u32> = events
        .iter()
        .map(event)
        .map(|e| {
            assert_eq!(e.kind, WDDM_GPU_EVENT_FENCE);
            e.fence_id
        })
        .collect();
    assert_eq!(fences, [700, 701]);
}

#[test]
fn preempt_stops_long_work_and_returns_queued_work_in_order() {
    let mut rig = Rig::new("preempt");
    rig.register_status_page();
    let (done_fence, rx) = rig.submit(&fill(0, 4096, 9), 0);
    submit_response(&rx);
    // 64 copies of 48 MiB: seconds of work, far more than a preemption needs.
    let long: Vec<u8> = (0..64)
        .flat_map(|_| vram_copy(0, 64 << 20, 48 << 20))
        .collect();
    let (long_fence, long_rx) = rig.submit(&long, 1);
    let (queued_fence, queued_rx) = rig.submit(&fill(0, 16, 1), 2);
    std::thread::sleep(Duration::from_millis(50));
    let preempt = rig.request(
        WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_PREEMPT).as_bytes(),
        64,
    );
    let answer = WddmGpuRespPreempt::read_from_prefix(&preempt.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0;
    assert_eq!(answer.hdr.type_, WDDM_GPU_RESP_PREEMPT);
    assert_eq!(
        (
            answer.preempted_fence,
            answer.last_completed_fence,
            answer.preempted_count
        ),
        (long_fence, done_fence, 2)
    );
    let long_response = submit_response(&long_rx);
    assert_eq!(long_response.status, SubmitStatus::Preempted as u32);
    assert!(long_response.packets_completed < 64, "{long_response:?}");
    let queued = submit_response(&queued_rx);
    assert_eq!(
        (queued.status, queued.submission_fence_id),
        (SubmitStatus::Preempted as u32, queued_fence)
    );
    let page = rig.status_page();
    assert_eq!(
        (
            page.preempted_fence,
            page.last_completed_at_preempt,
            page.completed_fence
        ),
        (long_fence, done_fence, done_fence)
    );
    // The engine runs again: resubmitted work completes.
    let (_, rx) = rig.submit(&fill(0, 16, 2), 3);
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
}

#[test]
fn reset_drops_work_clears_the_gart_and_registration_and_keeps_vram() {
    let mut rig = Rig::new("reset");
    rig.register_status_page();
    let events = rig.post_event();
    let frames: Vec<u8> = (0..4u64)
        .flat_map(|i| (DATA / 4096 + i).to_le_bytes())
        .collect();
    rig.atomic
        .memory()
        .write_slice(&frames, GuestAddress(LISTS))
        .unwrap();
    let map = packet(&WddmGpuPacketMapAperture {
        header: header(WDDM_GPU_OP_MAP_APERTURE, 48),
        segment_id: 2,
        flags: 0,
        first_page: 0,
        page_count: 4,
        frame_list_address: LISTS,
        frame_count: 4,
        frame_offset: 0,
    });
    let (_, rx) = rig.submit(&[map, fill(0x5000, 4096, 0x1234_5678)].concat(), 0);
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
    let long: Vec<u8> = (0..64)
        .flat_map(|_| vram_copy(0x10_0000, 64 << 20, 48 << 20))
        .collect();
    let (_, long_rx) = rig.submit(&long, 1);
    let (_, queued_rx) = rig.submit(&fill(0, 16, 1), 2);
    std::thread::sleep(Duration::from_millis(50));
    let reset = rig.request(WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_RESET).as_bytes(), 64);
    assert_eq!(
        WddmGpuCtrlHdr::read_from_prefix(&reset.recv_timeout(WAIT).unwrap())
            .unwrap()
            .0
            .type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    assert_eq!(submit_response(&long_rx).status, SubmitStatus::Reset as u32);
    assert_eq!(
        submit_response(&queued_rx).status,
        SubmitStatus::Reset as u32
    );
    assert_eq!(event(&events).kind, WDDM_GPU_EVENT_CANCELLED);
    // VRAM kept, GART cleared, status page no longer written.
    assert_eq!(rig.vram(0x5000, 4), 0x1234_5678u32.to_le_bytes());
    let before = rig.status_page();
    let through_aperture = packet(&WddmGpuPacketTransfer {
        header: header(WDDM_GPU_OP_TRANSFER, 64),
        length: 16,
        source: WddmGpuEndpoint {
            segment_id: 2,
            address: 0,
            ..Default::default()
        },
        destination: WddmGpuEndpoint {
            segment_id: 1,
            address: 0,
            ..Default::default()
        },
    });
    let (_, rx) = rig.submit(&through_aperture, 3);
    assert_eq!(
        submit_response(&rx).status,
        SubmitStatus::UnmappedAperture as u32
    );
    assert_eq!(rig.status_page(), before);
}

#[test]
fn bar_changes_update_the_status_page_and_complete_an_event() {
    let rig = Rig::new("bar");
    rig.register_status_page();
    let events = rig.post_event();
    rig.map_bar(0);
    let gone = event(&events);
    assert_eq!(
        (gone.kind, gone.bar_state, gone.bar_generation),
        (WDDM_GPU_EVENT_BAR_CHANGED, 0, 2)
    );
    let events = rig.post_event();
    rig.map_bar(0xd000_0000);
    let moved = event(&events);
    assert_eq!(
        (moved.bar_state, moved.bar_generation, moved.bar_address),
        (1, 3, 0xd000_0000)
    );
    let page = rig.status_page();
    assert_eq!(
        (page.bar_state, page.bar_generation, page.bar_address),
        (1, 3, 0xd000_0000)
    );
}

#[test]
fn status_pages_outside_ram_or_unaligned_are_refused() {
    let rig = Rig::new("badpage");
    for address in [STATUS + 8, RAM, VRAM_GPA] {
        let cmd = WddmGpuCmdRegisterStatusPage {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
            address,
        };
        let response = rig.request(cmd.as_bytes(), 64).recv_timeout(WAIT).unwrap();
        assert_eq!(
            WddmGpuCtrlHdr::read_from_prefix(&response).unwrap().0.type_,
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
            "{address:#x}"
        );
    }
}

#[test]
fn a_fence_packet_is_reported_while_the_rest_of_the_buffer_runs() {
    let mut rig = Rig::new("fence-early");
    rig.register_status_page();
    let events = rig.post_event();
    // A fence, then seconds of copying.
    let mut packets = fence_packet(900);
    packets.extend((0..64).flat_map(|_| vram_copy(0, 64 << 20, 48 << 20)));
    let (_, rx) = rig.submit(&packets, 0);
    let fenced = event(&events);
    assert_eq!((fenced.kind, fenced.fence_id), (WDDM_GPU_EVENT_FENCE, 900));
    assert_eq!(rig.status_page().completed_fence, 900);
    assert!(
        rx.try_recv().is_err(),
        "the submission is still running when its fence is reported"
    );
    // End the long tail quickly.
    let preempt = rig.request(
        WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_PREEMPT).as_bytes(),
        64,
    );
    preempt.recv_timeout(WAIT).unwrap();
    assert_eq!(submit_response(&rx).status, SubmitStatus::Preempted as u32);
}

#[test]
fn short_submissions_are_answered_on_the_calling_thread() {
    let mut rig = Rig::new("inline");
    rig.register_status_page();
    let (fence, rx) = rig.submit(&fence_packet(77), 0);
    // No engine-thread hop: the answer is there when the control queue's call returns.
    let response = WddmGpuRespSubmit::read_from_prefix(&rx.try_recv().unwrap())
        .unwrap()
        .0;
    assert_eq!(
        (response.status, response.submission_fence_id),
        (SubmitStatus::Ok as u32, fence)
    );
    assert_eq!(rig.status_page().completed_fence, fence);
}

#[test]
fn work_past_the_inline_budget_continues_on_the_engine_thread() {
    let mut rig = Rig::new("deferred");
    let big = crate::model::scheduler::INLINE_WORK * 4;
    let mut packets = fill(0, 4096, 0x1111_1111);
    packets.extend(fill(0x1000, 4096, 0x2222_2222));
    packets.extend(fill(0x10_0000, big, 0x3333_3333));
    packets.extend(fill(0x2000, 4096, 0x4444_4444));
    let (fence, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(
        (
            response.status,
            response.submission_fence_id,
            response.packets_completed,
            response.bytes_transferred
        ),
        (SubmitStatus::Ok as u32, fence, 4, 3 * 4096 + big)
    );
    assert_eq!(rig.vram(0, 4), 0x1111_1111u32.to_le_bytes());
    assert_eq!(rig.vram(0x1000, 4), 0x2222_2222u32.to_le_bytes());
    assert_eq!(
        rig.vram(0x10_0000 + big - 4, 4),
        0x3333_3333u32.to_le_bytes()
    );
    assert_eq!(rig.vram(0x2000, 4), 0x4444_4444u32.to_le_bytes());
    // Later short work runs inline again, after the deferred part.
    let (_, rx) = rig.submit(&fill(0x3000, 16, 5), 1);
    assert_eq!(submit_response(&rx).status, SubmitStatus::Ok as u32);
}

#[test]
fn resets_racing_deferred_submissions_never_lose_or_hang_work() {
    let rig = Rig::new("defer-race");
    let mut packets = fence_packet(1);
    packets.extend(fill(0, crate::model::scheduler::INLINE_WORK * 8, 7));
    rig.atomic
        .memory()
        .write_slice(&packets, GuestAddress(DMA))
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rig.gpu.device_reset();
                std::thread::yield_now();
            }
        });
        for fence in 1..=200u32 {
            let cmd = submit_cmd(DMA, packets.len(), fence);
            let rx = rig.request(cmd.as_bytes(), 64);
            // Either answered (done, or stopped by the reset) or dropped with the rings; a
            // lost wake-up would leave the engine stuck and the next submission unanswered.
            if let Ok(bytes) = rx.recv_timeout(WAIT) {
                let response = WddmGpuRespSubmit::read_from_prefix(&bytes).unwrap().0;
                assert_eq!(response.submission_fence_id, fence);
                assert!(
                    [SubmitStatus::Ok as u32, SubmitStatus::Reset as u32]
                        .contains(&response.status),
                    "{response:?}"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Still alive: a last submission completes.
    rig.atomic
        .memory()
        .write_slice(&fence_packet(5), GuestAddress(DMA))
        .unwrap();
    let cmd = submit_cmd(DMA, 16, 1000);
    let response = submit_response(&rig.request(cmd.as_bytes(), 64));
    assert_eq!(response.status, SubmitStatus::Ok as u32);
}

#[test]
fn a_buffer_of_many_small_packets_leaves_the_control_queue_after_the_packet_budget() {
    let mut rig = Rig::new("packet-budget");
    let count = crate::model::scheduler::INLINE_PACKETS as usize * 4;
    let packets: Vec<u8> = (0..count)
        .flat_map(|i| fence_packet(i as u32 + 1))
        .collect();
    let (_, rx) = rig.submit(&packets, 0);
    let response = submit_response(&rx);
    assert_eq!(
        (response.status, response.packets_completed),
        (SubmitStatus::Ok as u32, count as u32)
    );
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(
        (stats.submissions.inline, stats.submissions.engine),
        (0, 1),
        "the rest ran on the engine thread"
    );
}

#[test]
fn the_inline_budget_is_shared_by_every_submission_of_one_kick() {
    let rig = Rig::new("kick-budget");
    let piece = crate::model::scheduler::INLINE_WORK / 4;
    let packets = fill(0, piece, 0x5555_5555);
    rig.atomic
        .memory()
        .write_slice(&packets, GuestAddress(DMA))
        .unwrap();
    let command = |fence: u32| submit_cmd(DMA, packets.len(), fence);
    // Eight submissions in one kick: four fit the kick's inline budget, the rest go to the
    // engine thread, so a ring full of small submissions cannot hold the control queue.
    rig.gpu.new_kick();
    let answers: Vec<_> = (1..=8u32)
        .map(|fence| rig.request_same_kick(command(fence).as_bytes(), 64))
        .collect();
    for (fence, rx) in (1..=8u32).zip(&answers) {
        let response = submit_response(rx);
        assert_eq!(
            (response.status, response.submission_fence_id),
            (SubmitStatus::Ok as u32, fence)
        );
    }
    let stats = rig.gpu.stats().snapshot();
    assert_eq!(
        (stats.submissions.inline, stats.submissions.engine),
        (4, 4),
        "inline versus engine thread"
    );
    // The engine thread answers before it marks itself free; an engine still busy would
    // rightly queue the next submission, so wait for it to be idle first.
    let deadline = std::time::Instant::now() + WAIT;
    while rig.gpu.stats().snapshot().queue_depth.current != 0 {
        assert!(std::time::Instant::now() < deadline, "engine never idle");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The next kick may run inline again.
    let rx = rig.request(command(9).as_bytes(), 64);
    assert!(rx.try_recv().is_ok(), "answered on the calling thread");
}

#[test]
fn a_reset_taking_back_a_deferred_submission_counts_what_ran_inline() {
    let mut rig = Rig::new("drained-deferred");
    for round in 0..300 {
        // A FENCE runs inline; the fill is over the budget and waits for the engine thread.
        let mut packets = fence_packet(round + 1);
        packets.extend(fill(0, crate::model::scheduler::INLINE_WORK * 64, 7));
        let (fence, rx) = rig.submit(&packets, 0);
        // The reset may find it queued (not yet taken by the engine thread) or running.
        let reset = rig.request(WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_RESET).as_bytes(), 64);
        reset.recv_timeout(WAIT).unwrap();
        let response = submit_response(&rx);
        assert_eq!(response.submission_fence_id, fence);
        if response.status == SubmitStatus::Reset as u32 {
            assert!(
                response.packets_completed >= 1,
                "round {round}: the FENCE that ran inline is not counted: {response:?}"
            );
        }
    }
}
