//! What a packet declares it will do, read from its header and body before it runs: the work
//! the scheduler weighs (whether it may run on the control-queue thread) and the traffic the
//! statistics attribute to segments and banks.

use wddm_gpu_abi::decode::{read_header, Packet};
use wddm_gpu_abi::packet::{
    WddmGpuEndpoint, WddmGpuPacketMapAperture, WddmGpuPacketMapAperture2,
    WddmGpuPacketUnmapAperture,
};

use crate::observe::stats::{Direction, Traffic};

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

/// Reads what `packet` (a whole packet, header first) declares. Values are the guest's, not
/// yet checked (header flags included): callers use them for weighing and accounting only.
pub fn declared(packet: &[u8]) -> Declared {
    let Ok(header) = read_header(packet) else {
        return Declared::default();
    };
    let mut declared = Declared {
        opcode: header.opcode,
        ..Declared::default()
    };
    match Packet::read_body(&header, packet) {
        Ok(Packet::Transfer(p)) => {
            declared.work = p.length;
            declared.traffic = [
                Some(endpoint(&p.source, p.length, Direction::Read)),
                Some(endpoint(&p.destination, p.length, Direction::Write)),
            ];
        }
        Ok(Packet::Fill(p)) => {
            declared.work = p.length;
            declared.traffic = [
                None,
                Some(endpoint(&p.destination, p.length, Direction::Write)),
            ];
        }
        Ok(Packet::MapAperture(WddmGpuPacketMapAperture { page_count, .. }))
        | Ok(Packet::MapAperture2(WddmGpuPacketMapAperture2 { page_count, .. }))
        | Ok(Packet::UnmapAperture(WddmGpuPacketUnmapAperture { page_count, .. })) => {
            declared.pages = page_count;
            declared.work = page_count.saturating_mul(8);
        }
        Ok(
            Packet::DiscardContent(_)
            | Packet::ReadPhysical(_)
            | Packet::WritePhysical(_)
            | Packet::Fence(_),
        )
        | Err(_) => {}
    }
    declared
}

#[cfg(test)]
mod tests {
    use super::*;
    use wddm_gpu_abi::packet::*;
    use zerocopy::IntoBytes;

    #[test]
    fn transfer_declares_both_endpoints() {
        let packet = WddmGpuPacketTransfer {
            header: WddmGpuPacketHeader {
                opcode: WDDM_GPU_OP_TRANSFER,
                size: std::mem::size_of::<WddmGpuPacketTransfer>() as u32,
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
        let declared = declared(packet.as_bytes());
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
                size: std::mem::size_of::<WddmGpuPacketUnmapAperture>() as u32,
                ..Default::default()
            },
            page_count: u64::MAX,
            ..Default::default()
        };
        let declared = declared(packet.as_bytes());
        assert_eq!(declared.pages, u64::MAX);
        assert_eq!(declared.work, u64::MAX);
    }

    #[test]
    fn truncated_packets_declare_nothing() {
        assert_eq!(declared(&[1, 0]), Declared::default());
    }
}
