//! The virtual node's engine and the page-table packets over real guest memory: each input
//! picks a layout with a GpuMmu (`virtual_world::layouts`), writes guest RAM and VRAM, runs
//! paging submissions (UPDATE_PAGE_TABLE and FLUSH_TLB among whatever else they hold) on a
//! paging engine, binds the context's root, flushes, and runs virtual submissions
//! (`VirtualEngine::execute`: COPY, FILL, SIGNAL fetched and moved through the MMU) in one
//! address space kept across the input, with the checking mode on or off. Every input starts
//! from zeroed memory and an empty GART.
//!
//! Checked besides no panic and no hang (interruptions bound the work of a submission): no
//! byte of guest RAM or VRAM outside the pages the tables map writable (now, or since the last
//! full flush, for what the cache may still hold) changes in a virtual submission; the
//! completion echoes the fence, stops at a packet boundary of the executed range (or at its
//! start when the command is refused) and completes no more packets than fit in it; an
//! interruption ends the submission exactly when the hooks raised one; a page fault is at a
//! level of the geometry; monitored fences are 8-byte aligned and no more than the packets
//! completed; the checking mode reports nothing while no table may have changed since the last
//! full flush; a paging submission's completion is consistent in the same way.
//!
//! Input: a layout selector byte, then steps (`virtual_world::step`).

#![no_main]

use std::cell::Cell;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu::{
    AddressSpace, DeviceMemory, DeviceTables, EngineHooks, Fault, Interruption, Stop, TableAddress,
    VirtualCompletion, VirtualEngine, VirtualHooks, VirtualMemory,
};
use vhost_user_wddm_gpu_fuzz::debug;
use vhost_user_wddm_gpu_fuzz::engine_world::World;
use vhost_user_wddm_gpu_fuzz::input::Reader;
use vhost_user_wddm_gpu_fuzz::virtual_world::{
    self, guest_ram, mapped, step, Snapshot, Writable, PAGING_DMA,
};
use vm_memory::{Bytes, GuestAddress};
use wddm_gpu_abi::build::gpuva::submit_virtual;
use wddm_gpu_abi::gpummu_rules::MmuGeometry;
use wddm_gpu_abi::packet::WddmGpuPacketHeader;
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_frontend_kit::requests::submit_command;

/// Steps per input.
const MAX_STEPS: usize = 32;
/// Interruption checks beyond two per packet (each allows up to 1 MiB of copying) before the
/// hooks preempt.
const CHUNK_CHECKS: u32 = 48;
/// After this long every submission of the input is interrupted at its next check.
const INPUT_DEADLINE: Duration = Duration::from_secs(1);
/// Entry reads the enumeration of what the tables map may take; past it the memory check of
/// that submission is skipped.
const ENUMERATION_BUDGET: u32 = 1 << 16;
/// The context's id in the commands (one context).
const CONTEXT: u32 = 1;

/// The world and the snapshot buffers, made once per process.
static WORLD: Mutex<Option<(World, Snapshot)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut world = WORLD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (world, snapshot) = world.get_or_insert_with(|| {
        let world = virtual_world::world();
        let snapshot = Snapshot::new(&world.sizes);
        (world, snapshot)
    });
    world.clear();
    let mut input = Reader::new(data);
    let layout = usize::from(input.u8()) % world.layouts.len();
    let geometry = world.layouts[layout]
        .0
        .gpummu
        .expect("every virtual_world layout has a GpuMmu");
    let mut state = State {
        layout,
        geometry,
        space: Mutex::new(AddressSpace::new(false)),
        checking: false,
        engine: VirtualEngine::default(),
        cached: Some(Writable::default()),
        coherent: true,
        stale_seen: 0,
        deadline: Instant::now() + INPUT_DEADLINE,
    };
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        state.step(world, snapshot, &mut input);
    }
});

