//! How the device model answers: a request's [`Reply`], and [`Notify`], what the driver is told
//! without asking (the status page and posted WAIT_EVENT requests). The GPU and its scheduler
//! both answer through these.

use std::collections::VecDeque;

use vm_memory::{GuestMemoryBackend, GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_UNSPEC, WDDM_GPU_RESP_EVENT};
use wddm_gpu_abi::request::FenceEcho;
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_CANCELLED};
use zerocopy::IntoBytes;

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

/// `reply`, answering with the request's fence fields in its response header.
pub fn echoing(reply: Box<dyn Reply>, echo: FenceEcho) -> Box<dyn Reply> {
    Box::new(EchoingReply { inner: reply, echo })
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
