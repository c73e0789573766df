//! Tests of the aperture and the packets beyond TRANSFER.
//!
//! Plain structs, no socket: guest RAM and the VRAM window in one memory table, packets written
//! into a DMA buffer, and every result compared byte for byte with a [`Model`] of the data pages,
//! the VRAM and the first aperture pages' table entries.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_CMD_SUBMIT};
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::{Immutable, IntoBytes};

use super::*;
use crate::layout::file::parse_layout;
use crate::layout::rules::validate;
use crate::layout::{SegmentKind, SegmentLayout, DEFAULT_APERTURE_SIZE};
use crate::memory::gart::Run;
use crate::memory::vram::{BarMode, Vram};

const RAM_SIZE: u64 = 16 << 20;
const VRAM_SIZE: u64 = 4 << 20;
const VRAM_GPA: u64 = 0x1000_0000;
/// DMA buffers in RAM start here.
const DMA: u64 = 0x10_0000;
/// Frame lists: slot `n` at `LISTS + n * PAGE`.
const LISTS: u64 = 0x20_0000;
/// Data frames (the ones the model tracks) live in [DATA, DATA + DATA_SIZE).
const DATA: u64 = 0x40_0000;
const DATA_SIZE: u64 = 4 << 20;
const PAGE: u64 = WDDM_GPU_PAGE_SIZE;
/// The aperture of the default layout.
const AP: u32 = 2;
const AP_PAGES: u64 = DEFAULT_APERTURE_SIZE / PAGE;

/// Frame number of data page `i`.
fn df(i: u64) -> u64 {
    DATA / PAGE + i
}

fn dfs(pages: &[u64]) -> Vec<u64> {
    pages.iter().map(|&p| df(p)).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8 ^ (i >> 16) as u8)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The rig.

