//! The virtio-gpu control queue as this device speaks it: capset queries, WDDM submissions, the
//! status page, events, PREEMPT and RESET. Every reply is checked (length, type, fence echo,
//! status value) before use.
//!
//! Most commands are synchronous ([`GpuControl::exchange`]): post, then poll until answered.
//! Requests the device answers later (WAIT_EVENT at the next event, a SUBMIT a PREEMPT or RESET
//! overtakes) are posted with [`GpuControl::post`] into slots of their own and collected with
//! [`GpuControl::try_take`]/[`GpuControl::wait`]; whatever completes while a synchronous command
//! waits is kept for its owner.

use std::mem::size_of;
use std::time::Duration;

use thiserror::Error;
use wddm_gpu_abi::context::{WddmGpuCmdSubmitVirtual, WddmGpuRespSubmitVirtual};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo, WddmGpuRespCapsetInfo,
    WddmGpuRespDisplayInfo, VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO,
    VIRTIO_GPU_CMD_GET_DISPLAY_INFO, VIRTIO_GPU_RESP_OK_CAPSET, VIRTIO_GPU_RESP_OK_CAPSET_INFO,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO, VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_CMD_PREEMPT,
    WDDM_GPU_CMD_QUERY_ENGINE_STATUS, WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET,
    WDDM_GPU_CMD_SET_POWER_STATE, WDDM_GPU_CMD_SUBMIT, WDDM_GPU_CMD_WAIT_EVENT,
    WDDM_GPU_RESP_ENGINE_STATUS, WDDM_GPU_RESP_EVENT, WDDM_GPU_RESP_PREEMPT, WDDM_GPU_RESP_SUBMIT,
    WDDM_GPU_RESP_SUBMIT_VIRTUAL,
};
use wddm_gpu_abi::status::{
    WddmGpuCmdQueryEngineStatus, WddmGpuCmdRegisterStatusPage, WddmGpuCmdSetPowerState,
    WddmGpuRespEngineStatus, WddmGpuRespEvent, WddmGpuRespPreempt,
};
use wddm_gpu_abi::submit::{
    SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING,
};
use zerocopy::{FromBytes, IntoBytes};

use crate::dma::{DmaArena, DmaBuf, DmaError};
use crate::virtio::split_queue::{QueueError, Segment, SplitQueue, Used};

/// Bytes reserved for one request.
const REQUEST_BUF: usize = 4096;
/// Bytes reserved for one response (bounds the capset size this driver accepts).
const RESPONSE_BUF: usize = 64 << 10;
/// Requests that may be posted at once (WAIT_EVENTs, overtaken submissions).
pub const ASYNC_SLOTS: usize = 32;
/// Bytes of one posted request's slot: the request, then its response.
const SLOT_SIZE: usize = 512;
/// Bytes of a posted request (the rest of the slot is its response buffer).
const SLOT_REQUEST: usize = 128;

/// A control-queue exchange failed or the device answered badly.
#[derive(Debug, Error)]
pub enum GpuError {
    /// The queue failed (timeout, bad used entry).
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Buffer allocation failed.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// The device wrote fewer bytes than the response needs.
    #[error("{cmd}: response of {got} bytes, need {need}")]
    ShortResponse {
        cmd: &'static str,
        got: usize,
        need: usize,
    },
    /// The device answered with another type (often an error such as 0x1200 ERR_UNSPEC).
    #[error("{cmd}: response type {got:#06x}, expected {want:#06x}")]
    ResponseType {
        cmd: &'static str,
        got: u32,
        want: u32,
    },
    /// A request does not fit this driver's buffers.
    #[error("{cmd}: {bytes} bytes exceed the driver's {limit}-byte buffer")]
    TooLarge {
        cmd: &'static str,
        bytes: usize,
        limit: usize,
    },
    /// The completion carries another fence id.
    #[error("submit: fence {got} echoed, sent {sent}")]
    FenceMismatch { sent: u32, got: u32 },
    /// QUERY_ENGINE_STATUS answered about another node.
    #[error("QUERY_ENGINE_STATUS: asked about node {asked}, answered about node {got}")]
    NodeMismatch { asked: u32, got: u32 },
    /// The completion status is not a known `SubmitStatus`.
    #[error("submit: unknown status {0}")]
    UnknownStatus(u32),
    /// Every slot for posted requests is in use.
    #[error("{cmd}: all {ASYNC_SLOTS} slots for posted requests are in use")]
    NoSlot { cmd: &'static str },
    /// The ticket is not a request this driver posted (or it was collected already).
    #[error("no posted request with head descriptor {0}")]
    UnknownTicket(u16),
}

/// A decoded submission completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Echoed fence id (already checked against the request).
    pub fence: u32,
    /// How the submission ended.
    pub status: SubmitStatus,
    /// Packets fully executed.
    pub packets_completed: u32,
    /// Offset of the failing packet.
    pub fault_packet_offset: u32,
    /// Address the failure concerns.
    pub fault_address: u64,
    /// Bytes moved.
    pub bytes_transferred: u64,
}

