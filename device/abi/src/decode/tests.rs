use zerocopy::IntoBytes;

use super::*;
use crate::build::{self, Adl, DmaBufferBuilder, Endpoint};
use crate::packet::WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE;

/// One packet of every kind, built with [`crate::build`], with the decode each must give.
fn one_of_each() -> Vec<(Vec<u8>, Packet)> {
    let vram = Endpoint::Segment {
        id: 1,
        address: 0x1000,
    };
    let frames = Endpoint::Frames {
        list_address: 0x20_0000,
        frame_count: 3,
        byte_offset: 0x10,
    };
    let transfer = build::transfer(0x2000, frames, vram);
    let fill = build::fill(0xa1b2_c3d4, 0x1003, vram);
    let discard = build::segment_access(
        WDDM_GPU_OP_DISCARD_CONTENT,
        1,
        0x40,
        WDDM_GPU_DISCARD_FLAG_ALLOCATION_IS_IDLE,
    );
    let read = build::segment_access(WDDM_GPU_OP_READ_PHYSICAL, 2, 0x80, 4);
    let write = build::segment_access(WDDM_GPU_OP_WRITE_PHYSICAL, 2, 0x88, 8);
    let map = build::map_aperture(2, 1, 0x10, 3, 0x20_0000, 5, 2);
    let map2 = build::map_aperture2(
        2,
        0,
        7,
        4,
        Adl::Contiguous {
            base_page: 0x4_0000,
            page_count: 9,
        },
        1,
    );
    let unmap = build::unmap_aperture(2, 5, 6, 0x7000);
    let fence = build::fence(0xfeed);
    let table = build::gpuva::TableAt {
        segment: 1,
        address: 0x8000,
    };
    let update = build::gpuva::update_page_table(1, table, 3, 4, 0x30_0000);
    let flush = build::gpuva::flush_tlb(table, Some(0x1000..0x9000));
    let transfer_va = build::gpuva::transfer_virtual(0x3000, 0x1_0000, 0x2_0000);
    let fill_va = build::gpuva::fill_virtual(7, 0x40, 0x3_0000);
    let copy_entries = build::gpuva::copy_page_table_entries(2, 0x50_0000);
    let signal = build::gpuva::signal_monitored_fence(0x4_0008, 9);
    let residency = build::gpuva::notify_residency(Some((1, 0x8000)), 0xabc);
    let context = build::gpuva::update_context_allocation(0x6_0000, 0x2000);
    vec![
        (transfer.as_bytes().to_vec(), Packet::Transfer(transfer)),
        (fill.as_bytes().to_vec(), Packet::Fill(fill)),
        (discard.as_bytes().to_vec(), Packet::DiscardContent(discard)),
        (read.as_bytes().to_vec(), Packet::ReadPhysical(read)),
        (write.as_bytes().to_vec(), Packet::WritePhysical(write)),
        (map.as_bytes().to_vec(), Packet::MapAperture(map)),
        (map2.as_bytes().to_vec(), Packet::MapAperture2(map2)),
        (unmap.as_bytes().to_vec(), Packet::UnmapAperture(unmap)),
        (fence.as_bytes().to_vec(), Packet::Fence(fence)),
        (update.as_bytes().to_vec(), Packet::UpdatePageTable(update)),
        (flush.as_bytes().to_vec(), Packet::FlushTlb(flush)),
        (
            transfer_va.as_bytes().to_vec(),
            Packet::VirtualTransfer(transfer_va),
        ),
        (fill_va.as_bytes().to_vec(), Packet::VirtualFill(fill_va)),
        (
            copy_entries.as_bytes().to_vec(),
            Packet::CopyPageTableEntries(copy_entries),
        ),
        (
            signal.as_bytes().to_vec(),
            Packet::SignalMonitoredFence(signal),
        ),
        (
            residency.as_bytes().to_vec(),
            Packet::NotifyResidency(residency),
        ),
        (
            context.as_bytes().to_vec(),
            Packet::UpdateContextAllocation(context),
        ),
    ]
}

#[test]
fn every_kind_decodes_to_the_struct_it_was_built_from() {
    let packets = one_of_each();
    let kinds: Vec<PacketKind> = packets.iter().map(|(_, packet)| packet.kind()).collect();
    assert_eq!(kinds, PacketKind::ALL);
    for (bytes, expected) in &packets {
        let kind = expected.kind();
        assert_eq!(Packet::decode(bytes), Ok(*expected), "{kind:?}");
        let header = expected.header();
        assert_eq!(header.opcode, kind.opcode(), "{kind:?}");
        assert_eq!(header.size as usize, kind.struct_size(), "{kind:?}");
        assert_eq!(bytes.len(), kind.struct_size(), "{kind:?}");
        // Bytes past the struct (a longer packet of a later ABI revision) are not read.
        let mut longer = bytes.clone();
        longer.extend([0xee; 16]);
        assert_eq!(Packet::decode(&longer), Ok(*expected), "{kind:?}");
    }
}

