//! One test per kind of paging work: MAP_APERTURE of scattered pages and TRANSFERs through it,
//! FILL, DISCARD/READ/WRITE_PHYSICAL, MAP_APERTURE2 in both ADL forms, a DMA buffer that lives
//! in the aperture, and UNMAP to the dummy page. Every byte is checked: VRAM through the BAR,
//! pages through the guest mapping, with guards around each target.

use wddm_gpu_abi::packet::{
    WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE, WDDM_GPU_OP_DISCARD_CONTENT,
    WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL,
};
use zerocopy::IntoBytes;

use super::{
    check_list, check_vram, compare, expect_done, pattern_bytes, read_pieces, read_segment, seg_at,
    write_list, write_pieces, write_segment, Ctx, PAGE, PAGE_GUARD, PAGE_USIZE,
};
use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu;
use crate::packets::{self, Adl, DmaBufferBuilder};

/// Aperture pages each test maps at.
const OPS_PAGE: u64 = 0x100;
const PHYS_PAGE: u64 = 0x300;
const MAP2_PAGE: u64 = 0x400;
const UNMAP_PAGE: u64 = 0x800;
const BUFFER_PAGE: u64 = 0xc00;

/// Adds what was being done to a failure.
pub fn during(what: &str) -> impl FnOnce(Failure) -> Failure + '_ {
    move |f| Failure(format!("{what}: {f}"))
}

/// `len` bytes of a FILL with `pattern`.
pub fn fill_bytes(pattern: u32, len: u64) -> Vec<u8> {
    pattern
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(usize::try_from(len).unwrap())
        .collect()
}

/// MAP_APERTURE of scattered pages (with an `MdlOffset`), then TRANSFERs aperture → VRAM,
/// VRAM → aperture, aperture → scattered frames and frames → aperture, at offsets inside pages.
pub fn map_aperture_transfers(e: &mut Engine, c: &mut Ctx) -> Outcome {
    const LEAD: usize = 3;
    const MAPPED: usize = 37;
    let pieces = c.pieces(LEAD + MAPPED)?;
    let mut model = pattern_bytes(0x6170_0001, 0, MAPPED as u64 * PAGE);
    write_pieces(e, &pieces[LEAD..], &model);
    let lead = vec![PAGE_GUARD; LEAD * PAGE_USIZE];
    write_pieces(e, &pieces[..LEAD], &lead);
    let done = e.run_one(&c.map_packet(
        OPS_PAGE,
        &pieces,
        u32::try_from(LEAD).unwrap(),
        MAPPED as u64,
    )?)?;
    expect_done(&done, 0, 1).map_err(during("MAP_APERTURE of 37 scattered pages"))?;
    let base = OPS_PAGE * PAGE;
    let check_pages = |e: &Engine, model: &[u8], what: &str| -> Outcome {
        compare(
            &format!("{what}: mapped pages"),
            &read_pieces(e, &pieces[LEAD..]),
            model,
            0,
        )?;
        compare(
            &format!("{what}: the PFN array's entries before MdlOffset (not mapped)"),
            &read_pieces(e, &pieces[..LEAD]),
            &lead,
            0,
        )
    };

    // Aperture -> VRAM, starting inside the first page.
    let (src, len, dst) = (0x123u64, 20 * PAGE + 0x2b1, 0x10_0007u64);
    e.require_vram(dst, len)?;
    e.guard_vram(dst, len, 0x6701);
    let done = e.transfer(len, c.ap(base + src), e.vram_at(dst))?;
    expect_done(&done, len, 1).map_err(during("aperture -> VRAM"))?;
    let want = &model[usize::try_from(src).unwrap()..usize::try_from(src + len).unwrap()];
    check_vram(e, dst, want, "aperture -> VRAM")?;
    e.check_vram_guard(dst, len, 0x6701)?;

    // VRAM -> aperture.
    let (src, len, dst) = (0x14_0003u64, 9 * PAGE + 0x77, 5 * PAGE + 0x3f1);
    e.require_vram(src, len)?;
    let data = pattern_bytes(0x6170_0002, 0, len);
    e.vram.write(src, &data);
    let done = e.transfer(len, e.vram_at(src), c.ap(base + dst))?;
    expect_done(&done, len, 1).map_err(during("VRAM -> aperture"))?;
    model[usize::try_from(dst).unwrap()..usize::try_from(dst + len).unwrap()]
        .copy_from_slice(&data);
    check_pages(e, &model, "VRAM -> aperture")?;

    // Aperture -> scattered frames.
    let (src, len) = (2 * PAGE + 0x10, 10 * PAGE + 5);
    let list = c.list(0x2c8, len)?;
    write_list(e, &list, &vec![0; usize::try_from(len).unwrap()]);
    let frames = c.frames(&list)?;
    let done = e.transfer(len, c.ap(base + src), frames)?;
    expect_done(&done, len, 1).map_err(during("aperture -> frames"))?;
    check_list(
        e,
        &list,
        &model[usize::try_from(src).unwrap()..usize::try_from(src + len).unwrap()],
        "aperture -> frames",
    )?;

    // Scattered frames -> aperture, across page boundaries.
    let (dst, len) = (30 * PAGE - 0x100, 5 * PAGE + 0x201);
    let list = c.list(7, len)?;
    let data = pattern_bytes(0x6170_0003, 0, len);
    write_list(e, &list, &data);
    let frames = c.frames(&list)?;
    let done = e.transfer(len, frames, c.ap(base + dst))?;
    expect_done(&done, len, 1).map_err(during("frames -> aperture"))?;
    model[usize::try_from(dst).unwrap()..usize::try_from(dst + len).unwrap()]
        .copy_from_slice(&data);
    check_pages(e, &model, "frames -> aperture")?;
    check_list(e, &list, &data, "frames -> aperture: source")?;
    println!(
        "PAGING map_aperture: 37 scattered pages at aperture page {OPS_PAGE:#x} (MdlOffset 3); \
         aperture<->VRAM and aperture<->frames moved every byte"
    );
    Ok(())
}