impl std::fmt::Display for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status={} fence={} packets_completed={} fault_packet_offset={:#x} fault_address={:#x} bytes_transferred={}",
            self.status.name(),
            self.fence,
            self.packets_completed,
            self.fault_packet_offset,
            self.fault_address,
            self.bytes_transferred
        )
    }
}

/// A paging submission of `[start, end)` of a DMA buffer in guest RAM.
pub fn submit_command(
    dma_address: u64,
    dma_size: u32,
    start: u32,
    end: u32,
    fence: u32,
) -> WddmGpuCmdSubmit {
    WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: dma_address,
        dma_buffer_segment_id: 0,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: dma_size,
        start_offset: start,
        end_offset: end,
        submission_fence_id: fence,
        node_ordinal: 0,
        reserved: 0,
    }
}

/// Names a posted request until it is collected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The chain's head descriptor.
    pub head: u16,
    /// What was posted (for messages).
    pub cmd: &'static str,
}

/// A posted request's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The bytes the device wrote.
    pub bytes: Vec<u8>,
    /// Position of the completion in the used ring (compare two to know which came first).
    pub order: u64,
}

#[derive(Clone, Copy, Debug)]
struct Posted {
    slot: usize,
    response_len: usize,
}

/// The control queue with its request and response buffers.
pub struct GpuControl {
    queue: SplitQueue,
    request: DmaBuf,
    response: DmaBuf,
    slots: DmaBuf,
    free_slots: Vec<usize>,
    posted: Vec<(u16, Posted)>,
    timeout: Duration,
    verbose: bool,
}

