/* virtio-pci modern device initialisation (virtio 1.x, 3.1.1 and 4.1.4): the register blocks
 * are found through the vendor capabilities in configuration space; every capability is
 * checked (list loops, BAR numbers, lengths) before a block is mapped. */

#include "util.h"

#define PCI_VENDOR_ID 0x00
#define PCI_DEVICE_ID 0x02
#define PCI_COMMAND 0x04
#define PCI_STATUS 0x06
#define PCI_CAP_PTR 0x34
#define PCI_COMMAND_MEMORY 0x2u
#define PCI_COMMAND_MASTER 0x4u
#define PCI_STATUS_CAP_LIST 0x10u

/* The virtio-pci identity, capabilities, common configuration registers and status bits are
 * wddm_gpu.h's (VIRTIO_PCI_*, VIRTIO_STATUS_*, WDDM_GPU_PCI_DEVICE_ID); the PCI header
 * registers above are the PCI specification's. */

typedef struct vcap {
    bool found;
    uint32_t bar, offset, length, extra; /* extra: notify multiplier */
} vcap;

static wddm_result cfg(wddm_dev *dev, uint32_t off, uint32_t width, uint32_t *v)
{
    return dev->os.config_read(dev->os.ctx, off, width, v) == 0 ? WDDM_OK : WDDM_E_OS;
}

/* Walks the capability list: the first common/notify/ISR/device capability of each type and
 * shared memory region 0. */
static wddm_result find_caps(wddm_dev *dev, vcap caps[5])
{
    uint32_t status, ptr;
    if (cfg(dev, PCI_STATUS, 2, &status) || cfg(dev, PCI_CAP_PTR, 1, &ptr))
        return WDDM_E_OS;
    if (!(status & PCI_STATUS_CAP_LIST))
        return wddm_broken(dev, "config space has no capability list", status, 0);
    ptr &= 0xfc;
    for (int guard = 0; ptr != 0; guard++) {
        uint32_t id, next, len, type, bar, off, length;
        if (guard >= 48 || ptr < 0x40 || ptr > 0xfc)
            return wddm_broken(dev, "capability list broken at", ptr, 0);
        if (cfg(dev, ptr, 1, &id) || cfg(dev, ptr + 1, 1, &next))
            return WDDM_E_OS;
        if (id == VIRTIO_PCI_CAP_ID_VENDOR) {
            if (ptr + VIRTIO_PCI_CAP_LEN > 0x100 || cfg(dev, ptr + 2, 1, &len) ||
                cfg(dev, ptr + 3, 1, &type) ||
                cfg(dev, ptr + 4, 1, &bar) || cfg(dev, ptr + 8, 4, &off) ||
                cfg(dev, ptr + 12, 4, &length))
                return WDDM_E_OS;
            if (len < VIRTIO_PCI_CAP_LEN)
                return wddm_broken(dev, "virtio capability too short at", ptr, len);
            if (bar <= VIRTIO_PCI_CAP_MAX_BAR && type >= VIRTIO_PCI_CAP_COMMON_CFG &&
                type <= VIRTIO_PCI_CAP_DEVICE_CFG && !caps[type].found) {
                vcap *c = &caps[type];
                c->found = true;
                c->bar = bar;
                c->offset = off;
                c->length = length;
                if (type == VIRTIO_PCI_CAP_NOTIFY_CFG) {
                    if (len < VIRTIO_PCI_NOTIFY_CAP_LEN || ptr + VIRTIO_PCI_NOTIFY_CAP_LEN > 0x100 ||
                        cfg(dev, ptr + 16, 4, &c->extra))
                        return wddm_broken(dev, "notify capability too short at", ptr, len);
                }
            } else if (bar <= VIRTIO_PCI_CAP_MAX_BAR && type == VIRTIO_PCI_CAP_SHARED_MEMORY_CFG &&
                       !dev->has_shm) {
                uint32_t shmid, off_hi, len_hi;
                if (len < VIRTIO_PCI_CAP64_LEN || ptr + VIRTIO_PCI_CAP64_LEN > 0x100)
                    return wddm_broken(dev, "shared memory capability too short at", ptr, len);
                if (cfg(dev, ptr + 5, 1, &shmid) || cfg(dev, ptr + 16, 4, &off_hi) ||
                    cfg(dev, ptr + 20, 4, &len_hi))
                    return WDDM_E_OS;
                if (shmid == WDDM_GPU_VRAM_SHMID) {
                    dev->has_shm = true;
                    dev->shm_bar = bar;
                    dev->shm_offset = (uint64_t)off_hi << 32 | off;
                    dev->shm_length = (uint64_t)len_hi << 32 | length;
                }
            }
        }
        ptr = next & 0xfc;
    }
    for (int t = VIRTIO_PCI_CAP_COMMON_CFG; t <= VIRTIO_PCI_CAP_DEVICE_CFG; t++)
        if (!caps[t].found)
            return wddm_broken(dev, "virtio capability type missing", (uint64_t)t, 0);
    return WDDM_OK;
}

