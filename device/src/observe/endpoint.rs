//! The stats endpoint: a Unix socket answering `table`, `prometheus` and `json` requests while
//! the GPU runs (and `echo`, see [`crate::observe::echo`]).
//!
//! Protocol: the client connects and sends one request line; the server writes the rendering
//! (or one `error: ...` line) and closes. `echo` is sent as one message carrying two eventfds
//! (kick, call) with SCM_RIGHTS, so the first read of every connection receives descriptors.
//!
//! Each connection is served on its own short-lived thread with I/O timeouts, and the stats
//! lock is held only while a snapshot is taken, never while writing: a slow or stuck client
//! cannot stall the GPU or other clients.

use std::ffi::OsString;
use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::observe::echo::EchoPort;
use crate::observe::stats::Stats;
use crate::support::socket_path;

/// Longest request line accepted.
const MAX_REQUEST: usize = 256;
/// Most descriptors taken from one request message (echo needs two).
const MAX_FDS: usize = 4;
/// Connections served at once; more are refused with an error line.
const MAX_CLIENTS: usize = 16;
/// How long a client of either socket may take to send its request line (in all: a silent or
/// trickling client is closed then), and to take each write of the answer. docs/security.md
/// states it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answered client may take to close its side, in all.
const LINGER_TIMEOUT: Duration = Duration::from_secs(1);

/// Sets the read timeout to what is left until `deadline`; false when it has passed.
fn read_until(stream: &UnixStream, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    !left.is_zero() && stream.set_read_timeout(Some(left)).is_ok()
}
/// How long [`query`] waits for the answer.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The stats socket's requests, for its error messages.
const REQUESTS: &str = "table, prometheus, json or echo";

/// The stats socket that belongs to a vhost-user socket path: the same path with `.stats`
/// appended.
pub fn default_path(vhost_user_socket: &Path) -> PathBuf {
    let mut path = OsString::from(vhost_user_socket.as_os_str());
    path.push(".stats");
    PathBuf::from(path)
}

/// Why a request is refused; sent to the client as `error: <message>`. The hints name the
/// requests of the socket that refused it (the stats socket's, or the control socket's).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// The client closed without sending anything.
    #[error("empty request (send one line: {0})")]
    Empty(&'static str),
    /// The request is not UTF-8.
    #[error("the request is not text (send one line: {0})")]
    NotText(&'static str),
    /// No newline within [`MAX_REQUEST`] bytes.
    #[error("request line longer than {MAX_REQUEST} bytes")]
    TooLong,
    /// Not a request this server knows.
    #[error("unknown request {0:?} (send one line: {1})")]
    Unknown(String, &'static str),
    /// `echo` without exactly two descriptors.
    #[error("echo needs two eventfds (kick, call) in the request message; got {0} descriptors")]
    EchoDescriptors(usize),
    /// An `echo` descriptor is not an eventfd.
    #[error("echo descriptors must be eventfds")]
    NotEventFd,
    /// An `echo` descriptor is blocking, or both are the same eventfd: the vring worker would
    /// block or spin on it.
    #[error("echo eventfds must be two different non-blocking eventfds (EFD_NONBLOCK)")]
    EchoFdsUnsafe,
    /// Descriptors came with a request that takes none.
    #[error("only echo takes descriptors")]
    UnexpectedDescriptors,
    /// Too many clients at once.
    #[error("busy: {MAX_CLIENTS} clients are being served")]
    Busy,
}

/// A parsed request.
#[derive(Debug)]
enum Request {
    Table,
    Prometheus,
    Json,
    Echo { kick: EventFd, call: EventFd },
}

/// The running endpoint; dropping it (or [`StatsServer::shutdown`]) stops the thread and
/// removes the socket file.
pub struct StatsServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    /// A handle on the listening socket, to wake the accept loop at shutdown.
    listener: UnixListener,
    thread: Option<JoinHandle<()>>,
}

/// Binds the stats socket at `path` (replacing a stale socket file) and starts serving.
pub fn start(
    path: &Path,
    mode: u32,
    stats: Arc<Stats>,
    echo: Arc<EchoPort>,
) -> io::Result<StatsServer> {
    let server = serve(path, mode, "wddm-gpu-stats", move |stream| {
        serve_client(stream, &stats, &echo)
    })?;
    info!("stats endpoint: {}", path.display());
    Ok(server)
}

/// What the control socket's requests are answered by (the GPU's injections and inspection,
/// above this layer).
pub trait ControlHandler: Send + Sync + 'static {
    /// The answer to one request line: the bytes to send, or the reason it was refused.
    fn handle(&self, request: &str) -> Result<Vec<u8>, String>;

    /// The requests it answers, as the hint of a refusal that is not a request line (nothing
    /// sent, not text): `"a, b or c"`.
    fn requests(&self) -> &'static str;
}

