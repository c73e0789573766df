/* The paging-buffer builder: DXGK_OPERATION_* to wddm_gpu.h packets (programming guide,
 * section 10). Each operation is checked whole against the layout (segment kinds, ranges,
 * 64-bit overflow, frame-list limits, reserved flags) before its packet is written. */

#include "util.h"

static bool pfn_list_ok(const wddm_pb *pb, const wddm_pfn_list *l)
{
    return l->bus % 8 == 0 && l->count <= pb->layout->header.max_frame_list_entries;
}

/* A segment range [address, address + length) inside segment `id`. */
static wddm_result segment_range(const wddm_pb *pb, uint32_t id, uint64_t address,
                                 uint64_t length, const wddm_segment **out)
{
    const wddm_segment *s = wddm_layout_segment(pb->layout, id);
    uint64_t end, seg_end;
    if (!s)
        return WDDM_E_INVALID;
    if (!wddm_add(address, length, &end) ||
        !wddm_add(s->desc.base_address, s->desc.size, &seg_end))
        return WDDM_E_RANGE;
    if (address < s->desc.base_address || end > seg_end)
        return WDDM_E_RANGE;
    *out = s;
    return WDDM_OK;
}

static wddm_result emit(wddm_pb *pb, uint16_t opcode, void *packet, uint32_t size)
{
    if (size > pb->layout->header.max_packet_size || size % WDDM_GPU_PACKET_ALIGN)
        return WDDM_E_INVALID;
    if (pb->size - pb->used < size)
        return WDDM_E_FULL;
    WddmGpuPacketHeader *h = packet;
    h->opcode = opcode;
    h->flags = 0;
    h->size = size;
    wddm_copy(pb->base + pb->used, packet, size);
    pb->used += size;
    pb->packets++;
    return WDDM_OK;
}

wddm_result wddm_pb_init(wddm_pb *pb, const wddm_layout *layout, void *buffer, uint32_t size)
{
    if (!pb || !layout || !buffer)
        return WDDM_E_INVALID;
    pb->base = buffer;
    pb->size = size;
    pb->used = 0;
    pb->packets = 0;
    pb->layout = layout;
    return WDDM_OK;
}

/* One side of a TRANSFER as an endpoint: segment address + TransferOffset, or the MDL's PFN
 * list starting MdlOffset pages (+ the first page's byte offset) in, the data inside it. */
static wddm_result endpoint(const wddm_pb *pb, const wddm_paging_side *side, uint64_t offset,
                            uint32_t mdl_offset, uint64_t length, WddmGpuEndpoint *ep)
{
    wddm_zero(ep, sizeof(*ep));
    if (side->SegmentId != 0) {
        const wddm_segment *s;
        uint64_t address;
        if (!wddm_add(side->SegmentAddress, offset, &address))
            return WDDM_E_RANGE;
        wddm_result r = segment_range(pb, side->SegmentId, address, length, &s);
        if (r)
            return r;
        ep->segment_id = side->SegmentId;
        ep->address = address;
        return WDDM_OK;
    }
    uint64_t byte_offset = (uint64_t)mdl_offset * WDDM_PAGE + side->Mdl.byte_offset, end;
    if (!pfn_list_ok(pb, &side->Mdl) || side->Mdl.byte_offset >= WDDM_PAGE)
        return WDDM_E_INVALID;
    if (byte_offset > UINT32_MAX || !wddm_add(byte_offset, length, &end))
        return WDDM_E_RANGE;
    if (end > (uint64_t)side->Mdl.count * WDDM_PAGE)
        return WDDM_E_RANGE; /* the list does not cover the data */
    ep->frame_count = side->Mdl.count;
    ep->address = side->Mdl.bus;
    ep->byte_offset = (uint32_t)byte_offset;
    return WDDM_OK;
}

