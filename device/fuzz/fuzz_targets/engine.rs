//! The paging engine over a guest-memory model: each input writes guest RAM (data, frame lists,
//! page arrays) and VRAM, then submits DMA buffers of paging packets to an engine kept across
//! the input's submissions, so aperture mappings one makes are used by the next ones (and
//! resets drop them). Every input starts from zeroed memory and empty GARTs.
//!
//! Checked after every submission: the completion agrees with the packets the engine reported
//! (count, bytes, offsets), a fault or deferral offset is a packet boundary inside the executed
//! range, and an interruption the hooks raised ends the submission with that interruption.
//!
//! Input: a layout selector byte, then steps (an opcode byte and its fields: see `run_step`,
//! `engine_world::step`, and `examples/seeds.rs` for how the seeds are written).

#![no_main]

use std::cell::Cell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu::GuestRam;
use vhost_user_wddm_gpu::PacketRecord;
use vhost_user_wddm_gpu::Resolved;
use vhost_user_wddm_gpu::{AddressSpace, TableAddress};
use vhost_user_wddm_gpu::{Completion, DeviceMemory, EngineHooks, Fault, Interruption, Stop};
use vhost_user_wddm_gpu_fuzz::debug;
use vhost_user_wddm_gpu_fuzz::engine_world::{step, World, DEVICE_ONLY, DMA, RAM_SPAN, VRAM_SIZE};
use vhost_user_wddm_gpu_fuzz::input::Reader;
use vm_memory::{Bytes, GuestAddress};
use wddm_gpu_abi::packet::WddmGpuPacketHeader;
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_abi::submit::WddmGpuCmdSubmit;
use wddm_gpu_frontend_kit::requests::submit_command;

/// Steps per input.
const MAX_STEPS: usize = 32;
/// Interruption checks beyond one per packet (each allows up to one 1 MiB chunk of copying)
/// before the hooks preempt: bounds the work of one submission to tens of MiB.
const CHUNK_CHECKS: u32 = 48;
/// Times a deferred submission is continued.
const MAX_RESUMES: u32 = 64;
/// After this long an input's submissions are interrupted at their next check: packets that
/// move no data but read long page arrays, in DMA buffers of thousands, would otherwise add up
/// to libFuzzer's hang timeout. Inputs that get here behave by the clock, not by their bytes.
const INPUT_DEADLINE: Duration = Duration::from_secs(1);

static WORLD: Mutex<Option<World>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut world = WORLD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let world = world.get_or_insert_with(World::new);
    world.clear();
    let mut input = Reader::new(data);
    let layout = usize::from(input.u8()) % world.layouts.len();
    let deadline = Instant::now() + INPUT_DEADLINE;
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        run_step(world, layout, &mut input, deadline);
    }
});

fn run_step(world: &mut World, layout: usize, input: &mut Reader<'_>, deadline: Instant) {
    match input.u8() % 6 {
        // Guest RAM bytes (the hole and the VRAM window are not written).
        step::RAM => {
            let address = u64::from(input.u32()) % RAM_SPAN;
            let bytes = input.blob();
            let _ = world.mem.write_slice(bytes, GuestAddress(address));
        }
        // A frame list (or page array): `count` u64 frame numbers `first + i * stride`.
        step::FRAMES => {
            let address = (u64::from(input.u32()) % RAM_SPAN) & !7;
            let first = u64::from(input.u32());
            let count = usize::from(input.u16() % 1024);
            let stride = u64::from(input.u8());
            let frames: Vec<u8> = (0..count as u64)
                .flat_map(|i| first.wrapping_add(i * stride).to_le_bytes())
                .collect();
            let _ = world.mem.write_slice(&frames, GuestAddress(address));
        }
        // VRAM bytes (BAR or device-only).
        step::VRAM => {
            let offset = u64::from(input.u32()) % (VRAM_SIZE + DEVICE_ONLY);
            let bytes = input.blob();
            if let Some(slice) = world.vram.slice(offset, bytes.len()) {
                slice.copy_from(bytes);
            }
        }
        step::SUBMIT => submit(world, layout, input, false, deadline),
        step::SUBMIT_RAW => submit(world, layout, input, true, deadline),
        // Device reset: the GART forgets every mapping.
        _ => world.layouts[layout].1.reset(),
    }
}

