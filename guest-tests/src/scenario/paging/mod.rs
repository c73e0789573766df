//! The paging suite: the device driven the way a WDDM KMD's `DxgkDdiBuildPagingBuffer`,
//! `DxgkDdiSubmitCommand`, ISR/DPC, `DxgkDdiPreemptCommand` and `DxgkDdiResetFromTimeout` drive
//! it: every packet kind, aperture mappings of scattered pages (and the DMA buffer itself in the
//! aperture), the dummy page, the status page with its fault ring and the WAIT_EVENT requests,
//! preemption and reset, and a scripted evict/restore of allocations through system pages and
//! the aperture. Every byte moved is checked, through the BAR for VRAM and through the guest
//! mapping for pages.
//!
//! The tests share a [`Ctx`] (made by the first paging test that runs): a hugepage of its own
//! for the status page, the dummy page, PFN arrays and extra DMA buffers; the first aperture of
//! the layout; the status-page registration and the WAIT_EVENT requests a KMD keeps posted; and
//! the scattered pages the aperture-resident DMA buffer lives in. Pages for data come from the
//! engine's scatter pool, each test drawing distinct ones in a fresh random order.
//!
//! Each test uses its own range of aperture pages, so a mapping one test leaves behind never
//! makes another pass; [`NEVER_MAPPED`] pages at the end of the aperture are never mapped by any
//! test.

mod evict;
mod faults;
mod ops;
mod stop;

use std::time::Duration;

pub use ops::fill_bytes;
use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
use wddm_gpu_abi::packet::WDDM_GPU_MAP_FLAG_CACHE_COHERENT;
use wddm_gpu_abi::segment_flags::SegmentFlags;
use wddm_gpu_abi::status::{
    WDDM_GPU_FAULT_RING_ENTRIES, WDDM_GPU_FAULT_RING_OFFSET, WDDM_GPU_STATUS_MAGIC,
    WDDM_GPU_STATUS_VERSION,
};
use wddm_gpu_abi::submit::{WddmGpuCmdSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::caps::Segment;
use crate::dma::{DmaArena, DmaBuf};
use crate::engine::{expect_ok, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Completion};
use crate::kmd::{Event, EventQueue, StatusPage};
use crate::packets::{self, DmaBufferBuilder, Endpoint};
use crate::pattern;
use crate::scatter::{FrameList, Piece};

/// A paging test.
type Test = fn(&mut Engine, &mut Ctx) -> Outcome;

/// The paging tests, in run order (the reset test last: it clears every mapping).
const TESTS: [(&str, Test); 16] = [
    ("paging_map_aperture_transfers", ops::map_aperture_transfers),
    ("paging_fill", ops::fill),
    ("paging_discard_read_write_physical", ops::segment_access),
    ("paging_map_aperture2", ops::map_aperture2),
    ("paging_transfer_overlap", ops::transfer_overlap),
    ("paging_buffer_in_aperture", ops::buffer_in_aperture),
    ("paging_buffer_in_vram", ops::buffer_in_vram),
    ("paging_unmap_dummy_page", ops::unmap_dummy_page),
    ("paging_fence_events", faults::fence_events),
    ("paging_faults_status_page", faults::faults_status_page),
    (
        "paging_bad_map_changes_nothing",
        faults::bad_map_changes_nothing,
    ),
    (
        "paging_status_page_registration",
        faults::status_page_registration,
    ),
    ("paging_fault_ring_full", faults::fault_ring_full),
    ("paging_evict_restore", evict::evict_restore),
    ("paging_preempt", stop::preempt),
    ("paging_reset", stop::reset),
];

/// The paging test names, in run order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TESTS.iter().map(|(name, _)| *name)
}

