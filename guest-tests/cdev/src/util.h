/* Library-internal helpers: byte copies (no libc), little-endian MMIO access, logging. */

#ifndef WDDM_CDEV_UTIL_H
#define WDDM_CDEV_UTIL_H

#include "wddm_gpu_dev.h"

#define WDDM_PAGE 4096u

/* Where wddm_vq_init puts the parts of a split virtqueue in its one ring page (wddm_gpu.h has
 * their layout): the descriptor table at 0 (16 * WDDM_VQ_MAX_SIZE = 1024 bytes), the available
 * ring here (at most 4 + 2 * 64 + 2 bytes), the used ring here (at most 4 + 8 * 64 + 2). */
#define WDDM_VQ_AVAIL_OFFSET 1024u
#define WDDM_VQ_USED_OFFSET 2048u

static inline void wddm_copy(void *dst, const volatile void *src, uint64_t n)
{
    uint8_t *d = dst;
    const volatile uint8_t *s = src;
    for (uint64_t i = 0; i < n; i++)
        d[i] = s[i];
}

static inline void wddm_copy_out(volatile void *dst, const void *src, uint64_t n)
{
    volatile uint8_t *d = dst;
    const uint8_t *s = src;
    for (uint64_t i = 0; i < n; i++)
        d[i] = s[i];
}

static inline void wddm_zero(void *dst, uint64_t n)
{
    volatile uint8_t *d = dst;
    for (uint64_t i = 0; i < n; i++)
        d[i] = 0;
}

static inline uint8_t mmio_r8(volatile uint8_t *base, uint32_t off) { return base[off]; }
static inline uint16_t mmio_r16(volatile uint8_t *base, uint32_t off)
{
    return *(volatile uint16_t *)(base + off);
}
static inline uint32_t mmio_r32(volatile uint8_t *base, uint32_t off)
{
    return *(volatile uint32_t *)(base + off);
}
static inline void mmio_w8(volatile uint8_t *base, uint32_t off, uint8_t v) { base[off] = v; }
static inline void mmio_w16(volatile uint8_t *base, uint32_t off, uint16_t v)
{
    *(volatile uint16_t *)(base + off) = v;
}
static inline void mmio_w32(volatile uint8_t *base, uint32_t off, uint32_t v)
{
    *(volatile uint32_t *)(base + off) = v;
}
static inline void mmio_w64(volatile uint8_t *base, uint32_t off, uint64_t v)
{
    mmio_w32(base, off, (uint32_t)v);
    mmio_w32(base, off + 4, (uint32_t)(v >> 32));
}

static inline void wddm_log(const wddm_dev *dev, int level, const char *msg, uint64_t a,
                            uint64_t b)
{
    if (dev->os.log)
        dev->os.log(dev->os.ctx, level, msg, a, b);
}

/* `a + b` without wrapping; false on overflow. */
static inline bool wddm_add(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

/* The device broke a rule: log it and refuse everything from now on. */
wddm_result wddm_broken(wddm_dev *dev, const char *msg, uint64_t a, uint64_t b);

/* virtqueue.c */
wddm_result wddm_vq_init(wddm_vq *vq, const wddm_os *os, uint16_t size);
void wddm_vq_free(wddm_vq *vq, const wddm_os *os);
wddm_result wddm_vq_add2(wddm_vq *vq, uint64_t out_bus, uint32_t out_len, uint64_t in_bus,
                         uint32_t in_len, uint16_t *head);
void wddm_vq_kick(wddm_vq *vq, const wddm_os *os);
/* WDDM_OK with a used entry, WDDM_E_EMPTY, or WDDM_E_DEVICE for a bad used ring. */
wddm_result wddm_vq_pop(wddm_vq *vq, const wddm_os *os, uint16_t *head, uint32_t *len);

/* control.c: request slots on the control queue. */
#define WDDM_SLOT_FREE 0
#define WDDM_SLOT_PENDING 1
#define WDDM_SLOT_ANSWERED 2
#define WDDM_KIND_SYNC 0
#define WDDM_KIND_SUBMIT 1
#define WDDM_KIND_EVENT 2
#define WDDM_KIND_ABANDONED 3 /* a timed-out sync request: freed when answered */
#define WDDM_KIND_VIRTUAL 4   /* a SUBMIT_VIRTUAL */

wddm_result wddm_ctrl_init(wddm_dev *dev);
/* Under the lock: collects every used entry (the poll and the deferred half share it). */
wddm_result wddm_ctrl_poll_locked(wddm_dev *dev);
/* An interrupt-driven synchronous request sleeps at most this long between looks at its slot. */
#define WDDM_WAIT_SLICE_US 10000u
/* Under the lock: queue `req` (req_len bytes) with a response of resp_len bytes in the slot,
 * or at resp_bus when non-zero. */
wddm_result wddm_ctrl_send_locked(wddm_dev *dev, uint8_t kind, const void *req, uint32_t req_len,
                                  uint64_t resp_bus, uint32_t resp_len, uint32_t *slot);
/* A request answered synchronously: sends, polls until answered (timeout), copies up to
 * resp_len bytes of the slot's response to `resp` (when resp_bus is 0) and frees the slot. */
wddm_result wddm_ctrl_call(wddm_dev *dev, const void *req, uint32_t req_len, uint64_t resp_bus,
                           void *resp, uint32_t resp_len, uint32_t *used_len);
volatile uint8_t *wddm_slot_resp(wddm_dev *dev, uint32_t slot);
uint64_t wddm_slot_bus(const wddm_dev *dev, uint32_t slot);
/* submit.c: called by the poll for answered SUBMIT and WAIT_EVENT slots (under the lock). */
void wddm_submit_answered(wddm_dev *dev, uint32_t slot);
void wddm_event_answered(wddm_dev *dev, uint32_t slot);
/* context.c: called by the poll for answered SUBMIT_VIRTUAL slots (under the lock). */
void wddm_virtual_answered(wddm_dev *dev, uint32_t slot);

/* capset.c */
wddm_result wddm_capset_read(wddm_dev *dev);
/* GET_CAPSET_INFO of capset `index` into `info`; an answer that is no CAPSET_INFO breaks the
 * device with the message `broken_msg` (its type and length). */
wddm_result wddm_capset_info(wddm_dev *dev, uint32_t index, WddmGpuRespCapsetInfo *info,
                             const char *broken_msg);
/* wddm_layout_parse with each refusal logged through dev->os.log (dev may be NULL). */
wddm_result wddm_capset_parse(wddm_layout *layout, const void *blob, uint64_t size,
                              const wddm_dev *dev);

#endif
