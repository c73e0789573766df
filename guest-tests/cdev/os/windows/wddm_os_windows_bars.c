/* Where function 0's BARs and interrupt are: the translated resource list that
 * DxgkCbGetDeviceInformation gives (CM_RESOURCE_LIST), matched to the BAR registers read
 * through DxgkCbReadDeviceSpace. The list has no BAR numbers, so each memory range is paired
 * with the BAR whose register holds its start address. That pairing assumes the bus address of
 * a memory BAR equals its CPU-physical address, which holds for PCI on x86/x64 hosts (no
 * address translation in the host bridge); a list entry no BAR claims is logged and ignored.
 * Also the mode 1 sibling BAR, taken from the capset's locator and checked. */

#include "wddm_os_windows_internal.h"

#define PCI_BAR0_OFFSET 0x10u
#define PCI_BAR_IO 0x1u
#define PCI_BAR_TYPE_MASK 0x6u
#define PCI_BAR_TYPE_64 0x4u
#define PCI_BAR_MEM_ADDRESS_MASK (~(ULONG64)0xF)

/* The length of a memory descriptor, CmResourceTypeMemoryLarge decoded (its length is stored
 * shifted by 8, 16 or 32 bits, as the flags say). 0 for a malformed one. */
static ULONG64 memory_length(const CM_PARTIAL_RESOURCE_DESCRIPTOR *d)
{
    if (d->Type == CmResourceTypeMemory) {
        return d->u.Memory.Length;
    }
    switch (d->Flags & (CM_RESOURCE_MEMORY_LARGE_40 | CM_RESOURCE_MEMORY_LARGE_48 |
                        CM_RESOURCE_MEMORY_LARGE_64)) {
    case CM_RESOURCE_MEMORY_LARGE_40:
        return (ULONG64)d->u.Memory40.Length40 << 8;
    case CM_RESOURCE_MEMORY_LARGE_48:
        return (ULONG64)d->u.Memory48.Length48 << 16;
    case CM_RESOURCE_MEMORY_LARGE_64:
        return (ULONG64)d->u.Memory64.Length64 << 32;
    default:
        return 0;
    }
}

static NTSTATUS read_config_dword(const wddm_win_layer *layer, ULONG offset, ULONG *value)
{
    ULONG done = 0;
    NTSTATUS status = layer->config.read_device_space(
        layer->config.device_handle, PCI_WHICHSPACE_CONFIG, value, offset, sizeof(*value), &done);
    if (NT_SUCCESS(status) && done != sizeof(*value)) {
        status = STATUS_DEVICE_DATA_ERROR;
    }
    return status;
}

/* Calls `visit` for every partial descriptor of the list, staying inside `limit` bytes when
 * the caller gave a size. A DeviceSpecific descriptor's trailing data is skipped. */
typedef NTSTATUS (*descriptor_visit)(wddm_win_layer *layer,
                                     const CM_PARTIAL_RESOURCE_DESCRIPTOR *descriptor,
                                     ULONG index);

static NTSTATUS walk_resources(wddm_win_layer *layer, descriptor_visit visit)
{
    const UCHAR *base = (const UCHAR *)layer->config.translated_resources;
    const UCHAR *end = layer->config.translated_resources_size != 0
                           ? base + layer->config.translated_resources_size
                           : NULL;
    const CM_RESOURCE_LIST *list = layer->config.translated_resources;
    const UCHAR *p = (const UCHAR *)&list->List[0];
    ULONG index = 0;

    if (end != NULL && (ULONG_PTR)(end - base) < FIELD_OFFSET(CM_RESOURCE_LIST, List)) {
        return STATUS_INVALID_PARAMETER;
    }
    for (ULONG full = 0; full < list->Count; full++) {
        const CM_FULL_RESOURCE_DESCRIPTOR *f = (const CM_FULL_RESOURCE_DESCRIPTOR *)p;
        const UCHAR *partials = (const UCHAR *)&f->PartialResourceList.PartialDescriptors[0];
        if (end != NULL && partials > end) {
            return STATUS_INVALID_PARAMETER;
        }
        ULONG count = f->PartialResourceList.Count;
        p = partials;
        for (ULONG i = 0; i < count; i++) {
            const CM_PARTIAL_RESOURCE_DESCRIPTOR *d = (const CM_PARTIAL_RESOURCE_DESCRIPTOR *)p;
            if (end != NULL && (ULONG_PTR)(end - p) < sizeof(*d)) {
                return STATUS_INVALID_PARAMETER;
            }
            NTSTATUS status = visit(layer, d, index++);
            if (!NT_SUCCESS(status)) {
                return status;
            }
            p += sizeof(*d);
            if (d->Type == CmResourceTypeDeviceSpecific) {
                ULONG extra = d->u.DeviceSpecificData.DataSize;
                if (end != NULL && (ULONG_PTR)(end - p) < extra) {
                    return STATUS_INVALID_PARAMETER;
                }
                p += extra;
            }
        }
    }
    return STATUS_SUCCESS;
}

