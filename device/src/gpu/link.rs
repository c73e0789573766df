//! The link model (`--link`): how long a paging packet would take on a given card, so that
//! paging and eviction figures taken in this VM speak of the hardware a driver targets rather
//! than of host memory speed.
//!
//! A packet's bytes in system memory (segment 0, and aperture segments: GART pages are system
//! memory) cross the link: a per-transfer latency, the bytes at the link's bandwidth, and a
//! per-page overhead for each 4 KiB page (system memory reaches the GPU as a list of pages, an
//! MDL, whether or not they are contiguous). Its bytes in VRAM segments move at the VRAM
//! bandwidth (a VRAM-to-VRAM copy counts its bytes twice: read and written). The link and the
//! VRAM work at once, so a packet takes the longer of the two. Without a VRAM bandwidth, VRAM
//! costs nothing beyond the host's own copy.
//!
//! The scheduler applies the model (`crate::gpu::scheduler`): a packet's modelled time starts
//! when it starts or when the previous packet's modelled time ends, whichever is later; the
//! engine waits out what its own copies did not take, off every lock and asleep.

use std::time::Duration;

use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::engine::record::PacketRecord;
use crate::layout::link::LinkSpec;
use crate::layout::{SegmentKind, SegmentLayout};

/// The model of one device: the spec and which segments are in VRAM.
#[derive(Debug)]
pub struct LinkModel {
    spec: LinkSpec,
    /// Index = segment id (0 = system memory): whether the segment's bytes are in VRAM.
    in_vram: Vec<bool>,
}

impl LinkModel {
    /// The model of `spec` over `layout`'s segments.
    pub fn new(spec: LinkSpec, layout: &SegmentLayout) -> Self {
        let in_vram = std::iter::once(false)
            .chain(
                layout
                    .segments
                    .iter()
                    .map(|segment| matches!(segment.kind, SegmentKind::Memory { .. })),
            )
            .collect();
        Self { spec, in_vram }
    }

    /// How long `packet` takes on the modelled hardware (zero for a packet that moves nothing).
    pub fn cost(&self, packet: &PacketRecord) -> Duration {
        let (mut link_bytes, mut vram_bytes) = (0u64, 0u64);
        for traffic in packet.traffic.iter().flatten() {
            // A segment the layout lacks moved nothing (the packet faulted on it).
            let in_vram = usize::try_from(traffic.segment)
                .ok()
                .and_then(|index| self.in_vram.get(index).copied());
            match in_vram {
                Some(true) => vram_bytes = vram_bytes.saturating_add(traffic.length),
                Some(false) => link_bytes = link_bytes.saturating_add(traffic.length),
                None => {}
            }
        }
        let link = if link_bytes == 0 {
            0.0
        } else {
            let pages = link_bytes.div_ceil(WDDM_GPU_PAGE_SIZE) as f64;
            self.spec.latency.as_secs_f64()
                + link_bytes as f64 / self.spec.bandwidth as f64
                + pages * self.spec.page_overhead.as_secs_f64()
        };
        let vram = self
            .spec
            .vram_bandwidth
            .map_or(0.0, |rate| vram_bytes as f64 / rate as f64);
        // Finite (rates are at least 1 KB/s); saturates past Duration's range.
        Duration::try_from_secs_f64(link.max(vram)).unwrap_or(Duration::MAX)
    }
}

/// Makes this thread's sleeps end on time (timer slack of 1 ns instead of the default 50 µs),
/// so the link model's short waits are not each stretched by the kernel.
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's slack.
    let result = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, libc::c_ulong::from(1u8)) };
    if result != 0 {
        log::warn!(
            "link model: cannot shorten the engine thread's timer slack ({}); short waits run long",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
