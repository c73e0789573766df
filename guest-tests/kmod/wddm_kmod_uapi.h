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
#define WDDM_KMOD_INTERFACE_VERSION 3

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
	__u32 vram_segment_id;   /* the CPU-visible memory segment (TTM_PL_VRAM) */
	__u32 aperture_segment_id; /* the aperture segment (TTM_PL_TT, bound by MAP_APERTURE) */
	__u64 vram_size;         /* bytes of the VRAM segment */
	__u64 scratch_size;      /* its first bytes, SUBMIT_PAGING's window (TTM never places there) */
	__u64 vram_managed;      /* the rest: bytes of the VRAM segment under TTM's range manager */
	__u64 aperture_size;     /* bytes of the aperture segment under TTM's range manager */
	__u64 vram_used;         /* bytes TTM has placed in VRAM / the aperture now */
	__u64 gtt_used;
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
	/* TTM: the moves its move callback made on the paging engine, by kind (WDDM_KMOD_MOVE_*),
	 * the bytes they moved, the moves refused or failed, the UNMAP_APERTUREs of buffers freed
	 * while bound in the aperture, and the paging buffers of all of those. */
	__u64 moves[8];
	__u64 move_bytes;
	__u64 moves_failed;
	__u64 unbinds_on_free;
	__u64 move_submissions;
	__u32 segment_count;     /* memory and aperture segments of the device's layout */
	__u32 segments_unmanaged; /* those without a TTM manager (beyond the first of each kind) */
	/* drm_sched on the paging node and its TDR path (timedout_job): the job timeout, the
	 * timeouts handled and what recovered each (WDDM_KMOD_TDR_*), the jobs run again, the
	 * aperture bindings restored after a RESET, the withheld completions the query released;
	 * the last timed-out job's fence and how it recovered. */
	__u32 tdr_timeout_ms;
	__u32 last_tdr_fence;
	__u32 last_tdr_method;
	__u32 pad1;
	__u64 tdr_count;
	__u64 tdr_by_query;
	__u64 tdr_by_preempt;
	__u64 tdr_by_reset;
	__u64 tdr_failed;
	__u64 tdr_resubmitted;
	__u64 tdr_rebound;
	__u64 tdr_released;
};

/* How a timed-out job was recovered. */
#define WDDM_KMOD_TDR_NONE 0
#define WDDM_KMOD_TDR_QUERY_CURRENT_FENCE 1 /* QUERY_ENGINE_STATUS answered a lost interrupt */
#define WDDM_KMOD_TDR_PREEMPT 2             /* PREEMPT stopped it; resubmitted */
#define WDDM_KMOD_TDR_RESET 3               /* RESET (after a PREEMPT that stopped nothing) */
#define WDDM_KMOD_TDR_FAILED 4

/* Kinds of TTM moves (index into drm_wddm_info.moves); none is a CPU copy. */
#define WDDM_KMOD_MOVE_SYS_TO_VRAM 0  /* TRANSFER guest pages (PFN list) -> VRAM */
#define WDDM_KMOD_MOVE_VRAM_TO_SYS 1  /* TRANSFER VRAM -> guest pages */
#define WDDM_KMOD_MOVE_SYS_TO_GTT 2   /* MAP_APERTURE (bind) */
#define WDDM_KMOD_MOVE_GTT_TO_SYS 3   /* UNMAP_APERTURE to the dummy page (unbind) */
#define WDDM_KMOD_MOVE_GTT_TO_VRAM 4  /* TRANSFER aperture -> VRAM, UNMAP_APERTURE */
#define WDDM_KMOD_MOVE_VRAM_TO_GTT 5  /* MAP_APERTURE, TRANSFER VRAM -> aperture */
#define WDDM_KMOD_MOVE_CLEAR_VRAM 6   /* FILL 0: a buffer with no contents yet placed in VRAM */
#define WDDM_KMOD_MOVE_NULL 7         /* no contents to move: the resource reassigned */
#define WDDM_KMOD_MOVE_KINDS 8

