//! How the device model answers: a request's [`Reply`], and [`Notify`], what the driver is told
//! without asking (the status page and posted WAIT_EVENT requests). The GPU and its scheduler
//! both answer through these.

use std::collections::VecDeque;

use vm_memory::{GuestMemoryBackend, GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_UNSPEC, WDDM_GPU_RESP_EVENT};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_CANCELLED};
use zerocopy::{FromBytes, IntoBytes};

use crate::memory::guest_ram::GuestRam;
use crate::model::status_page::StatusPage;

/// A snapshot of guest memory, kept alive while a request that uses it is pending.
pub type Mem = GuestMemoryLoadGuard<GuestMemoryMmap>;

/// Where a response goes: the transport's descriptor chain, or a test's channel.
pub trait Reply: Send {
    /// Bytes the response buffer holds.
    fn room(&self) -> usize;
    /// Writes the response and completes the request (raising the queue's interrupt).
    fn send(self: Box<Self>, response: &[u8]);
}

/// Sends `response`, or a header-only `ERR_UNSPEC` cut to the room when it does not fit.
pub fn respond(reply: Box<dyn Reply>, response: &[u8]) {
    let room = reply.room();
    if response.len() <= room {
        reply.send(response);
        return;
    }
    crate::guest_warn!(
        "response of {} bytes does not fit the {room}-byte buffer",
        response.len()
    );
    let hdr = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_ERR_UNSPEC);
    reply.send(&hdr.as_bytes()[..room.min(hdr.as_bytes().len())]);
}

/// `VIRTIO_GPU_FLAG_FENCE`: the driver wants to know when the command's work is done.
pub const VIRTIO_GPU_FLAG_FENCE: u32 = 1 << 0;
/// `VIRTIO_GPU_FLAG_INFO_RING_IDX`: `ring_idx` names the context's fence ring.
pub const VIRTIO_GPU_FLAG_INFO_RING_IDX: u32 = 1 << 1;

/// The request header fields every response carries back (virtio 1.2 5.7.6.7): the fence flags,
/// `fence_id`, `ctx_id` and `ring_idx`. Linux's virtio_gpu matches a fenced request's answer by
/// them; without them its fence waits run into their timeout. A response is sent only once the
/// command's work is done, so echoing the fence in it is what signals the fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceEcho {
    flags: u32,
    fence_id: u64,
    ctx_id: u32,
    ring_idx: u8,
}

impl FenceEcho {
    /// The fields of the request's header; `None` when the request is shorter than a header.
    pub fn of(request: &[u8]) -> Option<Self> {
        let (hdr, _) = WddmGpuCtrlHdr::read_from_prefix(request).ok()?;
        Some(Self {
            flags: hdr.flags & (VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX),
            fence_id: hdr.fence_id,
            ctx_id: hdr.ctx_id,
            ring_idx: hdr.ring_idx,
        })
    }

    /// `reply`, answering with these fields in its response header.
    pub fn wrap(self, reply: Box<dyn Reply>) -> Box<dyn Reply> {
        Box::new(EchoingReply {
            inner: reply,
            echo: self,
        })
    }

    /// Writes the fields into a response that holds a whole header (one cut short to a tiny
    /// buffer is left as it is).
    fn stamp(self, response: &mut [u8]) {
        let Ok((mut hdr, _)) = WddmGpuCtrlHdr::read_from_prefix(response) else {
            return;
        };
        hdr.flags |= self.flags;
        hdr.fence_id = self.fence_id;
        hdr.ctx_id = self.ctx_id;
        hdr.ring_idx = self.ring_idx;
        // A Vec's bytes need not be aligned for the header: written back as bytes.
        response[..size_of::<WddmGpuCtrlHdr>()].copy_from_slice(hdr.as_bytes());
    }
}

/// A reply whose response header echoes the request's ([`FenceEcho`]).
struct EchoingReply {
    inner: Box<dyn Reply>,
    echo: FenceEcho,
}

impl Reply for EchoingReply {
    fn room(&self) -> usize {
        self.inner.room()
    }

    fn send(self: Box<Self>, response: &[u8]) {
        let mut stamped = response.to_vec();
        self.echo.stamp(&mut stamped);
        self.inner.send(&stamped);
    }
}

/// What the driver is told without asking: the status page and posted event requests.
pub struct Notify {
    /// The registered status page.
    pub status: StatusPage,
    /// WAIT_EVENT requests not yet completed, oldest first.
    pub events: VecDeque<Box<dyn Reply>>,
}

impl Notify {
    /// Publishes the status page, then completes the oldest posted WAIT_EVENT with `event` (or
    /// counts it as dropped, in what the page shows): a driver woken by the event finds the
    /// page already up to date.
    pub fn deliver<M: GuestMemoryBackend>(
        &mut self,
        mut event: WddmGpuRespEvent,
        ram: &GuestRam<'_, M>,
    ) {
        event.hdr = WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT);
        let reply = self.events.pop_front();
        if reply.is_none() {
            self.status.event_dropped();
        }
        self.status.publish(ram);
        if let Some(reply) = reply {
            reply.send(event.as_bytes());
        }
    }

    /// Completes the oldest posted WAIT_EVENT with `event` if one is posted; otherwise the event
    /// is lost uncounted and the status page left alone (vblanks: the next one's counter says
    /// how many were missed, and the vblank thread holds no guest memory to publish with).
    pub fn deliver_if_waiting(&mut self, mut event: WddmGpuRespEvent) -> bool {
        let Some(reply) = self.events.pop_front() else {
            return false;
        };
        event.hdr = WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT);
        reply.send(event.as_bytes());
        true
    }

    /// Completes every posted WAIT_EVENT as cancelled (a driver-requested reset).
    pub fn cancel_events(&mut self) {
        while let Some(reply) = self.events.pop_front() {
            let event = WddmGpuRespEvent {
                hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT),
                kind: WDDM_GPU_EVENT_CANCELLED,
                ..Default::default()
            };
            reply.send(event.as_bytes());
        }
    }
}
