//! GPU virtual addressing through the real backend process, driven as QEMU drives it: a layout
//! with `[gpummu]` offers its geometry as a second capset.

use wddm_gpu_abi::ctrl::{
    WddmGpuRespCapsetInfo, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_OK_CAPSET,
    VIRTIO_GPU_RESP_OK_CAPSET_INFO,
};
use wddm_gpu_abi::gpummu_rules::validate_gpummu;
use wddm_gpu_abi::gpuva::{
    WddmGpuMmuCaps, WDDM_GPU_MMU_CAPSET_ID, WDDM_GPU_MMU_CAPSET_VERSION,
    WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
};
use wddm_gpu_abi::segment_flags::SegmentFlags;
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::harness::{Harness, BUFFER_SIZE};
use wddm_gpu_frontend_kit::layout::{self, Gpummu};
use zerocopy::FromBytes;

/// The GpuMmu of the tests' layout: 4 levels, leaf tables in the CPU-visible VRAM segment,
/// directories in system memory.
const GPUMMU: Gpummu = Gpummu::four_levels(16);

/// A WDDM 2.0 layout with [`GPUMMU`] over 16 MiB of VRAM and a 64 MiB aperture.
fn gpummu_layout() -> String {
    layout::vram_and_aperture("16MiB", "64MiB", &GPUMMU)
}

/// A backend started with [`gpummu_layout`] and `extra` arguments.
fn backend_with(name: &str, extra: &[&str]) -> Harness {
    let options = SpawnOptions {
        layout: Some(gpummu_layout()),
        args: extra.iter().map(|arg| (*arg).into()).collect(),
        ..SpawnOptions::default()
    };
    Harness::ready_with_options(name, &options)
}

#[test]
fn a_gpummu_layout_offers_its_geometry_as_capset_index_1() {
    let mut h = backend_with("gpummu-capset", &[]);
    let config = h.negotiated.unwrap().config;
    let num_capsets = u32::from_le_bytes(config[12..16].try_into().unwrap());
    assert_eq!(num_capsets, 2);

    let info: WddmGpuRespCapsetInfo = h.get_capset_info(1).exact();
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_CAPSET_INFO);
    assert_eq!(info.capset_id, WDDM_GPU_MMU_CAPSET_ID);
    assert_eq!(info.capset_max_version, WDDM_GPU_MMU_CAPSET_VERSION);
    let size = usize::try_from(info.capset_max_size).unwrap();
    assert_eq!(size, size_of::<WddmGpuMmuCaps>());

    let reply = h.get_capset(
        WDDM_GPU_MMU_CAPSET_ID,
        WDDM_GPU_MMU_CAPSET_VERSION,
        BUFFER_SIZE,
    );
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_CAPSET);
    let caps = WddmGpuMmuCaps::read_from_bytes(&reply.bytes[24..]).unwrap();
    assert_eq!(caps.page_table_level_count, 4);
    assert_eq!(caps.virtual_address_bit_count, 48);
    assert_eq!(
        caps.page_table_update_mode,
        WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL
    );
    assert_eq!(caps.max_contexts, 16);
    assert_eq!(caps.levels[0].page_table_segment_id, 1);
    assert_eq!(caps.levels[0].paging_process_page_table_segment_id, 0);
    assert_eq!(caps.levels[3].page_table_size_in_bytes, 4096);
    // What the guest reads passes the guest's own validator against the segments it reads.
    let segments = [
        SegmentFlags::CPU_VISIBLE.bits(),
        (SegmentFlags::APERTURE | SegmentFlags::CACHE_COHERENT).bits(),
    ];
    let geometry = validate_gpummu(&caps, &segments).unwrap();
    assert_eq!(geometry.address_limit(), 1 << 48);

    // No third capset.
    let third = h.get_capset_info(2);
    assert_eq!(third.hdr().type_, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
}

#[test]
fn without_gpummu_the_device_offers_one_capset_and_refuses_capset_62() {
    let mut h = Harness::ready("gpummu-none");
    let config = h.negotiated.unwrap().config;
    assert_eq!(u32::from_le_bytes(config[12..16].try_into().unwrap()), 1);
    let info = h.get_capset_info(1);
    assert_eq!(info.hdr().type_, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
    let capset = h.get_capset(
        WDDM_GPU_MMU_CAPSET_ID,
        WDDM_GPU_MMU_CAPSET_VERSION,
        BUFFER_SIZE,
    );
    assert_eq!(capset.hdr().type_, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
}

// ---- Contexts, the virtual node and the page-table packets, end to end. ----

use wddm_gpu_abi::build::gpuva::{
    create_context, flush_tlb, pte, reset_engine, set_root_page_table, submit_virtual,
    virtual_copy, virtual_fill, virtual_signal,
};
use wddm_gpu_abi::build::page_tables::{packets, PageTables};
use wddm_gpu_abi::build::DmaBufferBuilder;
use wddm_gpu_abi::context::{
    WddmGpuPageFaultRecord, WddmGpuRespSubmitVirtual, WDDM_GPU_CONTEXT_FLAG_CHECK_TLB,
    WDDM_GPU_NODE_VIRTUAL, WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
    WDDM_GPU_PAGE_FAULT_FLAG_WRITE,
};
use wddm_gpu_abi::ctrl::{VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_RESP_SUBMIT_VIRTUAL};
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_MMU_ACCESS_READ, WDDM_GPU_MMU_ACCESS_WRITE, WDDM_GPU_MMU_FAULT_NOT_PRESENT,
    WDDM_GPU_MMU_FAULT_READ_ONLY, WDDM_GPU_MMU_FAULT_ROOT_OVERRUN, WDDM_GPU_PTE_READ_ONLY,
};
use wddm_gpu_abi::status::{
    WDDM_GPU_ENGINE_STATUS_RESPONSIVE, WDDM_GPU_EVENT_MONITORED_FENCE, WDDM_GPU_EVENT_PAGE_FAULT,
    WDDM_GPU_EVENT_STALE_TRANSLATION, WDDM_GPU_PAGE_FAULT_OFFSET,
};
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_frontend_kit::harness::{DMA_BUFFER, PAGE, PAGE_USIZE, STATUS_PAGE};
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::submit_command;
use zerocopy::IntoBytes;

/// Directories in guest RAM from 16 MiB, leaf tables in VRAM from 8 MiB, entry arrays in RAM
/// from 24 MiB; data pages in RAM from 32 MiB.
const RAM_TABLES: std::ops::Range<u64> = 0x100_0000..0x180_0000;
const VRAM_TABLES: std::ops::Range<u64> = 0x80_0000..0xa0_0000;
const ARRAYS: std::ops::Range<u64> = 0x180_0000..0x200_0000;
const DATA_PAGES: u64 = 0x200_0000;
/// The virtual DMA buffer's page and the monitored fence's page, in RAM.
const DMA_PAGE: u64 = 0x3f0_0000;
const FENCE_PAGE: u64 = 0x3f1_0000;

const VA_SOURCE: u64 = 0x12_3400_0000;
const VA_DESTINATION: u64 = 0x187_0000_0000;
const VA_DMA: u64 = 0x40_0000;
const VA_FENCE: u64 = 0x50_0000;
const CONTEXT: u32 = 3;

fn tables() -> PageTables {
    PageTables::new(
        GPUMMU.index_bits,
        GPUMMU.table_segments,
        RAM_TABLES,
        VRAM_TABLES,
    )
    .unwrap()
}

/// Writes the pending updates as UPDATE_PAGE_TABLE packets and runs them on the paging node.
fn apply(h: &mut Harness, tables: &mut PageTables, fence: u32) {
    let (buffer, arrays) = packets(&tables.take(), ARRAYS).unwrap();
    for (address, bytes) in &arrays {
        h.write_ram(*address, bytes);
    }
    let packets = buffer.bytes();
    assert!(packets.len() <= 0x1_0000, "paging buffer too large");
    h.write_ram(DMA_BUFFER, packets);
    let done = h.submit(&submit_command(
        DMA_BUFFER,
        u32::try_from(packets.len()).unwrap(),
        fence,
    ));
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
}

fn ok_nodata(h: &mut Harness, request: &[u8]) {
    let reply = h.request(request, BUFFER_SIZE);
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_NODATA, "{reply:?}");
}

