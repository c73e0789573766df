/* The wddm_os table on Windows kernel calls (see wddm_os_windows.h for the IRQL rules). */

#include "wddm_os_windows_internal.h"

/* "Wdgu" in a pool dump (bytes in memory order). */
#define WDDM_WIN_POOL_TAG ((ULONG)'W' | (ULONG)'d' << 8 | (ULONG)'g' << 16 | (ULONG)'u' << 24)
#define MAX_DMA_ALIGN (2u << 20)
#define STALL_CHUNK_US 50u      /* KeStallExecutionProcessor is meant for short waits */
#define SLEEP_FROM_US 1000u     /* at PASSIVE_LEVEL, longer waits give the processor up */
#define CONFIG_SPACE_SIZE 4096u /* PCIe extended configuration space */

/* DPFLTR_IHVVIDEO_ID and DPFLTR_{ERROR,WARNING,INFO}_LEVEL from dpfilter.h, which mingw-w64
 * lacks. */
#define DPFLTR_IHVVIDEO 78u

void wddm_win_log(int level, const char *message, ULONG64 a, ULONG64 b)
{
    ULONG dpfltr_level = level == WDDM_OS_LOG_ERROR  ? 0
                         : level == WDDM_OS_LOG_WARN ? 1
                                                     : 3;
    DbgPrintEx(DPFLTR_IHVVIDEO, dpfltr_level, "wddm-gpu: %s (0x%I64x, 0x%I64x)\n",
               message != NULL ? message : "?", a, b);
}

static void win_log(void *ctx, int level, const char *message, uint64_t a, uint64_t b)
{
    (void)ctx;
    wddm_win_log(level, message, a, b);
}

/* ---- DMA memory ---------------------------------------------------------------------- */

/* MmAllocateContiguousMemorySpecifyCache gives page-aligned blocks; a larger alignment is
 * reached by allocating `align - PAGE_SIZE` more and starting inside the block. The device sees
 * the block through MmGetPhysicalAddress: no IOMMU remapping (DMA remapping off for the KMD). */
static int win_dma_alloc(void *ctx, uint64_t size, uint64_t align, wddm_os_dma *out)
{
    (void)ctx;
    if (out == NULL || size == 0 || align == 0 || (align & (align - 1)) != 0 ||
        align > MAX_DMA_ALIGN || size > ((uint64_t)1 << 40) ||
        KeGetCurrentIrql() != PASSIVE_LEVEL) {
        return -1;
    }
    uint64_t rounded = (size + PAGE_SIZE - 1) & ~((uint64_t)PAGE_SIZE - 1);
    uint64_t extra = align > PAGE_SIZE ? align - PAGE_SIZE : 0;
    PHYSICAL_ADDRESS lowest, highest, boundary;
    lowest.QuadPart = 0;
    highest.QuadPart = -1; /* anywhere: the device takes 64-bit addresses (VIRTIO_F_VERSION_1) */
    boundary.QuadPart = 0;
    PVOID base = MmAllocateContiguousMemorySpecifyCache((SIZE_T)(rounded + extra), lowest,
                                                        highest, boundary, MmCached);
    if (base == NULL) {
        return -1;
    }
    RtlZeroMemory(base, (SIZE_T)(rounded + extra));
    uint64_t base_bus = (uint64_t)MmGetPhysicalAddress(base).QuadPart;
    uint64_t bus = (base_bus + align - 1) & ~(align - 1);
    out->cpu = (UCHAR *)base + (bus - base_bus);
    out->bus = bus;
    out->size = rounded;
    out->os_handle = base;
    return 0;
}

static void win_dma_free(void *ctx, wddm_os_dma *mem)
{
    (void)ctx;
    if (mem != NULL && mem->os_handle != NULL) {
        MmFreeContiguousMemory(mem->os_handle);
        mem->os_handle = NULL;
        mem->cpu = NULL;
    }
}

/* ---- BARs ---------------------------------------------------------------------------- */

static const wddm_win_bar *find_bar(const wddm_win_layer *layer, uint32_t function, uint32_t bar)
{
    if (bar > 5) {
        return NULL;
    }
    if (function == 0) {
        return layer->bars[bar].present ? &layer->bars[bar] : NULL;
    }
    if (layer->sibling.present && function == layer->sibling_function &&
        bar == layer->sibling_bar) {
        return &layer->sibling;
    }
    return NULL;
}

static int win_bar_info(void *ctx, uint32_t function, uint32_t bar, uint64_t *address,
                        uint64_t *size)
{
    const wddm_win_bar *b = find_bar((const wddm_win_layer *)ctx, function, bar);
    if (b == NULL || address == NULL || size == NULL) {
        return -1;
    }
    *address = b->address;
    *size = b->size;
    return 0;
}