/// Runs paging test `name` (making the shared context first if needed); `None` for another
/// test's name.
pub fn run(name: &str, e: &mut Engine, ctx: &mut Option<Ctx>) -> Option<Outcome> {
    let (_, test) = TESTS.iter().find(|(n, _)| *n == name)?;
    let outcome = (|| {
        if ctx.is_none() {
            *ctx = Some(Ctx::new(e)?);
        }
        let c = ctx
            .as_mut()
            .ok_or_else(|| Failure("no paging context".into()))?;
        c.begin(e);
        test(e, c)?;
        c.arena.recheck().map_err(Failure::from)
    })();
    Some(outcome)
}

/// The page size the tests step by, and as a buffer length.
const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
const PAGE_USIZE: usize = 4096;
const _: () = assert!(PAGE_USIZE as u64 == PAGE);

/// Hugepages of the context's own arena.
const ARENA_HUGEPAGES: usize = 1;
/// Bytes of PFN arrays the context can hold at once.
const LIST_BYTES: usize = 512 << 10;
/// Bytes of each extra guest-memory DMA buffer.
const DMA_BYTES: usize = 64 << 10;
/// WAIT_EVENT requests kept posted.
const EVENT_DEPTH: usize = 4;
/// Byte written around data in listed pages (and in pages the device must not write).
const PAGE_GUARD: u8 = 0x5a;

/// First aperture page of the DMA buffer that lives in the aperture.
const DMA_PAGE: u64 = 0x10;
/// Its pages (scattered pieces of the pool).
const DMA_PAGES: usize = 16;
/// Aperture pages no test maps: this many at the end of the aperture.
pub const NEVER_MAPPED: u64 = 0x40;

/// How long a FENCE or FAULT event may take to arrive once its submission completed.
const EVENT_WAIT: Duration = Duration::from_secs(2);

/// What the paging tests share.
pub struct Ctx {
    arena: &'static DmaArena,
    /// The aperture the tests map into.
    pub aperture: Segment,
    /// MAP flags for it (CacheCoherent when the aperture is).
    pub map_flags: u32,
    lists: DmaBuf,
    list_next: usize,
    /// Guest-memory DMA buffers for submissions posted together.
    dma: [DmaBuf; 2],
    /// The dummy page UNMAP points pages at.
    pub dummy: DmaBuf,
    /// A 64 KiB physically contiguous buffer (the contiguous ADL form maps it).
    pub contiguous: DmaBuf,
    /// The status page.
    pub status: StatusPage,
    /// True while the status page is registered (a reset unregisters it).
    pub registered: bool,
    /// The WAIT_EVENT requests.
    pub events: EventQueue,
    /// Pieces holding the aperture-resident DMA buffer.
    dma_pieces: Vec<Piece>,
    /// True while they are mapped at [`DMA_PAGE`] (a reset clears mappings).
    dma_mapped: bool,
    /// Pieces tests may use, in this test's random order.
    free: Vec<Piece>,
    next_free: usize,
}

impl Ctx {
    /// Makes the context: the first aperture, a hugepage of its own, pieces of the pool.
    pub(crate) fn new(e: &mut Engine) -> Outcome<Self> {
        let aperture = e
            .layout
            .segments
            .iter()
            .find(|s| s.is_aperture())
            .cloned()
            .ok_or_else(|| Failure("the layout has no aperture segment".into()))?;
        let pages = aperture.desc.size / WDDM_GPU_PAGE_SIZE;
        ensure(pages >= 0x4000 + NEVER_MAPPED, || {
            format!(
                "aperture segment {} has {pages:#x} pages; the paging tests use the first \
                 0x4000 and the last {NEVER_MAPPED:#x}",
                aperture.desc.id
            )
        })?;
        let map_flags = if aperture.flags().contains(SegmentFlags::CACHE_COHERENT) {
            WDDM_GPU_MAP_FLAG_CACHE_COHERENT
        } else {
            0
        };
        let arena = DmaArena::new(ARENA_HUGEPAGES).map_err(|e| Failure(format!("{e}")))?;
        let status = StatusPage::new(arena.alloc(4096)?);
        let dummy = arena.alloc(4096)?;
        let contiguous = arena.alloc(64 << 10)?;
        let lists = arena.alloc(LIST_BYTES)?;
        let dma = [arena.alloc(DMA_BYTES)?, arena.alloc(DMA_BYTES)?];
        let mut pieces = e.pool.pieces().to_vec();
        e.rng.shuffle(&mut pieces);
        let dma_pieces = pieces.split_off(pieces.len() - DMA_PAGES);
        println!(
            "PAGING aperture segment {} ({:#x} bytes, map flags {map_flags:#x}); layout \
             PagingBufferSegmentId {}",
            aperture.desc.id, aperture.desc.size, e.layout.header.paging_buffer_segment_id
        );
        Ok(Self {
            arena,
            aperture,
            map_flags,
            lists,
            list_next: 0,
            dma,
            dummy,
            contiguous,
            status,
            registered: false,
            events: EventQueue::new(EVENT_DEPTH),
            dma_pieces,
            dma_mapped: false,
            free: pieces,
            next_free: 0,
        })
    }

