//! The device-side checker (`--check`): warnings for what the device accepts but is almost
//! always a KMD bug. Each warning is a log line (rate-limited), a counter in the statistics, an
//! instant event on the trace timeline and an entry `ctl warnings` lists; a summary is logged
//! when the backend exits (`PagingGpu`'s drop). Off by default: the scheduler then asks nothing per packet.
//!
//! What it tracks, beside the device's own state (a shadow, so the engine pays nothing):
//! which aperture pages are mapped, unmapped (pointing at the dummy page) or never mapped, and
//! which pages of device-only VRAM the engine has written since the backend started (the CPU
//! cannot reach them, so nothing else can have).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use log::info;
use serde::Serialize;
use wddm_gpu_abi::decode::Packet;
use wddm_gpu_abi::packet::WddmGpuEndpoint;
use wddm_gpu_abi::{WDDM_GPU_PAGE_SHIFT, WDDM_GPU_PAGE_SIZE};

use crate::layout::{Resolved, SegmentKind, SegmentLayout};
use crate::mmu::placement::MisplacedTable;
use crate::observe::stats::Stats;
use crate::observe::trace::{Mark, MarkSource, Trace};
use crate::support::sync::lock;

/// Warnings kept for `ctl warnings`; older ones are counted only.
pub const WARNINGS_KEPT: usize = 256;

/// What looked wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    /// MAP_APERTURE over pages that are mapped (no UNMAP since): the old mapping is lost, and
    /// whoever still uses it now reaches other memory.
    MapOverLive,
    /// A TRANSFER or FILL through an aperture page that was unmapped: it reads or writes the
    /// dummy page, so the data is lost or garbage (a range unmapped while work still used it).
    DummyPageAccess,
    /// A submission fence not above the previous one (since the last RESET or PREEMPT, after
    /// which preempted submissions come again with their fences): the OS's fences only grow,
    /// and a KMD that reports completion by fence value would report the wrong submissions.
    FenceBackwards,
    /// Device-only VRAM read before the engine wrote it since the backend started: the bytes
    /// are zero, not anything the driver put there.
    UnwrittenVramRead,
    /// A submission without a status page after the driver's RESET dropped the one it had
    /// registered (it must register it again): completions and faults go unrecorded. Once per
    /// RESET.
    NoStatusPage,
    /// A translation served from the cache that the page tables no longer agree with (a missing
    /// FLUSH_TLB); the checker turns the GpuMmu checking mode on for every context.
    StaleTranslation,
    /// A walk went through a page table outside the segments the layout declares for its level
    /// (`PageTableSegmentId`, `PagingProcessPageTableSegmentId`): the device follows it, as
    /// hardware would, but VidMm never places a table there (an entry built with the wrong
    /// segment, or a table the driver placed itself). Once per table.
    MisplacedPageTable,
}

impl WarningKind {
    /// Every kind, in the order the statistics list them.
    pub const ALL: [WarningKind; 7] = [
        WarningKind::MapOverLive,
        WarningKind::DummyPageAccess,
        WarningKind::FenceBackwards,
        WarningKind::UnwrittenVramRead,
        WarningKind::NoStatusPage,
        WarningKind::StaleTranslation,
        WarningKind::MisplacedPageTable,
    ];

    /// Its name in logs, counters and listings.
    pub fn name(self) -> &'static str {
        match self {
            WarningKind::MapOverLive => "map-over-live",
            WarningKind::DummyPageAccess => "dummy-page-access",
            WarningKind::FenceBackwards => "fence-backwards",
            WarningKind::UnwrittenVramRead => "unwritten-vram-read",
            WarningKind::NoStatusPage => "no-status-page",
            WarningKind::StaleTranslation => "stale-translation",
            WarningKind::MisplacedPageTable => "misplaced-page-table",
        }
    }
}

