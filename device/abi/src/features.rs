//! The feature bits the device offers (virtio 1.2, 6 and 5.7.3). Bit numbers, as the spec and
//! vhost-user's GET_FEATURES count them; [`WDDM_GPU_DEVICE_FEATURES`] is the device's offer.

/// `VIRTIO_GPU_F_VIRGL`: 3D commands; never offered.
pub const VIRTIO_GPU_F_VIRGL: u32 = 0;
/// `VIRTIO_GPU_F_EDID`: GET_EDID; QEMU's vhost-user-gpu frontend requires it of backends.
pub const VIRTIO_GPU_F_EDID: u32 = 1;
/// `VIRTIO_GPU_F_RESOURCE_BLOB`: blob resources; never offered.
pub const VIRTIO_GPU_F_RESOURCE_BLOB: u32 = 3;
/// `VIRTIO_GPU_F_CONTEXT_INIT`: context types; never offered.
pub const VIRTIO_GPU_F_CONTEXT_INIT: u32 = 4;
/// `VIRTIO_F_NOTIFY_ON_EMPTY`.
pub const VIRTIO_F_NOTIFY_ON_EMPTY: u32 = 24;
/// `VIRTIO_F_ANY_LAYOUT`.
pub const VIRTIO_F_ANY_LAYOUT: u32 = 27;
/// `VIRTIO_RING_F_INDIRECT_DESC`.
pub const VIRTIO_RING_F_INDIRECT_DESC: u32 = 28;
/// `VIRTIO_RING_F_EVENT_IDX`.
pub const VIRTIO_RING_F_EVENT_IDX: u32 = 29;
/// `VIRTIO_F_VERSION_1`: the only one a driver of this device must accept.
pub const VIRTIO_F_VERSION_1: u32 = 32;
/// `VIRTIO_F_RING_RESET`.
pub const VIRTIO_F_RING_RESET: u32 = 40;

/// The device features offered: VERSION_1, RING_RESET, NOTIFY_ON_EMPTY, ANY_LAYOUT,
/// INDIRECT_DESC, EVENT_IDX and EDID. QEMU builds the guest's set itself and sends back what the
/// guest acked, so every bit it may expose is here; VIRGL, RESOURCE_BLOB and CONTEXT_INIT never
/// are. Written as one literal so that C reads it as a 64-bit value (a test checks the bits).
pub const WDDM_GPU_DEVICE_FEATURES: u64 = 0x0000_0101_3900_0002;

/// The features a driver of this device must accept: `VIRTIO_F_VERSION_1` alone, the modern
/// interface (virtio 1.2, 6.1); the reference drivers accept exactly these. One literal, like
/// [`WDDM_GPU_DEVICE_FEATURES`] (a test checks the bits).
pub const WDDM_GPU_REQUIRED_FEATURES: u64 = 0x0000_0001_0000_0000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offer_is_the_bits_it_names() {
        let named = [
            VIRTIO_F_VERSION_1,
            VIRTIO_F_RING_RESET,
            VIRTIO_F_NOTIFY_ON_EMPTY,
            VIRTIO_F_ANY_LAYOUT,
            VIRTIO_RING_F_INDIRECT_DESC,
            VIRTIO_RING_F_EVENT_IDX,
            VIRTIO_GPU_F_EDID,
        ];
        let offer = named.iter().fold(0u64, |offer, bit| offer | (1u64 << bit));
        assert_eq!(WDDM_GPU_DEVICE_FEATURES, offer);
    }

    #[test]
    fn the_required_features_are_version_1_and_offered() {
        assert_eq!(WDDM_GPU_REQUIRED_FEATURES, 1u64 << VIRTIO_F_VERSION_1);
        assert_eq!(
            WDDM_GPU_DEVICE_FEATURES & WDDM_GPU_REQUIRED_FEATURES,
            WDDM_GPU_REQUIRED_FEATURES
        );
    }
}
