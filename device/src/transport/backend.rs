//! vhost-user transport glue: features, config space, memory table and the virtqueue loop.
//! Everything the guest asks for is answered by [`Gpu`]; a bad request never makes
//! `handle_event` fail (that would stop the vring worker), only a broken queue does.
//!
//! A ring stop is not a reset. QEMU sends GET_VRING_BASE alone when it pauses the VM (`stop`,
//! snapshots, a gdbstub stop) and before a reset. The device pauses: the engine parks and every
//! answer is held back ([`RingGate`]), so nothing is written to the rings while they are stopped.
//! When the control ring runs again, the index QEMU restarted it at tells the two apart: the
//! index it was stopped at resumes the device where it stood (held answers go out in order); any
//! other index means the guest set the ring up anew, which is a reset. RESET_DEVICE resets too.

use std::io::{self, Read, Write};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use log::{debug, info, warn};
use vhost::vhost_user::message::{
    VhostUserMMap, VhostUserMMapFlags, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Backend, GpuBackend, VhostUserFrontendReqHandler};
use vhost_user_backend::{VhostUserBackendMut, VringRwLock, VringT};
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{
    GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryLoadGuard,
    GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use wddm_gpu_abi::features::WDDM_GPU_DEVICE_FEATURES;
use wddm_gpu_abi::request::{decode_control, decode_cursor, MAX_REQUEST_SIZE};
use zerocopy::IntoBytes;

use crate::memory::vram::BarMode;
use crate::model::gpu::Gpu;
use crate::model::reply::Reply;
use crate::observe::echo::{EchoPort, ECHO_EVENT};
use crate::observe::stats::RequestOutcome;
use crate::support::sync::lock;
use crate::transport::display::QemuDisplay;

/// Queue 0 carries control requests, queue 1 cursor updates.
const CONTROL_QUEUE: u16 = 0;
const CURSOR_QUEUE: u16 = 1;
const NUM_QUEUES: usize = 2;
const MAX_QUEUE_SIZE: usize = 1024;

/// What GET_FEATURES answers: the device's features (the ABI crate's offer) and vhost-user's
/// protocol-features bit.
pub const OFFERED_FEATURES: u64 =
    WDDM_GPU_DEVICE_FEATURES | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

/// Which VRAM BAR mode to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BarModeRequest {
    /// Shared memory if the frontend asks for it (GET_SHMEM_CONFIG), else ivshmem.
    Auto,
    /// Always the ivshmem companion function; GET_SHMEM_CONFIG is answered with no region.
    Ivshmem,
    /// Map the VRAM with SHMEM_MAP at every device start, asked for or not (a refusal falls
    /// back to ivshmem).
    Shmem,
}

/// The shared-memory region id of the VRAM.
const VRAM_SHMID: u8 = 0;

/// The vhost-user backend.
pub struct WddmGpuBackend {
    gpu: Gpu,
    echo: Arc<EchoPort>,
    bar_mode: BarModeRequest,
    /// The frontend asked for shared-memory regions.
    shmem_requested: AtomicBool,
    /// A SHMEM_MAP of the VRAM was sent (or is being sent) since the last reset.
    shmem_mapped: bool,
    backend_channel: Option<Backend>,
    mem: Option<GuestMemoryAtomic<GuestMemoryMmap>>,
    event_idx: bool,
    /// Holds answers while the frontend has the rings stopped.
    gate: Arc<RingGate>,
    /// Control-queue heads taken and not answered yet.
    in_flight: Arc<InFlight>,
    /// The control ring, once it has carried a request: its indices tell a resume from a reset.
    control_vring: Option<VringRwLock>,
    /// The avail index the control ring was stopped at, while the device is paused.
    stopped_at: Option<u16>,
    /// The control and cursor rings' avail index was found out of range (reported once).
    broken_ring: [bool; 2],
    /// A memory table was refused: the session is ending and guest memory is not touched.
    memory_refused: bool,
}

impl WddmGpuBackend {
    /// A backend serving this GPU.
    pub fn new(gpu: Gpu, bar_mode: BarModeRequest) -> Self {
        Self {
            gpu,
            echo: Arc::default(),
            bar_mode,
            shmem_requested: AtomicBool::new(false),
            shmem_mapped: false,
            backend_channel: None,
            mem: None,
            event_idx: false,
            gate: Arc::default(),
            in_flight: Arc::new(InFlight::new(MAX_QUEUE_SIZE)),
            control_vring: None,
            stopped_at: None,
            broken_ring: [false; 2],
            memory_refused: false,
        }
    }

