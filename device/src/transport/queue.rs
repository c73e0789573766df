//! The two virtqueues: taking the descriptor chains the guest made available, checking each,
//! and handing its request to the GPU with a [`ChainReply`]. A chain that breaks a rule is
//! completed with nothing written; a ring whose avail index is out of range is refused until
//! the guest sets it up again. Nothing here returns an error for what the guest wrote.

use std::io;
use std::sync::Arc;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueOwnedT;
use vm_memory::{GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::request::{decode_control, decode_cursor};

use crate::gpu::reply::Reply;
use crate::memory::guest_ram::GuestRam;
use crate::model::gpu::Gpu;
use crate::model::kick::Kick;
use crate::observe::stats::RequestOutcome;
use crate::transport::chain_reply::{read_chain, Chain, ChainReply, Gate, Room};
use crate::transport::in_flight::InFlight;

/// Queue 0 carries control requests, queue 1 cursor updates.
pub const CONTROL_QUEUE: u16 = 0;
pub const CURSOR_QUEUE: u16 = 1;
pub const NUM_QUEUES: usize = 2;
pub const MAX_QUEUE_SIZE: usize = 1024;

/// What one pass over a ring did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drained {
    /// Every available chain was taken.
    Done,
    /// The ring handed out nothing: stopped, or its avail index is out of range.
    Refused,
}

/// Serves the control and cursor rings.
pub struct Queues {
    /// Every answer goes through it.
    gate: Arc<Gate>,
    /// Control-queue heads taken and not answered yet.
    in_flight: Arc<InFlight>,
    /// The control and cursor rings' avail index was found out of range (reported once).
    broken_ring: [bool; 2],
    /// The chains of one pass and the bytes of one request: kept from kick to kick, so taking
    /// a request allocates neither.
    chains: Vec<Chain>,
    request: Vec<u8>,
}

impl Queues {
    /// Queues answering through `gate`, holding control heads in `in_flight`.
    pub fn new(gate: Arc<Gate>, in_flight: Arc<InFlight>) -> Self {
        Self {
            gate,
            in_flight,
            broken_ring: [false; 2],
            chains: Vec::new(),
            request: Vec::new(),
        }
    }

    /// Takes every chain available on the pass's ring. With EVENT_IDX, notifications are off
    /// while it drains, and the ring is drained again if the guest added chains meanwhile. Errs
    /// only when the ring's notification state cannot be changed.
    pub fn serve(&mut self, pass: &Pass<'_>, event_idx: bool) -> io::Result<()> {
        loop {
            if event_idx {
                pass.vring
                    .disable_notification()
                    .map_err(io::Error::other)?;
            }
            // A ring that hands out nothing must not be asked again: its avail index stays ahead
            // of the device's, so re-enabling notifications would report work forever and this
            // loop would spin holding the backend's lock, which GET_VRING_BASE needs.
            if self.drain(pass) == Drained::Refused {
                break;
            }
            if !event_idx || !pass.vring.enable_notification().map_err(io::Error::other)? {
                break;
            }
        }
        Ok(())
    }

    fn drain(&mut self, pass: &Pass<'_>) -> Drained {
        let Pass {
            gpu,
            kick,
            vring,
            queue,
            mem,
        } = *pass;
        // A ring the guest corrupted (an avail index running past the queue size) is refused
        // here rather than returned as an error: an error from handle_event would end the vring
        // worker for good, and with it every later request, even after a ring reset. It is
        // reported once; the guest must set the ring up again (a device reset).
        let broken = &mut self.broken_ring[usize::from(queue != CONTROL_QUEUE)];
        let mut chains = match vring.get_mut().get_queue_mut().iter(mem.clone()) {
            Ok(available) => {
                let mut chains = std::mem::take(&mut self.chains);
                chains.extend(available);
                chains
            }
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
        let ram = GuestRam::new(&**mem, gpu.vram().guest_window());
        let mut request = std::mem::take(&mut self.request);
        for chain in chains.drain(..) {
            let room = match read_chain(&chain, &ram, &mut request) {
                Ok(room) => room,
                Err(refusal) => {
                    crate::guest_warn!("queue {queue}: descriptor chain {} refused: {refusal}; completed with nothing written", chain.head_index());
                    self.complete_unread(pass, chain);
                    continue;
                }
            };
            let claim = match queue {
                CONTROL_QUEUE => match self.in_flight.claim(chain.head_index()) {
                    Some(claim) => Some(claim),
                    None => {
                        crate::guest_warn!("queue {queue}: head {} made available again before its answer; completed with nothing written", chain.head_index());
                        gpu.stats().request(RequestOutcome::Refused);
                        self.complete_unread(pass, chain);
                        continue;
                    }
                },
                _ => None,
            };
            let reply = Box::new(ChainReply::new(
                chain,
                vring.clone(),
                self.gate.clone(),
                claim,
                room,
            ));
            match queue {
                // The one decode of the request: everything after works on its type.
                CONTROL_QUEUE => gpu.handle(kick, decode_control(&request), reply, mem.clone()),
                // Cursor commands have no response.
                _ => {
                    gpu.handle_cursor(kick, decode_cursor(&request));
                    reply.complete(&[]);
                }
            }
        }
        self.chains = chains;
        self.request = request;
        Drained::Done
    }

    /// Completes a chain the device refuses to read, with nothing written (through the gate, so
    /// it keeps its place among the answers).
    fn complete_unread(&self, pass: &Pass<'_>, chain: Chain) {
        let reply = ChainReply::new(
            chain,
            pass.vring.clone(),
            self.gate.clone(),
            None,
            Room::default(),
        );
        self.gate.pass(reply, &[]);
    }
}

/// One ring served during one kick: what every chain taken off it needs.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// The device the requests go to.
    pub gpu: &'a Gpu,
    /// The kick (its display hold).
    pub kick: &'a Kick,
    /// The ring.
    pub vring: &'a VringRwLock,
    /// Its index: [`CONTROL_QUEUE`] or [`CURSOR_QUEUE`].
    pub queue: u16,
    /// The guest memory of this kick.
    pub mem: &'a GuestMemoryLoadGuard<GuestMemoryMmap>,
}
