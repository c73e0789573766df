//! One descriptor chain's buffers: its request read and its room counted in one pass when it
//! is taken ([`read_chain`]), and its completion: the response written into its
//! device-writable buffers, the chain put on the used ring and the queue's interrupt raised,
//! through the [`AnswerGate`].
//!
//! The buffers are walked here rather than through virtio-queue's `Reader` and `Writer`: a
//! request is one or two small buffers, and building those (each walks the whole chain and
//! collects its slices) was a fifth of the device's work per submission. What a buffer may be
//! is [`GuestRam`]'s rule: guest RAM outside the VRAM window.

use std::ops::Range;
use std::sync::Arc;

use log::warn;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::request::MAX_REQUEST_SIZE;

use crate::gpu::reply::{Mem, Reply};
use crate::memory::guest_ram::{GuestRam, RamError};
use crate::transport::gate::{AnswerGate, Deliver};
use crate::transport::in_flight::Claim;

/// A descriptor chain as a pass reads it, over the memory table of the kick (borrowed: taking
/// a chain costs no reference count).
pub type Chain<'m> = virtio_queue::DescriptorChain<&'m GuestMemoryMmap>;

/// The gate every chain's answer passes through.
pub type Gate = AnswerGate<Delivery>;

/// A chain taken off a ring and read ([`read_chain`]): what is left of it once the ring is
/// let go.
#[derive(Debug)]
pub struct Taken {
    /// Its head index, which goes back on the used ring.
    pub head: u16,
    /// Its request: these bytes of the pass's request buffer.
    pub request: Range<usize>,
    /// Where its response goes, or why none may be written.
    pub room: Result<Room, ChainRefusal>,
}

/// Completes one descriptor chain. Completed from whichever thread finishes the request (the
/// engine thread for submissions), through the [`Gate`].
pub struct ChainReply {
    /// Kept apart from what passes it: completing moves it out rather than cloning it.
    gate: Arc<Gate>,
    delivery: Delivery,
}

/// What passes the gate for one chain: its response goes into its buffers, its head onto the
/// used ring.
pub struct Delivery {
    head: u16,
    /// The memory table the chain was taken over: its buffers and the used ring are written
    /// there.
    mem: Mem,
    vring: VringRwLock,
    room: Room,
    /// The head's claim (control queue), released when this reply is written or dropped.
    claim: Option<Claim>,
}

impl ChainReply {
    /// A reply for the chain at `head`, taken over `mem`, with `room` for the response
    /// ([`read_chain`] found it).
    pub fn new(
        head: u16,
        mem: Mem,
        vring: VringRwLock,
        gate: Arc<Gate>,
        claim: Option<Claim>,
        room: Room,
    ) -> Self {
        Self {
            gate,
            delivery: Delivery {
                head,
                mem,
                vring,
                room,
                claim,
            },
        }
    }
}

impl Reply for ChainReply {
    fn room(&self) -> usize {
        self.delivery.room.bytes
    }

    fn complete(self: Box<Self>, response: &[u8]) {
        let Self { gate, delivery } = *self;
        gate.pass(delivery, response);
    }
}

impl Deliver for Delivery {
    /// Writes the response and puts the chain on the used ring (the gate is open). The ring is
    /// reached through the chain's memory table, under one hold of its lock: the used entry,
    /// the notification decision and the interrupt (each of vhost-user-backend's calls would
    /// take the lock and load the ring's memory table again).
    fn deliver(mut self, response: &[u8]) {
        let head = self.head;
        let written = match write_response(&self.mem, &self.room, response) {
            Ok(written) => written,
            Err(error) => {
                crate::support::guest_log::guest_warn!("control response unwritable: {error}");
                0
            }
        };
        // Free before the guest can see the answer and post the head again.
        drop(self.claim.take());
        let mut ring = self.vring.get_mut();
        let queue = ring.get_queue_mut();
        if let Err(error) = queue.add_used(&*self.mem, head, written) {
            crate::support::guest_log::guest_warn!("head index {head} refused: {error}");
            return;
        }
        match queue.needs_notification(&*self.mem) {
            Ok(true) => {
                if let Err(error) = ring.signal_used_queue() {
                    warn!("cannot signal the used queue: {error}");
                }
            }
            Ok(false) => {}
            Err(error) => warn!("used ring: {error}"),
        }
    }
}

