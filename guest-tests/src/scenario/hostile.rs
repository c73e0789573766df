//! Suite tests that submit malformed or malicious work. Each expects an error completion with a
//! specific `SubmitStatus`, checks VRAM around the target is untouched, and then proves the
//! device still works with a valid round trip.

use wddm_gpu_abi::packet::{WddmGpuPacketHeader, WDDM_GPU_OP_TRANSFER};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};
use zerocopy::IntoBytes;

use crate::engine::{expect_status, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu;
use crate::iomem;
use crate::packets::{self, DmaBufferBuilder, Endpoint};
use crate::scatter::FrameList;

/// VRAM offset hostile transfers aim at.
const TARGET: u64 = 0x20_0100;
/// Bytes they would move.
const LEN: u64 = 8192;

/// VRAM the test watches.
struct Guard {
    offset: u64,
    len: u64,
    /// The range itself must stay untouched too (the device must not write it at all).
    whole: bool,
}

/// A prepared hostile submission.
struct Attack {
    cmd: WddmGpuCmdSubmit,
    guard: Option<Guard>,
    /// Expected `fault_packet_offset`, when the fault is in a packet.
    fault_packet_offset: Option<u32>,
}

type Build = fn(&mut Engine) -> Outcome<Attack>;

/// The hostile tests: name, expected status, how to build the submission.
const CASES: [(&str, SubmitStatus, Build); 22] = [
    (
        "dma_buffer_beyond_ram",
        SubmitStatus::BadDmaBuffer,
        dma_buffer_beyond_ram,
    ),
    (
        "dma_buffer_straddles_ram_end",
        SubmitStatus::BadDmaBuffer,
        dma_buffer_straddles_ram_end,
    ),
    (
        "end_offset_past_buffer",
        SubmitStatus::BadCommand,
        end_offset_past_buffer,
    ),
    (
        "start_offset_after_end",
        SubmitStatus::BadCommand,
        start_offset_after_end,
    ),
    (
        "submit_reserved_nonzero",
        SubmitStatus::BadCommand,
        submit_reserved_nonzero,
    ),
    (
        "submit_unknown_flag",
        SubmitStatus::BadCommand,
        submit_unknown_flag,
    ),
    (
        "unknown_opcode",
        SubmitStatus::UnknownOpcode,
        unknown_opcode,
    ),
    (
        "packet_size_zero",
        SubmitStatus::BadPacketHeader,
        packet_size_zero,
    ),
    (
        "packet_size_unaligned",
        SubmitStatus::BadPacketHeader,
        packet_size_unaligned,
    ),
    (
        "packet_past_end",
        SubmitStatus::BadPacketHeader,
        packet_past_end,
    ),
    (
        "packet_header_truncated",
        SubmitStatus::BadPacketHeader,
        packet_header_truncated,
    ),
    (
        "packet_smaller_than_transfer",
        SubmitStatus::BadPacketHeader,
        packet_smaller_than_transfer,
    ),
    ("bad_segment_id", SubmitStatus::BadSegment, bad_segment_id),
    (
        "segment_range_past_end",
        SubmitStatus::SegmentRange,
        segment_range_past_end,
    ),
    (
        "frame_count_above_max",
        SubmitStatus::BadFrameList,
        frame_count_above_max,
    ),
    (
        "frame_list_too_short",
        SubmitStatus::BadFrameList,
        frame_list_too_short,
    ),
    (
        "frame_not_in_ram",
        SubmitStatus::FrameNotInRam,
        frame_not_in_ram,
    ),
    ("frame_in_vram", SubmitStatus::FrameInVram, frame_in_vram),
    (
        "frame_in_vram_destination",
        SubmitStatus::FrameInVram,
        frame_in_vram_destination,
    ),
    (
        "length_overflow",
        SubmitStatus::LengthOverflow,
        length_overflow,
    ),
    (
        "reserved_field_nonzero",
        SubmitStatus::ReservedField,
        reserved_field_nonzero,
    ),
    (
        "fault_packet_offset_reported",
        SubmitStatus::UnknownOpcode,
        fault_packet_offset_reported,
    ),
];

/// Names of the hostile tests, in run order.
pub fn names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|(name, _, _)| *name)
}