/// Scattered RAM data page `i` (a permutation, so no two neighbours are adjacent).
fn data_page(i: u64) -> u64 {
    DATA_PAGES + ((i * 7) % 64) * PAGE
}

/// A GPU with the GpuMmu layout, context `CONTEXT` on the virtual node (checking mode as
/// asked) bound to a root whose tables map 16 scattered RAM pages at `VA_SOURCE`, 20 VRAM pages
/// at `VA_DESTINATION`, the DMA page and the fence page.
fn mapped_gpu(name: &str, flags: u32) -> (Harness, PageTables) {
    mapped_gpu_with(name, flags, &[])
}

/// [`mapped_gpu`] with `extra` backend arguments.
fn mapped_gpu_with(name: &str, flags: u32, extra: &[&str]) -> (Harness, PageTables) {
    let mut h = backend_with(name, extra);
    let mut tables = tables();
    let source: Vec<u64> = (0..16).map(|i| pte(0, data_page(i), 0)).collect();
    tables.map(VA_SOURCE, &source).unwrap();
    let destination: Vec<u64> = (0..20).map(|i| pte(1, 0x10_0000 + i * PAGE, 0)).collect();
    tables.map(VA_DESTINATION, &destination).unwrap();
    tables.map(VA_DMA, &[pte(0, DMA_PAGE, 0)]).unwrap();
    tables.map(VA_FENCE, &[pte(0, FENCE_PAGE, 0)]).unwrap();
    apply(&mut h, &mut tables, 1);
    bind_context(&mut h, CONTEXT, WDDM_GPU_NODE_VIRTUAL, flags, &tables);
    (h, tables)
}

/// Creates context `id` on `node` with `flags` and binds it to the whole root of `tables`.
fn bind_context(h: &mut Harness, id: u32, node: u32, flags: u32, tables: &PageTables) {
    ok_nodata(h, create_context(id, node, flags).as_bytes());
    ok_nodata(
        h,
        set_root_page_table(id, tables.root(), tables.root_entries()).as_bytes(),
    );
}

/// Writes `packets` into the DMA page and runs them on the virtual node.
fn run_virtual(
    h: &mut Harness,
    packets: &DmaBufferBuilder,
    fence: u32,
) -> WddmGpuRespSubmitVirtual {
    h.write_ram(DMA_PAGE, packets.bytes());
    let cmd = submit_virtual(CONTEXT, VA_DMA, packets.len(), fence);
    let reply = h.request(cmd.as_bytes(), BUFFER_SIZE);
    assert_eq!(reply.hdr().type_, WDDM_GPU_RESP_SUBMIT_VIRTUAL, "{reply:?}");
    reply.exact()
}

/// [`run_virtual`], checking the status it completes with.
#[track_caller]
fn run_virtual_as(h: &mut Harness, packets: &DmaBufferBuilder, fence: u32, expected: SubmitStatus) {
    let done = run_virtual(h, packets, fence);
    assert_eq!(done.status, expected as u32, "{done:?}");
}

