/* A sample of what a WDDM KMD does with the library and the Windows layer, linked into a
 * kernel-mode image so every kernel import they use is resolved against ntoskrnl.exe/hal.dll.
 * It is not a display driver: DxgkInitialize lives in displib (the WDK), which mingw-w64 lacks,
 * so DriverEntry only logs and fails (the image unloads). The functions below are what the
 * real DDIs would call; docs/windows.md walks through them in order. */

#include "wddm_os_windows.h"
#include "wddm_gpu_dev.h"

typedef struct sample_adapter {
    wddm_win_layer layer; /* must not move while the library runs on `os` */
    wddm_os os;
    wddm_dev dev;
    wddm_gpummu gpummu; /* GPU virtual addressing, when the device offers it */
    BOOLEAN has_gpummu;
} sample_adapter;

/* DxgkDdiStartDevice: the inputs come from DXGKRNL_INTERFACE and DxgkCbGetDeviceInformation. */
NTSTATUS sample_start_device(sample_adapter *adapter, HANDLE device_handle,
                             wddm_win_device_space_fn read_device_space,
                             wddm_win_device_space_fn write_device_space,
                             const CM_RESOURCE_LIST *translated_resources);
NTSTATUS sample_start_device(sample_adapter *adapter, HANDLE device_handle,
                             wddm_win_device_space_fn read_device_space,
                             wddm_win_device_space_fn write_device_space,
                             const CM_RESOURCE_LIST *translated_resources)
{
    wddm_win_config config = {
        .device_handle = device_handle,
        .read_device_space = read_device_space,
        .write_device_space = write_device_space,
        .translated_resources = translated_resources,
    };
    NTSTATUS status = wddm_win_layer_init(&adapter->layer, &config, &adapter->os);
    if (!NT_SUCCESS(status)) {
        return status;
    }
    /* MSI-X when Windows granted messages (INF MSISupported=1): config changes on vector 0,
     * the control queue on vector 0 too, since QEMU 11.1's test device has a one-entry table. */
    wddm_dev_config dev_config = {
        .use_msix = adapter->layer.interrupt_message_signaled,
        .config_vector = 0,
        .queue_vector = 0,
    };
    if (wddm_dev_init(&adapter->dev, &adapter->os, &dev_config) != WDDM_OK) {
        return STATUS_DEVICE_CONFIGURATION_ERROR;
    }
    const wddm_layout *layout = wddm_dev_layout(&adapter->dev);
    /* Mode 1: the VRAM BAR is the sibling's, known only from the capset; mode 2: checked
     * against our own BAR 4. */
    status = wddm_win_layer_adopt_locator(&adapter->layer, &layout->header.vram_bar);
    if (!NT_SUCCESS(status)) {
        wddm_dev_teardown(&adapter->dev);
        return status;
    }
    /* WDDM 2.x: capset 62, when offered, for DXGKQAITYPE_GPUMMUCAPS / PAGETABLELEVELDESC. No
     * GpuMmu (WDDM_E_STATE) is a WDDM 1.3 layout; a geometry breaking a rule fails the start. */
    wddm_result mmu = wddm_dev_read_gpummu(&adapter->dev, &adapter->gpummu, NULL);
    adapter->has_gpummu = mmu == WDDM_OK;
    if (mmu != WDDM_OK && mmu != WDDM_E_STATE) {
        wddm_dev_teardown(&adapter->dev);
        return STATUS_DEVICE_CONFIGURATION_ERROR;
    }
    if (wddm_dev_status_page_register(&adapter->dev) != WDDM_OK ||
        wddm_dev_post_events(&adapter->dev, 4) != WDDM_OK) {
        wddm_dev_teardown(&adapter->dev);
        return STATUS_DEVICE_CONFIGURATION_ERROR;
    }
    return STATUS_SUCCESS;
}

/* DxgkDdiInterruptRoutine (DIRQL): the library's top half, which reads and acknowledges and
 * nothing more (no lock, no allocation, no wait). The sample asks for one message, shared by
 * configuration changes and the control queue (QEMU 11.1's test device has a one-entry table);
 * a line-based interrupt may be another device's: then the ISR byte is 0 and the routine
 * returns FALSE. With MSI-X the message itself says it was ours. */
BOOLEAN sample_interrupt(sample_adapter *adapter, ULONG message_number);
BOOLEAN sample_interrupt(sample_adapter *adapter, ULONG message_number)
{
    (void)message_number;
    uint32_t source = adapter->layer.interrupt_message_signaled ? WDDM_IRQ_SOURCE_MSIX_SHARED
                                                                : WDDM_IRQ_SOURCE_LINE;
    if (wddm_dev_interrupt_top(&adapter->dev, source) == 0) {
        return FALSE;
    }
    /* Here: DxgkCbQueueDpc. The bits are in the layer (interrupt_ack) for the DPC. */
    return TRUE;
}

