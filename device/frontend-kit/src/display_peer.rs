//! QEMU's display side of the vhost-user-gpu protocol (`docs/interop/vhost-user-gpu.rst` in
//! QEMU; `hw/display/vhost-user-gpu.c` is QEMU's own): the frontend makes a socketpair, hands
//! one end to the backend with `VHOST_USER_GPU_SET_SOCKET` ([`Harness::set_gpu_socket`]) and
//! serves the other on a thread of its own ([`DisplayPeer`]).
//!
//! The peer answers what a backend asks (protocol features, display info, EDID, the release of
//! a DMABUF update) and takes what it sends (scanouts, updates, cursor), counting it. UPDATE
//! payloads (a whole 1920x1080 frame is 8 MiB) are drained as they come, into one reused
//! buffer, so a backend writing a frame is never held up by a slow display. Nothing is drawn.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WddmGpuRespDisplayInfo, VIRTIO_GPU_RESP_OK_DISPLAY_INFO};
use wddm_gpu_abi::display::{WddmGpuRespEdid, VIRTIO_GPU_RESP_OK_EDID};
use wddm_gpu_abi::size_of_u32;
use zerocopy::IntoBytes;

use crate::harness::Harness;

pub mod c_backend;

/// `VHOST_USER_GPU_SET_SOCKET`: a frontend message of vhost-user-gpu devices.
pub const VHOST_USER_GPU_SET_SOCKET: u32 = 33;
/// The vhost-user header's version bits (every frontend message carries them).
const VHOST_USER_VERSION: u32 = 0x1;

/// Requests a backend sends on the GPU socket.
pub const GPU_GET_PROTOCOL_FEATURES: u32 = 1;
pub const GPU_SET_PROTOCOL_FEATURES: u32 = 2;
pub const GPU_GET_DISPLAY_INFO: u32 = 3;
pub const GPU_CURSOR_POS: u32 = 4;
pub const GPU_CURSOR_POS_HIDE: u32 = 5;
pub const GPU_CURSOR_UPDATE: u32 = 6;
pub const GPU_SCANOUT: u32 = 7;
pub const GPU_UPDATE: u32 = 8;
pub const GPU_DMABUF_SCANOUT: u32 = 9;
pub const GPU_DMABUF_UPDATE: u32 = 10;
pub const GPU_GET_EDID: u32 = 11;
pub const GPU_DMABUF_SCANOUT2: u32 = 12;
/// The header flag of the display's replies.
pub const GPU_FLAG_REPLY: u32 = 0x4;
/// Protocol feature bit: the display answers GET_EDID. Offered because a backend whose
/// driver acked `VIRTIO_GPU_F_EDID` refuses a display without it (QEMU's C backend exits).
/// `DMABUF2` is not offered: this display takes no DMABUF.
pub const GPU_PROTOCOL_F_EDID: u64 = 1 << 0;

/// The header of every message: request, flags, payload size (u32 each, native order).
const HEADER_BYTES: usize = 12;
/// `VhostUserGpuUpdate` before its pixels: scanout id, x, y, width, height.
const UPDATE_HEADER_BYTES: usize = 20;
/// The largest payload other than an UPDATE's pixels (a cursor update is 16 KiB + 20).
const MAX_SMALL_PAYLOAD: usize = 64 << 10;
/// Bytes per pixel of an UPDATE (`PIXMAN_x8r8g8b8`).
const UPDATE_BYTES_PER_PIXEL: u64 = 4;

/// The display mode the peer reports for scanout 0 (the only one enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplayMode {
    pub width: u32,
    pub height: u32,
}

/// A rectangle an UPDATE covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateRect {
    pub scanout_id: u32,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// What the display has seen so far.
#[derive(Clone, Debug, Default)]
pub struct DisplaySeen {
    /// The features the backend enabled with SET_PROTOCOL_FEATURES.
    pub protocol_features: Option<u64>,
    pub display_info_asked: u64,
    pub edid_asked: u64,
    /// The last SCANOUT: scanout id, width, height.
    pub scanout: Option<(u32, u32, u32)>,
    /// UPDATE messages received in full, and their pixel bytes.
    pub updates: u64,
    pub update_bytes: u64,
    pub last_update: Option<UpdateRect>,
    pub dmabuf_messages: u64,
    pub cursor_messages: u64,
    /// What the backend sent that breaks the protocol; the peer stops at the first.
    pub protocol_error: Option<String>,
    /// The backend closed its end (or the peer stopped at a protocol error).
    pub closed: bool,
}

