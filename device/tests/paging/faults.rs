//! One test per fault status the device can report: the completion, the status page's fault
//! ring, the FAULT event, nothing written but the valid prefix, and a device that carries on.

use wddm_gpu_abi::build::{fill, transfer};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_UNSPEC, WDDM_GPU_RESP_SUBMIT};
use wddm_gpu_abi::packet::{
    WDDM_GPU_MAX_FRAME_LIST_ENTRIES, WDDM_GPU_OP_FILL, WDDM_GPU_OP_TRANSFER,
};
use wddm_gpu_abi::status::{
    WddmGpuFaultRecord, WddmGpuRespEvent, WddmGpuStatusPage, WDDM_GPU_EVENT_FAULT,
    WDDM_GPU_FAULT_RING_ENTRIES,
};
use wddm_gpu_abi::submit::{
    SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit, WDDM_GPU_MAX_DMA_BUFFER_SIZE,
};
use wddm_gpu_frontend_kit::{
    harness::{
        Harness, DATA, DMA_BUFFER, FRAME_LISTS, PAGE, RAM_SIZE, STATUS_PAGE, VRAM_GPA, VRAM_SIZE,
    },
    pattern::pattern,
    requests::{frames, segment, submit_command},
};
use zerocopy::{Immutable, IntoBytes};

use crate::common::*;

/// Where the first, valid packet of a faulting submission copies to (and from).
const PREFIX_VRAM: u64 = 0x0f_0000;
const PREFIX_LENGTH: u64 = 0x100;
const PREFIX_LIST: u64 = FRAME_LISTS + 0xe000;

/// A valid TRANSFER (frames -> VRAM) to put before the faulting packet: the fault must not undo
/// it, and must be reported at the next packet's offset.
fn push_prefix(h: &Harness, dma: &mut Dma) {
    let source = frame(240);
    h.write_ram(source * PAGE + 0x40, &prefix_data());
    h.write_frame_list(PREFIX_LIST, &[source]);
    dma.push(&transfer(
        PREFIX_LENGTH,
        frames(PREFIX_LIST, 1, 0x40),
        segment(VRAM_SEGMENT, PREFIX_VRAM),
    ));
}

fn prefix_data() -> Vec<u8> {
    pattern(0x9e, usize::try_from(PREFIX_LENGTH).unwrap())
}

/// What a faulted submission must report.
struct Expect {
    status: SubmitStatus,
    /// `fault_packet_offset` and the record's `packet_offset`.
    offset: u32,
    /// `fault_address` and the record's `address`.
    address: u64,
    /// The record's opcode (0 when the command itself is refused).
    opcode: u16,
    /// Whether the valid prefix packet ran.
    prefix: bool,
}

impl Expect {
    /// The faulting packet follows the valid prefix, which ran.
    fn after_prefix(status: SubmitStatus, address: u64, opcode: u16) -> Self {
        Self {
            status,
            offset: AFTER_PREFIX,
            address,
            opcode,
            prefix: true,
        }
    }

    /// The command itself is refused: nothing ran, no packet is named.
    fn refused(status: SubmitStatus, address: u64) -> Self {
        Self {
            status,
            offset: 0,
            address,
            opcode: 0,
            prefix: false,
        }
    }
}

const FAULT_FENCE: u32 = 0xfa17;
/// Guard byte written over the whole VRAM before the faulting submission.
const VRAM_GUARD: u8 = 0x5a;