    /// Maps the VRAM into the frontend's shared-memory region at a device start, when the
    /// frontend asked for regions (or `--bar-mode shmem`) and the backend channel is up; a
    /// refusal falls back to ivshmem.
    ///
    /// Only a started device can take the map: QEMU 11.1 handles SHMEM_MAP through the device
    /// it binds at start and unbinds at stop (a map sent before segfaults it). QEMU keeps the
    /// mapping across a stop and `cont` (a second map would overlap it) and drops it when the
    /// device is reset, so the map is sent at the first start after each reset.
    ///
    /// The map is sent from its own thread: the frontend is waiting for the reply to the request
    /// being handled now and would not read a backend request (with need-reply) meanwhile.
    fn map_shmem(&mut self) {
        let wanted = match self.bar_mode {
            BarModeRequest::Ivshmem => false,
            BarModeRequest::Auto => self.shmem_requested.load(Ordering::Acquire),
            BarModeRequest::Shmem => true,
        };
        let Some(channel) = self.backend_channel.clone() else {
            return;
        };
        if !wanted || self.shmem_mapped {
            return;
        }
        self.shmem_mapped = true;
        let vram = self.gpu.shared_vram();
        let spawned = std::thread::Builder::new().name("wddm-gpu-shmem-map".into()).spawn(move || {
            let Some(file) = vram.file() else {
                return;
            };
            let request = VhostUserMMap {
                shmid: VRAM_SHMID,
                fd_offset: 0,
                shm_offset: 0,
                len: vram.size(),
                flags: VhostUserMMapFlags::WRITABLE.bits(),
                ..Default::default()
            };
            match channel.shmem_map(&request, file) {
                Ok(0) => {
                    info!("VRAM mapped into shared-memory region {VRAM_SHMID} of the GPU function (SHMEM_MAP)");
                    vram.set_mode(BarMode::Shmem);
                }
                Ok(code) => {
                    warn!("SHMEM_MAP refused by the frontend ({code}): falling back to the ivshmem VRAM BAR");
                    vram.set_mode(BarMode::Ivshmem);
                }
                Err(error) => {
                    warn!("SHMEM_MAP failed ({error}): falling back to the ivshmem VRAM BAR");
                    vram.set_mode(BarMode::Ivshmem);
                }
            }
        });
        if let Err(error) = spawned {
            warn!("cannot start the SHMEM_MAP thread: {error}");
        }
    }

    /// The echo the vring worker answers (see [`crate::observe::echo`]).
    pub fn echo_port(&self) -> Arc<EchoPort> {
        self.echo.clone()
    }

    /// The first event after a pause: the rings run again. The control ring's restart index
    /// says whether the device resumes or was reset. QEMU hands over every kick eventfd already
    /// signalled when it starts the rings, so this runs right after a `cont` even when the
    /// guest, waiting for held answers, has nothing to kick about.
    fn restarted(&mut self) {
        let (Some(stopped), Some(control)) = (self.stopped_at, &self.control_vring) else {
            return;
        };
        if !control.get_ref().get_queue().ready() {
            // Another ring was restarted first; the control ring decides.
            return;
        }
        self.stopped_at = None;
        let avail = control.queue_next_avail();
        if avail == stopped {
            let mem = self.mem.as_ref().map(GuestMemoryAtomic::memory);
            self.gpu.resume(mem.as_deref());
            let held = self.gate.open();
            info!("device resumed: control queue restarted at avail index {avail}; {held} held answer(s) delivered");
        } else {
            info!("device reset: control queue restarted at avail index {avail}, stopped at {stopped} (the guest set the ring up anew)");
            self.reset_state();
            // QEMU dropped the shared-memory mapping with the reset; the device runs again.
            self.shmem_mapped = false;
            self.map_shmem();
        }
    }

    /// Everything a reset clears: queued and running work, posted events, held answers, the
    /// GART and the status page registration. VRAM keeps its contents.
    fn reset_state(&mut self) {
        self.gpu.device_reset();
        self.in_flight.forget_all();
        let dropped = self.gate.discard();
        if dropped > 0 {
            debug!("{dropped} held answer(s) dropped with the rings");
        }
        self.stopped_at = None;
    }

