//! vhost-user-wddm-gpu: a virtual GPU for bringing up WDDM kernel-mode drivers under QEMU.
//!
//! Module map:
//! - [`device`]: vhost-user transport glue (features, config, memory table, virtqueues).
//! - [`fd_relay`]: `--fd` with a connected socket, bridged to the daemon's listener.
//! - [`control`]: control-queue wire decoding.
//! - [`gpu`]: the device model answering control requests.
//! - [`scheduler`]: the engine thread, its queue, preemption and reset.
//! - [`engine`]: the paging engine executing DMA buffers of paging packets.
//! - [`gart`]: aperture translation tables.
//! - [`layout`]: segments and how GPU addresses resolve.
//! - [`layout_file`]: the `--layout` TOML file.
//! - [`layout_rules`]: the WDDM rules a layout must obey.
//! - [`layout_report`]: the layout as `DXGK_QUERYSEGMENTOUT3`/`4`, as text and JSON.
//! - [`caps`]: the segment-layout capability-set blob.
//! - [`vram`]: the shared VRAM file and the BAR locator.
//! - [`guest_ram`]: guest system memory with the VRAM window excluded.
//! - [`guest_log`]: rate-limited warnings for what a guest caused.
//! - [`status_page`]: the status page the driver registers.
//! - [`size`]: size parsing for command lines and layout files.
//! - [`stats`]: counters and latency histograms of the paging path.
//! - [`trace`]: the `--trace` timeline.
//! - [`stats_server`]: the stats endpoint.
//! - [`echo`]: the eventfd echo the benchmark compares latency with.

pub mod caps;
pub mod codec;
pub mod control;
pub mod device;
pub mod echo;
pub mod engine;
pub mod fd_relay;
pub mod gart;
pub mod gpu;
pub mod guest_log;
pub mod guest_ram;
pub mod layout;
pub mod layout_file;
pub mod layout_report;
pub mod layout_rules;
pub mod scheduler;
pub mod size;
pub mod stats;
pub mod stats_server;
pub mod status_page;
pub mod trace;
pub mod vram;
