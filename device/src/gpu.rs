//! The device model: answers control requests against the layout, the VRAM and the paging
//! engine. Transport-independent: the vhost-user glue hands it request bytes and guest memory.

use log::{info, warn};
use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::caps::{WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION};
use wddm_gpu_abi::ctrl::{
    WddmGpuConfig, WddmGpuCtrlHdr, WddmGpuRespCapsetInfo, WddmGpuRespDisplayInfo,
    VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_ERR_UNSPEC, VIRTIO_GPU_RESP_OK_CAPSET,
    VIRTIO_GPU_RESP_OK_CAPSET_INFO, VIRTIO_GPU_RESP_OK_DISPLAY_INFO, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit};
use zerocopy::IntoBytes;

use crate::caps::{build_capset, MAX_CAPSET_SIZE};
use crate::control::{decode, ControlRequest};
use crate::engine::{DeviceMemory, Engine};
use crate::guest_ram::GuestRam;
use crate::layout::SegmentLayout;
use crate::vram::{BarChange, Vram};

/// `VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID`: the answer to GET_EDID on a device without
/// displays.
const VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID: u32 = 0x1202;

/// Counters the device keeps from the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// Control requests answered.
    pub requests: u64,
    /// Requests that could not be decoded or were unknown.
    pub bad_requests: u64,
    /// Submissions executed.
    pub submissions: u64,
    /// Submissions that ended with a fault.
    pub faulted_submissions: u64,
    /// Bytes moved by submissions.
    pub bytes_transferred: u64,
}

/// The GPU.
pub struct Gpu {
    layout: SegmentLayout,
    vram: Vram,
    engine: Engine,
    counters: GpuCounters,
}

impl Gpu {
    /// A GPU with this layout over this VRAM.
    pub fn new(layout: SegmentLayout, vram: Vram) -> Self {
        Self {
            engine: Engine::new(&layout),
            layout,
            vram,
            counters: GpuCounters::default(),
        }
    }

    /// The virtio-gpu config space (QEMU keeps only `num_capsets` from it).
    pub fn config(&self) -> WddmGpuConfig {
        WddmGpuConfig {
            num_capsets: 1,
            ..Default::default()
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> GpuCounters {
        self.counters
    }

    /// The VRAM.
    pub fn vram(&self) -> &Vram {
        &self.vram
    }

    /// Learns the VRAM BAR location from a new memory table.
    pub fn memory_changed<M: GuestMemoryBackend>(&mut self, mem: &M) {
        match self.vram.observe_memory_table(mem) {
            BarChange::Unchanged => {}
            BarChange::MappedAt(address) => info!(
                "VRAM BAR mapped at guest-physical {address:#x} (generation {})",
                self.vram.locator().generation
            ),
            BarChange::Unmapped => info!(
                "VRAM BAR no longer mapped (generation {})",
                self.vram.locator().generation
            ),
        }
    }

    /// Answers one control request; the response is at most `response_room` bytes.
    pub fn handle<M: GuestMemoryBackend>(
        &mut self,
        request: &[u8],
        response_room: usize,
        mem: &M,
    ) -> Vec<u8> {
        self.counters.requests += 1;
        let response = match decode(request) {
            Ok(ControlRequest::GetDisplayInfo) => {
                // Render-only: no scanout is enabled.
                WddmGpuRespDisplayInfo {
                    hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_DISPLAY_INFO),
                    ..Default::default()
                }
                .as_bytes()
                .to_vec()
            }
            Ok(ControlRequest::GetCapsetInfo(0)) => WddmGpuRespCapsetInfo {
                hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_CAPSET_INFO),
                capset_id: WDDM_GPU_CAPSET_ID,
                capset_max_version: WDDM_GPU_CAPSET_VERSION,
                capset_max_size: MAX_CAPSET_SIZE,
                padding: 0,
            }
            .as_bytes()
            .to_vec(),
            Ok(ControlRequest::GetCapset { id, version })
                if id == WDDM_GPU_CAPSET_ID && version == WDDM_GPU_CAPSET_VERSION =>
            {
                let mut response = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_CAPSET)
                    .as_bytes()
                    .to_vec();
                response.extend(build_capset(&self.layout, &self.vram.wire_locator()));
                response
            }
            Ok(ControlRequest::GetCapsetInfo(index)) => {
                warn!("GET_CAPSET_INFO for index {index}: only index 0 exists");
                self.error(VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER)
            }
            Ok(ControlRequest::GetCapset { id, version }) => {
                warn!("GET_CAPSET for id {id:#x} version {version}: unknown capset");
                self.error(VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER)
            }
            Ok(ControlRequest::GetEdid) => self.error(VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID),
            Ok(ControlRequest::Submit(cmd)) => self.submit(&cmd, mem).as_bytes().to_vec(),
            Ok(ControlRequest::Unknown(type_)) => {
                warn!("unsupported control command {type_:#x}");
                self.error(VIRTIO_GPU_RESP_ERR_UNSPEC)
            }
            Err(error) => {
                warn!("malformed control request: {error}");
                self.error(VIRTIO_GPU_RESP_ERR_UNSPEC)
            }
        };
        if response.len() > response_room {
            warn!(
                "response of {} bytes does not fit the {response_room}-byte buffer",
                response.len()
            );
            self.counters.bad_requests += 1;
            let hdr = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_ERR_UNSPEC);
            return hdr.as_bytes()[..response_room.min(hdr.as_bytes().len())].to_vec();
        }
        response
    }

    fn error(&mut self, type_: u32) -> Vec<u8> {
        self.counters.bad_requests += 1;
        WddmGpuCtrlHdr::with_type(type_).as_bytes().to_vec()
    }

    fn submit<M: GuestMemoryBackend>(
        &mut self,
        cmd: &WddmGpuCmdSubmit,
        mem: &M,
    ) -> WddmGpuRespSubmit {
        let memory = DeviceMemory {
            ram: GuestRam::new(mem, self.vram.guest_window()),
            vram: &self.vram,
            layout: &self.layout,
        };
        let completion = self.engine.execute(cmd, &memory, &mut ());
        self.counters.submissions += 1;
        self.counters.bytes_transferred += completion.bytes_transferred;
        let (status, fault_packet_offset, fault_address) = match completion.fault {
            None => (SubmitStatus::Ok, 0, 0),
            Some((offset, fault)) => {
                if fault.is_fault() {
                    self.counters.faulted_submissions += 1;
                    warn!(
                        "submission fence {} faulted at DMA offset {offset:#x} (opcode {}): {fault}",
                        cmd.submission_fence_id, completion.fault_opcode
                    );
                }
                (fault.status(), offset, fault.address())
            }
        };
        WddmGpuRespSubmit {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT),
            submission_fence_id: completion.fence_id,
            status: status as u32,
            packets_completed: completion.packets_completed,
            fault_packet_offset,
            fault_address,
            bytes_transferred: completion.bytes_transferred,
        }
    }
}
