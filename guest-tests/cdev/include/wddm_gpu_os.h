/* The OS-services table the C device library runs on.
 *
 * The library (wddm_gpu_dev.h) never includes an OS header: everything it needs from the
 * operating system goes through this table of function pointers, filled by an OS layer (the
 * Linux user-space layer under os/linux, the Windows kernel-mode layer under os/windows).
 * Plain C11; only <stdint.h>, <stddef.h> and <stdbool.h> types, fixed-width integers, so
 * LP64 (Linux) and LLP64 (Windows) give the same layout. */

#ifndef WDDM_GPU_OS_H
#define WDDM_GPU_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A physically contiguous, zeroed block of DMA memory the device may read and write. */
typedef struct wddm_os_dma {
    void *cpu;       /* kernel (or process) virtual address of the block */
    uint64_t bus;    /* device address: the guest-physical address the device is given */
    uint64_t size;   /* bytes, at least what was asked for */
    void *os_handle; /* whatever the OS layer needs to free it */
} wddm_os_dma;

/* Log levels of wddm_os.log. */
#define WDDM_OS_LOG_ERROR 0
#define WDDM_OS_LOG_WARN 1
#define WDDM_OS_LOG_INFO 2

/* Every callback gets `ctx` first. Return values: 0 = success, anything else = failure (the
 * library turns it into WDDM_E_OS). Which callbacks may run at raised IRQL is noted per entry;
 * the library calls nothing else from its interrupt-side functions. */
typedef struct wddm_os {
    void *ctx;

    /* Physically contiguous DMA memory, zero-filled, `align` (a power of two, at most 2 MiB)
     * aligned in bus address. PASSIVE level only (device init and the caller's own setup). */
    int (*dma_alloc)(void *ctx, uint64_t size, uint64_t align, wddm_os_dma *out);
    void (*dma_free)(void *ctx, wddm_os_dma *mem);

    /* Maps `length` bytes at `offset` of BAR `bar` of PCI function `function` of the GPU's
     * slot (0 = the GPU itself; the VRAM BAR may live on a sibling function) as uncached
     * memory; NULL on failure. PASSIVE level. */
    volatile void *(*bar_map)(void *ctx, uint32_t function, uint32_t bar, uint64_t offset,
                              uint64_t length);
    void (*bar_unmap)(void *ctx, volatile void *va, uint64_t length);
    /* The BAR's CPU-physical (translated) address and size, as the OS assigned it (the
     * resource list on Windows, sysfs on Linux): what CpuTranslatedAddress must equal. */
    int (*bar_info)(void *ctx, uint32_t function, uint32_t bar, uint64_t *address,
                    uint64_t *size);

    /* PCI configuration space of the GPU function (function 0): `width` is 1, 2 or 4 bytes,
     * `offset` aligned to it. PASSIVE level. */
    int (*config_read)(void *ctx, uint32_t offset, uint32_t width, uint32_t *value);
    int (*config_write)(void *ctx, uint32_t offset, uint32_t width, uint32_t value);

    /* The KMD's spin lock (usable from the DPC/ISR side). lock_create returns NULL on
     * failure; acquire/release may run at raised IRQL. */
    void *(*lock_create)(void *ctx);
    void (*lock_acquire)(void *ctx, void *lock);
    void (*lock_release)(void *ctx, void *lock);
    void (*lock_destroy)(void *ctx, void *lock);

    /* Busy-wait or sleep `microseconds` (the library's polling waits use it), and a monotonic
     * clock in microseconds for their timeouts. */
    void (*stall_us)(void *ctx, uint32_t microseconds);
    uint64_t (*now_us)(void *ctx);

    /* A full memory barrier between the CPU and the device (ring index publication). May run
     * at raised IRQL. */
    void (*memory_barrier)(void *ctx);

    /* Optional (may be NULL): called once the library has read (and so acknowledged) the
     * virtio ISR status register, for an OS that must also end the interrupt itself (e.g. an
     * MSI or line-based controller). Raised IRQL. */
    void (*interrupt_ack)(void *ctx, uint32_t isr_status);

    /* Optional (may be NULL): one log line, `message` a constant string, `a` and `b` the
     * numbers it concerns. The library never formats text itself. */
    void (*log)(void *ctx, int level, const char *message, uint64_t a, uint64_t b);

    /* Optional (may be NULL): sleeps until `*generation` differs from `seen`, or about
     * `timeout_us` passed, whichever comes first (a spurious early return is allowed). The
     * deferred half of the interrupt path (wddm_dev_interrupt_deferred) advances the generation
     * under the lock; the OS layer wakes its sleepers after each call of it. Needed only for
     * wddm_dev_set_interrupt_driven: the synchronous requests then sleep here until the
     * interrupt collected their answer instead of polling the used ring. PASSIVE level. */
    void (*wait_interrupt)(void *ctx, const volatile uint32_t *generation, uint32_t seen,
                           uint32_t timeout_us);
} wddm_os;

#ifdef __cplusplus
}
#endif

#endif /* WDDM_GPU_OS_H */
