//! The status page and events, as an ISR/DPC consumes them: FENCE packets complete fences when
//! they execute (status page and a FENCE event, before the submission's own completion), and
//! faults are recorded in the fault ring, delivered as FAULT events, and leave the faulting
//! submission completed with its error.

use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_ERR_UNSPEC,
    VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::packet::{
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_FILL, WDDM_GPU_OP_MAP_APERTURE,
    WDDM_GPU_OP_MAP_APERTURE2, WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_TRANSFER,
    WDDM_GPU_OP_UNMAP_APERTURE,
};
use wddm_gpu_abi::status::{WddmGpuStatusPage, WDDM_GPU_EVENT_FAULT, WDDM_GPU_EVENT_FENCE};
use wddm_gpu_abi::submit::SubmitStatus;
use zerocopy::{Immutable, IntoBytes};

use super::ops::during;
use super::{
    check_list, check_vram, compare, expect_done, pattern_bytes, pfns_of, read_pieces, write_list,
    write_pieces, Ctx, PAGE, PAGE_USIZE,
};
use crate::engine::{expect_status, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu;
use crate::kmd::{describe_record, Event};
use crate::packets::{self, Adl, DmaBufferBuilder, Endpoint};
use crate::scatter::FrameList;

/// Fails unless `event` is a FENCE event for `fence`.
fn expect_fence_event(event: &Event, fence: u32) -> Outcome {
    ensure(
        event.resp.kind == WDDM_GPU_EVENT_FENCE && event.resp.fence_id == fence,
        || format!("expected a FENCE event for fence {fence}, got {event}"),
    )
}

/// What a faulting packet must report: the submission's status, the packet's opcode and the
/// faulting address (`None`: whatever the completion's `fault_address` says).
#[derive(Clone, Copy)]
struct Fault {
    status: SubmitStatus,
    opcode: u16,
    address: Option<u64>,
}

/// A [`Fault`] in one line.
const fn fault(status: SubmitStatus, opcode: u16, address: Option<u64>) -> Fault {
    Fault {
        status,
        opcode,
        address,
    }
}

/// What a fault should look like.
struct Expected {
    fence: u32,
    packet_offset: u32,
    fault: Fault,
}

/// Checks a FAULT event, the ring record it matches, and the status page around it; then
/// consumes the record (advances `fault_tail`). `before` is the page before the submission.
fn check_fault(
    c: &mut Ctx,
    event: &Event,
    done: &gpu::Completion,
    want: &Expected,
    before: &WddmGpuStatusPage,
) -> Outcome {
    let record = event.resp.fault;
    ensure(event.resp.kind == WDDM_GPU_EVENT_FAULT, || {
        format!("expected a FAULT event, got {event}")
    })?;
    let sequence = before.fault_head;
    ensure(
        record.fence_id == want.fence
            && record.packet_offset == want.packet_offset
            && record.status == want.fault.status as u32
            && record.opcode == u32::from(want.fault.opcode)
            && record.address == done.fault_address
            && record.sequence == u64::from(sequence)
            && want.fault.address.is_none_or(|a| a == record.address),
        || {
            format!(
                "FAULT event record {}; expected seq {sequence} fence {} packet_offset {:#x} \
                 status {} opcode {} address {} (completion: {done})",
                describe_record(&record),
                want.fence,
                want.packet_offset,
                want.fault.status as u32,
                want.fault.opcode,
                want.fault
                    .address
                    .map_or("= the completion's fault_address".into(), |a| format!(
                        "{a:#x}"
                    )),
            )
        },
    )?;
    let page = c.status.header();
    ensure(
        page.fault_head == sequence + 1
            && page.completed_fence == want.fence
            && page.submissions_completed == before.submissions_completed + 1
            && page.faults_dropped == before.faults_dropped
            && page.events_dropped == before.events_dropped,
        || {
            format!(
                "status page after the fault: fault_head {} (want {}), completed_fence {} (want \
                 {}), submissions_completed {} (want {}), faults_dropped {}, events_dropped {} \
                 (were {}, {})",
                page.fault_head,
                sequence + 1,
                page.completed_fence,
                want.fence,
                page.submissions_completed,
                before.submissions_completed + 1,
                page.faults_dropped,
                page.events_dropped,
                before.faults_dropped,
                before.events_dropped
            )
        },
    )?;
    let ring = c.status.record(sequence);
    ensure(ring == record, || {
        format!(
            "fault ring slot {} holds {}, the event carried {}",
            sequence % wddm_gpu_abi::status::WDDM_GPU_FAULT_RING_ENTRIES,
            describe_record(&ring),
            describe_record(&record)
        )
    })?;
    let consumed = c.status.consume_faults();
    ensure(consumed == vec![record], || {
        format!(
            "the DPC consumed {} records, expected just this one",
            consumed.len()
        )
    })?;
    ensure(c.status.header().fault_tail == sequence + 1, || {
        "fault_tail did not stick".into()
    })
}

/// FENCE packets report their fence when they execute: a FENCE event each, in order and before
/// the submission's completion, and the status page's `completed_fence`; the submission's own
/// fence follows. Packets after a fault, FENCEs included, do not run.
pub fn fence_events(e: &mut Engine, c: &mut Ctx) -> Outcome {
    c.kmd_ready(e)?;
    c.status.consume_faults();
    let before = c.status.header();
    let (f1, f2) = (e.fence(), e.fence());
    let (a, b_off, len) = (0x3e_0000u64, 0x3e_8000u64, 0x400u64);
    e.require_vram(a, len)?;
    let data = pattern_bytes(0x6665_6e01, 0, len);
    e.vram.write(a, &data);
    let mut b = DmaBufferBuilder::new();
    b.push_transfer(&packets::transfer(len, e.vram_at(a), e.vram_at(b_off)));
    b.push(&packets::fence(f1));
    b.push_transfer(&packets::transfer(
        len,
        e.vram_at(b_off),
        e.vram_at(b_off + len),
    ));
    b.push(&packets::fence(f2));
    let cmd = e.prepare(&b)?;
    let ticket = e.device.control.post_submit(&cmd)?;
    let timeout = e.device.control.timeout();
    let answer = e.device.control.wait(ticket, timeout)?;
    let done = gpu::decode_submit(&cmd, &answer.bytes)?;
    expect_done(&done, 2 * len, 4).map_err(during("TRANSFER, FENCE, TRANSFER, FENCE"))?;
    check_vram(e, b_off + len, &data, "data moved between the FENCEs")?;
    let first = c.next_event(e, "FENCE packet 1")?;
    expect_fence_event(&first, f1)?;
    let second = c.next_event(e, "FENCE packet 2")?;
    expect_fence_event(&second, f2)?;
    ensure(
        first.order < second.order && second.order < answer.order,
        || {
            format!(
                "completion order: FENCE {f1} #{}, FENCE {f2} #{}, submission #{}: the FENCE \
                 events must come first, in packet order",
                first.order, second.order, answer.order
            )
        },
    )?;
    let page = c.status.header();
    ensure(
        page.completed_fence == cmd.submission_fence_id
            && page.submissions_completed == before.submissions_completed + 1
            && page.events_dropped == before.events_dropped,
        || {
            format!(
                "status page: completed_fence {} (want the submission's {}), \
                 submissions_completed {} (want {}), events_dropped {} (was {})",
                page.completed_fence,
                cmd.submission_fence_id,
                page.submissions_completed,
                before.submissions_completed + 1,
                page.events_dropped,
                before.events_dropped
            )
        },
    )?;
    c.no_more_events(e, "the FENCE submission")?;

    // FENCE, a faulting TRANSFER, FENCE: the first fence and the fault are reported, not the
    // second fence.
    let before = c.status.header();
    let (f4, f5) = (e.fence(), e.fence());
    let never = c.never_mapped_page();
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::fence(f4));
    let bad = b.push_transfer(&packets::transfer(
        len,
        c.ap(never * PAGE + 0x10),
        e.vram_at(b_off),
    ));
    b.push(&packets::fence(f5));
    let cmd = e.prepare(&b)?;
    let done = e.submit(&cmd)?;
    expect_status(&done, SubmitStatus::UnmappedAperture)?;
    ensure(
        done.packets_completed == 1 && done.fault_packet_offset == bad,
        || format!("expected 1 packet completed and the fault at {bad:#x}: {done}"),
    )?;
    let event = c.next_event(e, "FENCE before the fault")?;
    expect_fence_event(&event, f4)?;
    let fault_event = c.next_event(e, "the fault")?;
    check_fault(
        c,
        &fault_event,
        &done,
        &Expected {
            fence: cmd.submission_fence_id,
            packet_offset: bad,
            fault: fault(
                SubmitStatus::UnmappedAperture,
                WDDM_GPU_OP_TRANSFER,
                Some(never * PAGE),
            ),
        },
        &before,
    )?;
    ensure(event.order < fault_event.order, || {
        format!(
            "FENCE {f4} event #{} came after the FAULT event #{}",
            event.order, fault_event.order
        )
    })?;
    c.no_more_events(e, "FENCE, fault, FENCE (the second FENCE must not run)")?;
    println!(
        "PAGING fence_events: FENCE {f1}, {f2} delivered before their submission completed; \
         after a fault only the FENCE before it"
    );
    Ok(())
}

