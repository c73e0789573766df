//! `layout_segments`: every memory segment of the capset is really backed by the device as the
//! capset describes it.
//!
//! - CPU-visible segments: a pattern written through the BAR at `bar_offset + offset` must come
//!   out of a TRANSFER from GPU address `BaseAddress + offset` into scattered pages (every byte
//!   and the bytes around it in the pages checked), and a TRANSFER of those pages back to the
//!   segment's last bytes must show up through the BAR at the matching offset (guards around it
//!   intact). A frame inside the segment's BAR window is refused as `FrameInVram`.
//! - Device-only segments (no BAR window): scattered pages → segment → other scattered pages,
//!   every byte checked, with guard ranges around the target read back through TRANSFERs too.
//! - Both: a transfer across every bank boundary of a banked segment; a TRANSFER ending one byte
//!   past the segment end, or starting at the end, or (for a non-zero `BaseAddress`) starting
//!   one byte below it, fails with `SegmentRange` in both directions and writes nothing (checked
//!   through the BAR, or by reading the segment end back).
//!
//! Every segment gets data at the same segment offset with its own tag, and at the end all of
//! it is read again: segments the device aliased onto each other (or onto the wrong part of the
//! BAR) would have overwritten each other. Each check prints a `SEGMENT <id> <check>: ...` line.

use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_abi::WDDM_GPU_PAGE_SHIFT;

use super::valid::Test;
use crate::caps::Segment;
use crate::engine::{expect_ok, expect_status, Engine, VRAM_GUARD};
use crate::failure::{ensure, Failure, Outcome};
use crate::packets::Endpoint;
use crate::scatter::{FrameList, Piece};
use crate::vram::Vram;

/// The test, for the suite.
pub const TESTS: [(&str, Test); 1] = [("layout_segments", layout_segments)];

/// Segment offset every memory segment gets data at (when it is large enough): the same in each,
/// so segments the device aliased onto each other would overwrite each other's pattern.
const COMMON_OFFSET: u64 = 0x10_0043;
/// Bytes of the main round trips (not a page multiple).
const LEN: u64 = (256 << 10) + 0x55;
/// Bytes of the transfers across a bank boundary.
const BANK_LEN: u64 = 8192 + 0x21;
/// Bytes of the out-of-range transfers.
const PROBE_LEN: u64 = 8192;

/// A segment range holding a known pattern, read again at the end.
struct Written {
    segment: Segment,
    /// The segment's BAR window; `None` for device-only segments (read through TRANSFER).
    vram: Option<Vram>,
    offset: u64,
    len: u64,
    tag: u64,
}

/// Where the round trips go in a segment of `size` bytes: `(a, b, len)`, with `[a, a + len)`
/// at [`COMMON_OFFSET`] when it fits in the first half and `[b, b + len)` the segment's last
/// bytes.
fn plan(size: u64) -> (u64, u64, u64) {
    let len = LEN.min(size / 4);
    let a = if COMMON_OFFSET + len <= size / 2 {
        COMMON_OFFSET
    } else {
        0x43
    };
    (a, size - len, len)
}

fn layout_segments(e: &mut Engine) -> Outcome {
    let layout = e.layout.clone();
    let mut written = Vec::new();
    let mut memory = 0;
    for segment in &layout.segments {
        let id = segment.desc.id;
        println!("SEGMENT {id} layout: {}", describe(segment));
        if segment.is_aperture() {
            println!("SEGMENT {id} skipped: an aperture has no storage of its own");
            continue;
        }
        memory += 1;
        let tag = 0x7365_676d_0000_0000 ^ (u64::from(id) << 24);
        let outcome = match segment.bar_offset() {
            Some(_) => cpu_visible(e, segment, tag, &mut written),
            None => device_only(e, segment, tag, &mut written),
        };
        outcome.map_err(|f| Failure(format!("segment {id}: {f}")))?;
    }
    ensure(memory > 0, || "the layout has no memory segment".into())?;

    for w in &written {
        let id = w.segment.desc.id;
        match w.vram {
            Some(vram) => vram
                .check_pattern(w.offset, w.len, w.tag, 0)
                .map_err(|m| Failure(format!("through the BAR: {m}"))),
            None => read_check(e, &w.segment, w.offset, w.len, w.tag, 0x2c5).map(|_| ()),
        }
        .map_err(|f| {
            Failure(format!(
                "segment {id} [{:#x}, +{:#x}) lost its data once every segment was written \
                 (segments aliased?): {f}",
                w.offset, w.len
            ))
        })?;
    }
    println!(
        "SEGMENT all distinct: {} ranges in {memory} memory segment(s) still hold their own \
         patterns after every segment was written",
        written.len()
    );
    Ok(())
}

