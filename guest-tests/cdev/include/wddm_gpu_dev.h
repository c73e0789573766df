/* The C device library: what a WDDM kernel-mode driver links to drive the vhost-user WDDM GPU.
 *
 * Plain C11 over wddm_gpu.h (the device's wire format) and wddm_gpu_os.h (the OS services):
 * no Windows or Linux header, no malloc (memory comes from the OS table or from the caller:
 * `wddm_dev` is a caller-owned struct). Everything read from the device is checked; a value
 * that breaks the programming guide's rules is an error (WDDM_E_DEVICE / WDDM_E_CAPSET),
 * never undefined behaviour.
 *
 * Threading: every function that touches the control queue takes the OS lock, so a KMD may
 * call submit from DxgkDdiSubmitCommand and poll from its DPC concurrently. */

#ifndef WDDM_GPU_DEV_H
#define WDDM_GPU_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wddm_gpu.h"
#include "wddm_gpu_os.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Results ------------------------------------------------------------------------- */

typedef int32_t wddm_result;
#define WDDM_OK 0
#define WDDM_E_OS (-1)      /* an OS callback failed */
#define WDDM_E_INVALID (-2) /* the caller's arguments break a rule (nothing was done) */
#define WDDM_E_DEVICE (-3)  /* the device answered something the programming guide forbids */
#define WDDM_E_CAPSET (-4)  /* the capset breaks a rule; the layout is refused */
#define WDDM_E_TIMEOUT (-5) /* the device did not answer in time */
#define WDDM_E_FULL (-6)    /* no free request slot / no room in the paging buffer */
#define WDDM_E_EMPTY (-7)   /* nothing to take (no completion, event or fault pending) */
#define WDDM_E_RANGE (-8)   /* an address range leaves its segment or overflows 64 bits */
#define WDDM_E_STATE (-9)   /* not possible in the device's current state */
#define WDDM_E_REFUSED (-10) /* the device refused the request (an ERR_* answer): nothing done */

/* A constant name for a result, for logs. */
const char *wddm_result_name(wddm_result result);

/* ---- DXGK mirrors --------------------------------------------------------------------
 *
 * The library cannot include d3dkmddi.h, so it fills these mirrors of the DDK structures. Each
 * matches the documented Windows x64 layout byte for byte (checked by the static_asserts in
 * src/dxgk_layout.c; SIZE_T, PHYSICAL_ADDRESS and pointers are 8 bytes there), so a KMD may
 * copy one into the real DDK type, or hand the library dxgkrnl's own buffer. The Windows OS
 * layer checks them against the real DDK types where its headers have them. */

/* DXGK_SEGMENTFLAGS: the `Value` view (bit meanings in wddm-gpu-abi's segment_flags). */
typedef struct wddm_dxgk_segmentflags {
    uint32_t Value;
} wddm_dxgk_segmentflags;

#define WDDM_DXGK_SEGMENT_APERTURE (1u << 0)
#define WDDM_DXGK_SEGMENT_AGP (1u << 1)
#define WDDM_DXGK_SEGMENT_CPU_VISIBLE (1u << 2)
#define WDDM_DXGK_SEGMENT_USE_BANKING (1u << 3)
#define WDDM_DXGK_SEGMENT_CACHE_COHERENT (1u << 4)
#define WDDM_DXGK_SEGMENT_USE_64KB_PAGES (1u << 11)
#define WDDM_DXGK_SEGMENT_SUPPORTS_CPU_HOST_APERTURE (1u << 13)
/* Bits 11-21 exist only from WDDM 2.0 on; bits 22-31 are reserved everywhere (wddm_gpu.h). */
#define WDDM_DXGK_SEGMENT_WDDM2_ONLY_MASK ((uint32_t)SEGMENT_FLAGS_WDDM2_ONLY_MASK)
#define WDDM_DXGK_SEGMENT_RESERVED_MASK ((uint32_t)SEGMENT_FLAGS_RESERVED_MASK)

/* DXGK_SEGMENTDESCRIPTOR3 (WDDM 1.3), x64: 72 bytes. */
typedef struct wddm_dxgk_segmentdescriptor3 {
    wddm_dxgk_segmentflags Flags;   /* 0 */
    uint32_t _pad0;                 /* 4 */
    uint64_t BaseAddress;           /* 8: PHYSICAL_ADDRESS */
    uint64_t CpuTranslatedAddress;  /* 16: PHYSICAL_ADDRESS */
    uint64_t Size;                  /* 24: SIZE_T */
    uint32_t NbOfBanks;             /* 32 */
    uint32_t _pad1;                 /* 36 */
    const uint64_t *pBankRangeTable; /* 40: SIZE_T* (into the library's capset copy) */
    uint64_t CommitLimit;           /* 48 */
    uint64_t SystemMemoryEndAddress; /* 56 */
    uint64_t Reserved;              /* 64 */
} wddm_dxgk_segmentdescriptor3;

/* DXGK_QUERYSEGMENTOUT3, x64: 32 bytes. */
typedef struct wddm_dxgk_querysegmentout3 {
    uint32_t NbSegment;                               /* 0 */
    uint32_t _pad0;                                   /* 4 */
    wddm_dxgk_segmentdescriptor3 *pSegmentDescriptor; /* 8 */
    uint32_t PagingBufferSegmentId;                   /* 16 */
    uint32_t PagingBufferSize;                        /* 20 */
    uint32_t PagingBufferPrivateDataSize;             /* 24 */
    uint32_t _pad1;                                   /* 28 */
} wddm_dxgk_querysegmentout3;

/* DXGK_CPUHOSTAPERTURE, x64: 16 bytes. */
typedef struct wddm_dxgk_cpuhostaperture {
    uint64_t PhysicalAddress;
    uint32_t SizeInPages;
    uint32_t _pad0;
} wddm_dxgk_cpuhostaperture;

/* DXGK_SEGMENTDESCRIPTOR4 (WDDM 2.0; WDDM 2.2 added NumUEFIFrameBufferRanges), x64: 96 bytes. */
typedef struct wddm_dxgk_segmentdescriptor4 {
    wddm_dxgk_segmentflags Flags;    /* 0 */
    uint32_t _pad0;                  /* 4 */
    uint64_t BaseAddress;            /* 8 */
    uint64_t Size;                   /* 16 */
    uint64_t CommitLimit;            /* 24 */
    uint64_t SystemMemoryEndAddress; /* 32 */
    union {
        uint64_t CpuTranslatedAddress;
        wddm_dxgk_cpuhostaperture CpuHostAperture;
    };                               /* 40 (anonymous, as in the DDK) */
    uint32_t NumInvalidMemoryRanges; /* 56 */
    uint32_t _pad1;                  /* 60 */
    uint64_t VprRangeStartOffset;    /* 64 */
    uint64_t VprRangeSize;           /* 72 */
    uint32_t VprAlignment;           /* 80 */
    uint32_t NumVprSupported;        /* 84 */
    uint32_t VprReserveSize;         /* 88 */
    uint32_t NumUEFIFrameBufferRanges; /* 92 */
} wddm_dxgk_segmentdescriptor4;

