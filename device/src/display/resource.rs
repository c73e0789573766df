//! 2D resources: host copies of guest images, their guest backing pages, and the host memory
//! they may use in all.

use std::sync::Arc;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::display::{WddmGpuMemEntry, WDDM_GPU_MAX_BACKING_ENTRIES};

use super::format::{PixelFormat, BYTES_PER_PIXEL};
use super::pixel_buffer::PixelBuffer;
use super::rect::Rect;
use crate::memory::guest_ram::{GuestRam, RamError};

/// Why a backing was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackingError {
    #[error("{count} backing entries, more than the {WDDM_GPU_MAX_BACKING_ENTRIES} allowed")]
    TooManyEntries { count: u32 },
    #[error("backing entry {index}: {error}")]
    Entry { index: usize, error: RamError },
    #[error("backing of {0:#x} bytes in all overflows")]
    TooLarge(u64),
}

/// The guest pages behind a resource: entries checked as guest RAM (never the VRAM window) when
/// attached, and again at each copy, since the memory table may change in between.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backing {
    entries: Vec<WddmGpuMemEntry>,
    /// Where each entry starts within the backing, so a read finds its first entry by a binary
    /// search instead of a walk (a 1080-row frame over 2,025 pages would walk 2 million times).
    starts: Vec<u64>,
    len: u64,
}

impl Backing {
    /// Checks `entries` against guest RAM.
    pub fn attach<M: GuestMemoryBackend>(
        entries: Vec<WddmGpuMemEntry>,
        ram: &GuestRam<'_, M>,
    ) -> Result<Self, BackingError> {
        let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        if count > WDDM_GPU_MAX_BACKING_ENTRIES {
            return Err(BackingError::TooManyEntries { count });
        }
        let mut len = 0u64;
        let mut starts = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            ram.check(entry.addr, u64::from(entry.length))
                .map_err(|error| BackingError::Entry { index, error })?;
            starts.push(len);
            len = len
                .checked_add(u64::from(entry.length))
                .ok_or(BackingError::TooLarge(len))?;
        }
        Ok(Self {
            entries,
            starts,
            len,
        })
    }

    /// Bytes in all.
    pub fn byte_len(&self) -> u64 {
        self.len
    }

    /// Reads `buf.len()` bytes from `offset` within the backing (the caller checked that they
    /// lie within [`Self::len`]).
    pub fn read<M: GuestMemoryBackend>(
        &self,
        ram: &GuestRam<'_, M>,
        offset: u64,
        mut buf: &mut [u8],
    ) -> Result<(), RamError> {
        // The last entry starting at or before `offset`.
        let first = self
            .starts
            .partition_point(|&start| start <= offset)
            .saturating_sub(1);
        let mut offset = offset - self.starts.get(first).copied().unwrap_or(0);
        for entry in &self.entries[first..] {
            if buf.is_empty() {
                break;
            }
            let length = u64::from(entry.length);
            if offset >= length {
                offset -= length;
                continue;
            }
            let take = usize::try_from((length - offset).min(buf.len() as u64)).unwrap_or(0);
            let (head, rest) = std::mem::take(&mut buf).split_at_mut(take);
            // `offset < length` and the entry was checked: no overflow.
            ram.read(entry.addr + offset, head)?;
            buf = rest;
            offset = 0;
        }
        Ok(())
    }
}

/// Why a transfer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    #[error("no backing attached")]
    NoBacking,
    #[error("source bytes at offset {offset:#x} run past the {backing:#x}-byte backing")]
    PastBacking { offset: u64, backing: u64 },
    #[error("backing unreadable: {0}")]
    Unreadable(RamError),
}

/// A 2D resource.
#[derive(Debug)]
pub struct Resource {
    pub format: PixelFormat,
    pub width: u32,
    pub height: u32,
    /// The host copy, `width * 4` bytes a row; shared with the display while it sends a frame.
    pub pixels: Arc<PixelBuffer>,
    pub backing: Option<Backing>,
    /// What transfers have sent to the display band by band since the last flush (see
    /// `Display::transfer`): a flush inside it has nothing left to send.
    pub streamed: Option<Rect>,
}

impl Resource {
    /// The whole resource as a rectangle (a resource is never empty).
    pub fn whole(&self) -> Rect {
        Rect {
            x: 0,
            y: 0,
            width: self.width,
            height: self.height,
        }
    }

