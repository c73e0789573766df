//! The driver's side of GPU virtual addressing (WDDM 2.x GpuMmu): the geometry read from capset
//! 62 and checked with the ABI's one validator, the `DXGK_GPUMMUCAPS` and
//! `DXGK_PAGE_TABLE_LEVEL_DESC` a KMD returns for `DXGKQAITYPE_GPUMMUCAPS` (13) and
//! `DXGKQAITYPE_PAGETABLELEVELDESC` (14), and the `DmaPageFaulted` payload of
//! `DXGKARGCB_NOTIFY_INTERRUPT_DATA` made from a device page-fault record.
//!
//! The DXGK structures are byte-exact x64 mirrors (field order and types from `d3dkmddi.h` of
//! the Windows 10 SDK 10.0.16299 and the WDK documentation pages `_DXGK_GPUMMUCAPS`,
//! `_DXGK_PAGE_TABLE_LEVEL_DESC` and `_DXGKARGCB_NOTIFY_INTERRUPT_DATA`; the C device library
//! mirrors them too, checked against the WDK's own types in its Windows layer); the sizes and
//! offsets are asserted at compile time.

use std::mem::{offset_of, size_of};

use wddm_gpu_abi::context::WddmGpuPageFaultRecord;
use wddm_gpu_abi::gpummu_rules::{validate_gpummu, MmuGeometry};
use wddm_gpu_abi::gpuva::{WddmGpuMmuCaps, WDDM_GPU_MMU_CAPSET_ID, WDDM_GPU_MMU_CAPSET_VERSION};
use zerocopy::FromBytes;

use crate::caps::Layout;
use crate::driver::Device;
use crate::failure::{Failure, Outcome};

/// `DXGK_GPUMMUCAPS` (x64: 24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxgkGpuMmuCaps {
    /// The flag union's `Value`.
    pub flags: u32,
    /// `PageTableUpdateMode` (`DXGK_PAGETABLEUPDATEMODE`).
    pub page_table_update_mode: u32,
    /// `VirtualAddressBitCount`.
    pub virtual_address_bit_count: u32,
    /// `LeafPageTableSizeFor64KPagesInBytes`.
    pub leaf_page_table_size_for_64k_pages_in_bytes: u32,
    /// `PageTableLevelCount`.
    pub page_table_level_count: u32,
    /// `LegacyBehaviors` (`SourcePageTableVaInTransfer` is bit 0): 0.
    pub legacy_behaviors: u32,
}

const _: () = {
    assert!(size_of::<DxgkGpuMmuCaps>() == 24);
    assert!(offset_of!(DxgkGpuMmuCaps, page_table_update_mode) == 4);
    assert!(offset_of!(DxgkGpuMmuCaps, leaf_page_table_size_for_64k_pages_in_bytes) == 12);
    assert!(offset_of!(DxgkGpuMmuCaps, legacy_behaviors) == 20);
};

/// `DXGK_PAGE_TABLE_LEVEL_DESC` (x64: 20 bytes, five `UINT`s; `PageTableAlignmentInBytes` is
/// the WDDM 2.x SDK's addition after the four the WDK page shows).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxgkPageTableLevelDesc {
    /// `PageTableIndexBitCount`.
    pub page_table_index_bit_count: u32,
    /// `PageTableSegmentId`.
    pub page_table_segment_id: u32,
    /// `PagingProcessPageTableSegmentId`.
    pub paging_process_page_table_segment_id: u32,
    /// `PageTableSizeInBytes`.
    pub page_table_size_in_bytes: u32,
    /// `PageTableAlignmentInBytes`.
    pub page_table_alignment_in_bytes: u32,
}

const _: () = {
    assert!(size_of::<DxgkPageTableLevelDesc>() == 20);
    assert!(offset_of!(DxgkPageTableLevelDesc, paging_process_page_table_segment_id) == 8);
    assert!(offset_of!(DxgkPageTableLevelDesc, page_table_size_in_bytes) == 12);
    assert!(offset_of!(DxgkPageTableLevelDesc, page_table_alignment_in_bytes) == 16);
};

