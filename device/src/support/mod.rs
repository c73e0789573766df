//! Small helpers every layer may use: locking, rate-limited guest warnings, size parsing, and
//! claiming a socket path. Nothing here knows about the device.

pub mod guest_log;
pub mod size;
pub mod socket_path;
pub mod sync;