/* DXGK_QUERYSEGMENTOUT4, x64: 40 bytes. */
typedef struct wddm_dxgk_querysegmentout4 {
    uint32_t NbSegment;                   /* 0 */
    uint32_t _pad0;                       /* 4 */
    uint8_t *pSegmentDescriptor;          /* 8: BYTE*, elements SegmentDescriptorStride apart */
    uint32_t PagingBufferSegmentId;       /* 16 */
    uint32_t PagingBufferSize;            /* 20 */
    uint32_t PagingBufferPrivateDataSize; /* 24 */
    uint32_t _pad1;                       /* 28 */
    uint64_t SegmentDescriptorStride;     /* 32: SIZE_T */
} wddm_dxgk_querysegmentout4;

/* ---- The validated segment layout (from the capset) ----------------------------------- */

#define WDDM_MAX_SEGMENTS 16
#define WDDM_MAX_CAPSET_SIZE (64u << 10)

typedef struct wddm_segment {
    WddmGpuSegmentDesc desc;
    const uint64_t *banks; /* desc.bank_count bank end offsets (in the capset copy), or NULL */
} wddm_segment;

typedef struct wddm_layout {
    WddmGpuCapsHeader header;
    uint32_t segment_count;
    wddm_segment segments[WDDM_MAX_SEGMENTS]; /* segment id i + 1 at index i */
} wddm_layout;

/* Validates a capset blob (`size` bytes; padding past total_size allowed) against every rule
 * of the programming guide and fills `layout`; bank pointers point into `blob`, which must
 * outlive the layout. WDDM_E_CAPSET on any broken rule. */
wddm_result wddm_layout_parse(wddm_layout *layout, const void *blob, uint64_t size);

/* Segment id `id` (1-based) or NULL. */
const wddm_segment *wddm_layout_segment(const wddm_layout *layout, uint32_t id);
bool wddm_segment_is_aperture(const wddm_segment *segment);

/* DxgkDdiQueryAdapterInfo(DXGKQAITYPE_QUERYSEGMENT3): with out->pSegmentDescriptor NULL sets
 * NbSegment (first call); otherwise fills NbSegment descriptors (at least segment_count) and
 * the paging-buffer fields. WDDM_E_STATE when the capset says WDDM 2.0. */
wddm_result wddm_layout_query_segment3(const wddm_layout *layout,
                                       wddm_dxgk_querysegmentout3 *out);
/* DXGKQAITYPE_QUERYSEGMENT4: same two calls; SegmentDescriptorStride must be at least
 * sizeof(wddm_dxgk_segmentdescriptor4) on the second (0 on the first: it is then set).
 * WDDM_E_STATE when the capset says WDDM 1.3. */
wddm_result wddm_layout_query_segment4(const wddm_layout *layout,
                                       wddm_dxgk_querysegmentout4 *out);

/* ---- The paging-buffer builder (DXGK_OPERATION_* to packets) -------------------------
 *
 * The DXGK_BUILDPAGINGBUFFER operations name MDLs, which only the OS can walk; the operations
 * below carry the same fields with each MDL already resolved by the OS layer into a PFN array
 * in DMA memory (wddm_pfn_list: MmGetMdlPfnArray's entries, 8 bytes each on x64, and the
 * array's bus address). Field names follow the DDK's. */

typedef struct wddm_pfn_list {
    uint64_t bus;        /* device address of the u64 PFN array */
    uint32_t count;      /* entries */
    uint32_t byte_offset; /* MDL ByteOffset: data start inside the first page */
} wddm_pfn_list;

/* One side of a transfer: SegmentId != 0 -> SegmentAddress; 0 -> the MDL. */
typedef struct wddm_paging_side {
    uint32_t SegmentId;
    uint32_t _pad0;
    uint64_t SegmentAddress;
    wddm_pfn_list Mdl;
} wddm_paging_side;

/* DXGK_OPERATION_TRANSFER. The segment side gets SegmentAddress + TransferOffset; the MDL side
 * starts MdlOffset pages (+ Mdl.byte_offset bytes) into its list. */
typedef struct wddm_op_transfer {
    uint64_t TransferOffset;
    uint64_t TransferSize;
    wddm_paging_side Source;
    wddm_paging_side Destination;
    uint32_t MdlOffset;
    uint32_t _pad0;
} wddm_op_transfer;

/* DXGK_OPERATION_FILL. */
typedef struct wddm_op_fill {
    uint32_t FillPattern;
    uint32_t DestinationSegmentId;
    uint64_t DestinationSegmentAddress;
    uint64_t FillSize;
} wddm_op_fill;

/* DXGK_OPERATION_DISCARD_CONTENT. */
typedef struct wddm_op_discard {
    uint32_t SegmentId;
    uint32_t AllocationIsIdle; /* Flags.AllocationIsIdle */
    uint64_t SegmentAddress;
} wddm_op_discard;

/* DXGK_OPERATION_READ_PHYSICAL / WRITE_PHYSICAL. */
typedef struct wddm_op_physical {
    uint32_t SegmentId;
    uint32_t Size; /* 1-8 */
    uint64_t PhysicalAddress;
} wddm_op_physical;

/* DXGK_OPERATION_MAP_APERTURE_SEGMENT. */
typedef struct wddm_op_map_aperture {
    uint32_t SegmentId;
    uint32_t CacheCoherent; /* Flags.CacheCoherent */
    uint64_t OffsetInPages;
    uint64_t NumberOfPages;
    wddm_pfn_list Mdl;
    uint32_t MdlOffset;
    uint32_t _pad0;
} wddm_op_map_aperture;

/* DXGK_OPERATION_MAP_APERTURE_SEGMENT2 (from a DXGK_ADL). */
typedef struct wddm_op_map_aperture2 {
    uint32_t SegmentId;
    uint32_t CacheCoherent;
    uint64_t OffsetInPages;
    uint64_t NumberOfPages;
    uint32_t AdlContiguous;  /* Adl.Flags.Contiguous */
    uint32_t AdlPageCount;   /* Adl.PageCount */
    uint64_t AdlBase;        /* BasePageNumber, or the page array's bus address */
    uint32_t AdlOffset;
    uint32_t _pad0;
} wddm_op_map_aperture2;

/* DXGK_OPERATION_UNMAP_APERTURE_SEGMENT. */
typedef struct wddm_op_unmap_aperture {
    uint32_t SegmentId;
    uint32_t _pad0;
    uint64_t OffsetInPages;
    uint64_t NumberOfPages;
    uint64_t DummyPage; /* bus address, 4 KiB aligned */
} wddm_op_unmap_aperture;

/* Builds packets into the paging buffer (pDmaBuffer .. pDmaBufferLimit). Every operation is
 * checked whole against the layout before a byte is written: a refused one (WDDM_E_INVALID,
 * WDDM_E_RANGE, or WDDM_E_FULL when the buffer has no room: DXGKARG's "buffer full") leaves
 * the buffer unchanged. */
typedef struct wddm_pb {
    uint8_t *base;
    uint32_t size;
    uint32_t used;    /* bytes written: the submission's end offset */
    uint32_t packets; /* packets written */
    const wddm_layout *layout;
} wddm_pb;

