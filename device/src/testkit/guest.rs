//! Guest memory for tests: RAM from address 0 and the VRAM file mapped at its BAR address, as
//! QEMU's memory table shows them; VRAM read and written directly.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

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

/// RAM `[0, ram_size)` and the first `vram_size` bytes of the VRAM file at `path` mapped at
/// `vram_address`, as QEMU's memory table shows them once the BAR is mapped.
pub fn ram_and_window(
    ram_size: u64,
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
    GuestMemoryMmap::from_regions(vec![ram, window]).unwrap()
}

/// [`ram_and_window`], and `vram` learns its window from the table.
pub fn ram_and_bar(
    ram_size: u64,
    vram: &Vram,
    path: &Path,
    vram_size: u64,
    vram_address: u64,
) -> GuestMemoryMmap<()> {
    let mem = ram_and_window(ram_size, path, vram_size, vram_address);
    vram.observe_memory_table(&mem);
    mem
}

/// `mem` with the VRAM file's `vram_size`-byte window moved from `from` to `to` (0 for none,
/// either way), as QEMU's next memory table shows a BAR the guest moved; RAM stays the same.
pub fn bar_moved(
    mem: &GuestMemoryMmap,
    path: &Path,
    vram_size: u64,
    from: u64,
    to: u64,
) -> GuestMemoryMmap {
    let mut next = mem.clone();
    if from != 0 {
        next = next.remove_region(GuestAddress(from), vram_size).unwrap().0;
    }
    if to != 0 {
        let region = file_region(path, vram_size, to);
        next = next.insert_region(Arc::new(region)).unwrap();
    }
    next
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
