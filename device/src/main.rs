//! `vhost-user-wddm-gpu`: the backend process QEMU's `vhost-user-gpu-pci` connects to.

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};

use clap::Parser;
use log::info;
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vhost_user_wddm_gpu::device::WddmGpuBackend;
use vhost_user_wddm_gpu::gpu::Gpu;
use vhost_user_wddm_gpu::layout::SegmentLayout;
use vhost_user_wddm_gpu::size::parse_size;
use vhost_user_wddm_gpu::vram::{BarMode, Vram};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

/// Default VRAM size: 256 MiB.
const DEFAULT_VRAM_SIZE: u64 = 256 << 20;

/// A virtual GPU for WDDM kernel-mode driver bring-up, served to QEMU over vhost-user.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Listen for the frontend on this Unix socket path.
    #[arg(long, conflicts_with = "fd", required_unless_present_any = ["fd", "print_capabilities"])]
    socket_path: Option<PathBuf>,
    /// Use this already-open listening socket instead of --socket-path.
    #[arg(long)]
    fd: Option<i32>,
    /// Print the backend's capabilities as JSON (QEMU's vhost-user convention) and exit.
    #[arg(long)]
    print_capabilities: bool,
    /// The VRAM file, created if missing; QEMU maps the same file for the VRAM BAR.
    #[arg(long, default_value = "/dev/shm/vhost-user-wddm-gpu.vram")]
    vram_path: PathBuf,
    /// VRAM size: a power of two (QEMU requires power-of-two BARs), e.g. 256MiB or 0x10000000.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    vram_size: u64,
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
    #[error("--fd {0} is not a listening Unix socket (connected sockets are not supported: the vhost-user-backend crate can only accept)")]
    BadFd(i32),
    #[error("vhost-user daemon: {0}")]
    Daemon(String),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    if cli.print_capabilities {
        println!("{{\n  \"type\": \"gpu\",\n  \"features\": []\n}}");
        return ExitCode::SUCCESS;
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> Result<(), StartError> {
    debug_assert_eq!(DEFAULT_VRAM_SIZE, parse_size("256MiB").unwrap_or(0));
    let vram = Vram::create(&cli.vram_path, cli.vram_size, 0, BarMode::Ivshmem)?;
    info!(
        "VRAM: {} bytes in {} (map it as the BAR of ivshmem-plain at function 1 of the GPU's slot)",
        vram.size(),
        vram.path().display()
    );
    let layout = SegmentLayout::default_for_vram(vram.size());
    let backend = Arc::new(RwLock::new(WddmGpuBackend::new(Gpu::new(layout, vram))));
    let mut daemon = VhostUserDaemon::new(
        "vhost-user-wddm-gpu".to_string(),
        backend,
        GuestMemoryAtomic::new(GuestMemoryMmap::new()),
    )
    .map_err(|e| StartError::Daemon(e.to_string()))?;

    let mut listener = match (&cli.socket_path, cli.fd) {
        (Some(path), _) => {
            check_socket_free(path)?;
            Listener::new(path, true)
                .map_err(|e| StartError::Daemon(format!("{}: {e}", path.display())))?
        }
        (None, Some(fd)) => listening_fd(fd)?,
        (None, None) => unreachable!("clap requires --socket-path or --fd"),
    };
    info!("waiting for the frontend");
    daemon
        .start(&mut listener)
        .map_err(|e| StartError::Daemon(e.to_string()))?;
    daemon
        .wait()
        .map_err(|e| StartError::Daemon(e.to_string()))?;
    info!("frontend disconnected; exiting");
    Ok(())
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
    if rc != 0 || accepting == 0 {
        return Err(StartError::BadFd(fd));
    }
    // SAFETY: the fd is a listening socket handed to this process, owned by the listener now.
    Ok(unsafe { Listener::from_raw_fd(fd) })
}
