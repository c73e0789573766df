//! How requests are answered: a request's [`Reply`], which the transport completes on its ring;
//! [`answer`] and [`refuse`], which check the response fits first; and [`Notify`], what the
//! driver is told without asking (the status page and posted WAIT_EVENT requests), which
//! [`signal`](Notify::signal)s events. The paging GPU, its scheduler and the router answer
//! through these.
//!
//! The verbs: a request is *answered* (its response chosen and checked to fit) and its reply
//! *completed* (the response written and the request handed back, by the transport); an event
//! is *signalled* (the status page published, then a posted WAIT_EVENT answered).

use std::collections::VecDeque;

use vm_memory::{GuestMemoryBackend, GuestMemoryLoadGuard, GuestMemoryMmap};
use wddm_gpu_abi::context::WddmGpuPageFaultRecord;
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_UNSPEC, WDDM_GPU_RESP_EVENT};
use wddm_gpu_abi::request::FenceEcho;
use wddm_gpu_abi::status::{
    WddmGpuRespEvent, WDDM_GPU_EVENT_CANCELLED, WDDM_GPU_EVENT_MONITORED_FENCE,
    WDDM_GPU_EVENT_PAGE_FAULT,
};
use zerocopy::IntoBytes;

use crate::gpu::status_page::StatusPage;
use crate::memory::guest_ram::GuestRam;
use crate::observe::stats::RequestOutcome;

/// A snapshot of guest memory, kept alive while a request that uses it is pending.
pub type Mem = GuestMemoryLoadGuard<GuestMemoryMmap>;

/// Where a response goes: the transport's descriptor chain, or a test's channel.
pub trait Reply: Send {
    /// Bytes the response buffer holds.
    fn room(&self) -> usize;
    /// Writes the response and completes the request (raising the queue's interrupt).
    fn complete(self: Box<Self>, response: &[u8]);
}

/// A header-only response of type `type_`.
pub fn header(type_: u32) -> Vec<u8> {
    WddmGpuCtrlHdr::with_type(type_).as_bytes().to_vec()
}

/// Answers with a header-only error of type `type_`.
pub fn refuse(reply: Box<dyn Reply>, type_: u32) -> RequestOutcome {
    answer(reply, &header(type_));
    RequestOutcome::Refused
}

/// Completes `reply` with `response`, or with a header-only `ERR_UNSPEC` cut to the room when
/// it does not fit.
pub fn answer(reply: Box<dyn Reply>, response: &[u8]) {
    let room = reply.room();
    if response.len() <= room {
        reply.complete(response);
        return;
    }
    crate::support::guest_log::guest_warn!(
        "response of {} bytes does not fit the {room}-byte buffer",
        response.len()
    );
    let hdr = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_ERR_UNSPEC);
    reply.complete(&hdr.as_bytes()[..room.min(hdr.as_bytes().len())]);
}

/// `reply`, answering with the request's fence fields in its response header.
pub fn echoing(reply: Box<dyn Reply>, echo: FenceEcho) -> Box<dyn Reply> {
    Box::new(EchoingReply { inner: reply, echo })
}

/// Bytes of the largest response stamped without an allocation.
const SMALL_RESPONSE: usize = 256;

/// A reply whose response header echoes the request's ([`FenceEcho`]).
struct EchoingReply {
    inner: Box<dyn Reply>,
    echo: FenceEcho,
}

impl Reply for EchoingReply {
    fn room(&self) -> usize {
        self.inner.room()
    }

    fn complete(self: Box<Self>, response: &[u8]) {
        // The stamped copy of a small response (a submission's, an event's) stays on the stack:
        // an allocation and its free were a tenth of a submission's work.
        let mut small = [0u8; SMALL_RESPONSE];
        let mut large = Vec::new();
        let stamped = match small.get_mut(..response.len()) {
            Some(small) => small,
            None => {
                large.resize(response.len(), 0);
                &mut large[..]
            }
        };
        stamped.copy_from_slice(response);
        self.echo.stamp(stamped);
        self.inner.complete(stamped);
    }
}

