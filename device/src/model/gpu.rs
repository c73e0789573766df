//! The virtio GPU the guest sees, made of two sibling devices that know nothing of each other:
//! the paging GPU ([`PagingGpu`]) and the standard 2D display ([`Display`], with the VRAM
//! scanouts). Each control request, decoded once by the transport, goes where the router
//! ([`route`]) sends it: display commands and the cursor queue to the display, through the
//! kick's display hold ([`Kick`]), everything else to the GPU. [`Gpu`] owns what the two share:
//! the config space, the vblank thread (the display's vblanks, the GPU's events) and the order
//! in which pause, resume and reset reach them.

use std::sync::{Arc, Mutex};

use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::ctrl::{WddmGpuConfig, VIRTIO_GPU_RESP_ERR_UNSPEC};
use wddm_gpu_abi::request::{ControlCommand, ControlRequest, CursorCommand, DecodeError};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_VBLANK};

use crate::display::sink::DisplaySink;
use crate::display::vblank::VblankTimer;
use crate::display::{Display, DisplayConfig};
use crate::gpu::control::GpuControl;
use crate::gpu::inject::Injector;
use crate::gpu::reply::{answer, echoing, refuse, Mem, Notify, Reply};
use crate::gpu::scheduler::Paused;
use crate::gpu::PagingGpu;
use crate::layout::SegmentLayout;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::Vram;
use crate::model::kick::Kick;
use crate::model::router::{route, DisplayRequest, Route};
use crate::observe::recording::Recorder;
use crate::observe::stats::{RequestOutcome, Stats};
use crate::observe::trace::Trace;
use crate::support::sync::lock;

/// The GPU: the paging GPU and the 2D display behind one router.
pub struct Gpu {
    paging: PagingGpu,
    /// The standard 2D device: scanouts, resources, cursor, VRAM scanouts. Shared with the
    /// vblank thread and with each kick that carries a display command.
    display: Arc<Mutex<Display>>,
    /// Scanouts of the display, fixed when it is made (the config space's `num_scanouts`).
    scanouts: u32,
    stats: Arc<Stats>,
    /// Vblanks of the VRAM scanouts (none at 0 Hz). Declared last: dropped (its thread joined)
    /// after the engine thread stopped, as before the split.
    vblank: Option<VblankTimer>,
}

impl Gpu {
    /// A GPU with this layout over this VRAM, measured but not traced, with the default display;
    /// starts its engine thread.
    pub fn new(layout: SegmentLayout, vram: Vram) -> std::io::Result<Self> {
        let stats = Arc::new(Stats::new(&layout));
        Self::with_telemetry(layout, vram, stats, None, None, DisplayConfig::default())
    }

    /// A GPU recording into `stats` and, when given, writing every submission and packet to
    /// `trace` and every submission of both nodes with what it read to `recorder`, with the
    /// scanouts and 2D memory of `display`; starts its engine thread.
    pub fn with_telemetry(
        layout: SegmentLayout,
        vram: Vram,
        stats: Arc<Stats>,
        trace: Option<Trace>,
        recorder: Option<Recorder>,
        display: DisplayConfig,
    ) -> std::io::Result<Self> {
        let paging = PagingGpu::start(
            Arc::new(layout),
            Arc::new(vram),
            stats.clone(),
            trace,
            recorder,
        )?;
        let vblank_hz = display.vblank_hz;
        let display = Display::new(display);
        let scanouts = display.scanout_count();
        let display = Arc::new(Mutex::new(display));
        let vblank = VblankTimer::start(
            vblank_hz,
            vblank_tick(
                display.clone(),
                paging.shared_vram(),
                paging.shared_notify(),
            ),
        )?;
        Ok(Self {
            paging,
            display,
            scanouts,
            stats,
            vblank,
        })
    }

    /// The virtio-gpu config space (QEMU keeps only `num_capsets` from it).
    pub fn config(&self) -> WddmGpuConfig {
        WddmGpuConfig {
            num_scanouts: self.scanouts,
            num_capsets: self.paging.capsets(),
            ..Default::default()
        }
    }

    /// The paging-path measurements.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// What the control socket serves (fault injection, live inspection).
    pub fn control(&self) -> GpuControl {
        self.paging.control()
    }

    /// Turns the checker on (`--check`).
    pub fn enable_checker(&self) {
        self.paging.enable_checker();
    }

    /// The fault injections, for a plan given at start.
    pub fn injector(&self) -> Arc<Injector> {
        self.paging.injector()
    }

    /// The VRAM.
    pub fn vram(&self) -> &Vram {
        self.paging.vram()
    }

    /// The VRAM, for work that outlives a request (the shared-memory mapping).
    pub fn shared_vram(&self) -> Arc<Vram> {
        self.paging.shared_vram()
    }

    /// Learns the VRAM BAR location from a new memory table (see [`PagingGpu::memory_changed`]).
    pub fn memory_changed(&self, mem: &GuestMemoryMmap) {
        self.paging.memory_changed(mem);
    }