wddm_result wddm_pb_transfer(wddm_pb *pb, const wddm_op_transfer *op)
{
    if (!pb || !op)
        return WDDM_E_INVALID;
    WddmGpuPacketTransfer p;
    wddm_zero(&p, sizeof(p));
    wddm_result r;
    if ((r = endpoint(pb, &op->Source, op->TransferOffset, op->MdlOffset, op->TransferSize,
                      &p.source)) ||
        (r = endpoint(pb, &op->Destination, op->TransferOffset, op->MdlOffset, op->TransferSize,
                      &p.destination)))
        return r;
    p.length = op->TransferSize;
    return emit(pb, WDDM_GPU_OP_TRANSFER, &p, sizeof(p));
}

wddm_result wddm_pb_fill(wddm_pb *pb, const wddm_op_fill *op)
{
    const wddm_segment *s;
    if (!pb || !op)
        return WDDM_E_INVALID;
    wddm_result r = segment_range(pb, op->DestinationSegmentId, op->DestinationSegmentAddress,
                                  op->FillSize, &s);
    if (r)
        return r;
    if (wddm_segment_is_aperture(s))
        return WDDM_E_INVALID; /* FILL needs a memory segment */
    WddmGpuPacketFill p;
    wddm_zero(&p, sizeof(p));
    p.pattern = op->FillPattern;
    p.length = op->FillSize;
    p.destination.segment_id = op->DestinationSegmentId;
    p.destination.address = op->DestinationSegmentAddress;
    return emit(pb, WDDM_GPU_OP_FILL, &p, sizeof(p));
}

/* DISCARD_CONTENT, READ_PHYSICAL and WRITE_PHYSICAL: `length` bytes at `address` inside
 * segment `id` (a memory segment when `memory_only`), as one segment-access packet. */
static wddm_result segment_access(wddm_pb *pb, uint16_t opcode, uint32_t id, uint64_t address,
                                  uint64_t length, uint32_t flags_or_size, bool memory_only)
{
    const wddm_segment *s;
    wddm_result r = segment_range(pb, id, address, length, &s);
    if (r)
        return r;
    if (memory_only && wddm_segment_is_aperture(s))
        return WDDM_E_INVALID;
    WddmGpuPacketSegmentAccess p;
    wddm_zero(&p, sizeof(p));
    p.segment_id = id;
    p.flags_or_size = flags_or_size;
    p.address = address;
    return emit(pb, opcode, &p, sizeof(p));
}

wddm_result wddm_pb_discard(wddm_pb *pb, const wddm_op_discard *op)
{
    if (!pb || !op || op->AllocationIsIdle > 1)
        return WDDM_E_INVALID;
    return segment_access(pb, WDDM_GPU_OP_DISCARD_CONTENT, op->SegmentId, op->SegmentAddress, 0,
                          op->AllocationIsIdle ? WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE : 0,
                          true);
}

static wddm_result physical(wddm_pb *pb, const wddm_op_physical *op, uint16_t opcode)
{
    if (!pb || !op || op->Size < 1 || op->Size > 8)
        return WDDM_E_INVALID;
    return segment_access(pb, opcode, op->SegmentId, op->PhysicalAddress, op->Size, op->Size,
                          false);
}

wddm_result wddm_pb_read_physical(wddm_pb *pb, const wddm_op_physical *op)
{
    return physical(pb, op, WDDM_GPU_OP_READ_PHYSICAL);
}

wddm_result wddm_pb_write_physical(wddm_pb *pb, const wddm_op_physical *op)
{
    return physical(pb, op, WDDM_GPU_OP_WRITE_PHYSICAL);
}

/* Pages [first, first + count) inside aperture `id`; `coherent` only into a coherent one. */
static wddm_result aperture_pages(const wddm_pb *pb, uint32_t id, uint64_t first, uint64_t count,
                                  uint32_t coherent)
{
    const wddm_segment *s = wddm_layout_segment(pb->layout, id);
    uint64_t end;
    if (!s || !wddm_segment_is_aperture(s) || coherent > 1)
        return WDDM_E_INVALID;
    if (coherent && !(s->desc.flags & WDDM_DXGK_SEGMENT_CACHE_COHERENT))
        return WDDM_E_INVALID;
    if (!wddm_add(first, count, &end) || end > s->desc.size / WDDM_PAGE)
        return WDDM_E_RANGE;
    return WDDM_OK;
}