fn describe(s: &Segment) -> String {
    let d = &s.desc;
    let place = match s.bar_offset() {
        Some(offset) => format!(
            " CPU-visible, bar_offset {offset:#x}, CpuTranslatedAddress {:#x},",
            d.cpu_translated_address
        ),
        None if s.is_aperture() => String::new(),
        None => " device-only (no BAR window), CpuTranslatedAddress 0,".into(),
    };
    let banks = if s.banks.is_empty() {
        String::new()
    } else {
        let ends: Vec<String> = s.banks.iter().map(|b| format!("{b:#x}")).collect();
        format!(", banks ending at {}", ends.join(" "))
    };
    format!(
        "{}{place} BaseAddress {:#x}, Size {:#x}{banks}",
        s.kind(),
        d.base_address,
        d.size
    )
}

/// GPU address of segment offset `offset`, as a TRANSFER endpoint.
fn at(segment: &Segment, offset: u64) -> Endpoint {
    Endpoint::Segment {
        id: segment.desc.id,
        address: segment.gpu_address(offset),
    }
}

/// The ends of `segment`'s banks that lie inside it (the last bank ends at its size).
fn bank_boundaries(segment: &Segment) -> Vec<u64> {
    let size = segment.desc.size;
    segment
        .banks
        .iter()
        .copied()
        .filter(|end| *end < size)
        .collect()
}

/// The [`BANK_LEN`] bytes a bank round trip covers: centred on `boundary`, inside a segment of
/// `size` bytes.
fn around_boundary(boundary: u64, size: u64) -> (u64, u64) {
    let offset = boundary.saturating_sub(BANK_LEN / 2);
    (offset, BANK_LEN.min(size - offset))
}

/// The two halves of the scatter pool, so two lists of one check never share pages.
fn halves(e: &Engine) -> (Vec<Piece>, Vec<Piece>) {
    let (head, tail) = e.pool.pieces().split_at(e.pool.pieces().len() / 2);
    (head.to_vec(), tail.to_vec())
}

// ---- CPU-visible segments --------------------------------------------------------------------

fn cpu_visible(e: &mut Engine, segment: &Segment, tag: u64, written: &mut Vec<Written>) -> Outcome {
    let bar = e.layout.header.vram_bar;
    let bar_offset = segment.bar_offset().unwrap_or_default();
    let vram = Vram::open(e.device.virtio.function(), &bar, segment)?;
    // The BAR bytes right after the segment, when the BAR goes on: a refused transfer past the
    // end must not reach them either.
    let after_end = bar_offset + segment.desc.size;
    let beyond = if after_end < bar.size {
        let len = VRAM_GUARD.min(bar.size - after_end);
        Some(Vram::open_window(
            e.device.virtio.function(),
            &bar,
            after_end,
            len,
        )?)
    } else {
        None
    };
    e.on_segment(segment, vram, |e| {
        banks_via_bar(e, tag)?;
        out_of_range_via_bar(e, beyond, tag)?;
        frame_in_window(e, tag)?;
        let (a, b, len) = plan(e.vram.size);
        round_trip_via_bar(e, a, b, len, tag)?;
        written.push(Written {
            segment: segment.clone(),
            vram: Some(e.vram),
            offset: b,
            len,
            tag,
        });
        // The guard before b must not have covered a's data.
        if a + len + VRAM_GUARD <= b {
            written.push(Written {
                segment: segment.clone(),
                vram: Some(e.vram),
                offset: a,
                len,
                tag,
            });
        }
        Ok(())
    })
    .map_err(|f: Failure| Failure(format!("(CPU-visible, BAR offset {bar_offset:#x}) {f}")))
}

