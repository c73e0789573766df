//! Small helpers every layer may use: locking, rate-limited guest warnings, size and number
//! parsing, durations in nanoseconds, claiming a socket path, checked byte spans, and a file writer on its own thread. Nothing here knows about the device.

pub mod guest_log;
pub mod nanos;
pub mod number;
pub mod size;
pub mod socket_path;
pub mod span;
pub mod sync;
pub mod writer_thread;
