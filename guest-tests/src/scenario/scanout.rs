//! `scanout`: a KMD's primary surface from VRAM, as `DxgkDdiSetVidPnSourceAddress` and the vsync
//! interrupt use it (`WDDM_GPU_CMD_SET_SCANOUT_VRAM`, VBLANK events; programming guide section
//! 11). Two surfaces are drawn into the CPU-visible VRAM segment through the BAR; the driver
//! shows one, flips to the other and back, and turns the scanout off, counting VBLANK events.
//! At each surface shown it prints `GUEST-SYNC <point>` and the host helper
//! (`scripts/lib/gpuhost/vmctl.py`, plan `scanout`) takes a QMP screendump, compares it pixel
//! for pixel with the surface (`scripts/lib/gpuhost/display_pattern.py`, pattern `a` or `b`) and
//! answers `match` or `mismatch`. Output as in `suite`: one `GUEST-TEST` line per test, then
//! `GUEST-SUMMARY`.
//!
//! | point | surface the host expects |
//! | --- | --- |
//! | `scanout-a` | pattern a, [`WIDTH`] x [`HEIGHT`] |
//! | `scanout-b` | pattern b |
//! | `scanout-a-again` | pattern a |
//! | `scanout-stop-cont`, `scanout-b-after-cont` | a while stopped and after `cont`, then b |
//! | `scanout-reset` | a; then the host resets the VM (`system_reset`) and never answers |
//! | `scanout-off-after-reset` | not a: QEMU's console no longer shows the frame from before the reset |
//! | `scanout-a-after-reset` | pattern a, shown again after the reset from what VRAM kept |
//!
//! The run starts at `boot`, which the host answers `first`, and `after-reset` on the boot after
//! its reset. The first boot runs [`TESTS`] and prints its summary before `scanout-reset`; the
//! boot after the reset runs [`AFTER_RESET_TESTS`]: the reset turned the scanout off and kept the
//! surfaces in VRAM, which show again without being written.

use std::time::{Duration, Instant};

use wddm_gpu_abi::ctrl::{
    WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
    VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_CMD_SET_SCANOUT_VRAM,
};
use wddm_gpu_abi::display::VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM;
use wddm_gpu_abi::status::WDDM_GPU_EVENT_VBLANK;
use zerocopy::IntoBytes;

use crate::cli::Options;
use crate::failure::{ensure, Failure, Outcome};
use crate::kmd::{Event, EventQueue};
use crate::scenario::setup;
use crate::scenario::suite::Tally;
use crate::sync::{SyncPort, SYNC_PORT};
use crate::vram::Vram;

/// The surfaces' size (the host compares screendumps of this size).
pub const WIDTH: u32 = 320;
pub const HEIGHT: u32 = 240;
/// Row pitch: wider than a row, so the padding must not be shown.
const PITCH: u32 = WIDTH * 4 + 256;
/// Segment offsets of the two surfaces.
const SURFACE_A: u64 = 1 << 20;
const SURFACE_B: u64 = 2 << 20;
/// The rate the backend runs at (`--vblank-hz`, default 60) and what a run may measure under
/// TCG, where the guest's clock and scheduling are coarse.
const VBLANK_HZ: f64 = 60.0;
const RATE_RANGE: std::ops::RangeInclusive<f64> = 30.0..=90.0;
/// How long the rate is measured.
const MEASURE: Duration = Duration::from_secs(2);
/// How long a flip may take to be reported (a few vblanks, with TCG's delays).
const FLIP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the host may take to take and compare a screendump.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// `VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID`.
const ERR_INVALID_SCANOUT_ID: u32 = 0x1202;
/// The host's answer when the screendump is the surface.
const MATCH: &str = "match";
/// The first sync point and its answers.
const BOOT: &str = "boot";
const FIRST: &str = "first";
const AFTER_RESET: &str = "after-reset";
/// Where the host resets the VM (never answered when it does).
const RESET_POINT: &str = "scanout-reset";
/// How long the host may take to reset the VM after [`RESET_POINT`].
const RESET_TIMEOUT: Duration = Duration::from_secs(120);
/// How long without events shows the scanout is off.
const QUIET: Duration = Duration::from_millis(500);

