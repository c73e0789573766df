//! Building DMA buffers of paging packets ([`crate::packet`]), as `DxgkDdiBuildPagingBuffer`
//! would: the guest driver, the backend's tests, benchmark and fuzz seeds all build them here.
//! Packets are built as wire structs so hostile tests can corrupt any field afterwards.

pub mod display;
pub mod gpuva;
pub mod page_tables;

use zerocopy::{Immutable, IntoBytes};

use crate::packet::{
    WddmGpuEndpoint, WddmGpuPacketFence, WddmGpuPacketFill, WddmGpuPacketHeader,
    WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2, WddmGpuPacketSegmentAccess,
    WddmGpuPacketTransfer, WddmGpuPacketUnmapAperture, WDDM_GPU_ADL_FLAG_CONTIGUOUS,
    WDDM_GPU_OP_FENCE, WDDM_GPU_OP_FILL, WDDM_GPU_OP_MAP_APERTURE, WDDM_GPU_OP_MAP_APERTURE2,
    WDDM_GPU_OP_TRANSFER, WDDM_GPU_OP_UNMAP_APERTURE, WDDM_GPU_PACKET_ALIGN,
};
use crate::size_of_u32;

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
            size: size_of_u32::<WddmGpuPacketTransfer>(),
        },
        length,
        source: source.to_wire(),
        destination: destination.to_wire(),
    }
}

pub(crate) fn header<T>(opcode: u16) -> WddmGpuPacketHeader {
    WddmGpuPacketHeader {
        opcode,
        flags: 0,
        size: size_of_u32::<T>(),
    }
}

/// FILL (`DXGK_OPERATION_FILL`): `length` bytes of memory-segment `destination` get `pattern`.
pub fn fill(pattern: u32, length: u64, destination: Endpoint) -> WddmGpuPacketFill {
    WddmGpuPacketFill {
        header: header::<WddmGpuPacketFill>(WDDM_GPU_OP_FILL),
        pattern,
        reserved: 0,
        length,
        destination: destination.to_wire(),
    }
}

/// DISCARD_CONTENT, READ_PHYSICAL or WRITE_PHYSICAL (`opcode`) at a segment address;
/// `flags_or_size` is the discard flags or the access size.
pub fn segment_access(
    opcode: u16,
    segment_id: u32,
    address: u64,
    flags_or_size: u32,
) -> WddmGpuPacketSegmentAccess {
    WddmGpuPacketSegmentAccess {
        header: header::<WddmGpuPacketSegmentAccess>(opcode),
        segment_id,
        flags_or_size,
        address,
    }
}

/// MAP_APERTURE_SEGMENT: aperture pages `first_page..first_page + page_count` map the entries
/// `frame_offset..` of the `frame_count`-entry PFN array at `frame_list_address`.
pub fn map_aperture(
    segment_id: u32,
    flags: u32,
    first_page: u64,
    page_count: u64,
    frame_list_address: u64,
    frame_count: u32,
    frame_offset: u32,
) -> WddmGpuPacketMapAperture {
    WddmGpuPacketMapAperture {
        header: header::<WddmGpuPacketMapAperture>(WDDM_GPU_OP_MAP_APERTURE),
        segment_id,
        flags,
        first_page,
        page_count,
        frame_list_address,
        frame_count,
        frame_offset,
    }
}

/// The `DXGK_ADL` a MAP_APERTURE_SEGMENT2 maps from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adl {
    /// `Contiguous`: `page_count` pages from frame `base_page` on.
    Contiguous { base_page: u64, page_count: u32 },
    /// A page array of `page_count` PFNs at guest-physical `address`.
    Pages { address: u64, page_count: u32 },
}

/// MAP_APERTURE_SEGMENT2: aperture pages `first_page..first_page + page_count` map the ADL's
/// pages from `adl_offset` on.
pub fn map_aperture2(
    segment_id: u32,
    flags: u32,
    first_page: u64,
    page_count: u64,
    adl: Adl,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    let (adl_flags, adl_base, adl_page_count) = match adl {
        Adl::Contiguous {
            base_page,
            page_count,
        } => (WDDM_GPU_ADL_FLAG_CONTIGUOUS, base_page, page_count),
        Adl::Pages {
            address,
            page_count,
        } => (0, address, page_count),
    };
    WddmGpuPacketMapAperture2 {
        header: header::<WddmGpuPacketMapAperture2>(WDDM_GPU_OP_MAP_APERTURE2),
        segment_id,
        flags,
        first_page,
        page_count,
        adl_flags,
        adl_offset,
        adl_base,
        adl_page_count,
        reserved: 0,
    }
}

