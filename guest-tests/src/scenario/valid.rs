//! Suite tests that submit well-formed work and check every byte it moved.

use wddm_gpu_abi::packet::WDDM_GPU_OP_TRANSFER;
use wddm_gpu_abi::submit::SubmitStatus;

use crate::engine::{expect_ok, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::packets::{self, DmaBufferBuilder};
use crate::scatter::FrameList;

/// A suite test.
pub type Test = fn(&mut Engine) -> Outcome;

/// The valid-submission tests, in run order.
pub const TESTS: [(&str, Test); 9] = [
    ("vram_pattern_via_bar", vram_pattern_via_bar),
    (
        "transfer_vram_to_scattered_and_back",
        transfer_vram_to_scattered_and_back,
    ),
    ("transfer_contiguous_frames", transfer_contiguous_frames),
    ("transfer_zero_length", transfer_zero_length),
    (
        "transfer_byte_offset_beyond_page",
        transfer_byte_offset_beyond_page,
    ),
    ("transfer_vram_to_vram", transfer_vram_to_vram),
    ("multi_packet_buffer", multi_packet_buffer),
    ("start_offset_skips_packets", start_offset_skips_packets),
    ("fence_echoed", fence_echoed),
];

fn vram_pattern_via_bar(e: &mut Engine) -> Outcome {
    e.vram_write_and_verify(0x1234, 3 << 20, 0xba5e)?;
    // A second tag over the same range proves the first readback was not stale.
    e.vram_write_and_verify(0x1234, 3 << 20, 0xba5f)
}

fn transfer_vram_to_scattered_and_back(e: &mut Engine) -> Outcome {
    let (a, b, len) = (0x18_0055, 0x58_0abc, (1 << 20) + 123);
    e.vram_write_and_verify(a, len, 0x5ca7)?;
    let list = FrameList::shuffled(e.pool.pieces(), 0x321, len, &mut e.rng)?;
    ensure(list.consecutive_pairs() < 16, || {
        format!(
            "frame list barely scattered ({} consecutive pairs)",
            list.consecutive_pairs()
        )
    })?;
    e.vram_to_pages(a, &list, 0x5ca7)?;
    e.pages_to_vram(&list, b, 0x5ca7)?;
    Ok(())
}

fn transfer_contiguous_frames(e: &mut Engine) -> Outcome {
    let (a, b, len) = (0x90_0000, 0xa0_0010, (256 << 10) + 77);
    // The pool's first hugepage is physically contiguous and listed in order.
    let list = FrameList::in_order(e.pool.pieces(), 0, len)?;
    ensure(list.consecutive_pairs() + 1 == list.pieces().len(), || {
        "first pool hugepage is not contiguous".into()
    })?;
    e.vram_write_and_verify(a, len, 0xc0c0)?;
    e.vram_to_pages(a, &list, 0xc0c0)?;
    e.pages_to_vram(&list, b, 0xc0c0)?;
    Ok(())
}

fn transfer_zero_length(e: &mut Engine) -> Outcome {
    let target = 0xb0_0000;
    e.guard_vram(target, 0, 0x2e50);
    let list = FrameList::in_order(e.pool.pieces(), 0, 0)?;
    let src = e.frames(&list, 0)?;
    let done = e.transfer(0, src, e.vram_at(target))?;
    expect_ok(&done, 0)?;
    ensure(done.packets_completed == 1, || {
        format!("packets_completed {}, expected 1", done.packets_completed)
    })?;
    e.check_vram_guard(target, 0, 0x2e50)
}

fn transfer_byte_offset_beyond_page(e: &mut Engine) -> Outcome {
    // The KMD folds MdlOffset * PAGE_SIZE into byte_offset, so it may exceed one page.
    let (a, b, len) = (0xc0_0001, 0xc8_0003, 5000);
    e.vram_write_and_verify(a, len, 0xbe40)?;
    let list = FrameList::shuffled(e.pool.pieces(), 2 * 4096 + 0x10, len, &mut e.rng)?;
    e.vram_to_pages(a, &list, 0xbe40)?;
    e.pages_to_vram(&list, b, 0xbe40)?;
    Ok(())
}

fn transfer_vram_to_vram(e: &mut Engine) -> Outcome {
    let (a, b, len) = (0xd0_0000, 0xd8_0005, (64 << 10) + 3);
    e.vram_write_and_verify(a, len, 0x7272)?;
    e.require_vram(b, len)?;
    e.guard_vram(b, len, 0x6a6a);
    let done = e.transfer(len, e.vram_at(a), e.vram_at(b))?;
    expect_ok(&done, len)?;
    e.vram
        .check_pattern(b, len, 0x7272, 0)
        .map_err(|m| Failure(format!("VRAM copy: {m}")))?;
    e.check_vram_guard(b, len, 0x6a6a)
}

fn multi_packet_buffer(e: &mut Engine) -> Outcome {
    let (a, b, len_a, len_b) = (0xe0_0007, 0xe8_0009, 20_000, 30_001);
    e.vram_write_and_verify(a, len_a, 0x3a3a)?;
    e.require_vram(b, len_b)?;
    // The two lists must not share pieces: split the pool.
    let (head, tail) = e.pool.pieces().split_at(e.pool.pieces().len() / 2);
    let out = FrameList::shuffled(head, 7, len_a, &mut e.rng)?;
    let back = FrameList::shuffled(tail, 9, len_b, &mut e.rng)?;
    e.fill_pages(&out, 0);
    e.fill_pages(&back, 0x3b3b);
    e.guard_vram(b, len_b, 0x3c3c);
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(&packets::transfer(len_a, e.vram_at(a), e.frames(&out, 0)?));
    buffer.push_transfer(&packets::transfer(len_b, e.frames(&back, 1)?, e.vram_at(b)));
    let done = e.run(&buffer)?;
    expect_ok(&done, len_a + len_b)?;
    ensure(done.packets_completed == 2, || {
        format!("packets_completed {}, expected 2", done.packets_completed)
    })?;
    e.check_pages(&out, 0x3a3a)?;
    e.vram
        .check_pattern(b, len_b, 0x3b3b, 0)
        .map_err(|m| Failure(format!("second packet: {m}")))?;
    e.check_vram_guard(b, len_b, 0x3c3c)
}

fn start_offset_skips_packets(e: &mut Engine) -> Outcome {
    let (a, len) = (0xf0_0000, 8192 + 5);
    e.vram_write_and_verify(a, len, 0x5757)?;
    let list = FrameList::shuffled(e.pool.pieces(), 0, len, &mut e.rng)?;
    e.fill_pages(&list, 0);
    // A poisoned packet before start_offset must never be looked at.
    let mut poison = packets::transfer(len, e.vram_at(a), e.frames(&list, 0)?);
    poison.header.opcode = WDDM_GPU_OP_TRANSFER.wrapping_add(0x4242);
    let mut buffer = DmaBufferBuilder::new();
    buffer.push_transfer(&poison);
    let start = buffer.push_transfer(&packets::transfer(len, e.vram_at(a), e.frames(&list, 0)?));
    let mut cmd = e.prepare(&buffer)?;
    cmd.start_offset = start;
    let done = e.submit(&cmd)?;
    expect_ok(&done, len)?;
    ensure(done.packets_completed == 1, || {
        format!("packets_completed {}, expected 1", done.packets_completed)
    })?;
    e.check_pages(&list, 0x5757)
}

fn fence_echoed(e: &mut Engine) -> Outcome {
    // GpuControl::submit fails on any fence mismatch, so completing these is the check.
    for fence in [0, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX] {
        let mut buffer = DmaBufferBuilder::new();
        buffer.push_transfer(&packets::transfer(0, e.vram_at(0), e.vram_at(4096)));
        let mut cmd = e.prepare(&buffer)?;
        cmd.submission_fence_id = fence;
        expect_ok(&e.submit(&cmd)?, 0)?;
    }
    // An error completion echoes the fence too.
    let mut buffer = DmaBufferBuilder::new();
    let mut bad = packets::transfer(0, e.vram_at(0), e.vram_at(4096));
    bad.header.opcode = 0x7777;
    buffer.push_transfer(&bad);
    let mut cmd = e.prepare(&buffer)?;
    cmd.submission_fence_id = 0xdead_beef;
    let done = e.submit(&cmd)?;
    ensure(done.status != SubmitStatus::Ok, || {
        format!("unknown opcode accepted: {done}")
    })
}
