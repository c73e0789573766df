//! The bytes a submission read, kept for `--record`: every read the engine makes of guest RAM
//! or VRAM for a submission goes through [`GuestRam`](super::guest_ram::GuestRam) or a source
//! slice of the engine's copies, and when a [`ReadCapture`] rides along they are appended here,
//! with their address, so the submission can be run again offline over the same bytes.
//!
//! A capture belongs to one submission and one thread at a time (the one executing it), so it
//! is a `RefCell`, not a lock. Reads that continue the previous one (the next page of a frame
//! list, the next chunk of a copy) extend it rather than adding an entry.

use std::cell::{Cell, RefCell};

use vm_memory::bitmap::BitmapSlice;
use vm_memory::VolatileSlice;

/// Which memory a read reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    /// Guest-physical RAM.
    Ram,
    /// The VRAM address space (the BAR file, then device-only memory).
    Vram,
}

/// Why the engine read the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadKind {
    /// What decides what the engine does: packets, frame lists, page arrays, page-table entry
    /// arrays. Always kept.
    Metadata,
    /// The bytes a copy moves (a TRANSFER's source). Kept only when asked (`--record-data`).
    Data,
}

/// One read: `length` bytes at `address` of `store`, the next `length` bytes of
/// [`Captured::bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapturedRead {
    /// Where the bytes are.
    pub store: Store,
    /// Why they were read.
    pub kind: ReadKind,
    /// Guest-physical address (RAM) or VRAM offset.
    pub address: u64,
    /// Bytes read.
    pub length: u64,
}

impl CapturedRead {
    /// One past the last byte, if that fits in 64 bits.
    fn end(&self) -> Option<u64> {
        self.address.checked_add(self.length)
    }
}

/// Everything a submission read, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// The reads, in the order they were made.
    pub reads: Vec<CapturedRead>,
    /// Their bytes, one after the other.
    pub bytes: Vec<u8>,
    /// Data bytes left out because the capture reached its data limit.
    pub data_dropped: u64,
}

impl Captured {
    /// Appends a read, extending the last one when it continues it.
    fn push(&mut self, store: Store, kind: ReadKind, address: u64, length: u64) {
        if let Some(last) = self.reads.last_mut() {
            if last.store == store && last.kind == kind && last.end() == Some(address) {
                last.length += length;
                return;
            }
        }
        self.reads.push(CapturedRead {
            store,
            kind,
            address,
            length,
        });
    }
}

/// The reads of one submission, while it runs.
#[derive(Debug)]
pub struct ReadCapture {
    captured: RefCell<Captured>,
    /// Whether data bytes (copy sources) are kept, not only metadata.
    data: bool,
    /// Most data bytes kept; later ones are counted in `data_dropped`.
    data_limit: u64,
    /// Data bytes kept so far.
    data_kept: Cell<u64>,
}

impl ReadCapture {
    /// A capture that keeps metadata, and data up to `data_limit` bytes when `data` is set.
    pub fn new(data: bool, data_limit: u64) -> Self {
        Self {
            captured: RefCell::new(Captured::default()),
            data,
            data_limit,
            data_kept: Cell::new(0),
        }
    }

    /// Whether reads of this kind are kept (callers skip the work of reading otherwise).
    #[inline]
    pub fn wants(&self, kind: ReadKind) -> bool {
        kind == ReadKind::Metadata || self.data
    }

    /// Whether `length` more data bytes fit; counts them as dropped when they do not.
    fn room_for(&self, kind: ReadKind, length: u64) -> bool {
        if kind == ReadKind::Metadata {
            return true;
        }
        let kept = self.data_kept.get();
        match kept.checked_add(length) {
            Some(total) if total <= self.data_limit => {
                self.data_kept.set(total);
                true
            }
            _ => {
                let mut captured = self.captured.borrow_mut();
                captured.data_dropped = captured.data_dropped.saturating_add(length);
                false
            }
        }
    }

    /// Keeps bytes read into a device buffer.
    pub fn bytes(&self, store: Store, kind: ReadKind, address: u64, bytes: &[u8]) {
        let length = bytes.len() as u64;
        if !self.wants(kind) || !self.room_for(kind, length) {
            return;
        }
        let mut captured = self.captured.borrow_mut();
        captured.push(store, kind, address, length);
        captured.bytes.extend_from_slice(bytes);
    }

    /// Keeps the bytes of a slice about to be read (a copy's source).
    pub fn slice<B: BitmapSlice>(
        &self,
        store: Store,
        kind: ReadKind,
        address: u64,
        slice: &VolatileSlice<'_, B>,
    ) {
        let length = slice.len() as u64;
        if !self.wants(kind) || !self.room_for(kind, length) {
            return;
        }
        let mut captured = self.captured.borrow_mut();
        captured.push(store, kind, address, length);
        let at = captured.bytes.len();
        captured.bytes.resize(at + slice.len(), 0);
        slice.copy_to(&mut captured.bytes[at..]);
    }

    /// What was read, handed over; the capture starts empty again (its data budget is not
    /// renewed: one capture is one submission).
    pub fn take(&self) -> Captured {
        std::mem::take(&mut *self.captured.borrow_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuing_reads_merge_and_others_do_not() {
        let capture = ReadCapture::new(true, 1 << 20);
        capture.bytes(Store::Ram, ReadKind::Metadata, 0x1000, &[1, 2]);
        capture.bytes(Store::Ram, ReadKind::Metadata, 0x1002, &[3]);
        capture.bytes(Store::Vram, ReadKind::Metadata, 0x1003, &[4]);
        capture.bytes(Store::Vram, ReadKind::Data, 0x1004, &[5]);
        let captured = capture.take();
        assert_eq!(captured.bytes, [1, 2, 3, 4, 5]);
        let lengths: Vec<u64> = captured.reads.iter().map(|read| read.length).collect();
        assert_eq!(lengths, [3, 1, 1]);
        assert_eq!(captured.reads[1].store, Store::Vram);
        assert_eq!(capture.take(), Captured::default());
    }

    #[test]
    fn data_is_kept_only_when_asked_and_within_its_limit() {
        let metadata_only = ReadCapture::new(false, 1 << 20);
        assert!(!metadata_only.wants(ReadKind::Data));
        metadata_only.bytes(Store::Ram, ReadKind::Data, 0, &[1; 8]);
        assert_eq!(metadata_only.take(), Captured::default());

        let limited = ReadCapture::new(true, 8);
        limited.bytes(Store::Ram, ReadKind::Data, 0, &[1; 6]);
        limited.bytes(Store::Ram, ReadKind::Data, 0x100, &[2; 6]);
        limited.bytes(Store::Ram, ReadKind::Metadata, 0x200, &[3; 6]);
        let captured = limited.take();
        assert_eq!(captured.data_dropped, 6);
        assert_eq!(captured.bytes.len(), 12);
        assert_eq!(captured.reads.len(), 2);
    }
}