/// FILL: lengths that are and are not multiples of 4, a zero length, one across 1 MiB chunks;
/// every byte and the guards around each checked through the BAR. Device-only segments (and
/// other memory segments) get one FILL too, read back with a TRANSFER.
pub fn fill(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let cases: [(u64, u64, u32); 4] = [
        (0x20_0003, 0x1_0003, 0xa1b2_c3d4),
        (0x22_0001, (1 << 20) + (1 << 19) + 2, 0x0102_0304),
        (0x3f_0000, 0, 0xffff_ffff),
        (0x3f_4001, 7, 0x5566_7788),
    ];
    let mut b = DmaBufferBuilder::new();
    let mut total = 0;
    for (i, &(offset, len, pattern)) in cases.iter().enumerate() {
        e.require_vram(offset, len)?;
        e.guard_vram(offset, len, 0xf111 + i as u64);
        b.push(&packets::fill(pattern, len, e.vram_at(offset)));
        total += len;
    }
    let done = e.run(&b)?;
    expect_done(&done, total, u32::try_from(cases.len()).unwrap()).map_err(during("FILL"))?;
    for (i, &(offset, len, pattern)) in cases.iter().enumerate() {
        check_vram(
            e,
            offset,
            &fill_bytes(pattern, len),
            &format!("FILL {pattern:#010x} x {len:#x} at {offset:#x}"),
        )?;
        e.check_vram_guard(offset, len, 0xf111 + i as u64)?;
    }

    let others: Vec<_> = e
        .layout
        .memory_segments()
        .filter(|s| s.desc.id != e.segment.desc.id)
        .cloned()
        .collect();
    for segment in others {
        let (offset, len, guard) = (0x1003u64, 0x2_0001u64, PAGE);
        if offset + len + guard > segment.desc.size {
            continue;
        }
        let mut want = pattern_bytes(0x6669_6c6c ^ u64::from(segment.desc.id), 0, len + 2 * guard);
        write_segment(e, c, &segment, offset - guard, &want)?;
        let done = e.run_one(&packets::fill(0x0bad_cafe, len, seg_at(&segment, offset)))?;
        expect_done(&done, len, 1).map_err(during("FILL on another memory segment"))?;
        want[usize::try_from(guard).unwrap()..usize::try_from(guard + len).unwrap()]
            .copy_from_slice(&fill_bytes(0x0bad_cafe, len));
        let got = read_segment(e, c, &segment, offset - guard, len + 2 * guard)?;
        compare(
            &format!(
                "FILL on segment {} ({}), read back by TRANSFER with a page either side",
                segment.desc.id,
                if segment.is_device_only() {
                    "device-only"
                } else {
                    "CPU-visible"
                }
            ),
            &got,
            &want,
            offset - guard,
        )?;
        println!(
            "PAGING fill: segment {} [{offset:#x}, +{len:#x}) filled, guards intact",
            segment.desc.id
        );
    }
    Ok(())
}

