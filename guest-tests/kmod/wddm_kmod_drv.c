// SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause
/*
 * wddm_gpu_kmod: the first kernel-mode, interrupt-driven driver of the vhost-user WDDM GPU.
 *
 * A DRM render driver (no KMS) over the C device library (guest-tests/cdev) and its Linux
 * kernel OS layer (cdev/os/linux_kernel). It binds the GPU function (virtio-gpu, mode 1:
 * vhost-user-gpu-pci with the VRAM on an ivshmem-plain sibling), takes one MSI-X vector for
 * configuration changes and one for the control queue (or one shared vector, or INTx with
 * force_intx=1), and never polls a completion: the hard-IRQ handler is the library's top half
 * (read and acknowledge), the threaded handler its deferred half, which signals the dma_fence
 * of each completed submission. A submitting ioctl sleeps on that fence.
 *
 * The WDDM counterparts: probe = DxgkDdiAddDevice + DxgkDdiStartDevice, the hard-IRQ handler =
 * DxgkDdiInterruptRoutine, the threaded handler = DxgkDdiDpcRoutine, the dma_fence signal =
 * DxgkCbNotifyInterrupt(DXGK_INTERRUPT_DMA_COMPLETED), the SUBMIT_PAGING ioctl = what VidMm
 * does through DxgkDdiBuildPagingBuffer and DxgkDdiSubmitCommand (docs/kernel-driver.md).
 */

#include <linux/dma-fence.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/kref.h>
#include <linux/io.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_gem_ttm_helper.h>
#include <drm/drm_ioctl.h>
#include <drm/drm_print.h>
#include <drm/gpu_scheduler.h>
#include <drm/ttm/ttm_bo_api.h>
#include <drm/ttm/ttm_bo_driver.h>
#include <drm/ttm/ttm_device.h>
#include <drm/ttm/ttm_placement.h>
#include <drm/ttm/ttm_range_manager.h>
#include <drm/ttm/ttm_tt.h>

#include "wddm_gpu_dev.h"
#include "wddm_kmod_uapi.h"
#include "wddm_os_lk.h"

#define DRIVER_NAME "wddm_gpu"
#define DRIVER_DESC "vhost-user WDDM GPU (interrupt-driven DRM render driver)"

static bool force_intx;
module_param(force_intx, bool, 0444);
MODULE_PARM_DESC(force_intx, "Use the INTx line even when MSI-X is offered (default: no)");

static unsigned int fence_timeout_ms = 5000;
module_param(fence_timeout_ms, uint, 0444);
MODULE_PARM_DESC(fence_timeout_ms, "Default wait for a submission's fence (ms, default 5000)");

static unsigned int tdr_timeout_ms = 2000;
module_param(tdr_timeout_ms, uint, 0444);
MODULE_PARM_DESC(tdr_timeout_ms,
		 "drm_sched job timeout on the paging node before the TDR path (ms, default 2000: "
		 "TdrDelay)");

/* SUBMIT_PAGING's window at the start of the VRAM segment; TTM manages the rest. */
#define WGPU_SCRATCH_BYTES (1u << 20)

/* One submission: its dma_fence and the DMA memory the device reads and writes. The pending
 * list holds a reference until the device answers (or the device is torn down), so the memory
 * outlives an ioctl that gave up waiting. */
struct wgpu_job {
	struct dma_fence base;
	struct list_head link;
	struct device *dma_dev;
	u32 fence_id;
	u32 status;          /* the device's SUBMIT status, set before the signal */
	bool is_move;        /* a TTM move: a status other than OK counts as a failed move */
	bool unbinds;        /* its paging buffer unbinds [unbind_page, + unbind_pages) */
	u64 unbind_page, unbind_pages;
	ktime_t submitted_at;
	ktime_t signalled_at;
	/* The paging buffer, the guest pages of the TRANSFER and their PFN list. */
	void *pb_cpu, *data_cpu, *pfn_cpu;
	dma_addr_t pb_bus, data_bus, pfn_bus;
	size_t pb_size, data_size, pfn_size;
};

struct wgpu {
	struct drm_device drm;
	struct pci_dev *pdev;
	struct wddm_lk_layer layer;
	wddm_os os;
	wddm_dev *dev; /* large: allocated */
	const wddm_segment *vram;     /* TTM_PL_VRAM: the first CPU-visible memory segment */
	const wddm_segment *aperture; /* TTM_PL_TT: the first aperture segment */
	u32 segments_unmanaged;
	u64 scratch_size;             /* SUBMIT_PAGING's window: [0, scratch_size) of vram */
	u64 vram_phys;                /* CPU physical address of vram's byte scratch_size */
	u64 vram_managed;             /* bytes of vram under TTM */
	u32 irq_mode;
	int nvec;
	int irq_config, irq_queue; /* Linux IRQ numbers; irq_queue == irq_config when shared */
	bool irqs_requested;
	u64 polled_at_irq_enable;

	spinlock_t fence_lock; /* the fences' lock and the pending list's */
	struct list_head pending;
	u64 fence_context;
	struct mutex submit_lock; /* fence ids, paging buffers and submissions in one order */
	u32 next_fence;

	/* TTM over the device's segments; the dummy page an unbound aperture page points at. */
	struct ttm_device bdev;
	bool ttm_ready;
	void *dummy_cpu;
	dma_addr_t dummy_bus;
	atomic64_t moves[WDDM_KMOD_MOVE_KINDS];
	atomic64_t move_bytes, moves_failed, unbinds_on_free, move_submissions;

	/* drm_sched on the paging node: one kernel entity for TTM's moves and SUBMIT_PAGING. */
	struct drm_gpu_scheduler sched;
	struct drm_sched_entity entity;
	bool sched_ready, entity_ready;
	struct mutex push_lock; /* drm_sched_job_arm + push in one order */
	/* What the aperture maps, in the order it was bound: a RESET clears the GART, and the TDR
	 * path binds these again before it resubmits. */
	spinlock_t bind_lock;
	struct list_head bindings;
	atomic64_t tdr_count, tdr_by_query, tdr_by_preempt, tdr_by_reset, tdr_failed;
	atomic64_t tdr_resubmitted, tdr_rebound, tdr_released;
	u32 last_tdr_fence, last_tdr_method;

	atomic64_t top_config, top_queue, top_line, top_not_ours, deferred_runs;
	atomic64_t submitted, fences_signalled, fences_timed_out;
};

static struct wgpu *to_wgpu(struct drm_device *drm)
{
	return container_of(drm, struct wgpu, drm);
}

/* ---- dma_fence --------------------------------------------------------------------------- */

static const char *wgpu_fence_driver_name(struct dma_fence *f)
{
	return DRIVER_NAME;
}

static const char *wgpu_fence_timeline_name(struct dma_fence *f)
{
	return "paging";
}

static void wgpu_job_free_memory(struct wgpu_job *job)
{
	if (job->pb_cpu)
		dma_free_coherent(job->dma_dev, job->pb_size, job->pb_cpu, job->pb_bus);
	if (job->data_cpu)
		dma_free_coherent(job->dma_dev, job->data_size, job->data_cpu, job->data_bus);
	if (job->pfn_cpu)
		dma_free_coherent(job->dma_dev, job->pfn_size, job->pfn_cpu, job->pfn_bus);
	job->pb_cpu = job->data_cpu = job->pfn_cpu = NULL;
}

static void wgpu_fence_release(struct dma_fence *f)
{
	struct wgpu_job *job = container_of(f, struct wgpu_job, base);

	wgpu_job_free_memory(job);
	dma_fence_free(f);
}

static const struct dma_fence_ops wgpu_fence_ops = {
	.get_driver_name = wgpu_fence_driver_name,
	.get_timeline_name = wgpu_fence_timeline_name,
	.release = wgpu_fence_release,
};

/* ---- Aperture bindings (what a RESET clears) ---------------------------------------------- */

struct wgpu_binding {
	struct list_head link;
	u64 page, pages;
	void *pfn_cpu; /* its own copy of the PFN list, for binding again */
	dma_addr_t pfn_bus;
	size_t pfn_size;
};

static void wgpu_binding_free(struct wgpu *g, struct wgpu_binding *b)
{
	dma_free_coherent(&g->pdev->dev, b->pfn_size, b->pfn_cpu, b->pfn_bus);
	kfree(b);
}

/* Records a bind of `pages` pages at aperture page `page` from the PFN list `pfns`. */
static int wgpu_binding_add(struct wgpu *g, u64 page, u64 pages, const u64 *pfns)
{
	struct wgpu_binding *b = kzalloc(sizeof(*b), GFP_KERNEL);
	unsigned long flags;

	if (!b)
		return -ENOMEM;
	b->page = page;
	b->pages = pages;
	b->pfn_size = PAGE_ALIGN(pages * sizeof(u64));
	b->pfn_cpu = dma_alloc_coherent(&g->pdev->dev, b->pfn_size, &b->pfn_bus, GFP_KERNEL);
	if (!b->pfn_cpu) {
		kfree(b);
		return -ENOMEM;
	}
	memcpy(b->pfn_cpu, pfns, pages * sizeof(u64));
	spin_lock_irqsave(&g->bind_lock, flags);
	list_add_tail(&b->link, &g->bindings);
	spin_unlock_irqrestore(&g->bind_lock, flags);
	return 0;
}

/* The oldest binding of exactly that range goes (its unbind ran). */
static void wgpu_binding_remove(struct wgpu *g, u64 page, u64 pages)
{
	struct wgpu_binding *b, *found = NULL;
	unsigned long flags;

	spin_lock_irqsave(&g->bind_lock, flags);
	list_for_each_entry(b, &g->bindings, link) {
		if (b->page == page && b->pages == pages) {
			found = b;
			list_del(&b->link);
			break;
		}
	}
	spin_unlock_irqrestore(&g->bind_lock, flags);
	if (found)
		wgpu_binding_free(g, found);
}

static void wgpu_bindings_clear(struct wgpu *g)
{
	struct wgpu_binding *b, *tmp;
	unsigned long flags;
	LIST_HEAD(all);

	spin_lock_irqsave(&g->bind_lock, flags);
	list_splice_init(&g->bindings, &all);
	spin_unlock_irqrestore(&g->bind_lock, flags);
	list_for_each_entry_safe(b, tmp, &all, link)
		wgpu_binding_free(g, b);
}