/// BAR → TRANSFER → scattered pages → TRANSFER → the segment's last bytes, checked through the
/// BAR.
fn round_trip_via_bar(e: &mut Engine, a: u64, b: u64, len: u64, tag: u64) -> Outcome {
    let id = e.segment.desc.id;
    let bar_offset = e.segment.bar_offset().unwrap_or_default();
    e.vram_write_and_verify(a, len, tag)?;
    let list = FrameList::shuffled(e.pool.pieces(), 0x2a1, len, &mut e.rng)?;
    e.vram_to_pages(a, &list, tag)?;
    println!(
        "SEGMENT {id} bar_to_pages: {len:#x} bytes written through the BAR at bar_offset + \
         {a:#x} = BAR {:#x}, TRANSFER from GPU address {:#x} into {} scattered frames: every byte \
         and the page bytes around them checked",
        bar_offset + a,
        e.segment.gpu_address(a),
        list.frame_count()
    );
    e.pages_to_vram(&list, b, tag)?;
    println!(
        "SEGMENT {id} pages_to_segment_end: the frames TRANSFERred to GPU address {:#x} (the \
         segment's last {len:#x} bytes), read through the BAR at {:#x}: every byte right, \
         {VRAM_GUARD} guard bytes before it intact",
        e.segment.gpu_address(b),
        bar_offset + b
    );
    Ok(())
}

/// A round trip across every bank boundary of a banked segment, through the BAR.
fn banks_via_bar(e: &mut Engine, tag: u64) -> Outcome {
    let id = e.segment.desc.id;
    let size = e.segment.desc.size;
    let boundaries = bank_boundaries(&e.segment);
    for boundary in &boundaries {
        let (offset, len) = around_boundary(*boundary, size);
        let tag = tag ^ boundary;
        e.vram_write_and_verify(offset, len, tag)?;
        let list = FrameList::shuffled(e.pool.pieces(), 0x77, len, &mut e.rng)?;
        e.vram_to_pages(offset, &list, tag)
            .map_err(|f| Failure(format!("across bank boundary {boundary:#x}: {f}")))?;
        e.fill_pages(&list, !tag);
        e.pages_to_vram(&list, offset, !tag)
            .map_err(|f| Failure(format!("back across bank boundary {boundary:#x}: {f}")))?;
    }
    if !boundaries.is_empty() {
        let list: Vec<String> = boundaries.iter().map(|b| format!("{b:#x}")).collect();
        println!(
            "SEGMENT {id} banks: {BANK_LEN:#x} bytes across each bank boundary ({}) BAR -> \
             pages -> segment, every byte checked",
            list.join(" ")
        );
    }
    Ok(())
}

/// Transfers one byte past the end, at the end and below `BaseAddress` fail with SegmentRange
/// and leave the segment (and the BAR bytes after it, `beyond`) alone.
fn out_of_range_via_bar(e: &mut Engine, beyond: Option<Vram>, tag: u64) -> Outcome {
    let id = e.segment.desc.id;
    let size = e.segment.desc.size;
    let base = e.segment.desc.base_address;
    let keep = (PROBE_LEN + VRAM_GUARD).min(size);
    let (end_tag, beyond_tag, start_tag) = (tag ^ 0xe2d, tag ^ 0xbe70, tag ^ 0x57a7);
    e.vram.fill_pattern(size - keep, keep, end_tag);
    if let Some(window) = &beyond {
        window.fill_pattern(0, window.size, beyond_tag);
    }
    let segment = e.segment.clone();
    let probes = past_end_probes(e, &segment, tag)?;
    e.vram
        .check_pattern(size - keep, keep, end_tag, 0)
        .map_err(|m| Failure(format!("refused transfer past the end wrote VRAM: {m}")))?;
    let mut after = String::new();
    if let Some(window) = &beyond {
        window
            .check_pattern(0, window.size, beyond_tag, 0)
            .map_err(|m| {
                Failure(format!(
                    "refused transfer past the end wrote the BAR after the segment: {m}"
                ))
            })?;
        after = format!(" and the {:#x} BAR bytes after the segment", window.size);
    }
    println!(
        "SEGMENT {id} past_end: {probes} refused with SegmentRange; the segment's last {keep:#x} \
         bytes{after} unchanged (read through the BAR)"
    );
    if base > 0 {
        let len = PROBE_LEN.min(size);
        e.vram.fill_pattern(0, len, start_tag);
        below_base_probes(e, &segment, tag)?;
        e.vram.check_pattern(0, len, start_tag, 0).map_err(|m| {
            Failure(format!(
                "refused transfer below BaseAddress wrote VRAM: {m}"
            ))
        })?;
        println!(
            "SEGMENT {id} below_base: TRANSFERs at GPU address {:#x} (BaseAddress - 1) refused \
             with SegmentRange both ways; the segment's first {len:#x} bytes unchanged",
            base - 1
        );
    }
    Ok(())
}

