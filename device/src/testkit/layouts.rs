//! Segment layouts the tests use besides the default one, written as layout files.

use crate::layout::file::parse_layout;
use crate::layout::rules::validate;
use crate::layout::SegmentLayout;

/// 4 MiB of BAR VRAM (segment 1) and 2 MiB of device-only VRAM at 4 GiB (segment 2).
pub const DEVICE_ONLY: &str = "[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"4MiB\"\n\
    [[segments]]\nflags = []\nsize = \"2MiB\"\nbase_address = 0x100000000\n";

/// 4 MiB of BAR VRAM (segment 1), a 1 MiB aperture that is not cache-coherent (segment 2) and
/// 2 MiB of device-only VRAM at 4 GiB (segment 3).
pub const NON_COHERENT: &str = "[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"4MiB\"\n\
    [[segments]]\nflags = [\"Aperture\"]\nsize = \"1MiB\"\n\
    [[segments]]\nflags = []\nsize = \"2MiB\"\nbase_address = 0x100000000\n";

/// The layout a layout file describes, checked for `vram_size` bytes of BAR VRAM.
pub fn from_file(text: &str, vram_size: u64) -> SegmentLayout {
    validate(&parse_layout(text).unwrap(), vram_size).unwrap()
}
