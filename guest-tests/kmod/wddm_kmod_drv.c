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
#include <linux/io.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_ioctl.h>
#include <drm/drm_print.h>

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

/* One submission: its dma_fence and the DMA memory the device reads and writes. The pending
 * list holds a reference until the device answers (or the device is torn down), so the memory
 * outlives an ioctl that gave up waiting. */
struct wgpu_job {
	struct dma_fence base;
	struct list_head link;
	struct device *dma_dev;
	u32 fence_id;
	u32 status;          /* the device's SUBMIT status, set before the signal */
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
	const wddm_segment *vram;
	u32 irq_mode;
	int nvec;
	int irq_config, irq_queue; /* Linux IRQ numbers; irq_queue == irq_config when shared */
	bool irqs_requested;
	u64 polled_at_irq_enable;

	spinlock_t fence_lock; /* the fences' lock and the pending list's */
	struct list_head pending;
	u64 fence_context;
	atomic_t next_fence;

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
	if (found) {
		list_del_init(&found->link);
		found->status = c->status;
		found->signalled_at = ktime_get();
		if (c->status != WDDM_GPU_SUBMIT_STATUS_OK)
			dma_fence_set_error(&found->base, -EIO);
		dma_fence_signal_locked(&found->base);
		atomic64_inc(&g->fences_signalled);
	}
	spin_unlock_irqrestore(&g->fence_lock, flags);
	if (found)
		dma_fence_put(&found->base); /* the pending list's reference */
	else
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
	int idx;

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

static struct wgpu_job *wgpu_job_create(struct wgpu *g, u32 size)
{
	struct device *d = &g->pdev->dev;
	struct wgpu_job *job = kzalloc(sizeof(*job), GFP_KERNEL);
	u32 pages = DIV_ROUND_UP(size, PAGE_SIZE);

