//! An in-process vhost-user frontend for the backend target: the real [`WddmGpuBackend`] (with
//! its [`Gpu`], engine thread and VRAM file) driven the way `vhost-user-backend`'s request
//! handler and vring worker drive it, by a sequence of operations read from the fuzz input:
//! memory tables (guest RAM in a memfd, the VRAM file as the BAR region, holes, aliases,
//! regions past the end of their file), ring set-up, stop and restart, features, resets, config
//! reads, and a guest writing descriptor chains, requests and DMA buffers into its RAM and
//! kicking the queues.
//!
//! What the handler does for each message is mirrored here step by step (see
//! `vhost-user-backend` 0.24 `handler.rs`), including its refusals (a message the handler
//! refuses never reaches the backend). Where the handler hands the backend an error the
//! session ends, a refused memory table included: the operations stop there.
//!
//! The guest's side (rings, descriptors, requests) is written with the split-ring writer the
//! integration tests use (`wddm_gpu_frontend_kit`), over a [`RingMemory`] that drops what a
//! fuzzed guest writes outside its RAM. The message side is not the tests' socket frontend:
//! an in-process handler mirror keeps each input deterministic, never blocks on a backend
//! that refused a message, and reaches the backend without a daemon thread.

use std::fs::{File, OpenOptions};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::{Backend, GpuBackend};
use vhost_user_backend::{VhostUserBackendMut, VringRwLock, VringT};
use vhost_user_wddm_gpu::Gpu;
use vhost_user_wddm_gpu::SegmentLayout;
use vhost_user_wddm_gpu::{BarMode, Vram};
use vhost_user_wddm_gpu::{BarModeRequest, WddmGpuBackend, OFFERED_FEATURES};
use virtio_queue::QueueT;
use vm_memory::{
    FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend,
    GuestMemoryMmap, GuestRegionMmap, MmapRegion, VolatileMemory,
};
use vmm_sys_util::epoll::EventSet;
use wddm_gpu_abi::features::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use wddm_gpu_abi::submit::WddmGpuRespSubmit;
use wddm_gpu_frontend_kit::guest_memory::memfd;
use wddm_gpu_frontend_kit::requests::submit_command;
use wddm_gpu_frontend_kit::split_ring::{
    Descriptor, RingMemory, SplitRing, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE,
};
use zerocopy::IntoBytes;

use crate::engine_world::{fixed_layout, LAYOUT_MIXED, LAYOUT_WDDM2};
use crate::input::{Reader, Writer};

/// Guest RAM: a memfd of this size, normally at GPA 0.
pub const RAM_SIZE: u64 = 1 << 20;
/// The VRAM file (BAR) size.
pub const VRAM_SIZE: u64 = 1 << 20;
/// Where memory tables normally show the VRAM BAR.
pub const VRAM_GPA: u64 = 0xe000_0000;
/// Queue size the frontend sets up.
pub const QUEUE_SIZE: u16 = 64;
/// The backend's maximum queue size (`WddmGpuBackend::max_queue_size`).
pub const MAX_QUEUE_SIZE: u16 = 1024;
/// Default ring addresses: queue `q` at `RINGS + q * RING_STRIDE` (descriptor table, then the
/// available ring at +0x800, the used ring at +0x1000).
pub const RINGS: u64 = 0;
/// Distance between the two queues' rings.
pub const RING_STRIDE: u64 = 0x2000;
/// Request slots: slot `k` has its request at `SLOTS + k * SLOT_STRIDE` and its response
/// buffer 4 KiB after it.
pub const SLOTS: u64 = 0x1_0000;
/// Bytes per slot.
pub const SLOT_STRIDE: u64 = 0x2000;
/// Request slots (descriptors `2k` and `2k + 1`).
pub const SLOT_COUNT: u8 = 32;
/// DMA buffers of [`Op::Submit`].
pub const DMA: u64 = 0x9_0000;
/// Indirect descriptor tables, 256 bytes per slot.
pub const INDIRECT: u64 = 0xa_0000;
/// Free RAM for data frames, frame lists and status pages.
pub const DATA: u64 = 0xb_0000;
/// Operations per input.
pub const MAX_OPS: usize = 96;

const F_INDIRECT_DESC: u64 = 1 << VIRTIO_RING_F_INDIRECT_DESC;
const F_EVENT_IDX: u64 = 1 << VIRTIO_RING_F_EVENT_IDX;
const F_PROTOCOL_FEATURES: u64 = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
/// `VHOST_USER_CONFIG_SIZE`: offset + size of a GET_CONFIG stay within it.
const CONFIG_SPACE: u32 = 0x1000;