    /// Starts a test: fresh random order of pieces, PFN arrays from the start again.
    pub(crate) fn begin(&mut self, e: &mut Engine) {
        e.rng.shuffle(&mut self.free);
        self.next_free = 0;
        self.list_next = 0;
    }

    /// `n` pieces no other call of this test got.
    pub fn pieces(&mut self, n: usize) -> Outcome<Vec<Piece>> {
        let end = self.next_free + n;
        ensure(end <= self.free.len(), || {
            format!(
                "the scatter pool is used up ({} pieces, {n} more wanted)",
                self.free.len()
            )
        })?;
        let pieces = self.free[self.next_free..end].to_vec();
        self.next_free = end;
        Ok(pieces)
    }

    /// A frame list of fresh scattered pieces for `length` bytes at `byte_offset`.
    pub fn list(&mut self, byte_offset: u32, length: u64) -> Outcome<FrameList> {
        let n = usize::try_from(crate::scatter::frames_needed(byte_offset, length).max(1)).unwrap();
        Ok(FrameList::from_pieces(
            self.pieces(n)?,
            byte_offset,
            length,
        )?)
    }

    /// Writes a PFN array; returns its guest-physical address. Arrays stay valid for the rest
    /// of the test (or until the buffer wraps).
    pub fn place_pfns(&mut self, pfns: &[u64]) -> Outcome<u64> {
        let bytes: Vec<u8> = pfns.iter().flat_map(|p| p.to_le_bytes()).collect();
        ensure(bytes.len() <= LIST_BYTES, || {
            format!("{} PFNs exceed the list buffer", pfns.len())
        })?;
        if self.list_next + bytes.len() > LIST_BYTES {
            self.list_next = 0;
        }
        let at = self.list_next;
        self.lists.write(at, &bytes);
        // Next array on a 64-byte boundary.
        self.list_next = (at + bytes.len()).div_ceil(64) * 64;
        Ok(self.lists.phys() + at as u64)
    }

    /// Writes the PFN array of `pieces` (see [`Self::place_pfns`]); returns its address.
    pub fn place_piece_pfns(&mut self, pieces: &[Piece]) -> Outcome<u64> {
        self.place_pfns(&pfns_of(pieces))
    }

    /// A frame-list endpoint for `list`.
    pub fn frames(&mut self, list: &FrameList) -> Outcome<Endpoint> {
        Ok(Endpoint::Frames {
            list_address: self.place_pfns(&list.pfns())?,
            frame_count: list.frame_count(),
            byte_offset: list.byte_offset(),
        })
    }

    /// The aperture at segment offset `offset`.
    pub fn ap(&self, offset: u64) -> Endpoint {
        Endpoint::Segment {
            id: self.aperture.desc.id,
            address: self.aperture.gpu_address(offset),
        }
    }

    /// The aperture's id.
    pub fn ap_id(&self) -> u32 {
        self.aperture.desc.id
    }