struct State {
    layout: usize,
    geometry: MmuGeometry,
    space: Mutex<AddressSpace>,
    checking: bool,
    engine: VirtualEngine,
    /// Everything the cache may hold a writable translation to: what the tables mapped at
    /// each virtual submission since the last full flush; `None` when that is unknown (the
    /// enumeration gave up, or a submission could write the tables themselves).
    cached: Option<Writable>,
    /// No table may have changed since the last full flush: the checking mode must stay quiet.
    coherent: bool,
    /// Stale translations the checking mode counted so far.
    stale_seen: u64,
    deadline: Instant,
}

impl State {
    fn space(&self) -> std::sync::MutexGuard<'_, AddressSpace> {
        self.space.lock().unwrap()
    }

    /// A full flush: the cache holds nothing.
    fn flushed_all(&mut self) {
        self.cached = Some(Writable::default());
        self.coherent = true;
    }

    fn step(&mut self, world: &mut World, snapshot: &mut Snapshot, input: &mut Reader<'_>) {
        let sizes = world.sizes;
        match input.u8() % 8 {
            step::RAM => {
                let address = u64::from(input.u32()) % sizes.ram_span();
                let bytes = input.blob();
                let _ = world.mem.write_slice(bytes, GuestAddress(address));
                self.coherent = false;
            }
            step::VRAM => {
                let offset = u64::from(input.u32()) % (sizes.vram_size + sizes.device_only);
                let bytes = input.blob();
                if let Some(slice) = world.vram.slice(offset, bytes.len()) {
                    slice.copy_from(bytes);
                }
                self.coherent = false;
            }
            step::PAGING => self.paging(world, input),
            step::ROOT => {
                let table = TableAddress {
                    segment: u32::from(input.u8() % 4),
                    address: input.u64(),
                };
                let entries = u64::from(input.u16());
                let bound = self.space().set_root(&self.geometry, table, entries);
                if bound.is_ok() {
                    self.flushed_all();
                }
            }
            step::VIRTUAL => self.virtual_submission(world, snapshot, input, false),
            step::VIRTUAL_RAW => self.virtual_submission(world, snapshot, input, true),
            step::FLUSH => {
                let (start, end) = (input.u64(), input.u64());
                if (start, end) == (0, 0) {
                    self.space().flush(None);
                    self.flushed_all();
                } else if start < end {
                    self.space().flush(Some(start..end));
                }
            }
            _ => {
                let on = input.u8() & 1 != 0;
                self.space().set_checking(on);
                self.checking = on;
            }
        }
    }

    /// A paging submission at [`PAGING_DMA`], its FLUSH_TLBs applied to the address space
    /// when they name its root.
    fn paging(&mut self, world: &mut World, input: &mut Reader<'_>) {
        let fence = input.u32();
        let stop = input.u8();
        let packets = input.blob();
        let _ = world.mem.write_slice(packets, GuestAddress(PAGING_DMA));
        let len = u32::try_from(packets.len()).expect("a blob is shorter than 64 KiB");
        let cmd = submit_command(PAGING_DMA, len, fence);
        let (layout, engine) = &mut world.layouts[self.layout];
        let memory = DeviceMemory {
            ram: guest_ram_of(&world.mem, &world.vram),
            vram: &world.vram,
            layout,
        };
        let mut hooks = PagingHooks {
            budget: Budget::new(stop, len, self.deadline),
            flushes: Vec::new(),
        };
        let completion = engine.execute(&cmd, &memory, &mut hooks);
        if debug() {
            eprintln!("paging: {len} bytes -> {completion:?}");
        }
        assert_eq!(completion.fence_id, fence);
        assert!(completion.packets_completed <= len / 8, "{completion:?}");
        if let Some((offset, stop)) = completion.stop {
            assert!(
                at_packet_boundary(0, len, offset) || offset == 0,
                "{completion:?}"
            );
            assert_eq!(
                matches!(stop, Stop::Interrupted(_)),
                hooks.budget.fired.get(),
                "{completion:?}"
            );
        } else {
            assert!(!hooks.budget.fired.get(), "{completion:?}");
        }
        // UPDATE_PAGE_TABLE may have changed any table.
        self.coherent = false;
        let root = self.space().root();
        for (table, range) in hooks.flushes {
            if root.is_some_and(|root| root.table == table) {
                let all = range.is_none();
                self.space().flush(range);
                if all {
                    self.flushed_all();
                }
            }
        }
    }

    /// A virtual submission: its buffer written at a guest-physical address, run at a GPU VA,
    /// and everything it wrote compared with what the tables map writable.
    fn virtual_submission(
        &mut self,
        world: &mut World,
        snapshot: &mut Snapshot,
        input: &mut Reader<'_>,
        raw: bool,
    ) {
        let physical = u64::from(input.u32()) % world.sizes.ram_span();
        let va = input.u64();
        let fence = input.u32();
        let stop = input.u8();
        let buffer = input.blob();
        let _ = world.mem.write_slice(buffer, GuestAddress(physical));
        let len = u32::try_from(buffer.len()).expect("a blob is shorter than 64 KiB");
        let mut cmd = submit_virtual(CONTEXT, va, len, fence);
        if raw {
            cmd.dma_buffer_size = input.u32();
            cmd.start_offset = input.u32();
            cmd.end_offset = input.u32();
            cmd.flags = u32::from(input.u8() % 2);
            cmd.reserved = u32::from(input.u8() % 2);
            cmd.node_ordinal = u32::from(input.u8() % 3);
        }

        // What the submission may write: what the tables map now, and what the cache may hold.
        let (layout, _) = &world.layouts[self.layout];
        let ram = guest_ram(world);
        let tables = DeviceTables::new(&ram, &world.vram, layout);
        let root = self.space().root();
        let now = match root {
            Some(root) => mapped(&self.geometry, &root, &tables, layout, ENUMERATION_BUDGET),
            None => Some(Default::default()),
        };
        // A submission that can write its own tables changes what is mapped as it runs.
        let now = now.filter(|now| !now.tables_writable());
        self.cached = match (self.cached.take(), &now) {
            (Some(mut cached), Some(now)) => {
                cached.extend(&now.writable);
                Some(cached)
            }
            _ => None,
        };
        let checked = self.cached.is_some();
        if checked {
            snapshot.capture(world);
        }
        let stale_before = self.stale_seen;

        let (layout, _) = &world.layouts[self.layout];
        let memory = DeviceMemory {
            ram: guest_ram_of(&world.mem, &world.vram),
            vram: &world.vram,
            layout,
        };
        let virtual_memory = VirtualMemory {
            mem: &memory,
            geometry: &self.geometry,
            space: &self.space,
        };
        let interruption = if stop & 0x80 != 0 {
            Interruption::Reset
        } else {
            Interruption::Preempted
        };
        let span = cmd.end_offset.saturating_sub(cmd.start_offset);
        let mut hooks = Hooks {
            budget: Budget::new(stop & 0x7f, span, self.deadline),
            interruption,
            fences: Vec::new(),
        };
        let completion = self.engine.execute(&cmd, &virtual_memory, &mut hooks);
        if debug() {
            let memory = if checked {
                "every byte checked"
            } else {
                "bytes not checked (the tables may have changed under the cache)"
            };
            eprintln!("virtual: {cmd:?}\n  -> {completion:?}; {memory}");
        }
        self.check(&cmd, &completion, &hooks);

        let (_, total) = self.space().take_stale();
        assert!(total >= stale_before);
        if self.coherent && self.cached.is_some() {
            assert_eq!(
                total, stale_before,
                "stale translations with no table write since the last full flush"
            );
        }
        self.stale_seen = total;
        if let (true, Some(writable)) = (checked, &self.cached) {
            if let Some((store, at)) = snapshot.first_unwritable_change(world, writable) {
                panic!(
                    "the virtual submission changed {store} at {at:#x}, which no page maps writable: {cmd:?} -> {completion:?}"
                );
            }
        } else {
            // The submission may have changed its own tables: nothing is known any more.
            self.coherent = false;
        }
    }

    fn check(
        &self,
        cmd: &wddm_gpu_abi::context::WddmGpuCmdSubmitVirtual,
        completion: &VirtualCompletion,
        hooks: &Hooks,
    ) {
        assert_eq!(completion.fence_id, cmd.submission_fence_id);
        let span = cmd.end_offset.saturating_sub(cmd.start_offset);
        assert!(completion.packets_completed <= span / 8, "{completion:?}");
        assert!(hooks.fences.len() <= completion.packets_completed as usize);
        for &(address, _) in &hooks.fences {
            assert!(
                address.is_multiple_of(8),
                "a monitored fence at {address:#x}"
            );
        }
        let fired = hooks.budget.fired.get();
        match completion.stop {
            None => {
                assert!(!fired, "interrupted, but completed: {completion:?}");
                assert!(cmd.start_offset <= cmd.end_offset);
            }
            Some((offset, stop)) => {
                assert!(
                    offset == cmd.start_offset
                        || at_packet_boundary(cmd.start_offset, cmd.end_offset, offset),
                    "stopped at {offset:#x}: {cmd:?}"
                );
                match stop {
                    Stop::Interrupted(interruption) => {
                        assert!(fired, "an interruption nobody raised: {completion:?}");
                        assert_eq!(interruption, hooks.interruption);
                    }
                    Stop::Fault(Fault::Page(fault)) => {
                        assert!(!fired, "interrupted, but: {completion:?}");
                        assert!(fault.level <= self.geometry.root_level(), "{fault:?}");
                    }
                    Stop::Fault(_) => {
                        assert!(!fired, "interrupted, but: {completion:?}");
                    }
                }
            }
        }
    }
}

