//! The driver's side of a split virtqueue (virtio 1.x, 2.7): descriptors written into a table,
//! heads made available, used entries read back. Only the layout of the rings lives here; where
//! the rings are and what memory they live in are the caller's ([`RingMemory`]), so the test
//! harness (strict guest RAM) and the fuzz frontend (a guest that may point anywhere) write
//! their rings with the same code.

use std::sync::atomic::{fence, Ordering};

use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};

/// Split-ring descriptor flags, as the descriptor's `u16` field holds them.
pub const VIRTQ_DESC_F_NEXT: u16 = VRING_DESC_F_NEXT as u16;
pub const VIRTQ_DESC_F_WRITE: u16 = VRING_DESC_F_WRITE as u16;
pub const VIRTQ_DESC_F_INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;

/// Bytes of one descriptor in a table.
pub const DESCRIPTOR_SIZE: u64 = 16;

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
        let mut raw = [0u8; DESCRIPTOR_SIZE as usize];
        raw[0..8].copy_from_slice(&self.addr.to_le_bytes());
        raw[8..12].copy_from_slice(&self.len.to_le_bytes());
        raw[12..14].copy_from_slice(&self.flags.to_le_bytes());
        raw[14..16].copy_from_slice(&self.next.to_le_bytes());
        memory.write(table + DESCRIPTOR_SIZE * u64::from(index), &raw);
    }
}

/// A used-ring entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedEntry {
    pub id: u32,
    pub len: u32,
}

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
        memory.write(self.avail + 4 + 2 * slot, &head.to_le_bytes());
        // The entry must be visible before the index that publishes it.
        fence(Ordering::SeqCst);
        let next = avail_idx.wrapping_add(1);
        self.write_avail_idx(memory, next);
        next
    }

    /// Writes the available index as is (a hostile guest may write any).
    pub fn write_avail_idx(&self, memory: &impl RingMemory, idx: u16) {
        memory.write(self.avail + 2, &idx.to_le_bytes());
        fence(Ordering::SeqCst);
    }

    /// `used_event` (EVENT_IDX), after the available ring: the device notifies once it uses
    /// the entry at this index.
    pub fn write_used_event(&self, memory: &impl RingMemory, idx: u16) {
        memory.write(
            self.avail + 4 + 2 * u64::from(self.size),
            &idx.to_le_bytes(),
        );
    }

    /// The used index as the device last wrote it.
    pub fn used_idx(&self, memory: &impl RingMemory) -> u16 {
        fence(Ordering::SeqCst);
        let mut raw = [0u8; 2];
        memory.read(self.used + 2, &mut raw);
        u16::from_le_bytes(raw)
    }

    /// The used entry at `index` (modulo the ring size), as the device wrote it.
    pub fn used_entry(&self, memory: &impl RingMemory, index: u16) -> UsedEntry {
        let slot = u64::from(index % self.size.max(1));
        let mut raw = [0u8; 8];
        memory.read(self.used + 4 + 8 * slot, &mut raw);
        UsedEntry {
            id: u32::from_le_bytes(raw[..4].try_into().unwrap()),
            len: u32::from_le_bytes(raw[4..].try_into().unwrap()),
        }
    }
}