    fn process_queue(&mut self, vring: &VringRwLock, queue: u16) -> io::Result<()> {
        if self.memory_refused {
            debug!("queue {queue} kicked while the memory table is refused");
            return Ok(());
        }
        let Some(atomic) = &self.mem else {
            warn!("queue {queue} kicked before any memory table");
            return Ok(());
        };
        let mem = atomic.memory();
        self.gpu.new_kick();
        loop {
            if self.event_idx {
                vring.disable_notification().map_err(io::Error::other)?;
            }
            // A ring that hands out nothing must not be asked again: its avail index stays ahead
            // of the device's, so re-enabling notifications would report work forever and this
            // loop would spin holding the backend's lock, which GET_VRING_BASE needs.
            if self.drain(vring, queue, &mem) == Drained::Refused {
                break;
            }
            if !self.event_idx || !vring.enable_notification().map_err(io::Error::other)? {
                break;
            }
        }
        Ok(())
    }

    fn drain(
        &mut self,
        vring: &VringRwLock,
        queue: u16,
        mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    ) -> Drained {
        // A ring the guest corrupted (an avail index running past the queue size) is refused
        // here rather than returned as an error: an error from handle_event would end the vring
        // worker for good, and with it every later request, even after a ring reset. It is
        // reported once; the guest must set the ring up again (a device reset).
        let broken = &mut self.broken_ring[usize::from(queue != CONTROL_QUEUE)];
        let chains: Vec<_> = match vring.get_mut().get_queue_mut().iter(mem.clone()) {
            Ok(chains) => chains.collect(),
            // The frontend stopped the ring (GET_VRING_BASE) while a kick was being handled.
            Err(virtio_queue::Error::QueueNotReady) => return Drained::Refused,
            Err(error) => {
                if !std::mem::replace(broken, true) {
                    crate::guest_warn!("queue {queue}: available ring refused ({error}); the device ignores it until the guest sets the ring up again");
                }
                return Drained::Refused;
            }
        };
        *broken = false;
        let window = self.gpu.vram().guest_window();
        for chain in chains {
            if let Some(window) = &window {
                if touches_window(&chain, window) {
                    // VRAM is not guest RAM: nothing is read from or written into the BAR
                    // window through a descriptor (a response there would overwrite VRAM).
                    crate::guest_warn!("queue {queue}: descriptor chain {} has a buffer in the VRAM BAR window; completed with nothing written", chain.head_index());
                    let reply =
                        ChainReply::new(chain, mem.clone(), vring.clone(), self.gate.clone(), None);
                    self.gate.send(reply, &[]);
                    continue;
                }
            }
            let claim = match queue {
                CONTROL_QUEUE => match self.in_flight.claim(chain.head_index()) {
                    Some(claim) => Some(claim),
                    None => {
                        crate::guest_warn!("queue {queue}: head {} made available again before its answer; completed with nothing written", chain.head_index());
                        self.gpu.stats().request(RequestOutcome::Refused);
                        let reply = ChainReply::new(
                            chain,
                            mem.clone(),
                            vring.clone(),
                            self.gate.clone(),
                            None,
                        );
                        self.gate.send(reply, &[]);
                        continue;
                    }
                },
                _ => None,
            };
            let reply = Box::new(ChainReply::new(
                chain.clone(),
                mem.clone(),
                vring.clone(),
                self.gate.clone(),
                claim,
            ));
            match queue {
                CONTROL_QUEUE => self.answer(chain, reply, mem),
                // Cursor commands have no response.
                _ => {
                    if let Some(request) = read_request(&chain, mem) {
                        self.gpu.handle_cursor(decode_cursor(&request));
                    }
                    reply.send(&[]);
                }
            }
        }
        Drained::Done
    }

    /// Reads one request from the chain and hands it to the GPU with its reply.
    fn answer(
        &mut self,
        chain: Chain,
        reply: Box<ChainReply>,
        mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    ) {
        match read_request(&chain, mem) {
            // The one decode of the request: everything after works on its type.
            Some(request) => self
                .gpu
                .handle(decode_control(&request), reply, mem.clone()),
            None => reply.send(&[]),
        }
    }
}

