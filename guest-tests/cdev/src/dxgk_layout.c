/* The DXGK mirrors match the documented Windows x64 layouts (d3dkmddi.h) byte for byte. */



#include "wddm_gpu_dev.h"

_Static_assert(sizeof(void *) == 8, "the DXGK mirrors describe the x64 layout");

_Static_assert(sizeof(wddm_dxgk_segmentflags) == 4, "DXGK_SEGMENTFLAGS");

_Static_assert(sizeof(wddm_dxgk_segmentdescriptor3) == 72, "DXGK_SEGMENTDESCRIPTOR3 size");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, BaseAddress) == 8, "BaseAddress");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, CpuTranslatedAddress) == 16, "CpuTA");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, Size) == 24, "Size");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, NbOfBanks) == 32, "NbOfBanks");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, pBankRangeTable) == 40, "pBankRangeTable");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, CommitLimit) == 48, "CommitLimit");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, SystemMemoryEndAddress) == 56, "SysEnd");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor3, Reserved) == 64, "Reserved");

_Static_assert(sizeof(wddm_dxgk_querysegmentout3) == 32, "DXGK_QUERYSEGMENTOUT3 size");
_Static_assert(offsetof(wddm_dxgk_querysegmentout3, pSegmentDescriptor) == 8, "pSegDesc");
_Static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferSegmentId) == 16, "PBSegId");
_Static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferSize) == 20, "PBSize");
_Static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferPrivateDataSize) == 24, "PBPriv");

_Static_assert(sizeof(wddm_dxgk_cpuhostaperture) == 16, "DXGK_CPUHOSTAPERTURE size");

/* The DDK itself asserts 0x60 and NumUEFIFrameBufferRanges at 0x5C on _WIN64. */
_Static_assert(sizeof(wddm_dxgk_segmentdescriptor4) == 0x60, "DXGK_SEGMENTDESCRIPTOR4 size");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, BaseAddress) == 8, "BaseAddress");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, Size) == 16, "Size");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CommitLimit) == 24, "CommitLimit");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, SystemMemoryEndAddress) == 32, "SysEnd");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CpuTranslatedAddress) == 40, "CpuTA");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CpuHostAperture) == 40, "CpuHostAperture");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumInvalidMemoryRanges) == 56, "NumInv");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprRangeStartOffset) == 64, "VprStart");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprRangeSize) == 72, "VprSize");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprAlignment) == 80, "VprAlignment");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumVprSupported) == 84, "NumVpr");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprReserveSize) == 88, "VprReserve");
_Static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumUEFIFrameBufferRanges) == 0x5C, "UEFI");

_Static_assert(sizeof(wddm_dxgk_querysegmentout4) == 40, "DXGK_QUERYSEGMENTOUT4 size");
_Static_assert(offsetof(wddm_dxgk_querysegmentout4, pSegmentDescriptor) == 8, "pSegDesc");
_Static_assert(offsetof(wddm_dxgk_querysegmentout4, PagingBufferSegmentId) == 16, "PBSegId");
_Static_assert(offsetof(wddm_dxgk_querysegmentout4, PagingBufferPrivateDataSize) == 24, "PBPriv");
_Static_assert(offsetof(wddm_dxgk_querysegmentout4, SegmentDescriptorStride) == 32, "Stride");

/* The wire format the library reads and writes (wddm_gpu.h checks the rest). */
_Static_assert(sizeof(WddmGpuCtrlHdr) == 24, "ctrl header");
_Static_assert(sizeof(WddmGpuCmdSubmit) <= WDDM_SLOT_SIZE / 2, "a request fits half a slot");
_Static_assert(sizeof(WddmGpuRespEvent) <= WDDM_SLOT_SIZE / 2, "a response fits half a slot");

/* GPU virtual addressing. Sources: the Windows 10 SDK 10.0.16299 (WDDM 2.3) headers,
 * Include/10.0.16299.0/shared/d3dkmddi.h (DXGK_GPUMMUCAPS, DXGK_PAGE_TABLE_LEVEL_DESC,
 * DXGK_QUERY*IN, DXGKARGCB_NOTIFY_INTERRUPT_DATA.DmaPageFaulted) and d3dukmdt.h (DXGK_PTE),
 * and Microsoft's DDI reference pages of the same names (learn.microsoft.com,
 * windows-hardware/drivers/ddi/d3dkmddi/ns-d3dkmddi-_dxgk_gpummucaps,
 * ..._dxgk_page_table_level_desc, ..._dxgkargcb_notify_interrupt_data, d3dukmdt/
 * ns-d3dukmdt-_dxgk_pte). DXGK_GPUMMUCAPS: the UINT flag union, the DXGK_PAGETABLEUPDATEMODE
 * enum, three UINTs and the one-UINT LegacyBehaviors bit-field struct, 0x18 bytes (later
 * d3dkmddi.h versions C_ASSERT 0x18 and each offset). DXGK_PAGE_TABLE_LEVEL_DESC: five UINTs,
 * 0x14 bytes (PageTableSizeInBytes is a UINT there, not a SIZE_T). DXGK_PTE: two ULONGLONG
 * unions. DmaPageFaulted: FaultedFenceId, FaultedPrimitiveAPISequenceNumber (UINT64),
 * FaultedPipelineStage, FaultedBindTableEntry, PageFaultFlags, FaultedVirtualAddress
 * (UINT64), NodeOrdinal, EngineOrdinal, PageTableLevel, FaultErrorCode (a one-UINT union),
 * FaultedProcessHandle (HANDLE); the enums are 4 bytes. */