/// UNMAP_APERTURE_SEGMENT: the pages then map `dummy_page`.
pub fn unmap_aperture(
    segment_id: u32,
    first_page: u64,
    page_count: u64,
    dummy_page: u64,
) -> WddmGpuPacketUnmapAperture {
    WddmGpuPacketUnmapAperture {
        header: header::<WddmGpuPacketUnmapAperture>(WDDM_GPU_OP_UNMAP_APERTURE),
        segment_id,
        reserved: 0,
        first_page,
        page_count,
        dummy_page,
    }
}

/// FENCE: `fence_id` is reported completed when the packet executes.
pub fn fence(fence_id: u32) -> WddmGpuPacketFence {
    WddmGpuPacketFence {
        header: header::<WddmGpuPacketFence>(WDDM_GPU_OP_FENCE),
        fence_id,
        reserved: 0,
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

    /// Appends any packet struct as is; returns its offset.
    pub fn push<T: IntoBytes + Immutable>(&mut self, packet: &T) -> u32 {
        self.push_raw(packet.as_bytes())
    }

    /// Appends raw bytes, padded to the packet alignment; returns their offset.
    pub fn push_raw(&mut self, bytes: &[u8]) -> u32 {
        let offset = self.len();
        self.bytes.extend_from_slice(bytes);
        let align = WDDM_GPU_PACKET_ALIGN as usize;
        self.bytes
            .resize(self.bytes.len().div_ceil(align) * align, 0);
        offset
    }

    /// Bytes so far (the natural `end_offset`). A buffer past 4 GiB (far over
    /// `WDDM_GPU_MAX_DMA_BUFFER_SIZE`) says `u32::MAX`, an offset the device refuses.
    pub fn len(&self) -> u32 {
        u32::try_from(self.bytes.len()).unwrap_or(u32::MAX)
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
    use zerocopy::FromBytes;

    use super::*;

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
    fn paging_packet_wire_layouts() {
        let f = fill(0xa1b2_c3d4, 0x1003, Endpoint::Segment { id: 2, address: 8 });
        let bytes = f.as_bytes();
        assert_eq!(bytes.len(), 48);
        assert_eq!(&bytes[0..2], &WDDM_GPU_OP_FILL.to_le_bytes());
        assert_eq!(&bytes[4..8], &48u32.to_le_bytes());
        assert_eq!(&bytes[8..12], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&bytes[16..24], &0x1003u64.to_le_bytes());
        assert_eq!(&bytes[24..28], &2u32.to_le_bytes());

        let a = segment_access(4, 1, 0x1234, 8);
        assert_eq!(a.as_bytes().len(), 24);
        assert_eq!(a.header.size, 24);
        assert_eq!(&a.as_bytes()[8..12], &1u32.to_le_bytes());
        assert_eq!(&a.as_bytes()[12..16], &8u32.to_le_bytes());
        assert_eq!(&a.as_bytes()[16..24], &0x1234u64.to_le_bytes());

        let m = map_aperture(2, 1, 0x10, 3, 0x20_0000, 5, 2);
        let bytes = m.as_bytes();
        assert_eq!((bytes.len(), m.header.size), (48, 48));
        assert_eq!(&bytes[0..2], &WDDM_GPU_OP_MAP_APERTURE.to_le_bytes());
        assert_eq!(&bytes[16..24], &0x10u64.to_le_bytes());
        assert_eq!(&bytes[24..32], &3u64.to_le_bytes());
        assert_eq!(&bytes[32..40], &0x20_0000u64.to_le_bytes());
        assert_eq!(&bytes[40..44], &5u32.to_le_bytes());
        assert_eq!(&bytes[44..48], &2u32.to_le_bytes());

        let c = map_aperture2(
            2,
            0,
            7,
            4,
            Adl::Contiguous {
                base_page: 0x4_0000,
                page_count: 9,
            },
            1,
        );
        assert_eq!((c.as_bytes().len(), c.header.size), (56, 56));
        assert_eq!(c.adl_flags, WDDM_GPU_ADL_FLAG_CONTIGUOUS);
        assert_eq!(
            (c.adl_base, c.adl_page_count, c.adl_offset),
            (0x4_0000, 9, 1)
        );
        let p = map_aperture2(
            2,
            0,
            7,
            4,
            Adl::Pages {
                address: 0x30_0000,
                page_count: 6,
            },
            2,
        );
        assert_eq!(
            (p.adl_flags, p.adl_base, p.adl_page_count),
            (0, 0x30_0000, 6)
        );

        let u = unmap_aperture(2, 5, 6, 0x7000);
        assert_eq!((u.as_bytes().len(), u.header.size), (40, 40));
        assert_eq!(&u.as_bytes()[32..40], &0x7000u64.to_le_bytes());

        let fe = fence(0xfeed);
        assert_eq!((fe.as_bytes().len(), fe.header.size), (16, 16));
        assert_eq!(&fe.as_bytes()[8..12], &0xfeedu32.to_le_bytes());
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