/// A fault case: the DMA buffer, where its faulting packet sits, how many packets ran before
/// it, and what the fault must look like.
struct Case {
    name: &'static str,
    buffer: DmaBufferBuilder,
    packet_offset: u32,
    packets_completed: u32,
    fault: Fault,
}

impl Case {
    /// `lead` (packets that all complete, `completed` of them) followed by the faulting `packet`.
    fn after<P: IntoBytes + Immutable>(
        name: &'static str,
        mut lead: DmaBufferBuilder,
        completed: u32,
        packet: &P,
        fault: Fault,
    ) -> Self {
        let packet_offset = lead.push(packet);
        Self {
            name,
            buffer: lead,
            packet_offset,
            packets_completed: completed,
            fault,
        }
    }

    /// A DMA buffer of just the faulting `packet`.
    fn alone<P: IntoBytes + Immutable>(name: &'static str, packet: &P, fault: Fault) -> Self {
        Self::after(name, DmaBufferBuilder::new(), 0, packet, fault)
    }
}

/// A DMA buffer of one packet.
fn buffer_of<P: IntoBytes + Immutable>(packet: &P) -> DmaBufferBuilder {
    let mut b = DmaBufferBuilder::new();
    b.push(packet);
    b
}

/// Submits a fault case and checks its completion, its FAULT event, its ring record and the
/// status page; consumes the record. A FENCE event before the fault (from a FENCE packet that
/// ran first) is skipped after checking its fence.
fn run_case(e: &mut Engine, c: &mut Ctx, case: &Case) -> Outcome<gpu::Completion> {
    let before = c.status.header();
    let cmd = e.prepare(&case.buffer)?;
    let done = e.submit(&cmd)?;
    let context = |f: Failure| Failure(format!("{}: {f}", case.name));
    expect_status(&done, case.fault.status).map_err(context)?;
    ensure(
        done.packets_completed == case.packets_completed
            && done.fault_packet_offset == case.packet_offset,
        || {
            format!(
                "expected {} packet(s) completed and the fault at {:#x}: {done}",
                case.packets_completed, case.packet_offset
            )
        },
    )
    .map_err(context)?;
    let mut event = c.next_event(e, case.name).map_err(context)?;
    if event.resp.kind == WDDM_GPU_EVENT_FENCE {
        ensure(event.resp.fence_id < cmd.submission_fence_id, || {
            format!("unexpected {event} before the fault")
        })
        .map_err(context)?;
        event = c.next_event(e, case.name).map_err(context)?;
    }
    check_fault(
        c,
        &event,
        &done,
        &Expected {
            fence: cmd.submission_fence_id,
            packet_offset: case.packet_offset,
            fault: case.fault,
        },
        &before,
    )
    .map_err(context)?;
    println!(
        "PAGING fault {}: {} at packet {:#x}, {}",
        case.name,
        case.fault.status.name(),
        case.packet_offset,
        describe_record(&event.resp.fault)
    );
    Ok(done)
}

