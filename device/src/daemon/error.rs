//! Why a start is refused, or serving ends in error.

use std::path::PathBuf;

use crate::memory::vram::VramError;
use crate::support::socket_path::SocketPathError;

/// Errors that end the program before or while serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{option} {}: {why}", .path.display())]
    Path {
        option: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("waiting for the frontend: {0}")]
    Wait(#[from] std::io::Error),
    #[error(transparent)]
    Vram(#[from] VramError),
    #[error("--socket-path: {0}")]
    Socket(#[from] SocketPathError),
    #[error("{option}: {source}")]
    Endpoint {
        option: &'static str,
        source: SocketPathError,
    },
    #[error("--fd {0} is not a Unix socket")]
    BadFd(i32),
    #[error("vhost-user daemon: {0}")]
    Daemon(String),
    #[error("--trace {0}: {1}")]
    Trace(PathBuf, std::io::Error),
    #[error("--inject-plan {0}: {1}")]
    InjectPlan(PathBuf, String),
    #[error("control socket {0}: {1}")]
    ControlSocket(PathBuf, std::io::Error),
    #[error("--record {0}: {1}")]
    Record(PathBuf, std::io::Error),
    #[error("stats socket {0}: {1}")]
    StatsSocket(PathBuf, std::io::Error),
}