wddm_result wddm_pb_init(wddm_pb *pb, const wddm_layout *layout, void *buffer, uint32_t size);
wddm_result wddm_pb_transfer(wddm_pb *pb, const wddm_op_transfer *op);
wddm_result wddm_pb_fill(wddm_pb *pb, const wddm_op_fill *op);
wddm_result wddm_pb_discard(wddm_pb *pb, const wddm_op_discard *op);
wddm_result wddm_pb_read_physical(wddm_pb *pb, const wddm_op_physical *op);
wddm_result wddm_pb_write_physical(wddm_pb *pb, const wddm_op_physical *op);
wddm_result wddm_pb_map_aperture(wddm_pb *pb, const wddm_op_map_aperture *op);
wddm_result wddm_pb_map_aperture2(wddm_pb *pb, const wddm_op_map_aperture2 *op);
wddm_result wddm_pb_unmap_aperture(wddm_pb *pb, const wddm_op_unmap_aperture *op);
wddm_result wddm_pb_fence(wddm_pb *pb, uint32_t fence_id);
/* Appends raw bytes as one packet after checking only the room (for tests of the device's
 * refusal paths; a KMD has no use for it). */
wddm_result wddm_pb_raw(wddm_pb *pb, const void *packet, uint32_t size);

/* ---- GPU virtual addressing (WDDM 2.x GpuMmu; programming guide chapter 12) -----------
 *
 * The geometry is capset 62 (WDDM_GPU_MMU_CAPSET_ID, a WddmGpuMmuCaps) at capset index 1. It
 * is read with wddm_dev_read_gpummu and checked by wddm_gpummu_validate, the C form of
 * wddm-gpu-abi's validate_gpummu: the same rules in the same order, the same first broken
 * rule, the same rule names (the GpuMmu corpus, tests/gpummu_corpus.h, generated by
 * guest-tests/tests/gpummu_corpus.rs, holds the two to the same answers). */

/* DXGK_QUERYADAPTERINFOTYPE values of the two queries answered from the geometry. */
#define WDDM_DXGKQAITYPE_GPUMMUCAPS 13u
#define WDDM_DXGKQAITYPE_PAGETABLELEVELDESC 14u

/* DXGK_QUERYGPUMMUCAPSIN (DxgkDdiQueryAdapterInfo's pInputData), x64: 4 bytes. */
typedef struct wddm_dxgk_querygpummucapsin {
    uint32_t PhysicalAdapterIndex;
} wddm_dxgk_querygpummucapsin;

/* DXGK_QUERYPAGETABLELEVELDESCIN, x64: 4 bytes (WORD, WORD). */
typedef struct wddm_dxgk_querypagetableleveldescin {
    uint16_t LevelIndex;
    uint16_t PhysicalAdapterIndex;
} wddm_dxgk_querypagetableleveldescin;

/* DXGK_GPUMMUCAPS, x64: 24 bytes. `Value` is the flag union (ReadOnlyMemorySupported at bit 0
 * ... InvalidTlbEntriesNotCached at bit 10: the WDDM_GPU_MMU_CAP_* bits); LegacyBehaviors is
 * the one-UINT bit-field struct (bit 0 SourcePageTableVaInTransfer). */
typedef struct wddm_dxgk_gpummucaps {
    uint32_t Value;                               /* 0 */
    uint32_t PageTableUpdateMode;                 /* 4: DXGK_PAGETABLEUPDATEMODE */
    uint32_t VirtualAddressBitCount;              /* 8 */
    uint32_t LeafPageTableSizeFor64KPagesInBytes; /* 12 */
    uint32_t PageTableLevelCount;                 /* 16 */
    uint32_t LegacyBehaviors;                     /* 20 */
} wddm_dxgk_gpummucaps;

/* DXGK_PAGE_TABLE_LEVEL_DESC, x64: 20 bytes, every member a UINT (the device's descriptor
 * holds the size and alignment as u64: values past 32 bits cannot be reported). */
typedef struct wddm_dxgk_page_table_level_desc {
    uint32_t PageTableIndexBitCount;          /* 0 */
    uint32_t PageTableSegmentId;              /* 4 */
    uint32_t PagingProcessPageTableSegmentId; /* 8 */
    uint32_t PageTableSizeInBytes;            /* 12 */
    uint32_t PageTableAlignmentInBytes;       /* 16: 0 = the segment's page size */
} wddm_dxgk_page_table_level_desc;

/* DXGK_PTE, x64: 16 bytes. `Flags` is the bit-field union's ULONGLONG view (Valid 0, Zero 1,
 * CacheCoherent 2, ReadOnly 3, NoExecute 4, Segment 5-9, LargePage 10, PhysicalAdapterIndex
 * 11-16, PageTablePageSize 17-18, SystemReserved0 19); PageAddress (or PageTableAddress) is a
 * 4 KiB frame number. */
typedef struct wddm_dxgk_pte {
    uint64_t Flags;       /* 0 */
    uint64_t PageAddress; /* 8 */
} wddm_dxgk_pte;

/* DXGKARGCB_NOTIFY_INTERRUPT_DATA.DmaPageFaulted (DXGK_INTERRUPT_DMA_PAGE_FAULTED), x64: 64
 * bytes, 8-aligned: the union member after InterruptType, so at offset 8 of the whole. */
typedef struct wddm_dxgk_dma_page_faulted {
    uint32_t FaultedFenceId;                    /* 0 */
    uint32_t _pad0;                             /* 4 */
    uint64_t FaultedPrimitiveAPISequenceNumber; /* 8 */
    uint32_t FaultedPipelineStage;              /* 16: DXGK_RENDER_PIPELINE_STAGE */
    uint32_t FaultedBindTableEntry;             /* 20 */
    uint32_t PageFaultFlags;                    /* 24: DXGK_PAGE_FAULT_FLAGS */
    uint32_t _pad1;                             /* 28 */
    uint64_t FaultedVirtualAddress;             /* 32: D3DGPU_VIRTUAL_ADDRESS */
    uint32_t NodeOrdinal;                       /* 40 */
    uint32_t EngineOrdinal;                     /* 44 */
    uint32_t PageTableLevel;                    /* 48 */
    uint32_t FaultErrorCode;                    /* 52: DXGK_FAULT_ERROR_CODE (one UINT) */
    void *FaultedProcessHandle;                 /* 56: HANDLE */
} wddm_dxgk_dma_page_faulted;

#define WDDM_DXGK_INTERRUPT_DMA_PAGE_FAULTED 9u
#define WDDM_DXGK_PRIMITIVE_API_SEQUENCE_NUMBER_UNKNOWN UINT64_MAX
#define WDDM_DXGK_RENDER_PIPELINE_STAGE_UNKNOWN 0u
#define WDDM_DXGK_BIND_TABLE_ENTRY_UNKNOWN UINT32_MAX
/* DXGK_PAGE_FAULT_ADAPTER_RESET_REQUIRED (the engine reset bit is the device's
 * WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED). */
#define WDDM_DXGK_PAGE_FAULT_ADAPTER_RESET_REQUIRED 0x4u

/* Most contexts a geometry may ask for (wddm-gpu-abi gpummu_rules::MAX_CONTEXTS; the corpus
 * has a geometry at it and one past it). */
#define WDDM_GPUMMU_MAX_CONTEXTS 4096u

/* The rules of a geometry, numbered in the order of wddm-gpu-abi's GpuMmuRule::RULES (not the
 * order they are checked in); 0 is "no rule broken". */
