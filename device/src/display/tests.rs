//! The 2D device on a small guest RAM with a sink that records what it is told.

use std::sync::{Arc, Mutex};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::display::WddmGpuMemEntry;

use super::*;

const WINDOW: std::ops::Range<u64> = 0x80_0000..0x90_0000;

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Scanout(u32, ScanoutState),
    Update(u32, Rect, Vec<u8>),
    Cursor(u32, u32, u32, bool),
    Hide(u32),
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Event>>>);

impl Recorder {
    /// What was shown since the last call.
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl DisplaySink for Recorder {
    fn scanout(&mut self, scanout: u32, state: ScanoutState) {
        self.0.lock().unwrap().push(Event::Scanout(scanout, state));
    }
    fn update(&mut self, scanout: u32, rect: Rect, pixels: DisplayPixels) {
        self.0
            .lock()
            .unwrap()
            .push(Event::Update(scanout, rect, pixels.as_slice().to_vec()));
    }
    fn cursor(&mut self, scanout: u32, x: u32, y: u32, image: Option<&CursorImage>) {
        self.0
            .lock()
            .unwrap()
            .push(Event::Cursor(scanout, x, y, image.is_some()));
    }
    fn hide_cursor(&mut self, scanout: u32) {
        self.0.lock().unwrap().push(Event::Hide(scanout));
    }
}

fn wire(x: u32, y: u32, width: u32, height: u32) -> WddmGpuRect {
    WddmGpuRect {
        x,
        y,
        width,
        height,
    }
}

fn create(
    display: &mut Display,
    id: u32,
    format: u32,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, DisplayError> {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x100_0000)]).unwrap();
    let ram = GuestRam::new(&mem, Some(WINDOW));
    display.handle(
        DisplayCommand::ResourceCreate2d {
            resource_id: id,
            format,
            width,
            height,
        },
        &ram,
    )
}

#[test]
fn resource_memory_is_capped_and_given_back_by_unref() {
    let mut display = Display::new(DisplayConfig {
        max_memory: 64 * 64 * 4 * 2,
        ..Default::default()
    });
    assert!(create(&mut display, 1, 1, 64, 64).is_ok());
    assert!(create(&mut display, 2, 1, 64, 64).is_ok());
    assert_eq!(display.used_memory(), 64 * 64 * 4 * 2);
    let refused = create(&mut display, 3, 1, 1, 1).unwrap_err();
    assert_eq!(refused.response_type(), VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY);
    // Sizes whose byte count overflows are out of memory too, not a panic.
    assert_eq!(
        create(&mut display, 3, 1, u32::MAX, u32::MAX)
            .unwrap_err()
            .response_type(),
        VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY
    );
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
    let ram = GuestRam::new(&mem, None);
    display
        .handle(DisplayCommand::ResourceUnref { resource_id: 1 }, &ram)
        .unwrap();
    assert!(create(&mut display, 3, 1, 64, 64).is_ok());
    // Ids: 0 and taken ones are refused, and so are unknown formats and empty sizes.
    assert_eq!(
        create(&mut display, 0, 1, 1, 1)
            .unwrap_err()
            .response_type(),
        VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID
    );
    assert_eq!(
        create(&mut display, 3, 1, 1, 1)
            .unwrap_err()
            .response_type(),
        VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID
    );
    assert_eq!(
        create(&mut display, 9, 5, 1, 1),
        Err(DisplayError::BadFormat(5))
    );
    assert!(matches!(
        create(&mut display, 9, 1, 0, 1),
        Err(DisplayError::Rect(9, _))
    ));
    display.reset();
    assert_eq!(display.used_memory(), 0);
    assert!(create(&mut display, 1, 1, 64, 64).is_ok());
}