/// DISCARD_CONTENT (both flag values), READ_PHYSICAL and WRITE_PHYSICAL of every size 1-8 on
/// VRAM, a mapped aperture page and every other memory segment: all complete, move nothing,
/// and leave the bytes they name as they were.
pub fn segment_access(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let (region, len) = (0x28_0000u64, 0x1_0000u64);
    e.require_vram(region, len)?;
    let data = pattern_bytes(0x7068_7973, 0, len);
    e.vram.write(region, &data);
    let piece = c.pieces(1)?;
    let page = pattern_bytes(0x7068_7974, 0, PAGE);
    write_pieces(e, &piece, &page);
    c.map(e, PHYS_PAGE, &piece)?;

    let vram = e.segment.clone();
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::segment_access(
        WDDM_GPU_OP_DISCARD_CONTENT,
        vram.desc.id,
        vram.gpu_address(region),
        0,
    ));
    b.push(&packets::segment_access(
        WDDM_GPU_OP_DISCARD_CONTENT,
        vram.desc.id,
        vram.gpu_address(region + 0x1000),
        WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
    ));
    for size in 1..=8u32 {
        let at = region + 0x100 * u64::from(size) + u64::from(size);
        for op in [WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL] {
            b.push(&packets::segment_access(
                op,
                vram.desc.id,
                vram.gpu_address(at),
                size,
            ));
        }
    }
    // The segment's last 8 bytes, and a mapped aperture page.
    b.push(&packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        vram.desc.id,
        vram.gpu_address(vram.desc.size - 8),
        8,
    ));
    let ap = c.ap_id();
    let ap_base = c.aperture.gpu_address(PHYS_PAGE * PAGE);
    b.push(&packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        ap,
        ap_base + PAGE - 8,
        8,
    ));
    b.push(&packets::segment_access(
        WDDM_GPU_OP_WRITE_PHYSICAL,
        ap,
        ap_base + 3,
        4,
    ));
    for segment in e
        .layout
        .memory_segments()
        .filter(|s| s.desc.id != vram.desc.id)
    {
        for (op, arg) in [
            (
                WDDM_GPU_OP_DISCARD_CONTENT,
                WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
            ),
            (WDDM_GPU_OP_READ_PHYSICAL, 2),
            (WDDM_GPU_OP_WRITE_PHYSICAL, 8),
        ] {
            b.push(&packets::segment_access(
                op,
                segment.desc.id,
                segment.gpu_address(0x2000),
                arg,
            ));
        }
    }
    let count = b.len() / 24;
    let done = e.run(&b)?;
    expect_done(&done, 0, count).map_err(during("DISCARD/READ/WRITE_PHYSICAL"))?;
    check_vram(
        e,
        region,
        &data,
        "VRAM named by DISCARD/READ/WRITE_PHYSICAL",
    )?;
    compare(
        "aperture page named by READ/WRITE_PHYSICAL",
        &read_pieces(e, &piece),
        &page,
        0,
    )?;
    println!("PAGING segment_access: {count} DISCARD/READ/WRITE_PHYSICAL packets completed");
    Ok(())
}

