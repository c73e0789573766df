//! vhost-user transport glue: features, config space, memory table and the virtqueue loop.
//! Everything the guest asks for is answered by [`Gpu`]; a bad request never makes
//! `handle_event` fail (that would stop the vring worker), only a broken queue does.

use std::io::{self, Read, Write};

use log::{debug, warn};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::GpuBackend;
use vhost_user_backend::{VhostUserBackendMut, VringRwLock, VringT};
use virtio_bindings::bindings::virtio_config::{VIRTIO_F_NOTIFY_ON_EMPTY, VIRTIO_F_VERSION_1};
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::QueueOwnedT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use zerocopy::IntoBytes;

use crate::control::MAX_REQUEST_SIZE;
use crate::gpu::{Gpu, Reply};

/// Queue 0 carries control requests, queue 1 cursor updates.
const CONTROL_QUEUE: u16 = 0;
const CURSOR_QUEUE: u16 = 1;
const NUM_QUEUES: usize = 2;
const MAX_QUEUE_SIZE: usize = 1024;

/// `VIRTIO_F_ANY_LAYOUT`.
const VIRTIO_F_ANY_LAYOUT: u32 = 27;
/// `VIRTIO_F_RING_RESET`.
const VIRTIO_F_RING_RESET: u32 = 40;
/// `VIRTIO_GPU_F_EDID`: QEMU's vhost-user-gpu frontend requires it of backends.
const VIRTIO_GPU_F_EDID: u32 = 1;
/// `VHOST_USER_F_PROTOCOL_FEATURES`.
const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;

/// Device features offered. QEMU builds the guest's set itself and sends back what the guest
/// acked, so every bit it may expose is here; VIRGL, RESOURCE_BLOB and CONTEXT_INIT never are.
pub const OFFERED_FEATURES: u64 = (1 << VIRTIO_F_VERSION_1)
    | (1 << VIRTIO_F_RING_RESET)
    | (1 << VIRTIO_F_NOTIFY_ON_EMPTY)
    | (1 << VIRTIO_F_ANY_LAYOUT)
    | (1 << VIRTIO_RING_F_INDIRECT_DESC)
    | (1 << VIRTIO_RING_F_EVENT_IDX)
    | (1 << VIRTIO_GPU_F_EDID)
    | (1 << VHOST_USER_F_PROTOCOL_FEATURES);

/// The vhost-user backend.
pub struct WddmGpuBackend {
    gpu: Gpu,
    mem: Option<GuestMemoryAtomic<GuestMemoryMmap>>,
    event_idx: bool,
    /// The display socket QEMU hands over at DRIVER_OK. This device has no scanout, but closing
    /// the socket makes QEMU log read errors, so it is kept open.
    display: Option<GpuBackend>,
}

impl WddmGpuBackend {
    /// A backend serving this GPU.
    pub fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            mem: None,
            event_idx: false,
            display: None,
        }
    }

    /// Whether the frontend handed over its display socket.
    pub fn has_display_socket(&self) -> bool {
        self.display.is_some()
    }

    fn process_queue(&mut self, vring: &VringRwLock, queue: u16) -> io::Result<()> {
        let Some(atomic) = &self.mem else {
            warn!("queue {queue} kicked before any memory table");
            return Ok(());
        };
        let mem = atomic.memory();
        loop {
            if self.event_idx {
                vring.disable_notification().map_err(io::Error::other)?;
            }
            self.drain(vring, queue, &mem)?;
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
    ) -> io::Result<()> {
        // A ring the guest corrupted (an avail index running past the queue size) is refused
        // here rather than returned as an error: an error from handle_event would end the vring
        // worker for good, and with it every later request, even after a ring reset.
        let chains: Vec<_> = match vring.get_mut().get_queue_mut().iter(mem.clone()) {
            Ok(chains) => chains.collect(),
            Err(error) => {
                warn!("queue {queue}: available ring refused ({error}); waiting for a ring reset");
                return Ok(());
            }
        };
        for chain in chains {
            let reply = Box::new(ChainReply::new(chain.clone(), mem.clone(), vring.clone()));
            match queue {
                CONTROL_QUEUE => self.answer(chain, reply, mem),
                // Cursor commands have no response; there is no cursor to move.
                _ => reply.send(&[]),
            }
        }
        Ok(())
    }

    /// Reads one request from the chain and hands it to the GPU with its reply.
    fn answer(
        &mut self,
        chain: Chain,
        reply: Box<ChainReply>,
        mem: &GuestMemoryLoadGuard<GuestMemoryMmap>,
    ) {
        let mut reader = match chain.reader(mem) {
            Ok(reader) => reader,
            Err(error) => {
                warn!("control descriptor chain refused: {error}");
                return reply.send(&[]);
            }
        };
        let mut request = vec![0u8; reader.available_bytes().min(MAX_REQUEST_SIZE)];
        if let Err(error) = reader.read_exact(&mut request) {
            warn!("control request unreadable: {error}");
            return reply.send(&[]);
        }
        self.gpu.handle(&request, reply, mem.clone());
    }
}