/* BAR registers of function 0, decoded: base address per BAR, 0 for I/O, unused or the upper
 * half of a 64-bit BAR. */
static NTSTATUS read_bar_registers(wddm_win_layer *layer, ULONG64 bases[6])
{
    for (ULONG bar = 0; bar < 6; bar++) {
        bases[bar] = 0;
    }
    for (ULONG bar = 0; bar < 6; bar++) {
        ULONG low = 0;
        NTSTATUS status = read_config_dword(layer, PCI_BAR0_OFFSET + 4 * bar, &low);
        if (!NT_SUCCESS(status)) {
            return status;
        }
        if (low & PCI_BAR_IO) {
            continue;
        }
        ULONG64 address = low & PCI_BAR_MEM_ADDRESS_MASK;
        if ((low & PCI_BAR_TYPE_MASK) == PCI_BAR_TYPE_64) {
            ULONG high = 0;
            if (bar == 5) {
                return STATUS_DEVICE_CONFIGURATION_ERROR; /* a 64-bit BAR needs two registers */
            }
            status = read_config_dword(layer, PCI_BAR0_OFFSET + 4 * (bar + 1), &high);
            if (!NT_SUCCESS(status)) {
                return status;
            }
            address |= (ULONG64)high << 32;
            bases[bar] = address;
            bar++; /* the upper half */
            continue;
        }
        bases[bar] = address;
    }
    return STATUS_SUCCESS;
}

static NTSTATUS visit_resource(wddm_win_layer *layer, const CM_PARTIAL_RESOURCE_DESCRIPTOR *d,
                               ULONG index)
{
    (void)index;
    if (d->Type == CmResourceTypeInterrupt) {
        layer->interrupt_present = TRUE;
        if (d->Flags & CM_RESOURCE_INTERRUPT_MESSAGE) {
            layer->interrupt_message_signaled = TRUE;
        }
        layer->interrupt_resources++;
        return STATUS_SUCCESS;
    }
    if (d->Type != CmResourceTypeMemory && d->Type != CmResourceTypeMemoryLarge) {
        return STATUS_SUCCESS;
    }
    ULONG64 start = (ULONG64)d->u.Memory.Start.QuadPart;
    ULONG64 length = memory_length(d);
    if (length == 0 || start + length < start) {
        wddm_win_log(WDDM_OS_LOG_WARN, "malformed memory resource ignored", start, length);
        return STATUS_SUCCESS;
    }
    for (ULONG bar = 0; bar < 6; bar++) {
        /* `bars[bar].address` holds the register's base until a range claims it. */
        if (!layer->bars[bar].present && layer->bars[bar].address == start && start != 0) {
            layer->bars[bar].size = length;
            layer->bars[bar].present = TRUE;
            return STATUS_SUCCESS;
        }
    }
    wddm_win_log(WDDM_OS_LOG_WARN, "memory resource matches no BAR register", start, length);
    return STATUS_SUCCESS;
}