/// The readable bytes of a chain, up to [`MAX_REQUEST_SIZE`]; `None` (logged) when unreadable.
fn read_request(chain: &Chain, mem: &GuestMemoryLoadGuard<GuestMemoryMmap>) -> Option<Vec<u8>> {
    let mut reader = match chain.clone().reader(mem) {
        Ok(reader) => reader,
        Err(error) => {
            crate::guest_warn!("descriptor chain refused: {error}");
            return None;
        }
    };
    let mut request = vec![0u8; reader.available_bytes().min(MAX_REQUEST_SIZE)];
    if let Err(error) = reader.read_exact(&mut request) {
        crate::guest_warn!("request unreadable: {error}");
        return None;
    }
    Some(request)
}

impl Drop for WddmGpuBackend {
    /// Held answers hold the gate that holds them: drop them with the backend, or the cycle
    /// keeps them, their memory snapshots and their rings alive.
    fn drop(&mut self) {
        self.gate.discard();
    }
}

type Chain = virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// The control-queue heads the device holds: taken from the ring and not answered yet. A head
/// the guest makes available again while the device holds it is completed at once with nothing
/// written, so a guest re-posting heads cannot queue more than the ring's size of requests.
struct InFlight {
    /// Bumped when the rings are set up anew: claims of the old ring no longer release.
    epoch: AtomicU32,
    /// Per head: the epoch that claimed it, 0 when free.
    heads: Vec<AtomicU32>,
}

/// One held head, released when its reply is written or dropped.
struct Claim {
    in_flight: Arc<InFlight>,
    head: u16,
    epoch: u32,
}

