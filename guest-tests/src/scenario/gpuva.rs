//! `gpuva`: GPU virtual addressing in a real guest, as a WDDM 2.x KMD drives it. The geometry
//! comes from capset 62; page tables are laid out by the ABI's page-table manager and written
//! the way the layout's `PageTableUpdateMode` says (UPDATE_PAGE_TABLE packets on the paging node
//! for GPU_PHYSICAL, CPU stores into guest RAM and through the VRAM BAR for CPU_VIRTUAL); the
//! virtual node copies, fills and signals through two address spaces over scattered guest pages
//! and VRAM, in 4 KiB, 64 KiB (VRAM and guest RAM) and 2 MiB pages; the paging node moves, fills
//! and signals through the paging process's own VAs; faults are read back as the
//! `DmaPageFaulted` payload an ISR would report; the checking mode catches a skipped FLUSH_TLB.
//! Every byte moved is checked through the guest mapping or the BAR.

use std::time::Duration;

use wddm_gpu_abi::build::gpuva::{
    create_context, destroy_context, fill_virtual, flush_tlb, pte, set_root_page_table,
    signal_monitored_fence, submit_virtual, transfer_virtual, virtual_copy, virtual_fill,
    virtual_signal,
};
use wddm_gpu_abi::build::page_tables::{packets, PageTables, TableWrite};
use wddm_gpu_abi::build::DmaBufferBuilder;
use wddm_gpu_abi::context::{
    WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual, WDDM_GPU_CONTEXT_FLAG_CHECK_TLB,
    WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
    WDDM_GPU_PAGE_FAULT_FLAG_WRITE,
};
use wddm_gpu_abi::gpuva::{
    WddmGpuPageTableLevelDesc, WDDM_GPU_MMU_CAP_LARGE_PAGE, WDDM_GPU_MMU_FAULT_BAD_FLAGS,
    WDDM_GPU_MMU_FAULT_NOT_PRESENT, WDDM_GPU_MMU_FAULT_READ_ONLY, WDDM_GPU_MMU_FAULT_ROOT_OVERRUN,
    WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL, WDDM_GPU_PTE_LARGE_PAGE, WDDM_GPU_PTE_READ_ONLY,
};
use wddm_gpu_abi::status::{
    WddmGpuRespEvent, WDDM_GPU_EVENT_MONITORED_FENCE, WDDM_GPU_EVENT_PAGE_FAULT,
    WDDM_GPU_EVENT_STALE_TRANSLATION,
};
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::{Immutable, IntoBytes};

use crate::dma::DmaBuf;
use crate::engine::{expect_ok, Engine};
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::decode_event;
use crate::gpummu::{dma_page_faulted, GpuMmu};
use crate::pattern;
use crate::scatter::Piece;
use crate::tdr::reset_virtual_node;

const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
const PAGE_USIZE: usize = 4096;
/// Bytes of guest RAM for page tables (directories, and leaves in system memory).
const TABLE_RAM: usize = 1 << 20;
/// Bytes of guest RAM for UPDATE_PAGE_TABLE entry arrays.
const ARRAY_RAM: usize = 256 << 10;
/// VRAM the leaf tables in a memory segment come from (offsets in the CPU-visible segment).
const VRAM_TABLES: std::ops::Range<u64> = 0x600_0000..0x680_0000;
/// VRAM data pages.
const VRAM_DATA: u64 = 0x700_0000;
/// Address spaces the tests make, each with its share of the table memory.
const SPACES: u64 = 16;
/// Where the test VAs live (well inside 48 bits, different root slots).
const VA_SOURCE: u64 = 0x12_3400_0000;
const VA_DESTINATION: u64 = 0x187_0000_0000;
const VA_DMA: u64 = 0x40_0000;
const VA_FENCE: u64 = 0x50_0000;

/// A GPU VA test.
type Test = fn(&mut Engine, &mut Ctx) -> Outcome;

/// The tests, in run order.
pub const TESTS: [(&str, Test); 9] = [
    ("gpuva_capset", capset),
    ("gpuva_two_address_spaces", two_address_spaces),
    ("gpuva_64k_pages", pages_64k),
    ("gpuva_large_pages", large_pages),
    ("gpuva_monitored_fence", monitored_fence),
    ("gpuva_page_faults", page_faults),
    ("gpuva_paging_runs_while_faulted", paging_runs_while_faulted),
    ("gpuva_paging_process", paging_process),
    ("gpuva_skipped_flush_caught", skipped_flush_caught),
];

/// The test names, in run order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TESTS.iter().map(|(name, _)| *name)
}

/// Runs test `name` (making the shared context first if needed); `None` for another test.
pub fn run(name: &str, engine: &mut Engine, ctx: &mut Option<Ctx>) -> Option<Outcome> {
    let (_, test) = TESTS.iter().find(|(n, _)| *n == name)?;
    let ctx = match ctx {
        Some(ctx) => ctx,
        None => match Ctx::new(engine) {
            Ok(made) => ctx.insert(made),
            Err(why) => return Some(Err(why)),
        },
    };
    Some(test(engine, ctx))
}

