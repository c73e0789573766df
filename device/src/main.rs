//! `vhost-user-wddm-gpu`: the backend process QEMU's `vhost-user-gpu-pci` connects to.

use std::io::{ErrorKind, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use vhost_user_wddm_gpu::daemon::{self, Config};
use vhost_user_wddm_gpu::display::edid::MAX_EDID_DIMENSION;
use vhost_user_wddm_gpu::display::DisplayConfig;
use vhost_user_wddm_gpu::support::size::parse_size;
use vhost_user_wddm_gpu::{
    dxgk_values, endpoint, replay, watch, BarModeRequest, LayoutReport, LinkSpec, ReplayError,
    ReplayOptions, ReplayReport, WatchError, WatchOptions,
};

/// A virtual GPU for WDDM kernel-mode driver bring-up, served to QEMU over vhost-user.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

/// Options of the backend itself (no subcommand).
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Listen for the frontend on this Unix socket path.
    #[arg(long, conflicts_with = "fd")]
    socket_path: Option<PathBuf>,
    /// Use this already-open socket instead of --socket-path: a listening socket, or a
    /// connected one as libvirt passes (QEMU's vhost-user backend convention).
    #[arg(long)]
    fd: Option<i32>,
    /// Print the backend's capabilities as JSON (QEMU's vhost-user convention) and exit.
    #[arg(long)]
    print_capabilities: bool,
    /// The VRAM file, created if missing; QEMU maps the same file for the VRAM BAR. Default:
    /// a file in /dev/shm named after the --socket-path (each socket gets its own), or after
    /// the process with --fd.
    #[arg(long)]
    vram_path: Option<PathBuf>,
    /// VRAM BAR size: a power of two (QEMU requires power-of-two BARs), e.g. 256MiB or 0x10000000.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    vram_size: u64,
    /// Keep device-only VRAM (segments the guest CPU cannot reach) in this file, so its
    /// contents survive a backend restart as the BAR file's do; default: anonymous memory,
    /// zero at every start.
    #[arg(long)]
    device_vram_path: Option<PathBuf>,
    /// Mode of the files and sockets the backend creates (octal): the owner's only by default;
    /// 0660 lets a QEMU running as another user of the same group use them.
    #[arg(long, default_value = "0600", value_parser = parse_file_mode)]
    file_mode: u32,
    /// Answer the benchmark's eventfd echo on the stats socket (`scripts/bench` passes it);
    /// off by default: no other client may make the vring worker serve its eventfds.
    #[arg(long)]
    bench_echo: bool,
    /// Segment layout file (TOML); default: CPU-visible VRAM filling the BAR plus a 512 MiB aperture.
    #[arg(long)]
    layout: Option<PathBuf>,
    /// VRAM BAR mode: `ivshmem` (companion function, QEMU 10), `shmem` (SHMEM_MAP into the GPU
    /// function's shared-memory region, QEMU 11.1), or `auto` (shmem when the frontend asks).
    #[arg(long, value_enum, default_value = "auto")]
    bar_mode: BarModeRequest,
    /// Serve counters and latency histograms on this Unix socket (`vhost-user-wddm-gpu stats`
    /// reads it); default: the --socket-path with `.stats` appended (none with --fd).
    #[arg(long)]
    stats_socket: Option<PathBuf>,
    /// Serve fault injection and live inspection on this Unix socket, for this user only
    /// (`vhost-user-wddm-gpu ctl` talks to it); default: the --socket-path with `.ctl`
    /// appended (none with --fd).
    #[arg(long)]
    ctl_socket: Option<PathBuf>,
    /// Arm the fault injections this file lists (one per line, `#` comments), for a repeatable
    /// run; see docs/fault-injection.md.
    #[arg(long)]
    inject_plan: Option<PathBuf>,
    /// Warn (log, stats, trace, `ctl warnings`) about what the device accepts but is almost
    /// always a driver bug: an aperture page mapped over a live mapping, an unmapped page used,
    /// a fence that goes backwards, device-only VRAM read before it was written, no status page
    /// after RESET, a missing FLUSH_TLB; a summary at exit. Off by default.
    #[arg(long)]
    check: bool,
    /// Model a card's link, so paging takes the time it would there: a PCIe preset
    /// (`pcie3x16`, `pcie4x8`, ... `pcie1x1` to `pcie5x16`) and/or `bandwidth=RATE`,
    /// `latency=DURATION`, `page=DURATION` (per 4 KiB page of system memory), `vram=RATE`
    /// (VRAM-to-VRAM copies and fills), comma-separated: `pcie4x16,vram=448GB/s`. Replaces the
    /// layout's `[link]`; see docs/performance.md. Off by default.
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: Option<LinkSpec>,
    /// Write every submission and packet to this file as a Chrome trace-event timeline
    /// (open it in Perfetto or chrome://tracing).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Stop adding events to the --trace file once it holds this much (e.g. 4GiB); the guest
    /// decides how many packets there are.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    trace_max_size: u64,
    /// Record every submission of both engine nodes (its command, the packets, frame lists,
    /// page arrays and page-table entries it read, how it ran and its answer), the context
    /// commands, and every RESET, RESET_ENGINE and PREEMPT to this file, for
    /// `vhost-user-wddm-gpu replay`.
    #[arg(long)]
    record: Option<PathBuf>,
    /// With --record: keep the bytes copies read (TRANSFER sources) too, so a replay
    /// reproduces VRAM contents exactly; the file then grows by every byte moved.
    #[arg(long, requires = "record")]
    record_data: bool,
    /// Scanouts (displays) of the standard virtio-gpu 2D device, 1 to 16. QEMU shows as many
    /// as its `max_outputs` property allows (1 by default).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=16))]
    scanouts: u32,
    /// Preferred size of every scanout, WIDTHxHEIGHT (each 16 to 4095): what GET_DISPLAY_INFO
    /// and each scanout's EDID report.
    #[arg(long, default_value = "1024x768", value_parser = parse_display_size)]
    display_size: (u32, u32),
    /// Host memory all 2D resources may take together; RESOURCE_CREATE_2D past it is answered
    /// ERR_OUT_OF_MEMORY.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    max_2d_memory: u64,
    /// Vblanks a second of a scanout showing VRAM (WDDM_GPU_CMD_SET_SCANOUT_VRAM): flips take
    /// effect, changed VRAM is shown and a VBLANK event completes a posted WAIT_EVENT at each.
    /// 0 to 240; 0 = no vblanks: a flip shows at once, and only then.
    #[arg(long, default_value = "60", value_parser = clap::value_parser!(u32).range(0..=240))]
    vblank_hz: u32,
}

