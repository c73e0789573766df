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
use zerocopy::FromBytes;

/// A WDDM 2.0 layout with a 4-level GpuMmu: leaf tables in the CPU-visible VRAM segment,
/// directories in system memory.
const GPUMMU_LAYOUT: &str = r#"
wddm = "2.0"

[[segments]]
flags = ["CpuVisible"]
size = "16MiB"

[[segments]]
flags = ["Aperture", "CacheCoherent"]
size = "64MiB"

[gpummu]
index_bits = [9, 9, 9, 9]
update_mode = "gpu_physical"
table_segments = [1, 0, 0, 0]
paging_process_table_segments = [0, 0, 0, 0]
max_contexts = 16
"#;

/// A backend started with `layout` as its `--layout` file.
fn backend_with_layout(name: &str, layout: &str) -> Harness {
    let dir = std::env::temp_dir().join(format!("wddm-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("layout.toml");
    std::fs::write(&path, layout).unwrap();
    let options = SpawnOptions {
        args: vec!["--layout".into(), path.into_os_string()],
        ..SpawnOptions::default()
    };
    Harness::ready_with_options(name, &options)
}

#[test]
fn a_gpummu_layout_offers_its_geometry_as_capset_index_1() {
    let mut h = backend_with_layout("gpummu-capset", GPUMMU_LAYOUT);
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
