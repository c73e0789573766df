//! The paging GPU: paging submissions run by the [`Scheduler`] on the engine, the status page,
//! events (WAIT_EVENT, [`Notify`]), PREEMPT and RESET, the capability set and the VRAM's BAR.
//! Transport-independent, and apart from the 2D display (its sibling, `crate::display`): the
//! device (`crate::model::gpu`) hands it every decoded control request that the router
//! (`crate::model::router`) does not send to the display, with a [`Reply`] to answer through,
//! now or later.

pub mod checker;
pub mod control;
pub mod engine_state;
pub mod inject;
pub mod link;
pub mod power;
pub mod reply;
pub mod scheduler;
pub mod status_page;
pub mod virtual_node;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::info;
use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::caps::{WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::context::{
    WddmGpuRespSubmitVirtual, WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuRespCapsetInfo, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER,
    VIRTIO_GPU_RESP_ERR_UNSPEC, VIRTIO_GPU_RESP_OK_CAPSET, VIRTIO_GPU_RESP_OK_CAPSET_INFO,
    VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_RESP_ENGINE_STATUS,
};
use wddm_gpu_abi::gpuva::{WddmGpuMmuCaps, WDDM_GPU_MMU_CAPSET_ID, WDDM_GPU_MMU_CAPSET_VERSION};
use wddm_gpu_abi::request::ControlCommand;
use wddm_gpu_abi::size_of_u32;
use wddm_gpu_abi::status::{
    WddmGpuRespEngineStatus, WddmGpuRespEvent, WDDM_GPU_ENGINE_STATUS_PAUSED,
    WDDM_GPU_ENGINE_STATUS_RESPONSIVE, WDDM_GPU_EVENT_BAR_CHANGED,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use zerocopy::IntoBytes;

use self::checker::Checker;
use self::control::GpuControl;
use self::inject::spec::Action;
use self::inject::Injector;
use self::power::{lose_contents, Power, Transition};
use self::reply::{answer, header, refuse, Mem, Notify, Reply};
use self::scheduler::{
    submit_response, Instruments, NodeParts, NodeState, Paused, ResetBy, Scheduler,
};
use self::status_page::StatusPage;
use self::virtual_node::VirtualNode;
use crate::engine::virtual_engine::virtual_response;
use crate::layout::capset::{build_capset, MAX_CAPSET_SIZE};
use crate::layout::SegmentLayout;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::{BarChange, Vram};
use crate::mmu::contexts::{ContextError, Contexts};
use crate::observe::recording::format::ContextCommand;
use crate::observe::recording::Recorder;
use crate::observe::stats::{RequestOutcome, Stats};
use crate::observe::trace::Trace;
use crate::support::sync::lock;

/// The paging GPU.
pub struct PagingGpu {
    layout: Arc<SegmentLayout>,
    vram: Arc<Vram>,
    notify: Arc<Mutex<Notify>>,
    contexts: Arc<Mutex<Contexts>>,
    scheduler: Scheduler,
    virtual_node: VirtualNode,
    injector: Arc<Injector>,
    checker: Arc<Checker>,
    /// The latest memory table, for live inspection's walks (requests bring their own).
    latest_memory: Arc<Mutex<Option<GuestMemoryMmap>>>,
    power: Power,
    /// `--record`: the context commands go here (the nodes record their own submissions).
    recorder: Option<Arc<Recorder>>,
}

impl PagingGpu {
    /// A paging GPU with this layout over this VRAM, recording into `stats` and, when given,
    /// writing every submission and packet to `trace` and every submission of both nodes with
    /// what it read to `recorder`; starts its engine thread.
    pub fn start(
        layout: Arc<SegmentLayout>,
        vram: Arc<Vram>,
        stats: Arc<Stats>,
        trace: Option<Trace>,
        recorder: Option<Recorder>,
    ) -> std::io::Result<Self> {
        let notify = Arc::new(Mutex::new(Notify::new(StatusPage::default())));
        let contexts = Arc::new(Mutex::new(Contexts::new(layout.gpummu)));
        let trace = trace.map(Arc::new);
        let recorder = recorder.map(Arc::new);
        let injector = Arc::new(Injector::new(stats.clone(), trace.clone()));
        let checker = Arc::new(Checker::new(
            layout.clone(),
            vram.size(),
            vram.total_size(),
            stats.clone(),
            trace.clone(),
        ));
        let parts = NodeParts {
            layout: layout.clone(),
            vram: vram.clone(),
            notify: notify.clone(),
            contexts: contexts.clone(),
            instruments: Instruments {
                stats,
                trace,
                injector: injector.clone(),
                checker: checker.clone(),
                recorder: recorder.clone(),
            },
        };
        let scheduler = Scheduler::start(parts.clone())?;
        let virtual_node = VirtualNode::start(parts)?;
        Ok(Self {
            layout,
            vram,
            notify,
            contexts,
            scheduler,
            virtual_node,
            injector,
            checker,
            latest_memory: Arc::new(Mutex::new(None)),
            power: Power::default(),
            recorder,
        })
    }

    /// Turns the checker on (`--check`): warnings for what is legal but almost always a KMD
    /// bug, and the GpuMmu checking mode for every context.
    pub fn enable_checker(&self) {
        self.checker.enable();
        lock(&self.contexts).check_every_context();
    }

    /// The fault injections (armed from the control socket or a plan, never by the guest).
    pub fn injector(&self) -> Arc<Injector> {
        self.injector.clone()
    }

    /// What the control socket serves: injections and live inspection.
    pub fn control(&self) -> GpuControl {
        GpuControl {
            injector: self.injector.clone(),
            node: self.scheduler.probe(),
            virtual_node: self.virtual_node.probe(),
            layout: self.layout.clone(),
            vram: self.vram.clone(),
            notify: self.notify.clone(),
            contexts: self.contexts.clone(),
            checker: self.checker.clone(),
            memory: self.latest_memory.clone(),
        }
    }

    /// Capability sets the GPU offers (the config space's `num_capsets`): the segment layout,
    /// and the GpuMmu geometry when the layout has one.
    pub fn capsets(&self) -> u32 {
        1 + u32::from(self.layout.gpummu.is_some())
    }

    /// The segment layout.
    pub fn layout(&self) -> &SegmentLayout {
        &self.layout
    }

    /// The VRAM.
    pub fn vram(&self) -> &Vram {
        &self.vram
    }

    /// The VRAM, for work that outlives a request (the shared-memory mapping, vblanks).
    pub fn shared_vram(&self) -> Arc<Vram> {
        self.vram.clone()
    }

    /// The status page and the posted WAIT_EVENTs, for events raised off the request path
    /// (vblanks).
    pub fn shared_notify(&self) -> Arc<Mutex<Notify>> {
        self.notify.clone()
    }

    /// Learns the VRAM BAR location from a new memory table; a change is published on the
    /// status page and signalled as an event.
    pub fn memory_changed(&self, mem: &GuestMemoryMmap) {
        *lock(&self.latest_memory) = Some(mem.clone());
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
        notify.signal(
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
    }

    /// Answers one control command (its reply already echoes the request's fence fields) now,
    /// or later (submissions, events). The router sends display commands to the display; one
    /// that reaches the GPU is refused.
    pub fn handle(
        &self,
        command: ControlCommand,
        reply: Box<dyn Reply>,
        mem: Mem,
    ) -> RequestOutcome {
        let response = match command {
            ControlCommand::Submit(cmd) if self.power.is_down() => {
                crate::support::guest_log::guest_warn!(
                    "SUBMIT fence {} while the adapter is below D0: refused unexecuted",
                    cmd.submission_fence_id
                );
                submit_response(cmd.submission_fence_id, SubmitStatus::BadCommand)
                    .as_bytes()
                    .to_vec()
            }
            ControlCommand::SubmitVirtual(cmd) if self.power.is_down() => {
                crate::support::guest_log::guest_warn!(
                    "SUBMIT_VIRTUAL fence {} while the adapter is below D0: refused unexecuted",
                    cmd.submission_fence_id
                );
                virtual_response(cmd.submission_fence_id, SubmitStatus::BadCommand)
                    .as_bytes()
                    .to_vec()
            }
            ControlCommand::SetPowerState(cmd) => match self.power.set(&cmd) {
                Ok(transition) => {
                    self.power_transition(transition);
                    header(VIRTIO_GPU_RESP_OK_NODATA)
                }
                Err(error) => {
                    crate::support::guest_log::guest_warn!("SET_POWER_STATE refused: {error}");
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                }
            },
            ControlCommand::Submit(cmd) => {
                // Checked before anything runs: work whose answer cannot be written must not
                // happen (the driver would never learn what its packets did).
                if reply.room() < std::mem::size_of::<WddmGpuRespSubmit>() {
                    crate::support::guest_log::guest_warn!(
                        "SUBMIT fence {} refused unexecuted: response buffer of {} bytes is too small",
                        cmd.submission_fence_id,
                        reply.room()
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
                }
                self.scheduler.submit(cmd, reply, mem);
                return RequestOutcome::Taken;
            }
            ControlCommand::WaitEvent => {
                if reply.room() < std::mem::size_of::<WddmGpuRespEvent>() {
                    crate::support::guest_log::guest_warn!(
                        "WAIT_EVENT response buffer of {} bytes is too small",
                        reply.room()
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
                }
                lock(&self.notify).post(reply);
                return RequestOutcome::Taken;
            }
            ControlCommand::Preempt => {
                let injection = self.injector.on_preempt();
                // Both nodes, each reported with its own fences (`DXGK_INTERRUPT_DMA_PREEMPTED`
                // is per node): the paging node's by the scheduler, the virtual node's here.
                let mut preempt = if injection == Some(Action::RefusePreempt) {
                    self.scheduler.preempted_nothing()
                } else {
                    let virtual_node = self.virtual_node.preempt();
                    let mut preempt = self.scheduler.preempt(&mem);
                    preempt.virtual_preempted_fence = virtual_node.first_fence;
                    preempt.virtual_preempted_count = virtual_node.count;
                    preempt
                };
                // Read once the node is idle: a submission it finished before it stopped counts.
                preempt.virtual_last_completed_fence =
                    lock(&self.notify).status.virtual_completed();
                if let Some(Action::SlowPreempt(delay)) = injection {
                    // Done now, told late: the driver sees its preemption take `delay`.
                    return answer_later(reply, preempt.as_bytes().to_vec(), delay);
                }
                preempt.as_bytes().to_vec()
            }
            ControlCommand::QueryEngineStatus(cmd) => match (cmd.node_ordinal, cmd.reserved) {
                (WDDM_GPU_NODE_PAGING, 0) => {
                    // Released first, so the driver holds every completion when it reads this.
                    let released = self.scheduler.release_held();
                    engine_status(WDDM_GPU_NODE_PAGING, &self.scheduler.node_state(), released)
                        .as_bytes()
                        .to_vec()
                }
                (WDDM_GPU_NODE_VIRTUAL, 0) => {
                    let node = self.virtual_node.probe().state();
                    let last_completed = lock(&self.notify).status.virtual_completed();
                    let state = NodeState {
                        last_completed,
                        // Answered and published just before the node marks itself idle: a
                        // fence the status page calls completed no longer runs.
                        running: node.running_fence.filter(|&fence| fence != last_completed),
                        queued: node.queued,
                        hung: node.hung,
                        paused: node.paused,
                        held: 0,
                    };
                    // The virtual node withholds no answers: nothing to release.
                    engine_status(WDDM_GPU_NODE_VIRTUAL, &state, 0)
                        .as_bytes()
                        .to_vec()
                }
                _ => {
                    crate::support::guest_log::guest_warn!(
                        "QUERY_ENGINE_STATUS for node {} (reserved {:#x}): nodes 0 (paging) and 1 (virtual) report their status",
                        cmd.node_ordinal,
                        cmd.reserved
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                }
            },
            ControlCommand::Reset => {
                self.scheduler.reset(ResetBy::Driver);
                self.virtual_node.reset_engine();
                header(VIRTIO_GPU_RESP_OK_NODATA)
            }
            ControlCommand::CreateContext(cmd) => {
                let created = lock(&self.contexts).create(&cmd);
                return self.context_answer(reply, ContextCommand::Create(cmd), created);
            }
            ControlCommand::DestroyContext(cmd) => {
                let destroyed = if cmd.reserved == 0 {
                    lock(&self.contexts).destroy(cmd.context_id)
                } else {
                    Err(ContextError::Reserved(
                        "destroy_context: reserved is not zero",
                    ))
                };
                return self.context_answer(reply, ContextCommand::Destroy(cmd), destroyed);
            }
            ControlCommand::SetRootPageTable(cmd) => {
                let bound = lock(&self.contexts).set_root(&cmd);
                return self.context_answer(reply, ContextCommand::SetRoot(cmd), bound);
            }
            ControlCommand::SubmitVirtual(cmd) => {
                if reply.room() < std::mem::size_of::<WddmGpuRespSubmitVirtual>() {
                    crate::support::guest_log::guest_warn!(
                        "SUBMIT_VIRTUAL fence {} refused unexecuted: response buffer of {} bytes is too small",
                        cmd.submission_fence_id,
                        reply.room()
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
                }
                self.virtual_node.submit(cmd, reply, mem);
                return RequestOutcome::Taken;
            }
            ControlCommand::ResetEngine(cmd) => {
                if cmd.node_ordinal != WDDM_GPU_NODE_VIRTUAL || cmd.reserved != 0 {
                    crate::support::guest_log::guest_warn!(
                        "RESET_ENGINE for node {}: only the virtual node (1) resets alone; the paging node resets with RESET",
                        cmd.node_ordinal
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                }
                self.virtual_node.reset_engine();
                header(VIRTIO_GPU_RESP_OK_NODATA)
            }
            ControlCommand::RegisterStatusPage(address) => {
                let ram = GuestRam::new(&*mem, self.vram.guest_window());
                let bar = self.vram.wire_locator();
                // Bound first: the lock must be released before the reply is completed.
                let registered = lock(&self.notify).status.register(address, &ram, &bar);
                match registered {
                    Ok(()) => header(VIRTIO_GPU_RESP_OK_NODATA),
                    Err(error) => {
                        crate::support::guest_log::guest_warn!("{error}");
                        return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                    }
                }
            }
            ControlCommand::GetCapsetInfo(0) => {
                capset_info(WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION, MAX_CAPSET_SIZE)
            }
            ControlCommand::GetCapset { id, version }
                if id == WDDM_GPU_CAPSET_ID && version == WDDM_GPU_CAPSET_VERSION =>
            {
                let mut response = header(VIRTIO_GPU_RESP_OK_CAPSET);
                response.extend(build_capset(&self.layout, &self.vram.wire_locator()));
                response
            }
            ControlCommand::GetCapsetInfo(1) if self.layout.gpummu.is_some() => capset_info(
                WDDM_GPU_MMU_CAPSET_ID,
                WDDM_GPU_MMU_CAPSET_VERSION,
                size_of_u32::<WddmGpuMmuCaps>(),
            ),
            ControlCommand::GetCapset { id, version }
                if id == WDDM_GPU_MMU_CAPSET_ID && version == WDDM_GPU_MMU_CAPSET_VERSION =>
            {
                let Some(geometry) = &self.layout.gpummu else {
                    crate::support::guest_log::guest_warn!(
                        "GET_CAPSET for the GpuMmu capset: the layout has none"
                    );
                    return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
                };
                let mut response = header(VIRTIO_GPU_RESP_OK_CAPSET);
                response.extend_from_slice(geometry.caps().as_bytes());
                response
            }
            ControlCommand::GetCapsetInfo(index) => {
                crate::support::guest_log::guest_warn!(
                    "GET_CAPSET_INFO for index {index}: the device has {} capsets",
                    self.capsets()
                );
                return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
            }
            ControlCommand::GetCapset { id, version } => {
                crate::support::guest_log::guest_warn!(
                    "GET_CAPSET for id {id:#x} version {version}: unknown capset"
                );
                return refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
            }
            ControlCommand::Unknown(type_) => {
                crate::support::guest_log::guest_warn!("unsupported control command {type_:#x}");
                return refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
            }
            ControlCommand::GetDisplayInfo
            | ControlCommand::SetScanoutVram(_)
            | ControlCommand::Display(_) => {
                log::error!("a display command reached the paging GPU; refused");
                return refuse(reply, VIRTIO_GPU_RESP_ERR_UNSPEC);
            }
        };
        answer(reply, &response);
        RequestOutcome::Taken
    }

    /// Answers a context command: OK_NODATA, or INVALID_PARAMETER with a warning naming why.
    fn context_answer(
        &self,
        reply: Box<dyn Reply>,
        command: ContextCommand,
        result: Result<(), ContextError>,
    ) -> RequestOutcome {
        match result {
            Ok(()) => {
                // Recorded before the answer: work that uses the context comes after it.
                if let Some(recorder) = &self.recorder {
                    recorder.context(command);
                }
                answer(reply, &header(VIRTIO_GPU_RESP_OK_NODATA));
                RequestOutcome::Taken
            }
            Err(error) => {
                crate::support::guest_log::guest_warn!("{} refused: {error}", command.name());
                refuse(reply, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER)
            }
        }
    }

    /// A power transition: going below D0 stops both nodes as RESET does (work answered RESET,
    /// GART and status page registration cleared) and, with a `power-loss` injection, loses the
    /// segments the power action does not preserve; coming back takes work again.
    fn power_transition(&self, transition: Transition) {
        match transition {
            Transition::Down(action) => {
                self.scheduler.reset(ResetBy::Driver);
                self.virtual_node.reset_engine();
                if self.injector.on_power_down() == Some(Action::PowerLoss) {
                    let lost = lose_contents(&self.layout, &self.vram, action);
                    info!("power-down (action {action}): segments {lost:?} lost their contents");
                } else {
                    info!("power-down (action {action}): VRAM kept");
                }
            }
            Transition::Up => info!("power-up: the adapter takes work again"),
            Transition::Stay => {}
        }
    }

    /// Virtio reset (the frontend stops the rings): running work stops within one chunk,
    /// pending work and posted events are dropped unanswered, the GART and the status page
    /// registration are cleared. VRAM keeps its contents.
    pub fn device_reset(&self) {
        self.power.reset();
        self.scheduler.reset(ResetBy::Frontend);
        self.virtual_node.device_reset();
        lock(&self.contexts).clear();
    }

    /// The frontend stopped the rings (GET_VRING_BASE: a VM stop, a snapshot, or the first step
    /// of a reset): the engine parks at its next chunk boundary. Everything the GPU holds
    /// (GART, status page registration, posted events, queued work) is kept for [`Self::resume`].
    /// The status page is not written while paused (a snapshot may be reading guest RAM).
    pub fn pause(&self) -> Paused {
        let paused = self.scheduler.pause();
        self.virtual_node.pause();
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
        self.virtual_node.resume();
    }
}

/// Answers `reply` with `response` after `delay`, from a thread of its own (an injected slow
/// preemption: the control queue goes on meanwhile).
fn answer_later(reply: Box<dyn Reply>, response: Vec<u8>, delay: Duration) -> RequestOutcome {
    let spawned = std::thread::Builder::new()
        .name("wddm-gpu-late-answer".into())
        .spawn(move || {
            std::thread::sleep(delay);
            answer(reply, &response);
        });
    if let Err(error) = spawned {
        // The reply went with the closure: the request stays unanswered, as a lost one would.
        log::warn!("injection: cannot start the late answer's thread: {error}");
    }
    RequestOutcome::Taken
}

/// The QUERY_ENGINE_STATUS answer for node `ordinal` in `node`'s state.
fn engine_status(ordinal: u32, node: &NodeState, released: u32) -> WddmGpuRespEngineStatus {
    let mut flags = 0;
    if !node.hung {
        flags |= WDDM_GPU_ENGINE_STATUS_RESPONSIVE;
    }
    if node.paused {
        flags |= WDDM_GPU_ENGINE_STATUS_PAUSED;
    }
    WddmGpuRespEngineStatus {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_ENGINE_STATUS),
        node_ordinal: ordinal,
        flags,
        current_fence: node.last_completed,
        running_fence: node.running.unwrap_or(0),
        queued: u32::try_from(node.queued).unwrap_or(u32::MAX),
        released,
    }
}

/// The GET_CAPSET_INFO answer for one capset.
fn capset_info(id: u32, version: u32, max_size: u32) -> Vec<u8> {
    WddmGpuRespCapsetInfo {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_CAPSET_INFO),
        capset_id: id,
        capset_max_version: version,
        capset_max_size: max_size,
        padding: 0,
    }
    .as_bytes()
    .to_vec()
}

impl Drop for PagingGpu {
    fn drop(&mut self) {
        self.scheduler.shutdown();
        if self.checker.enabled() {
            log::warn!("{}", self.checker.summary());
        }
    }
}

#[cfg(test)]
mod tests;