/// State shared with the serving thread.
#[derive(Default)]
struct Shared {
    seen: Mutex<Seen>,
    changed: Condvar,
}

#[derive(Default)]
struct Seen {
    public: DisplaySeen,
    /// The screen the UPDATEs paint since [`DisplayPeer::capture_screen`] (for a
    /// pixel-for-pixel check), as QEMU's display surface would hold it.
    screen: Option<Screen>,
}

/// Scanout 0's pixels, B, G, R, X, row after row.
struct Screen {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

/// What a screen holds where no UPDATE has painted yet.
pub const UNPAINTED: u8 = 0xa5;

impl Screen {
    /// Paints `rect`'s `pixels` (4 bytes each, row after row) in; refuses a rectangle outside.
    fn paint(&mut self, rect: UpdateRect, pixels: &[u8]) -> Result<(), String> {
        let right = u64::from(rect.x) + u64::from(rect.width);
        let bottom = u64::from(rect.y) + u64::from(rect.height);
        if rect.scanout_id != 0 || right > u64::from(self.width) || bottom > u64::from(self.height)
        {
            return Err(format!(
                "UPDATE {rect:?} outside the {}x{} scanout 0",
                self.width, self.height
            ));
        }
        let row_bytes = rect.width as usize * 4;
        for (row, line) in pixels.chunks_exact(row_bytes).enumerate() {
            let at = ((rect.y as usize + row) * self.width as usize + rect.x as usize) * 4;
            self.pixels[at..at + row_bytes].copy_from_slice(line);
        }
        Ok(())
    }
}

/// QEMU's display side of one backend's GPU socket, served on its own thread until dropped.
pub struct DisplayPeer {
    shared: Arc<Shared>,
    mode: DisplayMode,
    /// The peer's end, kept to shut it down (which ends the thread's blocking read).
    stream: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl DisplayPeer {
    /// Starts serving a new socketpair reporting `mode` for scanout 0; returns the peer and the
    /// backend's end, for [`Harness::set_gpu_socket`].
    pub fn start(mode: DisplayMode) -> (Self, UnixStream) {
        let (ours, theirs) = UnixStream::pair().expect("socketpair for the GPU socket");
        let shared = Arc::new(Shared::default());
        let reader = ours.try_clone().expect("a second handle on the GPU socket");
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("display-peer".to_string())
                .spawn(move || serve(reader, mode, &shared))
                .expect("display peer thread")
        };
        let peer = Self {
            shared,
            mode,
            stream: ours,
            thread: Some(thread),
        };
        (peer, theirs)
    }

    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.shared.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of what the display has seen so far.
    pub fn seen(&self) -> DisplaySeen {
        self.lock().public.clone()
    }

