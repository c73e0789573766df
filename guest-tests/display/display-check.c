/*
 * display-check: the guest half of the external-driver display tests (scripts/display-test).
 * It drives the GPU only through the Linux kernel's own virtio_gpu driver, a driver nobody in
 * this project wrote:
 *
 *   display-check fb    draw the known pattern (display_pattern.py on the host computes the same)
 *                       into /dev/fb0 and print "DISPLAY-FB <width>x<height>"
 *   display-check drm   fenced work through /dev/dri/card0; one "DISPLAY-CHECK <name> PASS|FAIL
 *                       <detail>" line per check, always all of them, in this order
 *
 * Exit code: 0 iff everything it checked passed. Built statically (gcc -static) by
 * scripts/build-guest --kind display. The DRM structures are declared here from the kernel's
 * UAPI (drm.h, drm_mode.h, virtgpu_drm.h) because the guest build needs no libdrm headers.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fb.h>
#include <linux/ioctl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- the kernel's DRM UAPI, the part used here -------------------------------------------- */

struct drm_mode_card_res {
    uint64_t fb_id_ptr, crtc_id_ptr, connector_id_ptr, encoder_id_ptr;
    uint32_t count_fbs, count_crtcs, count_connectors, count_encoders;
    uint32_t min_width, max_width, min_height, max_height;
};

struct drm_mode_modeinfo {
    uint32_t clock;
    uint16_t hdisplay, hsync_start, hsync_end, htotal, hskew;
    uint16_t vdisplay, vsync_start, vsync_end, vtotal, vscan;
    uint32_t vrefresh, flags, type;
    char name[32];
};

struct drm_mode_get_connector {
    uint64_t encoders_ptr, modes_ptr, props_ptr, prop_values_ptr;
    uint32_t count_modes, count_props, count_encoders, encoder_id, connector_id;
    uint32_t connector_type, connector_type_id, connection, mm_width, mm_height, subpixel, pad;
};

struct drm_mode_crtc {
    uint64_t set_connectors_ptr;
    uint32_t count_connectors, crtc_id, fb_id, x, y, gamma_size, mode_valid;
    struct drm_mode_modeinfo mode;
};

struct drm_mode_fb_cmd {
    uint32_t fb_id, width, height, pitch, bpp, depth, handle;
};

struct drm_mode_crtc_page_flip {
    uint32_t crtc_id, fb_id, flags, reserved;
    uint64_t user_data;
};

struct drm_mode_create_dumb {
    uint32_t height, width, bpp, flags, handle, pitch;
    uint64_t size;
};

struct drm_mode_map_dumb {
    uint32_t handle, pad;
    uint64_t offset;
};

struct drm_mode_destroy_dumb {
    uint32_t handle;
};

struct drm_mode_cursor2 {
    uint32_t flags, crtc_id;
    int32_t x, y;
    uint32_t width, height, handle;
    int32_t hot_x, hot_y;
};

struct drm_event_vblank {
    uint32_t type, length;
    uint64_t user_data;
    uint32_t tv_sec, tv_usec, sequence, crtc_id;
};

struct drm_virtgpu_getparam {
    uint64_t param, value;
};

struct drm_virtgpu_resource_create {
    uint32_t target, format, bind, width, height, depth, array_size, last_level, nr_samples;
    uint32_t flags, bo_handle, res_handle, size, stride;
};

struct drm_virtgpu_3d_box {
    uint32_t x, y, z, w, h, d;
};

struct drm_virtgpu_3d_transfer_to_host {
    uint32_t bo_handle;
    struct drm_virtgpu_3d_box box;
    uint32_t level, offset, stride, layer_stride;
};

struct drm_virtgpu_3d_wait {
    uint32_t handle, flags;
};

