//! The driver's side of a split virtqueue (virtio 1.x, 2.7): descriptors written into a table,
//! heads made available, used entries read back. Only the layout of the rings lives here; where
//! the rings are and what memory they live in are the caller's ([`RingMemory`]), so the test
//! harness (strict guest RAM) and the fuzz frontend (a guest that may point anywhere) write
//! their rings with the same code.

// The ring's layout is the ABI crate's, re-exported for the tests that build chains by hand.
use std::mem::size_of;
use std::sync::atomic::{fence, Ordering};

use wddm_gpu_abi::ring::{
    WddmGpuVirtqDesc, VIRTQ_AVAIL_ENTRY_SIZE, VIRTQ_RING_ENTRIES_OFFSET, VIRTQ_RING_IDX_OFFSET,
};
pub use wddm_gpu_abi::ring::{VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use zerocopy::IntoBytes;

/// Where a ring's index and entries start, and an avail entry's size, as offsets.
const IDX: u64 = VIRTQ_RING_IDX_OFFSET as u64;
const ENTRIES: u64 = VIRTQ_RING_ENTRIES_OFFSET as u64;
const AVAIL_ENTRY: u64 = VIRTQ_AVAIL_ENTRY_SIZE as u64;

/// Bytes of one descriptor in a table.
pub const DESCRIPTOR_SIZE: u64 = std::mem::size_of::<WddmGpuVirtqDesc>() as u64;

/// Guest memory the rings are written into, by guest-physical address. What an access outside
/// the memory does is the implementation's choice: a test fails, a fuzzed guest is ignored.
pub trait RingMemory {
    fn write(&self, gpa: u64, bytes: &[u8]);
    fn read(&self, gpa: u64, bytes: &mut [u8]);
}

/// One descriptor as the driver writes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Descriptor {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: u16,
}

impl Descriptor {
    pub const fn new(addr: u64, len: u32, flags: u16, next: u16) -> Self {
        Self {
            addr,
            len,
            flags,
            next,
        }
    }

    /// Writes the descriptor as entry `index` of the table at `table`.
    pub fn write(&self, memory: &impl RingMemory, table: u64, index: u16) {
        let wire = WddmGpuVirtqDesc {
            addr: self.addr,
            len: self.len,
            flags: self.flags,
            next: self.next,
        };
        memory.write(table + DESCRIPTOR_SIZE * u64::from(index), wire.as_bytes());
    }
}

/// A used-ring entry.
pub use wddm_gpu_abi::ring::WddmGpuVirtqUsedElem as UsedEntry;

/// Where a queue's three parts are (guest-physical) and how many entries it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitRing {
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    pub size: u16,
}

impl SplitRing {
    /// Writes `head` into available slot `avail_idx` and publishes `avail_idx + 1` after it;
    /// returns the new available index.
    pub fn make_available(&self, memory: &impl RingMemory, avail_idx: u16, head: u16) -> u16 {
        let slot = u64::from(avail_idx % self.size.max(1));
        memory.write(
            self.avail + ENTRIES + AVAIL_ENTRY * slot,
            &head.to_le_bytes(),
        );
        // The entry must be visible before the index that publishes it.
        fence(Ordering::SeqCst);
        let next = avail_idx.wrapping_add(1);
        self.write_avail_idx(memory, next);
        next
    }

    /// Writes the available index as is (a hostile guest may write any).
    pub fn write_avail_idx(&self, memory: &impl RingMemory, idx: u16) {
        memory.write(self.avail + IDX, &idx.to_le_bytes());
        fence(Ordering::SeqCst);
    }

    /// `used_event` (EVENT_IDX), after the available ring: the device notifies once it uses
    /// the entry at this index.
    pub fn write_used_event(&self, memory: &impl RingMemory, idx: u16) {
        memory.write(
            self.avail + ENTRIES + AVAIL_ENTRY * u64::from(self.size),
            &idx.to_le_bytes(),
        );
    }

    /// The used index as the device last wrote it.
    pub fn used_idx(&self, memory: &impl RingMemory) -> u16 {
        fence(Ordering::SeqCst);
        let mut raw = [0u8; 2];
        memory.read(self.used + IDX, &mut raw);
        u16::from_le_bytes(raw)
    }

    /// The used entry at `index` (modulo the ring size), as the device wrote it.
    pub fn used_entry(&self, memory: &impl RingMemory, index: u16) -> UsedEntry {
        let slot = u64::from(index % self.size.max(1));
        let mut entry = UsedEntry::default();
        let at = ENTRIES + size_of::<UsedEntry>() as u64 * slot;
        memory.read(self.used + at, entry.as_mut_bytes());
        entry
    }
}
