//! The eventfd echo the benchmark measures its latency limit against: a bare eventfd round
//! trip into this process, answered by the vring worker itself.
//!
//! A client ([`connect`]) creates two eventfds, connects to the backend's stats socket and sends
//! `echo\n` in one message carrying `[kick, call]` (SCM_RIGHTS). The stats server hands them to
//! [`EchoPort::serve`], which adds `kick` to the vring worker's epoll set under
//! [`ECHO_EVENT`]; the worker answers each kick by writing 1 to `call` ([`EchoPort::answer`])
//! until the client hangs up. The kick wakes the same thread, through the same `epoll_wait`,
//! the same event dispatch and the same backend lock as a control-queue kick, and lands on the
//! same CPU: only the device's own work is missing. A kick-to-call round trip through the echo
//! is therefore the least a control-queue request can cost between the same two processes.

use std::io::{self, ErrorKind, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use log::{debug, warn};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::support::sync::lock;

/// The request line that asks the stats socket for an echo.
pub const ECHO_REQUEST: &[u8] = b"echo\n";

/// The vring worker's event id for echo kicks: above the queues (0, 1) and the worker's exit
/// event (2), which the vhost-user-backend crate reserves.
pub const ECHO_EVENT: u16 = 3;

/// Adds (`true`) or removes (`false`) a descriptor in the vring worker's epoll set under
/// [`ECHO_EVENT`].
pub type Registrar = Box<dyn Fn(RawFd, bool) -> io::Result<()> + Send + Sync>;

/// Why an echo could not be served.
#[derive(Debug, thiserror::Error)]
pub enum EchoError {
    /// The daemon has no vring worker to answer on (the backend is not serving yet).
    #[error("no vring worker to answer echo kicks on")]
    NoWorker,
    /// The backend was started without `--bench-echo`.
    #[error("the echo is off: start the backend with --bench-echo (only the benchmark needs it)")]
    Off,
    /// One echo at a time: the worker answers one pair of eventfds.
    #[error("another echo client is connected")]
    Busy,
    /// The worker's epoll set refused the kick eventfd.
    #[error("cannot add the kick eventfd to the vring worker: {0}")]
    Register(#[source] io::Error),
}

struct Session {
    /// Tells this session from a later one that may reuse the descriptor numbers.
    id: u64,
    kick: EventFd,
    call: EventFd,
}

/// The echo's state, shared by the vring worker (which answers) and the stats server (which
/// connects clients).
#[derive(Default)]
pub struct EchoPort {
    session: Mutex<Option<Session>>,
    sessions: std::sync::atomic::AtomicU64,
    registrar: OnceLock<Registrar>,
    /// Off unless the benchmark asked for it (`--bench-echo`): a stats-socket client must not
    /// be able to make the vring worker answer its eventfds otherwise.
    enabled: std::sync::atomic::AtomicBool,
}

impl EchoPort {
    /// Gives the port its way into the vring worker's epoll set (once; later calls are ignored).
    pub fn set_registrar(&self, registrar: Registrar) {
        let _ = self.registrar.set(registrar);
    }

    /// Serves echo clients from now on (`--bench-echo`).
    pub fn enable(&self) {
        self.enabled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The vring worker saw [`ECHO_EVENT`]: consume the kick, write the call. The stats server
    /// only accepts non-blocking eventfds, so neither call can block the worker; a call that
    /// fails (a client that filled its counter) ends the session rather than being retried on
    /// every kick.
    pub fn answer(&self) {
        let mut session = lock(&self.session);
        let Some(current) = session.as_ref() else {
            return;
        };
        let result = match current.kick.read() {
            Ok(_) => current.call.write(1),
            // A wake-up whose kick was already consumed.
            Err(error) if error.kind() == ErrorKind::WouldBlock => Ok(()),
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            warn!("echo: ending the session: {error}");
            self.unregister(current.kick.as_raw_fd());
            session.take();
        }
    }

    fn unregister(&self, kick: RawFd) {
        if let Some(registrar) = self.registrar.get() {
            if let Err(error) = registrar(kick, false) {
                warn!("echo: cannot remove the kick eventfd: {error}");
            }
        }
    }

    /// Serves one client: its kicks are answered by the vring worker until `stream` hangs up.
    /// Blocks the calling thread (a stats-server client thread) meanwhile. `kick` and `call`
    /// must be non-blocking (the stats server checks).
    pub fn serve(&self, stream: UnixStream, kick: EventFd, call: EventFd) -> Result<(), EchoError> {
        if !self.enabled.load(std::sync::atomic::Ordering::Acquire) {
            return Err(EchoError::Off);
        }
        let registrar = self.registrar.get().ok_or(EchoError::NoWorker)?;
        let kick_fd = kick.as_raw_fd();
        let id = self
            .sessions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut session = lock(&self.session);
            if session.is_some() {
                return Err(EchoError::Busy);
            }
            *session = Some(Session { id, kick, call });
        }
        // Kicks sent before this are not lost: an eventfd with a count is reported readable as
        // soon as it joins the set.
        if let Err(error) = registrar(kick_fd, true) {
            lock(&self.session).take();
            return Err(EchoError::Register(error));
        }
        wait_for_hang_up(stream);
        let mut session = lock(&self.session);
        // Unless the worker already ended it, this session's kick is still in the set.
        if session.as_ref().is_some_and(|current| current.id == id) {
            self.unregister(kick_fd);
            session.take();
        }
        debug!("echo: client hung up");
        Ok(())
    }
}

/// Reads (and ignores) what the client sends until it hangs up.
fn wait_for_hang_up(mut stream: UnixStream) {
    let _ = stream.set_read_timeout(None);
    let mut scratch = [0u8; 256];
    loop {
        match stream.read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The client side of an echo: kick it with `kick.write(1)`, and it answers on `call`. The echo
/// ends when this is dropped (the stream closes).
#[derive(Debug)]
pub struct EchoPeer {
    /// Written by the client; the echo waits on it.
    pub kick: EventFd,
    /// Written by the echo once per kick it reads.
    pub call: EventFd,
    stream: UnixStream,
}

impl EchoPeer {
    /// Asks the echo at the other end of `stream` (a connected stats-socket stream, or one end
    /// of a socket pair) to serve two new non-blocking eventfds.
    pub fn over(stream: UnixStream) -> io::Result<Self> {
        let kick = EventFd::new(EFD_NONBLOCK)?;
        let call = EventFd::new(EFD_NONBLOCK)?;
        let sent = stream.send_with_fds(&[ECHO_REQUEST], &[kick.as_raw_fd(), call.as_raw_fd()])?;
        if sent != ECHO_REQUEST.len() {
            return Err(io::Error::new(
                ErrorKind::WriteZero,
                "echo request sent in part",
            ));
        }
        Ok(Self { kick, call, stream })
    }

    /// The stream to the echo (closing it ends the echo).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }
}

/// Connects to the backend's stats socket and asks for an echo.
pub fn connect(stats_socket: &Path) -> io::Result<EchoPeer> {
    EchoPeer::over(UnixStream::connect(stats_socket)?)
}

/// A stand-in vring worker for tests: its own epoll loop answering the port's kicks.
#[cfg(test)]
pub(crate) fn spawn_test_worker(port: &std::sync::Arc<EchoPort>) {
    use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
    let epoll = std::sync::Arc::new(Epoll::new().unwrap());
    let registering = epoll.clone();
    port.set_registrar(Box::new(move |fd, add| {
        let operation = if add {
            ControlOperation::Add
        } else {
            ControlOperation::Delete
        };
        registering.ctl(
            operation,
            fd,
            EpollEvent::new(EventSet::IN, u64::from(ECHO_EVENT)),
        )
    }));
    let answering = port.clone();
    std::thread::spawn(move || {
        let mut events = [EpollEvent::default(); 4];
        loop {
            if let Ok(count) = epoll.wait(-1, &mut events) {
                for _ in &events[..count] {
                    answering.answer();
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// What the stats server does: the first message with its two descriptors.
    fn accept_request(server: &UnixStream) -> (EventFd, EventFd) {
        let mut buf = [0u8; 16];
        let mut iovecs = [libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        let mut fds = [-1; 4];
        // SAFETY: the iovec points at `buf`, which outlives the call and takes any bytes; the
        // received descriptors are owned below.
        let (len, nfds) = unsafe { server.recv_with_fds(&mut iovecs, &mut fds) }.unwrap();
        assert_eq!(&buf[..len], ECHO_REQUEST);
        assert_eq!(nfds, 2);
        // SAFETY: both descriptors were just received and nothing else owns them.
        unsafe {
            use std::os::fd::FromRawFd;
            (EventFd::from_raw_fd(fds[0]), EventFd::from_raw_fd(fds[1]))
        }
    }

    fn wait_readable(fd: &EventFd, timeout: Duration) -> bool {
        let mut pollfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, which outlives the call.
        unsafe {
            libc::poll(
                &mut pollfd,
                1,
                libc::c_int::try_from(timeout.as_millis()).unwrap(),
            ) > 0
        }
    }

    /// A port with a test worker, serving one client on its own thread.
    fn served() -> (
        Arc<EchoPort>,
        EchoPeer,
        std::thread::JoinHandle<Result<(), EchoError>>,
    ) {
        let port = Arc::new(EchoPort::default());
        port.enable();
        spawn_test_worker(&port);
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        let serving = port.clone();
        let thread = std::thread::spawn(move || serving.serve(server, kick, call));
        (port, peer, thread)
    }

    #[test]
    fn every_kick_is_answered_and_hang_up_ends_the_session() {
        let (port, peer, thread) = served();
        for _ in 0..100 {
            peer.kick.write(1).unwrap();
            assert!(wait_readable(&peer.call, Duration::from_secs(10)));
            assert_eq!(peer.call.read().unwrap(), 1);
        }
        drop(peer);
        thread.join().unwrap().unwrap();
        assert!(lock(&port.session).is_none());
    }

    #[test]
    fn kicks_before_the_session_starts_are_answered() {
        let port = Arc::new(EchoPort::default());
        port.enable();
        spawn_test_worker(&port);
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        peer.kick.write(1).unwrap();
        let (kick, call) = accept_request(&server);
        let serving = port.clone();
        std::thread::spawn(move || serving.serve(server, kick, call));
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        assert_eq!(peer.call.read().unwrap(), 1);
    }

    #[test]
    fn a_second_client_is_refused_while_one_is_served() {
        let (port, peer, thread) = served();
        peer.kick.write(1).unwrap();
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        let (client, server) = UnixStream::pair().unwrap();
        let _other = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        assert!(matches!(
            port.serve(server, kick, call),
            Err(EchoError::Busy)
        ));
        drop(peer);
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn a_call_that_cannot_be_written_ends_the_session_instead_of_blocking() {
        let (port, peer, thread) = served();
        // One answered kick: the session is in place.
        peer.kick.write(1).unwrap();
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        peer.call.read().unwrap();
        // A counter one short of full: the worker's write of 1 cannot complete.
        peer.call.write(u64::MAX - 1).unwrap();
        peer.kick.write(1).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while lock(&port.session).is_some() {
            assert!(std::time::Instant::now() < deadline, "session still open");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The kick is out of the worker's set: further kicks are not answered (and do not spin).
        let _ = peer.call.read();
        peer.kick.write(1).unwrap();
        assert!(!wait_readable(&peer.call, Duration::from_millis(200)));
        drop(peer);
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn the_echo_is_off_unless_enabled() {
        let port = Arc::new(EchoPort::default());
        spawn_test_worker(&port);
        let (client, server) = UnixStream::pair().unwrap();
        let _peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        assert!(matches!(
            port.serve(server, kick, call),
            Err(EchoError::Off)
        ));
        assert!(lock(&port.session).is_none());
    }

    #[test]
    fn without_a_worker_the_echo_is_refused() {
        let port = EchoPort::default();
        port.enable();
        let (client, server) = UnixStream::pair().unwrap();
        let _peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        assert!(matches!(
            port.serve(server, kick, call),
            Err(EchoError::NoWorker)
        ));
        // Answering without a session does nothing.
        port.answer();
    }
}
