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
    uint32_t fence; /* submit slots: submission_fence_id */
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

/* Interrupt side. wddm_dev_isr reads (and so acknowledges) the virtio ISR status; it returns
 * it (bit 0: a queue has used buffers) and calls os.interrupt_ack. wddm_dev_poll (the DPC)
 * collects every answered request: submission completions, events, synchronous answers. */
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
 * answered one (its kind checked), WDDM_E_EMPTY when none. */
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
 * come back through wddm_dev_next_completion with status PREEMPTED). */
wddm_result wddm_dev_preempt(wddm_dev *dev, WddmGpuRespPreempt *out);
/* DxgkDdiResetFromTimeout: waits for OK_NODATA. Dropped submissions complete with status
 * RESET, posted WAIT_EVENTs as CANCELLED events; the status page is unregistered. */
wddm_result wddm_dev_reset(wddm_dev *dev);

/* Where the CPU sees the VRAM the capset's locator names: PCI function, BAR and the VRAM's
 * offset in that BAR (the shared memory region's offset in mode 2, 0 in mode 1). */
wddm_result wddm_dev_vram_location(const wddm_dev *dev, uint32_t *function, uint32_t *bar,
                                   uint64_t *offset);

/* A CPU view of `length` bytes at `offset` of a CPU-visible memory segment, through the VRAM
 * BAR the capset's locator names (mapped with os.bar_map; unmap with os.bar_unmap). NULL when
 * the segment has no BAR window or the range leaves it. */
volatile void *wddm_dev_map_segment(wddm_dev *dev, uint32_t segment_id, uint64_t offset,
                                    uint64_t length);

#ifdef __cplusplus
}
#endif

#endif /* WDDM_GPU_DEV_H */
