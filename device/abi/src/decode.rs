//! One typed reading of a paging packet ([`crate::packet`]): which kind an opcode names
//! ([`PacketKind`]) and the packet's struct ([`Packet`]). The device executes, weighs and counts
//! packets through this one decode, so a new packet kind is added here, once.
//!
//! Decoding copies the struct out of the bytes (a zerocopy read of at most a few dozen bytes)
//! and never allocates.

use std::fmt;
use std::mem::size_of;

use zerocopy::FromBytes;

use crate::packet::{
    WddmGpuPacketCopyPageTableEntries, WddmGpuPacketFence, WddmGpuPacketFill,
    WddmGpuPacketFlushTlb, WddmGpuPacketHeader, WddmGpuPacketMapAperture,
    WddmGpuPacketMapAperture2, WddmGpuPacketNotifyResidency, WddmGpuPacketSegmentAccess,
    WddmGpuPacketSignalMonitoredFence, WddmGpuPacketTransfer, WddmGpuPacketUnmapAperture,
    WddmGpuPacketUpdateContextAllocation, WddmGpuPacketUpdatePageTable, WddmGpuPacketVirtualFill,
    WddmGpuPacketVirtualTransfer, WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES, WDDM_GPU_OP_DISCARD_CONTENT,
    WDDM_GPU_OP_FENCE, WDDM_GPU_OP_FILL, WDDM_GPU_OP_FLUSH_TLB, WDDM_GPU_OP_MAP_APERTURE,
    WDDM_GPU_OP_MAP_APERTURE2, WDDM_GPU_OP_NOTIFY_RESIDENCY, WDDM_GPU_OP_READ_PHYSICAL,
    WDDM_GPU_OP_SIGNAL_MONITORED_FENCE, WDDM_GPU_OP_TRANSFER, WDDM_GPU_OP_UNMAP_APERTURE,
    WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION, WDDM_GPU_OP_UPDATE_PAGE_TABLE, WDDM_GPU_OP_VIRTUAL_FILL,
    WDDM_GPU_OP_VIRTUAL_TRANSFER, WDDM_GPU_OP_WRITE_PHYSICAL,
};

/// One kind per opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// [`WDDM_GPU_OP_TRANSFER`].
    Transfer,
    /// [`WDDM_GPU_OP_FILL`].
    Fill,
    /// [`WDDM_GPU_OP_DISCARD_CONTENT`].
    DiscardContent,
    /// [`WDDM_GPU_OP_READ_PHYSICAL`].
    ReadPhysical,
    /// [`WDDM_GPU_OP_WRITE_PHYSICAL`].
    WritePhysical,
    /// [`WDDM_GPU_OP_MAP_APERTURE`].
    MapAperture,
    /// [`WDDM_GPU_OP_MAP_APERTURE2`].
    MapAperture2,
    /// [`WDDM_GPU_OP_UNMAP_APERTURE`].
    UnmapAperture,
    /// [`WDDM_GPU_OP_FENCE`].
    Fence,
    /// [`WDDM_GPU_OP_UPDATE_PAGE_TABLE`].
    UpdatePageTable,
    /// [`WDDM_GPU_OP_FLUSH_TLB`].
    FlushTlb,
    /// [`WDDM_GPU_OP_VIRTUAL_TRANSFER`].
    VirtualTransfer,
    /// [`WDDM_GPU_OP_VIRTUAL_FILL`].
    VirtualFill,
    /// [`WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES`].
    CopyPageTableEntries,
    /// [`WDDM_GPU_OP_SIGNAL_MONITORED_FENCE`].
    SignalMonitoredFence,
    /// [`WDDM_GPU_OP_NOTIFY_RESIDENCY`].
    NotifyResidency,
    /// [`WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION`].
    UpdateContextAllocation,
}

