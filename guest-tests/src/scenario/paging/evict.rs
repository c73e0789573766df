//! A scripted eviction and restore, as the video memory manager drives a KMD's paging engine:
//! allocations leave VRAM for scattered system pages (TRANSFER to their MDLs, then DISCARD and a
//! FILL of the freed range, which another allocation would now use), are mapped into the
//! aperture (MAP_APERTURE and MAP_APERTURE2) and used there by the GPU (reads and writes through
//! the aperture) and by the CPU (in the pages), come back into VRAM at other offsets (TRANSFER
//! aperture → VRAM) and are unmapped (UNMAP to the dummy page). Every paging buffer lives in the
//! aperture, as with `PagingBufferSegmentId` = the aperture. A model of every allocation's bytes
//! is kept and every byte is compared after each phase: VRAM through the BAR, pages through the
//! guest mapping, device-only (and other) segments by TRANSFERs into fresh pages.

use wddm_gpu_abi::packet::{WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE, WDDM_GPU_OP_DISCARD_CONTENT};

use super::ops::{during, fill_bytes};
use super::{
    check_list, check_vram, compare, expect_done, pattern_bytes, read_list, read_segment, seg_at,
    write_list, write_segment, Ctx, PAGE, PAGE_USIZE,
};
use crate::caps::Segment;
use crate::engine::Engine;
use crate::failure::{Failure, Outcome};
use crate::packets::{self, Adl, DmaBufferBuilder};
use crate::scatter::{FrameList, Piece};

/// First aperture page the allocations are mapped at.
const EVICT_PAGE: u64 = 0x1000;
/// VRAM scratch for reads through the aperture.
const SCRATCH: u64 = 0xb0_0000;
/// Byte pattern the dummy page holds.
const DUMMY_TAG: u64 = 0x6475_6d6d;

/// How an allocation's pages are mapped into the aperture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Map {
    /// MAP_APERTURE with this many PFN-array entries before the allocation's (`MdlOffset`).
    Mdl(u32),
    /// MAP_APERTURE2 from a page array with this many entries before (`AdlOffset`).
    Adl(u32),
}

struct Alloc {
    name: String,
    segment: Segment,
    /// True for the engine's segment (checked through the BAR).
    bar: bool,
    offset: u64,
    restore: u64,
    size: u64,
    model: Vec<u8>,
    map: Map,
    /// Its system pages while evicted (with the entries before it for the mapping).
    lead: Vec<Piece>,
    list: Option<FrameList>,
    ap_page: u64,
}

impl Alloc {
    fn pages(&self) -> u64 {
        self.size.div_ceil(PAGE)
    }

    fn list(&self) -> Outcome<&FrameList> {
        self.list
            .as_ref()
            .ok_or_else(|| Failure(format!("{} has no pages", self.name)))
    }

    /// Reads the allocation at VRAM `offset` of its segment.
    fn read_vram(&self, e: &mut Engine, c: &mut Ctx, offset: u64) -> Outcome<Vec<u8>> {
        if self.bar {
            super::read_vram(e, offset, self.size)
        } else {
            read_segment(e, c, &self.segment, offset, self.size)
        }
    }

    fn check_vram(
        &self,
        e: &mut Engine,
        c: &mut Ctx,
        offset: u64,
        want: &[u8],
        what: &str,
    ) -> Outcome {
        let got = self.read_vram(e, c, offset)?;
        let how = if self.bar {
            "through the BAR"
        } else {
            "by TRANSFER"
        };
        compare(
            &format!(
                "{what}: {} in segment {} at {offset:#x} ({how})",
                self.name, self.segment.desc.id
            ),
            &got,
            want,
            0,
        )
    }
}

/// Runs `b` from the aperture and expects every packet to complete.
fn run(e: &mut Engine, c: &mut Ctx, b: &DmaBufferBuilder, bytes: u64, what: &str) -> Outcome {
    let packets = count_packets(b);
    let done = c.run_in_aperture(e, b)?;
    expect_done(&done, bytes, packets).map_err(during(what))
}