#[test]
fn copy_fill_and_signal_through_gpu_virtual_addresses() {
    let (mut h, _tables) = mapped_gpu("gpummu-copy", 0);
    let data = pattern(0x5eed, 16 * PAGE_USIZE);
    for (i, page) in data.chunks(PAGE_USIZE).enumerate() {
        h.write_ram(data_page(i as u64), page);
    }
    let event = h.post_wait_event();
    let mut packets = DmaBufferBuilder::new();
    packets.push(&virtual_copy(
        16 * PAGE - 100,
        VA_SOURCE + 100,
        VA_DESTINATION,
    ));
    packets.push(&virtual_fill(
        0xa1b2_c3d4,
        4 * PAGE - 2,
        VA_DESTINATION + 16 * PAGE,
    ));
    packets.push(&virtual_signal(VA_FENCE + 8, 0x1234_5678_9abc));
    assert_eq!(
        h.register_status_page(STATUS_PAGE).hdr().type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let done = run_virtual(&mut h, &packets, 77);
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
    // The virtual node's fence on the status page, before the answer.
    assert_eq!(h.status_page(STATUS_PAGE).virtual_completed_fence, 77);
    assert_eq!(done.submission_fence_id, 77);
    assert_eq!(done.packets_completed, 3);
    assert_eq!(done.bytes_transferred, 20 * PAGE - 102);
    // Every byte: the copy landed in VRAM offset 0x10_0000 on, the fill after it.
    assert_eq!(h.read_vram(0x10_0000, data.len() - 100), &data[100..]);
    let filled = h.read_vram(0x10_0000 + 16 * PAGE, 4 * PAGE_USIZE);
    let want: Vec<u8> = 0xa1b2_c3d4u32
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(4 * PAGE_USIZE - 2)
        .collect();
    assert_eq!(&filled[..want.len()], &want[..]);
    assert_eq!(
        &filled[want.len()..],
        &[0, 0],
        "the fill wrote past its length"
    );
    let fence = h.read_ram(FENCE_PAGE + 8, 8);
    assert_eq!(
        u64::from_le_bytes(fence.try_into().unwrap()),
        0x1234_5678_9abc
    );
    let signalled = h.wait_event(event);
    assert_eq!(signalled.kind, WDDM_GPU_EVENT_MONITORED_FENCE);
    assert_eq!(
        (signalled.fence_address, signalled.fence_value),
        (VA_FENCE + 8, 0x1234_5678_9abc)
    );
}

#[test]
fn a_copy_from_contiguous_pages_into_scattered_ones_moves_every_byte() {
    let (mut h, _tables) = mapped_gpu("gpummu-scatter", 0);
    let data = pattern(0x5ca7, 20 * PAGE_USIZE);
    h.write_vram(0x10_0000, &data);
    for i in 0..16 {
        h.write_ram(data_page(i), &[0; PAGE_USIZE]);
    }
    // From the contiguous VRAM pages into the 16 scattered RAM pages, both ends unaligned:
    // each destination run is shorter than the source's.
    let length = 16 * PAGE_USIZE - 150;
    let mut packets = DmaBufferBuilder::new();
    packets.push(&virtual_copy(
        length as u64,
        VA_DESTINATION + 100,
        VA_SOURCE + 50,
    ));
    let done = run_virtual(&mut h, &packets, 5);
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
    assert_eq!(done.bytes_transferred, length as u64);
    let written: Vec<u8> = (0..16)
        .flat_map(|i| h.read_ram(data_page(i), PAGE_USIZE))
        .collect();
    assert!(written[50..50 + length] == data[100..100 + length]);
    assert!(
        written[..50].iter().all(|&b| b == 0),
        "written before the copy"
    );
    assert!(
        written[50 + length..].iter().all(|&b| b == 0),
        "written past the copy"
    );
}

#[test]
fn runs_across_two_memory_table_regions_that_touch_are_moved_a_region_at_a_time() {
    let (mut h, mut tables) = mapped_gpu("gpummu-regions", 0);
    // Guest RAM announced as two regions meeting inside eight contiguous pages, which the MMU
    // hands out as one run.
    let first = DATA_PAGES + 0x10_0000;
    let split = first + 3 * PAGE;
    let vram_gpa = h.vram_gpa.expect("the harness maps the VRAM BAR");
    h.set_mem_table_split_ram(split, vram_gpa);
    let contiguous: Vec<u64> = (0..8).map(|i| pte(0, first + i * PAGE, 0)).collect();
    let va_contiguous = VA_SOURCE + 0x100_0000;
    tables.map(va_contiguous, &contiguous).unwrap();
    apply(&mut h, &mut tables, 2);
    let data = pattern(0x2e61, 8 * PAGE_USIZE);
    h.write_ram(first, &data);
    let mut packets = DmaBufferBuilder::new();
    // Out across the split into VRAM, a fill across it, then back from VRAM across it.
    packets.push(&virtual_copy(
        8 * PAGE - 10,
        va_contiguous + 10,
        VA_DESTINATION,
    ));
    packets.push(&virtual_fill(
        0x0102_0304,
        2 * PAGE,
        va_contiguous + 2 * PAGE,
    ));
    packets.push(&virtual_copy(
        PAGE,
        VA_DESTINATION,
        va_contiguous + 5 * PAGE + 8,
    ));
    let done = run_virtual(&mut h, &packets, 9);
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
    assert_eq!(done.bytes_transferred, 11 * PAGE - 10);
    assert_eq!(h.read_vram(0x10_0000, 8 * PAGE_USIZE - 10), &data[10..]);
    let after = h.read_ram(first, 8 * PAGE_USIZE);
    let mut want = data.clone();
    for (i, byte) in want[2 * PAGE_USIZE..4 * PAGE_USIZE].iter_mut().enumerate() {
        *byte = 0x0102_0304u32.to_le_bytes()[i % 4];
    }
    let back = 5 * PAGE_USIZE + 8;
    want[back..back + PAGE_USIZE].copy_from_slice(&data[10..10 + PAGE_USIZE]);
    assert!(
        after == want,
        "RAM across the split differs from the expected bytes"
    );
}

fn page_fault(done: &WddmGpuRespSubmitVirtual) -> WddmGpuPageFaultRecord {
    assert_eq!(done.status, SubmitStatus::PageFault as u32, "{done:?}");
    done.page_fault
}

#[test]
fn a_page_fault_reports_its_record_and_stops_the_node_until_reset_engine() {
    let (mut h, mut tables) = mapped_gpu("gpummu-fault", 0);
    assert_eq!(
        h.register_status_page(STATUS_PAGE).hdr().type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let event = h.post_wait_event();
    // Page 16 of the source range was never mapped: its leaf slot is invalid.
    let unmapped = VA_SOURCE + 16 * PAGE + 8;
    let mut packets = DmaBufferBuilder::new();
    packets.push(&virtual_fill(0, 64, VA_DESTINATION));
    packets.push(&virtual_copy(64, unmapped, VA_DESTINATION));
    let done = run_virtual(&mut h, &packets, 90);
    let record = page_fault(&done);
    assert_eq!(done.packets_completed, 1);
    // The FILL before it is 32 bytes.
    assert_eq!(done.fault_packet_offset, 32);
    assert_eq!(record.fault.virtual_address, unmapped);
    assert_eq!(record.fault.kind, WDDM_GPU_MMU_FAULT_NOT_PRESENT);
    assert_eq!(record.fault.page_table_level, 0);
    assert_eq!(record.fault.access, WDDM_GPU_MMU_ACCESS_READ);
    assert_eq!(
        (
            record.fence_id,
            record.context_id,
            record.node_ordinal,
            record.packet_offset
        ),
        (90, CONTEXT, WDDM_GPU_NODE_VIRTUAL, 32)
    );
    assert_eq!(record.flags, WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED);
    assert_eq!(record.sequence, 1);
    // The same record in the event and on the status page (node 1's slot).
    let delivered = h.wait_event(event);
    assert_eq!(delivered.kind, WDDM_GPU_EVENT_PAGE_FAULT);
    assert_eq!(delivered.page_fault, record);
    let slot = STATUS_PAGE
        + u64::from(WDDM_GPU_PAGE_FAULT_OFFSET)
        + u64::from(WDDM_GPU_NODE_VIRTUAL) * size_of::<WddmGpuPageFaultRecord>() as u64;
    let on_page = WddmGpuPageFaultRecord::read_from_bytes(
        &h.read_ram(slot, size_of::<WddmGpuPageFaultRecord>()),
    )
    .unwrap();
    assert_eq!(on_page, record);

    // The node refuses work until it is reset; the paging node keeps working meanwhile.
    let mut fill = DmaBufferBuilder::new();
    fill.push(&virtual_fill(0x0101_0101, 16, VA_DESTINATION));
    run_virtual_as(&mut h, &fill, 91, SubmitStatus::NodeFaulted);
    tables
        .map(
            VA_SOURCE + 16 * PAGE,
            &[pte(0, data_page(40), WDDM_GPU_PTE_READ_ONLY)],
        )
        .unwrap();
    apply(&mut h, &mut tables, 2);
    ok_nodata(&mut h, reset_engine().as_bytes());
    run_virtual_as(&mut h, &fill, 92, SubmitStatus::Ok);
    assert_eq!(h.read_vram(0x10_0000, 16), vec![1; 16]);

    // A write through the read-only page just mapped: its own kind, with the write flag.
    let mut write = DmaBufferBuilder::new();
    write.push(&virtual_copy(8, VA_DESTINATION, VA_SOURCE + 16 * PAGE));
    let record = page_fault(&run_virtual(&mut h, &write, 93));
    assert_eq!(record.fault.kind, WDDM_GPU_MMU_FAULT_READ_ONLY);
    assert_eq!(record.fault.access, WDDM_GPU_MMU_ACCESS_WRITE);
    assert_eq!(
        record.flags,
        WDDM_GPU_PAGE_FAULT_FLAG_WRITE | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED
    );
    assert_eq!(record.sequence, 2);
    ok_nodata(&mut h, reset_engine().as_bytes());

    // A root bound with one entry: the source VA's root index is past it.
    ok_nodata(
        &mut h,
        set_root_page_table(CONTEXT, tables.root(), 1).as_bytes(),
    );
    let record = page_fault(&run_virtual(&mut h, &fill, 94));
    // The DMA buffer itself is at root index 0; the destination VA is at index 3.
    assert_eq!(record.fault.kind, WDDM_GPU_MMU_FAULT_ROOT_OVERRUN);
    assert_eq!(record.fault.page_table_level, 3);
    assert_eq!(record.fault.virtual_address, VA_DESTINATION);
}

/// A SUBMIT_VIRTUAL refused for its own fields, for a missing context or by a faulted node never
/// ran: its fence does not complete, so `virtual_completed_fence` keeps the last one that did.
/// One that ran to a page fault completes (`DmaPageFaulted` has the driver advance to it).
#[test]
fn a_refused_virtual_submission_does_not_complete_its_fence() {
    let (mut h, _tables) = mapped_gpu("gpummu-refused", 0);
    assert_eq!(
        h.register_status_page(STATUS_PAGE).hdr().type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let mut fill = DmaBufferBuilder::new();
    fill.push(&virtual_fill(0, 16, VA_DESTINATION));
    run_virtual_as(&mut h, &fill, 40, SubmitStatus::Ok);
    let completed = |h: &Harness| h.status_page(STATUS_PAGE).virtual_completed_fence;
    assert_eq!(completed(&h), 40);
    h.write_ram(DMA_PAGE, fill.bytes());
    let mut reserved = submit_virtual(CONTEXT, VA_DMA, fill.len(), 41);
    reserved.reserved = 1;
    let mut backwards = submit_virtual(CONTEXT, VA_DMA, fill.len(), 42);
    backwards.start_offset = backwards.end_offset + 8;
    let mut elsewhere = submit_virtual(CONTEXT, VA_DMA, fill.len(), 43);
    elsewhere.context_id = CONTEXT + 1;
    for (cmd, status) in [
        (reserved, SubmitStatus::ReservedField),
        (backwards, SubmitStatus::BadCommand),
        (elsewhere, SubmitStatus::BadContext),
    ] {
        let done: WddmGpuRespSubmitVirtual = h.request(cmd.as_bytes(), BUFFER_SIZE).exact();
        assert_eq!(done.status, status as u32, "{done:?}");
        assert_eq!(
            completed(&h),
            40,
            "refused fence {}",
            cmd.submission_fence_id
        );
    }
    // A page fault completes its fence; the faulted node's refusals then do not.
    let mut faulting = DmaBufferBuilder::new();
    faulting.push(&virtual_fill(0, 16, VA_SOURCE + 16 * PAGE));
    page_fault(&run_virtual(&mut h, &faulting, 44));
    assert_eq!(completed(&h), 44);
    run_virtual_as(&mut h, &fill, 45, SubmitStatus::NodeFaulted);
    assert_eq!(completed(&h), 44);
}

/// A COPY and a FILL that run off their mappings part way write the bytes before the faulting
/// page, as a DMA engine does, and `bytes_transferred` counts them after the whole packets.
#[test]
fn a_copy_or_fill_that_faults_part_way_writes_and_counts_the_bytes_before_the_fault() {
    let (mut h, _tables) = mapped_gpu("gpummu-part", 0);
    h.write_ram(data_page(15), &[0x5a; 4096]);
    h.write_vram(0x10_0000, &[0; 2 * 4096]);
    // Source pages 0-15 are mapped: the copy reads 100 bytes of page 15, then faults at 16.
    let mut packets = DmaBufferBuilder::new();
    packets.push(&virtual_fill(0x0303_0303, 64, VA_DESTINATION + PAGE));
    packets.push(&virtual_copy(
        300,
        VA_SOURCE + 16 * PAGE - 100,
        VA_DESTINATION,
    ));
    let done = run_virtual(&mut h, &packets, 95);
    let record = page_fault(&done);
    assert_eq!(record.fault.virtual_address, VA_SOURCE + 16 * PAGE);
    assert_eq!((done.packets_completed, done.fault_packet_offset), (1, 32));
    assert_eq!(done.bytes_transferred, 64 + 100);
    assert_eq!(h.read_vram(0x10_0000, 100), vec![0x5a; 100]);
    assert_eq!(h.read_vram(0x10_0000 + 100, 200), vec![0; 200]);
    ok_nodata(&mut h, reset_engine().as_bytes());
    // Destination pages 0-19 are mapped: the fill writes 40 bytes of page 19, then faults.
    let mut fill = DmaBufferBuilder::new();
    fill.push(&virtual_fill(
        0x0707_0707,
        200,
        VA_DESTINATION + 20 * PAGE - 40,
    ));
    let done = run_virtual(&mut h, &fill, 96);
    assert_eq!(
        page_fault(&done).fault.virtual_address,
        VA_DESTINATION + 20 * PAGE
    );
    assert_eq!((done.packets_completed, done.bytes_transferred), (0, 40));
    assert_eq!(h.read_vram(0x10_0000 + 20 * PAGE - 40, 40), vec![7; 40]);
}

#[test]
fn injected_on_the_virtual_node_a_page_fault_is_reported_as_a_real_one_and_a_hang_ends_at_reset_engine(
) {
    let (mut h, _tables) = mapped_gpu("gpummu-inject", 0);
    assert_eq!(
        h.register_status_page(STATUS_PAGE).hdr().type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let mut fill = DmaBufferBuilder::new();
    fill.push(&virtual_fill(0x0202_0202, 16, VA_DESTINATION));

    h.backend
        .ctl_ok("arm page-fault va=0x4321000 write fence=60");
    let event = h.post_wait_event();
    let record = page_fault(&run_virtual(&mut h, &fill, 60));
    assert_eq!(record.fault.virtual_address, 0x432_1000);
    assert_eq!(record.fault.kind, WDDM_GPU_MMU_FAULT_NOT_PRESENT);
    assert_eq!(record.fault.access, WDDM_GPU_MMU_ACCESS_WRITE);
    assert_eq!(
        record.flags,
        WDDM_GPU_PAGE_FAULT_FLAG_WRITE | WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED
    );
    assert_eq!(h.wait_event(event).page_fault, record);
    run_virtual_as(&mut h, &fill, 61, SubmitStatus::NodeFaulted);
    ok_nodata(&mut h, reset_engine().as_bytes());
    run_virtual_as(&mut h, &fill, 62, SubmitStatus::Ok);
    assert!(h.backend.ctl_ok("faults").contains("node 1 #1 fence 60"));

    // A hang: the paging node goes on, a PREEMPT stops nothing, RESET_ENGINE ends it.
    h.backend.ctl_ok("arm hang node=1 fence=63");
    h.write_ram(DMA_PAGE, fill.bytes());
    let cmd = submit_virtual(CONTEXT, VA_DMA, fill.len(), 63);
    let hung = h.post(cmd.as_bytes(), wddm_gpu_frontend_kit::harness::SLOT_ROOM);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!h.is_answered(&hung), "a hung submission was answered");
    let preempt = h.post_preempt();
    assert_eq!(h.wait_preempt(preempt).preempted_count, 0);
    assert!(!h.is_answered(&hung), "a PREEMPT stopped a hung submission");
    let node = h.backend.ctl_ok("node");
    assert!(
        node.contains("node 1 (virtual): HUNG\n  running fence 63\n  queued 0\n  page faults 1\n"),
        "{node}"
    );
    // What DxgkDdiQueryEngineStatus sees of node 1: not responsive, fence 63 running, 62 the
    // last completed (61 was refused, never run).
    let status = h.query_engine_status(WDDM_GPU_NODE_VIRTUAL);
    assert_eq!(
        (
            status.node_ordinal,
            status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
            status.running_fence,
            status.current_fence,
            status.queued
        ),
        (WDDM_GPU_NODE_VIRTUAL, 0, 63, 62, 0),
        "{status:?}"
    );
    ok_nodata(&mut h, reset_engine().as_bytes());
    let done: WddmGpuRespSubmitVirtual = h.wait_reply(hung).exact();
    assert_eq!(done.status, SubmitStatus::Reset as u32, "{done:?}");
    run_virtual_as(&mut h, &fill, 64, SubmitStatus::Ok);
    let status = h.query_engine_status(WDDM_GPU_NODE_VIRTUAL);
    assert_eq!(
        (
            status.flags & WDDM_GPU_ENGINE_STATUS_RESPONSIVE,
            status.running_fence,
            status.current_fence
        ),
        (WDDM_GPU_ENGINE_STATUS_RESPONSIVE, 0, 64),
        "{status:?}"
    );
    let listing = h.backend.ctl_ok("list");
    assert!(
        listing.contains("injection 1 page-fault on fence 60"),
        "{listing}"
    );
    assert!(
        listing.contains("injection 2 hang on fence 63"),
        "{listing}"
    );
    // The stats count the virtual node's five answers: the page fault and the NODE_FAULTED
    // answer are faults, the RESET one is not.
    let stats = h.backend.stats_table();
    let row: Vec<&str> = stats
        .lines()
        .find(|line| line.starts_with("virtual node "))
        .unwrap_or_else(|| panic!("no virtual node row:\n{stats}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[2..4], ["5", "2"], "{stats}");
}

#[test]
fn ctl_walk_shows_each_level_of_a_translation_and_where_a_walk_faults() {
    let (h, _tables) = mapped_gpu("gpummu-walk", 0);
    let walk = h
        .backend
        .ctl_ok(&format!("walk {CONTEXT} {:#x}", VA_SOURCE + PAGE + 0x234));
    let lines: Vec<&str> = walk.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "context {CONTEXT} (node 1) VA {:#x}: root at GPA ",
            VA_SOURCE + PAGE + 0x234
        )),
        "{walk}"
    );
    assert_eq!(
        lines.len(),
        6,
        "the root line, four levels and the page:\n{walk}"
    );
    assert!(lines[1].starts_with("  level 3 index "), "{walk}");
    assert!(
        lines[4].starts_with("  level 0 index 0x1: entry "),
        "{walk}"
    );
    assert_eq!(
        lines[5],
        format!(
            "  -> page {:#x} (0x1000 bytes, mapped at level 0) in system memory GPA {:#x}",
            VA_SOURCE + PAGE,
            data_page(1)
        )
    );
    let json: serde_json::Value = serde_json::from_str(
        &h.backend
            .ctl_ok(&format!("walk {CONTEXT} {:#x} --json", VA_SOURCE + PAGE)),
    )
    .unwrap();
    assert_eq!(json["levels"].as_array().map(Vec::len), Some(4), "{json}");
    assert_eq!(
        json["levels"][3]["entry"],
        pte(0, data_page(1), 0),
        "{json}"
    );
    // Page 16 of the source range was never mapped.
    let walk = h
        .backend
        .ctl_ok(&format!("walk {CONTEXT} {:#x}", VA_SOURCE + 16 * PAGE));
    assert!(walk.contains("-> fault at level 0: "), "{walk}");
    let output = h.backend.ctl("walk 9 0x1000");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no context 9"),
        "{output:?}"
    );
}

#[test]
fn with_check_a_skipped_flush_is_a_warning_and_a_context_that_did_not_ask_gets_no_event() {
    let (mut h, mut tables) = mapped_gpu_with("gpummu-checker", 0, &["--check"]);
    let mut copy = DmaBufferBuilder::new();
    copy.push(&virtual_copy(PAGE, VA_SOURCE, VA_DESTINATION));
    run_virtual_as(&mut h, &copy, 1, SubmitStatus::Ok);
    tables.map(VA_SOURCE, &[pte(0, data_page(50), 0)]).unwrap();
    apply(&mut h, &mut tables, 2);
    let event = h.post_wait_event();
    // The stale read is the second packet's: the warning names its offset.
    let mut two = DmaBufferBuilder::new();
    two.push(&virtual_copy(PAGE, VA_DESTINATION, VA_DESTINATION));
    let second = two.push(&virtual_copy(PAGE, VA_SOURCE, VA_DESTINATION));
    assert_ne!(second, 0);
    run_virtual_as(&mut h, &two, 3, SubmitStatus::Ok);
    let warnings = h.backend.ctl_ok("warnings");
    assert!(
        warnings.contains(&format!(
            "stale-translation: submission fence 3, packet at {second:#x}: context {CONTEXT}: GPU VA {VA_SOURCE:#x} served from the cache"
        )),
        "{warnings}"
    );
    // The context did not ask for the checking mode: no STALE_TRANSLATION event for it.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        !h.is_answered(&event),
        "an event the driver did not ask for"
    );
}