static volatile void *win_bar_map(void *ctx, uint32_t function, uint32_t bar, uint64_t offset,
                                  uint64_t length)
{
    const wddm_win_layer *layer = (const wddm_win_layer *)ctx;
    const wddm_win_bar *b = find_bar(layer, function, bar);
    if (b == NULL || length == 0 || offset > b->size || length > b->size - offset ||
        KeGetCurrentIrql() != PASSIVE_LEVEL) {
        return NULL;
    }
    PHYSICAL_ADDRESS pa;
    pa.QuadPart = (LONGLONG)(b->address + offset);
    if (layer->map_io_space_ex != NULL) {
        return layer->map_io_space_ex(pa, (SIZE_T)length, PAGE_READWRITE | PAGE_NOCACHE);
    }
    return MmMapIoSpace(pa, (SIZE_T)length, MmNonCached);
}

static void win_bar_unmap(void *ctx, volatile void *va, uint64_t length)
{
    (void)ctx;
    if (va != NULL && length != 0) {
        MmUnmapIoSpace((PVOID)(ULONG_PTR)va, (SIZE_T)length);
    }
}

/* ---- Configuration space ------------------------------------------------------------- */

static BOOLEAN config_access_ok(uint32_t offset, uint32_t width)
{
    return (width == 1 || width == 2 || width == 4) && offset % width == 0 &&
           offset <= CONFIG_SPACE_SIZE - width && KeGetCurrentIrql() == PASSIVE_LEVEL;
}

static int win_config_read(void *ctx, uint32_t offset, uint32_t width, uint32_t *value)
{
    const wddm_win_layer *layer = (const wddm_win_layer *)ctx;
    if (value == NULL || !config_access_ok(offset, width)) {
        return -1;
    }
    uint32_t v = 0; /* little-endian: the low `width` bytes are filled */
    ULONG done = 0;
    NTSTATUS status = layer->config.read_device_space(
        layer->config.device_handle, PCI_WHICHSPACE_CONFIG, &v, offset, width, &done);
    if (!NT_SUCCESS(status) || done != width) {
        return -1;
    }
    *value = v;
    return 0;
}

static int win_config_write(void *ctx, uint32_t offset, uint32_t width, uint32_t value)
{
    const wddm_win_layer *layer = (const wddm_win_layer *)ctx;
    if (!config_access_ok(offset, width)) {
        return -1;
    }
    ULONG done = 0;
    NTSTATUS status = layer->config.write_device_space(
        layer->config.device_handle, PCI_WHICHSPACE_CONFIG, &value, offset, width, &done);
    return NT_SUCCESS(status) && done == width ? 0 : -1;
}

/* ---- Locks --------------------------------------------------------------------------- */

typedef struct win_lock {
    KSPIN_LOCK spin;
    KIRQL old_irql; /* written by the holder only */
    BOOLEAN raised; /* the holder raised the IRQL itself (came in below DISPATCH_LEVEL) */
} win_lock;

static void *win_lock_create(void *ctx)
{
    (void)ctx;
    win_lock *lock = ExAllocatePoolWithTag(NonPagedPoolNx, sizeof(*lock), WDDM_WIN_POOL_TAG);
    if (lock != NULL) {
        KeInitializeSpinLock(&lock->spin);
        lock->old_irql = PASSIVE_LEVEL;
        lock->raised = FALSE;
    }
    return lock;
}

/* Below DISPATCH_LEVEL the lock raises to it; at DISPATCH_LEVEL (a DPC) it is taken as is.
 * Above (an ISR) a spin lock that a DPC may hold on the same processor would deadlock: that is
 * a breach of the table's contract (the library's ISR path takes no lock), logged, and the
 * lock is still taken so the data stay consistent. */
static void win_lock_acquire(void *ctx, void *opaque)
{
    (void)ctx;
    win_lock *lock = opaque;
    KIRQL irql = KeGetCurrentIrql();
    if (irql < DISPATCH_LEVEL) {
        KIRQL old;
        KeAcquireSpinLock(&lock->spin, &old);
        lock->old_irql = old;
        lock->raised = TRUE;
        return;
    }
    if (irql > DISPATCH_LEVEL) {
        wddm_win_log(WDDM_OS_LOG_ERROR, "spin lock taken above DISPATCH_LEVEL", irql, 0);
    }
    KeAcquireSpinLockAtDpcLevel(&lock->spin);
    lock->raised = FALSE;
}

