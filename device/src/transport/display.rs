//! The display through QEMU: [`QemuDisplay`] turns what the model shows ([`DisplaySink`]) into
//! vhost-user-gpu messages on the socket QEMU hands over with VHOST_USER_GPU_SET_SOCKET
//! (QEMU's vhost-user-gpu protocol document, interop/vhost-user-gpu): SCANOUT (a size, or 0x0 to disable), UPDATE (a
//! rectangle with its PIXMAN x8r8g8b8 pixels), CURSOR_UPDATE, CURSOR_POS and CURSOR_POS_HIDE.
//! None of these is answered, so the backend never negotiates protocol features: it needs
//! neither QEMU's EDID nor DMABUF.
//!
//! Messages are written by a thread of their own: QEMU reads the socket in its main loop, which
//! may be waiting for a vhost-user reply from this backend, so a vring worker blocked on a full
//! socket could deadlock both. Pending bytes are bounded; past the bound updates are dropped
//! (the next flush repaints). When QEMU closes the socket (a device stop or reset) the write
//! fails with EPIPE (SIGPIPE is ignored by the Rust runtime): the thread logs once, and every
//! later message is counted as dropped until the next SET_SOCKET brings a new socket.
//!
//! While a kick's requests are answered the messages are held and passed to the thread after
//! the answers are on the used ring ([`DisplaySink::hold`]): waking the thread first would put
//! a thread hand-off in every fenced flush's round trip. Bands a large transfer streams
//! ([`DisplaySink::stream`]) go at once, after what was held, and their buffers come back from
//! the writer for the next bands, so frame after frame touches no fresh pages.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use log::{info, warn};
use vhost::vhost_user::gpu_message::{
    VhostUserGpuCursorPos, VhostUserGpuCursorUpdate, VhostUserGpuScanout, VhostUserGpuUpdate,
};
use vhost::vhost_user::GpuBackend;

use crate::display::pixel_buffer::PixelBuffer;
use crate::display::rect::Rect;
use crate::display::sink::{CursorImage, DisplayPixels, DisplaySink, ScanoutState, CURSOR_BYTES};
use crate::observe::stats::display::{DisplayCounters, SentMessage, Unsent};
use crate::support::sync::lock;

/// Most bytes of messages waiting for the writer thread.
const MAX_PENDING_BYTES: usize = 64 << 20;
/// Most bytes of sent update buffers kept for the next bands: a 4K frame's worth, so that
/// streaming frame after frame touches no fresh pages.
const MAX_SPARE_BYTES: usize = 32 << 20;

/// Band buffers the writer has sent, for the next bands.
#[derive(Default)]
struct SpareBands {
    buffers: Vec<PixelBuffer>,
    bytes: usize,
}

impl SpareBands {
    /// A buffer of `len` bytes, a sent one when there is one (most recently sent first).
    fn take(&mut self, len: usize) -> PixelBuffer {
        let mut buffer = self.buffers.pop().unwrap_or_default();
        self.bytes -= buffer.capacity().min(self.bytes);
        buffer.resize(len);
        buffer
    }

    fn give_back(&mut self, buffer: PixelBuffer) {
        if self.bytes + buffer.capacity() <= MAX_SPARE_BYTES {
            self.bytes += buffer.capacity();
            self.buffers.push(buffer);
        }
    }
}

/// One message for QEMU.
enum Message {
    Scanout(VhostUserGpuScanout),
    Update(VhostUserGpuUpdate, DisplayPixels),
    Cursor(VhostUserGpuCursorUpdate, Box<[u8; CURSOR_BYTES]>),
    CursorPos(VhostUserGpuCursorPos),
    CursorHide(VhostUserGpuCursorPos),
}

impl Message {
    fn bytes(&self) -> usize {
        match self {
            Self::Update(_, pixels) => pixels.as_slice().len(),
            Self::Cursor(..) => CURSOR_BYTES,
            _ => 0,
        }
    }