impl GpuControl {
    /// Wraps the control queue (queue 0).
    pub fn new(
        arena: &'static DmaArena,
        queue: SplitQueue,
        timeout: Duration,
    ) -> Result<Self, GpuError> {
        Ok(Self {
            queue,
            request: arena.alloc(REQUEST_BUF)?,
            response: arena.alloc(RESPONSE_BUF)?,
            slots: arena.alloc(ASYNC_SLOTS * SLOT_SIZE)?,
            free_slots: (0..ASYNC_SLOTS).rev().collect(),
            posted: Vec::new(),
            timeout,
            verbose: false,
        })
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Kick to completion of the last synchronous exchange (such as [`Self::submit`]): from the
    /// queue notify to the moment the polling driver saw the answer on the used ring.
    pub fn last_round_trip(&self) -> Option<Duration> {
        self.queue.last_round_trip()
    }

    /// Posts `request` with a `response_len`-byte response buffer in a slot of its own and
    /// returns at once; collect the answer with [`Self::try_take`] or [`Self::wait`].
    pub fn post(
        &mut self,
        cmd: &'static str,
        request: &[u8],
        response_len: usize,
    ) -> Result<Ticket, GpuError> {
        let room = SLOT_SIZE - SLOT_REQUEST;
        for (bytes, limit) in [(request.len(), SLOT_REQUEST), (response_len, room)] {
            if bytes > limit {
                return Err(GpuError::TooLarge { cmd, bytes, limit });
            }
        }
        let slot = self.free_slots.pop().ok_or(GpuError::NoSlot { cmd })?;
        let base = slot * SLOT_SIZE;
        self.slots.write(base, &[0u8; SLOT_SIZE]);
        self.slots.write(base, request);
        let posted = self.queue.post(&[
            Segment {
                addr: self.slots.phys() + base as u64,
                len: u32::try_from(request.len()).unwrap(),
                device_writes: false,
            },
            Segment {
                addr: self.slots.phys() + (base + SLOT_REQUEST) as u64,
                len: u32::try_from(response_len).unwrap(),
                device_writes: true,
            },
        ]);
        let head = match posted {
            Ok(head) => head,
            Err(err) => {
                self.free_slots.push(slot);
                return Err(err.into());
            }
        };
        self.posted.push((head, Posted { slot, response_len }));
        if self.verbose {
            println!(
                "CTRL {cmd}: {} request bytes posted (head {head})",
                request.len()
            );
        }
        Ok(Ticket { head, cmd })
    }

    /// Requests posted and not yet collected.
    pub fn posted(&self) -> usize {
        self.posted.len()
    }

    /// The answer to a posted request if the device gave it (the request is then collected), or
    /// `None` while it is pending.
    pub fn try_take(&mut self, ticket: Ticket) -> Result<Option<Answer>, GpuError> {
        self.poll()?;
        self.take_answered(ticket)
    }

    /// Reads every new completion off the used ring (answers stay until collected).
    pub fn poll(&mut self) -> Result<(), GpuError> {
        self.queue.poll()?;
        Ok(())
    }

    /// Like [`Self::try_take`], but only looks at completions already read by [`Self::poll`]:
    /// several requests checked after one poll see one consistent snapshot of the used ring.
    pub fn take_answered(&mut self, ticket: Ticket) -> Result<Option<Answer>, GpuError> {
        let index = self
            .posted
            .iter()
            .position(|(head, _)| *head == ticket.head)
            .ok_or(GpuError::UnknownTicket(ticket.head))?;
        let Some(Used { len, order }) = self.queue.take(ticket.head) else {
            return Ok(None);
        };
        let (_, posted) = self.posted.remove(index);
        let mut bytes = vec![0u8; (len as usize).min(posted.response_len)];
        self.slots
            .read(posted.slot * SLOT_SIZE + SLOT_REQUEST, &mut bytes);
        self.free_slots.push(posted.slot);
        if self.verbose {
            println!(
                "CTRL {}: answered (head {}), {len} response bytes, type {:#06x}, completion #{order}",
                ticket.cmd,
                ticket.head,
                header_type(&bytes)
            );
        }
        Ok(Some(Answer { bytes, order }))
    }

    /// Polls until a posted request is answered (at most `timeout`).
    pub fn wait(&mut self, ticket: Ticket, timeout: Duration) -> Result<Answer, GpuError> {
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(answer) = self.try_take(ticket)? {
                return Ok(answer);
            }
            if start.elapsed() > timeout {
                return Err(QueueError::Timeout { queue: 0, timeout }.into());
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Posts a submission; the device answers when it has executed, faulted, been preempted or
    /// been dropped by a reset. Decode the answer with [`decode_submit`].
    pub fn post_submit(&mut self, cmd: &WddmGpuCmdSubmit) -> Result<Ticket, GpuError> {
        self.post("SUBMIT", cmd.as_bytes(), size_of::<WddmGpuRespSubmit>())
    }

    /// Posts a WAIT_EVENT request; the device answers it at the next event.
    pub fn post_wait_event(&mut self) -> Result<Ticket, GpuError> {
        let req = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_WAIT_EVENT);
        self.post("WAIT_EVENT", req.as_bytes(), size_of::<WddmGpuRespEvent>())
    }

    /// REGISTER_STATUS_PAGE; returns the response type (`VIRTIO_GPU_RESP_OK_NODATA`, or an
    /// error such as `ERR_INVALID_PARAMETER`).
    pub fn register_status_page(&mut self, address: u64) -> Result<u32, GpuError> {
        let req = WddmGpuCmdRegisterStatusPage {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
            address,
        };
        let bytes = self.exchange(
            "REGISTER_STATUS_PAGE",
            req.as_bytes(),
            size_of::<WddmGpuCtrlHdr>(),
        )?;
        header_of("REGISTER_STATUS_PAGE", &bytes).map(|hdr| hdr.type_)
    }

    /// PREEMPT: answered once the running submission stopped and every pending one was
    /// returned.
    pub fn preempt(&mut self) -> Result<WddmGpuRespPreempt, GpuError> {
        let req = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_PREEMPT);
        self.call("PREEMPT", &req, WDDM_GPU_RESP_PREEMPT)
    }

    /// QUERY_ENGINE_STATUS of node `node` (`DxgkDdiQueryEngineStatus`,
    /// `DxgkDdiQueryCurrentFence`): the answer is checked to name the node asked about. Answers
    /// the query released (withheld by a lost interrupt) are on the used ring before it, kept for
    /// their owners.
    pub fn query_engine_status(&mut self, node: u32) -> Result<WddmGpuRespEngineStatus, GpuError> {
        let req = WddmGpuCmdQueryEngineStatus {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_QUERY_ENGINE_STATUS),
            node_ordinal: node,
            reserved: 0,
        };
        let resp: WddmGpuRespEngineStatus =
            self.call("QUERY_ENGINE_STATUS", &req, WDDM_GPU_RESP_ENGINE_STATUS)?;
        if resp.node_ordinal != node {
            return Err(GpuError::NodeMismatch {
                asked: node,
                got: resp.node_ordinal,
            });
        }
        Ok(resp)
    }

