/* The library's DXGK mirrors (wddm_gpu_dev.h) against the Windows DDK, as far as mingw-w64's
 * DDK goes: it has no d3dkmddi.h, so each DXGK structure is declared here once more in
 * d3dkmddi.h's field order with the DDK's own member types (PHYSICAL_ADDRESS, SIZE_T,
 * pointers; UINT as windef.h's unsigned int, BYTE as UCHAR), and the mirror must match it field
 * for field. The PFN list and the DMA block are checked against PFN_NUMBER, MDL and
 * PHYSICAL_ADDRESS, and the build's data model is LLP64. Compiles to nothing; a mismatch fails
 * the build. */

#include <stddef.h>

#include "wddm_os_windows.h"
#include "wddm_gpu_dev.h"

/* windef.h's UINT, which kernel headers do not define. */
typedef unsigned int DDK_UINT;

#define SAME_FIELD(ddk, mirror, field)                                                      \
    _Static_assert(offsetof(ddk, field) == offsetof(mirror, field), #field " offset");        \
    _Static_assert(sizeof(((ddk *)0)->field) == sizeof(((mirror *)0)->field), #field " size")

/* The fields every DXGK_SEGMENTDESCRIPTOR version has (3 and 4 order them differently). */
#define SAME_SEGMENTDESCRIPTOR_FIELDS(ddk, mirror)                                             \
    SAME_FIELD(ddk, mirror, Flags);                                                            \
    SAME_FIELD(ddk, mirror, BaseAddress);                                                      \
    SAME_FIELD(ddk, mirror, CpuTranslatedAddress);                                             \
    SAME_FIELD(ddk, mirror, Size);                                                             \
    SAME_FIELD(ddk, mirror, CommitLimit);                                                      \
    SAME_FIELD(ddk, mirror, SystemMemoryEndAddress)

/* The fields both DXGK_QUERYSEGMENTOUT versions have, at the same places. */
#define SAME_QUERYSEGMENTOUT_FIELDS(ddk, mirror)                                               \
    SAME_FIELD(ddk, mirror, NbSegment);                                                        \
    SAME_FIELD(ddk, mirror, pSegmentDescriptor);                                               \
    SAME_FIELD(ddk, mirror, PagingBufferSegmentId);                                            \
    SAME_FIELD(ddk, mirror, PagingBufferSize);                                                 \
    SAME_FIELD(ddk, mirror, PagingBufferPrivateDataSize)

/* LLP64: long stays 4 bytes, pointers and SIZE_T are 8. */
_Static_assert(sizeof(long) == 4 && sizeof(ULONG) == 4, "LLP64 long");
_Static_assert(sizeof(void *) == 8 && sizeof(SIZE_T) == 8 && sizeof(ULONG_PTR) == 8, "LLP64");
_Static_assert(sizeof(PHYSICAL_ADDRESS) == 8 && _Alignof(PHYSICAL_ADDRESS) == 8,
               "PHYSICAL_ADDRESS: 8 bytes, 8-aligned (why the mirrors pad after Flags)");

/* DXGK_SEGMENTFLAGS is a union of DDK_UINT bit-fields and DDK_UINT Value. */
typedef union ddk_segmentflags {
    struct {
        DDK_UINT bits : 32;
    } b;
    DDK_UINT Value;
} ddk_segmentflags;
_Static_assert(sizeof(ddk_segmentflags) == sizeof(wddm_dxgk_segmentflags), "SEGMENTFLAGS");

typedef struct ddk_segmentdescriptor3 {
    ddk_segmentflags Flags;
    PHYSICAL_ADDRESS BaseAddress;
    PHYSICAL_ADDRESS CpuTranslatedAddress;
    SIZE_T Size;
    DDK_UINT NbOfBanks;
    SIZE_T *pBankRangeTable;
    SIZE_T CommitLimit;
    SIZE_T SystemMemoryEndAddress;
    SIZE_T Reserved;
} ddk_segmentdescriptor3;
_Static_assert(sizeof(ddk_segmentdescriptor3) == sizeof(wddm_dxgk_segmentdescriptor3), "SD3");
SAME_SEGMENTDESCRIPTOR_FIELDS(ddk_segmentdescriptor3, wddm_dxgk_segmentdescriptor3);
SAME_FIELD(ddk_segmentdescriptor3, wddm_dxgk_segmentdescriptor3, NbOfBanks);
SAME_FIELD(ddk_segmentdescriptor3, wddm_dxgk_segmentdescriptor3, pBankRangeTable);
SAME_FIELD(ddk_segmentdescriptor3, wddm_dxgk_segmentdescriptor3, Reserved);

typedef struct ddk_querysegmentout3 {
    DDK_UINT NbSegment;
    ddk_segmentdescriptor3 *pSegmentDescriptor;
    DDK_UINT PagingBufferSegmentId;
    DDK_UINT PagingBufferSize;
    DDK_UINT PagingBufferPrivateDataSize;
} ddk_querysegmentout3;
_Static_assert(sizeof(ddk_querysegmentout3) == sizeof(wddm_dxgk_querysegmentout3), "QSO3");
SAME_QUERYSEGMENTOUT_FIELDS(ddk_querysegmentout3, wddm_dxgk_querysegmentout3);

typedef struct ddk_cpuhostaperture {
    PHYSICAL_ADDRESS PhysicalAddress;
    DDK_UINT SizeInPages;
} ddk_cpuhostaperture;
_Static_assert(sizeof(ddk_cpuhostaperture) == sizeof(wddm_dxgk_cpuhostaperture), "CHA");
SAME_FIELD(ddk_cpuhostaperture, wddm_dxgk_cpuhostaperture, PhysicalAddress);
SAME_FIELD(ddk_cpuhostaperture, wddm_dxgk_cpuhostaperture, SizeInPages);

typedef struct ddk_segmentdescriptor4 {
    ddk_segmentflags Flags;
    PHYSICAL_ADDRESS BaseAddress;
    SIZE_T Size;
    SIZE_T CommitLimit;
    SIZE_T SystemMemoryEndAddress;
    union {
        PHYSICAL_ADDRESS CpuTranslatedAddress;
        ddk_cpuhostaperture CpuHostAperture;
    };
    DDK_UINT NumInvalidMemoryRanges;
    SIZE_T VprRangeStartOffset;
    SIZE_T VprRangeSize;
    DDK_UINT VprAlignment;
    DDK_UINT NumVprSupported;
    DDK_UINT VprReserveSize;
    DDK_UINT NumUEFIFrameBufferRanges;
} ddk_segmentdescriptor4;
_Static_assert(sizeof(ddk_segmentdescriptor4) == sizeof(wddm_dxgk_segmentdescriptor4), "SD4");
SAME_SEGMENTDESCRIPTOR_FIELDS(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, CpuHostAperture);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, NumInvalidMemoryRanges);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, VprRangeStartOffset);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, VprRangeSize);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, VprAlignment);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, NumVprSupported);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, VprReserveSize);
SAME_FIELD(ddk_segmentdescriptor4, wddm_dxgk_segmentdescriptor4, NumUEFIFrameBufferRanges);

