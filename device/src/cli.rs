//! The command line of the backend binary: the options of the backend itself ([`RunArgs`]), its
//! subcommands ([`Command`]) and the value parsers behind them. In the library, not in `main.rs`,
//! so that tools other than the backend read the same definitions: `device/dist` generates the
//! man pages and shell completions from [`Cli`], and the tests check the documentation against
//! it. `main.rs` keeps what each command does.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser};

use crate::daemon::Config;
use crate::display::edid::MAX_EDID_DIMENSION;
use crate::display::{DisplayConfig, MAX_VBLANK_HZ};
use crate::layout::link::LinkSpec;
use crate::support::size::parse_size;
use crate::transport::backend::BarModeRequest;

/// The program's name: the binary, its man pages and its completions are named after it.
pub const BIN_NAME: &str = "vhost-user-wddm-gpu";

/// A virtual GPU for WDDM kernel-mode driver bring-up, served to QEMU over vhost-user.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of the backend itself (no subcommand). Exactly one of `--socket-path` and `--fd` is
/// required, or `--print-capabilities` alone: one required group of the three, so the usage line
/// says so and clap refuses a start with neither (exit code 2).
#[derive(Debug, clap::Args)]
#[command(group(
    ArgGroup::new("endpoint")
        .required(true)
        .args(["socket_path", "fd", "print_capabilities"])
))]
pub struct RunArgs {
    /// Listen for the frontend on this Unix socket path.
    #[arg(long)]
    pub socket_path: Option<PathBuf>,
    /// Use this already-open socket instead of --socket-path: a listening socket, or a
    /// connected one as libvirt passes (QEMU's vhost-user backend convention).
    #[arg(long)]
    pub fd: Option<i32>,
    /// Print the backend's capabilities as JSON (QEMU's vhost-user convention) and exit; given
    /// alone, as libvirt does.
    #[arg(long, exclusive = true)]
    pub print_capabilities: bool,
    /// The VRAM file, created if missing; QEMU maps the same file for the VRAM BAR. Default:
    /// a file in /dev/shm named after the --socket-path (each socket gets its own), or after
    /// the process with --fd; a file the backend named is removed when it exits.
    #[arg(long)]
    pub vram_path: Option<PathBuf>,
    /// VRAM BAR size: a power of two (QEMU requires power-of-two BARs), e.g. 256MiB or 0x10000000.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub vram_size: u64,
    /// Keep device-only VRAM (segments the guest CPU cannot reach) in this file, so its
    /// contents survive a backend restart as a --vram-path file's do; default: anonymous memory,
    /// zero at every start.
    #[arg(long)]
    pub device_vram_path: Option<PathBuf>,
    /// Mode of the files and sockets the backend creates (octal): the owner's only by default;
    /// 0660 lets a QEMU running as another user of the same group use them.
    #[arg(long, default_value = "0600", value_parser = parse_file_mode)]
    pub file_mode: u32,
    /// Answer the benchmark's eventfd echo on the stats socket (`scripts/bench` passes it);
    /// off by default: no other client may make the vring worker serve its eventfds.
    #[arg(long)]
    pub bench_echo: bool,
    /// Segment layout file (TOML); default: CPU-visible VRAM filling the BAR plus a 512 MiB aperture.
    #[arg(long)]
    pub layout: Option<PathBuf>,
    /// VRAM BAR mode: `ivshmem` (an ivshmem-plain companion function; QEMU 10 and 11.1),
    /// `shmem` (SHMEM_MAP into the GPU function's shared-memory region; QEMU 11.1), or `auto`
    /// (shmem when the frontend asks for shared-memory regions, else ivshmem).
    #[arg(long, value_enum, default_value = "auto")]
    pub bar_mode: BarModeRequest,
    /// Serve counters and latency histograms on this Unix socket (`vhost-user-wddm-gpu stats`
    /// reads it); default: the --socket-path with `.stats` appended (none with --fd).
    #[arg(long)]
    pub stats_socket: Option<PathBuf>,
    /// Serve fault injection and live inspection on this Unix socket, for this user only
    /// (`vhost-user-wddm-gpu ctl` talks to it); default: the --socket-path with `.ctl`
    /// appended (none with --fd).
    #[arg(long)]
    pub ctl_socket: Option<PathBuf>,
    /// Arm the fault injections this file lists (one per line, `#` comments), for a repeatable
    /// run; see docs/fault-injection.md.
    #[arg(long)]
    pub inject_plan: Option<PathBuf>,
    /// Warn (log, stats, trace, `ctl warnings`) about what the device accepts but is almost
    /// always a driver bug: an aperture page mapped over a live mapping, an unmapped page used,
    /// a fence that goes backwards, device-only VRAM read before it was written, no status page
    /// after RESET, a missing FLUSH_TLB; a summary at exit. Off by default.
    #[arg(long)]
    pub check: bool,
    /// Model a card's link, so paging takes the time it would there: a PCIe preset
    /// (`pcie3x16`, `pcie4x8`, ... `pcie1x1` to `pcie5x16`) and/or `bandwidth=RATE`,
    /// `latency=DURATION`, `page=DURATION` (per 4 KiB page of system memory), `vram=RATE`
    /// (VRAM-to-VRAM copies and fills), comma-separated: `pcie4x16,vram=448GB/s`. Replaces the
    /// layout's `[link]`; see docs/performance.md. Off by default.
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    pub link: Option<LinkSpec>,
    /// Write every submission and packet to this file as a Chrome trace-event timeline
    /// (open it in Perfetto or chrome://tracing).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Stop adding events to the --trace file once it holds this much (e.g. 4GiB); the guest
    /// decides how many packets there are.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub trace_max_size: u64,
    /// Record every submission of both engine nodes (its command, the packets, frame lists,
    /// page arrays and page-table entries it read, how it ran and its answer), the context
    /// commands, and every RESET, RESET_ENGINE and PREEMPT to this file, for
    /// `vhost-user-wddm-gpu replay`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// With --record: keep the bytes copies read (TRANSFER sources) too, so a replay
    /// reproduces VRAM contents exactly; the file then grows by every byte moved.
    #[arg(long, requires = "record")]
    pub record_data: bool,
    /// Scanouts (displays) of the standard virtio-gpu 2D device, 1 to 16. QEMU shows as many
    /// as its `max_outputs` property allows (1 by default).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub scanouts: u32,
    /// Preferred size of every scanout, WIDTHxHEIGHT (each 16 to 4095): what GET_DISPLAY_INFO
    /// and each scanout's EDID report.
    #[arg(long, default_value = "1024x768", value_parser = parse_display_size)]
    pub display_size: (u32, u32),
    /// Host memory all 2D resources may take together; RESOURCE_CREATE_2D past it is answered
    /// ERR_OUT_OF_MEMORY.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub max_2d_memory: u64,
    /// Vblanks a second of a scanout showing VRAM (WDDM_GPU_CMD_SET_SCANOUT_VRAM): flips take
    /// effect, changed VRAM is shown and a VBLANK event completes a posted WAIT_EVENT at each.
    /// 0 to 240; 0 = no vblanks: a flip shows at once, and only then.
    #[arg(long, default_value = "60", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_VBLANK_HZ)))]
    pub vblank_hz: u32,
}