/// MAP_APERTURE2 from a contiguous ADL (base page + count, with an AdlOffset) and from a page
/// array, TRANSFERs both ways through each, and a remap over part of the first range.
pub fn map_aperture2(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let ap = c.ap_id();
    let flags = c.map_flags;
    // Contiguous: 16 pages of one hugepage, map pages 2..14.
    let buf = c.contiguous;
    let mut contiguous = pattern_bytes(0x6d61_7032, 0, 16 * PAGE);
    buf.write(0, &contiguous);
    let done = e.run_one(&packets::map_aperture2(
        ap,
        flags,
        MAP2_PAGE,
        12,
        Adl::Contiguous {
            base_page: buf.phys() / PAGE,
            page_count: 16,
        },
        2,
    ))?;
    expect_done(&done, 0, 1).map_err(during("MAP_APERTURE2 (contiguous)"))?;
    let dst = 0x30_0000u64;
    let len = 12 * PAGE;
    e.require_vram(dst, len)?;
    e.guard_vram(dst, len, 0x3232);
    let done = e.transfer(len, c.ap(MAP2_PAGE * PAGE), e.vram_at(dst))?;
    expect_done(&done, len, 1).map_err(during("contiguous ADL -> VRAM"))?;
    check_vram(
        e,
        dst,
        &contiguous[2 * PAGE_USIZE..14 * PAGE_USIZE],
        "contiguous ADL -> VRAM",
    )?;
    e.check_vram_guard(dst, len, 0x3232)?;
    let (src, wlen, at) = (0x33_0005u64, 3 * PAGE + 0x55, 4 * PAGE + 0x80);
    let data = pattern_bytes(0x6d61_7033, 0, wlen);
    e.vram.write(src, &data);
    let done = e.transfer(wlen, e.vram_at(src), c.ap(MAP2_PAGE * PAGE + at))?;
    expect_done(&done, wlen, 1).map_err(during("VRAM -> contiguous ADL"))?;
    let start = usize::try_from(2 * PAGE + at).unwrap();
    contiguous[start..start + usize::try_from(wlen).unwrap()].copy_from_slice(&data);
    let mut got = vec![0u8; contiguous.len()];
    buf.read(0, &mut got);
    compare(
        "VRAM -> contiguous ADL: the 16 pages (2 before and 2 after the mapped 12)",
        &got,
        &contiguous,
        0,
    )?;

    // Page array: 10 scattered pages, map entries 1..9.
    let pieces = c.pieces(10)?;
    let array = pattern_bytes(0x6d61_7034, 0, 10 * PAGE);
    write_pieces(e, &pieces, &array);
    let address = c.place_piece_pfns(&pieces)?;
    let done = e.run_one(&packets::map_aperture2(
        ap,
        flags,
        MAP2_PAGE + 16,
        8,
        Adl::Pages {
            address,
            page_count: 10,
        },
        1,
    ))?;
    expect_done(&done, 0, 1).map_err(during("MAP_APERTURE2 (page array)"))?;
    let (src, len, dst) = (0x77u64, 8 * PAGE - 0x77 - 0x10, 0x34_0003u64);
    e.guard_vram(dst, len, 0x3434);
    let done = e.transfer(len, c.ap((MAP2_PAGE + 16) * PAGE + src), e.vram_at(dst))?;
    expect_done(&done, len, 1).map_err(during("page-array ADL -> VRAM"))?;
    let from = PAGE_USIZE + usize::try_from(src).unwrap();
    check_vram(
        e,
        dst,
        &array[from..from + usize::try_from(len).unwrap()],
        "page-array ADL -> VRAM",
    )?;
    e.check_vram_guard(dst, len, 0x3434)?;

    // Remap the first 4 pages of the contiguous range onto other scattered pages.
    let remap = c.pieces(4)?;
    let fresh = pattern_bytes(0x6d61_7035, 0, 4 * PAGE);
    write_pieces(e, &remap, &fresh);
    let address = c.place_piece_pfns(&remap)?;
    let done = e.run_one(&packets::map_aperture2(
        ap,
        flags,
        MAP2_PAGE,
        4,
        Adl::Pages {
            address,
            page_count: 4,
        },
        0,
    ))?;
    expect_done(&done, 0, 1).map_err(during("MAP_APERTURE2 remap"))?;
    let done = e.transfer(len_pages(12), c.ap(MAP2_PAGE * PAGE), e.vram_at(dst))?;
    expect_done(&done, len_pages(12), 1).map_err(during("remapped range -> VRAM"))?;
    let mut want = fresh.clone();
    want.extend_from_slice(&contiguous[6 * PAGE_USIZE..14 * PAGE_USIZE]);
    check_vram(e, dst, &want, "remapped range -> VRAM")?;
    println!(
        "PAGING map_aperture2: contiguous ADL (AdlOffset 2) at page {MAP2_PAGE:#x}, page array \
         (AdlOffset 1) at {:#x}, remap of 4 pages",
        MAP2_PAGE + 16
    );
    Ok(())
}

fn len_pages(n: u64) -> u64 {
    n * PAGE
}

