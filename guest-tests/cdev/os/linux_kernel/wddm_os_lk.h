/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/* The C device library's Linux kernel OS layer: the wddm_os table on kernel calls (DMA API,
 * ioremap of the GPU's BARs and of its sibling functions' BARs, PCI config space, a spin lock,
 * a wait queue for the interrupt-driven synchronous requests). Beside os/windows, the Windows
 * kernel-mode layer; the library itself includes no kernel header (compat/ supplies the three
 * C headers it includes). */

#ifndef WDDM_OS_LK_H
#define WDDM_OS_LK_H

#include <linux/atomic.h>
#include <linux/pci.h>
#include <linux/wait.h>

#include "wddm_gpu_os.h"

#define WDDM_LK_MAX_FUNCTIONS 8

struct wddm_lk_layer {
	struct pci_dev *pdev; /* the GPU function (function 0 of its slot) */
	/* Sibling functions of the slot whose BARs were mapped (mode 1: the ivshmem VRAM). */
	struct pci_dev *siblings[WDDM_LK_MAX_FUNCTIONS];
	bool sibling_enabled[WDDM_LK_MAX_FUNCTIONS];
	/* The top half's bits (interrupt_ack), taken by the deferred half. */
	atomic_t pending_bits;
	/* Woken after every deferred half: the synchronous requests sleep here. */
	wait_queue_head_t wq;
	atomic64_t dma_bytes; /* DMA memory the library holds, for leak checks */
	atomic64_t waits;     /* wait_interrupt calls */
};

/* Fills `os` for `pdev`. The layer must not move while the library runs on `os`. */
void wddm_lk_layer_init(struct wddm_lk_layer *layer, struct pci_dev *pdev, wddm_os *os);
/* Releases the sibling functions it took (after wddm_dev_teardown). */
void wddm_lk_layer_fini(struct wddm_lk_layer *layer);
/* The bits the top halves gathered since the last call (for wddm_dev_interrupt_deferred). */
u32 wddm_lk_layer_take_bits(struct wddm_lk_layer *layer);
/* After wddm_dev_interrupt_deferred: wakes the synchronous requests sleeping on it. */
void wddm_lk_layer_wake(struct wddm_lk_layer *layer);

#endif