static volatile uint8_t *map_block(wddm_dev *dev, const vcap *c, uint32_t min_len)
{
    if (c->length < min_len) {
        wddm_broken(dev, "virtio block too short", c->length, min_len);
        return NULL;
    }
    volatile void *va = dev->os.bar_map(dev->os.ctx, 0, c->bar, c->offset, c->length);
    if (!va)
        wddm_log(dev, WDDM_OS_LOG_ERROR, "bar_map failed for BAR", c->bar, c->offset);
    return va;
}

static uint8_t status(wddm_dev *dev) { return mmio_r8(dev->common, VIRTIO_PCI_COMMON_DEVICE_STATUS); }

static void add_status(wddm_dev *dev, uint8_t bits)
{
    mmio_w8(dev->common, VIRTIO_PCI_COMMON_DEVICE_STATUS, (uint8_t)(status(dev) | bits));
}

static wddm_result reset_function(wddm_dev *dev)
{
    mmio_w8(dev->common, VIRTIO_PCI_COMMON_DEVICE_STATUS, 0);
    uint64_t start = dev->os.now_us(dev->os.ctx);
    while (status(dev) != 0) {
        if (dev->os.now_us(dev->os.ctx) - start > 1000000)
            return wddm_broken(dev, "device did not finish reset, status", status(dev), 0);
        dev->os.stall_us(dev->os.ctx, 1000);
    }
    return WDDM_OK;
}

static wddm_result negotiate(wddm_dev *dev)
{
    wddm_result r = reset_function(dev);
    if (r)
        return r;
    add_status(dev, VIRTIO_STATUS_ACKNOWLEDGE);
    add_status(dev, VIRTIO_STATUS_DRIVER);
    uint64_t features = 0;
    for (uint32_t half = 0; half < 2; half++) {
        mmio_w32(dev->common, VIRTIO_PCI_COMMON_DEVICE_FEATURE_SELECT, half);
        features |= (uint64_t)mmio_r32(dev->common, VIRTIO_PCI_COMMON_DEVICE_FEATURE) << (32 * half);
    }
    dev->device_features = features;
    if (!(features & WDDM_GPU_REQUIRED_FEATURES)) {
        add_status(dev, VIRTIO_STATUS_FAILED);
        return wddm_broken(dev, "device lacks VIRTIO_F_VERSION_1, features", features, 0);
    }
    for (uint32_t half = 0; half < 2; half++) {
        mmio_w32(dev->common, VIRTIO_PCI_COMMON_DRIVER_FEATURE_SELECT, half);
        mmio_w32(dev->common, VIRTIO_PCI_COMMON_DRIVER_FEATURE, (uint32_t)(WDDM_GPU_REQUIRED_FEATURES >> (32 * half)));
    }
    add_status(dev, VIRTIO_STATUS_FEATURES_OK);
    if (!(status(dev) & VIRTIO_STATUS_FEATURES_OK)) {
        add_status(dev, VIRTIO_STATUS_FAILED);
        return wddm_broken(dev, "device cleared FEATURES_OK", status(dev), 0);
    }
    return WDDM_OK;
}

