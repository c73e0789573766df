//! The VRAM as the frontend's shared-memory region 0: what GET_SHMEM_CONFIG is answered, and
//! the SHMEM_MAP of the VRAM file at the first device start after each reset (on a thread of its
//! own). `--bar-mode` chooses between it and the ivshmem companion function.

use std::sync::atomic::{AtomicBool, Ordering};

use log::{info, warn};
use vhost::vhost_user::message::{VhostUserMMap, VhostUserMMapFlags, VhostUserShMemConfig};
use vhost::vhost_user::{Backend, VhostUserFrontendReqHandler};
use wddm_gpu_abi::pci::WDDM_GPU_VRAM_SHMID;

use crate::memory::vram::{BarMode, Vram};
use crate::model::gpu::Gpu;

/// Which VRAM BAR mode to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BarModeRequest {
    /// Shared memory if the frontend asks for it (GET_SHMEM_CONFIG), else ivshmem.
    Auto,
    /// Always the ivshmem companion function; GET_SHMEM_CONFIG is answered with no region.
    Ivshmem,
    /// Map the VRAM with SHMEM_MAP at every device start, asked for or not (a refusal falls
    /// back to ivshmem).
    Shmem,
}

/// Whether the VRAM is to be, or was, mapped into the frontend's shared-memory region.
pub struct ShmemMapping {
    bar_mode: BarModeRequest,
    /// The frontend asked for shared-memory regions.
    requested: AtomicBool,
    /// A SHMEM_MAP of the VRAM was sent (or is being sent) since the last reset.
    mapped: bool,
    /// The backend channel (BACKEND_REQ) the map is sent on.
    channel: Option<Backend>,
}

impl ShmemMapping {
    pub fn new(bar_mode: BarModeRequest) -> Self {
        Self {
            bar_mode,
            requested: AtomicBool::new(false),
            mapped: false,
            channel: None,
        }
    }

    /// The frontend's backend channel, which carries SHMEM_MAP.
    pub fn set_channel(&mut self, channel: Backend) {
        self.channel = Some(channel);
    }

    /// A reset: QEMU dropped the mapping, the next device start maps the VRAM again.
    pub fn forget(&mut self) {
        self.mapped = false;
    }

    /// Maps the VRAM into the frontend's shared-memory region at a device start, when the
    /// frontend asked for regions (or `--bar-mode shmem`) and the backend channel is up; a
    /// refusal falls back to ivshmem.
    ///
    /// Only a started device can take the map: QEMU 11.1 handles SHMEM_MAP through the device
    /// it binds at start and unbinds at stop (a map sent before segfaults it). QEMU keeps the
    /// mapping across a stop and `cont` (a second map would overlap it) and drops it when the
    /// device is reset, so the map is sent at the first start after each reset.
    ///
    /// The map is sent from its own thread: the frontend is waiting for the reply to the request
    /// being handled now and would not read a backend request (with need-reply) meanwhile.
    pub fn map(&mut self, gpu: &Gpu) {
        let wanted = match self.bar_mode {
            BarModeRequest::Ivshmem => false,
            BarModeRequest::Auto => self.requested.load(Ordering::Acquire),
            BarModeRequest::Shmem => true,
        };
        let Some(channel) = self.channel.clone() else {
            return;
        };
        if !wanted || self.mapped {
            return;
        }
        self.mapped = true;
        let vram = gpu.shared_vram();
        let spawned = std::thread::Builder::new().name("wddm-gpu-shmem-map".into()).spawn(move || {
            let Some(file) = vram.file() else {
                return;
            };
            let request = VhostUserMMap {
                shmid: WDDM_GPU_VRAM_SHMID,
                fd_offset: 0,
                shm_offset: 0,
                len: vram.size(),
                flags: VhostUserMMapFlags::WRITABLE.bits(),
                ..Default::default()
            };
            match channel.shmem_map(&request, file) {
                Ok(0) => {
                    info!("VRAM mapped into shared-memory region {WDDM_GPU_VRAM_SHMID} of the GPU function (SHMEM_MAP)");
                    vram.set_mode(BarMode::Shmem);
                }
                Ok(code) => {
                    warn!("SHMEM_MAP refused by the frontend ({code}): falling back to the ivshmem VRAM BAR");
                    vram.set_mode(BarMode::Ivshmem);
                }
                Err(error) => {
                    warn!("SHMEM_MAP failed ({error}): falling back to the ivshmem VRAM BAR");
                    vram.set_mode(BarMode::Ivshmem);
                }
            }
        });
        if let Err(error) = spawned {
            warn!("cannot start the SHMEM_MAP thread: {error}");
        }
    }

    /// The VRAM as shared-memory region 0 (`GET_SHMEM_CONFIG`, QEMU 11.1's
    /// vhost-user-test-device-pci asks at realize); no region with `--bar-mode ivshmem`, which
    /// QEMU takes as a device without a shared-memory BAR. The locator says mode 2 from here on,
    /// `not_mapped` until the BAR is in the memory table.
    pub fn config(&self, vram: &Vram) -> VhostUserShMemConfig {
        if self.bar_mode == BarModeRequest::Ivshmem {
            info!("frontend asked for shared-memory regions: none (--bar-mode ivshmem)");
            return VhostUserShMemConfig::new(0, &[]);
        }
        let size = vram.size();
        info!(
            "frontend asked for shared-memory regions: VRAM is region {WDDM_GPU_VRAM_SHMID} ({size:#x} bytes; \
             QEMU's vhost-user-test-device-pci shows it as BAR 4, mapped at the first device start after each reset)"
        );
        self.requested.store(true, Ordering::Release);
        vram.set_mode(BarMode::Shmem);
        VhostUserShMemConfig::new(1, &[size])
    }
}