/// A paging buffer in the aperture: its scattered pages mapped there and the buffer submitted
/// with `dma_buffer_segment_id` = the aperture at a GPU address inside a page. It maps data
/// pages, runs 70 small TRANSFERs (VRAM to scattered frames and to the aperture, several
/// packets straddling the buffer's page boundaries) and a FILL; then only its last packet runs
/// again from a `start_offset`.
pub fn buffer_in_aperture(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let paging = e.layout.header.paging_buffer_segment_id;
    ensure(paging == 0 || paging == c.ap_id(), || {
        format!(
            "PagingBufferSegmentId {paging} is not the aperture {} the tests use",
            c.ap_id()
        )
    })?;
    const CHUNKS: u64 = 70;
    const CHUNK: u64 = 100;
    let (src, fill_at, fill_len) = (0x38_0011u64, 0x3a_0003u64, 0x1003u64);
    let (pad_src, pad_dst, pad_len) = (0x3b_0000u64, 0x3b_8001u64, 0x81u64);
    e.require_vram(src, CHUNKS * CHUNK)?;
    e.require_vram(fill_at, fill_len)?;
    e.require_vram(pad_dst, pad_len)?;
    let source = pattern_bytes(0x6275_6601, 0, CHUNKS * CHUNK);
    e.vram.write(src, &source);
    let pad = pattern_bytes(0x6275_6602, 0, pad_len);
    e.vram.write(pad_src, &pad);
    e.guard_vram(fill_at, fill_len, 0x6275);
    e.guard_vram(pad_dst, pad_len, 0x6276);

    let data_pieces = c.pieces(6)?;
    let mut aperture_model = pattern_bytes(0x6275_6603, 0, 6 * PAGE);
    write_pieces(e, &data_pieces, &aperture_model);
    let list_len = 0x33 + CHUNKS * CHUNK;
    let list = c.list(0, list_len)?;
    let mut list_model = vec![0u8; usize::try_from(list_len).unwrap()];
    write_list(e, &list, &list_model);
    let frames = c.frames(&list)?;
    let crate::packets::Endpoint::Frames {
        list_address,
        frame_count,
        ..
    } = frames
    else {
        return Err(Failure("frame endpoint expected".into()));
    };

    let mut b = DmaBufferBuilder::new();
    // A TRANSFER padded to 72 bytes, so the 64-byte packets after it straddle page boundaries.
    let mut padded = packets::transfer(pad_len, e.vram_at(pad_src), e.vram_at(pad_dst));
    padded.header.size = 72;
    let mut raw = padded.as_bytes().to_vec();
    raw.extend_from_slice(&[0; 8]);
    b.push_raw(&raw);
    b.push(&c.map_packet(BUFFER_PAGE, &data_pieces, 0, 6)?);
    let ap_data = BUFFER_PAGE * PAGE + 0x10;
    for i in 0..CHUNKS {
        let from = e.vram_at(src + i * CHUNK);
        let packet = if i % 2 == 0 {
            let to = crate::packets::Endpoint::Frames {
                list_address,
                frame_count,
                byte_offset: u32::try_from(0x33 + i * CHUNK).unwrap(),
            };
            list_model[usize::try_from(0x33 + i * CHUNK).unwrap()
                ..usize::try_from(0x33 + (i + 1) * CHUNK).unwrap()]
                .copy_from_slice(
                    &source[usize::try_from(i * CHUNK).unwrap()
                        ..usize::try_from((i + 1) * CHUNK).unwrap()],
                );
            packets::transfer(CHUNK, from, to)
        } else {
            let at = 0x10 + i * CHUNK;
            aperture_model[usize::try_from(at).unwrap()..usize::try_from(at + CHUNK).unwrap()]
                .copy_from_slice(
                    &source[usize::try_from(i * CHUNK).unwrap()
                        ..usize::try_from((i + 1) * CHUNK).unwrap()],
                );
            packets::transfer(CHUNK, from, c.ap(ap_data + i * CHUNK))
        };
        b.push_transfer(&packet);
    }
    let fill_offset = b.push(&packets::fill(0x1234_5678, fill_len, e.vram_at(fill_at)));
    ensure(b.len() > 4096, || "the buffer should span pages".into())?;
    let packets_total = 3 + u32::try_from(CHUNKS).unwrap();
    let skew = 0x40;
    let cmd = c.prepare_in_aperture(e, &b, skew)?;
    let done = e.submit(&cmd)?;
    expect_done(&done, pad_len + CHUNKS * CHUNK + fill_len, packets_total).map_err(during(
        "a DMA buffer of 4.6 KiB in the aperture (dma_buffer_segment_id = the aperture)",
    ))?;
    check_vram(e, pad_dst, &pad, "padded first packet")?;
    e.check_vram_guard(pad_dst, pad_len, 0x6276)?;
    check_list(e, &list, &list_model, "even chunks to scattered frames")?;
    compare(
        "odd chunks to the aperture (pages)",
        &read_pieces(e, &data_pieces),
        &aperture_model,
        0,
    )?;
    check_vram(e, fill_at, &fill_bytes(0x1234_5678, fill_len), "FILL")?;
    e.check_vram_guard(fill_at, fill_len, 0x6275)?;

    // Only the FILL again, with a different pattern, from a start_offset.
    let mut b2 = b.clone();
    let patched = packets::fill(0x8765_4321, fill_len, e.vram_at(fill_at));
    let mut bytes = b2.bytes().to_vec();
    bytes[fill_offset as usize..fill_offset as usize + 48].copy_from_slice(patched.as_bytes());
    b2 = DmaBufferBuilder::new();
    b2.push_raw(&bytes);
    let mut cmd = c.prepare_in_aperture(e, &b2, skew)?;
    cmd.start_offset = fill_offset;
    let done = e.submit(&cmd)?;
    expect_done(&done, fill_len, 1).map_err(during("start_offset inside the aperture buffer"))?;
    check_vram(e, fill_at, &fill_bytes(0x8765_4321, fill_len), "FILL again")?;
    check_list(e, &list, &list_model, "frames untouched by the partial run")?;
    println!(
        "PAGING buffer_in_aperture: {}-byte buffer at aperture page {:#x} + {skew:#x} over 16 \
         scattered pages, {packets_total} packets",
        b.len(),
        super::DMA_PAGE
    );
    Ok(())
}

