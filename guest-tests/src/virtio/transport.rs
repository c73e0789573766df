//! The virtio-pci modern transport from user space: find the register blocks through the
//! capabilities, enable the function, and run the device initialisation of virtio 1.x (3.1.1).
//! MSI-X stays off and every vector is `VIRTIO_MSI_NO_VECTOR`: completions are polled.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use thiserror::Error;
use wddm_gpu_abi::features::WDDM_GPU_REQUIRED_FEATURES;
use wddm_gpu_abi::pci::*;

use crate::dma::DmaArena;
use crate::mmio::{MmioError, MmioWindow};
use crate::pci::config::{self, ConfigError, VirtioCap, VirtioCaps};
use crate::pci::sysfs::{
    PciError, PciFunction, COMMAND_BUS_MASTER, COMMAND_INTX_DISABLE, COMMAND_MEMORY,
};
use crate::virtio::split_queue::{QueueError, SplitQueue};

/// Bringing the device up failed.
#[derive(Debug, Error)]
pub enum TransportError {
    /// sysfs access failed.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// Config space is unusable.
    #[error("config space of {bdf}: {source}")]
    Config { bdf: String, source: ConfigError },
    /// A register block does not fit its BAR.
    #[error("virtio {what} block: {source}")]
    Block {
        what: &'static str,
        source: MmioError,
    },
    /// A register block is shorter than its registers.
    #[error("virtio {what} block is {len:#x} bytes, need {need:#x}")]
    BlockTooShort {
        what: &'static str,
        len: u32,
        need: u32,
    },
    /// A kernel driver owns the function.
    #[error("{bdf} is bound to kernel driver {driver}; this test drives it from user space")]
    DriverBound { bdf: String, driver: String },
    /// The command register did not take the bits.
    #[error("{bdf}: command register reads {value:#06x} after enabling memory and bus mastering")]
    Command { bdf: String, value: u16 },
    /// Reset did not complete.
    #[error("device did not finish reset (status {0:#04x})")]
    Reset(u8),
    /// The device lacks VIRTIO_F_VERSION_1.
    #[error("device features {0:#018x} lack VIRTIO_F_VERSION_1")]
    NotModern(u64),
    /// The device refused the features.
    #[error("device cleared FEATURES_OK (status {0:#04x})")]
    FeaturesRefused(u8),
    /// A queue cannot be set up.
    #[error("queue {queue}: {reason}")]
    Queue { queue: u16, reason: String },
    /// Ring allocation failed.
    #[error(transparent)]
    Ring(#[from] QueueError),
    /// The device asked for a reset or failed.
    #[error("device status {0:#04x} after DRIVER_OK")]
    DeviceFailed(u8),
}

/// A virtio-pci modern function with its register blocks mapped.
pub struct VirtioPci {
    function: PciFunction,
    common: MmioWindow,
    notify: MmioWindow,
    notify_off_multiplier: u32,
    device_cfg: MmioWindow,
    /// Where the register blocks are.
    pub caps: VirtioCaps,
    /// Device features offered (all 64 bits).
    pub device_features: u64,
}

impl VirtioPci {
    /// Enables the function (memory decode, bus mastering, INTx off) and maps its blocks.
    pub fn open(function: PciFunction) -> Result<Self, TransportError> {
        if let Some(driver) = function.driver() {
            return Err(TransportError::DriverBound {
                bdf: function.bdf().to_string(),
                driver,
            });
        }
        let caps =
            config::virtio_caps(&function.config()?).map_err(|source| TransportError::Config {
                bdf: function.bdf().to_string(),
                source,
            })?;
        let want = COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE;
        let value = function.update_command(want, 0)?;
        if value & want != want {
            return Err(TransportError::Command {
                bdf: function.bdf().to_string(),
                value,
            });
        }
        let mut bars = BTreeMap::new();
        let mut block =
            |what, cap: VirtioCap, min_len: u32| -> Result<MmioWindow, TransportError> {
                let bar = match bars.get(&cap.bar) {
                    Some(bar) => *bar,
                    None => {
                        let bar = function.map_bar(u32::from(cap.bar))?;
                        bars.insert(cap.bar, bar);
                        bar
                    }
                };
                if cap.length < min_len {
                    return Err(TransportError::BlockTooShort {
                        what,
                        len: cap.length,
                        need: min_len,
                    });
                }
                bar.sub(u64::from(cap.offset), u64::from(cap.length))
                    .map_err(|source| TransportError::Block { what, source })
            };
        let common = block(
            "common",
            caps.common,
            u32::try_from(VIRTIO_PCI_COMMON_CFG_LEN).unwrap(),
        )?;
        let notify = block("notify", caps.notify, 2)?;
        let device_cfg = block("device", caps.device, 0)?;
        Ok(Self {
            function,
            common,
            notify,
            notify_off_multiplier: caps.notify_off_multiplier,
            device_cfg,
            caps,
            device_features: 0,
        })
    }

    /// The PCI function.
    pub fn function(&self) -> &PciFunction {
        &self.function
    }

    /// The device-specific configuration block.
    pub fn device_config(&self) -> MmioWindow {
        self.device_cfg
    }

