//! Writes the seed inputs of every fuzz target into `DIR/<target>/seed-<name>`:
//!
//!     cargo run --manifest-path device/fuzz/Cargo.toml --example seeds -- DIR
//!
//! The repository corpus (`device/fuzz/corpus/`) started from these and was minimised with
//! `cargo fuzz cmin`; scripts/fuzz --seeds adds them again.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use vhost_user_wddm_gpu_fuzz::engine_world::{self, step, Submission};
use vhost_user_wddm_gpu_fuzz::frontend::{header, Op, DATA, VRAM_GPA};
use vhost_user_wddm_gpu_fuzz::input::Writer;
use vhost_user_wddm_gpu_fuzz::virtual_world;
use vhost_user_wddm_gpu_fuzz::walk_input::{self, translate, Header, Op as WalkOp};
use wddm_gpu_abi::build::gpuva::{
    flush_tlb, pte, update_page_table, update_page_table_repeat, virtual_copy, virtual_fill,
    virtual_signal, TableAt,
};
use wddm_gpu_abi::build::{self, Adl, DmaBufferBuilder, Endpoint};
use wddm_gpu_abi::caps::{WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo, VIRTIO_GPU_CMD_GET_CAPSET,
    VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO, WDDM_GPU_CMD_PREEMPT,
    WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET, WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::gpuva::{
    WDDM_GPU_PTE_LARGE_PAGE, WDDM_GPU_PTE_NO_EXECUTE, WDDM_GPU_PTE_PAGE_TABLE_64KB,
    WDDM_GPU_PTE_READ_ONLY, WDDM_GPU_PTE_ZERO,
};
use wddm_gpu_abi::packet::{
    WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2, WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL,
};
use wddm_gpu_abi::status::WddmGpuCmdRegisterStatusPage;
use wddm_gpu_abi::submit::WDDM_GPU_SUBMIT_FLAG_PAGING;
use wddm_gpu_frontend_kit::page_tables::PageTables;
use wddm_gpu_frontend_kit::requests::submit_command;
use zerocopy::{Immutable, IntoBytes};

const PAGE: u64 = 4096;

fn segment(id: u32, address: u64) -> Endpoint {
    Endpoint::Segment { id, address }
}

fn frames(list_address: u64, frame_count: u32, byte_offset: u32) -> Endpoint {
    Endpoint::Frames {
        list_address,
        frame_count,
        byte_offset,
    }
}

/// The bytes of a DMA buffer holding these packets back to back.
macro_rules! dma {
    ($($packet:expr),* $(,)?) => {{
        let mut buffer = DmaBufferBuilder::new();
        $(buffer.push(&$packet);)*
        buffer.bytes().to_vec()
    }};
}

/// A cache-coherent MAP_APERTURE of `page_count` pages from the start of the list.
fn map(
    segment_id: u32,
    first_page: u64,
    page_count: u64,
    list: u64,
    count: u32,
) -> WddmGpuPacketMapAperture {
    build::map_aperture(
        segment_id,
        WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
        first_page,
        page_count,
        list,
        count,
        0,
    )
}

/// MAP_APERTURE2 of `page_count` pages from the start of a contiguous ADL of as many pages.
fn map2_contiguous(
    segment_id: u32,
    first_page: u64,
    page_count: u32,
    base_page: u64,
) -> WddmGpuPacketMapAperture2 {
    let adl = Adl::Contiguous {
        base_page,
        page_count,
    };
    build::map_aperture2(segment_id, 0, first_page, page_count.into(), adl, 0)
}

fn bytes_of<T: IntoBytes + Immutable>(value: &T) -> Vec<u8> {
    value.as_bytes().to_vec()
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed file");
}

fn control_requests() -> Vec<(&'static str, Vec<u8>)> {
    let submit = submit_command(0x9_0000, 0x100, 7);
    let hdr = |type_| bytes_of(&WddmGpuCtrlHdr::with_type(type_));
    vec![
        ("display-info", hdr(VIRTIO_GPU_CMD_GET_DISPLAY_INFO)),
        (
            "capset-info",
            bytes_of(&WddmGpuGetCapsetInfo {
                hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
                capset_index: 0,
                padding: 0,
            }),
        ),
        (
            "capset",
            bytes_of(&WddmGpuGetCapset {
                hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET),
                capset_id: WDDM_GPU_CAPSET_ID,
                capset_version: WDDM_GPU_CAPSET_VERSION,
            }),
        ),
        ("edid", hdr(0x010a)),
        ("submit", bytes_of(&submit)),
        ("submit-truncated", bytes_of(&submit)[..40].to_vec()),
        (
            "status-page",
            bytes_of(&WddmGpuCmdRegisterStatusPage {
                hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
                address: DATA + 0x4_0000,
            }),
        ),
        ("wait-event", hdr(WDDM_GPU_CMD_WAIT_EVENT)),
        ("preempt", hdr(WDDM_GPU_CMD_PREEMPT)),
        ("reset", hdr(WDDM_GPU_CMD_RESET)),
        ("unknown", hdr(0x0101)),
    ]
}

fn control_decode(dir: &Path) {
    for (name, bytes) in control_requests() {
        write(dir, "control_decode", name, &bytes);
    }
}

