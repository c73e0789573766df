//! Engine tests on plain structs, all on the one rig ([`crate::testkit::engine_rig::Rig`]): guest
//! RAM and the VRAM window in one memory table, packets built with [`wddm_gpu_abi::build`] and
//! written into a DMA buffer, results compared byte for byte, often with a [`model::Model`] of
//! the data pages, the VRAM and the aperture table.
//!
//! One file a topic: TRANSFER, the faults of bad packets and commands, FILL, segment access and
//! FENCE, aperture MAP/UNMAP and their checks, DMA buffers in segments, interruption, and
//! property tests against byte models.

mod aperture;
mod dma_buffer;
mod faults;
mod fill;
mod hooks;
mod interruption;
mod map_checks;
mod model;
mod page_tables;
mod random;
mod refusals;
mod segment_access;
mod transfer;

use crate::engine::Fault;
use crate::testkit::packets::APERTURE_SEGMENT;

/// How a submission stops when the packet at `offset` reaches page `page` of the default
/// aperture, which nothing maps.
fn unmapped_at(offset: u32, page: u64) -> Option<(u32, Fault)> {
    Some((
        offset,
        Fault::UnmappedAperture {
            segment: APERTURE_SEGMENT,
            page,
        },
    ))
}
