//! Packet pieces for tests, over the ABI crate's builders ([`wddm_gpu_abi::build`]): endpoints,
//! the two MAP_APERTURE2 forms into the default aperture, and a packet's bytes.

use wddm_gpu_abi::build::{self, Adl, Endpoint};
use wddm_gpu_abi::packet::WddmGpuPacketMapAperture2;
use zerocopy::{Immutable, IntoBytes};

/// The default layout's BAR VRAM segment.
pub const VRAM_SEGMENT: u32 = 1;
/// The default layout's aperture segment.
pub const APERTURE_SEGMENT: u32 = 2;

/// A packet's wire bytes.
pub fn packet_bytes<T: IntoBytes + Immutable>(packet: T) -> Vec<u8> {
    packet.as_bytes().to_vec()
}

/// A GPU address in segment `id`.
pub fn seg(id: u32, address: u64) -> Endpoint {
    Endpoint::Segment { id, address }
}

/// An offset in the BAR VRAM segment.
pub fn in_vram(offset: u64) -> Endpoint {
    seg(VRAM_SEGMENT, offset)
}

/// An offset in the default aperture.
pub fn in_aperture(offset: u64) -> Endpoint {
    seg(APERTURE_SEGMENT, offset)
}

/// Guest pages listed at `list`, starting `byte_offset` bytes into the first.
pub fn frames(list: u64, frame_count: u32, byte_offset: u32) -> Endpoint {
    Endpoint::Frames {
        list_address: list,
        frame_count,
        byte_offset,
    }
}

/// MAP_APERTURE2 into the default aperture, contiguous form: pages `first_page..` get frames
/// `base_page + adl_offset..`.
pub fn map2_contiguous(
    first_page: u64,
    page_count: u64,
    base_page: u64,
    adl_page_count: u32,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    let adl = Adl::Contiguous {
        base_page,
        page_count: adl_page_count,
    };
    build::map_aperture2(APERTURE_SEGMENT, 0, first_page, page_count, adl, adl_offset)
}

/// MAP_APERTURE2 into the default aperture, page-array form (the array at `list`).
pub fn map2_pages(
    first_page: u64,
    page_count: u64,
    list: u64,
    adl_page_count: u32,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    let adl = Adl::Pages {
        address: list,
        page_count: adl_page_count,
    };
    build::map_aperture2(APERTURE_SEGMENT, 0, first_page, page_count, adl, adl_offset)
}