/// Runs hostile test `name`; `None` if there is no such test.
pub fn run(name: &str, e: &mut Engine) -> Option<Outcome> {
    let (_, status, build) = CASES.iter().find(|(n, _, _)| *n == name)?;
    Some(attack(e, *status, *build, name.len() as u64 * 0x1_0001))
}

fn attack(e: &mut Engine, status: SubmitStatus, build: Build, tag: u64) -> Outcome {
    let attack = build(e)?;
    if let Some(g) = &attack.guard {
        e.require_vram(g.offset, g.len)?;
        e.guard_vram(g.offset, g.len, tag);
        if g.whole {
            e.vram.fill_pattern(g.offset, g.len, tag ^ 1);
        }
    }
    let done = e.submit(&attack.cmd)?;
    expect_status(&done, status)?;
    if let Some(offset) = attack.fault_packet_offset {
        ensure(done.fault_packet_offset == offset, || {
            format!(
                "fault_packet_offset {:#x}, expected {offset:#x}: {done}",
                done.fault_packet_offset
            )
        })?;
    }
    if let Some(g) = &attack.guard {
        e.check_vram_guard(g.offset, g.len, tag)?;
        if g.whole {
            e.vram
                .check_pattern(g.offset, g.len, tag ^ 1, 0)
                .map_err(|m| Failure(format!("refused transfer wrote VRAM: {m}")))?;
        }
    }
    e.healthy(tag ^ 0x4845_414c)
}

/// A buffer holding one TRANSFER `packet`, submitted whole.
fn single(
    e: &mut Engine,
    packet: &wddm_gpu_abi::packet::WddmGpuPacketTransfer,
    guard: Option<Guard>,
) -> Outcome<Attack> {
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(packet);
    Ok(Attack {
        cmd: e.prepare(&buffer)?,
        guard,
        fault_packet_offset: Some(0),
    })
}

/// A valid two-page scattered source list in slot 0.
fn source_frames(e: &mut Engine) -> Outcome<Endpoint> {
    let list = FrameList::shuffled(e.pool.pieces(), 0, LEN, &mut e.rng)?;
    e.frames(&list, 0)
}

/// Guard around the hostile target, which a failed transfer may have partly written.
fn target_guard() -> Option<Guard> {
    Some(Guard {
        offset: TARGET,
        len: LEN,
        whole: false,
    })
}

/// A valid pages → VRAM transfer to TARGET.
fn valid_packet(e: &mut Engine) -> Outcome<wddm_gpu_abi::packet::WddmGpuPacketTransfer> {
    let src = source_frames(e)?;
    Ok(packets::transfer(LEN, src, e.vram_at(TARGET)))
}

fn command_only(e: &mut Engine, edit: impl FnOnce(&mut WddmGpuCmdSubmit)) -> Outcome<Attack> {
    let packet = valid_packet(e)?;
    let mut attack = single(e, &packet, target_guard())?;
    edit(&mut attack.cmd);
    attack.fault_packet_offset = None;
    Ok(attack)
}

fn dma_buffer_beyond_ram(e: &mut Engine) -> Outcome<Attack> {
    let address = iomem::unbacked_address(&iomem::read());
    let fence = e.fence();
    Ok(Attack {
        cmd: gpu::submit_command(address, 4096, 0, 64, fence),
        guard: None,
        fault_packet_offset: None,
    })
}

fn dma_buffer_straddles_ram_end(e: &mut Engine) -> Outcome<Attack> {
    let end = iomem::ram_block_end(&iomem::read())
        .ok_or_else(|| Failure("cannot find the end of guest RAM in /proc/iomem".into()))?;
    let fence = e.fence();
    // Half the buffer is the last RAM bytes, half is past them.
    Ok(Attack {
        cmd: gpu::submit_command(end - 32, 64, 0, 64, fence),
        guard: None,
        fault_packet_offset: None,
    })
}