typedef struct ddk_querysegmentout4 {
    DDK_UINT NbSegment;
    UCHAR *pSegmentDescriptor;
    DDK_UINT PagingBufferSegmentId;
    DDK_UINT PagingBufferSize;
    DDK_UINT PagingBufferPrivateDataSize;
    SIZE_T SegmentDescriptorStride;
} ddk_querysegmentout4;
_Static_assert(sizeof(ddk_querysegmentout4) == sizeof(wddm_dxgk_querysegmentout4), "QSO4");
SAME_QUERYSEGMENTOUT_FIELDS(ddk_querysegmentout4, wddm_dxgk_querysegmentout4);
SAME_FIELD(ddk_querysegmentout4, wddm_dxgk_querysegmentout4, SegmentDescriptorStride);

/* MDL-derived inputs of the paging-buffer builder: MmGetMdlPfnArray entries are PFN_NUMBERs
 * (the list's u64s), MDL.ByteOffset a ULONG (byte_offset). */
_Static_assert(sizeof(PFN_NUMBER) == sizeof(uint64_t), "PFN_NUMBER is the PFN list's entry");
_Static_assert(sizeof(((MDL *)0)->ByteOffset) == sizeof(((wddm_pfn_list *)0)->byte_offset),
               "MDL.ByteOffset");
