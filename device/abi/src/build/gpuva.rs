//! Building GpuMmu geometries and page-table entries ([`crate::gpuva`]), for the guest driver,
//! the backend's tests, benchmark and fuzz seeds.

use crate::gpummu_rules::table_bytes;
use crate::gpuva::{
    WddmGpuMmuCaps, WddmGpuPageTableLevelDesc, WDDM_GPU_64KB_PAGE_INDEX_BITS,
    WDDM_GPU_MMU_CAPS_SUPPORTED, WDDM_GPU_PTE_ADDRESS_MASK, WDDM_GPU_PTE_SEGMENT_MASK,
    WDDM_GPU_PTE_SEGMENT_SHIFT, WDDM_GPU_PTE_VALID,
};
use crate::WDDM_GPU_PAGE_SHIFT;

/// A geometry with `index_bits[level]` index bits per level (leaf first), every table in system
/// memory, every honoured flag set, `update_mode` updates and room for 64 contexts. Index bits
/// above 9 make system tables larger than 4 KiB, which the rules refuse: move those levels to a
/// memory segment with [`with_table_segment`].
pub fn gpummu_caps(index_bits: &[u32], update_mode: u32) -> WddmGpuMmuCaps {
    let mut caps = WddmGpuMmuCaps {
        flags: WDDM_GPU_MMU_CAPS_SUPPORTED,
        page_table_update_mode: update_mode,
        page_table_level_count: u32::try_from(index_bits.len()).unwrap_or(u32::MAX),
        max_contexts: 64,
        ..WddmGpuMmuCaps::default()
    };
    let mut address_bits = WDDM_GPU_PAGE_SHIFT;
    for (desc, &bits) in caps.levels.iter_mut().zip(index_bits) {
        *desc = WddmGpuPageTableLevelDesc {
            page_table_index_bit_count: bits,
            page_table_size_in_bytes: table_bytes(1u64 << bits.min(63)),
            ..WddmGpuPageTableLevelDesc::default()
        };
        address_bits = address_bits.saturating_add(bits);
    }
    caps.virtual_address_bit_count = address_bits;
    let leaf_bits = index_bits.first().copied().unwrap_or(0);
    let leaf_64k = table_bytes(1u64 << leaf_bits.saturating_sub(WDDM_GPU_64KB_PAGE_INDEX_BITS));
    caps.leaf_page_table_size_for_64k_pages = u32::try_from(leaf_64k).unwrap_or(u32::MAX);
    caps
}

/// `caps` with the tables of `level` (both the processes' and the paging process's) in
/// `segment`.
pub fn with_table_segment(mut caps: WddmGpuMmuCaps, level: usize, segment: u32) -> WddmGpuMmuCaps {
    if let Some(desc) = caps.levels.get_mut(level) {
        desc.page_table_segment_id = segment;
        desc.paging_process_page_table_segment_id = segment;
    }
    caps
}

/// A valid entry pointing at `address` (a guest-physical address with `segment` 0, else an
/// offset in that segment), with the extra `flags` (`WDDM_GPU_PTE_*`).
pub fn pte(segment: u32, address: u64, flags: u64) -> u64 {
    WDDM_GPU_PTE_VALID
        | flags
        | ((u64::from(segment) << WDDM_GPU_PTE_SEGMENT_SHIFT) & WDDM_GPU_PTE_SEGMENT_MASK)
        | (address & WDDM_GPU_PTE_ADDRESS_MASK)
}
