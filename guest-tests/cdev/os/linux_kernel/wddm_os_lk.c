// SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause
/* The C device library's Linux kernel OS layer (see wddm_os_lk.h). Which context each entry
 * runs in: dma_*, bar_*, config_* and wait_interrupt in process context (probe, ioctls);
 * the lock from process context and the deferred half (a threaded IRQ handler);
 * interrupt_ack, memory_barrier, now_us and log also from the hard-IRQ top half. */

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/ktime.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "wddm_os_lk.h"

struct lk_lock {
	spinlock_t lock;
	unsigned long flags; /* of the holder: saved after taking the lock */
};

static int lk_dma_alloc(void *ctx, uint64_t size, uint64_t align, wddm_os_dma *out)
{
	struct wddm_lk_layer *l = ctx;
	dma_addr_t bus;
	u64 bytes;
	void *cpu;

	if (!size || !align || (align & (align - 1)) || align > SZ_2M || size > SZ_64M)
		return -EINVAL;
	/* dma_alloc_coherent aligns a block to its own size rounded up to a power of two (in
	 * pages): asking for at least `align` bytes gives that alignment. */
	bytes = PAGE_ALIGN(max(size, align));
	cpu = dma_alloc_coherent(&l->pdev->dev, bytes, &bus, GFP_KERNEL);
	if (!cpu)
		return -ENOMEM;
	if (bus & (align - 1)) {
		dma_free_coherent(&l->pdev->dev, bytes, cpu, bus);
		return -ENOMEM;
	}
	memset(cpu, 0, bytes);
	out->cpu = cpu;
	out->bus = bus;
	out->size = bytes;
	out->os_handle = NULL;
	atomic64_add(bytes, &l->dma_bytes);
	return 0;
}

static void lk_dma_free(void *ctx, wddm_os_dma *mem)
{
	struct wddm_lk_layer *l = ctx;

	if (!mem->cpu)
		return;
	dma_free_coherent(&l->pdev->dev, mem->size, mem->cpu, mem->bus);
	atomic64_sub(mem->size, &l->dma_bytes);
	mem->cpu = NULL;
}

/* PCI function `function` of the GPU's slot: the GPU itself for 0, else a sibling (taken once,
 * its memory decoding enabled; released by wddm_lk_layer_fini). */
static struct pci_dev *lk_function(struct wddm_lk_layer *l, u32 function)
{
	struct pci_dev *sib;

	if (function == 0)
		return l->pdev;
	if (function >= WDDM_LK_MAX_FUNCTIONS)
		return NULL;
	if (l->siblings[function])
		return l->siblings[function];
	sib = pci_get_slot(l->pdev->bus, PCI_DEVFN(PCI_SLOT(l->pdev->devfn), function));
	if (!sib)
		return NULL;
	if (pci_enable_device_mem(sib)) {
		pci_dev_put(sib);
		return NULL;
	}
	l->siblings[function] = sib;
	l->sibling_enabled[function] = true;
	return sib;
}

static int lk_bar_info(void *ctx, uint32_t function, uint32_t bar, uint64_t *address,
		       uint64_t *size)
{
	struct pci_dev *p = lk_function(ctx, function);

	if (!p || bar >= PCI_STD_NUM_BARS || !(pci_resource_flags(p, bar) & IORESOURCE_MEM) ||
	    !pci_resource_start(p, bar))
		return -ENODEV;
	*address = pci_resource_start(p, bar);
	*size = pci_resource_len(p, bar);
	return 0;
}

static volatile void *lk_bar_map(void *ctx, uint32_t function, uint32_t bar, uint64_t offset,
				 uint64_t length)
{
	u64 start, size, end;

	if (lk_bar_info(ctx, function, bar, &start, &size) || !length ||
	    check_add_overflow(offset, length, &end) || end > size)
		return NULL;
	/* Uncached: registers, and VRAM the device writes behind the CPU's back. */
	return (volatile void __force *)ioremap(start + offset, length);
}

static void lk_bar_unmap(void *ctx, volatile void *va, uint64_t length)
{
	(void)ctx;
	(void)length;
	if (va)
		iounmap((void __iomem __force *)va);
}

static int lk_config_read(void *ctx, uint32_t offset, uint32_t width, uint32_t *value)
{
	struct wddm_lk_layer *l = ctx;
	u8 b;
	u16 w;
	int r;

	if (offset >= 4096 || offset % width)
		return -EINVAL;
	switch (width) {
	case 1:
		r = pci_read_config_byte(l->pdev, offset, &b);
		*value = b;
		break;
	case 2:
		r = pci_read_config_word(l->pdev, offset, &w);
		*value = w;
		break;
	case 4:
		r = pci_read_config_dword(l->pdev, offset, value);
		break;
	default:
		return -EINVAL;
	}
	return r ? -EIO : 0;
}

