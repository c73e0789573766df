//! A split virtqueue (virtio 1.x, 2.7) in pinned DMA memory, polled: completions are found by
//! reading the used ring, never through interrupts (`VIRTQ_AVAIL_F_NO_INTERRUPT` suppresses them,
//! since nothing in the guest would handle them).
//!
//! Several chains may be in flight at once, and the device may complete them in any order: a
//! KMD keeps WAIT_EVENT requests posted while submissions run, and a long submission completes
//! after the PREEMPT or RESET sent behind it. [`SplitQueue::post`] hands out free descriptors
//! and returns the chain's head; [`SplitQueue::poll`] moves every new used entry into a table of
//! completions; [`SplitQueue::take`] collects one (and frees its descriptors).
//! [`SplitQueue::run`] is the synchronous form: post, then poll until that chain completes,
//! keeping whatever else completes meanwhile for its owner.

use std::sync::atomic::{fence, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;
use wddm_gpu_abi::ring::{
    WddmGpuVirtqDesc, WddmGpuVirtqUsedElem, VIRTQ_AVAIL_ENTRY_SIZE, VIRTQ_AVAIL_F_NO_INTERRUPT,
    VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE, VIRTQ_RING_ENTRIES_OFFSET, VIRTQ_RING_EVENT_SIZE,
    VIRTQ_RING_IDX_OFFSET,
};
use zerocopy::IntoBytes;

use crate::dma::{DmaArena, DmaBuf, DmaError};
use crate::mmio::MmioWindow;

/// Bytes of one descriptor-table entry.
const DESC_SIZE: usize = size_of::<WddmGpuVirtqDesc>();
/// Bytes of one used-ring entry.
const USED_ELEM_SIZE: usize = size_of::<WddmGpuVirtqUsedElem>();

/// A request on the queue failed.
#[derive(Debug, Error)]
pub enum QueueError {
    /// The ring memory could not be allocated.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// The device did not complete the chain in time.
    #[error("queue {queue}: no completion within {timeout:?}")]
    Timeout { queue: u16, timeout: Duration },
    /// An earlier request timed out; the device may still own its descriptors.
    #[error("queue {0} unusable after an earlier timeout")]
    Broken(u16),
    /// The device completed something that is not a chain in flight.
    #[error("queue {queue}: device returned {what}")]
    BadUsed { queue: u16, what: String },
    /// The chain does not fit the queue.
    #[error("chain of {0} descriptors does not fit the queue")]
    ChainTooLong(usize),
    /// Too many chains in flight: no free descriptors left.
    #[error("queue {queue}: {want} descriptors wanted, {free} free")]
    Full {
        queue: u16,
        want: usize,
        free: usize,
    },
}

/// Offsets of the three parts of a split virtqueue of `size` entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Descriptor table (16-byte aligned).
    pub desc: usize,
    /// Available (driver) ring (2-byte aligned).
    pub avail: usize,
    /// Used (device) ring (4-byte aligned; page aligned here).
    pub used: usize,
    /// Total bytes.
    pub total: usize,
}

impl RingLayout {
    /// The layout for `size` entries: descriptors, then the avail ring, then the used ring on
    /// the next 4 KiB boundary.
    pub fn new(size: u16) -> Self {
        let n = usize::from(size);
        let avail = DESC_SIZE * n;
        let avail_len =
            VIRTQ_RING_ENTRIES_OFFSET + VIRTQ_AVAIL_ENTRY_SIZE * n + VIRTQ_RING_EVENT_SIZE;
        let used = (avail + avail_len).div_ceil(4096) * 4096;
        let used_len = VIRTQ_RING_ENTRIES_OFFSET + USED_ELEM_SIZE * n + VIRTQ_RING_EVENT_SIZE;
        Self {
            desc: 0,
            avail,
            used,
            total: used + used_len,
        }
    }
}

/// One buffer of a chain: guest-physical address, length, device-writable or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Guest-physical address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// The device writes it (response) rather than reads it (request).
    pub device_writes: bool,
}

/// A completed chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// Bytes the device says it wrote.
    pub len: u32,
    /// Position of the completion in the used ring since the queue was set up (0 first): tells
    /// the order in which the device completed chains.
    pub order: u64,
}

/// A chain the device owns (or has completed but nobody collected yet).
#[derive(Clone, Debug)]
struct InFlight {
    /// Its descriptors, head first.
    descriptors: Vec<u16>,
    /// Set once the device put it on the used ring.
    used: Option<Used>,
}