/* ---- The interrupt path ------------------------------------------------------------------ */

/* The deferred half's sink: a SUBMIT answered. Finds its job, records the status and signals
 * the fence (DXGK_INTERRUPT_DMA_COMPLETED). The library already checked that completions come
 * in submission order with the fence they were submitted with. */
static void wgpu_completion(void *ctx, const WddmGpuRespSubmit *c)
{
	struct wgpu *g = ctx;
	struct wgpu_job *job, *found = NULL;
	unsigned long flags;

	spin_lock_irqsave(&g->fence_lock, flags);
	list_for_each_entry(job, &g->pending, link) {
		if (job->fence_id == c->submission_fence_id) {
			found = job;
			break;
		}
	}
	if (found)
		list_del_init(&found->link);
	spin_unlock_irqrestore(&g->fence_lock, flags);
	if (found) {
		/* An unbind that ran: the range leaves the bindings before anyone can free its
		 * pages (they wait for this fence). */
		if (found->unbinds && c->status == WDDM_GPU_SUBMIT_STATUS_OK)
			wgpu_binding_remove(g, found->unbind_page, found->unbind_pages);
		found->status = c->status;
		found->signalled_at = ktime_get();
		if (c->status != WDDM_GPU_SUBMIT_STATUS_OK) {
			dma_fence_set_error(&found->base, -EIO);
			if (found->is_move && c->status != WDDM_GPU_SUBMIT_STATUS_RESET &&
			    c->status != WDDM_GPU_SUBMIT_STATUS_PREEMPTED)
				atomic64_inc(&g->moves_failed);
		}
		dma_fence_signal(&found->base);
		atomic64_inc(&g->fences_signalled);
		dma_fence_put(&found->base); /* the pending list's reference */
	} else
		drm_warn(&g->drm, "completion of unknown fence %u (status %u)\n",
			 c->submission_fence_id, c->status);
}

static void wgpu_config_changed(void *ctx)
{
	struct wgpu *g = ctx;

	drm_info(&g->drm, "device configuration changed\n");
}

/* Hard-IRQ handlers: the library's top half only (no lock, no allocation, no sleep). */
static irqreturn_t wgpu_irq_queue(int irq, void *arg)
{
	struct wgpu *g = arg;
	u32 source = g->irq_mode == WDDM_KMOD_IRQ_MSIX_SHARED ? WDDM_IRQ_SOURCE_MSIX_SHARED
							       : WDDM_IRQ_SOURCE_MSIX_QUEUE;

	if (!wddm_dev_interrupt_top(g->dev, source))
		return IRQ_NONE;
	atomic64_inc(&g->top_queue);
	return IRQ_WAKE_THREAD;
}

static irqreturn_t wgpu_irq_config(int irq, void *arg)
{
	struct wgpu *g = arg;

	if (!wddm_dev_interrupt_top(g->dev, WDDM_IRQ_SOURCE_MSIX_CONFIG))
		return IRQ_NONE;
	atomic64_inc(&g->top_config);
	return IRQ_WAKE_THREAD;
}

static irqreturn_t wgpu_irq_line(int irq, void *arg)
{
	struct wgpu *g = arg;

	if (!wddm_dev_interrupt_top(g->dev, WDDM_IRQ_SOURCE_LINE)) {
		atomic64_inc(&g->top_not_ours);
		return IRQ_NONE; /* a shared line: another device's */
	}
	atomic64_inc(&g->top_line);
	return IRQ_WAKE_THREAD;
}

/* The threaded handler: the library's deferred half, then the synchronous waiters woken. */
static irqreturn_t wgpu_irq_thread(int irq, void *arg)
{
	struct wgpu *g = arg;
	const wddm_irq_sink sink = {
		.ctx = g,
		.completion = wgpu_completion,
		.config_changed = wgpu_config_changed,
	};
	u32 bits = wddm_lk_layer_take_bits(&g->layer);
	wddm_result r = wddm_dev_interrupt_deferred(g->dev, bits, &sink);

	atomic64_inc(&g->deferred_runs);
	wddm_lk_layer_wake(&g->layer);
	if (r != WDDM_OK && r != WDDM_E_STATE)
		drm_err_ratelimited(&g->drm, "deferred half: %s\n", wddm_result_name(r));
	return IRQ_HANDLED;
}

/* Vectors before wddm_dev_init (it writes them into the device): two MSI-X vectors (0:
 * configuration, 1: control queue), else one shared, else INTx. */
static int wgpu_alloc_vectors(struct wgpu *g, wddm_dev_config *config)
{
	struct pci_dev *pdev = g->pdev;
	int n;

	if (!force_intx && pci_msix_vec_count(pdev) > 0) {
		n = pci_alloc_irq_vectors(pdev, 1, 2, PCI_IRQ_MSIX);
		if (n >= 2) {
			g->irq_mode = WDDM_KMOD_IRQ_MSIX;
			config->config_vector = 0;
			config->queue_vector = 1;
		} else if (n == 1) {
			g->irq_mode = WDDM_KMOD_IRQ_MSIX_SHARED;
			config->config_vector = 0;
			config->queue_vector = 0;
		}
		if (n >= 1) {
			g->nvec = n;
			config->use_msix = true;
			return 0;
		}
		drm_warn(&g->drm, "MSI-X offered but not allocated (%d): INTx\n", n);
	}
	n = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_LEGACY);
	if (n < 1)
		return n < 0 ? n : -ENODEV;
	g->nvec = n;
	g->irq_mode = WDDM_KMOD_IRQ_INTX;
	config->use_msix = false;
	return 0;
}

static int wgpu_request_irqs(struct wgpu *g)
{
	struct pci_dev *pdev = g->pdev;
	int r;

	g->irq_config = pci_irq_vector(pdev, 0);
	if (g->irq_config < 0)
		return g->irq_config;
	switch (g->irq_mode) {
	case WDDM_KMOD_IRQ_MSIX:
		g->irq_queue = pci_irq_vector(pdev, 1);
		if (g->irq_queue < 0)
			return g->irq_queue;
		r = request_threaded_irq(g->irq_config, wgpu_irq_config, wgpu_irq_thread, 0,
					 DRIVER_NAME "-config", g);
		if (r)
			return r;
		r = request_threaded_irq(g->irq_queue, wgpu_irq_queue, wgpu_irq_thread, 0,
					 DRIVER_NAME "-ctrlq", g);
		if (r) {
			free_irq(g->irq_config, g);
			return r;
		}
		break;
	case WDDM_KMOD_IRQ_MSIX_SHARED:
		g->irq_queue = g->irq_config;
		r = request_threaded_irq(g->irq_queue, wgpu_irq_queue, wgpu_irq_thread, 0,
					 DRIVER_NAME "-shared", g);
		if (r)
			return r;
		break;
	default:
		g->irq_queue = g->irq_config;
		r = request_threaded_irq(g->irq_config, wgpu_irq_line, wgpu_irq_thread, IRQF_SHARED,
					 DRIVER_NAME "-intx", g);
		if (r)
			return r;
		/*
		 * Init's answers raised the line (and left the ISR byte set) while the I/O APIC
		 * pin was still masked and edge-triggered. QEMU's I/O APIC drops a level raised
		 * in that state: switched to level and unmasked, the pin never fires for the line
		 * that stays high. Nothing is in flight now (init collected its answers by
		 * polling), so read the ISR byte once to lower the line; every later answer raises
		 * it again on a pin that delivers it.
		 */
		(void)wddm_dev_interrupt_top(g->dev, WDDM_IRQ_SOURCE_LINE);
		(void)wddm_lk_layer_take_bits(&g->layer);
		break;
	}
	g->irqs_requested = true;
	return 0;
}

static void wgpu_free_irqs(struct wgpu *g)
{
	if (!g->irqs_requested)
		return;
	if (g->irq_mode == WDDM_KMOD_IRQ_MSIX)
		free_irq(g->irq_queue, g);
	free_irq(g->irq_config, g);
	g->irqs_requested = false;
}

/* After the device reset: no answer will come. Every pending fence ends with -ENODEV. */
static void wgpu_cancel_pending(struct wgpu *g)
{
	struct wgpu_job *job, *tmp;
	unsigned long flags;
	LIST_HEAD(done);

	spin_lock_irqsave(&g->fence_lock, flags);
	list_for_each_entry_safe(job, tmp, &g->pending, link) {
		list_move_tail(&job->link, &done);
		dma_fence_set_error(&job->base, -ENODEV);
		dma_fence_signal_locked(&job->base);
	}
	spin_unlock_irqrestore(&g->fence_lock, flags);
	list_for_each_entry_safe(job, tmp, &done, link) {
		list_del_init(&job->link);
		dma_fence_put(&job->base);
	}
}

/* ---- ioctls ------------------------------------------------------------------------------ */

