//! Scanouts showing VRAM: every guest value checked, flips at the vblank, damage found by
//! comparison, and the hand-over between a 2D resource and VRAM.

use std::time::Instant;

use wddm_gpu_abi::ctrl::{WddmGpuCmdSetScanoutVram, WDDM_GPU_CMD_SET_SCANOUT_VRAM};

use super::*;
use crate::display::vram_scanout::VramScanoutError;
use crate::layout::{ResolveError, Resolved};
use crate::memory::vram::BarMode;
use crate::testkit::guest::vram_write;
use crate::testkit::layouts::{from_file, DEVICE_ONLY, NON_COHERENT};
use crate::testkit::scratch::ScratchFile;

const BAR: u64 = 4 << 20;
/// B8G8R8X8: bytes already in the display's order.
const BGRX: u32 = 2;

struct VramRig {
    display: Display,
    sink: Recorder,
    layout: SegmentLayout,
    vram: Vram,
    _file: ScratchFile,
}

impl VramRig {
    /// The NON_COHERENT layout (segment 1 BAR, 2 aperture, 3 device-only) and 2 scanouts.
    fn new(name: &str, vblank_hz: u32) -> Self {
        let layout = from_file(NON_COHERENT, BAR);
        let file = ScratchFile::new(&format!("vram-scanout-{name}"));
        let local = layout.device_only_vram(BAR);
        let vram = Vram::create(file.path(), BAR, local, BarMode::Ivshmem).unwrap();
        let sink = Recorder::default();
        let mut display = Display::new(DisplayConfig {
            scanouts: 2,
            vblank_hz,
            ..Default::default()
        });
        display.attach_sink(Some(Box::new(sink.clone())));
        Self {
            display,
            sink,
            layout,
            vram,
            _file: file,
        }
    }

    fn set(&mut self, cmd: WddmGpuCmdSetScanoutVram) -> Result<Vec<u8>, DisplayError> {
        self.display
            .set_scanout_vram(&cmd, &self.layout, &self.vram)
    }

    fn vblank(&mut self) -> Vec<Vblank> {
        self.display.vblank(&self.vram)
    }

    fn taken(&self) -> Vec<Event> {
        self.sink.take()
    }
}

fn surface(
    segment_id: u32,
    address: u64,
    width: u32,
    height: u32,
    pitch: u32,
) -> WddmGpuCmdSetScanoutVram {
    WddmGpuCmdSetScanoutVram {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        scanout_id: 0,
        segment_id,
        address,
        format: BGRX,
        width,
        height,
        pitch,
    }
}

fn off() -> WddmGpuCmdSetScanoutVram {
    surface(0, 0, 0, 0, 0).with_format(0)
}

trait WithFormat {
    fn with_format(self, format: u32) -> Self;
}

impl WithFormat for WddmGpuCmdSetScanoutVram {
    fn with_format(mut self, format: u32) -> Self {
        self.format = format;
        self
    }
}

/// `height` rows of `width` B, G, R, X pixels, each row `pitch` bytes, numbered by `seed`.
fn image(width: u32, height: u32, pitch: u32, seed: u8) -> (Vec<u8>, Vec<u8>) {
    let mut pitched = vec![0xee; (pitch * height) as usize];
    let mut packed = Vec::new();
    for y in 0..height {
        for x in 0..width {
            let pixel = [seed, (y & 0xff) as u8, (x & 0xff) as u8, 0xff];
            let at = (y * pitch + x * 4) as usize;
            pitched[at..at + 4].copy_from_slice(&pixel);
            packed.extend_from_slice(&pixel);
        }
    }
    (pitched, packed)
}

fn whole(width: u32, height: u32) -> Rect {
    Rect {
        x: 0,
        y: 0,
        width,
        height,
    }
}