	if (!job)
		return NULL;
	job->dma_dev = d;
	job->pb_size = PAGE_SIZE;
	job->data_size = (size_t)pages * PAGE_SIZE;
	job->pfn_size = PAGE_ALIGN((size_t)pages * sizeof(u64));
	job->pb_cpu = dma_alloc_coherent(d, job->pb_size, &job->pb_bus, GFP_KERNEL);
	job->data_cpu = dma_alloc_coherent(d, job->data_size, &job->data_bus, GFP_KERNEL);
	job->pfn_cpu = dma_alloc_coherent(d, job->pfn_size, &job->pfn_bus, GFP_KERNEL);
	if (!job->pb_cpu || !job->data_cpu || !job->pfn_cpu) {
		wgpu_job_free_memory(job);
		kfree(job);
		return NULL;
	}
	return job;
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

static int wgpu_ioctl_submit_paging(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct wgpu *g = to_wgpu(drm);
	struct drm_wddm_submit_paging *args = data;
	const wddm_layout *layout = wddm_dev_layout(g->dev);
	struct wgpu_job *job;
	u32 pages, i, timeout_ms;
	u64 end, *pfn;
	unsigned long flags;
	wddm_pb pb;
	wddm_result wr;
	long left;
	int ret = 0, idx;

	if (args->size < 4 || args->size > WDDM_KMOD_MAX_PAGING_BYTES || args->size % 4 ||
	    args->vram_offset % 4 || check_add_overflow(args->vram_offset, (u64)args->size, &end) ||
	    end > g->vram->desc.size || !args->readback)
		return -EINVAL;
	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	job = wgpu_job_create(g, args->size);
	if (!job) {
		ret = -ENOMEM;
		goto out_exit;
	}
	pages = DIV_ROUND_UP(args->size, PAGE_SIZE);
	/* Poison the guest pages: a TRANSFER that did not run leaves it there. */
	memset(job->data_cpu, 0xa5, job->data_size);
	/* The PFN list in reverse: logical page i is physical page pages - 1 - i. */
	pfn = job->pfn_cpu;
	for (i = 0; i < pages; i++)
		pfn[i] = (job->data_bus >> PAGE_SHIFT) + (pages - 1 - i);

	job->fence_id = (u32)atomic_inc_return(&g->next_fence);
	{
		wddm_op_fill fill = {
			.FillPattern = args->pattern,
			.DestinationSegmentId = g->vram->desc.id,
			.DestinationSegmentAddress = g->vram->desc.base_address + args->vram_offset,
			.FillSize = args->size,
		};
		wddm_op_transfer xfer = {
			.TransferOffset = 0,
			.TransferSize = args->size,
			.Source = { .SegmentId = g->vram->desc.id,
				    .SegmentAddress = g->vram->desc.base_address + args->vram_offset },
			.Destination = { .SegmentId = 0,
					 .Mdl = { .bus = job->pfn_bus, .count = pages } },
			.MdlOffset = 0,
		};

		wr = wddm_pb_init(&pb, layout, job->pb_cpu, (u32)job->pb_size);
		if (wr == WDDM_OK)
			wr = wddm_pb_fill(&pb, &fill);
		if (wr == WDDM_OK)
			wr = wddm_pb_transfer(&pb, &xfer);
		if (wr == WDDM_OK)
			wr = wddm_pb_fence(&pb, job->fence_id);
	}
	if (wr != WDDM_OK) {
		drm_err(drm, "paging buffer refused: %s\n", wddm_result_name(wr));
		wgpu_job_free_memory(job);
		kfree(job);
		ret = -EINVAL;
		goto out_exit;
	}

	dma_fence_init(&job->base, &wgpu_fence_ops, &g->fence_lock, g->fence_context,
		       job->fence_id);
	/* Two references: the pending list's (dropped when the device answers) and ours. */
	dma_fence_get(&job->base);
	spin_lock_irqsave(&g->fence_lock, flags);
	list_add_tail(&job->link, &g->pending);
	spin_unlock_irqrestore(&g->fence_lock, flags);

	{
		wddm_submit s = {
			.dma_buffer_address = job->pb_bus,
			.dma_buffer_segment_id = 0,
			.flags = WDDM_GPU_SUBMIT_FLAG_PAGING,
			.dma_buffer_size = (u32)job->pb_size,
			.start_offset = 0,
			.end_offset = pb.used,
			.fence_id = job->fence_id,
		};

		job->submitted_at = ktime_get();
		wr = wddm_dev_submit(g->dev, &s);
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
		if (owned)
			dma_fence_put(&job->base);
		ret = wr == WDDM_E_FULL ? -EBUSY : -EIO;
		goto out_put;
	}
	atomic64_inc(&g->submitted);

	/* Sleep until the deferred half signals the fence: no polling here. */
	timeout_ms = args->timeout_ms ? args->timeout_ms : fence_timeout_ms;
	left = dma_fence_wait_timeout(&job->base, true, msecs_to_jiffies(timeout_ms));
	if (left == 0) {
		atomic64_inc(&g->fences_timed_out);
		ret = -ETIMEDOUT; /* the list keeps the memory until the device answers */
		goto out_put;
	}
	if (left < 0) {
		ret = (int)left;
		goto out_put;
	}
	args->fence_id = job->fence_id;
	args->status = job->status;
	args->wait_ns = ktime_to_ns(ktime_sub(job->signalled_at, job->submitted_at));
	args->bar_mismatch = wgpu_bar_mismatch(g, args->vram_offset, args->size, args->pattern);
	/* The guest pages in logical order (the device saw them through the reversed list). */
	for (i = 0; i < pages && !ret; i++) {
		u32 chunk = min_t(u32, PAGE_SIZE, args->size - i * PAGE_SIZE);
		const u8 *src = (const u8 *)job->data_cpu + (size_t)(pages - 1 - i) * PAGE_SIZE;

		if (copy_to_user(u64_to_user_ptr(args->readback + (u64)i * PAGE_SIZE), src, chunk))
			ret = -EFAULT;
	}
out_put:
	dma_fence_put(&job->base);
out_exit:
	drm_dev_exit(idx);
	return ret;
}

static const struct drm_ioctl_desc wgpu_ioctls[] = {
	DRM_IOCTL_DEF_DRV(WDDM_GET_INFO, wgpu_ioctl_get_info, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(WDDM_SUBMIT_PAGING, wgpu_ioctl_submit_paging, DRM_RENDER_ALLOW),
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
};

static const struct drm_driver wgpu_driver = {
	.driver_features = DRIVER_RENDER,
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

	g = devm_drm_dev_alloc(&pdev->dev, &wgpu_driver, struct wgpu, drm);
	if (IS_ERR(g))
		return PTR_ERR(g);
	g->pdev = pdev;
	pci_set_drvdata(pdev, g);
	spin_lock_init(&g->fence_lock);
	INIT_LIST_HEAD(&g->pending);
	g->fence_context = dma_fence_context_alloc(1);
	atomic_set(&g->next_fence, 0);

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

	ret = drm_dev_register(&g->drm, 0);
	if (ret)
		goto err_irqs;
	drm_info(&g->drm, "%s, VRAM segment %u (%llu MiB), %s\n", DRIVER_DESC, g->vram->desc.id,
		 g->vram->desc.size >> 20,
		 g->irq_mode == WDDM_KMOD_IRQ_MSIX	  ? "MSI-X: config and control queue vectors" :
		 g->irq_mode == WDDM_KMOD_IRQ_MSIX_SHARED ? "one shared MSI-X vector" :
							    "INTx");
	return 0;

err_irqs:
	wgpu_free_irqs(g);
err_teardown:
	wddm_dev_teardown(g->dev);
	wgpu_cancel_pending(g);
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
	wgpu_free_irqs(g);
	/* The virtio reset: the device stops using our memory; then nothing is pending. */
	wddm_dev_teardown(g->dev);
	wgpu_cancel_pending(g);
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
