//! The `gpummu_walk` target's input and its page-table memory: a GpuMmu geometry, a root, and
//! operations on one address space (translations, walks, flushes, table writes, the checking
//! mode) over [`FakeTables`], a [`TableMemory`] of the target's own that maps table addresses
//! into a byte image the input writes, with guest-physical addresses past its RAM "outside
//! RAM", a VRAM window, and one memory segment.

use std::cell::Cell;
use std::ops::Range;

use vhost_user_wddm_gpu::{FaultKind, TableAddress, TableMemory, Target};

use crate::input::{Reader, Writer};

/// Guest RAM of the fake: guest-physical `[0, RAM_BYTES)` (16 pages).
pub const RAM_BYTES: u64 = 16 << 12;
/// Outside RAM and inside the VRAM BAR window (`IN_VRAM_WINDOW`); every other guest-physical
/// address past RAM is `OUTSIDE_RAM`.
pub const VRAM_WINDOW: Range<u64> = 0x2_0000..0x3_0000;
/// Memory segment 1 of the fake: offsets `[0, SEGMENT_BYTES)` (8 pages: one 12-bit table).
/// Segment 2 is an aperture and every other id does not exist (`BAD_SEGMENT` both).
pub const SEGMENT_BYTES: u64 = 8 << 12;
/// The image: RAM, then segment 1.
pub const IMAGE_BYTES: u64 = RAM_BYTES + SEGMENT_BYTES;
/// Operations per input.
pub const MAX_OPS: usize = 64;

/// Page-table memory over the input's image, counting the entries read.
pub struct FakeTables {
    /// RAM, then segment 1.
    pub image: Vec<u8>,
    /// Entries read since the count was last taken.
    pub reads: Cell<u32>,
}

impl Default for FakeTables {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeTables {
    /// A zeroed image.
    pub fn new() -> Self {
        Self {
            image: vec![0; usize::try_from(IMAGE_BYTES).unwrap()],
            reads: Cell::new(0),
        }
    }

    /// Reads taken so far, and the count reset.
    pub fn take_reads(&self) -> u32 {
        self.reads.replace(0)
    }

    /// Writes `bytes` at image offset `offset` (modulo the image), clipped at its end.
    pub fn write(&mut self, offset: u32, bytes: &[u8]) {
        let start = usize::try_from(u64::from(offset) % IMAGE_BYTES).unwrap();
        let end = (start + bytes.len()).min(self.image.len());
        self.image[start..end].copy_from_slice(&bytes[..end - start]);
    }

    /// Where `[address, address + length)` of `segment` is in the image, or why it is not
    /// storage a table or page may live in.
    fn locate(&self, segment: u32, address: u64, length: u64) -> Result<Range<usize>, FaultKind> {
        let (base, size, missing) = match segment {
            0 => (0, RAM_BYTES, FaultKind::OutsideRam),
            1 => (RAM_BYTES, SEGMENT_BYTES, FaultKind::BadSegment),
            _ => return Err(FaultKind::BadSegment),
        };
        let end = address.checked_add(length).ok_or(missing)?;
        if segment == 0 && address < VRAM_WINDOW.end && VRAM_WINDOW.start < end {
            return Err(FaultKind::InVramWindow);
        }
        if end > size {
            return Err(missing);
        }
        let start = usize::try_from(base + address).map_err(|_| missing)?;
        let end = usize::try_from(base + end).map_err(|_| missing)?;
        Ok(start..end)
    }
}

impl TableMemory for FakeTables {
    fn read_entry(&self, table: TableAddress, index: u64) -> Result<u64, FaultKind> {
        self.reads.set(self.reads.get() + 1);
        let missing = if table.segment == 0 {
            FaultKind::OutsideRam
        } else {
            FaultKind::BadSegment
        };
        let address = index
            .checked_mul(8)
            .and_then(|offset| table.address.checked_add(offset))
            .ok_or(missing)?;
        let range = self.locate(table.segment, address, 8)?;
        Ok(u64::from_le_bytes(self.image[range].try_into().unwrap()))
    }

    fn check_page(&self, target: Target, size: u64) -> Result<(), FaultKind> {
        match target {
            Target::System(address) => self.locate(0, address, size).map(drop),
            Target::Segment { segment, offset } => self.locate(segment, offset, size).map(drop),
            Target::Zero => Ok(()),
        }
    }
}

/// The input's first fields: the geometry and the root.
#[derive(Clone, Debug, Default)]
pub struct Header {
    /// Levels: 2 + this modulo 5.
    pub levels: u8,
    /// Index bits per level, leaf first: the leaf 4 + this modulo 9, the others 1 + this modulo
    /// 12 (the validator refuses some combinations: the input is then skipped).
    pub bits: [u8; 6],
    /// Bit `l`: level `l`'s tables live in segment 1 rather than system memory.
    pub table_segments: u8,
    /// Bit 0: no `LargePageSupported`; bit 1: CPU_VIRTUAL updates (refused with directories
    /// in a segment); bit 2: the checking mode from the start.
    pub flags: u8,
    /// The root: segment (modulo 3), page number (address = page × 4 KiB) and `NumEntries`
    /// (0: all of the root level's).
    pub root_segment: u8,
    /// See `root_segment`.
    pub root_page: u8,
    /// See `root_segment`.
    pub root_entries: u16,
}

/// The header's flag bits.
pub mod flag {
    /// No `LargePageSupported`.
    pub const NO_LARGE_PAGES: u8 = 1;
    /// CPU_VIRTUAL updates.
    pub const CPU_VIRTUAL: u8 = 2;
    /// The checking mode on from the start.
    pub const CHECKING: u8 = 4;
}

impl Header {
    /// Decodes the header.
    pub fn read(input: &mut Reader<'_>) -> Self {
        let levels = input.u8();
        let mut bits = [0; 6];
        for bit in &mut bits {
            *bit = input.u8();
        }
        Self {
            levels,
            bits,
            table_segments: input.u8(),
            flags: input.u8(),
            root_segment: input.u8(),
            root_page: input.u8(),
            root_entries: input.u16(),
        }
    }