/// Packets in a buffer (walking the headers).
fn count_packets(b: &DmaBufferBuilder) -> u32 {
    let bytes = b.bytes();
    let mut at = 0usize;
    let mut n = 0;
    while at + 8 <= bytes.len() {
        let size = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        if size == 0 {
            break;
        }
        at += size as usize;
        n += 1;
    }
    n
}

pub fn evict_restore(e: &mut Engine, c: &mut Ctx) -> Outcome {
    let vram = e.segment.clone();
    let mut allocs = vec![
        Alloc {
            name: "A (48 KiB)".into(),
            segment: vram.clone(),
            bar: true,
            offset: 0x80_0000,
            restore: 0xa0_0000,
            size: 0xc000,
            model: Vec::new(),
            map: Map::Mdl(0),
            lead: Vec::new(),
            list: None,
            ap_page: EVICT_PAGE,
        },
        Alloc {
            name: "B (20 KiB + 0x123)".into(),
            segment: vram.clone(),
            bar: true,
            offset: 0x81_0010,
            restore: 0xa2_0000,
            size: 0x5123,
            model: Vec::new(),
            map: Map::Adl(0),
            lead: Vec::new(),
            list: None,
            ap_page: EVICT_PAGE + 0x20,
        },
        Alloc {
            name: "C (132 KiB)".into(),
            segment: vram.clone(),
            bar: true,
            offset: 0x88_0000,
            restore: 0xa4_0800,
            size: 0x2_1000,
            model: Vec::new(),
            map: Map::Mdl(2),
            lead: Vec::new(),
            list: None,
            ap_page: EVICT_PAGE + 0x40,
        },
    ];
    let mut next_page = EVICT_PAGE + 0x80;
    for segment in e.layout.memory_segments() {
        if segment.desc.id == vram.desc.id || segment.desc.size < 0x40_0000 {
            continue;
        }
        allocs.push(Alloc {
            name: format!(
                "D{} (40 KiB + 0x11, {})",
                segment.desc.id,
                if segment.is_device_only() {
                    "device-only"
                } else {
                    "other CPU-visible segment"
                }
            ),
            segment: segment.clone(),
            bar: false,
            offset: 0x10_0008,
            restore: 0x20_0000,
            size: 0xa011,
            model: Vec::new(),
            map: Map::Adl(1),
            lead: Vec::new(),
            list: None,
            ap_page: next_page,
        });
        next_page += 0x20;
    }
    for a in &allocs {
        if a.bar {
            e.require_vram(a.offset, a.size)?;
            e.require_vram(a.restore, a.size)?;
        }
    }
    e.require_vram(SCRATCH, 0x1_0000)?;

    // Phase 0: the allocations in VRAM.
    for (i, a) in allocs.iter_mut().enumerate() {
        a.model = pattern_bytes(0x6576_6900 + i as u64, 0, a.size);
        if a.bar {
            e.vram.write(a.offset, &a.model);
            e.guard_vram(a.restore, a.size, 0x6775_6100 + i as u64);
        } else {
            write_segment(e, c, &a.segment, a.offset, &a.model)?;
        }
    }

    // Phase 1: evict to scattered system pages; the freed VRAM is discarded and reused (FILL).
    let mut b = DmaBufferBuilder::new();
    let mut bytes = 0;
    for (i, a) in allocs.iter_mut().enumerate() {
        let list = c.list(0, a.size)?;
        write_list(e, &list, &vec![0; usize::try_from(a.size).unwrap()]);
        b.push_transfer(&packets::transfer(
            a.size,
            seg_at(&a.segment, a.offset),
            c.frames(&list)?,
        ));
        b.push(&packets::segment_access(
            WDDM_GPU_OP_DISCARD_CONTENT,
            a.segment.desc.id,
            a.segment.gpu_address(a.offset),
            WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
        ));
        b.push(&packets::fill(
            0xdead_0000 + u32::try_from(i).unwrap(),
            a.size,
            seg_at(&a.segment, a.offset),
        ));
        bytes += 2 * a.size;
        a.list = Some(list);
    }
    run(e, c, &b, bytes, "evict: TRANSFER to pages, DISCARD, FILL")?;
    for (i, a) in allocs.iter().enumerate() {
        check_list(e, a.list()?, &a.model, &format!("evicted {}", a.name))?;
        a.check_vram(
            e,
            c,
            a.offset,
            &fill_bytes(0xdead_0000 + u32::try_from(i).unwrap(), a.size),
            "freed VRAM reused",
        )?;
    }

    // Phase 2: map the pages into the aperture.
    let mut b = DmaBufferBuilder::new();
    for a in allocs.iter_mut() {
        let pieces = a.list()?.pieces().to_vec();
        let (lead_count, packet_is_adl) = match a.map {
            Map::Mdl(n) => (n, false),
            Map::Adl(n) => (n, true),
        };
        a.lead = c.pieces(lead_count as usize)?;
        let mut array = a.lead.clone();
        array.extend_from_slice(&pieces);
        let count = a.pages();
        if packet_is_adl {
            let address = c.place_piece_pfns(&array)?;
            b.push(&packets::map_aperture2(
                c.ap_id(),
                c.map_flags,
                a.ap_page,
                count,
                Adl::Pages {
                    address,
                    page_count: u32::try_from(array.len()).unwrap(),
                },
                lead_count,
            ));
        } else {
            b.push(&c.map_packet(a.ap_page, &array, lead_count, count)?);
        }
    }
    run(e, c, &b, 0, "map the evicted pages into the aperture")?;

    // Phase 3: the GPU reads and writes the allocations through the aperture; the CPU writes
    // one in its pages.
    let (read_at, read_len) = (0x301u64, 5000u64);
    let (w1_at, w1_len) = (0x1ff0u64, 9000u64);
    let (w2_at, w2_len) = (0x10u64, 3000u64);
    let w1 = pattern_bytes(0x7731, 0, w1_len);
    e.vram.write(SCRATCH + 0x8000, &w1);
    let w2 = pattern_bytes(0x7732, 0, w2_len);
    let w2_list = c.list(0x3c0, w2_len)?;
    write_list(e, &w2_list, &w2);
    let mut b = DmaBufferBuilder::new();
    let a_page = allocs[0].ap_page;
    b.push_transfer(&packets::transfer(
        read_len,
        c.ap(a_page * PAGE + read_at),
        e.vram_at(SCRATCH),
    ));
    let c_page = allocs[2].ap_page;
    b.push_transfer(&packets::transfer(
        w1_len,
        e.vram_at(SCRATCH + 0x8000),
        c.ap(c_page * PAGE + w1_at),
    ));
    let b_page = allocs[1].ap_page;
    b.push_transfer(&packets::transfer(
        w2_len,
        c.frames(&w2_list)?,
        c.ap(b_page * PAGE + w2_at),
    ));
    let mut bytes = read_len + w1_len + w2_len;
    // The other segments' allocations: read one stretch of each through the aperture.
    let mut reads = Vec::new();
    let mut at = SCRATCH + 0x4000;
    for a in allocs.iter().skip(3) {
        let len = a.size - 0x100;
        b.push_transfer(&packets::transfer(
            len,
            c.ap(a.ap_page * PAGE + 0x80),
            e.vram_at(at),
        ));
        reads.push((
            at,
            a.model[0x80..0x80 + usize::try_from(len).unwrap()].to_vec(),
        ));
        at += len.div_ceil(PAGE) * PAGE;
        bytes += len;
    }
    e.require_vram(SCRATCH, at - SCRATCH)?;
    run(e, c, &b, bytes, "use the allocations through the aperture")?;
    check_vram(
        e,
        SCRATCH,
        &allocs[0].model
            [usize::try_from(read_at).unwrap()..usize::try_from(read_at + read_len).unwrap()],
        "GPU read of A through the aperture",
    )?;
    for (at, want) in &reads {
        check_vram(e, *at, want, "GPU read through the aperture")?;
    }
    allocs[2].model[usize::try_from(w1_at).unwrap()..usize::try_from(w1_at + w1_len).unwrap()]
        .copy_from_slice(&w1);
    allocs[1].model[usize::try_from(w2_at).unwrap()..usize::try_from(w2_at + w2_len).unwrap()]
        .copy_from_slice(&w2);
    // The CPU writes A in its system pages.
    let cpu = pattern_bytes(0x6370_7531, 0, 200);
    allocs[0].model[100..300].copy_from_slice(&cpu);
    write_list(e, allocs[0].list()?, &allocs[0].model.clone());
    for a in &allocs {
        check_list(e, a.list()?, &a.model, &format!("{} in its pages", a.name))?;
    }

    // Phase 4: restore into VRAM at other offsets, then unmap.
    let dummy = c.dummy;
    dummy.write(0, &pattern_bytes(DUMMY_TAG, 0, PAGE));
    let mut b = DmaBufferBuilder::new();
    let mut bytes = 0;
    for a in &allocs {
        b.push_transfer(&packets::transfer(
            a.size,
            c.ap(a.ap_page * PAGE),
            seg_at(&a.segment, a.restore),
        ));
        bytes += a.size;
    }
    for a in &allocs {
        b.push(&packets::unmap_aperture(
            c.ap_id(),
            a.ap_page,
            a.pages(),
            dummy.phys(),
        ));
    }
    run(e, c, &b, bytes, "restore: TRANSFER aperture -> VRAM, UNMAP")?;
    for (i, a) in allocs.iter().enumerate() {
        a.check_vram(e, c, a.restore, &a.model, "restored")?;
        if a.bar {
            e.check_vram_guard(a.restore, a.size, 0x6775_6100 + i as u64)?;
        }
    }

    // Phase 5: after UNMAP the aperture range reads the dummy page and writes land on it.
    let mut b = DmaBufferBuilder::new();
    b.push_transfer(&packets::transfer(
        2 * PAGE,
        c.ap(a_page * PAGE),
        e.vram_at(SCRATCH),
    ));
    let over = pattern_bytes(0x6f76_6572, 0, PAGE);
    e.vram.write(SCRATCH + 0x8000, &over);
    b.push_transfer(&packets::transfer(
        PAGE,
        e.vram_at(SCRATCH + 0x8000),
        c.ap(c_page * PAGE),
    ));
    run(e, c, &b, 3 * PAGE, "TRANSFERs through the unmapped range")?;
    let mut want = pattern_bytes(DUMMY_TAG, 0, PAGE);
    want.extend_from_slice(&pattern_bytes(DUMMY_TAG, 0, PAGE));
    check_vram(
        e,
        SCRATCH,
        &want,
        "aperture -> VRAM after UNMAP reads the dummy page",
    )?;
    let mut got = vec![0u8; PAGE_USIZE];
    dummy.read(0, &mut got);
    compare(
        "dummy page after a write through the unmapped range",
        &got,
        &over,
        0,
    )?;

    // Final comparison: every allocation in VRAM, and the pages no longer written.
    for a in &allocs {
        a.check_vram(e, c, a.restore, &a.model, "final")?;
        compare(
            &format!("{} pages after UNMAP", a.name),
            &read_list(e, a.list()?),
            &a.model,
            0,
        )?;
    }
    let names: Vec<&str> = allocs.iter().map(|a| a.name.as_str()).collect();
    println!(
        "PAGING evict_restore: {} moved VRAM -> pages -> aperture -> VRAM (other offsets), every \
         byte checked after each phase",
        names.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_counted_by_their_headers() {
        let mut b = DmaBufferBuilder::new();
        assert_eq!(count_packets(&b), 0);
        b.push(&packets::fence(1));
        b.push(&packets::unmap_aperture(2, 0, 1, 0x1000));
        b.push_transfer(&packets::transfer(
            8,
            packets::Endpoint::Segment { id: 1, address: 0 },
            packets::Endpoint::Segment { id: 1, address: 8 },
        ));
        assert_eq!(count_packets(&b), 3);
    }
}