fn end_offset_past_buffer(e: &mut Engine) -> Outcome<Attack> {
    command_only(e, |cmd| cmd.end_offset = cmd.dma_buffer_size + 64)
}

fn start_offset_after_end(e: &mut Engine) -> Outcome<Attack> {
    command_only(e, |cmd| cmd.start_offset = cmd.end_offset + 8)
}

fn submit_reserved_nonzero(e: &mut Engine) -> Outcome<Attack> {
    command_only(e, |cmd| cmd.reserved = 1)
}

fn submit_unknown_flag(e: &mut Engine) -> Outcome<Attack> {
    command_only(e, |cmd| cmd.flags |= 1 << 31)
}

fn unknown_opcode(e: &mut Engine) -> Outcome<Attack> {
    let mut p = valid_packet(e)?;
    p.header.opcode = 0x7777;
    single(e, &p, target_guard())
}

fn packet_size_zero(e: &mut Engine) -> Outcome<Attack> {
    let mut p = valid_packet(e)?;
    p.header.size = 0;
    single(e, &p, target_guard())
}

fn packet_size_unaligned(e: &mut Engine) -> Outcome<Attack> {
    let mut p = valid_packet(e)?;
    p.header.size += 4;
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(&p);
    buffer.push_raw(&[0; 8]);
    Ok(Attack {
        cmd: e.prepare(&buffer)?,
        guard: target_guard(),
        fault_packet_offset: Some(0),
    })
}

fn packet_past_end(e: &mut Engine) -> Outcome<Attack> {
    let mut p = valid_packet(e)?;
    p.header.size *= 2;
    single(e, &p, target_guard())
}

fn packet_header_truncated(e: &mut Engine) -> Outcome<Attack> {
    let packet = valid_packet(e)?;
    let mut attack = single(e, &packet, target_guard())?;
    // Only half a header lies inside [start, end).
    attack.cmd.end_offset = 4;
    Ok(attack)
}

fn packet_smaller_than_transfer(e: &mut Engine) -> Outcome<Attack> {
    let p = valid_packet(e)?;
    let header = WddmGpuPacketHeader {
        opcode: WDDM_GPU_OP_TRANSFER,
        flags: 0,
        size: 16,
    };
    // A TRANSFER claiming 16 bytes, followed by the rest of a real one.
    let mut bytes = p.as_bytes().to_vec();
    bytes[..8].copy_from_slice(header.as_bytes());
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_raw(&bytes);
    Ok(Attack {
        cmd: e.prepare(&buffer)?,
        guard: target_guard(),
        fault_packet_offset: Some(0),
    })
}

fn bad_segment_id(e: &mut Engine) -> Outcome<Attack> {
    let src = source_frames(e)?;
    // One past the last segment id the capset lists, at the address TARGET would have in the
    // VRAM segment.
    let dst = Endpoint::Segment {
        id: e.layout.unused_segment_id(),
        address: e.segment.gpu_address(TARGET),
    };
    let guard = Some(Guard {
        offset: TARGET,
        len: LEN,
        whole: true,
    });
    single(e, &packets::transfer(LEN, src, dst), guard)
}

fn segment_range_past_end(e: &mut Engine) -> Outcome<Attack> {
    let src = source_frames(e)?;
    let offset = e.vram.size - LEN / 2;
    let guard = Some(Guard {
        offset,
        len: LEN / 2,
        whole: false,
    });
    single(e, &packets::transfer(LEN, src, e.vram_at(offset)), guard)
}

fn frame_count_above_max(e: &mut Engine) -> Outcome<Attack> {
    let list = FrameList::shuffled(e.pool.pieces(), 0, LEN, &mut e.rng)?;
    let src = Endpoint::Frames {
        list_address: e.place_pfns(&list.pfns(), 0)?,
        frame_count: e.layout.header.max_frame_list_entries.saturating_add(1),
        byte_offset: 0,
    };
    single(
        e,
        &packets::transfer(LEN, src, e.vram_at(TARGET)),
        target_guard(),
    )
}

