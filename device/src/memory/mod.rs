//! Memory the device reaches: guest RAM (with the VRAM window cut out), the shared VRAM file and
//! the locator of its BAR, and the aperture translation tables.

pub mod gart;
pub mod guest_ram;
pub mod vram;
