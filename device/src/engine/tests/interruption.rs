//! Long work is interrupted between chunks; a packet rewritten while it executes runs as it was
//! first read.

use std::cell::Cell;

use wddm_gpu_abi::build::{fence, fill, transfer};
use wddm_gpu_abi::packet::WDDM_GPU_OP_FILL;
use wddm_gpu_abi::submit::SubmitStatus;
use zerocopy::IntoBytes;

use super::hooks::{Hooks, Rewriter};
use super::model::{Loc, Model};
use crate::engine::{Interruption, Stop, CHUNK};
use crate::layout::SegmentLayout;
use crate::testkit::bytes::pattern;
use crate::testkit::engine_rig::{data_frame, Rig, DMA, LISTS, PAGE};
use crate::testkit::packets::{frames, in_vram, packet_bytes};

#[test]
fn a_long_transfer_is_interrupted_between_chunks() {
    const SIZE: u64 = 16 << 20;
    let mut rig = Rig::build(
        "preempt",
        2 * SIZE,
        SegmentLayout::default_for_vram(2 * SIZE),
    );
    let source = pattern(usize::try_from(SIZE).unwrap(), 5);
    rig.vram_write(0, &source);
    let packet = packet_bytes(transfer(SIZE, in_vram(0), in_vram(SIZE)));
    let zeros = vec![0u8; usize::try_from(SIZE).unwrap()];

    // Uninterrupted: the engine asks at least once per 1 MiB chunk.
    let mut hooks = Hooks::default();
    let completion = rig.submit_with(&packet, &mut hooks);
    assert_eq!(completion.stop, None);
    assert_eq!(completion.bytes_transferred, SIZE);
    assert!(
        hooks.calls.get() >= u32::try_from(SIZE / CHUNK).unwrap(),
        "{} checks",
        hooks.calls.get()
    );
    assert!(rig.vram_read(SIZE, usize::try_from(SIZE).unwrap()) == source);
    let mut hooks = Hooks::default();
    rig.submit_with(&packet_bytes(fill(0, SIZE, in_vram(SIZE))), &mut hooks);
    assert!(
        hooks.calls.get() >= u32::try_from(SIZE / CHUNK).unwrap(),
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
        assert_eq!(completion.packets_completed, 0);
        // What was copied is a whole number of chunks from the start; the rest is untouched.
        let copied = rig.vram_read(SIZE, usize::try_from(SIZE).unwrap());
        let chunks: Vec<bool> = (0..(SIZE / CHUNK) as usize)
            .map(|c| {
                let range =
                    c * usize::try_from(CHUNK).unwrap()..(c + 1) * usize::try_from(CHUNK).unwrap();
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
        // The answer counts the chunks the stopped packet copied.
        assert_eq!(completion.bytes_transferred, done as u64 * CHUNK);
    }

    // Between packets: FENCEs never ask mid-packet.
    let mut hooks = Hooks {
        stop: Some((3, Interruption::Preempted)),
        ..Default::default()
    };
    let completion = rig.submit_with(
        &[
            packet_bytes(fence(1)),
            packet_bytes(fence(2)),
            packet_bytes(fence(3)),
        ]
        .concat(),
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
            .map(|i| data_frame((i * 7919) % 512))
            .collect();
        let other: Vec<u64> = (0..u64::from(count))
            .map(|i| data_frame(512 + (i * 13) % 512))
            .collect();
        let list = LISTS;
        rig.ram_write(list, original.as_bytes());
        let packet = transfer(length, in_vram(0x1003), frames(list, count, 0x10));
        let rewritten = match variant {
            "transfer elsewhere" => {
                packet_bytes(transfer(0x8_0000, in_vram(0x10), in_vram(0x30_0000)))
            }
            "fill opcode" => {
                let mut p = packet;
                p.header.opcode = WDDM_GPU_OP_FILL;
                packet_bytes(p)
            }
            _ => {
                let mut p = packet_bytes(packet);
                p[0] = 0x66;
                p
            }
        };
        let mut hooks = Rewriter {
            mem: rig.mem.clone(),
            calls: Cell::new(0),
            writes: vec![(DMA, rewritten), (list, other.as_bytes().to_vec())],
        };
        let completion = rig.submit_with(&packet_bytes(packet), &mut hooks);
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