/// A frame list naming a page inside the segment's BAR window is refused with FrameInVram, and
/// that page keeps its contents.
fn frame_in_window(e: &mut Engine, tag: u64) -> Outcome {
    let id = e.segment.desc.id;
    let size = e.segment.desc.size;
    let offset = (size / 2) & !0xfff;
    let len = 8192.min(size - offset);
    let page = e.vram.bar_address + e.segment.bar_offset().unwrap_or_default() + offset;
    let pfns: Vec<u64> = (0..len.div_ceil(4096))
        .map(|i| (page >> WDDM_GPU_PAGE_SHIFT) + i)
        .collect();
    let dst = Endpoint::Frames {
        list_address: e.place_pfns(&pfns, 1)?,
        frame_count: u32::try_from(pfns.len()).unwrap(),
        byte_offset: 0,
    };
    let list = FrameList::shuffled(e.pool.pieces(), 0, len, &mut e.rng)?;
    e.fill_pages(&list, tag ^ 0xf1);
    let src = e.frames(&list, 0)?;
    e.vram.fill_pattern(offset, len, tag ^ 0xf2);
    let done = e.transfer(len, src, dst)?;
    expect_status(&done, SubmitStatus::FrameInVram)?;
    e.vram
        .check_pattern(offset, len, tag ^ 0xf2, 0)
        .map_err(|m| Failure(format!("refused transfer into BAR frames wrote VRAM: {m}")))?;
    println!(
        "SEGMENT {id} frame_in_window: frames at {page:#x} (segment offset {offset:#x}, inside \
         its BAR window) as a TRANSFER destination refused with FrameInVram, VRAM unchanged"
    );
    Ok(())
}

// ---- device-only segments --------------------------------------------------------------------

