//! Writes the seed inputs of every fuzz target into `DIR/<target>/seed-<name>`:
//!
//!     cargo run --manifest-path device/fuzz/Cargo.toml --example seeds -- DIR
//!
//! The repository corpus (`device/fuzz/corpus/`) started from these and was minimised with
//! `cargo fuzz cmin`; scripts/fuzz --seeds adds them again.

use std::path::Path;

use vhost_user_wddm_gpu_fuzz::engine_world::{self, step, Submission};
use vhost_user_wddm_gpu_fuzz::frontend::{header, Op, DATA, VRAM_GPA};
use vhost_user_wddm_gpu_fuzz::input::Writer;
use wddm_gpu_abi::build::{self, Adl, DmaBufferBuilder, Endpoint};
use wddm_gpu_abi::caps::{WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo, VIRTIO_GPU_CMD_GET_CAPSET,
    VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO, WDDM_GPU_CMD_PREEMPT,
    WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET, WDDM_GPU_CMD_SUBMIT,
    WDDM_GPU_CMD_WAIT_EVENT,
};
use wddm_gpu_abi::packet::{
    WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2, WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
    WDDM_GPU_OP_DISCARD_CONTENT, WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL,
};
use wddm_gpu_abi::status::WddmGpuCmdRegisterStatusPage;
use wddm_gpu_abi::submit::{WddmGpuCmdSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING};
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
    let submit = WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: 0x9_0000,
        dma_buffer_segment_id: 0,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: 0x100,
        start_offset: 0,
        end_offset: 0x100,
        submission_fence_id: 7,
        node_ordinal: 0,
        reserved: 0,
    };
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
    let example = r#"wddm = "1.3"
paging_buffer_segment = 0
paging_buffer_size = "64KiB"
paging_buffer_private_data_size = 0

[[segments]]
flags = ["CpuVisible", "DirectFlip", "PreservedDuringStandby", "PreservedDuringHibernate"]
size = "256MiB"
base_address = 0
bar_offset = 0
commit_limit = "256MiB"
banks = ["64MiB", "128MiB"]
system_memory_end_address = 0

[[segments]]
flags = 0x11
size = 0x20000000
commit_limit = "128MiB"
"#;
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
}