#define DRM_BASE 'd'
#define DRM_COMMAND_BASE 0x40
#define IOCTL_MODE_GETRESOURCES _IOWR(DRM_BASE, 0xA0, struct drm_mode_card_res)
#define IOCTL_MODE_SETCRTC _IOWR(DRM_BASE, 0xA2, struct drm_mode_crtc)
#define IOCTL_MODE_GETCONNECTOR _IOWR(DRM_BASE, 0xA7, struct drm_mode_get_connector)
#define IOCTL_MODE_ADDFB _IOWR(DRM_BASE, 0xAE, struct drm_mode_fb_cmd)
#define IOCTL_MODE_PAGE_FLIP _IOWR(DRM_BASE, 0xB0, struct drm_mode_crtc_page_flip)
#define IOCTL_MODE_CREATE_DUMB _IOWR(DRM_BASE, 0xB2, struct drm_mode_create_dumb)
#define IOCTL_MODE_MAP_DUMB _IOWR(DRM_BASE, 0xB3, struct drm_mode_map_dumb)
#define IOCTL_MODE_DESTROY_DUMB _IOWR(DRM_BASE, 0xB4, struct drm_mode_destroy_dumb)
#define IOCTL_MODE_CURSOR2 _IOWR(DRM_BASE, 0xBB, struct drm_mode_cursor2)
#define DRM_MODE_CURSOR_BO 0x01
#define DRM_MODE_CURSOR_MOVE 0x02
#define IOCTL_VIRTGPU_GETPARAM _IOWR(DRM_BASE, DRM_COMMAND_BASE + 0x03, struct drm_virtgpu_getparam)
#define IOCTL_VIRTGPU_RESOURCE_CREATE \
    _IOWR(DRM_BASE, DRM_COMMAND_BASE + 0x04, struct drm_virtgpu_resource_create)
#define IOCTL_VIRTGPU_TRANSFER_TO_HOST \
    _IOWR(DRM_BASE, DRM_COMMAND_BASE + 0x07, struct drm_virtgpu_3d_transfer_to_host)
#define IOCTL_VIRTGPU_WAIT _IOWR(DRM_BASE, DRM_COMMAND_BASE + 0x08, struct drm_virtgpu_3d_wait)

#define DRM_MODE_CONNECTED 1
#define DRM_MODE_PAGE_FLIP_EVENT 0x01
#define DRM_EVENT_FLIP_COMPLETE 0x02
#define VIRTGPU_PARAM_3D_FEATURES 1
#define VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM 2
#define PIPE_TEXTURE_2D 2
#define PIPE_BIND_RENDER_TARGET 2

/* ---- checks ------------------------------------------------------------------------------- */

static int failures;