fn layout(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../qemu-configs/layouts");
    let mut shipped: Vec<_> = std::fs::read_dir(&root)
        .expect("qemu-configs/layouts")
        .map(|entry| entry.expect("layout file").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    shipped.sort();
    for path in shipped {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        write(dir, "layout", &name, &std::fs::read(&path).unwrap());
    }
    write(
        dir,
        "layout",
        "fuzz-mixed",
        engine_world::LAYOUT_MIXED.as_bytes(),
    );
    write(
        dir,
        "layout",
        "fuzz-wddm2",
        engine_world::LAYOUT_WDDM2.as_bytes(),
    );
    // The example docs/layouts.md shows.
    let example = include_str!("../../../docs/layout-example.toml");
    write(dir, "layout", "documented-example", example.as_bytes());
}

/// Engine inputs: a layout byte, then steps.
fn engine(dir: &Path) {
    use engine_world::{DMA, RAM_HIGH};
    let data = 0x8_0000u64; // data frames in RAM below the hole
    let list = 0x4_0000u64; // frame lists
    let pfn = |address: u64| address / PAGE;

    // Default layout: segment 1 = CPU-visible VRAM, 2 = the aperture.
    let mut w = Writer::new();
    w.u8(0);
    w.u8(step::RAM)
        .u32(u32::try_from(data).unwrap())
        .blob(&[0x5a; 0x2000]);
    w.u8(step::FRAMES)
        .u32(u32::try_from(list).unwrap())
        .u32(u32::try_from(pfn(data)).unwrap())
        .u16(4)
        .u8(1);
    w.u8(step::FRAMES)
        .u32(u32::try_from(list).unwrap() + 0x100)
        .u32(u32::try_from(pfn(RAM_HIGH)).unwrap())
        .u16(8)
        .u8(1);
    let packets = dma![
        build::transfer(0x4000, frames(list, 4, 0), segment(1, 0x1000)),
        map(2, 0, 4, list, 4),
        build::transfer(0x4000, segment(2, 0), segment(1, 0x8000)),
        build::fill(0xdead_beef, 0x1000, segment(1, 0x1_0000)),
        build::fence(1),
        map2_contiguous(2, 16, 8, pfn(RAM_HIGH)),
        build::map_aperture2(
            2,
            0,
            32,
            8,
            Adl::Pages {
                address: list + 0x100,
                page_count: 8,
            },
            0,
        ),
        build::transfer(0x2000, segment(2, 16 * PAGE), frames(list, 4, 0x800)),
        build::transfer(0x3000, segment(1, 0x1000), segment(1, 0x1800)),
        build::unmap_aperture(2, 0, 4, data),
        build::segment_access(WDDM_GPU_OP_DISCARD_CONTENT, 1, 0, 0),
        build::segment_access(WDDM_GPU_OP_READ_PHYSICAL, 1, 0x100, 4),
        build::segment_access(WDDM_GPU_OP_WRITE_PHYSICAL, 2, 16 * PAGE, 8),
        build::fence(2),
    ];
    submit(&mut w, 0, 1, 0, 0, &packets);
    // A DMA buffer read through the aperture: pages 16.. map RAM_HIGH, which holds it.
    let through_aperture = dma![
        build::fence(3),
        build::transfer(0x100, segment(2, 0), segment(1, 0))
    ];
    w.u8(step::RAM)
        .u32(u32::try_from(RAM_HIGH).unwrap())
        .blob(&through_aperture);
    submit(&mut w, 3, 3, 16 * PAGE, 2, &through_aperture);
    write(dir, "engine", "default-layout-every-packet", &w.bytes);

    // The same packets, preempted mid-transfer, and deferred every two packets.
    let big = dma![
        map2_contiguous(2, 0, 512, pfn(0)),
        build::transfer(0x18_0000, segment(2, 0), segment(2, 0x8_0000)),
        build::fence(4),
        build::transfer(0x8_0000, segment(1, 0), segment(1, 0x1000)),
        build::fence(5),
    ];
    let mut w = Writer::new();
    w.u8(0);
    for (stop, defer_every) in [(4u8, 0u8), (0x82, 0), (0, 2)] {
        Submission {
            place: 0,
            fence: 4,
            stop,
            defer_every,
            at: 0x40,
            segment: 0,
            packets: &big,
        }
        .write(&mut w);
    }
    w.u8(step::RESET);
    write(dir, "engine", "interrupted-and-deferred", &w.bytes);

    // Mixed layout: 1 and 2 CPU-visible (2 banked at 0x4000_0000), 3 device-only at 4 GiB,
    // 4 the aperture (the paging-buffer segment).
    let mut w = Writer::new();
    w.u8(1);
    w.u8(step::VRAM).u32(0x1000).blob(&[0xa5; 0x1000]);
    w.u8(step::FRAMES)
        .u32(u32::try_from(list).unwrap())
        .u32(u32::try_from(pfn(data)).unwrap())
        .u16(16)
        .u8(1);
    let packets = dma![
        build::transfer(0x1000, segment(1, 0x1000), segment(3, 0x1_0000_0000)),
        build::transfer(0x2_0000, segment(3, 0x1_0000_0000), segment(2, 0x4000_0000)),
        build::fill(0x0102_0304, 0x8000, segment(3, 0x1_0000_8000)),
        map(4, 0, 16, list, 16),
        build::transfer(0x1_0000, segment(4, 0), segment(3, 0x1_0001_0000)),
        build::fence(10),
    ];
    submit(&mut w, 0, 10, 0, 0, &packets);
    // A DMA buffer in VRAM segment 1.
    let in_vram = dma![
        build::fence(11),
        build::segment_access(WDDM_GPU_OP_READ_PHYSICAL, 3, 0x1_0000_0000, 8),
    ];
    submit(&mut w, 2, 11, 0x4_0000, 1, &in_vram);
    // A malformed command: start past end.
    w.u8(step::SUBMIT_RAW)
        .u8(0)
        .u32(12)
        .u8(0)
        .u8(0)
        .u16(0)
        .blob(build::fence(12).as_bytes())
        .u32(16)
        .u32(16)
        .u32(8)
        .u32(WDDM_GPU_SUBMIT_FLAG_PAGING)
        .u8(0)
        .u8(0);
    write(dir, "engine", "mixed-layout", &w.bytes);

    // WDDM 2.0: 64 KiB pages; a frame list ending inside the hole.
    let mut w = Writer::new();
    w.u8(2);
    w.u8(step::FRAMES)
        .u32(u32::try_from(list).unwrap())
        .u32(u32::try_from(pfn(0x1f_0000)).unwrap())
        .u16(32)
        .u8(1);
    let packets = dma![
        map(2, 0, 32, list, 32),
        build::transfer(0x2_0000, frames(list, 32, 0), segment(1, 0x1_0000)),
        build::fence(20),
    ];
    submit(&mut w, 1, 20, DMA + 0x8000, 0, &packets);
    // The same from frames above the hole, deferred after every packet.
    w.u8(step::FRAMES)
        .u32(u32::try_from(list).unwrap())
        .u32(u32::try_from(pfn(RAM_HIGH)).unwrap())
        .u16(32)
        .u8(1);
    Submission {
        place: 1,
        fence: 21,
        stop: 0,
        defer_every: 1,
        at: DMA + 0x8000,
        segment: 0,
        packets: &packets,
    }
    .write(&mut w);
    write(dir, "engine", "wddm2-hole", &w.bytes);
}

/// A submission that runs to its end undeferred (see [`Submission`] for `place`, `at` and
/// `segment`), written as the next engine step.
fn submit(w: &mut Writer, place: u8, fence: u32, at: u64, segment: u8, packets: &[u8]) {
    Submission {
        place,
        fence,
        stop: 0,
        defer_every: 0,
        at,
        segment,
        packets,
    }
    .write(w);
}

fn ops(bar_mode: u8, layout: u8, ops: &[Op]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(header(bar_mode, layout));
    for op in ops {
        op.write(&mut w);
    }
    w.bytes
}

fn backend(dir: &Path) {
    let requests = control_requests();
    let request = |name: &str| {
        requests
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bytes)| bytes.clone())
            .unwrap()
    };
    let list = DATA;
    let mut frame_list = Vec::new();
    for i in 0..4u64 {
        frame_list.extend_from_slice(&((DATA + 0x1_0000) / PAGE + i).to_le_bytes());
    }
    let packets = dma![
        build::transfer(0x4000, frames(list, 4, 0), segment(1, 0x1000)),
        map(2, 0, 4, list, 4),
        build::transfer(0x1000, segment(2, 0), segment(1, 0x8000)),
        build::fence(1),
    ];
    let big = dma![
        map2_contiguous(2, 0, 128, DATA / PAGE),
        build::transfer(256 << 20, segment(2, 0), segment(2, 0x4000)),
        build::fence(2),
    ];
    // A session as QEMU and a driver run it: start, capset, status page, a wait, submissions.
    let session = vec![
        Op::Start(1),
        Op::Post(0, 0, 0, 0x400, request("capset-info")),
        Op::Kick(0, 0),
        Op::Post(0, 1, 0, 0x1000, request("capset")),
        Op::Kick(0, 0),
        Op::Post(0, 2, 0, 0x40, request("status-page")),
        Op::Post(0, 3, 0, 0x100, request("wait-event")),
        Op::Kick(0, 0),
        Op::WriteRam(u32::try_from(list).unwrap(), frame_list.clone()),
        Op::Submit(0, 4, 1, packets.clone()),
        Op::Kick(0, 0),
        Op::Post(0, 5, 0, 0x40, request("display-info")),
        Op::Post(1, 0, 1, 0, vec![0; 56]),
        Op::Kick(1, 0),
        Op::Kick(0, 0),
        Op::Settle(5),
    ];
    write(dir, "backend", "session", &ops(1, 0, &session));

    // The session, then a WAIT_EVENT answered (the BAR moves) while the rings are stopped, so
    // the answer is held, and the backend dropped as it stands (header bit 4: no RESET_DEVICE).
    let mut stopped = session.clone();
    stopped.extend([
        Op::Post(0, 8, 0, 0x100, request("wait-event")),
        Op::Kick(0, 0),
        Op::Stop,
        Op::MemTable(4, 0xd_0000, 0),
    ]);
    let mut bytes = ops(1, 0, &stopped);
    bytes[0] |= 0x10;
    write(dir, "backend", "dropped-while-stopped", &bytes);

    // VM lifecycle: stop mid-submission, resume at the same index, then a reset (rings anew).
    let mut lifecycle = session.clone();
    lifecycle.extend([
        Op::Submit(0, 6, 2, big.clone()),
        Op::Kick(0, 0),
        Op::Stop,
        Op::Start(1),
        Op::Kick(0, 0),
        Op::Post(0, 7, 0, 0x40, request("preempt")),
        Op::Kick(0, 0),
        Op::Stop,
        Op::Reset,
        Op::Start(1 | 16),
        Op::Post(0, 0, 0, 0x400, request("capset-info")),
        Op::Kick(0, 0),
    ]);
    write(dir, "backend", "lifecycle", &ops(1, 0, &lifecycle));

    // For the mixed layout: 3 is device-only VRAM at 4 GiB, 4 the aperture.
    let mixed = dma![
        map(4, 0, 4, list, 4),
        build::transfer(0x4000, segment(4, 0), segment(3, 0x1_0000_0000)),
        build::transfer(0x4000, segment(3, 0x1_0000_0000), segment(1, 0x1000)),
        build::fence(3),
    ];
    // The BAR moves and disappears (memory tables and region messages) under a status page
    // and queued work; a response buffer inside the BAR window.
    let bar = vec![
        Op::Start(0),
        Op::Post(0, 2, 0, 0x40, request("status-page")),
        Op::Post(0, 3, 0, 0x100, request("wait-event")),
        Op::Post(0, 4, 0, 0x100, request("wait-event")),
        Op::Kick(0, 0),
        Op::RemoveRegion(2, u32::try_from(VRAM_GPA >> 12).unwrap()),
        Op::AddRegion(2, 0xf_0000),
        Op::MemTable(1 | 8, 0xe_0000, 0x1_0000),
        Op::Post(0, 5, 7, 0x40, request("capset-info")),
        Op::Kick(0, 0),
        Op::MemTable(2 | 4, 0xd_0000, 0x100),
        Op::WriteRam(u32::try_from(list).unwrap(), frame_list.clone()),
        Op::Submit(0, 6, 3, mixed.clone()),
        Op::Kick(0, 0),
        Op::AddRegion(5, 0x2_0000),
        Op::Post(0, 7, 0, 0x40, request("reset")),
        Op::Kick(0, 0),
    ];
    write(dir, "backend", "bar-moves", &ops(0, 1, &bar));

    // Every chain shape the guest can get wrong, with indirect descriptors and EVENT_IDX.
    let mut shapes = vec![Op::Start(1)];
    for shape in 0..10u8 {
        shapes.push(Op::Post(0, shape, shape, 0x100, request("capset-info")));
    }
    shapes.extend([
        Op::Kick(0, 0),
        Op::UsedEvent(0, 3),
        Op::AvailIdx(0, 500),
        Op::Kick(0, 0),
        Op::VringNum(0, 3),
        Op::Kick(0, 1),
        Op::VringAddr(0, 0x5, 0x800, 0x1000),
        Op::Config(0, 0x28),
        Op::Config(0xff0, 0x10),
        Op::Kick(2, 1),
        Op::Kick(0, 3),
    ]);
    write(dir, "backend", "chain-shapes", &ops(1, 2, &shapes));

    // Shared-memory BAR mode: the backend channel, SHMEM_MAP at the device start.
    let shmem = vec![
        Op::ProtocolFeatures(u64::MAX),
        Op::ShmemConfig,
        Op::BackendReq,
        Op::GpuSocket,
        Op::Start(1),
        Op::Post(0, 0, 0, 0x1000, request("capset")),
        Op::Kick(0, 0),
        Op::Features(0),
        Op::VringKick(0, true),
        Op::VringCall(0, false),
        Op::VringEnable(0, false),
        Op::GetVringBase(0),
        Op::VringBase(0, 7),
        Op::Kick(0, 1),
        Op::MemTable(16, 0, 0x200),
    ];
    write(dir, "backend", "shmem", &ops(2, 0, &shmem));
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: seeds DIR (writes DIR/<target>/seed-*)");
    let dir = Path::new(&dir);
    control_decode(dir);
    layout(dir);
    engine(dir);
    backend(dir);
    gpummu_walk(dir);
    virtual_engine(dir);
    recording(dir);
}