#[test]
fn every_guest_value_is_checked() {
    let mut rig = VramRig::new("hostile", 60);
    let refused = |rig: &mut VramRig, cmd| rig.set(cmd).unwrap_err();
    let mut wrong_scanout = surface(1, 0, 8, 8, 32);
    wrong_scanout.scanout_id = 2;
    assert_eq!(refused(&mut rig, wrong_scanout), DisplayError::NoScanout(2));
    let cases = [
        (
            surface(1, 0, 8, 8, 32).with_format(5),
            VramScanoutError::BadFormat(5),
        ),
        (
            surface(1, 0, 0, 8, 32),
            VramScanoutError::BadSize {
                width: 0,
                height: 8,
            },
        ),
        (
            surface(1, 0, 4096, 1, 1 << 20),
            VramScanoutError::BadSize {
                width: 4096,
                height: 1,
            },
        ),
        (
            surface(1, 0, 8, 8, 31),
            VramScanoutError::PitchTooSmall {
                pitch: 31,
                width: 8,
            },
        ),
        (surface(2, 0, 8, 8, 32), VramScanoutError::Aperture(2)),
        (
            surface(9, 0, 8, 8, 32),
            VramScanoutError::Segment(ResolveError::NoSuchSegment(9)),
        ),
        // One byte past the end of the BAR segment.
        (
            surface(1, BAR - 8 * 32 + 1, 8, 8, 32),
            VramScanoutError::Segment(ResolveError::OutOfRange {
                segment: 1,
                address: BAR - 8 * 32 + 1,
                length: 8 * 32,
            }),
        ),
        (
            surface(1, u64::MAX - 16, 8, 8, 32),
            VramScanoutError::Segment(ResolveError::Overflow {
                segment: 1,
                address: u64::MAX - 16,
                length: 8 * 32,
            }),
        ),
        // Below the device-only segment's base address.
        (
            surface(3, 0, 8, 8, 32),
            VramScanoutError::Segment(ResolveError::OutOfRange {
                segment: 3,
                address: 0,
                length: 8 * 32,
            }),
        ),
        (
            surface(0, 0x1000, 0, 0, 0).with_format(0),
            VramScanoutError::OffWithFields,
        ),
        (surface(0, 0, 8, 8, 32), VramScanoutError::OffWithFields),
    ];
    for (cmd, error) in cases {
        let refused = refused(&mut rig, cmd);
        assert_eq!(refused, DisplayError::VramScanout(0, error), "{cmd:?}");
        assert_eq!(
            refused.response_type(),
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER
        );
    }
    // The largest pitch times the largest height does not overflow: it is out of range.
    assert!(matches!(
        refused(&mut rig, surface(1, 0, 4095, 4095, u32::MAX)),
        DisplayError::VramScanout(
            0,
            VramScanoutError::Segment(ResolveError::OutOfRange { .. })
        )
    ));
    // Nothing was shown, nothing counts vblanks.
    assert!(rig.vblank().is_empty());
    assert!(!rig.display.shows_vram());
    assert_eq!(rig.taken(), vec![]);
}