fn device_only(e: &mut Engine, segment: &Segment, tag: u64, written: &mut Vec<Written>) -> Outcome {
    let id = segment.desc.id;
    let size = segment.desc.size;
    let base = segment.desc.base_address;
    let fail = |f: Failure| Failure(format!("(device-only) {f}"));

    // Banks first: the round trips below must be the last writes to their ranges.
    let boundaries = bank_boundaries(segment);
    for boundary in &boundaries {
        let (offset, len) = around_boundary(*boundary, size);
        write(e, segment, offset, len, tag ^ boundary, 0x99)
            .and_then(|_| read_check(e, segment, offset, len, tag ^ boundary, 0x1d))
            .map_err(|f| fail(Failure(format!("across bank boundary {boundary:#x}: {f}"))))?;
    }
    if !boundaries.is_empty() {
        let list: Vec<String> = boundaries.iter().map(|b| format!("{b:#x}")).collect();
        println!(
            "SEGMENT {id} banks: {BANK_LEN:#x} bytes across each bank boundary ({}) pages -> \
             segment -> other pages, every byte checked",
            list.join(" ")
        );
    }

    past_end_device_only(e, segment, tag).map_err(fail)?;
    if base > 0 {
        let len = PROBE_LEN.min(size);
        let start_tag = tag ^ 0x57a7;
        write(e, segment, 0, len, start_tag, 0)
            .and_then(|_| below_base_probes(e, segment, tag))
            .and_then(|()| read_check(e, segment, 0, len, start_tag, 0x30).map(|_| ()))
            .map_err(fail)?;
        println!(
            "SEGMENT {id} below_base: TRANSFERs at GPU address {:#x} (BaseAddress - 1) refused \
             with SegmentRange both ways; the segment's first {len:#x} bytes unchanged (read \
             back through TRANSFER)",
            base - 1
        );
    }

    let (a, b, len) = plan(size);
    for (offset, what) in [(a, "inside"), (b, "at the end")] {
        let tag = tag ^ offset;
        // Guards on both sides (clipped to the segment), written first and read back last.
        let before = offset.saturating_sub(VRAM_GUARD);
        let after = (offset + len).min(size);
        let after_len = VRAM_GUARD.min(size - after);
        let guards = [
            (before, offset - before, tag ^ 0x6a),
            (after, after_len, tag ^ 0x6b),
        ];
        for (start, glen, gtag) in guards.iter().filter(|g| g.1 > 0) {
            write(e, segment, *start, *glen, *gtag, 0x11).map_err(fail)?;
        }
        let out = write(e, segment, offset, len, tag, 0x1c3).map_err(fail)?;
        let back = read_check(e, segment, offset, len, tag, 0x0f7).map_err(fail)?;
        for (start, glen, gtag) in guards.iter().filter(|g| g.1 > 0) {
            read_check(e, segment, *start, *glen, *gtag, 0x22)
                .map_err(|f| fail(Failure(format!("guard at {start:#x} changed: {f}"))))?;
        }
        println!(
            "SEGMENT {id} pages_to_segment_to_pages: {len:#x} bytes from {} scattered frames \
             TRANSFERred to GPU address {:#x} ({what}), then TRANSFERred into {} other scattered \
             frames: every byte and the page bytes around them checked; guard ranges around it \
             in the segment read back unchanged",
            out.frame_count(),
            segment.gpu_address(offset),
            back.frame_count()
        );
        // The guard before b must not have covered a's data.
        if offset == b || a + len + VRAM_GUARD <= b {
            written.push(Written {
                segment: segment.clone(),
                vram: None,
                offset,
                len,
                tag,
            });
        }
    }
    Ok(())
}

/// Which way [`transfer_pages`] copies.
#[derive(Clone, Copy)]
enum Way {
    /// Scattered pages from the first pool half (DMA slot 0) → the segment.
    PagesToSegment,
    /// The segment → scattered pages from the second pool half (DMA slot 1).
    SegmentToPages,
}

impl Way {
    /// Prefix of a failure of the copy at GPU `address`.
    fn context(self, address: u64) -> impl Fn(Failure) -> Failure {
        move |f| match self {
            Way::PagesToSegment => Failure(format!("pages -> GPU {address:#x}: {f}")),
            Way::SegmentToPages => Failure(format!("GPU {address:#x} -> pages: {f}")),
        }
    }
}

/// One TRANSFER between fresh shuffled pages (data from `byte_offset`, filled with pattern
/// `fill` and guard bytes first) and segment `[offset, offset + len)`, `way` round; returns the
/// pages.
fn transfer_pages(
    e: &mut Engine,
    way: Way,
    (segment, offset, len): (&Segment, u64, u64),
    fill: u64,
    byte_offset: u32,
) -> Outcome<FrameList> {
    let (head, tail) = halves(e);
    let (pieces, slot) = match way {
        Way::PagesToSegment => (head, 0),
        Way::SegmentToPages => (tail, 1),
    };
    let list = FrameList::shuffled(&pieces, byte_offset, len, &mut e.rng)?;
    e.fill_pages(&list, fill);
    let pages = e.frames(&list, slot)?;
    let (src, dst) = match way {
        Way::PagesToSegment => (pages, at(segment, offset)),
        Way::SegmentToPages => (at(segment, offset), pages),
    };
    let done = e.transfer(len, src, dst)?;
    expect_ok(&done, len).map_err(way.context(segment.gpu_address(offset)))?;
    Ok(list)
}

/// Scattered pages (first pool half) holding pattern `tag` → segment `[offset, offset + len)`.
fn write(
    e: &mut Engine,
    segment: &Segment,
    offset: u64,
    len: u64,
    tag: u64,
    byte_offset: u32,
) -> Outcome<FrameList> {
    let way = Way::PagesToSegment;
    transfer_pages(e, way, (segment, offset, len), tag, byte_offset)
}

