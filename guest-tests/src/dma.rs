//! Pinned DMA memory: 2 MiB hugepages (physically contiguous, never migrated when the kernel runs
//! with `transparent_hugepage=never`), locked, translated once through the pagemap and rechecked
//! after every test so a moved page is caught instead of silently corrupting DMA.
//!
//! The arena is leaked on purpose: a device that timed out may still write into its buffers, so
//! the memory must never go back to the kernel while the process lives.

use std::cell::Cell;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

use thiserror::Error;

use crate::pagemap::{Pagemap, PagemapError};
use crate::scatter::Piece;

/// Size of one hugepage.
pub const HUGE_PAGE: usize = 2 << 20;
/// Size of one pagemap page.
const PAGE: usize = 4096;
const PAGES_PER_HUGE: usize = HUGE_PAGE / PAGE;

/// Allocating or checking DMA memory failed.
#[derive(Debug, Error)]
pub enum DmaError {
    /// mmap of hugepages failed.
    #[error("mmap of {hugepages} x 2 MiB hugepages failed ({0}); boot with hugepages=N and transparent_hugepage=never", hugepages = .1)]
    Mmap(io::Error, usize),
    /// mlock failed.
    #[error("mlock of DMA memory failed: {0}")]
    Mlock(io::Error),
    /// Translation failed.
    #[error(transparent)]
    Pagemap(#[from] PagemapError),
    /// A hugepage is not one aligned physically contiguous 2 MiB frame.
    #[error("hugepage at {virt:#x} is not physically contiguous (page {page} at {phys:#x})")]
    NotContiguous { virt: usize, page: usize, phys: u64 },
    /// A page moved since it was first translated.
    #[error("DMA page at {virt:#x} moved from {was:#x} to {now:#x}")]
    Moved { virt: usize, was: u64, now: u64 },
    /// The arena is used up.
    #[error("DMA arena exhausted: want {want:#x} bytes, {left:#x} left")]
    Exhausted { want: usize, left: usize },
    /// A single buffer must fit in one hugepage to stay physically contiguous.
    #[error("DMA buffer of {0:#x} bytes exceeds one hugepage")]
    TooLarge(usize),
}

/// Hugepage-backed, locked memory with known guest-physical addresses.
pub struct DmaArena {
    base: NonNull<u8>,
    len: usize,
    /// Physical address of every 4 KiB page, as first translated.
    phys: Vec<u64>,
    pagemap: Pagemap,
    next: Cell<usize>,
}

impl DmaArena {
    /// Maps, locks and translates `hugepages` hugepages. The arena lives as long as the process.
    pub fn new(hugepages: usize) -> Result<&'static Self, DmaError> {
        let len = hugepages * HUGE_PAGE;
        // SAFETY: anonymous private mapping at a kernel-chosen address; no existing memory is
        // affected.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_HUGETLB
                    | libc::MAP_HUGE_2MB
                    | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(DmaError::Mmap(io::Error::last_os_error(), hugepages));
        }
        let base = NonNull::new(addr.cast::<u8>()).ok_or(DmaError::Mmap(
            io::Error::from(io::ErrorKind::AddrNotAvailable),
            hugepages,
        ))?;
        // SAFETY: the range was just mapped by us.
        if unsafe { libc::mlock(addr, len) } != 0 {
            return Err(DmaError::Mlock(io::Error::last_os_error()));
        }
        // MAP_POPULATE already faulted the pages in; touching them again makes sure of it even
        // when populate was best effort.
        for offset in (0..len).step_by(HUGE_PAGE) {
            // SAFETY: inside the mapping.
            unsafe { base.as_ptr().add(offset).write_volatile(0) };
        }
        let pagemap = Pagemap::open()?;
        let phys: Vec<u64> = pagemap
            .pfns(base.as_ptr() as usize, len / PAGE)?
            .into_iter()
            .map(|pfn| pfn * PAGE as u64)
            .collect();
        let arena = Self {
            base,
            len,
            phys,
            pagemap,
            next: Cell::new(0),
        };
        arena.check_contiguous()?;
        Ok(Box::leak(Box::new(arena)))
    }

    fn check_contiguous(&self) -> Result<(), DmaError> {
        for (h, pages) in self.phys.chunks(PAGES_PER_HUGE).enumerate() {
            let first = pages[0];
            let bad = (first % HUGE_PAGE as u64 != 0)
                .then_some(0)
                .or_else(|| (1..pages.len()).find(|&i| pages[i] != first + (i * PAGE) as u64));
            if let Some(page) = bad {
                return Err(DmaError::NotContiguous {
                    virt: self.base.as_ptr() as usize + h * HUGE_PAGE,
                    page,
                    phys: pages[page],
                });
            }
        }
        Ok(())
    }

    /// Re-reads the pagemap and fails if any page changed its physical address.
    pub fn recheck(&self) -> Result<(), DmaError> {
        let base = self.base.as_ptr() as usize;
        let now = self.pagemap.pfns(base, self.len / PAGE)?;
        for (i, (&was, &pfn)) in self.phys.iter().zip(&now).enumerate() {
            if was != pfn * PAGE as u64 {
                return Err(DmaError::Moved {
                    virt: base + i * PAGE,
                    was,
                    now: pfn * PAGE as u64,
                });
            }
        }
        Ok(())
    }

    /// Hugepages in the arena.
    pub fn hugepages(&self) -> usize {
        self.len / HUGE_PAGE
    }

    /// A zeroed buffer of `len` bytes (at most one hugepage), 4 KiB aligned and inside a single
    /// hugepage, hence physically contiguous.
    pub fn alloc(&'static self, len: usize) -> Result<DmaBuf, DmaError> {
        if len > HUGE_PAGE {
            return Err(DmaError::TooLarge(len));
        }
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        let mut start = self.next.get();
        if start / HUGE_PAGE != (start + len - 1) / HUGE_PAGE {
            start = start.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        }
        let buf = self.take(start, len)?;
        buf.fill(0);
        Ok(buf)
    }

    /// `count` whole hugepages cut into 4 KiB pieces.
    pub fn alloc_pieces(&'static self, count: usize) -> Result<PiecePool, DmaError> {
        let start = self.next.get().div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let buf = self.take(start, count * HUGE_PAGE)?;
        let pieces = (0..buf.len / PAGE)
            .map(|i| Piece {
                virt: buf.virt.as_ptr() as usize + i * PAGE,
                phys: self.phys_at(start + i * PAGE),
            })
            .collect();
        Ok(PiecePool { buf, pieces })
    }

    fn take(&'static self, start: usize, len: usize) -> Result<DmaBuf, DmaError> {
        let end = start
            .checked_add(len)
            .filter(|end| *end <= self.len)
            .ok_or(DmaError::Exhausted {
                want: len,
                left: self.len.saturating_sub(self.next.get()),
            })?;
        self.next.set(end);
        Ok(DmaBuf {
            // SAFETY: start < self.len, inside the mapping.
            virt: unsafe { NonNull::new_unchecked(self.base.as_ptr().add(start)) },
            phys: self.phys_at(start),
            len,
        })
    }

    fn phys_at(&self, offset: usize) -> u64 {
        self.phys[offset / PAGE] + (offset % PAGE) as u64
    }
}

