//! `--fd` with a connected socket (how libvirt starts vhost-user backends: one end of a
//! socketpair). The vhost-user-backend daemon can only accept connections, so it accepts one on a
//! private listener, and this relay passes whole messages, each with its file descriptors,
//! between that connection and the given socket. Only the control plane goes through it: guest memory and
//! the eventfds are passed once, then used directly.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use log::{debug, warn};
use vhost::vhost_user::Listener;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// The largest message relayed: header and payload (vhost-user messages are far smaller).
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

/// Bytes of a vhost-user message header: request, flags, payload size (three `u32`).
const HEADER: usize = 12;

/// Relays whole vhost-user messages from `from` to `to`, each with the file descriptors that
/// came with it, until either side closes or sends something that is not a message. Reading
/// exactly one message at a time means a descriptor can never travel with the wrong message,
/// however the sender's writes were split or merged.
fn pump(from: &UnixStream, to: &UnixStream) {
    let mut message = vec![0u8; RELAY_BUFFER];
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(MAX_FDS);
    loop {
        fds.clear();
        if let Err(why) = receive(from, &mut message[..HEADER], &mut fds) {
            debug!("fd relay: {why}");
            break;
        }
        let size = u32::from_le_bytes([message[8], message[9], message[10], message[11]]) as usize;
        let Some(end) = HEADER.checked_add(size).filter(|&end| end <= message.len()) else {
            warn!("fd relay: a message of {size} bytes is larger than any vhost-user message; closing");
            break;
        };
        if let Err(why) = receive(from, &mut message[HEADER..end], &mut fds) {
            debug!("fd relay: {why}");
            break;
        }
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let sent = match to.send_with_fds(&[&message[..end]], &raw) {
            Ok(sent) => sent,
            Err(error) => {
                debug!("fd relay: send ended: {error}");
                break;
            }
        };
        // The descriptors went with the first byte; the rest of a short send follows plainly.
        if sent < end && (&*to).write_all(&message[sent..end]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Fills `part` from `from`, adding the descriptors that arrive to `fds` (at most [`MAX_FDS`]
/// per message). Fails at the end of the stream, on an error, or on too many descriptors.
fn receive(from: &UnixStream, part: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<(), String> {
    let mut filled = 0;
    while filled < part.len() {
        let mut received: [RawFd; MAX_FDS] = [-1; MAX_FDS];
        let rest = &mut part[filled..];
        let mut iov = [libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        }];
        // SAFETY: the iovec points into `part`, which outlives the call and may hold any bytes.
        let (len, nfds) = match unsafe { from.recv_with_fds(&mut iov, &mut received) } {
            Ok(counts) => counts,
            Err(error) if error.errno() == libc::EINTR => continue,
            Err(error) => return Err(format!("receive ended: {error}")),
        };
        // SAFETY: recv_with_fds handed these `nfds` descriptors to this process; owning them
        // closes our copies once they are sent on (or dropped).
        fds.extend(
            received[..nfds]
                .iter()
                .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }),
        );
        if fds.len() > MAX_FDS {
            return Err(format!("{} descriptors with one message", fds.len()));
        }
        if len == 0 {
            return Err("the peer closed".to_string());
        }
        filled += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// A vhost-user message: header (request, flags, size) and `payload`.
    fn message(request: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend(request.to_le_bytes());
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(u32::try_from(payload.len()).unwrap().to_le_bytes());
        bytes.extend(payload);
        bytes
    }

    fn inode(fd: RawFd) -> u64 {
        // SAFETY: fstat of a descriptor this test owns into a zeroed stat.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `stat` outlives the call.
        assert_eq!(unsafe { libc::fstat(fd, &mut stat) }, 0);
        stat.st_ino
    }

    /// Receives exactly `len` bytes and the descriptors that came with them.
    fn receive_message(from: &UnixStream, len: usize) -> (Vec<u8>, Vec<OwnedFd>) {
        let mut bytes = vec![0u8; len];
        let mut fds = Vec::new();
        receive(from, &mut bytes, &mut fds).unwrap();
        (bytes, fds)
    }

    #[test]
    fn messages_keep_their_own_descriptors_however_they_were_written() {
        let (sender, relay_in) = UnixStream::pair().unwrap();
        let (relay_out, receiver) = UnixStream::pair().unwrap();
        std::thread::spawn(move || pump(&relay_in, &relay_out));
        let first = std::fs::File::open("/proc/self/exe").unwrap();
        let second = tempfile();
        let one = message(5, &[1; 40]);
        let two = message(6, &[2; 8]);
        let three = message(7, &[3; 16]);
        // Two messages, each with its descriptor, back to back; the third in two writes.
        sender
            .send_with_fds(&[&one[..]], &[first.as_raw_fd()])
            .unwrap();
        sender
            .send_with_fds(&[&two[..]], &[second.as_raw_fd()])
            .unwrap();
        (&sender).write_all(&three[..5]).unwrap();
        (&sender).write_all(&three[5..]).unwrap();

        let (bytes, fds) = receive_message(&receiver, one.len());
        assert_eq!((bytes, fds.len()), (one, 1));
        assert_eq!(inode(fds[0].as_raw_fd()), first.metadata().unwrap().ino());
        let (bytes, fds) = receive_message(&receiver, two.len());
        assert_eq!((bytes, fds.len()), (two, 1));
        assert_eq!(inode(fds[0].as_raw_fd()), second.metadata().unwrap().ino());
        let (bytes, fds) = receive_message(&receiver, three.len());
        assert_eq!((bytes, fds.len()), (three, 0));
    }

    #[test]
    fn a_message_larger_than_any_vhost_user_message_closes_the_relay() {
        let (sender, relay_in) = UnixStream::pair().unwrap();
        let (relay_out, receiver) = UnixStream::pair().unwrap();
        let pumping = std::thread::spawn(move || pump(&relay_in, &relay_out));
        let mut header = message(1, &[]);
        header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        (&sender).write_all(&header).unwrap();
        pumping.join().unwrap();
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut &receiver, &mut rest).unwrap();
        assert!(rest.is_empty(), "nothing of it was relayed");
    }

    fn tempfile() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("wddm-relay-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        file
    }
}