    /// SET_POWER_STATE (`DxgkDdiSetPowerState`) to `state` (`WDDM_GPU_POWER_D0` ... `D3`) for
    /// `action` (`WDDM_GPU_POWER_ACTION_*`); whether it was answered OK_NODATA.
    pub fn set_power_state(&mut self, state: u32, action: u32) -> Result<bool, GpuError> {
        let request = WddmGpuCmdSetPowerState {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_POWER_STATE),
            device_power_state: state,
            action,
        };
        self.command("SET_POWER_STATE", request.as_bytes())
    }

    /// RESET (`DxgkDdiResetFromTimeout`); returns the response type (`OK_NODATA` when done).
    pub fn reset(&mut self) -> Result<u32, GpuError> {
        let req = WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_RESET);
        let bytes = self.exchange("RESET", req.as_bytes(), size_of::<WddmGpuCtrlHdr>())?;
        header_of("RESET", &bytes).map(|hdr| hdr.type_)
    }

    /// Logs every exchange and completion to stdout when on.
    pub fn set_verbose(&mut self, on: bool) {
        self.verbose = on;
    }

    /// Sends `request` with a `response_len`-byte response buffer; returns what the device wrote.
    pub fn exchange(
        &mut self,
        cmd: &'static str,
        request: &[u8],
        response_len: usize,
    ) -> Result<Vec<u8>, GpuError> {
        for (bytes, limit) in [(request.len(), REQUEST_BUF), (response_len, RESPONSE_BUF)] {
            if bytes > limit {
                return Err(GpuError::TooLarge { cmd, bytes, limit });
            }
        }
        self.request.write(0, request);
        // Stale bytes from an earlier reply must not pass for a new one.
        self.response.fill(0);
        let written = self.queue.run(
            &[
                Segment {
                    addr: self.request.phys(),
                    len: u32::try_from(request.len()).unwrap(),
                    device_writes: false,
                },
                Segment {
                    addr: self.response.phys(),
                    len: u32::try_from(response_len).unwrap(),
                    device_writes: true,
                },
            ],
            self.timeout,
        )?;
        let mut out = vec![0u8; (written as usize).min(response_len)];
        self.response.read(0, &mut out);
        if self.verbose {
            println!(
                "CTRL {cmd}: {} request bytes -> {written} response bytes, type {:#06x}",
                request.len(),
                header_type(&out)
            );
        }
        Ok(out)
    }

    /// Sends a fixed-size command and decodes a fixed-size response of type `want`.
    fn call<Req: IntoBytes + zerocopy::Immutable, Resp: FromBytes>(
        &mut self,
        cmd: &'static str,
        request: &Req,
        want: u32,
    ) -> Result<Resp, GpuError> {
        let bytes = self.exchange(cmd, request.as_bytes(), size_of::<Resp>())?;
        decode(cmd, &bytes, want)
    }

    /// GET_DISPLAY_INFO (a harmless command any virtio-gpu answers).
    pub fn display_info(&mut self) -> Result<WddmGpuRespDisplayInfo, GpuError> {
        let req = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_DISPLAY_INFO);
        self.call("GET_DISPLAY_INFO", &req, VIRTIO_GPU_RESP_OK_DISPLAY_INFO)
    }

    /// GET_CAPSET_INFO for capset `index`.
    pub fn capset_info(&mut self, index: u32) -> Result<WddmGpuRespCapsetInfo, GpuError> {
        let req = WddmGpuGetCapsetInfo {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
            capset_index: index,
            padding: 0,
        };
        self.call("GET_CAPSET_INFO", &req, VIRTIO_GPU_RESP_OK_CAPSET_INFO)
    }

    /// GET_CAPSET; returns the blob (everything after the response header).
    pub fn capset(&mut self, id: u32, version: u32, max_size: u32) -> Result<Vec<u8>, GpuError> {
        let cmd = "GET_CAPSET";
        let req = WddmGpuGetCapset {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET),
            capset_id: id,
            capset_version: version,
        };
        let hdr_len = size_of::<WddmGpuCtrlHdr>();
        let want_len = hdr_len.saturating_add(max_size as usize);
        let bytes = self.exchange(cmd, req.as_bytes(), want_len)?;
        check_header(cmd, &bytes, VIRTIO_GPU_RESP_OK_CAPSET)?;
        Ok(bytes[hdr_len..].to_vec())
    }

    /// A request answered with a bare OK_NODATA header (the context commands, RESET_ENGINE):
    /// `Ok(true)` for OK_NODATA, `Ok(false)` for a refusal (an error header).
    pub fn command(&mut self, cmd: &'static str, request: &[u8]) -> Result<bool, GpuError> {
        let bytes = self.exchange(cmd, request, size_of::<WddmGpuCtrlHdr>())?;
        Ok(header_type(&bytes) == VIRTIO_GPU_RESP_OK_NODATA)
    }

    /// Posts a SUBMIT_VIRTUAL; its answer is a [`WddmGpuRespSubmitVirtual`] when it ends.
    pub fn post_submit_virtual(
        &mut self,
        cmd: &WddmGpuCmdSubmitVirtual,
    ) -> Result<Ticket, GpuError> {
        self.post(
            "SUBMIT_VIRTUAL",
            cmd.as_bytes(),
            size_of::<WddmGpuRespSubmitVirtual>(),
        )
    }

    /// Runs a SUBMIT_VIRTUAL and decodes its answer (type, size and fence echo checked).
    pub fn submit_virtual(
        &mut self,
        cmd: &WddmGpuCmdSubmitVirtual,
    ) -> Result<WddmGpuRespSubmitVirtual, GpuError> {
        let bytes = self.exchange(
            "SUBMIT_VIRTUAL",
            cmd.as_bytes(),
            size_of::<WddmGpuRespSubmitVirtual>(),
        )?;
        decode_submit_virtual(cmd, &bytes)
    }

    /// Submits `cmd` and decodes the completion; the fence must be echoed and the status known.
    pub fn submit(&mut self, cmd: &WddmGpuCmdSubmit) -> Result<Completion, GpuError> {
        let bytes = self.exchange("SUBMIT", cmd.as_bytes(), size_of::<WddmGpuRespSubmit>())?;
        let done = decode_submit(cmd, &bytes)?;
        if self.verbose {
            println!(
                "SUBMIT dma {:#x} (segment {}) size {:#x} [{:#x}, {:#x}) -> {done}",
                cmd.dma_buffer_address,
                cmd.dma_buffer_segment_id,
                cmd.dma_buffer_size,
                cmd.start_offset,
                cmd.end_offset
            );
        }
        Ok(done)
    }
}

