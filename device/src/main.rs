//! `vhost-user-wddm-gpu`: the backend process QEMU's `vhost-user-gpu-pci` connects to.

use std::io::{ErrorKind, IsTerminal, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use log::info;
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::VhostUserDaemon;
use vhost_user_wddm_gpu::device::{BarModeRequest, WddmGpuBackend};
use vhost_user_wddm_gpu::echo::ECHO_EVENT;
use vhost_user_wddm_gpu::gpu::Gpu;
use vhost_user_wddm_gpu::layout::SegmentLayout;
use vhost_user_wddm_gpu::layout_file::read_layout;
use vhost_user_wddm_gpu::layout_report::LayoutReport;
use vhost_user_wddm_gpu::layout_rules::validate;
use vhost_user_wddm_gpu::size::parse_size;
use vhost_user_wddm_gpu::stats::Stats;
use vhost_user_wddm_gpu::trace::Trace;
use vhost_user_wddm_gpu::vram::{BarMode, Vram};
use vhost_user_wddm_gpu::{codec, fd_relay, stats_server};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

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
    /// Write every submission and packet to this file as a Chrome trace-event timeline
    /// (open it in Perfetto or chrome://tracing).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Stop adding events to the --trace file once it holds this much (e.g. 4GiB); the guest
    /// decides how many packets there are.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    trace_max_size: u64,
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
        /// Print again every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS", value_parser = parse_interval)]
        watch: Option<Duration>,
    },
}

/// Errors that end the program before or while serving.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Vram(#[from] vhost_user_wddm_gpu::vram::VramError),
    #[error("socket {0} is in use by a running process")]
    SocketInUse(PathBuf),
    #[error("socket path {0} exists and is not a socket")]
    NotASocket(PathBuf),
    #[error("--fd {0} is not a Unix socket")]
    BadFd(i32),
    #[error("vhost-user daemon: {0}")]
    Daemon(String),
    #[error("--trace {0}: {1}")]
    Trace(PathBuf, std::io::Error),
    #[error("stats socket {0}: {1}")]
    StatsSocket(PathBuf, std::io::Error),
}

/// Exit code for invalid input (bad layout, bad value): the same as clap's usage errors.
const EXIT_INVALID: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
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
            codec_command(&kind, |kind| codec::decode(kind, &value))
        }
        Some(Command::Encode { kind, fields }) => {
            codec_command(&kind, |kind| codec::encode(kind, &fields))
        }
        Some(Command::Stats {
            socket,
            prometheus,
            json,
            watch,
        }) => {
            let request = if prometheus {
                "prometheus"
            } else if json {
                "json"
            } else {
                "table"
            };
            stats_command(&socket, request, watch)
        }
        None => serve(&cli.run),
    }
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
    let layout = match load_layout(args.layout.as_deref(), args.vram_size) {
        Ok(layout) => layout,
        Err(lines) => {
            for line in lines {
                eprintln!("vhost-user-wddm-gpu: error: {line}");
            }
            return ExitCode::from(EXIT_INVALID);
        }
    };
    match run(args, layout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(1)
        }
    }
}

/// Reads and validates a layout (or builds the default); errors come back one line each.
fn load_layout(path: Option<&Path>, vram_size: u64) -> Result<SegmentLayout, Vec<String>> {
    if !vram_size.is_power_of_two() {
        return Err(vec![format!(
            "--vram-size {vram_size:#x} must be a power of two (QEMU requires power-of-two BARs)"
        )]);
    }
    let Some(path) = path else {
        return Ok(SegmentLayout::default_for_vram(vram_size));
    };
    let at = path.display();
    let spec = read_layout(path).map_err(|error| vec![format!("{at}: {error}")])?;
    validate(&spec, vram_size).map_err(|violations| {
        violations
            .iter()
            .map(|violation| format!("{at}: {violation}"))
            .collect()
    })
}

