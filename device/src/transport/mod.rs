//! vhost-user: the backend QEMU talks to (features, memory table, virtqueues, shared memory), and
//! the `--fd` relay for a connected socket.

pub mod backend;
pub mod fd_relay;
