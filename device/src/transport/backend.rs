//! vhost-user glue: the [`VhostUserBackendMut`] QEMU's frontend drives. It answers features
//! and config space itself and hands the rest on: the rings to [`Queues`], pause, resume and
//! reset to [`Lifecycle`], the shared-memory region to [`ShmemMapping`], the display socket to
//! [`QemuDisplay`]. Everything the guest asks for is answered by [`Gpu`]; a bad request never
//! makes `handle_event` fail (that would stop the vring worker), only a broken queue does.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use log::{debug, info, warn};
use vhost::vhost_user::message::{
    VhostUserProtocolFeatures, VhostUserShMemConfig, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Backend, GpuBackend};
use vhost_user_backend::{VhostUserBackendMut, VringRwLock};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use wddm_gpu_abi::features::WDDM_GPU_DEVICE_FEATURES;
use zerocopy::IntoBytes;

use crate::model::gpu::Gpu;
use crate::observe::echo::{EchoPort, ECHO_EVENT};
use crate::transport::chain_reply::Gate;
use crate::transport::display::QemuDisplay;
use crate::transport::in_flight::InFlight;
use crate::transport::lifecycle::{Lifecycle, Restart};
use crate::transport::memory_table::check_regions;
use crate::transport::queue::{
    Pass, Queues, CONTROL_QUEUE, CURSOR_QUEUE, MAX_QUEUE_SIZE, NUM_QUEUES,
};
/// The `--bar-mode` choice, exported with the backend it configures.
pub use crate::transport::shmem::BarModeRequest;
use crate::transport::shmem::ShmemMapping;

/// What GET_FEATURES answers: the device's features (the ABI crate's offer) and vhost-user's
/// protocol-features bit.
pub const OFFERED_FEATURES: u64 =
    WDDM_GPU_DEVICE_FEATURES | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

/// The vhost-user backend.
pub struct WddmGpuBackend {
    gpu: Gpu,
    echo: Arc<EchoPort>,
    /// The VRAM's shared-memory region: asked for, and mapped since the last reset.
    shmem: ShmemMapping,
    mem: Option<GuestMemoryAtomic<GuestMemoryMmap>>,
    event_idx: bool,
    /// Holds answers while the frontend has the rings stopped.
    gate: Arc<Gate>,
    /// Control-queue heads taken and not answered yet.
    in_flight: Arc<InFlight>,
    /// Takes the chains off the rings.
    queues: Queues,
    /// Paused or running, and where the control ring stopped.
    lifecycle: Lifecycle,
    /// A memory table was refused: the session is ending and guest memory is not touched.
    memory_refused: bool,
    /// Set at the connection's first valid request (GET_FEATURES): the client speaks
    /// vhost-user, so it is the frontend (see `daemon::session`).
    spoke: Arc<AtomicBool>,
}

impl WddmGpuBackend {
    /// A backend serving this GPU.
    pub fn new(gpu: Gpu, bar_mode: BarModeRequest) -> Self {
        let gate = Arc::<Gate>::default();
        let in_flight = Arc::new(InFlight::new(MAX_QUEUE_SIZE));
        Self {
            gpu,
            echo: Arc::default(),
            shmem: ShmemMapping::new(bar_mode),
            mem: None,
            event_idx: false,
            queues: Queues::new(gate.clone(), in_flight.clone()),
            gate,
            in_flight,
            lifecycle: Lifecycle::default(),
            memory_refused: false,
            spoke: Arc::default(),
        }
    }

    /// Set once a connection's first valid vhost-user request has been answered.
    pub fn spoke(&self) -> Arc<AtomicBool> {
        self.spoke.clone()
    }

    /// The echo the vring worker answers (see [`crate::observe::echo`]).
    pub fn echo_port(&self) -> Arc<EchoPort> {
        self.echo.clone()
    }

    /// The first event after a pause decides resume or reset; a reset maps the VRAM again,
    /// since QEMU dropped the shared-memory mapping with it and the device runs again.
    fn restarted(&mut self) {
        let restart =
            self.lifecycle
                .restart(&self.gpu, &self.gate, &self.in_flight, self.mem.as_ref());
        if restart == Restart::Reset {
            self.shmem.forget();
            self.shmem.map(&self.gpu);
        }
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
        // Dropped when this returns: the answers given on this thread are on the used ring by
        // then, and what the kick's display commands showed goes to the display after them.
        let kick = self.gpu.kick();
        let pass = Pass {
            gpu: &self.gpu,
            kick: &kick,
            vring,
            queue,
            mem: &mem,
        };
        self.queues.serve(&pass, self.event_idx)
    }
}

impl Drop for WddmGpuBackend {
    /// Held answers hold the gate that holds them: drop them with the backend, or the cycle
    /// keeps them, their memory snapshots and their rings alive.
    fn drop(&mut self) {
        self.gate.discard();
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
        self.spoke.store(true, Ordering::Release);
        OFFERED_FEATURES
    }

    /// SET_FEATURES opens every device start (QEMU sends it at each DRIVER_OK and each `cont`).
    /// While paused, whether this start resumes or follows a reset is known only once the rings
    /// run (see [`Lifecycle::restart`]), which is where a reset maps the VRAM again.
    fn acked_features(&mut self, features: u64) {
        debug!("features acked: {features:#x}");
        if !self.lifecycle.paused() {
            self.shmem.map(&self.gpu);
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
        self.shmem.set_channel(backend);
    }

    /// The VRAM as shared-memory region 0 (`GET_SHMEM_CONFIG`, QEMU 11.1's
    /// vhost-user-test-device-pci asks at realize); no region with `--bar-mode ivshmem`, which
    /// QEMU takes as a device without a shared-memory BAR. The locator says mode 2 from here on,
    /// `not_mapped` until the BAR is in the memory table.
    fn get_shmem_config(&self) -> io::Result<VhostUserShMemConfig> {
        Ok(self.shmem.config(self.gpu.vram()))
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
        self.lifecycle.reset(&self.gpu, &self.gate, &self.in_flight);
        self.gpu.attach_display(None);
        self.shmem.forget();
    }

    /// GET_VRING_BASE: the frontend stops the ring (a VM stop, or the first step of a reset or
    /// shutdown). The device pauses: the engine parks at its next chunk boundary and answers
    /// are held, so nothing more is written to the rings; all state is kept until the rings run
    /// again (see [`Lifecycle::restart`]) or the device is reset.
    fn stop_vring(&mut self, queue_index: u32) -> io::Result<()> {
        if queue_index == u32::from(CONTROL_QUEUE) {
            self.lifecycle.pause(&self.gpu, &self.gate);
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
                self.lifecycle.watch(vrings);
                self.restarted();
                self.process_queue(vring, device_event)
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