static void check(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(const char *name, int ok, const char *fmt, ...)
{
    va_list ap;
    printf("DISPLAY-CHECK %s %s ", name, ok ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok)
        failures++;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The known pattern; scripts/lib/gpuhost/display_pattern.py computes the same values. */
static void pattern_rgb(uint32_t x, uint32_t y, uint8_t rgb[3])
{
    rgb[0] = (uint8_t)(x ^ y);
    rgb[1] = (uint8_t)((x + y) >> 2);
    rgb[2] = (uint8_t)(7 * x + 13 * y);
}

/* ---- fb: the pattern into /dev/fb0 -------------------------------------------------------- */

static int draw_fb(void)
{
    struct fb_var_screeninfo var;
    struct fb_fix_screeninfo fix;
    int fd = open("/dev/fb0", O_RDWR);
    if (fd < 0) {
        printf("DISPLAY-FB-ERROR open /dev/fb0: %s\n", strerror(errno));
        return 1;
    }
    if (ioctl(fd, FBIOGET_VSCREENINFO, &var) || ioctl(fd, FBIOGET_FSCREENINFO, &fix)) {
        printf("DISPLAY-FB-ERROR FBIOGET_*SCREENINFO: %s\n", strerror(errno));
        return 1;
    }
    if (var.bits_per_pixel != 32) {
        printf("DISPLAY-FB-ERROR %u bits per pixel; the pattern is drawn in 32\n", var.bits_per_pixel);
        return 1;
    }
    /* Through a mapping: the driver's deferred I/O notices the written pages and flushes them
     * (a write() to /dev/fb0 is not flushed by every kernel: Debian's 6.1 sends nothing). */
    size_t len = (size_t)fix.line_length * (var.yoffset + var.yres);
    uint8_t *fb = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fb == MAP_FAILED) {
        printf("DISPLAY-FB-ERROR mmap /dev/fb0: %s\n", strerror(errno));
        return 1;
    }
    for (uint32_t y = 0; y < var.yres; y++) {
        uint32_t *row = (uint32_t *)(fb + (size_t)(var.yoffset + y) * fix.line_length);
        for (uint32_t x = 0; x < var.xres; x++) {
            uint8_t rgb[3];
            pattern_rgb(x, y, rgb);
            row[x] = (uint32_t)rgb[0] << var.red.offset | (uint32_t)rgb[1] << var.green.offset |
                     (uint32_t)rgb[2] << var.blue.offset;
        }
    }
    msync(fb, len, MS_SYNC);
    munmap(fb, len);
    /* A pan to where it already is commits the plane again: the whole frame is flushed. */
    if (ioctl(fd, FBIOPAN_DISPLAY, &var))
        printf("DISPLAY-FB-INFO FBIOPAN_DISPLAY: %s\n", strerror(errno));
    /* Deferred I/O flushes from a worker after its delay (HZ/20): give it that several times. */
    usleep(500 * 1000);
    printf("DISPLAY-FB %ux%u line_length=%u id=%.16s\n", var.xres, var.yres, fix.line_length, fix.id);
    fflush(stdout);
    close(fd);
    return 0;
}

/* ---- drm: fenced work through the kernel's driver ----------------------------------------- */

/* Fenced resource creation and transfer: the driver waits for the host's fence echo. */
static void check_virtgpu_fences(int fd)
{
    struct drm_virtgpu_getparam gp = {.param = VIRTGPU_PARAM_3D_FEATURES};
    uint64_t virgl = 0;
    gp.value = (uint64_t)(uintptr_t)&virgl;
    int rc = ioctl(fd, IOCTL_VIRTGPU_GETPARAM, &gp);
    printf("DISPLAY-INFO virgl_3d=%s\n", rc ? strerror(errno) : (virgl ? "yes" : "no"));

    struct drm_virtgpu_resource_create rc2d = {
        .target = PIPE_TEXTURE_2D, .format = VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM,
        .bind = PIPE_BIND_RENDER_TARGET, .width = 64, .height = 64, .depth = 1, .array_size = 1,
        .size = 64 * 64 * 4, /* the backing: without it the kernel attaches one page */
    };
    double t0 = now_ms();
    rc = ioctl(fd, IOCTL_VIRTGPU_RESOURCE_CREATE, &rc2d);
    check("virtgpu_resource_create", rc == 0, "%s res_handle=%u bo_handle=%u",
          rc ? strerror(errno) : "ok", rc2d.res_handle, rc2d.bo_handle);
    if (rc) {
        check("virtgpu_create_fence_wait", 0, "no resource");
        check("virtgpu_transfer_fence_wait", 0, "no resource");
        return;
    }
    /* VIRTGPU_WAIT blocks until the object's fences signal; the kernel gives up after 15 s. */
    struct drm_virtgpu_3d_wait wait = {.handle = rc2d.bo_handle};
    rc = ioctl(fd, IOCTL_VIRTGPU_WAIT, &wait);
    check("virtgpu_create_fence_wait", rc == 0, "%s after %.1f ms", rc ? strerror(errno) : "signalled",
          now_ms() - t0);

    struct drm_virtgpu_3d_transfer_to_host xfer = {
        .bo_handle = rc2d.bo_handle, .box = {.w = 64, .h = 64, .d = 1},
    };
    t0 = now_ms();
    rc = ioctl(fd, IOCTL_VIRTGPU_TRANSFER_TO_HOST, &xfer);
    if (rc == 0)
        rc = ioctl(fd, IOCTL_VIRTGPU_WAIT, &wait);
    check("virtgpu_transfer_fence_wait", rc == 0, "%s after %.1f ms", rc ? strerror(errno) : "signalled",
          now_ms() - t0);
}

struct dumb {
    uint32_t handle, fb_id, pitch;
    uint64_t size;
};

static int make_dumb(int fd, uint32_t w, uint32_t h, uint32_t fill, struct dumb *out)
{
    struct drm_mode_create_dumb cd = {.height = h, .width = w, .bpp = 32};
    if (ioctl(fd, IOCTL_MODE_CREATE_DUMB, &cd))
        return -errno;
    struct drm_mode_map_dumb md = {.handle = cd.handle};
    if (ioctl(fd, IOCTL_MODE_MAP_DUMB, &md))
        return -errno;
    uint32_t *px = mmap(NULL, cd.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)md.offset);
    if (px == MAP_FAILED)
        return -errno;
    for (uint64_t i = 0; i < cd.size / 4; i++)
        px[i] = fill;
    munmap(px, cd.size);
    struct drm_mode_fb_cmd fb = {.width = w, .height = h, .pitch = cd.pitch, .bpp = 32, .depth = 24,
                                 .handle = cd.handle};
    if (ioctl(fd, IOCTL_MODE_ADDFB, &fb))
        return -errno;
    *out = (struct dumb){cd.handle, fb.fb_id, cd.pitch, cd.size};
    return 0;
}

