//! The check every refused packet must pass: it faults with its status at its own offset, after
//! the packet before it completed, and changes nothing.

use wddm_gpu_abi::build::{fence, transfer};
use wddm_gpu_abi::submit::SubmitStatus;

use crate::testkit::bytes::pattern;
use crate::testkit::engine_rig::{
    status, Rig, APERTURE_PAGES, DATA, DATA_SIZE, PAGE, PAGE_USIZE, VRAM_SIZE,
};
use crate::testkit::packets::{in_vram, packet_bytes};

/// Runs `fence(1)` then `bad`: the bad packet must fault with `expected` at offset 16 and leave
/// the table (watched pages), the data pages and the VRAM as they were.
#[track_caller]
pub(super) fn assert_refused(rig: &mut Rig, name: &str, bad: Vec<u8>, expected: SubmitStatus) {
    let watch = || (0..64).chain(APERTURE_PAGES - 4..APERTURE_PAGES);
    let before = rig.entries(watch());
    let ram = rig.ram_read(DATA, usize::try_from(DATA_SIZE).unwrap());
    let vram = rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap());
    let completion = rig.submit(&[packet_bytes(fence(1)), bad].concat());
    assert_eq!(
        status(&completion),
        Some(expected),
        "{name}: {completion:?}"
    );
    assert_eq!(completion.fault().unwrap().0, 16, "{name}");
    assert_eq!(completion.packets_completed, 1, "{name}");
    assert_eq!(rig.entries(watch()), before, "{name}: the table changed");
    assert!(
        rig.ram_read(DATA, usize::try_from(DATA_SIZE).unwrap()) == ram,
        "{name}: RAM changed"
    );
    assert!(
        rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap()) == vram,
        "{name}: VRAM changed"
    );
}

/// On a fresh rig, runs one bad packet after a good TRANSFER and checks: the fault status, the
/// packet offset, that the guard bytes around the VRAM target are intact, and that the next
/// submission works.
#[track_caller]
pub(super) fn assert_fault(name: &str, build: impl Fn(&Rig) -> Vec<u8>, expected: SubmitStatus) {
    let mut rig = Rig::new(name);
    let guard = pattern(3 * PAGE_USIZE, 77);
    rig.vram_write(0x10_0000 - PAGE, &guard);
    let good = packet_bytes(transfer(16, in_vram(0), in_vram(0x8000)));
    let bad = build(&rig);
    let completion = rig.submit(&[good.clone(), bad].concat());
    assert_eq!(
        status(&completion),
        Some(expected),
        "{name}: {completion:?}"
    );
    assert_eq!(completion.packets_completed, 1, "{name}");
    assert_eq!(
        completion.fault().unwrap().0,
        u32::try_from(good.len()).unwrap(),
        "{name}"
    );
    assert_eq!(
        rig.vram_read(0x10_0000 - PAGE, guard.len()),
        guard,
        "{name}: VRAM changed"
    );
    let after = rig.submit(&good);
    assert_eq!(after.stop, None, "{name}: device not ready after the fault");
}