impl PacketKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [PacketKind; 17] = [
        PacketKind::Transfer,
        PacketKind::Fill,
        PacketKind::DiscardContent,
        PacketKind::ReadPhysical,
        PacketKind::WritePhysical,
        PacketKind::MapAperture,
        PacketKind::MapAperture2,
        PacketKind::UnmapAperture,
        PacketKind::Fence,
        PacketKind::UpdatePageTable,
        PacketKind::FlushTlb,
        PacketKind::VirtualTransfer,
        PacketKind::VirtualFill,
        PacketKind::CopyPageTableEntries,
        PacketKind::SignalMonitoredFence,
        PacketKind::NotifyResidency,
        PacketKind::UpdateContextAllocation,
    ];

    /// The kinds of the WDDM 1.x memory model, which every layout runs (the others, the
    /// WDDM 2.x GpuMmu packets, need a layout with `[gpummu]`): the first nine of [`Self::ALL`].
    pub const PHYSICAL: [PacketKind; 9] = *Self::ALL
        .first_chunk()
        .expect("ALL lists the physical kinds first");

    /// The kind `opcode` names, if any.
    pub fn from_opcode(opcode: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.opcode() == opcode)
    }

    /// `WDDM_GPU_OP_*`.
    pub fn opcode(self) -> u16 {
        match self {
            PacketKind::Transfer => WDDM_GPU_OP_TRANSFER,
            PacketKind::Fill => WDDM_GPU_OP_FILL,
            PacketKind::DiscardContent => WDDM_GPU_OP_DISCARD_CONTENT,
            PacketKind::ReadPhysical => WDDM_GPU_OP_READ_PHYSICAL,
            PacketKind::WritePhysical => WDDM_GPU_OP_WRITE_PHYSICAL,
            PacketKind::MapAperture => WDDM_GPU_OP_MAP_APERTURE,
            PacketKind::MapAperture2 => WDDM_GPU_OP_MAP_APERTURE2,
            PacketKind::UnmapAperture => WDDM_GPU_OP_UNMAP_APERTURE,
            PacketKind::Fence => WDDM_GPU_OP_FENCE,
            PacketKind::UpdatePageTable => WDDM_GPU_OP_UPDATE_PAGE_TABLE,
            PacketKind::FlushTlb => WDDM_GPU_OP_FLUSH_TLB,
            PacketKind::VirtualTransfer => WDDM_GPU_OP_VIRTUAL_TRANSFER,
            PacketKind::VirtualFill => WDDM_GPU_OP_VIRTUAL_FILL,
            PacketKind::CopyPageTableEntries => WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES,
            PacketKind::SignalMonitoredFence => WDDM_GPU_OP_SIGNAL_MONITORED_FENCE,
            PacketKind::NotifyResidency => WDDM_GPU_OP_NOTIFY_RESIDENCY,
            PacketKind::UpdateContextAllocation => WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION,
        }
    }

    /// The name reports and statistics use: `transfer`, `fill`, ..., `fence`.
    pub const fn name(self) -> &'static str {
        match self {
            PacketKind::Transfer => "transfer",
            PacketKind::Fill => "fill",
            PacketKind::DiscardContent => "discard_content",
            PacketKind::ReadPhysical => "read_physical",
            PacketKind::WritePhysical => "write_physical",
            PacketKind::MapAperture => "map_aperture",
            PacketKind::MapAperture2 => "map_aperture2",
            PacketKind::UnmapAperture => "unmap_aperture",
            PacketKind::Fence => "fence",
            PacketKind::UpdatePageTable => "update_page_table",
            PacketKind::FlushTlb => "flush_tlb",
            PacketKind::VirtualTransfer => "virtual_transfer",
            PacketKind::VirtualFill => "virtual_fill",
            PacketKind::CopyPageTableEntries => "copy_page_table_entries",
            PacketKind::SignalMonitoredFence => "signal_monitored_fence",
            PacketKind::NotifyResidency => "notify_residency",
            PacketKind::UpdateContextAllocation => "update_context_allocation",
        }
    }

    /// Bytes of the kind's struct: the least a packet of this kind may be.
    pub fn struct_size(self) -> usize {
        match self {
            PacketKind::Transfer => size_of::<WddmGpuPacketTransfer>(),
            PacketKind::Fill => size_of::<WddmGpuPacketFill>(),
            PacketKind::DiscardContent | PacketKind::ReadPhysical | PacketKind::WritePhysical => {
                size_of::<WddmGpuPacketSegmentAccess>()
            }
            PacketKind::MapAperture => size_of::<WddmGpuPacketMapAperture>(),
            PacketKind::MapAperture2 => size_of::<WddmGpuPacketMapAperture2>(),
            PacketKind::UnmapAperture => size_of::<WddmGpuPacketUnmapAperture>(),
            PacketKind::Fence => size_of::<WddmGpuPacketFence>(),
            PacketKind::UpdatePageTable => size_of::<WddmGpuPacketUpdatePageTable>(),
            PacketKind::FlushTlb => size_of::<WddmGpuPacketFlushTlb>(),
            PacketKind::VirtualTransfer => size_of::<WddmGpuPacketVirtualTransfer>(),
            PacketKind::VirtualFill => size_of::<WddmGpuPacketVirtualFill>(),
            PacketKind::CopyPageTableEntries => size_of::<WddmGpuPacketCopyPageTableEntries>(),
            PacketKind::SignalMonitoredFence => size_of::<WddmGpuPacketSignalMonitoredFence>(),
            PacketKind::NotifyResidency => size_of::<WddmGpuPacketNotifyResidency>(),
            PacketKind::UpdateContextAllocation => {
                size_of::<WddmGpuPacketUpdateContextAllocation>()
            }
        }
    }

    /// Why a packet of this kind is refused when it is smaller than its struct.
    fn too_small(self) -> &'static str {
        match self {
            PacketKind::Transfer => "smaller than a TRANSFER packet",
            PacketKind::Fill => "smaller than a FILL packet",
            PacketKind::DiscardContent | PacketKind::ReadPhysical | PacketKind::WritePhysical => {
                "smaller than a segment-access packet"
            }
            PacketKind::MapAperture => "smaller than a MAP_APERTURE packet",
            PacketKind::MapAperture2 => "smaller than a MAP_APERTURE2 packet",
            PacketKind::UnmapAperture => "smaller than an UNMAP_APERTURE packet",
            PacketKind::Fence => "smaller than a FENCE packet",
            PacketKind::UpdatePageTable => "smaller than an UPDATE_PAGE_TABLE packet",
            PacketKind::FlushTlb => "smaller than a FLUSH_TLB packet",
            PacketKind::VirtualTransfer => "smaller than a VIRTUAL_TRANSFER packet",
            PacketKind::VirtualFill => "smaller than a VIRTUAL_FILL packet",
            PacketKind::CopyPageTableEntries => "smaller than a COPY_PAGE_TABLE_ENTRIES packet",
            PacketKind::SignalMonitoredFence => "smaller than a SIGNAL_MONITORED_FENCE packet",
            PacketKind::NotifyResidency => "smaller than a NOTIFY_RESIDENCY packet",
            PacketKind::UpdateContextAllocation => {
                "smaller than an UPDATE_CONTEXT_ALLOCATION packet"
            }
        }
    }
}