    /// First of the [`NEVER_MAPPED`] aperture pages.
    pub fn never_mapped_page(&self) -> u64 {
        self.aperture.desc.size / WDDM_GPU_PAGE_SIZE - NEVER_MAPPED
    }

    /// A MAP_APERTURE packet mapping `pieces[frame_offset..frame_offset + count]` at `first_page`.
    pub fn map_packet(
        &mut self,
        first_page: u64,
        pieces: &[Piece],
        frame_offset: u32,
        count: u64,
    ) -> Outcome<wddm_gpu_abi::packet::WddmGpuPacketMapAperture> {
        let address = self.place_piece_pfns(pieces)?;
        Ok(packets::map_aperture(
            self.ap_id(),
            self.map_flags,
            first_page,
            count,
            address,
            u32::try_from(pieces.len()).unwrap(),
            frame_offset,
        ))
    }

    /// Maps `pieces` at `first_page` (one submission from guest memory).
    pub fn map(&mut self, e: &mut Engine, first_page: u64, pieces: &[Piece]) -> Outcome {
        let done = e.run_one(&self.map_packet(first_page, pieces, 0, pieces.len() as u64)?)?;
        expect_ok(&done, 0).map_err(|f| Failure(format!("MAP_APERTURE: {f}")))
    }

    /// Makes sure the DMA buffer's pages are mapped at [`DMA_PAGE`].
    fn map_dma_buffer(&mut self, e: &mut Engine) -> Outcome {
        if !self.dma_mapped {
            let pieces = self.dma_pieces.clone();
            self.map(e, DMA_PAGE, &pieces)
                .map_err(|f| Failure(format!("mapping the DMA buffer's pages: {f}")))?;
            self.dma_mapped = true;
        }
        Ok(())
    }

    /// Copies `buffer` into the scattered pages of the aperture-resident DMA buffer, at byte
    /// `skew` of its first page, and returns the submission naming it as aperture bytes
    /// (`dma_buffer_segment_id` = the aperture, as with `PagingBufferSegmentId` = the aperture).
    pub fn prepare_in_aperture(
        &mut self,
        e: &mut Engine,
        buffer: &DmaBufferBuilder,
        skew: u64,
    ) -> Outcome<WddmGpuCmdSubmit> {
        let room = (DMA_PAGES as u64 * WDDM_GPU_PAGE_SIZE).saturating_sub(skew);
        ensure(u64::from(buffer.len()) <= room, || {
            format!(
                "DMA buffer of {} bytes exceeds the {room} aperture bytes mapped for it",
                buffer.len()
            )
        })?;
        self.map_dma_buffer(e)?;
        let mut at = skew;
        for chunk in split_at_pages(buffer.bytes(), skew) {
            let piece = self.dma_pieces[(at / WDDM_GPU_PAGE_SIZE) as usize];
            e.pool
                .write(piece, (at % WDDM_GPU_PAGE_SIZE) as usize, chunk);
            at += chunk.len() as u64;
        }
        let mut cmd = gpu::submit_command(0, buffer.len(), 0, buffer.len(), e.fence());
        cmd.dma_buffer_segment_id = self.ap_id();
        cmd.dma_buffer_address = self
            .aperture
            .gpu_address(DMA_PAGE * WDDM_GPU_PAGE_SIZE + skew);
        Ok(cmd)
    }

    /// RESET (`DxgkDdiResetFromTimeout`), checked to answer OK_NODATA: afterwards the status
    /// page is no longer registered and the DMA buffer's pages are no longer mapped.
    pub fn reset(&mut self, e: &mut Engine) -> Outcome {
        let answer = e.device.control.reset()?;
        self.forget_device_state();
        ensure(answer == VIRTIO_GPU_RESP_OK_NODATA, || {
            format!("RESET answered {answer:#06x}, expected OK_NODATA")
        })
    }

