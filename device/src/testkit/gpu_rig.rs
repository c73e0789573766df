//! The device model through its request interface: requests handed over as the transport hands
//! them, replies collected on channels, guest memory that the test can change as QEMU does.

use std::cell::Cell;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_CMD_REGISTER_STATUS_PAGE,
    WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::request::decode_control;
use wddm_gpu_abi::status::{WddmGpuCmdRegisterStatusPage, WddmGpuRespEvent, WddmGpuStatusPage};
use wddm_gpu_abi::submit::{WddmGpuCmdSubmit, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::requests::submit_command;
use zerocopy::{FromBytes, IntoBytes};

use super::guest;
use super::scratch::ScratchFile;
use crate::display::DisplayConfig;
use crate::gpu::reply::Reply;
use crate::layout::SegmentLayout;
use crate::memory::vram::{BarMode, Vram};
use crate::model::gpu::Gpu;
use crate::observe::stats::Stats;

pub const RAM: u64 = 64 << 20;
pub const VRAM: u64 = 128 << 20;
pub const VRAM_GPA: u64 = 0xe000_0000;
/// DMA buffers: slot `n` at `DMA + n * 1 MiB`.
pub const DMA: u64 = 0x40_0000;
pub const STATUS: u64 = 0x20_0000;
pub const LISTS: u64 = 0x30_0000;
pub const DATA: u64 = 0x100_0000;
/// How long a test waits for an answer before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// A GPU with the default layout over the first `vram_size` bytes of the VRAM file `file`,
/// its counters, and no vblanks (nothing but the test touches the display).
pub fn gpu_without_vblanks(file: &ScratchFile, vram_size: u64) -> (Gpu, Arc<Stats>) {
    let vram = Vram::create(file.path(), vram_size, 0, BarMode::Ivshmem).unwrap();
    let layout = SegmentLayout::default_for_vram(vram_size);
    let stats = Arc::new(Stats::new(&layout));
    let display = DisplayConfig {
        vblank_hz: 0,
        ..DisplayConfig::default()
    };
    let gpu = Gpu::with_telemetry(layout, vram, stats.clone(), None, None, display).unwrap();
    (gpu, stats)
}

/// A reply that sends the response bytes down a channel.
struct ChannelReply {
    room: usize,
    tx: Sender<Vec<u8>>,
}

impl Reply for ChannelReply {
    fn room(&self) -> usize {
        self.room
    }
    fn complete(self: Box<Self>, response: &[u8]) {
        let _ = self.tx.send(response.to_vec());
    }
}

/// A GPU with the default layout over `VRAM` bytes, `RAM` bytes of guest RAM and the BAR at
/// `VRAM_GPA`.
pub struct GpuRig {
    pub gpu: Gpu,
    pub atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    file: ScratchFile,
    fence: u32,
    bar: Cell<u64>,
}

impl GpuRig {
    pub fn new(name: &str) -> Self {
        let file = ScratchFile::new(&format!("gpu-{name}"));
        let vram = Vram::create(file.path(), VRAM, 0, BarMode::Ivshmem).unwrap();
        let gpu = Gpu::new(SegmentLayout::default_for_vram(VRAM), vram).unwrap();
        let ram =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), usize::try_from(RAM).unwrap())])
                .unwrap();
        let rig = Self {
            gpu,
            atomic: GuestMemoryAtomic::new(ram),
            file,
            fence: 0,
            bar: Cell::new(0),
        };
        rig.map_bar(VRAM_GPA);
        rig
    }

    /// Announces the VRAM BAR at `address` (as QEMU does after DRIVER_OK), or removes it (0).
    pub fn map_bar(&self, address: u64) {
        let next = guest::bar_moved(
            &self.atomic.memory(),
            self.file.path(),
            VRAM,
            self.bar.get(),
            address,
        );
        self.bar.set(address);
        let _ = self.atomic.lock().map(|guard| guard.replace(next));
        self.gpu.memory_changed(&self.atomic.memory());
    }

    /// One request brought by a kick of its own, as the transport hands them over.
    pub fn request(&self, bytes: &[u8], room: usize) -> Receiver<Vec<u8>> {
        self.requests_in_one_kick(&[(bytes, room)]).remove(0)
    }

    /// Requests brought by one kick, in order, each `(bytes, room)`; the kick ends after them,
    /// as the transport ends it.
    pub fn requests_in_one_kick(&self, requests: &[(&[u8], usize)]) -> Vec<Receiver<Vec<u8>>> {
        let kick = self.gpu.kick();
        requests
            .iter()
            .map(|&(bytes, room)| {
                let (tx, rx) = channel();
                self.gpu.handle(
                    &kick,
                    decode_control(bytes),
                    Box::new(ChannelReply { room, tx }),
                    self.atomic.memory(),
                );
                rx
            })
            .collect()
    }

    /// A request that is only its header of type `type_`.
    pub fn command(&self, type_: u32) -> Receiver<Vec<u8>> {
        self.request(WddmGpuCtrlHdr::with_type(type_).as_bytes(), 64)
    }

    /// Posts a WAIT_EVENT; the receiver gets the event that completes it.
    pub fn post_event(&self) -> Receiver<Vec<u8>> {
        self.request(
            WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT).as_bytes(),
            256,
        )
    }

    /// Asks for the status page at `address`; the answer's type.
    pub fn register_status_page_at(&self, address: u64) -> u32 {
        let cmd = WddmGpuCmdRegisterStatusPage {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
            address,
        };
        let response = self.request(cmd.as_bytes(), 64).recv_timeout(WAIT).unwrap();
        WddmGpuCtrlHdr::read_from_prefix(&response).unwrap().0.type_
    }

    /// Registers the status page at `STATUS`.
    pub fn register_status_page(&self) {
        assert_eq!(
            self.register_status_page_at(STATUS),
            VIRTIO_GPU_RESP_OK_NODATA
        );
    }

    pub fn status_page(&self) -> WddmGpuStatusPage {
        let mut page = WddmGpuStatusPage::default();
        self.ram_read_into(STATUS, page.as_mut_bytes());
        page
    }

    pub fn ram_write(&self, address: u64, bytes: &[u8]) {
        self.atomic
            .memory()
            .write_slice(bytes, GuestAddress(address))
            .unwrap();
    }

    pub fn ram_read_into(&self, address: u64, out: &mut [u8]) {
        self.atomic
            .memory()
            .read_slice(out, GuestAddress(address))
            .unwrap();
    }

    /// Queues a submission of `packets` (written at `DMA + slot * 1 MiB`) with the next fence.
    pub fn submit(&mut self, packets: &[u8], slot: u64) -> (u32, Receiver<Vec<u8>>) {
        let address = DMA + slot * (1 << 20);
        self.ram_write(address, packets);
        self.fence += 1;
        let cmd = submit_cmd(address, packets.len(), self.fence);
        (self.fence, self.request(cmd.as_bytes(), 64))
    }

    pub fn vram(&self, offset: u64, len: usize) -> Vec<u8> {
        guest::vram_read(self.gpu.vram(), offset, len)
    }
}

/// A paging submission of the `size` bytes of packets at `address`.
pub fn submit_cmd(address: u64, size: usize, fence: u32) -> WddmGpuCmdSubmit {
    submit_command(address, u32::try_from(size).unwrap(), fence)
}

/// The submission answer `rx` receives.
pub fn submit_response(rx: &Receiver<Vec<u8>>) -> WddmGpuRespSubmit {
    WddmGpuRespSubmit::read_from_prefix(&rx.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0
}

/// The event `rx` receives.
pub fn event(rx: &Receiver<Vec<u8>>) -> WddmGpuRespEvent {
    WddmGpuRespEvent::read_from_prefix(&rx.recv_timeout(WAIT).unwrap())
        .unwrap()
        .0
}
