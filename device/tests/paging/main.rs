//! The paging engine driven over the real vhost-user socket (see `wddm_gpu_frontend_kit::harness`), checked byte for
//! byte in the memfd guest RAM and the VRAM file, one module a topic:
//!
//! - [`ops`]: every packet, every endpoint combination of TRANSFER, FENCE events.
//! - [`dma_buffer`]: DMA buffers in segments (VRAM, the aperture).
//! - [`faults`]: one test per fault status the device can report, with the status page's fault
//!   ring and the FAULT event.
//! - [`checker`]: the `--check` warnings, each provoked by a sloppy driver.
//! - [`injection`]: fault injection armed through `ctl` and a plan file, and the driver's
//!   recovery from each (RESET, QUERY_ENGINE_STATUS).
//! - [`link`]: the link model: modelled time, same bytes, PREEMPT through its waits.
//! - [`preemption`]: PREEMPT and RESET in the middle of a long submission, a virtio reset by the
//!   frontend.
//! - [`vm_lifecycle`]: a ring stop is a pause, not a reset.
//! - [`vram`]: BAR_CHANGED events and the status page, device-only VRAM across restarts.
//!
//! Submissions run on the device's own thread: requests posted with `Harness::post` are
//! answered in any order while the control queue keeps serving, and every wait is bounded.

mod common;
mod place;

mod checker;
mod dma_buffer;
mod faults;
mod injection;
mod link;
mod ops;
mod preemption;
mod vm_lifecycle;
mod vram;
