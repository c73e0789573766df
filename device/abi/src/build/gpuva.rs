//! Building GpuMmu geometries, page-table entries ([`crate::gpuva`]), the page-table packets,
//! the context commands and the virtual node's packets ([`crate::context`]), for the guest
//! driver, the backend's tests, benchmark and fuzz seeds.

use std::ops::Range;

use super::header;
use crate::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdResetEngine,
    WddmGpuCmdSetRootPageTable, WddmGpuCmdSubmitVirtual, WddmGpuVirtualCopy, WddmGpuVirtualFill,
    WddmGpuVirtualSignal, WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_VOP_COPY, WDDM_GPU_VOP_FILL,
    WDDM_GPU_VOP_SIGNAL,
};
use crate::ctrl::{
    WddmGpuCtrlHdr, WDDM_GPU_CMD_CREATE_CONTEXT, WDDM_GPU_CMD_DESTROY_CONTEXT,
    WDDM_GPU_CMD_RESET_ENGINE, WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE, WDDM_GPU_CMD_SUBMIT_VIRTUAL,
};
use crate::gpummu_rules::table_bytes;
use crate::gpuva::{
    WddmGpuMmuCaps, WddmGpuPageTableLevelDesc, WDDM_GPU_64KB_PAGE_INDEX_BITS,
    WDDM_GPU_MMU_CAPS_SUPPORTED, WDDM_GPU_PTE_ADDRESS_MASK, WDDM_GPU_PTE_SEGMENT_MASK,
    WDDM_GPU_PTE_SEGMENT_SHIFT, WDDM_GPU_PTE_VALID,
};
use crate::packet::{
    WddmGpuPacketFlushTlb, WddmGpuPacketUpdatePageTable, WDDM_GPU_OP_FLUSH_TLB,
    WDDM_GPU_OP_UPDATE_PAGE_TABLE, WDDM_GPU_UPDATE_FLAG_REPEAT,
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

/// Where a page table is: `segment` 0 with a guest-physical address, or an offset in a memory
/// segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableAt {
    /// 0 for system memory, else a memory segment id.
    pub segment: u32,
    /// Guest-physical address or segment offset.
    pub address: u64,
}

/// UPDATE_PAGE_TABLE of `count` entries from `start` of the level-`level` table at `table`,
/// read from the array at guest-physical `entries_address`.
pub fn update_page_table(
    level: u32,
    table: TableAt,
    start: u32,
    count: u32,
    entries_address: u64,
) -> WddmGpuPacketUpdatePageTable {
    WddmGpuPacketUpdatePageTable {
        header: header::<WddmGpuPacketUpdatePageTable>(WDDM_GPU_OP_UPDATE_PAGE_TABLE),
        flags: 0,
        page_table_level: level,
        table_segment_id: table.segment,
        start_index: start,
        table_address: table.address,
        entry_count: count,
        reserved: 0,
        entries_address,
        entry: 0,
    }
}

/// UPDATE_PAGE_TABLE with Repeat: `entry` in `count` slots from `start`.
pub fn update_page_table_repeat(
    level: u32,
    table: TableAt,
    start: u32,
    count: u32,
    entry: u64,
) -> WddmGpuPacketUpdatePageTable {
    WddmGpuPacketUpdatePageTable {
        flags: WDDM_GPU_UPDATE_FLAG_REPEAT,
        entries_address: 0,
        entry,
        ..update_page_table(level, table, start, count, 0)
    }
}

/// FLUSH_TLB of the address spaces under `root`: `range`, or everything with `None`.
pub fn flush_tlb(root: TableAt, range: Option<Range<u64>>) -> WddmGpuPacketFlushTlb {
    let range = range.unwrap_or(0..0);
    WddmGpuPacketFlushTlb {
        header: header::<WddmGpuPacketFlushTlb>(WDDM_GPU_OP_FLUSH_TLB),
        root_segment_id: root.segment,
        reserved: 0,
        root_address: root.address,
        start_virtual_address: range.start,
        end_virtual_address: range.end,
    }
}

/// CREATE_CONTEXT of `id` on `node` with `flags` (`WDDM_GPU_CONTEXT_FLAG_*`).
pub fn create_context(id: u32, node: u32, flags: u32) -> WddmGpuCmdCreateContext {
    WddmGpuCmdCreateContext {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_CREATE_CONTEXT),
        context_id: id,
        node_ordinal: node,
        flags,
        reserved: 0,
    }
}

/// DESTROY_CONTEXT of `id`.
pub fn destroy_context(id: u32) -> WddmGpuCmdDestroyContext {
    WddmGpuCmdDestroyContext {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_DESTROY_CONTEXT),
        context_id: id,
        reserved: 0,
    }
}

/// SET_ROOT_PAGE_TABLE of context `id`.
pub fn set_root_page_table(id: u32, root: TableAt, num_entries: u32) -> WddmGpuCmdSetRootPageTable {
    WddmGpuCmdSetRootPageTable {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE),
        context_id: id,
        segment_id: root.segment,
        address: root.address,
        num_entries,
        reserved: 0,
    }
}

/// SUBMIT_VIRTUAL of the whole `size`-byte buffer at GPU VA `address` of context `id`.
pub fn submit_virtual(id: u32, address: u64, size: u32, fence_id: u32) -> WddmGpuCmdSubmitVirtual {
    WddmGpuCmdSubmitVirtual {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT_VIRTUAL),
        context_id: id,
        node_ordinal: WDDM_GPU_NODE_VIRTUAL,
        dma_buffer_address: address,
        dma_buffer_size: size,
        start_offset: 0,
        end_offset: size,
        submission_fence_id: fence_id,
        flags: 0,
        reserved: 0,
    }
}

/// RESET_ENGINE of the virtual node.
pub fn reset_engine() -> WddmGpuCmdResetEngine {
    WddmGpuCmdResetEngine {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_RESET_ENGINE),
        node_ordinal: WDDM_GPU_NODE_VIRTUAL,
        reserved: 0,
    }
}

/// Virtual COPY of `length` bytes from VA `source` to VA `destination`.
pub fn virtual_copy(length: u64, source: u64, destination: u64) -> WddmGpuVirtualCopy {
    WddmGpuVirtualCopy {
        header: header::<WddmGpuVirtualCopy>(WDDM_GPU_VOP_COPY),
        length,
        source,
        destination,
    }
}

/// Virtual FILL of `length` bytes at VA `destination` with `pattern`.
pub fn virtual_fill(pattern: u32, length: u64, destination: u64) -> WddmGpuVirtualFill {
    WddmGpuVirtualFill {
        header: header::<WddmGpuVirtualFill>(WDDM_GPU_VOP_FILL),
        pattern,
        reserved: 0,
        length,
        destination,
    }
}

/// Virtual SIGNAL: `value` written at VA `address` (a monitored fence).
pub fn virtual_signal(address: u64, value: u64) -> WddmGpuVirtualSignal {
    WddmGpuVirtualSignal {
        header: header::<WddmGpuVirtualSignal>(WDDM_GPU_VOP_SIGNAL),
        value,
        address,
    }
}