#define WDDM_GPUMMU_RULE_NONE 0u
#define WDDM_GPUMMU_RULE_UNSUPPORTED_FLAGS 1u
#define WDDM_GPUMMU_RULE_UPDATE_MODE 2u
#define WDDM_GPUMMU_RULE_LEVEL_COUNT 3u
#define WDDM_GPUMMU_RULE_INDEX_BITS 4u
#define WDDM_GPUMMU_RULE_ADDRESS_BITS 5u
#define WDDM_GPUMMU_RULE_ADDRESS_BITS_TOO_LARGE 6u
#define WDDM_GPUMMU_RULE_NOT_ZERO 7u
#define WDDM_GPUMMU_RULE_TABLE_SIZE 8u
#define WDDM_GPUMMU_RULE_ALIGNMENT 9u
#define WDDM_GPUMMU_RULE_TABLE_SEGMENT 10u
#define WDDM_GPUMMU_RULE_SYSTEM_TABLE_TOO_LARGE 11u
#define WDDM_GPUMMU_RULE_CPU_VIRTUAL_DIRECTORY_IN_SEGMENT 12u
#define WDDM_GPUMMU_RULE_TABLE_NOT_CPU_VISIBLE 13u
#define WDDM_GPUMMU_RULE_LEAF_64K_SIZE 14u
#define WDDM_GPUMMU_RULE_MAX_CONTEXTS 15u
#define WDDM_GPUMMU_RULE_COUNT 15u

/* wddm_gpummu_error.level of a rule about no level. */
#define WDDM_GPUMMU_NO_LEVEL UINT32_MAX
/* wddm_gpummu_error.owner: which of a level's two segment ids. */
#define WDDM_GPUMMU_OWNER_PROCESS 0u        /* PageTableSegmentId */
#define WDDM_GPUMMU_OWNER_PAGING_PROCESS 1u /* PagingProcessPageTableSegmentId */

/* The first broken rule and what the Rust GpuMmuRule carries with it. */
typedef struct wddm_gpummu_error {
    uint32_t rule;  /* WDDM_GPUMMU_RULE_* */
    uint32_t level; /* the level, or WDDM_GPUMMU_NO_LEVEL */
    uint32_t owner; /* TABLE_SEGMENT, TABLE_NOT_CPU_VISIBLE: WDDM_GPUMMU_OWNER_*; else 0 */
    uint32_t _pad0;
    uint64_t have;  /* the value that broke it (bits, count, size, segment id, ...); 0 if none */
    uint64_t want;  /* ADDRESS_BITS, TABLE_SIZE, LEAF_64K_SIZE: what the rule wants; else 0 */
} wddm_gpummu_error;

/* A geometry that passed wddm_gpummu_validate. */
typedef struct wddm_gpummu {
    WddmGpuMmuCaps caps;
    uint32_t level_count;
    uint32_t shift[WDDM_GPU_MAX_PAGE_TABLE_LEVELS]; /* the lowest VA bit each level indexes */
} wddm_gpummu;

/* The rule's name as wddm-gpu-abi's GpuMmuRule::name gives it ("gpummu.level_count", ...),
 * "" for WDDM_GPUMMU_RULE_NONE, NULL for a number that is no rule. */
const char *wddm_gpummu_rule_name(uint32_t rule);

/* Checks `caps` against every geometry rule; segment_flags[i] holds the DXGK_SEGMENTFLAGS of
 * segment i + 1 (segment_count of them; NULL when 0). WDDM_OK fills `out`; WDDM_E_CAPSET
 * fills `error` (when not NULL) with the first broken rule and leaves `out` untouched;
 * WDDM_E_INVALID for a NULL caps or out, or NULL flags with a count. */
wddm_result wddm_gpummu_validate(const WddmGpuMmuCaps *caps, const uint32_t *segment_flags,
                                 uint32_t segment_count, wddm_gpummu *out,
                                 wddm_gpummu_error *error);

/* DxgkDdiQueryAdapterInfo(DXGKQAITYPE_GPUMMUCAPS). WDDM_E_INVALID for a NULL argument or a
 * PhysicalAdapterIndex other than 0 (out untouched). LegacyBehaviors is 0. */
wddm_result wddm_gpummu_query_caps(const wddm_gpummu *gpummu,
                                   const wddm_dxgk_querygpummucapsin *in,
                                   wddm_dxgk_gpummucaps *out);
/* DxgkDdiQueryAdapterInfo(DXGKQAITYPE_PAGETABLELEVELDESC), one level per call.
 * WDDM_E_INVALID for a NULL argument, a PhysicalAdapterIndex other than 0 or a LevelIndex at
 * or past the level count; WDDM_E_RANGE when the size or alignment does not fit a UINT. The
 * output is untouched on a refusal. */
wddm_result wddm_gpummu_query_level_desc(const wddm_gpummu *gpummu,
                                         const wddm_dxgk_querypagetableleveldescin *in,
                                         wddm_dxgk_page_table_level_desc *out);
/* DxgkDdiGetRootPageTableSize: bytes of a root of `entries` entries (entries x 8 rounded up
 * to 4096). WDDM_E_RANGE past the root level's entries; WDDM_E_INVALID for NULL. */
wddm_result wddm_gpummu_root_table_size(const wddm_gpummu *gpummu, uint64_t entries,
                                        uint64_t *bytes);

/* Why a DXGK_PTE has no device entry (wddm-gpu-abi's PteConversionError). */
#define WDDM_PTE_OK 0u
#define WDDM_PTE_PHYSICAL_ADAPTER_INDEX 1u /* value: the index (not 0) */
#define WDDM_PTE_PAGE_TABLE_PAGE_SIZE 2u   /* value: the size field (above 1) */
#define WDDM_PTE_UNSUPPORTED_FIELDS 3u     /* value: Flags from bit 19 up, in place */
#define WDDM_PTE_PAGE_ADDRESS_TOO_LARGE 4u /* value: PageAddress (past 40 bits) */

typedef struct wddm_pte_error {
    uint32_t reason; /* WDDM_PTE_* */
    uint32_t index;  /* wddm_ptes_from_dxgk: the entry refused */
    uint64_t value;
} wddm_pte_error;

/* wddm_gpu_pte_from_dxgk in C: the device's 8-byte entry for a DXGK_PTE, with the same
 * refusals (WDDM_E_INVALID, `error` filled when not NULL, `entry` untouched). */
wddm_result wddm_pte_from_dxgk(const wddm_dxgk_pte *pte, uint64_t *entry, wddm_pte_error *error);
/* DxgkDdiBuildPagingBuffer(UPDATE_PAGE_TABLE)'s pPageTableEntries, converted: `count`
 * entries into `out` (the array an UPDATE_PAGE_TABLE packet's entries_address points at).
 * Every entry is checked before one is written: on a refusal `out` is untouched and
 * error->index names the entry. */
wddm_result wddm_ptes_from_dxgk(const wddm_dxgk_pte *ptes, uint32_t count, uint64_t *out,
                                wddm_pte_error *error);

/* DmaPageFaulted from the device's page-fault record (the SUBMIT_VIRTUAL answer, the status
 * page's node slot or a PAGE_FAULT event): FaultedFenceId (0 with FENCE_INVALID, as the DDK
 * asks), PageFaultFlags, FaultedVirtualAddress, NodeOrdinal, PageTableLevel and
 * FaultErrorCode from the record; the primitive sequence number, pipeline stage and bind
 * table entry UNKNOWN; EngineOrdinal 0; FaultedProcessHandle NULL. WDDM_E_DEVICE (out
 * untouched) for a record the device may not send: unknown flags, FENCE_INVALID without a
 * reset flag, a node or a level out of range. */
