//! What tests drive the device with: DMA buffers, frame lists and VRAM offsets turned into
//! submissions, plus the data checks that prove a transfer moved exactly the right bytes.

use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use zerocopy::{Immutable, IntoBytes};

use crate::caps::{Layout, Segment};
use crate::dma::{DmaArena, DmaBuf, PiecePool};
use crate::driver::Device;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Completion};
use crate::packets::{self, DmaBufferBuilder, Endpoint};
use crate::pattern;
use crate::prng::Prng;
use crate::scatter::FrameList;
use crate::vram::Vram;

/// Bytes of one DMA buffer (the device allows more; tests need little).
const DMA_BUFFER: usize = 64 << 10;
/// Bytes of one frame-list buffer: 8192 entries.
const LIST_BUFFER: usize = 64 << 10;
/// Hugepages of scatter pool: 1024 pieces of 4 KiB.
const POOL_HUGEPAGES: usize = 2;
/// Hugepages the arena needs: rings and buffers, the pool, and one for the GPU VA tests' page
/// tables and entry arrays (`scenario::gpuva`).
pub const ARENA_HUGEPAGES: usize = 2 + POOL_HUGEPAGES;
/// Byte written around data in listed pages; the device must leave it alone.
const PAGE_GUARD: u8 = 0x5a;
/// Bytes of VRAM checked on each side of a target range.
pub const VRAM_GUARD: u64 = 4096;

/// The device, its layout and the memory tests use.
pub struct Engine {
    /// Pinned memory (rechecked after each test).
    pub arena: &'static DmaArena,
    /// The initialised GPU.
    pub device: Device,
    /// Its validated layout.
    pub layout: Layout,
    /// The CPU-visible VRAM segment.
    pub segment: Segment,
    /// That segment through the BAR.
    pub vram: Vram,
    /// 4 KiB pieces for frame lists.
    pub pool: PiecePool,
    /// Scatter order generator.
    pub rng: Prng,
    /// A page of DMA memory no helper uses: a test's own status page (the BAR tests in mode 2).
    pub spare_page: DmaBuf,
    dma_buffer: DmaBuf,
    lists: [DmaBuf; 2],
    next_fence: u32,
}

impl Engine {
    /// Allocates the test buffers around an initialised device.
    pub fn new(
        arena: &'static DmaArena,
        device: Device,
        layout: Layout,
        vram: Vram,
        seed: u64,
    ) -> Outcome<Self> {
        let segment = layout
            .cpu_visible_vram()
            .cloned()
            .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
        // Small buffers first: they share the rings' hugepage; the pool takes whole ones.
        let dma_buffer = arena.alloc(DMA_BUFFER)?;
        let lists = [arena.alloc(LIST_BUFFER)?, arena.alloc(LIST_BUFFER)?];
        let spare_page = arena.alloc(4096)?;
        Ok(Self {
            arena,
            device,
            layout,
            segment,
            vram,
            pool: arena.alloc_pieces(POOL_HUGEPAGES)?,
            rng: Prng::new(seed),
            spare_page,
            dma_buffer,
            lists,
            next_fence: 1,
        })
    }

    /// Runs `f` with another CPU-visible `segment`, mapped as `vram`, as the engine's VRAM
    /// segment (so every VRAM helper works on it), then puts the engine's own back.
    pub fn on_segment<T>(
        &mut self,
        segment: &Segment,
        vram: Vram,
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        let own_segment = std::mem::replace(&mut self.segment, segment.clone());
        let own_vram = std::mem::replace(&mut self.vram, vram);
        let result = f(self);
        self.segment = own_segment;
        self.vram = own_vram;
        result
    }

    /// GPU address of VRAM segment offset `offset`.
    pub fn vram_at(&self, offset: u64) -> Endpoint {
        Endpoint::Segment {
            id: self.segment.desc.id,
            address: self.segment.desc.base_address.wrapping_add(offset),
        }
    }

    /// Fails unless `[offset, offset + len)` is inside the VRAM segment.
    pub fn require_vram(&self, offset: u64, len: u64) -> Outcome {
        ensure(self.vram.contains(offset, len), || {
            format!(
                "VRAM segment of {:#x} bytes too small for [{offset:#x}, +{len:#x})",
                self.vram.size
            )
        })
    }

    /// Writes raw PFNs into list buffer `slot`; returns the list's guest-physical address.
    pub fn place_pfns(&self, pfns: &[u64], slot: usize) -> Outcome<u64> {
        let bytes: Vec<u8> = pfns.iter().flat_map(|p| p.to_le_bytes()).collect();
        let buf = &self.lists[slot];
        ensure(bytes.len() <= buf.len(), || {
            format!("{} PFNs exceed the list buffer", pfns.len())
        })?;
        buf.write(0, &bytes);
        Ok(buf.phys())
    }