/// A level-1 table in VRAM (segment 1) where the layout puts level 1's tables in system
/// memory, for `VA_SOURCE + 1 GiB`: the walk follows it, as hardware would, and with `--check`
/// the checker warns once for that table.
fn misplaced_level_1(h: &mut Harness, tables: &mut PageTables) -> u64 {
    let va = VA_SOURCE + (1 << 30);
    let (level_1, leaf) = (0xc0_0000, 0xc0_1000);
    let index = |level: u32| ((va >> (12 + 9 * level)) & 511) * 8;
    h.write_vram(level_1 + index(1), &pte(1, leaf, 0).to_le_bytes());
    h.write_vram(leaf + index(0), &pte(0, data_page(3), 0).to_le_bytes());
    tables.set(va, 2, pte(1, level_1, 0)).unwrap();
    apply(h, tables, 2);
    va
}

#[test]
fn a_table_outside_its_levels_segment_works_and_with_check_is_a_warning() {
    let bytes = pattern(7, 64);
    for check in [false, true] {
        let args: &[&str] = if check { &["--check"] } else { &[] };
        let (mut h, mut tables) = mapped_gpu_with("gpummu-misplaced", 0, args);
        let va = misplaced_level_1(&mut h, &mut tables);
        h.write_ram(data_page(3), &bytes);
        let mut copy = DmaBufferBuilder::new();
        copy.push(&virtual_copy(64, va, VA_DESTINATION));
        run_virtual_as(&mut h, &copy, 3, SubmitStatus::Ok);
        run_virtual_as(&mut h, &copy, 4, SubmitStatus::Ok);
        assert_eq!(h.read_vram(0x10_0000, 64), bytes);
        let warnings = h.backend.ctl_ok("warnings");
        if !check {
            assert!(!warnings.contains("misplaced-page-table:"), "{warnings}");
            continue;
        }
        // Once for the table, though two submissions walked through it.
        assert!(warnings.contains("misplaced-page-table 1"), "{warnings}");
        assert!(
            warnings.contains(&format!(
                "misplaced-page-table: submission fence 3: context {CONTEXT}: GPU VA {va:#x} walks through a level 1 table in segment 1 at 0xc00000; the layout puts the level's tables in segment 0"
            )),
            "{warnings}"
        );
    }
}