/// A polled split virtqueue.
pub struct SplitQueue {
    index: u16,
    size: u16,
    layout: RingLayout,
    mem: DmaBuf,
    notify: MmioWindow,
    next_avail: u16,
    last_used: u16,
    used_count: u64,
    free: Vec<u16>,
    /// Indexed by head descriptor.
    in_flight: Vec<Option<InFlight>>,
    broken: bool,
    /// When the last chain was published, just before the notify (the kick).
    last_kick: Option<Instant>,
    /// When [`Self::wait`] last found its chain completed.
    last_done: Option<Instant>,
}

impl SplitQueue {
    /// Allocates the rings for queue `index` with `size` entries; `notify` is the 2-byte window
    /// the driver writes the queue index to.
    pub fn new(
        arena: &'static DmaArena,
        index: u16,
        size: u16,
        notify: MmioWindow,
    ) -> Result<Self, QueueError> {
        let layout = RingLayout::new(size);
        let mem = arena.alloc(layout.total)?;
        let queue = Self {
            index,
            size,
            layout,
            mem,
            notify,
            next_avail: 0,
            last_used: 0,
            used_count: 0,
            // Popped from the end: descriptor 0 goes first.
            free: (0..size).rev().collect(),
            in_flight: vec![None; usize::from(size)],
            broken: false,
            last_kick: None,
            last_done: None,
        };
        queue
            .ring_u16(layout.avail)
            .store(VIRTQ_AVAIL_F_NO_INTERRUPT, Ordering::Release);
        Ok(queue)
    }