/// A decoded packet: its struct, copied out of the bytes it was decoded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// TRANSFER.
    Transfer(WddmGpuPacketTransfer),
    /// FILL.
    Fill(WddmGpuPacketFill),
    /// DISCARD_CONTENT.
    DiscardContent(WddmGpuPacketSegmentAccess),
    /// READ_PHYSICAL.
    ReadPhysical(WddmGpuPacketSegmentAccess),
    /// WRITE_PHYSICAL.
    WritePhysical(WddmGpuPacketSegmentAccess),
    /// MAP_APERTURE_SEGMENT.
    MapAperture(WddmGpuPacketMapAperture),
    /// MAP_APERTURE_SEGMENT2.
    MapAperture2(WddmGpuPacketMapAperture2),
    /// UNMAP_APERTURE_SEGMENT.
    UnmapAperture(WddmGpuPacketUnmapAperture),
    /// FENCE.
    Fence(WddmGpuPacketFence),
    /// UPDATE_PAGE_TABLE.
    UpdatePageTable(WddmGpuPacketUpdatePageTable),
    /// FLUSH_TLB.
    FlushTlb(WddmGpuPacketFlushTlb),
    /// VIRTUAL_TRANSFER.
    VirtualTransfer(WddmGpuPacketVirtualTransfer),
    /// VIRTUAL_FILL.
    VirtualFill(WddmGpuPacketVirtualFill),
    /// COPY_PAGE_TABLE_ENTRIES.
    CopyPageTableEntries(WddmGpuPacketCopyPageTableEntries),
    /// SIGNAL_MONITORED_FENCE.
    SignalMonitoredFence(WddmGpuPacketSignalMonitoredFence),
    /// NOTIFY_RESIDENCY.
    NotifyResidency(WddmGpuPacketNotifyResidency),
    /// UPDATE_CONTEXT_ALLOCATION.
    UpdateContextAllocation(WddmGpuPacketUpdateContextAllocation),
}

