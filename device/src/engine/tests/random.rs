//! Property tests: random TRANSFERs between VRAM and frames, and random streams of aperture
//! packets (broken ones included), each against a byte model.

use std::collections::HashSet;

use proptest::prelude::*;
use wddm_gpu_abi::build::{fence, fill, map_aperture, transfer, unmap_aperture};
use wddm_gpu_abi::packet::WddmGpuPacketFence;
use wddm_gpu_abi::submit::SubmitStatus;

use super::dma_buffer::poison;
use super::model::Model;
use crate::testkit::bytes::pattern;
use crate::testkit::engine_rig::{
    data_frame, data_frames, Rig, APERTURE_PAGES, DATA, DATA_SIZE, PAGE, RAM_SIZE, VRAM_GPA,
    VRAM_SIZE,
};
use crate::testkit::packets::{
    frames, in_aperture, in_vram, map2_contiguous, map2_pages, packet_bytes, APERTURE_SEGMENT,
};

// ---------------------------------------------------------------------------------------------
// TRANSFERs between VRAM and scattered frames.

/// One end of a random TRANSFER.
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
        let mut rig = Rig::new("prop-transfer");
        let mut vram_model = pattern(usize::try_from(VRAM_SIZE).unwrap(), 1);
        let mut ram_model = pattern(usize::try_from(DATA_SIZE).unwrap(), 2);
        rig.vram_write(0, &vram_model);
        rig.ram_write(DATA, &ram_model);
        for (slot, (src, dst, length)) in steps.into_iter().enumerate() {
            let endpoint = |end: &End, list_slot: u64| match end {
                End::Vram(offset) => in_vram(*offset),
                End::Frames { pages, byte_offset } => {
                    let list: Vec<u64> = pages.iter().map(|p| data_frame(u64::from(*p))).collect();
                    frames(rig.list(list_slot, &list), u32::try_from(list.len()).unwrap(), *byte_offset)
                }
            };
            let packet = packet_bytes(transfer(length, endpoint(&src, 0), endpoint(&dst, 1)));
            let completion = rig.submit(&packet);
            prop_assert_eq!(completion.stop, None, "step {}", slot);
            // Model: byte i of an endpoint lives at this index of its model array.
            let place = |end: &End, i: u64| -> (bool, usize) {
                match end {
                    End::Vram(offset) => (true, usize::try_from(offset + i).unwrap()),
                    End::Frames { pages, byte_offset } => {
                        let at = u64::from(*byte_offset) + i;
                        let page = u64::from(pages[(at / PAGE) as usize]);
                        (false, usize::try_from(page * PAGE + at % PAGE).unwrap())
                    }
                }
            };
            // Read the whole source first: the device reads before it writes only per run, but
            // a transfer whose source and destination overlap is undefined, so skip those.
            let source: Vec<(bool, usize)> = (0..length).map(|i| place(&src, i)).collect();
            let target: Vec<(bool, usize)> = (0..length).map(|i| place(&dst, i)).collect();
            let targets: HashSet<&(bool, usize)> = target.iter().collect();
            let overlaps = source.iter().any(|s| targets.contains(s));
            if overlaps {
                prop_assume!(false);
            }
            let bytes: Vec<u8> = source.iter().map(|&(v, i)| if v { vram_model[i] } else { ram_model[i] }).collect();
            for (&(v, i), byte) in target.iter().zip(bytes) {
                if v { vram_model[i] = byte } else { ram_model[i] = byte }
            }
        }
        prop_assert!(rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap()) == vram_model, "VRAM differs from the model");
        prop_assert!(rig.ram_read(DATA, usize::try_from(DATA_SIZE).unwrap()) == ram_model, "RAM differs from the model");
    }
}

