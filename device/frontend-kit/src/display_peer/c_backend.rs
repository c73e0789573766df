//! QEMU's C `vhost-user-gpu` (QEMU's `contrib/vhost-user-gpu`, Debian package
//! `qemu-system-gui`) as a backend for the same frontend harness: the same vhost-user
//! sequence, guest RAM, control queue and requests as for ours, so the two compare directly.
//!
//! Without `--virgl` and without a DRM render node it is a plain 2D device: resources live in
//! its own memory and every RESOURCE_FLUSH of a scanout sends the pixels to the display as a
//! VHOST_USER_GPU_UPDATE. It has no VRAM file: the harness maps a one-page memfd in its place
//! and never announces it.

use std::fs::File;
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use vhost::vhost_user::message::VhostUserHeaderFlag;

use crate::backend_process::{BackendProcess, Deadline, INSTANCE, TIMEOUT};
use crate::guest_memory::map_file;
use crate::harness::{Harness, PAGE};

/// Where Debian's `qemu-system-gui` installs it.
pub const C_VHOST_USER_GPU: &str = "/usr/lib/qemu/vhost-user-gpu";

/// Whether the C backend logs every command (glib's debug messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlibDebug {
    Off,
    /// `G_MESSAGES_DEBUG=all`: each command and queue start in its log (slow: not for
    /// measuring).
    All,
}

impl BackendProcess {
    /// Starts `program` (QEMU's C vhost-user-gpu or a compatible one) with `--socket-path` and
    /// waits until its socket exists. Its stderr is the log.
    pub fn spawn_c_backend(name: &str, program: &Path, debug: GlibDebug) -> Self {
        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{instance}-{name}", std::process::id());
        let dir = std::env::temp_dir().join(format!("wddm-frontend-{unique}"));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("backend.sock");
        let log = dir.join("backend.log");
        let mut command = Command::new(program);
        if debug == GlibDebug::All {
            command.env("G_MESSAGES_DEBUG", "all");
        }
        // glib writes debug messages to stdout, warnings to stderr: both go to the log.
        let log_file = File::create(&log).unwrap();
        let child = command
            .arg("--socket-path")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", program.display()));
        let mut process = Self {
            child: Some(child),
            // No VRAM file: the path only names where one is not (Drop removes nothing).
            vram_path: dir.join("no-vram"),
            dir,
            socket,
            vram_size: 0,
            log,
            paired: std::sync::Mutex::new(None),
        };
        let deadline = Deadline::after(TIMEOUT);
        while !process.socket.exists() {
            if let Some(status) = process.try_wait() {
                panic!(
                    "{} exited ({status}) before listening:\n{}",
                    program.display(),
                    process.log()
                );
            }
            deadline.wait_or_panic(|| {
                format!(
                    "{} never created {}:\n{}",
                    program.display(),
                    process.socket.display(),
                    process.log()
                )
            });
        }
        process
    }
}

impl Harness {
    /// Starts the C backend and connects, with `ram_size` bytes of guest RAM at GPA 0 and no
    /// VRAM; nothing negotiated yet (as [`Harness::spawn`]).
    pub fn spawn_c_backend(name: &str, program: &Path, ram_size: u64, debug: GlibDebug) -> Self {
        let backend = BackendProcess::spawn_c_backend(name, program, debug);
        let frontend = backend.connect();
        frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        let ram = map_file(memfd("wddm-guest-ram", ram_size), ram_size);
        // A stand-in for the VRAM mapping the harness keeps; never in the memory table.
        let vram = map_file(memfd("wddm-no-vram", PAGE), PAGE);
        Self::from_parts(frontend, backend, (ram, ram_size), (vram, PAGE))
    }
}

/// The path of the C backend if it is installed.
pub fn installed_c_backend() -> Option<PathBuf> {
    let path = PathBuf::from(C_VHOST_USER_GPU);
    path.exists().then_some(path)
}

/// A new memfd of `size` bytes.
fn memfd(name: &str, size: u64) -> File {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a freshly created descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).unwrap();
    file
}