/// Reads a submission, places its DMA buffer, executes it (continuing it when the hooks
/// deferred it, as the scheduler does) and checks every completion.
fn submit(world: &mut World, layout: usize, input: &mut Reader<'_>, raw: bool, deadline: Instant) {
    let place = input.u8();
    let fence = input.u32();
    let stop = input.u8();
    let defer_every = input.u8() % 8;
    let (buffer_address, segment) = match place % 4 {
        // In RAM at DMA plus a small offset.
        0 => (DMA + u64::from(input.u16()), 0),
        // Anywhere in guest-physical space.
        1 => (input.u64(), 0),
        // In a segment (VRAM, or an aperture through the GART).
        _ => (input.u64(), u32::from(input.u8() % 6)),
    };
    let dma = input.blob();
    let (layout_ref, _) = &world.layouts[layout];
    // Write the buffer where the engine will read it; place 3 leaves the segment as earlier
    // steps wrote it (an aperture's buffer lives in the guest pages mapped there), and only
    // the blob's length counts.
    if place % 4 != 3 {
        if segment == 0 {
            let _ = world.mem.write_slice(dma, GuestAddress(buffer_address));
        } else if let Ok(Resolved::Vram(range)) =
            layout_ref.resolve(segment, buffer_address, dma.len() as u64)
        {
            if let Some(slice) = world.vram.slice(range.start(), dma.len()) {
                slice.copy_from(dma);
            }
        }
    }
    let len = u32::try_from(dma.len()).expect("a fuzz input is far smaller than 4 GiB");
    let mut cmd = submit_command(buffer_address, len, fence);
    cmd.dma_buffer_segment_id = segment;
    if raw {
        cmd.dma_buffer_size = input.u32();
        cmd.start_offset = input.u32();
        cmd.end_offset = input.u32();
        cmd.flags = input.u32();
        cmd.node_ordinal = u32::from(input.u8() % 2);
        cmd.reserved = u32::from(input.u8() % 2);
    }

    let (layout_ref, engine) = &mut world.layouts[layout];
    let memory = DeviceMemory {
        ram: GuestRam::new(&world.mem, world.vram.guest_window()),
        vram: &world.vram,
        layout: layout_ref,
    };
    let interruption = if stop & 0x80 != 0 {
        Interruption::Reset
    } else {
        Interruption::Preempted
    };
    let mut resumes = 0;
    loop {
        let mut hooks = Hooks {
            checks: Cell::new(0),
            packets: Cell::new(0),
            stop_after: u32::from(stop & 0x7f),
            interruption,
            fired: Cell::new(false),
            defer_every: u32::from(defer_every),
            deadline,
            fences: 0,
            records: Vec::new(),
        };
        let completion = engine.execute(&cmd, &memory, &mut hooks);
        if debug() {
            eprintln!("engine: {cmd:?}\n  -> {completion:?}");
        }
        check(&cmd, &completion, &hooks);
        match completion.deferred {
            Some(offset) if resumes < MAX_RESUMES => {
                resumes += 1;
                cmd.start_offset = offset;
            }
            _ => break,
        }
    }
}

/// Hooks that interrupt after a number of checks (or when the copying would get long, or the
/// input has run too long), defer every few packets, and record what the engine reports.
struct Hooks {
    checks: Cell<u32>,
    /// Packets the engine asked about (`defer`), i.e. interruption checks between packets.
    packets: Cell<u32>,
    /// Interrupt at this check (0: only when the work gets long).
    stop_after: u32,
    /// What an interruption is.
    interruption: Interruption,
    fired: Cell<bool>,
    /// Defer once this many packets ran (0: never).
    defer_every: u32,
    /// Interrupt from then on.
    deadline: Instant,
    fences: u32,
    records: Vec<Record>,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    dma_offset: u32,
    fence: u32,
    bytes: u64,
    faulted: bool,
}

impl EngineHooks for Hooks {
    fn interruption(&self) -> Option<Interruption> {
        let checks = self.checks.get() + 1;
        self.checks.set(checks);
        let chunks = checks.saturating_sub(self.packets.get() + 1);
        if (self.stop_after != 0 && checks >= self.stop_after)
            || chunks > CHUNK_CHECKS
            || Instant::now() >= self.deadline
        {
            self.fired.set(true);
            return Some(self.interruption);
        }
        None
    }

    fn fence(&mut self, _fence_id: u32) {
        self.fences += 1;
    }