static wddm_result setup_queue(wddm_dev *dev, const wddm_dev_config *config)
{
    uint16_t vec = config->use_msix ? config->config_vector : VIRTIO_MSI_NO_VECTOR;
    mmio_w16(dev->common, VIRTIO_PCI_COMMON_CONFIG_MSIX_VECTOR, vec);
    if (mmio_r16(dev->common, VIRTIO_PCI_COMMON_CONFIG_MSIX_VECTOR) != vec)
        return wddm_broken(dev, "config MSI-X vector refused", vec, 0);
    if (mmio_r16(dev->common, VIRTIO_PCI_COMMON_NUM_QUEUES) < 1)
        return wddm_broken(dev, "device has no queues", 0, 0);
    mmio_w16(dev->common, VIRTIO_PCI_COMMON_QUEUE_SELECT, 0);
    uint16_t max = mmio_r16(dev->common, VIRTIO_PCI_COMMON_QUEUE_SIZE);
    if (max == 0)
        return wddm_broken(dev, "control queue unavailable (size 0)", 0, 0);
    uint32_t want = config->queue_size ? config->queue_size : WDDM_VQ_MAX_SIZE;
    uint16_t size = WDDM_VQ_MAX_SIZE;
    while (size > 2 && (size > max || size > want))
        size >>= 1;
    if (size > max)
        return wddm_broken(dev, "control queue too small", max, 0);
    wddm_result r = wddm_vq_init(&dev->ctrl, &dev->os, size);
    if (r)
        return r;
    uint32_t noff = mmio_r16(dev->common, VIRTIO_PCI_COMMON_QUEUE_NOTIFY_OFF);
    uint64_t at = (uint64_t)noff * dev->notify_off_multiplier;
    if (at + 2 > dev->notify_len)
        return wddm_broken(dev, "queue notify offset outside the notify block", at,
                           dev->notify_len);
    dev->ctrl.notify = (volatile uint16_t *)(dev->notify_base + at);
    dev->ctrl.queue_index = 0;
    mmio_w16(dev->common, VIRTIO_PCI_COMMON_QUEUE_SIZE, size);
    mmio_w64(dev->common, VIRTIO_PCI_COMMON_QUEUE_DESC, dev->ctrl.ring.bus);
    mmio_w64(dev->common, VIRTIO_PCI_COMMON_QUEUE_DRIVER, dev->ctrl.ring.bus + WDDM_VQ_AVAIL_OFFSET);
    mmio_w64(dev->common, VIRTIO_PCI_COMMON_QUEUE_DEVICE, dev->ctrl.ring.bus + WDDM_VQ_USED_OFFSET);
    uint16_t qvec = config->use_msix ? config->queue_vector : VIRTIO_MSI_NO_VECTOR;
    mmio_w16(dev->common, VIRTIO_PCI_COMMON_QUEUE_MSIX_VECTOR, qvec);
    if (mmio_r16(dev->common, VIRTIO_PCI_COMMON_QUEUE_MSIX_VECTOR) != qvec)
        return wddm_broken(dev, "queue MSI-X vector refused", qvec, 0);
    mmio_w16(dev->common, VIRTIO_PCI_COMMON_QUEUE_ENABLE, 1);
    return WDDM_OK;
}

static void unmap_blocks(wddm_dev *dev, const vcap caps[5])
{
    volatile uint8_t *blocks[5] = {0, dev->common, dev->notify_base, dev->isr, dev->device_cfg};
    for (int t = VIRTIO_PCI_CAP_COMMON_CFG; t <= VIRTIO_PCI_CAP_DEVICE_CFG; t++)
        if (blocks[t])
            dev->os.bar_unmap(dev->os.ctx, blocks[t], caps[t].length);
}

