//! The two virtqueues: taking the descriptor chains the guest made available, checking each,
//! and handing its request to the GPU with a [`ChainReply`]. A chain that breaks a rule is
//! completed with nothing written; a ring whose avail index is out of range is refused until
//! the guest sets it up again. Nothing here returns an error for what the guest wrote.

use std::io;
use std::sync::Arc;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::{QueueOwnedT, QueueT};
use vm_memory::{GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::request::{decode_control, decode_cursor, MAX_REQUEST_SIZE};

use crate::gpu::reply::Reply;
use crate::memory::guest_ram::GuestRam;
use crate::model::gpu::Gpu;
use crate::model::kick::Kick;
use crate::observe::stats::RequestOutcome;
use crate::transport::chain_reply::{read_chain, ChainReply, Gate, Room, Taken};
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
    /// The pass held as many request bytes as it may, or every chain available when it looked
    /// was taken and more were made available before notifications were on again
    /// (EVENT_IDX): the ring is to be drained again.
    More,
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
    /// The chains of one pass and the bytes of their requests: kept from kick to kick, so
    /// taking a request allocates neither.
    taken: Vec<Taken>,
    requests: Vec<u8>,
}

impl Queues {
    /// Queues answering through `gate`, holding control heads in `in_flight`.
    pub fn new(gate: Arc<Gate>, in_flight: Arc<InFlight>) -> Self {
        Self {
            gate,
            in_flight,
            broken_ring: [false; 2],
            taken: Vec::new(),
            requests: Vec::new(),
        }
    }

    /// Takes every chain available on the pass's ring, and with EVENT_IDX drains it again
    /// while the guest added chains before notifications were on again. Errs only when the
    /// ring's notification state cannot be changed.
    pub fn serve(&mut self, pass: &Pass<'_>, event_idx: bool) -> io::Result<()> {
        // A ring that hands out nothing is not asked again: its avail index stays ahead of the
        // device's, so notifications would report work forever and this loop would spin
        // holding the backend's lock, which GET_VRING_BASE needs.
        while self.drain(pass, event_idx)? == Drained::More {}
        Ok(())
    }

    /// Takes and reads every available chain under one hold of the ring's lock (through the
    /// kick's memory table, not a load of the ring's own for each call), then hands each to
    /// the GPU with the ring let go: an answer given meanwhile takes the lock again. With
    /// EVENT_IDX, notifications are off while the chains are taken and on again before the
    /// ring is let go: a chain made available after that kicks, and none of this waits behind
    /// the answers (an inline submission's interrupt is not followed by more ring work).
    fn drain(&mut self, pass: &Pass<'_>, event_idx: bool) -> io::Result<Drained> {
        let Pass {
            gpu,
            kick,
            vring,
            queue,
            mem,
        } = *pass;
        let mut taken = std::mem::take(&mut self.taken);
        let mut requests = std::mem::take(&mut self.requests);
        let drained = self.take(pass, event_idx, &mut taken, &mut requests)?;
        for Taken {
            head,
            request,
            room,
        } in taken.drain(..)
        {
            let room = match room {
                Ok(room) => room,
                Err(refusal) => {
                    crate::support::guest_log::guest_warn!("queue {queue}: descriptor chain {head} refused: {refusal}; completed with nothing written");
                    self.complete_unread(pass, head);
                    continue;
                }
            };
            let claim = match queue {
                CONTROL_QUEUE => match self.in_flight.claim(head) {
                    Some(claim) => Some(claim),
                    None => {
                        crate::support::guest_log::guest_warn!("queue {queue}: head {head} made available again before its answer; completed with nothing written");
                        gpu.stats().request(RequestOutcome::Refused);
                        self.complete_unread(pass, head);
                        continue;
                    }
                },
                _ => None,
            };
            let reply = Box::new(ChainReply::new(
                head,
                mem.clone(),
                vring.clone(),
                self.gate.clone(),
                claim,
                room,
            ));
            let request = &requests[request];
            match queue {
                // The one decode of the request: everything after works on its type.
                CONTROL_QUEUE => gpu.handle(kick, decode_control(request), reply, mem.clone()),
                // Cursor commands have no response.
                _ => {
                    gpu.handle_cursor(kick, decode_cursor(request));
                    reply.complete(&[]);
                }
            }
        }
        self.taken = taken;
        self.requests = requests;
        Ok(drained)
    }

