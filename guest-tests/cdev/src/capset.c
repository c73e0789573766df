/* The segment-layout capset: fetched with GET_CAPSET_INFO / GET_CAPSET and validated against
 * every rule of the programming guide before anything is handed to dxgkrnl (the same rules as
 * the Rust driver's caps.rs). */

#include "util.h"

#define HDR sizeof(WddmGpuCtrlHdr)

static wddm_result bad(const char *msg, uint64_t a, uint64_t b, const wddm_dev *dev)
{
    if (dev)
        wddm_log(dev, WDDM_OS_LOG_ERROR, msg, a, b);
    return WDDM_E_CAPSET;
}

/* `len` bytes at `offset` must lie in the body, after the header. */
static bool table_ok(uint32_t offset, uint64_t len, uint32_t total)
{
    if (len == 0)
        return true;
    return offset >= sizeof(WddmGpuCapsHeader) && (uint64_t)offset + len <= total;
}

/* Fills `layout` (a caller's scratch copy: wddm_capset_parse copies it out on success). */
static wddm_result parse(wddm_layout *layout, const uint8_t *blob, uint64_t size,
                         const wddm_dev *dev)
{
    WddmGpuCapsHeader h;
    if (size < sizeof(h))
        return bad("capset shorter than its header", size, 0, dev);
    wddm_copy(&h, blob, sizeof(h));
    if (h.magic != 0x43474457u) /* "WDGC" */
        return bad("capset magic", h.magic, 0, dev);
    if (h.version != WDDM_GPU_CAPSET_VERSION)
        return bad("capset version", h.version, 0, dev);
    if (h.total_size < sizeof(h) || h.total_size > size)
        return bad("capset total_size (have)", h.total_size, size, dev);
    if (h.wddm_version != WDDM_GPU_WDDM_1_3 && h.wddm_version != WDDM_GPU_WDDM_2_0)
        return bad("capset wddm_version", h.wddm_version, 0, dev);
    if (h.max_frame_list_entries == 0 || h.max_packet_size < sizeof(WddmGpuPacketTransfer) ||
        h.max_packet_size % WDDM_GPU_PACKET_ALIGN != 0)
        return bad("capset limits (frame list, packet size)", h.max_frame_list_entries,
                   h.max_packet_size, dev);
    const WddmGpuVramBar *vb = &h.vram_bar;
    if ((vb->mode != WDDM_GPU_BAR_MODE_IVSHMEM && vb->mode != WDDM_GPU_BAR_MODE_SHMEM) ||
        vb->reserved != 0 || vb->pci_function > 7 || vb->bar_index > 5)
        return bad("VRAM BAR locator (mode, function)", vb->mode, vb->pci_function, dev);
    if (vb->state != WDDM_GPU_BAR_STATE_NOT_MAPPED && vb->state != WDDM_GPU_BAR_STATE_KNOWN)
        return bad("VRAM BAR locator state", vb->state, 0, dev);
    if (vb->state == WDDM_GPU_BAR_STATE_KNOWN && vb->guest_physical_address % WDDM_PAGE != 0)
        return bad("VRAM BAR address not page aligned", vb->guest_physical_address, 0, dev);
    if (h.segment_count == 0 || h.segment_count > WDDM_MAX_SEGMENTS)
        return bad("capset segment_count", h.segment_count, WDDM_MAX_SEGMENTS, dev);
    if (h.segment_desc_size < sizeof(WddmGpuSegmentDesc))
        return bad("segment_desc_size too small", h.segment_desc_size, 0, dev);
    if (!table_ok(h.segments_offset, (uint64_t)h.segment_count * h.segment_desc_size,
                  h.total_size))
        return bad("segment table outside the blob", h.segments_offset, h.total_size, dev);
    if (!table_ok(h.bank_table_offset, (uint64_t)h.bank_entry_count * 8, h.total_size) ||
        (h.bank_entry_count && h.bank_table_offset % 8 != 0))
        return bad("bank table outside the blob or unaligned", h.bank_table_offset,
                   h.bank_entry_count, dev);

    wddm_zero(layout, sizeof(*layout));
    layout->header = h;
    layout->segment_count = h.segment_count;
    const uint64_t *bank_table = (const uint64_t *)(const void *)(blob + h.bank_table_offset);
    for (uint32_t i = 0; i < h.segment_count; i++) {
        wddm_segment *s = &layout->segments[i];
        WddmGpuSegmentDesc *d = &s->desc;
        wddm_copy(d, blob + h.segments_offset + (uint64_t)i * h.segment_desc_size, sizeof(*d));
        uint64_t end;
        bool aperture = d->flags & (WDDM_DXGK_SEGMENT_APERTURE | WDDM_DXGK_SEGMENT_AGP);
        if (d->id != i + 1)
            return bad("segment id out of order (id, want)", d->id, i + 1, dev);
        if (d->flags & WDDM_DXGK_SEGMENT_RESERVED_MASK ||
            (h.wddm_version == WDDM_GPU_WDDM_1_3 && d->flags & WDDM_DXGK_SEGMENT_WDDM2_ONLY_MASK))
            return bad("segment flags set reserved bits (id, flags)", d->id, d->flags, dev);
        if (h.wddm_version == WDDM_GPU_WDDM_2_0 && d->bank_count != 0)
            return bad("banks on a WDDM 2.0 layout (id, banks)", d->id, d->bank_count, dev);
        if (d->size == 0 || d->size % WDDM_PAGE != 0 || !wddm_add(d->base_address, d->size, &end))
            return bad("segment size (id, size)", d->id, d->size, dev);
        if (d->commit_limit > d->size)
            return bad("commit_limit above size (id, limit)", d->id, d->commit_limit, dev);
        bool banking = d->flags & WDDM_DXGK_SEGMENT_USE_BANKING;
        if (banking != (d->bank_count != 0) ||
            (uint64_t)d->bank_table_index + d->bank_count > h.bank_entry_count)
            return bad("segment banks (id, count)", d->id, d->bank_count, dev);
        uint64_t previous = 0;
        for (uint32_t b = 0; b < d->bank_count; b++) {
            uint64_t bank_end = bank_table[d->bank_table_index + b];
            if (bank_end <= previous || bank_end > d->size)
                return bad("bank ends not increasing inside the segment (id, end)", d->id,
                           bank_end, dev);
            previous = bank_end;
        }
        s->banks = d->bank_count ? bank_table + d->bank_table_index : NULL;
        if (d->bar_offset == WDDM_GPU_NO_BAR_OFFSET) {
            if (!aperture && d->flags & WDDM_DXGK_SEGMENT_CPU_VISIBLE)
                return bad("CpuVisible memory segment outside the BAR (id)", d->id, 0, dev);
            if (d->cpu_translated_address != 0)
                return bad("cpu_translated_address outside the BAR (id)", d->id, 0, dev);
        } else {
            uint64_t bar_end, expect;
            if (!wddm_add(d->bar_offset, d->size, &bar_end) ||
                bar_end > vb->size)
                return bad("segment BAR window outside the BAR (id, offset)", d->id,
                           d->bar_offset, dev);
            expect = vb->state == WDDM_GPU_BAR_STATE_KNOWN
                         ? vb->guest_physical_address + d->bar_offset
                         : 0;
            if (d->cpu_translated_address != expect)
                return bad("cpu_translated_address is not BAR + bar_offset (id, value)", d->id,
                           d->cpu_translated_address, dev);
            for (uint32_t j = 0; j < i; j++) {
                const WddmGpuSegmentDesc *o = &layout->segments[j].desc;
                if (o->bar_offset != WDDM_GPU_NO_BAR_OFFSET && d->bar_offset < o->bar_offset + o->size &&
                    o->bar_offset < bar_end)
                    return bad("segment BAR windows overlap (ids)", d->id, o->id, dev);
            }
        }
    }
    uint32_t pb = h.paging_buffer_segment_id;
    if (pb != 0 && (pb > h.segment_count || !wddm_segment_is_aperture(&layout->segments[pb - 1])))
        return bad("paging_buffer_segment_id is neither 0 nor an aperture", pb, 0, dev);
    return WDDM_OK;
}

