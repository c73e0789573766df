/* The Linux user-space OS layer: the GPU function through sysfs (config space, resourceN
 * mmap), DMA memory from 2 MiB hugepages translated through /proc/self/pagemap, polling
 * instead of interrupts. Single-threaded: the locks only check nesting. */

#ifndef WDDM_LINUX_OS_H
#define WDDM_LINUX_OS_H

#include "wddm_gpu_os.h"

#define LINUX_OS_MAX_HUGEPAGES 8

typedef struct linux_os {
    char bdf[32];        /* the GPU function, "0000:00:03.0" */
    int config_fd;
    struct {
        uint8_t *va;     /* one 2 MiB hugepage */
        uint64_t phys;
        uint64_t used;   /* bump allocator */
    } pages[LINUX_OS_MAX_HUGEPAGES];
    int page_count;
    int lock_depth;
} linux_os;

/* Finds the first 1af4:1050 function in sysfs (or `bdf` when non-NULL), opens its config
 * space and fills `table`. 0 on success; prints why not otherwise. */
int linux_os_open(linux_os *os, const char *bdf, wddm_os *table);
void linux_os_close(linux_os *os);
/* sysfs path of function `function` of the GPU's slot. */
void linux_os_sibling(const linux_os *os, uint32_t function, char *out, size_t len);

#endif
