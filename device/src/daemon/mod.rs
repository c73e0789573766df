//! The backend process: one configuration and one start function. `main.rs` parses the command
//! line into a [`Config`]; [`run`] checks everything ([`preflight`]), creates the VRAM and the
//! GPU, opens the endpoints and serves one frontend session ([`session`]) until it ends or a
//! signal stops it ([`stop`]).

mod config;
mod error;
mod preflight;
mod session;
mod stop;

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use log::info;
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

pub use self::config::Config;
pub use self::error::StartError;
use crate::daemon::session::Socket;
use crate::daemon::stop::Stop;
use crate::layout::file::parse_layout;
use crate::layout::report::LayoutReport;
use crate::layout::rules::validate;
use crate::layout::SegmentLayout;
use crate::memory::vram::{BarMode, Vram};
use crate::model::gpu::Gpu;
use crate::observe::echo::{EchoPort, ECHO_EVENT};
use crate::observe::endpoint;
use crate::observe::recording::format::Header;
use crate::observe::recording::Recorder;
use crate::observe::stats::Stats;
use crate::observe::trace::Trace;
use crate::support::socket_path::InstanceLock;
use crate::transport::backend::{BarModeRequest, WddmGpuBackend};
use crate::transport::fd_relay;

/// Reads and validates a layout (or builds the default); errors come back one line each.
pub fn load_layout(path: Option<&Path>, vram_size: u64) -> Result<SegmentLayout, Vec<String>> {
    load_layout_with_text(path, vram_size).map(|(layout, _)| layout)
}

/// [`load_layout`], and the text of the layout file it read (`None` for the default layout),
/// which a recording keeps so a replay rebuilds the same layout.
pub fn load_layout_with_text(
    path: Option<&Path>,
    vram_size: u64,
) -> Result<(SegmentLayout, Option<String>), Vec<String>> {
    if !vram_size.is_power_of_two() {
        return Err(vec![format!(
            "--vram-size {vram_size:#x} must be a power of two (QEMU requires power-of-two BARs)"
        )]);
    }
    let Some(path) = path else {
        return Ok((SegmentLayout::default_for_vram(vram_size), None));
    };
    let at = path.display();
    let text = std::fs::read_to_string(path).map_err(|error| vec![format!("{at}: {error}")])?;
    let spec = parse_layout(&text).map_err(|error| vec![format!("{at}: {error}")])?;
    let layout = validate(&spec, vram_size).map_err(|violations| {
        violations
            .iter()
            .map(|violation| format!("{at}: {violation}"))
            .collect::<Vec<_>>()
    })?;
    Ok((layout, Some(text)))
}