/// What the tests share: the GpuMmu, memory for tables and entry arrays, the virtual DMA
/// buffer's page and the fence page.
pub struct Ctx {
    mmu: GpuMmu,
    tables: DmaBuf,
    arrays: DmaBuf,
    dma: DmaBuf,
    fence: DmaBuf,
    next_context: u32,
    next_space: u64,
}

impl Ctx {
    fn new(engine: &mut Engine) -> Outcome<Self> {
        let mmu = GpuMmu::read(&mut engine.device, &engine.layout)?;
        engine.require_vram(VRAM_TABLES.start, VRAM_DATA + (6 << 20) - VRAM_TABLES.start)?;
        Ok(Self {
            mmu,
            tables: engine.arena.alloc(TABLE_RAM)?,
            arrays: engine.arena.alloc(ARRAY_RAM)?,
            dma: engine.arena.alloc(PAGE_USIZE)?,
            fence: engine.arena.alloc(PAGE_USIZE)?,
            next_context: 1,
            next_space: 0,
        })
    }

    fn cpu_virtual(&self) -> bool {
        self.mmu.geometry.caps().page_table_update_mode == WDDM_GPU_PAGE_TABLE_UPDATE_CPU_VIRTUAL
    }

    /// A fresh address space's tables, in fresh memory (tables of earlier tests stay as they
    /// were: their contexts are destroyed, not their memory).
    fn page_tables(&mut self) -> Outcome<PageTables> {
        self.tables_in(|level| level.page_table_segment_id)
    }

    /// [`Self::page_tables`] for the paging process, in its levels' segments
    /// (`PagingProcessPageTableSegmentId`).
    fn paging_process_tables(&mut self) -> Outcome<PageTables> {
        self.tables_in(|level| level.paging_process_page_table_segment_id)
    }

    fn tables_in(
        &mut self,
        segment_of: impl Fn(&WddmGpuPageTableLevelDesc) -> u32,
    ) -> Outcome<PageTables> {
        let caps = self.mmu.geometry.caps();
        let levels = caps.page_table_level_count as usize;
        let bits: Vec<u32> = caps.levels[..levels]
            .iter()
            .map(|l| l.page_table_index_bit_count)
            .collect();
        let segments: Vec<u32> = caps.levels[..levels].iter().map(segment_of).collect();
        // Each address space gets a sixteenth of the table memory: 64 KiB of RAM, 512 KiB of
        // VRAM.
        let space = self.next_space;
        ensure(space < SPACES, || "out of page-table memory".into())?;
        self.next_space += 1;
        let ram_share = TABLE_RAM as u64 / SPACES;
        let ram_start = self.tables.phys() + space * ram_share;
        let ram = ram_start..ram_start + ram_share;
        let vram_share = (VRAM_TABLES.end - VRAM_TABLES.start) / SPACES;
        let vram_start = VRAM_TABLES.start + space * vram_share;
        let vram = vram_start..vram_start + vram_share;
        PageTables::new(&bits, &segments, ram, vram)
            .map_err(|e| Failure(format!("page tables: {e:?}")))
    }

    /// A new context on the virtual node over `tables` (see `context_on`).
    fn context(
        &mut self,
        engine: &mut Engine,
        tables: &mut PageTables,
        flags: u32,
    ) -> Outcome<u32> {
        self.context_on(engine, WDDM_GPU_NODE_VIRTUAL, tables, flags)
    }

    /// A new context on `node` over `tables`: the DMA page and the fence page mapped into them
    /// too, what they recorded written, the context created and bound to their root.
    fn context_on(
        &mut self,
        engine: &mut Engine,
        node: u32,
        tables: &mut PageTables,
        flags: u32,
    ) -> Outcome<u32> {
        self.map_dma_and_fence(tables)?;
        self.apply(engine, tables)?;
        let id = self.next_context;
        self.next_context += 1;
        let control = &mut engine.device.control;
        ensure(
            control.command("CREATE_CONTEXT", create_context(id, node, flags).as_bytes())?,
            || format!("CREATE_CONTEXT {id} on node {node} refused"),
        )?;
        let root = set_root_page_table(id, tables.root(), tables.root_entries());
        ensure(
            control.command("SET_ROOT_PAGE_TABLE", root.as_bytes())?,
            || format!("SET_ROOT_PAGE_TABLE {id} refused"),
        )?;
        Ok(id)
    }

    /// Writes what `tables` recorded, as the update mode says.
    fn apply(&self, engine: &mut Engine, tables: &mut PageTables) -> Outcome {
        let writes = tables.take();
        if self.cpu_virtual() {
            for write in &writes {
                self.store(engine, write)?;
            }
            return Ok(());
        }
        let start = self.arrays.phys();
        let (buffer, arrays) = packets(&writes, start..start + ARRAY_RAM as u64)
            .map_err(|e| Failure(format!("entry arrays: {e:?}")))?;
        for (address, bytes) in &arrays {
            self.arrays
                .write(usize::try_from(address - start).unwrap_or(0), bytes);
        }
        let done = engine.run(&buffer)?;
        expect_ok(&done, done.bytes_transferred)
    }