/// Why a chain's buffers were refused: the chain is completed with nothing written.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainRefusal {
    /// VRAM is not guest RAM: nothing is read from or written into the BAR window through a
    /// descriptor (a response there would overwrite VRAM).
    #[error("a buffer at {address:#x} lies in the VRAM BAR window")]
    InVramWindow { address: u64 },
    /// A driver-readable buffer is not guest RAM.
    #[error("the readable buffer of {len} bytes at {address:#x} is not guest RAM")]
    Unreadable { address: u64, len: u32 },
}

/// Why a response could not be written in full.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefusal {
    /// A device-writable buffer is not guest RAM.
    #[error("the writable buffer of {len} bytes at {address:#x} is not guest RAM")]
    Unwritable { address: u64, len: u32 },
    /// The writable buffers hold fewer bytes than the response.
    #[error("{left} bytes of the response found no room")]
    NoRoom { left: usize },
}

/// One device-writable buffer: where it is and its bytes.
type Buffer = (GuestAddress, u32);

/// Where a chain's response goes.
#[derive(Clone, Debug, Default)]
pub struct Room {
    /// Bytes of its device-writable buffers; 0 when one of them is not guest RAM (nothing could
    /// be written).
    pub bytes: usize,
    /// Its first writable buffer: a response that fits there is one write.
    first: Option<Buffer>,
    /// The writable buffers after the first (a driver that splits its response buffer; none
    /// allocated otherwise).
    rest: Vec<Buffer>,
}

/// One pass over `chain`'s buffers, as the virtio spec lays them out (driver-readable, then
/// device-writable): the readable bytes, up to [`MAX_REQUEST_SIZE`], appended to `requests`,
/// and the writable ones taken as the room for the response. Every buffer is held to `ram`'s
/// rule; one in the VRAM window refuses the chain (nothing is read from or written into VRAM
/// through a descriptor). A refused chain leaves `requests` as it found it.
pub fn read_chain(
    chain: Chain<'_>,
    ram: &GuestRam<'_, GuestMemoryMmap>,
    requests: &mut Vec<u8>,
) -> Result<Room, ChainRefusal> {
    let start = requests.len();
    let room = read_buffers(chain, ram, requests, start);
    if room.is_err() {
        requests.truncate(start);
    }
    room
}

fn read_buffers(
    chain: Chain<'_>,
    ram: &GuestRam<'_, GuestMemoryMmap>,
    requests: &mut Vec<u8>,
    start: usize,
) -> Result<Room, ChainRefusal> {
    let (mut room, mut writable) = (Room::default(), true);
    for descriptor in chain {
        let (address, len) = (descriptor.addr(), descriptor.len());
        let at = address.0;
        let refusal = |error| match error {
            RamError::InVram { .. } => ChainRefusal::InVramWindow { address: at },
            _ => ChainRefusal::Unreadable { address: at, len },
        };
        if descriptor.is_write_only() {
            match ram.check(at, u64::from(len)) {
                Ok(_) => {}
                Err(error @ RamError::InVram { .. }) => return Err(refusal(error)),
                Err(_) => writable = false,
            }
            room.bytes = room
                .bytes
                .saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            match room.first {
                None => room.first = Some((address, len)),
                Some(_) => room.rest.push((address, len)),
            }
            continue;
        }
        let bytes = usize::try_from(len).unwrap_or(usize::MAX);
        let end = requests.len();
        let take = bytes.min(MAX_REQUEST_SIZE - (end - start));
        // The read below proves the bytes it reads are RAM outside the window; the rest of a
        // buffer longer than the request's limit is checked on its own.
        if take < bytes {
            ram.check(at, u64::from(len)).map_err(refusal)?;
        }
        if take > 0 {
            requests.resize(end + take, 0);
            ram.read(at, &mut requests[end..]).map_err(refusal)?;
        }
    }
    Ok(if writable { room } else { Room::default() })
}

/// Writes `response` into the writable buffers of `room` in order; returns the bytes written.
fn write_response(
    mem: &GuestMemoryMmap,
    room: &Room,
    response: &[u8],
) -> Result<u32, WriteRefusal> {
    // A response is at most a page: it fits.
    let written = u32::try_from(response.len()).unwrap_or(u32::MAX);
    let mut left = response;
    for &(address, len) in room.first.iter().chain(&room.rest) {
        if left.is_empty() {
            break;
        }
        let (now, later) =
            left.split_at(left.len().min(usize::try_from(len).unwrap_or(usize::MAX)));
        mem.write_slice(now, address)
            .map_err(|_| WriteRefusal::Unwritable {
                address: address.0,
                len,
            })?;
        left = later;
    }
    if !left.is_empty() {
        return Err(WriteRefusal::NoRoom { left: left.len() });
    }
    Ok(written)
}
