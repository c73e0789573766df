//! Pause, resume and reset of the rings.
//!
//! A ring stop is not a reset. QEMU sends GET_VRING_BASE alone when it pauses the VM (`stop`,
//! snapshots, a gdbstub stop) and before a reset. The device pauses: the engine parks and every
//! answer is held back ([`Gate`]), so nothing is written to the rings while they are stopped.
//! When the control ring runs again, the index QEMU restarted it at tells the two apart: the
//! index it was stopped at resumes the device where it stood (held answers go out in order); any
//! other index means the guest set the ring up anew, which is a reset. RESET_DEVICE resets too.

use log::{debug, info};
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::model::gpu::Gpu;
use crate::transport::chain_reply::Gate;
use crate::transport::in_flight::InFlight;
use crate::transport::queue::CONTROL_QUEUE;

/// What the first event after a pause found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Not paused, or the control ring is not running yet: nothing to decide.
    Undecided,
    /// The control ring runs again where it stopped: the device goes on.
    Resumed,
    /// The control ring runs again elsewhere: the device was reset.
    Reset,
}

/// Whether the device is paused, and where its control ring stopped.
#[derive(Default)]
pub struct Lifecycle {
    /// The control ring, once it has carried a request: its indices tell a resume from a reset.
    control_vring: Option<VringRwLock>,
    /// The avail index the control ring was stopped at, while the device is paused.
    stopped_at: Option<u16>,
}

impl Lifecycle {
    /// Remembers the control ring from the first event on any ring.
    pub fn watch(&mut self, vrings: &[VringRwLock]) {
        if self.control_vring.is_none() {
            self.control_vring = vrings.get(usize::from(CONTROL_QUEUE)).cloned();
        }
    }

    /// The frontend has the rings stopped and has not restarted the control ring yet.
    pub fn paused(&self) -> bool {
        self.stopped_at.is_some()
    }

    /// GET_VRING_BASE of the control ring: answers are held from now on and the engine parks
    /// at its next chunk boundary; all state is kept until [`Self::restart`] or a reset. A
    /// second stop while paused changes nothing.
    pub fn pause(&mut self, gpu: &Gpu, gate: &Gate) {
        if self.stopped_at.is_some() {
            return;
        }
        let avail = self
            .control_vring
            .as_ref()
            .map_or(0, |vring| vring.queue_next_avail());
        gate.close();
        let paused = gpu.pause();
        self.stopped_at = Some(avail);
        let engine = match paused.parked {
            Some(fence) => format!("engine parked mid-submission (fence {fence})"),
            None => "engine idle".to_owned(),
        };
        info!(
            "device paused: the frontend stopped the control queue at avail index {avail}; {engine}, {} submission(s) queued",
            paused.queued
        );
    }

    /// The first event after a pause: the rings run again. The control ring's restart index
    /// says whether the device resumes or was reset. QEMU hands over every kick eventfd already
    /// signalled when it starts the rings, so this runs right after a `cont` even when the
    /// guest, waiting for held answers, has nothing to kick about.
    pub fn restart(
        &mut self,
        gpu: &Gpu,
        gate: &Gate,
        in_flight: &InFlight,
        mem: Option<&GuestMemoryAtomic<GuestMemoryMmap>>,
    ) -> Restart {
        let (Some(stopped), Some(control)) = (self.stopped_at, &self.control_vring) else {
            return Restart::Undecided;
        };
        if !control.get_ref().get_queue().ready() {
            // Another ring was restarted first; the control ring decides.
            return Restart::Undecided;
        }
        self.stopped_at = None;
        let avail = control.queue_next_avail();
        if avail == stopped {
            let mem = mem.map(GuestMemoryAtomic::memory);
            gpu.resume(mem.as_deref());
            let held = gate.open();
            info!("device resumed: control queue restarted at avail index {avail}; {held} held answer(s) delivered");
            Restart::Resumed
        } else {
            info!("device reset: control queue restarted at avail index {avail}, stopped at {stopped} (the guest set the ring up anew)");
            self.reset(gpu, gate, in_flight);
            Restart::Reset
        }
    }

    /// Everything a reset clears: queued and running work, posted events, held answers, the
    /// GART and the status page registration, and the pause. VRAM keeps its contents.
    pub fn reset(&mut self, gpu: &Gpu, gate: &Gate, in_flight: &InFlight) {
        gpu.device_reset();
        in_flight.forget_all();
        let dropped = gate.discard();
        if dropped > 0 {
            debug!("{dropped} held answer(s) dropped with the rings");
        }
        self.stopped_at = None;
    }
}