    /// The fuzzed layouts have no GpuMmu: FLUSH_TLB is refused before it gets here.
    fn flush_tlb(&mut self, _root: TableAddress, _range: Option<std::ops::Range<u64>>) {}

    /// Nor a paging context: virtual-address packets are refused before they need one.
    fn paging_space(&self) -> Option<std::sync::Arc<std::sync::Mutex<AddressSpace>>> {
        None
    }

    fn monitored_fence(&mut self, _address: u64, _value: u64) {}

    fn defer(&mut self, _work: u64) -> bool {
        let ran = self.packets.get();
        if self.defer_every != 0 && ran >= self.defer_every {
            return true;
        }
        self.packets.set(ran + 1);
        false
    }

    fn packet(&mut self, record: &PacketRecord) {
        self.records.push(Record {
            dma_offset: record.dma_offset,
            fence: record.fence,
            bytes: record.bytes,
            faulted: record.faulted,
        });
    }
}

/// A packet-boundary offset of the executed range `[start, end)`.
fn packet_boundary(cmd: &WddmGpuCmdSubmit, offset: u32) -> bool {
    offset >= cmd.start_offset
        && offset < cmd.end_offset
        && (offset - cmd.start_offset).is_multiple_of(size_of_u32::<WddmGpuPacketHeader>())
}

fn check(cmd: &WddmGpuCmdSubmit, completion: &Completion, hooks: &Hooks) {
    assert_eq!(completion.fence_id, cmd.submission_fence_id);
    let records = &hooks.records;
    let completed: Vec<&Record> = records.iter().filter(|r| !r.faulted).collect();
    assert_eq!(
        completion.packets_completed as usize,
        completed.len(),
        "packets_completed disagrees with the packets reported: {completion:?} {records:?}"
    );
    // A packet that stopped part way counts the bytes it moved before it stopped.
    assert_eq!(
        completion.bytes_transferred,
        records.iter().map(|r| r.bytes).sum::<u64>(),
        "bytes_transferred disagrees with the packets reported: {completion:?} {records:?}"
    );
    assert!(hooks.fences <= completion.packets_completed);
    // Packets run in order, each inside the executed range; only the last may have faulted.
    for pair in records.windows(2) {
        assert!(pair[0].dma_offset < pair[1].dma_offset, "{records:?}");
        assert!(
            !pair[0].faulted,
            "a packet ran after a faulted one: {records:?}"
        );
    }
    for record in records {
        assert_eq!(record.fence, cmd.submission_fence_id);
        assert!(
            packet_boundary(cmd, record.dma_offset),
            "{cmd:?} {record:?}"
        );
    }
    // Every packet is at least a header and a multiple of 8 bytes.
    let span = cmd.end_offset.saturating_sub(cmd.start_offset);
    assert!(completion.packets_completed <= span / 8);
    match (completion.stop, completion.deferred) {
        (Some(_), Some(_)) => panic!("both stopped and deferred: {completion:?}"),
        (Some((offset, stop)), None) => {
            // The command itself refused (at start_offset), or the packet at `offset` failed.
            assert!(
                offset == cmd.start_offset || packet_boundary(cmd, offset),
                "fault offset {offset:#x} outside {cmd:?}"
            );
            if let Some(last) = records.last().filter(|r| r.faulted) {
                assert_eq!(last.dma_offset, offset, "{completion:?} {records:?}");
            }
            if matches!(stop, Stop::Fault(Fault::BadCommand(_))) {
                assert!(records.is_empty());
                assert_eq!(offset, cmd.start_offset);
            }
            if hooks.fired.get() {
                assert_eq!(
                    stop,
                    Stop::Interrupted(hooks.interruption),
                    "interrupted, but: {completion:?}"
                );
            } else {
                assert!(
                    !matches!(stop, Stop::Interrupted(_)),
                    "an interruption nobody raised: {completion:?}"
                );
            }
        }
        (None, Some(offset)) => {
            assert!(
                packet_boundary(cmd, offset),
                "deferred at {offset:#x}: {cmd:?}"
            );
            assert!(
                !hooks.fired.get(),
                "interrupted, but deferred: {completion:?}"
            );
            assert!(records.iter().all(|r| r.dma_offset < offset));
        }
        (None, None) => {
            assert!(
                !hooks.fired.get(),
                "interrupted, but completed: {completion:?}"
            );
            assert!(
                cmd.start_offset <= cmd.end_offset,
                "a command with start > end completed: {cmd:?}"
            );
        }
    }
}