/// One frontend message or guest action, with its opcode byte (see [`Op::read`]).
#[derive(Clone, Debug)]
pub enum Op {
    /// What QEMU sends at a device start (DRIVER_OK, `cont`): SET_FEATURES, SET_MEM_TABLE
    /// (RAM at 0, the VRAM at [`VRAM_GPA`]), then per queue SET_VRING_NUM/BASE/ADDR/KICK/CALL and
    /// SET_VRING_ENABLE. Bits: 1 = EVENT_IDX, 2 = no INDIRECT_DESC, 4 = no
    /// PROTOCOL_FEATURES, 8 = no VRAM region, 16 = the guest set its rings up anew (zeroed,
    /// base 0; otherwise the base the rings were stopped at).
    Start(u8),
    /// What QEMU sends at a device stop: SET_VRING_ENABLE 0, GET_VRING_BASE for both queues.
    Stop,
    /// SET_MEM_TABLE built from a menu (see [`Frontend::mem_table`]) and two page numbers.
    MemTable(u8, u32, u32),
    /// ADD_MEM_REGION of one region of the menu at this page number.
    AddRegion(u8, u32),
    /// REM_MEM_REGION at this page number with the size of a region of the menu.
    RemoveRegion(u8, u32),
    /// The guest writes bytes into its RAM.
    WriteRam(u32, Vec<u8>),
    /// The guest posts a request: queue, slot, chain shape, response room, request bytes.
    Post(u8, u8, u8, u16, Vec<u8>),
    /// The guest writes a DMA buffer and posts a SUBMIT for it: queue, slot, fence, packets.
    Submit(u8, u8, u32, Vec<u8>),
    /// A kick: the event (modulo 3: control queue, cursor queue, the benchmark echo) and flags
    /// (1 = delivered whatever the ring state, as a worker racing a stop does; 2 = an event set
    /// other than IN).
    Kick(u8, u8),
    /// SET_VRING_NUM.
    VringNum(u8, u16),
    /// SET_VRING_ADDR (guest-physical descriptor, available, used ring addresses).
    VringAddr(u8, u64, u64, u64),
    /// SET_VRING_BASE.
    VringBase(u8, u16),
    /// GET_VRING_BASE (stops the ring).
    GetVringBase(u8),
    /// SET_VRING_KICK with a new eventfd (false) or none (true).
    VringKick(u8, bool),
    /// SET_VRING_CALL with a new eventfd (false) or none (true).
    VringCall(u8, bool),
    /// SET_VRING_ENABLE.
    VringEnable(u8, bool),
    /// SET_FEATURES.
    Features(u64),
    /// RESET_DEVICE.
    Reset,
    /// GET_CONFIG (offset, size).
    Config(u16, u16),
    /// GET_SHMEM_CONFIG.
    ShmemConfig,
    /// SET_BACKEND_REQ_FD with a socket whose far end nobody reads.
    BackendReq,
    /// SET_PROTOCOL_FEATURES.
    ProtocolFeatures(u64),
    /// The guest writes a queue's available index.
    AvailIdx(u8, u16),
    /// The guest writes a queue's `used_event` (EVENT_IDX).
    UsedEvent(u8, u16),
    /// Time passes (the engine thread runs): 20 µs times 1 to 8 (`n % 8 + 1`).
    Settle(u8),
    /// VHOST_USER_GPU_SET_SOCKET.
    GpuSocket,
}

impl Op {
    /// Decodes one operation.
    pub fn read(input: &mut Reader<'_>) -> Op {
        match input.u8() % 25 {
            0 => Op::Start(input.u8()),
            1 => Op::Stop,
            2 => Op::MemTable(input.u8(), input.u32(), input.u32()),
            3 => Op::AddRegion(input.u8(), input.u32()),
            4 => Op::RemoveRegion(input.u8(), input.u32()),
            5 => Op::WriteRam(input.u32(), input.blob().to_vec()),
            6 => Op::Post(
                input.u8(),
                input.u8(),
                input.u8(),
                input.u16(),
                input.blob().to_vec(),
            ),
            7 => Op::Submit(input.u8(), input.u8(), input.u32(), input.blob().to_vec()),
            8 => Op::Kick(input.u8(), input.u8()),
            9 => Op::VringNum(input.u8(), input.u16()),
            10 => Op::VringAddr(input.u8(), input.u64(), input.u64(), input.u64()),
            11 => Op::VringBase(input.u8(), input.u16()),
            12 => Op::GetVringBase(input.u8()),
            13 => Op::VringKick(input.u8(), input.u8() & 1 != 0),
            14 => Op::VringCall(input.u8(), input.u8() & 1 != 0),
            15 => Op::VringEnable(input.u8(), input.u8() & 1 != 0),
            16 => Op::Features(input.u64()),
            17 => Op::Reset,
            18 => Op::Config(input.u16(), input.u16()),
            19 => Op::ShmemConfig,
            20 => Op::BackendReq,
            21 => Op::ProtocolFeatures(input.u64()),
            22 => Op::AvailIdx(input.u8(), input.u16()),
            23 => Op::UsedEvent(input.u8(), input.u16()),
            _ => match input.u8() % 2 {
                0 => Op::Settle(input.u8()),
                _ => Op::GpuSocket,
            },
        }
    }