#[test]
fn a_flip_shows_at_the_next_vblank_and_only_changed_rows_follow() {
    let mut rig = VramRig::new("flip", 60);
    let (width, height, pitch) = (16, 8, 96);
    let (first, first_packed) = image(width, height, pitch, 1);
    let (second, second_packed) = image(width, height, pitch, 2);
    let second_at = 0x10_0000;
    vram_write(&rig.vram, 0x1000, &first);
    vram_write(&rig.vram, second_at, &second);
    rig.set(surface(1, 0x1000, width, height, pitch)).unwrap();
    assert_eq!(rig.taken(), vec![], "nothing is shown before the vblank");
    assert!(rig.display.shows_vram());
    // `changed`: the vblank a flip (the first showing included) took effect at.
    let shown = |count, address, changed| Vblank {
        scanout: 0,
        count,
        segment_id: 1,
        address,
        changed,
    };
    assert_eq!(rig.vblank(), vec![shown(1, 0x1000, true)]);
    assert_eq!(
        rig.taken(),
        vec![
            Event::Scanout(0, ScanoutState::Enabled { width, height }),
            Event::Update(0, whole(width, height), first_packed.clone()),
        ]
    );
    // Unchanged: an event, no update.
    assert_eq!(rig.vblank(), vec![shown(2, 0x1000, false)]);
    assert_eq!(rig.taken(), vec![]);
    // Rows 3 and 5 change: rows 3 to 5 are pushed.
    vram_write(&rig.vram, 0x1000 + 3 * u64::from(pitch), &[9; 4]);
    vram_write(&rig.vram, 0x1000 + 5 * u64::from(pitch) + 60, &[9; 4]);
    // Bytes past the visible width (the pitch's padding) are not damage.
    vram_write(&rig.vram, 0x1000 + 7 * u64::from(pitch) + 64, &[9; 4]);
    assert_eq!(rig.vblank(), vec![shown(3, 0x1000, false)]);
    // B8G8R8X8 is the display's own order: the X byte goes as is (the display ignores it).
    let mut expected = first_packed[3 * 64..6 * 64].to_vec();
    expected[..4].copy_from_slice(&[9, 9, 9, 9]);
    expected[2 * 64 + 60..2 * 64 + 64].copy_from_slice(&[9, 9, 9, 9]);
    let band = Rect {
        y: 3,
        height: 3,
        ..whole(width, height)
    };
    assert_eq!(rig.taken(), vec![Event::Update(0, band, expected)]);
    // A flip to the second buffer: the event reports it, the whole surface follows, no new size.
    rig.set(surface(1, second_at, width, height, pitch))
        .unwrap();
    assert_eq!(rig.taken(), vec![]);
    assert_eq!(rig.vblank(), vec![shown(4, second_at, true)]);
    assert_eq!(
        rig.taken(),
        vec![Event::Update(0, whole(width, height), second_packed)]
    );
    // Turned off: a last event with segment 0, the display disabled, then no more events.
    rig.set(off()).unwrap();
    assert_eq!(
        rig.vblank(),
        vec![Vblank {
            scanout: 0,
            count: 5,
            segment_id: 0,
            address: 0,
            changed: true,
        }]
    );
    assert_eq!(rig.taken(), vec![Event::Scanout(0, ScanoutState::Disabled)]);
    assert!(rig.vblank().is_empty());
    assert!(!rig.display.shows_vram());
    // Shown again: the counter starts over.
    rig.set(surface(1, 0x1000, width, height, pitch)).unwrap();
    assert_eq!(rig.vblank(), vec![shown(1, 0x1000, true)]);
}

#[test]
fn after_a_reset_the_next_display_is_told_the_scanout_is_off_once() {
    let mut rig = VramRig::new("reset-announce", 60);
    // Attaching told nothing: no scanout was ever set.
    assert_eq!(rig.taken(), vec![]);
    let (width, height, pitch) = (16, 8, 96);
    vram_write(&rig.vram, 0x1000, &image(width, height, pitch, 1).0);
    rig.set(surface(1, 0x1000, width, height, pitch)).unwrap();
    rig.vblank();
    rig.taken();
    // A stop and cont: the new display is told what is shown, and gets the whole surface.
    let after_cont = Recorder::default();
    rig.display.attach_sink(Some(Box::new(after_cont.clone())));
    assert_eq!(
        after_cont.take()[0],
        Event::Scanout(0, ScanoutState::Enabled { width, height })
    );
    // A guest reset: QEMU has closed that socket already, so the "disabled" it is sent is lost.
    rig.display.reset();
    assert!(!rig.display.shows_vram());
    assert!(rig.vblank().is_empty(), "no vblanks after the reset");
    // The next display is told, once; scanout 1 was never set and is not mentioned.
    let next = Recorder::default();
    rig.display.attach_sink(Some(Box::new(next.clone())));
    assert_eq!(next.take(), vec![Event::Scanout(0, ScanoutState::Disabled)]);
    let later = Recorder::default();
    rig.display.attach_sink(Some(Box::new(later.clone())));
    assert_eq!(later.take(), vec![]);
    // VRAM still holds the surface: shown again, the counter starts over.
    rig.set(surface(1, 0x1000, width, height, pitch)).unwrap();
    assert_eq!(
        rig.vblank(),
        vec![Vblank {
            scanout: 0,
            count: 1,
            segment_id: 1,
            address: 0x1000,
            changed: true,
        }]
    );
}

