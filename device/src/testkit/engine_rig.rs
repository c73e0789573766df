//! The paging engine on plain structs: guest RAM and the VRAM window in one memory table, DMA
//! buffers and frame lists written into RAM, results read back byte for byte. The engine is
//! driven only through [`Engine::execute`], as the scheduler drives it.

use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::build::map_aperture;
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_CMD_SUBMIT};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::IntoBytes;

use super::guest;
use super::layouts;
use super::packets::{packet_bytes, APERTURE_SEGMENT};
use super::scratch::ScratchFile;
use crate::engine::{Completion, DeviceMemory, Engine, EngineHooks};
use crate::layout::{SegmentLayout, DEFAULT_APERTURE_SIZE};
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::{BarMode, Vram};

pub const RAM_SIZE: u64 = 16 << 20;
pub const VRAM_SIZE: u64 = 4 << 20;
pub const VRAM_GPA: u64 = 0x1000_0000;
/// DMA buffers in RAM start here.
pub const DMA: u64 = 0x10_0000;
/// Frame lists: slot `n` at `LISTS + n * PAGE`.
pub const LISTS: u64 = 0x20_0000;
/// Data frames (the ones the tests fill and check) live in [DATA, DATA + DATA_SIZE).
pub const DATA: u64 = 0x40_0000;
pub const DATA_SIZE: u64 = 4 << 20;
pub const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
/// [`PAGE`] as a buffer length.
pub const PAGE_USIZE: usize = 4096;
const _: () = assert!(PAGE_USIZE as u64 == PAGE);
/// Pages of the default layout's aperture.
pub const APERTURE_PAGES: u64 = DEFAULT_APERTURE_SIZE / PAGE;

/// Frame number of data page `i`.
pub fn data_frame(i: u64) -> u64 {
    DATA / PAGE + i
}

/// Frame numbers of these data pages.
pub fn data_frames(pages: &[u64]) -> Vec<u64> {
    pages.iter().map(|&p| data_frame(p)).collect()
}

/// Data frames in a scrambled order: entry i is data page (i * 7919) % 1024.
pub fn scattered(count: usize) -> Vec<u64> {
    (0..count as u64)
        .map(|i| data_frame((i * 7919) % 1024))
        .collect()
}

/// A paging submission of `[start, end)` of the `size`-byte DMA buffer at `address` in segment
/// `segment` (0: guest RAM).
pub fn command(segment: u32, address: u64, size: u32, start: u32, end: u32) -> WddmGpuCmdSubmit {
    WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: address,
        dma_buffer_segment_id: segment,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: size,
        start_offset: start,
        end_offset: end,
        submission_fence_id: 7,
        ..Default::default()
    }
}

/// The status a submission stopped with, if it stopped early.
pub fn status(completion: &Completion) -> Option<SubmitStatus> {
    completion.stop.map(|(_, stop)| stop.status())
}

/// An engine with its memory.
pub struct Rig {
    pub mem: GuestMemoryMmap<()>,
    pub vram: Vram,
    pub layout: SegmentLayout,
    pub engine: Engine,
    _file: ScratchFile,
}

impl Rig {
    /// The default layout over `VRAM_SIZE` bytes.
    pub fn new(name: &str) -> Self {
        Self::build(name, VRAM_SIZE, SegmentLayout::default_for_vram(VRAM_SIZE))
    }

    /// A layout file's layout (device-only segments get their own memory).
    pub fn with_layout(name: &str, layout_file: &str) -> Self {
        Self::build(name, VRAM_SIZE, layouts::from_file(layout_file, VRAM_SIZE))
    }

    /// `vram_size` bytes of BAR VRAM with `layout`.
    pub fn build(name: &str, vram_size: u64, layout: SegmentLayout) -> Self {
        let file = ScratchFile::new(&format!("engine-{name}"));
        let local = layout.device_only_vram(vram_size);
        let vram = Vram::create(file.path(), vram_size, local, BarMode::Ivshmem).unwrap();
        let mem = guest::ram_and_bar(RAM_SIZE, &vram, file.path(), vram_size, VRAM_GPA);
        Self {
            mem,
            vram,
            engine: Engine::new(&layout),
            layout,
            _file: file,
        }
    }

    /// Writes `packets` at `DMA` and submits all of them.
    pub fn submit(&mut self, packets: &[u8]) -> Completion {
        self.submit_with(packets, &mut ())
    }

    /// [`Rig::submit`] with these hooks.
    pub fn submit_with(&mut self, packets: &[u8], hooks: &mut impl EngineHooks) -> Completion {
        self.ram_write(DMA, packets);
        let size = u32::try_from(packets.len()).unwrap();
        self.execute(&command(0, DMA, size, 0, size), hooks)
    }

    /// Submits and asserts that every packet completed.
    #[track_caller]
    pub fn ok(&mut self, packets: &[u8]) -> Completion {
        let completion = self.submit(packets);
        assert_eq!(completion.stop, None, "{completion:?}");
        completion
    }

    /// Executes `cmd` against the rig's memory.
    pub fn execute(&mut self, cmd: &WddmGpuCmdSubmit, hooks: &mut impl EngineHooks) -> Completion {
        let memory = DeviceMemory {
            ram: GuestRam::new(&self.mem, self.vram.guest_window()),
            vram: &self.vram,
            layout: &self.layout,
        };
        self.engine.execute(cmd, &memory, hooks)
    }

    /// Writes a frame list into slot `slot` and returns its address.
    pub fn list(&self, slot: u64, frames: &[u64]) -> u64 {
        let address = LISTS + slot * PAGE;
        assert!(frames.len() <= 512, "a list slot holds 512 entries");
        self.ram_write(address, frames.as_bytes());
        address
    }

    /// Maps aperture pages `first_page..` to every one of `frames` (their list in slot 0) with
    /// one MAP_APERTURE, which must execute.
    #[track_caller]
    pub fn map_frames(&mut self, first_page: u64, frames: &[u64]) -> Completion {
        let list = self.list(0, frames);
        let count = u32::try_from(frames.len()).unwrap();
        self.ok(&packet_bytes(map_aperture(
            APERTURE_SEGMENT,
            0,
            first_page,
            u64::from(count),
            list,
            count,
            0,
        )))
    }

    pub fn ram_write(&self, address: u64, bytes: &[u8]) {
        guest::write(&self.mem, address, bytes);
    }

    pub fn ram_read(&self, address: u64, len: usize) -> Vec<u8> {
        guest::read(&self.mem, address, len)
    }

    pub fn vram_write(&self, offset: u64, bytes: &[u8]) {
        guest::vram_write(&self.vram, offset, bytes);
    }

    pub fn vram_read(&self, offset: u64, len: usize) -> Vec<u8> {
        guest::vram_read(&self.vram, offset, len)
    }

    /// The default aperture's table entries for these pages.
    pub fn entries(&self, pages: impl Iterator<Item = u64>) -> Vec<Option<u64>> {
        pages
            .map(|p| self.engine.gart().entry(APERTURE_SEGMENT, p))
            .collect()
    }
}