/// The first boot's tests, in run order.
pub const TESTS: [&str; 10] = [
    "scanout_refuses_hostile_values",
    "vblanks_at_the_configured_rate",
    "screendump_shows_a",
    "flip_to_b_at_a_vblank",
    "screendump_shows_b",
    "flip_back_to_a",
    "screendump_shows_a_again",
    "scanout_survives_stop_cont",
    "scanout_off",
    "scanout_on_at_reset",
];
/// The tests of the boot after the host's reset, in run order.
pub const AFTER_RESET_TESTS: [&str; 4] = [
    "after_reset_scanout_is_off",
    "after_reset_vram_kept_the_surfaces",
    "after_reset_screendump_shows_a",
    "after_reset_scanout_off",
];

/// The pattern the host's `display_pattern.pattern_row` computes: variant a, or b (a inverted).
fn pattern_rgb(x: u32, y: u32, variant_b: bool) -> [u8; 3] {
    let rgb = [
        ((x ^ y) & 0xff) as u8,
        (((x + y) >> 2) & 0xff) as u8,
        ((7 * x + 13 * y) & 0xff) as u8,
    ];
    if variant_b {
        rgb.map(|c| !c)
    } else {
        rgb
    }
}

/// The surface's bytes: `HEIGHT` rows of `PITCH` bytes, B, G, R, X pixels, the padding 0x55.
fn surface_bytes(variant_b: bool) -> Vec<u8> {
    let mut bytes = vec![0x55; (PITCH * HEIGHT) as usize];
    for y in 0..HEIGHT {
        for x in 0..WIDTH {
            let [r, g, b] = pattern_rgb(x, y, variant_b);
            let at = (y * PITCH + x * 4) as usize;
            bytes[at..at + 4].copy_from_slice(&[b, g, r, 0]);
        }
    }
    bytes
}

struct Rig {
    device: crate::driver::Device,
    vram: Vram,
    segment_id: u32,
    base: u64,
    events: EventQueue,
}

/// Whether the surfaces are drawn, or must already be in VRAM (after the reset).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Surfaces {
    Draw,
    Kept,
}

impl Rig {
    fn new(options: &Options, surfaces: Surfaces) -> Outcome<Self> {
        let arena = setup::arena()?;
        let mut device = setup::device(arena, options)?;
        let layout = setup::layout(&mut device)?;
        let vram = setup::vram(&device, &layout)?;
        let segment = layout
            .cpu_visible_vram()
            .ok_or_else(|| Failure("no CPU-visible VRAM segment".into()))?;
        ensure(vram.contains(SURFACE_B, u64::from(PITCH * HEIGHT)), || {
            format!("VRAM segment of {:#x} bytes too small", vram.size)
        })?;
        if surfaces == Surfaces::Draw {
            vram.write(SURFACE_A, &surface_bytes(false));
            vram.write(SURFACE_B, &surface_bytes(true));
        }
        println!(
            "SCANOUT surfaces a at {SURFACE_A:#x}, b at {SURFACE_B:#x} of segment {} ({WIDTH}x{HEIGHT}, pitch {PITCH})",
            segment.desc.id
        );
        Ok(Self {
            device,
            vram,
            segment_id: segment.desc.id,
            base: segment.desc.base_address,
            events: EventQueue::new(4),
        })
    }

