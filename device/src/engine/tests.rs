//! Engine tests on plain structs: guest RAM and the VRAM window in one memory table, packets
//! written into a DMA buffer in RAM, results checked byte for byte.

use std::fs::OpenOptions;
use std::path::PathBuf;

use proptest::prelude::*;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};
use wddm_gpu_abi::ctrl::{WddmGpuCtrlHdr, WDDM_GPU_CMD_SUBMIT};
use wddm_gpu_abi::packet::WDDM_GPU_MAX_FRAME_LIST_ENTRIES;
use wddm_gpu_abi::submit::WDDM_GPU_SUBMIT_FLAG_PAGING;

use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;
use zerocopy::IntoBytes;

use super::*;
use crate::layout::SegmentLayout;
use crate::memory::vram::{BarMode, Vram};

const RAM_SIZE: u64 = 16 << 20;
const VRAM_SIZE: u64 = 4 << 20;
const VRAM_GPA: u64 = 0x1000_0000;
const DMA: u64 = 0x10_0000;
const LISTS: u64 = 0x20_0000;
/// Data frames live in [DATA, DATA + 4 MiB).
const DATA: u64 = 0x40_0000;
const PAGE: u64 = WDDM_GPU_PAGE_SIZE;

struct Rig {
    mem: GuestMemoryMmap<()>,
    vram: Vram,
    layout: SegmentLayout,
    engine: Engine,
    path: PathBuf,
    fence: u32,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Rig {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("wddm-engine-{}-{name}", std::process::id()));
        let vram = Vram::create(&path, VRAM_SIZE, 0, BarMode::Ivshmem).unwrap();
        let ram =
            GuestRegionMmap::<()>::from_range(GuestAddress(0), RAM_SIZE as usize, None).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let window = GuestRegionMmap::new(
            MmapRegion::from_file(FileOffset::new(file, 0), VRAM_SIZE as usize).unwrap(),
            GuestAddress(VRAM_GPA),
        )
        .unwrap();
        let mem = GuestMemoryMmap::from_regions(vec![ram, window]).unwrap();
        vram.observe_memory_table(&mem);
        let layout = SegmentLayout::default_for_vram(VRAM_SIZE);
        Self {
            mem,
            vram,
            engine: Engine::new(&layout),
            layout,
            path,
            fence: 0,
        }
    }

    fn submit_at(&mut self, packets: &[u8], start: u32) -> Completion {
        self.mem.write_slice(packets, GuestAddress(DMA)).unwrap();
        self.fence += 1;
        let cmd = WddmGpuCmdSubmit {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
            dma_buffer_address: DMA,
            flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
            dma_buffer_size: packets.len() as u32,
            start_offset: start,
            end_offset: packets.len() as u32,
            submission_fence_id: self.fence,
            ..Default::default()
        };
        self.execute(&cmd)
    }

    fn submit(&mut self, packets: &[u8]) -> Completion {
        self.submit_at(packets, 0)
    }

    fn execute(&mut self, cmd: &WddmGpuCmdSubmit) -> Completion {
        let memory = DeviceMemory {
            ram: GuestRam::new(&self.mem, self.vram.guest_window()),
            vram: &self.vram,
            layout: &self.layout,
        };
        self.engine.execute(cmd, &memory, &mut ())
    }

    /// Writes a frame list at `LISTS + slot * 1 MiB` and returns its address.
    fn frame_list(&self, slot: u64, frames: &[u64]) -> u64 {
        let address = LISTS + slot * (1 << 20);
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_le_bytes()).collect();
        self.mem.write_slice(&bytes, GuestAddress(address)).unwrap();
        address
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

    fn ram_read(&self, address: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mem
            .read_slice(&mut out, GuestAddress(address))
            .unwrap();
        out
    }
}

fn segment(id: u32, address: u64) -> WddmGpuEndpoint {
    WddmGpuEndpoint {
        segment_id: id,
        address,
        ..Default::default()
    }
}

fn frames(list: u64, count: u32, byte_offset: u32) -> WddmGpuEndpoint {
    WddmGpuEndpoint {
        segment_id: 0,
        frame_count: count,
        address: list,
        byte_offset,
        reserved: 0,
    }
}

