//! Ending the backend on a signal, in order. SIGTERM (how libvirt and init systems stop a
//! backend) and SIGINT (Ctrl-C) ask for the stop; a thread of its own takes the signals, so
//! nothing runs inside a signal handler. The stop ends the frontend's session, or the wait for
//! one, and the backend then leaves as when its frontend hangs up: the engines stopped at a
//! packet boundary, the recording and the trace flushed, the checker's summary logged, the
//! sockets and the lock removed, exit status 0. A second SIGTERM or SIGINT while that runs
//! ends the process at once. SIGHUP is logged and ignored: the backend has nothing to reload.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::{info, warn};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use vhost_user_backend::ShutdownHandle;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::support::sync::lock;

/// What a signal asked for, shared by the signal thread and the thread serving the socket.
pub struct Stop {
    state: Mutex<State>,
    /// Written once a stop is asked for: wakes the wait for a connection.
    wake: EventFd,
}

#[derive(Default)]
struct State {
    /// The signal that asked for the stop.
    requested: Option<i32>,
    /// The connection being served, which a stop shuts down.
    session: Option<ShutdownHandle>,
}

/// What ended a wait for a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// A connection is waiting to be accepted.
    Connection,
    /// A signal asked for the stop.
    Stop,
}

impl Stop {
    /// A stop nobody asked for yet.
    pub fn new() -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            state: Mutex::default(),
            wake: EventFd::new(EFD_NONBLOCK)?,
        }))
    }

    /// Starts the thread that turns SIGTERM and SIGINT into a stop (and logs SIGHUP).
    pub fn on_signals(self: &Arc<Self>) -> std::io::Result<()> {
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
        let stop = self.clone();
        std::thread::Builder::new()
            .name("wddm-gpu-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    stop.signalled(signal);
                }
            })?;
        Ok(())
    }

    fn signalled(&self, signal: i32) {
        let name = signal_name(signal);
        if signal == SIGHUP {
            info!("{name}: ignored (the backend has no configuration to reload)");
            return;
        }
        if self.requested().is_some() {
            warn!("{name} again while stopping: exiting at once");
            std::process::exit(128 + signal);
        }
        info!("{name}: stopping (engines, recording and trace, then the sockets)");
        self.request(signal);
    }

    /// Asks for the stop as `signal` does: the session (if any) is shut down and a wait for a
    /// connection returns.
    pub fn request(&self, signal: i32) {
        let mut state = lock(&self.state);
        state.requested.get_or_insert(signal);
        if let Some(session) = &state.session {
            session.shutdown();
        }
        // A full counter (never, at one write per stop) would only mean it is already readable.
        let _ = self.wake.write(1);
    }

    /// The signal that asked for the stop, if one did.
    pub fn requested(&self) -> Option<i32> {
        lock(&self.state).requested
    }

    /// The connection now served: a stop shuts it down (at once, when one was already asked).
    pub fn enter_session(&self, session: Option<ShutdownHandle>) {
        let mut state = lock(&self.state);
        if let (Some(_), Some(session)) = (state.requested, &session) {
            session.shutdown();
        }
        state.session = session;
    }

    /// The connection has ended.
    pub fn leave_session(&self) {
        lock(&self.state).session = None;
    }

    /// Waits until `listener` has a connection to accept or a stop is asked for.
    pub fn wait_for_connection(&self, listener: RawFd) -> std::io::Result<Woken> {
        loop {
            if self.requested().is_some() {
                return Ok(Woken::Stop);
            }
            let [connection, _] = readable([listener, self.wake.as_raw_fd()], None)?;
            if self.requested().is_some() {
                return Ok(Woken::Stop);
            }
            if connection {
                return Ok(Woken::Connection);
            }
        }
    }
}

/// Waits until one of `fds` is readable (or hung up) or `timeout` passes (`None`: no limit);
/// which ones are. A signal's interruption is waited through.
pub fn readable<const N: usize>(
    fds: [RawFd; N],
    timeout: Option<Duration>,
) -> std::io::Result<[bool; N]> {
    let mut polled = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let count = libc::nfds_t::try_from(N).map_err(std::io::Error::other)?;
    let timeout = timeout.map_or(-1, |timeout| {
        libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX)
    });
    loop {
        // SAFETY: poll reads and writes the `count` pollfd entries of `polled`, which outlive
        // the call.
        if unsafe { libc::poll(polled.as_mut_ptr(), count, timeout) } >= 0 {
            return Ok(polled.map(|fd| fd.revents != 0));
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// `SIGTERM`, `SIGINT`, `SIGHUP`, or the number.
pub fn signal_name(signal: i32) -> String {
    match signal {
        SIGTERM => "SIGTERM".into(),
        SIGINT => "SIGINT".into(),
        SIGHUP => "SIGHUP".into(),
        other => format!("signal {other}"),
    }
}