fn frame_list_too_short(e: &mut Engine) -> Outcome<Attack> {
    let list = FrameList::shuffled(e.pool.pieces(), 0, LEN / 2, &mut e.rng)?;
    let src = e.frames(&list, 0)?;
    single(
        e,
        &packets::transfer(LEN, src, e.vram_at(TARGET)),
        target_guard(),
    )
}

/// A two-frame source list whose second frame is `pfn`.
fn list_with(e: &mut Engine, pfn: u64) -> Outcome<Endpoint> {
    let good = e.pool.pieces()[5].phys >> WDDM_GPU_PAGE_SHIFT;
    Ok(Endpoint::Frames {
        list_address: e.place_pfns(&[good, pfn], 0)?,
        frame_count: 2,
        byte_offset: 0,
    })
}

fn frame_not_in_ram(e: &mut Engine) -> Outcome<Attack> {
    let pfn = iomem::unbacked_address(&iomem::read()) >> WDDM_GPU_PAGE_SHIFT;
    let src = list_with(e, pfn)?;
    single(
        e,
        &packets::transfer(LEN, src, e.vram_at(TARGET)),
        target_guard(),
    )
}

/// PFN of VRAM segment offset `offset` as the CPU sees it: the sysfs BAR address plus the
/// segment's `bar_offset` from the capset.
fn vram_pfn(e: &Engine, offset: u64) -> u64 {
    (e.vram.bar_address + e.segment.bar_offset().unwrap_or_default() + offset)
        >> WDDM_GPU_PAGE_SHIFT
}

/// A page-aligned segment offset `num / den` of the way into the VRAM segment, past TARGET's
/// range for every segment large enough for TARGET.
fn vram_page_offset(e: &Engine, num: u64, den: u64) -> u64 {
    (e.vram.size / den * num) & !(WDDM_GPU_PAGE_SIZE - 1)
}

fn frame_in_vram(e: &mut Engine) -> Outcome<Attack> {
    let src = list_with(e, vram_pfn(e, vram_page_offset(e, 1, 2)))?;
    single(
        e,
        &packets::transfer(LEN, src, e.vram_at(TARGET)),
        target_guard(),
    )
}

fn frame_in_vram_destination(e: &mut Engine) -> Outcome<Attack> {
    let victim = vram_page_offset(e, 3, 4);
    let dst = Endpoint::Frames {
        list_address: e.place_pfns(&[vram_pfn(e, victim), vram_pfn(e, victim + 4096)], 0)?,
        frame_count: 2,
        byte_offset: 0,
    };
    let guard = Some(Guard {
        offset: victim,
        len: LEN,
        whole: true,
    });
    single(e, &packets::transfer(LEN, e.vram_at(TARGET), dst), guard)
}

fn length_overflow(e: &mut Engine) -> Outcome<Attack> {
    // byte_offset + length overflows on both sides, so the status does not depend on which
    // endpoint the device checks first. (A segment address + length that overflows is reported
    // as SegmentRange by the backend, which the ABI text leaves open.)
    let list = FrameList::shuffled(e.pool.pieces(), 16, LEN, &mut e.rng)?;
    let src = e.frames(&list, 0)?;
    let dst = e.frames(&list, 1)?;
    single(e, &packets::transfer(u64::MAX, src, dst), target_guard())
}

fn reserved_field_nonzero(e: &mut Engine) -> Outcome<Attack> {
    let mut p = valid_packet(e)?;
    p.destination.reserved = 1;
    let guard = Some(Guard {
        offset: TARGET,
        len: LEN,
        whole: true,
    });
    single(e, &p, guard)
}

fn fault_packet_offset_reported(e: &mut Engine) -> Outcome<Attack> {
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(&valid_packet(e)?);
    let mut bad = packets::transfer(0, e.vram_at(0), e.vram_at(0));
    bad.header.opcode = 0x7778;
    let offset = buffer.push_transfer(&bad);
    Ok(Attack {
        cmd: e.prepare(&buffer)?,
        guard: target_guard(),
        fault_packet_offset: Some(offset),
    })
}
