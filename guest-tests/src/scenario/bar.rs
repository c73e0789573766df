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
//!
//! In mode 2 (shmem) the VRAM BAR is the GPU function's own BAR4: with memory decode off on that
//! function its virtio registers (BAR2) are gone too, so the driver can neither notify a queue
//! nor read the capset until decode is back on. It follows the locator the way a KMD's ISR would
//! instead ([`Watch`]): a status page registered before, which the device writes into guest RAM,
//! and a WAIT_EVENT posted before, whose BAR_CHANGED answer it reads off the used ring. Once
//! decode is on again it reads the capset as in mode 1.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use wddm_gpu_abi::caps::{
    WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED,
};
use wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_NODATA;
use wddm_gpu_abi::status::{WddmGpuStatusPage, WDDM_GPU_EVENT_BAR_CHANGED, WDDM_GPU_STATUS_MAGIC};

use super::valid::Test;
use crate::caps::{Layout, Segment};
use crate::engine::Engine;
use crate::failure::{ensure, Failure, Outcome};
use crate::gpu::{self, Ticket};
use crate::iomem;
use crate::kmd::{Event, StatusPage};
use crate::pci::config::MemBar;
use crate::pci::sysfs::{PciFunction, COMMAND_MEMORY};
use crate::vram::{self, Vram, VramLocation};

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

/// The function carrying the VRAM BAR, the BAR index and VRAM's offset in it.
fn vram_location(e: &Engine) -> Outcome<VramLocation> {
    Ok(vram::locate(
        e.device.virtio.function(),
        &e.layout.header.vram_bar,
    )?)
}

/// True in mode 2: the VRAM BAR is on the GPU's own function.
fn shmem_mode(e: &Engine) -> bool {
    e.layout.header.vram_bar.mode == WDDM_GPU_BAR_MODE_SHMEM
}

/// The BAR locator fields of a status page, for messages.
fn page_text(page: &WddmGpuStatusPage) -> String {
    let state = match page.bar_state {
        WDDM_GPU_BAR_STATE_KNOWN => "known",
        WDDM_GPU_BAR_STATE_NOT_MAPPED => "not-mapped",
        _ => "invalid",
    };
    format!(
        "bar_state={state} bar_generation={} bar_address={:#x}",
        page.bar_generation, page.bar_address
    )
}

/// Mode 2: follows the BAR locator without touching the GPU function's registers, for while its
/// memory decode is off. [`Watch::arm`] (decode on) registers the engine's spare page as the
/// status page and posts one WAIT_EVENT; [`Watch::wait_not_mapped`] (decode off) watches both in
/// guest RAM; [`Watch::close`] (decode on again) collects a WAIT_EVENT still posted and
/// unregisters the page, so the tests after it find the device as before.
struct Watch {
    page: StatusPage,
    function: PciFunction,
    registered: bool,
    event: Option<Ticket>,
}

impl Watch {
    fn new(e: &Engine, function: &PciFunction) -> Self {
        Self {
            page: StatusPage::new(e.spare_page),
            function: function.clone(),
            registered: false,
            event: None,
        }
    }

    /// Registers the page (it must show the locator `before`) and posts a WAIT_EVENT.
    fn arm(&mut self, e: &mut Engine, test: &str, before: &Seen) -> Outcome {
        self.page.register(&mut e.device.control)?;
        self.registered = true;
        let page = self.page.header();
        ensure(
            page.magic == WDDM_GPU_STATUS_MAGIC
                && page.bar_state == WDDM_GPU_BAR_STATE_KNOWN
                && page.bar_generation == before.generation
                && page.bar_address == before.address,
            || {
                format!(
                    "freshly registered status page says {} (magic {:#x}); the capset said {before}",
                    page_text(&page),
                    page.magic
                )
            },
        )?;
        self.event = Some(e.device.control.post_wait_event()?);
        println!(
            "BAR {test}: status page at {:#x} registered ({}), one WAIT_EVENT posted",
            self.page.phys(),
            page_text(&page)
        );
        Ok(())
    }