#[test]
fn the_checking_mode_catches_a_skipped_flush_and_a_flush_ends_it() {
    let (mut h, mut tables) = mapped_gpu("gpummu-checking", WDDM_GPU_CONTEXT_FLAG_CHECK_TLB);
    let old = pattern(1, PAGE_USIZE);
    let new = pattern(2, PAGE_USIZE);
    h.write_ram(data_page(0), &old);
    h.write_ram(data_page(50), &new);
    let mut copy = DmaBufferBuilder::new();
    copy.push(&virtual_copy(PAGE, VA_SOURCE, VA_DESTINATION));
    run_virtual_as(&mut h, &copy, 1, SubmitStatus::Ok);
    assert!(h.read_vram(0x10_0000, PAGE_USIZE) == old);

    // The KMD remaps the source page and "forgets" FLUSH_TLB.
    tables.map(VA_SOURCE, &[pte(0, data_page(50), 0)]).unwrap();
    apply(&mut h, &mut tables, 2);
    let event = h.post_wait_event();
    run_virtual_as(&mut h, &copy, 3, SubmitStatus::Ok);
    // Served from the cache, as hardware would: the old page was copied again.
    assert!(
        h.read_vram(0x10_0000, PAGE_USIZE) == old,
        "the stale translation was not served"
    );
    let stale = h.wait_event(event);
    assert_eq!(stale.kind, WDDM_GPU_EVENT_STALE_TRANSLATION);
    assert_eq!(stale.stale.virtual_address, VA_SOURCE);
    assert_eq!(stale.stale.page_table_level, 0);
    assert_eq!(stale.stale.context_id, CONTEXT);
    assert_eq!(stale.stale.cached_entry, pte(0, data_page(0), 0));
    assert_eq!(stale.stale.memory_entry, pte(0, data_page(50), 0));
    assert!(h
        .backend
        .log()
        .contains("stale translation served for GPU VA"));

    // With the flush, the new page is read and nothing is stale.
    let mut flush = DmaBufferBuilder::new();
    flush.push(&flush_tlb(tables.root(), Some(VA_SOURCE..VA_SOURCE + PAGE)));
    h.write_ram(DMA_BUFFER, flush.bytes());
    let flushed = h.submit(&submit_command(DMA_BUFFER, flush.len(), 4));
    assert_eq!(flushed.status, SubmitStatus::Ok as u32);
    let quiet = h.post_wait_event();
    run_virtual_as(&mut h, &copy, 5, SubmitStatus::Ok);
    assert!(
        h.read_vram(0x10_0000, PAGE_USIZE) == new,
        "the flush was not seen"
    );
    assert!(!h.is_answered(&quiet), "no event after a flushed change");
}