    /// What a RESET or a power-down took from the device: the status page's registration and
    /// the DMA buffer's aperture mapping ([`Self::kmd_ready`] and the next submission make
    /// them again).
    pub fn forget_device_state(&mut self) {
        self.registered = false;
        self.dma_mapped = false;
    }

    /// A submission naming the aperture-resident DMA buffer without mapping it first (to see
    /// it refused when the mapping is gone).
    pub fn prepare_in_aperture_unmapped(
        &mut self,
        e: &mut Engine,
        buffer: &DmaBufferBuilder,
    ) -> Outcome<WddmGpuCmdSubmit> {
        let mapped = std::mem::replace(&mut self.dma_mapped, true);
        let cmd = self.prepare_in_aperture(e, buffer, 0);
        self.dma_mapped = mapped;
        cmd
    }

    /// Runs `buffer` from the aperture (see [`Self::prepare_in_aperture`]).
    pub fn run_in_aperture(
        &mut self,
        e: &mut Engine,
        buffer: &DmaBufferBuilder,
    ) -> Outcome<Completion> {
        let cmd = self.prepare_in_aperture(e, buffer, 0)?;
        e.submit(&cmd)
    }

    /// Copies `buffer` into extra guest DMA buffer `slot` and returns a paging submission of
    /// it (for submissions posted while another one is pending).
    pub fn prepare_extra(
        &mut self,
        e: &mut Engine,
        slot: usize,
        buffer: &DmaBufferBuilder,
    ) -> Outcome<WddmGpuCmdSubmit> {
        let dma = &self.dma[slot];
        ensure(buffer.len() as usize <= dma.len(), || {
            "DMA buffer overflow".into()
        })?;
        dma.write(0, buffer.bytes());
        let mut cmd = gpu::submit_command(dma.phys(), buffer.len(), 0, buffer.len(), e.fence());
        cmd.flags = WDDM_GPU_SUBMIT_FLAG_PAGING;
        Ok(cmd)
    }

    /// Registers the status page (if it is not) and keeps WAIT_EVENT requests posted; events
    /// left over from earlier work are collected and dropped. Returns them for the record.
    pub fn kmd_ready(&mut self, e: &mut Engine) -> Outcome<Vec<Event>> {
        if !self.registered {
            self.status.register(&mut e.device.control)?;
            let page = self.status.header();
            ensure(
                page.magic == WDDM_GPU_STATUS_MAGIC
                    && page.version == WDDM_GPU_STATUS_VERSION
                    && page.fault_ring_offset == WDDM_GPU_FAULT_RING_OFFSET
                    && page.fault_ring_entries == WDDM_GPU_FAULT_RING_ENTRIES
                    && page.fault_head == 0
                    && page.fault_tail == 0
                    && page.completed_fence == 0
                    && page.submissions_completed == 0,
                || format!("freshly registered status page reads {page:?}"),
            )?;
            self.registered = true;
        }
        self.events.drain(&mut e.device.control)
    }

    /// The next event (waiting a little for it); fails when none comes.
    pub fn next_event(&mut self, e: &mut Engine, what: &str) -> Outcome<Event> {
        self.events
            .next(&mut e.device.control, EVENT_WAIT)?
            .ok_or_else(|| Failure(format!("no event arrived for {what}")))
    }

    /// Fails if any event is waiting (after one poll).
    pub fn no_more_events(&mut self, e: &mut Engine, after: &str) -> Outcome {
        let extra = self.events.drain(&mut e.device.control)?;
        ensure(extra.is_empty(), || {
            let list: Vec<String> = extra.iter().map(ToString::to_string).collect();
            format!("unexpected event(s) after {after}: {}", list.join("; "))
        })
    }
}

/// The page frame numbers of `pieces`, in order.
pub fn pfns_of(pieces: &[Piece]) -> Vec<u64> {
    pieces.iter().map(|p| p.phys / WDDM_GPU_PAGE_SIZE).collect()
}