/// Serves one frontend session with `layout`: checks everything the start needs, creates the
/// VRAM, the GPU and its endpoints, waits for the frontend on the socket, and returns when it
/// hangs up or a signal stops the backend. A start that fails leaves no file behind.
pub fn run(args: &Config, layout: SegmentLayout) -> Result<(), StartError> {
    // Nothing this process creates is open to others for a moment: files and sockets get
    // --file-mode explicitly once they exist.
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe { libc::umask(0o077) };
    let device_only = layout.device_only_vram(args.vram_size);
    let checked = preflight::check(args, device_only)?;
    let stop = Stop::new().map_err(StartError::Signals)?;
    stop.on_signals().map_err(StartError::Signals)?;
    // Dropped last: removes what a failed start made, and at exit the VRAM file whose name the
    // backend chose.
    let mut made = Made::default();
    let _instance = match &args.socket_path {
        Some(path) => Some(InstanceLock::take(path, args.file_mode)?),
        None => None,
    };
    let vram_path = &checked.vram_path;
    if checked.replace_stale {
        match std::fs::remove_file(vram_path) {
            Ok(()) => info!(
                "removed {} (left by a backend that ended without removing it)",
                vram_path.display()
            ),
            Err(error) => log::warn!("cannot remove {}: {error}", vram_path.display()),
        }
    }
    made.note(vram_path);
    if let Some(path) = args.device_vram_path.as_ref().filter(|_| device_only > 0) {
        made.note(path);
    }
    let vram = Vram::create_with_device_only_file(
        vram_path,
        args.vram_size,
        device_only,
        args.device_vram_path.as_deref(),
        args.file_mode,
        BarMode::Ivshmem,
    )?;
    if checked.vram_named_by_backend {
        // Only now: the file is this backend's (its lock is held), not another's in use.
        made.remove_at_exit(vram_path);
    }
    let kept = match (&args.device_vram_path, device_only) {
        (_, 0) => String::new(),
        (Some(path), _) => format!(" in {}", path.display()),
        (None, _) => " (anonymous: zero at every start; --device-vram-path keeps it)".to_owned(),
    };
    let how_mapped = match args.bar_mode {
        BarModeRequest::Auto => "the GPU's shared-memory BAR if the frontend asks for one, else map it as the BAR of ivshmem-plain at function 1 of the GPU's slot",
        BarModeRequest::Ivshmem => "map it as the BAR of ivshmem-plain at function 1 of the GPU's slot",
        BarModeRequest::Shmem => "the GPU's shared-memory BAR, mapped at every device start",
    };
    info!(
        "VRAM: {} bytes in {} ({how_mapped}); {} bytes of device-only VRAM{kept}{}",
        vram.size(),
        vram.path().display(),
        device_only,
        if checked.vram_named_by_backend {
            "; the backend named the VRAM file: removed at exit (--vram-path keeps one)"
        } else {
            ""
        },
    );
    for line in LayoutReport::new(&layout, args.vram_size).text().lines() {
        info!("layout: {line}");
    }
    if let Some(link) = &layout.link {
        info!("link model: {link}");
    }
    let stats = Arc::new(Stats::new(&layout));
    let trace = match &args.trace {
        Some(path) => {
            made.note(path);
            let trace = Trace::create(path)
                .map_err(|e| StartError::Trace(path.clone(), e))?
                .with_max_size(args.trace_max_size);
            info!("trace: writing {}", path.display());
            Some(trace)
        }
        None => None,
    };
    let recorder = match &args.record {
        Some(path) => {
            let header = Header {
                data: args.record_data,
                vram_size: args.vram_size,
                layout: args.layout_text.clone(),
            };
            made.note(path);
            let recorder =
                Recorder::create(path, &header).map_err(|e| StartError::Record(path.clone(), e))?;
            info!(
                "record: writing every submission of both nodes to {}{}",
                path.display(),
                if args.record_data {
                    ", with the bytes copies read"
                } else {
                    ""
                }
            );
            Some(recorder)
        }
        None => None,
    };
    let gpu = Gpu::with_telemetry(layout, vram, stats.clone(), trace, recorder, args.display)
        .map_err(|e| StartError::Daemon(format!("engine thread: {e}")))?;
    if let (Some(path), Some(plan)) = (&args.inject_plan, &checked.plan) {
        let armed = gpu
            .injector()
            .arm_plan(plan)
            .map_err(|error| StartError::InjectPlan(path.clone(), error.to_string()))?;
        info!(
            "injection plan {}: {} injection(s) armed",
            path.display(),
            armed.len()
        );
    }
    if args.check {
        gpu.enable_checker();
    }
    let control = Arc::new(gpu.control());
    let backend = WddmGpuBackend::new(gpu, args.bar_mode);
    let echo = backend.echo_port();
    let spoke = backend.spoke();
    let mut daemon = VhostUserDaemon::new(
        "vhost-user-wddm-gpu".to_string(),
        Arc::new(RwLock::new(backend)),
        GuestMemoryAtomic::new(GuestMemoryMmap::new()),
    )
    .map_err(|e| StartError::Daemon(e.to_string()))?;
    if args.bench_echo {
        enable_bench_echo(&daemon, &echo);
    }

    let mut socket = match (&args.socket_path, args.fd) {
        (Some(path), _) => {
            let listener = Listener::new(path, true)
                .map_err(|e| StartError::Daemon(format!("{}: {e}", path.display())))?;
            set_mode(path, args.file_mode)?;
            Socket {
                listener,
                single: false,
            }
        }
        (None, Some(fd)) => listening_fd(fd)?,
        (None, None) => return Err(StartError::Daemon("no socket given".to_string())),
    };
    // Started before the daemon waits for the frontend; stopped (and their sockets removed)
    // when this function returns.
    let mut endpoints = Vec::new();
    for (option, path) in preflight::endpoint_paths(args) {
        let server = match option {
            "--ctl-socket" => endpoint::start_control(&path, control.clone())
                .map_err(|e| StartError::ControlSocket(path.clone(), e))?,
            _ => endpoint::start(&path, args.file_mode, stats.clone(), echo.clone())
                .map_err(|e| StartError::StatsSocket(path.clone(), e))?,
        };
        endpoints.push(server);
    }
    made.started();
    info!("waiting for the frontend");
    let ended = session::serve(&mut daemon, &mut socket, &spoke, &stop);
    if let Some(path) = &args.record {
        write_live_stats(path, &stats);
    }
    ended.map(|_| ())
}