    /// A CPU_VIRTUAL store of one write: into guest RAM, or through the VRAM BAR.
    fn store(&self, engine: &Engine, write: &TableWrite) -> Outcome {
        let (table, start, entries) = write.slots();
        let bytes = entries.as_bytes();
        let offset = table.address + u64::from(start) * 8;
        if table.segment == 0 {
            let at = offset
                .checked_sub(self.tables.phys())
                .and_then(|at| usize::try_from(at).ok())
                .ok_or_else(|| Failure(format!("table {offset:#x} outside the table memory")))?;
            self.tables.write(at, bytes);
        } else {
            ensure(table.segment == engine.segment.desc.id, || {
                format!(
                    "table in segment {}, not the CPU-visible one",
                    table.segment
                )
            })?;
            engine.vram.write(offset, bytes);
        }
        Ok(())
    }

    /// Maps the DMA page and the fence page into `tables`.
    fn map_dma_and_fence(&self, tables: &mut PageTables) -> Outcome {
        tables
            .map(VA_DMA, &[pte(0, self.dma.phys(), 0)])
            .and_then(|()| tables.map(VA_FENCE, &[pte(0, self.fence.phys(), 0)]))
            .map_err(|e| Failure(format!("page tables: {e:?}")))
    }

    /// Runs `packets` on the virtual node in context `id`.
    fn run_virtual(
        &self,
        engine: &mut Engine,
        id: u32,
        packets: &DmaBufferBuilder,
    ) -> Outcome<WddmGpuRespSubmitVirtual> {
        ensure(packets.len() as usize <= PAGE_USIZE, || {
            "virtual buffer too large".into()
        })?;
        self.dma.write(0, packets.bytes());
        let fence = engine.fence();
        let cmd = submit_virtual(id, VA_DMA, packets.len(), fence);
        Ok(engine.device.control.submit_virtual(&cmd)?)
    }

    /// Runs the one packet `packet` on the virtual node in context `id`.
    fn run_one_virtual<T: IntoBytes + Immutable>(
        &self,
        engine: &mut Engine,
        id: u32,
        packet: &T,
    ) -> Outcome<WddmGpuRespSubmitVirtual> {
        let mut packets = DmaBufferBuilder::new();
        packets.push(packet);
        self.run_virtual(engine, id, &packets)
    }

    fn destroy(engine: &mut Engine, id: u32) -> Outcome {
        let request = destroy_context(id);
        ensure(
            engine
                .device
                .control
                .command("DESTROY_CONTEXT", request.as_bytes())?,
            || format!("DESTROY_CONTEXT {id} refused"),
        )
    }
}

/// One context on the virtual node whose page at [`VirtualTarget::VA`] is VRAM: what the TDR
/// scenario's virtual-node tests fill, hang and fault.
pub struct VirtualTarget {
    ctx: Ctx,
    id: u32,
    /// The VRAM offset (in the CPU-visible segment) the page maps.
    vram: u64,
}

impl VirtualTarget {
    /// The GPU VA of the target page.
    pub const VA: u64 = VA_DESTINATION;

    /// Reads the GpuMmu, maps [`Self::VA`] to the VRAM page at `vram` and makes the context.
    pub fn new(engine: &mut Engine, vram: u64) -> Outcome<Self> {
        let mut ctx = Ctx::new(engine)?;
        engine.require_vram(vram, PAGE)?;
        let mut tables = ctx.page_tables()?;
        let segment = engine.segment.desc.id;
        tables
            .map(Self::VA, &[pte(segment, vram, 0)])
            .map_err(|e| Failure(format!("page tables: {e:?}")))?;
        let id = ctx.context(engine, &mut tables, 0)?;
        Ok(Self { ctx, id, vram })
    }

    /// Zeroes the page through the BAR and returns a SUBMIT_VIRTUAL that fills it with
    /// `pattern` (its DMA buffer written, its fence the engine's next).
    pub fn fill(&self, engine: &mut Engine, pattern: u32) -> WddmGpuCmdSubmitVirtual {
        engine.vram.write(self.vram, &[0; PAGE_USIZE]);
        let mut packets = DmaBufferBuilder::new();
        packets.push(&virtual_fill(pattern, PAGE, Self::VA));
        self.ctx.dma.write(0, packets.bytes());
        submit_virtual(self.id, VA_DMA, packets.len(), engine.fence())
    }

    /// Whether the page holds `pattern` throughout (read through the BAR).
    pub fn filled(&self, engine: &Engine, pattern: u32) -> bool {
        let mut page = [0u8; PAGE_USIZE];
        engine.vram.read(self.vram, &mut page);
        page.chunks_exact(4)
            .all(|word| word == pattern.to_le_bytes())
    }
}

pub fn expect_status(done: &WddmGpuRespSubmitVirtual, status: SubmitStatus) -> Outcome {
    ensure(done.status == status as u32, || {
        format!(
            "SUBMIT_VIRTUAL fence {} ended with status {}, want {} ({done:?})",
            done.submission_fence_id,
            SubmitStatus::from_raw(done.status).map_or("?", SubmitStatus::name),
            status.name()
        )
    })
}

/// `count` scattered guest pages from the engine's pool.
fn scattered_pages(engine: &mut Engine, count: usize) -> Outcome<Vec<Piece>> {
    let mut pieces = engine.pool.pieces().to_vec();
    ensure(pieces.len() >= count, || "piece pool too small".into())?;
    engine.rng.shuffle(&mut pieces);
    pieces.truncate(count);
    Ok(pieces)
}