/// Recordings: one entry of every kind (both nodes' submissions with reads, every start of a
/// virtual one), and a header alone with a layout text.
fn recording(dir: &Path) {
    use vhost_user_wddm_gpu::recording_format::{
        encode_entry, encode_header, ContextCommand, Entry, Header, MemoryTable, Outcome, ResetBy,
        Run, RunEnd, Submission as Recorded, VirtualStart, VirtualSubmission,
    };
    use vhost_user_wddm_gpu::{Captured, CapturedRead, Interruption, ReadKind, Store};
    use wddm_gpu_abi::context::{
        WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdSetRootPageTable,
        WddmGpuCmdSubmitVirtual,
    };
    use wddm_gpu_abi::submit::SubmitStatus;

    let captured = || Captured {
        reads: vec![
            CapturedRead {
                store: Store::Ram,
                kind: ReadKind::Metadata,
                address: 0x10_0000,
                length: 4,
            },
            CapturedRead {
                store: Store::Vram,
                kind: ReadKind::Data,
                address: 0x2000,
                length: 2,
            },
        ],
        bytes: vec![1, 2, 3, 4, 5, 6],
        data_dropped: 0,
    };
    let outcome = Outcome {
        status: SubmitStatus::Ok as u32,
        packets_completed: 2,
        bytes_transferred: 4096,
        ..Outcome::default()
    };
    let virtual_submission = |start| {
        Entry::VirtualSubmission(VirtualSubmission {
            at_ns: 2_000,
            duration_ns: 50,
            cmd: WddmGpuCmdSubmitVirtual {
                context_id: 3,
                node_ordinal: 1,
                dma_buffer_address: 0x40_0000,
                dma_buffer_size: 64,
                end_offset: 64,
                submission_fence_id: 9,
                ..Default::default()
            },
            start,
            outcome,
            captured: captured(),
        })
    };
    let entries = [
        Entry::MemoryTable(MemoryTable {
            vram_window: Some(0xe000_0000..0xf000_0000),
            regions: vec![0..0x1000_0000, 0x1_0000_0000..0x1_1000_0000],
        }),
        Entry::Context(ContextCommand::Create(WddmGpuCmdCreateContext {
            context_id: 3,
            node_ordinal: 1,
            ..Default::default()
        })),
        Entry::Context(ContextCommand::SetRoot(WddmGpuCmdSetRootPageTable {
            context_id: 3,
            address: 0x100_0000,
            num_entries: 512,
            ..Default::default()
        })),
        Entry::InjectedFault {
            fence: 7,
            packet: 1,
            status: SubmitStatus::SegmentRange,
        },
        Entry::Submission(Recorded {
            at_ns: 1_000,
            queue_wait_ns: 10,
            duration_ns: 100,
            inline: true,
            cmd: submit_command(0x9_0000, 0x40, 7),
            runs: vec![
                Run {
                    packets: 1,
                    end: RunEnd::Deferred,
                },
                Run {
                    packets: 1,
                    end: RunEnd::Interrupted {
                        by: Interruption::Preempted,
                        checks: 3,
                    },
                },
            ],
            outcome,
            captured: captured(),
        }),
        virtual_submission(VirtualStart::Ran(RunEnd::Finished)),
        virtual_submission(VirtualStart::NodeFaulted),
        virtual_submission(VirtualStart::Stopped(Interruption::Reset)),
        virtual_submission(VirtualStart::InjectedPageFault {
            address: 0x432_1000,
            write: true,
        }),
        Entry::EngineReset {
            at_ns: 3_000,
            node: 1,
        },
        Entry::Preempt {
            at_ns: 4_000,
            count: 2,
        },
        Entry::Reset {
            at_ns: 5_000,
            by: ResetBy::Frontend,
        },
        Entry::Context(ContextCommand::Destroy(WddmGpuCmdDestroyContext {
            context_id: 3,
            ..Default::default()
        })),
    ];
    let header = Header {
        data: true,
        vram_size: 16 << 20,
        layout: None,
    };
    let mut bytes = Vec::new();
    encode_header(&header, &mut bytes).expect("header");
    for entry in &entries {
        encode_entry(entry, &mut bytes).expect("entry");
    }
    write(dir, "recording", "every-entry", &bytes);
    let mut bytes = Vec::new();
    let with_layout = Header {
        layout: Some("[[segment]]\nid = 1\n".into()),
        ..header
    };
    encode_header(&with_layout, &mut bytes).expect("header");
    write(dir, "recording", "header-with-layout", &bytes);
}