/// Splits `bytes` where a buffer starting `skew` bytes into a page crosses page boundaries.
fn split_at_pages(bytes: &[u8], skew: u64) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut in_page = (skew % WDDM_GPU_PAGE_SIZE) as usize;
    while !rest.is_empty() {
        let n = (usize::try_from(WDDM_GPU_PAGE_SIZE).unwrap() - in_page).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
        in_page = 0;
    }
    out
}

// ---- data helpers ----------------------------------------------------------------------------

/// `len` bytes of pattern `tag` from position `start`.
pub fn pattern_bytes(tag: u64, start: u64, len: u64) -> Vec<u8> {
    let mut data = vec![0u8; usize::try_from(len).unwrap()];
    pattern::fill(tag, start, &mut data);
    data
}

/// Fails at the first byte where `got` differs from `want`, naming `what` and the byte's
/// position (`base` + index).
pub fn compare(what: &str, got: &[u8], want: &[u8], base: u64) -> Outcome {
    if got.len() != want.len() {
        return Err(Failure(format!(
            "{what}: {} bytes read, {} expected",
            got.len(),
            want.len()
        )));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => {
            let differ = got.iter().zip(want).filter(|(g, w)| g != w).count();
            Err(Failure(format!(
                "{what}: byte {:#x} is {:#04x}, expected {:#04x} ({differ} of {} bytes differ)",
                base + i as u64,
                got[i],
                want[i],
                got.len()
            )))
        }
    }
}

/// Writes `data` into the data stretches of `list` and the guard byte everywhere else in its
/// pages.
pub fn write_list(e: &Engine, list: &FrameList, data: &[u8]) {
    e.guard_pages(list);
    for run in list.data_runs() {
        let pos = usize::try_from(run.pos).unwrap();
        e.pool.write(
            list.pieces()[run.piece],
            run.offset,
            &data[pos..pos + run.len],
        );
    }
}

/// The data stretches of `list`, as the CPU sees them.
pub fn read_list(e: &Engine, list: &FrameList) -> Vec<u8> {
    let mut out = vec![0u8; usize::try_from(list.length()).unwrap()];
    for run in list.data_runs() {
        let pos = usize::try_from(run.pos).unwrap();
        e.pool.read(
            list.pieces()[run.piece],
            run.offset,
            &mut out[pos..pos + run.len],
        );
    }
    out
}

/// Checks the pages of `list` hold `want` in the data stretches and the guard byte elsewhere.
pub fn check_list(e: &Engine, list: &FrameList, want: &[u8], what: &str) -> Outcome {
    compare(&format!("{what} (pages)"), &read_list(e, list), want, 0)?;
    for run in list.guard_runs() {
        let mut data = vec![0u8; run.len];
        e.pool.read(list.pieces()[run.piece], run.offset, &mut data);
        if let Some(i) = data.iter().position(|b| *b != PAGE_GUARD) {
            return Err(Failure(format!(
                "{what}: page {} byte {:#x} outside the data was overwritten ({:#04x})",
                run.piece,
                run.offset + i,
                data[i]
            )));
        }
    }
    Ok(())
}

/// Whole pages: the bytes of `pieces` in order.
pub fn read_pieces(e: &Engine, pieces: &[Piece]) -> Vec<u8> {
    let mut out = vec![0u8; pieces.len() * usize::try_from(WDDM_GPU_PAGE_SIZE).unwrap()];
    for (i, piece) in pieces.iter().enumerate() {
        let at = i * usize::try_from(WDDM_GPU_PAGE_SIZE).unwrap();
        e.pool.read(
            *piece,
            0,
            &mut out[at..at + usize::try_from(WDDM_GPU_PAGE_SIZE).unwrap()],
        );
    }
    out
}

