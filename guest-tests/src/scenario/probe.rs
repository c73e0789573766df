//! `probe`: bring the device up and list what it answers. Works against any virtio-gpu (QEMU's
//! built-in one too), so it validates discovery, the transport, the rings and DMA memory even
//! without the WDDM backend.

use crate::cli::Options;
use crate::driver::Device;
use crate::failure::Outcome;
use crate::scenario::setup;

/// Runs the probe; true if the device came up and answered GET_DISPLAY_INFO.
pub fn run(options: &Options) -> bool {
    match probe(options) {
        Ok(()) => true,
        Err(failure) => {
            println!("PROBE FAIL {failure}");
            false
        }
    }
}

fn probe(options: &Options) -> Outcome {
    let arena = setup::arena()?;
    println!("PROBE dma {} hugepages pinned", arena.hugepages());
    let mut device = setup::device(arena, options)?;
    describe(&device);
    let info = device.control.display_info()?;
    for (i, mode) in info
        .pmodes
        .iter()
        .enumerate()
        .filter(|(_, m)| m.enabled != 0)
    {
        println!(
            "PROBE scanout {i}: {}x{} at {},{}",
            mode.rect[2], mode.rect[3], mode.rect[0], mode.rect[1]
        );
    }
    println!("PROBE display_info ok");
    for index in 0..device.num_capsets {
        match device.control.capset_info(index) {
            Ok(c) => println!(
                "PROBE capset[{index}] id={:#x} max_version={} max_size={}",
                c.capset_id, c.capset_max_version, c.capset_max_size
            ),
            Err(e) => println!("PROBE capset[{index}] error: {e}"),
        }
    }
    arena.recheck()?;
    println!("PROBE dma_addresses_stable");
    Ok(())
}

fn describe(device: &Device) {
    let v = &device.virtio;
    let c = &v.caps;
    println!(
        "PROBE gpu {} common=BAR{}+{:#x} notify=BAR{}+{:#x} (x{}) isr=BAR{}+{:#x} device=BAR{}+{:#x}",
        v.function().bdf(),
        c.common.bar,
        c.common.offset,
        c.notify.bar,
        c.notify.offset,
        c.notify_off_multiplier,
        c.isr.bar,
        c.isr.offset,
        c.device.bar,
        c.device.offset
    );
    println!(
        "PROBE features={:#018x} status={:#04x} num_capsets={}",
        v.device_features,
        v.status(),
        device.num_capsets
    );
}