    /// Waits at most `timeout` until `done` holds for what the display has seen; returns what
    /// it has seen then, or why not (a protocol error, a closed socket, the time).
    pub fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&DisplaySeen) -> bool,
    ) -> Result<DisplaySeen, String> {
        let deadline = Instant::now() + timeout;
        let mut seen = self.lock();
        loop {
            if done(&seen.public) {
                return Ok(seen.public.clone());
            }
            if let Some(error) = &seen.public.protocol_error {
                return Err(format!("waiting for {what}: protocol error: {error}"));
            }
            if seen.public.closed {
                return Err(format!(
                    "waiting for {what}: the backend closed its GPU socket ({:?})",
                    seen.public
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no {what} within {timeout:?} (the display saw {:?})",
                    seen.public
                ));
            }
            seen = self
                .shared
                .changed
                .wait_timeout(seen, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits at most `timeout` until UPDATEs with `bytes` pixel bytes in all have arrived in
    /// full (a backend may send a flushed rectangle as one UPDATE or as bands).
    pub fn wait_update_bytes(&self, bytes: u64, timeout: Duration) -> Result<DisplaySeen, String> {
        self.wait_until(timeout, &format!("{bytes} bytes of UPDATEs"), |seen| {
            seen.update_bytes >= bytes
        })
    }

    /// From now on paints every UPDATE into a screen of the mode's size, all [`UNPAINTED`] at
    /// first, for [`Self::take_screen`].
    pub fn capture_screen(&self) {
        let DisplayMode { width, height } = self.mode;
        self.lock().screen = Some(Screen {
            width,
            height,
            pixels: vec![UNPAINTED; width as usize * height as usize * 4],
        });
    }

    /// The screen painted since [`Self::capture_screen`], which stops painting.
    pub fn take_screen(&self) -> Option<Vec<u8>> {
        self.lock().screen.take().map(|screen| screen.pixels)
    }
}

impl Drop for DisplayPeer {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Harness {
    /// `VHOST_USER_GPU_SET_SOCKET` with `socket` (the backend's end of a [`DisplayPeer`]), as
    /// QEMU sends it when the guest sets DRIVER_OK, before the device starts: no reply is
    /// asked for (QEMU asks none). Our end is closed here, as QEMU closes it.
    pub fn set_gpu_socket(&mut self, socket: UnixStream) {
        let mut header = [0u8; HEADER_BYTES];
        header[0..4].copy_from_slice(&VHOST_USER_GPU_SET_SOCKET.to_le_bytes());
        header[4..8].copy_from_slice(&VHOST_USER_VERSION.to_le_bytes());
        send_with_fd(self.frontend.as_raw_fd(), &header, socket.as_raw_fd())
            .unwrap_or_else(|error| panic!("VHOST_USER_GPU_SET_SOCKET: {error}"));
    }
}

/// Writes `bytes` on the socket `fd` in one message carrying `passed` (SCM_RIGHTS).
fn send_with_fd(fd: i32, bytes: &[u8], passed: i32) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // u64 words keep the control buffer aligned for a cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(size_of_u32::<i32>()) } as usize;
    assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space;
    // SAFETY: the control buffer holds `space` bytes, room for one cmsghdr with one fd; the
    // macros only compute addresses inside it.
    let sent = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&message);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of_u32::<i32>()) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), passed);
        libc::sendmsg(fd, &message, 0)
    };
    match usize::try_from(sent) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(n) => Err(std::io::Error::other(format!(
            "sent {n} of {} bytes",
            bytes.len()
        ))),
        Err(_) => Err(std::io::Error::last_os_error()),
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// A reply: header (the request's type, REPLY) and `payload`.
fn reply(stream: &mut UnixStream, request: u32, payload: &[u8]) -> std::io::Result<()> {
    let mut message = Vec::with_capacity(HEADER_BYTES + payload.len());
    message.extend_from_slice(&request.to_ne_bytes());
    message.extend_from_slice(&GPU_FLAG_REPLY.to_ne_bytes());
    message.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_ne_bytes());
    message.extend_from_slice(payload);
    stream.write_all(&message)
}

/// `virtio_gpu_resp_display_info`: scanout 0 enabled at `mode`, the others off.
fn display_info(mode: DisplayMode) -> Vec<u8> {
    let mut info = WddmGpuRespDisplayInfo {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_DISPLAY_INFO),
        ..Default::default()
    };
    info.pmodes[0].rect = [0, 0, mode.width, mode.height];
    info.pmodes[0].enabled = 1;
    info.as_bytes().to_vec()
}

/// `virtio_gpu_resp_edid` with no blob (size 0): nothing here reads a monitor's EDID.
fn edid() -> Vec<u8> {
    WddmGpuRespEdid {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_EDID),
        size: 0,
        padding: 0,
        edid: [0; 1024],
    }
    .as_bytes()
    .to_vec()
}

/// Why serving stopped.
enum Stop {
    Closed,
    Protocol(String),
}

impl From<std::io::Error> for Stop {
    fn from(_: std::io::Error) -> Self {
        Stop::Closed
    }
}

/// The serving thread: one message at a time until the socket closes or breaks the protocol.
fn serve(mut stream: UnixStream, mode: DisplayMode, shared: &Shared) {
    let mut pixels = Vec::new();
    let stop = loop {
        if let Err(stop) = serve_one(&mut stream, mode, shared, &mut pixels) {
            break stop;
        }
    };
    let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
    if let Stop::Protocol(why) = stop {
        seen.public.protocol_error = Some(why);
    }
    seen.public.closed = true;
    shared.changed.notify_all();
}