/// Runs one faulting submission with a registered status page and two posted WAIT_EVENTs and
/// checks everything a fault must do: the completion (status, offset, address, packets and
/// bytes of the packets before it), the fault ring record and `fault_head`, the FAULT event
/// (exactly one), VRAM and guest data frames untouched (except by the prefix), and a next
/// submission that works. `setup` runs after the registration; `build` returns the faulting
/// command (its DMA buffer written).
fn check_fault(
    name: &str,
    setup: impl FnOnce(&mut Harness),
    build: impl FnOnce(&mut Harness) -> WddmGpuCmdSubmit,
    expect: Expect,
) -> Harness {
    let mut h = ready(name);
    register_status_page(&mut h);
    setup(&mut h);
    let cmd = build(&mut h);
    assert_eq!(cmd.submission_fence_id, FAULT_FENCE);

    h.write_vram(0, &vec![VRAM_GUARD; usize::try_from(VRAM_SIZE).unwrap()]);
    let guest_before = h.read_ram(DATA, usize::try_from(RAM_SIZE - DATA).unwrap());
    let before = h.status_page(STATUS_PAGE);
    let first = h.post_wait_event();
    let second = h.post_wait_event();

    let response = h.submit(&cmd);
    let expected = WddmGpuRespSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT),
        submission_fence_id: FAULT_FENCE,
        status: expect.status as u32,
        packets_completed: u32::from(expect.prefix),
        fault_packet_offset: expect.offset,
        fault_address: expect.address,
        bytes_transferred: if expect.prefix { PREFIX_LENGTH } else { 0 },
    };
    assert_eq!(response, expected, "completion");

    // The fault ring: one record, at the old head; the faulted submission completed.
    let page = h.status_page(STATUS_PAGE);
    let record = WddmGpuFaultRecord {
        sequence: u64::from(before.fault_head),
        address: expect.address,
        fence_id: FAULT_FENCE,
        packet_offset: expect.offset,
        status: expect.status as u32,
        opcode: u32::from(expect.opcode),
    };
    assert_eq!(page.fault_head, before.fault_head + 1, "fault_head");
    assert_eq!(
        h.fault_record(STATUS_PAGE, before.fault_head),
        record,
        "fault record"
    );
    assert_eq!(page.faults_dropped, 0);
    assert_eq!(page.completed_fence, FAULT_FENCE);
    assert_eq!(page.submissions_completed, before.submissions_completed + 1);
    assert_eq!(page.events_dropped, before.events_dropped);

    // Exactly one event: the oldest posted WAIT_EVENT, with the same record.
    assert_event(
        &mut h,
        first,
        WddmGpuRespEvent {
            kind: WDDM_GPU_EVENT_FAULT,
            fault: record,
            ..Default::default()
        },
    );

    // Nothing written but the prefix's bytes.
    let mut vram_expected = vec![VRAM_GUARD; usize::try_from(VRAM_SIZE).unwrap()];
    if expect.prefix {
        vram_expected[usize::try_from(PREFIX_VRAM).unwrap()
            ..usize::try_from(PREFIX_VRAM + PREFIX_LENGTH).unwrap()]
            .copy_from_slice(&prefix_data());
    }
    assert_bytes(
        &h.read_vram(0, usize::try_from(VRAM_SIZE).unwrap()),
        &vram_expected,
        "VRAM",
    );
    assert_bytes(
        &h.read_ram(DATA, usize::try_from(RAM_SIZE - DATA).unwrap()),
        &guest_before,
        "guest data frames",
    );

    // The device carries on.
    assert_next_submission_works(&mut h, FAULT_FENCE + 1, true);
    assert_eq!(h.status_page(STATUS_PAGE).fault_head, before.fault_head + 1);
    assert!(!h.is_answered(&second), "an event without a fault");
    h
}

/// Writes `dma` at [`DMA_BUFFER`] and returns the command for all of it.
fn command(h: &Harness, dma: &Dma) -> WddmGpuCmdSubmit {
    h.write_ram(DMA_BUFFER, dma.bytes());
    submit_command(DMA_BUFFER, dma.len(), FAULT_FENCE)
}

/// A DMA buffer of the prefix and then `packet`.
fn after_prefix<T: IntoBytes + Immutable>(h: &Harness, packet: &T) -> WddmGpuCmdSubmit {
    let mut dma = Dma::default();
    push_prefix(h, &mut dma);
    dma.push(packet);
    command(h, &dma)
}