impl RunArgs {
    /// What the daemon needs of these options.
    fn config(&self) -> Config {
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
enum Command {
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

/// Exit code for invalid input (bad layout, bad value): the same as clap's usage errors.
const EXIT_INVALID: u8 = 2;

/// Exit code of a replay in which some answer differs from the recorded one.
const EXIT_MISMATCH: u8 = 3;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    match cli.command {
        Some(Command::CheckLayout {
            file,
            vram_size,
            json,
        }) => check_layout(&file, vram_size, json),
        Some(Command::Decode { kind, value }) => {
            value_command(&kind, |kind| dxgk_values::decode(kind, &value))
        }
        Some(Command::Encode { kind, fields }) => {
            value_command(&kind, |kind| dxgk_values::encode(kind, &fields))
        }
        Some(Command::Stats {
            socket,
            prometheus,
            json,
            watch,
            count,
        }) => {
            let request = if prometheus {
                "prometheus"
            } else if json {
                "json"
            } else {
                "table"
            };
            let path = stats_socket_for(&socket);
            match watch {
                Some(interval) if request == "table" => watch_command(
                    &path,
                    WatchOptions {
                        interval,
                        frames: count,
                        terminal: std::io::stdout().is_terminal(),
                    },
                ),
                _ => stats_command(&path, request, watch.map(|interval| (interval, count))),
            }
        }
        Some(Command::Ctl { socket, request }) => ctl_command(&socket, &request.join(" ")),
        Some(Command::Replay {
            file,
            json,
            trace,
            dump_vram,
        }) => replay_command(&file, json, ReplayOptions { trace, dump_vram }),
        None => serve(&cli.run),
    }
}

/// A command line clap refused, as one line with the common prefix (clap's own rendering adds
/// a usage block); `--help` and `--version` print as clap prints them.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind::{
        DisplayHelp, DisplayHelpOnMissingArgumentOrSubcommand, DisplayVersion,
    };
    if matches!(
        error.kind(),
        DisplayHelp | DisplayHelpOnMissingArgumentOrSubcommand | DisplayVersion
    ) {
        error.exit();
    }
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("vhost-user-wddm-gpu: error: {message} (see --help)");
    ExitCode::from(EXIT_INVALID)
}