fn serve_one(
    stream: &mut UnixStream,
    mode: DisplayMode,
    shared: &Shared,
    pixels: &mut Vec<u8>,
) -> Result<(), Stop> {
    let mut header = [0u8; HEADER_BYTES];
    stream.read_exact(&mut header)?;
    let (request, size) = (u32_at(&header, 0), u32_at(&header, 8) as usize);
    if request == GPU_UPDATE {
        return take_update(stream, size, shared, pixels);
    }
    if size > MAX_SMALL_PAYLOAD {
        return Err(Stop::Protocol(format!(
            "request {request} with a {size}-byte payload"
        )));
    }
    let mut payload = vec![0u8; size];
    stream.read_exact(&mut payload)?;
    let expect_size = |expected: usize| {
        if size == expected {
            Ok(())
        } else {
            Err(Stop::Protocol(format!(
                "request {request} with a {size}-byte payload, expected {expected}"
            )))
        }
    };
    let note = |change: &dyn Fn(&mut DisplaySeen)| {
        let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut seen.public);
        shared.changed.notify_all();
    };
    match request {
        GPU_GET_PROTOCOL_FEATURES => {
            expect_size(0)?;
            reply(stream, request, &GPU_PROTOCOL_F_EDID.to_ne_bytes())?;
        }
        GPU_SET_PROTOCOL_FEATURES => {
            expect_size(8)?;
            let features = u64::from_ne_bytes(payload[..8].try_into().unwrap());
            if features & !GPU_PROTOCOL_F_EDID != 0 {
                return Err(Stop::Protocol(format!(
                    "SET_PROTOCOL_FEATURES {features:#x}: more than offered ({GPU_PROTOCOL_F_EDID:#x})"
                )));
            }
            note(&|seen| seen.protocol_features = Some(features));
        }
        GPU_GET_DISPLAY_INFO => {
            expect_size(0)?;
            reply(stream, request, &display_info(mode))?;
            note(&|seen| seen.display_info_asked += 1);
        }
        GPU_GET_EDID => {
            expect_size(4)?;
            reply(stream, request, &edid())?;
            note(&|seen| seen.edid_asked += 1);
        }
        GPU_SCANOUT => {
            expect_size(12)?;
            let scanout = (
                u32_at(&payload, 0),
                u32_at(&payload, 4),
                u32_at(&payload, 8),
            );
            note(&|seen| seen.scanout = Some(scanout));
        }
        GPU_DMABUF_SCANOUT | GPU_DMABUF_SCANOUT2 => {
            // The descriptor, if any, was dropped by the kernel with the plain read.
            note(&|seen| seen.dmabuf_messages += 1);
        }
        GPU_DMABUF_UPDATE => {
            // The backend waits for this release before it answers the flush.
            reply(stream, request, &[])?;
            note(&|seen| seen.dmabuf_messages += 1);
        }
        GPU_CURSOR_POS | GPU_CURSOR_POS_HIDE | GPU_CURSOR_UPDATE => {
            note(&|seen| seen.cursor_messages += 1);
        }
        other => {
            return Err(Stop::Protocol(format!(
                "unknown request {other} ({size}-byte payload)"
            )))
        }
    }
    Ok(())
}

/// An UPDATE: its rectangle, then width x height x 4 bytes of pixels, drained into `pixels`.
fn take_update(
    stream: &mut UnixStream,
    size: usize,
    shared: &Shared,
    pixels: &mut Vec<u8>,
) -> Result<(), Stop> {
    let Some(pixel_bytes) = size.checked_sub(UPDATE_HEADER_BYTES) else {
        return Err(Stop::Protocol(format!("UPDATE with a {size}-byte payload")));
    };
    let mut head = [0u8; UPDATE_HEADER_BYTES];
    stream.read_exact(&mut head)?;
    let rect = UpdateRect {
        scanout_id: u32_at(&head, 0),
        x: u32_at(&head, 4),
        y: u32_at(&head, 8),
        width: u32_at(&head, 12),
        height: u32_at(&head, 16),
    };
    let expected = u64::from(rect.width) * u64::from(rect.height) * UPDATE_BYTES_PER_PIXEL;
    if expected != pixel_bytes as u64 {
        return Err(Stop::Protocol(format!(
            "UPDATE {rect:?} carries {pixel_bytes} bytes of pixels, expected {expected}"
        )));
    }
    pixels.resize(pixel_bytes, 0);
    stream.read_exact(pixels)?;
    let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.public.updates += 1;
    seen.public.update_bytes += pixel_bytes as u64;
    seen.public.last_update = Some(rect);
    let painted = seen
        .screen
        .as_mut()
        .map_or(Ok(()), |screen| screen.paint(rect, pixels));
    shared.changed.notify_all();
    painted.map_err(Stop::Protocol)
}