/// One warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// What.
    pub kind: WarningKind,
    /// The submission's fence.
    pub fence: u32,
    /// The packet's offset in its DMA buffer (none for a warning about the submission).
    pub packet_offset: Option<u32>,
    /// The particulars.
    pub detail: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: submission fence {}", self.kind.name(), self.fence)?;
        if let Some(offset) = self.packet_offset {
            write!(f, ", packet at {offset:#x}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// An aperture page as the checker saw the packets leave it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PageState {
    NeverMapped,
    Mapped,
    Unmapped,
}

/// The shadow state and what was found.
struct State {
    /// Per aperture segment (by id): its pages.
    apertures: Vec<(u32, Vec<PageState>)>,
    /// Device-only VRAM pages written by the engine (bit per page, from the BAR's end).
    written: Vec<u64>,
    last_fence: Option<u32>,
    /// The driver registered a status page (since the device started).
    had_status_page: bool,
    /// `NoStatusPage` was reported since the last RESET.
    told_no_status_page: bool,
    kept: VecDeque<Warning>,
    counts: [u64; WarningKind::ALL.len()],
}

/// The checker.
pub struct Checker {
    enabled: AtomicBool,
    layout: Arc<SegmentLayout>,
    /// The BAR's size: VRAM offsets from here on are device-only.
    bar_size: u64,
    state: Mutex<State>,
    stats: Arc<Stats>,
    trace: Option<Arc<Trace>>,
}

/// What a `ctl warnings` request shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WarningsView {
    /// Whether the checker runs.
    pub enabled: bool,
    /// Warnings by kind, in all.
    pub counts: Vec<(String, u64)>,
    /// The latest, oldest first.
    pub latest: Vec<Warning>,
}

impl Checker {
    /// A checker for this layout and a BAR of `bar_size` bytes over `vram_size` bytes of VRAM;
    /// off until [`Self::enable`].
    pub fn new(
        layout: Arc<SegmentLayout>,
        bar_size: u64,
        vram_size: u64,
        stats: Arc<Stats>,
        trace: Option<Arc<Trace>>,
    ) -> Self {
        let apertures = layout
            .segments
            .iter()
            .filter(|segment| matches!(segment.kind, SegmentKind::Aperture))
            .map(|segment| {
                let pages = usize::try_from(segment.size >> WDDM_GPU_PAGE_SHIFT).unwrap_or(0);
                (segment.id, vec![PageState::NeverMapped; pages])
            })
            .collect();
        let device_only_pages = vram_size.saturating_sub(bar_size) >> WDDM_GPU_PAGE_SHIFT;
        let words = usize::try_from(device_only_pages.div_ceil(64)).unwrap_or(0);
        Self {
            enabled: AtomicBool::new(false),
            layout,
            bar_size,
            state: Mutex::new(State {
                apertures,
                written: vec![0; words],
                last_fence: None,
                had_status_page: false,
                told_no_status_page: false,
                kept: VecDeque::new(),
                counts: [0; WarningKind::ALL.len()],
            }),
            stats,
            trace,
        }
    }