/// `ctl SOCKET WORDS...`: one request to the control socket, its answer on standard output.
fn ctl_command(socket: &Path, request: &str) -> ExitCode {
    let companion = endpoint::default_control_path(socket);
    let path = if std::fs::symlink_metadata(&companion).is_ok() {
        companion
    } else {
        socket.to_owned()
    };
    match endpoint::query_bytes(&path, request) {
        Ok(answer) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (e.g. `| head`) is not an error of the request.
            let _ = stdout.write_all(&answer).and_then(|()| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(error) if error.kind() == ErrorKind::InvalidInput => {
            eprintln!("vhost-user-wddm-gpu: error: ctl: {error}");
            ExitCode::from(EXIT_INVALID)
        }
        Err(error) => {
            eprintln!(
                "vhost-user-wddm-gpu: error: no control endpoint at {}: {error} (is the backend \
                 running? it serves --ctl-socket, by default its --socket-path with .ctl appended)",
                path.display()
            );
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// `WIDTHxHEIGHT`, each within what an EDID detailed timing holds.
fn parse_display_size(text: &str) -> Result<(u32, u32), String> {
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

fn serve(args: &RunArgs) -> ExitCode {
    if args.print_capabilities {
        println!("{{\n  \"type\": \"gpu\",\n  \"features\": []\n}}");
        return ExitCode::SUCCESS;
    }
    if args.socket_path.is_none() && args.fd.is_none() {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "one of --socket-path or --fd is required",
            )
            .exit();
    }
    let (mut layout, layout_text) =
        match daemon::load_layout_with_text(args.layout.as_deref(), args.vram_size) {
            Ok(loaded) => loaded,
            Err(lines) => {
                for line in lines {
                    eprintln!("vhost-user-wddm-gpu: error: {line}");
                }
                return ExitCode::from(EXIT_INVALID);
            }
        };
    if let Some(link) = &args.link {
        layout.link = Some(link.clone());
    }
    let config = Config {
        layout_text,
        ..args.config()
    };
    match daemon::run(&config, layout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(1)
        }
    }
}

fn check_layout(path: &Path, vram_size: u64, json: bool) -> ExitCode {
    match daemon::load_layout(Some(path), vram_size) {
        Ok(layout) => {
            let report = LayoutReport::new(&layout, vram_size);
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(error) => {
                        eprintln!("vhost-user-wddm-gpu: error: {error}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print!("{}", report.text());
            }
            ExitCode::SUCCESS
        }
        Err(lines) => {
            for line in lines {
                eprintln!("vhost-user-wddm-gpu: error: {line}");
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn value_command(
    kind: &str,
    apply: impl FnOnce(dxgk_values::ValueKind) -> Result<String, dxgk_values::CodecError>,
) -> ExitCode {
    match dxgk_values::ValueKind::from_name(kind).and_then(apply) {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// `--file-mode`: octal permission bits, the owner always able to read and write.
fn parse_file_mode(text: &str) -> Result<u32, String> {
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
fn parse_link(text: &str) -> Result<LinkSpec, String> {
    LinkSpec::parse(text).map_err(|error| error.to_string())
}

/// `--watch SECS`: a positive number of seconds (fractions allowed).
fn parse_interval(text: &str) -> Result<Duration, String> {
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

/// The stats socket `stats SOCKET` means: `SOCKET.stats` when that exists (SOCKET is then
/// the vhost-user socket), else SOCKET itself.
fn stats_socket_for(socket: &Path) -> PathBuf {
    let companion = endpoint::default_path(socket);
    if std::fs::symlink_metadata(&companion).is_ok() {
        companion
    } else {
        socket.to_owned()
    }
}

/// `stats SOCKET`: one rendering of the stats endpoint at `path`, or with `repeat` (interval,
/// frames) one every interval.
fn stats_command(path: &Path, request: &str, repeat: Option<(Duration, Option<u64>)>) -> ExitCode {
    let mut separator = "";
    let mut printed = 0u64;
    loop {
        let answer = match endpoint::query(path, request) {
            Ok(answer) => answer,
            Err(error) => return stats_unreachable(path, &error),
        };
        let mut stdout = std::io::stdout().lock();
        if write!(stdout, "{separator}{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            // A closed pipe (e.g. `| head`): nothing more to show.
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        printed += 1;
        let Some((interval, frames)) = repeat else {
            return ExitCode::SUCCESS;
        };
        if frames.is_some_and(|frames| printed >= frames) {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(interval);
        separator = "\n";
    }
}

/// `stats --watch SECS SOCKET`: the live view until interrupted.
fn watch_command(path: &Path, options: WatchOptions) -> ExitCode {
    match watch(path, options, std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(WatchError::Query { source, .. }) => stats_unreachable(path, &source),
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// The stats endpoint at `path` did not answer: says why (and what to check when nothing is
/// there at all).
fn stats_unreachable(path: &Path, error: &std::io::Error) -> ExitCode {
    let at = path.display();
    if matches!(
        error.kind(),
        ErrorKind::NotFound | ErrorKind::ConnectionRefused
    ) {
        eprintln!(
            "vhost-user-wddm-gpu: error: no stats endpoint at {at}: {error} \
             (is the backend running? it serves --stats-socket, by default its \
             --socket-path with .stats appended)"
        );
    } else {
        eprintln!("vhost-user-wddm-gpu: error: stats endpoint {at}: {error}");
    }
    ExitCode::from(EXIT_INVALID)
}

fn replay_command(file: &Path, json: bool, options: ReplayOptions) -> ExitCode {
    let report = match replay(file, &options) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {}: {error}", file.display());
            return ExitCode::from(match error {
                ReplayError::Format(_) | ReplayError::Layout(_) => EXIT_INVALID,
                _ => 1,
            });
        }
    };
    for mismatch in &report.counts.mismatches {
        eprintln!(
            "vhost-user-wddm-gpu: replay: entry {} (node {}, fence {}) answered differently:\n  recorded {:?}\n  replayed {:?}",
            mismatch.entry, mismatch.node, mismatch.fence, mismatch.recorded, mismatch.replayed
        );
    }
    for refusal in &report.counts.refusals {
        eprintln!(
            "vhost-user-wddm-gpu: replay: entry {} ({}) was accepted by the backend, refused here: {}",
            refusal.entry, refusal.command, refusal.error
        );
    }
    let printed = if json {
        replay_json(&report)
    } else {
        Ok(format!(
            "{}\n{}\n",
            report.stats.snapshot().to_table(),
            replay_summary(&report)
        ))
    };
    match printed {
        Ok(text) => print!("{text}"),
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            return ExitCode::from(1);
        }
    }
    if report.counts.mismatches.is_empty() && report.counts.refusals.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_MISMATCH)
    }
}

/// The lines under the replay's table: what was replayed and whether the answers matched.
fn replay_summary(report: &ReplayReport) -> String {
    let verdict = match (report.counts.mismatches.len(), report.counts.refusals.len()) {
        (0, 0) => "every answer matched the recording".to_owned(),
        (n, 0) => format!("{n} answer(s) differ from the recording"),
        (n, refused) => {
            format!("{n} answer(s) differ from the recording, {refused} context command(s) refused")
        }
    };
    let data = match (report.header.data, report.counts.data_dropped) {
        (false, _) => "metadata only".to_owned(),
        (true, 0) => "with data".to_owned(),
        (true, dropped) => format!("with data ({dropped} bytes over the limit left out)"),
    };
    format!(
        "replay: {} submissions ({} on the virtual node), {} context commands, {} resets, {} engine resets, {} preempts ({data}); execution {:.3} ms recorded, {:.3} ms replayed; {verdict}",
        report.counts.submissions,
        report.counts.virtual_submissions,
        report.counts.context_commands,
        report.counts.resets,
        report.counts.engine_resets,
        report.counts.preempts,
        report.counts.recorded_ns as f64 / 1e6,
        report.counts.replayed_ns as f64 / 1e6,
    )
}

/// The `stats --json` object of the replay, with a `replay` member.
fn replay_json(report: &ReplayReport) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(report.stats.snapshot())?;
    let mismatches: Vec<serde_json::Value> = report
        .counts
        .mismatches
        .iter()
        .map(|mismatch| {
            serde_json::json!({
                "entry": mismatch.entry,
                "node": mismatch.node,
                "fence": mismatch.fence,
                "recorded": format!("{:?}", mismatch.recorded),
                "replayed": format!("{:?}", mismatch.replayed),
            })
        })
        .collect();
    let refusals: Vec<serde_json::Value> = report
        .counts
        .refusals
        .iter()
        .map(|refusal| {
            serde_json::json!({
                "entry": refusal.entry,
                "command": refusal.command,
                "error": refusal.error.to_string(),
            })
        })
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "replay".into(),
            serde_json::json!({
                "submissions": report.counts.submissions,
                "virtual_submissions": report.counts.virtual_submissions,
                "context_commands": report.counts.context_commands,
                "engine_resets": report.counts.engine_resets,
                "resets": report.counts.resets,
                "preempts": report.counts.preempts,
                "data": report.header.data,
                "data_dropped": report.counts.data_dropped,
                "recorded_ns": report.counts.recorded_ns,
                "replayed_ns": report.counts.replayed_ns,
                "mismatches": mismatches,
                "refusals": refusals,
            }),
        );
    }
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}