fn guest_ram_of<'a>(
    mem: &'a vm_memory::GuestMemoryMmap<()>,
    vram: &vhost_user_wddm_gpu::Vram,
) -> vhost_user_wddm_gpu::GuestRam<'a, vm_memory::GuestMemoryMmap<()>> {
    vhost_user_wddm_gpu::GuestRam::new(mem, vram.guest_window())
}

/// An offset of `[start, end)` a packet may start at.
fn at_packet_boundary(start: u32, end: u32, offset: u32) -> bool {
    offset >= start
        && offset < end
        && (offset - start).is_multiple_of(size_of_u32::<WddmGpuPacketHeader>())
}

/// Interrupts after a number of checks, when the work gets long, or past the deadline.
struct Budget {
    checks: Cell<u32>,
    /// Interrupt at this check (0: only when the work gets long).
    stop_after: u32,
    /// Checks allowed: two per packet that fits, and [`CHUNK_CHECKS`] more.
    limit: u32,
    deadline: Instant,
    fired: Cell<bool>,
}

impl Budget {
    fn new(stop_after: u8, span: u32, deadline: Instant) -> Self {
        Self {
            checks: Cell::new(0),
            stop_after: u32::from(stop_after),
            limit: (span / 8 + 1)
                .saturating_mul(2)
                .saturating_add(CHUNK_CHECKS),
            deadline,
            fired: Cell::new(false),
        }
    }

