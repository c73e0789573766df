//! Building DMA buffers of paging packets (`wddm_gpu_abi::packet`), as `DxgkDdiBuildPagingBuffer`
//! would. Packets are built as wire structs so hostile tests can corrupt any field afterwards.

use std::mem::size_of;

use wddm_gpu_abi::packet::{
    WddmGpuEndpoint, WddmGpuPacketHeader, WddmGpuPacketTransfer, WDDM_GPU_OP_TRANSFER,
    WDDM_GPU_PACKET_ALIGN,
};
use zerocopy::IntoBytes;

/// One side of a TRANSFER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A GPU address inside a segment (`BaseAddress` + offset).
    Segment { id: u32, address: u64 },
    /// Guest pages listed in a PFN array at guest-physical `list_address`.
    Frames {
        list_address: u64,
        frame_count: u32,
        byte_offset: u32,
    },
}

impl Endpoint {
    /// The wire form.
    pub fn to_wire(self) -> WddmGpuEndpoint {
        match self {
            Self::Segment { id, address } => WddmGpuEndpoint {
                segment_id: id,
                address,
                ..Default::default()
            },
            Self::Frames {
                list_address,
                frame_count,
                byte_offset,
            } => WddmGpuEndpoint {
                segment_id: 0,
                frame_count,
                address: list_address,
                byte_offset,
                reserved: 0,
            },
        }
    }
}

/// A well-formed TRANSFER packet.
pub fn transfer(length: u64, source: Endpoint, destination: Endpoint) -> WddmGpuPacketTransfer {
    WddmGpuPacketTransfer {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_TRANSFER,
            flags: 0,
            size: size_of::<WddmGpuPacketTransfer>() as u32,
        },
        length,
        source: source.to_wire(),
        destination: destination.to_wire(),
    }
}

/// Accumulates packets into the bytes of one DMA buffer.
#[derive(Clone, Debug, Default)]
pub struct DmaBufferBuilder {
    bytes: Vec<u8>,
}

impl DmaBufferBuilder {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a TRANSFER packet as is; returns its offset.
    pub fn push_transfer(&mut self, packet: &WddmGpuPacketTransfer) -> u32 {
        self.push_raw(packet.as_bytes())
    }

    /// Appends raw bytes, padded to the packet alignment; returns their offset.
    pub fn push_raw(&mut self, bytes: &[u8]) -> u32 {
        let offset = self.bytes.len() as u32;
        self.bytes.extend_from_slice(bytes);
        let align = WDDM_GPU_PACKET_ALIGN as usize;
        self.bytes
            .resize(self.bytes.len().div_ceil(align) * align, 0);
        offset
    }

    /// Bytes so far (the natural `end_offset`).
    pub fn len(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// True when no packet was added.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The buffer contents.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    #[test]
    fn transfer_packet_wire_layout() {
        let p = transfer(
            0x10_007b,
            Endpoint::Segment {
                id: 1,
                address: 0x1000,
            },
            Endpoint::Frames {
                list_address: 0x20_0000,
                frame_count: 258,
                byte_offset: 0x321,
            },
        );
        let bytes = p.as_bytes();
        assert_eq!(bytes.len(), 64);
        assert_eq!(&bytes[0..2], &WDDM_GPU_OP_TRANSFER.to_le_bytes());
        assert_eq!(&bytes[4..8], &64u32.to_le_bytes());
        assert_eq!(&bytes[8..16], &0x10_007bu64.to_le_bytes());
        // Source: segment 1, no frames, GPU address 0x1000.
        assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
        assert_eq!(&bytes[20..24], &0u32.to_le_bytes());
        assert_eq!(&bytes[24..32], &0x1000u64.to_le_bytes());
        // Destination: frame list.
        assert_eq!(&bytes[40..44], &0u32.to_le_bytes());
        assert_eq!(&bytes[44..48], &258u32.to_le_bytes());
        assert_eq!(&bytes[48..56], &0x20_0000u64.to_le_bytes());
        assert_eq!(&bytes[56..60], &0x321u32.to_le_bytes());
        assert_eq!(&bytes[60..64], &0u32.to_le_bytes());
    }

    #[test]
    fn builder_tracks_offsets_and_alignment() {
        let mut b = DmaBufferBuilder::new();
        assert!(b.is_empty());
        let p = transfer(
            0,
            Endpoint::Segment { id: 1, address: 0 },
            Endpoint::Segment { id: 1, address: 8 },
        );
        assert_eq!(b.push_transfer(&p), 0);
        assert_eq!(b.push_raw(&[1, 2, 3]), 64);
        assert_eq!(b.push_transfer(&p), 72);
        assert_eq!(b.len(), 136);
        let (again, _) = WddmGpuPacketTransfer::read_from_prefix(&b.bytes()[72..]).unwrap();
        assert_eq!(again, p);
    }
}