    /// Encodes the header as [`Header::read`] decodes it.
    pub fn write(&self, out: &mut Writer) {
        out.u8(self.levels);
        for &bit in &self.bits {
            out.u8(bit);
        }
        out.u8(self.table_segments)
            .u8(self.flags)
            .u8(self.root_segment)
            .u8(self.root_page)
            .u16(self.root_entries);
    }

    /// A header for `index_bits` (leaf first, as the geometry has them) with tables in system
    /// memory, the root at `root_page` of RAM with all its entries.
    pub fn for_bits(index_bits: &[u32], root_page: u8, flags: u8) -> Self {
        assert!((2..=6).contains(&index_bits.len()));
        let mut bits = [0; 6];
        for (level, (raw, &want)) in bits.iter_mut().zip(index_bits).enumerate() {
            *raw = if level == 0 {
                u8::try_from(want - 4).unwrap()
            } else {
                u8::try_from(want - 1).unwrap()
            };
        }
        Self {
            levels: u8::try_from(index_bits.len() - 2).unwrap(),
            bits,
            table_segments: 0,
            flags,
            root_segment: 0,
            root_page,
            root_entries: 0,
        }
    }

    /// The level count.
    pub fn level_count(&self) -> usize {
        2 + usize::from(self.levels % 5)
    }

    /// Index bits of `level`.
    pub fn index_bits(&self, level: usize) -> u32 {
        let raw = u32::from(self.bits[level]);
        if level == 0 {
            4 + raw % 9
        } else {
            1 + raw % 12
        }
    }
}

/// Translation flags ([`Op::Translate`]).
pub mod translate {
    /// The address is taken modulo the geometry's address range.
    pub const IN_RANGE: u8 = 1;
    /// The length is taken modulo 256 KiB.
    pub const SHORT: u8 = 2;
    /// The translation runs twice; the second must find nothing stale the first did not.
    pub const TWICE: u8 = 4;
}

/// One operation on the address space.
#[derive(Clone, Debug)]
pub enum Op {
    /// `AddressSpace::translate` (flags: [`translate`]; access modulo 3: read, write, execute).
    Translate {
        /// GPU VA.
        va: u64,
        /// Bytes asked for.
        length: u64,
        /// Read, write or execute (modulo 3).
        access: u8,
        /// [`translate`] bits.
        flags: u8,
    },
    /// A walk of `va` on its own (`walk`), the address taken modulo the address range when
    /// `in_range`.
    Walk {
        /// GPU VA.
        va: u64,
        /// Read, write or execute (modulo 3).
        access: u8,
        /// Taken modulo the address range.
        in_range: bool,
    },
    /// `flush(None)`.
    FlushAll,
    /// `flush(Some(start..end))` (skipped unless start < end).
    Flush {
        /// First byte.
        start: u64,
        /// One past the last.
        end: u64,
    },
    /// An 8-byte entry at image offset `offset & !7`.
    WriteEntry {
        /// Image offset (modulo the image).
        offset: u32,
        /// The entry.
        entry: u64,
    },
    /// Bytes at an image offset.
    WriteBytes {
        /// Image offset (modulo the image).
        offset: u32,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The checking mode on or off.
    Checking(bool),
    /// `set_root` (segment modulo 3).
    SetRoot {
        /// Segment of the root.
        segment: u8,
        /// Its address.
        address: u64,
        /// `NumEntries`.
        entries: u16,
    },
}

impl Op {
    /// Decodes one operation.
    pub fn read(input: &mut Reader<'_>) -> Op {
        match input.u8() % 8 {
            0 => Op::Translate {
                va: input.u64(),
                length: input.u64(),
                access: input.u8(),
                flags: input.u8(),
            },
            1 => Op::Walk {
                va: input.u64(),
                access: input.u8(),
                in_range: input.u8() & 1 != 0,
            },
            2 => Op::FlushAll,
            3 => Op::Flush {
                start: input.u64(),
                end: input.u64(),
            },
            4 => Op::WriteEntry {
                offset: input.u32(),
                entry: input.u64(),
            },
            5 => Op::WriteBytes {
                offset: input.u32(),
                bytes: input.blob().to_vec(),
            },
            6 => Op::Checking(input.u8() & 1 != 0),
            _ => Op::SetRoot {
                segment: input.u8(),
                address: input.u64(),
                entries: input.u16(),
            },
        }
    }

    /// Encodes the operation as [`Op::read`] decodes it (for seeds).
    pub fn write(&self, out: &mut Writer) {
        match self {
            Op::Translate {
                va,
                length,
                access,
                flags,
            } => out.u8(0).u64(*va).u64(*length).u8(*access).u8(*flags),
            Op::Walk {
                va,
                access,
                in_range,
            } => out.u8(1).u64(*va).u8(*access).u8(u8::from(*in_range)),
            Op::FlushAll => out.u8(2),
            Op::Flush { start, end } => out.u8(3).u64(*start).u64(*end),
            Op::WriteEntry { offset, entry } => out.u8(4).u32(*offset).u64(*entry),
            Op::WriteBytes { offset, bytes } => out.u8(5).u32(*offset).blob(bytes),
            Op::Checking(on) => out.u8(6).u8(u8::from(*on)),
            Op::SetRoot {
                segment,
                address,
                entries,
            } => out.u8(7).u8(*segment).u64(*address).u16(*entries),
        };
    }
}