// ---------------------------------------------------------------------------------------------
// Streams of aperture packets.

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
    let mut listed = data_frames(&[1, 2, 3, 4, 5, 6]);
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
                packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 6, list, 6, 0)),
                if kind == 0 {
                    S::FrameNotInRam
                } else {
                    S::FrameInVram
                },
            )
        }
        2 => (
            packet_bytes(map_aperture(
                APERTURE_SEGMENT,
                0,
                APERTURE_PAGES - 2,
                4,
                valid,
                6,
                0,
            )),
            S::SegmentRange,
        ),
        3 => (
            packet_bytes(map_aperture(1, 0, 0, 1, valid, 6, 0)),
            S::WrongSegmentKind,
        ),
        4 => (
            packet_bytes(map_aperture(3, 0, 0, 1, valid, 6, 0)),
            S::BadSegment,
        ),
        5 => (
            packet_bytes(map_aperture(APERTURE_SEGMENT, 4, 0, 1, valid, 6, 0)),
            S::ReservedField,
        ),
        6 => (
            packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, 4, valid, 6, 3)),
            S::BadFrameList,
        ),
        7 => (
            packet_bytes(unmap_aperture(APERTURE_SEGMENT, 0, 2, DATA + 8)),
            S::BadFrameList,
        ),
        8 => (
            packet_bytes(unmap_aperture(APERTURE_SEGMENT, 0, 2, VRAM_GPA)),
            S::FrameInVram,
        ),
        9 => (
            packet_bytes(fill(1, 16, in_vram(VRAM_SIZE - 8))),
            S::SegmentRange,
        ),
        10 => (
            packet_bytes(fill(1, 16, frames(valid, 6, 0))),
            S::WrongSegmentKind,
        ),
        11 => (poison(), S::UnknownOpcode),
        12 => (
            packet_bytes(WddmGpuPacketFence {
                reserved: 1,
                ..fence(1)
            }),
            S::ReservedField,
        ),
        _ => (
            packet_bytes(map2_contiguous(0, 4, data_frame(1000), 6, 3)),
            S::BadFrameList,
        ),
    }
}

/// The packet of `op` and, applied to the model if it succeeds, its expected outcome.
fn step(op: &Op, rig: &Rig, slot: u64, model: &mut Model) -> (Vec<u8>, Result<u64, SubmitStatus>) {
    let list_with = |pages: &[u16], lead: u32| {
        let mut list: Vec<u64> = (0..lead).map(|i| data_frame(u64::from(i) + 1)).collect();
        list.extend(pages.iter().map(|&p| data_frame(u64::from(p))));
        list.push(data_frame(2));
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
                Op::Map { .. } => packet_bytes(map_aperture(
                    APERTURE_SEGMENT,
                    0,
                    first,
                    count,
                    at,
                    u32::try_from(list.len()).unwrap(),
                    lead,
                )),
                _ => packet_bytes(map2_pages(
                    first,
                    count,
                    at,
                    u32::try_from(list.len()).unwrap(),
                    lead,
                )),
            };
            model.map(
                first,
                &list[lead as usize..usize::try_from(u64::from(lead) + count).unwrap()],
            );
            (packet, Ok(0))
        }
        Op::Map2Contiguous {
            first,
            base,
            count,
            offset,
        } => {
            let base = data_frame(u64::from(base));
            let frames: Vec<u64> = (0..count).map(|i| base + u64::from(offset) + i).collect();
            model.map(first, &frames);
            (
                packet_bytes(map2_contiguous(
                    first,
                    count,
                    base,
                    u32::try_from(u64::from(offset) + count).unwrap() + 1,
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
            model.map(
                first,
                &vec![data_frame(u64::from(dummy)); usize::try_from(count).unwrap()],
            );
            (
                packet_bytes(unmap_aperture(
                    APERTURE_SEGMENT,
                    first,
                    count,
                    data_frame(u64::from(dummy)) * PAGE,
                )),
                Ok(0),
            )
        }
        Op::ToAperture {
            vram,
            aperture,
            length,
        }
        | Op::FromAperture {
            aperture,
            vram,
            length,
        } => {
            let into_aperture = matches!(op, Op::ToAperture { .. });
            let packet = if into_aperture {
                packet_bytes(transfer(length, in_vram(vram), in_aperture(aperture)))
            } else {
                packet_bytes(transfer(length, in_aperture(aperture), in_vram(vram)))
            };
            if !model.mapped(aperture, length) {
                return (packet, Err(SubmitStatus::UnmappedAperture));
            }
            if into_aperture {
                model.vram_to_aperture(vram, aperture, length);
            } else {
                model.aperture_to_vram(aperture, vram, length);
            }
            (packet, Ok(length))
        }
        Op::Fill {
            vram,
            length,
            pattern,
        } => {
            model.fill(vram, length, pattern);
            (
                packet_bytes(fill(pattern, length, in_vram(vram))),
                Ok(length),
            )
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
        let mut rig = Rig::new("prop-aperture");
        let mut model = Model::new(&rig, WINDOW);
        let setup: Vec<u64> = (0..WINDOW - 4).map(|i| data_frame((i * 7919) % 1024)).collect();
        let list = rig.list(0, &setup);
        rig.ok(&packet_bytes(map_aperture(APERTURE_SEGMENT, 0, 0, WINDOW - 4, list, u32::try_from(setup.len()).unwrap(), 0)));
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
                    Err(status) => expected = Some((u32::try_from(packets.len()).unwrap(), status)),
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
        prop_assert_eq!(rig.entries(APERTURE_PAGES - 2..APERTURE_PAGES), [None, None]);
    }
}
