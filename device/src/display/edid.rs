//! The EDID 1.4 base block (VESA E-EDID, 128 bytes) a scanout reports through GET_EDID: one
//! detailed timing for the preferred size, a range-limits and a name descriptor, a valid
//! checksum. Guests take their mode list from it (Linux's virtio_gpu reads it when
//! VIRTIO_GPU_F_EDID is negotiated, which QEMU's vhost-user-gpu always does).

/// Size of the base block.
pub const EDID_SIZE: usize = 128;

/// Largest width or height a detailed timing descriptor holds (12 bits).
pub const MAX_EDID_DIMENSION: u32 = 4095;

/// Refresh rate aimed at, in Hz (lower when the pixel clock would pass the descriptor's limit).
const REFRESH_HZ: u64 = 60;
/// Reduced-blanking timing (VESA CVT-RB): fixed horizontal blanking and sync.
const H_BLANK: u32 = 160;
const H_FRONT_PORCH: u32 = 48;
const H_SYNC: u32 = 32;
const V_FRONT_PORCH: u32 = 3;
const V_SYNC: u32 = 6;
const MIN_V_BACK_PORCH: u32 = 6;
/// Minimum vertical blanking time of CVT-RB, in microseconds.
const MIN_V_BLANK_US: u64 = 460;
/// Largest pixel clock a descriptor holds, in 10 kHz units.
const MAX_CLOCK_10KHZ: u64 = 0xffff;

/// A display timing for one preferred size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Timing {
    width: u32,
    height: u32,
    v_blank: u32,
    clock_10khz: u64,
}

impl Timing {
    fn for_size(width: u32, height: u32) -> Self {
        // Line period at 60 Hz, less the minimum blanking, spread over the active lines gives
        // the line time; the blanking needs that many lines (rounded up) plus one.
        let frame_us = 1_000_000 / REFRESH_HZ;
        let line_ns = (frame_us - MIN_V_BLANK_US) * 1000 / u64::from(height.max(1));
        let lines = (MIN_V_BLANK_US * 1000).div_ceil(line_ns.max(1)) + 1;
        let v_blank = u32::try_from(lines)
            .unwrap_or(u32::MAX)
            .clamp(V_FRONT_PORCH + V_SYNC + MIN_V_BACK_PORCH, 4095);
        let total = u64::from(width + H_BLANK) * u64::from(height + v_blank);
        let clock_10khz = (total * REFRESH_HZ).div_ceil(10_000).min(MAX_CLOCK_10KHZ);
        Self {
            width,
            height,
            v_blank,
            clock_10khz,
        }
    }

    fn total_pixels(self) -> u64 {
        u64::from(self.width + H_BLANK) * u64::from(self.height + self.v_blank)
    }

    /// Refresh rate in Hz (rounded down).
    fn refresh_hz(self) -> u64 {
        self.clock_10khz * 10_000 / self.total_pixels()
    }

    /// Line rate in kHz (rounded down).
    fn line_khz(self) -> u64 {
        self.clock_10khz * 10 / u64::from(self.width + H_BLANK)
    }

    /// The 18-byte detailed timing descriptor.
    fn descriptor(self, size_mm: (u32, u32)) -> [u8; 18] {
        let lo = |v: u32| (v & 0xff) as u8;
        let hi4 = |v: u32| ((v >> 8) & 0xf) as u8;
        // At most MAX_CLOCK_10KHZ (0xffff): fits.
        let clock = u16::try_from(self.clock_10khz).unwrap_or(u16::MAX);
        let [clock_lo, clock_hi] = clock.to_le_bytes();
        [
            clock_lo,
            clock_hi,
            lo(self.width),
            lo(H_BLANK),
            (hi4(self.width) << 4) | hi4(H_BLANK),
            lo(self.height),
            lo(self.v_blank),
            (hi4(self.height) << 4) | hi4(self.v_blank),
            lo(H_FRONT_PORCH),
            lo(H_SYNC),
            (((V_FRONT_PORCH & 0xf) as u8) << 4) | (V_SYNC & 0xf) as u8,
            ((((H_FRONT_PORCH >> 8) & 3) as u8) << 6) | ((((H_SYNC >> 8) & 3) as u8) << 4),
            lo(size_mm.0),
            lo(size_mm.1),
            (hi4(size_mm.0) << 4) | hi4(size_mm.1),
            0,
            0,
            // Digital separate sync, horizontal sync positive, vertical negative (CVT-RB).
            0x1a,
        ]
    }
}

/// A display descriptor (tag and 13 bytes of data).
fn display_descriptor(tag: u8, data: [u8; 13]) -> [u8; 18] {
    let mut descriptor = [0u8; 18];
    descriptor[3] = tag;
    descriptor[5..].copy_from_slice(&data);
    descriptor
}

/// A text descriptor's 13 bytes: the text, a line feed, space padding.
fn text(value: &str) -> [u8; 13] {
    let mut data = [b' '; 13];
    let bytes = value.as_bytes();
    let len = bytes.len().min(12);
    data[..len].copy_from_slice(&bytes[..len]);
    data[len] = b'\n';
    data
}