#[test]
fn a_built_dma_buffer_decodes_packet_by_packet() {
    let packets = one_of_each();
    let mut buffer = DmaBufferBuilder::new();
    let offsets: Vec<u32> = packets
        .iter()
        .map(|(bytes, _)| buffer.push_raw(bytes))
        .collect();
    let mut decoded = Vec::new();
    let mut offset = 0usize;
    while offset < buffer.bytes().len() {
        let rest = &buffer.bytes()[offset..];
        let size = read_header(rest).unwrap().size as usize;
        decoded.push((
            u32::try_from(offset).unwrap(),
            Packet::decode(&rest[..size]).unwrap(),
        ));
        offset += size;
    }
    let expected: Vec<(u32, Packet)> = offsets
        .into_iter()
        .zip(packets.iter().map(|(_, packet)| *packet))
        .collect();
    assert_eq!(decoded, expected);
}

#[test]
fn the_physical_kinds_are_all_but_the_gpummu_packets() {
    let mut physical = PacketKind::PHYSICAL.to_vec();
    physical.extend([
        PacketKind::UpdatePageTable,
        PacketKind::FlushTlb,
        PacketKind::VirtualTransfer,
        PacketKind::VirtualFill,
        PacketKind::CopyPageTableEntries,
        PacketKind::SignalMonitoredFence,
        PacketKind::NotifyResidency,
        PacketKind::UpdateContextAllocation,
    ]);
    assert_eq!(physical, PacketKind::ALL);
}

#[test]
fn kinds_and_opcodes_map_both_ways() {
    for kind in PacketKind::ALL {
        assert_eq!(PacketKind::from_opcode(kind.opcode()), Some(kind));
    }
    let mut opcodes: Vec<u16> = PacketKind::ALL.iter().map(|k| k.opcode()).collect();
    opcodes.sort_unstable();
    assert_eq!(opcodes, (1..=17).collect::<Vec<u16>>());
    for opcode in [0, 18, 0x55, u16::MAX] {
        assert_eq!(PacketKind::from_opcode(opcode), None, "{opcode}");
    }
    // Report names are the kinds' names in snake case: `MapAperture2` is `map_aperture2`.
    for kind in PacketKind::ALL {
        let mut snake = String::new();
        for c in format!("{kind:?}").chars() {
            if c.is_ascii_uppercase() && !snake.is_empty() {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        }
        assert_eq!(kind.name(), snake);
    }
}

#[test]
fn a_truncated_header_is_refused() {
    for length in 0..size_of::<WddmGpuPacketHeader>() {
        let bytes = vec![1u8; length];
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::HeaderTruncated),
            "{length}"
        );
        assert_eq!(read_header(&bytes), Err(DecodeError::HeaderTruncated));
    }
    assert_eq!(DecodeError::HeaderTruncated.reason(), "truncated");
}

#[test]
fn header_flags_are_refused_before_the_opcode_and_the_body() {
    let mut fence = build::fence(1);
    fence.header.flags = 0x8000;
    assert_eq!(
        Packet::decode(fence.as_bytes()),
        Err(DecodeError::ReservedHeaderFlags(0x8000))
    );
    // Even for an unknown opcode and a header alone.
    let header = WddmGpuPacketHeader {
        opcode: 0x55,
        flags: 1,
        size: 8,
    };
    assert_eq!(
        Packet::decode(header.as_bytes()),
        Err(DecodeError::ReservedHeaderFlags(1))
    );
    // Reading the declared body does not look at the flags.
    assert_eq!(
        Packet::read_body(&fence.header, fence.as_bytes()),
        Ok(Packet::Fence(fence))
    );
    assert_eq!(
        DecodeError::ReservedHeaderFlags(1).reason(),
        "packet header flags"
    );
}

#[test]
fn an_unknown_opcode_is_refused_whatever_follows() {
    for opcode in [0, 18, 0x55, u16::MAX] {
        let header = WddmGpuPacketHeader {
            opcode,
            flags: 0,
            size: 64,
        };
        let mut bytes = header.as_bytes().to_vec();
        bytes.resize(64, 0);
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::UnknownOpcode(opcode))
        );
        assert_eq!(
            Packet::decode(header.as_bytes()),
            Err(DecodeError::UnknownOpcode(opcode))
        );
    }
}

#[test]
fn a_body_smaller_than_its_struct_is_refused_with_the_declared_size() {
    let reasons = [
        "smaller than a TRANSFER packet",
        "smaller than a FILL packet",
        "smaller than a segment-access packet",
        "smaller than a segment-access packet",
        "smaller than a segment-access packet",
        "smaller than a MAP_APERTURE packet",
        "smaller than a MAP_APERTURE2 packet",
        "smaller than an UNMAP_APERTURE packet",
        "smaller than a FENCE packet",
    ];
    for ((bytes, packet), reason) in one_of_each().into_iter().zip(reasons) {
        let kind = packet.kind();
        for short in size_of::<WddmGpuPacketHeader>()..kind.struct_size() {
            let mut bytes = bytes[..short].to_vec();
            bytes[4..8].copy_from_slice(&u32::try_from(short).unwrap().to_le_bytes());
            let error = Packet::decode(&bytes).unwrap_err();
            assert_eq!(
                error,
                DecodeError::BodyTooSmall {
                    kind,
                    size: u32::try_from(short).unwrap()
                },
                "{kind:?} in {short} bytes"
            );
            assert_eq!(error.reason(), reason);
        }
    }
}