#[test]
fn the_paging_node_moves_bytes_through_the_paging_process_and_reports_its_faults() {
    use wddm_gpu_abi::build::gpuva::{fill_virtual, transfer_virtual};
    use wddm_gpu_abi::context::WDDM_GPU_NODE_PAGING;

    let (mut h, tables) = mapped_gpu("gpummu-paging-va", 0);
    // The same tables serve as the system paging process's address space.
    const PAGING: u32 = 9;
    bind_context(&mut h, PAGING, WDDM_GPU_NODE_PAGING, 0, &tables);
    assert_eq!(
        h.register_status_page(STATUS_PAGE).hdr().type_,
        VIRTIO_GPU_RESP_OK_NODATA
    );
    let data = pattern(0x9a, 4 * PAGE_USIZE);
    for (i, page) in data.chunks(PAGE_USIZE).enumerate() {
        h.write_ram(data_page(i as u64), page);
    }
    let mut buffer = DmaBufferBuilder::new();
    buffer.push(&transfer_virtual(
        4 * PAGE,
        VA_SOURCE,
        VA_DESTINATION + PAGE,
    ));
    buffer.push(&fill_virtual(0x1111_1111, 8, VA_DESTINATION));
    h.write_ram(DMA_BUFFER, buffer.bytes());
    let done = h.submit(&submit_command(DMA_BUFFER, buffer.len(), 20));
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
    assert!(h.read_vram(0x10_0000 + PAGE, data.len()) == data);
    assert_eq!(h.read_vram(0x10_0000, 8), vec![0x11; 8]);

    // An unmapped source: PAGE_FAULT on the paging node, its record in node 0's slot.
    let event = h.post_wait_event();
    let unmapped = VA_SOURCE + 16 * PAGE;
    let mut faulting = DmaBufferBuilder::new();
    faulting.push(&transfer_virtual(8, unmapped, VA_DESTINATION));
    h.write_ram(DMA_BUFFER, faulting.bytes());
    let done = h.submit(&submit_command(DMA_BUFFER, faulting.len(), 21));
    assert_eq!(done.status, SubmitStatus::PageFault as u32, "{done:?}");
    assert_eq!(done.fault_address, unmapped);
    let fault_event = h.wait_event(event);
    // The generic fault record comes first, then the page-fault record.
    assert_eq!(fault_event.fault.address, unmapped);
    let slot = STATUS_PAGE + u64::from(WDDM_GPU_PAGE_FAULT_OFFSET);
    let record = WddmGpuPageFaultRecord::read_from_bytes(
        &h.read_ram(slot, size_of::<WddmGpuPageFaultRecord>()),
    )
    .unwrap();
    assert_eq!(record.node_ordinal, WDDM_GPU_NODE_PAGING);
    assert_eq!(record.context_id, PAGING);
    assert_eq!(record.fence_id, 21);
    assert_eq!(record.fault.virtual_address, unmapped);
    assert_eq!(record.fault.kind, WDDM_GPU_MMU_FAULT_NOT_PRESENT);
    assert_eq!(record.sequence, 1);
    // The paging node goes on.
    h.write_ram(DMA_BUFFER, buffer.bytes());
    let done = h.submit(&submit_command(DMA_BUFFER, buffer.len(), 22));
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");
}

