//! Claiming a path for a listening socket: a path another process still serves, or a file that is
//! not a socket, is refused; a socket file nobody serves (a stale one) may be replaced.

use std::fs;
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Why a socket path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketPathError {
    #[error("{} exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    #[error("{} is in use by a running process", .0.display())]
    InUse(PathBuf),
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
            SocketPathError::InUse(_) => ErrorKind::AddrInUse,
            SocketPathError::Io(_, inner) => inner.kind(),
        };
        io::Error::new(kind, error.to_string())
    }
}