fn transfer(length: u64, source: WddmGpuEndpoint, destination: WddmGpuEndpoint) -> Vec<u8> {
    WddmGpuPacketTransfer {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_TRANSFER,
            flags: 0,
            size: std::mem::size_of::<WddmGpuPacketTransfer>() as u32,
        },
        length,
        source,
        destination,
    }
    .as_bytes()
    .to_vec()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Data frames in a scrambled order: frame i of the list is DATA page (i * 7919) % 1024.
fn scattered(count: usize) -> Vec<u64> {
    (0..count as u64)
        .map(|i| DATA / PAGE + (i * 7919) % 1024)
        .collect()
}

fn fault_of(completion: &Completion) -> Option<SubmitStatus> {
    completion.stop.map(|(_, stop)| stop.status())
}

#[test]
fn vram_to_scattered_frames_and_back_moves_every_byte() {
    let mut rig = Rig::new("roundtrip");
    let length = (1 << 20) + 123;
    let byte_offset = 0x456;
    let data = pattern(length, 9);
    rig.vram_write(0x1000, &data);
    let list = scattered(258);
    let list_address = rig.frame_list(0, &list);

    let out = transfer(
        length as u64,
        segment(1, 0x1000),
        frames(list_address, 258, byte_offset),
    );
    let back = transfer(
        length as u64,
        frames(list_address, 258, byte_offset),
        segment(1, 0x20_0000),
    );
    let completion = rig.submit(&[out, back].concat());
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 2);
    assert_eq!(completion.bytes_transferred, 2 * length as u64);
    assert_eq!(rig.vram_read(0x20_0000, length), data);

    // Each guest byte sits where the frame list says.
    for (i, byte) in data.iter().enumerate().step_by(997) {
        let at = byte_offset as u64 + i as u64;
        let address = list[(at / PAGE) as usize] * PAGE + at % PAGE;
        assert_eq!(rig.ram_read(address, 1)[0], *byte, "byte {i}");
    }
}

#[test]
fn contiguous_frames_coalesce_and_frames_to_frames_work() {
    let mut rig = Rig::new("contig");
    let source: Vec<u64> = (0..64).map(|i| DATA / PAGE + i).collect();
    let destination: Vec<u64> = (0..64).map(|i| DATA / PAGE + 512 + i).collect();
    let data = pattern(64 * PAGE as usize, 3);
    rig.mem.write_slice(&data, GuestAddress(DATA)).unwrap();
    let a = rig.frame_list(0, &source);
    let b = rig.frame_list(1, &destination);
    let completion = rig.submit(&transfer(64 * PAGE, frames(a, 64, 0), frames(b, 64, 0)));
    assert_eq!(completion.stop, None);
    assert_eq!(rig.ram_read(DATA + 512 * PAGE, data.len()), data);
}

#[test]
fn overlapping_vram_moves_have_memmove_semantics() {
    // Small shifts and moves longer than a chunk (1 MiB), both directions.
    for (from, to, len) in [
        (0x1000u64, 0x1800u64, 200_000usize),
        (0x1800, 0x1000, 200_000),
        (0x3, 0x1004, (1 << 20) + 0x8005),
        (0x1004, 0x3, (1 << 20) + 0x8005),
        (0x10, 0x8_0010, (3 << 20) + 5),
    ] {
        let mut rig = Rig::new("overlap");
        let data = pattern(len, 5);
        rig.vram_write(from, &data);
        let completion = rig.submit(&transfer(
            data.len() as u64,
            segment(1, from),
            segment(1, to),
        ));
        assert_eq!(completion.stop, None);
        assert!(
            rig.vram_read(to, data.len()) == data,
            "{from:#x} -> {to:#x} ({len:#x} bytes)"
        );
    }
}

#[test]
fn zero_length_transfer_completes_without_touching_memory() {
    let mut rig = Rig::new("zero");
    let completion = rig.submit(&transfer(0, segment(1, 0), frames(LISTS, 0, 0)));
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 1);
}