/* The deferred half's sink: each completion's fence, for DXGK_INTERRUPT_DMA_COMPLETED. */
static void sample_completion(void *ctx, const WddmGpuRespSubmit *completion)
{
    ULONG *latest = ctx;
    if (completion->status != WDDM_GPU_SUBMIT_STATUS_PREEMPTED &&
        completion->status != WDDM_GPU_SUBMIT_STATUS_RESET) {
        *latest = completion->submission_fence_id;
    }
}

/* DxgkDdiDpcRoutine: the library's deferred half with the bits the ISR gathered; the fence goes
 * to DxgkCbNotifyInterrupt(DXGK_INTERRUPT_DMA_COMPLETED) through DxgkCbSynchronizeExecution.
 * Events stay in their ring for wddm_dev_next_event (re-post them after taking them). */
ULONG sample_dpc(sample_adapter *adapter);
ULONG sample_dpc(sample_adapter *adapter)
{
    ULONG latest = 0;
    wddm_irq_sink sink = {.ctx = &latest, .completion = sample_completion};
    ULONG bits = wddm_win_layer_take_isr(&adapter->layer);
    if (wddm_dev_interrupt_deferred(&adapter->dev, bits, &sink) != WDDM_OK) {
        return 0;
    }
    return latest;
}

/* DxgkDdiQueryAdapterInfo(DXGKQAITYPE_QUERYSEGMENT3), both calls. */
NTSTATUS sample_query_segment3(sample_adapter *adapter, wddm_dxgk_querysegmentout3 *out);
NTSTATUS sample_query_segment3(sample_adapter *adapter, wddm_dxgk_querysegmentout3 *out)
{
    return wddm_layout_query_segment3(wddm_dev_layout(&adapter->dev), out) == WDDM_OK
               ? STATUS_SUCCESS
               : STATUS_INVALID_PARAMETER;
}

/* DxgkDdiBuildPagingBuffer(DXGK_OPERATION_FILL) then DxgkDdiSubmitCommand of that buffer. */
NTSTATUS sample_fill_and_submit(sample_adapter *adapter, void *paging_buffer, ULONG size,
                                ULONG64 paging_buffer_bus, const wddm_op_fill *fill,
                                ULONG fence);
NTSTATUS sample_fill_and_submit(sample_adapter *adapter, void *paging_buffer, ULONG size,
                                ULONG64 paging_buffer_bus, const wddm_op_fill *fill,
                                ULONG fence)
{
    wddm_pb pb;
    if (wddm_pb_init(&pb, wddm_dev_layout(&adapter->dev), paging_buffer, size) != WDDM_OK ||
        wddm_pb_fill(&pb, fill) != WDDM_OK) {
        return STATUS_INVALID_PARAMETER;
    }
    wddm_submit submit = {
        .dma_buffer_address = paging_buffer_bus,
        .dma_buffer_segment_id = 0,
        .flags = WDDM_GPU_SUBMIT_FLAG_PAGING,
        .dma_buffer_size = size,
        .start_offset = 0,
        .end_offset = pb.used,
        .fence_id = fence,
    };
    return wddm_dev_submit(&adapter->dev, &submit) == WDDM_OK ? STATUS_SUCCESS
                                                              : STATUS_DEVICE_BUSY;
}

/* DxgkDdiQueryAdapterInfo(DXGKQAITYPE_GPUMMUCAPS / DXGKQAITYPE_PAGETABLELEVELDESC): the
 * input and output are dxgkrnl's buffers, laid out as the library's mirrors. */
NTSTATUS sample_query_gpummu(sample_adapter *adapter, ULONG type, const void *input,
                             ULONG input_size, void *output, ULONG output_size);
NTSTATUS sample_query_gpummu(sample_adapter *adapter, ULONG type, const void *input,
                             ULONG input_size, void *output, ULONG output_size)
{
    if (!adapter->has_gpummu) {
        return STATUS_NOT_SUPPORTED;
    }
    wddm_result r = WDDM_E_INVALID;
    if (type == WDDM_DXGKQAITYPE_GPUMMUCAPS &&
        input_size >= sizeof(wddm_dxgk_querygpummucapsin) &&
        output_size >= sizeof(wddm_dxgk_gpummucaps)) {
        r = wddm_gpummu_query_caps(&adapter->gpummu, input, output);
    } else if (type == WDDM_DXGKQAITYPE_PAGETABLELEVELDESC &&
               input_size >= sizeof(wddm_dxgk_querypagetableleveldescin) &&
               output_size >= sizeof(wddm_dxgk_page_table_level_desc)) {
        r = wddm_gpummu_query_level_desc(&adapter->gpummu, input, output);
    }
    return r == WDDM_OK ? STATUS_SUCCESS : STATUS_INVALID_PARAMETER;
}

