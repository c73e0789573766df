/* A valid capset to mutate: three segments (a CPU-visible memory segment in the VRAM BAR, a
 * banked memory segment outside it, a non-coherent aperture that also holds the paging
 * buffer), laid out as the device does (header, descriptors, bank table). */

#ifndef CDEV_TEST_CAPS_FIXTURE_H
#define CDEV_TEST_CAPS_FIXTURE_H

#include "wddm_gpu_dev.h"

#define FIX_SEG1_SIZE (16ull << 20)
#define FIX_SEG2_BASE (16ull << 20)
#define FIX_SEG2_SIZE (8ull << 20)
#define FIX_APERTURE_BASE 0x40000000ull
#define FIX_APERTURE_PAGES 1024ull
#define FIX_BAR_ADDRESS 0xfe000000ull
#define FIX_BAR_SIZE (32ull << 20)
#define FIX_MAX_FRAMES 512u
#define FIX_WDDM2_BIT (1u << 11) /* a WDDM 2.0-only segment flag */

typedef struct test_caps {
    WddmGpuCapsHeader h;
    WddmGpuSegmentDesc seg[3];
    uint64_t banks[2];
} test_caps;

/* WDDM 1.3 with segment 2 banked (two banks); `wddm2`: WDDM 2.0, no banks, segment 2 with a
 * WDDM 2.0-only flag and segment 1 with SupportsCpuHostAperture. */
void caps_valid(test_caps *c, int wddm2);
/* caps_valid, then `layout` parsed from it (checked). */
void caps_layout(wddm_layout *layout, test_caps *c, int wddm2);

#endif
