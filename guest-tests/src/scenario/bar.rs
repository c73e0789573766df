//! Suite tests that take the VRAM BAR away from under the device and give it back: memory decode
//! on the BAR's function switched off and on, and the BAR reprogrammed to another free address.
//!
//! QEMU drops the BAR from the vhost-user memory table while its function does not decode, and
//! announces it again, at whatever address the BAR register holds, when decode comes back. The
//! capset's BAR locator must follow: `state`, `guest_physical_address` and the CPU-visible
//! segment's `cpu_translated_address`, with a new `generation` at every change. Transfers and
//! the CPU's view of VRAM must keep working, and VRAM keeps its contents.
//!
//! Each test puts memory decode and the BAR address back as they were, even when it fails (a
//! [`BarRestore`] does it when dropped), so the tests after it run on the original layout. Each
//! step prints a `BAR <test>: ...` line with what the locator said.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use wddm_gpu_abi::caps::{WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED};

use crate::caps::{Layout, Segment};
use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::iomem;
use crate::pci::config::MemBar;
use crate::pci::sysfs::{PciFunction, COMMAND_MEMORY};
use crate::scatter::FrameList;
use crate::vram::{self, Vram};

use super::valid::Test;

/// How long the locator may take to follow a change: QEMU sends the new memory table during the
/// config write, but the backend answers the capset from another thread, and TCG is slow.
const POLL_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between capset reads while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// VRAM written before the change and checked after it: the contents must survive.
const KEEP_OFFSET: u64 = 0x40_0000;
/// Bytes of it.
const KEEP_LEN: u64 = (64 << 10) + 5;
/// Mixed into a test's tag for those bytes ("keep").
const KEEP_TAG: u64 = 0x6b65_6570;

/// The BAR tests, in run order.
pub const TESTS: [(&str, Test); 2] = [
    ("bar_decode_toggle", bar_decode_toggle),
    ("bar_moved", bar_moved),
];

/// What one capset read said about the BAR.
#[derive(Clone, Copy, Debug)]
struct Seen {
    state: u32,
    generation: u32,
    address: u64,
    /// `cpu_translated_address` of the CPU-visible segment.
    cpu_translated: u64,
    /// Its `bar_offset`.
    bar_offset: u64,
}

impl Seen {
    fn known(&self) -> bool {
        self.state == WDDM_GPU_BAR_STATE_KNOWN
    }

    fn not_mapped(&self) -> bool {
        self.state == WDDM_GPU_BAR_STATE_NOT_MAPPED
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            WDDM_GPU_BAR_STATE_KNOWN => "known",
            WDDM_GPU_BAR_STATE_NOT_MAPPED => "not-mapped",
            _ => "invalid",
        };
        write!(
            f,
            "state={state} generation={} guest_physical_address={:#x} cpu_translated_address={:#x}",
            self.generation, self.address, self.cpu_translated
        )
    }
}

/// Reads and validates the capset (the parser already insists that `cpu_translated_address` is
/// the BAR address plus `bar_offset` while the BAR is known, and 0 otherwise).
fn observe(e: &mut Engine) -> Outcome<(Layout, Seen)> {
    let layout = e
        .device
        .read_layout()
        .map_err(|err| Failure(format!("capset: {err}")))?;
    let segment = layout
        .cpu_visible_vram()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    let bar = &layout.header.vram_bar;
    let seen = Seen {
        state: bar.state,
        generation: bar.generation,
        address: bar.guest_physical_address,
        cpu_translated: segment.desc.cpu_translated_address,
        bar_offset: segment.bar_offset().unwrap_or_default(),
    };
    Ok((layout, seen))
}

