//! Where the display goes: the model says what to show through [`DisplaySink`]; the transport
//! implements it over QEMU's vhost-user-gpu socket (and tests record it).

use std::sync::Arc;

use super::pixel_buffer::PixelBuffer;
use super::rect::Rect;

/// Side of the square cursor image, in pixels.
pub const CURSOR_SIZE: u32 = 64;
/// Bytes of a cursor image (B, G, R, A per pixel).
pub const CURSOR_BYTES: usize = (CURSOR_SIZE * CURSOR_SIZE * 4) as usize;

/// A cursor image with its hot spot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorImage {
    pub hot_x: u32,
    pub hot_y: u32,
    /// [`CURSOR_SIZE`] rows of B, G, R, A pixels.
    pub pixels: Box<[u8; CURSOR_BYTES]>,
}

/// The pixels of an update: packed for the rectangle, a band a transfer streams, or a whole
/// resource's frame shared with it (no copy: the resource copies on its next write while the
/// display still holds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisplayPixels {
    Packed(Vec<u8>),
    Band(PixelBuffer),
    Frame(Arc<PixelBuffer>),
}

impl DisplayPixels {
    /// The bytes, `rect.width * 4` a row.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Self::Packed(bytes) => bytes,
            Self::Band(band) => band,
            Self::Frame(frame) => frame,
        }
    }
}

impl From<Vec<u8>> for DisplayPixels {
    fn from(bytes: Vec<u8>) -> Self {
        Self::Packed(bytes)
    }
}

/// What a scanout shows from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanoutState {
    /// A surface of this size.
    Enabled {
        width: u32,
        height: u32,
    },
    Disabled,
}

/// The display the model drives. Calls do not fail: an implementation that loses its display
/// handles that itself (QEMU's socket closes at a device stop).
pub trait DisplaySink: Send {
    /// A scanout was set to a new size, or disabled.
    fn scanout(&mut self, scanout: u32, state: ScanoutState);
    /// `rect` of the scanout (scanout coordinates) now holds `pixels`: B, G, R, A bytes,
    /// `rect.width * 4` a row.
    fn update(&mut self, scanout: u32, rect: Rect, pixels: DisplayPixels);
    /// A buffer of `len` bytes for a band that [`stream`](Self::stream) will take, to be
    /// overwritten whole (an implementation may hand out buffers it has sent before).
    fn band_buffer(&mut self, len: usize) -> PixelBuffer {
        let mut buffer = PixelBuffer::default();
        buffer.resize(len);
        buffer
    }
    /// Like [`update`](Self::update), but passed on at once, after anything held: a band of a
    /// large transfer, shown while the next band is copied. Returns whether the display took it
    /// (`false`: it was dropped, so a flush must send that part again).
    fn stream(&mut self, scanout: u32, rect: Rect, pixels: PixelBuffer) -> bool {
        self.update(scanout, rect, DisplayPixels::Band(pixels));
        true
    }
    /// The cursor on `scanout` moved to (`x`, `y`), with a new image when given.
    fn cursor(&mut self, scanout: u32, x: u32, y: u32, image: Option<&CursorImage>);
    /// The cursor on `scanout` is hidden.
    fn hide_cursor(&mut self, scanout: u32);
    /// The guest's requests of one kick are being answered: what they show may wait for
    /// [`release`](Self::release), so that handing it on costs the answers nothing.
    fn hold(&mut self) {}
    /// The kick's answers are out: pass on what was held.
    fn release(&mut self) {}
}
