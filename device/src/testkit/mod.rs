//! What the crate's unit tests share: scratch files and directories ([`scratch`]), guest memory
//! tables with the VRAM window mapped ([`guest`]), byte patterns ([`bytes`]), layouts besides
//! the default one ([`layouts`]), packet endpoints over the ABI crate's builders ([`packets`]),
//! and the two rigs: the paging engine on plain structs ([`engine_rig`]) and the device model
//! through its request interface ([`gpu_rig`]).
//!
//! Test-only and outside the layer order: a test may reach any layer.

pub mod bytes;
pub mod engine_rig;
pub mod gpu_rig;
pub mod guest;
pub mod layouts;
pub mod packets;
pub mod scratch;