/* DxgkDdiBuildPagingBuffer(DXGK_OPERATION_UPDATE_PAGE_TABLE), GPU_PHYSICAL: the DXGK_PTEs
 * converted into DMA memory the device reads (`entries`, at bus address `entries_bus`), then
 * the packet pointing at them. */
NTSTATUS sample_update_page_table(sample_adapter *adapter, wddm_pb *pb, const wddm_dxgk_pte *ptes,
                                  ULONG count, ULONG64 *entries, ULONG64 entries_bus,
                                  ULONG level, ULONG segment_id, ULONG64 segment_offset,
                                  ULONG start_index);
NTSTATUS sample_update_page_table(sample_adapter *adapter, wddm_pb *pb, const wddm_dxgk_pte *ptes,
                                  ULONG count, ULONG64 *entries, ULONG64 entries_bus,
                                  ULONG level, ULONG segment_id, ULONG64 segment_offset,
                                  ULONG start_index)
{
    (void)adapter;
    if (wddm_ptes_from_dxgk(ptes, count, entries, NULL) != WDDM_OK) {
        return STATUS_INVALID_PARAMETER;
    }
    wddm_op_update_page_table op = {
        .PageTableLevel = level,
        .SegmentId = segment_id,
        .StartIndex = start_index,
        .SegmentOffset = segment_offset,
        .NumPageTableEntries = count,
        .EntriesBus = entries_bus,
    };
    wddm_result r = wddm_pb_update_page_table(pb, &op);
    return r == WDDM_OK     ? STATUS_SUCCESS
           : r == WDDM_E_FULL ? STATUS_BUFFER_TOO_SMALL
                              : STATUS_INVALID_PARAMETER;
}

/* The DPC's page fault: the record (from the SUBMIT_VIRTUAL answer or a PAGE_FAULT event) as
 * DmaPageFaulted for DxgkCbNotifyInterrupt(DXGK_INTERRUPT_DMA_PAGE_FAULTED). */
NTSTATUS sample_page_faulted(const WddmGpuPageFaultRecord *record, wddm_dxgk_dma_page_faulted *out);
NTSTATUS sample_page_faulted(const WddmGpuPageFaultRecord *record, wddm_dxgk_dma_page_faulted *out)
{
    return wddm_page_fault_to_dxgk(record, out) == WDDM_OK ? STATUS_SUCCESS
                                                           : STATUS_DEVICE_PROTOCOL_ERROR;
}

/* DxgkDdiStopDevice. */
void sample_stop_device(sample_adapter *adapter);
void sample_stop_device(sample_adapter *adapter)
{
    wddm_dev_teardown(&adapter->dev);
}

/* The DDIs above, as a KMD hands them to dxgkrnl (DRIVER_INITIALIZATION_DATA). */
static const struct sample_ddis {
    NTSTATUS (*start_device)(sample_adapter *, HANDLE, wddm_win_device_space_fn,
                             wddm_win_device_space_fn, const CM_RESOURCE_LIST *);
    BOOLEAN (*interrupt)(sample_adapter *, ULONG);
    ULONG (*dpc)(sample_adapter *);
    NTSTATUS (*query_segment3)(sample_adapter *, wddm_dxgk_querysegmentout3 *);
    NTSTATUS (*fill_and_submit)(sample_adapter *, void *, ULONG, ULONG64, const wddm_op_fill *,
                                ULONG);
    NTSTATUS (*query_gpummu)(sample_adapter *, ULONG, const void *, ULONG, void *, ULONG);
    NTSTATUS (*update_page_table)(sample_adapter *, wddm_pb *, const wddm_dxgk_pte *, ULONG,
                                  ULONG64 *, ULONG64, ULONG, ULONG, ULONG64, ULONG);
    NTSTATUS (*page_faulted)(const WddmGpuPageFaultRecord *, wddm_dxgk_dma_page_faulted *);
    void (*stop_device)(sample_adapter *);
} sample_ddis = {
    sample_start_device,   sample_interrupt,         sample_dpc,
    sample_query_segment3, sample_fill_and_submit,   sample_query_gpummu,
    sample_update_page_table, sample_page_faulted,   sample_stop_device,
};

NTSTATUS DriverEntry(PDRIVER_OBJECT driver, PUNICODE_STRING registry_path);
NTSTATUS DriverEntry(PDRIVER_OBJECT driver, PUNICODE_STRING registry_path)
{
    (void)driver;
    (void)registry_path;
    /* A real KMD fills DRIVER_INITIALIZATION_DATA with its DDIs and calls DxgkInitialize. */
    DbgPrintEx(78, 0, "wddm-gpu sample: a link check, not a driver (DDIs at %p)\n",
               (const void *)&sample_ddis);
    return STATUS_NOT_SUPPORTED;
}