    /// Host bytes of a `width` x `height` resource; `None` when that overflows.
    pub fn host_size(width: u32, height: u32) -> Option<u64> {
        u64::from(width)
            .checked_mul(u64::from(height))?
            .checked_mul(u64::from(BYTES_PER_PIXEL))
    }

    /// Bytes a row.
    pub fn stride(&self) -> u64 {
        u64::from(self.width) * u64::from(BYTES_PER_PIXEL)
    }

    /// Whether a transfer of `rect` (inside the resource) from `offset` reads only bytes of the
    /// backing.
    pub fn check_transfer(&self, rect: Rect, offset: u64) -> Result<(), TransferError> {
        let backing = self.backing.as_ref().ok_or(TransferError::NoBacking)?;
        let row_bytes = u64::from(rect.width) * u64::from(BYTES_PER_PIXEL);
        // The last source byte: offset + (height - 1) * stride + row_bytes, checked.
        let end = u64::from(rect.height - 1)
            .checked_mul(self.stride())
            .and_then(|rows| rows.checked_add(row_bytes))
            .and_then(|span| span.checked_add(offset));
        if end.is_none_or(|end| end > backing.byte_len()) {
            return Err(TransferError::PastBacking {
                offset,
                backing: backing.byte_len(),
            });
        }
        Ok(())
    }

    /// TRANSFER_TO_HOST_2D: copies `rect` (inside the resource) from the backing, where its
    /// first pixel is at `offset` and rows are a resource row apart, into the host copy.
    pub fn transfer_to_host<M: GuestMemoryBackend>(
        &mut self,
        rect: Rect,
        offset: u64,
        ram: &GuestRam<'_, M>,
    ) -> Result<(), TransferError> {
        self.check_transfer(rect, offset)?;
        let backing = self.backing.as_ref().ok_or(TransferError::NoBacking)?;
        let stride = self.stride();
        let row_bytes = u64::from(rect.width) * u64::from(BYTES_PER_PIXEL);
        // Host-copy indices, in usize like `rows`: the host copy is in memory.
        let host_stride = self.width as usize * BYTES_PER_PIXEL as usize;
        let host_row_bytes = rect.width as usize * BYTES_PER_PIXEL as usize;
        if row_bytes == stride {
            // Whole rows: one copy of the block (the rectangle lies inside the resource).
            let host = rect.y as usize * host_stride;
            let pixels = Arc::make_mut(&mut self.pixels);
            let target = &mut pixels[host..host + rect.height as usize * host_stride];
            return backing
                .read(ram, offset, target)
                .map_err(TransferError::Unreadable);
        }
        for row in 0..rect.height {
            // In range of the host copy: the rectangle lies inside the resource.
            let host = (rect.y as usize + row as usize) * host_stride
                + rect.x as usize * BYTES_PER_PIXEL as usize;
            let target = &mut Arc::make_mut(&mut self.pixels)[host..host + host_row_bytes];
            backing
                .read(ram, offset + u64::from(row) * stride, target)
                .map_err(TransferError::Unreadable)?;
        }
        Ok(())
    }

