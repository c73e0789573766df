//! GPU virtual addressing in the paging bench (see `docs/performance.md`):
//!
//! - through the backend: a 64 MiB copy from GPU VAs mapped onto the scattered frames to VAs
//!   mapped onto VRAM and back (two SUBMIT_VIRTUAL buffers of one COPY each, run by the
//!   virtual node through the MMU), the same bytes the physical scattered TRANSFERs move; and
//!   one paging submission of UPDATE_PAGE_TABLE packets rewriting the 262,144 leaf entries that
//!   map the whole 2 GiB pool (512 leaf tables in VRAM, from entry arrays in guest RAM);
//! - in this process, through the crate's MMU (`AddressSpace::translate` over `DeviceTables`):
//!   the cost of translating one 4 KiB page, from a cold translation cache (a walk of four
//!   levels for every line of 8 leaf entries) and when it hits.
//!
//! The tables are laid out and written as a GPU_PHYSICAL KMD does (`PageTables` of the frontend
//! kit): four 9-bit levels, leaf tables in the CPU-visible VRAM segment, directories in system
//! memory, as `qemu-configs/layouts/gpummu.toml` has them.

use std::hint::black_box;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vhost_user_wddm_gpu::rules::validate;
use vhost_user_wddm_gpu::{
    parse_layout, Access, AddressSpace, BarMode, DeviceMemory, DeviceTables, Engine, GuestRam,
    SegmentLayout, TableAddress, Vram,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::build::gpuva::virtual_copy;
use wddm_gpu_abi::build::gpuva::{create_context, pte, set_root_page_table, submit_virtual};
use wddm_gpu_abi::context::{WddmGpuRespSubmitVirtual, WDDM_GPU_NODE_VIRTUAL};
use wddm_gpu_abi::ctrl::{VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_RESP_SUBMIT_VIRTUAL};
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::packet::WddmGpuPacketUpdatePageTable;
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::harness::{BUFFER_SIZE, DMA_BUFFER, PAGE, SLOT_ROOM};
use wddm_gpu_frontend_kit::layout::{self, Gpummu};
use wddm_gpu_frontend_kit::page_tables::PageTables;
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::submit_command;
use zerocopy::IntoBytes;

use super::{
    check_bytes, dma, Bench, COPY_BYTES, COPY_PAGES, MAP_PAGES, VRAM_IN, VRAM_OUT, VRAM_SEGMENT,
};

/// The GpuMmu of the bench's layouts (`gpummu.toml`'s): leaf tables in the VRAM segment,
/// directories in system memory.
pub const GPUMMU: Gpummu = Gpummu::four_levels(4);

// Guest RAM (free between the contiguous data, which ends at 80 MiB, and the pool at 128 MiB).
/// Directories.
const RAM_TABLES: Range<u64> = 0x500_0000..0x510_0000;
/// Entry arrays of the UPDATE_PAGE_TABLE packets.
const ARRAYS: Range<u64> = 0x510_0000..0x5c0_0000;
/// The two virtual DMA buffers, a page each.
const VIRTUAL_DMA: u64 = 0x5f0_0000;
/// Leaf tables: VRAM offsets from 200 MiB (the physical copies use the first 192 MiB and one
/// page after).
const VRAM_TABLES: Range<u64> = 0xc80_0000..0xd80_0000;

// GPU virtual addresses.
/// The pool's scattered frames, all of them (2 GiB of RAM, 1 GiB of VA): the first
/// [`COPY_PAGES`] are the frames of the scattered copies.
const VA_POOL: u64 = 0x10_0000_0000;
/// VRAM_IN and VRAM_OUT, 64 MiB each.
const VA_VRAM_IN: u64 = 0x20_0000_0000;
const VA_VRAM_OUT: u64 = 0x30_0000_0000;
/// The two DMA buffers.
const VA_DMA: u64 = 0x10_0000;
/// The virtual node's context.
const CONTEXT: u32 = 1;
/// Leaf entries per setup submission (64 leaf tables: about 7 KiB of packets).
const SETUP_ENTRIES: usize = 32_768;

/// What the GPU-VA figures use in the backend.
pub struct GpuVa {
    /// The UPDATE_PAGE_TABLE packets rewriting every leaf entry of the pool (their arrays are
    /// in guest RAM).
    update: Vec<u8>,
    /// Their packets and entries.
    update_packets: u32,
    /// Leaf entries they write.
    pub update_entries: u64,
}

impl Bench {
    /// Writes the pending table updates' arrays and runs their packets on the paging node.
    fn apply(&mut self, tables: &mut PageTables) {
        let pending = tables.take();
        for (address, bytes) in &pending.arrays {
            self.h.write_ram(*address, bytes);
        }
        let packets = pending.packets.bytes().to_vec();
        let count = packets.len() / size_of::<WddmGpuPacketUpdatePageTable>();
        self.run_paging(&packets, u32::try_from(count).unwrap(), "page-table set-up");
    }

    /// Submits a paging DMA buffer of `packets` packets and waits for it; anything but all of
    /// them completing breaks the run.
    fn run_paging(&mut self, packets: &[u8], count: u32, what: &str) -> Duration {
        assert!(packets.len() <= 0x1_0000, "{what}: paging buffer too large");
        let fence = self.next_fence;
        self.next_fence += 1;
        self.h.write_ram(DMA_BUFFER, packets);
        let pending = self.h.post_submit(&submit_command(
            DMA_BUFFER,
            u32::try_from(packets.len()).unwrap(),
            fence,
        ));
        let response: WddmGpuRespSubmit = self.h.wait_submit(pending);
        assert!(
            SubmitStatus::from_raw(response.status) == Some(SubmitStatus::Ok)
                && response.packets_completed == count,
            "{what}: the device failed: {response:?}\n---- backend log ----\n{}",
            self.h.backend.log()
        );
        self.h
            .last_round_trip()
            .expect("a submission without a kick and a notification")
    }

    fn ok_nodata(&mut self, request: &[u8], what: &str) {
        let reply = self.h.request(request, BUFFER_SIZE);
        assert_eq!(
            reply.hdr().type_,
            VIRTIO_GPU_RESP_OK_NODATA,
            "{what}: {reply:?}"
        );
    }

    /// Maps the pool, VRAM_IN, VRAM_OUT and the DMA buffers in a context of the virtual node,
    /// and prepares the update of every pool entry.
    pub fn setup_gpu_va(&mut self) -> GpuVa {
        let mut tables = PageTables::new(
            GPUMMU.index_bits,
            GPUMMU.table_segments,
            RAM_TABLES,
            VRAM_TABLES,
            ARRAYS,
        );
        let pool: Vec<u64> = self
            .scattered
            .iter()
            .map(|&frame| pte(0, frame * PAGE, 0))
            .collect();
        assert_eq!(pool.len() as u64, MAP_PAGES);
        for (i, chunk) in pool.chunks(SETUP_ENTRIES).enumerate() {
            tables.map(VA_POOL + (i * SETUP_ENTRIES) as u64 * PAGE, chunk);
            self.apply(&mut tables);
        }
        for (va, offset) in [(VA_VRAM_IN, VRAM_IN), (VA_VRAM_OUT, VRAM_OUT)] {
            let entries: Vec<u64> = (0..COPY_PAGES)
                .map(|i| pte(VRAM_SEGMENT, offset + i * PAGE, 0))
                .collect();
            tables.map(va, &entries);
            self.apply(&mut tables);
        }
        tables.map(
            VA_DMA,
            &[pte(0, VIRTUAL_DMA, 0), pte(0, VIRTUAL_DMA + PAGE, 0)],
        );
        self.apply(&mut tables);

        // The same entries again, into tables that now exist: UPDATE_PAGE_TABLE packets only,
        // one per leaf table. Their arrays are written once, here.
        tables.map(VA_POOL, &pool);
        let pending = tables.take();
        for (address, bytes) in &pending.arrays {
            self.h.write_ram(*address, bytes);
        }
        let update = pending.packets.bytes().to_vec();
        let update_packets = u32::try_from(pending.arrays.len()).unwrap();
        assert_eq!(
            update.len(),
            pending.arrays.len() * size_of::<WddmGpuPacketUpdatePageTable>(),
            "the update is UPDATE_PAGE_TABLE packets only"
        );

        self.ok_nodata(
            create_context(CONTEXT, WDDM_GPU_NODE_VIRTUAL, 0).as_bytes(),
            "CREATE_CONTEXT",
        );
        self.ok_nodata(
            set_root_page_table(CONTEXT, tables.root(), tables.root_entries()).as_bytes(),
            "SET_ROOT_PAGE_TABLE",
        );
        self.h.write_ram(
            VIRTUAL_DMA,
            dma(&virtual_copy(COPY_BYTES, VA_POOL, VA_VRAM_IN)).as_slice(),
        );
        self.h.write_ram(
            VIRTUAL_DMA + PAGE,
            dma(&virtual_copy(COPY_BYTES, VA_VRAM_OUT, VA_POOL)).as_slice(),
        );
        GpuVa {
            update,
            update_packets,
            update_entries: pool.len() as u64,
        }
    }

    /// One SUBMIT_VIRTUAL of the COPY at `va`; its kick-to-completion time. Anything but the
    /// whole copy breaks the run.
    fn run_virtual(&mut self, va: u64, what: &str) -> Duration {
        let fence = self.next_fence;
        self.next_fence += 1;
        let size = u32::try_from(size_of::<wddm_gpu_abi::context::WddmGpuVirtualCopy>()).unwrap();
        let pending = self.h.post(
            submit_virtual(CONTEXT, va, size, fence).as_bytes(),
            SLOT_ROOM,
        );
        let reply = self.h.wait_reply(pending);
        assert_eq!(
            reply.hdr().type_,
            WDDM_GPU_RESP_SUBMIT_VIRTUAL,
            "{what}: {reply:?}"
        );
        let response: WddmGpuRespSubmitVirtual = reply.exact();
        assert!(
            SubmitStatus::from_raw(response.status) == Some(SubmitStatus::Ok)
                && response.packets_completed == 1
                && response.bytes_transferred == COPY_BYTES
                && response.submission_fence_id == fence,
            "{what}: the device failed: {response:?}\n---- backend log ----\n{}",
            self.h.backend.log()
        );
        self.h
            .last_round_trip()
            .expect("a submission without a kick and a notification")
    }

    /// The VA copies: scattered frames -> VRAM_IN, then VRAM_OUT -> scattered frames.
    pub fn device_va_copy(&mut self) -> Duration {
        self.run_virtual(VA_DMA, "VA copy frames -> VRAM")
            + self.run_virtual(VA_DMA + PAGE, "VA copy VRAM -> frames")
    }

    /// Every leaf entry of the pool rewritten by UPDATE_PAGE_TABLE, one paging submission.
    pub fn device_update(&mut self, gpu: &GpuVa) -> Duration {
        self.run_paging(&gpu.update, gpu.update_packets, "UPDATE_PAGE_TABLE")
    }

    /// Runs the update once (the copies then walk the tables it rewrote) and the copies once,
    /// and checks every byte they moved.
    pub fn warm_up_and_check_gpu_va(&mut self, gpu: &GpuVa) {
        let len = usize::try_from(COPY_BYTES).unwrap();
        let frames = self.scattered[..usize::try_from(COPY_PAGES).unwrap()].to_vec();
        let scattered_data = pattern(6, len);
        let from_vram = pattern(7, len);
        self.device_update(gpu);
        self.scatter(&frames, &scattered_data);
        self.h.write_vram(VRAM_OUT, &from_vram);
        self.h.write_vram(VRAM_IN, &vec![0; len]);
        self.device_va_copy();
        check_bytes(
            &self.h.read_vram(VRAM_IN, len),
            &scattered_data,
            "VA copy: scattered frames -> VRAM",
        );
        check_bytes(
            &self.gather(&frames),
            &from_vram,
            "VA copy: VRAM -> scattered frames",
        );
    }
}

// ---- translation cost, in this process ----

/// The in-process world's VRAM: its layout is the bench's GpuMmu over a 16 MiB VRAM segment
/// (and a 16 MiB aperture).
const T_VRAM: u64 = 16 << 20;
/// Guest RAM: directories at 1 MiB, entry arrays from 2 MiB, paging buffers at 8 MiB, the
/// mapped frames every other page from 16 MiB (touched by nobody: translation reads entries,
/// not pages).
const T_RAM: u64 = T_FRAMES + 2 * COPY_BYTES;
const T_RAM_TABLES: Range<u64> = 0x10_0000..0x20_0000;
const T_ARRAYS: Range<u64> = 0x20_0000..0x80_0000;
const T_DMA: u64 = 0x80_0000;
const T_FRAMES: u64 = 16 << 20;
/// Translations per measurement: the 16,384 pages of a 64 MiB range.
const T_PAGES: u64 = COPY_PAGES;
/// Pages the hit measurement cycles over: half the cache's 4 KiB entries.
const T_HOT_PAGES: u64 = 512;
const VA_T: u64 = 0x7_0000_0000;

/// The MMU over guest memory and VRAM of this process, one address space bound to tables that
/// map [`T_PAGES`] scattered pages.
pub struct Translation {
    mem: GuestMemoryMmap<()>,
    vram: Vram,
    vram_path: PathBuf,
    layout: SegmentLayout,
    geometry: MmuGeometry,
    space: AddressSpace,
}

impl Drop for Translation {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.vram_path);
    }
}

