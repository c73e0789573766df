//! The KMD's interrupt side: the status page the device writes (fences, preemption, the fault
//! ring) and the WAIT_EVENT requests a driver keeps posted so that every event raises an
//! interrupt. This driver polls instead of taking interrupts, but it follows the same protocol:
//! events complete asynchronously, in the order the requests were posted, and are collected
//! from the used ring whenever the driver looks.

use std::collections::VecDeque;
use std::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
use wddm_gpu_abi::status::{
    WddmGpuFaultRecord, WddmGpuRespEvent, WddmGpuStatusPage, WDDM_GPU_EVENT_BAR_CHANGED,
    WDDM_GPU_EVENT_CANCELLED, WDDM_GPU_EVENT_FAULT, WDDM_GPU_EVENT_FENCE,
    WDDM_GPU_FAULT_RING_ENTRIES, WDDM_GPU_FAULT_RING_OFFSET,
};
use zerocopy::FromBytes;

use crate::dma::DmaBuf;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, GpuControl, Ticket};

/// Byte offset of fault record `sequence` in the status page.
pub fn fault_slot_offset(sequence: u32) -> usize {
    WDDM_GPU_FAULT_RING_OFFSET as usize
        + (sequence % WDDM_GPU_FAULT_RING_ENTRIES) as usize * size_of::<WddmGpuFaultRecord>()
}

/// Name of an event kind, for messages.
pub fn event_kind_name(kind: u32) -> &'static str {
    match kind {
        WDDM_GPU_EVENT_FAULT => "FAULT",
        WDDM_GPU_EVENT_BAR_CHANGED => "BAR_CHANGED",
        WDDM_GPU_EVENT_FENCE => "FENCE",
        WDDM_GPU_EVENT_CANCELLED => "CANCELLED",
        _ => "unknown",
    }
}

/// One line describing a fault record.
pub fn describe_record(r: &WddmGpuFaultRecord) -> String {
    format!(
        "seq {} fence {} packet_offset {:#x} status {} opcode {} address {:#x}",
        r.sequence, r.fence_id, r.packet_offset, r.status, r.opcode, r.address
    )
}

/// The registered status page: one 4 KiB page of pinned memory the device writes.
pub struct StatusPage {
    page: DmaBuf,
}

impl StatusPage {
    /// Wraps a page (4 KiB, page aligned) of DMA memory.
    pub fn new(page: DmaBuf) -> Self {
        Self { page }
    }

    /// Guest-physical address to register.
    pub fn phys(&self) -> u64 {
        self.page.phys()
    }

    /// Fills the page with `byte` (so a page the device never wrote is recognisable).
    pub fn poison(&self, byte: u8) {
        self.page.fill(byte);
    }

    /// Poisons the page (see [`Self::poison`]) and registers it; REGISTER_STATUS_PAGE must
    /// answer OK_NODATA.
    pub fn register(&self, ctl: &mut GpuControl) -> Outcome {
        self.poison(0xee);
        let answer = ctl.register_status_page(self.phys())?;
        ensure(answer == VIRTIO_GPU_RESP_OK_NODATA, || {
            format!(
                "REGISTER_STATUS_PAGE {:#x}: answer {answer:#06x}, expected OK_NODATA",
                self.phys()
            )
        })
    }

    /// The header as the device last published it. `fault_head` is loaded first with acquire
    /// ordering, as a DPC reads it before the records and fences it covers.
    pub fn header(&self) -> WddmGpuStatusPage {
        self.page
            .load_u32(offset_of!(WddmGpuStatusPage, fault_head));
        let mut bytes = [0u8; size_of::<WddmGpuStatusPage>()];
        self.page.read(0, &mut bytes);
        WddmGpuStatusPage::read_from_bytes(&bytes).unwrap_or_default()
    }

    /// Fault record `sequence` (from the ring slot it goes to).
    pub fn record(&self, sequence: u32) -> WddmGpuFaultRecord {
        let mut bytes = [0u8; size_of::<WddmGpuFaultRecord>()];
        self.page.read(fault_slot_offset(sequence), &mut bytes);
        WddmGpuFaultRecord::read_from_bytes(&bytes).unwrap_or_default()
    }

    /// Writes `fault_tail`: the driver consumed every record before `tail`.
    pub fn set_fault_tail(&self, tail: u32) {
        self.page
            .store_u32(offset_of!(WddmGpuStatusPage, fault_tail), tail);
    }

    /// Consumes every record the device wrote since the last call: returns them and advances
    /// `fault_tail` to `fault_head`, as a DPC does.
    pub fn consume_faults(&self) -> Vec<WddmGpuFaultRecord> {
        let header = self.header();
        let records = (header.fault_tail..header.fault_head)
            .map(|seq| self.record(seq))
            .collect();
        self.set_fault_tail(header.fault_head);
        records
    }
}