static int wgpu_ioctl_get_info(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct wgpu *g = to_wgpu(drm);
	struct drm_wddm_info *info = data;
	wddm_dev_counters c;
	int idx, i;

	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	memset(info, 0, sizeof(*info));
	if (wddm_dev_get_counters(g->dev, &c) != WDDM_OK) {
		drm_dev_exit(idx);
		return -EIO;
	}
	info->magic = WDDM_KMOD_MAGIC;
	info->interface_version = WDDM_KMOD_INTERFACE_VERSION;
	info->irq_mode = g->irq_mode;
	info->irq_count = g->irq_mode == WDDM_KMOD_IRQ_MSIX ? 2 : 1;
	info->irq_config = g->irq_config;
	info->irq_queue = g->irq_queue;
	info->vram_segment_id = g->vram->desc.id;
	info->vram_size = g->vram->desc.size;
	info->aperture_segment_id = g->aperture->desc.id;
	info->aperture_size = g->aperture->desc.size;
	info->scratch_size = g->scratch_size;
	info->vram_managed = g->vram_managed;
	info->vram_used = ttm_resource_manager_usage(ttm_manager_type(&g->bdev, TTM_PL_VRAM));
	info->gtt_used = ttm_resource_manager_usage(ttm_manager_type(&g->bdev, TTM_PL_TT));
	for (i = 0; i < WDDM_KMOD_MOVE_KINDS; i++)
		info->moves[i] = atomic64_read(&g->moves[i]);
	info->move_bytes = atomic64_read(&g->move_bytes);
	info->moves_failed = atomic64_read(&g->moves_failed);
	info->unbinds_on_free = atomic64_read(&g->unbinds_on_free);
	info->move_submissions = atomic64_read(&g->move_submissions);
	info->segment_count = wddm_dev_layout(g->dev)->segment_count;
	info->segments_unmanaged = g->segments_unmanaged;
	info->tdr_timeout_ms = tdr_timeout_ms;
	info->last_tdr_fence = g->last_tdr_fence;
	info->last_tdr_method = g->last_tdr_method;
	info->tdr_count = atomic64_read(&g->tdr_count);
	info->tdr_by_query = atomic64_read(&g->tdr_by_query);
	info->tdr_by_preempt = atomic64_read(&g->tdr_by_preempt);
	info->tdr_by_reset = atomic64_read(&g->tdr_by_reset);
	info->tdr_failed = atomic64_read(&g->tdr_failed);
	info->tdr_resubmitted = atomic64_read(&g->tdr_resubmitted);
	info->tdr_rebound = atomic64_read(&g->tdr_rebound);
	info->tdr_released = atomic64_read(&g->tdr_released);
	info->top_config = atomic64_read(&g->top_config);
	info->top_queue = atomic64_read(&g->top_queue);
	info->top_line = atomic64_read(&g->top_line);
	info->top_not_ours = atomic64_read(&g->top_not_ours);
	info->deferred_runs = atomic64_read(&g->deferred_runs);
	info->polled_total = c.polled;
	info->polled_after_irq = c.polled - g->polled_at_irq_enable;
	info->deferred_total = c.deferred;
	info->sync_waits = atomic64_read(&g->layer.waits);
	info->submitted = atomic64_read(&g->submitted);
	info->fences_signalled = atomic64_read(&g->fences_signalled);
	info->fences_timed_out = atomic64_read(&g->fences_timed_out);
	drm_dev_exit(idx);
	return 0;
}

/* A job with a one-page paging buffer, `data_pages` guest pages of its own (0: none) and a PFN
 * list of `pfns` entries (0: none). */
static struct wgpu_job *wgpu_job_alloc(struct wgpu *g, u32 data_pages, u32 pfns)
{
	struct device *d = &g->pdev->dev;
	struct wgpu_job *job = kzalloc(sizeof(*job), GFP_KERNEL);

	if (!job)
		return NULL;
	job->dma_dev = d;
	job->pb_size = PAGE_SIZE;
	job->data_size = (size_t)data_pages * PAGE_SIZE;
	job->pfn_size = PAGE_ALIGN((size_t)pfns * sizeof(u64));
	job->pb_cpu = dma_alloc_coherent(d, job->pb_size, &job->pb_bus, GFP_KERNEL);
	if (job->data_size)
		job->data_cpu = dma_alloc_coherent(d, job->data_size, &job->data_bus, GFP_KERNEL);
	if (job->pfn_size)
		job->pfn_cpu = dma_alloc_coherent(d, job->pfn_size, &job->pfn_bus, GFP_KERNEL);
	if (!job->pb_cpu || (job->data_size && !job->data_cpu) ||
	    (job->pfn_size && !job->pfn_cpu)) {
		wgpu_job_free_memory(job);
		kfree(job);
		return NULL;
	}
	return job;
}

/* The packets of a job, built under submit_lock once its fence id is known. */
typedef wddm_result (*wgpu_build_fn)(struct wgpu *g, wddm_pb *pb, void *arg);

/* Takes the next fence id, builds the paging buffer (build, then FENCE), puts the job on the
 * pending list and submits it, all under submit_lock so that ids, dma_fence seqnos and the
 * device's queue agree. When the library has no free slot, sleeps on the oldest pending fence
 * (signalled by the deferred half) and tries again. On success the job's fence is initialised
 * and the caller holds one reference (the pending list another); on failure the job is freed
 * and nothing reached the device. */
static int wgpu_job_submit(struct wgpu *g, struct wgpu_job *job, wgpu_build_fn build, void *arg)
{
	const wddm_layout *layout = wddm_dev_layout(g->dev);
	unsigned long flags;
	wddm_result wr;
	wddm_pb pb;
	long left;
	int tries;

	mutex_lock(&g->submit_lock);
	job->fence_id = g->next_fence + 1;
	wr = wddm_pb_init(&pb, layout, job->pb_cpu, (u32)job->pb_size);
	if (wr == WDDM_OK)
		wr = build(g, &pb, arg);
	if (wr == WDDM_OK)
		wr = wddm_pb_fence(&pb, job->fence_id);
	if (wr != WDDM_OK) {
		mutex_unlock(&g->submit_lock);
		drm_err(&g->drm, "paging buffer refused: %s\n", wddm_result_name(wr));
		wgpu_job_free_memory(job);
		kfree(job);
		return -EINVAL;
	}
	g->next_fence = job->fence_id;
	dma_fence_init(&job->base, &wgpu_fence_ops, &g->fence_lock, g->fence_context,
		       job->fence_id);
	/* Two references: the pending list's (dropped when the device answers) and the caller's. */
	dma_fence_get(&job->base);
	spin_lock_irqsave(&g->fence_lock, flags);
	list_add_tail(&job->link, &g->pending);
	spin_unlock_irqrestore(&g->fence_lock, flags);
	for (tries = 0;; tries++) {
		wddm_submit s = {
			.dma_buffer_address = job->pb_bus,
			.dma_buffer_segment_id = 0,
			.flags = WDDM_GPU_SUBMIT_FLAG_PAGING,
			.dma_buffer_size = (u32)job->pb_size,
			.start_offset = 0,
			.end_offset = pb.used,
			.fence_id = job->fence_id,
		};
		struct dma_fence *oldest = NULL;

		job->submitted_at = ktime_get();
		wr = wddm_dev_submit(g->dev, &s);
		if (wr != WDDM_E_FULL || tries >= 64)
			break;
		spin_lock_irqsave(&g->fence_lock, flags);
		if (!list_empty(&g->pending)) {
			struct wgpu_job *first = list_first_entry(&g->pending, struct wgpu_job, link);

			if (first != job)
				oldest = dma_fence_get(&first->base);
		}
		spin_unlock_irqrestore(&g->fence_lock, flags);
		if (!oldest)
			break;
		left = dma_fence_wait_timeout(oldest, false, msecs_to_jiffies(fence_timeout_ms));
		dma_fence_put(oldest);
		if (left <= 0)
			break; /* the queue does not move: give up with -EBUSY */
	}
	if (wr != WDDM_OK) {
		bool owned = false;

		spin_lock_irqsave(&g->fence_lock, flags);
		if (!list_empty(&job->link)) {
			list_del_init(&job->link);
			owned = true;
			dma_fence_set_error(&job->base, -EIO);
			dma_fence_signal_locked(&job->base);
		}
		spin_unlock_irqrestore(&g->fence_lock, flags);
		mutex_unlock(&g->submit_lock);
		if (owned)
			dma_fence_put(&job->base);
		dma_fence_put(&job->base);
		return wr == WDDM_E_FULL ? -EBUSY : -EIO;
	}
	atomic64_inc(&g->submitted);
	mutex_unlock(&g->submit_lock);
	return 0;
}

/* Counts the dwords of [offset, offset + size) of the VRAM segment that differ from pattern,
 * read through the VRAM BAR; U32_MAX when the range cannot be mapped. */
static u32 wgpu_bar_mismatch(struct wgpu *g, u64 offset, u32 size, u32 pattern)
{
	volatile void *va = wddm_dev_map_segment(g->dev, g->vram->desc.id, offset, size);
	u32 i, bad = 0;

	if (!va)
		return U32_MAX;
	for (i = 0; i < size / 4; i++)
		bad += readl((const void __iomem __force *)va + 4 * i) != pattern;
	g->os.bar_unmap(g->os.ctx, va, size);
	return bad;
}

static const struct drm_sched_backend_ops wgpu_sched_ops;

static int wgpu_sched_init(struct wgpu *g)
{
	struct drm_gpu_scheduler *list[] = { &g->sched };
	const struct drm_sched_init_args args = {
		.ops = &wgpu_sched_ops,
		.credit_limit = 16,
		.hang_limit = 2, /* a job that hangs three times is cancelled (TdrLimitCount) */
		.timeout = msecs_to_jiffies(tdr_timeout_ms ? tdr_timeout_ms : 2000),
		.name = DRIVER_NAME "-paging",
		.dev = &g->pdev->dev,
	};
	int ret = drm_sched_init(&g->sched, &args);

	if (ret)
		return ret;
	g->sched_ready = true;
	ret = drm_sched_entity_init(&g->entity, DRM_SCHED_PRIORITY_KERNEL, list, 1, NULL);
	if (ret) {
		drm_sched_fini(&g->sched);
		g->sched_ready = false;
		return ret;
	}
	g->entity_ready = true;
	return 0;
}

/* The entity's jobs run to the end first (the interrupts still work). */
static void wgpu_sched_fini(struct wgpu *g)
{
	if (g->entity_ready)
		drm_sched_entity_destroy(&g->entity);
	if (g->sched_ready)
		drm_sched_fini(&g->sched);
	g->entity_ready = g->sched_ready = false;
}

/* ---- TTM: VidMm's segments, residency and paging ------------------------------------------
 *
 * TTM_PL_VRAM is the device's first CPU-visible memory segment (less SUBMIT_PAGING's scratch
 * window), TTM_PL_TT its first aperture segment, bound page by page with MAP_APERTURE and
 * unbound with UNMAP_APERTURE to a dummy page, TTM_PL_SYSTEM guest pages. Every move that
 * carries contents runs on the paging engine (TRANSFER, FILL, MAP/UNMAP_APERTURE, FENCE) and
 * hands TTM the submission's dma_fence, signalled by the interrupt's deferred half: there is
 * no CPU copy. The paging engine runs submissions in order, so a move never needs to wait for
 * an earlier one. */

struct wgpu_bo {
	struct ttm_buffer_object tbo;
};

static struct wgpu *bdev_to_wgpu(struct ttm_device *bdev)
{
	return container_of(bdev, struct wgpu, bdev);
}

static void wgpu_bo_destroy(struct ttm_buffer_object *tbo)
{
	struct wgpu_bo *bo = container_of(tbo, struct wgpu_bo, tbo);

	drm_gem_object_release(&tbo->base);
	kfree(bo);
}

