//! QEMU's side of vhost-user-wddm-gpu, written once for the backend's integration tests, its
//! benchmark and its fuzz target (a development crate, never published):
//!
//! - [`backend_process`]: the backend binary as a child process, with its socket, VRAM file
//!   and log;
//! - [`harness`]: a vhost-user frontend connected to it, doing what QEMU does (handshake,
//!   memory table, the control queue, device start and stop) and posting requests as a guest
//!   driver does;
//! - [`split_ring`]: the driver's side of a split virtqueue over any [`split_ring::RingMemory`]
//!   (the fuzz target writes its hostile rings with it too);
//! - [`layout`]: layout files written from their segments and GpuMmu;
//! - [`guest_memory`]: memfd-backed guest memory and its memory-table entries;
//! - [`page_tables`]: the ABI's page-table manager with its updates as UPDATE_PAGE_TABLE packets;
//! - [`requests`]: paging submissions and endpoints built from `wddm_gpu_abi`;
//! - [`display_peer`]: QEMU's display side of the vhost-user-gpu socket;
//! - [`pattern`]: deterministic test bytes; [`stats`]: summaries of measurements;
//! - `scrape` (feature `scrape`): the stats endpoint's Prometheus text, parsed and looked up.

pub mod backend_process;
pub mod display_peer;
pub mod guest_memory;
pub mod harness;
pub mod layout;
pub mod page_tables;
pub mod pattern;
pub mod requests;
#[cfg(feature = "scrape")]
pub mod scrape;
pub mod split_ring;
pub mod stats;