/* Placement domains (a plain mask; tried in the order VRAM, GTT, SYSTEM). */
#define WDDM_KMOD_DOMAIN_SYSTEM (1u << 0)
#define WDDM_KMOD_DOMAIN_GTT (1u << 1)
#define WDDM_KMOD_DOMAIN_VRAM (1u << 2)
#define WDDM_KMOD_DOMAINS (WDDM_KMOD_DOMAIN_SYSTEM | WDDM_KMOD_DOMAIN_GTT | WDDM_KMOD_DOMAIN_VRAM)

#define WDDM_KMOD_MAX_BO_BYTES (256u << 20)

/* DRM_IOCTL_WDDM_GEM_CREATE: a buffer object (a GEM handle over a TTM object) of `size` bytes
 * (rounded up to pages), placed in one of `domains`; its contents start as zeros. mmap the
 * render node at `mmap_offset` to reach it wherever it is. Closed with DRM_IOCTL_GEM_CLOSE. */
struct drm_wddm_gem_create {
	__u64 size;        /* in: 1 .. WDDM_KMOD_MAX_BO_BYTES */
	__u32 domains;     /* in: WDDM_KMOD_DOMAIN_* mask, not 0 */
	__u32 handle;      /* out */
	__u64 mmap_offset; /* out */
};

/* DRM_IOCTL_WDDM_GEM_VALIDATE: moves the object into one of `domains` (0: only reports where
 * it is) and waits, on the move's dma_fence, until it is there; then where it is. */
struct drm_wddm_gem_validate {
	__u32 handle;      /* in */
	__u32 domains;     /* in: WDDM_KMOD_DOMAIN_* mask, or 0 */
	__u32 timeout_ms;  /* in: the wait for the move; 0 = the module's default */
	__u32 domain;      /* out: WDDM_KMOD_DOMAIN_* it is in */
	__u32 segment_id;  /* out: its segment (0: system memory) */
	__u32 pad0;
	__u64 offset;      /* out: its offset in the segment (VRAM: from the segment's start) */
};

/* The core's DRM_IOCTL_GEM_CLOSE, for user space without <drm/drm.h>. */
struct drm_wddm_gem_close {
	__u32 handle;
	__u32 pad;
};
#define DRM_IOCTL_WDDM_GEM_CLOSE _IOW('d', 0x09, struct drm_wddm_gem_close)

/* DRM_IOCTL_WDDM_SUBMIT_PAGING: one paging buffer through the device, waited for on its
 * dma_fence (signalled from the MSI-X/INTx deferred half). The buffer holds a FILL of `size`
 * bytes of `pattern` at `vram_offset` of the VRAM segment, a TRANSFER of the same range into
 * guest pages the module allocated (their PFN list given to the device in reverse order), and a
 * FENCE. Afterwards the module reads the range back through the VRAM BAR and copies the guest
 * pages, in address order, to `readback` (`size` bytes). */
struct drm_wddm_submit_paging {
	__u64 vram_offset;   /* in: 4-byte aligned; inside the first scratch_size bytes */
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
#define DRM_WDDM_GEM_CREATE 0x02
#define DRM_WDDM_GEM_VALIDATE 0x03

#define DRM_IOCTL_WDDM_GET_INFO _IOWR('d', 0x40 + DRM_WDDM_GET_INFO, struct drm_wddm_info)
#define DRM_IOCTL_WDDM_SUBMIT_PAGING \
	_IOWR('d', 0x40 + DRM_WDDM_SUBMIT_PAGING, struct drm_wddm_submit_paging)
#define DRM_IOCTL_WDDM_GEM_CREATE \
	_IOWR('d', 0x40 + DRM_WDDM_GEM_CREATE, struct drm_wddm_gem_create)
#define DRM_IOCTL_WDDM_GEM_VALIDATE \
	_IOWR('d', 0x40 + DRM_WDDM_GEM_VALIDATE, struct drm_wddm_gem_validate)

#endif