/// `count` scattered guest pages holding pattern `tag`, in order: page `i` holds its bytes
/// from `i * PAGE` on (what [`check_pages`] and `check_pattern` expect).
fn patterned_pages(engine: &mut Engine, count: usize, tag: u64) -> Outcome<Vec<Piece>> {
    let pages = scattered_pages(engine, count)?;
    for (index, page) in pages.iter().enumerate() {
        let mut bytes = vec![0u8; PAGE_USIZE];
        pattern::fill(tag, index as u64 * PAGE, &mut bytes);
        engine.pool.write(*page, 0, &bytes);
    }
    Ok(pages)
}

fn check_pages(engine: &Engine, pages: &[Piece], tag: u64, skip: u64) -> Outcome {
    for (index, page) in pages.iter().enumerate() {
        let mut bytes = vec![0u8; PAGE_USIZE];
        engine.pool.read(*page, 0, &mut bytes);
        let start = index as u64 * PAGE + skip;
        if let Some(at) = pattern::first_mismatch(tag, start, &bytes) {
            return Err(Failure(format!(
                "guest page {index} ({:#x}) differs at byte {at}",
                page.phys
            )));
        }
    }
    Ok(())
}

fn wait_event(engine: &mut Engine, ticket: crate::gpu::Ticket) -> Outcome<WddmGpuRespEvent> {
    let answer = engine
        .device
        .control
        .wait(ticket, Duration::from_secs(20))?;
    Ok(decode_event(&answer.bytes)?)
}

fn capset(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    let caps = ctx.mmu.dxgk_caps();
    let geometry = &ctx.mmu.geometry;
    println!(
        "GPUMMU DXGK_GPUMMUCAPS Flags={:#x} PageTableUpdateMode={} VirtualAddressBitCount={} LeafPageTableSizeFor64KPagesInBytes={:#x} PageTableLevelCount={}",
        caps.flags,
        caps.page_table_update_mode,
        caps.virtual_address_bit_count,
        caps.leaf_page_table_size_for_64k_pages_in_bytes,
        caps.page_table_level_count
    );
    for level in 0..caps.page_table_level_count {
        let desc = ctx
            .mmu
            .dxgk_level(level)
            .ok_or_else(|| Failure(format!("no level {level}")))?;
        println!(
            "GPUMMU DXGK_PAGE_TABLE_LEVEL_DESC[{level}] IndexBits={} SegmentId={} PagingProcessSegmentId={} SizeInBytes={:#x} AlignmentInBytes={:#x}",
            desc.page_table_index_bit_count,
            desc.page_table_segment_id,
            desc.paging_process_page_table_segment_id,
            desc.page_table_size_in_bytes,
            desc.page_table_alignment_in_bytes
        );
    }
    ensure(
        caps.virtual_address_bit_count == geometry.address_bits()
            && caps.page_table_level_count == geometry.level_count()
            && ctx.mmu.dxgk_level(caps.page_table_level_count).is_none(),
        || "DXGK caps disagree with the checked geometry".into(),
    )?;
    // A second look gives the same geometry.
    let again = GpuMmu::read(&mut engine.device, &engine.layout)?;
    ensure(again.geometry == *geometry, || {
        "capset 62 changed between reads".into()
    })
}

fn two_address_spaces(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    const PAGES: usize = 16;
    let (tag_a, tag_b) = (0xa11ce, 0xb0b);
    let source_a = patterned_pages(engine, PAGES, tag_a)?;
    let source_b = patterned_pages(engine, PAGES, tag_b)?;
    // The same VAs in both spaces, backed by different pages and different VRAM.
    let vram_a = VRAM_DATA;
    let vram_b = VRAM_DATA + (1 << 20);
    let mut spaces = Vec::new();
    for (source, vram) in [(&source_a, vram_a), (&source_b, vram_b)] {
        let mut tables = ctx.page_tables()?;
        let entries: Vec<u64> = source.iter().map(|p| pte(0, p.phys, 0)).collect();
        let segment = engine.segment.desc.id;
        let destination: Vec<u64> = (0..PAGES as u64)
            .map(|i| pte(segment, vram + i * PAGE, 0))
            .collect();
        tables
            .map(VA_SOURCE, &entries)
            .and_then(|()| tables.map(VA_DESTINATION, &destination))
            .map_err(|e| Failure(format!("page tables: {e:?}")))?;
        let id = ctx.context(engine, &mut tables, 0)?;
        spaces.push(id);
    }
    let length = PAGES as u64 * PAGE;
    for &id in &spaces {
        let copy = virtual_copy(length - 40, VA_SOURCE + 40, VA_DESTINATION + 8);
        let done = ctx.run_one_virtual(engine, id, &copy)?;
        expect_status(&done, SubmitStatus::Ok)?;
    }
    for (vram, tag) in [(vram_a, tag_a), (vram_b, tag_b)] {
        engine
            .vram
            .check_pattern(vram + 8, length - 40, tag, 40)
            .map_err(|m| Failure(format!("VRAM after the VA copy: {m}")))?;
    }
    // A fill in space B lands in B's VRAM only.
    let fill = virtual_fill(0x5a5a_5a5a, 2 * PAGE, VA_DESTINATION);
    expect_status(
        &ctx.run_one_virtual(engine, spaces[1], &fill)?,
        SubmitStatus::Ok,
    )?;
    let mut filled = vec![0u8; 2 * PAGE_USIZE];
    engine.vram.read(vram_b, &mut filled);
    ensure(filled.iter().all(|&b| b == 0x5a), || {
        "the fill missed".into()
    })?;
    engine
        .vram
        .check_pattern(vram_a + 8, length - 40, tag_a, 40)
        .map_err(|m| Failure(format!("space A's VRAM changed by B's fill: {m}")))?;
    check_pages(engine, &source_a, tag_a, 0)?;
    for id in spaces {
        Ctx::destroy(engine, id)?;
    }
    Ok(())
}

