//! The split virtqueue (virtio 1.2, 2.7) a driver sets up through the common configuration
//! ([`crate::pci`]): the descriptor table, the available (driver) ring and the used (device)
//! ring, each in guest memory at the address the driver writes to `queue_desc`, `queue_driver`
//! and `queue_device`. All fields are little-endian.
//!
//! The available ring of a queue of `n` entries is `flags`, `idx`, `ring[n]` (le16 each), then
//! `used_event`; the used ring is `flags`, `idx` (le16), `n` [`WddmGpuVirtqUsedElem`], then
//! `avail_event`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `VIRTQ_DESC_F_NEXT`: the buffer continues in the descriptor `next` names (virtio 1.2, 2.7.5).
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// `VIRTQ_DESC_F_WRITE`: the device writes the buffer rather than reads it (virtio 1.2, 2.7.5).
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// `VIRTQ_DESC_F_INDIRECT`: the buffer is a table of descriptors (virtio 1.2, 2.7.5.3).
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: available-ring `flags` bit asking the device not to interrupt
/// when it uses buffers (virtio 1.2, 2.7.7).
pub const VIRTQ_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// `VIRTQ_USED_F_NO_NOTIFY`: used-ring `flags` bit telling the driver it need not notify the
/// device of new buffers (virtio 1.2, 2.7.10).
pub const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;

/// Alignment of the descriptor table in guest memory (virtio 1.2, 2.7 "Virtqueue Alignment").
pub const VIRTQ_DESC_ALIGN: usize = 16;
/// Alignment of the available ring in guest memory (virtio 1.2, 2.7).
pub const VIRTQ_AVAIL_ALIGN: usize = 2;
/// Alignment of the used ring in guest memory (virtio 1.2, 2.7).
pub const VIRTQ_USED_ALIGN: usize = 4;
/// Offset of `idx` in the available and in the used ring, after the le16 `flags` (virtio 1.2,
/// 2.7.6 and 2.7.8).
pub const VIRTQ_RING_IDX_OFFSET: usize = 2;
/// Offset of the first entry (`ring[0]`) in the available and in the used ring, after `flags`
/// and `idx` (virtio 1.2, 2.7.6 and 2.7.8).
pub const VIRTQ_RING_ENTRIES_OFFSET: usize = 4;
/// Bytes of one available-ring entry: the le16 head of a descriptor chain (virtio 1.2, 2.7.6).
pub const VIRTQ_AVAIL_ENTRY_SIZE: usize = 2;
/// Bytes after the last entry of either ring: `used_event` or `avail_event`, le16 (virtio 1.2,
/// 2.7.6 and 2.7.8).
pub const VIRTQ_RING_EVENT_SIZE: usize = 2;

/// `struct virtq_desc`: one entry of the descriptor table (virtio 1.2, 2.7.5).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct WddmGpuVirtqDesc {
    /// Guest-physical address of the buffer.
    pub addr: u64,
    /// Length of the buffer in bytes.
    pub len: u32,
    /// `VIRTQ_DESC_F_*`.
    pub flags: u16,
    /// The next descriptor of the chain, with `VIRTQ_DESC_F_NEXT`.
    pub next: u16,
}

/// `struct virtq_used_elem`: one entry of the used ring (virtio 1.2, 2.7.8).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct WddmGpuVirtqUsedElem {
    /// Head descriptor of the chain the device used (le32, although descriptor indexes are
    /// 16-bit).
    pub id: u32,
    /// Bytes the device wrote into the chain's device-writable buffers.
    pub len: u32,
}