fn check_layout(path: &Path, vram_size: u64, json: bool) -> ExitCode {
    match load_layout(Some(path), vram_size) {
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
                eprintln!("{line}");
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn codec_command(
    kind: &str,
    apply: impl FnOnce(codec::ValueKind) -> Result<String, codec::CodecError>,
) -> ExitCode {
    match codec::ValueKind::from_name(kind).and_then(apply) {
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

fn run(args: &RunArgs, layout: SegmentLayout) -> Result<(), StartError> {
    // Nothing this process creates is open to others for a moment: files and sockets get
    // --file-mode explicitly once they exist.
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe { libc::umask(0o077) };
    // A socket another backend serves means that backend's VRAM file is in use too: refuse
    // before touching any file.
    if let Some(path) = &args.socket_path {
        check_socket_free(path)?;
    }
    let vram_path = match &args.vram_path {
        Some(path) => path.clone(),
        None => default_vram_path(args.socket_path.as_deref()),
    };
    let device_only = layout.device_only_vram(args.vram_size);
    let vram = Vram::create_with_device_only_file(
        &vram_path,
        args.vram_size,
        device_only,
        args.device_vram_path.as_deref(),
        args.file_mode,
        BarMode::Ivshmem,
    )?;
    let kept = match (&args.device_vram_path, device_only) {
        (_, 0) => String::new(),
        (Some(path), _) => format!(" in {}", path.display()),
        (None, _) => " (anonymous: zero at every start; --device-vram-path keeps it)".to_owned(),
    };
    info!(
        "VRAM: {} bytes in {} (map it as the BAR of ivshmem-plain at function 1 of the GPU's slot); {} bytes of device-only VRAM{kept}",
        vram.size(),
        vram.path().display(),
        device_only
    );
    for line in LayoutReport::new(&layout, args.vram_size).text().lines() {
        info!("layout: {line}");
    }
    let stats = Arc::new(Stats::new(&layout));
    let trace = match &args.trace {
        Some(path) => {
            let trace = Trace::create(path)
                .map_err(|e| StartError::Trace(path.clone(), e))?
                .with_max_size(args.trace_max_size);
            info!("trace: writing {}", path.display());
            Some(trace)
        }
        None => None,
    };
    let gpu = Gpu::with_telemetry(layout, vram, stats.clone(), trace)
        .map_err(|e| StartError::Daemon(format!("engine thread: {e}")))?;
    let backend = WddmGpuBackend::new(gpu, args.bar_mode);
    let echo = backend.echo_port();
    if args.bench_echo {
        echo.enable();
        info!("the benchmark's eventfd echo is on (--bench-echo)");
    }
    let mut daemon = VhostUserDaemon::new(
        "vhost-user-wddm-gpu".to_string(),
        Arc::new(RwLock::new(backend)),
        GuestMemoryAtomic::new(GuestMemoryMmap::new()),
    )
    .map_err(|e| StartError::Daemon(e.to_string()))?;
    // Echo kicks join the worker that serves the control queue (one worker serves all queues).
    // Held weakly: the worker owns the backend, which owns the echo port and this closure.
    if let Some(worker) = daemon.get_epoll_handlers().first() {
        let worker = Arc::downgrade(worker);
        echo.set_registrar(Box::new(move |fd, add| {
            let worker = worker
                .upgrade()
                .ok_or_else(|| std::io::Error::other("the vring worker has stopped"))?;
            let event = u64::from(ECHO_EVENT);
            let result = if add {
                worker.register_listener(fd, EventSet::IN, event)
            } else {
                worker.unregister_listener(fd, EventSet::IN, event)
            };
            result.map_err(std::io::Error::other)
        }));
    }

    let mut listener = match (&args.socket_path, args.fd) {
        (Some(path), _) => {
            let listener = Listener::new(path, true)
                .map_err(|e| StartError::Daemon(format!("{}: {e}", path.display())))?;
            set_mode(path, args.file_mode)?;
            listener
        }
        (None, Some(fd)) => listening_fd(fd)?,
        (None, None) => return Err(StartError::Daemon("no socket given".to_string())),
    };
    // Started before the daemon blocks waiting for the frontend; stopped (and its socket
    // removed) when this function returns.
    let stats_path = args
        .stats_socket
        .clone()
        .or_else(|| args.socket_path.as_deref().map(stats_server::default_path));
    let _stats_server = match stats_path {
        Some(path) => {
            let server = stats_server::start(&path, stats, echo)
                .map_err(|e| StartError::StatsSocket(path.clone(), e))?;
            set_mode(&path, args.file_mode)?;
            Some(server)
        }
        None => None,
    };
    info!("waiting for the frontend");
    daemon
        .start(&mut listener)
        .map_err(|e| StartError::Daemon(e.to_string()))?;
    match daemon.wait() {
        // A frontend hanging up is the normal end of a session, as the crate's own serve() has it.
        Ok(())
        | Err(vhost_user_backend::Error::HandleRequest(
            VhostUserError::Disconnected | VhostUserError::PartialMessage,
        )) => {
            info!("frontend disconnected; exiting");
            Ok(())
        }
        Err(error) => Err(StartError::Daemon(error.to_string())),
    }
}

/// The VRAM file a backend uses when not told: one per socket, so two backends started with
/// defaults never share (or resize) each other's VRAM.
fn default_vram_path(socket: Option<&Path>) -> PathBuf {
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

/// Gives a socket the --file-mode (it was created under the owner-only umask).
fn set_mode(path: &Path, mode: u32) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        StartError::Daemon(format!("{}: cannot set mode {mode:o}: {e}", path.display()))
    })
}

/// Refuses a socket path another process is listening on; a stale socket file is replaced.
fn check_socket_free(path: &Path) -> Result<(), StartError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if !meta.file_type().is_socket() => Err(StartError::NotASocket(path.to_owned())),
        Ok(_) if UnixStream::connect(path).is_ok() => Err(StartError::SocketInUse(path.to_owned())),
        Ok(_) => Ok(()),
    }
}

