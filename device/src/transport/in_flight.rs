//! The control-queue heads the device holds: taken from the ring and not answered yet. A head
//! the guest makes available again while the device holds it is completed at once with nothing
//! written, so a guest re-posting heads cannot queue more than the ring's size of requests.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One slot per head of the control ring.
pub struct InFlight {
    /// Bumped when the rings are set up anew: claims of the old ring no longer release.
    epoch: AtomicU32,
    /// Per head: the epoch that claimed it, 0 when free.
    heads: Vec<AtomicU32>,
}

/// One held head, released when its reply is written or dropped.
pub struct Claim {
    in_flight: Arc<InFlight>,
    head: u16,
    epoch: u32,
}

impl InFlight {
    /// Every head of a ring of `queue_size` free.
    pub fn new(queue_size: usize) -> Self {
        Self {
            epoch: AtomicU32::new(1),
            heads: (0..queue_size).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Claims `head`; `None` when the device holds it already (or it is out of range, which the
    /// queue refuses before this).
    pub fn claim(self: &Arc<Self>, head: u16) -> Option<Claim> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let slot = self.heads.get(usize::from(head))?;
        slot.compare_exchange(0, epoch, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Claim {
            in_flight: self.clone(),
            head,
            epoch,
        })
    }

    /// The rings were set up anew: every head is free, and claims of the old ring stay unused.
    pub fn forget_all(&self) {
        let epoch = self.epoch.load(Ordering::Acquire).wrapping_add(1).max(1);
        self.epoch.store(epoch, Ordering::Release);
        for slot in &self.heads {
            slot.store(0, Ordering::Release);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(slot) = self.in_flight.heads.get(usize::from(self.head)) {
            let _ = slot.compare_exchange(self.epoch, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}
