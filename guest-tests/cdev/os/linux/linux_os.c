#define _GNU_SOURCE
#include "linux_os.h"
#include "wddm_gpu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGEPAGE (2ull << 20)
#define SYSFS_PCI "/sys/bus/pci/devices"

void linux_os_sibling(const linux_os *os, uint32_t function, char *out, size_t len)
{
    /* "dddd:bb:ss.f": replace the function digit. */
    snprintf(out, len, "%s/%.*s%u", SYSFS_PCI, (int)(strlen(os->bdf) - 1), os->bdf, function);
}

static int read_hex(const char *path, unsigned long *value)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%lx", value) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static uint64_t virt_to_phys(const void *va)
{
    int fd = open("/proc/self/pagemap", O_RDONLY);
    uint64_t entry = 0;
    if (fd < 0)
        return 0;
    off_t at = (off_t)((uintptr_t)va / 4096) * 8;
    ssize_t n = pread(fd, &entry, sizeof(entry), at);
    close(fd);
    if (n != sizeof(entry) || !(entry & (1ull << 63)))
        return 0;
    uint64_t pfn = entry & ((1ull << 55) - 1);
    return pfn ? pfn * 4096 + ((uintptr_t)va & 4095) : 0;
}

/* DMA memory: a bump allocator over 2 MiB hugepages (each physically contiguous). */
static int os_dma_alloc(void *ctx, uint64_t size, uint64_t align, wddm_os_dma *out)
{
    linux_os *os = ctx;
    if (size == 0 || size > HUGEPAGE || align == 0 || align > HUGEPAGE || (align & (align - 1)))
        return -1;
    for (int i = 0;; i++) {
        if (i == os->page_count) {
            if (os->page_count == LINUX_OS_MAX_HUGEPAGES)
                return -1;
            void *va = mmap(NULL, HUGEPAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE | MAP_LOCKED,
                            -1, 0);
            if (va == MAP_FAILED) {
                fprintf(stderr, "cdev: hugepage mmap failed: %s\n", strerror(errno));
                return -1;
            }
            uint64_t phys = virt_to_phys(va);
            if (phys == 0 || phys % HUGEPAGE != 0) {
                fprintf(stderr, "cdev: pagemap gave no usable address (%#" PRIx64 ")\n", phys);
                munmap(va, HUGEPAGE);
                return -1;
            }
            os->pages[i].va = va;
            os->pages[i].phys = phys;
            os->pages[i].used = 0;
            os->page_count++;
        }
        uint64_t start = (os->pages[i].used + align - 1) & ~(align - 1);
        if (start + size <= HUGEPAGE) {
            os->pages[i].used = start + size;
            out->cpu = os->pages[i].va + start;
            out->bus = os->pages[i].phys + start;
            out->size = size;
            out->os_handle = NULL;
            memset(out->cpu, 0, size);
            return 0;
        }
    }
}

static void os_dma_free(void *ctx, wddm_os_dma *mem)
{
    (void)ctx; /* the bump allocator frees everything at close */
    mem->cpu = NULL;
}