    /// Entries.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Chains posted and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.in_flight.iter().flatten().count()
    }

    /// Time from the last kick (the notify after publishing a chain) to the moment
    /// [`Self::wait`] next saw its chain on the used ring; `None` when no wait finished since
    /// that kick. Right after a synchronous [`Self::run`] this is its round trip as the driver
    /// sees it.
    pub fn last_round_trip(&self) -> Option<Duration> {
        let (kick, done) = (self.last_kick?, self.last_done?);
        done.checked_duration_since(kick)
    }

    /// Guest-physical addresses of descriptor table, avail ring and used ring.
    pub fn addresses(&self) -> (u64, u64, u64) {
        let base = self.mem.phys();
        (
            base + self.layout.desc as u64,
            base + self.layout.avail as u64,
            base + self.layout.used as u64,
        )
    }

    /// Posts `chain` and notifies the device; returns the chain's head descriptor, which names
    /// its completion.
    pub fn post(&mut self, chain: &[Segment]) -> Result<u16, QueueError> {
        if self.broken {
            return Err(QueueError::Broken(self.index));
        }
        if chain.is_empty() || chain.len() > usize::from(self.size) {
            return Err(QueueError::ChainTooLong(chain.len()));
        }
        if chain.len() > self.free.len() {
            return Err(QueueError::Full {
                queue: self.index,
                want: chain.len(),
                free: self.free.len(),
            });
        }
        let descriptors: Vec<u16> = (0..chain.len())
            .map(|_| self.free.pop().unwrap_or_default())
            .collect();
        for (i, seg) in chain.iter().enumerate() {
            let mut flags = if seg.device_writes {
                VIRTQ_DESC_F_WRITE
            } else {
                0
            };
            let next = match descriptors.get(i + 1) {
                Some(&next) => {
                    flags |= VIRTQ_DESC_F_NEXT;
                    next
                }
                None => 0,
            };
            let desc = WddmGpuVirtqDesc {
                addr: seg.addr,
                len: seg.len,
                flags,
                next,
            };
            self.mem.write(
                self.layout.desc + usize::from(descriptors[i]) * DESC_SIZE,
                desc.as_bytes(),
            );
        }
        let head = descriptors[0];
        self.in_flight[usize::from(head)] = Some(InFlight {
            descriptors,
            used: None,
        });
        let slot = usize::from(self.next_avail % self.size);
        self.ring_u16(
            self.layout.avail + VIRTQ_RING_ENTRIES_OFFSET + VIRTQ_AVAIL_ENTRY_SIZE * slot,
        )
        .store(head, Ordering::Relaxed);
        // Descriptors and ring entry must be visible before the index that publishes them.
        fence(Ordering::SeqCst);
        let published = self.next_avail.wrapping_add(1);
        self.ring_u16(self.layout.avail + VIRTQ_RING_IDX_OFFSET)
            .store(published, Ordering::Release);
        self.next_avail = published;
        // The index must be visible before the device is told to look.
        fence(Ordering::SeqCst);
        self.last_kick = Some(Instant::now());
        self.notify.write16(0, self.index);
        Ok(head)
    }

    /// Reads every new used-ring entry into the completion table; returns how many there were.
    pub fn poll(&mut self) -> Result<usize, QueueError> {
        if self.broken {
            return Err(QueueError::Broken(self.index));
        }
        let idx = self
            .ring_u16(self.layout.used + VIRTQ_RING_IDX_OFFSET)
            .load(Ordering::Acquire);
        let new = idx.wrapping_sub(self.last_used);
        let waiting = self
            .in_flight
            .iter()
            .flatten()
            .filter(|f| f.used.is_none())
            .count();
        if usize::from(new) > waiting {
            self.broken = true;
            return Err(self.bad_used(format!(
                "used index {idx} ({new} new entries after {}), but only {waiting} chains are in flight",
                self.last_used
            )));
        }
        fence(Ordering::Acquire);
        for _ in 0..new {
            let slot = usize::from(self.last_used % self.size);
            let mut elem = WddmGpuVirtqUsedElem::default();
            self.mem.read(
                self.layout.used + VIRTQ_RING_ENTRIES_OFFSET + USED_ELEM_SIZE * slot,
                elem.as_mut_bytes(),
            );
            let WddmGpuVirtqUsedElem { id, len } = elem;
            let entry = usize::try_from(id)
                .ok()
                .and_then(|i| self.in_flight.get_mut(i))
                .and_then(Option::as_mut)
                .filter(|f| f.used.is_none());
            let Some(entry) = entry else {
                self.broken = true;
                return Err(self.bad_used(format!(
                    "used id {id}, which is not the head of a chain in flight"
                )));
            };
            entry.used = Some(Used {
                len,
                order: self.used_count,
            });
            self.used_count += 1;
            self.last_used = self.last_used.wrapping_add(1);
        }
        Ok(usize::from(new))
    }

    /// The completion of the chain at `head`, if the device completed it (after a [`Self::poll`]);
    /// its descriptors are free again afterwards.
    pub fn take(&mut self, head: u16) -> Option<Used> {
        let slot = self.in_flight.get_mut(usize::from(head))?;
        let used = slot.as_ref()?.used?;
        let done = slot.take()?;
        self.free.extend(done.descriptors.iter().rev());
        Some(used)
    }

    /// Polls until the chain at `head` completes; the queue stays usable after a timeout (the
    /// chain's descriptors simply stay with the device).
    pub fn wait(&mut self, head: u16, timeout: Duration) -> Result<Used, QueueError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            self.poll()?;
            if let Some(used) = self.take(head) {
                self.last_done = Some(Instant::now());
                return Ok(used);
            }
            if start.elapsed() > timeout {
                return Err(QueueError::Timeout {
                    queue: self.index,
                    timeout,
                });
            }
            // Spin briefly for fast devices, then yield the (possibly emulated) CPU.
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Posts `chain`, notifies the device and polls until it is used; returns the number of
    /// bytes the device says it wrote. After a timeout the queue is unusable: the caller's
    /// buffers may still be written by the device.
    pub fn run(&mut self, chain: &[Segment], timeout: Duration) -> Result<u32, QueueError> {
        let head = self.post(chain)?;
        match self.wait(head, timeout) {
            Ok(used) => Ok(used.len),
            Err(err) => {
                self.broken = true;
                Err(err)
            }
        }
    }

    fn bad_used(&self, what: String) -> QueueError {
        QueueError::BadUsed {
            queue: self.index,
            what,
        }
    }

    fn ring_u16(&self, offset: usize) -> &AtomicU16 {
        let ptr = self.mem.ptr(offset);
        assert!((ptr as usize).is_multiple_of(2) && offset + 2 <= self.mem.len());
        // SAFETY: in bounds and 2-byte aligned (checked); the ring memory is never freed, and the
        // device's concurrent accesses are exactly what atomics are for.
        unsafe { &*ptr.cast::<AtomicU16>() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_layout_is_aligned() {
        let l = RingLayout::new(64);
        assert_eq!((l.desc, l.avail, l.used), (0, 1024, 4096));
        assert_eq!(l.total, 4096 + 6 + 8 * 64);
        let big = RingLayout::new(1024);
        assert_eq!(big.avail, 16384);
        assert_eq!(big.used % 4096, 0);
        assert!(big.used >= big.avail + 6 + 2 * 1024);
    }
}