#[test]
fn fault_bad_command() {
    let mut h = check_fault(
        "fault-bad-command",
        |_| {},
        |h| {
            let mut dma = Dma::default();
            push_prefix(h, &mut dma);
            let mut cmd = command(h, &dma);
            cmd.flags |= 1 << 1;
            cmd
        },
        Expect::refused(SubmitStatus::BadCommand, 0),
    );
    // Every inconsistent field is refused the same way, nothing executed.
    let base = submit_command(DMA_BUFFER, 64, 9);
    let variants: [(&str, WddmGpuCmdSubmit); 5] = [
        (
            "start > end",
            WddmGpuCmdSubmit {
                start_offset: 64,
                end_offset: 0,
                ..base
            },
        ),
        (
            "end > size",
            WddmGpuCmdSubmit {
                end_offset: 128,
                ..base
            },
        ),
        (
            "node",
            WddmGpuCmdSubmit {
                node_ordinal: 1,
                ..base
            },
        ),
        (
            "reserved",
            WddmGpuCmdSubmit {
                reserved: 1,
                ..base
            },
        ),
        (
            "size",
            WddmGpuCmdSubmit {
                dma_buffer_size: WDDM_GPU_MAX_DMA_BUFFER_SIZE + 8,
                end_offset: 64,
                ..base
            },
        ),
    ];
    for (what, cmd) in variants {
        let response = h.submit(&cmd);
        assert_eq!(
            status(&response),
            Some(SubmitStatus::BadCommand),
            "{what}: {response:?}"
        );
        assert_eq!(response.packets_completed, 0, "{what}");
    }
    assert_eq!(h.status_page(STATUS_PAGE).fault_head, 6);
}

#[test]
fn fault_bad_dma_buffer() {
    check_fault(
        "fault-bad-dma",
        |_| {},
        |_| submit_command(RAM_SIZE - 32, 64, FAULT_FENCE),
        Expect::refused(SubmitStatus::BadDmaBuffer, RAM_SIZE - 32),
    );
}

#[test]
fn fault_bad_packet_header() {
    check_fault(
        "fault-bad-header",
        |_| {},
        |h| {
            // A TRANSFER whose size is not a multiple of 8.
            let mut packet = transfer(16, segment(VRAM_SEGMENT, 0), segment(VRAM_SEGMENT, 0x100));
            packet.header.size = 68;
            let mut dma = Dma::default();
            push_prefix(h, &mut dma);
            dma.push(&packet);
            // The buffer ends 4 bytes past the packet, where its size says it ends.
            let mut cmd = command(h, &dma);
            cmd.dma_buffer_size += 4;
            cmd.end_offset += 4;
            cmd
        },
        Expect::after_prefix(SubmitStatus::BadPacketHeader, 0, WDDM_GPU_OP_TRANSFER),
    );
}

#[test]
fn fault_unknown_opcode() {
    check_fault(
        "fault-opcode",
        |_| {},
        |h| after_prefix(h, &unknown_packet(0x42)),
        Expect::after_prefix(SubmitStatus::UnknownOpcode, 0, 0x42),
    );
}

#[test]
fn fault_bad_segment() {
    check_fault(
        "fault-segment",
        |_| {},
        |h| after_prefix(h, &transfer(0x100, segment(VRAM_SEGMENT, 0), segment(3, 0))),
        Expect::after_prefix(SubmitStatus::BadSegment, 0, WDDM_GPU_OP_TRANSFER),
    );
}

#[test]
fn fault_segment_range() {
    // The last 0x80 bytes of VRAM and 0x80 past its end: refused whole, the guard at the end
    // of VRAM untouched.
    check_fault(
        "fault-range",
        |_| {},
        |h| {
            after_prefix(
                h,
                &transfer(
                    0x100,
                    segment(VRAM_SEGMENT, 0x1000),
                    segment(VRAM_SEGMENT, VRAM_SIZE - 0x80),
                ),
            )
        },
        Expect::after_prefix(
            SubmitStatus::SegmentRange,
            VRAM_SIZE - 0x80,
            WDDM_GPU_OP_TRANSFER,
        ),
    );
}