/// An event the device delivered, with where it came in the used ring.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The answer.
    pub resp: WddmGpuRespEvent,
    /// Its position among all completions of the control queue.
    pub order: u64,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.resp;
        write!(f, "{} event (#{})", event_kind_name(r.kind), self.order)?;
        match r.kind {
            WDDM_GPU_EVENT_FENCE => write!(f, " fence {}", r.fence_id),
            WDDM_GPU_EVENT_FAULT => write!(f, " {}", describe_record(&r.fault)),
            WDDM_GPU_EVENT_BAR_CHANGED => write!(
                f,
                " state {} generation {} address {:#x}",
                r.bar_state, r.bar_generation, r.bar_address
            ),
            _ => Ok(()),
        }
    }
}

/// WAIT_EVENT requests kept posted, and the events they brought back.
pub struct EventQueue {
    depth: usize,
    posted: VecDeque<Ticket>,
    received: VecDeque<Event>,
}

impl EventQueue {
    /// Keeps `depth` requests posted (once [`Self::replenish`] ran).
    pub fn new(depth: usize) -> Self {
        Self {
            depth,
            posted: VecDeque::new(),
            received: VecDeque::new(),
        }
    }

    /// Requests currently posted.
    pub fn posted(&self) -> usize {
        self.posted.len()
    }

    /// Posts requests until `depth` are outstanding.
    pub fn replenish(&mut self, ctl: &mut GpuControl) -> Outcome {
        while self.posted.len() < self.depth {
            self.posted.push_back(ctl.post_wait_event()?);
        }
        Ok(())
    }

    /// Collects every answered request. The device answers the oldest posted request first, so
    /// the answered ones must be a prefix of the posted ones, in used-ring order.
    pub fn poll(&mut self, ctl: &mut GpuControl) -> Outcome<usize> {
        ctl.poll()?;
        let mut answered = Vec::new();
        for &ticket in &self.posted {
            answered.push(ctl.take_answered(ticket)?);
        }
        let mut count = 0;
        let mut last_order = None;
        let mut gap = None;
        let mut keep = VecDeque::new();
        for (i, (ticket, answer)) in self.posted.drain(..).zip(answered).enumerate() {
            let Some(answer) = answer else {
                gap.get_or_insert(i);
                keep.push_back(ticket);
                continue;
            };
            if let Some(first_pending) = gap {
                return Err(Failure(format!(
                    "WAIT_EVENT #{i} (posted after the still pending #{first_pending}) was \
                     answered first: events must complete the oldest request"
                )));
            }
            if last_order.is_some_and(|o| o > answer.order) {
                return Err(Failure(format!(
                    "WAIT_EVENT #{i} answered before an older request (completion #{})",
                    answer.order
                )));
            }
            last_order = Some(answer.order);
            let resp = gpu::decode_event(&answer.bytes)
                .map_err(|e| Failure(format!("WAIT_EVENT answer: {e}")))?;
            self.received.push_back(Event {
                resp,
                order: answer.order,
            });
            count += 1;
        }
        self.posted = keep;
        Ok(count)
    }

    /// The oldest event received and not yet taken, waiting up to `timeout` for one; `None`
    /// when none came. Requests are re-posted as they are used up.
    pub fn next(&mut self, ctl: &mut GpuControl, timeout: Duration) -> Outcome<Option<Event>> {
        let start = Instant::now();
        loop {
            self.poll(ctl)?;
            if let Some(event) = self.received.pop_front() {
                self.replenish(ctl)?;
                return Ok(Some(event));
            }
            if start.elapsed() >= timeout {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Every event received so far (after one more poll); requests are re-posted.
    pub fn drain(&mut self, ctl: &mut GpuControl) -> Outcome<Vec<Event>> {
        self.poll(ctl)?;
        let events = self.received.drain(..).collect();
        self.replenish(ctl)?;
        Ok(events)
    }

    /// Waits until every posted request was answered (a RESET cancels them all) and returns
    /// the events, without posting new requests.
    pub fn collect_all(&mut self, ctl: &mut GpuControl, timeout: Duration) -> Outcome<Vec<Event>> {
        let start = Instant::now();
        loop {
            self.poll(ctl)?;
            if self.posted.is_empty() {
                return Ok(self.received.drain(..).collect());
            }
            if start.elapsed() >= timeout {
                return Err(Failure(format!(
                    "{} WAIT_EVENT request(s) still unanswered after {timeout:?}",
                    self.posted.len()
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_slots_wrap_around_the_ring() {
        assert_eq!(fault_slot_offset(0), 128);
        assert_eq!(fault_slot_offset(1), 128 + 32);
        assert_eq!(fault_slot_offset(119), 128 + 119 * 32);
        assert_eq!(fault_slot_offset(120), 128);
        // The ring fits the page.
        assert!(fault_slot_offset(119) + 32 <= 4096);
    }

    #[test]
    fn event_names() {
        assert_eq!(event_kind_name(WDDM_GPU_EVENT_FAULT), "FAULT");
        assert_eq!(event_kind_name(WDDM_GPU_EVENT_CANCELLED), "CANCELLED");
        assert_eq!(event_kind_name(99), "unknown");
    }
}
