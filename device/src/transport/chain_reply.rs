//! Completing one descriptor chain: the response written into its device-writable buffers, the
//! chain put on the used ring and the queue's interrupt raised, through the [`AnswerGate`].

use std::io::Write;
use std::sync::Arc;

use log::warn;
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{GuestMemoryLoadGuard, GuestMemoryMmap};

use crate::gpu::reply::Reply;
use crate::transport::gate::{AnswerGate, Deliver};
use crate::transport::in_flight::Claim;

/// A descriptor chain taken from a ring, over the memory table of that moment.
pub type Chain = virtio_queue::DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// The gate every chain's answer passes through.
pub type Gate = AnswerGate<ChainReply>;

/// Completes one descriptor chain. Completed from whichever thread finishes the request (the
/// engine thread for submissions), through the [`Gate`].
pub struct ChainReply {
    chain: Chain,
    mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
    vring: VringRwLock,
    gate: Arc<Gate>,
    room: usize,
    /// The head's claim (control queue), released when this reply is written or dropped.
    claim: Option<Claim>,
}

impl ChainReply {
    /// A reply for `chain`, with room for the chain's writable bytes.
    pub fn new(
        chain: Chain,
        mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
        vring: VringRwLock,
        gate: Arc<Gate>,
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
