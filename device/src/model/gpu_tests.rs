//! The GPU behind its router and the kick's display hold, over a real GPU and display: a kick that carries no
//! display command never takes the display lock, and one that does holds the display's output
//! once, from before its first display command until after its last answer.

use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use wddm_gpu_abi::build::display::{
    move_cursor, rect, resource_create_2d, resource_flush, set_scanout,
};
use wddm_gpu_abi::build::fence;
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
    WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::display::VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM;
use wddm_gpu_abi::request::{decode_control, decode_cursor};
use zerocopy::{FromBytes, IntoBytes};

use super::*;
use crate::display::pixel_buffer::PixelBuffer;
use crate::display::rect::Rect;
use crate::display::sink::{CursorImage, DisplayPixels, ScanoutState};
use crate::testkit::gpu_rig::{self, submit_cmd, DMA};
use crate::testkit::packets::packet_bytes;
use crate::testkit::scratch::ScratchFile;

const RAM: u64 = 64 << 20;
const VRAM: u64 = 64 << 20;

/// What the display and the replies saw, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Hold,
    Release,
    /// A display message (scanout, update, band, cursor).
    Shown,
    /// A request answered, with its response type.
    Answered(u32),
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A display that writes what it is told into the log.
struct Recording(Log);

impl DisplaySink for Recording {
    fn scanout(&mut self, _: u32, _: ScanoutState) {
        lock(&self.0).push(Seen::Shown);
    }
    fn update(&mut self, _: u32, _: Rect, _: DisplayPixels) {
        lock(&self.0).push(Seen::Shown);
    }
    fn stream(&mut self, _: u32, _: Rect, _: PixelBuffer) -> bool {
        lock(&self.0).push(Seen::Shown);
        true
    }
    fn cursor(&mut self, _: u32, _: u32, _: u32, _: Option<&CursorImage>) {
        lock(&self.0).push(Seen::Shown);
    }
    fn hide_cursor(&mut self, _: u32) {
        lock(&self.0).push(Seen::Shown);
    }
    fn hold(&mut self) {
        lock(&self.0).push(Seen::Hold);
    }
    fn release(&mut self) {
        lock(&self.0).push(Seen::Release);
    }
}

/// A reply that writes its response type into the log.
struct Logged(Log);

impl Reply for Logged {
    fn room(&self) -> usize {
        4096
    }
    fn complete(self: Box<Self>, response: &[u8]) {
        let type_ = WddmGpuCtrlHdr::read_from_prefix(response).unwrap().0.type_;
        lock(&self.0).push(Seen::Answered(type_));
    }
}

/// A GPU without vblanks (nothing but the test touches the display), its guest memory with a
/// one-FENCE DMA buffer at [`DMA`], and a recording display attached.
struct Rig {
    gpu: Gpu,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    log: Log,
    _file: ScratchFile,
}

impl Rig {
    fn new(name: &str) -> Self {
        let file = ScratchFile::new(&format!("router-{name}"));
        let (gpu, _) = gpu_rig::gpu_without_vblanks(&file, VRAM);
        let ram =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), usize::try_from(RAM).unwrap())])
                .unwrap();
        ram.write_slice(&packet_bytes(fence(7)), GuestAddress(DMA))
            .unwrap();
        let log = Log::default();
        gpu.attach_display(Some(Box::new(Recording(log.clone()))));
        Self {
            gpu,
            mem: GuestMemoryAtomic::new(ram),
            log,
            _file: file,
        }
    }

    fn request(&self, kick: &Kick<'_>, bytes: &[u8]) {
        let reply = Box::new(Logged(self.log.clone()));
        self.gpu
            .handle(kick, decode_control(bytes), reply, self.mem.memory());
    }

    fn submit(&self, kick: &Kick<'_>, fence: u32) {
        let packets = packet_bytes(wddm_gpu_abi::build::fence(fence));
        self.request(kick, submit_cmd(DMA, packets.len(), fence).as_bytes());
    }

    fn seen(&self) -> Vec<Seen> {
        std::mem::take(&mut *lock(&self.log))
    }
}

fn count(seen: &[Seen], what: &Seen) -> usize {
    seen.iter().filter(|item| *item == what).count()
}