    /// Encodes the operation as [`Op::read`] decodes it (for seeds).
    pub fn write(&self, out: &mut Writer) {
        match self {
            Op::Start(bits) => out.u8(0).u8(*bits),
            Op::Stop => out.u8(1),
            Op::MemTable(variant, a, b) => out.u8(2).u8(*variant).u32(*a).u32(*b),
            Op::AddRegion(kind, page) => out.u8(3).u8(*kind).u32(*page),
            Op::RemoveRegion(kind, page) => out.u8(4).u8(*kind).u32(*page),
            Op::WriteRam(address, bytes) => out.u8(5).u32(*address).blob(bytes),
            Op::Post(queue, slot, shape, room, bytes) => out
                .u8(6)
                .u8(*queue)
                .u8(*slot)
                .u8(*shape)
                .u16(*room)
                .blob(bytes),
            Op::Submit(queue, slot, fence, packets) => {
                out.u8(7).u8(*queue).u8(*slot).u32(*fence).blob(packets)
            }
            Op::Kick(event, flags) => out.u8(8).u8(*event).u8(*flags),
            Op::VringNum(queue, num) => out.u8(9).u8(*queue).u16(*num),
            Op::VringAddr(queue, desc, avail, used) => {
                out.u8(10).u8(*queue).u64(*desc).u64(*avail).u64(*used)
            }
            Op::VringBase(queue, base) => out.u8(11).u8(*queue).u16(*base),
            Op::GetVringBase(queue) => out.u8(12).u8(*queue),
            Op::VringKick(queue, none) => out.u8(13).u8(*queue).u8(u8::from(*none)),
            Op::VringCall(queue, none) => out.u8(14).u8(*queue).u8(u8::from(*none)),
            Op::VringEnable(queue, on) => out.u8(15).u8(*queue).u8(u8::from(*on)),
            Op::Features(features) => out.u8(16).u64(*features),
            Op::Reset => out.u8(17),
            Op::Config(offset, size) => out.u8(18).u16(*offset).u16(*size),
            Op::ShmemConfig => out.u8(19),
            Op::BackendReq => out.u8(20),
            Op::ProtocolFeatures(features) => out.u8(21).u64(*features),
            Op::AvailIdx(queue, idx) => out.u8(22).u8(*queue).u16(*idx),
            Op::UsedEvent(queue, idx) => out.u8(23).u8(*queue).u16(*idx),
            Op::Settle(n) => out.u8(24).u8(0).u8(*n),
            Op::GpuSocket => out.u8(24).u8(1),
        };
    }
}

/// The first byte of an input: the backend's `--bar-mode` and layout (bit 4, not set here:
/// the input ends without RESET_DEVICE).
pub fn header(bar_mode: u8, layout: u8) -> u8 {
    (bar_mode % 3) | ((layout % 3) << 2)
}

/// What the frontend knows of one queue (the guest driver's view of its rings).
#[derive(Clone, Copy, Debug)]
struct Ring {
    layout: SplitRing,
    /// The driver's next available index.
    avail_idx: u16,
    /// Where GET_VRING_BASE said the device stopped.
    stopped_at: Option<u16>,
}

impl Ring {
    fn default_for(queue: usize) -> Self {
        let base = RINGS + queue as u64 * RING_STRIDE;
        Self {
            layout: SplitRing {
                desc: base,
                avail: base + 0x800,
                used: base + 0x1000,
                size: QUEUE_SIZE,
            },
            avail_idx: 0,
            stopped_at: None,
        }
    }
}