wddm_result wddm_page_fault_to_dxgk(const WddmGpuPageFaultRecord *record,
                                    wddm_dxgk_dma_page_faulted *out);

/* Builders of the GpuMmu commands and packets, byte for byte what wddm-gpu-abi's
 * build::gpuva builders make (checked against their bytes by the GpuMmu corpus). Each zeroes
 * the whole structure first; WDDM_E_INVALID only for a NULL output. A table or root is
 * (segment id, address): segment 0 with a guest-physical address, else a memory segment and
 * an offset in it. */
wddm_result wddm_build_update_page_table(WddmGpuPacketUpdatePageTable *p, uint32_t level,
                                         uint32_t table_segment, uint64_t table_address,
                                         uint32_t start, uint32_t count,
                                         uint64_t entries_address);
/* UPDATE_PAGE_TABLE with Repeat: `entry` in `count` slots from `start`. */
wddm_result wddm_build_update_page_table_repeat(WddmGpuPacketUpdatePageTable *p, uint32_t level,
                                                uint32_t table_segment, uint64_t table_address,
                                                uint32_t start, uint32_t count, uint64_t entry);
/* FLUSH_TLB of [start, end) under the root; start = end = 0 flushes everything. */
wddm_result wddm_build_flush_tlb(WddmGpuPacketFlushTlb *p, uint32_t root_segment,
                                 uint64_t root_address, uint64_t start, uint64_t end);
wddm_result wddm_build_create_context(WddmGpuCmdCreateContext *c, uint32_t id, uint32_t node,
                                      uint32_t flags);
wddm_result wddm_build_destroy_context(WddmGpuCmdDestroyContext *c, uint32_t id);
wddm_result wddm_build_set_root_page_table(WddmGpuCmdSetRootPageTable *c, uint32_t id,
                                           uint32_t root_segment, uint64_t root_address,
                                           uint32_t num_entries);
/* SUBMIT_VIRTUAL of the whole `size`-byte buffer at GPU VA `address` (node 1, offsets 0 and
 * size). */
wddm_result wddm_build_submit_virtual(WddmGpuCmdSubmitVirtual *c, uint32_t id, uint64_t address,
                                      uint32_t size, uint32_t fence_id);
/* RESET_ENGINE of the virtual node. */
wddm_result wddm_build_reset_engine(WddmGpuCmdResetEngine *c);
wddm_result wddm_build_virtual_copy(WddmGpuVirtualCopy *p, uint64_t length, uint64_t source,
                                    uint64_t destination);
wddm_result wddm_build_virtual_fill(WddmGpuVirtualFill *p, uint32_t pattern, uint64_t length,
                                    uint64_t destination);
wddm_result wddm_build_virtual_signal(WddmGpuVirtualSignal *p, uint64_t address, uint64_t value);

/* DXGK_OPERATION_UPDATE_PAGE_TABLE with GPU_PHYSICAL addresses, for wddm_pb_update_page_table:
 * the DDK's fields with pPageTableEntries already converted (wddm_ptes_from_dxgk) into DMA
 * memory. */
typedef struct wddm_op_update_page_table {
    uint32_t PageTableLevel;
    uint32_t Flags;       /* DXGK_UPDATEPAGETABLEFLAGS: the WDDM_GPU_UPDATE_FLAG_* bits */
    uint32_t SegmentId;   /* PageTableAddress.GpuPhysical.SegmentId: 0 or a memory segment */
    uint32_t StartIndex;
    uint64_t SegmentOffset; /* PageTableAddress.GpuPhysical.SegmentOffset: 8-byte aligned */
    uint32_t NumPageTableEntries;
    uint32_t _pad0;
    uint64_t EntriesBus;  /* without Repeat: bus address of the converted entries, 8-aligned */
    uint64_t Entry;       /* with Repeat: the converted entry */
} wddm_op_update_page_table;

/* DXGK_OPERATION_FLUSH_TLB. */
typedef struct wddm_op_flush_tlb {
    uint32_t SegmentId; /* RootPageTableAddress.SegmentId: 0 or a memory segment */
    uint32_t _pad0;
    uint64_t SegmentOffset; /* RootPageTableAddress.SegmentOffset: 4 KiB aligned */
    uint64_t StartVirtualAddress;
    uint64_t EndVirtualAddress; /* exclusive; both 0: the whole address space */
} wddm_op_flush_tlb;

/* The two paging-node packets into a paging buffer, refused as the other wddm_pb_* are
 * (nothing written): WDDM_E_STATE on a WDDM 1.3 layout; WDDM_E_INVALID for an unknown flag, a
 * segment that is no memory segment, a misaligned address (a table 8-byte, a root 4 KiB),
 * Repeat with an entries address or an array with an entry, an empty or reversed range other
 * than (0, 0); WDDM_E_FULL without room. */
wddm_result wddm_pb_update_page_table(wddm_pb *pb, const wddm_op_update_page_table *op);
wddm_result wddm_pb_flush_tlb(wddm_pb *pb, const wddm_op_flush_tlb *op);

/* ---- The split virtqueue ------------------------------------------------------------- */

#define WDDM_VQ_MAX_SIZE 64

typedef struct wddm_vq {
    uint16_t size;        /* entries, a power of two <= WDDM_VQ_MAX_SIZE */
    uint16_t free_head;   /* first free descriptor */
    uint16_t num_free;
    uint16_t avail_idx;   /* our next avail index */
    uint16_t last_used;   /* next used index to consume */
    uint16_t notify_off;  /* queue_notify_off */
    volatile void *desc;  /* rings (in `ring` DMA memory) */
    volatile void *avail;
    volatile void *used;
    volatile uint16_t *notify; /* the queue's notify register */
    uint16_t queue_index;
    wddm_os_dma ring;
    /* Our own copy of the chains: the device may scribble over the rings. */
    uint16_t next[WDDM_VQ_MAX_SIZE];
    uint8_t chain_len[WDDM_VQ_MAX_SIZE]; /* per head in flight; 0 = not a head in flight */
} wddm_vq;

/* ---- The device ---------------------------------------------------------------------- */

#define WDDM_SLOTS 32          /* requests in flight on the control queue */
#define WDDM_SLOT_SIZE 512     /* bytes of one slot: request in the first half, response after */
#define WDDM_COMPLETION_RING 32
#define WDDM_VIRTUAL_COMPLETION_RING 16
#define WDDM_EVENT_RING 32

typedef struct wddm_dev_config {
    uint32_t timeout_ms;   /* synchronous requests (capset, PREEMPT, RESET); 0 = 5000 */
    uint32_t queue_size;   /* control queue entries wanted; 0 = WDDM_VQ_MAX_SIZE */
    bool use_msix;         /* false: every vector VIRTIO_MSI_NO_VECTOR (polling or INTx) */
    uint16_t config_vector; /* MSI-X vectors when use_msix */
    uint16_t queue_vector;
} wddm_dev_config;

