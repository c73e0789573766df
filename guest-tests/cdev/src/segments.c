/* DXGKQAITYPE_QUERYSEGMENT3 / QUERYSEGMENT4 from the validated layout (the programming guide's
 * section 2 table). Both are two-call protocols: first NbSegment, then the descriptors. */

#include "util.h"

wddm_result wddm_layout_query_segment3(const wddm_layout *layout, wddm_dxgk_querysegmentout3 *out)
{
    if (!layout || !out)
        return WDDM_E_INVALID;
    if (layout->header.wddm_version != WDDM_GPU_WDDM_1_3)
        return WDDM_E_STATE;
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
    out->PagingBufferSegmentId = layout->header.paging_buffer_segment_id;
    out->PagingBufferSize = layout->header.paging_buffer_size;
    out->PagingBufferPrivateDataSize = layout->header.paging_buffer_private_data_size;
    return WDDM_OK;
}

wddm_result wddm_layout_query_segment4(const wddm_layout *layout, wddm_dxgk_querysegmentout4 *out)
{
    if (!layout || !out)
        return WDDM_E_INVALID;
    if (layout->header.wddm_version != WDDM_GPU_WDDM_2_0)
        return WDDM_E_STATE;
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
    out->PagingBufferSegmentId = layout->header.paging_buffer_segment_id;
    out->PagingBufferSize = layout->header.paging_buffer_size;
    out->PagingBufferPrivateDataSize = layout->header.paging_buffer_private_data_size;
    return WDDM_OK;
}
