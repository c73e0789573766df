//! The start-up steps every command shares, each turned into an [`Outcome`] so a command can
//! report exactly which step failed.

use wddm_gpu_abi::caps::WDDM_GPU_BAR_STATE_KNOWN;

use crate::caps::Layout;
use crate::cli::Options;
use crate::dma::DmaArena;
use crate::driver::{Device, BAR_WAIT_TIMEOUT};
use crate::engine::ARENA_HUGEPAGES;
use crate::failure::{Failure, Outcome};
use crate::vram::Vram;

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

/// The arena, then the device on it: both outcomes, for commands that report each step (the
/// device fails too when the arena did).
pub fn arena_and_device(options: &Options) -> (Outcome<&'static DmaArena>, Outcome<Device>) {
    let arena = arena();
    let device = arena.clone().and_then(|arena| device(arena, options));
    (arena, device)
}

/// Reads and validates the layout once the VRAM BAR is known (see
/// [`Device::wait_bar_known`]); prints what it waited for as a `VRAM BAR wait:` line. A BAR still
/// not known after [`BAR_WAIT_TIMEOUT`] is not an error here: the layout is valid, and the checks
/// of `CpuTranslatedAddress` report the locator.
pub fn layout(device: &mut Device) -> Outcome<Layout> {
    let wait = device
        .wait_bar_known(BAR_WAIT_TIMEOUT)
        .map_err(|e| Failure(format!("capset: {e}")))?;
    println!("VRAM BAR wait: {wait}");
    Ok(wait.layout)
}

/// Maps the CPU-visible VRAM segment through the BAR the locator names.
pub fn vram(device: &Device, layout: &Layout) -> Outcome<Vram> {
    let segment = layout
        .cpu_visible_vram()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    Vram::open(device.virtio.function(), &layout.header.vram_bar, segment)
        .map_err(|e| Failure(format!("VRAM BAR: {e}")))
}

/// Checks `CpuTranslatedAddress` of every segment against the BAR address sysfs shows: BAR
/// address + `bar_offset` for each segment in the BAR (CPU-visible memory segments), 0 for
/// every other one. Returns a description of what matched.
pub fn cpu_translated_matches_bar(layout: &Layout, vram: &Vram) -> Outcome<String> {
    let bar = &layout.header.vram_bar;
    layout
        .cpu_visible_vram()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    let mut matched = Vec::new();
    let mut wrong = Vec::new();
    for segment in &layout.segments {
        let id = segment.desc.id;
        let got = segment.desc.cpu_translated_address;
        let line = match segment.bar_offset() {
            Some(offset) => {
                let want = vram.bar_address.wrapping_add(offset);
                let text = format!(
                    "segment {id} CpuTranslatedAddress {got:#x} = {} + bar_offset {offset:#x}",
                    vram.describe(bar.bar_index)
                );
                (got == want).then_some(text).ok_or_else(|| {
                    format!(
                        "segment {id} CpuTranslatedAddress {got:#x}, want {} + bar_offset \
                         {offset:#x} = {want:#x}",
                        vram.describe(bar.bar_index)
                    )
                })
            }
            None => {
                let what = if segment.is_aperture() {
                    "aperture"
                } else {
                    "device-only"
                };
                (got == 0)
                    .then(|| format!("segment {id} ({what}) CpuTranslatedAddress 0"))
                    .ok_or_else(|| {
                        format!("segment {id} ({what}) CpuTranslatedAddress {got:#x}, want 0")
                    })
            }
        };
        match line {
            Ok(text) => matched.push(text),
            Err(text) => wrong.push(text),
        }
    }
    let locator = format!(
        "locator state {} address {:#x}",
        bar.state, bar.guest_physical_address
    );
    if bar.state != WDDM_GPU_BAR_STATE_KNOWN || !wrong.is_empty() {
        wrong.push(locator);
        return Err(Failure(wrong.join("; ")));
    }
    matched.push(locator);
    Ok(matched.join("; "))
}