static int lk_config_write(void *ctx, uint32_t offset, uint32_t width, uint32_t value)
{
	struct wddm_lk_layer *l = ctx;
	int r;

	if (offset >= 4096 || offset % width)
		return -EINVAL;
	switch (width) {
	case 1:
		r = pci_write_config_byte(l->pdev, offset, (u8)value);
		break;
	case 2:
		r = pci_write_config_word(l->pdev, offset, (u16)value);
		break;
	case 4:
		r = pci_write_config_dword(l->pdev, offset, value);
		break;
	default:
		return -EINVAL;
	}
	return r ? -EIO : 0;
}

static void *lk_lock_create(void *ctx)
{
	struct lk_lock *lock = kzalloc(sizeof(*lock), GFP_KERNEL);

	(void)ctx;
	if (lock)
		spin_lock_init(&lock->lock);
	return lock;
}

static void lk_lock_acquire(void *ctx, void *p)
{
	struct lk_lock *lock = p;
	unsigned long flags;

	(void)ctx;
	spin_lock_irqsave(&lock->lock, flags);
	lock->flags = flags;
}

static void lk_lock_release(void *ctx, void *p)
{
	struct lk_lock *lock = p;

	(void)ctx;
	spin_unlock_irqrestore(&lock->lock, lock->flags);
}

static void lk_lock_destroy(void *ctx, void *p)
{
	(void)ctx;
	kfree(p);
}

/* The library's polling waits (device reset, init's capset reads): process context only. */
static void lk_stall_us(void *ctx, uint32_t us)
{
	(void)ctx;
	if (us < 10)
		udelay(us);
	else
		usleep_range(us, us + us / 4 + 1);
}

static uint64_t lk_now_us(void *ctx)
{
	(void)ctx;
	return ktime_get_ns() / 1000;
}

static void lk_memory_barrier(void *ctx)
{
	(void)ctx;
	mb();
}

static void lk_interrupt_ack(void *ctx, uint32_t bits)
{
	struct wddm_lk_layer *l = ctx;

	atomic_or((int)bits, &l->pending_bits);
}

static void lk_log(void *ctx, int level, const char *message, uint64_t a, uint64_t b)
{
	struct wddm_lk_layer *l = ctx;

	if (level == WDDM_OS_LOG_ERROR)
		dev_err(&l->pdev->dev, "%s %#llx %#llx\n", message, a, b);
	else if (level == WDDM_OS_LOG_WARN)
		dev_warn(&l->pdev->dev, "%s %#llx %#llx\n", message, a, b);
	else
		dev_info(&l->pdev->dev, "%s %#llx %#llx\n", message, a, b);
}

static void lk_wait_interrupt(void *ctx, const volatile uint32_t *generation, uint32_t seen,
			      uint32_t timeout_us)
{
	struct wddm_lk_layer *l = ctx;

	atomic64_inc(&l->waits);
	wait_event_timeout(l->wq, *generation != seen, usecs_to_jiffies(timeout_us) + 1);
}

void wddm_lk_layer_init(struct wddm_lk_layer *l, struct pci_dev *pdev, wddm_os *os)
{
	memset(l, 0, sizeof(*l));
	l->pdev = pdev;
	atomic_set(&l->pending_bits, 0);
	init_waitqueue_head(&l->wq);
	memset(os, 0, sizeof(*os));
	os->ctx = l;
	os->dma_alloc = lk_dma_alloc;
	os->dma_free = lk_dma_free;
	os->bar_map = lk_bar_map;
	os->bar_unmap = lk_bar_unmap;
	os->bar_info = lk_bar_info;
	os->config_read = lk_config_read;
	os->config_write = lk_config_write;
	os->lock_create = lk_lock_create;
	os->lock_acquire = lk_lock_acquire;
	os->lock_release = lk_lock_release;
	os->lock_destroy = lk_lock_destroy;
	os->stall_us = lk_stall_us;
	os->now_us = lk_now_us;
	os->memory_barrier = lk_memory_barrier;
	os->interrupt_ack = lk_interrupt_ack;
	os->log = lk_log;
	os->wait_interrupt = lk_wait_interrupt;
}

void wddm_lk_layer_fini(struct wddm_lk_layer *l)
{
	u32 i;

	for (i = 0; i < WDDM_LK_MAX_FUNCTIONS; i++) {
		if (!l->siblings[i])
			continue;
		if (l->sibling_enabled[i])
			pci_disable_device(l->siblings[i]);
		pci_dev_put(l->siblings[i]);
		l->siblings[i] = NULL;
	}
}

u32 wddm_lk_layer_take_bits(struct wddm_lk_layer *l)
{
	return (u32)atomic_xchg(&l->pending_bits, 0);
}

void wddm_lk_layer_wake(struct wddm_lk_layer *l)
{
	wake_up_all(&l->wq);
}
