//! Everything a start needs, checked before the start creates anything: the sockets' and files'
//! directories, another backend on the socket, the `--fd`, the VRAM files' sizes against their
//! filesystems' free space and `--file-mode` against their owners, the injection plan. A start
//! refused here leaves no file behind.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use wddm_gpu_abi::size_of_u32;

use crate::daemon::config::{default_vram_path, Config};
use crate::daemon::error::StartError;
use crate::gpu::inject::check_plan;
use crate::observe::endpoint;
use crate::support::size::human_size;
use crate::support::socket_path::{self, directory_of};

/// What the checks learnt, for the start that follows.
#[derive(Debug)]
pub struct Checked {
    /// The VRAM file to use.
    pub vram_path: PathBuf,
    /// The backend chose the VRAM file's name (no `--vram-path`): removed at exit.
    pub vram_named_by_backend: bool,
    /// That file is there, left by a backend that did not remove it: replaced.
    pub replace_stale: bool,
    /// The injection plan's text, checked.
    pub plan: Option<String>,
}

/// Checks `config` for a start whose layout has `device_only` bytes of device-only VRAM.
pub fn check(config: &Config, device_only: u64) -> Result<Checked, StartError> {
    if let Some(socket) = &config.socket_path {
        socket_path::check_instance(socket)?;
    }
    if let Some(fd) = config.fd {
        check_fd(fd)?;
    }
    let (vram_path, vram_named_by_backend) = match &config.vram_path {
        Some(path) => (path.clone(), false),
        None => (default_vram_path(config.socket_path.as_deref()), true),
    };
    // A file the backend names is its own: one left by a backend that was killed (nobody
    // holds it) is replaced, whatever its size, rather than refused.
    let replace_stale = vram_named_by_backend
        && std::fs::symlink_metadata(&vram_path).is_ok()
        && !socket_path::held_by_another(&vram_path);
    if !replace_stale {
        check_vram_file(
            "--vram-path",
            &vram_path,
            config.vram_size,
            config.file_mode,
        )?;
    }
    if let (Some(path), 1..) = (&config.device_vram_path, device_only) {
        check_vram_file("--device-vram-path", path, device_only, config.file_mode)?;
    }
    for (option, path) in [("--trace", &config.trace), ("--record", &config.record)] {
        if let Some(path) = path {
            check_output_file(option, path)?;
        }
    }
    for (option, path) in endpoint_paths(config) {
        check_directory(option, &path)?;
        socket_path::check_free(&path).map_err(|source| StartError::Endpoint { option, source })?;
    }
    let plan = match &config.inject_plan {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| StartError::InjectPlan(path.clone(), error.to_string()))?;
            check_plan(&text)
                .map_err(|error| StartError::InjectPlan(path.clone(), error.to_string()))?;
            Some(text)
        }
        None => None,
    };
    Ok(Checked {
        vram_path,
        vram_named_by_backend,
        replace_stale,
        plan,
    })
}

/// The stats and control sockets this start serves (option name, path): as given, or beside
/// the `--socket-path`.
pub fn endpoint_paths(config: &Config) -> Vec<(&'static str, PathBuf)> {
    let beside = |default: fn(&Path) -> PathBuf| config.socket_path.as_deref().map(default);
    [
        (
            "--stats-socket",
            config
                .stats_socket
                .clone()
                .or_else(|| beside(endpoint::default_path)),
        ),
        (
            "--ctl-socket",
            config
                .control_socket
                .clone()
                .or_else(|| beside(endpoint::default_control_path)),
        ),
    ]
    .into_iter()
    .filter_map(|(option, path)| path.map(|path| (option, path)))
    .collect()
}

/// `--fd`: a socket this process holds.
fn check_fd(fd: i32) -> Result<(), StartError> {
    socket_accepts(fd).map(drop)
}