/// UNMAP_APERTURE points pages at the dummy page: reads through them return the dummy page,
/// writes land on it (and not on the pages mapped before), mapped neighbours keep working, and
/// a page can be mapped again.
pub fn unmap_dummy_page(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let q = c.pieces(4)?;
    let mut model = pattern_bytes(0x756e_6d01, 0, 4 * PAGE);
    write_pieces(e, &q, &model);
    c.map(e, UNMAP_PAGE, &q)?;
    let dummy = c.dummy;
    let mut dummy_model = pattern_bytes(0x756e_6d02, 0, PAGE);
    dummy.write(0, &dummy_model);
    let read_dummy = || {
        let mut d = vec![0u8; PAGE_USIZE];
        dummy.read(0, &mut d);
        d
    };
    let ap = c.ap_id();
    let base = UNMAP_PAGE * PAGE;

    let done = e.run_one(&packets::unmap_aperture(
        ap,
        UNMAP_PAGE + 1,
        2,
        dummy.phys(),
    ))?;
    expect_done(&done, 0, 1).map_err(during("UNMAP_APERTURE of pages 1-2 of 4"))?;

    // Reads: page 0, dummy, dummy, page 3.
    let dst = 0x3c_0000u64;
    e.require_vram(dst, 4 * PAGE)?;
    let read_back = |e: &mut Engine, c: &mut Ctx, what: &str, want: &[u8]| -> Outcome {
        let done = e.transfer(4 * PAGE, c.ap(base), e.vram_at(dst))?;
        expect_done(&done, 4 * PAGE, 1).map_err(during(what))?;
        check_vram(e, dst, want, what)
    };
    let expect_reads = |model: &[u8], dummy: &[u8]| {
        let mut want = model[..PAGE_USIZE].to_vec();
        want.extend_from_slice(dummy);
        want.extend_from_slice(dummy);
        want.extend_from_slice(&model[3 * PAGE_USIZE..]);
        want
    };
    read_back(
        e,
        c,
        "aperture -> VRAM over unmapped pages",
        &expect_reads(&model, &dummy_model),
    )?;

    // A page-sized write to an unmapped page lands on the dummy page only.
    let src = 0x3d_0000u64;
    let one = pattern_bytes(0x756e_6d03, 0, PAGE);
    e.vram.write(src, &one);
    let done = e.transfer(PAGE, e.vram_at(src), c.ap(base + PAGE))?;
    expect_done(&done, PAGE, 1).map_err(during("VRAM -> unmapped aperture page"))?;
    dummy_model = one.clone();
    compare(
        "dummy page after a write to an unmapped page",
        &read_dummy(),
        &dummy_model,
        0,
    )?;
    compare(
        "pages mapped before the UNMAP (must not be written)",
        &read_pieces(e, &q),
        &model,
        0,
    )?;

    // A write over all four pages: mapped ends get their bytes, the dummy page one of the two
    // unmapped pages' bytes.
    let four = pattern_bytes(0x756e_6d04, 0, 4 * PAGE);
    e.vram.write(src, &four);
    let done = e.transfer(4 * PAGE, e.vram_at(src), c.ap(base))?;
    expect_done(&done, 4 * PAGE, 1).map_err(during("VRAM -> 4 pages, 2 of them unmapped"))?;
    model[..PAGE_USIZE].copy_from_slice(&four[..PAGE_USIZE]);
    model[3 * PAGE_USIZE..].copy_from_slice(&four[3 * PAGE_USIZE..]);
    compare(
        "pages after a write over mapped and unmapped pages",
        &read_pieces(e, &q),
        &model,
        0,
    )?;
    let got = read_dummy();
    let which = [1usize, 2]
        .into_iter()
        .find(|p| got[..] == four[p * PAGE_USIZE..(p + 1) * PAGE_USIZE]);
    let Some(which) = which else {
        return Err(Failure(
            "dummy page holds neither unmapped page's bytes after a write over both".into(),
        ));
    };
    dummy_model = got;
    read_back(
        e,
        c,
        "aperture -> VRAM after writes",
        &expect_reads(&model, &dummy_model),
    )?;

    // A write straddling mapped page 0 and unmapped page 1.
    let (at, len) = (PAGE - 0x10, 0x20u64);
    let small = pattern_bytes(0x756e_6d05, 0, len);
    e.vram.write(src, &small);
    let done = e.transfer(len, e.vram_at(src), c.ap(base + at))?;
    expect_done(&done, len, 1).map_err(during("write straddling a mapped and an unmapped page"))?;
    model[usize::try_from(at).unwrap()..PAGE_USIZE].copy_from_slice(&small[..0x10]);
    dummy_model[..0x10].copy_from_slice(&small[0x10..]);
    compare(
        "page 0 after the straddling write",
        &read_pieces(e, &q),
        &model,
        0,
    )?;
    compare(
        "dummy page after the straddling write",
        &read_dummy(),
        &dummy_model,
        0,
    )?;

    // READ_PHYSICAL through the dummy page works; page 1 mapped again reads its new page.
    let fresh = c.pieces(1)?;
    let fresh_bytes = pattern_bytes(0x756e_6d06, 0, PAGE);
    write_pieces(e, &fresh, &fresh_bytes);
    let mut b = DmaBufferBuilder::new();
    b.push(&packets::segment_access(
        WDDM_GPU_OP_READ_PHYSICAL,
        ap,
        c.aperture.gpu_address(base + 2 * PAGE + 8),
        8,
    ));
    b.push(&c.map_packet(UNMAP_PAGE + 1, &fresh, 0, 1)?);
    expect_done(&e.run(&b)?, 0, 2).map_err(during("READ_PHYSICAL via dummy page, then MAP"))?;
    let mut want = model[..PAGE_USIZE].to_vec();
    want.extend_from_slice(&fresh_bytes);
    want.extend_from_slice(&dummy_model);
    want.extend_from_slice(&model[3 * PAGE_USIZE..]);
    read_back(e, c, "aperture -> VRAM after remapping page 1", &want)?;
    println!(
        "PAGING unmap: reads through unmapped pages return the dummy page, writes land on it \
         (4-page write left unmapped page {which}'s bytes there), remap works"
    );
    Ok(())
}