/// Segment `[offset, offset + len)` → scattered pages (second pool half, holding other data
/// before); checks every byte is pattern `tag` and the bytes around it in the pages are intact.
fn read_check(
    e: &mut Engine,
    segment: &Segment,
    offset: u64,
    len: u64,
    tag: u64,
    byte_offset: u32,
) -> Outcome<FrameList> {
    let way = Way::SegmentToPages;
    let list = transfer_pages(e, way, (segment, offset, len), !tag, byte_offset)?;
    e.check_pages(&list, tag)
        .map_err(way.context(segment.gpu_address(offset)))?;
    Ok(list)
}

fn past_end_device_only(e: &mut Engine, segment: &Segment, tag: u64) -> Outcome {
    let id = segment.desc.id;
    let size = segment.desc.size;
    let keep = (PROBE_LEN + VRAM_GUARD).min(size);
    let end_tag = tag ^ 0xe2d;
    write(e, segment, size - keep, keep, end_tag, 0x48)?;
    let probes = past_end_probes(e, segment, tag)?;
    read_check(e, segment, size - keep, keep, end_tag, 0x64).map_err(|f| {
        Failure(format!(
            "refused transfer past the end wrote the segment: {f}"
        ))
    })?;
    println!(
        "SEGMENT {id} past_end: {probes} refused with SegmentRange; the segment's last {keep:#x} \
         bytes unchanged (read back through TRANSFER)"
    );
    Ok(())
}

// ---- out-of-range probes, for either kind ----------------------------------------------------

/// Submits one TRANSFER expecting SegmentRange; for a segment source, the destination pages
/// must keep their contents.
fn expect_range_fault(
    e: &mut Engine,
    len: u64,
    segment_side: Endpoint,
    into_segment: bool,
    tag: u64,
) -> Outcome {
    let list = FrameList::shuffled(e.pool.pieces(), 0x10, len, &mut e.rng)?;
    e.fill_pages(&list, tag);
    let pages = e.frames(&list, 0)?;
    let (src, dst) = if into_segment {
        (pages, segment_side)
    } else {
        (segment_side, pages)
    };
    let done = e.transfer(len, src, dst)?;
    expect_status(&done, SubmitStatus::SegmentRange)?;
    e.check_pages(&list, tag)
        .map_err(|f| Failure(format!("refused transfer wrote the pages: {f}")))
}

/// The transfers past the end of `segment`, both directions; returns what was sent.
fn past_end_probes(e: &mut Engine, segment: &Segment, tag: u64) -> Outcome<String> {
    let size = segment.desc.size;
    let len = PROBE_LEN.min(size);
    let one_past = size - len + 1;
    for into in [true, false] {
        expect_range_fault(e, len, at(segment, one_past), into, tag ^ 0x9a)
            .map_err(|f| Failure(format!("{len:#x} bytes at offset {one_past:#x}: {f}")))?;
        expect_range_fault(e, 1, at(segment, size), into, tag ^ 0x9b)
            .map_err(|f| Failure(format!("1 byte at offset {size:#x} (the end): {f}")))?;
    }
    Ok(format!(
        "TRANSFERs of {len:#x} bytes at GPU address {:#x} (ending 1 byte past the end) and of 1 \
         byte at {:#x} (the end), each way,",
        segment.gpu_address(one_past),
        segment.gpu_address(size)
    ))
}

/// The transfers starting one byte below `BaseAddress` of `segment`, both directions.
fn below_base_probes(e: &mut Engine, segment: &Segment, tag: u64) -> Outcome {
    let len = PROBE_LEN.min(segment.desc.size);
    let below = Endpoint::Segment {
        id: segment.desc.id,
        address: segment.desc.base_address - 1,
    };
    for into in [true, false] {
        expect_range_fault(e, len, below, into, tag ^ 0xb5)
            .map_err(|f| Failure(format!("{len:#x} bytes at BaseAddress - 1: {f}")))?;
    }
    Ok(())
}
