//! One descriptor chain's buffers: its request read and its room counted in one pass when it
//! is taken ([`read_chain`]), and its completion: the response written into its
//! device-writable buffers, the chain put on the used ring and the queue's interrupt raised,
//! through the [`AnswerGate`].
//!
//! The buffers are walked here rather than through virtio-queue's `Reader` and `Writer`: a
//! request is one or two small buffers, and building those (each walks the whole chain and
//! collects its slices) was a fifth of the device's work per submission. What a buffer may be
//! is [`GuestRam`]'s rule: guest RAM outside the VRAM window.

use std::sync::Arc;

use log::warn;
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::request::MAX_REQUEST_SIZE;

use crate::gpu::reply::Reply;
use crate::memory::guest_ram::{GuestRam, RamError};
use crate::transport::gate::{AnswerGate, Deliver};
use crate::transport::in_flight::Claim;

/// A descriptor chain taken from a ring, over the memory table of that moment.
pub type Chain = virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// The gate every chain's answer passes through.
pub type Gate = AnswerGate<ChainReply>;

/// Completes one descriptor chain. Completed from whichever thread finishes the request (the
/// engine thread for submissions), through the [`Gate`].
pub struct ChainReply {
    /// The chain, with the memory table it was taken over (its buffers are written there).
    chain: Chain,
    vring: VringRwLock,
    gate: Arc<Gate>,
    room: Room,
    /// The head's claim (control queue), released when this reply is written or dropped.
    claim: Option<Claim>,
}

impl ChainReply {
    /// A reply for `chain`, with `room` for the response ([`read_chain`] found it).
    pub fn new(
        chain: Chain,
        vring: VringRwLock,
        gate: Arc<Gate>,
        claim: Option<Claim>,
        room: Room,
    ) -> Self {
        Self {
            chain,
            vring,
            gate,
            room,
            claim,
        }
    }
}

impl Reply for ChainReply {
    fn room(&self) -> usize {
        self.room.bytes
    }

    fn complete(self: Box<Self>, response: &[u8]) {
        let gate = self.gate.clone();
        gate.pass(*self, response);
    }
}

impl Deliver for ChainReply {
    /// Writes the response and puts the chain on the used ring (the gate is open).
    fn deliver(mut self, response: &[u8]) {
        let head = self.chain.head_index();
        let written = if response.is_empty() {
            0
        } else {
            match write_chain(&self.chain, self.room, response) {
                Ok(written) => written,
                Err(error) => {
                    crate::guest_warn!("control response unwritable: {error}");
                    0
                }
            }
        };
        // Free before the guest can see the answer and post the head again.
        drop(self.claim.take());
        // The used entry and the notification decision under one hold of the ring's lock.
        let notify = {
            let mut ring = self.vring.get_mut();
            if let Err(error) = ring.add_used(head, written) {
                crate::guest_warn!("head index {head} refused: {error}");
                return;
            }
            ring.needs_notification()
        };
        match notify {
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

/// Where a chain's response goes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Room {
    /// Bytes of its device-writable buffers; 0 when one of them is not guest RAM (nothing could
    /// be written).
    pub bytes: usize,
    /// Its first writable buffer: a response that fits there is written without walking the
    /// chain again.
    first: Option<(GuestAddress, u32)>,
}

/// One pass over `chain`'s buffers, as the virtio spec lays them out (driver-readable, then
/// device-writable): the readable bytes, up to [`MAX_REQUEST_SIZE`], read into `request`, and
/// the writable ones taken as the room for the response. Every buffer is held to `ram`'s rule;
/// one in the VRAM window refuses the chain (nothing is read from or written into VRAM through
/// a descriptor).
pub fn read_chain(
    chain: &Chain,
    ram: &GuestRam<'_, GuestMemoryMmap>,
    request: &mut Vec<u8>,
) -> Result<Room, ChainRefusal> {
    request.clear();
    let (mut room, mut writable) = (Room::default(), true);
    for descriptor in chain.clone() {
        let (address, len) = (descriptor.addr(), descriptor.len());
        let start = address.0;
        let refusal = |error| match error {
            RamError::InVram { .. } => ChainRefusal::InVramWindow { address: start },
            _ => ChainRefusal::Unreadable {
                address: start,
                len,
            },
        };
        if descriptor.is_write_only() {
            match ram.check(start, u64::from(len)) {
                Ok(_) => {}
                Err(RamError::InVram { .. }) => {
                    return Err(ChainRefusal::InVramWindow { address: start })
                }
                Err(_) => writable = false,
            }
            room.bytes = room
                .bytes
                .saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            room.first = room.first.or(Some((address, len)));
            continue;
        }
        let bytes = usize::try_from(len).unwrap_or(usize::MAX);
        let at = request.len();
        let take = bytes.min(MAX_REQUEST_SIZE - at);
        // The read below proves the bytes it reads are RAM outside the window; the rest of a
        // buffer longer than the request's limit is checked on its own.
        if take < bytes {
            ram.check(start, u64::from(len)).map_err(refusal)?;
        }
        if take > 0 {
            request.resize(at + take, 0);
            ram.read(start, &mut request[at..]).map_err(refusal)?;
        }
    }
    Ok(if writable { room } else { Room::default() })
}

/// Writes `response` into `chain`'s device-writable buffers in order (`room` as [`read_chain`]
/// found it); returns the bytes written.
fn write_chain(chain: &Chain, room: Room, response: &[u8]) -> Result<u32, WriteRefusal> {
    let mem = chain.memory();
    // A response is at most a page: it fits.
    let written = u32::try_from(response.len()).unwrap_or(u32::MAX);
    if let Some((address, len)) = room.first {
        if written <= len {
            mem.write_slice(response, address)
                .map_err(|_| WriteRefusal::Unwritable {
                    address: address.0,
                    len,
                })?;
            return Ok(written);
        }
    }
    let mut left = response;
    for descriptor in chain.clone().writable() {
        if left.is_empty() {
            break;
        }
        let (address, len) = (descriptor.addr(), descriptor.len());
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