#[test]
fn a_flush_sends_the_scanout_part_of_the_rectangle_converted_to_bgra() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let ram = GuestRam::new(&mem, Some(WINDOW));
    let recorder = Recorder::default();
    let mut display = Display::new(DisplayConfig::default());
    display.attach_sink(Some(Box::new(recorder.clone())));
    // A 4x4 R8G8B8A8 resource whose pixel (x, y) is red x, green y, blue 9, alpha 1.
    let pixels: Vec<u8> = (0..16u8).flat_map(|i| [i % 4, i / 4, 9, 1]).collect();
    mem.write_slice(&pixels, GuestAddress(0x4000)).unwrap();
    create(&mut display, 7, 67, 4, 4).unwrap();
    let entries = vec![WddmGpuMemEntry {
        addr: 0x4000,
        length: 64,
        padding: 0,
    }];
    display
        .handle(
            DisplayCommand::AttachBacking {
                resource_id: 7,
                entries,
            },
            &ram,
        )
        .unwrap();
    display
        .handle(
            DisplayCommand::TransferToHost2d {
                resource_id: 7,
                rect: wire(0, 0, 4, 4),
                offset: 0,
            },
            &ram,
        )
        .unwrap();
    // The scanout shows the lower-right 2x2; the flush covers the right column pair's rows 1-3.
    display
        .handle(
            DisplayCommand::SetScanout {
                scanout_id: 0,
                resource_id: 7,
                rect: wire(2, 2, 2, 2),
            },
            &ram,
        )
        .unwrap();
    display
        .handle(
            DisplayCommand::ResourceFlush {
                resource_id: 7,
                rect: wire(3, 1, 1, 3),
            },
            &ram,
        )
        .unwrap();
    let events = recorder.0.lock().unwrap();
    assert_eq!(
        events[0],
        Event::Scanout(
            0,
            ScanoutState::Enabled {
                width: 2,
                height: 2
            }
        )
    );
    let shown = Rect {
        x: 1,
        y: 0,
        width: 1,
        height: 2,
    };
    assert_eq!(
        events[1],
        Event::Update(0, shown, vec![9, 2, 3, 1, 9, 3, 3, 1])
    );
    assert_eq!(events.len(), 2);
}

#[test]
fn hostile_scanouts_resources_and_rectangles_are_refused() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let ram = GuestRam::new(&mem, Some(WINDOW));
    let mut display = Display::new(DisplayConfig {
        scanouts: 2,
        ..Default::default()
    });
    create(&mut display, 1, 2, 16, 16).unwrap();
    let cases = [
        (
            DisplayCommand::SetScanout {
                scanout_id: 2,
                resource_id: 1,
                rect: wire(0, 0, 1, 1),
            },
            VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            DisplayCommand::SetScanout {
                scanout_id: 0,
                resource_id: 5,
                rect: wire(0, 0, 1, 1),
            },
            VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
        ),
        (
            DisplayCommand::SetScanout {
                scanout_id: 0,
                resource_id: 1,
                rect: wire(8, 0, 9, 1),
            },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            DisplayCommand::ResourceFlush {
                resource_id: 1,
                rect: wire(u32::MAX, 0, 2, 1),
            },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            DisplayCommand::TransferToHost2d {
                resource_id: 1,
                rect: wire(0, 0, 1, 1),
                offset: 0,
            },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            DisplayCommand::DetachBacking { resource_id: 1 },
            VIRTIO_GPU_RESP_ERR_UNSPEC,
        ),
        (
            DisplayCommand::AttachBacking {
                resource_id: 1,
                entries: vec![WddmGpuMemEntry {
                    addr: WINDOW.start,
                    length: 4096,
                    padding: 0,
                }],
            },
            VIRTIO_GPU_RESP_ERR_UNSPEC,
        ),
        (
            DisplayCommand::GetEdid { scanout: 2 },
            VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            DisplayCommand::ResourceUnref { resource_id: 2 },
            VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
        ),
    ];
    for (command, expected) in cases {
        let refused = display.handle(command.clone(), &ram).unwrap_err();
        assert_eq!(refused.response_type(), expected, "{command:?}: {refused}");
    }
    assert_eq!(
        display.cursor(CursorCommand::Move {
            scanout_id: 9,
            x: 0,
            y: 0
        }),
        Err(DisplayError::NoScanout(9))
    );
    assert!(display
        .handle(DisplayCommand::GetEdid { scanout: 1 }, &ram)
        .is_ok());
}

#[path = "vram_tests.rs"]
mod vram;

/// A sink that records like [`Recorder`] but drops every streamed band, as the display does
/// when QEMU stops reading.
struct DroppingBands(Recorder);