impl Translation {
    pub fn new() -> Self {
        let spec = parse_layout(&layout::vram_and_aperture("16MiB", "16MiB", &GPUMMU))
            .expect("the translation layout parses");
        let layout = validate(&spec, T_VRAM).expect("the translation layout is valid");
        let geometry = layout.gpummu.expect("the layout has a GpuMmu");
        let dir = ["/dev/shm"]
            .iter()
            .map(PathBuf::from)
            .find(|dir| dir.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let vram_path = dir.join(format!("wddm-bench-translate-{}.vram", std::process::id()));
        let vram = Vram::create(&vram_path, T_VRAM, 0, BarMode::Ivshmem).expect("a VRAM file");
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(
            GuestAddress(0),
            usize::try_from(T_RAM).unwrap(),
        )])
        .expect("guest RAM");
        let mut tables = PageTables::new(
            GPUMMU.index_bits,
            GPUMMU.table_segments,
            T_RAM_TABLES,
            0..T_VRAM,
            T_ARRAYS,
        );
        let frames = super::shuffled((0..T_PAGES).map(|i| T_FRAMES + 2 * i * PAGE).collect());
        let entries: Vec<u64> = frames.iter().map(|&frame| pte(0, frame, 0)).collect();
        let mut translation = Self {
            mem,
            vram,
            vram_path,
            layout,
            geometry,
            space: AddressSpace::new(false),
        };
        let mut engine = Engine::new(&translation.layout);
        for (i, chunk) in entries.chunks(SETUP_ENTRIES).enumerate() {
            tables.map(VA_T + (i * SETUP_ENTRIES) as u64 * PAGE, chunk);
            translation.apply(&mut engine, &mut tables);
        }
        let root = tables.root();
        translation
            .space
            .set_root(
                &translation.geometry,
                TableAddress {
                    segment: root.segment,
                    address: root.address,
                },
                u64::from(tables.root_entries()),
            )
            .expect("the root binds");
        // Every page translates to its frame.
        for (i, &frame) in frames.iter().enumerate() {
            let run = translation.translate(VA_T + i as u64 * PAGE);
            assert_eq!(
                run,
                vhost_user_wddm_gpu::Run {
                    target: vhost_user_wddm_gpu::Target::System(frame),
                    len: PAGE,
                },
                "page {i}"
            );
        }
        translation
    }

    /// Runs the pending UPDATE_PAGE_TABLE packets on an engine of this process.
    fn apply(&mut self, engine: &mut Engine, tables: &mut PageTables) {
        let pending = tables.take();
        for (address, bytes) in &pending.arrays {
            self.mem
                .write_slice(bytes, GuestAddress(*address))
                .expect("arrays in guest RAM");
        }
        let packets = pending.packets.bytes();
        self.mem
            .write_slice(packets, GuestAddress(T_DMA))
            .expect("the paging buffer in guest RAM");
        let cmd = submit_command(T_DMA, u32::try_from(packets.len()).unwrap(), 1);
        let memory = DeviceMemory {
            ram: GuestRam::new(&self.mem, None),
            vram: &self.vram,
            layout: &self.layout,
        };
        let completion = engine.execute(&cmd, &memory, &mut ());
        assert!(completion.stop.is_none(), "{completion:?}");
    }

    fn translate(&mut self, va: u64) -> vhost_user_wddm_gpu::Run {
        let ram = GuestRam::new(&self.mem, None);
        let tables = DeviceTables::new(&ram, &self.vram, &self.layout);
        self.space
            .translate(&self.geometry, &tables, va, PAGE, Access::Read)
            .expect("a mapped page")
    }

    /// `count` translations of 4 KiB pages, page `i` at `VA_T + (i % cycle) * PAGE`: ns each.
    fn per_page(&mut self, count: u64, cycle: u64) -> f64 {
        let ram = GuestRam::new(&self.mem, None);
        let tables = DeviceTables::new(&ram, &self.vram, &self.layout);
        let start = Instant::now();
        for i in 0..count {
            let va = VA_T + (i % cycle) * PAGE;
            let run =
                self.space
                    .translate(&self.geometry, &tables, black_box(va), PAGE, Access::Read);
            black_box(run).expect("a mapped page");
        }
        start.elapsed().as_nanos() as f64 / count as f64
    }

    /// ns per 4 KiB page from a cold cache: the 16,384 pages once each, the cache flushed first
    /// (a walk of four levels, leaf in VRAM, for the first page of each line of 8 leaf entries,
    /// which the walk caches; a lookup for the other seven).
    pub fn miss_ns(&mut self) -> f64 {
        self.space.flush(None);
        self.per_page(T_PAGES, T_PAGES)
    }

    /// ns per 4 KiB page when every translation hits: 512 pages, cached first, 16,384 times.
    pub fn hit_ns(&mut self) -> f64 {
        self.space.flush(None);
        self.per_page(T_HOT_PAGES, T_HOT_PAGES);
        self.per_page(T_PAGES, T_HOT_PAGES)
    }
}