    /// Takes and reads the available chains into `taken` and `requests` (emptied first) under
    /// one hold of the ring's lock; with EVENT_IDX, turns notifications back on before letting
    /// it go. `Refused` leaves both empty.
    fn take(
        &mut self,
        pass: &Pass<'_>,
        event_idx: bool,
        taken: &mut Vec<Taken>,
        requests: &mut Vec<u8>,
    ) -> io::Result<Drained> {
        let Pass {
            gpu,
            vring,
            queue,
            mem,
            ..
        } = *pass;
        let ram = GuestRam::new(&**mem, gpu.vram().guest_window());
        taken.clear();
        requests.clear();
        let mut ring = vring.get_mut();
        let ring = ring.get_queue_mut();
        if event_idx {
            ring.disable_notification(&**mem)
                .map_err(io::Error::other)?;
        }
        // A ring the guest corrupted (an avail index running past the queue size) is refused
        // here rather than returned as an error: an error from handle_event would end the vring
        // worker for good, and with it every later request, even after a ring reset. It is
        // reported once; the guest must set the ring up again (a device reset).
        let broken = &mut self.broken_ring[usize::from(queue != CONTROL_QUEUE)];
        let mut available = match ring.iter(&**mem) {
            Ok(available) => available,
            // The frontend stopped the ring (GET_VRING_BASE) while a kick was being handled.
            Err(virtio_queue::Error::QueueNotReady) => return Ok(Drained::Refused),
            Err(error) => {
                if !std::mem::replace(broken, true) {
                    crate::support::guest_log::guest_warn!("queue {queue}: available ring refused ({error}); the device ignores it until the guest sets the ring up again");
                }
                return Ok(Drained::Refused);
            }
        };
        *broken = false;
        // A pass holds at most about two of the largest requests' bytes: the chains past that
        // stay on the ring for the next pass (a guest filling a ring of 1024 with 256 KiB
        // requests must not make the device buffer 256 MiB).
        let mut full = false;
        while !full {
            let Some(chain) = available.next() else {
                break;
            };
            let head = chain.head_index();
            let start = requests.len();
            let room = read_chain(chain, &ram, requests);
            taken.push(Taken {
                head,
                request: start..requests.len(),
                room,
            });
            full = requests.len() >= MAX_REQUEST_SIZE;
        }
        let more =
            full || (event_idx && ring.enable_notification(&**mem).map_err(io::Error::other)?);
        Ok(if more { Drained::More } else { Drained::Done })
    }

    /// Completes a chain the device refuses to read, with nothing written (through the gate, so
    /// it keeps its place among the answers).
    fn complete_unread(&self, pass: &Pass<'_>, head: u16) {
        let reply = ChainReply::new(
            head,
            pass.mem.clone(),
            pass.vring.clone(),
            self.gate.clone(),
            None,
            Room::default(),
        );
        Box::new(reply).complete(&[]);
    }
}

/// One ring served during one kick: what every chain taken off it needs.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// The device the requests go to.
    pub gpu: &'a Gpu,
    /// The kick (its display hold).
    pub kick: &'a Kick<'a>,
    /// The ring.
    pub vring: &'a VringRwLock,
    /// Its index: [`CONTROL_QUEUE`] or [`CURSOR_QUEUE`].
    pub queue: u16,
    /// The guest memory of this kick.
    pub mem: &'a GuestMemoryLoadGuard<GuestMemoryMmap>,
}