    /// Writes `list` into list buffer `slot` and returns the endpoint naming it.
    pub fn frames(&self, list: &FrameList, slot: usize) -> Outcome<Endpoint> {
        Ok(Endpoint::Frames {
            list_address: self.place_pfns(&list.pfns(), slot)?,
            frame_count: list.frame_count(),
            byte_offset: list.byte_offset(),
        })
    }

    /// A fresh fence id.
    pub fn fence(&mut self) -> u32 {
        let fence = self.next_fence;
        self.next_fence = self.next_fence.wrapping_add(1);
        fence
    }

    /// Copies `buffer` into the DMA buffer; returns the paging submission executing all of it.
    pub fn prepare(&mut self, buffer: &DmaBufferBuilder) -> Outcome<WddmGpuCmdSubmit> {
        ensure(buffer.len() as usize <= self.dma_buffer.len(), || {
            "DMA buffer overflow".into()
        })?;
        self.dma_buffer.write(0, buffer.bytes());
        let fence = self.fence();
        Ok(gpu::submit_command(
            self.dma_buffer.phys(),
            buffer.len(),
            0,
            buffer.len(),
            fence,
        ))
    }

    /// Submits a command as is.
    pub fn submit(&mut self, cmd: &WddmGpuCmdSubmit) -> Outcome<Completion> {
        Ok(self.device.control.submit(cmd)?)
    }

    /// Submits all of `buffer`.
    pub fn run(&mut self, buffer: &DmaBufferBuilder) -> Outcome<Completion> {
        let cmd = self.prepare(buffer)?;
        self.submit(&cmd)
    }

    /// `packet`, submitted alone.
    pub fn run_one<T: IntoBytes + Immutable>(&mut self, packet: &T) -> Outcome<Completion> {
        let mut buffer = DmaBufferBuilder::new();
        buffer.push(packet);
        self.run(&buffer)
    }

    /// One TRANSFER, submitted alone.
    pub fn transfer(
        &mut self,
        length: u64,
        source: Endpoint,
        destination: Endpoint,
    ) -> Outcome<Completion> {
        self.run_one(&packets::transfer(length, source, destination))
    }

    /// Writes pattern `tag` at VRAM `offset` through the BAR and reads it back.
    pub fn vram_write_and_verify(&self, offset: u64, len: u64, tag: u64) -> Outcome {
        self.require_vram(offset, len)?;
        self.vram.fill_pattern(offset, len, tag);
        self.vram
            .check_pattern(offset, len, tag, 0)
            .map_err(|m| Failure(format!("BAR readback: {m}")))
    }

    /// Fills the listed pages: data stretches with pattern `tag`, the rest with the guard byte.
    pub fn fill_pages(&self, list: &FrameList, tag: u64) {
        self.guard_pages(list);
        for run in list.data_runs() {
            let mut data = vec![0u8; run.len];
            pattern::fill(tag, run.pos, &mut data);
            self.pool.write(list.pieces()[run.piece], run.offset, &data);
        }
    }

    /// Writes the guard byte over the listed pages outside their data stretches.
    pub fn guard_pages(&self, list: &FrameList) {
        for run in list.guard_runs() {
            self.pool.write(
                list.pieces()[run.piece],
                run.offset,
                &vec![PAGE_GUARD; run.len],
            );
        }
    }

    /// Checks the listed pages hold pattern `tag` in the data stretches and guard bytes elsewhere.
    pub fn check_pages(&self, list: &FrameList, tag: u64) -> Outcome {
        for run in list.data_runs() {
            let piece = list.pieces()[run.piece];
            let mut data = vec![0u8; run.len];
            self.pool.read(piece, run.offset, &mut data);
            if let Some(i) = pattern::first_mismatch(tag, run.pos, &data) {
                return Err(Failure(format!(
                    "data byte {:#x} (frame {} pfn {:#x} offset {:#x}) is {:#04x}, expected {:#04x}",
                    run.pos + i as u64,
                    run.piece,
                    piece.phys >> 12,
                    run.offset + i,
                    data[i],
                    pattern::byte_at(tag, run.pos + i as u64)
                )));
            }
        }
        for run in list.guard_runs() {
            let mut data = vec![0u8; run.len];
            self.pool
                .read(list.pieces()[run.piece], run.offset, &mut data);
            if let Some(i) = data.iter().position(|b| *b != PAGE_GUARD) {
                return Err(Failure(format!(
                    "frame {} offset {:#x} outside the transfer was overwritten ({:#04x})",
                    run.piece,
                    run.offset + i,
                    data[i]
                )));
            }
        }
        Ok(())
    }

