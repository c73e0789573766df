//! Virtual-to-physical translation through `/proc/self/pagemap` (one u64 per 4 KiB virtual page:
//! bit 63 present, bit 62 swapped, bits 0-54 the PFN; the PFN reads as 0 without CAP_SYS_ADMIN).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use thiserror::Error;

/// Bit 63: the page is present in RAM.
const PRESENT: u64 = 1 << 63;
/// Bit 62: the page is swapped out.
const SWAPPED: u64 = 1 << 62;
/// Bits 0-54: page frame number.
const PFN_MASK: u64 = (1 << 55) - 1;
/// pagemap always describes 4 KiB pages on x86-64.
const PAGE: usize = 4096;

/// A translation failed.
#[derive(Debug, Error)]
pub enum PagemapError {
    /// Opening or reading the pagemap failed.
    #[error("/proc/self/pagemap: {0}")]
    Io(#[from] io::Error),
    /// The page is not in RAM (never touched, or swapped).
    #[error("page at {virt:#x} is not present (entry {entry:#018x})")]
    NotPresent { virt: usize, entry: u64 },
    /// The kernel hides PFNs from processes without CAP_SYS_ADMIN.
    #[error("pagemap hides the PFN of {virt:#x}: run as root")]
    PfnHidden { virt: usize },
}

/// The PFN of the page at `virt` from its pagemap entry.
pub fn decode(virt: usize, entry: u64) -> Result<u64, PagemapError> {
    if entry & PRESENT == 0 || entry & SWAPPED != 0 {
        return Err(PagemapError::NotPresent { virt, entry });
    }
    match entry & PFN_MASK {
        0 => Err(PagemapError::PfnHidden { virt }),
        pfn => Ok(pfn),
    }
}

/// An open `/proc/self/pagemap`.
pub struct Pagemap {
    file: File,
}

impl Pagemap {
    /// Opens this process's pagemap.
    pub fn open() -> Result<Self, PagemapError> {
        Ok(Self {
            file: File::open("/proc/self/pagemap")?,
        })
    }

    /// PFNs of the `pages` 4 KiB pages starting at page-aligned `virt`.
    pub fn pfns(&self, virt: usize, pages: usize) -> Result<Vec<u64>, PagemapError> {
        let mut raw = vec![0u8; pages * 8];
        self.file
            .read_exact_at(&mut raw, (virt / PAGE) as u64 * 8)?;
        raw.chunks_exact(8)
            .enumerate()
            .map(|(i, c)| {
                let entry = u64::from_le_bytes(c.try_into().unwrap_or_default());
                decode(virt + i * PAGE, entry)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_entries() {
        assert_eq!(decode(0, PRESENT | 0x1234).unwrap(), 0x1234);
        // Soft-dirty and exclusive bits are not part of the PFN.
        assert_eq!(
            decode(0, PRESENT | (1 << 55) | (1 << 56) | 0x42).unwrap(),
            0x42
        );
        assert!(matches!(
            decode(0, 0x1234),
            Err(PagemapError::NotPresent { .. })
        ));
        assert!(matches!(
            decode(0, PRESENT | SWAPPED | 1),
            Err(PagemapError::NotPresent { .. })
        ));
        assert!(matches!(
            decode(0x5000, PRESENT),
            Err(PagemapError::PfnHidden { virt: 0x5000 })
        ));
    }
}
