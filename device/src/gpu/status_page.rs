//! The status page a driver registers: the device keeps its state here and writes it into guest
//! RAM, fault records first, then a release fence, then the header whose counters a reader
//! checks, so a driver that sees a new `fault_head` or `completed_fence` also sees what it covers.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::caps::WddmGpuVramBar;
use wddm_gpu_abi::context::{WddmGpuPageFaultRecord, WDDM_GPU_NODE_COUNT};
use wddm_gpu_abi::status::{
    WddmGpuFaultRecord, WddmGpuStatusPage, WDDM_GPU_FAULT_RING_ENTRIES, WDDM_GPU_FAULT_RING_OFFSET,
    WDDM_GPU_PAGE_FAULT_OFFSET, WDDM_GPU_STATUS_MAGIC, WDDM_GPU_STATUS_PAGE_SIZE,
    WDDM_GPU_STATUS_VERSION,
};
use zerocopy::IntoBytes;

use crate::memory::guest_ram::{GuestRam, RamError};

/// Why a registration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatusPageError {
    /// Not 4 KiB aligned.
    #[error("status page {0:#x} is not 4 KiB aligned")]
    Unaligned(u64),
    /// Not guest RAM (or in the VRAM BAR).
    #[error("status page: {0}")]
    NotRam(RamError),
}

/// What completed a fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletedBy {
    /// A whole submission (with or without a fault).
    Submission,
    /// A FENCE packet, while the rest of its DMA buffer may still run.
    FencePacket,
}

/// The device's side of the status page.
#[derive(Clone, Debug, Default)]
pub struct StatusPage {
    address: Option<u64>,
    page: WddmGpuStatusPage,
    /// The frontend stopped the rings: guest RAM is left alone (a snapshot may be reading it).
    suspended: bool,
    /// Something changed while suspended.
    stale: bool,
    /// The latest faults, kept on the device side for live inspection (`ctl faults`): the ring
    /// in guest RAM belongs to the driver.
    recent: VecDeque<WddmGpuFaultRecord>,
    /// The latest page fault of each node, likewise.
    recent_page_faults: [Option<WddmGpuPageFaultRecord>; WDDM_GPU_NODE_COUNT as usize],
}

/// Faults [`StatusPage::recent_faults`] keeps.
pub const RECENT_FAULTS: usize = 32;

impl StatusPage {
    /// Registers the page at `address` (0 unregisters) and writes its initial state.
    pub fn register<M: GuestMemoryBackend>(
        &mut self,
        address: u64,
        ram: &GuestRam<'_, M>,
        bar: &WddmGpuVramBar,
    ) -> Result<(), StatusPageError> {
        if address == 0 {
            self.address = None;
            return Ok(());
        }
        if !address.is_multiple_of(u64::from(WDDM_GPU_STATUS_PAGE_SIZE)) {
            return Err(StatusPageError::Unaligned(address));
        }
        ram.check(address, u64::from(WDDM_GPU_STATUS_PAGE_SIZE))
            .map_err(StatusPageError::NotRam)?;
        self.address = Some(address);
        self.page = WddmGpuStatusPage {
            magic: WDDM_GPU_STATUS_MAGIC,
            version: WDDM_GPU_STATUS_VERSION,
            fault_ring_offset: WDDM_GPU_FAULT_RING_OFFSET,
            fault_ring_entries: WDDM_GPU_FAULT_RING_ENTRIES,
            ..Default::default()
        };
        self.set_bar(bar);
        let zeroes = [0u8; WDDM_GPU_STATUS_PAGE_SIZE as usize];
        // Checked above to be RAM.
        let _ = ram.write(address, &zeroes);
        self.publish(ram);
        Ok(())
    }

    /// Forgets the registration (device reset).
    pub fn unregister(&mut self) {
        *self = Self::default();
    }

    /// Records the BAR locator.
    pub fn set_bar(&mut self, bar: &WddmGpuVramBar) {
        self.page.bar_state = bar.state;
        self.page.bar_generation = bar.generation;
        self.page.bar_address = bar.guest_physical_address;
    }

    /// Records a completed fence; a whole submission also counts as completed.
    pub fn complete(&mut self, fence_id: u32, by: CompletedBy) {
        self.page.completed_fence = fence_id;
        if by == CompletedBy::Submission {
            self.page.submissions_completed += 1;
        }
    }

    /// The last SUBMIT_VIRTUAL that completed on the virtual node.
    pub fn virtual_completed(&self) -> u32 {
        self.page.virtual_completed_fence
    }

    /// Records a SUBMIT_VIRTUAL that completed on the virtual node.
    pub fn complete_virtual(&mut self, fence_id: u32) {
        self.page.virtual_completed_fence = fence_id;
    }