    /// With decode off: waits (up to [`POLL_TIMEOUT`]) until the status page says not mapped
    /// with a new generation and the posted WAIT_EVENT is answered with that BAR_CHANGED event,
    /// read from the used ring; no register is touched. Returns the generation.
    fn wait_not_mapped(
        &mut self,
        e: &mut Engine,
        test: &str,
        step: &str,
        earlier: &[u32],
    ) -> Outcome<u32> {
        let start = Instant::now();
        let mut event: Option<Event> = None;
        loop {
            let page = self.page.header();
            if let (None, Some(ticket)) = (event, self.event) {
                // Reads the used ring in guest memory: no notify, no register.
                e.device.control.poll()?;
                if let Some(answer) = e.device.control.take_answered(ticket)? {
                    self.event = None;
                    event = Some(Event {
                        resp: gpu::decode_event(&answer.bytes)?,
                        order: answer.order,
                    });
                }
            }
            if let (WDDM_GPU_BAR_STATE_NOT_MAPPED, Some(event)) = (page.bar_state, event) {
                println!(
                    "BAR {test}: {step}: status page {}, {event} ({} ms, no register access)",
                    page_text(&page),
                    start.elapsed().as_millis()
                );
                let r = &event.resp;
                ensure(
                    r.kind == WDDM_GPU_EVENT_BAR_CHANGED
                        && r.bar_state == WDDM_GPU_BAR_STATE_NOT_MAPPED
                        && r.bar_generation == page.bar_generation,
                    || {
                        format!(
                            "{step}: the WAIT_EVENT was answered with {event}; expected \
                             BAR_CHANGED not-mapped generation {}",
                            page.bar_generation
                        )
                    },
                )?;
                ensure(!earlier.contains(&page.bar_generation), || {
                    format!(
                        "{step}: generation {} not new (earlier {earlier:?})",
                        page.bar_generation
                    )
                })?;
                return Ok(page.bar_generation);
            }
            if start.elapsed() >= POLL_TIMEOUT {
                let answered = match event {
                    Some(event) => format!("answered with {event}"),
                    None => "not answered".into(),
                };
                return Err(Failure(format!(
                    "{step}: after {} ms the status page still says {} and the WAIT_EVENT posted \
                     before is {answered}",
                    start.elapsed().as_millis(),
                    page_text(&page)
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// With decode on, after the capset said `on`: the status page must show the same locator
    /// (waiting up to [`POLL_TIMEOUT`]: the capset may be read before the page is written).
    fn check_known(&self, test: &str, step: &str, on: &Seen) -> Outcome {
        let start = Instant::now();
        loop {
            let page = self.page.header();
            if page.bar_state == WDDM_GPU_BAR_STATE_KNOWN
                && page.bar_generation == on.generation
                && page.bar_address == on.address
            {
                println!(
                    "BAR {test}: {step}: status page agrees: {}",
                    page_text(&page)
                );
                return Ok(());
            }
            if start.elapsed() >= POLL_TIMEOUT {
                return Err(Failure(format!(
                    "{step}: the capset says {on}, the status page {} after {} ms",
                    page_text(&page),
                    start.elapsed().as_millis()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Collects a WAIT_EVENT still posted (a later BAR change answers it) and unregisters the
    /// page. Needs memory decode on; with it still off nothing is touched.
    fn close(self, e: &mut Engine) -> Outcome {
        let decode = self
            .function
            .command()
            .is_ok_and(|c| c & COMMAND_MEMORY != 0);
        ensure(decode, || {
            format!(
                "memory decode of {} still off: status page left registered",
                self.function.bdf()
            )
        })?;
        let mut outcome = Ok(());
        if let Some(ticket) = self.event {
            match e.device.control.wait(ticket, POLL_TIMEOUT) {
                Ok(answer) => match gpu::decode_event(&answer.bytes) {
                    Ok(resp) => println!(
                        "BAR: the WAIT_EVENT posted before decode off was answered late: {}",
                        Event {
                            resp,
                            order: answer.order
                        }
                    ),
                    Err(err) => outcome = Err(Failure(format!("late WAIT_EVENT answer: {err}"))),
                },
                Err(err) => {
                    outcome = Err(Failure(format!(
                        "the WAIT_EVENT posted before decode off is still pending: {err}"
                    )))
                }
            }
        }
        if self.registered {
            let answer = e.device.control.register_status_page(0)?;
            ensure(answer == VIRTIO_GPU_RESP_OK_NODATA, || {
                format!("unregistering the status page: answer {answer:#06x}")
            })?;
        }
        outcome
    }
}

/// Runs a BAR test `body` with a [`Watch`] slot (filled in mode 2), then closes the watch: the
/// body's [`BarRestore`] has put decode back on by then. The body's failure comes first.
fn with_watch(
    e: &mut Engine,
    body: impl FnOnce(&mut Engine, &mut Option<Watch>) -> Outcome,
) -> Outcome {
    let mut watch = None;
    let outcome = body(e, &mut watch);
    match watch {
        Some(watch) => {
            let closed = watch.close(e);
            outcome.and(closed)
        }
        None => outcome,
    }
}

/// Waits for the locator to go not mapped after decode went off: through the capset in mode 1,
/// through `watch` in mode 2. Returns the new generation.
fn wait_decode_off(
    e: &mut Engine,
    watch: &mut Option<Watch>,
    test: &str,
    before: &Seen,
) -> Outcome<u32> {
    const STEP: &str = "decode off";
    match watch {
        None => {
            let (_, off) = wait_for(e, test, STEP, Seen::not_mapped)?;
            check_not_mapped(&off, &[before.generation], STEP)?;
            Ok(off.generation)
        }
        Some(w) => w.wait_not_mapped(e, test, STEP, &[before.generation]),
    }
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
    e.scattered_round_trip(a, b, len, 0x155, tag, &format!("{step}:"))
}

/// Before decode goes off: writes the bytes [`round_trip`] expects to survive and, in mode 2,
/// arms a [`Watch`] on `function` that must show the locator `before`.
fn keep_and_arm(
    e: &mut Engine,
    watch: &mut Option<Watch>,
    function: &PciFunction,
    test: &str,
    tag: u64,
    before: &Seen,
) -> Outcome {
    e.vram_write_and_verify(KEEP_OFFSET, KEEP_LEN, tag ^ KEEP_TAG)?;
    if shmem_mode(e) {
        watch.insert(Watch::new(e, function)).arm(e, test, before)?;
    }
    Ok(())
}

/// In mode 2, the watch's status page must agree with the locator the capset shows.
fn watch_agrees(watch: &Option<Watch>, test: &str, step: &str, seen: &Seen) -> Outcome {
    match watch {
        Some(w) => w.check_known(test, step, seen),
        None => Ok(()),
    }
}

/// Where the VRAM BAR is, and the locator before the test: known, where sysfs and config space
/// say the BAR is (plus the region offset in mode 2).
fn initial(e: &mut Engine, test: &str) -> Outcome<(VramLocation, Seen)> {
    let location = vram_location(e)?;
    let (function, bar) = (&location.function, location.bar_index);
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
    check_known(&seen, sysfs + location.region_offset, &[], "before")?;
    Ok((location, seen))
}

fn bar_decode_toggle(e: &mut Engine) -> Outcome {
    with_watch(e, decode_toggle)
}

fn decode_toggle(e: &mut Engine, watch: &mut Option<Watch>) -> Outcome {
    const TEST: &str = "bar_decode_toggle";
    const TAG: u64 = 0x00de_c0de;
    let (location, before) = initial(e, TEST)?;
    let (function, bar, region) = (
        &location.function,
        location.bar_index,
        location.region_offset,
    );
    keep_and_arm(e, watch, function, TEST, TAG, &before)?;

    let mut restore = BarRestore::new(function, bar)?;
    let command = set_decode(function, false)?;
    println!(
        "BAR {TEST}: {} command {command:#06x}: memory decode off",
        function.bdf()
    );
    let off_generation = wait_decode_off(e, watch, TEST, &before)?;

    restore.restore()?;
    println!(
        "BAR {TEST}: {} command {:#06x}: memory decode on",
        function.bdf(),
        function.command()?
    );
    let (layout, on) = wait_for(e, TEST, "decode on", Seen::known)?;
    let sysfs = function.bar_address(bar)? + region;
    check_known(
        &on,
        sysfs,
        &[before.generation, off_generation],
        "decode on",
    )?;
    watch_agrees(watch, TEST, "decode on", &on)?;
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
    with_watch(e, moved)
}

fn moved(e: &mut Engine, watch: &mut Option<Watch>) -> Outcome {
    const TEST: &str = "bar_moved";
    const TAG: u64 = 0x0030_3ed0;
    let (location, before) = initial(e, TEST)?;
    let (function, bar, region) = (
        &location.function,
        location.bar_index,
        location.region_offset,
    );
    // The slot must hold the whole BAR (in mode 2 the VRAM may be one region of several).
    let size = function.bar_size(bar)?;
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
    keep_and_arm(e, watch, function, TEST, TAG, &before)?;

    let mut restore = BarRestore::new(function, bar)?;
    set_decode(function, false)?;
    let off_generation = wait_decode_off(e, watch, TEST, &before)?;
    function.write_mem_bar(bar, &moved)?;
    let now = function.mem_bar(bar)?;
    ensure(now == moved, || {
        format!(
            "BAR{bar} reads {:#x} after writing {target:#x}",
            now.address()
        )
    })?;
    set_decode(function, true)?;
    println!(
        "BAR {TEST}: BAR{bar} moved {:#x} -> {target:#x}, memory decode on",
        original.address()
    );
    let (layout, there) = wait_for(e, TEST, "moved", |s| s.known())?;
    let mut generations = vec![before.generation, off_generation];
    check_known(&there, target + region, &generations, "moved")?;
    watch_agrees(watch, TEST, "moved", &there)?;
    generations.push(there.generation);
    same_segment(e, &layout)?;

    // The kernel still maps resourceN at the old address: reach the new one through /dev/mem.
    let at_target = Vram::map_physical(target, region, &e.segment)?;
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
        s.known() && s.address == original.address() + region
    })?;
    check_known(
        &back,
        original.address() + region,
        &generations,
        "moved back",
    )?;
    watch_agrees(watch, TEST, "moved back", &back)?;
    adopt(e, layout)?;
    round_trip(e, TAG, "back at the old address")
}