fn pages_64k(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    const LARGE: u64 = 64 << 10;
    const LARGE_USIZE: usize = 64 << 10;
    let segment = engine.segment.desc.id;
    let mut tables = ctx.page_tables()?;
    // Four 64 KiB VRAM pages, mapped in reverse order, then a 64 KiB page of guest RAM
    // (`SysMem64KBPageSupported`: 64 KiB aligned and contiguous, inside one hugepage of the
    // arena); the source in 4 KiB guest pages.
    let system = engine.arena.alloc(2 * LARGE_USIZE)?;
    let system_offset = (LARGE - system.phys() % LARGE) % LARGE;
    let system_page = system.phys() + system_offset;
    let mut large: Vec<u64> = (0..4u64)
        .map(|i| pte(segment, VRAM_DATA + (2 << 20) + (3 - i) * LARGE, 0))
        .collect();
    large.push(pte(0, system_page, 0));
    let source = patterned_pages(engine, 80, 0x64)?;
    let entries: Vec<u64> = source.iter().map(|p| pte(0, p.phys, 0)).collect();
    tables
        .map_64k(VA_DESTINATION, &large)
        .and_then(|()| tables.map(VA_SOURCE, &entries))
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    let id = ctx.context(engine, &mut tables, 0)?;
    let copy = virtual_copy(5 * LARGE, VA_SOURCE, VA_DESTINATION);
    expect_status(&ctx.run_one_virtual(engine, id, &copy)?, SubmitStatus::Ok)?;
    let mut in_ram = vec![0u8; LARGE_USIZE];
    system.read(usize::try_from(system_offset).unwrap_or(0), &mut in_ram);
    if let Some(at) = pattern::first_mismatch(0x64, 4 * LARGE, &in_ram) {
        return Err(Failure(format!(
            "the 64 KiB page of guest RAM at {system_page:#x} differs at byte {at}"
        )));
    }
    for i in 0..4u64 {
        engine
            .vram
            .check_pattern(
                VRAM_DATA + (2 << 20) + (3 - i) * LARGE,
                LARGE,
                0x64,
                i * LARGE,
            )
            .map_err(|m| Failure(format!("64 KiB page {i}: {m}")))?;
    }
    Ctx::destroy(engine, id)
}

/// A 2 MiB page: one level-1 entry with `LargePage` maps VRAM, a copy lands at an unaligned
/// offset inside it and a fill covers all of it (`DXGK_PTE.LargePage`, honoured when the
/// layout says `LargePageSupported`). Without that capability the same entry is a page fault
/// (BAD_FLAGS at level 1), and the node is reset.
fn large_pages(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    const LARGE: u64 = 2 << 20;
    const SOURCE_PAGES: usize = 16;
    const TAG: u64 = 0x2d2d;
    let segment = engine.segment.desc.id;
    let vram = VRAM_DATA + (4 << 20);
    let source = patterned_pages(engine, SOURCE_PAGES, TAG)?;
    let mut tables = ctx.page_tables()?;
    let entries: Vec<u64> = source.iter().map(|p| pte(0, p.phys, 0)).collect();
    tables
        .map(VA_SOURCE, &entries)
        .and_then(|()| {
            tables.set(
                VA_DESTINATION,
                1,
                pte(segment, vram, WDDM_GPU_PTE_LARGE_PAGE),
            )
        })
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    let id = ctx.context(engine, &mut tables, 0)?;
    let into = (1 << 20) + 100;
    let length = SOURCE_PAGES as u64 * PAGE;
    let mut work = DmaBufferBuilder::new();
    work.push(&virtual_fill(0x1a26_e0a6, LARGE, VA_DESTINATION));
    work.push(&virtual_copy(length, VA_SOURCE, VA_DESTINATION + into));
    let done = ctx.run_virtual(engine, id, &work)?;
    if ctx.mmu.geometry.caps().flags & WDDM_GPU_MMU_CAP_LARGE_PAGE == 0 {
        expect_status(&done, SubmitStatus::PageFault)?;
        let fault = done.page_fault.fault;
        ensure(
            fault.kind == WDDM_GPU_MMU_FAULT_BAD_FLAGS
                && fault.page_table_level == 1
                && fault.virtual_address == VA_DESTINATION,
            || format!("without LargePageSupported: {fault:?}"),
        )?;
        println!(
            "GPUMMU large page without LargePageSupported: PAGE_FAULT kind {} (BAD_FLAGS) at level {} for VA {:#x}",
            fault.kind, fault.page_table_level, fault.virtual_address
        );
        reset_virtual_node(engine)?;
        return Ctx::destroy(engine, id);
    }
    expect_status(&done, SubmitStatus::Ok)?;
    engine
        .vram
        .check_pattern(vram + into, length, TAG, 0)
        .map_err(|m| Failure(format!("the copy into the 2 MiB page: {m}")))?;
    let mut filled = vec![0u8; usize::try_from(LARGE).unwrap_or(0)];
    engine.vram.read(vram, &mut filled);
    let fill = 0x1a26_e0a6u32.to_le_bytes();
    let outside_copy = |at: usize| !(into..into + length).contains(&(at as u64));
    let bad = filled
        .chunks_exact(4)
        .enumerate()
        .find(|&(i, word)| outside_copy(i * 4) && outside_copy(i * 4 + 3) && word != fill);
    ensure(bad.is_none(), || {
        format!("the fill of the 2 MiB page left {bad:02x?}")
    })?;
    println!(
        "GPUMMU large page: one level-1 entry maps 2 MiB of VRAM at {vram:#x} (VA {VA_DESTINATION:#x}); a FILL of all of it and a COPY of {length} bytes at +{into:#x} read back through the BAR"
    );
    Ctx::destroy(engine, id)
}

