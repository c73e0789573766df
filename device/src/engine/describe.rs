//! What a packet declares it will do, read from its header and body before it runs: the work
//! the scheduler weighs (whether it may run on the control-queue thread) and the traffic the
//! statistics attribute to segments and banks.

use wddm_gpu_abi::decode::Packet;
use wddm_gpu_abi::packet::{
    WddmGpuEndpoint, WddmGpuPacketHeader, WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2,
    WddmGpuPacketUnmapAperture,
};

use crate::engine::record::{Direction, Traffic};

/// A packet's declared work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    /// `WDDM_GPU_OP_*` (0 when the header is unreadable).
    pub opcode: u16,
    /// Bytes the packet reads or writes, frame and page arrays included: what it costs to run.
    pub work: u64,
    /// Aperture pages mapped or unmapped.
    pub pages: u64,
    /// Source then destination bytes moved.
    pub traffic: [Option<Traffic>; 2],
}

fn endpoint(endpoint: &WddmGpuEndpoint, length: u64, direction: Direction) -> Traffic {
    Traffic {
        segment: endpoint.segment_id,
        address: if endpoint.segment_id == 0 {
            u64::from(endpoint.byte_offset)
        } else {
            endpoint.address
        },
        length,
        direction,
    }
}

/// What a packet with this header and body (read once, by [`Packet::read_body`]) declares.
/// Values are the guest's, not yet checked (header flags included): callers use them for
/// weighing and accounting only. A body that did not decode declares its opcode alone.
pub fn declared(header: &WddmGpuPacketHeader, body: Option<&Packet>) -> Declared {
    let mut declared = Declared {
        opcode: header.opcode,
        ..Declared::default()
    };
    match body {
        Some(Packet::Transfer(p)) => {
            declared.work = p.length;
            declared.traffic = [
                Some(endpoint(&p.source, p.length, Direction::Read)),
                Some(endpoint(&p.destination, p.length, Direction::Write)),
            ];
        }
        Some(Packet::Fill(p)) => {
            declared.work = p.length;
            declared.traffic = [
                None,
                Some(endpoint(&p.destination, p.length, Direction::Write)),
            ];
        }
        Some(
            Packet::MapAperture(WddmGpuPacketMapAperture { page_count, .. })
            | Packet::MapAperture2(WddmGpuPacketMapAperture2 { page_count, .. })
            | Packet::UnmapAperture(WddmGpuPacketUnmapAperture { page_count, .. }),
        ) => {
            declared.pages = *page_count;
            declared.work = page_count.saturating_mul(8);
        }
        Some(Packet::UpdatePageTable(p)) => {
            declared.work = u64::from(p.entry_count).saturating_mul(8);
        }
        Some(Packet::VirtualTransfer(p)) => declared.work = p.length,
        Some(Packet::VirtualFill(p)) => declared.work = p.length,
        Some(Packet::CopyPageTableEntries(p)) => {
            // Each range is read, then copies at most a table of entries.
            declared.work = u64::from(p.range_count).saturating_mul(32 + 4096 * 8);
        }
        Some(
            Packet::DiscardContent(_)
            | Packet::ReadPhysical(_)
            | Packet::WritePhysical(_)
            | Packet::Fence(_)
            | Packet::FlushTlb(_)
            | Packet::SignalMonitoredFence(_)
            | Packet::NotifyResidency(_)
            | Packet::UpdateContextAllocation(_),
        )
        | None => {}
    }
    declared
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::decode::read_header;
    use wddm_gpu_abi::packet::*;
    use wddm_gpu_abi::size_of_u32;
    use zerocopy::IntoBytes;

    use super::*;

    /// What the engine weighs for these bytes: their header and body, read once.
    fn declared_by(bytes: &[u8]) -> Declared {
        let header = read_header(bytes).unwrap();
        declared(&header, Packet::read_body(&header, bytes).ok().as_ref())
    }

    #[test]
    fn transfer_declares_both_endpoints() {
        let packet = WddmGpuPacketTransfer {
            header: WddmGpuPacketHeader {
                opcode: WDDM_GPU_OP_TRANSFER,
                size: size_of_u32::<WddmGpuPacketTransfer>(),
                ..Default::default()
            },
            length: 0x3000,
            source: WddmGpuEndpoint {
                segment_id: 0,
                byte_offset: 0x10,
                address: 0x5000,
                ..Default::default()
            },
            destination: WddmGpuEndpoint {
                segment_id: 1,
                address: 0x40_0000,
                ..Default::default()
            },
        };
        let declared = declared_by(packet.as_bytes());
        assert_eq!(declared.work, 0x3000);
        assert_eq!(
            declared.traffic[0],
            Some(Traffic {
                segment: 0,
                address: 0x10,
                length: 0x3000,
                direction: Direction::Read
            })
        );
        assert_eq!(declared.traffic[1].unwrap().address, 0x40_0000);
        assert_eq!(declared.traffic[1].unwrap().direction, Direction::Write);
    }

    #[test]
    fn hostile_page_counts_saturate() {
        let packet = WddmGpuPacketUnmapAperture {
            header: WddmGpuPacketHeader {
                opcode: WDDM_GPU_OP_UNMAP_APERTURE,
                size: size_of_u32::<WddmGpuPacketUnmapAperture>(),
                ..Default::default()
            },
            page_count: u64::MAX,
            ..Default::default()
        };
        let declared = declared_by(packet.as_bytes());
        assert_eq!(declared.pages, u64::MAX);
        assert_eq!(declared.work, u64::MAX);
    }

    #[test]
    fn packets_whose_body_does_not_decode_declare_their_opcode_alone() {
        let header = WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_TRANSFER,
            flags: 0,
            size: 8,
        };
        assert_eq!(
            declared_by(header.as_bytes()),
            Declared {
                opcode: WDDM_GPU_OP_TRANSFER,
                ..Declared::default()
            }
        );
    }
}