/// Whole pages: writes `data` (a page multiple) over `pieces` in order.
pub fn write_pieces(e: &Engine, pieces: &[Piece], data: &[u8]) {
    for (piece, chunk) in pieces
        .iter()
        .zip(data.chunks(usize::try_from(WDDM_GPU_PAGE_SIZE).unwrap()))
    {
        e.pool.write(*piece, 0, chunk);
    }
}

/// Reads VRAM of the engine's segment through the BAR.
pub fn read_vram(e: &Engine, offset: u64, len: u64) -> Outcome<Vec<u8>> {
    e.require_vram(offset, len)?;
    let mut out = vec![0u8; usize::try_from(len).unwrap()];
    e.vram.read(offset, &mut out);
    Ok(out)
}

/// Checks VRAM of the engine's segment against `want` through the BAR.
pub fn check_vram(e: &Engine, offset: u64, want: &[u8], what: &str) -> Outcome {
    let got = read_vram(e, offset, want.len() as u64)?;
    compare(
        &format!("{what} (VRAM through the BAR)"),
        &got,
        want,
        offset,
    )
}

/// Expects OK, `bytes` moved and `packets` packets completed.
pub fn expect_done(done: &Completion, bytes: u64, packets: u32) -> Outcome {
    expect_ok(done, bytes)?;
    ensure(done.packets_completed == packets, || {
        format!(
            "packets_completed {}, expected {packets}: {done}",
            done.packets_completed
        )
    })
}

/// A segment's GPU address as an endpoint.
pub fn seg_at(segment: &Segment, offset: u64) -> Endpoint {
    Endpoint::Segment {
        id: segment.desc.id,
        address: segment.gpu_address(offset),
    }
}

/// Reads `len` bytes of any memory segment with a TRANSFER into fresh scattered pages.
pub fn read_segment(
    e: &mut Engine,
    c: &mut Ctx,
    segment: &Segment,
    offset: u64,
    len: u64,
) -> Outcome<Vec<u8>> {
    let list = c.list(0x1c8, len)?;
    write_list(e, &list, &vec![0; usize::try_from(len).unwrap()]);
    let done = e.transfer(len, seg_at(segment, offset), c.frames(&list)?)?;
    expect_done(&done, len, 1).map_err(|f| {
        Failure(format!(
            "reading segment {} [{offset:#x}, +{len:#x}): {f}",
            segment.desc.id
        ))
    })?;
    Ok(read_list(e, &list))
}

/// Writes `data` into any memory segment with a TRANSFER from fresh scattered pages.
pub fn write_segment(
    e: &mut Engine,
    c: &mut Ctx,
    segment: &Segment,
    offset: u64,
    data: &[u8],
) -> Outcome {
    let len = data.len() as u64;
    let list = c.list(0x2a0, len)?;
    write_list(e, &list, data);
    let done = e.transfer(len, c.frames(&list)?, seg_at(segment, offset))?;
    expect_done(&done, len, 1).map_err(|f| {
        Failure(format!(
            "writing segment {} [{offset:#x}, +{len:#x}): {f}",
            segment.desc.id
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_split_at_boundaries() {
        let bytes = vec![0u8; 10_000];
        let parts: Vec<usize> = split_at_pages(&bytes, 0x40)
            .iter()
            .map(|p| p.len())
            .collect();
        assert_eq!(
            parts,
            vec![4096 - 0x40, 4096, 10_000 - (4096 - 0x40) - 4096]
        );
        assert_eq!(parts.iter().sum::<usize>(), 10_000);
        assert!(split_at_pages(&[], 0).is_empty());
    }

    #[test]
    fn compare_names_the_first_difference() {
        assert!(compare("x", &[1, 2, 3], &[1, 2, 3], 0).is_ok());
        let err = compare("x", &[1, 9, 3, 8], &[1, 2, 3, 4], 0x100).unwrap_err();
        assert!(err.0.contains("byte 0x101"), "{err}");
        assert!(err.0.contains("2 of 4"), "{err}");
        assert!(compare("x", &[1], &[1, 2], 0).is_err());
    }
}