fn monitored_fence(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    let mut tables = ctx.page_tables()?;
    let id = ctx.context(engine, &mut tables, 0)?;
    let ticket = engine.device.control.post_wait_event()?;
    let signal = virtual_signal(VA_FENCE + 16, 0x0123_4567_89ab_cdef);
    expect_status(&ctx.run_one_virtual(engine, id, &signal)?, SubmitStatus::Ok)?;
    let mut value = [0u8; 8];
    ctx.fence.read(16, &mut value);
    ensure(u64::from_le_bytes(value) == 0x0123_4567_89ab_cdef, || {
        format!("fence memory holds {:#x}", u64::from_le_bytes(value))
    })?;
    let event = wait_event(engine, ticket)?;
    ensure(
        event.kind == WDDM_GPU_EVENT_MONITORED_FENCE
            && event.fence_address == VA_FENCE + 16
            && event.fence_value == 0x0123_4567_89ab_cdef,
        || {
            format!(
                "event {} at {:#x} value {:#x}",
                event.kind, event.fence_address, event.fence_value
            )
        },
    )?;
    Ctx::destroy(engine, id)
}

fn page_faults(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    let segment = engine.segment.desc.id;
    let mut tables = ctx.page_tables()?;
    let read_only = scattered_pages(engine, 1)?[0];
    tables
        .map(VA_DESTINATION, &[pte(segment, VRAM_DATA + (3 << 20), 0)])
        .and_then(|()| tables.map(VA_SOURCE, &[pte(0, read_only.phys, WDDM_GPU_PTE_READ_ONLY)]))
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    let id = ctx.context(engine, &mut tables, 0)?;
    let ticket = engine.device.control.post_wait_event()?;

    // An unmapped page next to a mapped one: the leaf entry is not valid.
    let unmapped = VA_DESTINATION + PAGE + 24;
    let copy = virtual_copy(8, unmapped, VA_DESTINATION);
    let done = ctx.run_one_virtual(engine, id, &copy)?;
    expect_status(&done, SubmitStatus::PageFault)?;
    let record = done.page_fault;
    let payload = dma_page_faulted(&record);
    println!(
        "GPUMMU DmaPageFaulted FaultedFenceId={} FaultedVirtualAddress={:#x} PageTableLevel={} PageFaultFlags={:#x} NodeOrdinal={} FaultErrorCode={:#x} FaultedPrimitiveAPISequenceNumber={:#x} (device: kind {}, access {}, context {}, packet at {:#x})",
        payload.faulted_fence_id,
        payload.faulted_virtual_address,
        payload.page_table_level,
        payload.page_fault_flags,
        payload.node_ordinal,
        payload.fault_error_code,
        payload.faulted_primitive_api_sequence_number,
        record.fault.kind,
        record.fault.access,
        record.context_id,
        record.packet_offset
    );
    ensure(
        payload.faulted_virtual_address == unmapped
            && payload.page_table_level == 0
            && payload.faulted_fence_id == done.submission_fence_id
            && payload.page_fault_flags == WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED
            && payload.node_ordinal == WDDM_GPU_NODE_VIRTUAL
            && record.fault.kind == WDDM_GPU_MMU_FAULT_NOT_PRESENT,
        || format!("unexpected record {record:?}"),
    )?;
    let event = wait_event(engine, ticket)?;
    ensure(
        event.kind == WDDM_GPU_EVENT_PAGE_FAULT && event.page_fault == record,
        || format!("event {} carries {:?}", event.kind, event.page_fault),
    )?;
    // The node refuses work until RESET_ENGINE.
    expect_status(
        &ctx.run_one_virtual(engine, id, &copy)?,
        SubmitStatus::NodeFaulted,
    )?;
    reset_virtual_node(engine)?;

    // A write through the read-only page.
    let write = virtual_fill(1, 8, VA_SOURCE);
    let done = ctx.run_one_virtual(engine, id, &write)?;
    expect_status(&done, SubmitStatus::PageFault)?;
    ensure(
        done.page_fault.fault.kind == WDDM_GPU_MMU_FAULT_READ_ONLY
            && done.page_fault.flags
                == WDDM_GPU_PAGE_FAULT_FLAG_WRITE | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
        || format!("read-only write gave {:?}", done.page_fault),
    )?;
    reset_virtual_node(engine)?;

    // A root bound with one entry: the destination's root index is past it.
    let root = set_root_page_table(id, tables.root(), 1);
    ensure(
        engine
            .device
            .control
            .command("SET_ROOT_PAGE_TABLE", root.as_bytes())?,
        || "SET_ROOT_PAGE_TABLE refused".into(),
    )?;
    let fill = virtual_fill(2, 8, VA_DESTINATION);
    let done = ctx.run_one_virtual(engine, id, &fill)?;
    expect_status(&done, SubmitStatus::PageFault)?;
    let level = ctx.mmu.geometry.root_level();
    ensure(
        done.page_fault.fault.kind == WDDM_GPU_MMU_FAULT_ROOT_OVERRUN
            && done.page_fault.fault.page_table_level == level
            && done.page_fault.fault.virtual_address == VA_DESTINATION,
        || format!("root overrun gave {:?}", done.page_fault),
    )?;
    reset_virtual_node(engine)?;
    Ctx::destroy(engine, id)
}