/// Why bytes do not decode as a packet, in the order [`Packet::decode`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than a [`WddmGpuPacketHeader`].
    HeaderTruncated,
    /// The header's `flags` are set; no opcode defines any yet.
    ReservedHeaderFlags(u16),
    /// The opcode names no packet kind.
    UnknownOpcode(u16),
    /// The packet is smaller than its kind's struct.
    BodyTooSmall {
        /// The kind the opcode names.
        kind: PacketKind,
        /// The size the header declares.
        size: u32,
    },
}

impl DecodeError {
    /// A short fixed description: which rule the bytes broke.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::HeaderTruncated => "truncated",
            DecodeError::ReservedHeaderFlags(_) => "packet header flags",
            DecodeError::UnknownOpcode(_) => "unknown opcode",
            DecodeError::BodyTooSmall { kind, .. } => kind.too_small(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::HeaderTruncated => write!(f, "packet header truncated"),
            DecodeError::ReservedHeaderFlags(flags) => {
                write!(f, "reserved packet header flags {flags:#x} are set")
            }
            DecodeError::UnknownOpcode(opcode) => write!(f, "unknown opcode {opcode}"),
            DecodeError::BodyTooSmall { size, .. } => {
                write!(f, "packet of {size} bytes is {}", self.reason())
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads the header at the start of `packet`.
pub fn read_header(packet: &[u8]) -> Result<WddmGpuPacketHeader, DecodeError> {
    WddmGpuPacketHeader::read_from_prefix(packet)
        .map(|(header, _)| header)
        .map_err(|_| DecodeError::HeaderTruncated)
}

/// Reads the struct of `kind` from the start of `packet`.
fn read<T: FromBytes>(
    packet: &[u8],
    header: &WddmGpuPacketHeader,
    kind: PacketKind,
) -> Result<T, DecodeError> {
    T::read_from_prefix(packet)
        .map(|(body, _)| body)
        .map_err(|_| DecodeError::BodyTooSmall {
            kind,
            size: header.size,
        })
}

impl Packet {
    /// Decodes a whole packet (header first; the bytes end where the packet does): the header
    /// is present, its flags are clear, its opcode is known, and the bytes hold the kind's
    /// struct, checked in that order. Field values are not checked.
    pub fn decode(packet: &[u8]) -> Result<Self, DecodeError> {
        let header = read_header(packet)?;
        Self::checked(&header, Self::read_body(&header, packet))
    }

    /// What [`Self::decode`] answers for a body already read with [`Self::read_body`]: the
    /// header's flags are checked first. The device reads each packet's body once, weighs what
    /// it declares, then executes this.
    pub fn checked(
        header: &WddmGpuPacketHeader,
        body: Result<Self, DecodeError>,
    ) -> Result<Self, DecodeError> {
        if header.flags != 0 {
            return Err(DecodeError::ReservedHeaderFlags(header.flags));
        }
        body
    }

    /// Reads the struct `header`'s opcode names, without the header-flags check: for reading
    /// what a packet declares before it is checked.
    pub fn read_body(header: &WddmGpuPacketHeader, packet: &[u8]) -> Result<Self, DecodeError> {
        let kind = PacketKind::from_opcode(header.opcode)
            .ok_or(DecodeError::UnknownOpcode(header.opcode))?;
        Ok(match kind {
            PacketKind::Transfer => Packet::Transfer(read(packet, header, kind)?),
            PacketKind::Fill => Packet::Fill(read(packet, header, kind)?),
            PacketKind::DiscardContent => Packet::DiscardContent(read(packet, header, kind)?),
            PacketKind::ReadPhysical => Packet::ReadPhysical(read(packet, header, kind)?),
            PacketKind::WritePhysical => Packet::WritePhysical(read(packet, header, kind)?),
            PacketKind::MapAperture => Packet::MapAperture(read(packet, header, kind)?),
            PacketKind::MapAperture2 => Packet::MapAperture2(read(packet, header, kind)?),
            PacketKind::UnmapAperture => Packet::UnmapAperture(read(packet, header, kind)?),
            PacketKind::Fence => Packet::Fence(read(packet, header, kind)?),
            PacketKind::UpdatePageTable => Packet::UpdatePageTable(read(packet, header, kind)?),
            PacketKind::FlushTlb => Packet::FlushTlb(read(packet, header, kind)?),
            PacketKind::VirtualTransfer => Packet::VirtualTransfer(read(packet, header, kind)?),
            PacketKind::VirtualFill => Packet::VirtualFill(read(packet, header, kind)?),
            PacketKind::CopyPageTableEntries => {
                Packet::CopyPageTableEntries(read(packet, header, kind)?)
            }
            PacketKind::SignalMonitoredFence => {
                Packet::SignalMonitoredFence(read(packet, header, kind)?)
            }
            PacketKind::NotifyResidency => Packet::NotifyResidency(read(packet, header, kind)?),
            PacketKind::UpdateContextAllocation => {
                Packet::UpdateContextAllocation(read(packet, header, kind)?)
            }
        })
    }

    /// The packet's kind.
    pub fn kind(&self) -> PacketKind {
        match self {
            Packet::Transfer(_) => PacketKind::Transfer,
            Packet::Fill(_) => PacketKind::Fill,
            Packet::DiscardContent(_) => PacketKind::DiscardContent,
            Packet::ReadPhysical(_) => PacketKind::ReadPhysical,
            Packet::WritePhysical(_) => PacketKind::WritePhysical,
            Packet::MapAperture(_) => PacketKind::MapAperture,
            Packet::MapAperture2(_) => PacketKind::MapAperture2,
            Packet::UnmapAperture(_) => PacketKind::UnmapAperture,
            Packet::Fence(_) => PacketKind::Fence,
            Packet::UpdatePageTable(_) => PacketKind::UpdatePageTable,
            Packet::FlushTlb(_) => PacketKind::FlushTlb,
            Packet::VirtualTransfer(_) => PacketKind::VirtualTransfer,
            Packet::VirtualFill(_) => PacketKind::VirtualFill,
            Packet::CopyPageTableEntries(_) => PacketKind::CopyPageTableEntries,
            Packet::SignalMonitoredFence(_) => PacketKind::SignalMonitoredFence,
            Packet::NotifyResidency(_) => PacketKind::NotifyResidency,
            Packet::UpdateContextAllocation(_) => PacketKind::UpdateContextAllocation,
        }
    }

    /// The packet's header.
    pub fn header(&self) -> &WddmGpuPacketHeader {
        match self {
            Packet::Transfer(p) => &p.header,
            Packet::Fill(p) => &p.header,
            Packet::DiscardContent(p) | Packet::ReadPhysical(p) | Packet::WritePhysical(p) => {
                &p.header
            }
            Packet::MapAperture(p) => &p.header,
            Packet::MapAperture2(p) => &p.header,
            Packet::UnmapAperture(p) => &p.header,
            Packet::Fence(p) => &p.header,
            Packet::UpdatePageTable(p) => &p.header,
            Packet::FlushTlb(p) => &p.header,
            Packet::VirtualTransfer(p) => &p.header,
            Packet::VirtualFill(p) => &p.header,
            Packet::CopyPageTableEntries(p) => &p.header,
            Packet::SignalMonitoredFence(p) => &p.header,
            Packet::NotifyResidency(p) => &p.header,
            Packet::UpdateContextAllocation(p) => &p.header,
        }
    }
}

#[cfg(test)]
mod tests;
