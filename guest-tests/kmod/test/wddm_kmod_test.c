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
#include <unistd.h>

#include "wddm_kmod_uapi.h"

static const char *label;
static int failed, passed;

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

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s LABEL COUNT msix|intx\n", argv[0]);
		return 2;
	}
	label = argv[1];
	long count = strtol(argv[2], NULL, 10);
	const char *want_mode = argv[3];
	if (count < 1 || count > 100000) {
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

	/* COUNT paging buffers, each with its own range, size and pattern. */
	uint64_t window = info0.vram_size > (8u << 20) ? (8u << 20) : info0.vram_size;
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
			{info0.vram_size - 4, 8, "past the segment"},
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
	close(fd);
	if (ir) {
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
	printf("GUEST-KMOD-RESULT %s %d passed %d failed\n", label, passed, failed);
	fflush(stdout);
	return failed > 100 ? 100 : failed;
}