/// A KMD's tables in the gpummu_walk target's image: the root at RAM page `root`, every other
/// table on the next free RAM page, each entry written by a [`WalkOp::WriteEntry`].
struct FakeKmd {
    bits: Vec<u32>,
    root: u64,
    next: u64,
    children: HashMap<(u64, u64), u64>,
    ops: Vec<WalkOp>,
}

impl FakeKmd {
    fn new(bits: &[u32], root: u64) -> Self {
        Self {
            bits: bits.to_vec(),
            root,
            next: root + 1,
            children: HashMap::new(),
            ops: Vec::new(),
        }
    }

    fn top(&self) -> u32 {
        u32::try_from(self.bits.len()).unwrap() - 1
    }

    fn index(&self, va: u64, level: u32) -> u64 {
        let shift = 12 + self.bits[..level as usize].iter().sum::<u32>();
        (va >> shift) & ((1 << self.bits[level as usize]) - 1)
    }

    /// The image offset of the entry for `va` at `level`, creating the tables above it.
    fn slot(&mut self, va: u64, level: u32) -> u64 {
        let mut table = self.root * PAGE;
        for at in ((level + 1)..=self.top()).rev() {
            let index = self.index(va, at);
            table = match self.children.get(&(table, index)) {
                Some(&child) => child,
                None => {
                    let child = self.next * PAGE;
                    self.next += 1;
                    self.children.insert((table, index), child);
                    self.write(table + index * 8, pte(0, child, 0));
                    child
                }
            };
        }
        table + self.index(va, level) * 8
    }

