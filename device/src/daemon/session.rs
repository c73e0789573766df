//! Which connection to the vhost-user socket is the frontend. A client becomes the frontend
//! with its first valid vhost-user request (QEMU opens with GET_FEATURES); until then it is
//! only a client. A client that closes at once, sends anything that is not a valid first
//! message, or sends nothing for [`FIRST_MESSAGE_TIMEOUT`] is dropped with one rate-limited log
//! line, and the backend goes on waiting for its frontend: a port probe, `stats` or `ctl` aimed
//! at the wrong socket, or a second backend's check never ends it. Once the frontend is
//! connected, every other client is closed at once (one frontend per backend), and the
//! frontend's hang-up ends the session, as QEMU's exit does.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::daemon::error::StartError;
use crate::daemon::stop::{readable, signal_name, Stop, Woken};
use crate::transport::backend::WddmGpuBackend;

/// How long a new client may take to send its first valid vhost-user request. QEMU sends
/// GET_FEATURES as soon as it connects.
pub const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor looks at a client that has not spoken yet.
const POLL: Duration = Duration::from_millis(20);
/// At most one log line of each kind of stray client per this long; the rest are counted.
const LOG_EVERY: Duration = Duration::from_secs(10);

type Daemon = VhostUserDaemon<Arc<RwLock<WddmGpuBackend>>>;

/// How the frontend's session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The frontend hung up (QEMU exited or closed the socket).
    HungUp,
    /// A signal asked for the stop (the number).
    Stopped(i32),
}

/// Where the frontend comes from.
pub struct Socket {
    /// The listener the daemon accepts from.
    pub listener: Listener,
    /// The listener only ever holds the one connection libvirt handed over (`--fd` with a
    /// connected socket): whatever that connection does, its end is the session's.
    pub single: bool,
}

/// Serves `socket` until the frontend's session ends or a stop is asked for. `spoke` is set by
/// the backend at the first valid request of a connection.
pub fn serve(
    daemon: &mut Daemon,
    socket: &mut Socket,
    spoke: &Arc<AtomicBool>,
    stop: &Stop,
) -> Result<Ended, StartError> {
    let listener = &mut socket.listener;
    let mut strays = Throttle::default();
    loop {
        if stop.wait_for_connection(listener.as_raw_fd())? == Woken::Stop {
            return Ok(stopped(stop));
        }
        spoke.store(false, Ordering::Release);
        daemon
            .start(listener)
            .map_err(|e| StartError::Daemon(e.to_string()))?;
        let session = daemon.shutdown_handle();
        stop.enter_session(session.clone());
        let supervisor = Supervisor::start(listener, spoke.clone(), session)?;
        let ended = daemon.wait();
        stop.leave_session();
        let refused = supervisor.finish();
        if stop.requested().is_some() {
            return Ok(stopped(stop));
        }
        if !spoke.load(Ordering::Acquire) && !socket.single {
            let why = match &ended {
                Ok(()) => format!("none within {FIRST_MESSAGE_TIMEOUT:?}"),
                Err(error) => error.to_string(),
            };
            strays.log(&format!(
                "a client of the vhost-user socket left before any valid vhost-user request \
                 ({why}); still waiting for the frontend"
            ));
            continue;
        }
        if refused > 0 {
            info!("{refused} other client(s) were refused while the frontend was connected");
        }
        return match ended {
            // A frontend hanging up is the normal end of a session, as the crate's serve() has it.
            Ok(())
            | Err(vhost_user_backend::Error::HandleRequest(
                VhostUserError::Disconnected | VhostUserError::PartialMessage,
            )) => {
                info!("frontend disconnected; exiting");
                Ok(Ended::HungUp)
            }
            Err(error) => Err(StartError::Daemon(error.to_string())),
        };
    }
}

fn stopped(stop: &Stop) -> Ended {
    let signal = stop.requested().unwrap_or(libc::SIGTERM);
    info!("stopped by {}", signal_name(signal));
    Ended::Stopped(signal)
}

/// Watches one connection while the daemon serves it: drops it when it has not spoken within
/// [`FIRST_MESSAGE_TIMEOUT`], and once it has (it is the frontend), closes every other client
/// that connects.
struct Supervisor {
    /// Written when the session has ended: wakes the supervisor's wait.
    done: Arc<EventFd>,
    thread: JoinHandle<u64>,
}

impl Supervisor {
    fn start(
        listener: &Listener,
        spoke: Arc<AtomicBool>,
        session: Option<ShutdownHandle>,
    ) -> Result<Self, StartError> {
        // SAFETY: the listener's descriptor is open for as long as `listener` is borrowed, and
        // the borrow ends with the duplicate made here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(listener.as_raw_fd()) };
        let others = borrowed
            .try_clone_to_owned()
            .map(UnixListener::from)
            .map_err(|e| StartError::Daemon(format!("vhost-user socket: {e}")))?;
        let done = Arc::new(EventFd::new(EFD_NONBLOCK)?);
        let ended = done.clone();
        let thread = std::thread::Builder::new()
            .name("wddm-gpu-gate".into())
            .spawn(move || supervise(&others, &spoke, session.as_ref(), &ended))
            .map_err(|e| StartError::Daemon(format!("session supervisor: {e}")))?;
        Ok(Self { done, thread })
    }

    /// Ends the watch; the number of other clients refused.
    fn finish(self) -> u64 {
        // A full counter (never, at one write) would only mean it is readable already.
        let _ = self.done.write(1);
        self.thread.join().unwrap_or(0)
    }
}

fn supervise(
    others: &UnixListener,
    spoke: &AtomicBool,
    session: Option<&ShutdownHandle>,
    ended: &EventFd,
) -> u64 {
    let deadline = Instant::now() + FIRST_MESSAGE_TIMEOUT;
    while !spoke.load(Ordering::Acquire) {
        if Instant::now() >= deadline {
            debug!("a client sent no vhost-user request within {FIRST_MESSAGE_TIMEOUT:?}");
            if let Some(session) = session {
                session.shutdown();
            }
            return 0;
        }
        // Nothing wakes this wait when the client speaks: it looks again every POLL.
        match readable([ended.as_raw_fd()], Some(POLL)) {
            Ok([false]) => {}
            _ => return 0,
        }
    }
    refuse_others(others, ended)
}

/// Closes each client that connects while the frontend is served, until the session ends.
fn refuse_others(others: &UnixListener, ended: &EventFd) -> u64 {
    let mut refused = 0;
    let mut log = Throttle::default();
    loop {
        match readable([others.as_raw_fd(), ended.as_raw_fd()], None) {
            Ok([true, false]) => {}
            Ok([false, false]) => continue,
            _ => return refused,
        }
        // Only this thread accepts while the session runs, and Linux keeps a connection queued
        // after its client closes, so a readable listener has one to take.
        if let Ok((client, _)) = others.accept() {
            drop(client);
            refused += 1;
            log.log(
                "refused a client of the vhost-user socket: the frontend is connected (one \
                 frontend per backend)",
            );
        }
    }
}

/// One log line per [`LOG_EVERY`], the lines held back counted in the next.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    fn log(&mut self, line: &str) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < LOG_EVERY)
        {
            self.held += 1;
            return;
        }
        self.last = Some(now);
        match std::mem::take(&mut self.held) {
            0 => warn!("{line}"),
            held => warn!("{line} ({held} more like it not logged)"),
        }
    }
}