/* What MAP_APERTURE and MAP_APERTURE2 share: the aperture pages, then `count` frames from
 * `list_offset` on inside a frame list of `list_count`. */
static wddm_result map_pages(const wddm_pb *pb, uint32_t id, uint64_t first, uint64_t count,
                             uint32_t coherent, uint64_t list_offset, uint64_t list_count)
{
    uint64_t end;
    wddm_result r = aperture_pages(pb, id, first, count, coherent);
    if (r)
        return r;
    if (!wddm_add(list_offset, count, &end) || end > list_count)
        return WDDM_E_RANGE;
    return WDDM_OK;
}

wddm_result wddm_pb_map_aperture(wddm_pb *pb, const wddm_op_map_aperture *op)
{
    if (!pb || !op || !pfn_list_ok(pb, &op->Mdl))
        return WDDM_E_INVALID;
    wddm_result r = map_pages(pb, op->SegmentId, op->OffsetInPages, op->NumberOfPages,
                              op->CacheCoherent, op->MdlOffset, op->Mdl.count);
    if (r)
        return r;
    WddmGpuPacketMapAperture p;
    wddm_zero(&p, sizeof(p));
    p.segment_id = op->SegmentId;
    p.flags = op->CacheCoherent ? WDDM_GPU_MAP_FLAG_CACHE_COHERENT : 0;
    p.first_page = op->OffsetInPages;
    p.page_count = op->NumberOfPages;
    p.frame_list_address = op->Mdl.bus;
    p.frame_count = op->Mdl.count;
    p.frame_offset = op->MdlOffset;
    return emit(pb, WDDM_GPU_OP_MAP_APERTURE, &p, sizeof(p));
}

wddm_result wddm_pb_map_aperture2(wddm_pb *pb, const wddm_op_map_aperture2 *op)
{
    if (!pb || !op || op->AdlContiguous > 1 ||
        (!op->AdlContiguous && (op->AdlBase % 8 != 0 ||
                                op->AdlPageCount > pb->layout->header.max_frame_list_entries)))
        return WDDM_E_INVALID;
    wddm_result r = map_pages(pb, op->SegmentId, op->OffsetInPages, op->NumberOfPages,
                              op->CacheCoherent, op->AdlOffset, op->AdlPageCount);
    if (r)
        return r;
    WddmGpuPacketMapAperture2 p;
    wddm_zero(&p, sizeof(p));
    p.segment_id = op->SegmentId;
    p.flags = op->CacheCoherent ? WDDM_GPU_MAP_FLAG_CACHE_COHERENT : 0;
    p.first_page = op->OffsetInPages;
    p.page_count = op->NumberOfPages;
    p.adl_flags = op->AdlContiguous ? WDDM_GPU_ADL_FLAG_CONTIGUOUS : 0;
    p.adl_offset = op->AdlOffset;
    p.adl_base = op->AdlBase;
    p.adl_page_count = op->AdlPageCount;
    return emit(pb, WDDM_GPU_OP_MAP_APERTURE2, &p, sizeof(p));
}

wddm_result wddm_pb_unmap_aperture(wddm_pb *pb, const wddm_op_unmap_aperture *op)
{
    if (!pb || !op || op->DummyPage % WDDM_PAGE != 0)
        return WDDM_E_INVALID;
    wddm_result r = aperture_pages(pb, op->SegmentId, op->OffsetInPages, op->NumberOfPages, 0);
    if (r)
        return r;
    WddmGpuPacketUnmapAperture p;
    wddm_zero(&p, sizeof(p));
    p.segment_id = op->SegmentId;
    p.first_page = op->OffsetInPages;
    p.page_count = op->NumberOfPages;
    p.dummy_page = op->DummyPage;
    return emit(pb, WDDM_GPU_OP_UNMAP_APERTURE, &p, sizeof(p));
}