/// Runs one bad packet after a good one and checks: the fault status, the packet offset, that
/// the guard bytes around the VRAM target are intact, and that the next submission works.
fn assert_fault(name: &str, build: impl Fn(&Rig) -> Vec<u8>, expected: SubmitStatus) {
    let mut rig = Rig::new(name);
    let guard = pattern(3 * PAGE as usize, 77);
    rig.vram_write(0x10_0000 - PAGE, &guard);
    let good = transfer(16, segment(1, 0), segment(1, 0x8000));
    let bad = build(&rig);
    let completion = rig.submit(&[good.clone(), bad].concat());
    assert_eq!(
        fault_of(&completion),
        Some(expected),
        "{name}: {completion:?}"
    );
    assert_eq!(completion.packets_completed, 1, "{name}");
    assert_eq!(completion.fault().unwrap().0, good.len() as u32, "{name}");
    assert_eq!(
        rig.vram_read(0x10_0000 - PAGE, guard.len()),
        guard,
        "{name}: VRAM changed"
    );
    let after = rig.submit(&good);
    assert_eq!(after.stop, None, "{name}: device not ready after the fault");
}

#[test]
fn every_bad_packet_faults_with_its_status_and_changes_nothing() {
    let target = segment(1, 0x10_0000);
    let list_in_ram = |rig: &Rig| rig.frame_list(0, &scattered(4));
    assert_fault(
        "unknown_opcode",
        |_| {
            let mut p = transfer(16, segment(1, 0), target);
            p[0] = 0x77;
            p
        },
        SubmitStatus::UnknownOpcode,
    );
    for (name, size) in [
        ("size0", 0u32),
        ("size_unaligned", 68),
        ("size_past_end", 72),
        ("size_huge", 8192),
    ] {
        assert_fault(
            name,
            move |_| {
                let mut p = transfer(16, segment(1, 0), target);
                p[4..8].copy_from_slice(&size.to_le_bytes());
                p
            },
            SubmitStatus::BadPacketHeader,
        );
    }
    assert_fault(
        "bad_segment",
        |_| transfer(16, segment(9, 0), target),
        SubmitStatus::BadSegment,
    );
    assert_fault(
        "segment_zero_is_frames",
        |_| transfer(16, segment(1, 0), frames(u64::MAX - 7, 1, 0)),
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "segment_range",
        |_| transfer(2 * PAGE, segment(1, VRAM_SIZE - PAGE), target),
        SubmitStatus::SegmentRange,
    );
    assert_fault(
        "frame_list_too_long",
        |rig| {
            transfer(
                16,
                frames(list_in_ram(rig), WDDM_GPU_MAX_FRAME_LIST_ENTRIES + 1, 0),
                target,
            )
        },
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "frame_list_too_short",
        |rig| transfer(4 * PAGE, frames(list_in_ram(rig), 4, 1), target),
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "frame_list_outside_ram",
        |_| transfer(16, frames(RAM_SIZE - 4, 1, 0), target),
        SubmitStatus::BadFrameList,
    );
    assert_fault(
        "frame_beyond_ram",
        |rig| {
            transfer(
                PAGE,
                frames(rig.frame_list(0, &[0x7_0000_0000]), 1, 0),
                target,
            )
        },
        SubmitStatus::FrameNotInRam,
    );
    assert_fault(
        "frame_pfn_overflow",
        |rig| transfer(PAGE, frames(rig.frame_list(0, &[u64::MAX]), 1, 0), target),
        SubmitStatus::FrameNotInRam,
    );
    assert_fault(
        "frame_in_vram",
        |rig| {
            transfer(
                PAGE,
                frames(rig.frame_list(0, &[VRAM_GPA / PAGE + 3]), 1, 0),
                target,
            )
        },
        SubmitStatus::FrameInVram,
    );
    assert_fault(
        "frame_in_vram_late_in_list",
        |rig| {
            let mut list = scattered(8);
            list[6] = VRAM_GPA / PAGE;
            transfer(8 * PAGE, frames(rig.frame_list(0, &list), 8, 0), target)
        },
        SubmitStatus::FrameInVram,
    );
    assert_fault(
        "length_overflow",
        |rig| transfer(u64::MAX, frames(list_in_ram(rig), 4, 16), target),
        SubmitStatus::LengthOverflow,
    );
    assert_fault(
        "segment_address_overflow",
        |_| transfer(u64::MAX - 8, segment(1, 0x10), target),
        SubmitStatus::LengthOverflow,
    );
    assert_fault(
        "reserved_field",
        |_| {
            let mut source = segment(1, 0);
            source.reserved = 1;
            transfer(16, source, target)
        },
        SubmitStatus::ReservedField,
    );
    assert_fault(
        "unmapped_aperture_endpoint",
        |_| transfer(16, segment(2, 0), target),
        SubmitStatus::UnmappedAperture,
    );
}