impl InFlight {
    fn new(queue_size: usize) -> Self {
        Self {
            epoch: AtomicU32::new(1),
            heads: (0..queue_size).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Claims `head`; `None` when the device holds it already (or it is out of range, which the
    /// queue refuses before this).
    fn claim(self: &Arc<Self>, head: u16) -> Option<Claim> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let slot = self.heads.get(usize::from(head))?;
        slot.compare_exchange(0, epoch, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Claim {
            in_flight: self.clone(),
            head,
            epoch,
        })
    }

    /// The rings were set up anew: every head is free, and claims of the old ring stay unused.
    fn forget_all(&self) {
        let epoch = self.epoch.load(Ordering::Acquire).wrapping_add(1).max(1);
        self.epoch.store(epoch, Ordering::Release);
        for slot in &self.heads {
            slot.store(0, Ordering::Release);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(slot) = self.in_flight.heads.get(usize::from(self.head)) {
            let _ = slot.compare_exchange(self.epoch, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Every file-backed region must lie inside its file: the frontend may map a range past the
/// end (mmap allows it), and touching that range raises SIGBUS.
fn check_regions(mem: &GuestMemoryMmap) -> io::Result<()> {
    for region in mem.iter() {
        let Some(file_offset) = region.file_offset() else {
            continue;
        };
        let file_size = file_offset.file().metadata()?.len();
        let inside = file_offset
            .start()
            .checked_add(region.len())
            .is_some_and(|end| end <= file_size);
        if !inside {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "region at guest-physical {:#x} maps {:#x} bytes from file offset {:#x}, past the end of its {file_size:#x}-byte file",
                    region.start_addr().0,
                    region.len(),
                    file_offset.start()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether any buffer of `chain` overlaps `window` (guest-physical).
fn touches_window(chain: &Chain, window: &std::ops::Range<u64>) -> bool {
    chain.clone().any(|descriptor| {
        let start = descriptor.addr().0;
        let end = start.saturating_add(u64::from(descriptor.len()));
        start < window.end && window.start < end
    })
}

/// What one pass over a ring did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drained {
    /// Every available chain was taken.
    Done,
    /// The ring handed out nothing: stopped, or its avail index is out of range.
    Refused,
}

/// Holds the answers completed while the frontend has the rings stopped, and sends them, in
/// the order they were completed, when the rings run again. Every answer passes through it;
/// sending under its lock keeps that order when held answers are released.
#[derive(Default)]
pub struct RingGate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    held: Vec<(ChainReply, Vec<u8>)>,
}

impl RingGate {
    /// From now on answers are held.
    fn close(&self) {
        lock(&self.state).closed = true;
    }

    /// Sends the held answers, then lets answers through again; returns how many were held.
    fn open(&self) -> usize {
        let mut state = lock(&self.state);
        state.closed = false;
        let held = std::mem::take(&mut state.held);
        let count = held.len();
        for (reply, response) in held {
            reply.write(&response);
        }
        count
    }

    /// Drops the held answers with their rings and lets answers through again; returns how
    /// many were dropped.
    fn discard(&self) -> usize {
        let mut state = lock(&self.state);
        state.closed = false;
        std::mem::take(&mut state.held).len()
    }

    fn send(&self, reply: ChainReply, response: &[u8]) {
        let mut state = lock(&self.state);
        if state.closed {
            state.held.push((reply, response.to_vec()));
        } else {
            reply.write(response);
        }
    }
}

/// Completes one descriptor chain: writes the response into its device-writable buffers,
/// puts it on the used ring and raises the queue's interrupt. Sent from whichever thread
/// finishes the request (the engine thread for submissions), through the [`RingGate`].
pub struct ChainReply {
    chain: Chain,
    mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
    vring: VringRwLock,
    gate: Arc<RingGate>,
    room: usize,
    /// The head's claim (control queue), released when this reply is written or dropped.
    claim: Option<Claim>,
}

impl ChainReply {
    fn new(
        chain: Chain,
        mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
        vring: VringRwLock,
        gate: Arc<RingGate>,
        claim: Option<Claim>,
    ) -> Self {
        let room = chain
            .clone()
            .writer(&mem)
            .map(|w| w.available_bytes())
            .unwrap_or(0);
        Self {
            chain,
            mem,
            vring,
            gate,
            room,
            claim,
        }
    }
}

impl Reply for ChainReply {
    fn room(&self) -> usize {
        self.room
    }

    fn send(self: Box<Self>, response: &[u8]) {
        let gate = self.gate.clone();
        gate.send(*self, response);
    }
}

impl ChainReply {
    /// Writes the response and puts the chain on the used ring (the gate is open).
    fn write(mut self, response: &[u8]) {
        let head = self.chain.head_index();
        let written = if response.is_empty() {
            0
        } else {
            match self.chain.writer(&self.mem) {
                Ok(mut writer) => match writer.write_all(response) {
                    Ok(()) => u32::try_from(writer.bytes_written()).unwrap_or(0),
                    Err(error) => {
                        crate::guest_warn!("control response unwritable: {error}");
                        0
                    }
                },
                Err(error) => {
                    crate::guest_warn!("control descriptor chain refused: {error}");
                    0
                }
            }
        };
        // Free before the guest can see the answer and post the head again.
        drop(self.claim.take());
        if let Err(error) = self.vring.add_used(head, written) {
            crate::guest_warn!("head index {head} refused: {error}");
            return;
        }
        match self.vring.needs_notification() {
            Ok(true) => {
                if let Err(error) = self.vring.signal_used_queue() {
                    warn!("cannot signal the used queue: {error}");
                }
            }
            Ok(false) => {}
            Err(error) => warn!("used ring: {error}"),
        }
    }
}

impl VhostUserBackendMut for WddmGpuBackend {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        NUM_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        OFFERED_FEATURES
    }

    /// SET_FEATURES opens every device start (QEMU sends it at each DRIVER_OK and each `cont`).
    /// While paused, whether this start resumes or follows a reset is known only once the rings
    /// run (see [`Self::restarted`]), which is where a reset maps the VRAM again.
    fn acked_features(&mut self, features: u64) {
        debug!("features acked: {features:#x}");
        if self.stopped_at.is_none() {
            self.map_shmem();
        }
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // BACKEND_REQ/BACKEND_SEND_FD/SHMEM carry SHMEM_MAP for the shared-memory VRAM BAR;
        // frontends that do not know SHMEM (QEMU 10) simply do not ack it.
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::RESET_DEVICE
            | VhostUserProtocolFeatures::BACKEND_REQ
            | VhostUserProtocolFeatures::BACKEND_SEND_FD
            | VhostUserProtocolFeatures::SHMEM
    }

    fn set_event_idx(&mut self, enabled: bool) {
        self.event_idx = enabled;
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let config = self.gpu.config();
        let bytes = config.as_bytes();
        let start = (offset as usize).min(bytes.len());
        let end = start.saturating_add(size as usize).min(bytes.len());
        let mut out = bytes[start..end].to_vec();
        // Reads past the structure read as zero rather than failing the frontend.
        out.resize(size as usize, 0);
        out
    }

    /// A new memory table. One whose region maps past the end of its file is refused: the
    /// frontend gets a failure reply and the session ends with a message naming the region,
    /// where touching that range would have killed the process (SIGBUS) at the guest's whim.
    fn update_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        if let Err(error) = check_regions(&mem.memory()) {
            log::error!("memory table refused: {error}");
            // Nothing may touch guest memory any more: the rings already see this table.
            self.gate.close();
            self.memory_refused = true;
            return Err(error);
        }
        self.gpu.memory_changed(&mem.memory());
        self.mem = Some(mem);
        Ok(())
    }

    fn set_backend_req_fd(&mut self, backend: Backend) {
        self.backend_channel = Some(backend);
    }

    /// The VRAM as shared-memory region 0 (`GET_SHMEM_CONFIG`, QEMU 11.1's
    /// vhost-user-test-device-pci asks at realize); no region with `--bar-mode ivshmem`, which
    /// QEMU takes as a device without a shared-memory BAR. The locator says mode 2 from here on,
    /// `not_mapped` until the BAR is in the memory table.
    fn get_shmem_config(&self) -> io::Result<VhostUserShMemConfig> {
        if self.bar_mode == BarModeRequest::Ivshmem {
            info!("frontend asked for shared-memory regions: none (--bar-mode ivshmem)");
            return Ok(VhostUserShMemConfig::new(0, &[]));
        }
        let size = self.gpu.vram().size();
        info!(
            "frontend asked for shared-memory regions: VRAM is region {VRAM_SHMID} ({size:#x} bytes; \
             QEMU's vhost-user-test-device-pci shows it as BAR 4, mapped at the first device start after each reset)"
        );
        self.shmem_requested.store(true, Ordering::Release);
        self.gpu.vram().set_mode(BarMode::Shmem);
        Ok(VhostUserShMemConfig::new(1, &[size]))
    }

    /// QEMU's display socket, new at every device start: the display is shown through it from
    /// now on (scanouts set, and those a reset turned off, are announced to it).
    fn set_gpu_socket(&mut self, gpu_backend: GpuBackend) -> io::Result<()> {
        info!("display socket received from the frontend");
        let counters = self.gpu.stats().display();
        self.gpu
            .attach_display(Some(Box::new(QemuDisplay::start(gpu_backend, counters))));
        Ok(())
    }

    /// Each vring worker gets an exit event: without one the daemon cannot stop its threads
    /// and would hang when dropped.
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK)
            .map_err(|error| warn!("cannot create a worker exit event: {error}"))
            .ok()
    }

    /// RESET_DEVICE (QEMU's vhost-user-gpu-pci on a guest reset): everything but VRAM goes.
    /// A reset drops every shared-memory mapping; the next device start maps the VRAM again.
    fn reset_device(&mut self) {
        info!("device reset (RESET_DEVICE)");
        self.reset_state();
        self.gpu.attach_display(None);
        self.shmem_mapped = false;
    }

    /// GET_VRING_BASE: the frontend stops the ring (a VM stop, or the first step of a reset or
    /// shutdown). The device pauses: the engine parks at its next chunk boundary and answers
    /// are held, so nothing more is written to the rings; all state is kept until the rings run
    /// again (see [`Self::restarted`]) or the device is reset.
    fn stop_vring(&mut self, queue_index: u32) -> io::Result<()> {
        if queue_index != u32::from(CONTROL_QUEUE) || self.stopped_at.is_some() {
            return Ok(());
        }
        let avail = self
            .control_vring
            .as_ref()
            .map_or(0, |vring| vring.queue_next_avail());
        self.gate.close();
        let paused = self.gpu.pause();
        self.stopped_at = Some(avail);
        let engine = match paused.parked {
            Some(fence) => format!("engine parked mid-submission (fence {fence})"),
            None => "engine idle".to_owned(),
        };
        info!(
            "device paused: the frontend stopped the control queue at avail index {avail}; {engine}, {} submission(s) queued",
            paused.queued
        );
        Ok(())
    }

    fn handle_event(
        &mut self,
        device_event: u16,
        evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            warn!("unexpected event set {evset:?} for event {device_event}");
            return Ok(());
        }
        match device_event {
            CONTROL_QUEUE | CURSOR_QUEUE => {
                let Some(vring) = vrings.get(usize::from(device_event)) else {
                    return Ok(());
                };
                if self.control_vring.is_none() {
                    self.control_vring = vrings.get(usize::from(CONTROL_QUEUE)).cloned();
                }
                self.restarted();
                let processed = self.process_queue(vring, device_event);
                self.gpu.end_kick();
                processed
            }
            ECHO_EVENT => {
                self.echo.answer();
                Ok(())
            }
            other => {
                warn!("event for unknown queue {other}");
                Ok(())
            }
        }
    }
}
