//! Checks of a memory table before the device touches it.

use std::io;

use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Every file-backed region must lie inside its file: the frontend may map a range past the
/// end (mmap allows it), and touching that range raises SIGBUS.
pub fn check_regions(mem: &GuestMemoryMmap) -> io::Result<()> {
    for region in mem.iter() {
        let Some(file_offset) = region.file_offset() else {
            continue;
        };
        let file_size = file_offset.file().metadata()?.len();
        let inside = file_offset
            .start()
            .checked_add(region.len())
            .is_some_and(|end| end <= file_size);
        if !inside {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "region at guest-physical {:#x} maps {:#x} bytes from file offset {:#x}, past the end of its {file_size:#x}-byte file",
                    region.start_addr().0,
                    region.len(),
                    file_offset.start()
                ),
            ));
        }
    }
    Ok(())
}