/// Overlapping VRAM → VRAM TRANSFERs behave as memmove, upwards and downwards, both inside
/// one 1 MiB chunk of the engine and across chunk boundaries. Every case runs on fresh data and
/// all failures are reported together.
pub fn transfer_overlap(e: &mut Engine, _c: &mut Ctx) -> Outcome {
    let base = 0x50_0003u64;
    let shift = 0x1001u64;
    let cases: [(&str, u64, u64, u64); 4] = [
        ("upwards, 0x8005 bytes", 0x8005, shift, 2 * shift),
        ("downwards, 0x8005 bytes", 0x8005, 2 * shift, shift / 2),
        (
            "upwards, 1 MiB + 0x8005 bytes",
            (1 << 20) + 0x8005,
            0,
            shift,
        ),
        (
            "downwards, 1 MiB + 0x8005 bytes",
            (1 << 20) + 0x8005,
            2 * shift,
            shift / 2,
        ),
    ];
    let mut failures = Vec::new();
    for (i, &(name, len, from, to)) in cases.iter().enumerate() {
        let span = len + 2 * shift;
        e.require_vram(base, span)?;
        let mut model = pattern_bytes(0x6f76_6c70 + i as u64, 0, span);
        e.vram.write(base, &model);
        let done = e.transfer(len, e.vram_at(base + from), e.vram_at(base + to))?;
        model.copy_within(
            usize::try_from(from).unwrap()..usize::try_from(from + len).unwrap(),
            usize::try_from(to).unwrap(),
        );
        let outcome = expect_done(&done, len, 1).and_then(|()| {
            let got = super::read_vram(e, base, span)?;
            compare(
                &format!(
                    "TRANSFER of {len:#x} bytes from VRAM {:#x} to {:#x}",
                    base + from,
                    base + to
                ),
                &got,
                &model,
                base,
            )
        });
        if let Err(f) = outcome {
            failures.push(format!("{name}: {f}"));
        }
    }
    ensure(failures.is_empty(), || {
        format!(
            "overlapping copies are not memmove: {}",
            failures.join("; ")
        )
    })
}

