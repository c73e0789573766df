//! The device model: answers control requests against the layout, the VRAM, the status page and
//! the [`Scheduler`] that runs submissions. Transport-independent: the vhost-user glue hands it
//! request bytes, guest memory and a [`Reply`] to answer through, now or later.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use log::info;
use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::caps::{WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::ctrl::{
    WddmGpuConfig, WddmGpuCtrlHdr, WddmGpuRespCapsetInfo, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
    VIRTIO_GPU_RESP_ERR_UNSPEC, VIRTIO_GPU_RESP_OK_CAPSET, VIRTIO_GPU_RESP_OK_CAPSET_INFO,
    VIRTIO_GPU_RESP_OK_NODATA,
};
use wddm_gpu_abi::request::{ControlCommand, ControlRequest, CursorCommand, DecodeError};
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_BAR_CHANGED, WDDM_GPU_EVENT_VBLANK};
use wddm_gpu_abi::submit::WddmGpuRespSubmit;
use zerocopy::IntoBytes;

use crate::layout::capset::{build_capset, MAX_CAPSET_SIZE};
use crate::layout::SegmentLayout;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::{BarChange, Vram};
use crate::model::display::sink::DisplaySink;
use crate::model::display::{Display, DisplayConfig};
use crate::model::reply::{echoing, respond, Mem, Notify, Reply};
use crate::model::scheduler::{Paused, ResetBy, Scheduler};
use crate::model::status_page::StatusPage;
use crate::model::vblank::VblankTimer;
use crate::observe::stats::{RequestOutcome, Stats};
use crate::observe::trace::Trace;
use crate::support::sync::lock;

fn header(type_: u32) -> Vec<u8> {
    WddmGpuCtrlHdr::with_type(type_).as_bytes().to_vec()
}

/// The GPU.
pub struct Gpu {
    layout: Arc<SegmentLayout>,
    vram: Arc<Vram>,
    notify: Arc<Mutex<Notify>>,
    stats: Arc<Stats>,
    scheduler: Scheduler,
    /// The standard 2D device: scanouts, resources, cursor, VRAM scanouts.
    display: Arc<Mutex<Display>>,
    /// Vblanks of the VRAM scanouts (none at 0 Hz). Declared after `display`, which its thread
    /// also holds.
    vblank: Option<VblankTimer>,
}

impl Gpu {
    /// A GPU with this layout over this VRAM, measured but not traced; starts its engine
    /// thread.
    pub fn new(layout: SegmentLayout, vram: Vram) -> std::io::Result<Self> {
        let stats = Arc::new(Stats::new(&layout));
        Self::with_telemetry(layout, vram, stats, None, DisplayConfig::default())
    }

    /// A GPU recording into `stats` and, when given, writing every submission and packet to
    /// `trace`, with the scanouts and 2D memory of `display`; starts its engine thread.
    pub fn with_telemetry(
        layout: SegmentLayout,
        vram: Vram,
        stats: Arc<Stats>,
        trace: Option<Trace>,
        display: DisplayConfig,
    ) -> std::io::Result<Self> {
        let layout = Arc::new(layout);
        let vram = Arc::new(vram);
        let notify = Arc::new(Mutex::new(Notify {
            status: StatusPage::default(),
            events: VecDeque::new(),
        }));
        let scheduler = Scheduler::start(
            layout.clone(),
            vram.clone(),
            notify.clone(),
            stats.clone(),
            trace.map(Arc::new),
        )?;
        let vblank_hz = display.vblank_hz;
        let display = Arc::new(Mutex::new(Display::new(display)));
        let vblank = VblankTimer::start(
            vblank_hz,
            vblank_tick(display.clone(), vram.clone(), notify.clone()),
        )?;
        Ok(Self {
            layout,
            vram,
            notify,
            stats,
            scheduler,
            display,
            vblank,
        })
    }

    /// The virtio-gpu config space (QEMU keeps only `num_capsets` from it).
    pub fn config(&self) -> WddmGpuConfig {
        WddmGpuConfig {
            num_scanouts: lock(&self.display).scanout_count(),
            num_capsets: 1,
            ..Default::default()
        }
    }

    /// The paging-path measurements.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The VRAM.
    pub fn vram(&self) -> &Vram {
        &self.vram
    }

    /// The VRAM, for work that outlives a request (the shared-memory mapping).
    pub fn shared_vram(&self) -> Arc<Vram> {
        self.vram.clone()
    }

