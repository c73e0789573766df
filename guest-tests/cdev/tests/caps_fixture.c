#include <stddef.h>
#include <string.h>

#include "caps_fixture.h"
#include "check.h"
#include "wddm_gpu_dev.h"

void caps_valid(test_caps *c, int wddm2)
{
    memset(c, 0, sizeof(*c));
    WddmGpuCapsHeader *h = &c->h;
    h->magic = WDDM_GPU_CAPS_MAGIC;
    h->version = WDDM_GPU_CAPSET_VERSION;
    h->total_size = sizeof(*c);
    h->wddm_version = wddm2 ? WDDM_GPU_WDDM_2_0 : WDDM_GPU_WDDM_1_3;
    h->segment_count = 3;
    h->segment_desc_size = sizeof(WddmGpuSegmentDesc);
    h->segments_offset = offsetof(test_caps, seg);
    h->bank_table_offset = wddm2 ? 0 : offsetof(test_caps, banks);
    h->bank_entry_count = wddm2 ? 0 : 2;
    h->paging_buffer_segment_id = 3;
    h->paging_buffer_size = 64u << 10;
    h->paging_buffer_private_data_size = 16;
    h->max_frame_list_entries = FIX_MAX_FRAMES;
    h->max_packet_size = 256;
    h->vram_bar.mode = WDDM_GPU_BAR_MODE_IVSHMEM;
    h->vram_bar.state = WDDM_GPU_BAR_STATE_KNOWN;
    h->vram_bar.generation = 3;
    h->vram_bar.pci_function = 1;
    h->vram_bar.bar_index = 2;
    h->vram_bar.guest_physical_address = FIX_BAR_ADDRESS;
    h->vram_bar.size = FIX_BAR_SIZE;

    WddmGpuSegmentDesc *s = c->seg;
    s[0].id = 1;
    s[0].flags = WDDM_DXGK_SEGMENT_CPU_VISIBLE |
                 (wddm2 ? WDDM_DXGK_SEGMENT_SUPPORTS_CPU_HOST_APERTURE : 0);
    s[0].base_address = 0;
    s[0].size = FIX_SEG1_SIZE;
    s[0].commit_limit = FIX_SEG1_SIZE - 4096;
    s[0].bar_offset = 4096;
    s[0].cpu_translated_address = FIX_BAR_ADDRESS + 4096;
    s[0].system_memory_end_address = 0x1234000;

    s[1].id = 2;
    s[1].flags = wddm2 ? FIX_WDDM2_BIT : WDDM_DXGK_SEGMENT_USE_BANKING;
    s[1].base_address = FIX_SEG2_BASE;
    s[1].size = FIX_SEG2_SIZE;
    s[1].commit_limit = FIX_SEG2_SIZE;
    s[1].bar_offset = WDDM_GPU_NO_BAR_OFFSET;
    s[1].bank_count = wddm2 ? 0 : 2;
    s[1].bank_table_index = 0;
    c->banks[0] = 4ull << 20;
    c->banks[1] = FIX_SEG2_SIZE;

    s[2].id = 3;
    s[2].flags = WDDM_DXGK_SEGMENT_APERTURE;
    s[2].base_address = FIX_APERTURE_BASE;
    s[2].size = FIX_APERTURE_PAGES * 4096;
    s[2].commit_limit = FIX_APERTURE_PAGES * 4096;
    s[2].bar_offset = WDDM_GPU_NO_BAR_OFFSET;
}

void caps_layout(wddm_layout *layout, test_caps *c, int wddm2)
{
    caps_valid(c, wddm2);
    CHECK_EQ(wddm_layout_parse(layout, c, sizeof(*c)), WDDM_OK);
}
