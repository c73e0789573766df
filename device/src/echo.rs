//! The eventfd echo the benchmark measures its latency limit against: a bare eventfd round
//! trip into this process, waited for the way the vring workers wait (epoll).
//!
//! A client ([`connect`]) creates two eventfds, connects to the backend's stats socket and sends
//! `echo\n` in one message carrying `[kick, call]` (SCM_RIGHTS). The stats server hands the
//! stream and both eventfds to [`serve`], whose thread waits on `kick` with `epoll_wait`, reads
//! it and writes 1 to `call`, until the client hangs up. Nothing else happens on the way, so a
//! kick-to-call round trip through the echo is the least a control-queue request can cost
//! between the same two processes.

use std::io::{self, ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread::JoinHandle;

use log::{debug, warn};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// The request line that asks the stats socket for an echo.
pub const ECHO_REQUEST: &[u8] = b"echo\n";

/// Name of the echo thread.
pub const THREAD_NAME: &str = "wddm-gpu-echo";

/// Epoll tokens.
const KICK: u64 = 0;
const STREAM: u64 = 1;

/// Starts the echo thread: every kick is answered by writing 1 to `call`; the thread ends when
/// `stream` hangs up (or reaches end of file). A thread that cannot start is logged, and the
/// client sees the hang-up.
pub fn serve(stream: UnixStream, kick: EventFd, call: EventFd) {
    if let Err(error) = spawn(stream, kick, call) {
        warn!("echo: cannot start: {error}");
    }
}

/// Like [`serve`], returning the thread.
pub fn spawn(stream: UnixStream, kick: EventFd, call: EventFd) -> io::Result<JoinHandle<()>> {
    stream.set_nonblocking(true)?;
    let epoll = Epoll::new()?;
    epoll.ctl(
        ControlOperation::Add,
        kick.as_raw_fd(),
        EpollEvent::new(EventSet::IN, KICK),
    )?;
    epoll.ctl(
        ControlOperation::Add,
        stream.as_raw_fd(),
        EpollEvent::new(EventSet::IN | EventSet::READ_HANG_UP, STREAM),
    )?;
    std::thread::Builder::new()
        .name(THREAD_NAME.to_string())
        .spawn(move || {
            match run(&epoll, stream, &kick, &call) {
                Ok(()) => debug!("echo: client hung up"),
                Err(error) => warn!("echo: stopped: {error}"),
            };
        })
}

/// The echo loop; returns when the client hangs up.
fn run(epoll: &Epoll, mut stream: UnixStream, kick: &EventFd, call: &EventFd) -> io::Result<()> {
    let mut events = [EpollEvent::default(); 2];
    loop {
        let count = match epoll.wait(-1, &mut events) {
            Ok(count) => count,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        for event in &events[..count] {
            match event.data() {
                KICK => match kick.read() {
                    Ok(_) => call.write(1)?,
                    // Another reader (none expected) took it, or a spurious wake-up.
                    Err(error) if error.kind() == ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error),
                },
                _ => {
                    let set = event.event_set();
                    if set.intersects(EventSet::HANG_UP | EventSet::READ_HANG_UP | EventSet::ERROR)
                    {
                        return Ok(());
                    }
                    if hung_up(&mut stream)? {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// Drains what the client sent after its request (ignored); true at end of file.
fn hung_up(stream: &mut UnixStream) -> io::Result<bool> {
    let mut scratch = [0u8; 256];
    loop {
        match stream.read(&mut scratch) {
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

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
        unsafe { libc::poll(&mut pollfd, 1, timeout.as_millis() as libc::c_int) > 0 }
    }

    fn join_within(thread: JoinHandle<()>, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "echo thread still running");
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().unwrap();
    }

    #[test]
    fn every_kick_is_answered_and_hang_up_ends_the_thread() {
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        let thread = spawn(server, kick, call).unwrap();
        assert_eq!(thread.thread().name(), Some(THREAD_NAME));
        for _ in 0..100 {
            peer.kick.write(1).unwrap();
            assert!(wait_readable(&peer.call, Duration::from_secs(10)));
            assert_eq!(peer.call.read().unwrap(), 1);
        }
        drop(peer);
        join_within(thread, Duration::from_secs(10));
    }

    #[test]
    fn shutdown_of_the_write_side_ends_the_thread() {
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        let thread = spawn(server, kick, call).unwrap();
        peer.kick.write(1).unwrap();
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        peer.stream().shutdown(std::net::Shutdown::Write).unwrap();
        join_within(thread, Duration::from_secs(10));
    }

    #[test]
    fn bytes_after_the_request_are_ignored() {
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        let (kick, call) = accept_request(&server);
        let thread = spawn(server, kick, call).unwrap();
        std::io::Write::write_all(&mut peer.stream(), b"noise\n").unwrap();
        peer.kick.write(1).unwrap();
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        assert_eq!(peer.call.read().unwrap(), 1);
        drop(peer);
        join_within(thread, Duration::from_secs(10));
    }

    #[test]
    fn kicks_before_the_echo_starts_are_answered() {
        let (client, server) = UnixStream::pair().unwrap();
        let peer = EchoPeer::over(client).unwrap();
        peer.kick.write(1).unwrap();
        let (kick, call) = accept_request(&server);
        serve(server, kick, call);
        assert!(wait_readable(&peer.call, Duration::from_secs(10)));
        assert_eq!(peer.call.read().unwrap(), 1);
    }
}