    /// How the counters see it once written.
    fn counted_as(&self) -> SentMessage {
        match self {
            Self::Scanout(_) => SentMessage::Scanout,
            Self::Update(_, pixels) => {
                let bytes = pixels.as_slice().len() as u64;
                match pixels {
                    DisplayPixels::Band(_) => SentMessage::StreamedBand { bytes },
                    _ => SentMessage::Update { bytes },
                }
            }
            Self::Cursor(..) => SentMessage::CursorImage,
            Self::CursorPos(_) => SentMessage::CursorMove,
            Self::CursorHide(_) => SentMessage::CursorHide,
        }
    }
}

/// The display socket QEMU handed over, written by a thread of its own.
pub struct QemuDisplay {
    messages: Option<Sender<Message>>,
    counters: Arc<DisplayCounters>,
    pending: Arc<AtomicUsize>,
    spare: Arc<Mutex<SpareBands>>,
    dropped_logged: bool,
    /// Messages of the kick being answered, in order; their buffer is kept between kicks.
    held: Vec<Message>,
    holding: bool,
}

impl QemuDisplay {
    /// Starts the writer thread for `socket`, counting into `counters`.
    pub fn start(socket: GpuBackend, counters: Arc<DisplayCounters>) -> Self {
        counters.socket();
        let writer_counters = counters.clone();
        let (sender, receiver) = channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let writer_pending = pending.clone();
        let spare = Arc::new(Mutex::new(SpareBands::default()));
        let writer_spare = spare.clone();
        let spawned = std::thread::Builder::new()
            .name("wddm-gpu-display".into())
            .spawn(move || {
                let writer = Writer {
                    socket,
                    pending: writer_pending,
                    spare: writer_spare,
                    counters: writer_counters,
                };
                writer.run(&receiver);
            });
        let messages = match spawned {
            Ok(_) => Some(sender),
            Err(error) => {
                warn!("cannot start the display thread: {error}; nothing will be shown");
                None
            }
        };
        Self {
            messages,
            counters,
            pending,
            spare,
            dropped_logged: false,
            held: Vec::new(),
            holding: false,
        }
    }

    fn send(&mut self, message: Message) {
        self.queue(message, false);
    }

    /// Queues `message` for the writer, held while a kick is answered unless `at_once`.
    /// Returns whether it was taken (not dropped).
    fn queue(&mut self, message: Message, at_once: bool) -> bool {
        if at_once {
            // In order: what the kick showed before goes first.
            self.pass_on_held();
        }
        let Some(messages) = &self.messages else {
            self.counters.unsent(Unsent::SocketClosed);
            return false;
        };
        let bytes = message.bytes();
        // One message of any size may wait (a whole 4095x4095 frame is 64 MiB); more only
        // within the bound.
        let pending = self.pending.load(Ordering::Acquire);
        if bytes > 0 && pending > 0 && pending.saturating_add(bytes) > MAX_PENDING_BYTES {
            if !std::mem::replace(&mut self.dropped_logged, true) {
                warn!("QEMU is not reading the display socket: display updates dropped");
            }
            self.counters.unsent(Unsent::NotReading);
            return false;
        }
        self.pending.fetch_add(bytes, Ordering::AcqRel);
        if self.holding && !at_once {
            self.held.push(message);
        } else if messages.send(message).is_err() {
            // The writer ended (the socket failed, logged there).
            self.messages = None;
            self.counters.unsent(Unsent::SocketClosed);
            return false;
        }
        true
    }

    fn pass_on_held(&mut self) {
        let mut held = self.held.drain(..);
        if let Some(messages) = &self.messages {
            for message in held.by_ref() {
                if messages.send(message).is_err() {
                    // The writer ended: this one and the rest are lost.
                    self.messages = None;
                    self.counters.unsent(Unsent::SocketClosed);
                    break;
                }
            }
        }
        for _ in held {
            self.counters.unsent(Unsent::SocketClosed);
        }
    }
}

