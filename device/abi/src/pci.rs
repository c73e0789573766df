//! How a driver finds and drives the device on PCI (virtio 1.2, 4.1): its ids, the virtio-pci
//! capabilities that locate the register blocks in its BARs, the common configuration registers
//! and the device status bits. Register offsets are in bytes from the start of their block; every
//! register is little-endian. The split virtqueue a driver sets up through these registers is in
//! [`crate::ring`].
//!
//! The generic PCI header (command, status and BAR registers, the capability pointer) is the PCI
//! specification's, not this device's, and is not repeated here.

/// PCI vendor id of every virtio device (virtio 1.2, 4.1.2).
pub const VIRTIO_PCI_VENDOR_ID: u16 = 0x1af4;
/// Virtio device id of a GPU device (virtio 1.2, 5 "Device Types").
pub const VIRTIO_ID_GPU: u16 = 16;
/// A modern virtio-pci device's PCI device id is this plus its virtio device id (virtio 1.2,
/// 4.1.2).
pub const VIRTIO_PCI_MODERN_DEVICE_ID_BASE: u16 = 0x1040;
/// PCI device id of this device: a modern virtio GPU, `VIRTIO_PCI_MODERN_DEVICE_ID_BASE +
/// VIRTIO_ID_GPU` (virtio 1.2, 4.1.2; a literal so that C reads it too, a test checks the sum).
pub const WDDM_GPU_PCI_DEVICE_ID: u16 = 0x1050;
/// PCI device id of QEMU's `ivshmem-plain` (vendor [`VIRTIO_PCI_VENDOR_ID`]): the function that
/// holds the VRAM in `WDDM_GPU_BAR_MODE_IVSHMEM` (QEMU's `docs/specs/ivshmem-spec.rst`; not a
/// virtio device).
pub const WDDM_GPU_IVSHMEM_PCI_DEVICE_ID: u16 = 0x1110;

/// `cap_vndr` of every virtio capability: a vendor-specific PCI capability (`PCI_CAP_ID_VNDR`,
/// virtio 1.2, 4.1.4).
pub const VIRTIO_PCI_CAP_ID_VENDOR: u8 = 0x09;
/// `cfg_type` of the common configuration block (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_CAP_COMMON_CFG: u8 = 1;
/// `cfg_type` of the notification area (virtio 1.2, 4.1.4.4).
pub const VIRTIO_PCI_CAP_NOTIFY_CFG: u8 = 2;
/// `cfg_type` of the ISR status byte (virtio 1.2, 4.1.4.5).
pub const VIRTIO_PCI_CAP_ISR_CFG: u8 = 3;
/// `cfg_type` of the device-specific configuration, `WddmGpuConfig` (virtio 1.2, 4.1.4.6).
pub const VIRTIO_PCI_CAP_DEVICE_CFG: u8 = 4;
/// `cfg_type` of the PCI configuration access window, which drivers here ignore (virtio 1.2,
/// 4.1.4.9).
pub const VIRTIO_PCI_CAP_PCI_CFG: u8 = 5;
/// `cfg_type` of a shared memory region, a `struct virtio_pci_cap64` (virtio 1.2, 4.1.4.7).
pub const VIRTIO_PCI_CAP_SHARED_MEMORY_CFG: u8 = 8;
/// Highest `bar` a capability may name; capabilities naming a higher (reserved) BAR are ignored
/// (virtio 1.2, 4.1.4).
pub const VIRTIO_PCI_CAP_MAX_BAR: u8 = 5;
/// Length of `struct virtio_pci_cap`, the least `cap_len` of any virtio capability (virtio 1.2,
/// 4.1.4).
pub const VIRTIO_PCI_CAP_LEN: usize = 16;
/// Length of `struct virtio_pci_notify_cap`: the capability, then `notify_off_multiplier`
/// (virtio 1.2, 4.1.4.4).
pub const VIRTIO_PCI_NOTIFY_CAP_LEN: usize = 20;
/// Length of `struct virtio_pci_cap64`: the capability, then `offset_hi` and `length_hi`
/// (virtio 1.2, 4.1.4.7).
pub const VIRTIO_PCI_CAP64_LEN: usize = 24;
/// Shared memory region id (`id` of its capability) of the VRAM in `WDDM_GPU_BAR_MODE_SHMEM`
/// (virtio 1.2, 2.10 and 4.1.4.7).
pub const WDDM_GPU_VRAM_SHMID: u8 = 0;

