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