static struct ttm_tt *wgpu_tt_create(struct ttm_buffer_object *bo, u32 page_flags)
{
	struct wgpu *g = bdev_to_wgpu(bo->bdev);
	bool coherent = g->aperture->desc.flags & WDDM_DXGK_SEGMENT_CACHE_COHERENT;
	struct ttm_tt *tt = kzalloc(sizeof(*tt), GFP_KERNEL);

	if (!tt)
		return NULL;
	/* Zeroed pages: a new buffer's contents are zeros wherever it first lands. The DMA
	 * addresses are kept: they are the PFN lists the device is given. */
	if (ttm_sg_tt_init(tt, bo, page_flags | TTM_TT_FLAG_ZERO_ALLOC,
			   coherent ? ttm_cached : ttm_write_combined)) {
		kfree(tt);
		return NULL;
	}
	return tt;
}

static void wgpu_tt_destroy(struct ttm_device *bdev, struct ttm_tt *tt)
{
	ttm_tt_fini(tt);
	kfree(tt);
}

static void wgpu_evict_flags(struct ttm_buffer_object *bo, struct ttm_placement *placement)
{
	static const struct ttm_place sys = { .mem_type = TTM_PL_SYSTEM };
	static const struct ttm_place gtt = { .mem_type = TTM_PL_TT };

	/* VidMm evicts a VRAM allocation to the aperture when it can, else to system memory. */
	placement->placement = bo->resource && bo->resource->mem_type == TTM_PL_VRAM ? &gtt : &sys;
	placement->num_placement = 1;
	placement->busy_placement = &sys;
	placement->num_busy_placement = 1;
}

/* The device's view of a resource: for VRAM its segment address, for the aperture its first
 * page; each checked against the segment (a manager sized from the capset cannot hand out
 * more, but nothing here trusts that). */
static int wgpu_res_vram_address(struct wgpu *g, const struct ttm_resource *res, u64 *addr)
{
	u64 off, end, len = (u64)res->num_pages << PAGE_SHIFT;

	if (check_mul_overflow((u64)res->start, (u64)PAGE_SIZE, &off) ||
	    check_add_overflow(off, g->scratch_size, &off) || check_add_overflow(off, len, &end) ||
	    end > g->vram->desc.size || check_add_overflow(g->vram->desc.base_address, off, addr))
		return -ERANGE;
	return 0;
}

static int wgpu_res_gtt_page(struct wgpu *g, const struct ttm_resource *res, u64 *page)
{
	u64 end;

	if (check_add_overflow((u64)res->start, (u64)res->num_pages, &end) ||
	    end > (g->aperture->desc.size >> PAGE_SHIFT))
		return -ERANGE;
	*page = res->start;
	return 0;
}

struct wgpu_move {
	u32 kind;
	u64 size;
	u64 vram_src, vram_dst;    /* segment addresses */
	u64 gtt_src, gtt_dst;      /* aperture first pages */
	u64 pages;
	u64 pfn_bus;               /* its PFN list: the buffer's guest pages */
};

static wddm_paging_side wgpu_side_vram(struct wgpu *g, u64 addr)
{
	return (wddm_paging_side){ .SegmentId = g->vram->desc.id, .SegmentAddress = addr };
}

static wddm_paging_side wgpu_side_gtt(struct wgpu *g, u64 page)
{
	return (wddm_paging_side){ .SegmentId = g->aperture->desc.id,
				   .SegmentAddress = g->aperture->desc.base_address +
						     (page << PAGE_SHIFT) };
}

static wddm_paging_side wgpu_side_pages(u64 pfn_bus, u64 pages)
{
	return (wddm_paging_side){ .SegmentId = 0, .Mdl = { .bus = pfn_bus, .count = (u32)pages } };
}

static wddm_result wgpu_pb_map(struct wgpu *g, wddm_pb *pb, const struct wgpu_move *m, u64 page)
{
	wddm_op_map_aperture op = {
		.SegmentId = g->aperture->desc.id,
		.CacheCoherent = !!(g->aperture->desc.flags & WDDM_DXGK_SEGMENT_CACHE_COHERENT),
		.OffsetInPages = page,
		.NumberOfPages = m->pages,
		.Mdl = { .bus = m->pfn_bus, .count = (u32)m->pages },
	};

	return wddm_pb_map_aperture(pb, &op);
}

static wddm_result wgpu_pb_unmap(struct wgpu *g, wddm_pb *pb, u64 page, u64 pages)
{
	wddm_op_unmap_aperture op = {
		.SegmentId = g->aperture->desc.id,
		.OffsetInPages = page,
		.NumberOfPages = pages,
		.DummyPage = g->dummy_bus,
	};

	return wddm_pb_unmap_aperture(pb, &op);
}

static wddm_result wgpu_pb_xfer(wddm_pb *pb, u64 size, wddm_paging_side src, wddm_paging_side dst)
{
	wddm_op_transfer op = { .TransferSize = size, .Source = src, .Destination = dst };

	return wddm_pb_transfer(pb, &op);
}

/* DxgkDdiBuildPagingBuffer for one TTM move. */
static wddm_result wgpu_build_move(struct wgpu *g, wddm_pb *pb, void *arg)
{
	const struct wgpu_move *m = arg;
	wddm_result wr;

	switch (m->kind) {
	case WDDM_KMOD_MOVE_SYS_TO_VRAM:
		return wgpu_pb_xfer(pb, m->size, wgpu_side_pages(m->pfn_bus, m->pages),
				    wgpu_side_vram(g, m->vram_dst));
	case WDDM_KMOD_MOVE_VRAM_TO_SYS:
		return wgpu_pb_xfer(pb, m->size, wgpu_side_vram(g, m->vram_src),
				    wgpu_side_pages(m->pfn_bus, m->pages));
	case WDDM_KMOD_MOVE_SYS_TO_GTT:
		return wgpu_pb_map(g, pb, m, m->gtt_dst);
	case WDDM_KMOD_MOVE_GTT_TO_SYS:
		return wgpu_pb_unmap(g, pb, m->gtt_src, m->pages);
	case WDDM_KMOD_MOVE_GTT_TO_VRAM:
		wr = wgpu_pb_xfer(pb, m->size, wgpu_side_gtt(g, m->gtt_src),
				  wgpu_side_vram(g, m->vram_dst));
		return wr == WDDM_OK ? wgpu_pb_unmap(g, pb, m->gtt_src, m->pages) : wr;
	case WDDM_KMOD_MOVE_VRAM_TO_GTT:
		wr = wgpu_pb_map(g, pb, m, m->gtt_dst);
		return wr == WDDM_OK ? wgpu_pb_xfer(pb, m->size, wgpu_side_vram(g, m->vram_src),
						    wgpu_side_gtt(g, m->gtt_dst)) :
				       wr;
	case WDDM_KMOD_MOVE_CLEAR_VRAM: {
		wddm_op_fill fill = { .FillPattern = 0,
				      .DestinationSegmentId = g->vram->desc.id,
				      .DestinationSegmentAddress = m->vram_dst,
				      .FillSize = m->size };

		return wddm_pb_fill(pb, &fill);
	}
	default:
		return WDDM_E_INVALID;
	}
}

/* ---- drm_sched on the paging node: jobs, run_job, the TDR path --------------------------- */

enum { WGPU_SJ_PAGING, WGPU_SJ_MOVE };

/* A scheduler job: what to build (a TTM move, or SUBMIT_PAGING's FILL + TRANSFER) and the DMA
 * memory the device reads and writes, kept across resubmissions; each run is a new paging
 * buffer with a new fence (`hw`). */
struct wgpu_sjob {
	struct drm_sched_job base;
	struct kref ref; /* the scheduler's (until free_job) and a waiter's */
	struct wgpu *g;
	u32 kind;
	u32 pages;       /* entries of the PFN list */
	struct wgpu_move move;
	u64 paging_offset;
	u32 paging_size, paging_pattern;
	void *pfn_cpu, *data_cpu;
	dma_addr_t pfn_bus, data_bus;
	size_t pfn_size, data_size;
	struct wgpu_job *hw; /* its latest submission (a reference) */
};

static struct wgpu_sjob *to_sjob(struct drm_sched_job *job)
{
	return container_of(job, struct wgpu_sjob, base);
}

static void wgpu_sjob_release(struct kref *ref)
{
	struct wgpu_sjob *sj = container_of(ref, struct wgpu_sjob, ref);
	struct device *d = &sj->g->pdev->dev;

	if (sj->hw)
		dma_fence_put(&sj->hw->base);
	if (sj->pfn_cpu)
		dma_free_coherent(d, sj->pfn_size, sj->pfn_cpu, sj->pfn_bus);
	if (sj->data_cpu)
		dma_free_coherent(d, sj->data_size, sj->data_cpu, sj->data_bus);
	kfree(sj);
}

static void wgpu_sjob_put(struct wgpu_sjob *sj)
{
	kref_put(&sj->ref, wgpu_sjob_release);
}

static struct wgpu_sjob *wgpu_sjob_alloc(struct wgpu *g, u32 kind, u32 data_pages, u64 pfns)
{
	struct device *d = &g->pdev->dev;
	struct wgpu_sjob *sj;

	if (pfns > U32_MAX)
		return NULL;
	sj = kzalloc(sizeof(*sj), GFP_KERNEL);
	if (!sj)
		return NULL;
	kref_init(&sj->ref);
	sj->g = g;
	sj->kind = kind;
	sj->pages = (u32)pfns;
	sj->pfn_size = PAGE_ALIGN(pfns * sizeof(u64));
	sj->data_size = (size_t)data_pages * PAGE_SIZE;
	if (sj->pfn_size)
		sj->pfn_cpu = dma_alloc_coherent(d, sj->pfn_size, &sj->pfn_bus, GFP_KERNEL);
	if (sj->data_size)
		sj->data_cpu = dma_alloc_coherent(d, sj->data_size, &sj->data_bus, GFP_KERNEL);
	if ((sj->pfn_size && !sj->pfn_cpu) || (sj->data_size && !sj->data_cpu)) {
		wgpu_sjob_put(sj);
		return NULL;
	}
	return sj;
}

