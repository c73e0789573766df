//! Memory the device reaches: guest RAM (with the VRAM window cut out), checked guest frames,
//! the shared VRAM file and the locator of its BAR, and the aperture translation tables.
//!
//! Ranges that were checked come back as types only their checking module builds
//! ([`guest_ram::RamRange`], [`frames::FrameRun`], [`frames::FrameList`], [`vram::VramRange`],
//! [`gart::AperturePages`]): their arithmetic needs no overflow checks because the check proved
//! it fits.

pub mod capture;
pub mod frames;
pub mod gart;
pub mod guest_ram;
pub mod vram;