static void win_lock_release(void *ctx, void *opaque)
{
    (void)ctx;
    win_lock *lock = opaque;
    if (lock->raised) {
        KIRQL old = lock->old_irql;
        lock->raised = FALSE;
        KeReleaseSpinLock(&lock->spin, old);
    } else {
        KeReleaseSpinLockFromDpcLevel(&lock->spin);
    }
}

static void win_lock_destroy(void *ctx, void *opaque)
{
    (void)ctx;
    if (opaque != NULL) {
        ExFreePoolWithTag(opaque, WDDM_WIN_POOL_TAG);
    }
}

/* ---- Time, barriers, interrupts ------------------------------------------------------ */

static void win_stall_us(void *ctx, uint32_t microseconds)
{
    (void)ctx;
    if (microseconds >= SLEEP_FROM_US && KeGetCurrentIrql() == PASSIVE_LEVEL) {
        LARGE_INTEGER interval;
        interval.QuadPart = -(LONGLONG)microseconds * 10; /* relative, 100 ns units */
        KeDelayExecutionThread(KernelMode, FALSE, &interval);
        return;
    }
    while (microseconds > 0) {
        uint32_t chunk = microseconds < STALL_CHUNK_US ? microseconds : STALL_CHUNK_US;
        KeStallExecutionProcessor(chunk);
        microseconds -= chunk;
    }
}

static uint64_t win_now_us(void *ctx)
{
    (void)ctx;
    return KeQueryInterruptTime() / 10; /* 100 ns units since boot, monotonic */
}

static void win_memory_barrier(void *ctx)
{
    (void)ctx;
#if defined(__GNUC__)
    /* mingw-w64's KeMemoryBarrier has no "memory" clobber, so GCC could move accesses across
     * it; a seq_cst fence is both the CPU and the compiler barrier. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#else
    KeMemoryBarrier();
#endif
}

/* The library has read (and so acknowledged) the virtio ISR byte; the bits wait for the DPC. */
static void win_interrupt_ack(void *ctx, uint32_t isr_status)
{
    wddm_win_layer *layer = ctx;
    InterlockedOr(&layer->pending_isr, (LONG)isr_status);
}

ULONG wddm_win_layer_take_isr(wddm_win_layer *layer)
{
    return (ULONG)InterlockedExchange(&layer->pending_isr, 0);
}

/* ---- Init ---------------------------------------------------------------------------- */

NTSTATUS wddm_win_layer_init(wddm_win_layer *layer, const wddm_win_config *config, wddm_os *os)
{
    if (layer == NULL || config == NULL || os == NULL || config->read_device_space == NULL ||
        config->write_device_space == NULL || config->translated_resources == NULL) {
        return STATUS_INVALID_PARAMETER;
    }
    if (KeGetCurrentIrql() != PASSIVE_LEVEL) {
        return STATUS_INVALID_DEVICE_STATE;
    }
    RtlZeroMemory(layer, sizeof(*layer));
    layer->config = *config;

    UNICODE_STRING name;
    RtlInitUnicodeString(&name, L"MmMapIoSpaceEx");
    /* A routine address is data to ISO C: copied, not cast, into the function pointer. */
    PVOID routine = MmGetSystemRoutineAddress(&name);
    _Static_assert(sizeof(routine) == sizeof(layer->map_io_space_ex), "code pointer size");
    RtlCopyMemory(&layer->map_io_space_ex, &routine, sizeof(routine));

    NTSTATUS status = wddm_win_find_resources(layer);
    if (!NT_SUCCESS(status)) {
        return status;
    }
    layer->config.translated_resources = NULL; /* dxgkrnl's buffer is not ours to keep */
    if (!layer->interrupt_present) {
        wddm_win_log(WDDM_OS_LOG_WARN, "no interrupt resource", 0, 0);
    }

    RtlZeroMemory(os, sizeof(*os));
    os->ctx = layer;
    os->dma_alloc = win_dma_alloc;
    os->dma_free = win_dma_free;
    os->bar_map = win_bar_map;
    os->bar_unmap = win_bar_unmap;
    os->bar_info = win_bar_info;
    os->config_read = win_config_read;
    os->config_write = win_config_write;
    os->lock_create = win_lock_create;
    os->lock_acquire = win_lock_acquire;
    os->lock_release = win_lock_release;
    os->lock_destroy = win_lock_destroy;
    os->stall_us = win_stall_us;
    os->now_us = win_now_us;
    os->memory_barrier = win_memory_barrier;
    os->interrupt_ack = win_interrupt_ack;
    os->log = win_log;
    return STATUS_SUCCESS;
}