fn update_of(scanout: u32, rect: Rect) -> VhostUserGpuUpdate {
    VhostUserGpuUpdate {
        scanout_id: scanout,
        x: rect.x,
        y: rect.y,
        width: rect.width,
        height: rect.height,
    }
}

/// The writer thread's side: writes each message, counts it, and gives sent band buffers back.
struct Writer {
    socket: GpuBackend,
    pending: Arc<AtomicUsize>,
    spare: Arc<Mutex<SpareBands>>,
    counters: Arc<DisplayCounters>,
}

impl Writer {
    /// Writes messages until the display is dropped (a new socket replaced it, or the GPU
    /// went). Once the socket has failed, every message is counted as lost instead.
    fn run(&self, receiver: &Receiver<Message>) {
        let mut closed = false;
        for message in receiver {
            self.pending.fetch_sub(message.bytes(), Ordering::AcqRel);
            if closed {
                self.counters.unsent(Unsent::SocketClosed);
                continue;
            }
            if let Err(error) = self.write(&message) {
                info!("display socket closed ({error}); nothing more is shown until QEMU hands over a new one");
                self.counters.unsent(Unsent::SocketClosed);
                closed = true;
                continue;
            }
            self.counters.sent(message.counted_as());
            if let Message::Update(_, DisplayPixels::Band(buffer)) = message {
                lock(&self.spare).give_back(buffer);
            }
        }
    }

    fn write(&self, message: &Message) -> std::io::Result<()> {
        let socket = &self.socket;
        match message {
            Message::Scanout(scanout) => socket.set_scanout(scanout),
            Message::Update(update, pixels) => socket.update_scanout(update, pixels.as_slice()),
            Message::Cursor(update, image) => socket.cursor_update(update, image),
            Message::CursorPos(pos) => socket.cursor_pos(pos),
            Message::CursorHide(pos) => socket.cursor_pos_hide(pos),
        }
    }
}

impl DisplaySink for QemuDisplay {
    fn scanout(&mut self, scanout: u32, state: ScanoutState) {
        let (width, height) = match state {
            ScanoutState::Enabled { width, height } => (width, height),
            ScanoutState::Disabled => (0, 0),
        };
        self.send(Message::Scanout(VhostUserGpuScanout {
            scanout_id: scanout,
            width,
            height,
        }));
    }

    fn update(&mut self, scanout: u32, rect: Rect, pixels: DisplayPixels) {
        self.send(Message::Update(update_of(scanout, rect), pixels));
    }

    fn band_buffer(&mut self, len: usize) -> PixelBuffer {
        lock(&self.spare).take(len)
    }

    fn stream(&mut self, scanout: u32, rect: Rect, pixels: PixelBuffer) -> bool {
        let update = update_of(scanout, rect);
        self.queue(Message::Update(update, DisplayPixels::Band(pixels)), true)
    }

    fn cursor(&mut self, scanout: u32, x: u32, y: u32, image: Option<&CursorImage>) {
        let pos = VhostUserGpuCursorPos {
            scanout_id: scanout,
            x,
            y,
        };
        match image {
            Some(image) => self.send(Message::Cursor(
                VhostUserGpuCursorUpdate {
                    pos,
                    hot_x: image.hot_x,
                    hot_y: image.hot_y,
                },
                image.pixels.clone(),
            )),
            None => self.send(Message::CursorPos(pos)),
        }
    }

    fn hide_cursor(&mut self, scanout: u32) {
        self.send(Message::CursorHide(VhostUserGpuCursorPos {
            scanout_id: scanout,
            x: 0,
            y: 0,
        }));
    }

    fn hold(&mut self) {
        self.holding = true;
    }