/// The backend and everything the frontend holds for it. Fields drop in order: the backend
/// (whose engine thread is joined) first.
pub struct Frontend {
    backend: WddmGpuBackend,
    vrings: Vec<VringRwLock>,
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    /// The frontend's own view of guest RAM (file offset = GPA below [`RAM_SIZE`]).
    ram_view: RamView,
    ram: File,
    vram_path: PathBuf,
    rings: [Ring; 2],
    acked_features: u64,
    protocol_features: u64,
    /// A memory table was set (SET_VRING_ADDR needs one).
    has_table: bool,
    /// The far ends of sockets handed to the backend.
    peers: Vec<UnixStream>,
    /// The handler returned an error the session does not survive.
    pub ended: bool,
    /// Send RESET_DEVICE before dropping the backend (as on a guest reset); otherwise the
    /// backend is dropped as it stands, held answers and all.
    pub reset_on_drop: bool,
}

/// The VRAM file of this process.
fn vram_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| crate::scratch::path("backend.vram"))
        .clone()
}

/// Guest RAM as the fuzzed guest writes it: anything may point anywhere, so bytes past the
/// end of RAM are dropped and reads there see zeros (a test's RAM panics instead).
struct RamView(MmapRegion<()>);

impl RingMemory for RamView {
    fn write(&self, gpa: u64, bytes: &[u8]) {
        let Some(room) = RAM_SIZE.checked_sub(gpa) else {
            return;
        };
        let len = usize::try_from(room).map_or(bytes.len(), |room| bytes.len().min(room));
        let Ok(gpa) = usize::try_from(gpa) else {
            return;
        };
        if let Ok(slice) = self.0.get_slice(gpa, len) {
            slice.copy_from(&bytes[..len]);
        }
    }

    fn read(&self, gpa: u64, bytes: &mut [u8]) {
        bytes.fill(0);
        let Ok(gpa) = usize::try_from(gpa) else {
            return;
        };
        if let Ok(slice) = self.0.get_slice(gpa, bytes.len()) {
            slice.copy_to(bytes);
        }
    }
}