type Chain = virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// Completes one descriptor chain: writes the response into its device-writable buffers,
/// puts it on the used ring and raises the queue's interrupt. Sent from whichever thread
/// finishes the request (the engine thread for submissions).
pub struct ChainReply {
    chain: Chain,
    mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
    vring: VringRwLock,
    room: usize,
}

impl ChainReply {
    fn new(chain: Chain, mem: GuestMemoryLoadGuard<GuestMemoryMmap>, vring: VringRwLock) -> Self {
        let room = chain
            .clone()
            .writer(&mem)
            .map(|w| w.available_bytes())
            .unwrap_or(0);
        Self {
            chain,
            mem,
            vring,
            room,
        }
    }
}

impl Reply for ChainReply {
    fn room(&self) -> usize {
        self.room
    }

    fn send(self: Box<Self>, response: &[u8]) {
        let head = self.chain.head_index();
        let written = if response.is_empty() {
            0
        } else {
            match self.chain.writer(&self.mem) {
                Ok(mut writer) => match writer.write_all(response) {
                    Ok(()) => u32::try_from(writer.bytes_written()).unwrap_or(0),
                    Err(error) => {
                        warn!("control response unwritable: {error}");
                        0
                    }
                },
                Err(error) => {
                    warn!("control descriptor chain refused: {error}");
                    0
                }
            }
        };
        if let Err(error) = self.vring.add_used(head, written) {
            warn!("head index {head} refused: {error}");
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

    fn acked_features(&mut self, features: u64) {
        debug!("features acked: {features:#x}");
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
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

    fn update_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        self.gpu.memory_changed(&mem.memory());
        self.mem = Some(mem);
        Ok(())
    }

    fn set_gpu_socket(&mut self, gpu_backend: GpuBackend) -> io::Result<()> {
        debug!("display socket received (kept open; render-only device)");
        self.display = Some(gpu_backend);
        Ok(())
    }

    /// Each vring worker gets an exit event: without one the daemon cannot stop its threads
    /// and would hang when dropped.
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK)
            .map_err(|error| warn!("cannot create a worker exit event: {error}"))
            .ok()
    }

    fn reset_device(&mut self) {
        debug!("device reset");
        self.gpu.device_reset();
        self.display = None;
    }

    /// GET_VRING_BASE: the frontend stops the ring (guest reset, or shutdown). Work on it stops
    /// within one engine chunk and nothing more is written to it.
    fn stop_vring(&mut self, queue_index: u32) -> io::Result<()> {
        if queue_index == u32::from(CONTROL_QUEUE) {
            self.gpu.device_reset();
        }
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
                self.process_queue(vring, device_event)
            }
            other => {
                warn!("event for unknown queue {other}");
                Ok(())
            }
        }
    }
}
