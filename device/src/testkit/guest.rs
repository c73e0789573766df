//! Guest memory for tests: RAM from address 0 and the VRAM file mapped at its BAR address, as
//! QEMU's memory table shows them; VRAM read and written directly.

use std::fs::OpenOptions;
use std::path::Path;

use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

use crate::memory::vram::Vram;

/// The first `size` bytes of the file at `path`, mapped at guest-physical `address` (a BAR).
pub fn file_region(path: &Path, size: u64, address: u64) -> GuestRegionMmap<()> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mapping =
        MmapRegion::from_file(FileOffset::new(file, 0), usize::try_from(size).unwrap()).unwrap();
    GuestRegionMmap::new(mapping, GuestAddress(address)).unwrap()
}

/// RAM `[0, ram_size)` and the `vram_size` bytes of the VRAM file at `path` mapped at
/// `vram_address`; `vram` learns its window from the table.
pub fn ram_and_bar(
    ram_size: u64,
    vram: &Vram,
    path: &Path,
    vram_size: u64,
    vram_address: u64,
) -> GuestMemoryMmap<()> {
    let ram = GuestRegionMmap::<()>::from_range(
        GuestAddress(0),
        usize::try_from(ram_size).unwrap(),
        None,
    )
    .unwrap();
    let window = file_region(path, vram_size, vram_address);
    let mem = GuestMemoryMmap::from_regions(vec![ram, window]).unwrap();
    vram.observe_memory_table(&mem);
    mem
}

/// `len` bytes of guest memory from guest-physical `address`.
pub fn read(mem: &GuestMemoryMmap, address: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    mem.read_slice(&mut out, GuestAddress(address)).unwrap();
    out
}

/// Writes `bytes` into guest memory at guest-physical `address`.
pub fn write(mem: &GuestMemoryMmap, address: u64, bytes: &[u8]) {
    mem.write_slice(bytes, GuestAddress(address)).unwrap();
}

/// `len` bytes of VRAM from `offset`.
pub fn vram_read(vram: &Vram, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    vram.slice(offset, len).unwrap().copy_to(&mut out[..]);
    out
}

/// Writes `bytes` into VRAM at `offset`.
pub fn vram_write(vram: &Vram, offset: u64, bytes: &[u8]) {
    vram.slice(offset, bytes.len()).unwrap().copy_from(bytes);
}