/// `device_feature_select` (le32): which 32 feature bits `device_feature` shows (virtio 1.2,
/// 4.1.4.3).
pub const VIRTIO_PCI_COMMON_DEVICE_FEATURE_SELECT: usize = 0x00;
/// `device_feature` (le32, read-only): the selected 32 bits of the device's features (virtio
/// 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_DEVICE_FEATURE: usize = 0x04;
/// `driver_feature_select` (le32): which 32 feature bits `driver_feature` takes (virtio 1.2,
/// 4.1.4.3).
pub const VIRTIO_PCI_COMMON_DRIVER_FEATURE_SELECT: usize = 0x08;
/// `driver_feature` (le32): the selected 32 bits of the features the driver accepts (virtio 1.2,
/// 4.1.4.3).
pub const VIRTIO_PCI_COMMON_DRIVER_FEATURE: usize = 0x0c;
/// `config_msix_vector` (le16): MSI-X vector of configuration changes (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_CONFIG_MSIX_VECTOR: usize = 0x10;
/// `num_queues` (le16, read-only): how many virtqueues the device has (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_NUM_QUEUES: usize = 0x12;
/// `device_status` (u8): the `VIRTIO_STATUS_*` bits; writing 0 resets the device (virtio 1.2,
/// 4.1.4.3).
pub const VIRTIO_PCI_COMMON_DEVICE_STATUS: usize = 0x14;
/// `config_generation` (u8, read-only): changes when the device configuration does (virtio 1.2,
/// 4.1.4.3).
pub const VIRTIO_PCI_COMMON_CONFIG_GENERATION: usize = 0x15;
/// `queue_select` (le16): which virtqueue the `queue_*` registers show (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_SELECT: usize = 0x16;
/// `queue_size` (le16): the selected queue's size; reads its maximum, 0 if it is unavailable
/// (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_SIZE: usize = 0x18;
/// `queue_msix_vector` (le16): MSI-X vector of the selected queue (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_MSIX_VECTOR: usize = 0x1a;
/// `queue_enable` (le16): write 1 to enable the selected queue (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_ENABLE: usize = 0x1c;
/// `queue_notify_off` (le16, read-only): the selected queue's notify address is the notification
/// area plus this times `notify_off_multiplier` (virtio 1.2, 4.1.4.3 and 4.1.4.4).
pub const VIRTIO_PCI_COMMON_QUEUE_NOTIFY_OFF: usize = 0x1e;
/// `queue_desc` (le64): guest-physical address of the descriptor table (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_DESC: usize = 0x20;
/// `queue_driver` (le64): guest-physical address of the available ring (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_DRIVER: usize = 0x28;
/// `queue_device` (le64): guest-physical address of the used ring (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_DEVICE: usize = 0x30;
/// `queue_notify_data` (le16, read-only; with `VIRTIO_F_NOTIFICATION_DATA`, which this device
/// does not offer) (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_NOTIFY_DATA: usize = 0x38;
/// `queue_reset` (le16; with `VIRTIO_F_RING_RESET`): write 1 to reset the selected queue
/// (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_QUEUE_RESET: usize = 0x3a;
/// Bytes of the common configuration up to the end of `queue_device` (the virtio 1.0 layout):
/// the least a common block must have for a driver that uses neither `queue_notify_data` nor
/// `queue_reset` (virtio 1.2, 4.1.4.3).
pub const VIRTIO_PCI_COMMON_CFG_LEN: usize = 0x38;