#[test]
fn fault_bad_frame_list() {
    // One frame listed for two pages.
    let mut h = check_fault(
        "fault-frame-list",
        |_| {},
        |h| {
            h.write_frame_list(FRAME_LISTS, &[frame(10)]);
            after_prefix(
                h,
                &transfer(
                    2 * PAGE,
                    segment(VRAM_SEGMENT, 0),
                    frames(FRAME_LISTS, 1, 0),
                ),
            )
        },
        Expect::after_prefix(
            SubmitStatus::BadFrameList,
            FRAME_LISTS,
            WDDM_GPU_OP_TRANSFER,
        ),
    );
    // More entries than the device takes, and a list whose second (needed) entry is past the
    // end of RAM.
    for (list, count) in [
        (FRAME_LISTS, WDDM_GPU_MAX_FRAME_LIST_ENTRIES + 1),
        (RAM_SIZE - 8, 2),
    ] {
        let mut dma = Dma::default();
        dma.push(&transfer(
            2 * PAGE,
            segment(VRAM_SEGMENT, 0),
            frames(list, count, 0),
        ));
        let response = submit_dma(&mut h, &dma, 9);
        assert_eq!(
            status(&response),
            Some(SubmitStatus::BadFrameList),
            "{list:#x}: {response:?}"
        );
        assert_eq!(response.fault_address, list);
    }
}

#[test]
fn fault_frame_not_in_ram() {
    // A good frame, then one past the end of RAM: the good one is not written either.
    let bad = RAM_SIZE / PAGE + 3;
    check_fault(
        "fault-not-ram",
        |_| {},
        |h| {
            h.write_frame_list(FRAME_LISTS, &[frame(10), bad]);
            after_prefix(
                h,
                &transfer(
                    2 * PAGE,
                    segment(VRAM_SEGMENT, 0),
                    frames(FRAME_LISTS, 2, 0),
                ),
            )
        },
        Expect::after_prefix(
            SubmitStatus::FrameNotInRam,
            bad * PAGE,
            WDDM_GPU_OP_TRANSFER,
        ),
    );
}

#[test]
fn fault_frame_in_vram() {
    // A good frame, then a frame inside the VRAM BAR (VRAM page 5, under the guard check).
    check_fault(
        "fault-in-vram",
        |_| {},
        |h| {
            h.write_frame_list(FRAME_LISTS, &[frame(10), VRAM_GPA / PAGE + 5]);
            after_prefix(
                h,
                &transfer(
                    2 * PAGE,
                    segment(VRAM_SEGMENT, 0x10_0000),
                    frames(FRAME_LISTS, 2, 0),
                ),
            )
        },
        Expect::after_prefix(
            SubmitStatus::FrameInVram,
            VRAM_GPA + 5 * PAGE,
            WDDM_GPU_OP_TRANSFER,
        ),
    );
}

#[test]
fn fault_length_overflow() {
    check_fault(
        "fault-overflow",
        |_| {},
        |h| {
            h.write_frame_list(FRAME_LISTS, &[frame(10)]);
            after_prefix(
                h,
                &transfer(
                    u64::MAX - 8,
                    segment(VRAM_SEGMENT, 0x1000),
                    frames(FRAME_LISTS, 1, 0x10),
                ),
            )
        },
        Expect::after_prefix(SubmitStatus::LengthOverflow, 0, WDDM_GPU_OP_TRANSFER),
    );
}

#[test]
fn fault_reserved_field() {
    check_fault(
        "fault-reserved",
        |_| {},
        |h| {
            let mut packet = transfer(
                0x100,
                segment(VRAM_SEGMENT, 0x1000),
                segment(VRAM_SEGMENT, 0x2000),
            );
            packet.destination.reserved = 1;
            after_prefix(h, &packet)
        },
        Expect::after_prefix(SubmitStatus::ReservedField, 0, WDDM_GPU_OP_TRANSFER),
    );
}