/// Faults provoked one submission at a time (UnmappedAperture through TRANSFER and
/// READ_PHYSICAL, FrameInVram, WrongSegmentKind for FILL, DISCARD and MAP, SegmentRange for
/// UNMAP): each ends its submission with that status at the right packet, comes as a FAULT event
/// with the record (fence, packet offset, status, opcode, address), lands in the status page's
/// fault ring at `fault_head`, and leaves `completed_fence` at the faulting submission. The
/// driver consumes each record by advancing `fault_tail`.
pub fn faults_status_page(e: &mut Engine, c: &mut Ctx) -> Outcome {
    use SubmitStatus::{FrameInVram, SegmentRange, UnmappedAperture, WrongSegmentKind};
    c.kmd_ready(e)?;
    c.status.consume_faults();
    let never = c.never_mapped_page();
    let ap = c.ap_id();
    let vram = e.segment.clone();
    let scratch = 0x3f_8000u64;
    e.require_vram(scratch, 2 * PAGE)?;
    let pages = c.aperture.desc.size / PAGE;

    // A frame list whose second frame is a VRAM BAR page.
    let bar_offset = vram.bar_offset().unwrap_or_default();
    let bar_page = (e.vram.bar_address + bar_offset) / PAGE + 5;
    let good = c.pieces(1)?;
    let guard_list = FrameList::from_pieces(good.clone(), 0, PAGE)?;
    write_list(e, &guard_list, &vec![0x11; PAGE_USIZE]);
    let list_address = c.place_pfns(&[good[0].phys / PAGE, bar_page])?;
    let to_bar_list = Endpoint::Frames {
        list_address,
        frame_count: 2,
        byte_offset: 0,
    };
    // A MAP_APERTURE naming a memory segment.
    let mut map_on_vram = c.map_packet(0, &good, 0, 1)?;
    map_on_vram.segment_id = vram.desc.id;
    let small_copy = packets::transfer(64, e.vram_at(scratch), e.vram_at(scratch + PAGE));
    let fence = packets::fence(e.fence());
    let read_vram = packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        vram.desc.id,
        vram.gpu_address(scratch),
        1,
    );

    let cases = [
        Case::after(
            "TRANSFER from never-mapped aperture pages",
            buffer_of(&small_copy),
            1,
            &packets::transfer(
                2 * PAGE,
                c.ap((never + 2) * PAGE - 0x20),
                e.vram_at(scratch),
            ),
            fault(
                UnmappedAperture,
                WDDM_GPU_OP_TRANSFER,
                Some((never + 1) * PAGE),
            ),
        ),
        Case::alone(
            "READ_PHYSICAL of a never-mapped aperture page",
            &packets::segment_access(
                WDDM_GPU_OP_READ_PHYSICAL,
                ap,
                c.aperture.gpu_address((never + 3) * PAGE + 4),
                4,
            ),
            fault(
                UnmappedAperture,
                WDDM_GPU_OP_READ_PHYSICAL,
                Some((never + 3) * PAGE),
            ),
        ),
        Case::after(
            "TRANSFER to a frame list naming a VRAM BAR page",
            buffer_of(&fence),
            1,
            &packets::transfer(2 * PAGE, e.vram_at(scratch), to_bar_list),
            fault(FrameInVram, WDDM_GPU_OP_TRANSFER, Some(bar_page * PAGE)),
        ),
        Case::alone(
            "FILL on the aperture",
            &packets::fill(0xdead_beef, 64, c.ap(0x100 * PAGE)),
            fault(WrongSegmentKind, WDDM_GPU_OP_FILL, None),
        ),
        Case::alone(
            "DISCARD_CONTENT on the aperture",
            &packets::segment_access(
                WDDM_GPU_OP_DISCARD_CONTENT,
                ap,
                c.aperture.gpu_address(0x100 * PAGE),
                0,
            ),
            fault(WrongSegmentKind, WDDM_GPU_OP_DISCARD_CONTENT, None),
        ),
        Case::after(
            "MAP_APERTURE on a memory segment",
            buffer_of(&read_vram),
            1,
            &map_on_vram,
            fault(WrongSegmentKind, WDDM_GPU_OP_MAP_APERTURE, None),
        ),
        Case::alone(
            "UNMAP_APERTURE past the aperture end",
            &packets::unmap_aperture(ap, pages - 1, 2, c.dummy.phys()),
            fault(SegmentRange, WDDM_GPU_OP_UNMAP_APERTURE, None),
        ),
    ];

    let count = cases.len();
    for case in &cases {
        run_case(e, c, case)?;
    }
    check_list(
        e,
        &guard_list,
        &vec![0x11; PAGE_USIZE],
        "the good frame of the FrameInVram list (a faulting packet writes nothing)",
    )?;
    c.no_more_events(e, "the faults")?;
    let page = c.status.header();
    ensure(
        page.faults_dropped == 0 && page.fault_tail == page.fault_head,
        || {
            format!(
                "status page after {count} faults: head {} tail {} dropped {}",
                page.fault_head, page.fault_tail, page.faults_dropped
            )
        },
    )?;
    ensure(c.events.posted() > 0, || "no WAIT_EVENT left posted".into())?;
    e.healthy(0x6661_756c)
}