/// Binds the control socket at `path`, readable and writable by this process's user only
/// (whatever `--file-mode` says: it changes what the device does), and starts serving
/// `handler`. A client of another user is refused even if it reaches the socket.
pub fn start_control(path: &Path, handler: Arc<dyn ControlHandler>) -> io::Result<StatsServer> {
    let server = serve(path, 0o600, "wddm-gpu-ctl", move |stream| {
        serve_control(stream, &*handler)
    })?;
    info!("control endpoint: {}", path.display());
    Ok(server)
}

/// Claims `path`, binds it with `mode` and serves each connection with `serve` on a thread of
/// its own (the accept thread is named `name`).
fn serve(
    path: &Path,
    mode: u32,
    name: &str,
    serve: impl Fn(UnixStream) + Send + Sync + 'static,
) -> io::Result<StatsServer> {
    socket_path::claim(path)?;
    let listener = bind_ready(path, mode)?;
    let accepting = listener.try_clone()?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        let serve = Arc::new(serve);
        let client_name = format!("{name}-client");
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || accept_loop(&accepting, &client_name, &serve, &stop))?
    };
    Ok(StatsServer {
        path: path.to_owned(),
        stop,
        listener,
        thread: Some(thread),
    })
}

/// The control socket that belongs to a vhost-user socket path: `.ctl` appended.
pub fn default_control_path(vhost_user_socket: &Path) -> PathBuf {
    let mut path = OsString::from(vhost_user_socket.as_os_str());
    path.push(".ctl");
    PathBuf::from(path)
}

/// Whether the peer of `stream` runs as this process's effective user.
fn same_user(stream: &UnixStream) -> bool {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    // 12 bytes: fits; a length of 0 would only make the call fail (and the client refused).
    let mut length = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).unwrap_or(0);
    // SAFETY: SO_PEERCRED fills a `ucred` of the length given, which is exactly its size.
    let got = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(credentials).cast(),
            &mut length,
        )
    };
    // SAFETY: geteuid has no arguments and cannot fail.
    got == 0 && credentials.uid == unsafe { libc::geteuid() }
}

/// Serves one control connection: one request line, one answer (`error: ...` when refused).
fn serve_control(stream: UnixStream, handler: &dyn ControlHandler) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let refusal = |why: &dyn std::fmt::Display| format!("error: {why}\n").into_bytes();
    let answer = if !same_user(&stream) {
        warn!("control endpoint: refused a client of another user");
        refusal(&"the control socket serves its owner only")
    } else {
        match read_request(&stream) {
            Ok((line, fds)) if fds.is_empty() => match request_line(&line, handler.requests()) {
                Ok(request) => handler.handle(request).unwrap_or_else(|why| refusal(&why)),
                Err(error) => refusal(&error),
            },
            Ok(_) => refusal(&RequestError::UnexpectedDescriptors),
            Err(error) => {
                debug!("control endpoint: reading a request: {error}");
                return;
            }
        }
    };
    if let Err(error) = (&stream).write_all(&answer) {
        debug!("control endpoint: writing an answer: {error}");
        return;
    }
    linger(&stream);
}

/// Binds a listening socket that appears at `path` only once it accepts, with permission bits
/// `mode`: bound, listening and given its mode under a temporary name beside it, then renamed
/// into place, so a client that sees the path never gets "connection refused" or a wrong mode.
fn bind_ready(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.new", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let _ = fs::remove_file(&temporary);
    let listener = match UnixListener::bind(&temporary) {
        Ok(listener) => listener,
        // The longer name may pass the socket-address limit where `path` does not.
        Err(error) if error.kind() == ErrorKind::InvalidInput => {
            let listener = UnixListener::bind(path)?;
            fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
            return Ok(listener);
        }
        Err(error) => return Err(error),
    };
    let placed = fs::set_permissions(&temporary, fs::Permissions::from_mode(mode))
        .and_then(|()| fs::rename(&temporary, path));
    if let Err(error) = placed {
        let _ = fs::remove_file(&temporary);
        return Err(error);
    }
    Ok(listener)
}

