//! A user-space virtio 1.x PCI (modern) driver: the transport (status, features, queue setup
//! through the common configuration) and split virtqueues polled without interrupts.

pub mod split_queue;
pub mod transport;