/// `DXGK_PRIMITIVE_API_SEQUENCE_NUMBER_UNKNOWN`.
pub const DXGK_PRIMITIVE_API_SEQUENCE_NUMBER_UNKNOWN: u64 = u64::MAX;
/// `DXGK_BIND_TABLE_ENTRY_UNKNOWN`.
pub const DXGK_BIND_TABLE_ENTRY_UNKNOWN: u32 = u32::MAX;
/// `DXGK_RENDER_PIPELINE_STAGE_UNKNOWN`.
pub const DXGK_RENDER_PIPELINE_STAGE_UNKNOWN: u32 = 0;

/// `DXGKARGCB_NOTIFY_INTERRUPT_DATA.DmaPageFaulted` (x64: 64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxgkDmaPageFaulted {
    /// `FaultedFenceId`.
    pub faulted_fence_id: u32,
    /// Alignment padding.
    pub padding0: u32,
    /// `FaultedPrimitiveAPISequenceNumber`.
    pub faulted_primitive_api_sequence_number: u64,
    /// `FaultedPipelineStage` (`DXGK_RENDER_PIPELINE_STAGE`).
    pub faulted_pipeline_stage: u32,
    /// `FaultedBindTableEntry`.
    pub faulted_bind_table_entry: u32,
    /// `PageFaultFlags` (`DXGK_PAGE_FAULT_FLAGS`).
    pub page_fault_flags: u32,
    /// Alignment padding.
    pub padding1: u32,
    /// `FaultedVirtualAddress`.
    pub faulted_virtual_address: u64,
    /// `NodeOrdinal`.
    pub node_ordinal: u32,
    /// `EngineOrdinal`.
    pub engine_ordinal: u32,
    /// `PageTableLevel`.
    pub page_table_level: u32,
    /// `FaultErrorCode.Value`.
    pub fault_error_code: u32,
    /// `FaultedProcessHandle` (NULL: the device does not know the process).
    pub faulted_process_handle: u64,
}

const _: () = {
    assert!(size_of::<DxgkDmaPageFaulted>() == 64);
    assert!(offset_of!(DxgkDmaPageFaulted, faulted_primitive_api_sequence_number) == 8);
    assert!(offset_of!(DxgkDmaPageFaulted, faulted_pipeline_stage) == 16);
    assert!(offset_of!(DxgkDmaPageFaulted, page_fault_flags) == 24);
    assert!(offset_of!(DxgkDmaPageFaulted, faulted_virtual_address) == 32);
    assert!(offset_of!(DxgkDmaPageFaulted, node_ordinal) == 40);
    assert!(offset_of!(DxgkDmaPageFaulted, page_table_level) == 48);
    assert!(offset_of!(DxgkDmaPageFaulted, fault_error_code) == 52);
    assert!(offset_of!(DxgkDmaPageFaulted, faulted_process_handle) == 56);
};

/// What an ISR reports for a page fault the device recorded.
pub fn dma_page_faulted(record: &WddmGpuPageFaultRecord) -> DxgkDmaPageFaulted {
    DxgkDmaPageFaulted {
        faulted_fence_id: record.fence_id,
        faulted_primitive_api_sequence_number: DXGK_PRIMITIVE_API_SEQUENCE_NUMBER_UNKNOWN,
        faulted_pipeline_stage: DXGK_RENDER_PIPELINE_STAGE_UNKNOWN,
        faulted_bind_table_entry: DXGK_BIND_TABLE_ENTRY_UNKNOWN,
        page_fault_flags: record.flags,
        faulted_virtual_address: record.fault.virtual_address,
        node_ordinal: record.node_ordinal,
        engine_ordinal: 0,
        page_table_level: record.fault.page_table_level,
        fault_error_code: record.error_code,
        ..DxgkDmaPageFaulted::default()
    }
}

/// The device's GpuMmu, as a KMD learns it at start.
#[derive(Clone, Copy, Debug)]
pub struct GpuMmu {
    /// The checked geometry.
    pub geometry: MmuGeometry,
}