/// Reads the capset until `done` holds; fails with the last reading after [`POLL_TIMEOUT`].
fn wait_for(
    e: &mut Engine,
    test: &str,
    step: &str,
    done: impl Fn(&Seen) -> bool,
) -> Outcome<(Layout, Seen)> {
    let start = Instant::now();
    let mut reads = 0u32;
    loop {
        let (layout, seen) = observe(e)?;
        reads += 1;
        if done(&seen) {
            println!(
                "BAR {test}: {step}: {seen} ({reads} capset reads, {} ms)",
                start.elapsed().as_millis()
            );
            return Ok((layout, seen));
        }
        if start.elapsed() >= POLL_TIMEOUT {
            return Err(Failure(format!(
                "{step}: after {} ms and {reads} capset reads the locator still says {seen}",
                start.elapsed().as_millis()
            )));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Fails unless `layout` has the CPU-visible segment the engine uses (the locator may change
/// with the BAR; the segments may not).
fn same_segment(e: &Engine, layout: &Layout) -> Outcome<Segment> {
    let segment = layout
        .cpu_visible_vram()
        .cloned()
        .ok_or_else(|| Failure("layout has no CPU-visible memory segment".into()))?;
    ensure(
        segment.desc.id == e.segment.desc.id
            && segment.desc.size == e.segment.desc.size
            && segment.desc.base_address == e.segment.desc.base_address
            && segment.bar_offset() == e.segment.bar_offset(),
        || {
            format!(
                "CPU-visible segment changed with the BAR: was {:?}, now {:?}",
                e.segment.desc, segment.desc
            )
        },
    )?;
    Ok(segment)
}

/// Makes `layout` the engine's layout. Only done once the BAR is back where it started, so a
/// failing test leaves the engine with a layout that matches the restored BAR.
fn adopt(e: &mut Engine, layout: Layout) -> Outcome {
    e.segment = same_segment(e, &layout)?;
    e.layout = layout;
    Ok(())
}

/// The function carrying the VRAM BAR, and the BAR index.
fn vram_function(e: &Engine) -> Outcome<(PciFunction, u32)> {
    let bar = &e.layout.header.vram_bar;
    let function = vram::bar_function(e.device.virtio.function(), bar)?;
    Ok((function, bar.bar_index))
}

/// Puts a function's memory BAR and memory decode back as they were when it was made: by
/// [`BarRestore::restore`], or when dropped, so a failing test does not leave the tests after it
/// without VRAM.
struct BarRestore {
    function: PciFunction,
    bar: u32,
    original: MemBar,
    decode: bool,
    armed: bool,
}

impl BarRestore {
    fn new(function: &PciFunction, bar: u32) -> Outcome<Self> {
        Ok(Self {
            function: function.clone(),
            bar,
            original: function.mem_bar(bar)?,
            decode: function.command()? & COMMAND_MEMORY != 0,
            armed: true,
        })
    }

    /// Rewrites the BAR if it changed (with decode off), then restores decode; checks both.
    fn restore(&mut self) -> Outcome {
        if self.function.mem_bar(self.bar)? != self.original {
            self.function.update_command(0, COMMAND_MEMORY)?;
            self.function.write_mem_bar(self.bar, &self.original)?;
        }
        let command = if self.decode {
            self.function.update_command(COMMAND_MEMORY, 0)?
        } else {
            self.function.command()?
        };
        let now = self.function.mem_bar(self.bar)?;
        ensure(
            now == self.original && (command & COMMAND_MEMORY != 0) == self.decode,
            || {
                format!(
                    "restoring {} BAR{}: BAR holds {:#x} (want {:#x}), command {command:#06x}",
                    self.function.bdf(),
                    self.bar,
                    now.address(),
                    self.original.address()
                )
            },
        )?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for BarRestore {
    fn drop(&mut self) {
        if self.armed {
            if let Err(why) = self.restore() {
                println!("BAR restore failed: {why}");
            }
        }
    }
}

/// Switches memory decode of `function` on or off (other command bits kept) and checks it took.
fn set_decode(function: &PciFunction, on: bool) -> Outcome<u16> {
    let (set, clear) = if on {
        (COMMAND_MEMORY, 0)
    } else {
        (0, COMMAND_MEMORY)
    };
    let command = function.update_command(set, clear)?;
    ensure((command & COMMAND_MEMORY != 0) == on, || {
        format!(
            "{} command register reads {command:#06x} after turning memory decode {}",
            function.bdf(),
            if on { "on" } else { "off" }
        )
    })?;
    Ok(command)
}

/// Checks a known locator: at `address`, `cpu_translated_address` following it, and a
/// generation different from every `earlier` one.
fn check_known(seen: &Seen, address: u64, earlier: &[u32], step: &str) -> Outcome {
    ensure(seen.address == address, || {
        format!(
            "{step}: locator address {:#x}, BAR is at {address:#x}",
            seen.address
        )
    })?;
    ensure(
        seen.cpu_translated == address.wrapping_add(seen.bar_offset),
        || {
            format!(
                "{step}: cpu_translated_address {:#x} != BAR {address:#x} + bar_offset {:#x}",
                seen.cpu_translated, seen.bar_offset
            )
        },
    )?;
    ensure(!earlier.contains(&seen.generation), || {
        format!(
            "{step}: generation {} not new (earlier {earlier:?})",
            seen.generation
        )
    })
}

/// Checks a not-mapped locator.
fn check_not_mapped(seen: &Seen, earlier: &[u32], step: &str) -> Outcome {
    ensure(seen.cpu_translated == 0, || {
        format!(
            "{step}: cpu_translated_address {:#x} while the BAR is not mapped",
            seen.cpu_translated
        )
    })?;
    ensure(!earlier.contains(&seen.generation), || {
        format!(
            "{step}: generation {} not new (earlier {earlier:?})",
            seen.generation
        )
    })
}

/// VRAM → scattered pages → VRAM through the engine's current BAR mapping, plus the bytes
/// written before the change.
fn round_trip(e: &mut Engine, tag: u64, step: &str) -> Outcome {
    e.vram
        .check_pattern(KEEP_OFFSET, KEEP_LEN, tag ^ KEEP_TAG, 0)
        .map_err(|m| {
            Failure(format!(
                "{step}: VRAM written before, read through the BAR: {m}"
            ))
        })?;
    let (a, b, len) = (0x50_0123, 0x60_0abc, (256 << 10) + 77);
    e.vram_write_and_verify(a, len, tag)
        .map_err(|f| Failure(format!("{step}: {f}")))?;
    let list = FrameList::shuffled(e.pool.pieces(), 0x155, len, &mut e.rng)?;
    e.vram_to_pages(a, &list, tag)
        .map_err(|f| Failure(format!("{step}: VRAM->pages: {f}")))?;
    e.pages_to_vram(&list, b, tag)
        .map_err(|f| Failure(format!("{step}: pages->VRAM: {f}")))?;
    Ok(())
}

/// Writes the bytes [`round_trip`] expects to survive.
fn write_keep(e: &Engine, tag: u64) -> Outcome {
    e.vram_write_and_verify(KEEP_OFFSET, KEEP_LEN, tag ^ KEEP_TAG)
}

/// The locator before the test: known, where sysfs and config space say the BAR is.
fn initial(e: &mut Engine, test: &str, function: &PciFunction, bar: u32) -> Outcome<Seen> {
    let (_, seen) = observe(e)?;
    println!("BAR {test}: before: {seen}");
    let sysfs = function.bar_address(bar)?;
    let config = function.mem_bar(bar)?.address();
    ensure(seen.known(), || {
        format!("locator not known at the start: {seen}")
    })?;
    ensure(config == sysfs, || {
        format!("config space has BAR{bar} at {config:#x}, sysfs at {sysfs:#x}")
    })?;
    check_known(&seen, sysfs, &[], "before")?;
    Ok(seen)
}

fn bar_decode_toggle(e: &mut Engine) -> Outcome {
    const TEST: &str = "bar_decode_toggle";
    const TAG: u64 = 0x00de_c0de;
    let (function, bar) = vram_function(e)?;
    let before = initial(e, TEST, &function, bar)?;
    write_keep(e, TAG)?;

    let mut restore = BarRestore::new(&function, bar)?;
    let command = set_decode(&function, false)?;
    println!(
        "BAR {TEST}: {} command {command:#06x}: memory decode off",
        function.bdf()
    );
    let (_, off) = wait_for(e, TEST, "decode off", Seen::not_mapped)?;
    check_not_mapped(&off, &[before.generation], "decode off")?;

    restore.restore()?;
    println!(
        "BAR {TEST}: {} command {:#06x}: memory decode on",
        function.bdf(),
        function.command()?
    );
    let (layout, on) = wait_for(e, TEST, "decode on", Seen::known)?;
    let sysfs = function.bar_address(bar)?;
    check_known(
        &on,
        sysfs,
        &[before.generation, off.generation],
        "decode on",
    )?;
    adopt(e, layout)?;
    // The address did not change, so the mapping made at setup reaches the BAR again.
    ensure(e.vram.bar_address == sysfs, || {
        format!(
            "BAR mapped at {:#x}, sysfs now {sysfs:#x}",
            e.vram.bar_address
        )
    })?;
    round_trip(e, TAG, "after decode on")
}

fn bar_moved(e: &mut Engine) -> Outcome {
    const TEST: &str = "bar_moved";
    const TAG: u64 = 0x0030_3ed0;
    let (function, bar) = vram_function(e)?;
    let before = initial(e, TEST, &function, bar)?;
    let size = e.layout.header.vram_bar.size;
    let original = function.mem_bar(bar)?;
    let target =
        iomem::free_bar_slot(&iomem::read_all(), original.address(), size).ok_or_else(|| {
            Failure(format!(
                "no free {size:#x}-byte slot for BAR{bar} near {:#x} in its /proc/iomem window",
                original.address()
            ))
        })?;
    let moved = original.with_address(target).ok_or_else(|| {
        Failure(format!(
            "BAR{bar} ({:#010x}) cannot hold {target:#x}",
            original.low()
        ))
    })?;
    write_keep(e, TAG)?;

    let mut restore = BarRestore::new(&function, bar)?;
    set_decode(&function, false)?;
    let (_, off) = wait_for(e, TEST, "decode off", Seen::not_mapped)?;
    check_not_mapped(&off, &[before.generation], "decode off")?;
    function.write_mem_bar(bar, &moved)?;
    let now = function.mem_bar(bar)?;
    ensure(now == moved, || {
        format!(
            "BAR{bar} reads {:#x} after writing {target:#x}",
            now.address()
        )
    })?;
    set_decode(&function, true)?;
    println!(
        "BAR {TEST}: BAR{bar} moved {:#x} -> {target:#x}, memory decode on",
        original.address()
    );
    let (layout, there) = wait_for(e, TEST, "moved", |s| s.known())?;
    let mut generations = vec![before.generation, off.generation];
    check_known(&there, target, &generations, "moved")?;
    generations.push(there.generation);
    same_segment(e, &layout)?;

    // The kernel still maps resourceN at the old address: reach the new one through /dev/mem.
    let at_target = Vram::map_physical(target, &e.segment)?;
    let at_origin = std::mem::replace(&mut e.vram, at_target);
    let moved_round_trip = round_trip(e, TAG, "at the new address");
    e.vram = at_origin;
    moved_round_trip?;

    restore.restore()?;
    println!(
        "BAR {TEST}: BAR{bar} back at {:#x}, memory decode on",
        original.address()
    );
    let (layout, back) = wait_for(e, TEST, "moved back", |s| {
        s.known() && s.address == original.address()
    })?;
    check_known(&back, original.address(), &generations, "moved back")?;
    adopt(e, layout)?;
    round_trip(e, TAG, "back at the old address")
}