#[test]
fn fault_unmapped_aperture() {
    // Pages 0..4 mapped; a read from page 3 into page 4 touches a page never mapped.
    check_fault(
        "fault-unmapped",
        |h| map_pages(h, 0, &scattered(0, 4), FRAME_LISTS, 1),
        |h| {
            after_prefix(
                h,
                &transfer(
                    PAGE + 0x900,
                    segment(APERTURE_SEGMENT, 3 * PAGE + 0x800),
                    segment(VRAM_SEGMENT, 0x10_0000),
                ),
            )
        },
        Expect::after_prefix(
            SubmitStatus::UnmappedAperture,
            4 * PAGE,
            WDDM_GPU_OP_TRANSFER,
        ),
    );
}

#[test]
fn fault_wrong_segment_kind() {
    check_fault(
        "fault-kind",
        |_| {},
        |h| after_prefix(h, &fill(0x1234_5678, 0x100, segment(APERTURE_SEGMENT, 0))),
        Expect::after_prefix(SubmitStatus::WrongSegmentKind, 0, WDDM_GPU_OP_FILL),
    );
}

#[test]
fn fault_ring_keeps_unconsumed_records_and_counts_drops() {
    let mut h = ready("fault-ring");
    register_status_page(&mut h);
    let mut dma = Dma::default();
    dma.push(&unknown_packet(0x42));
    h.write_ram(DMA_BUFFER, dma.bytes());
    let cmd = |fence| submit_command(DMA_BUFFER, dma.len(), fence);
    // The driver consumes nothing: the ring fills, then faults are only counted.
    for fence in 0..WDDM_GPU_FAULT_RING_ENTRIES + 2 {
        let response = h.submit(&cmd(fence));
        assert_eq!(status(&response), Some(SubmitStatus::UnknownOpcode));
    }
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(page.fault_head, WDDM_GPU_FAULT_RING_ENTRIES);
    assert_eq!(page.faults_dropped, 2);
    assert_eq!(h.fault_record(STATUS_PAGE, 0).fence_id, 0);
    assert_eq!(h.fault_record(STATUS_PAGE, 119).fence_id, 119);
    // The driver consumes ten: the next fault goes to slot 0 (sequence 120).
    let tail_at = STATUS_PAGE + std::mem::offset_of!(WddmGpuStatusPage, fault_tail) as u64;
    h.write_ram(tail_at, &10u32.to_le_bytes());
    let response = h.submit(&cmd(500));
    assert_eq!(status(&response), Some(SubmitStatus::UnknownOpcode));
    let page = h.status_page(STATUS_PAGE);
    assert_eq!(page.fault_head, WDDM_GPU_FAULT_RING_ENTRIES + 1);
    assert_eq!(
        page.fault_tail, 10,
        "the device must not overwrite fault_tail"
    );
    let record = h.fault_record(STATUS_PAGE, WDDM_GPU_FAULT_RING_ENTRIES);
    assert_eq!(
        (record.sequence, record.fence_id),
        (u64::from(WDDM_GPU_FAULT_RING_ENTRIES), 500)
    );
}

#[test]
fn a_submit_whose_answer_does_not_fit_is_refused_before_any_packet_runs() {
    let mut h = ready("short-submit-response");
    h.write_vram(0x4000, &[SENTINEL; 0x100]);
    let mut dma = Dma::default();
    dma.push(&fill(0x1234_5678, 0x100, segment(VRAM_SEGMENT, 0x4000)));
    h.write_ram(DMA_BUFFER, dma.bytes());
    let cmd = submit_command(DMA_BUFFER, dma.len(), 90);
    let room = u32::try_from(std::mem::size_of::<WddmGpuRespSubmit>()).unwrap() - 1;
    let pending = h.post(cmd.as_bytes(), room);
    let reply = h.wait_reply(pending);
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_ERR_UNSPEC, "{reply:?}");
    assert_eq!(
        h.read_vram(0x4000, 0x100),
        [SENTINEL; 0x100],
        "the packets ran although their answer could not be written"
    );
    assert_next_submission_works(&mut h, 91, false);
}