    fn write(&mut self, offset: u64, entry: u64) {
        self.ops.push(WalkOp::WriteEntry {
            offset: u32::try_from(offset).unwrap(),
            entry,
        });
    }

    /// Writes `entry` for `va` at `level`.
    fn set(&mut self, va: u64, level: u32, entry: u64) {
        let slot = self.slot(va, level);
        self.write(slot, entry);
    }

    fn op(&mut self, op: WalkOp) -> &mut Self {
        self.ops.push(op);
        self
    }

    fn seed(&self, header: &Header) -> Vec<u8> {
        let mut w = Writer::new();
        header.write(&mut w);
        for op in &self.ops {
            op.write(&mut w);
        }
        w.bytes
    }
}

fn walk_translate(va: u64, length: u64, access: u8, flags: u8) -> WalkOp {
    WalkOp::Translate {
        va,
        length,
        access,
        flags,
    }
}

/// gpummu_walk inputs: a header (geometry, root), then operations.
fn gpummu_walk(dir: &Path) {
    const READ: u8 = 0;
    const WRITE: u8 = 1;
    const EXECUTE: u8 = 2;
    let data = |page: u64| page * PAGE;

    // Four 9-bit levels, the tables on RAM pages 0 to 3, data on pages 8 to 15: a run over
    // contiguous pages, a gap, read-only and no-execute pages, a zero range, a large page that
    // RAM cannot hold; translations, a remap without and with a flush, the checking mode.
    let va = 0x12_3400_0000u64;
    let mut kmd = FakeKmd::new(&[9, 9, 9, 9], 0);
    for (i, page) in [8, 9, 10, 12].into_iter().enumerate() {
        kmd.set(va + i as u64 * PAGE, 0, pte(0, data(page), 0));
    }
    kmd.set(va + 4 * PAGE, 0, pte(0, data(13), WDDM_GPU_PTE_READ_ONLY));
    kmd.set(va + 5 * PAGE, 0, pte(0, data(14), WDDM_GPU_PTE_NO_EXECUTE));
    kmd.set(va + (2 << 20), 1, pte(0, 0, WDDM_GPU_PTE_ZERO));
    kmd.set(va + (4 << 20), 1, pte(0, 0, WDDM_GPU_PTE_LARGE_PAGE));
    kmd.op(walk_translate(va + 100, 6 * PAGE, READ, translate::TWICE))
        .op(walk_translate(va + 4 * PAGE, 8, WRITE, 0))
        .op(walk_translate(va + 5 * PAGE, 8, EXECUTE, 0))
        .op(walk_translate(va + 6 * PAGE, 8, READ, 0))
        .op(walk_translate(va + (2 << 20), 1 << 22, WRITE, 0))
        .op(walk_translate(va + (4 << 20), 64, READ, 0))
        .op(walk_translate(u64::MAX - 4, 8, READ, 0))
        .op(walk_translate(
            0xdead_beef_f00d,
            1 << 30,
            READ,
            translate::IN_RANGE,
        ))
        .op(WalkOp::Walk {
            va: va + 3 * PAGE,
            access: WRITE,
            in_range: false,
        })
        .op(WalkOp::Checking(true));
    // The remap a KMD forgets to flush, found by the checking mode; a range flush, then all.
    let slot = kmd.slot(va, 0);
    kmd.write(slot, pte(0, data(11), 0));
    kmd.op(walk_translate(va, 2 * PAGE, READ, translate::TWICE))
        .op(WalkOp::Flush {
            start: va,
            end: va + PAGE,
        })
        .op(walk_translate(va, 2 * PAGE, READ, 0))
        .op(WalkOp::FlushAll)
        .op(walk_translate(va, 16 * PAGE, WRITE, translate::TWICE));
    write(
        dir,
        "gpummu_walk",
        "four-levels",
        &kmd.seed(&Header::for_bits(&[9, 9, 9, 9], 0, 0)),
    );

    // Six 6-bit levels over one table whose every entry points back at itself.
    let looping: Vec<u8> = (0..64).flat_map(|_| pte(0, 0, 0).to_le_bytes()).collect();
    let mut kmd = FakeKmd::new(&[6; 6], 0);
    kmd.op(WalkOp::WriteBytes {
        offset: 0,
        bytes: looping,
    })
    .op(walk_translate(
        0x1234_5678,
        1 << 20,
        WRITE,
        translate::IN_RANGE,
    ))
    .op(WalkOp::Walk {
        va: 0xfff_ffff_ffff,
        access: EXECUTE,
        in_range: true,
    });
    let header = Header::for_bits(&[6; 6], 0, walk_input::flag::CHECKING);
    write(dir, "gpummu_walk", "self-loop", &kmd.seed(&header));

    // Two levels, the 12-bit leaf in segment 1, a root of 4 entries: a 64 KiB leaf table
    // mapping all of RAM as one 64 KiB page, a 4 KiB leaf, a root index past NumEntries.
    let mut kmd = FakeKmd::new(&[12, 9], 0);
    let leaf_64k = walk_input::RAM_BYTES; // segment 1 offset 0 in the image
    kmd.write(0, pte(1, 0, WDDM_GPU_PTE_PAGE_TABLE_64KB));
    kmd.write(leaf_64k, pte(0, 0, 0));
    kmd.write(8, pte(1, 0x1000, 0));
    kmd.write(leaf_64k + 0x1000, pte(0, data(3), WDDM_GPU_PTE_READ_ONLY));
    kmd.write(leaf_64k + 0x1008, pte(1, 0x7000, 0));
    kmd.op(walk_translate(0x1_0000 - 8, 0x2_0000, READ, 0))
        .op(walk_translate(1 << 24, 0x2000, WRITE, 0))
        .op(walk_translate(5 << 24, 8, READ, 0))
        .op(walk_translate(0, 1 << 16, EXECUTE, translate::TWICE));
    let mut header = Header::for_bits(&[12, 9], 0, 0);
    header.table_segments = 1;
    header.root_entries = 4;
    write(dir, "gpummu_walk", "segment-tables", &kmd.seed(&header));

    // Entries the walker must refuse: in the VRAM window, outside RAM, in an aperture and a
    // segment that does not exist, reserved bits, a large page at the leaf, the 64 KiB table
    // bit off level 1, a large page without the cap; then a root in segment 1.
    let mut kmd = FakeKmd::new(&[9, 9, 9], 0);
    let bad = [
        pte(0, walk_input::VRAM_WINDOW.start, 0),
        pte(0, 0x40_0000, 0),
        pte(2, 0, 0),
        pte(7, 0, 0),
        pte(0, data(8), 0) | (1 << 60),
        pte(0, 0, WDDM_GPU_PTE_LARGE_PAGE),
    ];
    for (i, &entry) in bad.iter().enumerate() {
        kmd.set(i as u64 * PAGE, 0, entry);
        kmd.set((i as u64 + 8) << 30, 2, entry);
    }
    kmd.set(1 << 29, 2, pte(0, data(4), WDDM_GPU_PTE_PAGE_TABLE_64KB));
    kmd.set(1 << 21, 1, pte(0, 0, WDDM_GPU_PTE_LARGE_PAGE));
    for i in 0..6u64 {
        kmd.op(walk_translate(i * PAGE, 8, READ, 0))
            .op(walk_translate((i + 8) << 30, 8, WRITE, 0));
    }
    kmd.op(walk_translate(1 << 29, 8, READ, 0))
        .op(walk_translate(1 << 21, 8, READ, 0))
        .op(WalkOp::SetRoot {
            segment: 1,
            address: 0,
            entries: 512,
        })
        .op(walk_translate(0, 8, READ, 0));
    let header = Header::for_bits(&[9, 9, 9], 0, walk_input::flag::NO_LARGE_PAGES);
    write(dir, "gpummu_walk", "refused-entries", &kmd.seed(&header));

    // Roots set_root must refuse (no entries, too many, unaligned), one it takes, and a
    // CPU_VIRTUAL geometry.
    let mut kmd = FakeKmd::new(&[4, 5, 6], 2);
    kmd.set(0x4000, 0, pte(0, data(9), 0));
    kmd.op(WalkOp::SetRoot {
        segment: 0,
        address: 2 * PAGE,
        entries: 0,
    })
    .op(WalkOp::SetRoot {
        segment: 0,
        address: 2 * PAGE,
        entries: 65,
    })
    .op(WalkOp::SetRoot {
        segment: 0,
        address: 2 * PAGE + 8,
        entries: 64,
    })
    .op(WalkOp::SetRoot {
        segment: 0,
        address: 2 * PAGE,
        entries: 1,
    })
    .op(walk_translate(0x4000, PAGE, WRITE, translate::TWICE))
    .op(walk_translate(1 << 26, PAGE, READ, 0));
    let header = Header::for_bits(&[4, 5, 6], 2, walk_input::flag::CPU_VIRTUAL);
    write(dir, "gpummu_walk", "roots", &kmd.seed(&header));
}

