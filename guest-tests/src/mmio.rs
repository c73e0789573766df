//! Memory-mapped PCI BARs (sysfs `resourceN` files, or `/dev/mem` for a BAR moved behind the
//! kernel's back) and volatile, bounds-checked access to them.
//!
//! Mappings are never unmapped: the device stays initialised for the life of the process, and
//! windows can then be plain `Copy` values.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use thiserror::Error;

/// Physical memory, for mappings the kernel has no resource file for.
const DEV_MEM: &str = "/dev/mem";
/// mmap granularity.
const PAGE_SIZE: usize = 4096;

/// Mapping a BAR or carving a window out of it failed.
#[derive(Debug, Error)]
pub enum MmioError {
    /// The resource file could not be opened or mapped.
    #[error("{path}: {source}")]
    Map { path: PathBuf, source: io::Error },
    /// A window lies outside its BAR.
    #[error("window [{offset:#x}, +{len:#x}) outside a {bar_len:#x}-byte BAR")]
    OutOfBounds {
        offset: u64,
        len: u64,
        bar_len: usize,
    },
}

/// A bounds-checked window of a mapped BAR.
#[derive(Clone, Copy, Debug)]
pub struct MmioWindow {
    base: NonNull<u8>,
    len: usize,
}

impl MmioWindow {
    /// Maps the whole resource file (the BAR) read-write and shared.
    pub fn map_resource(path: &Path) -> Result<Self, MmioError> {
        let err = |source| MmioError::Map {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(err)?;
        let len = usize::try_from(file.metadata().map_err(err)?.len())
            .map_err(|_| err(io::ErrorKind::InvalidData.into()))?;
        if len == 0 {
            return Err(err(io::Error::new(io::ErrorKind::InvalidData, "empty BAR")));
        }
        Self::map_file(&file, 0, len).map_err(err)
    }

    /// Maps `len` bytes of guest-physical address space at `address` through `/dev/mem`,
    /// uncached (`O_SYNC`). For a BAR the kernel does not know is there (one moved through
    /// config space, where its `resourceN` file still maps the old address); the kernel allows
    /// it only for ranges that are neither RAM nor claimed by a driver.
    pub fn map_physical(address: u64, len: u64) -> Result<Self, MmioError> {
        let path = Path::new(DEV_MEM);
        let err = |source| MmioError::Map {
            path: path.to_path_buf(),
            source,
        };
        let page = PAGE_SIZE as u64;
        let start = address & !(page - 1);
        let delta = address - start;
        let total = usize::try_from(delta + len)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| err(io::ErrorKind::InvalidInput.into()))?;
        let offset =
            libc::off_t::try_from(start).map_err(|_| err(io::ErrorKind::InvalidInput.into()))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_SYNC)
            .open(path)
            .map_err(err)?;
        Self::map_file(&file, offset, total)
            .map_err(err)?
            .sub(delta, len)
    }

    fn map_file(file: &File, offset: libc::off_t, len: usize) -> Result<Self, io::Error> {
        // SAFETY: a new shared mapping of device memory; no Rust object aliases it.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(addr.cast()).ok_or(io::ErrorKind::AddrNotAvailable)?;
        Ok(Self { base, len })
    }

    /// The window `[offset, offset + len)` of this one.
    pub fn sub(&self, offset: u64, len: u64) -> Result<Self, MmioError> {
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= self.len as u64);
        if end.is_none() {
            return Err(MmioError::OutOfBounds {
                offset,
                len,
                bar_len: self.len,
            });
        }
        Ok(Self {
            // SAFETY: offset <= self.len, inside the mapping.
            base: unsafe {
                NonNull::new_unchecked(self.base.as_ptr().add(usize::try_from(offset).unwrap()))
            },
            len: usize::try_from(len).unwrap(),
        })
    }

    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty window.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn at<T>(&self, offset: usize) -> *mut T {
        let size = std::mem::size_of::<T>();
        // Offsets are driver constants inside windows validated at creation; a miss is a bug.
        assert!(
            offset.is_multiple_of(size) && offset.checked_add(size).is_some_and(|e| e <= self.len),
            "MMIO access of {size} bytes at {offset:#x} outside a {:#x}-byte window",
            self.len
        );
        // SAFETY: bounds checked above.
        unsafe { self.base.as_ptr().add(offset).cast() }
    }

    /// Reads a u8 register.
    pub fn read8(&self, offset: usize) -> u8 {
        // SAFETY: `at` checks bounds and alignment.
        unsafe { self.at::<u8>(offset).read_volatile() }
    }

    /// Reads a little-endian u16 register.
    pub fn read16(&self, offset: usize) -> u16 {
        // SAFETY: as in `read8`.
        u16::from_le(unsafe { self.at::<u16>(offset).read_volatile() })
    }

    /// Reads a little-endian u32 register.
    pub fn read32(&self, offset: usize) -> u32 {
        // SAFETY: as in `read8`.
        u32::from_le(unsafe { self.at::<u32>(offset).read_volatile() })
    }

    /// Writes a u8 register.
    pub fn write8(&self, offset: usize, value: u8) {
        // SAFETY: as in `read8`.
        unsafe { self.at::<u8>(offset).write_volatile(value) }
    }

    /// Writes a little-endian u16 register.
    pub fn write16(&self, offset: usize, value: u16) {
        // SAFETY: as in `read8`.
        unsafe { self.at::<u16>(offset).write_volatile(value.to_le()) }
    }

    /// Writes a little-endian u32 register.
    pub fn write32(&self, offset: usize, value: u32) {
        // SAFETY: as in `read8`.
        unsafe { self.at::<u32>(offset).write_volatile(value.to_le()) }
    }

    /// Writes a 64-bit register as two 32-bit halves, low first (virtio 4.1.3.1).
    pub fn write64_split(&self, offset: usize, value: u64) {
        self.write32(offset, (value & 0xffff_ffff) as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }

    /// Copies `data` into the window at `offset` (memory-like BARs such as VRAM).
    pub fn write_bytes(&self, offset: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let dst = self.at::<u8>(offset);
        let _ = self.at::<u8>(offset + data.len().saturating_sub(1));
        for (i, b) in data.iter().enumerate() {
            // SAFETY: both ends checked above; the range is contiguous.
            unsafe { dst.add(i).write_volatile(*b) };
        }
    }

    /// Copies bytes at `offset` out of the window.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        let src = self.at::<u8>(offset);
        let _ = self.at::<u8>(offset + out.len().saturating_sub(1));
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: both ends checked above.
            *b = unsafe { src.add(i).read_volatile() };
        }
    }
}
