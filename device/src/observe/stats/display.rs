//! What the display sent to QEMU: messages per kind and their pixel bytes, display sockets, and
//! what was dropped. Lock-free: the display's writer thread counts what it wrote and what a
//! closed socket lost, the vring workers what they could not hand over, without the paging
//! counters' lock. The values are the device's own (message counts and sizes bounded by the
//! 2D resources), not the guest's: plain wrapping additions that no run reaches.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// One message written to QEMU's display socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentMessage {
    /// SCANOUT (a new size, or disabled).
    Scanout,
    /// UPDATE at a flush or a vblank, with its pixel bytes.
    Update { bytes: u64 },
    /// UPDATE of a band a large transfer streamed, with its pixel bytes.
    StreamedBand { bytes: u64 },
    /// CURSOR_UPDATE (a new image at a position).
    CursorImage,
    /// CURSOR_POS.
    CursorMove,
    /// CURSOR_POS_HIDE.
    CursorHide,
}

/// Why a message did not reach QEMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsent {
    /// QEMU was not reading the socket and the pending bytes were at their bound.
    NotReading,
    /// The socket had closed (a device stop or reset) and no new one had come yet, or the
    /// writer thread for it could not start.
    SocketClosed,
}

/// The display's counters, shared by the display, its writer thread and the stats endpoint.
#[derive(Debug, Default)]
pub struct DisplayCounters {
    sockets: AtomicU64,
    scanouts: AtomicU64,
    updates: AtomicU64,
    update_bytes: AtomicU64,
    streamed_bands: AtomicU64,
    streamed_bytes: AtomicU64,
    cursor_images: AtomicU64,
    cursor_moves: AtomicU64,
    cursor_hides: AtomicU64,
    dropped_not_reading: AtomicU64,
    dropped_socket_closed: AtomicU64,
}

fn add(counter: &AtomicU64, value: u64) {
    // Relaxed: each counter stands alone; a snapshot may see one message's count before its
    // bytes, never a torn value.
    counter.fetch_add(value, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl DisplayCounters {
    /// QEMU handed over a display socket.
    pub fn socket(&self) {
        add(&self.sockets, 1);
    }

    /// `message` was written to the socket.
    pub fn sent(&self, message: SentMessage) {
        match message {
            SentMessage::Scanout => add(&self.scanouts, 1),
            SentMessage::Update { bytes } => {
                add(&self.updates, 1);
                add(&self.update_bytes, bytes);
            }
            SentMessage::StreamedBand { bytes } => {
                add(&self.streamed_bands, 1);
                add(&self.streamed_bytes, bytes);
            }
            SentMessage::CursorImage => add(&self.cursor_images, 1),
            SentMessage::CursorMove => add(&self.cursor_moves, 1),
            SentMessage::CursorHide => add(&self.cursor_hides, 1),
        }
    }

    /// A message was dropped instead of sent.
    pub fn unsent(&self, why: Unsent) {
        match why {
            Unsent::NotReading => add(&self.dropped_not_reading, 1),
            Unsent::SocketClosed => add(&self.dropped_socket_closed, 1),
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> DisplaySnapshot {
        DisplaySnapshot {
            sockets: get(&self.sockets),
            scanouts: get(&self.scanouts),
            updates: get(&self.updates),
            update_bytes: get(&self.update_bytes),
            streamed_bands: get(&self.streamed_bands),
            streamed_bytes: get(&self.streamed_bytes),
            cursor_images: get(&self.cursor_images),
            cursor_moves: get(&self.cursor_moves),
            cursor_hides: get(&self.cursor_hides),
            dropped_not_reading: get(&self.dropped_not_reading),
            dropped_socket_closed: get(&self.dropped_socket_closed),
        }
    }
}

/// What the display sent to QEMU, as plain values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisplaySnapshot {
    /// Display sockets QEMU handed over (one per device start).
    pub sockets: u64,
    /// SCANOUT messages.
    pub scanouts: u64,
    /// UPDATE messages sent at flushes and vblanks.
    pub updates: u64,
    /// Their pixel bytes.
    pub update_bytes: u64,
    /// UPDATE messages of bands that large transfers streamed.
    pub streamed_bands: u64,
    /// Their pixel bytes.
    pub streamed_bytes: u64,
    /// CURSOR_UPDATE messages.
    pub cursor_images: u64,
    /// CURSOR_POS messages.
    pub cursor_moves: u64,
    /// CURSOR_POS_HIDE messages.
    pub cursor_hides: u64,
    /// Messages dropped because QEMU was not reading (the next flush repaints).
    pub dropped_not_reading: u64,
    /// Messages dropped because the socket had closed.
    pub dropped_socket_closed: u64,
}