/// What a start made: removed when the start fails before it serves; at exit, whatever the
/// start did, the files whose names the backend chose.
#[derive(Default)]
struct Made {
    /// Files that did not exist before the start.
    new: Vec<PathBuf>,
    /// Files named by the backend, removed at exit.
    at_exit: Vec<PathBuf>,
    started: bool,
}

impl Made {
    /// Notes `path` before the start may create it: a file that is not there yet is new.
    fn note(&mut self, path: &Path) {
        if std::fs::symlink_metadata(path).is_err() {
            self.new.push(path.to_owned());
        }
    }

    /// `path`, named by the backend and held by it, goes when the backend does.
    fn remove_at_exit(&mut self, path: &Path) {
        self.at_exit.push(path.to_owned());
    }

    /// The start is complete: what it made stays until exit.
    fn started(&mut self) {
        self.started = true;
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let failed = (!self.started).then_some(&self.new);
        for path in self.at_exit.iter().chain(failed.into_iter().flatten()) {
            match std::fs::remove_file(path) {
                Ok(()) => info!("removed {}", path.display()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => log::warn!("cannot remove {}: {error}", path.display()),
            }
        }
    }
}

/// Beside a `--record` file, the session's statistics as `stats --json` prints them
/// (`FILE.stats.json`), so a replay's counts can be compared with the live ones.
fn write_live_stats(record: &Path, stats: &Stats) {
    let mut path = record.as_os_str().to_owned();
    path.push(".stats.json");
    let written = serde_json::to_string_pretty(&stats.snapshot())
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(&path, text + "\n"));
    match written {
        Ok(()) => info!(
            "record: the session's statistics in {}",
            Path::new(&path).display()
        ),
        Err(error) => log::warn!("record: {}: {error}", Path::new(&path).display()),
    }
}

/// Gives a socket the --file-mode (it was created under the owner-only umask).
fn set_mode(path: &Path, mode: u32) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        StartError::Daemon(format!("{}: cannot set mode {mode:o}: {e}", path.display()))
    })
}

/// `--fd`: a listening socket is used as is; a connected one (libvirt's socketpair) is bridged.
fn listening_fd(fd: i32) -> Result<Socket, StartError> {
    let accepting = preflight::socket_accepts(fd)?;
    if accepting {
        // SAFETY: the fd is a listening socket handed to this process, owned by the listener now.
        let listener = unsafe { Listener::from_raw_fd(fd) };
        return Ok(Socket {
            listener,
            single: false,
        });
    }
    // SAFETY: the fd is a socket handed to this process (getsockopt accepted it); the stream
    // owns it from here on.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    info!("--fd {fd} is a connected socket: serving it through a relay");
    let listener =
        fd_relay::bridge(stream).map_err(|e| StartError::Daemon(format!("--fd {fd}: {e}")))?;
    Ok(Socket {
        listener,
        single: true,
    })
}

/// `--bench-echo`: echo kicks join the worker that serves the control queue (one worker serves
/// all queues), so the benchmark measures the same wake-up path a guest request takes. Held
/// weakly: the worker owns the backend, which owns the echo port and this closure.
fn enable_bench_echo(daemon: &VhostUserDaemon<Arc<RwLock<WddmGpuBackend>>>, echo: &EchoPort) {
    echo.enable();
    info!("the benchmark's eventfd echo is on (--bench-echo)");
    let Some(worker) = daemon.get_epoll_handlers().first().map(Arc::downgrade) else {
        return;
    };
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