/// A virtual_engine input being written: a layout byte, then steps.
struct VirtualSeed {
    w: Writer,
}

impl VirtualSeed {
    fn new(layout: u8) -> Self {
        let mut w = Writer::new();
        w.u8(layout);
        Self { w }
    }

    fn ram(&mut self, address: u64, bytes: &[u8]) -> &mut Self {
        self.w
            .u8(virtual_world::step::RAM)
            .u32(u32::try_from(address).unwrap())
            .blob(bytes);
        self
    }

    fn vram(&mut self, offset: u64, bytes: &[u8]) -> &mut Self {
        self.w
            .u8(virtual_world::step::VRAM)
            .u32(u32::try_from(offset).unwrap())
            .blob(bytes);
        self
    }

    fn paging(&mut self, fence: u32, stop: u8, packets: &[u8]) -> &mut Self {
        self.w
            .u8(virtual_world::step::PAGING)
            .u32(fence)
            .u8(stop)
            .blob(packets);
        self
    }

    /// The entry arrays the tables want, then their UPDATE_PAGE_TABLE packets.
    fn apply(&mut self, tables: &mut PageTables, fence: u32) -> &mut Self {
        let pending = tables.take();
        for (address, bytes) in &pending.arrays {
            self.ram(*address, bytes);
        }
        self.paging(fence, 0, pending.packets.bytes())
    }