/// Whether the socket `fd` listens (accepts connections) or is connected; refused when `fd` is
/// not an open socket.
pub fn socket_accepts(fd: i32) -> Result<bool, StartError> {
    let mut accepting: libc::c_int = 0;
    let mut len: libc::socklen_t = size_of_u32::<libc::c_int>();
    // SAFETY: getsockopt writes at most `len` bytes into `accepting`, which outlives the call;
    // on a descriptor that is not an open socket it only fails.
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
    Ok(accepting != 0)
}

/// The directory a file of `option` goes in exists.
fn check_directory(option: &'static str, path: &Path) -> Result<(), StartError> {
    let directory = directory_of(path);
    if directory.is_dir() {
        Ok(())
    } else {
        Err(StartError::Path {
            option,
            path: path.to_owned(),
            why: format!("the directory {} does not exist", directory.display()),
        })
    }
}

/// A file the backend writes anew (`--trace`, `--record`): its directory exists and this user
/// may write there, and the path is not a directory.
fn check_output_file(option: &'static str, path: &Path) -> Result<(), StartError> {
    check_directory(option, path)?;
    if path.is_dir() {
        return Err(StartError::Path {
            option,
            path: path.to_owned(),
            why: "is a directory".into(),
        });
    }
    let writable = match std::fs::symlink_metadata(path) {
        Ok(_) => access_writable(path),
        Err(_) => access_writable(directory_of(path)),
    };
    if writable {
        Ok(())
    } else {
        Err(StartError::Path {
            option,
            path: path.to_owned(),
            why: "this user may not write it".into(),
        })
    }
}

fn access_writable(path: &Path) -> bool {
    let Ok(path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads the NUL-terminated path, which outlives the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

/// A VRAM file of `size` bytes at `path` (made or reused): its directory exists; an existing
/// file is a regular file of that size whose mode this user may set to `mode`; and what the
/// file still needs fits in its filesystem's free space.
fn check_vram_file(
    option: &'static str,
    path: &Path,
    size: u64,
    mode: u32,
) -> Result<(), StartError> {
    check_directory(option, path)?;
    let refuse = |why: String| StartError::Path {
        option,
        path: path.to_owned(),
        why,
    };
    let allocated = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(refuse("is not a regular file".into())),
        Ok(meta) if meta.len() != 0 && meta.len() != size => {
            return Err(refuse(format!(
                "holds {:#x} bytes, not the {size:#x} asked for: give the matching size, or \
                 remove the file to start anew",
                meta.len()
            )))
        }
        Ok(meta) => {
            // SAFETY: geteuid has no arguments and cannot fail.
            let me = unsafe { libc::geteuid() };
            if meta.mode() & 0o777 != mode && meta.uid() != me && me != 0 {
                return Err(refuse(format!(
                    "--file-mode {mode:04o} cannot be applied: the file is owned by uid {}, \
                     not this user (uid {me})",
                    meta.uid()
                )));
            }
            meta.blocks().saturating_mul(512)
        }
        Err(_) => 0,
    };
    let needed = size.saturating_sub(allocated);
    let directory = directory_of(path);
    match free_space(directory) {
        Some(free) if needed > free => Err(refuse(format!(
            "{} of VRAM ({size:#x} bytes) does not fit: the filesystem of {} has {} free \
             ({free:#x} bytes)",
            human_size(size),
            directory.display(),
            human_size(free)
        ))),
        _ => Ok(()),
    }
}

/// Bytes an unprivileged user may still allocate in the filesystem of `directory` (`None`
/// where the filesystem does not say).
fn free_space(directory: &Path) -> Option<u64> {
    let path = CString::new(directory.as_os_str().as_bytes()).ok()?;
    // SAFETY: all-zero is a valid statvfs (plain integers), filled by the call below.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads the NUL-terminated path and writes `stats`, both outliving the call.
    // A filesystem reporting no blocks at all (procfs, sysfs) has no free space to compare
    // with: creating the file there fails on its own, with the OS's reason.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 || stats.f_blocks == 0 {
        return None;
    }
    stats.f_bavail.checked_mul(stats.f_frsize)
}