wddm_result wddm_capset_parse(wddm_layout *layout, const void *blob, uint64_t size,
                              const wddm_dev *dev)
{
    /* A refused capset leaves `layout` as it was: nothing half-validated reaches dxgkrnl. */
    wddm_layout scratch;
    wddm_result r = parse(&scratch, blob, size, dev);
    if (r == WDDM_OK)
        *layout = scratch;
    return r;
}

wddm_result wddm_layout_parse(wddm_layout *layout, const void *blob, uint64_t size)
{
    if (!layout || !blob)
        return WDDM_E_INVALID;
    return wddm_capset_parse(layout, blob, size, NULL);
}

const wddm_segment *wddm_layout_segment(const wddm_layout *layout, uint32_t id)
{
    if (!layout || id == 0 || id > layout->segment_count)
        return NULL;
    return &layout->segments[id - 1];
}

bool wddm_segment_is_aperture(const wddm_segment *segment)
{
    return segment->desc.flags & (WDDM_DXGK_SEGMENT_APERTURE | WDDM_DXGK_SEGMENT_AGP);
}

wddm_result wddm_capset_read(wddm_dev *dev)
{
    WddmGpuGetCapsetInfo info_req = {0};
    WddmGpuRespCapsetInfo info = {0};
    uint32_t len = 0;
    info_req.hdr.type_ = VIRTIO_GPU_CMD_GET_CAPSET_INFO;
    info_req.capset_index = 0;
    wddm_result r = wddm_ctrl_call(dev, &info_req, sizeof(info_req), 0, &info, sizeof(info), &len);
    if (r)
        return r;
    if (len < sizeof(info) || info.hdr.type_ != VIRTIO_GPU_RESP_OK_CAPSET_INFO)
        return wddm_broken(dev, "GET_CAPSET_INFO answer (type, len)", info.hdr.type_, len);
    if (info.capset_id != WDDM_GPU_CAPSET_ID || info.capset_max_version < WDDM_GPU_CAPSET_VERSION ||
        info.capset_max_size < sizeof(WddmGpuCapsHeader) ||
        info.capset_max_size > WDDM_MAX_CAPSET_SIZE)
        return wddm_broken(dev, "GET_CAPSET_INFO capset (id, max_size)", info.capset_id,
                           info.capset_max_size);
    uint64_t buf = HDR + (uint64_t)info.capset_max_size;
    if (dev->os.dma_alloc(dev->os.ctx, buf, WDDM_PAGE, &dev->capset_mem) != 0 ||
        !dev->capset_mem.cpu)
        return WDDM_E_OS;
    wddm_zero(dev->capset_mem.cpu, buf);
    WddmGpuGetCapset req = {0};
    req.hdr.type_ = VIRTIO_GPU_CMD_GET_CAPSET;
    req.capset_id = WDDM_GPU_CAPSET_ID;
    req.capset_version = WDDM_GPU_CAPSET_VERSION;
    r = wddm_ctrl_call(dev, &req, sizeof(req), dev->capset_mem.bus, NULL, (uint32_t)buf, &len);
    if (r)
        return r;
    const uint8_t *answer = dev->capset_mem.cpu;
    WddmGpuCtrlHdr hdr;
    wddm_copy(&hdr, answer, sizeof(hdr));
    if (len < HDR || hdr.type_ != VIRTIO_GPU_RESP_OK_CAPSET)
        return wddm_broken(dev, "GET_CAPSET answer (type, len)", hdr.type_, len);
    r = wddm_capset_parse(&dev->layout, answer + HDR, len - HDR, dev);
    if (r)
        dev->broken = true;
    return r;
}
