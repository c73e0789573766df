//! What the command line tells the daemon.

use std::path::{Path, PathBuf};

use crate::display::DisplayConfig;
use crate::transport::backend::BarModeRequest;

/// Where to listen, what to serve and what to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// The vhost-user socket to listen on.
    pub socket_path: Option<PathBuf>,
    /// An already-open socket instead (listening, or connected as libvirt passes it).
    pub fd: Option<i32>,
    /// The VRAM file; default: one per socket in /dev/shm.
    pub vram_path: Option<PathBuf>,
    /// The VRAM BAR size (a power of two).
    pub vram_size: u64,
    /// Where device-only VRAM is kept; default: anonymous memory.
    pub device_vram_path: Option<PathBuf>,
    /// Permission bits of the files and sockets created.
    pub file_mode: u32,
    /// Whether the benchmark's eventfd echo is served.
    pub bench_echo: bool,
    /// How the VRAM BAR reaches the guest.
    pub bar_mode: BarModeRequest,
    /// The stats endpoint; default: the socket path with `.stats` appended.
    pub stats_socket: Option<PathBuf>,
    /// The control socket (fault injection, live inspection); default: the socket path with
    /// `.ctl` appended.
    pub control_socket: Option<PathBuf>,
    /// Fault injections armed at start, one per line.
    pub inject_plan: Option<PathBuf>,
    /// The checker: warnings for what is legal but almost always a KMD bug.
    pub check: bool,
    /// The `--trace` timeline file.
    pub trace: Option<PathBuf>,
    /// Where the timeline stops growing.
    pub trace_max_size: u64,
    /// The `--record` file of every submission of both nodes.
    pub record: Option<PathBuf>,
    /// Whether the recording keeps the bytes copies read too (`--record-data`).
    pub record_data: bool,
    /// The `--layout` file's text, for the recording (`None`: the default layout).
    pub layout_text: Option<String>,
    /// Scanouts, their preferred size and the host memory of 2D resources.
    pub display: DisplayConfig,
}

/// The VRAM file a backend uses when not told: one per socket, so two backends started with
/// defaults never share (or resize) each other's VRAM.
pub fn default_vram_path(socket: Option<&Path>) -> PathBuf {
    let name = match socket {
        Some(socket) => {
            // The socket's directory resolved, so two spellings of one socket agree.
            let full = socket
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .and_then(|dir| dir.canonicalize().ok())
                .map(|dir| dir.join(socket.file_name().unwrap_or_default()))
                .unwrap_or_else(|| socket.to_owned());
            // FNV-1a: stable across runs and builds, unlike std's hasher.
            let hash = full
                .as_os_str()
                .as_encoded_bytes()
                .iter()
                .fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
                    (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
                });
            format!("socket-{hash:016x}")
        }
        None => format!("pid-{}", std::process::id()),
    };
    PathBuf::from(format!("/dev/shm/vhost-user-wddm-gpu-{name}.vram"))
}
