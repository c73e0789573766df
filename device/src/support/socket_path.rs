//! Claiming a path for a listening socket: a path another process still serves, or a file that is
//! not a socket, is refused; a socket file nobody serves (a stale one) may be replaced.
//!
//! The vhost-user socket is claimed through an [`InstanceLock`]: a lock file beside it, held
//! (`flock`) for the backend's life. A second backend learns from the lock that the socket is
//! served without connecting to it, since a connection to a backend waiting for its frontend is
//! a client it must look at. Only a socket no backend's lock covers is probed by connecting
//! (a foreign listener, or a backend of a version without the lock).

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Why a socket path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketPathError {
    #[error("{} exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    #[error("{} is in use by a running process", .0.display())]
    InUse(PathBuf),
    #[error("{} is served by another backend{} (its lock {} is held)", .socket.display(), .pid.map(|pid| format!(", pid {pid}")).unwrap_or_default(), .lock.display())]
    Locked {
        socket: PathBuf,
        lock: PathBuf,
        pid: Option<u32>,
    },
    #[error("the directory of {} does not exist", .0.display())]
    NoDirectory(PathBuf),
    #[error("{}: {}", .0.display(), .1)]
    Io(PathBuf, io::Error),
}

/// What is at a path that may be bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreePath {
    /// Nothing.
    Absent,
    /// A socket file no process listens on.
    Stale,
}

/// Checks that `path` may be bound, touching nothing.
pub fn check_free(path: &Path) -> Result<FreePath, SocketPathError> {
    match fs::symlink_metadata(path) {
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(FreePath::Absent),
        Err(error) => Err(SocketPathError::Io(path.to_owned(), error)),
        Ok(meta) if !meta.file_type().is_socket() => {
            Err(SocketPathError::NotASocket(path.to_owned()))
        }
        Ok(_) if UnixStream::connect(path).is_ok() => Err(SocketPathError::InUse(path.to_owned())),
        Ok(_) => Ok(FreePath::Stale),
    }
}

/// Checks `path` as [`check_free`] does and removes a stale socket file, so it can be bound.
pub fn claim(path: &Path) -> Result<(), SocketPathError> {
    if check_free(path)? == FreePath::Stale {
        fs::remove_file(path).map_err(|error| SocketPathError::Io(path.to_owned(), error))?;
    }
    Ok(())
}

impl From<SocketPathError> for io::Error {
    fn from(error: SocketPathError) -> Self {
        let kind = match &error {
            SocketPathError::NotASocket(_) => ErrorKind::AlreadyExists,
            SocketPathError::InUse(_) | SocketPathError::Locked { .. } => ErrorKind::AddrInUse,
            SocketPathError::NoDirectory(_) => ErrorKind::NotFound,
            SocketPathError::Io(_, inner) => inner.kind(),
        };
        io::Error::new(kind, error.to_string())
    }
}

/// The lock file that says a backend serves `socket`: the socket's path with `.lock` appended.
pub fn lock_path(socket: &Path) -> PathBuf {
    let mut path = socket.as_os_str().to_owned();
    path.push(".lock");
    PathBuf::from(path)
}

/// The directory a file at `path` is made in: its parent, or `.` for a bare name.
pub fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Checks, touching nothing, that a backend may serve `socket`: its directory exists, no
/// backend holds its lock, and nothing else listens on it.
pub fn check_instance(socket: &Path) -> Result<FreePath, SocketPathError> {
    if !directory_of(socket).is_dir() {
        return Err(SocketPathError::NoDirectory(socket.to_owned()));
    }
    let lock = lock_path(socket);
    match OpenOptions::new().read(true).open(&lock) {
        Ok(file) => {
            if !try_lock(&file).map_err(|error| SocketPathError::Io(lock.clone(), error))? {
                return Err(locked(socket, &lock, &file));
            }
            // Released at once (dropping the file): this only looked.
        }
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(SocketPathError::Io(lock, error)),
    }
    check_free(socket)
}

/// Holds the lock that says this backend serves a socket; dropping it removes the lock file.
#[derive(Debug)]
pub struct InstanceLock {
    path: PathBuf,
    file: File,
}

impl InstanceLock {
    /// Takes the lock of `socket` (creating its lock file with `mode`), writes this process's
    /// id into it, and removes a stale socket file, so the socket can be bound. Refused when
    /// another backend holds the lock or another process listens on the socket.
    pub fn take(socket: &Path, mode: u32) -> Result<Self, SocketPathError> {
        let path = lock_path(socket);
        let io_error = |error| SocketPathError::Io(path.clone(), error);
        // A backend that ends unlinks its lock file while holding it: a file locked after it
        // was unlinked locks nothing, so the lock counts only while the path still names it.
        let file = loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(mode)
                .open(&path)
                .map_err(io_error)?;
            if !try_lock(&file).map_err(io_error)? {
                return Err(locked(socket, &path, &file));
            }
            let held = file.metadata().map_err(io_error)?;
            match fs::metadata(&path) {
                Ok(named) if named.ino() == held.ino() && named.dev() == held.dev() => break file,
                Ok(_) => continue,
                Err(error) if error.kind() == ErrorKind::NotFound => continue,
                Err(error) => return Err(io_error(error)),
            }
        };
        let lock = Self { path, file };
        lock.file
            .set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|error| SocketPathError::Io(lock.path.clone(), error))?;
        let mut file = &lock.file;
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|error| SocketPathError::Io(lock.path.clone(), error))?;
        claim(socket)?;
        Ok(lock)
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // Unlinked while still held: a backend starting now either finds no file or one it
        // sees unlinked after locking it (see `take`).
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether another process holds the `flock` of the file at `path` (a backend's VRAM file or
/// lock file); false when the file cannot be opened.
pub fn held_by_another(path: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .open(path)
        .is_ok_and(|file| try_lock(&file).is_ok_and(|taken| !taken))
}

/// `flock(LOCK_EX | LOCK_NB)`: true when taken, false when another open file holds it.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor `file` owns; it only takes or refuses the lock.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(error),
    }
}

/// The refusal for a socket whose lock another backend holds, with that backend's pid when
/// its lock file says it.
fn locked(socket: &Path, lock: &Path, mut file: &File) -> SocketPathError {
    let mut text = String::new();
    let pid = file
        .read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse().ok());
    SocketPathError::Locked {
        socket: socket.to_owned(),
        lock: lock.to_owned(),
        pid,
    }
}
