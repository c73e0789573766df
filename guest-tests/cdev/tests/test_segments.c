/* DXGK_QUERYSEGMENTOUT3/4 filled from a valid capset: both calls of the two-call protocol,
 * every field compared with the capset, nothing written past the descriptors asked for. */

#include <string.h>

#include "caps_fixture.h"
#include "check.h"

static void check_common(const test_caps *c, uint32_t pb_id, uint32_t pb_size, uint32_t pb_priv)
{
    CHECK_EQ(pb_id, c->h.paging_buffer_segment_id);
    CHECK_EQ(pb_size, c->h.paging_buffer_size);
    CHECK_EQ(pb_priv, c->h.paging_buffer_private_data_size);
}

static void segment3(void)
{
    static wddm_layout layout;
    test_caps c;
    caps_layout(&layout, &c, 0);

    wddm_dxgk_querysegmentout3 out;
    memset(&out, 0, sizeof(out));
    CHECK_EQ(wddm_layout_query_segment3(&layout, &out), WDDM_OK); /* first call: the count */
    CHECK_EQ(out.NbSegment, 3);

    wddm_dxgk_segmentdescriptor3 desc[4];
    memset(desc, 0xCC, sizeof(desc));
    out.pSegmentDescriptor = desc;
    out.NbSegment = 2; /* too few */
    CHECK_EQ(wddm_layout_query_segment3(&layout, &out), WDDM_E_INVALID);
    out.NbSegment = 4;
    CHECK_EQ(wddm_layout_query_segment3(&layout, &out), WDDM_OK);
    CHECK_EQ(out.NbSegment, 3);
    check_common(&c, out.PagingBufferSegmentId, out.PagingBufferSize,
                 out.PagingBufferPrivateDataSize);
    for (int i = 0; i < 3; i++) {
        const WddmGpuSegmentDesc *s = &c.seg[i];
        const wddm_dxgk_segmentdescriptor3 *d = &desc[i];
        CHECK_EQ(d->Flags.Value, s->flags);
        CHECK_EQ(d->BaseAddress, s->base_address);
        CHECK_EQ(d->CpuTranslatedAddress, s->cpu_translated_address);
        CHECK_EQ(d->Size, s->size);
        CHECK_EQ(d->NbOfBanks, s->bank_count);
        CHECK_EQ(d->CommitLimit, s->commit_limit);
        CHECK_EQ(d->SystemMemoryEndAddress, s->system_memory_end_address);
        CHECK_EQ(d->Reserved, 0);
        CHECK_EQ(d->_pad0 | d->_pad1, 0);
    }
    CHECK(desc[0].pBankRangeTable == NULL && desc[2].pBankRangeTable == NULL);
    CHECK(desc[1].pBankRangeTable != NULL && desc[1].pBankRangeTable[0] == c.banks[0] &&
          desc[1].pBankRangeTable[1] == c.banks[1]);
    const uint8_t *spare = (const uint8_t *)&desc[3];
    for (size_t i = 0; i < sizeof(desc[3]); i++)
        CHECK_EQ(spare[i], 0xCC);

    wddm_dxgk_querysegmentout4 out4;
    memset(&out4, 0, sizeof(out4));
    CHECK_EQ(wddm_layout_query_segment4(&layout, &out4), WDDM_E_STATE); /* a WDDM 1.3 layout */
    CHECK_EQ(wddm_layout_query_segment3(NULL, &out), WDDM_E_INVALID);
}

#define STRIDE 128 /* wider than the 96-byte descriptor: dxgkrnl may ask for any stride */

static void segment4(void)
{
    static wddm_layout layout;
    test_caps c;
    caps_layout(&layout, &c, 1);

    wddm_dxgk_querysegmentout4 out;
    memset(&out, 0, sizeof(out));
    CHECK_EQ(wddm_layout_query_segment4(&layout, &out), WDDM_OK);
    CHECK_EQ(out.NbSegment, 3);
    CHECK_EQ(out.SegmentDescriptorStride, sizeof(wddm_dxgk_segmentdescriptor4));

    _Alignas(8) uint8_t buf[3 * STRIDE + 64];
    memset(buf, 0xCC, sizeof(buf));
    out.pSegmentDescriptor = buf;
    out.SegmentDescriptorStride = sizeof(wddm_dxgk_segmentdescriptor4) - 8;
    CHECK_EQ(wddm_layout_query_segment4(&layout, &out), WDDM_E_INVALID);
    out.SegmentDescriptorStride = STRIDE;
    out.NbSegment = 2;
    CHECK_EQ(wddm_layout_query_segment4(&layout, &out), WDDM_E_INVALID);
    for (size_t i = 0; i < sizeof(buf); i++)
        CHECK_EQ(buf[i], 0xCC); /* refused calls wrote nothing */
    out.NbSegment = 3;
    CHECK_EQ(wddm_layout_query_segment4(&layout, &out), WDDM_OK);
    CHECK_EQ(out.NbSegment, 3);
    check_common(&c, out.PagingBufferSegmentId, out.PagingBufferSize,
                 out.PagingBufferPrivateDataSize);
    for (int i = 0; i < 3; i++) {
        const WddmGpuSegmentDesc *s = &c.seg[i];
        wddm_dxgk_segmentdescriptor4 d;
        memcpy(&d, buf + i * STRIDE, sizeof(d));
        CHECK_EQ(d.Flags.Value, s->flags);
        CHECK_EQ(d.BaseAddress, s->base_address);
        CHECK_EQ(d.Size, s->size);
        CHECK_EQ(d.CommitLimit, s->commit_limit);
        CHECK_EQ(d.SystemMemoryEndAddress, s->system_memory_end_address);
        /* Segment 1 sets SupportsCpuHostAperture: the capset describes no host aperture, so the
         * union stays zero; the others carry CpuTranslatedAddress. */
        if (s->flags & WDDM_DXGK_SEGMENT_SUPPORTS_CPU_HOST_APERTURE)
            CHECK(d.CpuHostAperture.PhysicalAddress == 0 && d.CpuHostAperture.SizeInPages == 0);
        else
            CHECK_EQ(d.CpuTranslatedAddress, s->cpu_translated_address);
        CHECK_EQ(d.NumInvalidMemoryRanges | d.VprAlignment | d.NumVprSupported |
                     d.VprReserveSize | d.NumUEFIFrameBufferRanges,
                 0);
        CHECK_EQ(d.VprRangeStartOffset | d.VprRangeSize, 0);
        for (size_t b = sizeof(d); b < STRIDE; b++)
            CHECK_EQ(buf[i * STRIDE + b], 0xCC); /* the stride's gap is not ours */
    }
    for (size_t b = 3 * STRIDE; b < sizeof(buf); b++)
        CHECK_EQ(buf[b], 0xCC);

    wddm_dxgk_querysegmentout3 out3;
    memset(&out3, 0, sizeof(out3));
    CHECK_EQ(wddm_layout_query_segment3(&layout, &out3), WDDM_E_STATE); /* a WDDM 2.0 layout */
}

void segment_tests(void)
{
    run_test("querysegment3_from_capset", segment3);
    run_test("querysegment4_from_capset", segment4);
}