/// `--fd`: a listening socket is used as is; a connected one (libvirt's socketpair) is bridged.
fn listening_fd(fd: i32) -> Result<Listener, StartError> {
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `accepting`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut accepting as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(StartError::BadFd(fd));
    }
    if accepting != 0 {
        // SAFETY: the fd is a listening socket handed to this process, owned by the listener now.
        return Ok(unsafe { Listener::from_raw_fd(fd) });
    }
    // SAFETY: the fd is a socket handed to this process (getsockopt accepted it); the stream
    // owns it from here on.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    info!("--fd {fd} is a connected socket: serving it through a relay");
    fd_relay::bridge(stream).map_err(|e| StartError::Daemon(format!("--fd {fd}: {e}")))
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
    let companion = stats_server::default_path(socket);
    if std::fs::symlink_metadata(&companion).is_ok() {
        companion
    } else {
        socket.to_owned()
    }
}

fn stats_command(socket: &Path, request: &str, watch: Option<Duration>) -> ExitCode {
    let path = stats_socket_for(socket);
    let clear = watch.is_some() && request == "table" && std::io::stdout().is_terminal();
    let mut separator = "";
    loop {
        let answer = match stats_server::query(&path, request) {
            Ok(answer) => answer,
            Err(error) => {
                let at = path.display();
                match error.kind() {
                    ErrorKind::NotFound | ErrorKind::ConnectionRefused => eprintln!(
                        "vhost-user-wddm-gpu: error: no stats endpoint at {at}: {error} \
                         (is the backend running? it serves --stats-socket, by default its \
                         --socket-path with .stats appended)"
                    ),
                    _ => eprintln!("vhost-user-wddm-gpu: error: stats endpoint {at}: {error}"),
                }
                return ExitCode::from(EXIT_INVALID);
            }
        };
        let mut stdout = std::io::stdout().lock();
        let written = if clear {
            // Home and clear the screen so the table stays in place.
            write!(stdout, "\x1b[H\x1b[2J{answer}")
        } else {
            write!(stdout, "{separator}{answer}")
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            // A closed pipe (e.g. `| head`): nothing more to show.
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        let Some(interval) = watch else {
            return ExitCode::SUCCESS;
        };
        std::thread::sleep(interval);
        separator = "\n";
    }
}