/// The EDID of a display whose preferred size is `width` x `height` (each 1 to
/// [`MAX_EDID_DIMENSION`]); `serial` tells scanouts apart.
pub fn edid(width: u32, height: u32, serial: u32) -> [u8; EDID_SIZE] {
    let width = width.clamp(1, MAX_EDID_DIMENSION);
    let height = height.clamp(1, MAX_EDID_DIMENSION);
    let timing = Timing::for_size(width, height);
    // A 96 DPI screen: millimetres = pixels * 25.4 / 96.
    let size_mm = (width * 254 / 960, height * 254 / 960);
    let mut block = [0u8; EDID_SIZE];
    block[..8].copy_from_slice(&[0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]);
    // Manufacturer "WDG" (three 5-bit letters, big-endian), product 0x0001.
    let letter = |c: u8| u16::from(c - b'A' + 1);
    let manufacturer = (letter(b'W') << 10) | (letter(b'D') << 5) | letter(b'G');
    block[8..10].copy_from_slice(&manufacturer.to_be_bytes());
    block[10..12].copy_from_slice(&1u16.to_le_bytes());
    block[12..16].copy_from_slice(&serial.to_le_bytes());
    // Week unspecified, model year 2024.
    block[16] = 0;
    block[17] = 34; // 2024 - 1990
    block[18] = 1;
    block[19] = 4;
    // Digital input, 8 bits per colour, interface not defined.
    block[20] = 0xa0;
    block[21] = u8::try_from(size_mm.0.div_ceil(10)).unwrap_or(u8::MAX);
    block[22] = u8::try_from(size_mm.1.div_ceil(10)).unwrap_or(u8::MAX);
    // Gamma 2.2.
    block[23] = 120;
    // RGB 4:4:4, sRGB default colour space, preferred timing is native.
    block[24] = 0x06;
    // sRGB chromaticity (red, green, blue, white points).
    block[25..35].copy_from_slice(&[0xee, 0x91, 0xa3, 0x54, 0x4c, 0x99, 0x26, 0x0f, 0x50, 0x54]);
    // No established timings; standard timings unused (0x01 0x01 each).
    for slot in block[38..54].chunks_exact_mut(2) {
        slot.copy_from_slice(&[0x01, 0x01]);
    }
    block[54..72].copy_from_slice(&timing.descriptor(size_mm));
    // Range limits covering the preferred timing, "range limits only" (no formula).
    let refresh = u8::try_from(timing.refresh_hz()).unwrap_or(u8::MAX);
    let line = timing.line_khz();
    let mut limits = [0u8; 13];
    limits[0] = refresh.min(50);
    limits[1] = refresh.max(70);
    limits[2] = u8::try_from(line.min(30)).unwrap_or(30);
    limits[3] = u8::try_from((line + 1).max(80)).unwrap_or(u8::MAX);
    limits[4] = u8::try_from((timing.clock_10khz.div_ceil(1000) + 1).max(15)).unwrap_or(u8::MAX);
    limits[5] = 0x01;
    limits[6] = b'\n';
    limits[7..].fill(b' ');
    block[72..90].copy_from_slice(&display_descriptor(0xfd, limits));
    block[90..108].copy_from_slice(&display_descriptor(0xfc, text("WDDM GPU")));
    block[108..126].copy_from_slice(&display_descriptor(0x10, [0; 13]));
    block[126] = 0;
    block[127] = checksum(&block[..127]);
    block
}

/// The byte that makes a block's sum zero (mod 256).
fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |sum, byte| sum.wrapping_add(*byte)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(block: &[u8]) -> u8 {
        block.iter().fold(0u8, |sum, byte| sum.wrapping_add(*byte))
    }

    /// The preferred size as the detailed timing descriptor states it.
    fn preferred(block: &[u8; EDID_SIZE]) -> (u32, u32) {
        let d = &block[54..72];
        (
            u32::from(d[2]) | (u32::from(d[4] >> 4) << 8),
            u32::from(d[5]) | (u32::from(d[7] >> 4) << 8),
        )
    }

    #[test]
    fn blocks_have_the_header_version_preferred_size_and_a_zero_sum() {
        for (width, height) in [
            (1024, 768),
            (640, 480),
            (1920, 1080),
            (3840, 2160),
            (4095, 4095),
            (1, 1),
        ] {
            let block = edid(width, height, 3);
            assert_eq!(&block[..8], &[0, 255, 255, 255, 255, 255, 255, 0]);
            assert_eq!((block[18], block[19]), (1, 4));
            assert_eq!(sum(&block), 0, "{width}x{height}");
            assert_eq!(preferred(&block), (width, height));
            let clock = u16::from_le_bytes([block[54], block[55]]);
            assert!(clock > 0, "{width}x{height}");
        }
    }

    #[test]
    fn sixty_hertz_where_the_clock_allows_it() {
        let timing = Timing::for_size(1024, 768);
        assert_eq!(timing.refresh_hz(), 60);
        // 4095x4095 needs more than 655.35 MHz at 60 Hz: the clock is capped, the rate lower.
        let giant = Timing::for_size(4095, 4095);
        assert_eq!(giant.clock_10khz, MAX_CLOCK_10KHZ);
        assert!(giant.refresh_hz() < 60);
    }
}