static wddm_result wgpu_build_sjob(struct wgpu *g, wddm_pb *pb, void *arg)
{
	const struct wgpu_sjob *sj = arg;
	wddm_op_fill fill = {
		.FillPattern = sj->paging_pattern,
		.DestinationSegmentId = g->vram->desc.id,
		.DestinationSegmentAddress = g->vram->desc.base_address + sj->paging_offset,
		.FillSize = sj->paging_size,
	};
	wddm_result wr;

	if (sj->kind == WGPU_SJ_MOVE)
		return wgpu_build_move(g, pb, (void *)&sj->move);
	wr = wddm_pb_fill(pb, &fill);
	if (wr == WDDM_OK)
		wr = wgpu_pb_xfer(pb, sj->paging_size,
				  wgpu_side_vram(g, g->vram->desc.base_address + sj->paging_offset),
				  wgpu_side_pages(sj->pfn_bus, sj->pages));
	return wr;
}

/* drm_sched_job_init, arm and push; the scheduler owns the job's first reference until
 * free_job. Returns the job's finished fence (a reference for the caller), or an error with
 * the job freed. */
static struct dma_fence *wgpu_sjob_push(struct wgpu *g, struct wgpu_sjob *sj)
{
	struct dma_fence *fence;
	int ret = drm_sched_job_init(&sj->base, &g->entity, NULL);

	if (ret) {
		wgpu_sjob_put(sj);
		return ERR_PTR(ret);
	}
	mutex_lock(&g->push_lock);
	drm_sched_job_arm(&sj->base);
	fence = dma_fence_get(&sj->base.s_fence->finished);
	drm_sched_entity_push_job(&sj->base);
	mutex_unlock(&g->push_lock);
	return fence;
}

/* The scheduler hands a job to the device: DxgkDdiSubmitCommand. Called again for every job
 * still pending after a TDR (drm_sched_resubmit_jobs): a job still on the device, or one that
 * completed (a lost interrupt's, answered by the query), gets its fence back; one the device
 * returned PREEMPTED or RESET runs again as a new paging buffer. */
static struct dma_fence *wgpu_run_job(struct drm_sched_job *job)
{
	struct wgpu_sjob *sj = to_sjob(job);
	struct wgpu *g = sj->g;
	struct wgpu_job *hw;
	int ret;

	if (sj->hw) {
		struct wgpu_job *old = sj->hw;

		if (!dma_fence_is_signaled(&old->base) ||
		    (old->status != WDDM_GPU_SUBMIT_STATUS_RESET &&
		     old->status != WDDM_GPU_SUBMIT_STATUS_PREEMPTED))
			return dma_fence_get(&old->base);
		sj->hw = NULL;
		dma_fence_put(&old->base);
		atomic64_inc(&g->tdr_resubmitted);
	}
	if (job->s_fence->finished.error)
		return ERR_PTR(job->s_fence->finished.error); /* cancelled: guilty too often */
	hw = wgpu_job_alloc(g, 0, 0);
	if (!hw)
		return ERR_PTR(-ENOMEM);
	hw->is_move = sj->kind == WGPU_SJ_MOVE;
	if (hw->is_move && (sj->move.kind == WDDM_KMOD_MOVE_GTT_TO_SYS ||
			    sj->move.kind == WDDM_KMOD_MOVE_GTT_TO_VRAM)) {
		hw->unbinds = true;
		hw->unbind_page = sj->move.gtt_src;
		hw->unbind_pages = sj->move.pages;
	}
	ret = wgpu_job_submit(g, hw, wgpu_build_sjob, sj);
	if (ret)
		return ERR_PTR(ret);
	if (hw->is_move)
		atomic64_inc(&g->move_submissions);
	sj->hw = hw; /* wgpu_job_submit's reference */
	return dma_fence_get(&hw->base);
}

static void wgpu_free_job(struct drm_sched_job *job)
{
	struct wgpu_sjob *sj = to_sjob(job);

	drm_sched_job_cleanup(job);
	wgpu_sjob_put(sj);
}

/* Sleeps until every submission on the device has come back (each fence is signalled by the
 * deferred half); false when one does not within fence_timeout_ms. */
static bool wgpu_wait_device_idle(struct wgpu *g)
{
	for (;;) {
		struct dma_fence *f = NULL;
		unsigned long flags;
		long left;

		spin_lock_irqsave(&g->fence_lock, flags);
		if (!list_empty(&g->pending))
			f = dma_fence_get(&list_first_entry(&g->pending, struct wgpu_job, link)->base);
		spin_unlock_irqrestore(&g->fence_lock, flags);
		if (!f)
			return true;
		left = dma_fence_wait_timeout(f, false, msecs_to_jiffies(fence_timeout_ms));
		dma_fence_put(f);
		if (left <= 0)
			return false;
	}
}

struct wgpu_remap {
	u64 page, pages, pfn_bus;
};

static wddm_result wgpu_build_remap(struct wgpu *g, wddm_pb *pb, void *arg)
{
	const struct wgpu_remap *r = arg;
	struct wgpu_move m = { .pages = r->pages, .pfn_bus = r->pfn_bus };

	return wgpu_pb_map(g, pb, &m, r->page);
}

/* After a RESET the GART is empty: every recorded binding is mapped again, in the order it was
 * made, straight to the device (the scheduler is stopped), before the jobs are resubmitted. A
 * binding is only removed when its unbind ran, so none goes away meanwhile; new ones may be
 * added (a move pushed meanwhile), hence the walk by index under the lock. */
static u32 wgpu_rebind(struct wgpu *g)
{
	struct dma_fence *last = NULL;
	u32 i, done = 0;

	for (i = 0;; i++) {
		struct wgpu_binding *b;
		struct wgpu_remap r;
		struct wgpu_job *job;
		unsigned long flags;
		bool found = false;
		u32 k = 0;

		spin_lock_irqsave(&g->bind_lock, flags);
		list_for_each_entry(b, &g->bindings, link) {
			if (k++ == i) {
				r = (struct wgpu_remap){ b->page, b->pages, b->pfn_bus };
				found = true;
				break;
			}
		}
		spin_unlock_irqrestore(&g->bind_lock, flags);
		if (!found)
			break;
		job = wgpu_job_alloc(g, 0, 0);
		if (!job || wgpu_job_submit(g, job, wgpu_build_remap, &r)) {
			drm_err(&g->drm, "TDR: cannot bind aperture pages %llu+%llu again\n", r.page,
				r.pages);
			continue;
		}
		if (last)
			dma_fence_put(last);
		last = &job->base;
		done++;
	}
	/* In order on the device: the last one's fence says they all ran. */
	if (last) {
		if (dma_fence_wait_timeout(last, false, msecs_to_jiffies(fence_timeout_ms)) <= 0 ||
		    last->error)
			drm_err(&g->drm, "TDR: binding the aperture again did not complete\n");
		dma_fence_put(last);
	}
	return done;
}

/* drm_sched's job timeout: the WDDM TDR path. DxgkDdiQueryCurrentFence first (a lost interrupt:
 * the device answers the withheld completion, the deferred half signals it); else the
 * scheduler's preemption request (PREEMPT: what it stopped comes back PREEMPTED); else
 * DxgkDdiResetFromTimeout (RESET: everything comes back RESET; the paging node has no engine
 * reset, RESET_ENGINE is node 1's) and DxgkDdiRestartFromTimeout (the status page registered
 * again, the aperture bound again). Then what did not run is resubmitted. */
static enum drm_gpu_sched_stat wgpu_timedout_job(struct drm_sched_job *job)
{
	struct wgpu_sjob *sj = to_sjob(job);
	struct wgpu *g = sj->g;
	struct wgpu_job *hw = sj->hw;
	WddmGpuRespPreempt pre = { 0 };
	u32 cur = 0, released = 0, rebound = 0, method;
	u64 resubmitted = atomic64_read(&g->tdr_resubmitted);
	wddm_result wr;

	atomic64_inc(&g->tdr_count);
	drm_sched_stop(&g->sched, job);
	wr = wddm_dev_query_current_fence(g->dev, &cur, &released);
	atomic64_add(released, &g->tdr_released);
	if (wr == WDDM_OK && hw && dma_fence_is_signaled(&hw->base) &&
	    hw->status == WDDM_GPU_SUBMIT_STATUS_OK) {
		method = WDDM_KMOD_TDR_QUERY_CURRENT_FENCE;
		atomic64_inc(&g->tdr_by_query);
	} else if (wddm_dev_preempt(g->dev, &pre) == WDDM_OK && pre.preempted_count &&
		   wgpu_wait_device_idle(g)) {
		method = WDDM_KMOD_TDR_PREEMPT;
		atomic64_inc(&g->tdr_by_preempt);
	} else if (wddm_dev_reset(g->dev) == WDDM_OK && wgpu_wait_device_idle(g)) {
		method = WDDM_KMOD_TDR_RESET;
		atomic64_inc(&g->tdr_by_reset);
		if (wddm_dev_status_page_register(g->dev) != WDDM_OK)
			drm_err(&g->drm, "TDR: status page not registered again\n");
		rebound = wgpu_rebind(g);
		atomic64_add(rebound, &g->tdr_rebound);
		drm_sched_increase_karma(job);
	} else {
		method = WDDM_KMOD_TDR_FAILED;
		atomic64_inc(&g->tdr_failed);
	}
	g->last_tdr_fence = hw ? hw->fence_id : 0;
	g->last_tdr_method = method;
	drm_sched_resubmit_jobs(&g->sched);
	drm_sched_start(&g->sched, true);
	drm_warn(&g->drm,
		 "TDR: paging fence %u timed out after %u ms; recovered by %s (current fence %u, "
		 "released %u, preempted %u, aperture bindings restored %u, resubmitted %llu)\n",
		 g->last_tdr_fence, tdr_timeout_ms,
		 method == WDDM_KMOD_TDR_QUERY_CURRENT_FENCE ? "QUERY_ENGINE_STATUS (lost interrupt)" :
		 method == WDDM_KMOD_TDR_PREEMPT	    ? "PREEMPT" :
		 method == WDDM_KMOD_TDR_RESET		    ? "RESET" :
							      "nothing (failed)",
		 cur, released, pre.preempted_count, rebound,
		 atomic64_read(&g->tdr_resubmitted) - resubmitted);
	return DRM_GPU_SCHED_STAT_NOMINAL;
}

