//! The virtio-gpu device the transport drives ([`gpu::Gpu`]): two sibling devices, the paging
//! GPU (`crate::gpu`) and the 2D display (`crate::display`), behind a router
//! ([`router::route`]) that sends each request, decoded once by the transport, to one of them;
//! `Gpu` owns what both share (the config space, the vblank thread, the order of pause and
//! reset). A kick's [`kick::Kick`] holds the display's output until the kick's answers are on
//! the used ring, and only when the kick carried a display command.

pub mod gpu;
pub mod kick;
pub mod router;
