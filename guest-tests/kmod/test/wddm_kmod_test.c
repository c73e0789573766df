// SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause
/*
 * The guest's test of wddm_gpu_kmod, the interrupt-driven kernel driver: through its render
 * node's ioctls only.
 *
 *   wddm-kmod-test LABEL COUNT msix|intx
 *
 * Submits COUNT paging buffers (FILL of VRAM, TRANSFER of the range into guest pages, FENCE),
 * each waited for in the kernel on a dma_fence the driver's interrupt path signals, checks each
 * result (device status, the guest pages' bytes, the range read through the VRAM BAR), then
 * checks from the driver's counters and /proc/interrupts that every completion came by
 * interrupt (MSI-X: the control queue's vector; intx: the INTx line) and that the polling path
 * stayed at zero. Prints "GUEST-TEST kmod_LABEL_<check> PASS|FAIL <detail>" per check,
 * "KMOD-IRQ LABEL before|after: <line>" for each of the driver's /proc/interrupts lines, and
 * exits with the number of failed checks.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wddm_kmod_uapi.h"

static const char *label;
static int failed, passed;

/* The device traffic this run caused, per segment, as the device's stats socket counts it:
 * printed as a KMOD-TRAFFIC line for the host to compare. */
static uint64_t traffic_vram_read, traffic_vram_written, traffic_ap_read, traffic_ap_written;