static const struct drm_sched_backend_ops wgpu_sched_ops = {
	.run_job = wgpu_run_job,
	.timedout_job = wgpu_timedout_job,
	.free_job = wgpu_free_job,
};

static int wgpu_bo_move(struct ttm_buffer_object *bo, bool evict, struct ttm_operation_ctx *ctx,
			struct ttm_resource *new_mem, struct ttm_place *hop)
{
	struct wgpu *g = bdev_to_wgpu(bo->bdev);
	struct ttm_resource *old = bo->resource;
	u32 from = old ? old->mem_type : TTM_PL_SYSTEM, to = new_mem->mem_type;
	bool contents = old && (from != TTM_PL_SYSTEM ||
				(bo->ttm && ttm_tt_is_populated(bo->ttm)));
	struct wgpu_move m = { .pages = new_mem->num_pages };
	struct wgpu_sjob *sj;
	struct dma_fence *fence;
	bool needs_pages, bind;
	int ret;

	if (!old || (from == TTM_PL_SYSTEM && to == TTM_PL_SYSTEM) ||
	    (!contents && to == TTM_PL_SYSTEM)) {
		ttm_bo_move_null(bo, new_mem);
		atomic64_inc(&g->moves[WDDM_KMOD_MOVE_NULL]);
		return 0;
	}
	if (old->num_pages != new_mem->num_pages)
		return -EINVAL;
	m.size = (u64)m.pages << PAGE_SHIFT;
	if (from == TTM_PL_SYSTEM && to == TTM_PL_VRAM)
		m.kind = contents ? WDDM_KMOD_MOVE_SYS_TO_VRAM : WDDM_KMOD_MOVE_CLEAR_VRAM;
	else if (from == TTM_PL_VRAM && to == TTM_PL_SYSTEM)
		m.kind = WDDM_KMOD_MOVE_VRAM_TO_SYS;
	else if (from == TTM_PL_SYSTEM && to == TTM_PL_TT)
		m.kind = WDDM_KMOD_MOVE_SYS_TO_GTT;
	else if (from == TTM_PL_TT && to == TTM_PL_SYSTEM)
		m.kind = WDDM_KMOD_MOVE_GTT_TO_SYS;
	else if (from == TTM_PL_TT && to == TTM_PL_VRAM)
		m.kind = WDDM_KMOD_MOVE_GTT_TO_VRAM;
	else if (from == TTM_PL_VRAM && to == TTM_PL_TT)
		m.kind = WDDM_KMOD_MOVE_VRAM_TO_GTT;
	else
		return -EINVAL; /* a move within one segment: no placement asks for one */

	if ((from == TTM_PL_VRAM && wgpu_res_vram_address(g, old, &m.vram_src)) ||
	    (to == TTM_PL_VRAM && wgpu_res_vram_address(g, new_mem, &m.vram_dst)) ||
	    (from == TTM_PL_TT && wgpu_res_gtt_page(g, old, &m.gtt_src)) ||
	    (to == TTM_PL_TT && wgpu_res_gtt_page(g, new_mem, &m.gtt_dst))) {
		atomic64_inc(&g->moves_failed);
		return -ERANGE;
	}
	/* The guest pages: TTM populates them for the aperture; VRAM -> system needs them now. */
	needs_pages = m.kind == WDDM_KMOD_MOVE_SYS_TO_VRAM || m.kind == WDDM_KMOD_MOVE_VRAM_TO_SYS ||
		      m.kind == WDDM_KMOD_MOVE_SYS_TO_GTT || m.kind == WDDM_KMOD_MOVE_VRAM_TO_GTT;
	if (needs_pages) {
		if (!bo->ttm)
			return -EINVAL;
		ret = ttm_tt_populate(bo->bdev, bo->ttm, ctx);
		if (ret)
			return ret;
	}
	ret = dma_resv_reserve_fences(bo->base.resv, 1);
	if (ret)
		return ret;
	sj = wgpu_sjob_alloc(g, WGPU_SJ_MOVE, 0, needs_pages ? m.pages : 0);
	if (!sj)
		return -ENOMEM;
	if (needs_pages) {
		u64 *pfn = sj->pfn_cpu, i;

		if (!bo->ttm->dma_address || bo->ttm->num_pages < m.pages) {
			wgpu_sjob_put(sj);
			return -EINVAL;
		}
		for (i = 0; i < m.pages; i++)
			pfn[i] = bo->ttm->dma_address[i] >> PAGE_SHIFT;
	}
	m.pfn_bus = sj->pfn_bus;
	sj->move = m;
	bind = m.kind == WDDM_KMOD_MOVE_SYS_TO_GTT || m.kind == WDDM_KMOD_MOVE_VRAM_TO_GTT;
	if (bind) {
		ret = wgpu_binding_add(g, m.gtt_dst, m.pages, sj->pfn_cpu);
		if (ret) {
			wgpu_sjob_put(sj);
			return ret;
		}
	}
	/* CPU mappings go: the next access faults and waits for this move's fence. */
	ttm_bo_unmap_virtual(bo);
	fence = wgpu_sjob_push(g, sj);
	if (IS_ERR(fence)) {
		if (bind)
			wgpu_binding_remove(g, m.gtt_dst, m.pages);
		atomic64_inc(&g->moves_failed);
		return PTR_ERR(fence);
	}
	ret = ttm_bo_move_accel_cleanup(bo, fence, evict, false, new_mem);
	dma_fence_put(fence);
	if (ret) {
		atomic64_inc(&g->moves_failed);
		return ret;
	}
	atomic64_inc(&g->moves[m.kind]);
	atomic64_add(m.size, &g->move_bytes);
	return 0;
}

/* A buffer freed while bound in the aperture: its pages go back to the pool, so the aperture
 * range is unbound first and the free waits for it (on the fence, not by polling). Ghost
 * objects (TTM's leftovers of a move) are skipped: the move's paging buffer unbound them. */
static void wgpu_delete_mem_notify(struct ttm_buffer_object *bo)
{
	struct wgpu *g = bdev_to_wgpu(bo->bdev);
	struct wgpu_move m = { .kind = WDDM_KMOD_MOVE_GTT_TO_SYS };
	struct wgpu_sjob *sj;
	struct dma_fence *fence;

	if (bo->destroy != wgpu_bo_destroy || !bo->resource ||
	    bo->resource->mem_type != TTM_PL_TT)
		return;
	m.pages = bo->resource->num_pages;
	if (wgpu_res_gtt_page(g, bo->resource, &m.gtt_src))
		return;
	sj = wgpu_sjob_alloc(g, WGPU_SJ_MOVE, 0, 0);
	if (!sj) {
		drm_err(&g->drm, "cannot unbind a freed buffer's aperture pages\n");
		return;
	}
	sj->move = m;
	fence = wgpu_sjob_push(g, sj);
	if (IS_ERR(fence)) {
		drm_err(&g->drm, "cannot unbind a freed buffer's aperture pages\n");
		return;
	}
	/* A TDR on the way resubmits it: wait past the scheduler's timeout. */
	if (dma_fence_wait_timeout(fence, false,
				   msecs_to_jiffies(fence_timeout_ms + tdr_timeout_ms)) <= 0 ||
	    fence->error)
		drm_err(&g->drm, "unbind of a freed buffer did not complete\n");
	else
		atomic64_inc(&g->unbinds_on_free);
	dma_fence_put(fence);
}

static int wgpu_io_mem_reserve(struct ttm_device *bdev, struct ttm_resource *mem)
{
	struct wgpu *g = bdev_to_wgpu(bdev);
	u64 off, end;

	switch (mem->mem_type) {
	case TTM_PL_SYSTEM:
	case TTM_PL_TT:
		return 0;
	case TTM_PL_VRAM:
		if (check_mul_overflow((u64)mem->start, (u64)PAGE_SIZE, &off) ||
		    check_add_overflow(off, (u64)mem->num_pages << PAGE_SHIFT, &end) ||
		    end > g->vram_managed)
			return -ERANGE;
		mem->bus.offset = g->vram_phys + off;
		mem->bus.is_iomem = true;
		mem->bus.caching = ttm_write_combined;
		return 0;
	default:
		return -EINVAL;
	}
}

static struct ttm_device_funcs wgpu_ttm_funcs = {
	.ttm_tt_create = wgpu_tt_create,
	.ttm_tt_destroy = wgpu_tt_destroy,
	.eviction_valuable = ttm_bo_eviction_valuable,
	.evict_flags = wgpu_evict_flags,
	.move = wgpu_bo_move,
	.delete_mem_notify = wgpu_delete_mem_notify,
	.io_mem_reserve = wgpu_io_mem_reserve,
};

/* The segments TTM manages, from the layout the device reported: VRAM less the scratch window
 * and the aperture; where the CPU sees the VRAM (the BAR the capset's locator names). */