#[test]
fn device_only_vram_converts_its_format_and_vblanks_off_show_at_once() {
    let layout = from_file(DEVICE_ONLY, BAR);
    let mut rig = VramRig::new("device-only", 0);
    rig.layout = layout;
    // Segment 2 is device-only VRAM at GPU address 4 GiB.
    let local = rig.layout.device_only_vram(BAR);
    assert!(local > 0);
    let (pixels, _) = image(4, 2, 16, 7);
    let base = 0x1_0000_0000;
    let Resolved::Vram(range) = rig.layout.resolve(2, base + 0x2000, 32).unwrap() else {
        panic!("segment 2 is VRAM");
    };
    vram_write(&rig.vram, range.start(), &pixels);
    // R8G8B8A8 (67): bytes swapped into B, G, R, A for the display.
    let mut cmd = surface(2, base + 0x2000, 4, 2, 16);
    cmd.format = 67;
    rig.set(cmd).unwrap();
    let swapped: Vec<u8> = pixels
        .chunks_exact(4)
        .flat_map(|p| [p[2], p[1], p[0], p[3]])
        .collect();
    assert_eq!(
        rig.taken(),
        vec![
            Event::Scanout(
                0,
                ScanoutState::Enabled {
                    width: 4,
                    height: 2
                }
            ),
            Event::Update(0, whole(4, 2), swapped),
        ]
    );
}

#[test]
fn a_2d_resource_and_a_vram_surface_take_the_scanout_from_each_other() {
    let mut rig = VramRig::new("handover", 60);
    assert!(create(&mut rig.display, 1, BGRX, 4, 4).is_ok());
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
    let ram = GuestRam::new(&mem, None);
    let set_2d = DisplayCommand::SetScanout {
        scanout_id: 0,
        resource_id: 1,
        rect: wire(0, 0, 4, 4),
    };
    rig.display.handle(set_2d.clone(), &ram).unwrap();
    rig.set(surface(1, 0, 8, 8, 32)).unwrap();
    rig.vblank();
    rig.taken();
    // A flush of the resource no longer reaches the display: VRAM has the scanout.
    rig.display
        .handle(
            DisplayCommand::ResourceFlush {
                resource_id: 1,
                rect: wire(0, 0, 4, 4),
            },
            &ram,
        )
        .unwrap();
    assert_eq!(rig.taken(), vec![]);
    // The resource takes it back at once; VRAM vblanks stop.
    rig.display.handle(set_2d, &ram).unwrap();
    assert_eq!(
        rig.taken(),
        vec![Event::Scanout(
            0,
            ScanoutState::Enabled {
                width: 4,
                height: 4
            }
        )]
    );
    assert!(rig.vblank().is_empty());
    // A reset disables a VRAM scanout.
    rig.set(surface(1, 0, 8, 8, 32)).unwrap();
    rig.vblank();
    rig.taken();
    rig.display.reset();
    assert_eq!(rig.taken(), vec![Event::Scanout(0, ScanoutState::Disabled)]);
    assert!(rig.vblank().is_empty());
}

/// What the damage rule costs: a 1024x768 surface read and compared at each vblank, unchanged
/// (the common case) and with one row changed. Printed with `--nocapture`; asserted loosely.
#[test]
fn comparing_a_1024x768_surface_costs_little() {
    let mut rig = VramRig::new("cost", 60);
    let (width, height, pitch) = (1024, 768, 4096);
    rig.set(surface(1, 0, width, height, pitch)).unwrap();
    rig.vblank();
    let rounds = 20;
    let started = Instant::now();
    for round in 0..rounds {
        vram_write(
            &rig.vram,
            400 * u64::from(pitch),
            &[u8::try_from(round).unwrap(); 4],
        );
        rig.vblank();
    }
    let per_vblank = started.elapsed() / rounds;
    println!("1024x768 vblank with one changed row: {per_vblank:?}");
    assert!(per_vblank.as_millis() < 50, "{per_vblank:?} a vblank");
}