    /// Records a preemption.
    pub fn preempted(&mut self, preempted_fence: u32, last_completed: u32) {
        self.page.preempted_fence = preempted_fence;
        self.page.last_completed_at_preempt = last_completed;
    }

    /// Counts an event nobody was waiting for.
    pub fn event_dropped(&mut self) {
        self.page.events_dropped = self.page.events_dropped.wrapping_add(1);
    }

    /// Appends a fault record to the ring, unless the driver has not consumed enough of it.
    /// Returns the record with its sequence number.
    pub fn record_fault<M: GuestMemoryBackend>(
        &mut self,
        mut record: WddmGpuFaultRecord,
        ram: &GuestRam<'_, M>,
    ) -> WddmGpuFaultRecord {
        record.sequence = u64::from(self.page.fault_head);
        if self.recent.len() == RECENT_FAULTS {
            self.recent.pop_front();
        }
        self.recent.push_back(record);
        let Some(address) = self.address else {
            return record;
        };
        let tail_address = address + std::mem::offset_of!(WddmGpuStatusPage, fault_tail) as u64;
        let mut tail = [0u8; 4];
        let tail = ram
            .read(tail_address, &mut tail)
            .map(|()| u32::from_le_bytes(tail))
            .unwrap_or(self.page.fault_head);
        // The driver owns fault_tail; a value ahead of head is garbage and counts as full.
        let pending = self.page.fault_head.wrapping_sub(tail);
        if pending >= WDDM_GPU_FAULT_RING_ENTRIES {
            self.page.faults_dropped = self.page.faults_dropped.wrapping_add(1);
            return record;
        }
        let slot = u64::from(self.page.fault_head % WDDM_GPU_FAULT_RING_ENTRIES);
        let slot_address = address
            + u64::from(WDDM_GPU_FAULT_RING_OFFSET)
            + slot * std::mem::size_of::<WddmGpuFaultRecord>() as u64;
        let _ = ram.write(slot_address, record.as_bytes());
        self.page.fault_head = self.page.fault_head.wrapping_add(1);
        self.page.fault_tail = tail;
        record
    }

    /// Writes a node's latest page fault into its slot after the fault ring (the record's
    /// `sequence` tells a reader it is new); the caller publishes the header after it.
    pub fn record_page_fault<M: GuestMemoryBackend>(
        &mut self,
        record: &WddmGpuPageFaultRecord,
        ram: &GuestRam<'_, M>,
    ) {
        let node = record.node_ordinal.min(WDDM_GPU_NODE_COUNT - 1);
        if let Some(kept) = self.recent_page_faults.get_mut(node as usize) {
            *kept = Some(*record);
        }
        let Some(address) = self.address else {
            return;
        };
        let slot = u64::from(node);
        let slot_address = address
            + u64::from(WDDM_GPU_PAGE_FAULT_OFFSET)
            + slot * std::mem::size_of::<WddmGpuPageFaultRecord>() as u64;
        let _ = ram.write(slot_address, record.as_bytes());
    }

    /// Whether the driver has a page registered.
    pub fn registered(&self) -> bool {
        self.address.is_some()
    }

    /// The latest faults (oldest first) and each node's latest page fault, as recorded.
    pub fn recent_faults(&self) -> (Vec<WddmGpuFaultRecord>, Vec<WddmGpuPageFaultRecord>) {
        (
            self.recent.iter().copied().collect(),
            self.recent_page_faults.iter().flatten().copied().collect(),
        )
    }

    /// Stops writing to guest RAM until [`Self::resume`]; changes are kept.
    pub fn suspend(&mut self) {
        self.suspended = true;
    }

    /// Writes to guest RAM again, starting with what changed while suspended.
    pub fn resume<M: GuestMemoryBackend>(&mut self, ram: &GuestRam<'_, M>) {
        self.suspended = false;
        if std::mem::take(&mut self.stale) {
            self.publish(ram);
        }
    }

    /// Writes the header into guest RAM after everything it covers.
    pub fn publish<M: GuestMemoryBackend>(&mut self, ram: &GuestRam<'_, M>) {
        let Some(address) = self.address else {
            return;
        };
        if self.suspended {
            self.stale = true;
            return;
        }
        // Records written before this point become visible no later than the header.
        fence(Ordering::Release);
        // fault_tail belongs to the driver: write the header around it.
        let bytes = self.page.as_bytes();
        let tail_at = std::mem::offset_of!(WddmGpuStatusPage, fault_tail);
        let _ = ram.write(address, &bytes[..tail_at]);
        let _ = ram.write(address + tail_at as u64 + 4, &bytes[tail_at + 4..]);
        fence(Ordering::Release);
    }
}