wddm_result wddm_dev_init(wddm_dev *dev, const wddm_os *os, const wddm_dev_config *config)
{
    static const wddm_dev_config defaults = {0};
    if (!dev || !os || !os->dma_alloc || !os->dma_free || !os->bar_map || !os->bar_unmap ||
        !os->config_read || !os->config_write || !os->lock_create || !os->lock_acquire ||
        !os->lock_release || !os->lock_destroy || !os->stall_us || !os->now_us ||
        !os->memory_barrier || !os->bar_info)
        return WDDM_E_INVALID;
    if (!config)
        config = &defaults;
    wddm_zero(dev, sizeof(*dev));
    dev->os = *os;
    dev->timeout_ms = config->timeout_ms ? config->timeout_ms : 5000;

    uint32_t vendor, device, command;
    if (cfg(dev, PCI_VENDOR_ID, 2, &vendor) || cfg(dev, PCI_DEVICE_ID, 2, &device))
        return WDDM_E_OS;
    if (vendor != VIRTIO_PCI_VENDOR_ID || device != WDDM_GPU_PCI_DEVICE_ID)
        return wddm_broken(dev, "not a virtio-gpu function (vendor, device)", vendor, device);
    if (cfg(dev, PCI_COMMAND, 2, &command))
        return WDDM_E_OS;
    command |= PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
    if (dev->os.config_write(dev->os.ctx, PCI_COMMAND, 2, command) != 0)
        return WDDM_E_OS;

    vcap caps[5] = {{0}};
    wddm_result r = find_caps(dev, caps);
    if (r)
        return r;
    dev->lock = dev->os.lock_create(dev->os.ctx);
    if (!dev->lock)
        return WDDM_E_OS;
    dev->common = map_block(dev, &caps[VIRTIO_PCI_CAP_COMMON_CFG], VIRTIO_PCI_COMMON_CFG_LEN);
    dev->notify_base = map_block(dev, &caps[VIRTIO_PCI_CAP_NOTIFY_CFG], 2);
    dev->isr = map_block(dev, &caps[VIRTIO_PCI_CAP_ISR_CFG], 1);
    dev->device_cfg = map_block(dev, &caps[VIRTIO_PCI_CAP_DEVICE_CFG], sizeof(WddmGpuConfig));
    dev->notify_len = caps[VIRTIO_PCI_CAP_NOTIFY_CFG].length;
    dev->notify_off_multiplier = caps[VIRTIO_PCI_CAP_NOTIFY_CFG].extra;
    /* unmap lengths, by block type */
    dev->bar_len[VIRTIO_PCI_CAP_COMMON_CFG] = caps[VIRTIO_PCI_CAP_COMMON_CFG].length;
    dev->bar_len[VIRTIO_PCI_CAP_NOTIFY_CFG] = caps[VIRTIO_PCI_CAP_NOTIFY_CFG].length;
    dev->bar_len[VIRTIO_PCI_CAP_ISR_CFG] = caps[VIRTIO_PCI_CAP_ISR_CFG].length;
    dev->bar_len[VIRTIO_PCI_CAP_DEVICE_CFG] = caps[VIRTIO_PCI_CAP_DEVICE_CFG].length;
    if (!dev->common || !dev->notify_base || !dev->isr || !dev->device_cfg) {
        r = dev->broken ? WDDM_E_DEVICE : WDDM_E_OS;
        goto fail;
    }
    if ((r = negotiate(dev)) || (r = setup_queue(dev, config)) || (r = wddm_ctrl_init(dev)))
        goto fail;
    add_status(dev, VIRTIO_STATUS_DRIVER_OK);
    uint8_t st = status(dev);
    if (st & (VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED) ||
        !(st & VIRTIO_STATUS_DRIVER_OK)) {
        r = wddm_broken(dev, "device status after DRIVER_OK", st, 0);
        goto fail;
    }
    if (mmio_r32(dev->device_cfg, offsetof(WddmGpuConfig, num_capsets)) < 1) {
        r = wddm_broken(dev, "config space num_capsets is 0", 0, 0);
        goto fail;
    }
    dev->initialised = true;
    if ((r = wddm_capset_read(dev))) {
        dev->initialised = false;
        goto fail;
    }
    return WDDM_OK;
fail:
    wddm_dev_teardown(dev);
    return r;
}

