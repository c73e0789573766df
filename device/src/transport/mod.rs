//! vhost-user: the backend QEMU talks to (features, memory table, virtqueues, shared memory), and
//! the display through QEMU's vhost-user-gpu socket, and the `--fd` relay for a connected socket.

pub mod backend;
pub mod display;
pub mod fd_relay;
