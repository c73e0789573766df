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
mod paging_virtual;
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

/// The default layout with a 3-level GpuMmu (9 index bits a level): levels 1 and 2 in RAM,
/// leaf tables in the VRAM segment.
pub(super) fn gpummu_rig(name: &str) -> crate::testkit::engine_rig::Rig {
    use wddm_gpu_abi::build::gpuva::{gpummu_caps, with_table_segment};
    use wddm_gpu_abi::gpummu_rules::validate_gpummu;
    use wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL;

    use crate::layout::SegmentLayout;
    use crate::testkit::engine_rig::{Rig, VRAM_SIZE};
    use crate::testkit::packets::VRAM_SEGMENT;

    let mut layout = SegmentLayout::default_for_vram(VRAM_SIZE);
    let caps = with_table_segment(
        gpummu_caps(&[9, 9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL),
        0,
        VRAM_SEGMENT,
    );
    layout.gpummu = Some(validate_gpummu(&caps, &[4, 0x11]).unwrap());
    Rig::build(name, VRAM_SIZE, layout)
}