/// DMA buffers in VRAM (`dma_buffer_segment_id` = a memory segment): written through the BAR
/// into the engine's segment (and with a TRANSFER into every other memory segment), executed
/// from there, and left unchanged by running; one that runs past its segment's end is refused
/// with BadDmaBuffer.
pub fn buffer_in_vram(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let (src, dst, len) = (0x3d_0007u64, 0x3d_8001u64, 0x2345u64);
    e.require_vram(dst, len + PAGE)?;
    let mut segments = vec![e.segment.clone()];
    segments.extend(
        e.layout
            .memory_segments()
            .filter(|s| s.desc.id != e.segment.desc.id && s.desc.size >= 0x40_0000)
            .cloned(),
    );
    for (i, segment) in segments.iter().enumerate() {
        let tag = 0x766d_0000 + i as u64;
        let data = pattern_bytes(tag, 0, len);
        e.vram.write(src, &data);
        e.guard_vram(dst, len, tag);
        let list = c.list(0x99, len)?;
        write_list(e, &list, &vec![0; usize::try_from(len).unwrap()]);
        let mut b = DmaBufferBuilder::new();
        b.push_transfer(&packets::transfer(len, e.vram_at(src), e.vram_at(dst)));
        b.push_transfer(&packets::transfer(len, e.vram_at(dst), c.frames(&list)?));
        b.push(&packets::fill(0x0f0e_0d0c, 0x101, e.vram_at(src)));
        let at = 0x30_0040u64;
        if i == 0 {
            e.require_vram(at, u64::from(b.len()))?;
            e.vram.write(at, b.bytes());
        } else {
            write_segment(e, c, segment, at, b.bytes())?;
        }
        let mut cmd = gpu::submit_command(0, b.len(), 0, b.len(), e.fence());
        cmd.dma_buffer_segment_id = segment.desc.id;
        cmd.dma_buffer_address = segment.gpu_address(at);
        let done = e.submit(&cmd)?;
        let what = format!("a DMA buffer in segment {} at {at:#x}", segment.desc.id);
        expect_done(&done, 2 * len + 0x101, 3).map_err(during(&what))?;
        check_vram(e, dst, &data, &what)?;
        e.check_vram_guard(dst, len, tag)?;
        check_list(e, &list, &data, &what)?;
        check_vram(e, src, &fill_bytes(0x0f0e_0d0c, 0x101), &what)?;
        let kept = if i == 0 {
            super::read_vram(e, at, u64::from(b.len()))?
        } else {
            read_segment(e, c, segment, at, u64::from(b.len()))?
        };
        compare(
            &format!("{what}: the buffer after it ran"),
            &kept,
            b.bytes(),
            0,
        )?;

        // The same buffer named so that it runs past the segment's end.
        let mut past = cmd;
        past.submission_fence_id = e.fence();
        past.dma_buffer_address = segment.gpu_address(segment.desc.size - 0x20);
        let done = e.submit(&past)?;
        crate::engine::expect_status(&done, wddm_gpu_abi::submit::SubmitStatus::BadDmaBuffer)
            .map_err(during(&format!(
                "a DMA buffer running past the end of segment {}",
                segment.desc.id
            )))?;
    }
    println!(
        "PAGING buffer_in_vram: DMA buffers executed from segment(s) {}",
        segments
            .iter()
            .map(|s| s.desc.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
