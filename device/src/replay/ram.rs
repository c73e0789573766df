//! The guest RAM a replay runs over: one sparse memory file, each byte at its guest-physical
//! address as offset, mapped anew as each recorded memory table says. Untouched pages cost
//! nothing, and bytes written under one table are still there under the next.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::FromRawFd;

use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

use crate::observe::recording::format::MemoryTable;

/// Why a recorded memory table could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RamSetupError {
    /// The memory file could not be made or grown.
    #[error("the replay's guest RAM file: {0}")]
    File(io::Error),
    /// A region could not be mapped.
    #[error("region {start:#x}..{end:#x} could not be mapped: {reason}")]
    Map {
        /// Region start.
        start: u64,
        /// Region end.
        end: u64,
        /// Why.
        reason: String,
    },
}

/// The sparse file behind every table's regions.
pub struct ReplayRam {
    file: File,
    size: u64,
}

impl ReplayRam {
    /// An empty memory file (a memfd: gone with the process).
    pub fn new() -> Result<Self, RamSetupError> {
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new
        // descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"wddm-gpu-replay-ram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(RamSetupError::File(io::Error::last_os_error()));
        }
        // SAFETY: the descriptor was just created and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Self { file, size: 0 })
    }

    /// Guest memory with the table's regions (checked by the reader: page-aligned, below the
    /// format's address cap, not overlapping).
    pub fn table(&mut self, table: &MemoryTable) -> Result<GuestMemoryMmap, RamSetupError> {
        let end = table
            .regions
            .iter()
            .map(|region| region.end)
            .max()
            .unwrap_or(0);
        if end > self.size {
            self.file.set_len(end).map_err(RamSetupError::File)?;
            self.size = end;
        }
        let mut regions = Vec::with_capacity(table.regions.len());
        for region in &table.regions {
            regions.push(self.region(region.clone())?);
        }
        GuestMemoryMmap::from_regions(regions).map_err(|error| RamSetupError::Map {
            start: 0,
            end,
            reason: error.to_string(),
        })
    }

    fn region(&self, range: Range<u64>) -> Result<GuestRegionMmap, RamSetupError> {
        let fail = |reason: String| RamSetupError::Map {
            start: range.start,
            end: range.end,
            reason,
        };
        let length = usize::try_from(range.end - range.start)
            .map_err(|_| fail("larger than the address space".into()))?;
        let file = self.file.try_clone().map_err(|e| fail(e.to_string()))?;
        let mapping = MmapRegion::from_file(FileOffset::new(file, range.start), length)
            .map_err(|e| fail(e.to_string()))?;
        GuestRegionMmap::new(mapping, GuestAddress(range.start))
            .ok_or_else(|| fail("past the end of the guest address space".into()))
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::Bytes;

    use super::*;

    #[test]
    fn bytes_outlive_a_table_change_and_holes_stay_holes() {
        let mut ram = ReplayRam::new().unwrap();
        let first = ram
            .table(&MemoryTable {
                vram_window: None,
                regions: vec![0..0x10_0000, 0x1_0000_0000..0x1_0010_0000],
            })
            .unwrap();
        first
            .write_slice(&[7; 16], GuestAddress(0x1_0000_0ff8))
            .unwrap();
        assert!(first.write_slice(&[1], GuestAddress(0x20_0000)).is_err());
        let second = ram
            .table(&MemoryTable {
                vram_window: None,
                regions: Vec::from_iter(std::iter::once(0x1_0000_0000..0x1_0020_0000)),
            })
            .unwrap();
        let mut back = [0; 16];
        second
            .read_slice(&mut back, GuestAddress(0x1_0000_0ff8))
            .unwrap();
        assert_eq!(back, [7; 16]);
        assert!(second.read_slice(&mut back, GuestAddress(0)).is_err());
    }
}