/* MmGetPhysicalAddress's result is what wddm_os_dma.bus holds. */
_Static_assert(sizeof(PHYSICAL_ADDRESS) == sizeof(((wddm_os_dma *)0)->bus), "DMA bus address");

/* GPU virtual addressing (d3dkmddi.h and d3dukmdt.h of the Windows 10 SDK 10.0.16299; the
 * sources dxgk_layout.c names). The enums DXGK_PAGETABLEUPDATEMODE, DXGK_RENDER_PIPELINE_STAGE
 * and DXGK_PAGE_FAULT_FLAGS are C enums, which the DDK's compilers make 4-byte ints; WORD is
 * USHORT, HANDLE a pointer, D3DGPU_VIRTUAL_ADDRESS a ULONGLONG. */
typedef enum ddk_enum { DDK_ENUM_ZERO = 0 } ddk_enum;
_Static_assert(sizeof(ddk_enum) == 4, "a DDK enum is 4 bytes");

typedef struct ddk_querygpummucapsin {
    DDK_UINT PhysicalAdapterIndex;
} ddk_querygpummucapsin;
_Static_assert(sizeof(ddk_querygpummucapsin) == sizeof(wddm_dxgk_querygpummucapsin), "QGMCIN");
SAME_FIELD(ddk_querygpummucapsin, wddm_dxgk_querygpummucapsin, PhysicalAdapterIndex);

typedef struct ddk_querypagetableleveldescin {
    USHORT LevelIndex;
    USHORT PhysicalAdapterIndex;
} ddk_querypagetableleveldescin;
_Static_assert(sizeof(ddk_querypagetableleveldescin) ==
                   sizeof(wddm_dxgk_querypagetableleveldescin),
               "QPTLDIN");
SAME_FIELD(ddk_querypagetableleveldescin, wddm_dxgk_querypagetableleveldescin, LevelIndex);
SAME_FIELD(ddk_querypagetableleveldescin, wddm_dxgk_querypagetableleveldescin,
           PhysicalAdapterIndex);

typedef struct ddk_gpummucaps {
    union {
        struct {
            DDK_UINT flags : 32;
        } b;
        DDK_UINT Value;
    };
    ddk_enum PageTableUpdateMode;
    DDK_UINT VirtualAddressBitCount;
    DDK_UINT LeafPageTableSizeFor64KPagesInBytes;
    DDK_UINT PageTableLevelCount;
    struct {
        DDK_UINT SourcePageTableVaInTransfer : 1;
        DDK_UINT Reserved : 31;
    } LegacyBehaviors;
} ddk_gpummucaps;
_Static_assert(sizeof(ddk_gpummucaps) == sizeof(wddm_dxgk_gpummucaps), "GPUMMUCAPS");
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, Value);
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, PageTableUpdateMode);
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, VirtualAddressBitCount);
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, LeafPageTableSizeFor64KPagesInBytes);
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, PageTableLevelCount);
SAME_FIELD(ddk_gpummucaps, wddm_dxgk_gpummucaps, LegacyBehaviors);

typedef struct ddk_page_table_level_desc {
    DDK_UINT PageTableIndexBitCount;
    DDK_UINT PageTableSegmentId;
    DDK_UINT PagingProcessPageTableSegmentId;
    DDK_UINT PageTableSizeInBytes;
    DDK_UINT PageTableAlignmentInBytes;
} ddk_page_table_level_desc;
_Static_assert(sizeof(ddk_page_table_level_desc) == sizeof(wddm_dxgk_page_table_level_desc),
               "PAGE_TABLE_LEVEL_DESC");
