//! Guest-side reference driver for vhost-user-wddm-gpu: drives the GPU from Linux user space the
//! way a WDDM KMD would (PCI discovery, virtio-pci modern transport, capset, paging submissions)
//! and runs the slice test, the guest test suite and the paging tests against it.
//!
//! Pure logic (parsing, packet and frame-list building, reporting) is host-testable; the
//! hardware modules need root inside the test guest.
//!
//! - [`caps`]: capset blob parsing and validation.
//! - [`report`]: the layout as `DXGK_QUERYSEGMENTOUT3` or `...OUT4` (by WDDM version), in text
//!   and JSON.
//! - [`packets`]: DMA buffers of paging packets (the ABI crate's builders).
//! - [`scatter`]: frame lists from shuffled 4 KiB pieces.
//! - [`prng`], [`pattern`]: deterministic randomness and data patterns.
//! - [`pagemap`], [`dma`]: pinned hugepage DMA memory with physical addresses.
//! - [`iomem`]: address ranges that are certainly not RAM.
//! - [`pci`], [`mmio`]: PCI sysfs access and BAR mappings.
//! - [`virtio`]: the virtio-pci transport and polled split virtqueues (several chains in
//!   flight, completed in any order).
//! - [`gpu`]: control-queue commands of the device.
//! - [`driver`], [`vram`]: device start-up and the VRAM BAR.
//! - [`kmd`]: the status page and the WAIT_EVENT requests kept posted.
//! - [`engine`], [`failure`]: what tests submit and check.
//! - [`latency`]: latency samples, percentiles and rates for the benchmark.
//! - [`scenario`]: the `probe`, `slice`, `suite`, `paging`, `bench` and `lifecycle` commands.
//! - [`sync`]: the `lifecycle`, `scanout` and `tdr` commands' rendezvous with the host (second
//!   serial port).
//! - [`tdr`]: the paging node's timeout detection and recovery (lost interrupts, PREEMPT, RESET).
//! - [`cli`]: command-line parsing.

pub mod caps;
pub mod cli;
pub mod dma;
pub mod driver;
pub mod engine;
pub mod failure;
pub mod gpu;
pub mod gpummu;
pub mod iomem;
pub mod kmd;
pub mod latency;
pub mod mmio;
pub use wddm_gpu_abi::build as packets;
pub mod pagemap;
pub mod pattern;
pub mod pci;
pub mod prng;
pub mod report;
pub mod scatter;
pub mod scenario;
pub mod sync;
pub mod tdr;
pub mod virtio;
pub mod vram;