typedef struct wddm_slot {
    uint8_t state;  /* free, pending, answered */
    uint8_t kind;   /* sync, submit, event, abandoned (a timed-out sync request) */
    uint16_t head;  /* first descriptor */
    uint32_t used_len;
    uint32_t resp_len; /* the device-writable buffer's length: used_len may not exceed it */
    uint32_t fence; /* submit and virtual-submit slots: submission_fence_id */
    uint32_t order; /* submit slots: submission sequence number */
} wddm_slot;

typedef struct wddm_dev {
    wddm_os os;
    void *lock;
    uint32_t timeout_ms;

    /* virtio-pci modern register blocks, found through the vendor capabilities. */
    volatile uint8_t *common;
    volatile uint8_t *isr;
    volatile uint8_t *notify_base;
    uint32_t notify_len;
    uint32_t notify_off_multiplier;
    volatile uint8_t *device_cfg;
    volatile void *bar_va[6];
    uint64_t bar_len[6];
    uint64_t device_features;
    /* Shared memory region 0 (the VRAM in BAR mode 2), when the function has one. */
    bool has_shm;
    uint32_t shm_bar;
    uint64_t shm_offset, shm_length;

    wddm_vq ctrl;
    wddm_os_dma slot_mem;
    wddm_slot slots[WDDM_SLOTS];

    /* Capset copy (the layout's bank pointers point in here) and the validated layout. */
    wddm_os_dma capset_mem;
    uint64_t capset_size; /* bytes of capset_mem a GET_CAPSET may fill */
    wddm_layout layout;

    /* Submissions: sequence numbers in order, the completions not yet taken. */
    uint32_t submitted;
    uint32_t completed;
    uint32_t last_completed_fence;
    WddmGpuRespSubmit completions[WDDM_COMPLETION_RING];
    uint32_t completion_head, completion_count;

    /* SUBMIT_VIRTUAL: posted, answered, and the answers not yet taken. */
    uint32_t virtual_submitted;
    uint32_t virtual_completed;
    WddmGpuRespSubmitVirtual virtual_completions[WDDM_VIRTUAL_COMPLETION_RING];
    uint32_t virtual_head, virtual_count;

    /* Events answered and not yet taken; WAIT_EVENT requests posted. */
    WddmGpuRespEvent events[WDDM_EVENT_RING];
    uint32_t event_head, event_count;
    uint32_t events_posted;

    /* The status page (registered or not) and the fault ring consumer. */
    wddm_os_dma status_mem;
    bool status_registered;

    /* Set once the device broke a rule; every later call fails with WDDM_E_DEVICE. */
    bool broken;
    bool initialised;

    /* The interrupt path (wddm_dev_set_interrupt_driven, wddm_dev_interrupt_deferred): whether
     * synchronous requests wait for the deferred half instead of polling, the deferred half's
     * generation (advanced under the lock by each run), and the counters of
     * wddm_dev_counters. Written under the lock only. */
    bool interrupt_driven;
    uint32_t deferred_generation;
    uint64_t polled_collections;
    uint64_t deferred_collections;
} wddm_dev;

/* Device initialisation (virtio 1.x, section 3.1.1): enables memory decode and bus mastering
 * in config space, finds the common/notify/ISR/device blocks through the vendor capabilities,
 * resets, negotiates VIRTIO_F_VERSION_1, sets up the control queue, sets DRIVER_OK, then reads
 * and validates the capset (the layout is then wddm_dev_layout). */
wddm_result wddm_dev_init(wddm_dev *dev, const wddm_os *os, const wddm_dev_config *config);
/* Resets the function and frees everything init allocated. */
void wddm_dev_teardown(wddm_dev *dev);
const wddm_layout *wddm_dev_layout(const wddm_dev *dev);

/* Polling interval of wddm_dev_wait_bar_known. */
#define WDDM_BAR_POLL_US 10000u
/* Reads the capset again (every WDDM_BAR_POLL_US, at most timeout_ms) until the VRAM BAR
 * locator's state is WDDM_GPU_BAR_STATE_KNOWN: a KMD must not use the VRAM BAR or report
 * CpuTranslatedAddress before. In BAR mode 1 it is known at DRIVER_OK, so this returns at once;
 * in mode 2 it becomes known once the backend's SHMEM_MAP is in QEMU's memory table, some time
 * after DRIVER_OK (and after every device start). The layout (wddm_dev_layout) is the last one
 * read. `reads`, when not NULL, gets how many capset reads that took (init's included).
 * WDDM_E_TIMEOUT when the locator stayed unknown (the layout still says so). Sleeps: call it at
 * PASSIVE_LEVEL (DxgkDdiStartDevice). */
wddm_result wddm_dev_wait_bar_known(wddm_dev *dev, uint32_t timeout_ms, uint32_t *reads);

/* A synchronous request (capset, status page, PREEMPT, RESET) that gets no answer in
 * timeout_ms returns WDDM_E_TIMEOUT. Its slot cannot be reused at once (its buffers still belong
 * to the device): it stays in flight as abandoned, and the poll frees it, discarding the answer,
 * when the device finally answers; a device that never does keeps it until wddm_dev_teardown
 * (a virtio reset). wddm_dev_abandoned counts such slots. */
uint32_t wddm_dev_abandoned(const wddm_dev *dev);

/* ---- The interrupt path: a top half and a deferred half -------------------------------
 *
 * The top half runs in the interrupt itself (DxgkDdiInterruptRoutine at DIRQL; a Linux hard-IRQ
 * handler): it reads and acknowledges, nothing more. It takes no lock, allocates nothing,
 * never sleeps or waits, and touches only the ISR status register (for a line-based interrupt
 * or a shared message) and os.interrupt_ack. The deferred half (the DPC; a threaded IRQ or a
 * work item) takes the lock, collects every answered request from the used ring, and hands
 * completions, SUBMIT_VIRTUAL answers and events to the caller's sink. */

/* Where an interrupt came from: what the OS knows from the vector that fired. */
#define WDDM_IRQ_SOURCE_LINE 0u         /* INTx, maybe shared: the ISR byte says if it is ours */
#define WDDM_IRQ_SOURCE_MSIX_CONFIG 1u  /* the config vector's own message */
#define WDDM_IRQ_SOURCE_MSIX_QUEUE 2u   /* the control queue's own message */
#define WDDM_IRQ_SOURCE_MSIX_SHARED 3u  /* one message for configuration and queue (mode 2) */

/* What the top half found (the virtio ISR bits): 0 = not ours. */
#define WDDM_IRQ_QUEUE 0x1u  /* a queue may have used buffers: run the deferred half */
#define WDDM_IRQ_CONFIG 0x2u /* a configuration change */

/* The top half. LINE: reads the ISR status byte (reading acknowledges the interrupt and lowers
 * the line) and returns its two bits, 0 when the interrupt was another device's. An MSI-X
 * message is ours by definition: MSIX_QUEUE returns WDDM_IRQ_QUEUE and MSIX_CONFIG
 * WDDM_IRQ_CONFIG without a register access; MSIX_SHARED reads the ISR byte for the
 * configuration bit and returns it with WDDM_IRQ_QUEUE. os.interrupt_ack gets every non-zero
 * result. An unknown source, or a device whose registers are not mapped, returns 0. */
uint32_t wddm_dev_interrupt_top(wddm_dev *dev, uint32_t source);