/// Aperture pages the bad-map test maps.
const BAD_MAP_PAGE: u64 = 0x3400;

/// MAP, MAP2 and UNMAP requests that fail (a frame in the VRAM BAR, a range past the aperture,
/// too few frames, a reserved flag, an unaligned or VRAM dummy page) are refused as a whole:
/// the pages they name keep their earlier mapping (or stay never mapped).
pub fn bad_map_changes_nothing(e: &mut Engine, c: &mut Ctx) -> Outcome {
    use SubmitStatus::{BadFrameList, FrameInVram, ReservedField, SegmentRange};
    c.kmd_ready(e)?;
    c.status.consume_faults();
    let ap = c.ap_id();
    let mapped = c.pieces(4)?;
    let content = pattern_bytes(0x6261_6401, 0, 4 * PAGE);
    write_pieces(e, &mapped, &content);
    c.map(e, BAD_MAP_PAGE, &mapped)?;
    let other = c.pieces(4)?;
    write_pieces(e, &other, &vec![0x77; 4 * PAGE_USIZE]);
    let bar_offset = e.segment.bar_offset().unwrap_or_default();
    let bar_page = (e.vram.bar_address + bar_offset) / PAGE + 9;
    let pages = c.aperture.desc.size / PAGE;

    let mut with_bar = pfns_of(&other);
    with_bar[3] = bar_page;
    let with_bar = c.place_pfns(&with_bar)?;
    let address = c.place_piece_pfns(&other)?;
    let flags = c.map_flags;
    let cases = [
        Case::alone(
            "MAP_APERTURE whose last frame is a VRAM BAR page",
            &packets::map_aperture(ap, flags, BAD_MAP_PAGE, 4, with_bar, 4, 0),
            fault(FrameInVram, WDDM_GPU_OP_MAP_APERTURE, Some(bar_page * PAGE)),
        ),
        Case::alone(
            "MAP_APERTURE2 of a contiguous range reaching into the VRAM BAR",
            &packets::map_aperture2(
                ap,
                flags,
                BAD_MAP_PAGE,
                4,
                Adl::Contiguous {
                    base_page: bar_page - 2,
                    page_count: 4,
                },
                0,
            ),
            fault(FrameInVram, WDDM_GPU_OP_MAP_APERTURE2, None),
        ),
        Case::alone(
            "MAP_APERTURE running past the aperture end",
            &packets::map_aperture(ap, flags, pages - 2, 4, address, 4, 0),
            fault(SegmentRange, WDDM_GPU_OP_MAP_APERTURE, None),
        ),
        Case::alone(
            "MAP_APERTURE with MdlOffset + NumberOfPages past the PFN array",
            &packets::map_aperture(ap, flags, BAD_MAP_PAGE, 4, address, 4, 1),
            fault(BadFrameList, WDDM_GPU_OP_MAP_APERTURE, None),
        ),
        Case::alone(
            "MAP_APERTURE with a reserved flag",
            &packets::map_aperture(ap, 1 << 1, BAD_MAP_PAGE, 4, address, 4, 0),
            fault(ReservedField, WDDM_GPU_OP_MAP_APERTURE, None),
        ),
        Case::alone(
            "UNMAP_APERTURE to an unaligned dummy page",
            &packets::unmap_aperture(ap, BAD_MAP_PAGE, 4, c.dummy.phys() + 8),
            fault(BadFrameList, WDDM_GPU_OP_UNMAP_APERTURE, None),
        ),
        Case::alone(
            "UNMAP_APERTURE to a dummy page in the VRAM BAR",
            &packets::unmap_aperture(ap, BAD_MAP_PAGE, 4, bar_page * PAGE),
            fault(
                FrameInVram,
                WDDM_GPU_OP_UNMAP_APERTURE,
                Some(bar_page * PAGE),
            ),
        ),
    ];

    for case in &cases {
        run_case(e, c, case)?;
    }
    // The mapping is what it was: reads return the first pages' bytes ...
    let dst = 0x3c_8000u64;
    e.require_vram(dst, 4 * PAGE)?;
    let done = e.transfer(4 * PAGE, c.ap(BAD_MAP_PAGE * PAGE), e.vram_at(dst))?;
    expect_done(&done, 4 * PAGE, 1).map_err(during("reading the mapping after the refusals"))?;
    check_vram(e, dst, &content, "pages mapped before the refused requests")?;
    // ... writes reach them and not the pages of the refused requests ...
    let data = pattern_bytes(0x6261_6402, 0, 4 * PAGE);
    e.vram.write(dst, &data);
    let done = e.transfer(4 * PAGE, e.vram_at(dst), c.ap(BAD_MAP_PAGE * PAGE))?;
    expect_done(&done, 4 * PAGE, 1).map_err(during("writing through the mapping"))?;
    compare("pages mapped before", &read_pieces(e, &mapped), &data, 0)?;
    compare(
        "pages the refused MAPs named",
        &read_pieces(e, &other),
        &vec![0x77; 4 * PAGE_USIZE],
        0,
    )?;
    // ... and the pages past the end are still never mapped.
    let case = Case::alone(
        "READ_PHYSICAL of the last aperture page after a refused MAP over it",
        &packets::segment_access(
            WDDM_GPU_OP_READ_PHYSICAL,
            ap,
            c.aperture.gpu_address((pages - 1) * PAGE),
            8,
        ),
        fault(
            SubmitStatus::UnmappedAperture,
            WDDM_GPU_OP_READ_PHYSICAL,
            Some((pages - 1) * PAGE),
        ),
    );
    run_case(e, c, &case)?;
    c.no_more_events(e, "the refused requests")
}