SAME_FIELD(ddk_page_table_level_desc, wddm_dxgk_page_table_level_desc, PageTableIndexBitCount);
SAME_FIELD(ddk_page_table_level_desc, wddm_dxgk_page_table_level_desc, PageTableSegmentId);
SAME_FIELD(ddk_page_table_level_desc, wddm_dxgk_page_table_level_desc,
           PagingProcessPageTableSegmentId);
SAME_FIELD(ddk_page_table_level_desc, wddm_dxgk_page_table_level_desc, PageTableSizeInBytes);
SAME_FIELD(ddk_page_table_level_desc, wddm_dxgk_page_table_level_desc,
           PageTableAlignmentInBytes);

typedef struct ddk_pte {
    union {
        struct {
            ULONGLONG Valid : 1;
            ULONGLONG Zero : 1;
            ULONGLONG CacheCoherent : 1;
            ULONGLONG ReadOnly : 1;
            ULONGLONG NoExecute : 1;
            ULONGLONG Segment : 5;
            ULONGLONG LargePage : 1;
            ULONGLONG PhysicalAdapterIndex : 6;
            ULONGLONG PageTablePageSize : 2;
            ULONGLONG SystemReserved0 : 1;
            ULONGLONG Reserved : 44;
        } b;
        ULONGLONG Flags;
    };
    union {
        ULONGLONG PageAddress;
        ULONGLONG PageTableAddress;
    };
} ddk_pte;
_Static_assert(sizeof(ddk_pte) == sizeof(wddm_dxgk_pte), "DXGK_PTE");
SAME_FIELD(ddk_pte, wddm_dxgk_pte, Flags);
SAME_FIELD(ddk_pte, wddm_dxgk_pte, PageAddress);

/* DXGK_FAULT_ERROR_CODE: a union of two one-UINT bit-field structs. */
typedef struct ddk_fault_error_code {
    union {
        struct {
            DDK_UINT IsDeviceSpecificCode : 1;
            DDK_UINT GeneralErrorCode : 31;
        } general;
        struct {
            DDK_UINT IsDeviceSpecificCode : 1;
            DDK_UINT DeviceSpecificCode : 31;
        } device;
    };
} ddk_fault_error_code;

/* DXGKARGCB_NOTIFY_INTERRUPT_DATA with the DmaPageFaulted member of its union. */
typedef struct ddk_dma_page_faulted {
    DDK_UINT FaultedFenceId;
    UINT64 FaultedPrimitiveAPISequenceNumber;
    ddk_enum FaultedPipelineStage;
    DDK_UINT FaultedBindTableEntry;
    ddk_enum PageFaultFlags;
    ULONGLONG FaultedVirtualAddress;
    DDK_UINT NodeOrdinal;
    DDK_UINT EngineOrdinal;
    DDK_UINT PageTableLevel;
    ddk_fault_error_code FaultErrorCode;
    HANDLE FaultedProcessHandle;
} ddk_dma_page_faulted;
typedef struct ddk_notify_interrupt_data {
    ddk_enum InterruptType;
    union {
        ddk_dma_page_faulted DmaPageFaulted;
        struct {
            DDK_UINT Reserved[16];
        } Reserved;
    };
} ddk_notify_interrupt_data;
_Static_assert(sizeof(ddk_dma_page_faulted) == sizeof(wddm_dxgk_dma_page_faulted), "DmaPF");
_Static_assert(_Alignof(ddk_dma_page_faulted) == _Alignof(wddm_dxgk_dma_page_faulted), "align");
_Static_assert(offsetof(ddk_notify_interrupt_data, DmaPageFaulted) == 8, "after InterruptType");
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedFenceId);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedPrimitiveAPISequenceNumber);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedPipelineStage);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedBindTableEntry);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, PageFaultFlags);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedVirtualAddress);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, NodeOrdinal);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, EngineOrdinal);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, PageTableLevel);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultErrorCode);
SAME_FIELD(ddk_dma_page_faulted, wddm_dxgk_dma_page_faulted, FaultedProcessHandle);