static volatile void *os_bar_map(void *ctx, uint32_t function, uint32_t bar, uint64_t offset,
                                 uint64_t length)
{
    char path[256], dir[200];
    linux_os_sibling(ctx, function, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/resource%u", dir, bar);
    int fd = open(path, O_RDWR | O_SYNC);
    if (fd < 0) {
        fprintf(stderr, "cdev: open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    uint64_t base = offset & ~4095ull;
    void *va = mmap(NULL, length + (offset - base), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    (off_t)base);
    close(fd);
    if (va == MAP_FAILED) {
        fprintf(stderr, "cdev: mmap %s: %s\n", path, strerror(errno));
        return NULL;
    }
    return (uint8_t *)va + (offset - base);
}

static void os_bar_unmap(void *ctx, volatile void *va, uint64_t length)
{
    (void)ctx;
    uintptr_t p = (uintptr_t)va, base = p & ~(uintptr_t)4095;
    munmap((void *)base, length + (p - base));
}

static int os_bar_info(void *ctx, uint32_t function, uint32_t bar, uint64_t *address,
                       uint64_t *size)
{
    char path[256], dir[200];
    linux_os_sibling(ctx, function, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/resource", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long long start = 0, end = 0, flags = 0;
    int ok = 0;
    for (uint32_t i = 0; i <= bar; i++)
        ok = fscanf(f, "%llx %llx %llx", &start, &end, &flags) == 3;
    fclose(f);
    if (!ok || end < start || start == 0)
        return -1;
    *address = start;
    *size = end - start + 1;
    return 0;
}

static int os_config_read(void *ctx, uint32_t offset, uint32_t width, uint32_t *value)
{
    linux_os *os = ctx;
    uint32_t v = 0;
    if ((width != 1 && width != 2 && width != 4) || offset % width)
        return -1;
    if (pread(os->config_fd, &v, width, offset) != (ssize_t)width)
        return -1;
    *value = v;
    return 0;
}

static int os_config_write(void *ctx, uint32_t offset, uint32_t width, uint32_t value)
{
    linux_os *os = ctx;
    if ((width != 1 && width != 2 && width != 4) || offset % width)
        return -1;
    return pwrite(os->config_fd, &value, width, offset) == (ssize_t)width ? 0 : -1;
}

static void *os_lock_create(void *ctx) { return ctx; }
static void os_lock_acquire(void *ctx, void *lock)
{
    (void)lock;
    if (((linux_os *)ctx)->lock_depth++ != 0)
        abort(); /* the library never nests its lock */
}
static void os_lock_release(void *ctx, void *lock)
{
    (void)lock;
    ((linux_os *)ctx)->lock_depth--;
}
static void os_lock_destroy(void *ctx, void *lock) { (void)ctx; (void)lock; }

static void os_stall_us(void *ctx, uint32_t us)
{
    (void)ctx;
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t os_now_us(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void os_barrier(void *ctx)
{
    (void)ctx;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void os_log(void *ctx, int level, const char *message, uint64_t a, uint64_t b)
{
    (void)ctx;
    static const char *names[] = {"error", "warn", "info"};
    fprintf(stderr, "cdev %s: %s %#" PRIx64 " %#" PRIx64 "\n",
            level >= 0 && level <= 2 ? names[level] : "?", message, a, b);
}

int linux_os_open(linux_os *os, const char *bdf, wddm_os *table)
{
    memset(os, 0, sizeof(*os));
    os->config_fd = -1;
    if (bdf) {
        snprintf(os->bdf, sizeof(os->bdf), "%.31s", bdf);
    } else {
        DIR *d = opendir(SYSFS_PCI);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[300];
            unsigned long vendor, device;
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), SYSFS_PCI "/%s/vendor", e->d_name);
            if (read_hex(path, &vendor))
                continue;
            snprintf(path, sizeof(path), SYSFS_PCI "/%s/device", e->d_name);
            if (read_hex(path, &device))
                continue;
            if (vendor == VIRTIO_PCI_VENDOR_ID && device == WDDM_GPU_PCI_DEVICE_ID) {
                snprintf(os->bdf, sizeof(os->bdf), "%.31s", e->d_name);
                break;
            }
        }
        if (d)
            closedir(d);
    }
    if (!os->bdf[0]) {
        fprintf(stderr, "cdev: no 1af4:1050 function in " SYSFS_PCI "\n");
        return -1;
    }
    char path[300];
    snprintf(path, sizeof(path), SYSFS_PCI "/%s/config", os->bdf);
    os->config_fd = open(path, O_RDWR);
    if (os->config_fd < 0) {
        fprintf(stderr, "cdev: open %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* Polling: keep the (unclaimed) INTx line quiet. */
    uint32_t command;
    if (os_config_read(os, 4, 2, &command) || os_config_write(os, 4, 2, command | 0x400))
        return -1;
    memset(table, 0, sizeof(*table));
    table->ctx = os;
    table->dma_alloc = os_dma_alloc;
    table->dma_free = os_dma_free;
    table->bar_map = os_bar_map;
    table->bar_unmap = os_bar_unmap;
    table->bar_info = os_bar_info;
    table->config_read = os_config_read;
    table->config_write = os_config_write;
    table->lock_create = os_lock_create;
    table->lock_acquire = os_lock_acquire;
    table->lock_release = os_lock_release;
    table->lock_destroy = os_lock_destroy;
    table->stall_us = os_stall_us;
    table->now_us = os_now_us;
    table->memory_barrier = os_barrier;
    table->log = os_log;
    return 0;
}

void linux_os_close(linux_os *os)
{
    for (int i = 0; i < os->page_count; i++)
        munmap(os->pages[i].va, HUGEPAGE);
    os->page_count = 0;
    if (os->config_fd >= 0)
        close(os->config_fd);
    os->config_fd = -1;
}
