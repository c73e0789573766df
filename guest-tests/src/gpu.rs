//! The virtio-gpu control queue as this device speaks it: capset queries and WDDM submissions.
//! Every reply is checked (length, type, fence echo, status value) before use.

use std::mem::size_of;
use std::time::Duration;

use thiserror::Error;
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo, WddmGpuRespCapsetInfo,
    WddmGpuRespDisplayInfo, VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO,
    VIRTIO_GPU_CMD_GET_DISPLAY_INFO, VIRTIO_GPU_RESP_OK_CAPSET, VIRTIO_GPU_RESP_OK_CAPSET_INFO,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO, WDDM_GPU_CMD_SUBMIT, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::submit::{
    SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit, WDDM_GPU_SUBMIT_FLAG_PAGING,
};
use zerocopy::{FromBytes, IntoBytes};

use crate::dma::{DmaArena, DmaBuf, DmaError};
use crate::virtio::split_queue::{QueueError, Segment, SplitQueue};

/// Bytes reserved for one request.
const REQUEST_BUF: usize = 4096;
/// Bytes reserved for one response (bounds the capset size this driver accepts).
const RESPONSE_BUF: usize = 64 << 10;

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
    /// The completion status is not a known `SubmitStatus`.
    #[error("submit: unknown status {0}")]
    UnknownStatus(u32),
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

/// The control queue with its request and response buffers.
pub struct GpuControl {
    queue: SplitQueue,
    request: DmaBuf,
    response: DmaBuf,
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
            timeout,
            verbose: false,
        })
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
                    len: request.len() as u32,
                    device_writes: false,
                },
                Segment {
                    addr: self.response.phys(),
                    len: response_len as u32,
                    device_writes: true,
                },
            ],
            self.timeout,
        )?;
        let mut out = vec![0u8; (written as usize).min(response_len)];
        self.response.read(0, &mut out);
        if self.verbose {
            let type_ = out
                .get(..4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            println!(
                "CTRL {cmd}: {} request bytes -> {written} response bytes, type {type_:#06x}",
                request.len()
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
        check_header(cmd, &bytes, want)?;
        Resp::read_from_prefix(&bytes)
            .map(|(resp, _)| resp)
            .map_err(|_| GpuError::ShortResponse {
                cmd,
                got: bytes.len(),
                need: size_of::<Resp>(),
            })
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

    /// Submits `cmd` and decodes the completion; the fence must be echoed and the status known.
    pub fn submit(&mut self, cmd: &WddmGpuCmdSubmit) -> Result<Completion, GpuError> {
        let resp: WddmGpuRespSubmit = self.call("SUBMIT", cmd, WDDM_GPU_RESP_SUBMIT)?;
        if resp.submission_fence_id != cmd.submission_fence_id {
            return Err(GpuError::FenceMismatch {
                sent: cmd.submission_fence_id,
                got: resp.submission_fence_id,
            });
        }
        let status =
            SubmitStatus::from_raw(resp.status).ok_or(GpuError::UnknownStatus(resp.status))?;
        let done = Completion {
            fence: resp.submission_fence_id,
            status,
            packets_completed: resp.packets_completed,
            fault_packet_offset: resp.fault_packet_offset,
            fault_address: resp.fault_address,
            bytes_transferred: resp.bytes_transferred,
        };
        if self.verbose {
            println!(
                "SUBMIT dma {:#x} size {:#x} [{:#x}, {:#x}) -> {done}",
                cmd.dma_buffer_address, cmd.dma_buffer_size, cmd.start_offset, cmd.end_offset
            );
        }
        Ok(done)
    }
}

/// Checks a response is at least a header of type `want`.
fn check_header(cmd: &'static str, bytes: &[u8], want: u32) -> Result<(), GpuError> {
    let (hdr, _) =
        WddmGpuCtrlHdr::read_from_prefix(bytes).map_err(|_| GpuError::ShortResponse {
            cmd,
            got: bytes.len(),
            need: size_of::<WddmGpuCtrlHdr>(),
        })?;
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
