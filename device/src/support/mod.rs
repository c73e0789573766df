//! Small helpers every layer may use: locking, rate-limited guest warnings, size and number
//! parsing, claiming a socket path, and checked byte spans. Nothing here knows about the device.

pub mod guest_log;
pub mod number;
pub mod size;
pub mod socket_path;
pub mod span;
pub mod sync;