impl GpuMmu {
    /// Reads capset 62 (capset index 1) and checks it against the segments of `layout`.
    pub fn read(device: &mut Device, layout: &Layout) -> Outcome<Self> {
        if device.num_capsets < 2 {
            return Err(Failure(format!(
                "num_capsets is {}: the layout has no GpuMmu",
                device.num_capsets
            )));
        }
        let info = device.control.capset_info(1)?;
        if (info.capset_id, info.capset_max_version)
            != (WDDM_GPU_MMU_CAPSET_ID, WDDM_GPU_MMU_CAPSET_VERSION)
        {
            return Err(Failure(format!(
                "capset 1 is id {} version {}, not the GpuMmu capset",
                info.capset_id, info.capset_max_version
            )));
        }
        let blob = device.control.capset(
            WDDM_GPU_MMU_CAPSET_ID,
            WDDM_GPU_MMU_CAPSET_VERSION,
            info.capset_max_size,
        )?;
        let (caps, _) = WddmGpuMmuCaps::read_from_prefix(&blob)
            .map_err(|_| Failure(format!("GpuMmu capset of {} bytes is short", blob.len())))?;
        let flags: Vec<u32> = layout.segments.iter().map(|s| s.desc.flags).collect();
        let geometry = validate_gpummu(&caps, &flags)
            .map_err(|rule| Failure(format!("GpuMmu capset refused ({}): {rule}", rule.name())))?;
        Ok(Self { geometry })
    }

    /// `DxgkDdiQueryAdapterInfo(DXGKQAITYPE_GPUMMUCAPS)`.
    pub fn dxgk_caps(&self) -> DxgkGpuMmuCaps {
        let caps = self.geometry.caps();
        DxgkGpuMmuCaps {
            flags: caps.flags,
            page_table_update_mode: caps.page_table_update_mode,
            virtual_address_bit_count: caps.virtual_address_bit_count,
            leaf_page_table_size_for_64k_pages_in_bytes: caps.leaf_page_table_size_for_64k_pages,
            page_table_level_count: caps.page_table_level_count,
            legacy_behaviors: 0,
        }
    }

    /// `DxgkDdiQueryAdapterInfo(DXGKQAITYPE_PAGETABLELEVELDESC)` for `LevelIndex` `level`;
    /// `None` past the levels or when a size does not fit the structure's `UINT`.
    pub fn dxgk_level(&self, level: u32) -> Option<DxgkPageTableLevelDesc> {
        self.geometry.level(level)?;
        let desc = self.geometry.caps().levels.get(level as usize)?;
        Some(DxgkPageTableLevelDesc {
            page_table_index_bit_count: desc.page_table_index_bit_count,
            page_table_segment_id: desc.page_table_segment_id,
            paging_process_page_table_segment_id: desc.paging_process_page_table_segment_id,
            page_table_size_in_bytes: u32::try_from(desc.page_table_size_in_bytes).ok()?,
            page_table_alignment_in_bytes: u32::try_from(desc.page_table_alignment_in_bytes)
                .ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::gpuva::WddmGpuMmuFault;

    use super::*;

    #[test]
    fn a_fault_record_becomes_the_dma_page_faulted_payload() {
        let record = WddmGpuPageFaultRecord {
            sequence: 2,
            fault: WddmGpuMmuFault {
                virtual_address: 0x12_3401_0008,
                kind: 1,
                page_table_level: 0,
                access: 1,
                reserved: 0,
                entry: 0,
            },
            fence_id: 90,
            flags: 0x9,
            node_ordinal: 1,
            context_id: 3,
            error_code: 0,
            packet_offset: 32,
        };
        let payload = dma_page_faulted(&record);
        assert_eq!(payload.faulted_fence_id, 90);
        assert_eq!(payload.faulted_virtual_address, 0x12_3401_0008);
        assert_eq!(payload.page_fault_flags, 0x9);
        assert_eq!(payload.node_ordinal, 1);
        assert_eq!(payload.page_table_level, 0);
        assert_eq!(payload.faulted_bind_table_entry, u32::MAX);
        assert_eq!(payload.faulted_primitive_api_sequence_number, u64::MAX);
        assert_eq!(payload.faulted_process_handle, 0);
    }
}