impl StatsServer {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving and removes the socket file.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        // SAFETY: shutdown(2) on a listening socket this server owns (it stays open until the
        // server is dropped); on Linux it makes the blocked accept(2) return.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if thread.join().is_err() {
            warn!("stats endpoint: the server thread panicked");
        }
        if let Err(error) = fs::remove_file(&self.path) {
            debug!("stats endpoint: removing {}: {error}", self.path.display());
        }
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Decrements the client count when a connection thread ends.
struct ClientSlot(Arc<AtomicUsize>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(
    listener: &UnixListener,
    client_name: &str,
    serve: &Arc<impl Fn(UnixStream) + Send + Sync + 'static>,
    stop: &AtomicBool,
) {
    let clients = Arc::new(AtomicUsize::new(0));
    for connection in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let stream = match connection {
            Ok(stream) => stream,
            Err(error) => {
                warn!("stats endpoint: accept: {error}");
                // Out of descriptors and the like: do not spin.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            drop(ClientSlot(clients.clone()));
            let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
            let _ = write_error(&stream, &RequestError::Busy);
            continue;
        }
        let slot = ClientSlot(clients.clone());
        let serve = serve.clone();
        let spawned = std::thread::Builder::new()
            .name(client_name.to_string())
            .spawn(move || {
                let _slot = slot;
                serve(stream);
            });
        if let Err(error) = spawned {
            warn!("stats endpoint: cannot start a client thread: {error}");
        }
    }
}

fn write_error(mut stream: &UnixStream, error: &RequestError) -> io::Result<()> {
    stream.write_all(format!("error: {error}\n").as_bytes())
}

/// Serves one connection: reads the request, answers, closes (or hands it to the echo).
fn serve_client(stream: UnixStream, stats: &Stats, echo: &EchoPort) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let request = match read_request(&stream) {
        Ok((line, fds)) => parse_request(&line, fds),
        Err(error) => {
            debug!("stats endpoint: reading a request: {error}");
            return;
        }
    };
    let answer = match request {
        Ok(Request::Echo { kick, call }) => {
            let _ = stream.set_read_timeout(None);
            let _ = stream.set_write_timeout(None);
            let reply = stream.try_clone();
            if let Err(error) = echo.serve(stream, kick, call) {
                warn!("stats endpoint: echo: {error}");
                if let Ok(reply) = reply {
                    let _ = reply.set_write_timeout(Some(IO_TIMEOUT));
                    let _ = (&reply).write_all(format!("error: echo: {error}\n").as_bytes());
                }
            }
            return;
        }
        // The snapshot is taken (and the stats lock released) before anything is written.
        Ok(Request::Table) => stats.snapshot().to_table(),
        Ok(Request::Prometheus) => stats.snapshot().to_prometheus(),
        Ok(Request::Json) => match serde_json::to_string_pretty(&stats.snapshot()) {
            Ok(text) => text + "\n",
            Err(error) => format!("error: {error}\n"),
        },
        Err(error) => format!("error: {error}\n"),
    };
    if let Err(error) = (&stream).write_all(answer.as_bytes()) {
        debug!("stats endpoint: writing an answer: {error}");
        return;
    }
    linger(&stream);
}

/// Ends the answer, then discards what the client sent beyond its request line (a bounded
/// amount, until it closes): closing a socket with unread input resets the connection, and the
/// client would lose the answer.
fn linger(stream: &UnixStream) {
    const MAX_DISCARD: usize = 64 << 10;
    if stream.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER_TIMEOUT;
    let mut scratch = [0u8; 4096];
    let mut discarded = 0;
    while discarded < MAX_DISCARD && read_until(stream, deadline) {
        match (&*stream).read(&mut scratch) {
            Ok(0) | Err(_) => break,
            Ok(read) => discarded += read,
        }
    }
}

/// Reads the request line, within [`IO_TIMEOUT`] in all (a client trickling bytes cannot hold
/// its slot longer). The first read takes any descriptors sent with it (they are owned, and
/// closed unless used); later reads only complete a line sent in pieces.
fn read_request(stream: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = [0u8; MAX_REQUEST + 1];
    let mut fds: [RawFd; MAX_FDS] = [-1; MAX_FDS];
    let mut iovecs = [libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }];
    // SAFETY: the iovec covers `buf`, which outlives the call and may hold any bytes.
    let (mut len, fd_count) = unsafe { stream.recv_with_fds(&mut iovecs, &mut fds) }
        .map_err(|error| io::Error::from_raw_os_error(error.errno()))?;
    let owned = fds[..fd_count.min(MAX_FDS)]
        .iter()
        // SAFETY: these descriptors were just received and nothing else owns them.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    while len > 0 && len < buf.len() && !buf[..len].contains(&b'\n') {
        if !read_until(stream, deadline) {
            return Err(io::Error::new(ErrorKind::TimedOut, "request line too slow"));
        }
        match (&*stream).read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(read) => len += read,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok((buf[..len].to_vec(), owned))
}