struct Rig {
    mem: GuestMemoryMmap<()>,
    vram: Vram,
    layout: SegmentLayout,
    engine: Engine,
    path: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Rig {
    fn new(name: &str) -> Self {
        Self::build(name, VRAM_SIZE, SegmentLayout::default_for_vram(VRAM_SIZE))
    }

    /// A rig with a layout file's layout (device-only segments get their own memory).
    fn with_layout(name: &str, toml: &str) -> Self {
        let layout = validate(&parse_layout(toml).unwrap(), VRAM_SIZE).unwrap();
        Self::build(name, VRAM_SIZE, layout)
    }

    fn build(name: &str, vram_size: u64, layout: SegmentLayout) -> Self {
        let path =
            std::env::temp_dir().join(format!("wddm-engine-ops-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let local = layout.device_only_vram(vram_size);
        let vram = Vram::create(&path, vram_size, local, BarMode::Ivshmem).unwrap();
        let ram =
            GuestRegionMmap::<()>::from_range(GuestAddress(0), RAM_SIZE as usize, None).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let window = GuestRegionMmap::new(
            MmapRegion::from_file(FileOffset::new(file, 0), vram_size as usize).unwrap(),
            GuestAddress(VRAM_GPA),
        )
        .unwrap();
        let mem = GuestMemoryMmap::from_regions(vec![ram, window]).unwrap();
        vram.observe_memory_table(&mem);
        Self {
            mem,
            vram,
            engine: Engine::new(&layout),
            layout,
            path,
        }
    }

    fn submit(&mut self, packets: &[u8]) -> Completion {
        self.submit_with(packets, &mut ())
    }

    fn submit_with(&mut self, packets: &[u8], hooks: &mut impl EngineHooks) -> Completion {
        self.mem.write_slice(packets, GuestAddress(DMA)).unwrap();
        let size = packets.len() as u32;
        self.execute(&command(0, DMA, size, 0, size), hooks)
    }

    /// Submits and asserts that every packet completed.
    fn ok(&mut self, packets: &[u8]) -> Completion {
        let completion = self.submit(packets);
        assert_eq!(completion.stop, None, "{completion:?}");
        completion
    }

    fn execute(&mut self, cmd: &WddmGpuCmdSubmit, hooks: &mut impl EngineHooks) -> Completion {
        let memory = DeviceMemory {
            ram: GuestRam::new(&self.mem, self.vram.guest_window()),
            vram: &self.vram,
            layout: &self.layout,
        };
        self.engine.execute(cmd, &memory, hooks)
    }

    /// Writes a frame list into slot `slot` and returns its address.
    fn list(&self, slot: u64, frames: &[u64]) -> u64 {
        let address = LISTS + slot * PAGE;
        assert!(frames.len() <= 512, "a list slot holds 512 entries");
        self.ram_write(address, frames.as_bytes());
        address
    }

    fn ram_write(&self, address: u64, bytes: &[u8]) {
        self.mem.write_slice(bytes, GuestAddress(address)).unwrap();
    }

    fn ram_read(&self, address: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mem
            .read_slice(&mut out, GuestAddress(address))
            .unwrap();
        out
    }

    fn vram_write(&self, offset: u64, bytes: &[u8]) {
        self.vram
            .slice(offset, bytes.len())
            .unwrap()
            .copy_from(bytes);
    }

    fn vram_read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.vram.slice(offset, len).unwrap().copy_to(&mut out[..]);
        out
    }

    fn entries(&self, pages: impl Iterator<Item = u64>) -> Vec<Option<u64>> {
        pages.map(|p| self.engine.gart().entry(AP, p)).collect()
    }
}

fn command(segment: u32, address: u64, size: u32, start: u32, end: u32) -> WddmGpuCmdSubmit {
    WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: address,
        dma_buffer_segment_id: segment,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: size,
        start_offset: start,
        end_offset: end,
        submission_fence_id: 7,
        ..Default::default()
    }
}

fn status(completion: &Completion) -> Option<SubmitStatus> {
    completion.stop.map(|(_, stop)| stop.status())
}

// ---------------------------------------------------------------------------------------------
// Packets.

fn b<T: IntoBytes + Immutable>(packet: T) -> Vec<u8> {
    packet.as_bytes().to_vec()
}

fn hdr<T>(opcode: u16) -> WddmGpuPacketHeader {
    WddmGpuPacketHeader {
        opcode,
        flags: 0,
        size: std::mem::size_of::<T>() as u32,
    }
}

fn seg(segment_id: u32, address: u64) -> WddmGpuEndpoint {
    WddmGpuEndpoint {
        segment_id,
        address,
        ..Default::default()
    }
}

fn vr(offset: u64) -> WddmGpuEndpoint {
    seg(1, offset)
}

fn ap(offset: u64) -> WddmGpuEndpoint {
    seg(AP, offset)
}

fn frames(list: u64, frame_count: u32, byte_offset: u32) -> WddmGpuEndpoint {
    WddmGpuEndpoint {
        segment_id: 0,
        frame_count,
        address: list,
        byte_offset,
        reserved: 0,
    }
}

fn transfer(
    length: u64,
    source: WddmGpuEndpoint,
    destination: WddmGpuEndpoint,
) -> WddmGpuPacketTransfer {
    WddmGpuPacketTransfer {
        header: hdr::<WddmGpuPacketTransfer>(WDDM_GPU_OP_TRANSFER),
        length,
        source,
        destination,
    }
}

fn fill(pattern: u32, length: u64, destination: WddmGpuEndpoint) -> WddmGpuPacketFill {
    WddmGpuPacketFill {
        header: hdr::<WddmGpuPacketFill>(WDDM_GPU_OP_FILL),
        pattern,
        reserved: 0,
        length,
        destination,
    }
}

fn access(
    opcode: u16,
    segment_id: u32,
    flags_or_size: u32,
    address: u64,
) -> WddmGpuPacketSegmentAccess {
    WddmGpuPacketSegmentAccess {
        header: hdr::<WddmGpuPacketSegmentAccess>(opcode),
        segment_id,
        flags_or_size,
        address,
    }
}

fn fence(fence_id: u32) -> WddmGpuPacketFence {
    WddmGpuPacketFence {
        header: hdr::<WddmGpuPacketFence>(WDDM_GPU_OP_FENCE),
        fence_id,
        reserved: 0,
    }
}

/// MAP_APERTURE into the default aperture: pages `first..first + count` get
/// `list[offset..offset + count]`.
fn map(
    first_page: u64,
    page_count: u64,
    list: u64,
    frame_count: u32,
    frame_offset: u32,
) -> WddmGpuPacketMapAperture {
    WddmGpuPacketMapAperture {
        header: hdr::<WddmGpuPacketMapAperture>(WDDM_GPU_OP_MAP_APERTURE),
        segment_id: AP,
        flags: 0,
        first_page,
        page_count,
        frame_list_address: list,
        frame_count,
        frame_offset,
    }
}

/// MAP_APERTURE2, contiguous form: pages `first..` get frames `base + adl_offset ..`.
fn map2_contiguous(
    first_page: u64,
    page_count: u64,
    base: u64,
    adl_page_count: u32,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    WddmGpuPacketMapAperture2 {
        header: hdr::<WddmGpuPacketMapAperture2>(WDDM_GPU_OP_MAP_APERTURE2),
        segment_id: AP,
        flags: 0,
        first_page,
        page_count,
        adl_flags: WDDM_GPU_ADL_FLAG_CONTIGUOUS,
        adl_offset,
        adl_base: base,
        adl_page_count,
        reserved: 0,
    }
}

/// MAP_APERTURE2, page-array form.
fn map2_pages(
    first_page: u64,
    page_count: u64,
    list: u64,
    adl_page_count: u32,
    adl_offset: u32,
) -> WddmGpuPacketMapAperture2 {
    WddmGpuPacketMapAperture2 {
        adl_flags: 0,
        adl_base: list,
        ..map2_contiguous(first_page, page_count, 0, adl_page_count, adl_offset)
    }
}

fn unmap(first_page: u64, page_count: u64, dummy_page: u64) -> WddmGpuPacketUnmapAperture {
    WddmGpuPacketUnmapAperture {
        header: hdr::<WddmGpuPacketUnmapAperture>(WDDM_GPU_OP_UNMAP_APERTURE),
        segment_id: AP,
        reserved: 0,
        first_page,
        page_count,
        dummy_page,
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

/// Where one byte lives: a VRAM offset or a guest-physical address inside DATA.
#[derive(Clone, Copy, Debug)]
enum Loc {
    Vram(u64),
    Ram(u64),
}

/// What the data pages, the BAR VRAM and aperture pages `0..gart.len()` must hold.
struct Model {
    ram: Vec<u8>,
    vram: Vec<u8>,
    gart: Vec<Option<u64>>,
}

impl Model {
    /// Fills the rig's data pages and VRAM with patterns and models them; the engine's table
    /// must be empty.
    fn new(rig: &Rig, pages: u64) -> Self {
        static PATTERNS: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
        let (ram, vram) = PATTERNS.get_or_init(|| {
            (
                pattern(DATA_SIZE as usize, 1),
                pattern(VRAM_SIZE as usize, 2),
            )
        });
        let model = Self {
            ram: ram.clone(),
            vram: vram.clone(),
            gart: vec![None; pages as usize],
        };
        rig.ram_write(DATA, &model.ram);
        rig.vram_write(0, &model.vram);
        model
    }

    fn ram_index(address: u64) -> usize {
        assert!(
            (DATA..DATA + DATA_SIZE).contains(&address),
            "{address:#x} is not a data page"
        );
        (address - DATA) as usize
    }

    fn get(&self, loc: Loc) -> u8 {
        match loc {
            Loc::Vram(offset) => self.vram[offset as usize],
            Loc::Ram(address) => self.ram[Self::ram_index(address)],
        }
    }

    fn set(&mut self, loc: Loc, byte: u8) {
        match loc {
            Loc::Vram(offset) => self.vram[offset as usize] = byte,
            Loc::Ram(address) => self.ram[Self::ram_index(address)] = byte,
        }
    }

    /// The byte at aperture offset `at`.
    fn aperture(&self, at: u64) -> Loc {
        let frame = self.gart[(at / PAGE) as usize].expect("aperture page mapped in the model");
        Loc::Ram(frame * PAGE + at % PAGE)
    }

    fn mapped(&self, offset: u64, length: u64) -> bool {
        length == 0
            || (offset / PAGE..=(offset + length - 1) / PAGE)
                .all(|p| self.gart[p as usize].is_some())
    }

    /// A transfer, byte after byte in order (the engine copies run after run in order; no test
    /// copies between aliasing ranges, so the two agree).
    fn copy(
        &mut self,
        length: u64,
        src: impl Fn(&Self, u64) -> Loc,
        dst: impl Fn(&Self, u64) -> Loc,
    ) {
        for i in 0..length {
            let byte = self.get(src(self, i));
            let to = dst(self, i);
            self.set(to, byte);
        }
    }

    fn vram_to_aperture(&mut self, vram: u64, aperture: u64, length: u64) {
        self.copy(
            length,
            |_, i| Loc::Vram(vram + i),
            |m, i| m.aperture(aperture + i),
        );
    }

    fn aperture_to_vram(&mut self, aperture: u64, vram: u64, length: u64) {
        self.copy(
            length,
            |m, i| m.aperture(aperture + i),
            |_, i| Loc::Vram(vram + i),
        );
    }

    fn fill(&mut self, offset: u64, length: u64, pattern: u32) {
        let bytes = pattern.to_le_bytes();
        for i in 0..length {
            self.vram[(offset + i) as usize] = bytes[(i % 4) as usize];
        }
    }

    fn map(&mut self, first: u64, frames: &[u64]) {
        for (i, &frame) in frames.iter().enumerate() {
            self.gart[first as usize + i] = Some(frame);
        }
    }

    /// Writes `bytes` at aperture offset `at` through the model's table, into the rig's RAM too.
    fn write_aperture(&mut self, rig: &Rig, at: u64, bytes: &[u8]) {
        for (i, &byte) in bytes.iter().enumerate() {
            let loc = self.aperture(at + i as u64);
            self.set(loc, byte);
            let Loc::Ram(address) = loc else {
                unreachable!()
            };
            rig.ram_write(address, &[byte]);
        }
    }

    /// Compares the rig with the model; the first difference found.
    fn diff(&self, rig: &Rig) -> Result<(), String> {
        // Slice equality is a memcmp; search for the position only when it fails.
        let first_diff = |a: &[u8], b: &[u8]| {
            (a != b)
                .then(|| a.iter().zip(b).position(|(x, y)| x != y))
                .flatten()
        };
        if let Some(i) = first_diff(&rig.vram_read(0, VRAM_SIZE as usize), &self.vram) {
            return Err(format!("VRAM differs at {i:#x}"));
        }
        if let Some(i) = first_diff(&rig.ram_read(DATA, DATA_SIZE as usize), &self.ram) {
            return Err(format!("RAM differs at {:#x}", DATA + i as u64));
        }
        let entries = rig.entries(0..self.gart.len() as u64);
        if let Some(p) = first_diff_entries(&entries, &self.gart) {
            return Err(format!(
                "GART page {p}: {:?}, model {:?}",
                entries[p], self.gart[p]
            ));
        }
        Ok(())
    }

    #[track_caller]
    fn check(&self, rig: &Rig) {
        if let Err(difference) = self.diff(rig) {
            panic!("{difference}");
        }
    }
}

fn first_diff_entries(a: &[Option<u64>], b: &[Option<u64>]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

// ---------------------------------------------------------------------------------------------
// Hooks.

/// Counts interruption checks (stopping with `stop` from call `stop.0` on) and records fences,
/// sampling guest memory (RAM or, through the window, VRAM) at each.
#[derive(Default)]
struct Hooks {
    calls: Cell<u32>,
    stop: Option<(u32, Interruption)>,
    fences: Vec<u32>,
    sample: Option<(GuestMemoryMmap<()>, Vec<u64>)>,
    samples: Vec<Vec<u8>>,
}

impl EngineHooks for Hooks {
    fn interruption(&self) -> Option<Interruption> {
        let call = self.calls.get() + 1;
        self.calls.set(call);
        match self.stop {
            Some((from, fault)) if call >= from => Some(fault),
            _ => None,
        }
    }

    fn fence(&mut self, fence_id: u32) {
        self.fences.push(fence_id);
        if let Some((mem, addresses)) = &self.sample {
            let bytes = addresses
                .iter()
                .map(|&a| mem.read_obj::<u8>(GuestAddress(a)).unwrap())
                .collect();
            self.samples.push(bytes);
        }
    }
}

/// From its second interruption check on (the first one inside the first packet, which the
/// engine has copied by then), writes `writes` into guest memory.
struct Rewriter {
    mem: GuestMemoryMmap<()>,
    calls: Cell<u32>,
    writes: Vec<(u64, Vec<u8>)>,
}

impl EngineHooks for Rewriter {
    fn interruption(&self) -> Option<Interruption> {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() >= 2 {
            for (address, bytes) in &self.writes {
                self.mem.write_slice(bytes, GuestAddress(*address)).unwrap();
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------------------------
// MAP_APERTURE, MAP_APERTURE2, UNMAP_APERTURE.

#[test]
fn map_places_each_frame_at_its_page_and_transfers_move_exactly_those_bytes() {
    let mut rig = Rig::new("map");
    let mut model = Model::new(&rig, 512);
    // 14-entry MDL; entries 3..13 are mapped at pages 100..110: scattered, with runs.
    let list = dfs(&[500, 9, 8, 17, 18, 19, 3, 900, 901, 44, 45, 46, 700, 2]);
    let at = rig.list(0, &list);
    let before = rig.entries(0..AP_PAGES.min(1024));
    let completion = rig.ok(&b(map(100, 10, at, 14, 3)));
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (1, 0)
    );
    model.map(100, &list[3..13]);
    for page in 0..1024 {
        let expected = match page {
            100..=109 => Some(list[3 + (page - 100) as usize]),
            _ => before[page as usize],
        };
        assert_eq!(rig.engine.gart().entry(AP, page), expected, "page {page}");
    }
    model.check(&rig);

    // Consecutive frames behind consecutive pages coalesce into one run.
    let gart = rig.engine.gart();
    let run = |offset| gart.run_at(AP, offset, u64::MAX).unwrap();
    assert_eq!(
        run(100 * PAGE + 0x10),
        Run {
            address: df(17) * PAGE + 0x10,
            length: 3 * PAGE - 0x10
        }
    );
    assert_eq!(
        run(103 * PAGE + 1),
        Run {
            address: df(3) * PAGE + 1,
            length: PAGE - 1
        }
    );
    assert_eq!(
        run(104 * PAGE + 5),
        Run {
            address: df(900) * PAGE + 5,
            length: 2 * PAGE - 5
        }
    );
    assert_eq!(
        run(106 * PAGE),
        Run {
            address: df(44) * PAGE,
            length: 3 * PAGE
        }
    );
    assert_eq!(
        run(109 * PAGE),
        Run {
            address: df(700) * PAGE,
            length: PAGE
        }
    );

    // Unaligned offsets, lengths that are not page multiples; the second transfer writes frames
    // the first one read.
    let out_len = 10 * PAGE - 0x123 - 0x45;
    let in_len = 7 * PAGE + 5;
    let completion = rig.ok(&[
        b(transfer(out_len, ap(100 * PAGE + 0x123), vr(0x1_0007))),
        b(transfer(in_len, vr(0x20_0001), ap(101 * PAGE + 0x7ff))),
    ]
    .concat());
    assert_eq!(completion.packets_completed, 2);
    assert_eq!(completion.bytes_transferred, out_len + in_len);
    model.aperture_to_vram(100 * PAGE + 0x123, 0x1_0007, out_len);
    model.vram_to_aperture(0x20_0001, 101 * PAGE + 0x7ff, in_len);
    model.check(&rig);
    // Spot checks of the model itself: first byte out, last byte in.
    assert_eq!(
        rig.vram_read(0x1_0007, 1),
        rig.ram_read(df(17) * PAGE + 0x123, 1)
    );
    let last = 101 * PAGE + 0x7ff + in_len - 1; // page 108 = frame 46
    assert_eq!(last / PAGE, 108);
    assert_eq!(
        rig.ram_read(df(46) * PAGE + last % PAGE, 1),
        rig.vram_read(0x20_0001 + in_len - 1, 1)
    );
}

#[test]
fn map_aperture2_contiguous_and_page_array_forms() {
    let mut rig = Rig::new("map2");
    let mut model = Model::new(&rig, 512);
    // Contiguous: BasePageNumber df(200), 8 pages, AdlOffset 3 -> pages 10..15 map df(203..208).
    rig.ok(&b(map2_contiguous(10, 5, df(200), 8, 3)));
    model.map(10, &dfs(&[203, 204, 205, 206, 207]));
    model.check(&rig);
    assert_eq!(
        rig.entries(9..16),
        [
            None,
            Some(df(203)),
            Some(df(204)),
            Some(df(205)),
            Some(df(206)),
            Some(df(207)),
            None
        ]
    );
    let run = rig
        .engine
        .gart()
        .run_at(AP, 10 * PAGE + 9, u64::MAX)
        .unwrap();
    assert_eq!(
        run,
        Run {
            address: df(203) * PAGE + 9,
            length: 5 * PAGE - 9
        }
    );

    // Page array: 6 entries, AdlOffset 1, 4 pages at page 30.
    let list = dfs(&[1, 640, 12, 13, 77, 5]);
    let at = rig.list(0, &list);
    rig.ok(&b(map2_pages(30, 4, at, 6, 1)));
    model.map(30, &list[1..5]);
    model.check(&rig);

    let length = 3 * PAGE + 0x311;
    rig.ok(&[
        b(transfer(length, vr(0x3_0003), ap(10 * PAGE + 0x80))),
        b(transfer(length, ap(30 * PAGE + 0x9), vr(0x8_0001))),
        b(transfer(4 * PAGE - 1, ap(30 * PAGE + 1), ap(11 * PAGE))),
    ]
    .concat());
    model.vram_to_aperture(0x3_0003, 10 * PAGE + 0x80, length);
    model.aperture_to_vram(30 * PAGE + 0x9, 0x8_0001, length);
    model.copy(
        4 * PAGE - 1,
        |m, i| m.aperture(30 * PAGE + 1 + i),
        |m, i| m.aperture(11 * PAGE + i),
    );
    model.check(&rig);

    // Remapping replaces entries; a contiguous ADL of one page works.
    rig.ok(&b(map2_contiguous(12, 1, df(900), 1, 0)));
    model.map(12, &[df(900)]);
    model.check(&rig);
}

#[test]
fn unmap_points_the_range_at_the_dummy_page() {
    let mut rig = Rig::new("unmap");
    let mut model = Model::new(&rig, 512);
    let list = dfs(&[5, 6, 7, 300, 301, 302, 303, 9]);
    let at = rig.list(0, &list);
    rig.ok(&b(map(20, 8, at, 8, 0)));
    model.map(20, &list);
    let dummy = df(1000);
    let completion = rig.ok(&b(unmap(22, 3, dummy * PAGE)));
    assert_eq!(completion.packets_completed, 1);
    model.map(22, &[dummy; 3]);
    assert_eq!(
        rig.entries(19..29),
        [
            None,
            Some(df(5)),
            Some(df(6)),
            Some(dummy),
            Some(dummy),
            Some(dummy),
            Some(df(302)),
            Some(df(303)),
            Some(df(9)),
            None
        ]
    );
    model.check(&rig);
    let dummy_bytes = rig.ram_read(dummy * PAGE, PAGE as usize);

    // Reads through the range read the dummy page, three times over.
    let length = 5 * PAGE - 0x200;
    rig.ok(&b(transfer(length, ap(21 * PAGE + 0x100), vr(0x8000))));
    model.aperture_to_vram(21 * PAGE + 0x100, 0x8000, length);
    model.check(&rig);
    for k in 0..3u64 {
        let page_at = 0x8000 + (PAGE - 0x100) + k * PAGE;
        assert_eq!(
            rig.vram_read(page_at, PAGE as usize),
            dummy_bytes,
            "page {}",
            22 + k
        );
    }

    // Writes through the range land in the dummy page (the last write of each byte wins) and
    // nowhere else: the frames mapped there before are untouched (model check).
    let length = 3 * PAGE - 0x30;
    rig.ok(&b(transfer(length, vr(0x4_0000), ap(22 * PAGE + 0x10))));
    model.vram_to_aperture(0x4_0000, 22 * PAGE + 0x10, length);
    model.check(&rig);
    let dummy_after = rig.ram_read(dummy * PAGE, PAGE as usize);
    let tail = (PAGE - 0x20) as usize;
    // [0, PAGE - 0x20) comes from the part written through page 24, the rest through page 23.
    assert_eq!(
        dummy_after[..tail],
        rig.vram_read(0x4_0000 + 2 * PAGE - 0x10, tail)[..]
    );
    assert_eq!(
        dummy_after[tail..],
        rig.vram_read(0x4_0000 + 2 * PAGE - 0x30, 0x20)[..]
    );

    // Unmapping pages that were never mapped makes them usable (they read the dummy page).
    rig.ok(&b(unmap(40, 2, dummy * PAGE)));
    model.map(40, &[dummy; 2]);
    rig.ok(&b(transfer(2 * PAGE, ap(40 * PAGE), vr(0x10_0000))));
    model.aperture_to_vram(40 * PAGE, 0x10_0000, 2 * PAGE);
    model.check(&rig);
    assert_eq!(rig.vram_read(0x10_0000 + PAGE, PAGE as usize), dummy_after);
}

#[test]
fn an_unmapped_page_anywhere_in_the_range_faults_before_any_byte_moves() {
    let mut rig = Rig::new("unmapped");
    let mut model = Model::new(&rig, 512);
    let list = dfs(&[60, 61, 900, 4]);
    let at = rig.list(0, &list);
    rig.ok(&b(map(40, 4, at, 4, 0)));
    model.map(40, &list);
    // Pages 40..44 mapped, 44 never: each transfer covers 40..=44.
    let length = 5 * PAGE - 0x20;
    let good = b(fence(1));
    for (name, bad) in [
        (
            "vram -> aperture",
            transfer(length, vr(0x1_0000), ap(40 * PAGE + 0x10)),
        ),
        (
            "aperture -> vram",
            transfer(length, ap(40 * PAGE + 0x10), vr(0x1_0000)),
        ),
        (
            "aperture -> aperture",
            transfer(4 * PAGE, ap(40 * PAGE), ap(41 * PAGE + 1)),
        ),
        ("last byte only", transfer(1, vr(0), ap(45 * PAGE - 1))),
    ] {
        let completion = rig.submit(&[good.clone(), b(bad)].concat());
        // Pages 40..44 are mapped, 44 never was.
        let expected_page = 44;
        assert_eq!(
            completion.fault(),
            Some((
                16,
                Fault::UnmappedAperture {
                    segment: AP,
                    page: expected_page
                }
            )),
            "{name}"
        );
        assert_eq!(completion.fault_opcode, WDDM_GPU_OP_TRANSFER, "{name}");
        assert_eq!(
            completion.fault().unwrap().1.address(),
            expected_page * PAGE,
            "{name}"
        );
        assert_eq!(
            (completion.packets_completed, completion.bytes_transferred),
            (1, 0),
            "{name}"
        );
        model.check(&rig);
    }
    // A reset forgets every mapping.
    rig.engine.reset();
    model.gart.fill(None);
    let completion = rig.submit(&b(transfer(16, ap(41 * PAGE), vr(0))));
    assert_eq!(
        completion.fault(),
        Some((
            0,
            Fault::UnmappedAperture {
                segment: AP,
                page: 41
            }
        ))
    );
    model.check(&rig);
}

/// Runs `fence(1)` then `bad`: the bad packet must fault with `expected` at offset 16 and leave
/// the table (watched pages), the data pages and the VRAM as they were.
#[track_caller]
fn assert_refused(rig: &mut Rig, name: &str, bad: Vec<u8>, expected: SubmitStatus) {
    let watch = || (0..64).chain(AP_PAGES - 4..AP_PAGES);
    let before = rig.entries(watch());
    let ram = rig.ram_read(DATA, DATA_SIZE as usize);
    let vram = rig.vram_read(0, VRAM_SIZE as usize);
    let completion = rig.submit(&[b(fence(1)), bad].concat());
    assert_eq!(
        status(&completion),
        Some(expected),
        "{name}: {completion:?}"
    );
    assert_eq!(completion.fault().unwrap().0, 16, "{name}");
    assert_eq!(completion.packets_completed, 1, "{name}");
    assert_eq!(rig.entries(watch()), before, "{name}: the table changed");
    assert!(
        rig.ram_read(DATA, DATA_SIZE as usize) == ram,
        "{name}: RAM changed"
    );
    assert!(
        rig.vram_read(0, VRAM_SIZE as usize) == vram,
        "{name}: VRAM changed"
    );
}

#[test]
fn a_map_request_is_checked_whole_before_any_entry_changes() {
    let mut rig = Rig::new("map-checks");
    // Something to preserve: pages 0..6 and the last two pages mapped.
    let old = rig.list(0, &dfs(&[1, 2, 3, 4, 5, 6]));
    rig.ok(&[
        b(map(0, 6, old, 6, 0)),
        b(map2_contiguous(AP_PAGES - 2, 2, df(50), 2, 0)),
    ]
    .concat());
    let good: Vec<u64> = dfs(&[100, 101, 102, 103, 104, 105, 106, 107]);
    let with_fifth = |rig: &Rig, frame: u64| {
        let mut list = good.clone();
        list[4] = frame;
        rig.list(1, &list)
    };
    let beyond_ram = RAM_SIZE / PAGE + 3;
    let in_vram = VRAM_GPA / PAGE + 2;
    let list = with_fifth(&rig, beyond_ram);
    assert_refused(
        &mut rig,
        "5th frame beyond RAM",
        b(map(2, 8, list, 8, 0)),
        SubmitStatus::FrameNotInRam,
    );
    let list = with_fifth(&rig, in_vram);
    assert_refused(
        &mut rig,
        "5th frame in VRAM",
        b(map(2, 8, list, 8, 0)),
        SubmitStatus::FrameInVram,
    );
    let list = with_fifth(&rig, u64::MAX);
    assert_refused(
        &mut rig,
        "5th frame overflows",
        b(map(2, 8, list, 8, 0)),
        SubmitStatus::FrameNotInRam,
    );
    // The list's own 5th entry is bad, but only entries [offset, offset + count) matter.
    let list = with_fifth(&rig, in_vram);
    rig.ok(&[b(map(10, 3, list, 8, 5)), b(map(20, 4, list, 8, 0))].concat());
    assert_eq!(
        rig.entries(10..13),
        [Some(df(105)), Some(df(106)), Some(df(107))]
    );
    let list = with_fifth(&rig, in_vram);
    assert_refused(
        &mut rig,
        "ADL page array 5th in VRAM",
        b(map2_pages(2, 8, list, 8, 0)),
        SubmitStatus::FrameInVram,
    );
    let list = rig.list(1, &good);
    let past_end = b(map(AP_PAGES - 3, 8, list, 8, 0));
    assert_refused(
        &mut rig,
        "range past the aperture end",
        past_end,
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "first page overflows",
        b(map(u64::MAX, 2, list, 8, 0)),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "ADL past the aperture end",
        b(map2_contiguous(AP_PAGES - 1, 2, df(10), 2, 0)),
        SubmitStatus::SegmentRange,
    );
    for (segment, expected) in [
        (1, SubmitStatus::WrongSegmentKind),
        (9, SubmitStatus::BadSegment),
        (0, SubmitStatus::BadSegment),
    ] {
        let name = format!("MAP on segment {segment}");
        assert_refused(
            &mut rig,
            &name,
            b(WddmGpuPacketMapAperture {
                segment_id: segment,
                ..map(0, 1, list, 8, 0)
            }),
            expected,
        );
        let p = WddmGpuPacketMapAperture2 {
            segment_id: segment,
            ..map2_contiguous(0, 1, df(0), 1, 0)
        };
        assert_refused(
            &mut rig,
            &format!("MAP2 on segment {segment}"),
            b(p),
            expected,
        );
        let p = WddmGpuPacketUnmapAperture {
            segment_id: segment,
            ..unmap(0, 1, DATA)
        };
        assert_refused(
            &mut rig,
            &format!("UNMAP on segment {segment}"),
            b(p),
            expected,
        );
    }
    assert_refused(
        &mut rig,
        "unknown map flag",
        b(WddmGpuPacketMapAperture {
            flags: 2,
            ..map(0, 1, list, 8, 0)
        }),
        SubmitStatus::ReservedField,
    );
    let mut flagged = b(map(0, 1, list, 8, 0));
    flagged[2] = 1; // header flags
    assert_refused(
        &mut rig,
        "header flags",
        flagged,
        SubmitStatus::ReservedField,
    );
    assert_refused(
        &mut rig,
        "offset + count > frame_count",
        b(map(0, 6, list, 8, 3)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "offset alone > frame_count",
        b(map(0, 0, list, 8, 9)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "frame_count above the maximum",
        b(map(0, 1, list, WDDM_GPU_MAX_FRAME_LIST_ENTRIES + 1, 0)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "list outside RAM",
        b(map(0, 2, RAM_SIZE - 8, 2, 0)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "list in VRAM",
        b(map(0, 1, VRAM_GPA, 1, 0)),
        SubmitStatus::BadFrameList,
    );

    // MAP_APERTURE2 rules.
    assert_refused(
        &mut rig,
        "ADL too short",
        b(map2_contiguous(0, 4, df(10), 6, 3)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "ADL pages too short",
        b(map2_pages(0, 4, list, 6, 3)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "ADL crosses the RAM end",
        b(map2_contiguous(0, 4, RAM_SIZE / PAGE - 2, 4, 0)),
        SubmitStatus::FrameNotInRam,
    );
    assert_refused(
        &mut rig,
        "ADL in VRAM",
        b(map2_contiguous(0, 4, in_vram, 4, 0)),
        SubmitStatus::FrameInVram,
    );
    assert_refused(
        &mut rig,
        "ADL base overflows",
        b(map2_contiguous(0, 1, u64::MAX, 4, 2)),
        SubmitStatus::LengthOverflow,
    );
    let p = WddmGpuPacketMapAperture2 {
        adl_flags: 2 | WDDM_GPU_ADL_FLAG_CONTIGUOUS,
        ..map2_contiguous(0, 1, df(0), 1, 0)
    };
    assert_refused(
        &mut rig,
        "unknown ADL flag",
        b(p),
        SubmitStatus::ReservedField,
    );
    let p = WddmGpuPacketMapAperture2 {
        reserved: 1,
        ..map2_contiguous(0, 1, df(0), 1, 0)
    };
    assert_refused(&mut rig, "MAP2 reserved", b(p), SubmitStatus::ReservedField);
    let p = WddmGpuPacketMapAperture2 {
        flags: 4,
        ..map2_contiguous(0, 1, df(0), 1, 0)
    };
    assert_refused(
        &mut rig,
        "MAP2 unknown map flag",
        b(p),
        SubmitStatus::ReservedField,
    );

    // UNMAP rules.
    assert_refused(
        &mut rig,
        "unaligned dummy",
        b(unmap(0, 2, DATA + 8)),
        SubmitStatus::BadFrameList,
    );
    assert_refused(
        &mut rig,
        "dummy in VRAM",
        b(unmap(0, 2, VRAM_GPA + PAGE)),
        SubmitStatus::FrameInVram,
    );
    assert_refused(
        &mut rig,
        "dummy beyond RAM",
        b(unmap(0, 2, RAM_SIZE)),
        SubmitStatus::FrameNotInRam,
    );
    assert_refused(
        &mut rig,
        "unmap reserved",
        b(WddmGpuPacketUnmapAperture {
            reserved: 1,
            ..unmap(0, 1, DATA)
        }),
        SubmitStatus::ReservedField,
    );
    assert_refused(
        &mut rig,
        "unmap past the end",
        b(unmap(AP_PAGES - 1, 2, DATA)),
        SubmitStatus::SegmentRange,
    );

    // CacheCoherent is fine into the default (coherent) aperture.
    let p = WddmGpuPacketMapAperture {
        flags: WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
        ..map(30, 1, list, 8, 0)
    };
    rig.ok(&b(p));
    assert_eq!(rig.entries(30..31), [Some(df(100))]);
}

const NON_COHERENT: &str = "[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"4MiB\"\n\
    [[segments]]\nflags = [\"Aperture\"]\nsize = \"1MiB\"\n\
    [[segments]]\nflags = []\nsize = \"2MiB\"\nbase_address = 0x100000000\n";

#[test]
fn cache_coherent_mappings_need_a_cache_coherent_aperture() {
    let mut rig = Rig::with_layout("non-coherent", NON_COHERENT);
    assert_eq!(rig.layout.segments[1].kind, SegmentKind::Aperture);
    let list = rig.list(0, &dfs(&[7, 8]));
    let coherent = WDDM_GPU_MAP_FLAG_CACHE_COHERENT;
    let p = WddmGpuPacketMapAperture {
        flags: coherent,
        ..map(0, 2, list, 2, 0)
    };
    assert_refused(
        &mut rig,
        "CacheCoherent MAP",
        b(p),
        SubmitStatus::WrongSegmentKind,
    );
    let p = WddmGpuPacketMapAperture2 {
        flags: coherent,
        ..map2_contiguous(0, 2, df(7), 2, 0)
    };
    assert_refused(
        &mut rig,
        "CacheCoherent MAP2",
        b(p),
        SubmitStatus::WrongSegmentKind,
    );
    // Without the flag the same mapping works; the device-only segment 3 is not an aperture.
    rig.ok(&b(map(0, 2, list, 2, 0)));
    assert_eq!(rig.entries(0..3), [Some(df(7)), Some(df(8)), None]);
    let p = WddmGpuPacketMapAperture {
        segment_id: 3,
        ..map(0, 2, list, 2, 0)
    };
    assert_refused(
        &mut rig,
        "MAP on device-only VRAM",
        b(p),
        SubmitStatus::WrongSegmentKind,
    );
    // The aperture is 1 MiB here: 256 pages.
    assert_refused(
        &mut rig,
        "past the 1 MiB aperture",
        b(map(255, 2, list, 2, 0)),
        SubmitStatus::SegmentRange,
    );
}

// ---------------------------------------------------------------------------------------------
// FILL.

#[test]
fn fill_repeats_the_pattern_over_exactly_the_range() {
    let mut rig = Rig::new("fill");
    let mut model = Model::new(&rig, 16);
    let cases: [(u64, u64, u32); 9] = [
        (0x1_0003, 3 * 65536 + 0x1235, 0xA1B2_C3D4),
        (0x9_0001, 1, 0x1122_3344),
        (0x9_0011, 2, 0x5566_7788),
        (0x9_0021, 3, 0x99AA_BBCC),
        (0x9_0031, 5, 0xDDEE_FF00),
        (0xA_0000, 65536 + 2, 0xA1B2_C3D4),
        (0xC_0000, 65536 - 1, 0x0102_0304),
        (0x10_0002, (2 << 20) + 3, 0xDEAD_BEEF),
        (VRAM_SIZE - 7, 7, 0xCAFE_F00D),
    ];
    for (offset, length, pattern) in cases {
        let completion = rig.ok(&b(fill(pattern, length, vr(offset))));
        assert_eq!(completion.bytes_transferred, length);
        model.fill(offset, length, pattern);
        let head = rig.vram_read(offset, length.min(8) as usize);
        let expected: Vec<u8> = pattern
            .to_le_bytes()
            .iter()
            .cycle()
            .take(head.len())
            .copied()
            .collect();
        assert_eq!(head, expected, "{offset:#x}");
        model.check(&rig);
    }
    // Several FILLs in one buffer, zero length included.
    let completion = rig.ok(&[
        b(fill(1, 0, vr(0))),
        b(fill(0x0403_0201, 70_001, vr(0x30_0001))),
        b(fill(0xFFFF_FFFF, 9, vr(3))),
    ]
    .concat());
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (3, 70_010)
    );
    model.fill(0x30_0001, 70_001, 0x0403_0201);
    model.fill(3, 9, 0xFFFF_FFFF);
    model.check(&rig);
}

#[test]
fn fill_refuses_apertures_frame_lists_and_ranges_outside_the_segment() {
    let mut rig = Rig::new("fill-bad");
    let list = rig.list(0, &dfs(&[1, 2]));
    rig.ok(&b(map(0, 2, list, 2, 0)));
    assert_refused(
        &mut rig,
        "FILL on a mapped aperture",
        b(fill(1, 16, ap(0x10))),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL on a frame list",
        b(fill(1, 16, frames(list, 2, 0))),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL past the end",
        b(fill(1, 11, vr(VRAM_SIZE - 10))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL at the end",
        b(fill(1, 1, vr(VRAM_SIZE))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL overflow",
        b(fill(1, u64::MAX, vr(1))),
        SubmitStatus::LengthOverflow,
    );
    assert_refused(
        &mut rig,
        "FILL bad segment",
        b(fill(1, 1, seg(9, 0))),
        SubmitStatus::BadSegment,
    );
    let p = WddmGpuPacketFill {
        reserved: 1,
        ..fill(1, 16, vr(0))
    };
    assert_refused(&mut rig, "FILL reserved", b(p), SubmitStatus::ReservedField);
    let mut endpoint = vr(0);
    endpoint.reserved = 1;
    assert_refused(
        &mut rig,
        "FILL endpoint reserved",
        b(fill(1, 16, endpoint)),
        SubmitStatus::ReservedField,
    );
    endpoint = vr(0);
    endpoint.frame_count = 1;
    assert_refused(
        &mut rig,
        "FILL endpoint frame_count",
        b(fill(1, 16, endpoint)),
        SubmitStatus::ReservedField,
    );
}

/// ENGINE BUG (reported): a FILL whose destination is an aperture range that is not (fully)
/// mapped reports UNMAPPED_APERTURE, not WRONG_SEGMENT_KIND. `Engine::fill` (ops.rs) resolves
/// the destination with `resolve_endpoint`, which checks the aperture mapping, before it looks
/// at the segment kind; DISCARD_CONTENT on the same range does report WRONG_SEGMENT_KIND.
#[test]
fn fill_on_an_unmapped_aperture_is_the_wrong_segment_kind() {
    let mut rig = Rig::new("fill-unmapped");
    assert_refused(
        &mut rig,
        "DISCARD on an unmapped aperture",
        b(access(WDDM_GPU_OP_DISCARD_CONTENT, AP, 0, 0)),
        SubmitStatus::WrongSegmentKind,
    );
    assert_refused(
        &mut rig,
        "FILL on an unmapped aperture",
        b(fill(1, 16, ap(0))),
        SubmitStatus::WrongSegmentKind,
    );
}

#[test]
fn fill_and_transfer_reach_device_only_vram() {
    let mut rig = Rig::with_layout("fill-hidden", NON_COHERENT);
    let SegmentKind::Memory {
        vram_offset,
        bar_offset: None,
    } = rig.layout.segments[2].kind
    else {
        panic!("segment 3 is device-only VRAM");
    };
    assert!(vram_offset >= VRAM_SIZE);
    let base = 0x1_0000_0000u64;
    let before = rig.vram_read(0, VRAM_SIZE as usize);
    let length = 70_000 + 3;
    let completion = rig.ok(&b(fill(0x8899_AABB, length, seg(3, base + 0x1001))));
    assert_eq!(completion.bytes_transferred, length);
    let got = rig.vram_read(vram_offset + 0x1000, length as usize + 2);
    assert_eq!(got[0], 0, "guard before");
    assert_eq!(*got.last().unwrap(), 0, "guard after");
    for (i, byte) in got[1..=length as usize].iter().enumerate() {
        assert_eq!(*byte, 0x8899_AABBu32.to_le_bytes()[i % 4], "byte {i}");
    }
    assert!(
        rig.vram_read(0, VRAM_SIZE as usize) == before,
        "the BAR changed"
    );
    // Out again through VRAM segment 1, byte for byte.
    rig.ok(&b(transfer(length, seg(3, base + 0x1001), vr(0x2_0001))));
    assert_eq!(
        rig.vram_read(0x2_0001, length as usize),
        got[1..=length as usize]
    );
    assert_refused(
        &mut rig,
        "FILL past the device-only end",
        b(fill(1, 2, seg(3, base + (2 << 20) - 1))),
        SubmitStatus::SegmentRange,
    );
    assert_refused(
        &mut rig,
        "FILL below the device-only base",
        b(fill(1, 2, seg(3, base - 1))),
        SubmitStatus::SegmentRange,
    );
}

// ---------------------------------------------------------------------------------------------
// DISCARD_CONTENT, READ_PHYSICAL, WRITE_PHYSICAL, FENCE.

#[test]
fn segment_access_packets_check_the_location_and_move_nothing() {
    let mut rig = Rig::new("access");
    let mut model = Model::new(&rig, 16);
    let list = rig.list(0, &dfs(&[3, 4]));
    rig.ok(&b(map(2, 2, list, 2, 0)));
    model.map(2, &dfs(&[3, 4]));
    let mut good = Vec::new();
    for flags in [0, WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE] {
        good.push(access(WDDM_GPU_OP_DISCARD_CONTENT, 1, flags, 0x1234));
        good.push(access(WDDM_GPU_OP_DISCARD_CONTENT, 1, flags, VRAM_SIZE - 1));
    }
    for size in 1..=8 {
        for opcode in [WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL] {
            good.push(access(opcode, 1, size, VRAM_SIZE - u64::from(size)));
            good.push(access(opcode, AP, size, 3 * PAGE - 4)); // straddles mapped pages 2 and 3
        }
    }
    let packets: Vec<u8> = good.iter().flat_map(|p| p.as_bytes().to_vec()).collect();
    let completion = rig.ok(&packets);
    assert_eq!(
        (completion.packets_completed, completion.bytes_transferred),
        (good.len() as u32, 0)
    );
    model.check(&rig);
    assert_eq!(
        rig.entries(0..5),
        [None, None, Some(df(3)), Some(df(4)), None]
    );

    let refuse = |rig: &mut Rig, name: &str, p: WddmGpuPacketSegmentAccess, expected| {
        assert_refused(rig, name, b(p), expected);
        model.check(rig);
    };
    for opcode in [WDDM_GPU_OP_READ_PHYSICAL, WDDM_GPU_OP_WRITE_PHYSICAL] {
        for size in [0, 9, u32::MAX] {
            refuse(
                &mut rig,
                &format!("{opcode} size {size}"),
                access(opcode, 1, size, 0),
                SubmitStatus::ReservedField,
            );
        }
        refuse(
            &mut rig,
            "through an unmapped page",
            access(opcode, AP, 4, 5 * PAGE),
            SubmitStatus::UnmappedAperture,
        );
        refuse(
            &mut rig,
            "into an unmapped page",
            access(opcode, AP, 8, 4 * PAGE - 4),
            SubmitStatus::UnmappedAperture,
        );
        refuse(
            &mut rig,
            "past the segment",
            access(opcode, 1, 8, VRAM_SIZE - 4),
            SubmitStatus::SegmentRange,
        );
        refuse(
            &mut rig,
            "bad segment",
            access(opcode, 3, 1, 0),
            SubmitStatus::BadSegment,
        );
    }
    let discard = WDDM_GPU_OP_DISCARD_CONTENT;
    refuse(
        &mut rig,
        "DISCARD flags",
        access(discard, 1, 2, 0),
        SubmitStatus::ReservedField,
    );
    refuse(
        &mut rig,
        "DISCARD on a mapped aperture",
        access(discard, AP, 0, 2 * PAGE),
        SubmitStatus::WrongSegmentKind,
    );
    refuse(
        &mut rig,
        "DISCARD past the segment",
        access(discard, 1, 0, VRAM_SIZE),
        SubmitStatus::SegmentRange,
    );
    refuse(
        &mut rig,
        "DISCARD bad segment",
        access(discard, 0, 0, 0),
        SubmitStatus::BadSegment,
    );
    let mut flagged = access(discard, 1, 0, 0);
    flagged.header.flags = 1;
    refuse(
        &mut rig,
        "header flags",
        flagged,
        SubmitStatus::ReservedField,
    );
    let mut small = b(access(discard, 1, 0, 0));
    small[4] = 16; // size 16 < the 24-byte structure
    assert_refused(
        &mut rig,
        "segment access too small",
        small[..16].to_vec(),
        SubmitStatus::BadPacketHeader,
    );
}

#[test]
fn fences_reach_the_hooks_in_order_with_the_other_packets() {
    let mut rig = Rig::new("fence");
    rig.vram_write(0, &[0x11; 16]);
    let out = rig.list(0, &dfs(&[9]));
    rig.ram_write(df(9) * PAGE, &[0x22; 16]);
    let mut hooks = Hooks {
        sample: Some((rig.mem.clone(), vec![VRAM_GPA, df(9) * PAGE])),
        ..Default::default()
    };
    let mut bad_fence = fence(14);
    bad_fence.reserved = 1;
    let packets = [
        b(fence(10)),
        b(fill(0x3333_3333, 16, vr(0))),
        b(fence(11)),
        b(transfer(16, vr(0), frames(out, 1, 0))),
        b(fence(12)),
        b(fence(12)),
        b(bad_fence),
        b(fence(15)),
    ];
    let offset_of_bad: usize = packets[..6].iter().map(Vec::len).sum();
    let completion = rig.submit_with(&packets.concat(), &mut hooks);
    assert_eq!(
        completion.fault(),
        Some((offset_of_bad as u32, Fault::ReservedField("fence.reserved")))
    );
    assert_eq!(completion.fault_opcode, WDDM_GPU_OP_FENCE);
    assert_eq!(completion.packets_completed, 6);
    assert_eq!(completion.bytes_transferred, 32);
    assert_eq!(hooks.fences, [10, 11, 12, 12]);
    assert_eq!(
        hooks.samples,
        [
            vec![0x11, 0x22],
            vec![0x33, 0x22],
            vec![0x33, 0x33],
            vec![0x33, 0x33]
        ]
    );
    // A header flag on FENCE is refused too, and the fence is not signalled.
    let mut flagged = fence(20);
    flagged.header.flags = 1;
    let mut hooks = Hooks::default();
    let completion = rig.submit_with(&b(flagged), &mut hooks);
    assert_eq!(status(&completion), Some(SubmitStatus::ReservedField));
    assert!(hooks.fences.is_empty());
}

// ---------------------------------------------------------------------------------------------
// DMA buffers in segments.

/// 16 bytes of unknown opcode: faults if it ever executes.
fn poison() -> Vec<u8> {
    let mut p = b(fence(0));
    p[0] = 0x55;
    p
}

/// A stream of FILL, TRANSFER and FENCE packets (between poison packets) and the model effect.
fn stream(seed: u32, count: u64) -> (Vec<u8>, Vec<WddmGpuPacketFill>, Vec<WddmGpuPacketTransfer>) {
    let mut bytes = poison();
    let (mut fills, mut transfers) = (Vec::new(), Vec::new());
    for k in 0..count {
        let f = fill(
            seed.wrapping_mul(0x0101_0101)
                .wrapping_add(k as u32 * 0x0102_0304),
            100 + k * 7,
            vr(0x1000 * k + k),
        );
        let t = transfer(
            0x800 + k,
            vr(0x20_0000 + k * 0x1000),
            vr(0x28_0000 + k * 0x1000 + 3),
        );
        bytes.extend(b(f));
        bytes.extend(b(t));
        bytes.extend(b(fence(k as u32)));
        fills.push(f);
        transfers.push(t);
    }
    bytes.extend(poison());
    (bytes, fills, transfers)
}

fn apply_stream(
    model: &mut Model,
    fills: &[WddmGpuPacketFill],
    transfers: &[WddmGpuPacketTransfer],
) -> u64 {
    let mut total = 0;
    for (f, t) in fills.iter().zip(transfers) {
        model.fill(f.destination.address, f.length, f.pattern);
        let (s, d) = (t.source.address, t.destination.address);
        model.copy(t.length, |_, i| Loc::Vram(s + i), |_, i| Loc::Vram(d + i));
        total += f.length + t.length;
    }
    total
}

#[test]
fn a_dma_buffer_in_the_aperture_executes_through_scattered_frames() {
    let mut rig = Rig::new("dma-aperture");
    let mut model = Model::new(&rig, 512);
    let (bytes, fills, transfers) = stream(1, 80);
    let base = 300 * PAGE + 0x7c8;
    let pages = (0x7c8 + bytes.len() as u64).div_ceil(PAGE);
    assert!(pages >= 3, "packets must cross page boundaries");
    let scattered = dfs(&[700, 12, 513, 99, 250, 251, 1]);
    let list = rig.list(0, &scattered);
    rig.ok(&b(map(300, pages, list, scattered.len() as u32, 0)));
    model.map(300, &scattered[..pages as usize]);
    model.write_aperture(&rig, base, &bytes);
    model.check(&rig);

    let size = bytes.len() as u32;
    let mut hooks = Hooks::default();
    let completion = rig.execute(&command(AP, base, size, 16, size - 16), &mut hooks);
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.packets_completed, 3 * 80);
    assert_eq!(
        completion.bytes_transferred,
        apply_stream(&mut model, &fills, &transfers)
    );
    assert_eq!(hooks.fences, (0..80).collect::<Vec<_>>());
    model.check(&rig);

    // Up to the end of the buffer, the trailing poison runs and faults at its offset.
    let completion = rig.execute(&command(AP, base, size, 16, size), &mut ());
    assert_eq!(
        completion.fault(),
        Some((size - 16, Fault::UnknownOpcode(0x55)))
    );
    assert_eq!(completion.packets_completed, 3 * 80);
    // A buffer running into an unmapped page is refused before any packet.
    let to_next_page = (pages * PAGE - 0x7c8) as u32 + 1;
    let completion = rig.execute(&command(AP, base, to_next_page, 16, size - 16), &mut ());
    assert_eq!(
        completion.fault(),
        Some((
            16,
            Fault::UnmappedAperture {
                segment: AP,
                page: 300 + pages
            }
        ))
    );
    assert_eq!(completion.packets_completed, 0);
}

#[test]
fn a_dma_buffer_in_vram_executes_and_only_its_window_runs() {
    let mut rig = Rig::new("dma-vram");
    let mut model = Model::new(&rig, 16);
    let (bytes, fills, transfers) = stream(9, 40);
    let base = 0x38_0004;
    rig.vram_write(base, &bytes);
    model.vram[base as usize..base as usize + bytes.len()].copy_from_slice(&bytes);
    let size = bytes.len() as u32;
    let completion = rig.execute(&command(1, base, size, 16, size - 16), &mut ());
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.packets_completed, 3 * 40);
    assert_eq!(
        completion.bytes_transferred,
        apply_stream(&mut model, &fills, &transfers)
    );
    model.check(&rig);
    let completion = rig.execute(&command(1, base, size, 0, size), &mut ());
    assert_eq!(completion.fault(), Some((0, Fault::UnknownOpcode(0x55))));
    let completion = rig.execute(&command(1, VRAM_SIZE - 8, 16, 0, 16), &mut ());
    assert_eq!(status(&completion), Some(SubmitStatus::BadDmaBuffer));
}

// ---------------------------------------------------------------------------------------------
// Interruption and packets rewritten while they execute.

#[test]
fn a_long_transfer_is_interrupted_between_chunks() {
    const SIZE: u64 = 16 << 20;
    let mut rig = Rig::build(
        "preempt",
        2 * SIZE,
        SegmentLayout::default_for_vram(2 * SIZE),
    );
    let source = pattern(SIZE as usize, 5);
    rig.vram_write(0, &source);
    let packet = b(transfer(SIZE, vr(0), vr(SIZE)));
    let zeros = vec![0u8; SIZE as usize];

    // Uninterrupted: the engine asks at least once per 1 MiB chunk.
    let mut hooks = Hooks::default();
    let completion = rig.submit_with(&packet, &mut hooks);
    assert_eq!(completion.stop, None);
    assert_eq!(completion.bytes_transferred, SIZE);
    assert!(
        hooks.calls.get() >= (SIZE / CHUNK) as u32,
        "{} checks",
        hooks.calls.get()
    );
    assert!(rig.vram_read(SIZE, SIZE as usize) == source);
    let mut hooks = Hooks::default();
    rig.submit_with(&b(fill(0, SIZE, vr(SIZE))), &mut hooks);
    assert!(
        hooks.calls.get() >= (SIZE / CHUNK) as u32,
        "FILL: {} checks",
        hooks.calls.get()
    );

    for (from_call, fault) in [
        (1, Interruption::Preempted),
        (4, Interruption::Reset),
        (7, Interruption::Preempted),
    ] {
        rig.vram_write(SIZE, &zeros);
        let mut hooks = Hooks {
            stop: Some((from_call, fault)),
            ..Default::default()
        };
        let completion = rig.submit_with(&packet, &mut hooks);
        assert_eq!(completion.stop, Some((0, Stop::from(fault))));
        assert!(completion.fault().is_none());
        assert_eq!(
            Stop::from(fault).status(),
            if fault == Interruption::Reset {
                SubmitStatus::Reset
            } else {
                SubmitStatus::Preempted
            }
        );
        assert_eq!(
            (completion.packets_completed, completion.bytes_transferred),
            (0, 0)
        );
        // What was copied is a whole number of chunks from the start; the rest is untouched.
        let copied = rig.vram_read(SIZE, SIZE as usize);
        let chunks: Vec<bool> = (0..(SIZE / CHUNK) as usize)
            .map(|c| {
                let range = c * CHUNK as usize..(c + 1) * CHUNK as usize;
                if copied[range.clone()] == source[range.clone()] {
                    true
                } else {
                    assert!(
                        copied[range].iter().all(|&x| x == 0),
                        "chunk {c} partly written"
                    );
                    false
                }
            })
            .collect();
        let done = chunks.iter().take_while(|&&c| c).count();
        assert!(
            chunks[done..].iter().all(|&c| !c),
            "copied chunks are not a prefix"
        );
        if from_call == 1 {
            assert_eq!(done, 0, "stopped before the packet");
        } else {
            assert!(0 < done && done < 16, "stopped part way: {done} chunks");
        }
    }

    // Between packets: FENCEs never ask mid-packet.
    let mut hooks = Hooks {
        stop: Some((3, Interruption::Preempted)),
        ..Default::default()
    };
    let completion = rig.submit_with(
        &[b(fence(1)), b(fence(2)), b(fence(3))].concat(),
        &mut hooks,
    );
    assert_eq!(
        completion.stop,
        Some((32, Stop::Interrupted(Interruption::Preempted)))
    );
    assert_eq!(completion.packets_completed, 2);
    assert_eq!(hooks.fences, [1, 2]);
}

#[test]
fn a_packet_rewritten_while_it_executes_runs_as_first_read() {
    for variant in ["transfer elsewhere", "fill opcode", "unknown opcode"] {
        let mut rig = Rig::new("rewrite");
        let mut model = Model::new(&rig, 16);
        let length = (2 << 20) + 77;
        let count = 514u32;
        let original: Vec<u64> = (0..u64::from(count))
            .map(|i| df((i * 7919) % 512))
            .collect();
        let other: Vec<u64> = (0..u64::from(count))
            .map(|i| df(512 + (i * 13) % 512))
            .collect();
        let list = LISTS;
        rig.ram_write(list, original.as_bytes());
        let packet = transfer(length, vr(0x1003), frames(list, count, 0x10));
        let rewritten = match variant {
            "transfer elsewhere" => b(transfer(0x8_0000, vr(0x10), vr(0x30_0000))),
            "fill opcode" => b(WddmGpuPacketTransfer {
                header: hdr::<WddmGpuPacketTransfer>(WDDM_GPU_OP_FILL),
                ..packet
            }),
            _ => {
                let mut p = b(packet);
                p[0] = 0x66;
                p
            }
        };
        let mut hooks = Rewriter {
            mem: rig.mem.clone(),
            calls: Cell::new(0),
            writes: vec![(DMA, rewritten), (list, other.as_bytes().to_vec())],
        };
        let completion = rig.submit_with(&b(packet), &mut hooks);
        assert_eq!(completion.stop, None, "{variant}");
        assert_eq!(
            (completion.packets_completed, completion.bytes_transferred),
            (1, length),
            "{variant}"
        );
        assert!(
            hooks.calls.get() >= 3,
            "{variant}: the rewrite happened mid-packet"
        );
        model.copy(
            length,
            |_, i| Loc::Vram(0x1003 + i),
            |_, i| {
                let at = 0x10 + i;
                Loc::Ram(original[(at / PAGE) as usize] * PAGE + at % PAGE)
            },
        );
        // The frames of the rewritten list and VRAM at 0x30_0000 hold what they held before.
        model.check(&rig);
    }
}

// ---------------------------------------------------------------------------------------------
// A property test: random streams of aperture packets against the byte model.

/// Aperture pages the property test uses; the setup maps all but the last four.
const WINDOW: u64 = 48;

#[derive(Clone, Debug)]
enum Op {
    Map {
        first: u64,
        pages: Vec<u16>,
        lead: u32,
    },
    Map2Contiguous {
        first: u64,
        base: u16,
        count: u64,
        offset: u32,
    },
    Map2Pages {
        first: u64,
        pages: Vec<u16>,
        lead: u32,
    },
    Unmap {
        first: u64,
        count: u64,
        dummy: u16,
    },
    ToAperture {
        vram: u64,
        aperture: u64,
        length: u64,
    },
    FromAperture {
        aperture: u64,
        vram: u64,
        length: u64,
    },
    Fill {
        vram: u64,
        length: u64,
        pattern: u32,
    },
    Broken(u8),
}

const BROKEN_KINDS: u8 = 14;

fn op_strategy() -> impl Strategy<Value = Op> {
    let pages = || prop::collection::vec(0u16..1024, 1..=8);
    let span = |max: u64| {
        (0u64..=max, 0u64..WINDOW * PAGE)
            .prop_map(move |(length, at)| (length, at.min(WINDOW * PAGE - length)))
    };
    prop_oneof![
        3 => (0u64..WINDOW, pages(), 0u32..3).prop_map(|(first, pages, lead)| Op::Map { first: first.min(WINDOW - pages.len() as u64), pages, lead }),
        1 => (0u64..WINDOW - 8, 0u16..1000, 1u64..=8, 0u32..3).prop_map(|(first, base, count, offset)| Op::Map2Contiguous { first, base, count, offset }),
        1 => (0u64..WINDOW, pages(), 0u32..3).prop_map(|(first, pages, lead)| Op::Map2Pages { first: first.min(WINDOW - pages.len() as u64), pages, lead }),
        2 => (0u64..WINDOW - 6, 1u64..=6, 0u16..1024).prop_map(|(first, count, dummy)| Op::Unmap { first, count, dummy }),
        4 => (0u64..VRAM_SIZE - 5 * PAGE, span(5 * PAGE)).prop_map(|(vram, (length, aperture))| Op::ToAperture { vram, aperture, length }),
        4 => (0u64..VRAM_SIZE - 5 * PAGE, span(5 * PAGE)).prop_map(|(vram, (length, aperture))| Op::FromAperture { aperture, vram, length }),
        2 => (0u64..VRAM_SIZE - 100_000, 0u64..100_000, any::<u32>()).prop_map(|(vram, length, pattern)| Op::Fill { vram, length, pattern }),
        2 => (0..BROKEN_KINDS).prop_map(Op::Broken),
    ]
}

/// A deliberately broken packet and the status it must fault with.
fn broken(kind: u8, rig: &Rig, slot: u64) -> (Vec<u8>, SubmitStatus) {
    use SubmitStatus as S;
    let mut listed = dfs(&[1, 2, 3, 4, 5, 6]);
    let valid = rig.list(slot, &listed);
    match kind {
        0 | 1 => {
            listed[4] = if kind == 0 {
                RAM_SIZE / PAGE + 1
            } else {
                VRAM_GPA / PAGE
            };
            let list = rig.list(slot, &listed);
            (
                b(map(0, 6, list, 6, 0)),
                if kind == 0 {
                    S::FrameNotInRam
                } else {
                    S::FrameInVram
                },
            )
        }
        2 => (b(map(AP_PAGES - 2, 4, valid, 6, 0)), S::SegmentRange),
        3 => (
            b(WddmGpuPacketMapAperture {
                segment_id: 1,
                ..map(0, 1, valid, 6, 0)
            }),
            S::WrongSegmentKind,
        ),
        4 => (
            b(WddmGpuPacketMapAperture {
                segment_id: 3,
                ..map(0, 1, valid, 6, 0)
            }),
            S::BadSegment,
        ),
        5 => (
            b(WddmGpuPacketMapAperture {
                flags: 4,
                ..map(0, 1, valid, 6, 0)
            }),
            S::ReservedField,
        ),
        6 => (b(map(0, 4, valid, 6, 3)), S::BadFrameList),
        7 => (b(unmap(0, 2, DATA + 8)), S::BadFrameList),
        8 => (b(unmap(0, 2, VRAM_GPA)), S::FrameInVram),
        9 => (b(fill(1, 16, vr(VRAM_SIZE - 8))), S::SegmentRange),
        10 => (b(fill(1, 16, frames(valid, 6, 0))), S::WrongSegmentKind),
        11 => (poison(), S::UnknownOpcode),
        12 => (
            b(WddmGpuPacketFence {
                reserved: 1,
                ..fence(1)
            }),
            S::ReservedField,
        ),
        _ => (b(map2_contiguous(0, 4, df(1000), 6, 3)), S::BadFrameList),
    }
}

/// The packet of `op` and, applied to the model if it succeeds, its expected outcome.
fn step(op: &Op, rig: &Rig, slot: u64, model: &mut Model) -> (Vec<u8>, Result<u64, SubmitStatus>) {
    let list_with = |pages: &[u16], lead: u32| {
        let mut list: Vec<u64> = (0..lead).map(|i| df(u64::from(i) + 1)).collect();
        list.extend(pages.iter().map(|&p| df(u64::from(p))));
        list.push(df(2));
        (rig.list(slot, &list), list)
    };
    match *op {
        Op::Map {
            first,
            ref pages,
            lead,
        }
        | Op::Map2Pages {
            first,
            ref pages,
            lead,
        } => {
            let (at, list) = list_with(pages, lead);
            let count = pages.len() as u64;
            let packet = match op {
                Op::Map { .. } => b(map(first, count, at, list.len() as u32, lead)),
                _ => b(map2_pages(first, count, at, list.len() as u32, lead)),
            };
            model.map(first, &list[lead as usize..(lead as u64 + count) as usize]);
            (packet, Ok(0))
        }
        Op::Map2Contiguous {
            first,
            base,
            count,
            offset,
        } => {
            let base = df(u64::from(base));
            let frames: Vec<u64> = (0..count).map(|i| base + u64::from(offset) + i).collect();
            model.map(first, &frames);
            (
                b(map2_contiguous(
                    first,
                    count,
                    base,
                    (u64::from(offset) + count) as u32 + 1,
                    offset,
                )),
                Ok(0),
            )
        }
        Op::Unmap {
            first,
            count,
            dummy,
        } => {
            model.map(first, &vec![df(u64::from(dummy)); count as usize]);
            (b(unmap(first, count, df(u64::from(dummy)) * PAGE)), Ok(0))
        }
        Op::ToAperture {
            vram,
            aperture,
            length,
        } => {
            let packet = b(transfer(length, vr(vram), ap(aperture)));
            if !model.mapped(aperture, length) {
                return (packet, Err(SubmitStatus::UnmappedAperture));
            }
            model.vram_to_aperture(vram, aperture, length);
            (packet, Ok(length))
        }
        Op::FromAperture {
            aperture,
            vram,
            length,
        } => {
            let packet = b(transfer(length, ap(aperture), vr(vram)));
            if !model.mapped(aperture, length) {
                return (packet, Err(SubmitStatus::UnmappedAperture));
            }
            model.aperture_to_vram(aperture, vram, length);
            (packet, Ok(length))
        }
        Op::Fill {
            vram,
            length,
            pattern,
        } => {
            model.fill(vram, length, pattern);
            (b(fill(pattern, length, vr(vram))), Ok(length))
        }
        Op::Broken(kind) => {
            let (packet, status) = broken(kind, rig, slot);
            (packet, Err(status))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn random_aperture_streams_match_a_byte_model(
        submissions in prop::collection::vec(prop::collection::vec(op_strategy(), 1..6), 1..4)
    ) {
        let mut rig = Rig::new("prop");
        let mut model = Model::new(&rig, WINDOW);
        let setup: Vec<u64> = (0..WINDOW - 4).map(|i| df((i * 7919) % 1024)).collect();
        let list = rig.list(0, &setup);
        rig.ok(&b(map(0, WINDOW - 4, list, setup.len() as u32, 0)));
        model.map(0, &setup);
        for ops in &submissions {
            let mut packets = Vec::new();
            let mut expected = None;
            let (mut completed, mut bytes) = (0u32, 0u64);
            for (slot, op) in ops.iter().enumerate() {
                if expected.is_some() {
                    // Never executes: any packet will do.
                    packets.extend(poison());
                    continue;
                }
                let (packet, outcome) = step(op, &rig, slot as u64 + 1, &mut model);
                match outcome {
                    Ok(moved) => {
                        completed += 1;
                        bytes += moved;
                    }
                    Err(status) => expected = Some((packets.len() as u32, status)),
                }
                packets.extend(packet);
            }
            let completion = rig.submit(&packets);
            prop_assert_eq!(completion.stop.map(|(at, stop)| (at, stop.status())), expected, "{:?}", ops);
            prop_assert_eq!(completion.packets_completed, completed);
            prop_assert_eq!(completion.bytes_transferred, bytes);
            if let Err(difference) = model.diff(&rig) {
                return Err(TestCaseError::fail(format!("{difference} after {ops:?}")));
            }
        }
        prop_assert_eq!(rig.entries(AP_PAGES - 2..AP_PAGES), [None, None]);
    }
}
