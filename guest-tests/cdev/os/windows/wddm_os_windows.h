/* The Windows kernel-mode OS layer of the C device library: fills the wddm_os table
 * (wddm_gpu_os.h) with kernel calls for a WDDM KMD. docs/windows.md explains where each input
 * comes from (DxgkDdiStartDevice) and the two VRAM BAR modes.
 *
 * Inputs the KMD hands over at DxgkDdiStartDevice:
 *   - DXGKRNL_INTERFACE.DeviceHandle, .DxgkCbReadDeviceSpace and .DxgkCbWriteDeviceSpace: the
 *     only config-space path a display miniport has. d3dkmddi.h/dispmprt.h are not in
 *     mingw-w64, so the layer takes them as function pointers of the documented signature;
 *   - DXGK_DEVICE_INFO.TranslatedResourceList (DxgkCbGetDeviceInformation): this function's
 *     BARs and interrupt, as Windows assigned them.
 *
 * IRQL: init, bar_map, config access and DMA allocation are PASSIVE_LEVEL; the lock, barrier,
 * stall, clock, log and interrupt_ack callbacks run at any IRQL up to DISPATCH_LEVEL, and
 * interrupt_ack also in the ISR (DIRQL). */

#ifndef WDDM_OS_WINDOWS_H
#define WDDM_OS_WINDOWS_H

/* The DDK's own header; with mingw-w64 its ddk/ folder must be on the include path (ntddk.h
 * includes <wdm.h>), which the build script adds. */
#include <ntddk.h>

#include "wddm_gpu.h"
#include "wddm_gpu_os.h"

/* DXGKCB_READ_DEVICE_SPACE and DXGKCB_WRITE_DEVICE_SPACE (dispmprt.h), same parameters:
 * NTSTATUS (HANDLE DeviceHandle, ULONG DataType, PVOID Buffer, ULONG Offset, ULONG Length,
 * PULONG BytesRead/BytesWritten). The layer passes DataType = DXGK_WHICHSPACE_CONFIG, which
 * dispmprt.h defines as PCI_WHICHSPACE_CONFIG (0). */
typedef NTSTATUS(NTAPI *wddm_win_device_space_fn)(HANDLE DeviceHandle, ULONG DataType,
                                                    PVOID Buffer, ULONG Offset, ULONG Length,
                                                    PULONG BytesDone);

typedef struct wddm_win_config {
    HANDLE device_handle;                      /* DXGKRNL_INTERFACE.DeviceHandle */
    wddm_win_device_space_fn read_device_space;  /* DXGKRNL_INTERFACE.DxgkCbReadDeviceSpace */
    wddm_win_device_space_fn write_device_space; /* DXGKRNL_INTERFACE.DxgkCbWriteDeviceSpace */
    /* DXGK_DEVICE_INFO.TranslatedResourceList; read during init only (nothing kept). */
    const CM_RESOURCE_LIST *translated_resources;
    /* Bytes the resource list may span (walks stop there); 0 = trust its counts. */
    ULONG translated_resources_size;
} wddm_win_config;

/* A memory BAR: CPU-physical (translated) address and length. */
typedef struct wddm_win_bar {
    ULONG64 address;
    ULONG64 size;
    BOOLEAN present;
} wddm_win_bar;

typedef struct wddm_win_layer {
    wddm_win_config config;
    /* Function 0's BARs, the resource list's memory ranges matched to the BAR registers. */
    wddm_win_bar bars[6];
    /* The interrupt resources: message-signalled (CM_RESOURCE_INTERRUPT_MESSAGE on any of them)
     * or line-based, and how many CmResourceTypeInterrupt entries the list has. */
    BOOLEAN interrupt_present;
    BOOLEAN interrupt_message_signaled;
    ULONG interrupt_resources;
    /* Mode 1 only: the sibling function's VRAM BAR, taken from the capset's locator by
     * wddm_win_layer_adopt_locator. Windows assigned it to another device node. */
    wddm_win_bar sibling;
    ULONG sibling_function;
    ULONG sibling_bar;
    /* ISR status bits seen by interrupt_ack and not yet taken by the DPC. */
    volatile LONG pending_isr;
    /* MmMapIoSpaceEx when the kernel has it (Windows 10+), else NULL: MmMapIoSpace. */
    PVOID(NTAPI *map_io_space_ex)(PHYSICAL_ADDRESS, SIZE_T, ULONG);
} wddm_win_layer;

/* Reads the resource list and the BAR registers, then fills `os` (ctx = layer). The layer must
 * stay at the same address while the library uses `os`. PASSIVE_LEVEL.
 * STATUS_INVALID_PARAMETER for a missing callback or list, STATUS_DEVICE_CONFIGURATION_ERROR
 * when the list and the BAR registers disagree in a way the layer refuses. */
NTSTATUS wddm_win_layer_init(wddm_win_layer *layer, const wddm_win_config *config,
                             wddm_os *os);

/* Mode 1 (ivshmem sibling): accepts the capset's locator (`WddmGpuCapsHeader.vram_bar`) as the
 * sibling function's BAR so bar_map/bar_info can reach it. Refused (STATUS_INVALID_PARAMETER)
 * unless the locator is mode 1, known, on a function other than 0, page aligned, and its range
 * overlaps neither RAM (MmGetPhysicalMemoryRanges) nor function 0's BARs. Mode 2 locators are
 * accepted only when they name a function-0 BAR of the resource list with room for `size`.
 * PASSIVE_LEVEL. Windows gives no notice when the sibling is stopped or moved: see
 * docs/windows.md, mode 1 risks. */
NTSTATUS wddm_win_layer_adopt_locator(wddm_win_layer *layer, const WddmGpuVramBar *locator);

/* The ISR status bits interrupt_ack recorded since the last call (the DPC's share). */
ULONG wddm_win_layer_take_isr(wddm_win_layer *layer);

#endif /* WDDM_OS_WINDOWS_H */