NTSTATUS wddm_win_find_resources(wddm_win_layer *layer)
{
    ULONG64 bases[6];
    NTSTATUS status = read_bar_registers(layer, bases);
    if (!NT_SUCCESS(status)) {
        return status;
    }
    for (ULONG bar = 0; bar < 6; bar++) {
        layer->bars[bar].address = bases[bar];
        layer->bars[bar].size = 0;
        layer->bars[bar].present = FALSE;
    }
    status = walk_resources(layer, visit_resource);
    if (!NT_SUCCESS(status)) {
        return status;
    }
    for (ULONG bar = 0; bar < 6; bar++) {
        if (!layer->bars[bar].present) {
            layer->bars[bar].address = 0; /* a register value Windows did not hand us */
        } else {
            wddm_win_log(WDDM_OS_LOG_INFO, "BAR", bar, layer->bars[bar].address);
        }
    }
    return STATUS_SUCCESS;
}

static BOOLEAN ranges_overlap(ULONG64 a, ULONG64 a_size, ULONG64 b, ULONG64 b_size)
{
    return a < b + b_size && b < a + a_size;
}

/* TRUE when [address, address + size) touches RAM Windows manages: mapping RAM uncached next
 * to its cached mapping is a cache-attribute conflict, never something to risk on the word of
 * the device. */
static BOOLEAN overlaps_ram(ULONG64 address, ULONG64 size, BOOLEAN *known)
{
    PPHYSICAL_MEMORY_RANGE ranges = MmGetPhysicalMemoryRanges();
    BOOLEAN hit = FALSE;
    *known = ranges != NULL;
    if (ranges == NULL) {
        return FALSE;
    }
    for (PPHYSICAL_MEMORY_RANGE r = ranges; r->BaseAddress.QuadPart != 0 || r->NumberOfBytes.QuadPart != 0;
         r++) {
        if (ranges_overlap(address, size, (ULONG64)r->BaseAddress.QuadPart,
                           (ULONG64)r->NumberOfBytes.QuadPart)) {
            hit = TRUE;
            break;
        }
    }
    ExFreePool(ranges);
    return hit;
}

NTSTATUS wddm_win_layer_adopt_locator(wddm_win_layer *layer, const WddmGpuVramBar *locator)
{
    ULONG64 address = locator->guest_physical_address;
    ULONG64 size = locator->size;

    if (locator->state != WDDM_GPU_BAR_STATE_KNOWN || size == 0 || address == 0 ||
        address + size < address || locator->bar_index > 5) {
        return STATUS_INVALID_PARAMETER;
    }
    if (locator->mode == WDDM_GPU_BAR_MODE_SHMEM) {
        /* Mode 2: the VRAM is in one of our own BARs; nothing to adopt, only to check. */
        const wddm_win_bar *bar = &layer->bars[locator->bar_index];
        if (locator->pci_function != 0 || !bar->present || address < bar->address ||
            address + size > bar->address + bar->size) {
            return STATUS_INVALID_PARAMETER;
        }
        return STATUS_SUCCESS;
    }
    if (locator->mode != WDDM_GPU_BAR_MODE_IVSHMEM || locator->pci_function == 0 ||
        locator->pci_function > 7 || (address & (PAGE_SIZE - 1)) != 0 ||
        (size & (PAGE_SIZE - 1)) != 0) {
        return STATUS_INVALID_PARAMETER;
    }
    for (ULONG bar = 0; bar < 6; bar++) {
        if (layer->bars[bar].present &&
            ranges_overlap(address, size, layer->bars[bar].address, layer->bars[bar].size)) {
            return STATUS_INVALID_PARAMETER;
        }
    }
    BOOLEAN known = FALSE;
    if (overlaps_ram(address, size, &known) || !known) {
        wddm_win_log(WDDM_OS_LOG_ERROR, "locator range refused (RAM or unknown)", address, size);
        return STATUS_INVALID_PARAMETER;
    }
    layer->sibling.address = address;
    layer->sibling.size = size;
    layer->sibling.present = TRUE;
    layer->sibling_function = locator->pci_function;
    layer->sibling_bar = locator->bar_index;
    wddm_win_log(WDDM_OS_LOG_WARN, "mode 1: mapping the sibling function's BAR (not ours)",
             address, size);
    return STATUS_SUCCESS;
}
