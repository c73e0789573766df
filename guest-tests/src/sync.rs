//! The rendezvous of the `lifecycle` command with the host helper that stops, continues and
//! resets the VM: the guest prints `GUEST-SYNC <point>` on its console (stdout, ttyS0), then
//! blocks reading one line from the second serial port (`/dev/ttyS1`, raw, no echo); the first
//! word of that line is the host's answer.
//!
//! The port is opened and configured once, before the first `GUEST-SYNC` line, and its input is
//! flushed before every line: an answer can then only be to the line just printed, and bytes the
//! UART received before the port was opened (which the kernel drops at open) cannot be lost.
//! Line splitting and the answer's word are pure ([`take_line`], [`answer_word`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use thiserror::Error;

/// The second serial port.
pub const SYNC_PORT: &str = "/dev/ttyS1";
/// Longest answer line kept (a longer one is cut here).
const MAX_LINE: usize = 256;

/// A rendezvous failed.
#[derive(Debug, Error)]
pub enum SyncError {
    /// The port could not be opened, configured or read.
    #[error("sync port {path}: {source}")]
    Io { path: String, source: io::Error },
    /// No answer in time.
    #[error("no answer on {path} within {timeout:?} of sync point {point}")]
    Timeout {
        path: String,
        point: String,
        timeout: Duration,
    },
}

/// The opened sync port.
pub struct SyncPort {
    path: String,
    file: File,
    pending: Vec<u8>,
}

impl SyncPort {
    /// Opens `path` and sets it raw (no echo, no line editing or translation, 8 bits, receiver
    /// on, modem lines ignored), blocking reads of at least one byte.
    pub fn open(path: &str) -> Result<Self, SyncError> {
        let err = |source| SyncError::Io {
            path: path.to_string(),
            source,
        };
        // Non-blocking open: a serial port without carrier would block it.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
            .map_err(err)?;
        let fd = file.as_raw_fd();
        // SAFETY: termios is plain data; tcgetattr fills it for an open fd.
        let mut tio: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; tio is a valid termios.
        if unsafe { libc::tcgetattr(fd, &mut tio) } != 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: tio is a valid termios.
        unsafe { libc::cfmakeraw(&mut tio) };
        tio.c_lflag &= !(libc::ECHO | libc::ECHONL | libc::ICANON);
        tio.c_cflag |= libc::CLOCAL | libc::CREAD;
        tio.c_cc[libc::VMIN] = 1;
        tio.c_cc[libc::VTIME] = 0;
        // SAFETY: fd is open; tio is a valid termios.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &tio) } != 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: fcntl on an open fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        Ok(Self {
            path: path.to_string(),
            file,
            pending: Vec::new(),
        })
    }

    /// Prints `GUEST-SYNC <point>` and waits (at most `timeout`, guest time) for the host's
    /// answer; returns its first word. Empty lines are skipped.
    pub fn sync(&mut self, point: &str, timeout: Duration) -> Result<String, SyncError> {
        let fd = self.file.as_raw_fd();
        // SAFETY: tcflush on an open tty fd.
        if unsafe { libc::tcflush(fd, libc::TCIFLUSH) } != 0 {
            return Err(self.io(io::Error::last_os_error()));
        }
        self.pending.clear();
        println!("GUEST-SYNC {point}");
        io::stdout().flush().map_err(|e| self.io(e))?;
        let start = Instant::now();
        loop {
            while let Some(line) = take_line(&mut self.pending) {
                if let Some(word) = answer_word(&line) {
                    return Ok(word);
                }
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(SyncError::Timeout {
                    path: self.path.clone(),
                    point: point.to_string(),
                    timeout,
                });
            }
            let mut poll = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, ms) };
            if ready < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.io(error));
            }
            if ready == 0 {
                continue;
            }
            let mut buf = [0u8; 64];
            match self.file.read(&mut buf) {
                Ok(n) => {
                    self.pending.extend_from_slice(&buf[..n]);
                    if self.pending.len() > MAX_LINE && !self.pending.contains(&b'\n') {
                        self.pending.truncate(MAX_LINE);
                        self.pending.push(b'\n');
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    fn io(&self, source: io::Error) -> SyncError {
        SyncError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// Removes and returns the first complete line of `buf` (ended by `\n` or `\r`), without its end.
pub fn take_line(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let end = buf.iter().position(|b| *b == b'\n' || *b == b'\r')?;
    let mut line: Vec<u8> = buf.drain(..=end).collect();
    line.pop();
    Some(line)
}

/// The first word of an answer line; `None` for a blank line.
pub fn answer_word(line: &[u8]) -> Option<String> {
    String::from_utf8_lossy(line)
        .split_whitespace()
        .next()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_and_takes_the_first_word() {
        let mut buf = b"first extra words\r\n\ngo\npartial".to_vec();
        let lines: Vec<Option<String>> = std::iter::from_fn(|| take_line(&mut buf))
            .map(|l| answer_word(&l))
            .collect();
        assert_eq!(
            lines,
            vec![Some("first".into()), None, None, Some("go".into())]
        );
        assert_eq!(buf, b"partial");
        assert_eq!(take_line(&mut buf), None);
        assert_eq!(answer_word(b"  after-reset  "), Some("after-reset".into()));
        assert_eq!(answer_word(b" \t "), None);
    }
}
