//! The reference KMD's start-device path: find the GPU, bring the virtio transport up, and read
//! the segment layout from the capset.

use std::time::{Duration, Instant};

use thiserror::Error;
use wddm_gpu_abi::caps::{WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::ctrl::{WddmGpuConfig, WddmGpuRespCapsetInfo};
use wddm_gpu_abi::pci::{
    VIRTIO_PCI_VENDOR_ID, WDDM_GPU_IVSHMEM_PCI_DEVICE_ID, WDDM_GPU_PCI_DEVICE_ID,
};

use crate::caps::{self, CapsError, Layout};
use crate::dma::DmaArena;
use crate::gpu::{GpuControl, GpuError};
use crate::pci::sysfs::{PciError, PciFunction, COMMAND_MEMORY};
use crate::virtio::transport::{TransportError, VirtioPci};

/// Control queue index.
const CONTROL_QUEUE: u16 = 0;
/// Ring size this driver wants (the device may offer less).
const QUEUE_SIZE: u16 = 64;
/// How long the driver waits for the VRAM BAR to be known: in mode 2 the backend maps the VRAM
/// only after the device started (DRIVER_OK), and QEMU then has to put it in the memory table.
pub const BAR_WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between capset reads while waiting for it.
pub const BAR_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Bringing the device up failed.
#[derive(Debug, Error)]
pub enum InitError {
    /// PCI discovery failed.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The transport could not be initialised.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The control queue wrapper could not be built.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// Reading the layout failed.
#[derive(Debug, Error)]
pub enum LayoutError {
    /// The capset exchange failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The device has no capset.
    #[error("device reports num_capsets = 0")]
    NoCapsets,
    /// Capset 0 is not the WDDM layout.
    #[error("capset 0 has id {id:#x} (want {WDDM_GPU_CAPSET_ID:#x}), max_version {version}")]
    WrongCapset { id: u32, version: u32 },
    /// The blob is invalid.
    #[error(transparent)]
    Caps(#[from] CapsError),
}

/// The initialised GPU: transport and control queue.
pub struct Device {
    /// The virtio transport.
    pub virtio: VirtioPci,
    /// The control queue.
    pub control: GpuControl,
    /// `num_capsets` from the device configuration.
    pub num_capsets: u32,
}

impl Device {
    /// Finds the GPU by id and runs the virtio initialisation up to DRIVER_OK.
    pub fn bring_up(arena: &'static DmaArena, timeout: Duration) -> Result<Self, InitError> {
        let function = PciFunction::find(VIRTIO_PCI_VENDOR_ID, WDDM_GPU_PCI_DEVICE_ID)?.remove(0);
        // The backend learns where the VRAM BAR is from the memory table QEMU sends at
        // DRIVER_OK, so the BAR must decode by then. Which function carries it is only known from
        // the capset, read after DRIVER_OK; so enable every ivshmem function of the slot now (mode
        // 1). In mode 2 the BAR is the GPU function's own shared-memory BAR, which decodes once
        // `VirtioPci::open` enabled memory on the function; there is no ivshmem function then.
        for n in 1..8 {
            let sibling = function.sibling(n);
            if sibling.exists()
                && sibling.ids().ok()
                    == Some((VIRTIO_PCI_VENDOR_ID, WDDM_GPU_IVSHMEM_PCI_DEVICE_ID))
            {
                sibling.update_command(COMMAND_MEMORY, 0)?;
            }
        }
        let mut virtio = VirtioPci::open(function)?;
        virtio.reset_and_negotiate()?;
        let queue = virtio.setup_queue(arena, CONTROL_QUEUE, QUEUE_SIZE)?;
        let control = GpuControl::new(arena, queue, timeout)?;
        virtio.driver_ok()?;
        let num_capsets = virtio
            .device_config()
            .read32(std::mem::offset_of!(WddmGpuConfig, num_capsets));
        Ok(Self {
            virtio,
            control,
            num_capsets,
        })
    }

    /// GET_CAPSET_INFO(0) and GET_CAPSET; returns the capset info, the raw blob and the parse
    /// result (the blob is kept for diagnostics even when it is invalid).
    pub fn read_capset(&mut self) -> Result<(WddmGpuRespCapsetInfo, Vec<u8>), LayoutError> {
        if self.num_capsets == 0 {
            return Err(LayoutError::NoCapsets);
        }
        let info = self.control.capset_info(0)?;
        if info.capset_id != WDDM_GPU_CAPSET_ID || info.capset_max_version < WDDM_GPU_CAPSET_VERSION
        {
            return Err(LayoutError::WrongCapset {
                id: info.capset_id,
                version: info.capset_max_version,
            });
        }
        let blob = self.control.capset(
            WDDM_GPU_CAPSET_ID,
            WDDM_GPU_CAPSET_VERSION,
            info.capset_max_size,
        )?;
        Ok((info, blob))
    }

    /// Reads and validates the layout.
    pub fn read_layout(&mut self) -> Result<Layout, LayoutError> {
        let (_, blob) = self.read_capset()?;
        Ok(caps::parse(&blob)?)
    }

    /// Reads the layout until the BAR locator's `state` is known (every [`BAR_POLL_INTERVAL`],
    /// at most `timeout`): a driver must not use the VRAM BAR or report `CpuTranslatedAddress`
    /// before. In mode 1 the BAR is known at DRIVER_OK, so the first read ends the wait; in mode
    /// 2 it becomes known once the backend's SHMEM_MAP is in QEMU's memory table (after every
    /// device start: DRIVER_OK, or a `cont` after a VM `stop`). Returns the last layout read,
    /// known or not: the caller decides what a BAR still not mapped means.
    pub fn wait_bar_known(&mut self, timeout: Duration) -> Result<BarWait, LayoutError> {
        let start = Instant::now();
        let mut reads = 0u32;
        loop {
            let layout = self.read_layout()?;
            reads += 1;
            let known = layout.header.vram_bar.state == WDDM_GPU_BAR_STATE_KNOWN;
            if known || start.elapsed() >= timeout {
                return Ok(BarWait {
                    layout,
                    reads,
                    waited: start.elapsed(),
                    known,
                });
            }
            std::thread::sleep(BAR_POLL_INTERVAL);
        }
    }
}

/// What [`Device::wait_bar_known`] saw.
#[derive(Clone, Debug)]
pub struct BarWait {
    /// The last layout read.
    pub layout: Layout,
    /// Capset reads it took.
    pub reads: u32,
    /// Time from the first read to the last.
    pub waited: Duration,
    /// True if the locator's state is known in `layout`.
    pub known: bool,
}

impl std::fmt::Display for BarWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.known {
            "known after"
        } else {
            "still not known after"
        };
        write!(
            f,
            "state {what} {} ms ({} capset read{}): {}",
            self.waited.as_millis(),
            self.reads,
            if self.reads == 1 { "" } else { "s" },
            crate::report::vram_bar_text(&self.layout.header.vram_bar)
        )
    }
}
