//! Guest system memory as frame lists and DMA buffers may use it: every region of the
//! frontend's memory table except the VRAM window (which is device memory, not RAM).

use std::ops::Range;

use vm_memory::bitmap::BitmapSlice;
use vm_memory::{
    Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress,
    VolatileMemory, VolatileSlice,
};

use super::capture::{ReadCapture, ReadKind, Store};
use crate::support::span::Span;

/// Why a guest range is not usable as system memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RamError {
    /// `address + length` overflows.
    #[error("range {address:#x}+{length:#x} overflows")]
    Overflow {
        /// Start.
        address: u64,
        /// Length.
        length: u64,
    },
    /// Some byte of the range is not backed by the memory table.
    #[error("{address:#x} is not guest RAM")]
    NotRam {
        /// First address found outside RAM.
        address: u64,
    },
    /// Some byte of the range is in the VRAM BAR.
    #[error("{address:#x} is inside the VRAM BAR")]
    InVram {
        /// First address found inside the VRAM window.
        address: u64,
    },
}

/// Proof that [`GuestRam::check`] found a span to be guest RAM outside the VRAM window (only
/// this module makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InRam(());

/// Bytes that were checked as guest RAM: `address + length` fits in 64 bits, so its arithmetic
/// needs no overflow checks. The memory table may change after the check; the copy that finally
/// slices the bytes looks them up again.
pub type RamRange = Span<InRam>;

impl RamRange {
    /// No bytes.
    pub const EMPTY: RamRange = Span::empty(InRam(()));

    /// Bytes a memory module checked before, directly or as part of checked frames (a frame
    /// list, the GART's entries); `None` if they would run past 64 bits.
    #[inline]
    pub(in crate::memory) fn checked_before(address: u64, length: u64) -> Option<Self> {
        Span::new(InRam(()), address, length)
    }
}

/// Guest RAM with the VRAM window excluded.
pub struct GuestRam<'a, M> {
    mem: &'a M,
    vram_window: Option<Range<u64>>,
    /// Where the engine's reads are kept with `--record`; `None` otherwise (one branch a read).
    capture: Option<&'a ReadCapture>,
}

impl<'a, M: GuestMemoryBackend> GuestRam<'a, M> {
    /// Wraps a memory table; `vram_window` is where the VRAM file appears in it.
    pub fn new(mem: &'a M, vram_window: Option<Range<u64>>) -> Self {
        Self {
            mem,
            vram_window,
            capture: None,
        }
    }

    /// The same RAM, keeping what [`Self::read`] and [`Self::read_u64`] read (and what the
    /// engine reads through slices and from VRAM, which it hands over itself) in `capture`.
    pub fn recording(self, capture: Option<&'a ReadCapture>) -> Self {
        Self { capture, ..self }
    }

