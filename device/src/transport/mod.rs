//! vhost-user: the backend QEMU talks to (features, memory table, virtqueues, shared memory), and
//! the display through QEMU's vhost-user-gpu socket, and the `--fd` relay for a connected socket.
//!
//! `backend` is the [`vhost_user_backend::VhostUserBackendMut`] and dispatches to the rest:
//! `queue` takes chains off the rings, `chain_reply` completes them through the answer `gate`,
//! `in_flight` tracks the control heads the device holds, `lifecycle` pauses, resumes and resets,
//! `shmem` maps the VRAM into the frontend's shared-memory region, `memory_table` checks a new
//! memory table.

pub mod backend;
mod chain_reply;
pub mod display;
pub mod fd_relay;
mod gate;
mod in_flight;
mod lifecycle;
mod memory_table;
mod queue;
mod shmem;

#[cfg(test)]
mod tests;