_Static_assert(sizeof(wddm_dxgk_querygpummucapsin) == 4, "DXGK_QUERYGPUMMUCAPSIN size");
_Static_assert(sizeof(wddm_dxgk_querypagetableleveldescin) == 4, "QUERYPAGETABLELEVELDESCIN");
_Static_assert(offsetof(wddm_dxgk_querypagetableleveldescin, PhysicalAdapterIndex) == 2, "PAI");

_Static_assert(sizeof(wddm_dxgk_gpummucaps) == 0x18, "DXGK_GPUMMUCAPS size");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, Value) == 0, "Value");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, PageTableUpdateMode) == 0x4, "PageTableUpdateMode");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, VirtualAddressBitCount) == 0x8, "VA bits");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, LeafPageTableSizeFor64KPagesInBytes) == 0xC,
               "LeafPageTableSizeFor64KPagesInBytes");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, PageTableLevelCount) == 0x10, "PageTableLevelCount");
_Static_assert(offsetof(wddm_dxgk_gpummucaps, LegacyBehaviors) == 0x14, "LegacyBehaviors");

_Static_assert(sizeof(wddm_dxgk_page_table_level_desc) == 0x14, "DXGK_PAGE_TABLE_LEVEL_DESC");
_Static_assert(offsetof(wddm_dxgk_page_table_level_desc, PageTableIndexBitCount) == 0, "Bits");
_Static_assert(offsetof(wddm_dxgk_page_table_level_desc, PageTableSegmentId) == 4, "SegId");
_Static_assert(offsetof(wddm_dxgk_page_table_level_desc, PagingProcessPageTableSegmentId) == 8,
               "PagingProcessPageTableSegmentId");
_Static_assert(offsetof(wddm_dxgk_page_table_level_desc, PageTableSizeInBytes) == 12, "Size");
_Static_assert(offsetof(wddm_dxgk_page_table_level_desc, PageTableAlignmentInBytes) == 16,
               "PageTableAlignmentInBytes");

_Static_assert(sizeof(wddm_dxgk_pte) == 16, "DXGK_PTE size");
_Static_assert(offsetof(wddm_dxgk_pte, Flags) == 0, "Flags");
_Static_assert(offsetof(wddm_dxgk_pte, PageAddress) == 8, "PageAddress");

_Static_assert(sizeof(wddm_dxgk_dma_page_faulted) == 64, "DmaPageFaulted size");
_Static_assert(_Alignof(wddm_dxgk_dma_page_faulted) == 8, "DmaPageFaulted alignment");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedFenceId) == 0, "FaultedFenceId");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedPrimitiveAPISequenceNumber) == 8,
               "FaultedPrimitiveAPISequenceNumber");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedPipelineStage) == 16, "Stage");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedBindTableEntry) == 20, "BindEntry");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, PageFaultFlags) == 24, "PageFaultFlags");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedVirtualAddress) == 32, "FaultedVA");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, NodeOrdinal) == 40, "NodeOrdinal");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, EngineOrdinal) == 44, "EngineOrdinal");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, PageTableLevel) == 48, "PageTableLevel");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultErrorCode) == 52, "FaultErrorCode");
_Static_assert(offsetof(wddm_dxgk_dma_page_faulted, FaultedProcessHandle) == 56, "Process");

/* The device's bits are the DDK's, so the library copies them unchanged. */
_Static_assert(WDDM_GPU_MMU_CAP_INVALID_TLB_ENTRIES_NOT_CACHED == 1 << 10, "GPUMMUCAPS bit 10");
_Static_assert(WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES == 1 << 3, "DXGK_UPDATEPAGETABLEFLAGS bit 3");
_Static_assert(WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL == 2, "DXGK_PAGETABLEUPDATE_GPU_PHYSICAL");
