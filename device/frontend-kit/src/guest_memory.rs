//! Guest memory as a frontend holds it: memfd-backed files mapped here and announced to the
//! backend in memory-table entries, so both processes see the same bytes.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};

use vhost::VhostUserMemoryRegionInfo;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::split_ring::RingMemory;

/// A new memfd called `name`, `size` bytes long (pages are only allocated when touched).
pub fn memfd(name: &CStr, size: u64) -> File {
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a freshly created descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).expect("memfd size");
    file
}

/// `size` bytes of `file` mapped here, at "guest address" 0 of the mapping.
pub fn map_file(file: File, size: u64) -> GuestMemoryMmap<()> {
    GuestMemoryMmap::from_ranges_with_files(&[(
        GuestAddress(0),
        usize::try_from(size).unwrap(),
        Some(FileOffset::new(file, 0)),
    )])
    .unwrap()
}

/// The memory-table entry announcing the file-backed `memory` (all `size` bytes of it) at `gpa`.
pub fn memory_region(
    memory: &GuestMemoryMmap<()>,
    gpa: u64,
    size: u64,
) -> VhostUserMemoryRegionInfo {
    memory_region_part(memory, 0, gpa, size)
}

/// The memory-table entry announcing `size` bytes of the file-backed `memory` from `offset` on
/// at `gpa`: one of several entries a frontend may split one backing into (QEMU does, where
/// memory sections meet).
pub fn memory_region_part(
    memory: &GuestMemoryMmap<()>,
    offset: u64,
    gpa: u64,
    size: u64,
) -> VhostUserMemoryRegionInfo {
    let region = memory.find_region(GuestAddress(0)).unwrap();
    let fd = vm_memory::GuestMemoryRegion::file_offset(region)
        .unwrap()
        .file()
        .as_raw_fd();
    VhostUserMemoryRegionInfo {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: memory.get_host_address(GuestAddress(offset)).unwrap() as u64,
        mmap_offset: offset,
        mmap_handle: fd,
    }
}

/// A test's rings: an access outside guest RAM is a bug of the test, so it panics.
impl RingMemory for GuestMemoryMmap<()> {
    fn write(&self, gpa: u64, bytes: &[u8]) {
        self.write_slice(bytes, GuestAddress(gpa)).unwrap();
    }

    fn read(&self, gpa: u64, bytes: &mut [u8]) {
        self.read_slice(bytes, GuestAddress(gpa)).unwrap();
    }
}
