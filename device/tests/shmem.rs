//! The shared-memory VRAM BAR mode (QEMU 11.1's vhost-user SHMEM), driven in QEMU 11.1's order:
//! at realize, GET_SHMEM_CONFIG (the VRAM is region 0) and the backend channel; the SHMEM_MAP
//! only once the device starts (SET_FEATURES at DRIVER_OK): a map sent before that crashes
//! QEMU 11.1. QEMU keeps the mapping across stop/cont and drops it on a reset, so the first
//! start after each reset maps again; a refusal falls back to the ivshmem mode; `--bar-mode
//! ivshmem` reports no region.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserMMap, VhostUserMMapFlags, VhostUserProtocolFeatures};
use vhost::vhost_user::{
    FrontendReqHandler, HandlerResult, VhostUserFrontend, VhostUserFrontendReqHandler,
};
use wddm_gpu_abi::caps::{
    WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_BAR_STATE_NOT_MAPPED,
};
use wddm_gpu_frontend_kit::{
    backend_process::SpawnOptions,
    harness::{Harness, VRAM_GPA, VRAM_SIZE},
};

/// One SHMEM_MAP as the frontend received it.
#[derive(Clone, Copy, Debug)]
struct Mapped {
    shmid: u8,
    fd_offset: u64,
    shm_offset: u64,
    len: u64,
    flags: u64,
    file: (u64, u64),
}

/// Plays QEMU's side of the backend channel: records maps, accepts or refuses them.
struct ShmemFrontend {
    maps: Mutex<Vec<Mapped>>,
    refuse: bool,
}

impl VhostUserFrontendReqHandler for ShmemFrontend {
    fn shmem_map(&self, req: &VhostUserMMap, fd: &dyn AsRawFd) -> HandlerResult<u64> {
        let mut stat: libc::stat = unsafe_zeroed_stat();
        // SAFETY: fstat writes one `struct stat` into `stat`, which outlives the call.
        let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) };
        assert_eq!(rc, 0);
        let request = *req;
        self.maps.lock().unwrap().push(Mapped {
            shmid: request.shmid,
            fd_offset: request.fd_offset,
            shm_offset: request.shm_offset,
            len: request.len,
            flags: request.flags,
            file: (stat.st_dev, stat.st_ino),
        });
        Ok(u64::from(self.refuse))
    }
}

