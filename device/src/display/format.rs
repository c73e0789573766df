//! The 2D pixel formats of virtio-gpu (virtio 1.2, 5.7.6.8): all four bytes per pixel, named by
//! their byte order in memory. What QEMU's display takes (VHOST_USER_GPU_UPDATE and the cursor
//! image) is PIXMAN x8r8g8b8 / a8r8g8b8 in host order, bytes B, G, R, X/A on little-endian
//! hosts, which is this device's [`DisplayBytes`].

use wddm_gpu_abi::display::{
    VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM, VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM,
    VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM, VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM,
    VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM, VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM,
    VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM, VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM,
};

/// Bytes per pixel of every 2D format.
pub const BYTES_PER_PIXEL: u32 = 4;

/// A `VIRTIO_GPU_FORMAT_*` 2D format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    B8G8R8A8,
    B8G8R8X8,
    A8R8G8B8,
    X8R8G8B8,
    R8G8B8A8,
    X8B8G8R8,
    A8B8G8R8,
    R8G8B8X8,
}

/// Where red, green, blue and (for formats with alpha) alpha sit in a pixel's four bytes.
struct Channels {
    r: usize,
    g: usize,
    b: usize,
    a: Option<usize>,
}

impl PixelFormat {
    /// Every format, for the tests.
    #[cfg(test)]
    pub const ALL: [PixelFormat; 8] = [
        Self::B8G8R8A8,
        Self::B8G8R8X8,
        Self::A8R8G8B8,
        Self::X8R8G8B8,
        Self::R8G8B8A8,
        Self::X8B8G8R8,
        Self::A8B8G8R8,
        Self::R8G8B8X8,
    ];

    /// The format of a wire value; `None` for values the spec does not list.
    pub fn from_wire(value: u32) -> Option<Self> {
        Some(match value {
            VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM => Self::B8G8R8A8,
            VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM => Self::B8G8R8X8,
            VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM => Self::A8R8G8B8,
            VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM => Self::X8R8G8B8,
            VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM => Self::R8G8B8A8,
            VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM => Self::X8B8G8R8,
            VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM => Self::A8B8G8R8,
            VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM => Self::R8G8B8X8,
            _ => return None,
        })
    }

    fn channels(self) -> Channels {
        let (r, g, b, a) = match self {
            Self::B8G8R8A8 => (2, 1, 0, Some(3)),
            Self::B8G8R8X8 => (2, 1, 0, None),
            Self::A8R8G8B8 => (1, 2, 3, Some(0)),
            Self::X8R8G8B8 => (1, 2, 3, None),
            Self::R8G8B8A8 => (0, 1, 2, Some(3)),
            Self::X8B8G8R8 => (3, 2, 1, None),
            Self::A8B8G8R8 => (3, 2, 1, Some(0)),
            Self::R8G8B8X8 => (0, 1, 2, None),
        };
        Channels { r, g, b, a }
    }

    /// Whether the bytes are already in the display's order (B, G, R, then alpha or padding).
    pub fn is_display_order(self) -> bool {
        matches!(self, Self::B8G8R8A8 | Self::B8G8R8X8)
    }

    /// Rows of pixels in this format, converted and packed one after another, `bytes` in all.
    pub fn pack_for_display<'a>(
        self,
        rows: impl IntoIterator<Item = &'a [u8]>,
        bytes: usize,
    ) -> Vec<u8> {
        let mut packed = Vec::with_capacity(bytes);
        for row in rows {
            self.to_display(row, &mut packed);
        }
        packed
    }

    /// Appends `pixels` (whole pixels of this format) to `out` as [`DisplayBytes`].
    pub fn to_display(self, pixels: &[u8], out: &mut DisplayBytes) {
        let start = out.len();
        out.resize(start + pixels.len(), 0);
        self.to_display_into(pixels, &mut out[start..]);
    }

    /// Writes `pixels` (whole pixels of this format) into `out`, of the same length, as
    /// [`DisplayBytes`]; the other formats without alpha become opaque, the display-order
    /// ones are copied as they are.
    pub fn to_display_into(self, pixels: &[u8], out: &mut [u8]) {
        // Already the display's byte order (its fourth byte is alpha or ignored padding, as
        // QEMU's x8r8g8b8 surface and its own C backend treat it): one copy.
        if self.is_display_order() {
            out.copy_from_slice(pixels);
            return;
        }
        let c = self.channels();
        let size = BYTES_PER_PIXEL as usize;
        for (pixel, shown) in pixels.chunks_exact(size).zip(out.chunks_exact_mut(size)) {
            let alpha = c.a.map_or(0xff, |a| pixel[a]);
            shown.copy_from_slice(&[pixel[c.b], pixel[c.g], pixel[c.r], alpha]);
        }
    }
}

/// Pixels as QEMU's display takes them: B, G, R, A bytes (PIXMAN a8r8g8b8, read as x8r8g8b8
/// for the screen, on a little-endian host).
pub type DisplayBytes = Vec<u8>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_format_decodes_and_others_do_not() {
        let values = [1, 2, 3, 4, 67, 68, 121, 134];
        for (value, format) in values.iter().zip(PixelFormat::ALL) {
            assert_eq!(PixelFormat::from_wire(*value), Some(format));
        }
        for value in [0, 5, 66, 69, 120, 122, 133, 135, u32::MAX] {
            assert_eq!(PixelFormat::from_wire(value), None, "{value}");
        }
    }

    #[test]
    fn each_format_converts_red_green_blue_and_alpha_to_bgra() {
        // Memory bytes of one pixel with red 0x11, green 0x22, blue 0x33, alpha/X 0x44.
        let cases: [(PixelFormat, [u8; 4], [u8; 4]); 8] = [
            (
                PixelFormat::B8G8R8A8,
                [0x33, 0x22, 0x11, 0x44],
                [0x33, 0x22, 0x11, 0x44],
            ),
            (
                PixelFormat::B8G8R8X8,
                // The display's own order: copied as is, padding included (QEMU's x8r8g8b8
                // surface ignores the fourth byte, and its C backend passes it on too).
                [0x33, 0x22, 0x11, 0x44],
                [0x33, 0x22, 0x11, 0x44],
            ),
            (
                PixelFormat::A8R8G8B8,
                [0x44, 0x11, 0x22, 0x33],
                [0x33, 0x22, 0x11, 0x44],
            ),
            (
                PixelFormat::X8R8G8B8,
                [0x44, 0x11, 0x22, 0x33],
                [0x33, 0x22, 0x11, 0xff],
            ),
            (
                PixelFormat::R8G8B8A8,
                [0x11, 0x22, 0x33, 0x44],
                [0x33, 0x22, 0x11, 0x44],
            ),
            (
                PixelFormat::X8B8G8R8,
                [0x44, 0x33, 0x22, 0x11],
                [0x33, 0x22, 0x11, 0xff],
            ),
            (
                PixelFormat::A8B8G8R8,
                [0x44, 0x33, 0x22, 0x11],
                [0x33, 0x22, 0x11, 0x44],
            ),
            (
                PixelFormat::R8G8B8X8,
                [0x11, 0x22, 0x33, 0x44],
                [0x33, 0x22, 0x11, 0xff],
            ),
        ];
        for (format, memory, display) in cases {
            let mut out = vec![0xee];
            format.to_display(&[memory, memory].concat(), &mut out);
            assert_eq!(
                out,
                [&[0xee][..], &display, &display].concat(),
                "{format:?}"
            );
            let mut into = [0u8; 8];
            format.to_display_into(&[memory, memory].concat(), &mut into);
            assert_eq!(&into[..], &out[1..], "{format:?}");
        }
    }
}