/// REGISTER_STATUS_PAGE refuses a page that is unaligned, in the VRAM BAR or outside RAM
/// (ERR_INVALID_PARAMETER); address 0 unregisters (the device stops writing the page while
/// events still come); registering again starts a fresh page. A WAIT_EVENT whose response
/// buffer is too small is answered ERR_UNSPEC at once.
pub fn status_page_registration(e: &mut Engine, c: &mut Ctx) -> Outcome {
    c.kmd_ready(e)?;
    let bar_offset = e.segment.bar_offset().unwrap_or_default();
    let in_bar = e.vram.bar_address + bar_offset + 0x10_0000;
    for (what, address) in [
        ("unaligned", c.status.phys() + 0x80),
        ("in the VRAM BAR", in_bar),
        ("beyond guest RAM", 1u64 << 40),
    ] {
        let answer = e.device.control.register_status_page(address)?;
        ensure(answer == VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, || {
            format!(
                "REGISTER_STATUS_PAGE of a page {what} ({address:#x}) answered {answer:#06x}, \
                 expected ERR_INVALID_PARAMETER"
            )
        })?;
    }
    let answer = e.device.control.register_status_page(0)?;
    ensure(answer == VIRTIO_GPU_RESP_OK_NODATA, || {
        format!("REGISTER_STATUS_PAGE 0 (unregister) answered {answer:#06x}")
    })?;
    c.registered = false;
    let frozen = c.status.header();
    let never = c.never_mapped_page();
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        c.ap_id(),
        c.aperture.gpu_address((never + 5) * PAGE),
        1,
    ));
    let cmd = e.prepare(&b)?;
    let done = e.submit(&cmd)?;
    expect_status(&done, SubmitStatus::UnmappedAperture)?;
    let event = c.next_event(e, "a fault with no status page registered")?;
    ensure(
        event.resp.kind == WDDM_GPU_EVENT_FAULT
            && event.resp.fault.fence_id == cmd.submission_fence_id,
        || {
            format!(
                "expected the FAULT event of fence {}, got {event}",
                cmd.submission_fence_id
            )
        },
    )?;
    let page = c.status.header();
    ensure(page == frozen, || {
        format!(
            "the device wrote the unregistered status page (fault_head {} -> {}, \
             completed_fence {} -> {})",
            frozen.fault_head, page.fault_head, frozen.completed_fence, page.completed_fence
        )
    })?;
    c.kmd_ready(e)?;
    let small = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT);
    let ticket = e
        .device
        .control
        .post("WAIT_EVENT (24-byte response)", small.as_bytes(), 24)?;
    let timeout = e.device.control.timeout();
    let answer = e.device.control.wait(ticket, timeout)?;
    let type_ = answer
        .bytes
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    ensure(type_ == VIRTIO_GPU_RESP_ERR_UNSPEC, || {
        format!(
            "WAIT_EVENT with a 24-byte response buffer answered type {type_:#06x} ({} bytes), \
             expected ERR_UNSPEC at once",
            answer.bytes.len()
        )
    })?;
    c.no_more_events(e, "the registration checks")
}

