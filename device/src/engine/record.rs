//! What the engine reports of each packet it runs: a [`PacketRecord`] with the [`Traffic`] the
//! packet declared, for the statistics and the trace to count and draw.

use std::time::{Duration, Instant};

/// Which way bytes moved at one endpoint of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The packet read these bytes.
    Read,
    /// The packet wrote these bytes.
    Write,
}

/// Bytes one packet moved at one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// Segment id; 0 for guest system memory (a frame list).
    pub segment: u32,
    /// Segment GPU address of the first byte (`BaseAddress` + offset); for segment 0, the
    /// byte offset into the frame list.
    pub address: u64,
    /// Bytes.
    pub length: u64,
    /// Read or written.
    pub direction: Direction,
}

/// One packet the engine executed (completely or up to its fault).
#[derive(Clone, Copy, Debug)]
pub struct PacketRecord {
    /// `WDDM_GPU_OP_*` (unknown opcodes are recorded too).
    pub opcode: u16,
    /// Offset of the packet in its DMA buffer.
    pub dma_offset: u32,
    /// Fence of the submission the packet belongs to.
    pub fence: u32,
    /// When execution started.
    pub start: Instant,
    /// How long it ran.
    pub duration: Duration,
    /// Bytes moved (TRANSFER) or written (FILL).
    pub bytes: u64,
    /// Aperture pages mapped or unmapped (MAP_APERTURE, MAP_APERTURE2, UNMAP_APERTURE).
    pub pages: u64,
    /// Where bytes were read and written: source then destination; `None` where the packet
    /// moved no data.
    pub traffic: [Option<Traffic>; 2],
    /// The packet faulted (or was interrupted) instead of completing.
    pub faulted: bool,
}