void wddm_dev_teardown(wddm_dev *dev)
{
    if (!dev || !dev->lock)
        return;
    if (dev->common)
        mmio_w8(dev->common, VIRTIO_PCI_COMMON_DEVICE_STATUS, 0); /* the device stops using our memory */
    if (dev->common)
        (void)reset_function(dev);
    const wddm_os *os = &dev->os;
    wddm_vq_free(&dev->ctrl, os);
    if (dev->slot_mem.cpu)
        os->dma_free(os->ctx, &dev->slot_mem);
    if (dev->capset_mem.cpu)
        os->dma_free(os->ctx, &dev->capset_mem);
    if (dev->status_mem.cpu)
        os->dma_free(os->ctx, &dev->status_mem);
    vcap caps[5] = {{0}};
    for (int t = VIRTIO_PCI_CAP_COMMON_CFG; t <= VIRTIO_PCI_CAP_DEVICE_CFG; t++)
        caps[t].length = (uint32_t)dev->bar_len[t];
    unmap_blocks(dev, caps);
    os->lock_destroy(os->ctx, dev->lock);
    dev->lock = NULL;
    dev->initialised = false;
}

const wddm_layout *wddm_dev_layout(const wddm_dev *dev)
{
    return dev && dev->initialised ? &dev->layout : NULL;
}

wddm_result wddm_dev_vram_location(const wddm_dev *dev, uint32_t *function, uint32_t *bar,
                                   uint64_t *offset)
{
    if (!dev || !dev->initialised)
        return WDDM_E_STATE;
    const WddmGpuVramBar *vb = &dev->layout.header.vram_bar;
    *function = vb->pci_function;
    *bar = vb->bar_index;
    *offset = 0;
    if (vb->mode == WDDM_GPU_BAR_MODE_SHMEM) {
        /* The VRAM is shared memory region 0 of the GPU function: it must be in the BAR the
         * locator names and have the VRAM's size. */
        if (vb->pci_function != 0 || !dev->has_shm || dev->shm_bar != vb->bar_index ||
            dev->shm_length != vb->size)
            return WDDM_E_DEVICE;
        *offset = dev->shm_offset;
    }
    return WDDM_OK;
}

volatile void *wddm_dev_map_segment(wddm_dev *dev, uint32_t segment_id, uint64_t offset,
                                    uint64_t length)
{
    const wddm_segment *s = wddm_layout_segment(wddm_dev_layout(dev), segment_id);
    uint32_t function, bar;
    uint64_t region, end, bar_addr, bar_size, at;
    if (!s || s->desc.bar_offset == WDDM_GPU_NO_BAR_OFFSET || length == 0 ||
        !wddm_add(offset, length, &end) || end > s->desc.size ||
        wddm_dev_vram_location(dev, &function, &bar, &region) != WDDM_OK)
        return NULL;
    if (dev->os.bar_info(dev->os.ctx, function, bar, &bar_addr, &bar_size) != 0)
        return NULL;
    if (!wddm_add(region, s->desc.bar_offset, &at) || !wddm_add(at, offset, &at) ||
        !wddm_add(at, length, &end) || end > bar_size)
        return NULL;
    return dev->os.bar_map(dev->os.ctx, function, bar, at, length);
}