/// What the driver is told without asking: the status page and posted event requests.
pub struct Notify {
    /// The registered status page.
    pub status: StatusPage,
    /// WAIT_EVENT requests not yet completed, oldest first.
    events: VecDeque<Box<dyn Reply>>,
    /// VBLANK events that changed what a scanout shows and found no WAIT_EVENT posted, newest
    /// per scanout, for the next ones posted ([`Self::vblank`]).
    kept_vblanks: Vec<WddmGpuRespEvent>,
}

impl Notify {
    /// No status page, no WAIT_EVENT posted.
    pub fn new(status: StatusPage) -> Self {
        Self {
            status,
            events: VecDeque::new(),
            kept_vblanks: Vec::new(),
        }
    }

    /// A WAIT_EVENT posted: a kept VBLANK completes it at once; otherwise it waits for the next
    /// event.
    pub fn post(&mut self, reply: Box<dyn Reply>) {
        if self.kept_vblanks.is_empty() {
            self.events.push_back(reply);
        } else {
            reply.complete(self.kept_vblanks.remove(0).as_bytes());
        }
    }

    /// A device reset: posted WAIT_EVENTs are forgotten (the frontend has taken the rings back)
    /// and so are kept VBLANKs (the reset turned every scanout off).
    pub fn forget_events(&mut self) {
        self.events.clear();
        self.kept_vblanks.clear();
    }

    /// Publishes the status page, then completes the oldest posted WAIT_EVENT with `event` (or
    /// counts it as dropped, in what the page shows): a driver woken by the event finds the
    /// page already up to date.
    pub fn signal<M: GuestMemoryBackend>(
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
            reply.complete(event.as_bytes());
        }
    }

    /// A node page-faulted: the `DmaPageFaulted` record in the node's slot of the status page,
    /// then the PAGE_FAULT event carrying it.
    pub fn page_fault<M: GuestMemoryBackend>(
        &mut self,
        record: WddmGpuPageFaultRecord,
        ram: &GuestRam<'_, M>,
    ) {
        self.status.record_page_fault(&record, ram);
        self.signal(
            WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_PAGE_FAULT,
                page_fault: record,
                ..Default::default()
            },
            ram,
        );
    }

    /// A monitored fence was written (a SIGNAL packet, a SIGNAL_MONITORED_FENCE): the
    /// MONITORED_FENCE event with its value and GPU virtual address.
    pub fn monitored_fence<M: GuestMemoryBackend>(
        &mut self,
        address: u64,
        value: u64,
        ram: &GuestRam<'_, M>,
    ) {
        self.signal(
            WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_MONITORED_FENCE,
                fence_value: value,
                fence_address: address,
                ..Default::default()
            },
            ram,
        );
    }

    /// A vblank's VBLANK `event`: completes the oldest posted WAIT_EVENT. With none posted, an
    /// ordinary vblank is lost uncounted (the next one's counter says how many were missed), but
    /// one that `changed` what its scanout shows (a flip took effect, the scanout turned off) is
    /// kept for the next WAIT_EVENT posted, and so are the vblanks after it until then (newest
    /// per scanout): the last VBLANK of a scanout turned off has no successor that would tell
    /// the driver. The status page is left alone (the vblank thread holds no guest memory).
    pub fn vblank(&mut self, mut event: WddmGpuRespEvent, changed: bool) {
        event.hdr = WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT);
        if let Some(reply) = self.events.pop_front() {
            reply.complete(event.as_bytes());
            return;
        }
        let scanout = event.scanout_id;
        match self
            .kept_vblanks
            .iter_mut()
            .find(|k| k.scanout_id == scanout)
        {
            Some(kept) => *kept = event,
            None if changed => self.kept_vblanks.push(event),
            None => {}
        }
    }

    /// Completes every posted WAIT_EVENT as cancelled (a driver-requested reset). Kept VBLANKs
    /// stay for the WAIT_EVENTs the driver posts after it: its RESET does not touch the display.
    pub fn cancel_events(&mut self) {
        while let Some(reply) = self.events.pop_front() {
            let event = WddmGpuRespEvent {
                hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_EVENT),
                kind: WDDM_GPU_EVENT_CANCELLED,
                ..Default::default()
            };
            reply.complete(event.as_bytes());
        }
    }
}