wddm_result wddm_pb_fence(wddm_pb *pb, uint32_t fence_id)
{
    if (!pb)
        return WDDM_E_INVALID;
    WddmGpuPacketFence p;
    wddm_zero(&p, sizeof(p));
    p.fence_id = fence_id;
    return emit(pb, WDDM_GPU_OP_FENCE, &p, sizeof(p));
}

wddm_result wddm_pb_raw(wddm_pb *pb, const void *packet, uint32_t size)
{
    if (!pb || !packet)
        return WDDM_E_INVALID;
    if (pb->size - pb->used < size)
        return WDDM_E_FULL;
    wddm_copy(pb->base + pb->used, packet, size);
    pb->used += size;
    pb->packets++;
    return WDDM_OK;
}

/* ---- The paging node's GpuMmu packets (WDDM 2.x) ---- */

/* Where a page table or a root may live: 0 (system memory) or a memory segment. */
static bool table_segment_ok(const wddm_pb *pb, uint32_t id)
{
    const wddm_segment *s = wddm_layout_segment(pb->layout, id);
    return id == 0 || (s && !wddm_segment_is_aperture(s));
}

wddm_result wddm_pb_update_page_table(wddm_pb *pb, const wddm_op_update_page_table *op)
{
    if (!pb || !op)
        return WDDM_E_INVALID;
    if (pb->layout->header.wddm_version != WDDM_GPU_WDDM_2_0)
        return WDDM_E_STATE;
    bool repeat = op->Flags & WDDM_GPU_UPDATE_FLAG_REPEAT;
    if (op->Flags & ~(uint32_t)WDDM_GPU_UPDATE_FLAGS_KNOWN || !table_segment_ok(pb, op->SegmentId) ||
        op->SegmentOffset % 8 != 0 ||
        (repeat ? op->EntriesBus != 0 : op->Entry != 0 || op->EntriesBus % 8 != 0))
        return WDDM_E_INVALID;
    WddmGpuPacketUpdatePageTable p;
    if (repeat)
        (void)wddm_build_update_page_table_repeat(&p, op->PageTableLevel, op->SegmentId,
                                                  op->SegmentOffset, op->StartIndex,
                                                  op->NumPageTableEntries, op->Entry);
    else
        (void)wddm_build_update_page_table(&p, op->PageTableLevel, op->SegmentId,
                                           op->SegmentOffset, op->StartIndex,
                                           op->NumPageTableEntries, op->EntriesBus);
    p.flags = op->Flags; /* InitialUpdate, NotifyEviction and Use64KBPages as VidMm set them */
    return emit(pb, WDDM_GPU_OP_UPDATE_PAGE_TABLE, &p, sizeof(p));
}

wddm_result wddm_pb_flush_tlb(wddm_pb *pb, const wddm_op_flush_tlb *op)
{
    if (!pb || !op)
        return WDDM_E_INVALID;
    if (pb->layout->header.wddm_version != WDDM_GPU_WDDM_2_0)
        return WDDM_E_STATE;
    bool everything = op->StartVirtualAddress == 0 && op->EndVirtualAddress == 0;
    if (!table_segment_ok(pb, op->SegmentId) || op->SegmentOffset % WDDM_PAGE != 0 ||
        (!everything && op->StartVirtualAddress >= op->EndVirtualAddress))
        return WDDM_E_INVALID;
    WddmGpuPacketFlushTlb p;
    (void)wddm_build_flush_tlb(&p, op->SegmentId, op->SegmentOffset, op->StartVirtualAddress,
                               op->EndVirtualAddress);
    return emit(pb, WDDM_GPU_OP_FLUSH_TLB, &p, sizeof(p));
}