/// Decodes the answer to a SUBMIT_VIRTUAL: type and fence echo checked.
pub fn decode_submit_virtual(
    cmd: &WddmGpuCmdSubmitVirtual,
    bytes: &[u8],
) -> Result<WddmGpuRespSubmitVirtual, GpuError> {
    let resp: WddmGpuRespSubmitVirtual =
        decode("SUBMIT_VIRTUAL", bytes, WDDM_GPU_RESP_SUBMIT_VIRTUAL)?;
    if resp.submission_fence_id != cmd.submission_fence_id {
        return Err(GpuError::FenceMismatch {
            sent: cmd.submission_fence_id,
            got: resp.submission_fence_id,
        });
    }
    Ok(resp)
}

/// Decodes the answer to `cmd`: type, size, fence echo and status are checked.
pub fn decode_submit(cmd: &WddmGpuCmdSubmit, bytes: &[u8]) -> Result<Completion, GpuError> {
    let resp: WddmGpuRespSubmit = decode("SUBMIT", bytes, WDDM_GPU_RESP_SUBMIT)?;
    if resp.submission_fence_id != cmd.submission_fence_id {
        return Err(GpuError::FenceMismatch {
            sent: cmd.submission_fence_id,
            got: resp.submission_fence_id,
        });
    }
    let status = SubmitStatus::from_raw(resp.status).ok_or(GpuError::UnknownStatus(resp.status))?;
    Ok(Completion {
        fence: resp.submission_fence_id,
        status,
        packets_completed: resp.packets_completed,
        fault_packet_offset: resp.fault_packet_offset,
        fault_address: resp.fault_address,
        bytes_transferred: resp.bytes_transferred,
    })
}