#[test]
fn bad_commands_fault_before_any_packet() {
    let mut rig = Rig::new("commands");
    let good = transfer(16, segment(1, 0), segment(1, 0x8000));
    rig.mem.write_slice(&good, GuestAddress(DMA)).unwrap();
    let base = WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: DMA,
        dma_buffer_size: good.len() as u32,
        end_offset: good.len() as u32,
        submission_fence_id: 42,
        ..Default::default()
    };
    let cases: [(&str, WddmGpuCmdSubmit, SubmitStatus); 8] = [
        (
            "end_past_size",
            WddmGpuCmdSubmit {
                end_offset: 65,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "start_after_end",
            WddmGpuCmdSubmit {
                start_offset: 32,
                end_offset: 16,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "unknown_flag",
            WddmGpuCmdSubmit {
                flags: 0x80,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "node",
            WddmGpuCmdSubmit {
                node_ordinal: 1,
                ..base
            },
            SubmitStatus::BadCommand,
        ),
        (
            "beyond_ram",
            WddmGpuCmdSubmit {
                dma_buffer_address: 0x7_0000_0000,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "in_vram",
            WddmGpuCmdSubmit {
                dma_buffer_address: VRAM_GPA,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "address_overflow",
            WddmGpuCmdSubmit {
                dma_buffer_address: u64::MAX - 8,
                ..base
            },
            SubmitStatus::BadDmaBuffer,
        ),
        (
            "in_unmapped_aperture",
            WddmGpuCmdSubmit {
                dma_buffer_segment_id: 2,
                ..base
            },
            SubmitStatus::UnmappedAperture,
        ),
    ];
    for (name, cmd, status) in cases {
        let completion = rig.execute(&cmd);
        assert_eq!(fault_of(&completion), Some(status), "{name}");
        assert_eq!(completion.fence_id, 42, "{name}");
        assert_eq!(completion.packets_completed, 0, "{name}");
    }
    assert_eq!(rig.execute(&base).stop, None);
}

#[test]
fn only_the_submitted_window_of_the_buffer_executes() {
    let mut rig = Rig::new("window");
    let mut skipped = transfer(16, segment(1, 0), segment(1, 0x8000));
    skipped[0] = 0x77; // would fault if executed
    let good = transfer(16, segment(1, 0), segment(1, 0x9000));
    let completion = rig.submit_at(&[skipped.clone(), good].concat(), skipped.len() as u32);
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 1);
}

/// A model of memory: what every byte of VRAM and the data pages must hold after a sequence
/// of transfers, computed with plain slices.
#[derive(Clone, Debug)]
enum End {
    Vram(u64),
    Frames { pages: Vec<u16>, byte_offset: u32 },
}

fn end_strategy() -> impl Strategy<Value = End> {
    prop_oneof![
        (0u64..VRAM_SIZE - 64 * 1024).prop_map(End::Vram),
        (prop::collection::vec(0u16..1024, 17), 0u32..4096)
            .prop_map(|(pages, byte_offset)| End::Frames { pages, byte_offset }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_transfers_match_a_byte_model(
        steps in prop::collection::vec((end_strategy(), end_strategy(), 0u64..60_000), 1..6)
    ) {
        let mut rig = Rig::new("prop");
        let mut vram_model = pattern(VRAM_SIZE as usize, 1);
        let mut ram_model = pattern(4 << 20, 2);
        rig.vram_write(0, &vram_model);
        rig.mem.write_slice(&ram_model, GuestAddress(DATA)).unwrap();
        for (slot, (src, dst, length)) in steps.into_iter().enumerate() {
            let endpoint = |end: &End, list_slot: u64| match end {
                End::Vram(offset) => segment(1, *offset),
                End::Frames { pages, byte_offset } => {
                    let list: Vec<u64> = pages.iter().map(|p| DATA / PAGE + u64::from(*p)).collect();
                    frames(rig.frame_list(list_slot, &list), list.len() as u32, *byte_offset)
                }
            };
            let packet = transfer(length, endpoint(&src, 0), endpoint(&dst, 1));
            let completion = rig.submit(&packet);
            prop_assert_eq!(completion.stop, None, "step {}", slot);
            // Model: byte i of an endpoint lives at this index of its model array.
            let place = |end: &End, i: u64| -> (bool, usize) {
                match end {
                    End::Vram(offset) => (true, (offset + i) as usize),
                    End::Frames { pages, byte_offset } => {
                        let at = u64::from(*byte_offset) + i;
                        let page = u64::from(pages[(at / PAGE) as usize]);
                        (false, (page * PAGE + at % PAGE) as usize)
                    }
                }
            };
            // Read the whole source first: the device reads before it writes only per run, but
            // a transfer whose source and destination overlap is undefined, so skip those.
            let source: Vec<(bool, usize)> = (0..length).map(|i| place(&src, i)).collect();
            let target: Vec<(bool, usize)> = (0..length).map(|i| place(&dst, i)).collect();
            let targets: std::collections::HashSet<&(bool, usize)> = target.iter().collect();
            let overlaps = source.iter().any(|s| targets.contains(s));
            if overlaps {
                prop_assume!(false);
            }
            let bytes: Vec<u8> = source.iter().map(|&(v, i)| if v { vram_model[i] } else { ram_model[i] }).collect();
            for (&(v, i), byte) in target.iter().zip(bytes) {
                if v { vram_model[i] = byte } else { ram_model[i] = byte }
            }
        }
        prop_assert!(rig.vram_read(0, VRAM_SIZE as usize) == vram_model, "VRAM differs from the model");
        prop_assert!(rig.ram_read(DATA, 4 << 20) == ram_model, "RAM differs from the model");
    }
}

#[test]
fn device_only_vram_segments_take_transfers_like_bar_segments() {
    use crate::layout::file::parse_layout;
    use crate::layout::rules::validate;
    let spec = parse_layout(
        "[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"4MiB\"\n[[segments]]\nflags = []\nsize = \"2MiB\"\nbase_address = 0x100000000\n",
    )
    .unwrap();
    let layout = validate(&spec, VRAM_SIZE).unwrap();
    let mut rig = Rig::new("device-only");
    let path = rig.path.with_extension("hidden");
    rig.vram = Vram::create(
        &path,
        VRAM_SIZE,
        layout.device_only_vram(VRAM_SIZE),
        BarMode::Ivshmem,
    )
    .unwrap();
    std::fs::remove_file(&path).unwrap();
    rig.layout = layout;
    let data = pattern(300_000, 11);
    let list = rig.frame_list(0, &scattered(80));
    rig.mem.write_slice(&data, GuestAddress(DATA)).unwrap();
    let contiguous = rig.frame_list(1, &(0..80).map(|i| DATA / PAGE + i).collect::<Vec<_>>());
    let into_hidden = transfer(
        data.len() as u64,
        frames(contiguous, 80, 0),
        segment(2, 0x1_0000_0000 + 0x1000),
    );
    let back_out = transfer(
        data.len() as u64,
        segment(2, 0x1_0000_0000 + 0x1000),
        frames(list, 80, 0),
    );
    let completion = rig.submit(&[into_hidden, back_out].concat());
    assert_eq!(completion.stop, None);
    let list_frames = scattered(80);
    for (i, byte) in data.iter().enumerate().step_by(911) {
        let at = i as u64;
        let address = list_frames[(at / PAGE) as usize] * PAGE + at % PAGE;
        assert_eq!(rig.ram_read(address, 1)[0], *byte, "byte {i}");
    }
    // The BAR file was not touched: device-only VRAM is separate storage.
    assert_eq!(rig.vram_read(0x1000, 16), vec![0; 16]);
    let past_end = transfer(
        16,
        segment(2, 0x1_0000_0000 + (2 << 20) - 8),
        frames(list, 80, 0),
    );
    assert_eq!(
        fault_of(&rig.submit(&past_end)),
        Some(SubmitStatus::SegmentRange)
    );
}