/* Where the deferred half hands what the device answered; every entry optional (NULL leaves
 * those answers in their ring for wddm_dev_next_completion, _next_virtual_completion and
 * _next_event). Called without the library's lock held, in the order the answers were taken. */
typedef struct wddm_irq_sink {
    void *ctx;
    /* A SUBMIT answered (DXGK_INTERRUPT_DMA_COMPLETED; a dma_fence signalled). */
    void (*completion)(void *ctx, const WddmGpuRespSubmit *completion);
    void (*virtual_completion)(void *ctx, const WddmGpuRespSubmitVirtual *completion);
    void (*event)(void *ctx, const WddmGpuRespEvent *event);
    /* WDDM_IRQ_CONFIG was in `bits`: re-read what the driver caches from config space. */
    void (*config_changed)(void *ctx);
} wddm_irq_sink;

/* The deferred half, with the bits the top half returned (accumulated since its last run):
 * config_changed first when WDDM_IRQ_CONFIG is set; then, under the lock, every answered
 * request is collected from the used ring (synchronous answers, completions, events), the
 * generation os.wait_interrupt sleeps on advances, and once the lock is released the sink gets
 * each completion, SUBMIT_VIRTUAL answer and event. The used ring is read whatever `bits` says
 * (answers may come after the bits were taken). WDDM_E_DEVICE when the device broke a rule
 * (what was collected before is still handed on); WDDM_E_STATE before wddm_dev_init. PASSIVE
 * or DISPATCH level (the lock is the OS's spin lock); never from the top half. */
wddm_result wddm_dev_interrupt_deferred(wddm_dev *dev, uint32_t bits, const wddm_irq_sink *sink);

/* Interrupt-driven mode: with `on`, the synchronous requests (capset, status page, PREEMPT,
 * RESET, the context commands, QUERY_ENGINE_STATUS) no longer poll the used ring but sleep in
 * os.wait_interrupt until the deferred half collected their answer. Call it once the OS's
 * interrupt handlers run the two halves (after wddm_dev_init; wddm_dev_init itself polls).
 * WDDM_E_INVALID without os.wait_interrupt; WDDM_E_STATE before wddm_dev_init. */
wddm_result wddm_dev_set_interrupt_driven(wddm_dev *dev, bool on);

/* How the used ring was read: `polled` counts collections by a polling path (wddm_dev_poll,
 * the polling waits of the synchronous requests, wddm_dev_wait_virtual_completion, the TDR
 * waits), `deferred` the deferred half's runs. An interrupt-driven driver sees `polled` stop
 * growing once it called wddm_dev_set_interrupt_driven (init's capset reads poll). */
typedef struct wddm_dev_counters {
    uint64_t polled;
    uint64_t deferred;
} wddm_dev_counters;
wddm_result wddm_dev_get_counters(wddm_dev *dev, wddm_dev_counters *out);

/* The earlier interrupt entry points, kept: wddm_dev_isr is the top half of a line-based
 * interrupt returning the raw ISR byte (wddm_dev_interrupt_top(dev, WDDM_IRQ_SOURCE_LINE) with
 * all eight bits); wddm_dev_poll collects every answered request like the deferred half but
 * counts as polling, and is what a caller without an interrupt uses. */
uint32_t wddm_dev_isr(wddm_dev *dev);
wddm_result wddm_dev_poll(wddm_dev *dev);

/* DxgkDdiSubmitCommand: queues a WDDM_GPU_CMD_SUBMIT. WDDM_E_FULL when every slot is busy. */
typedef struct wddm_submit {
    uint64_t dma_buffer_address;
    uint32_t dma_buffer_segment_id;
    uint32_t flags; /* WDDM_GPU_SUBMIT_FLAG_* */
    uint32_t dma_buffer_size;
    uint32_t start_offset;
    uint32_t end_offset;
    uint32_t fence_id;
} wddm_submit;
wddm_result wddm_dev_submit(wddm_dev *dev, const wddm_submit *submit);
/* The oldest completion not yet taken (after a poll); WDDM_E_EMPTY when none. Completions are
 * checked to arrive in submission order with the fence they were submitted with. */
wddm_result wddm_dev_next_completion(wddm_dev *dev, WddmGpuRespSubmit *out);
/* Submissions queued and not yet completed. */
uint32_t wddm_dev_pending(const wddm_dev *dev);
/* Latest fence the completions reported (DXGK_INTERRUPT_DMA_COMPLETED). */
uint32_t wddm_dev_last_completed_fence(const wddm_dev *dev);

/* Events: keeps `count` WAIT_EVENT requests posted in total; next_event takes the oldest
 * answered one (its kind checked: FAULT to STALE_TRANSLATION, the GpuMmu kinds PAGE_FAULT,
 * MONITORED_FENCE and STALE_TRANSLATION included), WDDM_E_EMPTY when none. */
wddm_result wddm_dev_post_events(wddm_dev *dev, uint32_t count);
wddm_result wddm_dev_next_event(wddm_dev *dev, WddmGpuRespEvent *out);
uint32_t wddm_dev_events_posted(const wddm_dev *dev);

/* The status page: allocated on first registration; unregister with wddm_dev_status_page_
 * unregister. wddm_dev_status copies the header (fault_head read first, acquire ordering);
 * wddm_dev_next_fault consumes the oldest fault record (checks the ring indices). */
wddm_result wddm_dev_status_page_register(wddm_dev *dev);
wddm_result wddm_dev_status_page_unregister(wddm_dev *dev);
wddm_result wddm_dev_status(wddm_dev *dev, WddmGpuStatusPage *out);
wddm_result wddm_dev_next_fault(wddm_dev *dev, WddmGpuFaultRecord *out);

/* DxgkDdiPreemptCommand (synchronous here: waits for the answer; the preempted submissions
 * come back through wddm_dev_next_completion with status PREEMPTED). The answer is per node:
 * the paging node's fences and count, then the virtual node's (virtual_*), one
 * DXGK_INTERRUPT_DMA_PREEMPTED for each node whose count is not 0. */
wddm_result wddm_dev_preempt(wddm_dev *dev, WddmGpuRespPreempt *out);
/* DxgkDdiResetFromTimeout: waits for OK_NODATA. Dropped submissions complete with status
 * RESET, posted WAIT_EVENTs as CANCELLED events; the status page is unregistered. */
wddm_result wddm_dev_reset(wddm_dev *dev);

/* ---- Timeout detection and recovery (docs/fault-injection.md) ------------------------- */

/* QUERY_ENGINE_STATUS of `node` (DxgkDdiQueryEngineStatus; synchronous). The answer is checked:
 * its type and length, the node asked about, known flags only, and `released` (answers a lost
 * interrupt had withheld, each answered before this one) no more than the completions that
 * arrived meanwhile: the poll already put them in the completion ring. WDDM_E_REFUSED when the
 * device refused the node (ERR_INVALID_PARAMETER). */
wddm_result wddm_dev_query_engine_status(wddm_dev *dev, uint32_t node,
                                         WddmGpuRespEngineStatus *out);
/* DxgkDdiQueryCurrentFence: the paging node's last completed fence (`current_fence`) and how
 * many withheld answers the query released (`released`, may be NULL). Afterwards every
 * completion the device had withheld is in the completion ring: take them with
 * wddm_dev_next_completion and report them (DxgkCbNotifyInterrupt, DMA_COMPLETED) before
 * returning the fence. */
