//! vhost-user-wddm-gpu: a virtual GPU for bringing up WDDM kernel-mode drivers under QEMU.
//!
//! The source tree is its layers (a folder each); a module imports only from
//! its own layer and those listed before it (`device/tests/layers.rs` fails on an upward import
//! or a cycle). `docs/architecture.md` draws them, with the threads, the locks and the path of
//! one request:
//! - [`support`]: locking, rate-limited guest warnings, size parsing, socket paths.
//! - `layout`: segments and address resolution, the `--layout` file, the WDDM rules, the
//!   `DXGK_QUERYSEGMENTOUT3`/`4` report, the capability-set blob, DXGK value decoding.
//! - `memory`: guest RAM, the shared VRAM file and its BAR locator, aperture translation.
//! - `engine`: the paging engine executing DMA buffers of paging packets, and the record it
//!   makes of each packet.
//! - `observe`: counters and histograms, the `--trace` timeline, the stats endpoint, the
//!   benchmark's echo.
//! - `display` and `gpu`, two sibling devices that do not import each other: the standard
//!   virtio-gpu 2D device with the VRAM scanouts, and the paging GPU (submissions, the
//!   scheduler of the engine thread, the status page, events, how answers go out).
//! - `replay`: running a `--record` file again offline against the engine, beside `gpu`.
//! - `model`: the GPU the transport drives ([`Gpu`]), the router sending each request to one of
//!   the two, and a kick's hold of the display's output.
//! - `transport`: vhost-user glue, and the `--fd` relay.
//! - [`daemon`]: one configuration and one start function for the binary: the checks before a
//!   start, the session with the frontend, the stop on a signal.
//! - [`cli`]: the binary's command line (clap), for the binary, the man pages and completions
//!   `device/dist` generates, and the tests.
//!
//! The layers are private; what the binary, tests, benchmarks and fuzz targets use is exported
//! below, so the compiler sees every item nothing uses.

mod display;
mod engine;
mod gpu;
mod layout;
mod memory;
mod mmu;
mod model;
mod observe;
mod replay;
mod transport;

pub mod cli;
pub mod daemon;
pub mod support;

#[cfg(test)]
mod testkit;

pub use display::DisplayConfig;
pub use engine::record::PacketRecord;
pub use engine::virtual_engine::{VirtualCompletion, VirtualEngine, VirtualHooks, VirtualMemory};
pub use engine::{Completion, DeviceMemory, Engine, EngineHooks, Fault, Interruption, Stop};
pub use layout::capset::{build_capset, MAX_CAPSET_SIZE};
pub use layout::dxgk_values;
pub use layout::file::{parse_layout, read_layout, LayoutSpec};
pub use layout::link::{LinkSpec, LinkSpecError};
pub use layout::report::LayoutReport;
pub use layout::rules;
pub use layout::{Resolved, SegmentKind, SegmentLayout};
pub use memory::capture::{Captured, CapturedRead, ReadKind, Store};
pub use memory::guest_ram::GuestRam;
pub use memory::vram::{BarMode, Vram, VramError};
pub use mmu::fault::{Access, FaultKind, MmuFault};
pub use mmu::space::{AddressSpace, RootError, Run, StaleTranslation};
pub use mmu::tables::DeviceTables;
pub use mmu::walk::{walk, Page, Root, TableAddress, TableMemory, Target, Walk, LINE_ENTRIES};
pub use model::gpu::Gpu;
pub use observe::echo;
pub use observe::endpoint;
pub use observe::recording::format::Outcome as RecordedOutcome;
pub use observe::recording::{format as recording_format, read as recording_read};
pub use observe::stats::watch::{watch, WatchError, WatchOptions};
pub use observe::stats::Stats;
pub use observe::trace::Trace;
pub use replay::{
    replay, Mismatch, Refusal, ReplayCounts, ReplayError, ReplayOptions, ReplayReport,
};
pub use transport::backend::{BarModeRequest, WddmGpuBackend, OFFERED_FEATURES};
pub use transport::fd_relay;