    /// Where reads are kept, when recording.
    #[inline]
    pub fn capture(&self) -> Option<&'a ReadCapture> {
        self.capture
    }

    /// Checks that `[address, address + length)` is entirely guest RAM.
    pub fn check(&self, address: u64, length: u64) -> Result<RamRange, RamError> {
        let end = self.outside_vram(address, length)?;
        let range =
            Span::new(InRam(()), address, length).ok_or(RamError::Overflow { address, length })?;
        let mut cursor = address;
        while cursor < end {
            let region = self
                .mem
                .find_region(GuestAddress(cursor))
                .ok_or(RamError::NotRam { address: cursor })?;
            cursor = region.start_addr().0.saturating_add(region.len());
        }
        Ok(range)
    }

    /// [`Self::check`], without a memory-table lookup when the range lies inside `known` (the
    /// extent an earlier call found, or empty), which it sets to the extent of `address` after
    /// a lookup: a run of frames or of a line's pages mostly lies in one extent.
    #[inline]
    pub fn check_within(
        &self,
        known: &mut Range<u64>,
        address: u64,
        length: u64,
    ) -> Result<RamRange, RamError> {
        let overflow = RamError::Overflow { address, length };
        let end = address.checked_add(length).ok_or(overflow)?;
        if known.start <= address && end <= known.end {
            return Span::new(InRam(()), address, length).ok_or(overflow);
        }
        let range = self.check(address, length)?;
        *known = self.ram_extent(address).unwrap_or(0..0);
        Ok(range)
    }

    /// Checks that `[address, address + length)` does not overflow or touch the VRAM window;
    /// returns its end.
    #[inline]
    fn outside_vram(&self, address: u64, length: u64) -> Result<u64, RamError> {
        let end = address
            .checked_add(length)
            .ok_or(RamError::Overflow { address, length })?;
        if let Some(window) = &self.vram_window {
            if address < window.end && window.start < end {
                return Err(RamError::InVram {
                    address: address.max(window.start),
                });
            }
        }
        Ok(end)
    }

    /// The memory-table region holding `address`, less any part in the VRAM window: a range
    /// every address of which is RAM, so frame checks can skip lookups inside it.
    pub fn ram_extent(&self, address: u64) -> Option<Range<u64>> {
        let region = self.mem.find_region(GuestAddress(address))?;
        let start = region.start_addr().0;
        let mut extent = start..start.checked_add(region.len())?;
        if let Some(window) = &self.vram_window {
            if window.contains(&address) {
                return None;
            }
            if window.start < extent.end && extent.start < window.end {
                if window.start > address {
                    extent.end = window.start;
                } else {
                    extent.start = window.end;
                }
            }
        }
        Some(extent)
    }

    /// Bytes from `address` to the end of its memory-table region (0 if not RAM).
    pub fn contiguous_len(&self, address: u64) -> u64 {
        self.mem
            .to_region_addr(GuestAddress(address))
            .map(|(region, offset)| region.len() - offset.0)
            .unwrap_or(0)
    }

    /// The bytes at `address` as one slice, when they lie outside the VRAM window in one
    /// region: one lookup, where a check and a copy across regions take one each.
    #[inline]
    fn in_one_region(
        &self,
        address: u64,
        length: usize,
    ) -> Option<VolatileSlice<'a, impl BitmapSlice + 'a>> {
        self.outside_vram(address, length as u64).ok()?;
        let (region, offset): (&'a M::R, MemoryRegionAddress) =
            self.mem.to_region_addr(GuestAddress(address))?;
        region.get_slice(offset, length).ok()
    }

    /// Reads `buf.len()` bytes at a checked address.
    pub fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), RamError> {
        if let Some(slice) = self.in_one_region(address, buf.len()) {
            slice.copy_to(buf);
        } else {
            // Across regions, or not RAM (the check names the first byte that is not).
            self.check(address, buf.len() as u64)?;
            self.mem
                .read_slice(buf, GuestAddress(address))
                .map_err(|_| RamError::NotRam { address })?;
        }
        if let Some(capture) = self.capture {
            capture.bytes(Store::Ram, ReadKind::Metadata, address, buf);
        }
        Ok(())
    }

    /// Reads the little-endian u64 at `address` (a page-table entry) as [`Self::read`] would,
    /// with one region lookup when its 8 bytes lie in one region (as every aligned entry does).
    pub fn read_u64(&self, address: u64) -> Result<u64, RamError> {
        self.outside_vram(address, 8)?;
        let in_one_region = self
            .mem
            .to_region_addr(GuestAddress(address))
            .and_then(|(region, offset)| region.get_slice(offset, 8).ok())
            .and_then(|slice| slice.get_ref::<u64>(0).ok().map(|value| value.load()));
        match in_one_region {
            Some(value) => {
                if let Some(capture) = self.capture {
                    capture.bytes(
                        Store::Ram,
                        ReadKind::Metadata,
                        address,
                        &value.to_ne_bytes(),
                    );
                }
                Ok(u64::from_le(value))
            }
            None => {
                let mut bytes = [0u8; 8];
                self.read(address, &mut bytes)?;
                Ok(u64::from_le_bytes(bytes))
            }
        }
    }

    /// Writes `buf` at a checked address.
    pub fn write(&self, address: u64, buf: &[u8]) -> Result<(), RamError> {
        if let Some(slice) = self.in_one_region(address, buf.len()) {
            slice.copy_from(buf);
            return Ok(());
        }
        // Across regions, or not RAM (the check names the first byte that is not).
        self.check(address, buf.len() as u64)?;
        self.mem
            .write_slice(buf, GuestAddress(address))
            .map_err(|_| RamError::NotRam { address })
    }

    /// A slice of the bytes of `range`, which must lie in one region (callers clamp with
    /// [`Self::contiguous_len`]). The range is checked again: the memory table may have changed
    /// since (the VRAM window moved over it, or its region went away).
    #[inline]
    pub fn slice(
        &self,
        range: RamRange,
    ) -> Result<VolatileSlice<'a, impl BitmapSlice + 'a>, RamError> {
        let address = range.start();
        let length = usize::try_from(range.len()).map_err(|_| RamError::Overflow {
            address,
            length: range.len(),
        })?;
        // One region lookup: the slice itself proves the range lies in that region (this is
        // once per page of a scattered copy).
        self.outside_vram(address, range.len())?;
        let (region, offset): (&'a M::R, MemoryRegionAddress) = self
            .mem
            .to_region_addr(GuestAddress(address))
            .ok_or(RamError::NotRam { address })?;
        region
            .get_slice(offset, length)
            .map_err(|_| RamError::NotRam { address })
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::GuestMemoryMmap;

    use super::*;

    fn mem() -> GuestMemoryMmap<()> {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x10_0000),
            (GuestAddress(0x10_0000), 0x10_0000),
            (GuestAddress(0x100_0000), 0x10_0000),
        ])
        .unwrap()
    }

    #[test]
    fn accepts_ranges_spanning_adjacent_regions() {
        let mem = mem();
        let ram = GuestRam::new(&mem, None);
        assert_eq!(
            ram.check(0xf_f000, 0x2000).map(|r| (r.start(), r.len())),
            Ok((0xf_f000, 0x2000))
        );
        assert_eq!(ram.contiguous_len(0xf_f000), 0x1000);
    }

    #[test]
    fn an_entry_reads_as_read_reads_it_in_one_region_or_across_two() {
        let mem = mem();
        let ram = GuestRam::new(&mem, Some(0x100_0000..0x100_8000));
        // In one region, and straddling two adjacent ones.
        for (address, value) in [
            (0x8, 0x1122_3344_5566_7788),
            (0xf_fffc, 0x0102_0304_0506_0708),
        ] {
            ram.write(address, &u64::to_le_bytes(value)).unwrap();
            let mut bytes = [0; 8];
            ram.read(address, &mut bytes).unwrap();
            assert_eq!(ram.read_u64(address), Ok(u64::from_le_bytes(bytes)));
            assert_eq!(ram.read_u64(address), Ok(value));
        }
        // The refusals of read and write: past RAM, at a hole, in the VRAM window, overflowing,
        // each naming the first byte that is not RAM.
        let overflow = |address| RamError::Overflow { address, length: 8 };
        for (address, refusal) in [
            (0x1f_fffc, RamError::NotRam { address: 0x20_0000 }),
            (0x20_0000, RamError::NotRam { address: 0x20_0000 }),
            (
                0x100_7ffc,
                RamError::InVram {
                    address: 0x100_7ffc,
                },
            ),
            (
                0x0ff_fffc,
                RamError::InVram {
                    address: 0x100_0000,
                },
            ),
            (u64::MAX - 3, overflow(u64::MAX - 3)),
        ] {
            let mut bytes = [0; 8];
            assert_eq!(ram.read(address, &mut bytes), Err(refusal), "{address:#x}");
            assert_eq!(ram.read_u64(address), Err(refusal), "{address:#x}");
            assert_eq!(ram.write(address, &bytes), Err(refusal), "{address:#x}");
        }
    }

    #[test]
    fn ram_extents_stop_at_region_ends_and_the_vram_window() {
        let mem = mem();
        let ram = GuestRam::new(&mem, Some(0x3000..0x4000));
        assert_eq!(ram.ram_extent(0x1000), Some(0..0x3000));
        assert_eq!(ram.ram_extent(0x3800), None);
        assert_eq!(ram.ram_extent(0x5000), Some(0x4000..0x10_0000));
        assert_eq!(ram.ram_extent(0x9000_0000), None);
    }

    #[test]
    fn refuses_holes_vram_and_overflow() {
        let mem = mem();
        let ram = GuestRam::new(&mem, Some(0x100_0000..0x110_0000));
        assert_eq!(
            ram.check(0x1f_f000, 0x2000),
            Err(RamError::NotRam { address: 0x20_0000 })
        );
        assert_eq!(
            ram.check(0x100_1000, 1),
            Err(RamError::InVram {
                address: 0x100_1000
            })
        );
        assert!(matches!(
            ram.check(u64::MAX, 2),
            Err(RamError::Overflow { .. })
        ));
        assert_eq!(ram.check(0x20_0000, 0).map(RamRange::len), Ok(0));
    }

    #[test]
    fn ram_ranges_accept_the_edges_of_ram_and_the_vram_window() {
        let mem = mem();
        let ram = GuestRam::new(&mem, Some(0x100_0000..0x100_8000));
        // The whole of adjacent regions, and RAM right after the window.
        let whole = ram.check(0, 0x20_0000).unwrap();
        assert_eq!(
            (whole.start(), whole.len(), whole.end()),
            (0, 0x20_0000, 0x20_0000)
        );
        let after = ram.check(0x100_8000, 0xf_8000).unwrap();
        assert_eq!(after.end(), 0x110_0000);
        assert!(ram.check(0x100_7fff, 1).is_err());
        assert!(ram.check(0x10f_ffff, 2).is_err());
        // An empty range is RAM anywhere it does not overflow.
        assert!(ram.check(u64::MAX, 0).is_ok());
        assert!(matches!(
            ram.check(1, u64::MAX),
            Err(RamError::Overflow { .. })
        ));
    }

    #[test]
    fn ranges_rebuilt_from_checked_frames_still_refuse_overflow() {
        assert!(RamRange::checked_before(u64::MAX, 1).is_none());
        assert_eq!(
            RamRange::checked_before(u64::MAX - 1, 1).map(RamRange::end),
            Some(u64::MAX)
        );
        assert!(RamRange::EMPTY.is_empty());
    }

    #[test]
    fn slices_recheck_the_table() {
        let mem = mem();
        let range = GuestRam::new(&mem, None).check(0x100_0000, 0x1000).unwrap();
        assert!(GuestRam::new(&mem, None).slice(range).is_ok());
        // The window moved over the bytes since they were checked.
        let moved = GuestRam::new(&mem, Some(0x100_0000..0x110_0000));
        assert_eq!(
            moved.slice(range).err(),
            Some(RamError::InVram {
                address: 0x100_0000
            })
        );
        assert_eq!(
            GuestRam::new(&mem, None).contiguous_len(0x100_0800),
            0xf_f800
        );
        assert_eq!(GuestRam::new(&mem, None).contiguous_len(0x20_0000), 0);
    }
}
