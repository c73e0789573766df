/* The DXGK mirrors match the documented Windows x64 layouts (d3dkmddi.h) byte for byte. */

#include <assert.h>

#include "wddm_gpu_dev.h"

static_assert(sizeof(void *) == 8, "the DXGK mirrors describe the x64 layout");

static_assert(sizeof(wddm_dxgk_segmentflags) == 4, "DXGK_SEGMENTFLAGS");

static_assert(sizeof(wddm_dxgk_segmentdescriptor3) == 72, "DXGK_SEGMENTDESCRIPTOR3 size");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, BaseAddress) == 8, "BaseAddress");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, CpuTranslatedAddress) == 16, "CpuTA");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, Size) == 24, "Size");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, NbOfBanks) == 32, "NbOfBanks");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, pBankRangeTable) == 40, "pBankRangeTable");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, CommitLimit) == 48, "CommitLimit");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, SystemMemoryEndAddress) == 56, "SysEnd");
static_assert(offsetof(wddm_dxgk_segmentdescriptor3, Reserved) == 64, "Reserved");

static_assert(sizeof(wddm_dxgk_querysegmentout3) == 32, "DXGK_QUERYSEGMENTOUT3 size");
static_assert(offsetof(wddm_dxgk_querysegmentout3, pSegmentDescriptor) == 8, "pSegDesc");
static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferSegmentId) == 16, "PBSegId");
static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferSize) == 20, "PBSize");
static_assert(offsetof(wddm_dxgk_querysegmentout3, PagingBufferPrivateDataSize) == 24, "PBPriv");

static_assert(sizeof(wddm_dxgk_cpuhostaperture) == 16, "DXGK_CPUHOSTAPERTURE size");

/* The DDK itself asserts 0x60 and NumUEFIFrameBufferRanges at 0x5C on _WIN64. */
static_assert(sizeof(wddm_dxgk_segmentdescriptor4) == 0x60, "DXGK_SEGMENTDESCRIPTOR4 size");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, BaseAddress) == 8, "BaseAddress");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, Size) == 16, "Size");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CommitLimit) == 24, "CommitLimit");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, SystemMemoryEndAddress) == 32, "SysEnd");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CpuTranslatedAddress) == 40, "CpuTA");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, CpuHostAperture) == 40, "CpuHostAperture");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumInvalidMemoryRanges) == 56, "NumInv");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprRangeStartOffset) == 64, "VprStart");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprRangeSize) == 72, "VprSize");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprAlignment) == 80, "VprAlignment");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumVprSupported) == 84, "NumVpr");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, VprReserveSize) == 88, "VprReserve");
static_assert(offsetof(wddm_dxgk_segmentdescriptor4, NumUEFIFrameBufferRanges) == 0x5C, "UEFI");

static_assert(sizeof(wddm_dxgk_querysegmentout4) == 40, "DXGK_QUERYSEGMENTOUT4 size");
static_assert(offsetof(wddm_dxgk_querysegmentout4, pSegmentDescriptor) == 8, "pSegDesc");
static_assert(offsetof(wddm_dxgk_querysegmentout4, PagingBufferSegmentId) == 16, "PBSegId");
static_assert(offsetof(wddm_dxgk_querysegmentout4, PagingBufferPrivateDataSize) == 24, "PBPriv");
static_assert(offsetof(wddm_dxgk_querysegmentout4, SegmentDescriptorStride) == 32, "Stride");

/* The wire format the library reads and writes (wddm_gpu.h checks the rest). */
static_assert(sizeof(WddmGpuCtrlHdr) == 24, "ctrl header");
static_assert(sizeof(WddmGpuCmdSubmit) <= WDDM_SLOT_SIZE / 2, "a request fits half a slot");
static_assert(sizeof(WddmGpuRespEvent) <= WDDM_SLOT_SIZE / 2, "a response fits half a slot");