    /// SET_SCANOUT_VRAM; the answer's type.
    fn set(&mut self, cmd: WddmGpuCmdSetScanoutVram) -> Outcome<u32> {
        let answer = self
            .device
            .control
            .exchange("SET_SCANOUT_VRAM", cmd.as_bytes(), 64)
            .map_err(|e| Failure(format!("SET_SCANOUT_VRAM: {e}")))?;
        let type_ = answer
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| Failure("SET_SCANOUT_VRAM: empty answer".into()))?;
        Ok(type_)
    }

    fn surface(&self, offset: u64) -> WddmGpuCmdSetScanoutVram {
        WddmGpuCmdSetScanoutVram {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
            scanout_id: 0,
            segment_id: self.segment_id,
            address: self.base + offset,
            format: VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM,
            width: WIDTH,
            height: HEIGHT,
            pitch: PITCH,
        }
    }

    fn show(&mut self, offset: u64) -> Outcome {
        let type_ = self.set(self.surface(offset))?;
        ensure(type_ == VIRTIO_GPU_RESP_OK_NODATA, || {
            format!("SET_SCANOUT_VRAM at {offset:#x} answered {type_:#x}")
        })
    }

    /// The next VBLANK event (any other kind fails), within `timeout`.
    fn vblank(&mut self, timeout: Duration) -> Outcome<Event> {
        let event = self
            .events
            .next(&mut self.device.control, timeout)?
            .ok_or_else(|| Failure(format!("no VBLANK event within {timeout:?}")))?;
        ensure(event.resp.kind == WDDM_GPU_EVENT_VBLANK, || {
            format!("expected a VBLANK event, got {event}")
        })?;
        Ok(event)
    }

    /// Events until the first showing `address`: the earlier ones must show `before`, and
    /// counters rise throughout. Returns the first event showing `address`.
    fn until_shown(&mut self, address: u64, before: Option<u64>) -> Outcome<Event> {
        let start = Instant::now();
        let mut last = None;
        loop {
            let left = FLIP_TIMEOUT.saturating_sub(start.elapsed());
            let event = self.vblank(left)?;
            let r = event.resp;
            if let Some(last) = last {
                ensure(r.vblank_count > last, || {
                    format!("vblank_count {} after {last}", r.vblank_count)
                })?;
            }
            last = Some(r.vblank_count);
            let shown = (r.scanout_segment_id != 0).then_some(r.scanout_address);
            if shown == Some(address) || (address == 0 && shown.is_none()) {
                return Ok(event);
            }
            ensure(before.is_none_or(|b| shown == Some(b)), || {
                format!("a vblank shows {shown:x?}, neither the old {before:x?} nor the new {address:#x}")
            })?;
        }
    }
}

fn hostile(rig: &mut Rig) -> Outcome {
    let good = rig.surface(SURFACE_A);
    let cases = [
        (
            "pitch below a row",
            WddmGpuCmdSetScanoutVram {
                pitch: WIDTH * 4 - 4,
                ..good
            },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            "past the segment's end",
            WddmGpuCmdSetScanoutVram {
                address: u64::MAX - 4096,
                ..good
            },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            "unknown format",
            WddmGpuCmdSetScanoutVram { format: 5, ..good },
            VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
        ),
        (
            "scanout 16",
            WddmGpuCmdSetScanoutVram {
                scanout_id: 16,
                ..good
            },
            ERR_INVALID_SCANOUT_ID,
        ),
    ];
    for (what, cmd, want) in cases {
        let got = rig.set(cmd)?;
        ensure(got == want, || {
            format!("{what}: answered {got:#x}, want {want:#x}")
        })?;
    }
    Ok(())
}