fn unsafe_zeroed_stat() -> libc::stat {
    // SAFETY: `struct stat` is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Realizes as QEMU 11.1 does: negotiates, opens the backend channel, asks for the
/// shared-memory regions. The device is not started.
fn realize(name: &str, refuse: bool, args: &[&str]) -> (Harness, Arc<ShmemFrontend>) {
    let options = SpawnOptions {
        args: args.iter().map(Into::into).collect(),
        ..SpawnOptions::default()
    };
    let mut harness = Harness::spawn_with_options(name, &options);
    let frontend = Arc::new(ShmemFrontend {
        maps: Mutex::new(Vec::new()),
        refuse,
    });
    let mut channel = FrontendReqHandler::new(frontend.clone()).unwrap();
    channel.set_reply_ack_flag(true);
    let negotiated = harness.realize_with(|backend| {
        backend
            .set_backend_request_fd(&channel.get_tx_raw_fd())
            .unwrap()
    });
    std::thread::spawn(move || while channel.handle_request().is_ok() {});
    for feature in [
        VhostUserProtocolFeatures::SHMEM,
        VhostUserProtocolFeatures::BACKEND_REQ,
        VhostUserProtocolFeatures::BACKEND_SEND_FD,
    ] {
        assert!(
            negotiated.protocol_features.contains(feature),
            "{feature:?} offered"
        );
    }
    (harness, frontend)
}

/// Realizes with the VRAM reported as region 0.
fn connect(name: &str, refuse: bool) -> (Harness, Arc<ShmemFrontend>) {
    let (mut harness, frontend) = realize(name, refuse, &[]);
    let config = harness.frontend.get_shmem_config().unwrap();
    let nregions = config.nregions;
    let sizes = config.memory_sizes;
    assert_eq!((nregions, sizes[0], sizes[1]), (1, VRAM_SIZE, 0));
    (harness, frontend)
}

fn wait_for_maps(frontend: &ShmemFrontend, count: usize) -> Vec<Mapped> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let maps = frontend.maps.lock().unwrap().clone();
        if maps.len() >= count || Instant::now() > deadline {
            return maps;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The maps a frontend received once the backend has had `settle` to send more.
fn maps_after(frontend: &ShmemFrontend, settle: Duration) -> Vec<Mapped> {
    std::thread::sleep(settle);
    frontend.maps.lock().unwrap().clone()
}

fn vram_identity(harness: &Harness) -> (u64, u64) {
    let meta = std::fs::metadata(&harness.backend.vram_path).unwrap();
    (meta.dev(), meta.ino())
}

#[test]
fn no_map_is_sent_before_the_device_starts() {
    let (mut harness, frontend) = connect("shmem-realize", false);
    let early = maps_after(&frontend, Duration::from_millis(300));
    assert!(
        early.is_empty(),
        "SHMEM_MAP at realize (crashes QEMU 11.1): {early:?}"
    );
    harness.start_features();
    assert_eq!(wait_for_maps(&frontend, 1).len(), 1, "mapped at the start");
}

#[test]
fn the_vram_is_mapped_as_shared_memory_region_0_and_reported_in_the_capset() {
    let (mut harness, frontend) = connect("shmem-map", false);
    harness.start_features();
    let maps = wait_for_maps(&frontend, 1);
    assert_eq!(maps.len(), 1, "one SHMEM_MAP: {maps:?}");
    let map = maps[0];
    assert_eq!(
        (map.shmid, map.fd_offset, map.shm_offset, map.len),
        (0, 0, 0, VRAM_SIZE)
    );
    assert_eq!(map.flags, VhostUserMMapFlags::WRITABLE.bits());
    assert_eq!(map.file, vram_identity(&harness), "the fd is the VRAM file");

    // Until QEMU puts the BAR in the memory table the locator says mode 2, not mapped.
    harness.set_mem_table(None);
    harness.setup_control_queue();
    let bar = harness.capset().header.vram_bar;
    assert_eq!(
        (bar.mode, bar.pci_function, bar.bar_index, bar.state),
        (WDDM_GPU_BAR_MODE_SHMEM, 0, 4, WDDM_GPU_BAR_STATE_NOT_MAPPED)
    );
    harness.add_vram_region(VRAM_GPA);
    let bar = harness.capset().header.vram_bar;
    assert_eq!(
        (bar.mode, bar.pci_function, bar.bar_index),
        (WDDM_GPU_BAR_MODE_SHMEM, 0, 4)
    );
    assert_eq!(
        (bar.state, bar.guest_physical_address),
        (WDDM_GPU_BAR_STATE_KNOWN, VRAM_GPA)
    );
}

#[test]
fn a_refused_map_falls_back_to_the_ivshmem_mode_and_says_so() {
    let (mut harness, frontend) = connect("shmem-refused", true);
    harness.start_features();
    assert_eq!(wait_for_maps(&frontend, 1).len(), 1);
    harness.set_mem_table(Some(VRAM_GPA));
    harness.setup_control_queue();
    assert_eq!(
        harness.capset().header.vram_bar.mode,
        WDDM_GPU_BAR_MODE_IVSHMEM
    );
    assert!(harness
        .backend
        .log()
        .contains("falling back to the ivshmem VRAM BAR"));
}

#[test]
fn the_vram_is_mapped_once_per_reset_and_kept_across_stop_and_cont() {
    let (mut harness, frontend) = connect("shmem-restart", false);
    harness.start_features();
    harness.set_mem_table(Some(VRAM_GPA));
    harness.setup_control_queue();
    assert_eq!(wait_for_maps(&frontend, 1).len(), 1);
    // A second SET_FEATURES without a reset in between must not map over the mapping.
    harness.start_features();
    assert_eq!(maps_after(&frontend, Duration::from_millis(200)).len(), 1);

    // VM stop and cont: QEMU 11.1 keeps the mapping, a second map would overlap it.
    let base = harness.stop_device();
    harness.resume_device(base);
    harness.assert_still_serving();
    assert_eq!(
        maps_after(&frontend, Duration::from_millis(200)).len(),
        1,
        "mapped again across stop/cont"
    );

    // Guest reset as QEMU 10's vhost-user-gpu-pci sends it: GET_VRING_BASE, RESET_DEVICE,
    // then the next DRIVER_OK.
    harness.stop_device();
    harness.reset_device();
    assert_eq!(maps_after(&frontend, Duration::from_millis(200)).len(), 1);
    harness.start_device_anew();
    let maps = wait_for_maps(&frontend, 2);
    assert_eq!(maps.len(), 2, "mapped again after RESET_DEVICE: {maps:?}");

    // Guest reset as QEMU 11.1's vhost-user-test-device-pci sends it: GET_VRING_BASE only,
    // then the rings anew from index 0, which is when the device learns it was reset.
    harness.capset_info();
    harness.stop_device();
    harness.start_device_anew();
    let maps = wait_for_maps(&frontend, 3);
    assert_eq!(
        maps.len(),
        3,
        "mapped again after a ring restart at 0: {maps:?}"
    );
    assert_eq!(maps[2].len, VRAM_SIZE);
    assert_eq!(
        harness.capset().header.vram_bar.mode,
        WDDM_GPU_BAR_MODE_SHMEM
    );
}

#[test]
fn bar_mode_ivshmem_reports_no_region_and_never_maps() {
    let (mut harness, frontend) = realize("shmem-ivshmem", false, &["--bar-mode", "ivshmem"]);
    let config = harness.frontend.get_shmem_config().unwrap();
    let nregions = config.nregions;
    let sizes = config.memory_sizes;
    assert_eq!(nregions, 0);
    assert!(sizes.iter().all(|&size| size == 0), "{sizes:?}");
    harness.start_features();
    harness.set_mem_table(Some(VRAM_GPA));
    harness.setup_control_queue();
    let bar = harness.capset().header.vram_bar;
    assert_eq!(
        (bar.mode, bar.pci_function, bar.bar_index),
        (WDDM_GPU_BAR_MODE_IVSHMEM, 1, 2)
    );
    assert!(maps_after(&frontend, Duration::from_millis(200)).is_empty());
}