/// Decodes the answer to a WAIT_EVENT.
pub fn decode_event(bytes: &[u8]) -> Result<WddmGpuRespEvent, GpuError> {
    decode("WAIT_EVENT", bytes, WDDM_GPU_RESP_EVENT)
}

/// Checks the header type and decodes a fixed-size response.
fn decode<Resp: FromBytes>(cmd: &'static str, bytes: &[u8], want: u32) -> Result<Resp, GpuError> {
    check_header(cmd, bytes, want)?;
    read_prefix(cmd, bytes)
}

/// The `T` at the start of a response to `cmd`.
fn read_prefix<T: FromBytes>(cmd: &'static str, bytes: &[u8]) -> Result<T, GpuError> {
    T::read_from_prefix(bytes)
        .map(|(value, _)| value)
        .map_err(|_| GpuError::ShortResponse {
            cmd,
            got: bytes.len(),
            need: size_of::<T>(),
        })
}

/// The type field of a response (0 when it is shorter than that).
fn header_type(bytes: &[u8]) -> u32 {
    bytes
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A response's header, whatever its type.
fn header_of(cmd: &'static str, bytes: &[u8]) -> Result<WddmGpuCtrlHdr, GpuError> {
    read_prefix(cmd, bytes)
}

/// Checks a response is at least a header of type `want`.
fn check_header(cmd: &'static str, bytes: &[u8], want: u32) -> Result<(), GpuError> {
    let hdr = header_of(cmd, bytes)?;
    if hdr.type_ != want {
        return Err(GpuError::ResponseType {
            cmd,
            got: hdr.type_,
            want,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks() {
        let ok = WddmGpuCtrlHdr::with_type(WDDM_GPU_RESP_SUBMIT);
        assert!(check_header("x", ok.as_bytes(), WDDM_GPU_RESP_SUBMIT).is_ok());
        assert!(matches!(
            check_header("x", ok.as_bytes(), VIRTIO_GPU_RESP_OK_CAPSET),
            Err(GpuError::ResponseType {
                got: WDDM_GPU_RESP_SUBMIT,
                ..
            })
        ));
        assert!(matches!(
            check_header("x", &ok.as_bytes()[..10], WDDM_GPU_RESP_SUBMIT),
            Err(GpuError::ShortResponse { got: 10, .. })
        ));
    }

    #[test]
    fn submit_command_is_a_paging_submission() {
        let cmd = submit_command(0x1000, 4096, 0, 64, 7);
        assert_eq!(cmd.as_bytes().len(), 64);
        assert_eq!(cmd.hdr.type_, WDDM_GPU_CMD_SUBMIT);
        assert_eq!(cmd.flags, WDDM_GPU_SUBMIT_FLAG_PAGING);
        assert_eq!(
            (cmd.dma_buffer_segment_id, cmd.reserved, cmd.node_ordinal),
            (0, 0, 0)
        );
    }
}