fn paging_runs_while_faulted(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    let mut tables = ctx.page_tables()?;
    let id = ctx.context(engine, &mut tables, 0)?;
    let copy = virtual_copy(8, VA_SOURCE, VA_DESTINATION);
    expect_status(
        &ctx.run_one_virtual(engine, id, &copy)?,
        SubmitStatus::PageFault,
    )?;
    // The virtual node is faulted; the paging node still moves bytes.
    engine.healthy(0x9a61)?;
    expect_status(
        &ctx.run_one_virtual(engine, id, &copy)?,
        SubmitStatus::NodeFaulted,
    )?;
    reset_virtual_node(engine)?;
    let signal = virtual_signal(VA_FENCE, 7);
    expect_status(&ctx.run_one_virtual(engine, id, &signal)?, SubmitStatus::Ok)?;
    Ctx::destroy(engine, id)
}

/// The paging node's own GPU VAs, as a WDDM 2.x KMD's paging buffers use them for the paging
/// process (`DXGK_BUILDPAGINGBUFFER_TRANSFERVIRTUAL`, `FILLVIRTUAL`, and the monitored fence a
/// paging buffer signals): a context on node 0 bound to tables in the paging process's segments,
/// one paging submission of VIRTUAL_TRANSFER (scattered guest pages into VRAM pages mapped in
/// reverse, both ends unaligned), VIRTUAL_FILL and SIGNAL_MONITORED_FENCE, then a
/// VIRTUAL_TRANSFER from an unmapped VA, which must stop the submission with PAGE_FAULT at its
/// exact address while the next paging submission still runs.
fn paging_process(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    const PAGES: u64 = 16;
    const PAGES_USIZE: usize = 16;
    const _: () = assert!(PAGES_USIZE as u64 == PAGES);
    const TAG: u64 = 0x9a9e;
    let segment = engine.segment.desc.id;
    let vram = VRAM_DATA + (3 << 20) + (256 << 10);
    let source = patterned_pages(engine, PAGES_USIZE, TAG)?;
    engine.vram.write(vram, &vec![0; PAGES_USIZE * PAGE_USIZE]);
    let mut tables = ctx.paging_process_tables()?;
    let sources: Vec<u64> = source.iter().map(|p| pte(0, p.phys, 0)).collect();
    let destinations: Vec<u64> = (0..PAGES)
        .map(|i| pte(segment, vram + (PAGES - 1 - i) * PAGE, 0))
        .collect();
    tables
        .map(VA_SOURCE, &sources)
        .and_then(|()| tables.map(VA_DESTINATION, &destinations))
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    let id = ctx.context_on(engine, WDDM_GPU_NODE_PAGING, &mut tables, 0)?;
    let ticket = engine.device.control.post_wait_event()?;

    let length = (PAGES - 1) * PAGE - 100;
    let fence_value = 0x0bad_cafe_0000_0001;
    let mut buffer = DmaBufferBuilder::new();
    buffer.push(&transfer_virtual(
        length,
        VA_SOURCE + 50,
        VA_DESTINATION + 30,
    ));
    buffer.push(&fill_virtual(
        0x5eed_f111,
        64,
        VA_DESTINATION + (PAGES - 1) * PAGE,
    ));
    buffer.push(&signal_monitored_fence(VA_FENCE + 24, fence_value));
    let done = engine.run(&buffer)?;
    expect_ok(&done, length + 64)?;
    // VA_DESTINATION's page i is VRAM page PAGES-1-i: check it page piece by page piece.
    let mut at = 0u64;
    while at < length {
        let va = 30 + at;
        let piece = (PAGE - va % PAGE).min(length - at);
        let offset = vram + (PAGES - 1 - va / PAGE) * PAGE + va % PAGE;
        engine
            .vram
            .check_pattern(offset, piece, TAG, 50 + at)
            .map_err(|m| Failure(format!("VIRTUAL_TRANSFER byte {at}: {m}")))?;
        at += piece;
    }
    let mut filled = vec![0u8; 64];
    engine.vram.read(vram, &mut filled);
    ensure(filled == 0x5eed_f111u32.to_le_bytes().repeat(16), || {
        format!("VIRTUAL_FILL left {filled:02x?}")
    })?;
    let mut value = [0u8; 8];
    ctx.fence.read(24, &mut value);
    ensure(u64::from_le_bytes(value) == fence_value, || {
        format!("fence memory holds {:#x}", u64::from_le_bytes(value))
    })?;
    let event = wait_event(engine, ticket)?;
    ensure(
        event.kind == WDDM_GPU_EVENT_MONITORED_FENCE
            && event.fence_address == VA_FENCE + 24
            && event.fence_value == fence_value,
        || format!("event {event:?}"),
    )?;

    // An unmapped source page: a page fault at its exact address, nothing after it runs.
    let unmapped = VA_SOURCE + PAGES * PAGE + 8;
    let mut faulting = DmaBufferBuilder::new();
    faulting.push(&transfer_virtual(16, unmapped, VA_DESTINATION));
    faulting.push(&signal_monitored_fence(VA_FENCE + 32, 1));
    let done = engine.run(&faulting)?;
    ensure(
        done.status == SubmitStatus::PageFault
            && done.packets_completed == 0
            && done.fault_address == unmapped,
        || format!("expected PAGE_FAULT at {unmapped:#x}, got {done}"),
    )?;
    ctx.fence.read(32, &mut value);
    ensure(u64::from_le_bytes(value) == 0, || {
        "the SIGNAL after the fault ran".into()
    })?;
    engine.healthy(0x9a62)?;
    println!(
        "GPUMMU paging process: context {id} on node 0; one paging buffer of VIRTUAL_TRANSFER ({length} bytes, scattered pages into reversed VRAM pages), VIRTUAL_FILL, SIGNAL_MONITORED_FENCE ({fence_value:#x}, event seen); a VIRTUAL_TRANSFER from {unmapped:#x}: {} at that address, the paging node then healthy",
        done.status.name()
    );
    Ctx::destroy(engine, id)
}

