/* Builders of the GpuMmu commands (contexts, roots, virtual submissions, engine reset), the
 * paging node's page-table packets and the virtual node's packets: wddm-gpu-abi's
 * build::gpuva in C. Each structure is zeroed whole first, so every reserved field and the
 * header's unused fields are 0 as the Rust builders leave them; the GpuMmu corpus compares
 * the bytes with theirs. */

#include "util.h"

/* The packet header a Rust `header::<T>(opcode)` makes: flags 0, size the structure's. */
static WddmGpuPacketHeader header(uint16_t opcode, uint32_t size)
{
    WddmGpuPacketHeader h;
    h.opcode = opcode;
    h.flags = 0;
    h.size = size;
    return h;
}

wddm_result wddm_build_update_page_table(WddmGpuPacketUpdatePageTable *p, uint32_t level,
                                         uint32_t table_segment, uint64_t table_address,
                                         uint32_t start, uint32_t count,
                                         uint64_t entries_address)
{
    if (!p)
        return WDDM_E_INVALID;
    wddm_zero(p, sizeof(*p));
    p->header = header(WDDM_GPU_OP_UPDATE_PAGE_TABLE, sizeof(*p));
    p->page_table_level = level;
    p->table_segment_id = table_segment;
    p->start_index = start;
    p->table_address = table_address;
    p->entry_count = count;
    p->entries_address = entries_address;
    return WDDM_OK;
}

wddm_result wddm_build_update_page_table_repeat(WddmGpuPacketUpdatePageTable *p, uint32_t level,
                                                uint32_t table_segment, uint64_t table_address,
                                                uint32_t start, uint32_t count, uint64_t entry)
{
    wddm_result r =
        wddm_build_update_page_table(p, level, table_segment, table_address, start, count, 0);
    if (r)
        return r;
    p->flags = WDDM_GPU_UPDATE_FLAG_REPEAT;
    p->entry = entry;
    return WDDM_OK;
}

wddm_result wddm_build_flush_tlb(WddmGpuPacketFlushTlb *p, uint32_t root_segment,
                                 uint64_t root_address, uint64_t start, uint64_t end)
{
    if (!p)
        return WDDM_E_INVALID;
    wddm_zero(p, sizeof(*p));
    p->header = header(WDDM_GPU_OP_FLUSH_TLB, sizeof(*p));
    p->root_segment_id = root_segment;
    p->root_address = root_address;
    p->start_virtual_address = start;
    p->end_virtual_address = end;
    return WDDM_OK;
}

wddm_result wddm_build_create_context(WddmGpuCmdCreateContext *c, uint32_t id, uint32_t node,
                                      uint32_t flags)
{
    if (!c)
        return WDDM_E_INVALID;
    wddm_zero(c, sizeof(*c));
    c->hdr.type_ = WDDM_GPU_CMD_CREATE_CONTEXT;
    c->context_id = id;
    c->node_ordinal = node;
    c->flags = flags;
    return WDDM_OK;
}

wddm_result wddm_build_destroy_context(WddmGpuCmdDestroyContext *c, uint32_t id)
{
    if (!c)
        return WDDM_E_INVALID;
    wddm_zero(c, sizeof(*c));
    c->hdr.type_ = WDDM_GPU_CMD_DESTROY_CONTEXT;
    c->context_id = id;
    return WDDM_OK;
}

wddm_result wddm_build_set_root_page_table(WddmGpuCmdSetRootPageTable *c, uint32_t id,
                                           uint32_t root_segment, uint64_t root_address,
                                           uint32_t num_entries)
{
    if (!c)
        return WDDM_E_INVALID;
    wddm_zero(c, sizeof(*c));
    c->hdr.type_ = WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE;
    c->context_id = id;
    c->segment_id = root_segment;
    c->address = root_address;
    c->num_entries = num_entries;
    return WDDM_OK;
}

wddm_result wddm_build_submit_virtual(WddmGpuCmdSubmitVirtual *c, uint32_t id, uint64_t address,
                                      uint32_t size, uint32_t fence_id)
{
    if (!c)
        return WDDM_E_INVALID;
    wddm_zero(c, sizeof(*c));
    c->hdr.type_ = WDDM_GPU_CMD_SUBMIT_VIRTUAL;
    c->context_id = id;
    c->node_ordinal = WDDM_GPU_NODE_VIRTUAL;
    c->dma_buffer_address = address;
    c->dma_buffer_size = size;
    c->start_offset = 0;
    c->end_offset = size;
    c->submission_fence_id = fence_id;
    return WDDM_OK;
}

wddm_result wddm_build_reset_engine(WddmGpuCmdResetEngine *c)
{
    if (!c)
        return WDDM_E_INVALID;
    wddm_zero(c, sizeof(*c));
    c->hdr.type_ = WDDM_GPU_CMD_RESET_ENGINE;
    c->node_ordinal = WDDM_GPU_NODE_VIRTUAL;
    return WDDM_OK;
}

wddm_result wddm_build_virtual_copy(WddmGpuVirtualCopy *p, uint64_t length, uint64_t source,
                                    uint64_t destination)
{
    if (!p)
        return WDDM_E_INVALID;
    wddm_zero(p, sizeof(*p));
    p->header = header(WDDM_GPU_VOP_COPY, sizeof(*p));
    p->length = length;
    p->source = source;
    p->destination = destination;
    return WDDM_OK;
}

wddm_result wddm_build_virtual_fill(WddmGpuVirtualFill *p, uint32_t pattern, uint64_t length,
                                    uint64_t destination)
{
    if (!p)
        return WDDM_E_INVALID;
    wddm_zero(p, sizeof(*p));
    p->header = header(WDDM_GPU_VOP_FILL, sizeof(*p));
    p->pattern = pattern;
    p->length = length;
    p->destination = destination;
    return WDDM_OK;
}

wddm_result wddm_build_virtual_signal(WddmGpuVirtualSignal *p, uint64_t address, uint64_t value)
{
    if (!p)
        return WDDM_E_INVALID;
    wddm_zero(p, sizeof(*p));
    p->header = header(WDDM_GPU_VOP_SIGNAL, sizeof(*p));
    p->value = value;
    p->address = address;
    return WDDM_OK;
}