    fn check(&self) -> bool {
        let checks = self.checks.get() + 1;
        self.checks.set(checks);
        let fire = (self.stop_after != 0 && checks >= self.stop_after)
            || checks > self.limit
            || Instant::now() >= self.deadline;
        if fire {
            self.fired.set(true);
        }
        fire
    }
}

struct Hooks {
    budget: Budget,
    interruption: Interruption,
    fences: Vec<(u64, u64)>,
}

impl VirtualHooks for Hooks {
    fn interruption(&self) -> Option<Interruption> {
        self.budget.check().then_some(self.interruption)
    }

    fn monitored_fence(&mut self, address: u64, value: u64) {
        self.fences.push((address, value));
    }
}

struct PagingHooks {
    budget: Budget,
    flushes: Vec<(TableAddress, Option<Range<u64>>)>,
}

impl EngineHooks for PagingHooks {
    fn interruption(&self) -> Option<Interruption> {
        self.budget.check().then_some(Interruption::Preempted)
    }

    fn flush_tlb(&mut self, root: TableAddress, range: Option<Range<u64>>) {
        self.flushes.push((root, range));
    }

    /// No paging context: the virtual-address paging packets are refused BAD_CONTEXT.
    fn paging_space(&self) -> Option<std::sync::Arc<std::sync::Mutex<AddressSpace>>> {
        None
    }

    fn monitored_fence(&mut self, _address: u64, _value: u64) {}
}