static void report(const char *name, int ok, const char *fmt, ...)
{
	char detail[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (ok)
		passed++;
	else
		failed++;
	printf("GUEST-TEST kmod_%s_%s %s %s\n", label, name, ok ? "PASS" : "FAIL", detail);
	fflush(stdout);
}

/* The driver's /proc/interrupts lines: printed, and the count (all CPUs) of the line whose
 * name ends in `want` ("-ctrlq", "-config", "-intx"); -1 when there is none. */
#define MAX_IRQ_LINES 8
typedef struct irq_lines {
	int count;
	char name[MAX_IRQ_LINES][64];
	unsigned long long total[MAX_IRQ_LINES];
} irq_lines;

static void read_interrupts(const char *when, irq_lines *out)
{
	char line[1024];
	FILE *f = fopen("/proc/interrupts", "r");

	memset(out, 0, sizeof(*out));
	if (!f) {
		printf("KMOD-IRQ %s %s: /proc/interrupts: %s\n", label, when, strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char *hit = strstr(line, "wddm_gpu-");
		if (!hit || out->count == MAX_IRQ_LINES)
			continue;
		line[strcspn(line, "\n")] = 0;
		printf("KMOD-IRQ %s %s: %s\n", label, when, line);
		/* "  NN:  c0  c1 ... chip  hwirq  names": sum the numbers after the colon. */
		char *p = strchr(line, ':');
		unsigned long long sum = 0;
		if (p) {
			p++;
			for (;;) {
				char *end;
				while (*p == ' ')
					p++;
				if (*p < '0' || *p > '9')
					break;
				unsigned long long v = strtoull(p, &end, 10);
				if (end == p || (*end != ' ' && *end != 0))
					break;
				sum += v;
				p = end;
			}
		}
		size_t n = strcspn(hit, " ,");
		if (n >= sizeof(out->name[0]))
			n = sizeof(out->name[0]) - 1;
		memcpy(out->name[out->count], hit, n);
		out->name[out->count][n] = 0;
		out->total[out->count] = sum;
		out->count++;
	}
	fclose(f);
	fflush(stdout);
}

static long long irq_total(const irq_lines *l, const char *name)
{
	for (int i = 0; i < l->count; i++)
		if (strcmp(l->name[i], name) == 0)
			return (long long)l->total[i];
	return -1;
}

static int open_render_node(char *path, size_t size, struct drm_wddm_info *info)
{
	for (int minor = 128; minor < 192; minor++) {
		snprintf(path, size, "/dev/dri/renderD%d", minor);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		memset(info, 0, sizeof(*info));
		if (ioctl(fd, DRM_IOCTL_WDDM_GET_INFO, info) == 0 && info->magic == WDDM_KMOD_MAGIC)
			return fd;
		close(fd);
	}
	return -1;
}

static const char *mode_name(uint32_t mode)
{
	switch (mode) {
	case WDDM_KMOD_IRQ_MSIX:
		return "msix";
	case WDDM_KMOD_IRQ_MSIX_SHARED:
		return "msix-shared";
	case WDDM_KMOD_IRQ_INTX:
		return "intx";
	default:
		return "unknown";
	}
}

/* ---- TTM: buffer objects, moves on the paging engine, eviction ---------------------------- */

typedef struct tbo {
	uint32_t handle;
	uint64_t size;
	uint64_t *map;
	uint32_t gen;      /* the pattern it holds */
	uint32_t domain;   /* where it was at the last look */
	uint64_t offset;
} tbo;

static uint64_t pattern_word(uint32_t bo, uint32_t gen, uint64_t i)
{
	uint64_t x = ((uint64_t)(bo + 1) << 40) ^ ((uint64_t)(gen + 1) << 20) ^ i;

	x *= 0x9E3779B97F4A7C15ull;
	return x ^ (x >> 29);
}

static void write_pattern(tbo *b, uint32_t idx, uint32_t gen)
{
	for (uint64_t i = 0; i < b->size / 8; i++)
		b->map[i] = pattern_word(idx, gen, i);
	b->gen = gen;
}

/* Bad 8-byte words; the first one's index in *first. gen UINT32_MAX: zeros expected. */
static uint64_t check_pattern(const tbo *b, uint32_t idx, uint32_t gen, uint64_t *first)
{
	uint64_t bad = 0;

	for (uint64_t i = 0; i < b->size / 8; i++) {
		uint64_t want = gen == UINT32_MAX ? 0 : pattern_word(idx, gen, i);
		if (b->map[i] != want && !bad++)
			*first = i;
	}
	return bad;
}

static int bo_validate(int fd, tbo *b, uint32_t domains)
{
	struct drm_wddm_gem_validate v;

	memset(&v, 0, sizeof(v));
	v.handle = b->handle;
	v.domains = domains;
	if (ioctl(fd, DRM_IOCTL_WDDM_GEM_VALIDATE, &v))
		return -errno;
	b->domain = v.domain;
	b->offset = v.offset;
	return 0;
}

static const char *domain_name(uint32_t d)
{
	return d == WDDM_KMOD_DOMAIN_VRAM ? "VRAM" : d == WDDM_KMOD_DOMAIN_GTT ? "GTT" :
	       d == WDDM_KMOD_DOMAIN_SYSTEM ? "SYSTEM" : "?";
}

static const char *move_names[WDDM_KMOD_MOVE_KINDS] = {
	"sys->vram", "vram->sys", "sys->gtt", "gtt->sys", "gtt->vram", "vram->gtt", "clear", "null",
};

typedef struct ttm_stats {
	long steps, moved_checked, failures, bad_validate;
	uint64_t bytes_checked;
	char first_bad[300];
} ttm_stats;

/* Validates bo `i` into `domains`, then checks every byte of every object that moved (its
 * domain or offset changed: itself or an eviction) through its mapping. */
static void ttm_step(int fd, tbo *bos, uint32_t n, uint32_t i, uint32_t domains, ttm_stats *st)
{
	uint32_t was_domain[64];
	uint64_t was_offset[64];

	for (uint32_t k = 0; k < n; k++) {
		was_domain[k] = bos[k].domain;
		was_offset[k] = bos[k].offset;
	}
	st->steps++;
	int r = bo_validate(fd, &bos[i], domains);
	if (r || !(bos[i].domain & domains)) {
		st->bad_validate++;
		if (!st->first_bad[0])
			snprintf(st->first_bad, sizeof(st->first_bad),
				 "; validate of bo %u into %#x: %s, in %s", i, domains,
				 r ? strerror(-r) : "ok", domain_name(bos[i].domain));
	}
	for (uint32_t k = 0; k < n; k++) {
		if (k != i && bo_validate(fd, &bos[k], 0)) {
			st->bad_validate++;
			continue;
		}
		if (k != i && bos[k].domain == was_domain[k] && bos[k].offset == was_offset[k])
			continue;
		uint64_t first = 0, bad = check_pattern(&bos[k], k, bos[k].gen, &first);
		st->moved_checked++;
		st->bytes_checked += bos[k].size;
		if (bad) {
			st->failures++;
			if (!st->first_bad[0])
				snprintf(st->first_bad, sizeof(st->first_bad),
					 "; bo %u (%s -> %s at %#" PRIx64 ") after step %ld: %" PRIu64
					 " bad words, first at byte %#" PRIx64 ": %#" PRIx64
					 " (want %#" PRIx64 ")",
					 k, domain_name(was_domain[k]), domain_name(bos[k].domain),
					 bos[k].offset, st->steps, bad, first * 8, bos[k].map[first],
					 pattern_word(k, bos[k].gen, first));
		}
	}
}

static int ttm_get_info(int fd, struct drm_wddm_info *info)
{
	memset(info, 0, sizeof(*info));
	return ioctl(fd, DRM_IOCTL_WDDM_GET_INFO, info);
}

static void print_moves(const char *what, const struct drm_wddm_info *a,
			const struct drm_wddm_info *b, char *out, size_t size)
{
	int n = snprintf(out, size, "%s", what);
	for (int k = 0; k < WDDM_KMOD_MOVE_KINDS && n > 0 && (size_t)n < size; k++)
		n += snprintf(out + n, size - (size_t)n, " %s %" PRIu64, move_names[k],
			      (uint64_t)(b->moves[k] - a->moves[k]));
}

#define TTM_MAX_BOS 64

static void ttm_test(int fd)
{
	struct drm_wddm_info i0, i1, i2;
	char moves[400];

	if (ttm_get_info(fd, &i0)) {
		report("ttm_segments", 0, "GET_INFO: %s", strerror(errno));
		return;
	}
	report("ttm_segments", i0.vram_managed >= (1u << 20) && i0.aperture_size >= (1u << 20),
	       "TTM managers: VRAM segment %u, %" PRIu64 " KiB of %" PRIu64 " KiB (the first %" PRIu64
	       " KiB are SUBMIT_PAGING's), aperture segment %u, %" PRIu64 " MiB; layout segments %u, "
	       "without a manager %u",
	       i0.vram_segment_id, i0.vram_managed >> 10, i0.vram_size >> 10, i0.scratch_size >> 10,
	       i0.aperture_segment_id, i0.aperture_size >> 20, i0.segment_count,
	       i0.segments_unmanaged);

	/* Objects of a quarter of VRAM each, together at least twice VRAM. */
	uint64_t bo_size = (i0.vram_managed / 4) & ~(uint64_t)0xffff;
	if (bo_size < 0x10000)
		bo_size = 0x10000;
	uint32_t n = (uint32_t)((2 * i0.vram_managed + bo_size - 1) / bo_size) + 1;
	if (n > TTM_MAX_BOS)
		n = TTM_MAX_BOS;
	tbo bos[TTM_MAX_BOS];
	memset(bos, 0, sizeof(bos));
	uint32_t made = 0;
	char why[200] = "";
	for (uint32_t k = 0; k < n; k++) {
		struct drm_wddm_gem_create c;
		memset(&c, 0, sizeof(c));
		c.size = bo_size;
		c.domains = WDDM_KMOD_DOMAIN_SYSTEM;
		if (ioctl(fd, DRM_IOCTL_WDDM_GEM_CREATE, &c)) {
			snprintf(why, sizeof(why), "; create %u: %s", k, strerror(errno));
			break;
		}
		bos[k].handle = c.handle;
		bos[k].size = bo_size;
		void *m = mmap(NULL, bo_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			       (off_t)c.mmap_offset);
		if (m == MAP_FAILED) {
			snprintf(why, sizeof(why), "; mmap %u: %s", k, strerror(errno));
			made++;
			break;
		}
		bos[k].map = m;
		uint64_t first = 0;
		if (check_pattern(&bos[k], k, UINT32_MAX, &first)) {
			snprintf(why, sizeof(why), "; new bo %u not zero at byte %#" PRIx64, k,
				 first * 8);
			made++;
			break;
		}
		write_pattern(&bos[k], k, 0);
		bo_validate(fd, &bos[k], 0);
		made++;
	}
	int all = made == n && bos[n - 1].map && !why[0];
	report("ttm_bo_create_mmap", all,
	       "%u of %u buffer objects of %" PRIu64 " KiB (%" PRIu64 " KiB, %.2fx the managed VRAM)"
	       " created in system memory, zeros at first, a pattern written through mmap%s",
	       made, n, bo_size >> 10, (uint64_t)n * bo_size >> 10,
	       (double)n * (double)bo_size / (double)i0.vram_managed, why);

	if (all) {
		ttm_stats st;
		memset(&st, 0, sizeof(st));
		const uint32_t V = WDDM_KMOD_DOMAIN_VRAM, G = WDDM_KMOD_DOMAIN_GTT,
			       S = WDDM_KMOD_DOMAIN_SYSTEM;
		for (uint32_t k = 0; k < n; k++) /* in, evicting the least recently used */
			ttm_step(fd, bos, n, k, V, &st);
		for (uint32_t k = 0; k < n; k++) /* out to system memory, from VRAM and the aperture */
			ttm_step(fd, bos, n, k, S, &st);
		for (uint32_t k = 0; k < n; k++) /* bound into the aperture */
			ttm_step(fd, bos, n, k, G, &st);
		for (uint32_t k = 0; k < n; k++) /* aperture -> VRAM, evictions to the aperture */
			ttm_step(fd, bos, n, k, V, &st);
		/* New contents written wherever each one is: through the VRAM BAR or the pages. */
		for (uint32_t k = 0; k < n; k++) {
			bo_validate(fd, &bos[k], 0);
			write_pattern(&bos[k], k, 1);
		}
		for (uint32_t k = n; k-- > 0;) /* in again, the other way round */
			ttm_step(fd, bos, n, k, V, &st);
		for (uint32_t k = 0; k < n; k++) /* every one checked once more, then to system */
			ttm_step(fd, bos, n, k, S, &st);
		for (uint32_t k = 0; k < n; k += 2) /* half left bound in the aperture */
			ttm_step(fd, bos, n, k, G, &st);
		ttm_get_info(fd, &i1);
		print_moves("moves by kind:", &i0, &i1, moves, sizeof(moves));
#define MOVED(k) ((i1.moves[WDDM_KMOD_MOVE_##k] - i0.moves[WDDM_KMOD_MOVE_##k]) * bo_size)
		traffic_vram_written += MOVED(SYS_TO_VRAM) + MOVED(GTT_TO_VRAM);
		traffic_vram_read += MOVED(VRAM_TO_SYS) + MOVED(VRAM_TO_GTT);
		traffic_ap_read += MOVED(GTT_TO_VRAM);
		traffic_ap_written += MOVED(VRAM_TO_GTT);
#undef MOVED
		report("ttm_eviction_roundtrip",
		       st.failures == 0 && st.bad_validate == 0 && st.moved_checked >= 7 * (long)n,
		       "%ld validations (VRAM, system, aperture, VRAM, rewrite, VRAM reversed, system, "
		       "aperture) of %u objects: %ld moved objects checked byte for byte (%" PRIu64
		       " MiB), %ld with a wrong byte, %ld validations refused or misplaced%s",
		       st.steps, n, st.moved_checked, st.bytes_checked >> 20, st.failures,
		       st.bad_validate, st.first_bad);
		int kinds_ok = i1.moves_failed == i0.moves_failed;
		for (int k = WDDM_KMOD_MOVE_SYS_TO_VRAM; k <= WDDM_KMOD_MOVE_VRAM_TO_GTT; k++)
			kinds_ok &= i1.moves[k] > i0.moves[k];
		uint64_t data_moves = 0;
		for (int k = 0; k < WDDM_KMOD_MOVE_NULL; k++)
			data_moves += i1.moves[k] - i0.moves[k];
		kinds_ok &= i1.move_submissions - i0.move_submissions == data_moves;
		report("ttm_moves_on_paging_engine", kinds_ok,
		       "%s; %" PRIu64 " paging buffers for %" PRIu64 " moves with contents, %" PRIu64
		       " MiB moved, %" PRIu64 " failed; every kind between VRAM, the aperture and "
		       "system memory ran on the paging engine (no CPU copy path exists); in use now: "
		       "VRAM %" PRIu64 " KiB, aperture %" PRIu64 " KiB",
		       moves, i1.move_submissions - i0.move_submissions, data_moves,
		       (i1.move_bytes - i0.move_bytes) >> 20, i1.moves_failed - i0.moves_failed,
		       i1.vram_used >> 10, i1.gtt_used >> 10);
	}

	/* A new object placed straight into VRAM: cleared by FILL, not by the CPU. */
	{
		struct drm_wddm_info a, b;
		struct drm_wddm_gem_create c;
		memset(&c, 0, sizeof(c));
		c.size = 0x30000;
		c.domains = WDDM_KMOD_DOMAIN_VRAM;
		ttm_get_info(fd, &a);
		int r = ioctl(fd, DRM_IOCTL_WDDM_GEM_CREATE, &c);
		tbo z = {.handle = c.handle, .size = c.size};
		uint64_t bad = 1, first = 0;
		int vr = r ? -1 : bo_validate(fd, &z, 0);
		void *m = r ? MAP_FAILED
			    : mmap(NULL, c.size, PROT_READ, MAP_SHARED, fd, (off_t)c.mmap_offset);
		if (m != MAP_FAILED) {
			z.map = m;
			bad = check_pattern(&z, 0, UINT32_MAX, &first);
			munmap(m, c.size);
		}
		ttm_get_info(fd, &b);
		traffic_vram_written += (b.moves[WDDM_KMOD_MOVE_CLEAR_VRAM] -
					 a.moves[WDDM_KMOD_MOVE_CLEAR_VRAM]) * c.size;
		if (!r) {
			struct drm_wddm_gem_close cl = {.handle = c.handle};
			ioctl(fd, DRM_IOCTL_WDDM_GEM_CLOSE, &cl);
		}
		report("ttm_clear_by_fill",
		       !r && !vr && z.domain == WDDM_KMOD_DOMAIN_VRAM && !bad &&
			       b.moves[WDDM_KMOD_MOVE_CLEAR_VRAM] > a.moves[WDDM_KMOD_MOVE_CLEAR_VRAM],
		       "a new %u KiB object in %s (create: %s): %" PRIu64 " non-zero words read "
		       "through the BAR; FILL clears %" PRIu64 " -> %" PRIu64,
		       (unsigned)(c.size >> 10), domain_name(z.domain), r ? strerror(errno) : "ok",
		       bad, a.moves[WDDM_KMOD_MOVE_CLEAR_VRAM], b.moves[WDDM_KMOD_MOVE_CLEAR_VRAM]);
	}

	/* Closing: objects bound in the aperture are unbound before their pages go. */
	uint32_t bound = 0;
	for (uint32_t k = 0; k < n; k++) {
		if (bos[k].map)
			munmap(bos[k].map, bos[k].size);
		if (bos[k].handle) {
			bound += bos[k].domain == WDDM_KMOD_DOMAIN_GTT;
			struct drm_wddm_gem_close cl = {.handle = bos[k].handle};
			ioctl(fd, DRM_IOCTL_WDDM_GEM_CLOSE, &cl);
		}
	}
	/* An object TTM still finds busy when its last reference goes is destroyed later by its
	 * delayed-delete worker (every 10 ms): look for up to a second. */
	ttm_get_info(fd, &i2);
	uint64_t vram_at_close = i2.vram_used, gtt_at_close = i2.gtt_used;
	int waited_ms = 0;
	while ((i2.vram_used || i2.gtt_used) && waited_ms < 1000) {
		usleep(10000);
		waited_ms += 10;
		ttm_get_info(fd, &i2);
	}
	report("ttm_unbind_on_free",
	       bound > 0 && i2.unbinds_on_free - i0.unbinds_on_free >= bound && i2.vram_used == 0 &&
		       i2.gtt_used == 0,
	       "%u objects closed while bound in the aperture: %" PRIu64 " UNMAP_APERTUREs to the "
	       "dummy page before their pages were freed; in use after closing all: VRAM %" PRIu64
	       " KiB, aperture %" PRIu64 " KiB (right after the closes: %" PRIu64 " and %" PRIu64
	       " KiB, %d ms before TTM's delayed delete freed them)",
	       bound, i2.unbinds_on_free - i0.unbinds_on_free, i2.vram_used >> 10,
	       i2.gtt_used >> 10, vram_at_close >> 10, gtt_at_close >> 10, waited_ms);
	report("ttm_polling_path_zero", i2.polled_after_irq == 0 && i2.fences_timed_out == 0,
	       "after the TTM moves: library collections by polling since the IRQ handlers took "
	       "over %" PRIu64 ", fences timed out %" PRIu64 ", dma_fences signalled %" PRIu64,
	       i2.polled_after_irq, i2.fences_timed_out, i2.fences_signalled);
}

/* ---- drm_sched's timeout and the TDR path ------------------------------------------------- */

static const char *tdr_name(uint32_t m)
{
	return m == WDDM_KMOD_TDR_QUERY_CURRENT_FENCE ? "QUERY_ENGINE_STATUS (lost interrupt)" :
	       m == WDDM_KMOD_TDR_PREEMPT	      ? "PREEMPT" :
	       m == WDDM_KMOD_TDR_RESET		      ? "RESET" :
	       m == WDDM_KMOD_TDR_FAILED	      ? "nothing (failed)" :
						      "none";
}

/* One SUBMIT_PAGING of `size` bytes of `pattern`, waited for up to 20 s; 0 when it completed
 * OK with the guest pages and the BAR holding the pattern. */
static int tdr_paging(int fd, uint32_t pattern, struct drm_wddm_submit_paging *a, char *why,
		      size_t why_size)
{
	static uint8_t buf[16384];
	memset(a, 0, sizeof(*a));
	a->vram_offset = 0x4000;
	a->size = sizeof(buf);
	a->pattern = pattern;
	a->readback = (uintptr_t)buf;
	a->timeout_ms = 20000;
	memset(buf, 0, sizeof(buf));
	if (ioctl(fd, DRM_IOCTL_WDDM_SUBMIT_PAGING, a)) {
		snprintf(why, why_size, "ioctl: %s", strerror(errno));
		return -1;
	}
	uint32_t bad = 0;
	for (uint32_t d = 0; d < a->size / 4; d++) {
		uint32_t v;
		memcpy(&v, buf + 4 * d, 4);
		bad += v != pattern;
	}
	snprintf(why, why_size, "status %u, fence %u, %u wrong dwords in the guest pages, %u through the BAR, %" PRIu64 " ms",
		 a->status, a->fence_id, bad, a->bar_mismatch, (uint64_t)a->wait_ns / 1000000);
	return a->status || bad || a->bar_mismatch ? -1 : 0;
}

/* The host armed `hang nth=HANG` and `lost-interrupt nth=LOST` (counted in the device's
 * submissions from before the boot); the test's submissions are lined up with them, which the
 * driver's submission counter confirms at each step. */
static void tdr_test(int fd, uint32_t hang_nth, uint32_t lost_nth, uint32_t slow_nth)
{
	struct drm_wddm_info i0, i1, i2, i3, i4;
	char why[300];
	struct drm_wddm_submit_paging a;

	ttm_get_info(fd, &i0);
	/* Two objects bound in the aperture: a RESET clears the GART under them. */
	tbo bos[2];
	memset(bos, 0, sizeof(bos));
	int made = 1;
	for (uint32_t k = 0; k < 2; k++) {
		struct drm_wddm_gem_create c;
		memset(&c, 0, sizeof(c));
		c.size = 256u << 10;
		c.domains = WDDM_KMOD_DOMAIN_GTT;
		if (ioctl(fd, DRM_IOCTL_WDDM_GEM_CREATE, &c)) {
			made = 0;
			break;
		}
		bos[k].handle = c.handle;
		bos[k].size = c.size;
		void *m = mmap(NULL, c.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			       (off_t)c.mmap_offset);
		if (m == MAP_FAILED) {
			made = 0;
			break;
		}
		bos[k].map = m;
		write_pattern(&bos[k], k, 7);
		bo_validate(fd, &bos[k], 0);
	}
	ttm_get_info(fd, &i1);
	int lined_up = made && i1.submitted + 1 == hang_nth;
	report("tdr_plan_lined_up", lined_up,
	       "drm_sched job timeout %u ms; 2 objects bound in the aperture (%s, %s); device "
	       "submissions so far %" PRIu64 ", the next is the hang's (nth=%u)",
	       i1.tdr_timeout_ms, domain_name(bos[0].domain), domain_name(bos[1].domain),
	       i1.submitted, hang_nth);

	/* The hang: drm_sched's timeout, then the TDR path; the ioctl's job is resubmitted. */
	int r = tdr_paging(fd, 0x600DF00Du, &a, why, sizeof(why));
	ttm_get_info(fd, &i2);
	report("tdr_hang_recovered",
	       r == 0 && i2.tdr_by_reset == i1.tdr_by_reset + 1 &&
		       i2.last_tdr_method == WDDM_KMOD_TDR_RESET &&
		       i2.tdr_resubmitted > i1.tdr_resubmitted && i2.tdr_rebound >= i1.tdr_rebound + 2,
	       "the hung paging buffer (device submission %u) timed out and was recovered by %s "
	       "after QUERY_ENGINE_STATUS and PREEMPT did not end it: timeouts %" PRIu64
	       ", by RESET %" PRIu64 ", jobs resubmitted %" PRIu64 ", aperture bindings restored "
	       "%" PRIu64 "; the resubmitted job: %s",
	       hang_nth, tdr_name(i2.last_tdr_method), i2.tdr_count - i1.tdr_count,
	       i2.tdr_by_reset - i1.tdr_by_reset, i2.tdr_resubmitted - i1.tdr_resubmitted,
	       i2.tdr_rebound - i1.tdr_rebound, why);

	/* The objects' aperture pages were bound again: moving them to VRAM reads through it. */
	uint64_t bad = 0, first = 0;
	int vr = 0;
	char vwhy[200] = "";
	for (uint32_t k = 0; k < 2 && made; k++) {
		uint32_t was = bos[k].domain;
		vr |= bo_validate(fd, &bos[k], WDDM_KMOD_DOMAIN_VRAM);
		uint64_t b = check_pattern(&bos[k], k, 7, &first);
		if (b && !vwhy[0])
			snprintf(vwhy, sizeof(vwhy), "; object %u (%s -> %s): first wrong byte at %#" PRIx64, k,
				 domain_name(was), domain_name(bos[k].domain), first * 8);
		bad += b;
	}
	ttm_get_info(fd, &i2);
	report("tdr_aperture_rebound",
	       made && !vr && bad == 0 && bos[0].domain == WDDM_KMOD_DOMAIN_VRAM &&
		       bos[1].domain == WDDM_KMOD_DOMAIN_VRAM && i2.moves_failed == i1.moves_failed,
	       "after the RESET the 2 objects moved from the aperture to VRAM (TRANSFER through "
	       "the GART): %" PRIu64 " wrong words, failed moves %" PRIu64 "%s",
	       bad, i2.moves_failed - i1.moves_failed, vwhy);

	/* The lost interrupt: the job ran but its completion is withheld until the driver asks. */
	lined_up = i2.submitted + 1 == lost_nth;
	r = tdr_paging(fd, 0x10571A7Eu, &a, why, sizeof(why));
	ttm_get_info(fd, &i3);
	report("tdr_lost_interrupt_recovered",
	       lined_up && r == 0 && i3.tdr_by_query == i2.tdr_by_query + 1 &&
		       i3.last_tdr_method == WDDM_KMOD_TDR_QUERY_CURRENT_FENCE &&
		       i3.tdr_released > i2.tdr_released && i3.tdr_by_reset == i2.tdr_by_reset,
	       "the paging buffer whose interrupt was withheld (device submission %" PRIu64
	       ", nth=%u) was recovered by %s: released %" PRIu64 " withheld completion(s), no "
	       "reset; %s",
	       i2.submitted + 1, lost_nth, tdr_name(i3.last_tdr_method),
	       i3.tdr_released - i2.tdr_released, why);
	/* A late start past the timeout: PREEMPT stops it before it ran; it is resubmitted. */
	lined_up = i3.submitted + 1 == slow_nth;
	r = tdr_paging(fd, 0x5107C0DEu, &a, why, sizeof(why));
	ttm_get_info(fd, &i4);
	report("tdr_slow_preempted",
	       lined_up && r == 0 && i4.tdr_by_preempt == i3.tdr_by_preempt + 1 &&
		       i4.last_tdr_method == WDDM_KMOD_TDR_PREEMPT &&
		       i4.tdr_resubmitted > i3.tdr_resubmitted && i4.tdr_by_reset == i3.tdr_by_reset,
	       "the paging buffer that starts 3 s late (device submission %" PRIu64 ", nth=%u) "
	       "was recovered by %s: resubmitted %" PRIu64 ", no reset; %s",
	       i3.submitted + 1, slow_nth, tdr_name(i4.last_tdr_method),
	       i4.tdr_resubmitted - i3.tdr_resubmitted, why);
	report("tdr_polling_path_zero",
	       i4.polled_after_irq == 0 && i4.fences_timed_out == i0.fences_timed_out &&
		       i4.tdr_failed == 0,
	       "library collections by polling since the IRQ handlers took over %" PRIu64
	       ", ioctl waits timed out %" PRIu64 ", failed recoveries %" PRIu64 "; timeouts "
	       "%" PRIu64 ": by the query %" PRIu64 ", by PREEMPT %" PRIu64 ", by RESET %" PRIu64,
	       i4.polled_after_irq, i4.fences_timed_out - i0.fences_timed_out, i4.tdr_failed,
	       i4.tdr_count, i4.tdr_by_query, i4.tdr_by_preempt, i4.tdr_by_reset);
	for (uint32_t k = 0; k < 2; k++) {
		if (bos[k].map)
			munmap(bos[k].map, bos[k].size);
		if (bos[k].handle) {
			struct drm_wddm_gem_close cl = {.handle = bos[k].handle};
			ioctl(fd, DRM_IOCTL_WDDM_GEM_CLOSE, &cl);
		}
	}
}

int main(int argc, char **argv)
{
	int tdr = argc == 8 && strcmp(argv[4], "tdr") == 0;
	if (argc != 4 && !(argc == 5 && strcmp(argv[4], "ttm") == 0) && !tdr) {
		fprintf(stderr, "usage: %s LABEL COUNT msix|intx [ttm | tdr HANG_NTH LOST_NTH SLOW_NTH]\n",
			argv[0]);
		return 2;
	}
	label = argv[1];
	long count = strtol(argv[2], NULL, 10);
	const char *want_mode = argv[3];
	if (!tdr && (count < 1 || count > 100000)) {
		fprintf(stderr, "COUNT must be 1..100000\n");
		return 2;
	}
	int msix = strcmp(want_mode, "msix") == 0;
	const char *queue_line = msix ? "wddm_gpu-ctrlq" : "wddm_gpu-intx";

	irq_lines before, after;
	read_interrupts("before", &before);

	char node[64];
	struct drm_wddm_info info0, info1;
	int fd = open_render_node(node, sizeof(node), &info0);
	report("render_node", fd >= 0, "%s: GET_INFO magic %#x, interface %u", fd >= 0 ? node : "none",
	       info0.magic, info0.interface_version);
	if (fd < 0)
		return failed;
	report("irq_mode", strcmp(mode_name(info0.irq_mode), want_mode) == 0,
	       "driver uses %s (%u Linux IRQs: config %u, queue %u), expected %s",
	       mode_name(info0.irq_mode), info0.irq_count, info0.irq_config, info0.irq_queue,
	       want_mode);

	if (tdr) {
		tdr_test(fd, (uint32_t)strtoul(argv[5], NULL, 10), (uint32_t)strtoul(argv[6], NULL, 10),
			 (uint32_t)strtoul(argv[7], NULL, 10));
		close(fd);
		printf("GUEST-KMOD-RESULT %s %d passed %d failed\n", label, passed, failed);
		fflush(stdout);
		return failed;
	}

	/* COUNT paging buffers, each with its own range, size and pattern. */
	uint64_t window = info0.scratch_size; /* SUBMIT_PAGING's part of VRAM; TTM has the rest */
	uint8_t *readback = malloc(WDDM_KMOD_MAX_PAGING_BYTES);
	long ok_count = 0;
	uint32_t last_fence = 0;
	uint64_t wait_min = UINT64_MAX, wait_max = 0, wait_sum = 0;
	char first_bad[300] = "";
	for (long i = 0; readback && i < count; i++) {
		struct drm_wddm_submit_paging a;
		memset(&a, 0, sizeof(a));
		a.size = (uint32_t)(4096u * (1 + i % 4) - 4u * (uint32_t)(i % 3));
		a.vram_offset = ((uint64_t)i * 0x11004u) % (window - WDDM_KMOD_MAX_PAGING_BYTES);
		a.vram_offset &= ~(uint64_t)3;
		a.pattern = (uint32_t)(0x9E3779B9u * (uint32_t)(i + 1)) ^ 0xA5A55A5Au;
		a.readback = (uintptr_t)readback;
		memset(readback, 0, WDDM_KMOD_MAX_PAGING_BYTES);
		int r = ioctl(fd, DRM_IOCTL_WDDM_SUBMIT_PAGING, &a);
		uint32_t bad_dwords = 0;
		for (uint32_t d = 0; r == 0 && d < a.size / 4; d++) {
			uint32_t v;
			memcpy(&v, readback + 4 * d, 4);
			bad_dwords += v != a.pattern;
		}
		int ok = r == 0 && a.status == 0 && a.bar_mismatch == 0 && bad_dwords == 0 &&
			 a.fence_id > last_fence;
		if (r == 0) { /* the FILL wrote the range, the TRANSFER read it */
			traffic_vram_written += a.size;
			traffic_vram_read += a.size;
		}
		if (ok) {
			ok_count++;
			last_fence = a.fence_id;
			wait_sum += a.wait_ns;
			if (a.wait_ns < wait_min)
				wait_min = a.wait_ns;
			if (a.wait_ns > wait_max)
				wait_max = a.wait_ns;
		} else if (!first_bad[0]) {
			snprintf(first_bad, sizeof(first_bad),
				 "; first bad #%ld: ioctl %s, fence %u (after %u), status %u, BAR "
				 "mismatches %u, page mismatches %u of %u dwords",
				 i, r ? strerror(errno) : "ok", a.fence_id, last_fence, a.status,
				 a.bar_mismatch, bad_dwords, a.size / 4);
		}
	}
	report("paging_fill_transfer", readback && ok_count == count,
	       "%ld of %ld paging buffers (FILL %#x.. of 4-16 KiB in VRAM, TRANSFER to guest pages "
	       "by a reversed PFN list, FENCE) completed OK, guest pages and BAR read-back match, "
	       "fences increasing to %u; fence wait min/avg/max %" PRIu64 "/%" PRIu64 "/%" PRIu64
	       " us%s",
	       ok_count, count, 0x9E3779B9u ^ 0xA5A55A5Au, last_fence,
	       ok_count ? wait_min / 1000 : 0, ok_count ? wait_sum / 1000 / (uint64_t)ok_count : 0,
	       wait_max / 1000, first_bad);
	free(readback);

	/* Bad ranges are refused before anything reaches the device. */
	{
		static uint8_t buf[16];
		struct { uint64_t off; uint32_t size; const char *what; } bad[] = {
			{info0.scratch_size - 4, 8, "past the scratch window"},
			{info0.vram_size - 4096, 8, "in TTM's part of the segment"},
			{UINT64_MAX - 3, 8, "wrapping 64 bits"},
			{0, 0, "size 0"},
			{2, 8, "unaligned offset"},
			{0, 6, "unaligned size"},
			{0, WDDM_KMOD_MAX_PAGING_BYTES + 4, "too large"},
		};
		int refused = 0;
		char why[200] = "";
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			struct drm_wddm_submit_paging a;
			memset(&a, 0, sizeof(a));
			a.vram_offset = bad[i].off;
			a.size = bad[i].size;
			a.readback = (uintptr_t)buf;
			int r = ioctl(fd, DRM_IOCTL_WDDM_SUBMIT_PAGING, &a);
			if (r == -1 && errno == EINVAL)
				refused++;
			else if (!why[0])
				snprintf(why, sizeof(why), "; %s: %s", bad[i].what,
					 r ? strerror(errno) : "accepted");
		}
		report("refuses_bad_ranges", refused == (int)(sizeof(bad) / sizeof(bad[0])),
		       "%d of %zu bad ranges refused with EINVAL%s", refused,
		       sizeof(bad) / sizeof(bad[0]), why);
	}

	memset(&info1, 0, sizeof(info1));
	int ir = ioctl(fd, DRM_IOCTL_WDDM_GET_INFO, &info1);
	read_interrupts("after", &after);
	if (ir) {
		close(fd);
		report("counters", 0, "GET_INFO: %s", strerror(errno));
		return failed;
	}
	uint64_t submitted = info1.submitted - info0.submitted;
	uint64_t signalled = info1.fences_signalled - info0.fences_signalled;
	report("fences_by_interrupt",
	       submitted == (uint64_t)count && signalled == (uint64_t)count &&
		       info1.fences_timed_out == 0,
	       "submitted %" PRIu64 ", dma_fences signalled by the deferred half %" PRIu64
	       ", timed out %" PRIu64,
	       submitted, signalled, info1.fences_timed_out);
	report("polling_path_zero", info0.polled_after_irq == 0 && info1.polled_after_irq == 0,
	       "library used-ring collections by polling since the IRQ handlers took over: %" PRIu64
	       " (by init's capset reads before: %" PRIu64 "); by the deferred half: %" PRIu64
	       "; synchronous requests that slept until the interrupt: %" PRIu64,
	       info1.polled_after_irq, info1.polled_total - info1.polled_after_irq,
	       info1.deferred_total, info1.sync_waits);
	uint64_t top_q = info1.top_queue - info0.top_queue;
	uint64_t top_l = info1.top_line - info0.top_line;
	uint64_t deferred = info1.deferred_runs - info0.deferred_runs;
	/* Each submission waits for its fence before the next: every completion needs its own
	 * interrupt and its own deferred half. */
	int halves_ok = deferred >= (uint64_t)count &&
			(msix ? top_q >= (uint64_t)count && info1.top_line == 0
			      : top_l >= (uint64_t)count && info1.top_queue == 0);
	report("top_and_deferred_halves", halves_ok,
	       "top halves: queue vector %" PRIu64 ", INTx line %" PRIu64 " (not ours %" PRIu64
	       "), config vector %" PRIu64 " in total; deferred halves %" PRIu64 " (need >= %ld)",
	       top_q, top_l, info1.top_not_ours, info1.top_config, deferred, count);
	long long q0 = irq_total(&before, queue_line), q1 = irq_total(&after, queue_line);
	long long c1 = irq_total(&after, "wddm_gpu-config");
	int proc_ok = q0 >= 0 && q1 >= 0 && q1 - q0 >= count && (!msix || c1 >= 0);
	report("proc_interrupts_counting", proc_ok,
	       "/proc/interrupts %s: %lld -> %lld (+%lld, need >= %ld)%s", queue_line, q0, q1,
	       q1 - q0, count,
	       msix ? (c1 >= 0 ? "; wddm_gpu-config present" : "; wddm_gpu-config missing") : "");
	if (argc == 5)
		ttm_test(fd);
	close(fd);
	printf("KMOD-TRAFFIC %s vram_read=%" PRIu64 " vram_written=%" PRIu64 " aperture_read=%" PRIu64
	       " aperture_written=%" PRIu64 "\n",
	       label, traffic_vram_read, traffic_vram_written, traffic_ap_read, traffic_ap_written);
	if (argc == 5) {
		/* The host reads the device's stats socket now: nothing else runs on it. */
		printf("KMOD-STATS-HOLD %s\n", label);
		fflush(stdout);
		sleep(3);
	}
	printf("GUEST-KMOD-RESULT %s %d passed %d failed\n", label, passed, failed);
	fflush(stdout);
	return failed > 100 ? 100 : failed;
}