impl DisplaySink for DroppingBands {
    fn scanout(&mut self, scanout: u32, state: ScanoutState) {
        self.0.scanout(scanout, state);
    }
    fn update(&mut self, scanout: u32, rect: Rect, pixels: DisplayPixels) {
        self.0.update(scanout, rect, pixels);
    }
    fn cursor(&mut self, scanout: u32, x: u32, y: u32, image: Option<&CursorImage>) {
        self.0.cursor(scanout, x, y, image);
    }
    fn hide_cursor(&mut self, scanout: u32) {
        self.0.hide_cursor(scanout);
    }
    fn stream(&mut self, _: u32, _: Rect, _: PixelBuffer) -> bool {
        false
    }
}

/// A 1024x300 B8G8R8X8 resource (1.2 MB: streamed, in bands of 128 rows) backed by guest RAM
/// holding a pattern, shown whole on scanout 0 by a display recording into `recorder`.
struct Streaming {
    mem: GuestMemoryMmap,
    display: Display,
    recorder: Recorder,
    pattern: Vec<u8>,
}

const WIDE: u32 = 1024;
const TALL: u32 = 300;
const STRIDE: usize = WIDE as usize * 4;
const BACKING: u64 = 0x10_0000;

impl Streaming {
    fn new() -> Self {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
        let pattern: Vec<u8> = (0..STRIDE * TALL as usize)
            .map(|i| (i * 7 + i / 4093).to_le_bytes()[0])
            .collect();
        mem.write_slice(&pattern, GuestAddress(BACKING)).unwrap();
        let recorder = Recorder::default();
        let mut display = Display::new(DisplayConfig::default());
        display.attach_sink(Some(Box::new(recorder.clone())));
        let mut rig = Self {
            mem,
            display,
            recorder,
            pattern,
        };
        create(&mut rig.display, 1, 2, WIDE, TALL).unwrap();
        let entries = vec![WddmGpuMemEntry {
            addr: BACKING,
            length: u32::try_from(STRIDE * TALL as usize).unwrap(),
            padding: 0,
        }];
        rig.command(DisplayCommand::AttachBacking {
            resource_id: 1,
            entries,
        })
        .unwrap();
        rig.show(wire(0, 0, WIDE, TALL));
        rig.take_events();
        rig
    }

    fn command(&mut self, command: DisplayCommand) -> Result<Vec<u8>, DisplayError> {
        let ram = GuestRam::new(&self.mem, Some(WINDOW));
        self.display.handle(command, &ram)
    }

    fn show(&mut self, rect: WddmGpuRect) {
        self.command(DisplayCommand::SetScanout {
            scanout_id: 0,
            resource_id: 1,
            rect,
        })
        .unwrap();
    }

    fn transfer(&mut self, rect: WddmGpuRect) {
        let offset = (rect.y as usize * STRIDE + rect.x as usize * 4) as u64;
        self.command(DisplayCommand::TransferToHost2d {
            resource_id: 1,
            rect,
            offset,
        })
        .unwrap();
    }

    fn flush(&mut self, rect: WddmGpuRect) {
        self.command(DisplayCommand::ResourceFlush {
            resource_id: 1,
            rect,
        })
        .unwrap();
    }

    fn take_events(&self) -> Vec<Event> {
        self.recorder.take()
    }

    /// The update the pattern's rows `top..top + height` make, at (0, `at_y`) of the scanout.
    fn rows(&self, at_y: u32, top: u32, height: u32) -> Event {
        let bytes = &self.pattern[top as usize * STRIDE..(top + height) as usize * STRIDE];
        let rect = Rect {
            x: 0,
            y: at_y,
            width: WIDE,
            height,
        };
        Event::Update(0, rect, bytes.to_vec())
    }
}