fn eventfd() -> File {
    // SAFETY: eventfd has no memory arguments; the descriptor is owned by the File below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

impl Frontend {
    /// A backend as `main` makes it (layout 0: the default; 1: the mixed layout with
    /// device-only VRAM; 2: WDDM 2.0), then what QEMU asks at realize.
    pub fn new(bar_mode: u8, layout: u8) -> Self {
        let layout = match layout % 3 {
            0 => SegmentLayout::default_for_vram(VRAM_SIZE),
            1 => fixed_layout(LAYOUT_MIXED, VRAM_SIZE),
            _ => fixed_layout(LAYOUT_WDDM2, VRAM_SIZE),
        };
        let bar_mode = match bar_mode % 3 {
            0 => BarModeRequest::Auto,
            1 => BarModeRequest::Ivshmem,
            _ => BarModeRequest::Shmem,
        };
        let vram_path = vram_path();
        // A fresh file each time: nothing carries over from the previous input.
        let _ = std::fs::remove_file(&vram_path);
        let vram = Vram::create(
            &vram_path,
            VRAM_SIZE,
            layout.device_only_vram(VRAM_SIZE),
            BarMode::Ivshmem,
        )
        .expect("VRAM file in the scratch directory");
        let gpu = Gpu::new(layout, vram).expect("engine thread");
        let backend = WddmGpuBackend::new(gpu, bar_mode);
        let atomic = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let vrings = (0..backend.num_queues())
            .map(|_| {
                VringRwLock::new(
                    atomic.clone(),
                    u16::try_from(backend.max_queue_size()).unwrap(),
                )
                .expect("vring")
            })
            .collect();
        let ram = memfd(c"wddm-fuzz-ram", RAM_SIZE);
        let ram_view = RamView(
            MmapRegion::from_file(
                FileOffset::new(ram.try_clone().expect("memfd dup"), 0),
                usize::try_from(RAM_SIZE).unwrap(),
            )
            .expect("RAM view"),
        );
        let mut frontend = Self {
            backend,
            vrings,
            atomic,
            ram_view,
            ram,
            vram_path,
            rings: [Ring::default_for(0), Ring::default_for(1)],
            acked_features: 0,
            protocol_features: 0,
            has_table: false,
            peers: Vec::new(),
            ended: false,
            reset_on_drop: true,
        };
        // Realize: protocol features, the config space.
        let protocol = frontend.backend.protocol_features().bits();
        frontend.protocol_features = protocol & !VhostUserProtocolFeatures::REPLY_ACK.bits();
        let _ = frontend.backend.get_config(0, 0x28);
        frontend
    }

    /// Runs one operation (nothing once the session ended).
    pub fn run(&mut self, op: &Op) {
        if self.ended {
            return;
        }
        match op {
            Op::Start(bits) => self.start(*bits),
            Op::Stop => {
                for queue in 0..2 {
                    self.vring_enable(queue, false);
                    self.get_vring_base(queue);
                }
            }
            Op::MemTable(variant, a, b) => self.mem_table(*variant, *a, *b),
            Op::AddRegion(kind, page) => {
                let Some(region) = self.region(*kind, page_address(*page)) else {
                    return;
                };
                if let Ok(mem) = self.atomic.memory().insert_region(Arc::new(region)) {
                    self.set_memory(mem);
                }
            }
            Op::RemoveRegion(kind, page) => {
                let size = self.region_size(*kind);
                if let Ok((mem, _)) = self
                    .atomic
                    .memory()
                    .remove_region(GuestAddress(page_address(*page)), size)
                {
                    self.set_memory(mem);
                }
            }
            Op::WriteRam(address, bytes) => self.write(u64::from(*address) % RAM_SIZE, bytes),
            Op::Post(queue, slot, shape, room, bytes) => {
                self.post(*queue, *slot, *shape, *room, bytes)
            }
            Op::Submit(queue, slot, fence, packets) => {
                self.write(DMA, packets);
                let cmd = submit_command(DMA, u32::try_from(packets.len()).unwrap(), *fence);
                let room = u16::try_from(std::mem::size_of::<WddmGpuRespSubmit>()).unwrap();
                self.post(*queue, *slot, 0, room, cmd.as_bytes());
            }
            Op::Kick(event, flags) => self.kick(*event, *flags),
            Op::VringNum(queue, num) => {
                // The handler refuses sizes outside 1..=max.
                if *num == 0 || *num > MAX_QUEUE_SIZE {
                    return;
                }
                let queue = usize::from(*queue % 2);
                self.vrings[queue].set_queue_size(*num);
                self.rings[queue].layout.size = *num;
            }
            Op::VringAddr(queue, desc, avail, used) => {
                self.vring_addr(usize::from(*queue % 2), *desc, *avail, *used)
            }
            Op::VringBase(queue, base) => {
                self.vrings[usize::from(*queue % 2)].set_queue_next_avail(*base)
            }
            Op::GetVringBase(queue) => self.get_vring_base(usize::from(*queue % 2)),
            Op::VringKick(queue, none) => {
                let queue = usize::from(*queue % 2);
                self.vrings[queue].set_kick((!none).then(eventfd));
                self.init_if_needed(queue);
            }
            Op::VringCall(queue, none) => {
                let queue = usize::from(*queue % 2);
                self.vrings[queue].set_call((!none).then(eventfd));
                self.init_if_needed(queue);
            }
            Op::VringEnable(queue, on) => self.vring_enable(usize::from(*queue % 2), *on),
            Op::Features(features) => self.set_features(*features),
            Op::Reset => {
                for vring in &self.vrings {
                    vring.set_enabled(false);
                }
                self.acked_features = 0;
                self.backend.reset_device();
            }
            Op::Config(offset, size) => {
                let (offset, size) = (u32::from(*offset), u32::from(*size));
                // The vhost crate refuses empty reads and reads past the config space.
                if size == 0 || offset + size > CONFIG_SPACE {
                    return;
                }
                let config = self.backend.get_config(offset, size);
                assert_eq!(config.len(), size as usize);
            }
            Op::ShmemConfig => {
                let _ = self.backend.get_shmem_config();
            }
            Op::BackendReq => {
                let (ours, theirs) = UnixStream::pair().expect("socketpair");
                let backend = Backend::from_stream(ours);
                let acked = self.protocol_features;
                if acked & VhostUserProtocolFeatures::REPLY_ACK.bits() != 0 {
                    backend.set_reply_ack_flag(true);
                }
                if acked & VhostUserProtocolFeatures::SHMEM.bits() != 0 {
                    backend.set_shmem_flag(true);
                }
                self.backend.set_backend_req_fd(backend);
                self.peers.push(theirs);
            }
            Op::ProtocolFeatures(features) => self.protocol_features = *features,
            Op::AvailIdx(queue, idx) => {
                let ring = self.rings[usize::from(*queue % 2)].layout;
                ring.write_avail_idx(&self.ram_view, *idx);
            }
            Op::UsedEvent(queue, idx) => {
                let ring = self.rings[usize::from(*queue % 2)].layout;
                ring.write_used_event(&self.ram_view, *idx);
            }
            Op::Settle(n) => std::thread::sleep(Duration::from_micros(20 * u64::from(n % 8 + 1))),
            Op::GpuSocket => {
                let (ours, theirs) = UnixStream::pair().expect("socketpair");
                let _ = self.backend.set_gpu_socket(GpuBackend::from_stream(ours));
                self.peers.push(theirs);
            }
        }
    }

    /// For `WDDM_FUZZ_DEBUG`: the used entries of both queues and the first bytes (type,
    /// and a SUBMIT's status) of each response.
    pub fn describe_used(&self) -> String {
        let mut out = String::new();
        for (queue, ring) in self.rings.iter().enumerate() {
            let ring = ring.layout;
            let idx = ring.used_idx(&self.ram_view);
            out.push_str(&format!("q{queue} used idx {idx}:"));
            for i in 0..idx.min(ring.size).min(16) {
                let used = ring.used_entry(&self.ram_view, i);
                let (head, len) = (used.id, used.len);
                let response = SLOTS + u64::from(head / 2) * SLOT_STRIDE + 0x1000;
                let mut bytes = [0u8; 32];
                self.ram_view.read(response, &mut bytes);
                let type_ = u32::from_le_bytes(bytes[..4].try_into().unwrap());
                let status = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
                out.push_str(&format!(
                    " [head {head} len {len} type {type_:#x} w7 {status}]"
                ));
            }
            out.push('\n');
        }
        out
    }

    /// Writes guest RAM through the frontend's own mapping (GPA = file offset); bytes past
    /// the end of RAM are dropped.
    fn write(&self, address: u64, bytes: &[u8]) {
        self.ram_view.write(address, bytes);
    }

    /// The guest writes a request into slot `slot`, a descriptor chain of shape `shape` for it,
    /// and makes the chain available.
    fn post(&mut self, queue: u8, slot: u8, shape: u8, room: u16, request: &[u8]) {
        let queue = usize::from(queue % 2);
        let ring = self.rings[queue];
        let size = ring.layout.size.max(1);
        let slot = slot % SLOT_COUNT;
        let head = (u16::from(slot) * 2) % size;
        let second = (head + 1) % size;
        let third = (head + 2) % size;
        let request_at = SLOTS + u64::from(slot) * SLOT_STRIDE;
        let response_at = request_at + 0x1000;
        let request = &request[..request.len().min(0x1000)];
        self.write(request_at, request);
        let len = u32::try_from(request.len()).unwrap();
        let room = u32::from(room);
        let (read, write, next) = (0, VIRTQ_DESC_F_WRITE, VIRTQ_DESC_F_NEXT);
        let ram = &self.ram_view;
        let put = |index: u16, desc: Descriptor| desc.write(ram, ring.layout.desc, index);
        match shape % 10 {
            // Request, then response (what drivers post).
            0 => {
                put(head, Descriptor::new(request_at, len, next, second));
                put(second, Descriptor::new(response_at, room, write, 0));
            }
            // Request only (no room for an answer).
            1 => put(head, Descriptor::new(request_at, len, read, 0)),
            // Response only (nothing to read).
            2 => put(head, Descriptor::new(response_at, room, write, 0)),
            // The request split over two descriptors, then the response.
            3 => {
                let half = len / 2;
                put(head, Descriptor::new(request_at, half, next, second));
                let rest = request_at + u64::from(half);
                put(second, Descriptor::new(rest, len - half, next, third));
                put(third, Descriptor::new(response_at, room, write, 0));
            }
            // An indirect table holding request and response.
            4 => {
                let table = INDIRECT + u64::from(slot) * 0x100;
                Descriptor::new(request_at, len, next, 1).write(ram, table, 0);
                Descriptor::new(response_at, room, write, 0).write(ram, table, 1);
                put(head, Descriptor::new(table, 32, VIRTQ_DESC_F_INDIRECT, 0));
            }
            // A chain that loops on itself.
            5 => put(head, Descriptor::new(request_at, len, next, head)),
            // Response first, then the request (writable before readable).
            6 => {
                put(
                    head,
                    Descriptor::new(response_at, room, write | next, second),
                );
                put(second, Descriptor::new(request_at, len, read, 0));
            }
            // The response buffer in the VRAM BAR window.
            7 => {
                put(head, Descriptor::new(request_at, len, next, second));
                put(second, Descriptor::new(VRAM_GPA, room, write, 0));
            }
            // The request outside guest RAM.
            8 => {
                put(
                    head,
                    Descriptor::new(RAM_SIZE - 8, len.max(16), next, second),
                );
                put(second, Descriptor::new(response_at, room, write, 0));
            }
            // The response spilling past the end of RAM.
            _ => {
                put(head, Descriptor::new(request_at, len, next, second));
                put(
                    second,
                    Descriptor::new(RAM_SIZE - 16, room.max(64), write, 0),
                );
            }
        }
        self.rings[queue].avail_idx = ring.layout.make_available(ram, ring.avail_idx, head);
    }

    /// A kick, delivered as the vring worker delivers it: only to a started and enabled ring
    /// with a kick eventfd (unless `flags & 1`: a worker that took the event just before the
    /// ring stopped).
    fn kick(&mut self, event: u8, flags: u8) {
        // The events the worker hands the backend: the two queues and the echo (ECHO_EVENT).
        let event = [0u16, 1, 3][usize::from(event % 3)];
        if flags & 1 == 0 {
            let Some(vring) = self.vrings.get(usize::from(event)) else {
                return;
            };
            let state = vring.get_ref();
            if state.get_kick().is_none() || !state.is_enabled() || !state.get_queue().ready() {
                return;
            }
        }
        let evset = if flags & 2 != 0 {
            EventSet::OUT
        } else {
            EventSet::IN
        };
        // An error ends that vring worker in the daemon; the backend reports only broken
        // queues that way, and the next operations go on as the frontend would.
        let _ = self.backend.handle_event(event, evset, &self.vrings, 0);
    }

    fn init_if_needed(&self, queue: usize) {
        let vring = &self.vrings[queue];
        let needs = {
            let state = vring.get_ref();
            !state.get_queue().ready() && state.get_kick().is_some()
        };
        if needs {
            vring.set_queue_ready(true);
        }
    }

    fn vring_enable(&mut self, queue: usize, on: bool) {
        // Needs VHOST_USER_F_PROTOCOL_FEATURES acked.
        if self.acked_features & F_PROTOCOL_FEATURES == 0 {
            return;
        }
        self.vrings[queue].set_enabled(on);
    }

    fn get_vring_base(&mut self, queue: usize) {
        let vring = &self.vrings[queue];
        vring.set_queue_ready(false);
        if self
            .backend
            .stop_vring(u32::try_from(queue).unwrap())
            .is_err()
        {
            return;
        }
        let next_avail = vring.queue_next_avail();
        vring.set_kick(None);
        vring.set_call(None);
        self.rings[queue].stopped_at = Some(next_avail);
    }

    fn vring_addr(&mut self, queue: usize, desc: u64, avail: u64, used: u64) {
        // The handler translates frontend addresses through the memory table's mappings.
        let mem = self.atomic.memory();
        if !self.has_table
            || ![desc, avail, used]
                .iter()
                .all(|&address| mem.address_in_range(GuestAddress(address)))
        {
            return;
        }
        let vring = &self.vrings[queue];
        if vring.set_queue_info(desc, avail, used).is_err() {
            return;
        }
        let Ok(idx) = vring.queue_used_idx() else {
            return;
        };
        vring.set_queue_next_used(idx);
        let layout = &mut self.rings[queue].layout;
        (layout.desc, layout.avail, layout.used) = (desc, avail, used);
    }

    fn set_features(&mut self, features: u64) {
        if features & !self.backend.features() != 0 {
            return;
        }
        self.acked_features = features;
        if features & F_PROTOCOL_FEATURES == 0 {
            for vring in &self.vrings {
                vring.set_enabled(true);
            }
        }
        let event_idx = features & F_EVENT_IDX != 0;
        for vring in &self.vrings {
            vring.set_queue_event_idx(event_idx);
        }
        self.backend.set_event_idx(event_idx);
        self.backend.acked_features(features);
    }

    fn start(&mut self, bits: u8) {
        let mut features = OFFERED_FEATURES;
        if bits & 1 == 0 {
            features &= !F_EVENT_IDX;
        }
        if bits & 2 != 0 {
            features &= !F_INDIRECT_DESC;
        }
        if bits & 4 != 0 {
            features &= !F_PROTOCOL_FEATURES;
        }
        self.set_features(features);
        let vram = if bits & 8 == 0 { 4 } else { 0 };
        self.mem_table(vram, u32::try_from(VRAM_GPA >> 12).unwrap(), 0);
        if self.ended {
            return;
        }
        let fresh = bits & 16 != 0;
        for queue in 0..2 {
            let ring = Ring::default_for(queue);
            let base = if fresh {
                // The driver zeroes its rings and starts over.
                let zeros = vec![0u8; usize::try_from(RING_STRIDE).unwrap()];
                self.write(ring.layout.desc, &zeros);
                self.rings[queue] = ring;
                0
            } else {
                let kept = self.rings[queue];
                self.rings[queue] = Ring {
                    avail_idx: kept.avail_idx,
                    ..ring
                };
                kept.stopped_at.unwrap_or(kept.avail_idx)
            };
            self.vrings[queue].set_queue_size(QUEUE_SIZE);
            self.vrings[queue].set_queue_next_avail(base);
            let SplitRing {
                desc, avail, used, ..
            } = ring.layout;
            self.vring_addr(queue, desc, avail, used);
            self.vrings[queue].set_kick(Some(eventfd()));
            self.init_if_needed(queue);
            self.vrings[queue].set_call(Some(eventfd()));
            self.vring_enable(queue, true);
        }
    }

    fn region_size(&self, kind: u8) -> u64 {
        match kind % 6 {
            0 => RAM_SIZE,
            1 | 4 => RAM_SIZE / 2,
            2 => VRAM_SIZE,
            3 => VRAM_SIZE - 0x1000,
            _ => 0x1_0000,
        }
    }

    /// One region of the menu at `address`: 0 = all of RAM, 1 = the upper half of RAM,
    /// 2 = the whole VRAM file, 3 = the VRAM file from offset 0x1000, 4 = RAM past the end of
    /// the memfd (refused), 5 = 64 KiB of anonymous memory.
    fn region(&self, kind: u8, address: u64) -> Option<GuestRegionMmap> {
        let size = usize::try_from(self.region_size(kind)).ok()?;
        let file = |file: &File, offset: u64| {
            let file = file.try_clone().ok()?;
            MmapRegion::from_file(FileOffset::new(file, offset), size).ok()
        };
        let mapping = match kind % 6 {
            0 => file(&self.ram, 0)?,
            1 => file(&self.ram, RAM_SIZE / 2)?,
            2 | 3 => {
                let vram = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&self.vram_path)
                    .ok()?;
                file(&vram, if kind % 6 == 2 { 0 } else { 0x1000 })?
            }
            4 => file(&self.ram, RAM_SIZE - 0x1000)?,
            _ => MmapRegion::new(size).ok()?,
        };
        GuestRegionMmap::new(mapping, GuestAddress(address))
    }

    /// SET_MEM_TABLE: RAM (bits 0-1: 0 all at GPA 0; 1 the lower half at 0 and the upper half
    /// at page `b`; 2 all at 0 and an alias of its upper half at page `b`; 3 none), the VRAM
    /// (bit 2: the whole file at page `a`; bit 3: from offset 0x1000 at page `a`), bit 4: a
    /// region past the end of its file at page `b` + 1 MiB, bit 5: anonymous memory at `b`.
    pub fn mem_table(&mut self, variant: u8, a: u32, b: u32) {
        let (a, b) = (page_address(a), page_address(b));
        let mut regions = Vec::new();
        match variant & 3 {
            0 => regions.push(self.region(0, 0)),
            1 => {
                let low = self.ram.try_clone().ok().and_then(|file| {
                    MmapRegion::from_file(FileOffset::new(file, 0), (RAM_SIZE / 2) as usize).ok()
                });
                regions.push(low.and_then(|low| GuestRegionMmap::new(low, GuestAddress(0))));
                regions.push(self.region(1, b));
            }
            2 => {
                regions.push(self.region(0, 0));
                regions.push(self.region(1, b));
            }
            _ => {}
        }
        if variant & 4 != 0 {
            regions.push(self.region(2, a));
        } else if variant & 8 != 0 {
            regions.push(self.region(3, a));
        }
        if variant & 16 != 0 {
            regions.push(self.region(4, b.saturating_add(1 << 20)));
        }
        if variant & 32 != 0 {
            regions.push(self.region(5, b));
        }
        let Some(regions) = regions.into_iter().collect::<Option<Vec<_>>>() else {
            return;
        };
        // The handler refuses overlapping or empty tables before the backend sees them.
        let Ok(mem) = GuestMemoryMmap::from_regions(regions) else {
            return;
        };
        self.set_memory(mem);
    }

    /// What the handler does with a new table: the rings see it at once, then the backend.
    fn set_memory(&mut self, mem: GuestMemoryMmap) {
        self.atomic.lock().unwrap().replace(mem);
        self.has_table = true;
        if self.backend.update_memory(self.atomic.clone()).is_err() {
            // The frontend gets a failure and the session ends; nothing may touch this table.
            self.ended = true;
        }
    }
}

impl Drop for Frontend {
    /// RESET_DEVICE before the backend goes, when asked. Either way the backend must let go of
    /// everything the input made (answers it held while the rings were stopped once held the
    /// gate that held them, a cycle that kept every input's guest memory mapped): a leak shows
    /// up here as descriptors running out.
    fn drop(&mut self) {
        if self.reset_on_drop {
            self.backend.reset_device();
        }
    }
}

/// A page number as a guest-physical address.
fn page_address(page: u32) -> u64 {
    u64::from(page) << 12
}