    fn release(&mut self) {
        self.holding = false;
        self.pass_on_held();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use super::*;
    use crate::observe::stats::display::DisplaySnapshot;

    const HEADER_BYTES: usize = 12;
    const UPDATE_HEAD_BYTES: usize = 20;

    fn one_pixel_update(display: &mut QemuDisplay, x: u32) {
        let rect = Rect {
            x,
            y: 0,
            width: 1,
            height: 1,
        };
        display.update(0, rect, vec![u8::try_from(x).unwrap(); 4].into());
    }

    /// How long the peer waits for a message before a read fails.
    const READ_TIMEOUT: Duration = Duration::from_secs(10);

    /// A display writing to a socket, and the peer end of it (reads wait [`READ_TIMEOUT`]).
    fn connected(counters: Arc<DisplayCounters>) -> (QemuDisplay, UnixStream) {
        let (ours, peer) = UnixStream::pair().unwrap();
        peer.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        let display = QemuDisplay::start(GpuBackend::from_stream(ours), counters);
        (display, peer)
    }

    /// No byte reaches `peer` within 200 ms; then reads wait [`READ_TIMEOUT`] again.
    fn nothing_arrives(peer: &mut UnixStream, what: &str) {
        peer.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        let read = peer.read(&mut byte).map_err(|e| e.kind());
        assert!(
            matches!(read, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "{what}: {read:?}"
        );
        peer.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    }

    /// Polls `check` until it gives a value, for at most 10 s.
    fn eventually<T>(what: &str, check: impl Fn() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Reads one UPDATE message and returns its x.
    fn read_update_x(peer: &mut UnixStream) -> u32 {
        let mut message = [0u8; HEADER_BYTES + UPDATE_HEAD_BYTES + 4];
        peer.read_exact(&mut message).expect("an UPDATE");
        u32::from_ne_bytes(
            message[HEADER_BYTES + 4..HEADER_BYTES + 8]
                .try_into()
                .unwrap(),
        )
    }

    #[test]
    fn what_a_kick_shows_reaches_the_socket_only_after_release_and_in_order() {
        let (mut display, mut peer) = connected(Arc::default());

        display.hold();
        one_pixel_update(&mut display, 1);
        one_pixel_update(&mut display, 2);
        nothing_arrives(&mut peer, "a held message reached the socket");

        display.release();
        one_pixel_update(&mut display, 3);
        let order: Vec<u32> = (0..3).map(|_| read_update_x(&mut peer)).collect();
        assert_eq!(order, [1, 2, 3]);
    }

    #[test]
    fn without_a_hold_messages_go_out_at_once() {
        let (mut display, mut peer) = connected(Arc::default());
        one_pixel_update(&mut display, 7);
        assert_eq!(read_update_x(&mut peer), 7);
    }

    #[test]
    fn a_streamed_band_goes_out_during_a_hold_after_what_was_held() {
        let (mut display, mut peer) = connected(Arc::default());

        display.hold();
        one_pixel_update(&mut display, 1);
        let mut band = display.band_buffer(4);
        band.fill(5);
        let band_rect = Rect {
            x: 5,
            y: 0,
            width: 1,
            height: 1,
        };
        assert!(display.stream(0, band_rect, band));
        one_pixel_update(&mut display, 6);
        // Still held: the band and what the kick showed before it are out, not what came after.
        assert_eq!(read_update_x(&mut peer), 1);
        assert_eq!(read_update_x(&mut peer), 5);
        nothing_arrives(
            &mut peer,
            "a message after the band left before the release",
        );
        display.release();
        assert_eq!(read_update_x(&mut peer), 6);
    }

    #[test]
    fn sent_bands_are_handed_out_again_and_the_spares_are_bounded() {
        let (mut display, mut peer) = connected(Arc::default());
        let rect = Rect {
            x: 0,
            y: 0,
            width: 256,
            height: 1,
        };
        let band = display.band_buffer(1024);
        let first = band.as_ptr();
        assert!(display.stream(0, rect, band));
        let mut message = vec![0u8; HEADER_BYTES + UPDATE_HEAD_BYTES + 1024];
        peer.read_exact(&mut message).unwrap();
        // The writer gives the buffer back once its bytes are on the socket.
        eventually("the band never came back", || {
            (!lock(&display.spare).buffers.is_empty()).then_some(())
        });
        let again = display.band_buffer(512);
        assert_eq!(again.as_ptr(), first, "the sent band's memory, reused");
        assert_eq!(again.len(), 512);

        let mut spares = SpareBands::default();
        for _ in 0..(MAX_SPARE_BYTES / (1 << 20) + 4) {
            let mut buffer = PixelBuffer::default();
            buffer.resize(1 << 20);
            spares.give_back(buffer);
        }
        assert!(spares.bytes <= MAX_SPARE_BYTES);
        assert_eq!(spares.buffers.len(), MAX_SPARE_BYTES / (1 << 20));
        let taken = spares.take(2 << 20);
        assert_eq!(taken.len(), 2 << 20, "a spare too small grows");
        assert_eq!(spares.bytes, MAX_SPARE_BYTES - (1 << 20));
    }

    /// The counters once they satisfy `until` (the writer counts after each write).
    fn counted(
        counters: &DisplayCounters,
        until: impl Fn(&DisplaySnapshot) -> bool,
    ) -> DisplaySnapshot {
        eventually("the counters never got there", || {
            Some(counters.snapshot()).filter(|snapshot| until(snapshot))
        })
    }

    #[test]
    fn every_message_written_is_counted_by_kind_with_its_pixel_bytes() {
        let counters = Arc::new(DisplayCounters::default());
        let (mut display, mut peer) = connected(counters.clone());
        display.scanout(
            0,
            ScanoutState::Enabled {
                width: 64,
                height: 64,
            },
        );
        one_pixel_update(&mut display, 1);
        let band_rect = Rect {
            x: 0,
            y: 0,
            width: 4,
            height: 2,
        };
        let band = display.band_buffer(32);
        assert!(display.stream(0, band_rect, band));
        let image = CursorImage {
            hot_x: 1,
            hot_y: 2,
            pixels: Box::new([0; CURSOR_BYTES]),
        };
        display.cursor(0, 10, 20, Some(&image));
        display.cursor(0, 11, 21, None);
        display.hide_cursor(0);

        let snapshot = counted(&counters, |s| s.cursor_hides == 1);
        assert_eq!(
            snapshot,
            DisplaySnapshot {
                sockets: 1,
                scanouts: 1,
                updates: 1,
                update_bytes: 4,
                streamed_bands: 1,
                streamed_bytes: 32,
                cursor_images: 1,
                cursor_moves: 1,
                cursor_hides: 1,
                dropped_not_reading: 0,
                dropped_socket_closed: 0,
            }
        );
        // Counted once written: the peer has every byte of them.
        let expected = HEADER_BYTES * 6
            + 12
            + (UPDATE_HEAD_BYTES + 4)
            + (UPDATE_HEAD_BYTES + 32)
            + (20 + CURSOR_BYTES)
            + 12
            + 12;
        let mut all = vec![0u8; expected];
        peer.read_exact(&mut all).unwrap();
    }

    #[test]
    fn messages_after_the_socket_closed_are_counted_as_dropped() {
        let counters = Arc::new(DisplayCounters::default());
        let (mut display, peer) = connected(counters.clone());
        drop(peer);
        // Every one is lost, whether it was queued before or after the write failed.
        for x in 1..5 {
            one_pixel_update(&mut display, x);
        }
        counted(&counters, |s| s.dropped_socket_closed == 4);
        for x in 5..8 {
            one_pixel_update(&mut display, x);
        }
        let snapshot = counted(&counters, |s| s.dropped_socket_closed == 7);
        assert_eq!(snapshot.updates, 0);
        assert_eq!(snapshot.dropped_not_reading, 0);
        // Nothing waits: the lost messages' bytes are no longer pending.
        assert_eq!(display.pending.load(Ordering::Acquire), 0);
    }
}