    /// Current device status.
    pub fn status(&self) -> u8 {
        self.common.read8(VIRTIO_PCI_COMMON_DEVICE_STATUS)
    }

    fn add_status(&self, bits: u8) {
        self.common
            .write8(VIRTIO_PCI_COMMON_DEVICE_STATUS, self.status() | bits);
    }

    /// Resets the device and negotiates features: reset, ACKNOWLEDGE, DRIVER, accept only
    /// VERSION_1, FEATURES_OK (checked to stick). Queues can be set up afterwards.
    pub fn reset_and_negotiate(&mut self) -> Result<(), TransportError> {
        self.common.write8(VIRTIO_PCI_COMMON_DEVICE_STATUS, 0);
        let start = Instant::now();
        while self.status() != 0 {
            if start.elapsed() > Duration::from_secs(1) {
                return Err(TransportError::Reset(self.status()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.add_status(VIRTIO_STATUS_ACKNOWLEDGE);
        self.add_status(VIRTIO_STATUS_DRIVER);
        let mut features = 0u64;
        for half in 0..2u32 {
            self.common
                .write32(VIRTIO_PCI_COMMON_DEVICE_FEATURE_SELECT, half);
            features |=
                u64::from(self.common.read32(VIRTIO_PCI_COMMON_DEVICE_FEATURE)) << (32 * half);
        }
        self.device_features = features;
        if features & WDDM_GPU_REQUIRED_FEATURES == 0 {
            self.add_status(VIRTIO_STATUS_FAILED);
            return Err(TransportError::NotModern(features));
        }
        for half in 0..2u32 {
            self.common
                .write32(VIRTIO_PCI_COMMON_DRIVER_FEATURE_SELECT, half);
            self.common.write32(
                VIRTIO_PCI_COMMON_DRIVER_FEATURE,
                ((WDDM_GPU_REQUIRED_FEATURES >> (32 * half)) & 0xffff_ffff) as u32,
            );
        }
        self.add_status(VIRTIO_STATUS_FEATURES_OK);
        if self.status() & VIRTIO_STATUS_FEATURES_OK == 0 {
            let status = self.status();
            self.add_status(VIRTIO_STATUS_FAILED);
            return Err(TransportError::FeaturesRefused(status));
        }
        self.common
            .write16(VIRTIO_PCI_COMMON_CONFIG_MSIX_VECTOR, VIRTIO_MSI_NO_VECTOR);
        Ok(())
    }

    /// Sets up queue `index` with min(`max_size`, device maximum) entries.
    pub fn setup_queue(
        &self,
        arena: &'static DmaArena,
        index: u16,
        max_size: u16,
    ) -> Result<SplitQueue, TransportError> {
        let bad = |reason: String| TransportError::Queue {
            queue: index,
            reason,
        };
        let num_queues = self.common.read16(VIRTIO_PCI_COMMON_NUM_QUEUES);
        if index >= num_queues {
            return Err(bad(format!("device has only {num_queues} queues")));
        }
        self.common.write16(VIRTIO_PCI_COMMON_QUEUE_SELECT, index);
        let device_max = self.common.read16(VIRTIO_PCI_COMMON_QUEUE_SIZE);
        if device_max == 0 {
            return Err(bad("not available (size 0)".into()));
        }
        // Split rings need a power-of-two size.
        let size = 1u16 << (max_size.min(device_max).ilog2());
        let notify_off = u64::from(self.common.read16(VIRTIO_PCI_COMMON_QUEUE_NOTIFY_OFF));
        let notify_at = notify_off * u64::from(self.notify_off_multiplier);
        let notify = self
            .notify
            .sub(notify_at, 2)
            .map_err(|e| bad(format!("notify address: {e}")))?;
        let queue = SplitQueue::new(arena, index, size, notify)?;
        let (desc, driver, device) = queue.addresses();
        self.common.write16(VIRTIO_PCI_COMMON_QUEUE_SIZE, size);
        self.common
            .write16(VIRTIO_PCI_COMMON_QUEUE_MSIX_VECTOR, VIRTIO_MSI_NO_VECTOR);
        self.common
            .write64_split(VIRTIO_PCI_COMMON_QUEUE_DESC, desc);
        self.common
            .write64_split(VIRTIO_PCI_COMMON_QUEUE_DRIVER, driver);
        self.common
            .write64_split(VIRTIO_PCI_COMMON_QUEUE_DEVICE, device);
        self.common.write16(VIRTIO_PCI_COMMON_QUEUE_ENABLE, 1);
        if self.common.read16(VIRTIO_PCI_COMMON_QUEUE_ENABLE) != 1 {
            return Err(bad("queue_enable did not stick".into()));
        }
        Ok(queue)
    }

    /// Sets DRIVER_OK (a vhost-user frontend hands memory and rings to the backend now) and
    /// checks the device did not fail.
    pub fn driver_ok(&self) -> Result<(), TransportError> {
        self.add_status(VIRTIO_STATUS_DRIVER_OK);
        let status = self.status();
        if status & (VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED) != 0
            || status & VIRTIO_STATUS_DRIVER_OK == 0
        {
            return Err(TransportError::DeviceFailed(status));
        }
        Ok(())
    }
}