/// Shows a, then measures the vblank counter's rate over [`MEASURE`].
fn rate(rig: &mut Rig) -> Outcome<String> {
    rig.events.replenish(&mut rig.device.control)?;
    rig.show(SURFACE_A)?;
    let address = rig.base + SURFACE_A;
    let first = rig.until_shown(address, None)?;
    let start = Instant::now();
    let mut last = first;
    let mut received = 1;
    while start.elapsed() < MEASURE {
        let event = rig.vblank(Duration::from_secs(2))?;
        let r = event.resp;
        ensure(r.vblank_count > last.resp.vblank_count, || {
            format!(
                "vblank_count {} after {}",
                r.vblank_count, last.resp.vblank_count
            )
        })?;
        ensure(
            (r.scanout_id, r.scanout_segment_id, r.scanout_address) == (0, rig.segment_id, address),
            || {
                format!(
                    "a vblank shows scanout {} segment {} address {:#x}, want 0, {}, {address:#x}",
                    r.scanout_id, r.scanout_segment_id, r.scanout_address, rig.segment_id
                )
            },
        )?;
        last = event;
        received += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let counted = last.resp.vblank_count - first.resp.vblank_count;
    let hz = counted as f64 / elapsed;
    let detail = format!(
        "{counted} vblanks in {elapsed:.2} s = {hz:.1} Hz (configured {VBLANK_HZ}); {received} events received"
    );
    println!("SCANOUT {detail}");
    ensure(RATE_RANGE.contains(&hz), || detail.clone())?;
    Ok(detail)
}

/// The host's screendump verdict at `point`.
fn screendump(port: &mut SyncPort, point: &str) -> Outcome {
    let answer = port
        .sync(point, SYNC_TIMEOUT)
        .map_err(|e| Failure(e.to_string()))?;
    ensure(answer == MATCH, || {
        format!("the host's screendump at {point}: {answer} (its log has the pixels)")
    })
}

fn flip(rig: &mut Rig, to: u64, from: u64) -> Outcome {
    rig.show(to)?;
    let event = rig.until_shown(rig.base + to, Some(rig.base + from))?;
    println!(
        "SCANOUT flip to {to:#x} shown at vblank {}",
        event.resp.vblank_count
    );
    Ok(())
}

/// The host stops the VM while a is shown, checks the screen, continues it and checks again;
/// then vblanks go on counting, still showing a, and a flip after the resume reaches the
/// screen (b), before the scanout goes back to a.
fn stop_cont(rig: &mut Rig, port: &mut SyncPort) -> Outcome {
    let before = rig
        .until_shown(rig.base + SURFACE_A, None)?
        .resp
        .vblank_count;
    screendump(port, "scanout-stop-cont")?;
    let after = rig
        .until_shown(rig.base + SURFACE_A, None)?
        .resp
        .vblank_count;
    ensure(after > before, || {
        format!("vblank_count {after} after stop/cont, {before} before")
    })?;
    println!("SCANOUT stop/cont: vblank {before} before, {after} after, a still shown");
    flip(rig, SURFACE_B, SURFACE_A)?;
    screendump(port, "scanout-b-after-cont")?;
    flip(rig, SURFACE_A, SURFACE_B)
}

fn off(rig: &mut Rig) -> Outcome {
    let cmd = WddmGpuCmdSetScanoutVram {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        ..Default::default()
    };
    let type_ = rig.set(cmd)?;
    ensure(type_ == VIRTIO_GPU_RESP_OK_NODATA, || {
        format!("turning the scanout off answered {type_:#x}")
    })?;
    rig.until_shown(0, Some(rig.base + SURFACE_A))?;
    no_events(rig, "after the scanout was turned off")
}

/// No event within [`QUIET`].
fn no_events(rig: &mut Rig, when: &str) -> Outcome {
    let late = rig.events.next(&mut rig.device.control, QUIET)?;
    ensure(late.is_none(), || {
        format!(
            "an event {when}: {}",
            late.map_or(String::new(), |e| e.to_string())
        )
    })
}

/// a on the scanout again, as the scanout stood when the host resets the VM.
fn on_at_reset(rig: &mut Rig) -> Outcome {
    rig.show(SURFACE_A)?;
    rig.until_shown(rig.base + SURFACE_A, None).map(|_| ())
}

/// a shown after the reset: the vblank counter starts again at 1.
fn shown_counting_from_one(rig: &mut Rig) -> Outcome {
    rig.show(SURFACE_A)?;
    let first = rig.until_shown(rig.base + SURFACE_A, None)?;
    let count = first.resp.vblank_count;
    ensure(count == 1, || {
        format!("the first vblank after the reset counts {count}, not 1")
    })?;
    println!("SCANOUT after the reset: a shown from vblank {count}");
    Ok(())
}

/// Both surfaces hold what the first boot drew.
fn surfaces_kept(rig: &Rig) -> Outcome {
    for (offset, variant_b) in [(SURFACE_A, false), (SURFACE_B, true)] {
        let want = surface_bytes(variant_b);
        let mut got = vec![0u8; want.len()];
        rig.vram.read(offset, &mut got);
        if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
            return Err(Failure(format!(
                "surface at {offset:#x}: byte {at} is {:#04x}, want {:#04x} (VRAM lost across the reset)",
                got[at], want[at]
            )));
        }
    }
    println!(
        "SCANOUT after the reset: both surfaces ({} bytes each) still in VRAM",
        PITCH * HEIGHT
    );
    Ok(())
}