#[test]
fn stop_cont_keeps_contexts_and_a_guest_reset_drops_them() {
    let (mut h, _tables) = mapped_gpu("gpummu-lifecycle", 0);
    let mut signal = DmaBufferBuilder::new();
    signal.push(&virtual_signal(VA_FENCE, 1));
    run_virtual_as(&mut h, &signal, 1, SubmitStatus::Ok);
    // VM stop and cont: the context and its root survive.
    let base = h.stop_device();
    h.resume_device(base);
    let mut again = DmaBufferBuilder::new();
    again.push(&virtual_signal(VA_FENCE, 2));
    run_virtual_as(&mut h, &again, 2, SubmitStatus::Ok);
    assert_eq!(h.read_ram(FENCE_PAGE, 8), 2u64.to_le_bytes());
    // A guest reset (QEMU 10: GET_VRING_BASE, then RESET_DEVICE): every context is gone.
    h.stop_device();
    h.reset_device();
    h.start_device_anew();
    run_virtual_as(&mut h, &again, 3, SubmitStatus::BadContext);
}

#[test]
fn preempt_stops_the_virtual_node_and_returns_its_work_preempted() {
    use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_ZERO;
    use wddm_gpu_frontend_kit::harness::SLOT_ROOM;

    let (mut h, mut tables) = mapped_gpu("gpummu-preempt", 0);
    // Two 512 GiB root slots that read as zeros: a copy between them is long and touches no
    // memory.
    let (from, to) = (4u64 << 39, 6u64 << 39);
    tables.set(from, 3, pte(0, 0, WDDM_GPU_PTE_ZERO)).unwrap();
    tables.set(to, 3, pte(0, 0, WDDM_GPU_PTE_ZERO)).unwrap();
    apply(&mut h, &mut tables, 2);
    // A completed virtual submission: the virtual node's LastCompletedFenceId.
    let mut signal = DmaBufferBuilder::new();
    signal.push(&virtual_signal(VA_FENCE, 4));
    run_virtual_as(&mut h, &signal, 29, SubmitStatus::Ok);
    let mut long = DmaBufferBuilder::new();
    long.push(&virtual_copy(256 << 30, from, to));
    h.write_ram(DMA_PAGE, long.bytes());
    let running = h.post(
        submit_virtual(CONTEXT, VA_DMA, long.len(), 30).as_bytes(),
        SLOT_ROOM,
    );
    let queued = h.post(
        submit_virtual(CONTEXT, VA_DMA, long.len(), 31).as_bytes(),
        SLOT_ROOM,
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    let preempt = h.post_preempt();
    let answer = h.wait_preempt(preempt);
    // Per node, as DXGK_INTERRUPT_DMA_PREEMPTED reports it: the paging node preempted nothing
    // (its last fence 2), the virtual node its running 30 and queued 31 (its last 29).
    assert_eq!(
        (
            answer.preempted_fence,
            answer.last_completed_fence,
            answer.preempted_count
        ),
        (0, 2, 0),
        "{answer:?}"
    );
    assert_eq!(
        (
            answer.virtual_preempted_fence,
            answer.virtual_last_completed_fence,
            answer.virtual_preempted_count
        ),
        (30, 29, 2),
        "{answer:?}"
    );
    for (pending, fence) in [(running, 30), (queued, 31)] {
        let done: WddmGpuRespSubmitVirtual = h.wait_reply(pending).exact();
        assert_eq!(done.submission_fence_id, fence);
        assert_eq!(done.status, SubmitStatus::Preempted as u32, "{done:?}");
    }
    // The node takes work again.
    let mut signal = DmaBufferBuilder::new();
    signal.push(&virtual_signal(VA_FENCE, 5));
    run_virtual_as(&mut h, &signal, 32, SubmitStatus::Ok);
}

/// A session of both nodes recorded with `--record-data` and replayed: contexts rebuilt from
/// the recorded commands, the paging process's GPU VAs, a leaf entry the CPU wrote straight
/// into VRAM (only the recorded page-table reads carry it), a real and an injected page fault,
/// NODE_FAULTED, RESET_ENGINE, an injected hang, a preempted long copy; every answer matches,
/// the per-node counts are the live ones and so is the VRAM. An altered command is caught.
#[test]
fn a_recorded_session_of_both_nodes_replays_with_the_same_answers_counts_and_vram() {
    use wddm_gpu_abi::build::gpuva::transfer_virtual;
    use wddm_gpu_abi::context::{WddmGpuCmdSubmitVirtual, WDDM_GPU_NODE_PAGING};
    use wddm_gpu_abi::gpuva::WDDM_GPU_PTE_ZERO;
    use wddm_gpu_frontend_kit::backend_process::TIMEOUT;
    use wddm_gpu_frontend_kit::harness::SLOT_ROOM;

    let dir = std::env::temp_dir().join(format!("wddm-gpummu-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("both.wgpurec");
    let (mut h, mut tables) = mapped_gpu_with(
        "gpummu-record",
        0,
        &["--record", record.to_str().unwrap(), "--record-data"],
    );
    const PAGING: u32 = 9;
    bind_context(&mut h, PAGING, WDDM_GPU_NODE_PAGING, 0, &tables);
    let data = pattern(0x7ec, 16 * PAGE_USIZE);
    for (i, page) in data.chunks(PAGE_USIZE).enumerate() {
        h.write_ram(data_page(i as u64), page);
    }

    // The virtual node copies, fills and signals; the paging node moves through the paging
    // process's VAs.
    let mut work = DmaBufferBuilder::new();
    work.push(&virtual_copy(
        16 * PAGE - 100,
        VA_SOURCE + 100,
        VA_DESTINATION,
    ));
    work.push(&virtual_fill(
        0x0a0b_0c0d,
        3 * PAGE,
        VA_DESTINATION + 17 * PAGE,
    ));
    work.push(&virtual_signal(VA_FENCE, 70));
    run_virtual_as(&mut h, &work, 70, SubmitStatus::Ok);
    let mut paging = DmaBufferBuilder::new();
    paging.push(&transfer_virtual(
        2 * PAGE,
        VA_SOURCE,
        VA_DESTINATION + 15 * PAGE,
    ));
    h.write_ram(DMA_BUFFER, paging.bytes());
    let done = h.submit(&submit_command(DMA_BUFFER, paging.len(), 20));
    assert_eq!(done.status, SubmitStatus::Ok as u32, "{done:?}");

    // A leaf entry written by the CPU through the BAR, no paging packet: the replay finds it
    // only in the recorded page-table reads from VRAM.
    tables
        .map(VA_SOURCE + 16 * PAGE, &[pte(0, data_page(40), 0)])
        .unwrap();
    h.write_ram(data_page(40), &pattern(0x40, PAGE_USIZE));
    for write in tables.take() {
        let (table, start, entries) = write.slots();
        assert_ne!(table.segment, 0, "the leaf tables are in VRAM");
        h.write_vram(table.address + u64::from(start) * 8, entries.as_bytes());
    }
    let mut from_new_page = DmaBufferBuilder::new();
    from_new_page.push(&virtual_copy(
        PAGE,
        VA_SOURCE + 16 * PAGE,
        VA_DESTINATION + 4 * PAGE,
    ));
    run_virtual_as(&mut h, &from_new_page, 71, SubmitStatus::Ok);

    // A page fault, NODE_FAULTED until RESET_ENGINE.
    let mut faulting = DmaBufferBuilder::new();
    faulting.push(&virtual_copy(64, VA_SOURCE + 17 * PAGE, VA_DESTINATION));
    run_virtual_as(&mut h, &faulting, 72, SubmitStatus::PageFault);
    let mut fill = DmaBufferBuilder::new();
    fill.push(&virtual_fill(0x0303_0303, 64, VA_DESTINATION + 5 * PAGE));
    run_virtual_as(&mut h, &fill, 73, SubmitStatus::NodeFaulted);
    ok_nodata(&mut h, reset_engine().as_bytes());
    run_virtual_as(&mut h, &fill, 74, SubmitStatus::Ok);

    // Injected: a page fault, then a hang that RESET_ENGINE ends.
    h.backend.ctl_ok("arm page-fault va=0x4321000 fence=75");
    run_virtual_as(&mut h, &fill, 75, SubmitStatus::PageFault);
    ok_nodata(&mut h, reset_engine().as_bytes());
    h.backend.ctl_ok("arm hang node=1 fence=76");
    h.write_ram(DMA_PAGE, fill.bytes());
    let hung = h.post(
        submit_virtual(CONTEXT, VA_DMA, fill.len(), 76).as_bytes(),
        SLOT_ROOM,
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    ok_nodata(&mut h, reset_engine().as_bytes());
    let done: WddmGpuRespSubmitVirtual = h.wait_reply(hung).exact();
    assert_eq!(done.status, SubmitStatus::Reset as u32, "{done:?}");

    // A long copy between zero pages, preempted part way: the replay stops it at the same
    // interruption check.
    let (from, to) = (4u64 << 39, 6u64 << 39);
    tables.set(from, 3, pte(0, 0, WDDM_GPU_PTE_ZERO)).unwrap();
    tables.set(to, 3, pte(0, 0, WDDM_GPU_PTE_ZERO)).unwrap();
    apply(&mut h, &mut tables, 21);
    let mut long = DmaBufferBuilder::new();
    long.push(&virtual_copy(256 << 30, from, to));
    h.write_ram(DMA_PAGE, long.bytes());
    let running = h.post(
        submit_virtual(CONTEXT, VA_DMA, long.len(), 77).as_bytes(),
        SLOT_ROOM,
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    let preempt = h.post_preempt();
    assert_eq!(h.wait_preempt(preempt).virtual_preempted_count, 1);
    let done: WddmGpuRespSubmitVirtual = h.wait_reply(running).exact();
    assert_eq!(done.status, SubmitStatus::Preempted as u32, "{done:?}");
    let preempted_bytes = done.bytes_transferred;
    run_virtual_as(&mut h, &fill, 78, SubmitStatus::Ok);

    let live: serde_json::Value = serde_json::from_str(&h.backend.stats_json()).unwrap();
    let vram = h.read_vram(0, 16 << 20);
    let mut backend = h.disconnect();
    assert!(backend.wait_exit(TIMEOUT).success());

    let replay = |file: &std::path::Path, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
            .arg("replay")
            .arg(file)
            .args(args)
            .output()
            .unwrap()
    };
    let dump = dir.join("vram.bin");
    let output = replay(&record, &["--json", "--dump-vram", dump.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let replayed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let summary = &replayed["replay"];
    assert_eq!(summary["mismatches"], serde_json::json!([]), "{summary}");
    assert_eq!(summary["refusals"], serde_json::json!([]), "{summary}");
    // Fences 70 to 78 on the virtual node; the tables (1), the transfer (20) and the zero
    // pages (21) on the paging node.
    assert_eq!(summary["virtual_submissions"], 9, "{summary}");
    assert_eq!(summary["submissions"], 12, "{summary}");
    assert_eq!(summary["context_commands"], 4, "{summary}");
    assert_eq!(summary["engine_resets"], 3, "{summary}");
    // Each node's counts are the live ones (latencies are the replay's own).
    let counts = |stats: &serde_json::Value| -> Vec<serde_json::Value> {
        stats["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| {
                serde_json::json!([
                    node["node"],
                    node["submissions"],
                    node["faults"],
                    node["bytes"],
                    node["packets"]
                ])
            })
            .collect()
    };
    assert_eq!(counts(&replayed), counts(&live), "{replayed}");
    let virtual_bytes = &counts(&replayed)[1];
    assert!(
        virtual_bytes[3].as_u64().unwrap() > preempted_bytes,
        "{virtual_bytes}"
    );
    let replayed_vram = std::fs::read(&dump).unwrap();
    let differs = (0..vram.len()).find(|&i| replayed_vram.get(i) != vram.get(i));
    assert!(
        differs.is_none(),
        "the replayed VRAM differs first at {differs:#x?} (live {:02x?}, replayed {:02x?})",
        differs.map(|i| &vram[i..(i + 16).min(vram.len())]),
        differs.and_then(|i| replayed_vram.get(i..(i + 16).min(replayed_vram.len())))
    );

    // The second copy's command with its end moved to its start: no packet runs.
    let mut bytes = std::fs::read(&record).unwrap();
    let sent = submit_virtual(CONTEXT, VA_DMA, from_new_page.len(), 71);
    let at = bytes
        .windows(size_of::<WddmGpuCmdSubmitVirtual>())
        .position(|window| window == sent.as_bytes())
        .expect("the command is in the recording");
    let end = std::mem::offset_of!(WddmGpuCmdSubmitVirtual, end_offset);
    bytes[at + end..at + end + 4].copy_from_slice(&sent.start_offset.to_le_bytes());
    let tampered = dir.join("tampered.wgpurec");
    std::fs::write(&tampered, &bytes).unwrap();
    let output = replay(&tampered, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("(node 1, fence 71) answered differently"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