    /// Writes guard patterns (tag `tag`) on both sides of VRAM `[offset, offset + len)`,
    /// clipped to the segment.
    pub fn guard_vram(&self, offset: u64, len: u64, tag: u64) {
        for (start, glen) in self.guard_ranges(offset, len) {
            self.vram.fill_pattern(start, glen, tag ^ start);
        }
    }

    /// Checks the guards written by [`Self::guard_vram`] are intact.
    pub fn check_vram_guard(&self, offset: u64, len: u64, tag: u64) -> Outcome {
        for (start, glen) in self.guard_ranges(offset, len) {
            self.vram
                .check_pattern(start, glen, tag ^ start, 0)
                .map_err(|m| {
                    Failure(format!(
                        "VRAM guard around [{offset:#x}, +{len:#x}) changed: {m}"
                    ))
                })?;
        }
        Ok(())
    }

    fn guard_ranges(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let size = self.vram.size;
        let before_start = offset.saturating_sub(VRAM_GUARD).min(size);
        let after_start = offset.saturating_add(len).min(size);
        let after_end = after_start.saturating_add(VRAM_GUARD).min(size);
        [
            (before_start, offset.min(size) - before_start),
            (after_start, after_end - after_start),
        ]
        .into_iter()
        .filter(|(_, l)| *l > 0)
        .collect()
    }

    /// TRANSFER VRAM `offset` → the listed pages; checks status, byte count, data and guards.
    /// VRAM must already hold pattern `tag` there.
    pub fn vram_to_pages(
        &mut self,
        offset: u64,
        list: &FrameList,
        tag: u64,
    ) -> Outcome<Completion> {
        self.pool_fill_guard(list);
        let dst = self.frames(list, 0)?;
        let done = self.transfer(list.length(), self.vram_at(offset), dst)?;
        expect_ok(&done, list.length())?;
        self.check_pages(list, tag)?;
        Ok(done)
    }

    /// TRANSFER the listed pages → VRAM `offset`; checks status, byte count, VRAM data and the
    /// VRAM guards. The pages must already hold pattern `tag`.
    pub fn pages_to_vram(
        &mut self,
        list: &FrameList,
        offset: u64,
        tag: u64,
    ) -> Outcome<Completion> {
        self.require_vram(offset, list.length())?;
        let guard = tag ^ 0x0067_7561_7264;
        self.guard_vram(offset, list.length(), guard);
        let src = self.frames(list, 0)?;
        let done = self.transfer(list.length(), src, self.vram_at(offset))?;
        expect_ok(&done, list.length())?;
        self.vram
            .check_pattern(offset, list.length(), tag, 0)
            .map_err(|m| Failure(format!("VRAM after transfer: {m}")))?;
        self.check_vram_guard(offset, list.length(), guard)?;
        Ok(done)
    }

    fn pool_fill_guard(&self, list: &FrameList) {
        for piece in list.pieces() {
            self.pool.write(*piece, 0, &[PAGE_GUARD; 4096]);
        }
    }

    /// A small scattered round trip at fixed offsets: proves the device still works after a
    /// hostile submission.
    pub fn healthy(&mut self, tag: u64) -> Outcome {
        let (a, b, len) = (0x3000 + 0x11, 0x9000 + 0x7, 3 * 4096 + 99);
        self.vram_write_and_verify(a, len, tag)?;
        self.scattered_round_trip(a, b, len, 0x123, tag, "follow-up")
    }

    /// Pattern `tag` (already at VRAM `a`) to freshly shuffled pages (data from `byte_offset`
    /// of the first) and on to VRAM `b`, each leg checked; failures name `what` and the leg.
    pub fn scattered_round_trip(
        &mut self,
        a: u64,
        b: u64,
        len: u64,
        byte_offset: u32,
        tag: u64,
        what: &str,
    ) -> Outcome {
        let list = FrameList::shuffled(self.pool.pieces(), byte_offset, len, &mut self.rng)?;
        self.vram_to_pages(a, &list, tag)
            .map_err(|f| Failure(format!("{what} VRAM->pages: {f}")))?;
        self.pages_to_vram(&list, b, tag)
            .map_err(|f| Failure(format!("{what} pages->VRAM: {f}")))?;
        Ok(())
    }
}

/// Fails unless the submission succeeded and moved `bytes` bytes.
pub fn expect_ok(done: &Completion, bytes: u64) -> Outcome {
    ensure(
        done.status == SubmitStatus::Ok && done.bytes_transferred == bytes,
        || format!("expected ok with {bytes} bytes, got {done}"),
    )
}

/// Fails unless the submission ended with `status`.
pub fn expect_status(done: &Completion, status: SubmitStatus) -> Outcome {
    ensure(done.status == status, || {
        format!("expected {}, got {done}", status.name())
    })
}
