//! Why a submission stops before its end: a [`Fault`] (the guest's command or packet is wrong;
//! recorded and reported) or an [`Interruption`] (the device stopped it: not a fault). Every
//! [`Stop`] maps to one wire [`SubmitStatus`].

use wddm_gpu_abi::decode::DecodeError;
use wddm_gpu_abi::submit::SubmitStatus;

use crate::layout::ResolveError;
use crate::memory::gart::GartError;
use crate::mmu::fault::MmuFault;

/// What was wrong with a submission: the device records it in the fault ring and reports it as
/// an event. Each maps to one wire [`SubmitStatus`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The command's own fields are inconsistent.
    #[error("bad submit command: {0}")]
    BadCommand(&'static str),
    /// The DMA buffer is not in guest RAM.
    #[error("DMA buffer {address:#x}+{size:#x} is not guest RAM")]
    BadDmaBuffer {
        /// Buffer address.
        address: u64,
        /// Buffer size.
        size: u32,
    },
    /// A packet header is malformed.
    #[error("bad packet header (size {size}, {reason})")]
    BadPacketHeader {
        /// Size the header claimed.
        size: u32,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// Unknown opcode.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    /// No such segment.
    #[error("segment {0} does not exist")]
    BadSegment(u32),
    /// Range outside its segment.
    #[error("range {address:#x}+{length:#x} is outside segment {segment}")]
    SegmentRange {
        /// Segment id.
        segment: u32,
        /// GPU address.
        address: u64,
        /// Length.
        length: u64,
    },
    /// A frame list is unusable as a whole.
    #[error("frame list at {address:#x}: {reason}")]
    BadFrameList {
        /// Frame-list address.
        address: u64,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A listed frame is not guest RAM.
    #[error("frame at {address:#x} is not guest RAM")]
    FrameNotInRam {
        /// Physical address of the frame's bytes in use.
        address: u64,
    },
    /// A listed frame is in the VRAM BAR.
    #[error("frame at {address:#x} is inside the VRAM BAR")]
    FrameInVram {
        /// Physical address inside the BAR.
        address: u64,
    },
    /// Arithmetic on guest numbers overflowed.
    #[error("length {0:#x} overflows")]
    LengthOverflow(u64),
    /// A reserved field is set.
    #[error("reserved field {0} is not zero")]
    ReservedField(&'static str),
    /// Valid but not supported by this device version.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// An aperture page in the range was never mapped.
    #[error("aperture segment {segment} page {page:#x} was never mapped")]
    UnmappedAperture {
        /// Aperture segment id.
        segment: u32,
        /// The page.
        page: u64,
    },
    /// The packet needs the other kind of segment (or a segment instead of a frame list).
    #[error("wrong segment kind: {0}")]
    WrongSegmentKind(&'static str),
    /// A GPU virtual address did not translate.
    #[error("page fault: {0}")]
    Page(MmuFault),
    /// The context the packet needs does not exist.
    #[error("bad context: {0}")]
    BadContext(&'static str),
    /// A fault injection made the packet fault with this status (the packet did not run).
    #[error("injected fault ({})", .0.name())]
    Injected(SubmitStatus),
}

/// The device stopping a running submission from outside, between chunks and packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Interruption {
    /// A PREEMPT.
    #[error("preempted")]
    Preempted,
    /// A reset (the driver's, the frontend's, or the backend exiting).
    #[error("dropped by a reset")]
    Reset,
}

/// Why the engine stopped a submission before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    /// The guest's command or packet is wrong.
    #[error(transparent)]
    Fault(#[from] Fault),
    /// The device stopped it; nothing is recorded.
    #[error(transparent)]
    Interrupted(#[from] Interruption),
}

/// A packet that stopped before its end: why, and how many of its bytes it had moved, in its
/// own order, before it stopped. Those bytes stay written (a copy engine that faults mid-copy
/// has written what came before the faulting page); the submission's `bytes_transferred`
/// counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// Why.
    pub stop: Stop,
    /// Bytes of the packet moved before it stopped (0 when it stopped before moving any).
    pub done: u64,
}

impl Stopped {
    /// The same stop with `earlier` bytes of the packet moved before the part `self` counts.
    pub fn after(self, earlier: u64) -> Self {
        Self {
            done: earlier.saturating_add(self.done),
            ..self
        }
    }
}

impl From<Stop> for Stopped {
    fn from(stop: Stop) -> Self {
        Self { stop, done: 0 }
    }
}

impl From<Fault> for Stopped {
    fn from(fault: Fault) -> Self {
        Stop::from(fault).into()
    }
}

impl From<Interruption> for Stopped {
    fn from(interruption: Interruption) -> Self {
        Stop::from(interruption).into()
    }
}

impl Stop {
    /// This stop, reached after `done` bytes of the packet moved.
    pub fn after(self, done: u64) -> Stopped {
        Stopped { stop: self, done }
    }

    /// The wire status.
    pub fn status(&self) -> SubmitStatus {
        match self {
            Stop::Fault(fault) => fault.status(),
            Stop::Interrupted(Interruption::Preempted) => SubmitStatus::Preempted,
            Stop::Interrupted(Interruption::Reset) => SubmitStatus::Reset,
        }
    }

    /// The address a fault concerns, or 0.
    pub fn address(&self) -> u64 {
        match self {
            Stop::Fault(fault) => fault.address(),
            Stop::Interrupted(_) => 0,
        }
    }
}

impl Fault {
    /// The wire status.
    pub fn status(&self) -> SubmitStatus {
        match self {
            Fault::BadCommand(_) => SubmitStatus::BadCommand,
            Fault::BadDmaBuffer { .. } => SubmitStatus::BadDmaBuffer,
            Fault::BadPacketHeader { .. } => SubmitStatus::BadPacketHeader,
            Fault::UnknownOpcode(_) => SubmitStatus::UnknownOpcode,
            Fault::BadSegment(_) => SubmitStatus::BadSegment,
            Fault::SegmentRange { .. } => SubmitStatus::SegmentRange,
            Fault::BadFrameList { .. } => SubmitStatus::BadFrameList,
            Fault::FrameNotInRam { .. } => SubmitStatus::FrameNotInRam,
            Fault::FrameInVram { .. } => SubmitStatus::FrameInVram,
            Fault::LengthOverflow(_) => SubmitStatus::LengthOverflow,
            Fault::ReservedField(_) => SubmitStatus::ReservedField,
            Fault::Unsupported(_) => SubmitStatus::Unsupported,
            Fault::UnmappedAperture { .. } => SubmitStatus::UnmappedAperture,
            Fault::WrongSegmentKind(_) => SubmitStatus::WrongSegmentKind,
            Fault::Page(_) => SubmitStatus::PageFault,
            Fault::BadContext(_) => SubmitStatus::BadContext,
            Fault::Injected(status) => *status,
        }
    }

    /// The address the fault concerns, or 0.
    pub fn address(&self) -> u64 {
        match *self {
            Fault::BadDmaBuffer { address, .. }
            | Fault::SegmentRange { address, .. }
            | Fault::BadFrameList { address, .. }
            | Fault::FrameNotInRam { address }
            | Fault::FrameInVram { address } => address,
            Fault::UnmappedAperture { page, .. } => page << wddm_gpu_abi::WDDM_GPU_PAGE_SHIFT,
            Fault::Page(fault) => fault.address,
            _ => 0,
        }
    }
}

/// A packet that does not decode is refused with the reason the engine has always given.
impl From<DecodeError> for Fault {
    fn from(error: DecodeError) -> Self {
        match error {
            DecodeError::HeaderTruncated => Fault::BadPacketHeader {
                size: 0,
                reason: error.reason(),
            },
            DecodeError::ReservedHeaderFlags(_) => Fault::ReservedField(error.reason()),
            DecodeError::UnknownOpcode(opcode) => Fault::UnknownOpcode(opcode),
            DecodeError::BodyTooSmall { size, .. } => Fault::BadPacketHeader {
                size,
                reason: error.reason(),
            },
        }
    }
}

impl From<GartError> for Fault {
    fn from(error: GartError) -> Self {
        match error {
            GartError::NotAnAperture(_) => {
                Fault::WrongSegmentKind("the segment is not an aperture")
            }
            GartError::OutOfRange {
                segment,
                first,
                count,
            } => Fault::SegmentRange {
                segment,
                address: first << wddm_gpu_abi::WDDM_GPU_PAGE_SHIFT,
                length: count << wddm_gpu_abi::WDDM_GPU_PAGE_SHIFT,
            },
            GartError::Unmapped { segment, page } => Fault::UnmappedAperture { segment, page },
        }
    }
}

impl From<ResolveError> for Fault {
    fn from(error: ResolveError) -> Self {
        match error {
            ResolveError::NoSuchSegment(id) => Fault::BadSegment(id),
            ResolveError::Overflow { length, .. } => Fault::LengthOverflow(length),
            ResolveError::OutOfRange {
                segment,
                address,
                length,
            } => Fault::SegmentRange {
                segment,
                address,
                length,
            },
        }
    }
}