/// A physically contiguous piece of the arena.
#[derive(Clone, Copy, Debug)]
pub struct DmaBuf {
    virt: NonNull<u8>,
    phys: u64,
    len: usize,
}

impl DmaBuf {
    /// Guest-physical address of the first byte.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty buffer (never produced by the arena).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to byte `offset` (for the virtqueue's atomics).
    pub fn ptr(&self, offset: usize) -> *mut u8 {
        assert!(
            offset < self.len,
            "DMA offset {offset:#x} outside {:#x}",
            self.len
        );
        // SAFETY: bounds checked above.
        unsafe { self.virt.as_ptr().add(offset) }
    }

    /// Copies `data` in at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: bounds checked; the arena is never freed; the device only writes buffers of
        // requests in flight, and callers write between requests.
        unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), self.virt.as_ptr().add(offset), data.len())
        };
    }

    /// Copies `out.len()` bytes out from `offset`.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: as in `write`.
        unsafe {
            ptr::copy_nonoverlapping(self.virt.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
    }

    /// Reads the aligned u32 at `offset` with acquire ordering: for fields the device updates
    /// while the driver reads them (status-page counters).
    pub fn load_u32(&self, offset: usize) -> u32 {
        self.atomic_u32(offset).load(Ordering::Acquire)
    }

    /// Writes the aligned u32 at `offset` with release ordering: for fields the device reads
    /// while the driver writes them (the status page's `fault_tail`).
    pub fn store_u32(&self, offset: usize, value: u32) {
        self.atomic_u32(offset).store(value, Ordering::Release);
    }

    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4);
        assert!(
            offset.is_multiple_of(4),
            "unaligned u32 at DMA offset {offset:#x}"
        );
        // SAFETY: in bounds and aligned (the buffer is page aligned); the arena is never freed,
        // and the device's concurrent accesses are what atomics are for.
        unsafe { &*self.virt.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// Sets every byte to `byte`.
    pub fn fill(&self, byte: u8) {
        // SAFETY: the whole buffer is ours.
        unsafe { ptr::write_bytes(self.virt.as_ptr(), byte, self.len) };
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "DMA access [{offset:#x}, +{len:#x}) outside {:#x}",
            self.len
        );
    }
}

/// Whole hugepages handed out as 4 KiB pieces (the raw material of frame lists).
#[derive(Clone, Debug)]
pub struct PiecePool {
    buf: DmaBuf,
    pieces: Vec<Piece>,
}

impl PiecePool {
    /// Every piece, in address order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Copies bytes out of `piece` (one of this pool's) from `offset`.
    pub fn read(&self, piece: Piece, offset: usize, out: &mut [u8]) {
        self.buf.read(self.buf_offset(piece, offset), out);
    }

    /// Copies `data` into `piece` (one of this pool's) at `offset`.
    pub fn write(&self, piece: Piece, offset: usize, data: &[u8]) {
        self.buf.write(self.buf_offset(piece, offset), data);
    }

    /// Sets every byte of the pool.
    pub fn fill(&self, byte: u8) {
        self.buf.fill(byte);
    }

    fn buf_offset(&self, piece: Piece, offset: usize) -> usize {
        let base = self.buf.virt.as_ptr() as usize;
        assert!(
            piece.virt >= base && offset < PAGE,
            "piece {:#x}+{offset:#x} is not in this pool",
            piece.virt
        );
        piece.virt - base + offset
    }
}