#[test]
fn a_large_transfer_into_a_shown_resource_is_shown_band_by_band_and_its_flush_sends_nothing_more() {
    let mut rig = Streaming::new();
    let whole = wire(0, 0, WIDE, TALL);
    rig.transfer(whole);
    let bands = rig.take_events();
    assert_eq!(
        bands,
        [
            rig.rows(0, 0, 128),
            rig.rows(128, 128, 128),
            rig.rows(256, 256, 44)
        ]
    );
    rig.flush(whole);
    assert_eq!(rig.take_events(), [], "the flush found it all sent");
    // Nothing streamed since: a second flush repaints.
    rig.flush(whole);
    assert_eq!(rig.take_events(), [rig.rows(0, 0, TALL)]);

    // A small transfer is not streamed, and a flush after it sends what it covers.
    rig.transfer(wire(0, 10, WIDE, 2));
    assert_eq!(rig.take_events(), []);
    rig.flush(wire(0, 10, WIDE, 2));
    assert_eq!(rig.take_events(), [rig.rows(10, 10, 2)]);

    // Streamed, then a small transfer inside it: the flush must send again.
    rig.transfer(whole);
    rig.take_events();
    rig.transfer(wire(0, 20, WIDE, 1));
    rig.flush(wire(0, 20, WIDE, 1));
    assert_eq!(rig.take_events(), [rig.rows(20, 20, 1)]);

    // A flush reaching past what was streamed sends all it covers.
    rig.transfer(wire(0, 0, WIDE, 260));
    assert_eq!(rig.take_events().len(), 3, "260 rows in 3 bands");
    rig.flush(whole);
    assert_eq!(rig.take_events(), [rig.rows(0, 0, TALL)]);
}

#[test]
fn bands_follow_the_scanout_rectangle_and_a_new_scanout_or_display_gets_the_flush() {
    let mut rig = Streaming::new();
    let whole = wire(0, 0, WIDE, TALL);
    // The scanout shows rows 100..250: bands are clipped to it, in scanout coordinates.
    rig.show(wire(0, 100, WIDE, 150));
    rig.take_events();
    rig.transfer(whole);
    assert_eq!(
        rig.take_events(),
        [rig.rows(0, 100, 28), rig.rows(28, 128, 122)]
    );
    rig.flush(whole);
    assert_eq!(rig.take_events(), []);

    // SET_SCANOUT after the stream: the flush sends what the scanout now shows.
    rig.transfer(whole);
    rig.show(whole);
    rig.take_events();
    rig.flush(whole);
    assert_eq!(rig.take_events(), [rig.rows(0, 0, TALL)]);

    // A new display (QEMU's new socket) after the stream: the flush sends it all.
    rig.transfer(whole);
    let fresh = Recorder::default();
    rig.display.attach_sink(Some(Box::new(fresh.clone())));
    rig.flush(whole);
    let events = fresh.take();
    assert_eq!(events.last(), Some(&rig.rows(0, 0, TALL)));
}

#[test]
fn a_band_the_display_dropped_is_sent_again_by_the_flush() {
    let mut rig = Streaming::new();
    let recorder = Recorder::default();
    rig.display
        .attach_sink(Some(Box::new(DroppingBands(recorder.clone()))));
    let whole = wire(0, 0, WIDE, TALL);
    rig.transfer(whole);
    rig.flush(whole);
    let events = recorder.take();
    assert_eq!(events.last(), Some(&rig.rows(0, 0, TALL)));
}

#[test]
fn a_refused_band_stops_the_transfer_with_an_error_and_leaves_nothing_marked_sent() {
    let mut rig = Streaming::new();
    // The backing covers the first 200 rows only: rows past it are refused up front.
    rig.command(DisplayCommand::DetachBacking { resource_id: 1 })
        .unwrap();
    let entries = vec![WddmGpuMemEntry {
        addr: BACKING,
        length: u32::try_from(STRIDE * 200).unwrap(),
        padding: 0,
    }];
    rig.command(DisplayCommand::AttachBacking {
        resource_id: 1,
        entries,
    })
    .unwrap();
    let refused = rig
        .command(DisplayCommand::TransferToHost2d {
            resource_id: 1,
            rect: wire(0, 0, WIDE, TALL),
            offset: 0,
        })
        .unwrap_err();
    assert!(
        matches!(refused, DisplayError::Transfer(1, _)),
        "{refused:?}"
    );
    assert_eq!(rig.take_events(), [], "nothing shown before the check");
    rig.flush(wire(0, 0, WIDE, 200));
    assert_eq!(rig.take_events().len(), 1, "the flush sends");
}
