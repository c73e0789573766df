//! Builds the segment-layout capability-set blob (see `wddm_gpu_abi::caps`) from the layout and
//! the current VRAM BAR locator.

use std::mem::size_of;

use wddm_gpu_abi::caps::{
    WddmGpuCapsHeader, WddmGpuSegmentDesc, WddmGpuVramBar, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_CAPSET_VERSION, WDDM_GPU_CAPS_MAGIC, WDDM_GPU_NO_BAR_OFFSET,
};
use wddm_gpu_abi::packet::{WDDM_GPU_MAX_FRAME_LIST_ENTRIES, WDDM_GPU_MAX_PACKET_SIZE};
use wddm_gpu_abi::size_of_u32;
use zerocopy::IntoBytes;

use crate::layout::{SegmentKind, SegmentLayout};

/// Largest blob: 31 segments with 127 banks each.
pub const MAX_CAPSET_SIZE: u32 = size_of_u32::<WddmGpuCapsHeader>()
    + 31 * size_of_u32::<WddmGpuSegmentDesc>()
    + 31 * 127 * size_of_u32::<u64>();

/// Serializes the layout and BAR locator.
pub fn build_capset(layout: &SegmentLayout, bar: &WddmGpuVramBar) -> Vec<u8> {
    let header_size = size_of::<WddmGpuCapsHeader>();
    let desc_size = size_of::<WddmGpuSegmentDesc>();
    let segments_offset = header_size;
    let bank_table_offset = segments_offset + layout.segments.len() * desc_size;
    let bank_entries: usize = layout.segments.iter().map(|s| s.banks.len()).sum();
    let total = bank_table_offset + bank_entries * size_of::<u64>();

    let bar_address = (bar.state == WDDM_GPU_BAR_STATE_KNOWN).then_some(bar.guest_physical_address);
    // Layouts are validated at start-up (at most 31 segments, 127 banks each), so every count
    // and offset below fits in u32.
    let as_u32 = |value: usize| u32::try_from(value).unwrap_or(u32::MAX);
    let header = WddmGpuCapsHeader {
        magic: WDDM_GPU_CAPS_MAGIC,
        version: WDDM_GPU_CAPSET_VERSION,
        total_size: as_u32(total),
        wddm_version: layout.wddm_version,
        segment_count: as_u32(layout.segments.len()),
        segment_desc_size: as_u32(desc_size),
        segments_offset: as_u32(segments_offset),
        bank_table_offset: as_u32(bank_table_offset),
        bank_entry_count: as_u32(bank_entries),
        paging_buffer_segment_id: layout.paging_buffer_segment_id,
        paging_buffer_size: layout.paging_buffer_size,
        paging_buffer_private_data_size: layout.paging_buffer_private_data_size,
        max_frame_list_entries: WDDM_GPU_MAX_FRAME_LIST_ENTRIES,
        max_packet_size: WDDM_GPU_MAX_PACKET_SIZE,
        vram_bar: *bar,
    };

    let mut blob = Vec::with_capacity(total);
    blob.extend_from_slice(header.as_bytes());
    let mut bank_index = 0usize;
    for segment in &layout.segments {
        let (bar_offset, cpu_translated_address) = match segment.kind {
            SegmentKind::Memory {
                bar_offset: Some(bar_offset),
                ..
            } => (
                bar_offset,
                bar_address.map_or(0, |base| base.wrapping_add(bar_offset)),
            ),
            SegmentKind::Memory {
                bar_offset: None, ..
            }
            | SegmentKind::Aperture => (WDDM_GPU_NO_BAR_OFFSET, 0),
        };
        let desc = WddmGpuSegmentDesc {
            id: segment.id,
            flags: segment.flags.bits(),
            base_address: segment.base_address,
            size: segment.size,
            commit_limit: segment.commit_limit,
            bar_offset,
            cpu_translated_address,
            system_memory_end_address: segment.system_memory_end_address,
            bank_count: as_u32(segment.banks.len()),
            bank_table_index: as_u32(bank_index),
        };
        blob.extend_from_slice(desc.as_bytes());
        bank_index += segment.banks.len();
    }
    for segment in &layout.segments {
        for bank_end in &segment.banks {
            blob.extend_from_slice(&bank_end.to_le_bytes());
        }
    }
    blob
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::caps::{WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_STATE_NOT_MAPPED};
    use zerocopy::FromBytes;

    use super::*;

    fn bar(state: u32) -> WddmGpuVramBar {
        WddmGpuVramBar {
            mode: WDDM_GPU_BAR_MODE_IVSHMEM,
            state,
            generation: 4,
            pci_function: 1,
            bar_index: 2,
            reserved: 0,
            guest_physical_address: 0xe000_0000,
            size: 1 << 28,
        }
    }

    #[test]
    fn cpu_translated_address_is_bar_plus_offset_only_while_known() {
        let layout = SegmentLayout::default_for_vram(1 << 28);
        for (state, expected) in [
            (WDDM_GPU_BAR_STATE_KNOWN, 0xe000_0000),
            (WDDM_GPU_BAR_STATE_NOT_MAPPED, 0),
        ] {
            let blob = build_capset(&layout, &bar(state));
            let (header, rest) = WddmGpuCapsHeader::read_from_prefix(&blob).unwrap();
            assert_eq!(header.total_size as usize, blob.len());
            assert_eq!(header.segment_count, 2);
            let (vram, rest) = WddmGpuSegmentDesc::read_from_prefix(rest).unwrap();
            let (aperture, _) = WddmGpuSegmentDesc::read_from_prefix(rest).unwrap();
            assert_eq!(vram.cpu_translated_address, expected);
            assert_eq!(vram.bar_offset, 0);
            assert_eq!(vram.flags, 0x4);
            assert_eq!(aperture.flags, 0x11);
            assert_eq!(aperture.bar_offset, WDDM_GPU_NO_BAR_OFFSET);
            assert_eq!(aperture.size, 512 << 20);
        }
    }
}