static int wgpu_ttm_init(struct wgpu *g)
{
	const wddm_layout *l = wddm_dev_layout(g->dev);
	u32 function, bar, id, memory = 0, apertures = 0;
	u64 region, bar_addr, bar_size, at, end;
	int ret;

	for (id = 1; id <= l->segment_count; id++) {
		const wddm_segment *s = wddm_layout_segment(l, id);

		if (s && wddm_segment_is_aperture(s)) {
			if (!apertures++)
				g->aperture = s;
		} else if (s) {
			memory++;
		}
	}
	g->segments_unmanaged = memory + apertures - 1 - (g->aperture ? 1 : 0);
	if (!g->aperture || g->aperture->desc.size < PAGE_SIZE ||
	    g->aperture->desc.base_address % PAGE_SIZE) {
		drm_err(&g->drm, "no usable aperture segment\n");
		return -ENODEV;
	}
	if (g->vram->desc.size < 2 * WGPU_SCRATCH_BYTES) {
		drm_err(&g->drm, "VRAM segment too small for TTM\n");
		return -ENODEV;
	}
	g->scratch_size = WGPU_SCRATCH_BYTES;
	g->vram_managed = round_down(g->vram->desc.size - g->scratch_size, PAGE_SIZE);
	if (wddm_dev_vram_location(g->dev, &function, &bar, &region) != WDDM_OK ||
	    g->os.bar_info(g->os.ctx, function, bar, &bar_addr, &bar_size) ||
	    check_add_overflow(region, g->vram->desc.bar_offset, &at) ||
	    check_add_overflow(at, g->scratch_size, &at) ||
	    check_add_overflow(at, g->vram_managed, &end) || end > bar_size ||
	    (bar_addr + at) % PAGE_SIZE) {
		drm_err(&g->drm, "the VRAM segment has no page-aligned BAR window\n");
		return -ENODEV;
	}
	g->vram_phys = bar_addr + at;

	g->dummy_cpu = dma_alloc_coherent(&g->pdev->dev, PAGE_SIZE, &g->dummy_bus, GFP_KERNEL);
	if (!g->dummy_cpu)
		return -ENOMEM;
	ret = ttm_device_init(&g->bdev, &wgpu_ttm_funcs, &g->pdev->dev,
			      g->drm.anon_inode->i_mapping, g->drm.vma_offset_manager, false, false);
	if (ret)
		goto err_dummy;
	ret = ttm_range_man_init(&g->bdev, TTM_PL_VRAM, false, g->vram_managed >> PAGE_SHIFT);
	if (ret)
		goto err_device;
	ret = ttm_range_man_init(&g->bdev, TTM_PL_TT, true, g->aperture->desc.size >> PAGE_SHIFT);
	if (ret)
		goto err_vram;
	g->ttm_ready = true;
	return 0;

err_vram:
	ttm_range_man_fini(&g->bdev, TTM_PL_VRAM);
err_device:
	ttm_device_fini(&g->bdev);
err_dummy:
	dma_free_coherent(&g->pdev->dev, PAGE_SIZE, g->dummy_cpu, g->dummy_bus);
	g->dummy_cpu = NULL;
	return ret;
}

/* Before the IRQs go: evicting what is left still moves through the paging engine. */
static void wgpu_ttm_fini(struct wgpu *g)
{
	if (!g->ttm_ready)
		return;
	ttm_range_man_fini(&g->bdev, TTM_PL_TT);
	ttm_range_man_fini(&g->bdev, TTM_PL_VRAM);
	ttm_device_fini(&g->bdev);
	g->ttm_ready = false;
}

/* After the device reset: the device no longer points at the dummy page. */
static void wgpu_free_dummy(struct wgpu *g)
{
	if (g->dummy_cpu)
		dma_free_coherent(&g->pdev->dev, PAGE_SIZE, g->dummy_cpu, g->dummy_bus);
	g->dummy_cpu = NULL;
}

/* ---- GEM buffer objects ------------------------------------------------------------------ */

static void wgpu_gem_free(struct drm_gem_object *obj)
{
	ttm_bo_put(drm_gem_ttm_of_gem(obj));
}

static const struct drm_gem_object_funcs wgpu_gem_funcs = {
	.free = wgpu_gem_free,
	.mmap = drm_gem_ttm_mmap,
};

/* A plain domain mask as a TTM placement, preferred first: VRAM, the aperture, system. */
static int wgpu_placement(u32 domains, struct ttm_place places[3], struct ttm_placement *pl)
{
	unsigned int n = 0;

	if (!domains || (domains & ~WDDM_KMOD_DOMAINS))
		return -EINVAL;
	memset(places, 0, 3 * sizeof(*places));
	if (domains & WDDM_KMOD_DOMAIN_VRAM)
		places[n++].mem_type = TTM_PL_VRAM;
	if (domains & WDDM_KMOD_DOMAIN_GTT)
		places[n++].mem_type = TTM_PL_TT;
	if (domains & WDDM_KMOD_DOMAIN_SYSTEM)
		places[n++].mem_type = TTM_PL_SYSTEM;
	pl->placement = places;
	pl->num_placement = n;
	pl->busy_placement = places;
	pl->num_busy_placement = n;
	return 0;
}

static int wgpu_ioctl_gem_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct wgpu *g = to_wgpu(drm);
	struct drm_wddm_gem_create *args = data;
	struct ttm_place places[3];
	struct ttm_placement pl;
	struct wgpu_bo *bo;
	u32 handle;
	int ret, idx;

	if (!args->size || args->size > WDDM_KMOD_MAX_BO_BYTES)
		return -EINVAL;
	ret = wgpu_placement(args->domains, places, &pl);
	if (ret)
		return ret;
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	bo = kzalloc(sizeof(*bo), GFP_KERNEL);
	if (!bo) {
		ret = -ENOMEM;
		goto out;
	}
	bo->tbo.base.funcs = &wgpu_gem_funcs;
	drm_gem_private_object_init(drm, &bo->tbo.base, PAGE_ALIGN(args->size));
	/* On failure TTM has called wgpu_bo_destroy already. */
	ret = ttm_bo_init_validate(&g->bdev, &bo->tbo, ttm_bo_type_device, &pl, 1, true, NULL,
				   NULL, wgpu_bo_destroy);
	if (ret)
		goto out;
	ret = drm_gem_handle_create(file, &bo->tbo.base, &handle);
	if (!ret) {
		args->handle = handle;
		args->mmap_offset = drm_vma_node_offset_addr(&bo->tbo.base.vma_node);
	}
	drm_gem_object_put(&bo->tbo.base); /* the handle holds it */
out:
	drm_dev_exit(idx);
	return ret;
}

static int wgpu_ioctl_gem_validate(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct wgpu *g = to_wgpu(drm);
	struct drm_wddm_gem_validate *args = data;
	struct ttm_operation_ctx ctx = { .interruptible = true };
	struct ttm_place places[3];
	struct ttm_placement pl;
	struct drm_gem_object *obj;
	struct ttm_buffer_object *bo;
	u32 timeout_ms = args->timeout_ms ? args->timeout_ms : fence_timeout_ms;
	long left;
	int ret, idx;

	if (args->domains) {
		ret = wgpu_placement(args->domains, places, &pl);
		if (ret)
			return ret;
	}
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	obj = drm_gem_object_lookup(file, args->handle);
	if (!obj) {
		ret = -ENOENT;
		goto out_exit;
	}
	bo = drm_gem_ttm_of_gem(obj);
	ret = ttm_bo_reserve(bo, true, false, NULL);
	if (ret)
		goto out_put;
	if (args->domains)
		ret = ttm_bo_validate(bo, &pl, &ctx);
	if (!ret) {
		/* Until the move is done: a sleep on its fence, which the deferred half signals. */
		left = dma_resv_wait_timeout(bo->base.resv, DMA_RESV_USAGE_KERNEL, true,
					     msecs_to_jiffies(timeout_ms));
		if (left == 0) {
			atomic64_inc(&g->fences_timed_out);
			ret = -ETIMEDOUT;
		} else if (left < 0) {
			ret = (int)left;
		}
	}
	if (!ret) {
		const struct ttm_resource *res = bo->resource;

		args->offset = (u64)res->start << PAGE_SHIFT;
		switch (res->mem_type) {
		case TTM_PL_VRAM:
			args->domain = WDDM_KMOD_DOMAIN_VRAM;
			args->segment_id = g->vram->desc.id;
			args->offset += g->scratch_size;
			break;
		case TTM_PL_TT:
			args->domain = WDDM_KMOD_DOMAIN_GTT;
			args->segment_id = g->aperture->desc.id;
			break;
		default:
			args->domain = WDDM_KMOD_DOMAIN_SYSTEM;
			args->segment_id = 0;
			args->offset = 0;
			break;
		}
	}
	ttm_bo_unreserve(bo);
out_put:
	drm_gem_object_put(obj);
out_exit:
	drm_dev_exit(idx);
	return ret;
}

/* SUBMIT_PAGING: FILL + TRANSFER into guest pages + FENCE, as a job of the paging node's
 * scheduler entity, waited for on its finished fence. */
static int wgpu_ioctl_submit_paging(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct wgpu *g = to_wgpu(drm);
	struct drm_wddm_submit_paging *args = data;
	struct wgpu_sjob *sj;
	struct dma_fence *fence;
	u32 pages, i, timeout_ms;
	u64 end, *pfn;
	long left;
	int ret = 0, idx;

	/* Only the scratch window: the rest of the segment is TTM's. */
	if (args->size < 4 || args->size > WDDM_KMOD_MAX_PAGING_BYTES || args->size % 4 ||
	    args->vram_offset % 4 || check_add_overflow(args->vram_offset, (u64)args->size, &end) ||
	    end > g->scratch_size || !args->readback)
		return -EINVAL;
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	pages = DIV_ROUND_UP(args->size, PAGE_SIZE);
	sj = wgpu_sjob_alloc(g, WGPU_SJ_PAGING, pages, pages);
	if (!sj) {
		ret = -ENOMEM;
		goto out_exit;
	}
	sj->paging_offset = args->vram_offset;
	sj->paging_size = args->size;
	sj->paging_pattern = args->pattern;
	/* Poison the guest pages: a TRANSFER that did not run leaves it there. */
	memset(sj->data_cpu, 0xa5, sj->data_size);
	/* The PFN list in reverse: logical page i is physical page pages - 1 - i. */
	pfn = sj->pfn_cpu;
	for (i = 0; i < pages; i++)
		pfn[i] = (sj->data_bus >> PAGE_SHIFT) + (pages - 1 - i);
	kref_get(&sj->ref); /* ours, past free_job */
	fence = wgpu_sjob_push(g, sj);
	if (IS_ERR(fence)) {
		ret = PTR_ERR(fence);
		goto out_sj;
	}
	/* Sleep until the deferred half signals the fence: no polling here. */
	timeout_ms = args->timeout_ms ? args->timeout_ms : fence_timeout_ms;
	left = dma_fence_wait_timeout(fence, true, msecs_to_jiffies(timeout_ms));
	if (left == 0) {
		atomic64_inc(&g->fences_timed_out);
		ret = -ETIMEDOUT; /* the job keeps its memory until it is done */
		goto out_put;
	}
	if (left < 0) {
		ret = (int)left;
		goto out_put;
	}
	if (!sj->hw) {
		ret = fence->error ? fence->error : -EIO;
		goto out_put;
	}
	args->fence_id = sj->hw->fence_id;
	args->status = sj->hw->status;
	args->wait_ns = ktime_to_ns(ktime_sub(sj->hw->signalled_at, sj->hw->submitted_at));
	args->bar_mismatch = wgpu_bar_mismatch(g, args->vram_offset, args->size, args->pattern);
	/* The guest pages in logical order (the device saw them through the reversed list). */
	for (i = 0; i < pages && !ret; i++) {
		u32 chunk = min_t(u32, PAGE_SIZE, args->size - i * PAGE_SIZE);
		const u8 *src = (const u8 *)sj->data_cpu + (size_t)(pages - 1 - i) * PAGE_SIZE;

		if (copy_to_user(u64_to_user_ptr(args->readback + (u64)i * PAGE_SIZE), src, chunk))
			ret = -EFAULT;
	}
out_put:
	dma_fence_put(fence);
out_sj:
	wgpu_sjob_put(sj);
out_exit:
	drm_dev_exit(idx);
	return ret;
}