/// `device_status` bit: the guest found the device (virtio 1.2, 2.1).
pub const VIRTIO_STATUS_ACKNOWLEDGE: u8 = 1;
/// `device_status` bit: the guest has a driver for the device (virtio 1.2, 2.1).
pub const VIRTIO_STATUS_DRIVER: u8 = 2;
/// `device_status` bit: the driver is ready and its queues are live (virtio 1.2, 2.1).
pub const VIRTIO_STATUS_DRIVER_OK: u8 = 4;
/// `device_status` bit: feature negotiation is done; the device clears it if it refuses the
/// features (virtio 1.2, 2.1).
pub const VIRTIO_STATUS_FEATURES_OK: u8 = 8;
/// `device_status` bit: the device hit an error it cannot recover from without a reset (virtio
/// 1.2, 2.1).
pub const VIRTIO_STATUS_DEVICE_NEEDS_RESET: u8 = 0x40;
/// `device_status` bit: the driver gave up on the device (virtio 1.2, 2.1).
pub const VIRTIO_STATUS_FAILED: u8 = 0x80;

/// MSI-X vector register value meaning "no vector": no MSI-X interrupt for this source (virtio
/// 1.2, 4.1.5.1.2).
pub const VIRTIO_MSI_NO_VECTOR: u16 = 0xffff;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_id_is_the_modern_gpu_id() {
        assert_eq!(
            WDDM_GPU_PCI_DEVICE_ID,
            VIRTIO_PCI_MODERN_DEVICE_ID_BASE + VIRTIO_ID_GPU
        );
    }

    #[test]
    fn the_common_registers_follow_one_another() {
        // (offset, width) of each register in struct order: no gaps, no overlaps.
        let registers = [
            (VIRTIO_PCI_COMMON_DEVICE_FEATURE_SELECT, 4),
            (VIRTIO_PCI_COMMON_DEVICE_FEATURE, 4),
            (VIRTIO_PCI_COMMON_DRIVER_FEATURE_SELECT, 4),
            (VIRTIO_PCI_COMMON_DRIVER_FEATURE, 4),
            (VIRTIO_PCI_COMMON_CONFIG_MSIX_VECTOR, 2),
            (VIRTIO_PCI_COMMON_NUM_QUEUES, 2),
            (VIRTIO_PCI_COMMON_DEVICE_STATUS, 1),
            (VIRTIO_PCI_COMMON_CONFIG_GENERATION, 1),
            (VIRTIO_PCI_COMMON_QUEUE_SELECT, 2),
            (VIRTIO_PCI_COMMON_QUEUE_SIZE, 2),
            (VIRTIO_PCI_COMMON_QUEUE_MSIX_VECTOR, 2),
            (VIRTIO_PCI_COMMON_QUEUE_ENABLE, 2),
            (VIRTIO_PCI_COMMON_QUEUE_NOTIFY_OFF, 2),
            (VIRTIO_PCI_COMMON_QUEUE_DESC, 8),
            (VIRTIO_PCI_COMMON_QUEUE_DRIVER, 8),
            (VIRTIO_PCI_COMMON_QUEUE_DEVICE, 8),
            (VIRTIO_PCI_COMMON_QUEUE_NOTIFY_DATA, 2),
            (VIRTIO_PCI_COMMON_QUEUE_RESET, 2),
        ];
        let mut next = 0;
        for (offset, width) in registers {
            assert_eq!(offset, next);
            assert_eq!(offset % width, 0, "register at {offset:#x} is misaligned");
            next = offset + width;
        }
        assert_eq!(
            VIRTIO_PCI_COMMON_CFG_LEN,
            VIRTIO_PCI_COMMON_QUEUE_NOTIFY_DATA
        );
    }
}
