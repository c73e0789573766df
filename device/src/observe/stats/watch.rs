//! `stats --watch`: the [`LiveView`] of a running backend, drawn every interval until Ctrl-C
//! (SIGINT), SIGTERM, a hang-up (SIGHUP: the SSH session closed) or a closed output, or after
//! `--count` frames. On a terminal each frame is drawn in place on the alternate screen with
//! plain ANSI sequences (any terminal over SSH has them) and the terminal is given back as it
//! was; elsewhere (a pipe, a file) the frames follow each other.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmm_sys_util::signal::register_signal_handler;

use super::live::LiveView;
use super::StatsSnapshot;
use crate::observe::endpoint;

/// Set by SIGINT, SIGTERM or SIGHUP while a watch runs.
static STOP: AtomicBool = AtomicBool::new(false);

/// How often a waiting watch looks at [`STOP`].
const STOP_POLL: Duration = Duration::from_millis(50);

extern "C" fn stop_watching(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::Relaxed);
}

/// Why a watch could not go on.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The stop signals could not be caught (the terminal could not be given back).
    #[error("cannot catch signal {signal}: {source}")]
    Signal {
        signal: libc::c_int,
        source: vmm_sys_util::errno::Error,
    },
    /// The stats endpoint did not answer (the backend is not running, or has exited).
    #[error("stats endpoint {}: {source}", path.display())]
    Query { path: PathBuf, source: io::Error },
    /// The endpoint answered something that is not a `stats --json` object.
    #[error("stats endpoint {} answered something that is not a stats snapshot: {source}", path.display())]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// How to watch.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// Time between frames.
    pub interval: Duration,
    /// Stop after this many frames (`None`: until stopped).
    pub frames: Option<u64>,
    /// Draw in place on the alternate screen (the output is a terminal).
    pub terminal: bool,
}

/// The screen the frames go to: the alternate screen of a terminal, given back when dropped.
struct Screen<W: Write> {
    out: W,
    terminal: bool,
    drawn: bool,
}

impl<W: Write> Screen<W> {
    fn new(out: W, terminal: bool) -> io::Result<Self> {
        let mut screen = Self {
            out,
            terminal,
            drawn: false,
        };
        if terminal {
            // The alternate screen, cursor hidden: the shell's screen comes back untouched.
            screen.out.write_all(b"\x1b[?1049h\x1b[?25l")?;
        }
        Ok(screen)
    }

    fn draw(&mut self, frame: &str) -> io::Result<()> {
        if self.terminal {
            // Home, each line cleared to its end, then everything below the frame.
            self.out.write_all(b"\x1b[H")?;
            for line in frame.lines() {
                self.out.write_all(line.as_bytes())?;
                self.out.write_all(b"\x1b[K\r\n")?;
            }
            self.out.write_all(b"\x1b[J")?;
        } else {
            if self.drawn {
                self.out.write_all(b"\n")?;
            }
            self.out.write_all(frame.as_bytes())?;
        }
        self.drawn = true;
        self.out.flush()
    }
}

impl<W: Write> Drop for Screen<W> {
    fn drop(&mut self) {
        if self.terminal {
            // Best effort: a closed terminal has nothing left to restore.
            let _ = self
                .out
                .write_all(b"\x1b[?25h\x1b[?1049l")
                .and_then(|()| self.out.flush());
        }
    }
}

/// One snapshot from the stats endpoint at `path`.
fn snapshot(path: &Path) -> Result<StatsSnapshot, WatchError> {
    let answer = endpoint::query(path, "json").map_err(|source| WatchError::Query {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&answer).map_err(|source| WatchError::Decode {
        path: path.to_owned(),
        source,
    })
}

/// Sleeps `interval` unless a stop signal comes first; returns whether to go on.
fn wait(interval: Duration) -> bool {
    let deadline = Instant::now() + interval;
    loop {
        if STOP.load(Ordering::Relaxed) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

/// Draws the live view of the backend whose stats endpoint is `path` on `out` until stopped;
/// a closed output ends the watch as a stop does.
pub fn watch(path: &Path, options: WatchOptions, out: impl Write) -> Result<(), WatchError> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        register_signal_handler(signal, stop_watching)
            .map_err(|source| WatchError::Signal { signal, source })?;
    }
    let Ok(mut screen) = Screen::new(out, options.terminal) else {
        return Ok(());
    };
    let mut view = LiveView::new(path.display().to_string());
    let mut drawn = 0u64;
    loop {
        let frame = view.frame(snapshot(path)?);
        if screen.draw(&frame).is_err() {
            return Ok(());
        }
        drawn = drawn.saturating_add(1);
        if options.frames.is_some_and(|frames| drawn >= frames) || !wait(options.interval) {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