    /// Learns the VRAM BAR location from a new memory table; a change is published on the
    /// status page and delivered as an event.
    pub fn memory_changed(&self, mem: &GuestMemoryMmap) {
        let change = self.vram.observe_memory_table(mem);
        let bar = self.vram.wire_locator();
        match change {
            BarChange::Unchanged => return,
            BarChange::MappedAt(address) => {
                info!(
                    "VRAM BAR mapped at guest-physical {address:#x} (generation {})",
                    bar.generation
                )
            }
            BarChange::Unmapped => {
                info!("VRAM BAR no longer mapped (generation {})", bar.generation)
            }
        }
        let ram = GuestRam::new(mem, self.vram.guest_window());
        let mut notify = lock(&self.notify);
        notify.status.set_bar(&bar);
        notify.deliver(
            WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_BAR_CHANGED,
                bar_state: bar.state,
                bar_generation: bar.generation,
                bar_address: bar.guest_physical_address,
                ..Default::default()
            },
            &ram,
        );
    }

    /// The transport took a kick: short submissions may run on its thread again, up to the
    /// scheduler's per-kick budget.
    pub fn new_kick(&self) {
        self.scheduler.new_kick();
        lock(&self.display).hold();
    }

    /// The requests of the kick are answered: what they showed goes on to the display now,
    /// after the answers, so a fenced flush's round trip does not pay for the display's thread.
    pub fn end_kick(&self) {
        lock(&self.display).release();
    }

    /// Answers one control request (decoded once, where the transport took it off the ring)
    /// through `reply`, now or (submissions, events) later. The response echoes the request's
    /// fence fields; one shorter than a header is refused.
    pub fn handle(
        &self,
        request: Result<ControlRequest, DecodeError>,
        reply: Box<dyn Reply>,
        mem: Mem,
    ) {
        let outcome = match request {
            Ok(ControlRequest { echo, command }) => {
                self.dispatch(command, echoing(reply, echo), mem)
            }
            Err(error) => {
                crate::guest_warn!("malformed control request: {error}");
                self.refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC)
            }
        };
        self.stats.request(outcome);
    }

    /// [`Self::handle`]; returns whether the request was refused.
    fn dispatch(
        &self,
        command: Result<ControlCommand, DecodeError>,
        reply: Box<dyn Reply>,
        mem: Mem,
    ) -> RequestOutcome {
        let command = match command {
            Ok(command) => command,
            Err(error) => {
                crate::guest_warn!("malformed control request: {error}");
                return self.refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
            }
        };
        let response = match command {
            ControlCommand::Submit(cmd) => {
                // Checked before anything runs: work whose answer cannot be written must not
                // happen (the driver would never learn what its packets did).
                if reply.room() < std::mem::size_of::<WddmGpuRespSubmit>() {
                    crate::guest_warn!(
                        "SUBMIT fence {} refused unexecuted: response buffer of {} bytes is too small",
                        cmd.submission_fence_id,
                        reply.room()
                    );
                    return self.refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
                }
                self.scheduler.submit(cmd, reply, mem);
                return RequestOutcome::Taken;
            }
            ControlCommand::WaitEvent => {
                if reply.room() < std::mem::size_of::<WddmGpuRespEvent>() {
                    crate::guest_warn!(
                        "WAIT_EVENT response buffer of {} bytes is too small",
                        reply.room()
                    );
                    return self.refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
                }
                lock(&self.notify).events.push_back(reply);
                return RequestOutcome::Taken;
            }
            ControlCommand::Preempt => self.scheduler.preempt(&mem).as_bytes().to_vec(),
            ControlCommand::Reset => {
                self.scheduler.reset(ResetBy::Driver);
                header(VIRTIO_GPU_RESP_OK_NODATA)
            }
            ControlCommand::RegisterStatusPage(address) => {
                let ram = GuestRam::new(&*mem, self.vram.guest_window());
                let bar = self.vram.wire_locator();
                // Bound first: the lock must be released before `refuse` takes it again.
                let registered = lock(&self.notify).status.register(address, &ram, &bar);
                match registered {
                    Ok(()) => header(VIRTIO_GPU_RESP_OK_NODATA),
                    Err(error) => {
                        crate::guest_warn!("{error}");
                        return self.refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                    }
                }
            }
            ControlCommand::GetDisplayInfo => lock(&self.display).display_info(),
            ControlCommand::SetScanoutVram(cmd) => {
                // Bound first: the lock must be released before `refuse`.
                let answer = lock(&self.display).set_scanout_vram(&cmd, &self.layout, &self.vram);
                match answer {
                    Ok(response) => response,
                    Err(error) => {
                        crate::guest_warn!("{error}");
                        return self.refuse(reply, error.response_type());
                    }
                }
            }
            ControlCommand::Display(command) => {
                let ram = GuestRam::new(&*mem, self.vram.guest_window());
                // Bound first: the lock must be released before `refuse`.
                let answer = lock(&self.display).handle(command, &ram);
                match answer {
                    Ok(response) => response,
                    Err(error) => {
                        crate::guest_warn!("{error}");
                        return self.refuse(reply, error.response_type());
                    }
                }
            }
            ControlCommand::GetCapsetInfo(0) => WddmGpuRespCapsetInfo {
                hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_CAPSET_INFO),
                capset_id: WDDM_GPU_CAPSET_ID,
                capset_max_version: WDDM_GPU_CAPSET_VERSION,
                capset_max_size: MAX_CAPSET_SIZE,
                padding: 0,
            }
            .as_bytes()
            .to_vec(),
            ControlCommand::GetCapset { id, version }
                if id == WDDM_GPU_CAPSET_ID && version == WDDM_GPU_CAPSET_VERSION =>
            {
                let mut response = header(VIRTIO_GPU_RESP_OK_CAPSET);
                response.extend(build_capset(&self.layout, &self.vram.wire_locator()));
                response
            }
            ControlCommand::GetCapsetInfo(index) => {
                crate::guest_warn!("GET_CAPSET_INFO for index {index}: only index 0 exists");
                return self.refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
            }
            ControlCommand::GetCapset { id, version } => {
                crate::guest_warn!("GET_CAPSET for id {id:#x} version {version}: unknown capset");
                return self.refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
            }
            ControlCommand::Unknown(type_) => {
                crate::guest_warn!("unsupported control command {type_:#x}");
                return self.refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
            }
        };
        respond(reply, &response);
        RequestOutcome::Taken
    }

    /// Carries out one cursor-queue request (the cursor queue has no responses).
    pub fn handle_cursor(&self, request: Result<CursorCommand, DecodeError>) {
        let command = match request {
            Ok(command) => command,
            Err(error) => {
                crate::guest_warn!("malformed cursor request: {error}");
                return;
            }
        };
        if let Err(error) = lock(&self.display).cursor(command) {
            crate::guest_warn!("cursor command refused: {error}");
        }
    }

    /// The display to drive from now on (QEMU's display socket), or none.
    pub fn attach_display(&self, sink: Option<Box<dyn DisplaySink>>) {
        lock(&self.display).attach_sink(sink);
    }

    /// Answers with an error.
    fn refuse(&self, reply: Box<dyn Reply>, type_: u32) -> RequestOutcome {
        respond(reply, &header(type_));
        RequestOutcome::Refused
    }

    /// Virtio reset (the frontend stops the rings): running work stops within one chunk,
    /// pending work and posted events are dropped unanswered, the GART and the status page
    /// registration are cleared, the scanouts are off. VRAM keeps its contents.
    ///
    /// A reset also ends a pause ([`Self::pause`]: QEMU stops the rings first): the vblanks
    /// tick again, with nothing shown until the next SET_SCANOUT_VRAM.
    pub fn device_reset(&self) {
        self.scheduler.reset(ResetBy::Frontend);
        lock(&self.display).reset();
        if let Some(vblank) = &self.vblank {
            vblank.resume();
        }
    }

    /// The frontend stopped the rings (GET_VRING_BASE: a VM stop, a snapshot, or the first step
    /// of a reset): the engine parks at its next chunk boundary. Everything the device holds
    /// (GART, status page registration, posted events, queued work) is kept for [`Self::resume`].
    /// The status page is not written while paused (a snapshot may be reading guest RAM).
    pub fn pause(&self) -> Paused {
        if let Some(vblank) = &self.vblank {
            vblank.pause();
        }
        let paused = self.scheduler.pause();
        lock(&self.notify).status.suspend();
        paused
    }

    /// The rings run again where they stopped: the status page catches up with what changed
    /// meanwhile (a BAR event), then the parked submission goes on.
    pub fn resume(&self, mem: Option<&GuestMemoryMmap>) {
        if let Some(mem) = mem {
            let ram = GuestRam::new(mem, self.vram.guest_window());
            lock(&self.notify).status.resume(&ram);
        }
        self.scheduler.resume();
        if let Some(vblank) = &self.vblank {
            vblank.resume();
        }
    }
}

/// One vblank: the display takes its flips and shows changed VRAM (display lock), then each
/// scanout's event completes a posted WAIT_EVENT (notify lock; the two are never held together).
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
            notify.deliver_if_waiting(WddmGpuRespEvent {
                kind: WDDM_GPU_EVENT_VBLANK,
                scanout_id: vblank.scanout,
                vblank_count: vblank.count,
                scanout_segment_id: vblank.segment_id,
                scanout_address: vblank.address,
                ..Default::default()
            });
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.scheduler.shutdown();
    }
}

#[cfg(test)]
#[path = "gpu_tests/mod.rs"]
mod tests;