    /// The pixels of `rect` (inside the resource), row after row, in the resource's format.
    pub fn rows(&self, rect: Rect) -> impl Iterator<Item = &[u8]> {
        let stride = self.width as usize * BYTES_PER_PIXEL as usize;
        let start = rect.x as usize * BYTES_PER_PIXEL as usize;
        let len = rect.width as usize * BYTES_PER_PIXEL as usize;
        (rect.y..rect.bottom()).map(move |y| {
            let row = y as usize * stride + start;
            &self.pixels[row..row + len]
        })
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
    use wddm_gpu_abi::display::WddmGpuRect;

    use super::*;

    const VRAM_WINDOW: std::ops::Range<u64> = 0x10_0000..0x20_0000;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x30_0000)]).unwrap()
    }

    fn entry(addr: u64, length: u32) -> WddmGpuMemEntry {
        WddmGpuMemEntry {
            addr,
            length,
            padding: 0,
        }
    }

    #[test]
    fn backing_entries_must_be_guest_ram_outside_the_vram_window() {
        let mem = memory();
        let ram = GuestRam::new(&mem, Some(VRAM_WINDOW));
        assert!(Backing::attach(vec![entry(0x1000, 0x2000), entry(0x20_0000, 16)], &ram).is_ok());
        let refused = [
            entry(0xf_f000, 0x2000),
            entry(0x2f_f000, 0x2000),
            entry(u64::MAX - 4, 16),
            entry(0x40_0000, 1),
        ];
        for bad in refused {
            let result = Backing::attach(vec![entry(0, 16), bad], &ram);
            assert!(
                matches!(result, Err(BackingError::Entry { index: 1, .. })),
                "{bad:?}: {result:?}"
            );
        }
        let many = vec![entry(0, 1); WDDM_GPU_MAX_BACKING_ENTRIES as usize + 1];
        assert!(matches!(
            Backing::attach(many, &ram),
            Err(BackingError::TooManyEntries { .. })
        ));
    }

    #[test]
    fn transfers_read_rows_across_entries_and_stop_at_the_backing_end() {
        let mem = memory();
        let ram = GuestRam::new(&mem, Some(VRAM_WINDOW));
        // A 4x2 resource (16-byte rows) backed by two 16-byte pieces far apart.
        let bytes: Vec<u8> = (0u8..32).collect();
        mem.write_slice(&bytes[..16], GuestAddress(0x5000)).unwrap();
        mem.write_slice(&bytes[16..], GuestAddress(0x9000)).unwrap();
        let backing = Backing::attach(vec![entry(0x5000, 16), entry(0x9000, 16)], &ram).unwrap();
        let mut resource = Resource {
            format: PixelFormat::B8G8R8X8,
            width: 4,
            height: 2,
            pixels: Arc::new(PixelBuffer::from(&[0u8; 32][..])),
            backing: Some(backing),
            streamed: None,
        };
        let whole = Rect::inside(
            WddmGpuRect {
                x: 0,
                y: 0,
                width: 4,
                height: 2,
            },
            4,
            2,
        )
        .unwrap();
        resource.transfer_to_host(whole, 0, &ram).unwrap();
        assert_eq!(**resource.pixels, bytes[..]);
        // Pixel (1, 1) only: its source byte offset is 16 + 4.
        Arc::make_mut(&mut resource.pixels).fill(0);
        let one = Rect::inside(
            WddmGpuRect {
                x: 1,
                y: 1,
                width: 1,
                height: 1,
            },
            4,
            2,
        )
        .unwrap();
        resource.transfer_to_host(one, 20, &ram).unwrap();
        assert_eq!(&resource.pixels[20..24], &bytes[20..24]);
        assert_eq!(resource.pixels.iter().filter(|b| **b != 0).count(), 4);
        // Past the end, and an offset that overflows.
        for offset in [4, 29, u64::MAX - 2] {
            assert!(
                matches!(
                    resource.transfer_to_host(whole, offset, &ram),
                    Err(TransferError::PastBacking { .. })
                ),
                "{offset}"
            );
        }
        resource.backing = None;
        assert_eq!(
            resource.transfer_to_host(whole, 0, &ram),
            Err(TransferError::NoBacking)
        );
    }

    #[test]
    fn a_frame_the_display_holds_is_never_written() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let ram = GuestRam::new(&mem, Some(VRAM_WINDOW));
        mem.write_slice(&[7u8; 32], GuestAddress(0x5000)).unwrap();
        let backing = Backing::attach(vec![entry(0x5000, 32)], &ram).unwrap();
        let mut resource = Resource {
            format: PixelFormat::B8G8R8X8,
            width: 4,
            height: 2,
            pixels: Arc::new(PixelBuffer::from(&[1u8; 32][..])),
            backing: Some(backing),
            streamed: None,
        };
        let whole = resource.whole();
        // The display still sends the frame it was handed: the transfer writes a copy.
        let held = resource.pixels.clone();
        resource.transfer_to_host(whole, 0, &ram).unwrap();
        assert_eq!(**held, [1u8; 32]);
        assert_eq!(**resource.pixels, [7u8; 32]);
        assert!(!Arc::ptr_eq(&held, &resource.pixels));
        // Once the display let go, the transfer writes in place.
        drop(held);
        mem.write_slice(&[9u8; 32], GuestAddress(0x5000)).unwrap();
        let before = Arc::as_ptr(&resource.pixels);
        resource.transfer_to_host(whole, 0, &ram).unwrap();
        assert_eq!(**resource.pixels, [9u8; 32]);
        assert_eq!(Arc::as_ptr(&resource.pixels), before);
    }
}