wddm_result wddm_dev_query_current_fence(wddm_dev *dev, uint32_t *current_fence,
                                         uint32_t *released);

/* What wddm_dev_reset_from_timeout did. */
typedef struct wddm_tdr_report {
    WddmGpuRespEngineStatus status; /* QUERY_ENGINE_STATUS before the reset */
    bool status_valid;              /* false when the query timed out or was refused */
    uint32_t aborted_count;         /* submissions that came back with status RESET */
    uint32_t aborted[WDDM_COMPLETION_RING];
    uint32_t completed_count;       /* completions taken that were not RESET: they ran */
    WddmGpuRespSubmit completed[WDDM_COMPLETION_RING];
    uint32_t resubmitted_count;     /* aborted fences resubmitted */
    uint32_t resubmitted[WDDM_COMPLETION_RING];
    uint32_t reported_count;        /* aborted fences not resubmittable: report them */
    uint32_t reported[WDDM_COMPLETION_RING];
} wddm_tdr_report;

/* DxgkDdiResetFromTimeout and DxgkDdiRestartFromTimeout in one call (it waits: PASSIVE_LEVEL):
 * QUERY_ENGINE_STATUS (for the report; it also releases answers a lost interrupt held), RESET,
 * then waits (timeout_ms) until every submission came back and every posted WAIT_EVENT came back
 * CANCELLED (the CANCELLED events stay in the event ring), takes every completion left in the
 * ring into the report (status RESET: aborted; any other: it ran), registers the status page
 * again if it was registered, posts `events` WAIT_EVENTs, and resubmits (wddm_dev_submit, same
 * fence) each of the `count` submissions of `resubmittable` (the KMD's own copies, in submission
 * order) whose fence was aborted; the other aborted fences are listed as `reported`.
 * WDDM_E_TIMEOUT when the RESET or the returns did not come in time; WDDM_E_INVALID for bad
 * arguments (count past WDDM_COMPLETION_RING, events past WDDM_EVENT_RING). */
wddm_result wddm_dev_reset_from_timeout(wddm_dev *dev, const wddm_submit *resubmittable,
                                        uint32_t count, uint32_t events,
                                        wddm_tdr_report *report);

/* Where the CPU sees the VRAM the capset's locator names: PCI function, BAR and the VRAM's
 * offset in that BAR (the shared memory region's offset in mode 2, 0 in mode 1). */
wddm_result wddm_dev_vram_location(const wddm_dev *dev, uint32_t *function, uint32_t *bar,
                                   uint64_t *offset);

/* A CPU view of `length` bytes at `offset` of a CPU-visible memory segment, through the VRAM
 * BAR the capset's locator names (mapped with os.bar_map; unmap with os.bar_unmap). NULL when
 * the segment has no BAR window or the range leaves it. */
volatile void *wddm_dev_map_segment(wddm_dev *dev, uint32_t segment_id, uint64_t offset,
                                    uint64_t length);

/* GPU virtual addressing: reads capset 62 (GET_CAPSET_INFO index 1, GET_CAPSET id 62 version
 * 1) and validates it (wddm_gpummu_validate) against the segment capset's flags.
 * WDDM_E_STATE when the device is not initialised or offers no GpuMmu (num_capsets below 2,
 * or capset index 1 is another capset); WDDM_E_DEVICE for an answer the programming guide
 * forbids; WDDM_E_CAPSET when the geometry breaks a rule (logged under the rule's name with
 * the value and the level, `error` filled) or comes with a WDDM 1.3 segment layout. Those two
 * mark the device broken, as a bad segment capset does. `out` is filled only on WDDM_OK.
 * Synchronous: call it at PASSIVE_LEVEL (DxgkDdiStartDevice). */
wddm_result wddm_dev_read_gpummu(wddm_dev *dev, wddm_gpummu *out, wddm_gpummu_error *error);

/* ---- Contexts and the virtual node (WDDM 2.x GpuMmu; programming guide chapter 12) ----
 *
 * The context commands are synchronous (each waits timeout_ms for its answer, as PREEMPT and
 * RESET do): WDDM_OK on OK_NODATA; WDDM_E_REFUSED when the device answered an ERR_* type
 * (ERR_INVALID_PARAMETER: an id in use or past max_contexts, an unknown node or flag, no such
 * context, a bad root; the type is logged), nothing done and the device still usable;
 * WDDM_E_DEVICE for any other answer or a short one (the device is then broken);
 * WDDM_E_TIMEOUT, WDDM_E_INVALID (not initialised, a reserved field set) as elsewhere. */

/* DxgkDdiCreateContext with GPU virtual addressing: CREATE_CONTEXT `id` on `node`. */
wddm_result wddm_dev_create_context(wddm_dev *dev, uint32_t id, uint32_t node, uint32_t flags);
/* DxgkDdiDestroyContext: DESTROY_CONTEXT (answered once no submission of it runs). */
wddm_result wddm_dev_destroy_context(wddm_dev *dev, uint32_t id);
/* DxgkDdiSetRootPageTable: binds the root (segment 0 with a guest-physical address, or a
 * memory segment and an offset) and its entry count to context `id`. */
wddm_result wddm_dev_set_root_page_table(wddm_dev *dev, uint32_t id, uint32_t root_segment,
                                         uint64_t root_address, uint32_t num_entries);
/* DxgkDdiResetEngine: RESET_ENGINE of the virtual node (drops its queued work, clears its
 * fault; answered once the node is idle). */
wddm_result wddm_dev_reset_engine(wddm_dev *dev);

/* DxgkDdiSubmitCommandVirtual: posts `cmd` (built by wddm_build_submit_virtual) and returns at
 * once; the answer arrives as an interrupt and the poll (wddm_dev_poll) collects it.
 * WDDM_E_INVALID for a command that is no SUBMIT_VIRTUAL or breaks its rules (size past
 * WDDM_GPU_MAX_DMA_BUFFER_SIZE, offsets out of order, flags or reserved set), WDDM_E_FULL when
 * no slot or no room for its answer is free. */
wddm_result wddm_dev_submit_virtual(wddm_dev *dev, const WddmGpuCmdSubmitVirtual *cmd);
/* The oldest SUBMIT_VIRTUAL answer not yet taken (after a poll); WDDM_E_EMPTY when none.
 * Each answer is checked by the poll: type RESP_SUBMIT_VIRTUAL, the whole structure, the
 * fence its request was posted with, a known status; a broken one breaks the device. Answers
 * come in the order the device gives them (a refused submission may overtake running ones);
 * match them by fence. With status PAGE_FAULT the record is for wddm_page_fault_to_dxgk. */
wddm_result wddm_dev_next_virtual_completion(wddm_dev *dev, WddmGpuRespSubmitVirtual *out);
/* Polls (every 200 us, at most timeout_ms) until a SUBMIT_VIRTUAL answer is there and takes
 * it: for a caller without an interrupt (tests, a driver's synchronous paths). Sleeps. */
wddm_result wddm_dev_wait_virtual_completion(wddm_dev *dev, WddmGpuRespSubmitVirtual *out);
/* SUBMIT_VIRTUAL requests posted and not yet answered. */
uint32_t wddm_dev_virtual_pending(const wddm_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* WDDM_GPU_DEV_H */
