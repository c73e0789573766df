//! Tests of the link model: what a packet costs.

use std::time::{Duration, Instant};

use wddm_gpu_abi::packet::{WDDM_GPU_OP_FILL, WDDM_GPU_OP_TRANSFER};

use super::*;
use crate::engine::record::{Direction, Traffic};

/// A packet reading `from` and writing `to` (segment, bytes).
fn packet(opcode: u16, from: Option<(u32, u64)>, to: (u32, u64)) -> PacketRecord {
    let traffic = |(segment, length), direction| Traffic {
        segment,
        address: 0,
        length,
        direction,
    };
    PacketRecord {
        opcode,
        dma_offset: 0,
        fence: 1,
        start: Instant::now(),
        duration: Duration::ZERO,
        bytes: to.1,
        pages: 0,
        traffic: [
            from.map(|from| traffic(from, Direction::Read)),
            Some(traffic(to, Direction::Write)),
        ],
        faulted: false,
    }
}

fn model(text: &str) -> LinkModel {
    let spec = LinkSpec::parse(text).unwrap();
    LinkModel::new(spec, &SegmentLayout::default_for_vram(64 << 20))
}

fn close(actual: Duration, expected_secs: f64) {
    let error = (actual.as_secs_f64() - expected_secs).abs();
    assert!(
        error <= expected_secs * 1e-9 + 1e-9,
        "{actual:?} is not {expected_secs} s"
    );
}

#[test]
fn a_transfer_across_the_link_pays_latency_bandwidth_and_pages() {
    // 1 GB/s, 1 µs a transfer, 10 ns a page.
    let link = model("bandwidth=1GB/s,latency=1us,page=10ns");
    // System memory (0) to VRAM (1): 1 MiB = 256 pages.
    let upload = packet(WDDM_GPU_OP_TRANSFER, Some((0, 1 << 20)), (1, 1 << 20));
    close(
        link.cost(&upload),
        1e-6 + f64::from(1 << 20) / 1e9 + 256.0 * 10e-9,
    );
    // The aperture (2) is system memory too; a partial page counts as one.
    let through_gart = packet(WDDM_GPU_OP_TRANSFER, Some((1, 5000)), (2, 5000));
    close(link.cost(&through_gart), 1e-6 + 5000.0 / 1e9 + 2.0 * 10e-9);
    // VRAM to VRAM without a VRAM bandwidth: host speed, nothing modelled.
    let within = packet(WDDM_GPU_OP_TRANSFER, Some((1, 1 << 20)), (1, 1 << 20));
    assert_eq!(link.cost(&within), Duration::ZERO);
    // A packet that moved nothing, or named a segment the layout lacks.
    let nothing = packet(WDDM_GPU_OP_FILL, None, (7, 1 << 20));
    assert_eq!(link.cost(&nothing), Duration::ZERO);
}

#[test]
fn vram_bytes_move_at_the_vram_bandwidth_alongside_the_link() {
    let link = model("bandwidth=1GB/s,vram=100GB/s");
    // A VRAM copy reads and writes: 2 MiB over the VRAM.
    let within = packet(WDDM_GPU_OP_TRANSFER, Some((1, 1 << 20)), (1, 1 << 20));
    close(link.cost(&within), f64::from(2 << 20) / 100e9);
    // A fill writes once.
    let fill = packet(WDDM_GPU_OP_FILL, None, (1, 1 << 20));
    close(link.cost(&fill), f64::from(1 << 20) / 100e9);
    // Across the link the slower of the two sets the pace.
    let upload = packet(WDDM_GPU_OP_TRANSFER, Some((0, 1 << 20)), (1, 1 << 20));
    close(link.cost(&upload), f64::from(1 << 20) / 1e9);
    // Hostile lengths saturate instead of overflowing.
    let huge = packet(WDDM_GPU_OP_TRANSFER, Some((0, u64::MAX)), (1, u64::MAX));
    assert!(link.cost(&huge) > Duration::from_secs(1 << 30));
}