/* The cursor plane through the legacy cursor ioctl, as a desktop's pointer uses it: a 64x64
 * image with a hot spot (the driver's fenced TRANSFER_TO_HOST_2D, then UPDATE_CURSOR on the
 * cursor queue), a move (MOVE_CURSOR) and hiding it (UPDATE_CURSOR of resource 0). This checks
 * that the driver took each; with our backend the host checks, in its stats, that each was
 * written to QEMU's display socket. */
static void check_cursor(int fd, uint32_t crtc)
{
    struct drm_mode_create_dumb cd = {.height = 64, .width = 64, .bpp = 32};
    if (ioctl(fd, IOCTL_MODE_CREATE_DUMB, &cd)) {
        check("kms_cursor", 0, "cursor buffer: %s", strerror(errno));
        return;
    }
    struct drm_mode_map_dumb md = {.handle = cd.handle};
    uint32_t *px = MAP_FAILED;
    if (ioctl(fd, IOCTL_MODE_MAP_DUMB, &md) == 0)
        px = mmap(NULL, cd.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)md.offset);
    int rc = px == MAP_FAILED ? -errno : 0;
    const char *step = "map";
    if (rc == 0) {
        /* An opaque triangle on a transparent square. */
        for (uint32_t y = 0; y < 64; y++)
            for (uint32_t x = 0; x < 64; x++)
                px[y * (cd.pitch / 4) + x] = x <= y ? 0xffffffffu : 0;
        munmap(px, cd.size);
        step = "set";
        struct drm_mode_cursor2 set = {.flags = DRM_MODE_CURSOR_BO, .crtc_id = crtc, .width = 64,
                                       .height = 64, .handle = cd.handle, .hot_x = 3, .hot_y = 4};
        rc = ioctl(fd, IOCTL_MODE_CURSOR2, &set) ? -errno : 0;
    }
    if (rc == 0) {
        step = "move";
        struct drm_mode_cursor2 move = {.flags = DRM_MODE_CURSOR_MOVE, .crtc_id = crtc, .x = 100,
                                        .y = 50};
        rc = ioctl(fd, IOCTL_MODE_CURSOR2, &move) ? -errno : 0;
    }
    if (rc == 0) {
        step = "hide";
        struct drm_mode_cursor2 hide = {.flags = DRM_MODE_CURSOR_BO, .crtc_id = crtc};
        rc = ioctl(fd, IOCTL_MODE_CURSOR2, &hide) ? -errno : 0;
    }
    struct drm_mode_destroy_dumb destroy = {.handle = cd.handle};
    ioctl(fd, IOCTL_MODE_DESTROY_DUMB, &destroy);
    check("kms_cursor", rc == 0, "set 64x64 hot (3,4), move to (100,50), hide: %s%s%s",
          rc ? step : "ok", rc ? ": " : "", rc ? strerror(-rc) : "");
}

/* Modeset a dumb buffer, then a page flip with an event: its completion goes through the
 * driver's fenced RESOURCE_FLUSH. */
