/* DXGKQAITYPE_QUERYSEGMENT3 / QUERYSEGMENT4 from the validated layout (the programming guide's
 * section 2 table). Both are two-call protocols: first NbSegment, then the descriptors. */

#include "util.h"

/* What both queries check first: WDDM_OK when the layout is of `wddm_version`. */
static wddm_result query_allowed(const wddm_layout *layout, const void *out, uint32_t wddm_version)
{
    if (!layout || !out)
        return WDDM_E_INVALID;
    return layout->header.wddm_version == wddm_version ? WDDM_OK : WDDM_E_STATE;
}

/* The paging-buffer fields both outputs carry, from the capset header. */
static void paging_buffer_fields(const wddm_layout *layout, uint32_t *segment_id, uint32_t *size,
                                 uint32_t *private_data_size)
{
    *segment_id = layout->header.paging_buffer_segment_id;
    *size = layout->header.paging_buffer_size;
    *private_data_size = layout->header.paging_buffer_private_data_size;
}

wddm_result wddm_layout_query_segment3(const wddm_layout *layout, wddm_dxgk_querysegmentout3 *out)
{
    wddm_result r = query_allowed(layout, out, WDDM_GPU_WDDM_1_3);
    if (r)
        return r;
    if (!out->pSegmentDescriptor) {
        out->NbSegment = layout->segment_count;
        return WDDM_OK;
    }
    if (out->NbSegment < layout->segment_count)
        return WDDM_E_INVALID;
    for (uint32_t i = 0; i < layout->segment_count; i++) {
        const WddmGpuSegmentDesc *d = &layout->segments[i].desc;
        wddm_dxgk_segmentdescriptor3 *o = &out->pSegmentDescriptor[i];
        wddm_zero(o, sizeof(*o));
        o->Flags.Value = d->flags;
        o->BaseAddress = d->base_address;
        o->CpuTranslatedAddress = d->cpu_translated_address;
        o->Size = d->size;
        o->NbOfBanks = d->bank_count;
        o->pBankRangeTable = layout->segments[i].banks;
        o->CommitLimit = d->commit_limit;
        o->SystemMemoryEndAddress = d->system_memory_end_address;
    }
    out->NbSegment = layout->segment_count;
    paging_buffer_fields(layout, &out->PagingBufferSegmentId, &out->PagingBufferSize,
                         &out->PagingBufferPrivateDataSize);
    return WDDM_OK;
}

wddm_result wddm_layout_query_segment4(const wddm_layout *layout, wddm_dxgk_querysegmentout4 *out)
{
    wddm_result r = query_allowed(layout, out, WDDM_GPU_WDDM_2_0);
    if (r)
        return r;
    if (!out->pSegmentDescriptor) {
        out->NbSegment = layout->segment_count;
        out->SegmentDescriptorStride = sizeof(wddm_dxgk_segmentdescriptor4);
        return WDDM_OK;
    }
    if (out->NbSegment < layout->segment_count ||
        out->SegmentDescriptorStride < sizeof(wddm_dxgk_segmentdescriptor4))
        return WDDM_E_INVALID;
    for (uint32_t i = 0; i < layout->segment_count; i++) {
        const WddmGpuSegmentDesc *d = &layout->segments[i].desc;
        wddm_dxgk_segmentdescriptor4 o;
        wddm_zero(&o, sizeof(o));
        o.Flags.Value = d->flags;
        o.BaseAddress = d->base_address;
        o.Size = d->size;
        o.CommitLimit = d->commit_limit;
        o.SystemMemoryEndAddress = d->system_memory_end_address;
        /* The capset describes no host aperture: with SupportsCpuHostAperture set the union's
         * other arm stays zero. */
        if (!(d->flags & WDDM_DXGK_SEGMENT_SUPPORTS_CPU_HOST_APERTURE))
            o.CpuTranslatedAddress = d->cpu_translated_address;
        wddm_copy_out(out->pSegmentDescriptor + (uint64_t)i * out->SegmentDescriptorStride, &o,
                      sizeof(o));
    }
    out->NbSegment = layout->segment_count;
    paging_buffer_fields(layout, &out->PagingBufferSegmentId, &out->PagingBufferSize,
                         &out->PagingBufferPrivateDataSize);
    return WDDM_OK;
}
