//! `--fd` with a connected socket (how libvirt starts vhost-user backends: one end of a
//! socketpair). The vhost-user-backend daemon can only accept connections, so it accepts one on a
//! private listener, and this relay pumps bytes and passed file descriptors between that
//! connection and the given socket. Only the control plane goes through it: guest memory and
//! the eventfds are passed once, then used directly.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use log::debug;
use vhost::vhost_user::Listener;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Bytes relayed per receive (vhost-user messages are far smaller).
const RELAY_BUFFER: usize = 64 << 10;
/// File descriptors accepted per message (vhost-user sends at most 32, for memory regions).
const MAX_FDS: usize = 32;

/// Returns a listener whose one pending connection is relayed to `outer`.
pub fn bridge(outer: UnixStream) -> io::Result<Listener> {
    let dir = private_dir()?;
    let path = dir.join("relay.sock");
    let listener = Listener::new(&path, true).map_err(io::Error::other)?;
    // Queued in the listen backlog until the daemon accepts it.
    let inner = UnixStream::connect(&path)?;
    // The daemon only needs the listening fd: remove the name so nobody else can connect.
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    let (outer_rx, inner_rx) = (outer.try_clone()?, inner.try_clone()?);
    std::thread::Builder::new()
        .name("fd-relay-in".into())
        .spawn(move || pump(&outer_rx, &inner))?;
    std::thread::Builder::new()
        .name("fd-relay-out".into())
        .spawn(move || pump(&inner_rx, &outer))?;
    Ok(listener)
}

fn private_dir() -> io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "vhost-user-wddm-gpu-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(dir)
}

/// Copies everything `from` sends, with its file descriptors, to `to`, until either side closes.
fn pump(from: &UnixStream, to: &UnixStream) {
    let mut buf = vec![0u8; RELAY_BUFFER];
    let mut fds: [RawFd; MAX_FDS] = [-1; MAX_FDS];
    loop {
        let mut iov = [libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        // SAFETY: the iovec points into `buf`, which outlives the call and may hold any bytes.
        let received = unsafe { from.recv_with_fds(&mut iov, &mut fds) };
        let (len, nfds) = match received {
            Ok(counts) => counts,
            Err(error) if error.errno() == libc::EINTR => continue,
            Err(error) => {
                debug!("fd relay: receive ended: {error}");
                break;
            }
        };
        // SAFETY: recv_with_fds handed these `nfds` descriptors to this process; owning them
        // closes our copies once they are sent on.
        let owned: Vec<OwnedFd> = fds[..nfds]
            .iter()
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        if len == 0 && owned.is_empty() {
            break;
        }
        let raw: Vec<RawFd> = owned.iter().map(AsRawFd::as_raw_fd).collect();
        let sent = match to.send_with_fds(&[&buf[..len]], &raw) {
            Ok(sent) => sent,
            Err(error) => {
                debug!("fd relay: send ended: {error}");
                break;
            }
        };
        // The descriptors went with the first byte; the rest of a short send follows plainly.
        if sent < len && (&*to).write_all(&buf[sent..len]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