static void check_kms_flip(int fd)
{
    uint32_t crtcs[8], conns[8];
    struct drm_mode_card_res res = {0};
    if (ioctl(fd, IOCTL_MODE_GETRESOURCES, &res) == 0 && res.count_crtcs && res.count_connectors) {
        res.count_crtcs = res.count_crtcs > 8 ? 8 : res.count_crtcs;
        res.count_connectors = res.count_connectors > 8 ? 8 : res.count_connectors;
        res.count_fbs = res.count_encoders = 0;
        res.crtc_id_ptr = (uintptr_t)crtcs;
        res.connector_id_ptr = (uintptr_t)conns;
    }
    int rc = ioctl(fd, IOCTL_MODE_GETRESOURCES, &res);
    int ok = rc == 0 && res.count_crtcs > 0 && res.count_connectors > 0;
    check("kms_resources", ok, "%s crtcs=%u connectors=%u", rc ? strerror(errno) : "ok", res.count_crtcs,
          res.count_connectors);

    struct drm_mode_modeinfo modes[32];
    struct drm_mode_get_connector conn = {.connector_id = ok ? conns[0] : 0};
    rc = ok ? ioctl(fd, IOCTL_MODE_GETCONNECTOR, &conn) : -1;
    if (rc == 0) {
        conn.count_modes = conn.count_modes > 32 ? 32 : conn.count_modes;
        conn.count_props = conn.count_encoders = 0;
        conn.modes_ptr = (uintptr_t)modes;
        rc = ioctl(fd, IOCTL_MODE_GETCONNECTOR, &conn);
    }
    ok = rc == 0 && conn.connection == DRM_MODE_CONNECTED && conn.count_modes > 0;
    check("kms_connector_connected", ok, "connection=%u modes=%u first=%.32s", conn.connection,
          conn.count_modes, conn.count_modes ? modes[0].name : "-");
    if (!ok) {
        check("kms_modeset", 0, "no connected connector");
        check("kms_page_flip_event", 0, "no connected connector");
        check("kms_cursor", 0, "no connected connector");
        return;
    }
    struct drm_mode_modeinfo mode = modes[0];
    struct dumb a, b;
    rc = make_dumb(fd, mode.hdisplay, mode.vdisplay, 0x00ff0000, &a);
    if (rc == 0)
        rc = make_dumb(fd, mode.hdisplay, mode.vdisplay, 0x000000ff, &b);
    struct drm_mode_crtc set = {.set_connectors_ptr = (uintptr_t)&conns[0], .count_connectors = 1,
                                .crtc_id = crtcs[0], .fb_id = rc ? 0 : a.fb_id, .mode_valid = 1,
                                .mode = mode};
    if (rc == 0 && ioctl(fd, IOCTL_MODE_SETCRTC, &set))
        rc = -errno;
    check("kms_modeset", rc == 0, "%s %ux%u", rc ? strerror(-rc) : "ok", mode.hdisplay, mode.vdisplay);
    if (rc) {
        check("kms_page_flip_event", 0, "no modeset");
        check("kms_cursor", 0, "no modeset");
        return;
    }
    double t0 = now_ms();
    struct drm_mode_crtc_page_flip flip = {.crtc_id = crtcs[0], .fb_id = b.fb_id,
                                           .flags = DRM_MODE_PAGE_FLIP_EVENT, .user_data = 0x5eed};
    if (ioctl(fd, IOCTL_MODE_PAGE_FLIP, &flip)) {
        check("kms_page_flip_event", 0, "PAGE_FLIP: %s", strerror(errno));
        check("kms_cursor", 0, "no page flip");
        return;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    rc = poll(&pfd, 1, 10000);
    struct drm_event_vblank ev = {0};
    ssize_t n = rc > 0 ? read(fd, &ev, sizeof ev) : -1;
    ok = n >= (ssize_t)sizeof ev && ev.type == DRM_EVENT_FLIP_COMPLETE && ev.user_data == 0x5eed;
    check("kms_page_flip_event", ok, "%s after %.1f ms (type=%u)",
          rc == 0 ? "no event within 10 s" : (ok ? "flip complete" : "wrong event"), now_ms() - t0, ev.type);
    check_cursor(fd, crtcs[0]);
}

/* The driver's own fence bookkeeping (debugfs): every fence it emitted has been echoed. */
static void check_fences_retired(void)
{
    const char *path = "/sys/kernel/debug/dri/0/virtio-gpu-irq-fence";
    unsigned long long last = 0;
    long long emitted = -1;
    double t0 = now_ms();
    do {
        FILE *f = fopen(path, "r");
        if (!f) {
            check("fences_all_signalled", 0, "%s: %s", path, strerror(errno));
            return;
        }
        int got = fscanf(f, "fence %llu %lld", &last, &emitted);
        fclose(f);
        if (got == 2 && (long long)last == emitted && emitted > 0)
            break;
        usleep(50 * 1000);
    } while (now_ms() - t0 < 5000);
    check("fences_all_signalled", (long long)last == emitted && emitted > 0,
          "last signalled %llu, last emitted %lld", last, emitted);
}

static int drm_checks(void)
{
    int fd = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    check("drm_open_card0", fd >= 0, "%s", fd < 0 ? strerror(errno) : "ok");
    if (fd < 0) {
        const char *rest[] = {"virtgpu_resource_create", "virtgpu_create_fence_wait",
                              "virtgpu_transfer_fence_wait", "kms_resources", "kms_connector_connected",
                              "kms_modeset", "kms_page_flip_event", "kms_cursor"};
        for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
            check(rest[i], 0, "no /dev/dri/card0");
    } else {
        check_virtgpu_fences(fd);
        check_kms_flip(fd);
        close(fd);
    }
    check_fences_retired();
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "fb") == 0)
        return draw_fb();
    if (argc == 2 && strcmp(argv[1], "drm") == 0)
        return drm_checks();
    fprintf(stderr, "usage: display-check fb|drm\n");
    return 2;
}
