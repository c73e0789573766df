//! The start-up steps every command shares, each turned into an [`Outcome`] so a command can
//! report exactly which step failed.

use crate::caps::Layout;
use crate::cli::Options;
use crate::dma::DmaArena;
use crate::driver::Device;
use crate::engine::ARENA_HUGEPAGES;
use crate::failure::{Failure, Outcome};
use crate::vram::Vram;
use wddm_gpu_abi::caps::WDDM_GPU_BAR_STATE_KNOWN;

/// Pins the DMA arena.
pub fn arena() -> Outcome<&'static DmaArena> {
    DmaArena::new(ARENA_HUGEPAGES).map_err(|e| Failure(format!("DMA memory: {e}")))
}

/// Brings the GPU up to DRIVER_OK.
pub fn device(arena: &'static DmaArena, options: &Options) -> Outcome<Device> {
    let mut device = Device::bring_up(arena, options.timeout)
        .map_err(|e| Failure(format!("device init: {e}")))?;
    device.control.set_verbose(options.verbose);
    Ok(device)
}

/// Reads and validates the layout.
pub fn layout(device: &mut Device) -> Outcome<Layout> {
    device
        .read_layout()
        .map_err(|e| Failure(format!("capset: {e}")))
}

/// Maps the CPU-visible VRAM segment through the BAR the locator names.
pub fn vram(device: &Device, layout: &Layout) -> Outcome<Vram> {
    let segment = layout
        .cpu_visible_vram()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    Vram::open(device.virtio.function(), &layout.header.vram_bar, segment)
        .map_err(|e| Failure(format!("VRAM BAR: {e}")))
}

/// Checks `CpuTranslatedAddress` of the CPU-visible segment against the BAR address sysfs shows;
/// returns a description of what matched.
pub fn cpu_translated_matches_bar(layout: &Layout, vram: &Vram) -> Outcome<String> {
    let bar = &layout.header.vram_bar;
    let segment = layout
        .cpu_visible_vram()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    let offset = segment.bar_offset().unwrap_or_default();
    let want = vram.bar_address.wrapping_add(offset);
    let detail = format!(
        "segment {} CpuTranslatedAddress {:#x}, sysfs BAR{} {:#x} + bar_offset {offset:#x} = {want:#x}, locator state {} address {:#x}",
        segment.desc.id,
        segment.desc.cpu_translated_address,
        bar.bar_index,
        vram.bar_address,
        bar.state,
        bar.guest_physical_address
    );
    if bar.state != WDDM_GPU_BAR_STATE_KNOWN || segment.desc.cpu_translated_address != want {
        return Err(Failure(detail));
    }
    Ok(detail)
}