    fn root(&mut self, root: TableAt, entries: u16) -> &mut Self {
        self.w
            .u8(virtual_world::step::ROOT)
            .u8(u8::try_from(root.segment).unwrap())
            .u64(root.address)
            .u16(entries);
        self
    }

    /// A virtual submission of `packets`, written at guest-physical `physical` and run at GPU
    /// VA `va`.
    fn run(&mut self, physical: u64, va: u64, fence: u32, stop: u8, packets: &[u8]) -> &mut Self {
        self.w
            .u8(virtual_world::step::VIRTUAL)
            .u32(u32::try_from(physical).unwrap())
            .u64(va)
            .u32(fence)
            .u8(stop)
            .blob(packets);
        self
    }

    fn flush(&mut self, range: Range<u64>) -> &mut Self {
        self.w
            .u8(virtual_world::step::FLUSH)
            .u64(range.start)
            .u64(range.end);
        self
    }

    fn checking(&mut self, on: bool) -> &mut Self {
        self.w.u8(virtual_world::step::CHECKING).u8(u8::from(on));
        self
    }
}

/// virtual_engine inputs: tables written by UPDATE_PAGE_TABLE, a root, virtual submissions.
fn virtual_engine(dir: &Path) {
    // Guest RAM below the hole: tables from 64 KiB, entry arrays from 192 KiB, data from
    // 256 KiB, the virtual DMA buffer and fence pages at 384 KiB; VRAM segment 1 holds the leaf
    // tables from 128 KiB, data below.
    const RAM_TABLES: Range<u64> = 0x1_0000..0x3_0000;
    const ARRAYS: Range<u64> = 0x3_0000..0x4_0000;
    const DATA: u64 = 0x4_0000;
    const DMA_PAGE: u64 = 0x6_0000;
    const FENCE_PAGE: u64 = 0x6_1000;
    const VA_SOURCE: u64 = 0x12_3400_0000;
    const VA_DESTINATION: u64 = 0x187_0000_0000;
    const VA_DMA: u64 = 0x40_0000;
    const VA_FENCE: u64 = 0x50_0000;
    let scattered = |i: u64| DATA + ((i * 5) % 16) * PAGE;

    // Four levels (leaf tables in VRAM): copy, fill and signal; a remap without a flush (the
    // checking mode on), a FLUSH_TLB, a fault, an interrupted and a reset copy.
    let mut tables = PageTables::new(
        virtual_world::FOUR_LEVELS.index_bits,
        virtual_world::FOUR_LEVELS.table_segments,
        RAM_TABLES,
        0x2_0000..0x4_0000,
        ARRAYS,
    );
    let source: Vec<u64> = (0..8).map(|i| pte(0, scattered(i), 0)).collect();
    tables.map(VA_SOURCE, &source);
    let destination: Vec<u64> = (0..8).map(|i| pte(1, i * PAGE, 0)).collect();
    tables.map(VA_DESTINATION, &destination);
    tables.map(VA_DMA, &[pte(0, DMA_PAGE, 0)]);
    tables.map(VA_FENCE, &[pte(0, FENCE_PAGE, 0)]);
    let mut seed = VirtualSeed::new(0);
    seed.ram(DATA, &[0x5a; 0x100])
        .apply(&mut tables, 1)
        .root(tables.root(), 512);
    let work = dma![
        virtual_copy(8 * PAGE - 100, VA_SOURCE + 100, VA_DESTINATION),
        virtual_fill(0xa1b2_c3d4, 2 * PAGE - 2, VA_DESTINATION + 6 * PAGE),
        virtual_signal(VA_FENCE + 8, 0x1234_5678_9abc),
    ];
    seed.run(DMA_PAGE, VA_DMA, 2, 0, &work).checking(true);
    tables.map(VA_SOURCE, &[pte(0, scattered(9), 0)]);
    seed.apply(&mut tables, 3)
        .run(DMA_PAGE, VA_DMA, 4, 0, &work);
    let flush = dma![flush_tlb(tables.root(), Some(VA_SOURCE..VA_SOURCE + PAGE))];
    seed.paging(5, 0, &flush).run(DMA_PAGE, VA_DMA, 6, 0, &work);
    let faulting = dma![
        virtual_fill(0, 64, VA_DESTINATION),
        virtual_copy(64, VA_SOURCE + 8 * PAGE, VA_DESTINATION),
    ];
    seed.run(DMA_PAGE, VA_DMA, 7, 0, &faulting)
        .run(DMA_PAGE, VA_DMA, 8, 3, &work)
        .run(DMA_PAGE, VA_DMA, 9, 0x82, &work)
        .flush(0..0)
        .run(DMA_PAGE, VA_DMA, 10, 0, &work);
    write(dir, "virtual_engine", "four-levels", &seed.w.bytes);

    // The small geometry (leaf tables in device-only VRAM, segment 3): a 64 KiB large page, a
    // 2 MiB zero range copied within, a read-only page written, a no-execute DMA buffer.
    let mut tables = PageTables::new(
        virtual_world::SMALL.index_bits,
        virtual_world::SMALL.table_segments,
        RAM_TABLES,
        0..0x4_0000,
        ARRAYS,
    );
    let va_large = 0x20_0000u64;
    let va_zero = 0x400_0000u64;
    tables.set(va_large, 1, pte(0, DATA, WDDM_GPU_PTE_LARGE_PAGE));
    tables.set(va_zero, 2, pte(0, 0, WDDM_GPU_PTE_ZERO));
    tables.map(0x1000, &[pte(0, FENCE_PAGE, WDDM_GPU_PTE_READ_ONLY)]);
    tables.map(0x2000, &[pte(0, DMA_PAGE, 0)]);
    tables.map(0x3000, &[pte(0, DMA_PAGE, WDDM_GPU_PTE_NO_EXECUTE)]);
    tables.map(0x4000, &[pte(3, 0x3_0000, 0)]);
    let mut seed = VirtualSeed::new(1);
    seed.apply(&mut tables, 1).root(tables.root(), 64);
    let work = dma![
        virtual_copy(0x8000, va_large, va_large + 0x8000),
        virtual_fill(0x0102_0304, 0x1000, 0x4000),
        virtual_copy(1 << 20, va_zero, va_zero + (1 << 20)),
        virtual_copy(0x1000, va_zero, va_large),
        virtual_signal(0x1000, 1),
    ];
    seed.run(DMA_PAGE, 0x2000, 1, 0, &work)
        .run(DMA_PAGE, 0x3000, 2, 0, &work);
    write(dir, "virtual_engine", "small-geometry", &seed.w.bytes);

    // Two levels: a root of 2 entries, Repeat and Use64KBPages updates, a whole-table
    // invalidation, refused packets and command fields.
    let mut tables = PageTables::new(&[9, 9], &[0, 0], RAM_TABLES, 0..0, ARRAYS);
    tables.map(0, &[pte(0, DMA_PAGE, 0)]);
    tables.map(1 << 21, &[pte(0, DATA, 0), pte(0, DATA + PAGE, 0)]);
    let destination: Vec<u64> = (0..4).map(|i| pte(0, DATA + (4 + i) * PAGE, 0)).collect();
    tables.map(4 * PAGE, &destination);
    let mut seed = VirtualSeed::new(2);
    seed.apply(&mut tables, 1).root(tables.root(), 2);
    let root = tables.root();
    let leaf = TableAt {
        segment: 0,
        address: RAM_TABLES.start + 2 * PAGE,
    };
    let repeat = dma![
        update_page_table_repeat(0, leaf, 4, 8, pte(0, DATA, 0)),
        {
            let mut packet = update_page_table(0, leaf, 0, 32, ARRAYS.start);
            packet.flags = wddm_gpu_abi::packet::WDDM_GPU_UPDATE_FLAG_USE_64KB_PAGES;
            packet
        },
        flush_tlb(root, None),
    ];
    let refused = dma![
        update_page_table(2, root, 0, 1, ARRAYS.start),
        update_page_table(0, leaf, 510, 4, ARRAYS.start),
    ];
    let work = dma![
        virtual_copy(2 * PAGE, 1 << 21, 4 * PAGE),
        virtual_fill(7, 8 * PAGE, 1 << 21),
        virtual_signal(3 << 30, 2),
    ];
    seed.run(DMA_PAGE, 0, 2, 0, &work)
        .paging(3, 0, &repeat)
        .run(DMA_PAGE, 0, 4, 0, &work)
        .paging(5, 0, &refused)
        .vram(0, &[1; 64]);
    seed.w
        .u8(virtual_world::step::VIRTUAL_RAW)
        .u32(u32::try_from(DMA_PAGE).unwrap())
        .u64(0)
        .u32(5)
        .u8(0)
        .blob(&work)
        .u32(u32::try_from(work.len()).unwrap())
        .u32(32)
        .u32(16)
        .u8(0)
        .u8(0)
        .u8(1);
    write(dir, "virtual_engine", "two-levels", &seed.w.bytes);
}