    /// The transport took a kick: short submissions may run on its thread again, up to the
    /// scheduler's per-kick budget. Hand the kick's requests over with it, and drop it once
    /// they are handed over: what its display commands showed goes to the display then.
    pub fn kick(&self) -> Kick<'_> {
        self.paging.new_kick();
        Kick::new(&self.display)
    }

    /// Answers one control request of `kick` (decoded once, where the transport took it off the
    /// ring) through `reply`, now or (submissions, events) later. The response echoes the
    /// request's fence fields when it had a header; a request that did not decode is refused.
    pub fn handle(
        &self,
        kick: &Kick<'_>,
        request: Result<ControlRequest, DecodeError>,
        reply: Box<dyn Reply>,
        mem: Mem,
    ) {
        let (command, reply) = match request {
            Ok(ControlRequest { echo, command }) => (command, echoing(reply, echo)),
            Err(error) => (Err(error), reply),
        };
        let outcome = match command {
            Ok(command) => self.dispatch(kick, command, reply, mem),
            Err(error) => {
                crate::support::guest_log::guest_warn!("malformed control request: {error}");
                refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC)
            }
        };
        self.stats.request(outcome);
    }

    /// [`Self::handle`]: display commands to the display, the rest to the GPU ([`route`]).
    fn dispatch(
        &self,
        kick: &Kick<'_>,
        command: ControlCommand,
        reply: Box<dyn Reply>,
        mem: Mem,
    ) -> RequestOutcome {
        // Bound first: the display lock is released before the reply is completed.
        let answered = match route(command) {
            Route::Gpu(command) => return self.paging.handle(command, reply, mem),
            Route::Display(DisplayRequest::Info) => Ok(kick.display().display_info()),
            Route::Display(DisplayRequest::ScanoutVram(cmd)) => {
                kick.display()
                    .set_scanout_vram(&cmd, self.paging.layout(), self.paging.vram())
            }
            Route::Display(DisplayRequest::Command(command)) => {
                let ram = GuestRam::new(&*mem, self.paging.vram().guest_window());
                kick.display().handle(command, &ram)
            }
        };
        match answered {
            Ok(response) => {
                answer(reply, &response);
                RequestOutcome::Taken
            }
            Err(error) => {
                crate::support::guest_log::guest_warn!("{error}");
                refuse(reply, error.response_type())
            }
        }
    }

    /// Carries out one cursor-queue request of `kick` (the cursor queue has no responses).
    pub fn handle_cursor(&self, kick: &Kick<'_>, request: Result<CursorCommand, DecodeError>) {
        let command = match request {
            Ok(command) => command,
            Err(error) => {
                crate::support::guest_log::guest_warn!("malformed cursor request: {error}");
                return;
            }
        };
        // Bound first: the display lock is released before the warning.
        let done = kick.display().cursor(command);
        if let Err(error) = done {
            crate::support::guest_log::guest_warn!("cursor command refused: {error}");
        }
    }

    /// The display to drive from now on (QEMU's display socket), or none.
    pub fn attach_display(&self, sink: Option<Box<dyn DisplaySink>>) {
        lock(&self.display).attach_sink(sink);
    }

    /// Virtio reset (the frontend stops the rings): the GPU drops its work, events, GART and
    /// status page registration (see [`PagingGpu::device_reset`]), the scanouts are off. VRAM
    /// keeps its contents.
    ///
    /// A reset also ends a pause ([`Self::pause`]: QEMU stops the rings first): the vblanks
    /// tick again, with nothing shown until the next SET_SCANOUT_VRAM.
    pub fn device_reset(&self) {
        // No tick between the two resets: one that read the scanouts before the display's reset
        // would keep a VBLANK from before it for the driver's first WAIT_EVENT after it.
        if let Some(vblank) = &self.vblank {
            vblank.pause();
        }
        self.paging.device_reset();
        lock(&self.display).reset();
        if let Some(vblank) = &self.vblank {
            vblank.resume();
        }
    }

    /// The frontend stopped the rings (GET_VRING_BASE): the vblanks stop (a tick under way has
    /// ended), then the GPU pauses (see [`PagingGpu::pause`]).
    pub fn pause(&self) -> Paused {
        if let Some(vblank) = &self.vblank {
            vblank.pause();
        }
        self.paging.pause()
    }

    /// The rings run again where they stopped: the GPU goes on (see [`PagingGpu::resume`]),
    /// then the vblanks.
    pub fn resume(&self, mem: Option<&GuestMemoryMmap>) {
        self.paging.resume(mem);
        if let Some(vblank) = &self.vblank {
            vblank.resume();
        }
    }
}

/// One vblank: the display takes its flips and shows changed VRAM (display lock), then each
/// scanout's event completes a posted WAIT_EVENT of the GPU, or is kept for the next one when
/// it shows a change (notify lock; the two are never held together).
fn vblank_tick(
    display: Arc<Mutex<Display>>,
    vram: Arc<Vram>,
    notify: Arc<Mutex<Notify>>,
) -> impl FnMut() + Send + 'static {
    move || {
        let vblanks = lock(&display).vblank(&vram);
        if vblanks.is_empty() {
            return;
        }
        let mut notify = lock(&notify);
        for vblank in vblanks {
            let event = WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_VBLANK,
                scanout_id: vblank.scanout,
                vblank_count: vblank.count,
                scanout_segment_id: vblank.segment_id,
                scanout_address: vblank.address,
                ..Default::default()
            };
            notify.vblank(event, vblank.changed);
        }
    }
}

#[cfg(test)]
#[path = "gpu_tests.rs"]
mod tests;