static const struct drm_ioctl_desc wgpu_ioctls[] = {
	DRM_IOCTL_DEF_DRV(WDDM_GET_INFO, wgpu_ioctl_get_info, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(WDDM_SUBMIT_PAGING, wgpu_ioctl_submit_paging, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(WDDM_GEM_CREATE, wgpu_ioctl_gem_create, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(WDDM_GEM_VALIDATE, wgpu_ioctl_gem_validate, DRM_RENDER_ALLOW),
};

static const struct file_operations wgpu_fops = {
	.owner = THIS_MODULE,
	.open = drm_open,
	.release = drm_release,
	.unlocked_ioctl = drm_ioctl,
	.compat_ioctl = drm_compat_ioctl,
	.poll = drm_poll,
	.read = drm_read,
	.llseek = noop_llseek,
	.mmap = drm_gem_mmap,
};

static const struct drm_driver wgpu_driver = {
	.driver_features = DRIVER_RENDER | DRIVER_GEM,
	.ioctls = wgpu_ioctls,
	.num_ioctls = ARRAY_SIZE(wgpu_ioctls),
	.fops = &wgpu_fops,
	.name = DRIVER_NAME,
	.desc = DRIVER_DESC,
	.date = "20261128",
	.major = 0,
	.minor = 1,
};

/* ---- PCI --------------------------------------------------------------------------------- */

static const wddm_segment *wgpu_find_vram(const wddm_layout *l)
{
	u32 id;

	for (id = 1; l && id <= l->segment_count; id++) {
		const wddm_segment *s = wddm_layout_segment(l, id);

		if (s && !wddm_segment_is_aperture(s) && s->desc.bar_offset != WDDM_GPU_NO_BAR_OFFSET)
			return s;
	}
	return NULL;
}

static int wgpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	wddm_dev_config config = { .timeout_ms = 5000 };
	wddm_dev_counters c;
	struct wgpu *g;
	wddm_result wr;
	int ret;

	BUILD_BUG_ON(DRM_IOCTL_WDDM_GET_INFO !=
		     DRM_IOWR(DRM_COMMAND_BASE + DRM_WDDM_GET_INFO, struct drm_wddm_info));
	BUILD_BUG_ON(DRM_IOCTL_WDDM_SUBMIT_PAGING !=
		     DRM_IOWR(DRM_COMMAND_BASE + DRM_WDDM_SUBMIT_PAGING,
			      struct drm_wddm_submit_paging));
	BUILD_BUG_ON(DRM_IOCTL_WDDM_GEM_CREATE !=
		     DRM_IOWR(DRM_COMMAND_BASE + DRM_WDDM_GEM_CREATE, struct drm_wddm_gem_create));
	BUILD_BUG_ON(DRM_IOCTL_WDDM_GEM_VALIDATE !=
		     DRM_IOWR(DRM_COMMAND_BASE + DRM_WDDM_GEM_VALIDATE,
			      struct drm_wddm_gem_validate));
	BUILD_BUG_ON(DRM_IOCTL_WDDM_GEM_CLOSE != DRM_IOCTL_GEM_CLOSE);
	BUILD_BUG_ON(ARRAY_SIZE(((struct drm_wddm_info *)0)->moves) != WDDM_KMOD_MOVE_KINDS);

	g = devm_drm_dev_alloc(&pdev->dev, &wgpu_driver, struct wgpu, drm);
	if (IS_ERR(g))
		return PTR_ERR(g);
	g->pdev = pdev;
	pci_set_drvdata(pdev, g);
	spin_lock_init(&g->fence_lock);
	INIT_LIST_HEAD(&g->pending);
	g->fence_context = dma_fence_context_alloc(1);
	mutex_init(&g->submit_lock);
	mutex_init(&g->push_lock);
	spin_lock_init(&g->bind_lock);
	INIT_LIST_HEAD(&g->bindings);

	ret = pci_enable_device(pdev);
	if (ret)
		return ret;
	ret = pci_request_regions(pdev, DRIVER_NAME);
	if (ret)
		goto err_disable;
	pci_set_master(pdev);
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err_regions;
	g->dev = kzalloc(sizeof(*g->dev), GFP_KERNEL);
	if (!g->dev) {
		ret = -ENOMEM;
		goto err_regions;
	}
	wddm_lk_layer_init(&g->layer, pdev, &g->os);
	ret = wgpu_alloc_vectors(g, &config);
	if (ret)
		goto err_dev;

	/* DxgkDdiStartDevice: the library's init (polls for its capset reads: no handler yet). */
	wr = wddm_dev_init(g->dev, &g->os, &config);
	if (wr != WDDM_OK) {
		drm_err(&g->drm, "wddm_dev_init: %s\n", wddm_result_name(wr));
		ret = -EIO;
		goto err_vectors;
	}
	wr = wddm_dev_wait_bar_known(g->dev, 5000, NULL);
	g->vram = wgpu_find_vram(wddm_dev_layout(g->dev));
	if (wr != WDDM_OK || !g->vram) {
		drm_err(&g->drm, "no usable VRAM segment (%s)\n", wddm_result_name(wr));
		ret = -ENODEV;
		goto err_teardown;
	}

	/* From here on every answer arrives by interrupt. */
	ret = wgpu_request_irqs(g);
	if (ret)
		goto err_teardown;
	if (wddm_dev_get_counters(g->dev, &c) != WDDM_OK ||
	    wddm_dev_set_interrupt_driven(g->dev, true) != WDDM_OK) {
		ret = -EIO;
		goto err_irqs;
	}
	g->polled_at_irq_enable = c.polled;
	/* A synchronous request answered through the interrupt path. */
	wr = wddm_dev_status_page_register(g->dev);
	if (wr != WDDM_OK) {
		u16 cmd = 0, sts = 0;

		pci_read_config_word(pdev, PCI_COMMAND, &cmd);
		pci_read_config_word(pdev, PCI_STATUS, &sts);
		drm_err(&g->drm,
			"status page: %s (irq %d: top halves line %lld, not ours %lld, queue %lld; "
			"deferred %lld; PCI command %#x status %#x)\n",
			wddm_result_name(wr), g->irq_config, (long long)atomic64_read(&g->top_line),
			(long long)atomic64_read(&g->top_not_ours),
			(long long)atomic64_read(&g->top_queue),
			(long long)atomic64_read(&g->deferred_runs), cmd, sts);
		ret = -EIO;
		goto err_irqs;
	}

	/* The GPU scheduler's paging node. */
	ret = wgpu_sched_init(g);
	if (ret)
		goto err_irqs;
	/* VidMm's segments: TTM over the layout the device reported. */
	ret = wgpu_ttm_init(g);
	if (ret)
		goto err_sched;
	ret = drm_dev_register(&g->drm, 0);
	if (ret)
		goto err_ttm;
	drm_info(&g->drm, "%s, TTM: VRAM segment %u (%llu KiB managed), aperture segment %u (%llu MiB), %s\n",
		 DRIVER_DESC, g->vram->desc.id, g->vram_managed >> 10, g->aperture->desc.id,
		 g->aperture->desc.size >> 20,
		 g->irq_mode == WDDM_KMOD_IRQ_MSIX	  ? "MSI-X: config and control queue vectors" :
		 g->irq_mode == WDDM_KMOD_IRQ_MSIX_SHARED ? "one shared MSI-X vector" :
							    "INTx");
	return 0;

err_ttm:
	wgpu_ttm_fini(g);
err_sched:
	wgpu_sched_fini(g);
err_irqs:
	wgpu_free_irqs(g);
err_teardown:
	wddm_dev_teardown(g->dev);
	wgpu_cancel_pending(g);
	wgpu_bindings_clear(g);
	wgpu_free_dummy(g);
err_vectors:
	pci_free_irq_vectors(pdev);
err_dev:
	wddm_lk_layer_fini(&g->layer);
	kfree(g->dev);
	g->dev = NULL;
err_regions:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
	return ret;
}

static void wgpu_remove(struct pci_dev *pdev)
{
	struct wgpu *g = pci_get_drvdata(pdev);

	drm_dev_unplug(&g->drm);
	wgpu_ttm_fini(g); /* still through the scheduler, the paging engine and its interrupts */
	wgpu_sched_fini(g);
	wgpu_free_irqs(g);
	/* The virtio reset: the device stops using our memory; then nothing is pending. */
	wddm_dev_teardown(g->dev);
	wgpu_cancel_pending(g);
	wgpu_bindings_clear(g);
	wgpu_free_dummy(g);
	pci_free_irq_vectors(pdev);
	wddm_lk_layer_fini(&g->layer);
	if (atomic64_read(&g->layer.dma_bytes))
		drm_warn(&g->drm, "library DMA memory left at teardown: %lld bytes\n",
			 (long long)atomic64_read(&g->layer.dma_bytes));
	kfree(g->dev);
	g->dev = NULL;
	pci_release_regions(pdev);
	pci_disable_device(pdev);
}

static const struct pci_device_id wgpu_ids[] = {
	{ PCI_DEVICE(VIRTIO_PCI_VENDOR_ID, WDDM_GPU_PCI_DEVICE_ID) },
	{}
};
MODULE_DEVICE_TABLE(pci, wgpu_ids);

static struct pci_driver wgpu_pci_driver = {
	.name = DRIVER_NAME,
	.id_table = wgpu_ids,
	.probe = wgpu_probe,
	.remove = wgpu_remove,
};
module_pci_driver(wgpu_pci_driver);

MODULE_DESCRIPTION(DRIVER_DESC);
MODULE_LICENSE("Dual BSD/GPL");
MODULE_AUTHOR("vhost-user-wddm-gpu");