impl RunArgs {
    /// What the daemon needs of these options.
    pub fn config(&self) -> Config {
        Config {
            socket_path: self.socket_path.clone(),
            fd: self.fd,
            vram_path: self.vram_path.clone(),
            vram_size: self.vram_size,
            device_vram_path: self.device_vram_path.clone(),
            file_mode: self.file_mode,
            bench_echo: self.bench_echo,
            bar_mode: self.bar_mode,
            stats_socket: self.stats_socket.clone(),
            control_socket: self.ctl_socket.clone(),
            inject_plan: self.inject_plan.clone(),
            check: self.check,
            trace: self.trace.clone(),
            trace_max_size: self.trace_max_size,
            record: self.record.clone(),
            record_data: self.record_data,
            layout_text: None,
            display: DisplayConfig {
                scanouts: self.scanouts,
                width: self.display_size.0,
                height: self.display_size.1,
                max_memory: self.max_2d_memory,
                vblank_hz: self.vblank_hz,
            },
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check a layout file against the WDDM rules and print it as DXGK_QUERYSEGMENTOUT3/4 holds it.
    CheckLayout {
        /// The layout file.
        file: PathBuf,
        /// VRAM BAR size the CPU-visible segments must fit in.
        #[arg(long, default_value = "256MiB", value_parser = parse_size)]
        vram_size: u64,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Decode a raw value: segment-preference, bank-preference or segment-flags.
    Decode {
        /// segment-preference | bank-preference | segment-flags
        kind: String,
        /// The raw value, hex (0x...) or decimal.
        value: String,
    },
    /// Encode fields into a raw value: `encode segment-preference 2:top-down 1`,
    /// `encode bank-preference 3:top-down`, `encode segment-flags Aperture CacheCoherent`.
    Encode {
        /// segment-preference | bank-preference | segment-flags
        kind: String,
        /// Fields in priority order (preferences) or member names (flags).
        #[arg(required = true)]
        fields: Vec<String>,
    },
    /// Print a running backend's paging-path counters and latencies (a table by default).
    Stats {
        /// The stats socket, or the backend's --socket-path (its `.stats` socket is used when
        /// that exists).
        socket: PathBuf,
        /// Print the Prometheus text exposition format.
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Watch every SECS seconds until interrupted: the table becomes a live view (rates per
        /// packet kind, node and segment, queue depth, latency bars, faults and injections)
        /// redrawn in place on a terminal; --json and --prometheus print again.
        #[arg(long, value_name = "SECS", value_parser = parse_interval)]
        watch: Option<Duration>,
        /// With --watch: stop after N frames.
        #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Arm and list fault injections and inspect a running backend: `ctl SOCKET arm hang
    /// fence=7`, `ctl SOCKET list`, `ctl SOCKET node --json`, `ctl SOCKET vram 0x1000 256`
    /// (`ctl SOCKET help` lists every request).
    Ctl {
        /// The control socket, or the backend's --socket-path (its `.ctl` socket is used when
        /// that exists).
        socket: PathBuf,
        /// The request's words.
        #[arg(required = true, allow_hyphen_values = true, trailing_var_arg = true)]
        request: Vec<String>,
    },
    /// Run a --record file again, offline, against this build's paging and virtual engines:
    /// print the statistics `stats` prints and check every answer against the recorded one (exit
    /// code 3 when one differs or a context command is refused).
    Replay {
        /// The recording.
        file: PathBuf,
        /// Print one JSON object: the `stats --json` object with a `replay` member.
        #[arg(long)]
        json: bool,
        /// Write the replay's timeline to this file, as --trace does.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Write the replayed VRAM BAR's bytes to this file at the end.
        #[arg(long, value_name = "FILE")]
        dump_vram: Option<PathBuf>,
    },
}

/// `WIDTHxHEIGHT`, each within what an EDID detailed timing holds.
pub fn parse_display_size(text: &str) -> Result<(u32, u32), String> {
    let (width, height) = text
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{text}: expected WIDTHxHEIGHT, e.g. 1024x768"))?;
    let dimension = |value: &str| {
        value
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|v| (16..=MAX_EDID_DIMENSION).contains(v))
            .ok_or_else(|| format!("{text}: each side must be 16 to {MAX_EDID_DIMENSION}"))
    };
    Ok((dimension(width)?, dimension(height)?))
}

/// `--file-mode`: octal permission bits, the owner always able to read and write.
pub fn parse_file_mode(text: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .map_err(|_| format!("'{text}' is not an octal mode such as 0600 or 0660"))?;
    if mode & !0o777 != 0 {
        return Err(format!("{text}: only permission bits (at most 0777)"));
    }
    if mode & 0o600 != 0o600 {
        return Err(format!(
            "{text}: the owner (the backend) must be able to read and write"
        ));
    }
    Ok(mode)
}

/// `--link SPEC`.
pub fn parse_link(text: &str) -> Result<LinkSpec, String> {
    LinkSpec::parse(text).map_err(|error| error.to_string())
}

/// `--watch SECS`: a positive number of seconds (fractions allowed).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0) {
        return Err(format!(
            "{text} must be more than 0 and at most 86400 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}