/// The fault ring full: 121 faults with `fault_tail` never advanced and only the posted
/// WAIT_EVENTs to take events. The device records 120, counts the 121st in `faults_dropped`
/// without overwriting the oldest record, delivers the first faults to the posted requests and
/// counts the rest in `events_dropped`. Once the driver consumes the ring, faults are recorded
/// again.
pub fn fault_ring_full(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let ring = wddm_gpu_abi::status::WDDM_GPU_FAULT_RING_ENTRIES;
    c.kmd_ready(e)?;
    c.status.consume_faults();
    let before = c.status.header();
    let posted = u32::try_from(c.events.posted()).unwrap();
    let never = c.never_mapped_page();
    let read = packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        c.ap_id(),
        c.aperture.gpu_address((never + 6) * PAGE),
        2,
    );
    let b = buffer_of(&read);
    let mut fences = Vec::new();
    for _ in 0..=ring {
        let cmd = e.prepare(&b)?;
        let done = e.submit(&cmd)?;
        expect_status(&done, SubmitStatus::UnmappedAperture)?;
        fences.push(cmd.submission_fence_id);
    }
    let page = c.status.header();
    let first = before.fault_head;
    ensure(
        page.fault_head == first + ring
            && page.fault_tail == first
            && page.faults_dropped == before.faults_dropped + 1
            && page.events_dropped == before.events_dropped + ring + 1 - posted
            && page.submissions_completed == before.submissions_completed + u64::from(ring) + 1
            && page.completed_fence == fences[ring as usize],
        || {
            format!(
                "after {} faults with the ring unconsumed: fault_head {} (want {}), fault_tail \
                 {} (want {first}), faults_dropped {} (want {}), events_dropped {} (want {} with \
                 {posted} requests posted), submissions_completed {} (want {}), completed_fence \
                 {} (want {})",
                ring + 1,
                page.fault_head,
                first + ring,
                page.fault_tail,
                page.faults_dropped,
                before.faults_dropped + 1,
                page.events_dropped,
                before.events_dropped + ring + 1 - posted,
                page.submissions_completed,
                before.submissions_completed + u64::from(ring) + 1,
                page.completed_fence,
                fences[ring as usize]
            )
        },
    )?;
    for i in 0..ring {
        let record = c.status.record(first + i);
        ensure(
            record.sequence == u64::from(first + i) && record.fence_id == fences[i as usize],
            || {
                format!(
                    "ring slot of fault {}: {} (want fence {}; the 121st fault must not \
                     overwrite the oldest record)",
                    first + i,
                    describe_record(&record),
                    fences[i as usize]
                )
            },
        )?;
    }
    let events = c.events.drain(&mut e.device.control)?;
    ensure(
        events.len() == posted as usize
            && events.iter().zip(&fences).all(|(ev, f)| {
                ev.resp.kind == WDDM_GPU_EVENT_FAULT && ev.resp.fault.fence_id == *f
            }),
        || {
            let list: Vec<String> = events.iter().map(ToString::to_string).collect();
            format!(
                "the {posted} posted WAIT_EVENTs should carry the first {posted} faults: {}",
                list.join("; ")
            )
        },
    )?;
    // The DPC catches up; the next fault is recorded.
    let consumed = c.status.consume_faults();
    ensure(consumed.len() == ring as usize, || {
        format!("consumed {} records, expected {ring}", consumed.len())
    })?;
    let before = c.status.header();
    let case = Case::alone(
        "a fault after the ring was consumed",
        &read,
        fault(
            SubmitStatus::UnmappedAperture,
            WDDM_GPU_OP_READ_PHYSICAL,
            Some((never + 6) * PAGE),
        ),
    );
    run_case(e, c, &case)?;
    ensure(
        c.status.header().faults_dropped == before.faults_dropped,
        || "a fault was dropped with the ring consumed".into(),
    )?;
    println!(
        "PAGING fault_ring_full: {} faults unconsumed: {ring} recorded, 1 dropped; {posted} \
         delivered as events, {} events dropped; recording resumed at sequence {}",
        ring + 1,
        ring + 1 - posted,
        before.fault_head
    );
    c.no_more_events(e, "the ring test")
}
