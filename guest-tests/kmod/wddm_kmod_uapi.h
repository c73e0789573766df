/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/* The ioctls of wddm_gpu_kmod, the kernel-mode driver of the vhost-user WDDM GPU, on its DRM
 * render node (/dev/dri/renderD*). Shared by the module and user space (the guest's test
 * program, which needs no libdrm: the numbers are DRM_IOWR's, 'd' and DRM_COMMAND_BASE 0x40,
 * and the module checks they agree). */

#ifndef WDDM_KMOD_UAPI_H
#define WDDM_KMOD_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define WDDM_KMOD_MAGIC 0x57444b4dU /* "WDKM": GET_INFO's answer is ours */
#define WDDM_KMOD_INTERFACE_VERSION 1

/* How the module takes the device's interrupts. */
#define WDDM_KMOD_IRQ_MSIX 1        /* one MSI-X vector for configuration, one for the queue */
#define WDDM_KMOD_IRQ_MSIX_SHARED 2 /* a single MSI-X vector for both (mode 2) */
#define WDDM_KMOD_IRQ_INTX 3        /* the INTx line (module parameter force_intx, or no MSI-X) */

/* DRM_IOCTL_WDDM_GET_INFO: the device and the driver's interrupt counters. */
struct drm_wddm_info {
	__u32 magic;             /* WDDM_KMOD_MAGIC */
	__u32 interface_version; /* WDDM_KMOD_INTERFACE_VERSION */
	__u32 irq_mode;          /* WDDM_KMOD_IRQ_* */
	__u32 irq_count;         /* Linux IRQs requested */
	__u32 irq_config;        /* Linux IRQ numbers: configuration vector (or the shared one) */
	__u32 irq_queue;         /* the control queue's vector (= irq_config when shared) */
	__u32 vram_segment_id;   /* the memory segment the submissions fill */
	__u32 pad0;
	__u64 vram_size;         /* bytes of that segment */
	/* Top halves that found the interrupt ours, per source: the configuration vector, the
	 * control queue's vector, the INTx line (a shared or single MSI-X vector counts as queue). */
	__u64 top_config;
	__u64 top_queue;
	__u64 top_line;
	__u64 top_not_ours;      /* INTx top halves that found the ISR byte 0 (another device's) */
	__u64 deferred_runs;     /* threaded-IRQ deferred halves */
	/* The library's counters: used-ring collections by polling (init's capset reads) and by
	 * the deferred half; polled_after_irq is the polling count since the interrupt handlers
	 * took over (0 for a driver that never polls). */
	__u64 polled_total;
	__u64 polled_after_irq;
	__u64 deferred_total;
	__u64 sync_waits;        /* synchronous requests' sleeps until the deferred half ran */
	__u64 submitted;         /* paging buffers submitted */
	__u64 fences_signalled;  /* dma_fences signalled by the deferred half */
	__u64 fences_timed_out;  /* submissions whose ioctl gave up waiting */
};

/* DRM_IOCTL_WDDM_SUBMIT_PAGING: one paging buffer through the device, waited for on its
 * dma_fence (signalled from the MSI-X/INTx deferred half). The buffer holds a FILL of `size`
 * bytes of `pattern` at `vram_offset` of the VRAM segment, a TRANSFER of the same range into
 * guest pages the module allocated (their PFN list given to the device in reverse order), and a
 * FENCE. Afterwards the module reads the range back through the VRAM BAR and copies the guest
 * pages, in address order, to `readback` (`size` bytes). */
struct drm_wddm_submit_paging {
	__u64 vram_offset;   /* in: 4-byte aligned; the range must lie inside the segment */
	__u64 readback;      /* in: user pointer, `size` bytes */
	__u32 size;          /* in: bytes, 4 .. WDDM_KMOD_MAX_PAGING_BYTES, a multiple of 4 */
	__u32 pattern;       /* in: the FILL's 32-bit pattern */
	__u32 timeout_ms;    /* in: how long to wait for the fence; 0 = the module's default */
	__u32 fence_id;      /* out: the submission's fence */
	__u32 status;        /* out: the device's SUBMIT status (0 = OK) */
	__u32 bar_mismatch;  /* out: dwords of the range read through the BAR that differ */
	__u64 wait_ns;       /* out: from the submission to the fence's signal */
};

#define WDDM_KMOD_MAX_PAGING_BYTES (64u << 10)

#define DRM_WDDM_GET_INFO 0x00
#define DRM_WDDM_SUBMIT_PAGING 0x01

#define DRM_IOCTL_WDDM_GET_INFO _IOWR('d', 0x40 + DRM_WDDM_GET_INFO, struct drm_wddm_info)
#define DRM_IOCTL_WDDM_SUBMIT_PAGING \
	_IOWR('d', 0x40 + DRM_WDDM_SUBMIT_PAGING, struct drm_wddm_submit_paging)

#endif