/// Whether a descriptor is an eventfd (the echo writes and reads 8-byte counters on them).
fn is_eventfd(fd: &OwnedFd) -> bool {
    fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|target| target.as_os_str() == "anon_inode:[eventfd]")
        .unwrap_or(false)
}

/// Whether a descriptor's file is non-blocking (the vring worker must never block on it).
fn is_nonblocking(fd: &OwnedFd) -> bool {
    // SAFETY: F_GETFL on a descriptor this process owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// Whether two descriptors of this process refer to the same open file (`kcmp`; every eventfd
/// shares one anonymous inode, so `fstat` cannot tell). An unanswerable question counts as
/// "the same", which refuses the request.
fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
    const KCMP_FILE: libc::c_int = 0;
    // SAFETY: kcmp compares two descriptors of this process; no memory is passed.
    let pid = unsafe { libc::getpid() };
    // SAFETY: as above; the descriptors stay open for the call.
    let order = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            a.as_raw_fd(),
            b.as_raw_fd(),
        )
    };
    order != 1 && order != 2
}

/// The request line of what a client sent, trimmed; a refusal hints at `requests`.
fn request_line<'a>(bytes: &'a [u8], requests: &'static str) -> Result<&'a str, RequestError> {
    if bytes.is_empty() {
        return Err(RequestError::Empty(requests));
    }
    let line = match bytes.iter().position(|&byte| byte == b'\n') {
        Some(end) => &bytes[..end],
        None if bytes.len() > MAX_REQUEST => return Err(RequestError::TooLong),
        // A client may close its side instead of ending the line.
        None => bytes,
    };
    Ok(std::str::from_utf8(line)
        .map_err(|_| RequestError::NotText(requests))?
        .trim())
}

fn parse_request(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Request, RequestError> {
    let line = request_line(bytes, REQUESTS)?;
    let request = match line {
        "table" => Request::Table,
        "prometheus" => Request::Prometheus,
        "json" => Request::Json,
        "echo" => {
            let [kick, call]: [OwnedFd; 2] = fds
                .try_into()
                .map_err(|fds: Vec<OwnedFd>| RequestError::EchoDescriptors(fds.len()))?;
            if !is_eventfd(&kick) || !is_eventfd(&call) {
                return Err(RequestError::NotEventFd);
            }
            if !is_nonblocking(&kick) || !is_nonblocking(&call) || same_file(&kick, &call) {
                return Err(RequestError::EchoFdsUnsafe);
            }
            // SAFETY: each descriptor is an eventfd this process owns; ownership moves.
            let (kick, call) = unsafe {
                (
                    EventFd::from_raw_fd(kick.into_raw_fd()),
                    EventFd::from_raw_fd(call.into_raw_fd()),
                )
            };
            return Ok(Request::Echo { kick, call });
        }
        "" => return Err(RequestError::Empty(REQUESTS)),
        other => {
            let shown: String = other.chars().take(40).collect();
            return Err(RequestError::Unknown(shown, REQUESTS));
        }
    };
    if !fds.is_empty() {
        return Err(RequestError::UnexpectedDescriptors);
    }
    Ok(request)
}

/// Asks the stats endpoint at `path` for one rendering (`table`, `prometheus` or `json`). An
/// `error: ...` answer comes back as an error of kind `InvalidInput` with that message.
pub fn query(path: &Path, request: &str) -> io::Result<String> {
    let answer = query_bytes(path, request)?;
    // Every rendering has at least a line: a socket that closes without one is not a stats
    // endpoint (the vhost-user socket, say).
    if answer.is_empty() {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            "closed without an answer: not a stats endpoint (the vhost-user socket?)",
        ));
    }
    String::from_utf8(answer).map_err(|_| io::Error::new(ErrorKind::InvalidData, "not text"))
}

/// [`query`] for an answer that may be bytes (the control socket's `vram ... raw`).
pub fn query_bytes(path: &Path, request: &str) -> io::Result<Vec<u8>> {
    let mut stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(QUERY_TIMEOUT))?;
    stream.set_write_timeout(Some(QUERY_TIMEOUT))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    match answer.strip_prefix(b"error: ") {
        Some(message) => Err(io::Error::new(
            ErrorKind::InvalidInput,
            String::from_utf8_lossy(message).trim_end().to_string(),
        )),
        None => Ok(answer),
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
