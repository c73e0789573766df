//! The 2D device on a small guest RAM with a sink that records what it is told.

use std::sync::{Arc, Mutex};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

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

fn wire(x: u32, y: u32, width: u32, height: u32) -> WireRect {
    WireRect {
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
    assert_eq!(refused.response_type(), RESP_ERR_OUT_OF_MEMORY);
    // Sizes whose byte count overflows are out of memory too, not a panic.
    assert_eq!(
        create(&mut display, 3, 1, u32::MAX, u32::MAX)
            .unwrap_err()
            .response_type(),
        RESP_ERR_OUT_OF_MEMORY
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
        RESP_ERR_INVALID_RESOURCE_ID
    );
    assert_eq!(
        create(&mut display, 3, 1, 1, 1)
            .unwrap_err()
            .response_type(),
        RESP_ERR_INVALID_RESOURCE_ID
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
    let entries = vec![wire::MemEntry {
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
            RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            DisplayCommand::SetScanout {
                scanout_id: 0,
                resource_id: 5,
                rect: wire(0, 0, 1, 1),
            },
            RESP_ERR_INVALID_RESOURCE_ID,
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
                entries: vec![wire::MemEntry {
                    addr: WINDOW.start,
                    length: 4096,
                    padding: 0,
                }],
            },
            VIRTIO_GPU_RESP_ERR_UNSPEC,
        ),
        (
            DisplayCommand::GetEdid { scanout: 2 },
            RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            DisplayCommand::ResourceUnref { resource_id: 2 },
            RESP_ERR_INVALID_RESOURCE_ID,
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