/// Runs the scenario's part for this boot; true iff every test of it passed.
pub fn run(options: &Options) -> bool {
    let mut tally = Tally::default();
    let mut port = match SyncPort::open(SYNC_PORT) {
        Ok(port) => port,
        Err(err) => return not_run(&mut tally, &TESTS, &err.to_string()),
    };
    match port.sync(BOOT, SYNC_TIMEOUT) {
        Ok(answer) if answer == FIRST => first_boot(&mut tally, &mut port, options),
        Ok(answer) if answer == AFTER_RESET => after_reset(&mut tally, &mut port, options),
        Ok(answer) => not_run(
            &mut tally,
            &TESTS,
            &format!(
                "the host answered {answer:?} at sync point {BOOT} (want {FIRST} or {AFTER_RESET})"
            ),
        ),
        Err(err) => not_run(&mut tally, &TESTS, &err.to_string()),
    }
}

fn not_run(tally: &mut Tally, tests: &[&str], why: &str) -> bool {
    let why = Err(Failure(format!("not run: {why}")));
    for name in tests {
        tally.report(name, &why);
    }
    tally.summary()
}

/// The first boot: every test, its summary, then the host's reset (which ends this run).
fn first_boot(tally: &mut Tally, port: &mut SyncPort, options: &Options) -> bool {
    let mut rig = match Rig::new(options, Surfaces::Draw) {
        Ok(rig) => rig,
        Err(why) => return not_run(tally, &TESTS, &why.0),
    };
    let rig = &mut rig;
    tally.report(TESTS[0], &hostile(rig));
    tally.report(TESTS[1], &rate(rig).map(|_| ()));
    // Every sync point is reached, so the host's plan never stalls.
    tally.report(TESTS[2], &screendump(port, "scanout-a"));
    tally.report(TESTS[3], &flip(rig, SURFACE_B, SURFACE_A));
    tally.report(TESTS[4], &screendump(port, "scanout-b"));
    tally.report(TESTS[5], &flip(rig, SURFACE_A, SURFACE_B));
    tally.report(TESTS[6], &screendump(port, "scanout-a-again"));
    tally.report(TESTS[7], &stop_cont(rig, port));
    tally.report(TESTS[8], &off(rig));
    tally.report(TESTS[9], &on_at_reset(rig));
    tally.summary();
    // The host screendumps a and resets the VM, which ends this run: returning means it did not.
    match port.sync(RESET_POINT, RESET_TIMEOUT) {
        Ok(answer) => println!(
            "SCANOUT the host answered {answer:?} at {RESET_POINT} instead of resetting the VM"
        ),
        Err(err) => println!("SCANOUT no reset after {RESET_POINT}: {err}"),
    }
    false
}

/// The boot after the host's reset.
fn after_reset(tally: &mut Tally, port: &mut SyncPort, options: &Options) -> bool {
    let mut rig = match Rig::new(options, Surfaces::Kept) {
        Ok(rig) => rig,
        Err(why) => return not_run(tally, &AFTER_RESET_TESTS, &why.0),
    };
    let rig = &mut rig;
    let quiet = rig
        .events
        .replenish(&mut rig.device.control)
        .and_then(|()| no_events(rig, "before any SET_SCANOUT_VRAM after the reset"));
    // Whatever the first check found, the host's plan goes on.
    let screen_off = screendump(port, "scanout-off-after-reset");
    tally.report(AFTER_RESET_TESTS[0], &quiet.and(screen_off));
    tally.report(AFTER_RESET_TESTS[1], &surfaces_kept(rig));
    let shown = shown_counting_from_one(rig);
    let screen = screendump(port, "scanout-a-after-reset");
    tally.report(AFTER_RESET_TESTS[2], &shown.and(screen));
    tally.report(AFTER_RESET_TESTS[3], &off(rig));
    tally.summary()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surfaces_hold_the_hosts_patterns_with_padding() {
        let a = surface_bytes(false);
        let b = surface_bytes(true);
        // (3, 2): r = 3 ^ 2, g = 5 >> 2, b = 21 + 26; stored B, G, R, X.
        let at = (2 * PITCH + 3 * 4) as usize;
        assert_eq!(a[at..at + 4], [47, 1, 1, 0]);
        assert_eq!(b[at..at + 4], [!47, !1, !1, 0]);
        assert_eq!(a[(WIDTH * 4) as usize], 0x55);
        assert_eq!(a.len(), (PITCH * HEIGHT) as usize);
    }
}