#[test]
fn a_kick_of_gpu_commands_never_takes_the_display_lock() {
    let rig = Arc::new(Rig::new("no-display"));
    // The display lock is taken away for the whole kick: a kick that took it would never end.
    let display = rig.gpu.display.clone();
    let taken = lock(&display);
    let (done, finished) = channel();
    let kicked = rig.clone();
    std::thread::spawn(move || {
        let kick = kicked.gpu.kick();
        kicked.submit(&kick, 1);
        kicked.submit(&kick, 2);
        kicked.request(
            &kick,
            WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO).as_bytes(),
        );
        drop(kick);
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .expect("a kick of GPU commands waited for the display lock");
    drop(taken);
    let seen = rig.seen();
    assert_eq!(
        count(&seen, &Seen::Answered(WDDM_GPU_RESP_SUBMIT)),
        2,
        "{seen:?}"
    );
    assert_eq!(seen.len(), 3, "three answers and nothing shown: {seen:?}");
    assert_eq!(count(&seen, &Seen::Hold) + count(&seen, &Seen::Release), 0);
}

#[test]
fn what_a_kick_shows_is_released_after_its_answers_holding_once() {
    let rig = Rig::new("ordering");
    let kick = rig.gpu.kick();
    assert!(rig.seen().is_empty(), "starting a kick touches no display");
    rig.submit(&kick, 1);
    let create = resource_create_2d(1, VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM, 64, 64);
    rig.request(&kick, create.as_bytes());
    rig.request(&kick, set_scanout(0, 1, rect(0, 0, 64, 64)).as_bytes());
    rig.request(&kick, resource_flush(1, rect(0, 0, 64, 64)).as_bytes());
    rig.submit(&kick, 2);
    let before_drop = rig.seen();
    assert_eq!(
        count(&before_drop, &Seen::Release),
        0,
        "released before the kick ended"
    );
    drop(kick);
    let seen = [before_drop, rig.seen()].concat();
    assert_eq!(count(&seen, &Seen::Hold), 1, "{seen:?}");
    assert_eq!(count(&seen, &Seen::Release), 1, "{seen:?}");
    let hold = seen.iter().position(|item| *item == Seen::Hold).unwrap();
    let first_shown = seen.iter().position(|item| *item == Seen::Shown).unwrap();
    assert!(hold < first_shown, "shown before the hold: {seen:?}");
    assert_eq!(seen.last(), Some(&Seen::Release), "{seen:?}");
    let answers = seen
        .iter()
        .filter(|item| matches!(item, Seen::Answered(_)))
        .count();
    assert_eq!(answers, 5, "{seen:?}");
}

#[test]
fn a_kick_with_display_commands_holds_and_releases_exactly_once() {
    let rig = Rig::new("once");
    // A control kick of display commands only.
    let kick = rig.gpu.kick();
    rig.request(
        &kick,
        WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO).as_bytes(),
    );
    rig.request(
        &kick,
        WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO).as_bytes(),
    );
    drop(kick);
    let seen = rig.seen();
    assert_eq!(seen.first(), Some(&Seen::Hold), "{seen:?}");
    assert_eq!(seen.last(), Some(&Seen::Release), "{seen:?}");
    assert_eq!(
        (count(&seen, &Seen::Hold), count(&seen, &Seen::Release)),
        (1, 1)
    );
    // A cursor kick: the cursor queue's commands are display commands too.
    let kick = rig.gpu.kick();
    for x in 0..3 {
        rig.gpu
            .handle_cursor(&kick, decode_cursor(move_cursor(0, (x, 0)).as_bytes()));
    }
    drop(kick);
    assert_eq!(
        rig.seen(),
        [vec![Seen::Hold], vec![Seen::Shown; 3], vec![Seen::Release]].concat()
    );
    // The next kick without one touches nothing.
    let kick = rig.gpu.kick();
    rig.submit(&kick, 3);
    drop(kick);
    assert_eq!(rig.seen(), vec![Seen::Answered(WDDM_GPU_RESP_SUBMIT)]);
}

#[test]
fn config_space_and_routing_do_not_depend_on_the_display_lock() {
    let rig = Rig::new("config");
    let display = rig.gpu.display.clone();
    let _taken = lock(&display);
    let config = rig.gpu.config();
    assert_eq!((config.num_scanouts, config.num_capsets), (1, 1));
}
