//! The programming interface of the vhost-user-wddm-gpu device, shared by the backend, the guest
//! reference driver and (through the generated `include/wddm_gpu.h`) C kernel-mode drivers.
//!
//! - [`pci`]: how a driver finds and drives the device on PCI: ids, virtio-pci capabilities,
//!   common configuration registers, status bits.
//! - [`ring`]: the split virtqueue's descriptors, ring layout and flags.
//! - [`context`]: contexts with GPU virtual addressing, roots, the virtual node and its packets.
//! - [`ctrl`]: the virtio-gpu control-queue header and the commands this device answers.
//! - [`display`]: the standard virtio-gpu 2D commands (scanouts, resources, cursor).
//! - [`features`]: the feature bits the device offers.
//! - [`request`]: decoding a control or cursor request once, into a typed command.
//! - [`submit`]: the submission command (a DMA buffer of paging packets) and its completion.
//! - [`packet`]: the paging packets a DMA buffer holds.
//! - [`decode`]: reading a packet's kind and struct, the one decode the device uses.
//! - [`build`]: building packets and DMA buffers, for drivers, tests and tools.
//! - [`caps`]: the segment-layout capability set a KMD reads to fill `DXGK_QUERYSEGMENTOUT3`.
//! - [`capset_rules`]: the one validator of that blob, for the guest driver and the backend.
//! - [`status`]: the status page, events, preemption.
//! - [`segment_flags`]: `DXGK_SEGMENTFLAGS` with its documented bit positions.
//! - [`gpuva`]: GPU virtual addressing: the page-table entry format, the GpuMmu geometry, faults.
//! - [`gpummu_rules`]: the one validator of a GpuMmu geometry.
//! - [`preference`]: `D3DDDI_SEGMENTPREFERENCE` and `DXGK_SEGMENTBANKPREFERENCE` placement hints.
//!
//! Every structure is `#[repr(C)]`, has no implicit padding and is little-endian on the wire.
//! The device targets little-endian hosts and guests only (x86-64, aarch64).

#[cfg(target_endian = "big")]
compile_error!("the wddm-gpu wire format is little-endian; big-endian targets are not supported");

pub mod build;
pub mod caps;
/// Rust types and logic, not part of the C interface (its limits are in `caps`).
/// cbindgen:ignore
pub mod capset_rules;
pub mod context;
pub mod ctrl;
/// Host-side reading, not part of the C interface.
/// cbindgen:ignore
pub mod decode;
pub mod display;
pub mod features;
/// Rust types and logic, not part of the C interface (its limits are in `gpuva`).
/// cbindgen:ignore
pub mod gpummu_rules;
pub mod gpuva;
pub mod packet;
pub mod pci;
pub mod preference;
/// Host-side reading, not part of the C interface.
/// cbindgen:ignore
pub mod request;
pub mod ring;
pub mod segment_flags;
pub mod status;
pub mod submit;

/// `size_of::<T>()` as the `u32` that the wire's size fields hold, checked when the program is
/// built: a type of 4 GiB or more fails to compile instead of truncating (`u32::try_from` is not
/// usable in `const`).
/// cbindgen:ignore
pub const fn size_of_u32<T>() -> u32 {
    const {
        let size = size_of::<T>();
        assert!(
            size <= u32::MAX as usize,
            "a wire struct is far smaller than 4 GiB"
        );
        let [b0, b1, b2, b3, ..] = size.to_le_bytes();
        u32::from_le_bytes([b0, b1, b2, b3])
    }
}

/// Size of a guest page frame as used in frame lists and the aperture (the host page size that
/// WDDM segment sizes are multiples of).
pub const WDDM_GPU_PAGE_SIZE: u64 = 4096;
/// log2 of [`WDDM_GPU_PAGE_SIZE`].
pub const WDDM_GPU_PAGE_SHIFT: u32 = 12;
/// The page size of a segment with `Use64KBPages`: its size, bank ends and BAR window are
/// multiples of it.
pub const WDDM_GPU_LARGE_PAGE_SIZE: u64 = 64 << 10;