fn skipped_flush_caught(engine: &mut Engine, ctx: &mut Ctx) -> Outcome {
    let segment = engine.segment.desc.id;
    let pages = scattered_pages(engine, 2)?;
    for (index, page) in pages.iter().enumerate() {
        let mut bytes = vec![0u8; PAGE_USIZE];
        pattern::fill(0x700 + index as u64, 0, &mut bytes);
        engine.pool.write(*page, 0, &bytes);
    }
    let vram = VRAM_DATA + (3 << 20) + (64 << 10);
    let mut tables = ctx.page_tables()?;
    tables
        .map(VA_SOURCE, &[pte(0, pages[0].phys, 0)])
        .and_then(|()| tables.map(VA_DESTINATION, &[pte(segment, vram, 0)]))
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    let id = ctx.context(engine, &mut tables, WDDM_GPU_CONTEXT_FLAG_CHECK_TLB)?;
    let copy = virtual_copy(PAGE, VA_SOURCE, VA_DESTINATION);
    expect_status(&ctx.run_one_virtual(engine, id, &copy)?, SubmitStatus::Ok)?;
    let check = |engine: &Engine, tag: u64| {
        engine
            .vram
            .check_pattern(vram, PAGE, tag, 0)
            .map_err(|m| Failure(format!("VRAM holds the wrong page: {m}")))
    };
    check(engine, 0x700)?;

    // Remap the source without FLUSH_TLB: the cached translation is still used, and reported.
    tables
        .map(VA_SOURCE, &[pte(0, pages[1].phys, 0)])
        .map_err(|e| Failure(format!("page tables: {e:?}")))?;
    ctx.apply(engine, &mut tables)?;
    let ticket = engine.device.control.post_wait_event()?;
    expect_status(&ctx.run_one_virtual(engine, id, &copy)?, SubmitStatus::Ok)?;
    check(engine, 0x700)?;
    let event = wait_event(engine, ticket)?;
    println!(
        "GPUMMU stale translation: VA {:#x} level {} cached {:#x} memory {:#x} (context {})",
        event.stale.virtual_address,
        event.stale.page_table_level,
        event.stale.cached_entry,
        event.stale.memory_entry,
        event.stale.context_id
    );
    ensure(
        event.kind == WDDM_GPU_EVENT_STALE_TRANSLATION
            && event.stale.virtual_address == VA_SOURCE
            && event.stale.page_table_level == 0
            && event.stale.cached_entry == pte(0, pages[0].phys, 0)
            && event.stale.memory_entry == pte(0, pages[1].phys, 0)
            && event.stale.context_id == id,
        || format!("event {} carries {:?}", event.kind, event.stale),
    )?;

    // With the flush, the new page is copied.
    let done = engine.run_one(&flush_tlb(tables.root(), Some(VA_SOURCE..VA_SOURCE + PAGE)))?;
    expect_ok(&done, 0)?;
    expect_status(&ctx.run_one_virtual(engine, id, &copy)?, SubmitStatus::Ok)?;
    check(engine, 0x701)?;
    Ctx::destroy(engine, id)
}