    /// Turns the checker on.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
        info!("checker on: warnings for what is legal but almost always a driver bug");
    }

    /// Whether it runs.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// A paging submission is taken: its fence, and whether a status page is registered.
    pub fn submission(&self, fence: u32, status_page: bool) {
        let mut state = lock(&self.state);
        if let Some(previous) = state.last_fence.filter(|&previous| fence <= previous) {
            self.report(
                &mut state,
                Warning {
                    kind: WarningKind::FenceBackwards,
                    fence,
                    packet_offset: None,
                    detail: format!("the previous submission's fence was {previous}"),
                },
            );
        }
        state.last_fence = Some(fence);
        if status_page {
            state.had_status_page = true;
            state.told_no_status_page = false;
        } else if state.had_status_page && !state.told_no_status_page {
            state.told_no_status_page = true;
            self.report(
                &mut state,
                Warning {
                    kind: WarningKind::NoStatusPage,
                    fence,
                    packet_offset: None,
                    detail: "no status page is registered since the RESET (register it again)"
                        .to_string(),
                },
            );
        }
    }

    /// A paging packet completed (`offset` in the DMA buffer of submission `fence`).
    pub fn packet(&self, fence: u32, offset: u32, packet: &Packet) {
        let mut state = lock(&self.state);
        let mut found = Vec::new();
        match packet {
            Packet::MapAperture(p) => self.map(
                &mut state,
                p.segment_id,
                p.first_page,
                p.page_count,
                &mut found,
            ),
            Packet::MapAperture2(p) => self.map(
                &mut state,
                p.segment_id,
                p.first_page,
                p.page_count,
                &mut found,
            ),
            Packet::UnmapAperture(p) => {
                if let Some(pages) = pages_mut(&mut state, p.segment_id, p.first_page, p.page_count)
                {
                    pages.fill(PageState::Unmapped);
                }
            }
            Packet::Transfer(p) => {
                self.access(&mut state, &p.source, p.length, false, &mut found);
                self.access(&mut state, &p.destination, p.length, true, &mut found);
            }
            Packet::Fill(p) => self.access(&mut state, &p.destination, p.length, true, &mut found),
            _ => {}
        }
        for (kind, detail) in found {
            self.report(
                &mut state,
                Warning {
                    kind,
                    fence,
                    packet_offset: Some(offset),
                    detail,
                },
            );
        }
    }

    /// A stale translation the GpuMmu checking mode found for a submission (in the packet at
    /// `packet_offset`, when one was running).
    pub fn stale(
        &self,
        fence: u32,
        packet_offset: Option<u32>,
        context: u32,
        address: u64,
        level: u32,
    ) {
        let mut state = lock(&self.state);
        self.report(
            &mut state,
            Warning {
                kind: WarningKind::StaleTranslation,
                fence,
                packet_offset,
                detail: format!(
                    "context {context}: GPU VA {address:#x} served from the cache; its level {level} entry changed (a missing FLUSH_TLB)"
                ),
            },
        );
    }

    /// A page table a walk of submission `fence` went through, outside its level's segments.
    pub fn misplaced_table(&self, fence: u32, context: u32, table: &MisplacedTable) {
        let mut state = lock(&self.state);
        let [process, paging_process] = table.declared;
        self.report(
            &mut state,
            Warning {
                kind: WarningKind::MisplacedPageTable,
                fence,
                packet_offset: None,
                detail: format!(
                    "context {context}: GPU VA {:#x} walks through a level {} table in segment {} at {:#x}; the layout puts the level's tables in segment {process} (the paging process's in {paging_process})",
                    table.address, table.level, table.table.segment, table.table.address
                ),
            },
        );
    }

    /// The driver's RESET (`by_driver`) or a virtio reset: the GART is cleared, fences start
    /// over; after a virtio reset a new driver starts, with no status page yet.
    pub fn reset(&self, by_driver: bool) {
        let mut state = lock(&self.state);
        for (_, pages) in &mut state.apertures {
            pages.fill(PageState::NeverMapped);
        }
        state.last_fence = None;
        if !by_driver {
            state.had_status_page = false;
        }
    }

    /// A PREEMPT: the preempted submissions may come again with their own fences.
    pub fn preempted(&self) {
        lock(&self.state).last_fence = None;
    }

    fn map(
        &self,
        state: &mut State,
        segment: u32,
        first: u64,
        count: u64,
        found: &mut Vec<(WarningKind, String)>,
    ) {
        let Some(pages) = pages_mut(state, segment, first, count) else {
            return;
        };
        let live = pages
            .iter()
            .position(|&page| page == PageState::Mapped)
            .map(|at| {
                (
                    at,
                    pages
                        .iter()
                        .filter(|&&page| page == PageState::Mapped)
                        .count(),
                )
            });
        if let Some((at, live)) = live {
            found.push((
                WarningKind::MapOverLive,
                format!(
                    "aperture segment {segment}: {live} of pages {first:#x}+{count:#x} were mapped and not unmapped (first: page {:#x})",
                    first + at as u64
                ),
            ));
        }
        pages.fill(PageState::Mapped);
    }

    /// An endpoint of `length` bytes read or written (`write`).
    fn access(
        &self,
        state: &mut State,
        endpoint: &WddmGpuEndpoint,
        length: u64,
        write: bool,
        found: &mut Vec<(WarningKind, String)>,
    ) {
        if endpoint.segment_id == 0 || length == 0 {
            return;
        }
        // Resolved ranges are checked: their ends cannot overflow.
        match self
            .layout
            .resolve(endpoint.segment_id, endpoint.address, length)
        {
            Ok(Resolved::Aperture(range)) => {
                let first = range.start() >> WDDM_GPU_PAGE_SHIFT;
                let count = range.end().div_ceil(WDDM_GPU_PAGE_SIZE) - first;
                let segment = endpoint.segment_id;
                let Some(pages) = pages_mut(state, segment, first, count) else {
                    return;
                };
                if let Some(at) = pages.iter().position(|&page| page == PageState::Unmapped) {
                    found.push((
                        WarningKind::DummyPageAccess,
                        format!(
                            "{} aperture segment {segment} page {:#x}, unmapped: the dummy page",
                            if write { "writes" } else { "reads" },
                            first + at as u64
                        ),
                    ));
                }
            }
            Ok(Resolved::Vram(range)) => {
                let end = range.end();
                if end <= self.bar_size {
                    return;
                }
                let from = range.start().max(self.bar_size) - self.bar_size;
                let to = end - self.bar_size;
                if write {
                    // Only whole pages count as written (a partial write leaves the rest).
                    let whole = from.div_ceil(WDDM_GPU_PAGE_SIZE)..(to >> WDDM_GPU_PAGE_SHIFT);
                    for page in whole {
                        set_bit(&mut state.written, page);
                    }
                    return;
                }
                let mut pages = (from >> WDDM_GPU_PAGE_SHIFT)..to.div_ceil(WDDM_GPU_PAGE_SIZE);
                if let Some(page) = pages.find(|&page| !bit(&state.written, page)) {
                    found.push((
                        WarningKind::UnwrittenVramRead,
                        format!(
                            "reads device-only VRAM at offset {:#x}, which nothing has written",
                            self.bar_size + (page << WDDM_GPU_PAGE_SHIFT)
                        ),
                    ));
                }
            }
            Err(_) => {}
        }
    }

    /// Counts, logs (rate-limited), marks and keeps one warning.
    fn report(&self, state: &mut State, warning: Warning) {
        let index = WarningKind::ALL
            .iter()
            .position(|&kind| kind == warning.kind)
            .unwrap_or(0);
        state.counts[index] += 1;
        crate::support::guest_log::guest_warn!("checker: {warning}");
        self.stats.checker_warning(warning.kind.name());
        if let Some(trace) = &self.trace {
            trace.mark(Mark {
                at: Instant::now(),
                name: warning.kind.name(),
                fence: Some(warning.fence),
                source: MarkSource::Checker {
                    packet_offset: warning.packet_offset,
                },
            });
        }
        if state.kept.len() == WARNINGS_KEPT {
            state.kept.pop_front();
        }
        state.kept.push_back(warning);
    }

    /// What `ctl warnings` shows.
    pub fn view(&self) -> WarningsView {
        let state = lock(&self.state);
        WarningsView {
            enabled: self.enabled(),
            counts: WarningKind::ALL
                .iter()
                .zip(state.counts)
                .map(|(kind, count)| (kind.name().to_string(), count))
                .collect(),
            latest: state.kept.iter().cloned().collect(),
        }
    }

    /// The summary logged at exit: every kind with its count.
    pub fn summary(&self) -> String {
        let view = self.view();
        let total: u64 = view.counts.iter().map(|(_, count)| count).sum();
        let counts: Vec<String> = view
            .counts
            .iter()
            .map(|(name, count)| format!("{name} {count}"))
            .collect();
        format!("checker summary: {total} warning(s): {}", counts.join(", "))
    }
}

/// Pages `first..first + count` of aperture `segment`, when all of them exist (the engine
/// refused the packet otherwise, and it never reaches the checker).
fn pages_mut(state: &mut State, segment: u32, first: u64, count: u64) -> Option<&mut [PageState]> {
    let (_, pages) = state.apertures.iter_mut().find(|(id, _)| *id == segment)?;
    let start = usize::try_from(first).ok()?;
    let end = start.checked_add(usize::try_from(count).ok()?)?;
    pages.get_mut(start..end)
}

fn bit(words: &[u64], page: u64) -> bool {
    let word = usize::try_from(page / 64).unwrap_or(usize::MAX);
    words.get(word).is_some_and(|w| w & (1 << (page % 64)) != 0)
}

fn set_bit(words: &mut [u64], page: u64) {
    if let Some(word) = usize::try_from(page / 64)
        .ok()
        .and_then(|word| words.get_mut(word))
    {
        *word |= 1 << (page % 64);
    }
}
