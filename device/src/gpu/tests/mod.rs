//! The device model through its request interface, on the toolkit's rig
//! ([`crate::testkit::gpu_rig::GpuRig`]) with replies collected on channels: the status page and
//! events ([`events`]), and how submissions are scheduled, preempted and reset ([`scheduling`]).

mod events;
mod scheduling;

/// A buffer of 64 copies of 48 MiB within VRAM from `source`: seconds of work, far more than a
/// preemption or a reset needs to find it running.
fn seconds_of_copying(source: u64) -> Vec<u8> {
    use crate::testkit::packets::{in_vram, packet_bytes};
    (0..64)
        .flat_map(|_| {
            packet_bytes(wddm_gpu_abi::build::transfer(
                48 << 20,
                in_vram(source),
                in_vram(64 << 20),
            ))
        })
        .collect()
}
