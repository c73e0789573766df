//! The VRAM: a shared file the backend maps and QEMU maps too (as the BAR of a companion
//! function), and the locator that tracks where the guest sees that BAR.
//!
//! In ivshmem mode QEMU announces the BAR in its vhost-user memory table once the guest sets
//! DRIVER_OK, as an extra region backed by the same file, at the BAR's guest-physical address;
//! it removes and re-adds the region when the guest toggles memory decode. Comparing each
//! region's file (device and inode) with ours is how the backend learns the BAR address.

use std::fs::{File, OpenOptions, Permissions};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use vm_memory::bitmap::BitmapSlice;
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, GuestMemoryBackend, GuestMemoryRegion, VolatileMemory, VolatileSlice};
use wddm_gpu_abi::caps::{
    WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_BAR_STATE_NOT_MAPPED,
};

use crate::support::span::Span;
use crate::support::sync::lock;

/// Errors creating the VRAM file.
#[derive(Debug, thiserror::Error)]
pub enum VramError {
    /// The size is not a power of two (QEMU asserts that for BARs) or is too small.
    #[error("VRAM size {0:#x} must be a power of two of at least 1 MiB (QEMU requires power-of-two BARs)")]
    BadSize(u64),
    /// The file could not be created or opened.
    #[error("cannot create the VRAM file {path}: {source}")]
    Create {
        /// The path given.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// An existing file's mode could not be set to `--file-mode`.
    #[error("cannot apply --file-mode {mode:04o} to the existing VRAM file {path}: {source}")]
    Mode {
        /// The path given.
        path: PathBuf,
        /// The mode asked for.
        mode: u32,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be sized.
    #[error("cannot size the VRAM file {path} to {size:#x} bytes: {source}")]
    Resize {
        /// The path given.
        path: PathBuf,
        /// The size wanted.
        size: u64,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Device-only VRAM could not be reserved.
    #[error("cannot reserve {0:#x} bytes of device-only VRAM")]
    Local(u64),
    /// Another backend holds the file.
    #[error("VRAM file {0} is in use by another backend (each backend needs a VRAM file of its own: give --vram-path)")]
    InUse(PathBuf),
    /// The file exists with another size: resizing it would change VRAM under a QEMU that may
    /// still map it (which then dies of SIGBUS).
    #[error("VRAM file {path} holds {found:#x} bytes, not the {wanted:#x} asked for: give the matching size, or remove the file to start anew")]
    SizeMismatch {
        /// The path given.
        path: PathBuf,
        /// Its size.
        found: u64,
        /// The size asked for.
        wanted: u64,
    },
    /// The file could not be mapped.
    #[error("cannot map the VRAM file {path}: {source}")]
    Map {
        /// The path given.
        path: PathBuf,
        /// What vm-memory said.
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
}

/// How the guest reaches the VRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarMode {
    /// BAR2 of an `ivshmem-plain` device at function 1 of the GPU's slot (QEMU 10.x).
    Ivshmem,
    /// A virtio shared-memory region (shmid 0) of the GPU's own function, mapped with vhost-user
    /// `SHMEM_MAP` (QEMU 11.1+; `vhost-user-test-device-pci` exposes it as BAR 4).
    Shmem,
}

impl BarMode {
    fn wire(self) -> (u32, u32, u32) {
        // (mode, PCI function, BAR index)
        match self {
            BarMode::Ivshmem => (WDDM_GPU_BAR_MODE_IVSHMEM, 1, 2),
            BarMode::Shmem => (WDDM_GPU_BAR_MODE_SHMEM, 0, 4),
        }
    }
}

/// Where the guest sees the VRAM BAR, as last announced by the frontend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarLocator {
    /// How the BAR is provided.
    pub mode: BarMode,
    /// Guest-physical address of the BAR start, when announced.
    pub address: Option<u64>,
    /// Bumped whenever `address` changes (appears, moves or disappears).
    pub generation: u32,
}

/// What one memory-table update did to the BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarChange {
    /// Same as before.
    Unchanged,
    /// The BAR is now at this address (first seen or moved).
    MappedAt(u64),
    /// The BAR is no longer in the memory table.
    Unmapped,
}

/// The VRAM: the BAR file and the backend's mapping of it, plus device-only memory for
/// segments the guest CPU cannot reach.
///
/// VRAM address space: `[0, size)` is the BAR file, `[size, size + local_size)` the device-only
/// memory (anonymous, reserved lazily, so untouched VRAM costs no host memory).
pub struct Vram {
    path: PathBuf,
    size: u64,
    /// Device and inode of the BAR file (`None` for anonymous VRAM, which no table maps).
    identity: Option<(u64, u64)>,
    mapping: MmapRegion<()>,
    local: Option<MmapRegion<()>>,
    local_size: u64,
    /// Where the guest sees the BAR: changes with memory tables, read by every request, so it
    /// has its own short-held lock and the mappings stay shareable.
    bar: Mutex<BarState>,
}

#[derive(Debug)]
struct BarState {
    locator: BarLocator,
    /// Guest-physical range of the memory-table region backed by this file, if any.
    guest_window: Option<Range<u64>>,
}

impl Vram {
    /// Creates (or reuses, at the same size) the VRAM file at `path` and maps it, and reserves
    /// `local_size` bytes of device-only VRAM (anonymous memory: gone with the process). A file
    /// it creates is readable by its owner only.
    pub fn create(
        path: &Path,
        size: u64,
        local_size: u64,
        mode: BarMode,
    ) -> Result<Self, VramError> {
        Self::create_with_device_only_file(path, size, local_size, None, OWNER_ONLY, mode)
    }

    /// Like [`Self::create`]; with `local_path`, device-only VRAM lives in that file (created,
    /// or reused with its contents), so it outlives the backend process as the BAR file does.
    /// Files it creates get `file_mode`. Each file is locked (`flock`, exclusive) for as long
    /// as the backend runs: a second backend on the same file is refused.
    pub fn create_with_device_only_file(
        path: &Path,
        size: u64,
        local_size: u64,
        local_path: Option<&Path>,
        file_mode: u32,
        mode: BarMode,
    ) -> Result<Self, VramError> {
        if !size.is_power_of_two() || size < (1 << 20) {
            return Err(VramError::BadSize(size));
        }
        let mapping = map_file(path, size, file_mode)?;
        let metadata = mapping
            .file_offset()
            .map(|offset| offset.file().metadata())
            .expect("a file mapping has its file")
            .map_err(|source| VramError::Create {
                path: path.to_owned(),
                source,
            })?;
        let identity = Some((metadata.dev(), metadata.ino()));
        let local = match (local_size, local_path) {
            (0, _) => None,
            (_, Some(local_path)) => Some(map_file(local_path, local_size, file_mode)?),
            (_, None) => Some(
                usize::try_from(local_size)
                    .ok()
                    .and_then(|len| MmapRegion::new(len).ok())
                    .ok_or(VramError::Local(local_size))?,
            ),
        };
        Ok(Self {
            path: path.to_owned(),
            size,
            identity,
            mapping,
            local,
            local_size,
            bar: Mutex::new(BarState {
                locator: BarLocator {
                    mode,
                    address: None,
                    generation: 0,
                },
                guest_window: None,
            }),
        })
    }

    /// VRAM in anonymous memory, touched lazily, that no guest maps: what `replay` runs
    /// recorded submissions against.
    pub fn anonymous(size: u64, local_size: u64) -> Result<Self, VramError> {
        if !size.is_power_of_two() || size < (1 << 20) {
            return Err(VramError::BadSize(size));
        }
        let anonymous = |len: u64| {
            usize::try_from(len)
                .ok()
                .and_then(|len| MmapRegion::new(len).ok())
        };
        let mapping = anonymous(size).ok_or(VramError::BadSize(size))?;
        let local = match local_size {
            0 => None,
            _ => Some(anonymous(local_size).ok_or(VramError::Local(local_size))?),
        };
        Ok(Self {
            path: PathBuf::new(),
            size,
            identity: None,
            mapping,
            local,
            local_size,
            bar: Mutex::new(BarState {
                locator: BarLocator {
                    mode: BarMode::Ivshmem,
                    address: None,
                    generation: 0,
                },
                guest_window: None,
            }),
        })
    }

    /// The file path QEMU must map.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// BAR size in bytes (the VRAM file).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of the whole VRAM address space (BAR plus device-only memory).
    pub fn total_size(&self) -> u64 {
        self.size + self.local_size
    }

    fn bar(&self) -> MutexGuard<'_, BarState> {
        lock(&self.bar)
    }

    /// The VRAM file (passed to the frontend in shared-memory mode).
    pub fn file(&self) -> Option<&File> {
        self.mapping.file_offset().map(FileOffset::file)
    }

    /// Switches how the BAR is provided (shared-memory mapping accepted or refused).
    pub fn set_mode(&self, mode: BarMode) {
        let mut bar = self.bar();
        if bar.locator.mode != mode {
            bar.locator.mode = mode;
            bar.locator.generation = bar.locator.generation.wrapping_add(1);
        }
    }

    /// Current BAR locator.
    pub fn locator(&self) -> BarLocator {
        self.bar().locator
    }

    /// The locator in wire form.
    pub fn wire_locator(&self) -> WddmGpuVramBar {
        let locator = self.locator();
        let (mode, pci_function, bar_index) = locator.mode.wire();
        WddmGpuVramBar {
            mode,
            state: if locator.address.is_some() {
                WDDM_GPU_BAR_STATE_KNOWN
            } else {
                WDDM_GPU_BAR_STATE_NOT_MAPPED
            },
            generation: locator.generation,
            pci_function,
            bar_index,
            reserved: 0,
            guest_physical_address: locator.address.unwrap_or(0),
            size: self.size,
        }
    }

    /// Guest-physical range where the frontend mapped this file; frame lists must not point
    /// there, because it is VRAM, not guest RAM.
    pub fn guest_window(&self) -> Option<Range<u64>> {
        self.bar().guest_window.clone()
    }

    /// Learns the BAR location from a new memory table.
    pub fn observe_memory_table<M: GuestMemoryBackend>(&self, mem: &M) -> BarChange {
        let mut found = None;
        for region in mem.iter() {
            let Some(file_offset) = region.file_offset() else {
                continue;
            };
            if !self.is_our_file(file_offset.file()) {
                continue;
            }
            let start = region.start_addr().0;
            let window = start..start.saturating_add(region.len());
            // The BAR starts where file offset 0 would be.
            let bar = start.checked_sub(file_offset.start());
            found = Some((window, bar));
            break;
        }
        let (window, address) = match found {
            Some((window, bar)) => (Some(window), bar),
            None => (None, None),
        };
        let mut bar = self.bar();
        bar.guest_window = window;
        if address == bar.locator.address {
            return BarChange::Unchanged;
        }
        bar.locator.address = address;
        bar.locator.generation = bar.locator.generation.wrapping_add(1);
        match address {
            Some(address) => BarChange::MappedAt(address),
            None => BarChange::Unmapped,
        }
    }

    fn is_our_file(&self, file: &File) -> bool {
        file.metadata()
            .map(|m| Some((m.dev(), m.ino())) == self.identity)
            .unwrap_or(false)
    }

    /// `length` bytes at `offset` of the VRAM address space, if they lie inside it.
    pub fn range(&self, offset: u64, length: u64) -> Option<VramRange> {
        Span::new(InVram(()), offset, length).filter(|range| range.end() <= self.total_size())
    }

    /// The bytes of `range`; `None` when it straddles the BAR and device-only memory (no
    /// segment does).
    #[inline]
    pub fn range_slice(&self, range: VramRange) -> Option<VolatileSlice<'_, ()>> {
        self.slice(range.start(), usize::try_from(range.len()).ok()?)
    }

    /// A slice of the VRAM address space; `None` when the range is outside it or straddles
    /// the BAR and device-only memory (no segment does).
    pub fn slice(&self, offset: u64, len: usize) -> Option<VolatileSlice<'_, ()>> {
        if offset < self.size {
            self.mapping
                .get_slice(usize::try_from(offset).ok()?, len)
                .ok()
        } else {
            let local_offset = usize::try_from(offset - self.size).ok()?;
            self.local.as_ref()?.get_slice(local_offset, len).ok()
        }
    }
}

/// Proof that [`Vram::range`] found a span inside the VRAM address space (only this module
/// makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InVram(());

/// Bytes of the VRAM address space, checked to lie inside it.
pub type VramRange = Span<InVram>;

/// Mode of the files the backend creates unless told otherwise: the owner's only.
pub const OWNER_ONLY: u32 = 0o600;

/// Opens the file at `path` (creating it with `file_mode`), locks it for this process, sizes a
/// new or empty one to `size` bytes (refusing one of another size) and maps it shared.
fn map_file(path: &Path, size: u64, file_mode: u32) -> Result<MmapRegion<()>, VramError> {
    let create_err = |source| VramError::Create {
        path: path.to_owned(),
        source,
    };
    let created = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(file_mode)
        .open(path);
    let file = match created {
        // The mode asked for, whatever the umask.
        Ok(file) => {
            file.set_permissions(Permissions::from_mode(file_mode))
                .map_err(create_err)?;
            file
        }
        // An existing file gets the mode asked for too, or the start fails saying so.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(create_err)?;
            file.set_permissions(Permissions::from_mode(file_mode))
                .map_err(|source| VramError::Mode {
                    path: path.to_owned(),
                    mode: file_mode,
                    source,
                })?;
            file
        }
        Err(error) => return Err(create_err(error)),
    };
    // SAFETY: flock on a descriptor this function owns; it only takes or refuses the lock.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => VramError::InUse(path.to_owned()),
            _ => create_err(error),
        });
    }
    let found = file.metadata().map_err(create_err)?.len();
    match found {
        0 => file.set_len(size).map_err(|source| VramError::Resize {
            path: path.to_owned(),
            size,
            source,
        })?,
        found if found != size => {
            return Err(VramError::SizeMismatch {
                path: path.to_owned(),
                found,
                wanted: size,
            })
        }
        _ => {}
    }
    let length = usize::try_from(size).map_err(|_| VramError::BadSize(size))?;
    MmapRegion::from_file(FileOffset::new(file, 0), length).map_err(|source| VramError::Map {
        path: path.to_owned(),
        source,
    })
}

/// Copies between two volatile slices of any bitmap type (guest RAM or VRAM).
pub fn copy_slices<A: BitmapSlice, B: BitmapSlice>(src: VolatileSlice<A>, dst: VolatileSlice<B>) {
    src.copy_to_volatile_slice(dst);
}

#[cfg(test)]
mod tests {
    use vm_memory::{GuestAddress, GuestMemoryMmap, GuestRegionMmap};

    use super::*;
    use crate::testkit::guest::file_region;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("wddm-vram-{}-{name}", std::process::id()))
    }

    #[test]
    fn ranges_stay_inside_the_vram_address_space() {
        let path = temp_path("range");
        let vram = Vram::create(&path, 1 << 20, 1 << 20, BarMode::Ivshmem).unwrap();
        let total = 2 << 20;
        let whole = vram.range(0, total).unwrap();
        assert_eq!((whole.start(), whole.len(), whole.end()), (0, total, total));
        assert_eq!(vram.range(total, 0).map(VramRange::end), Some(total));
        assert_eq!(vram.range(total - 1, 2), None);
        assert_eq!(vram.range(total + 1, 0), None);
        assert_eq!(vram.range(u64::MAX, 2), None);
        assert_eq!(vram.range(1, u64::MAX), None);
        // Sub-ranges stay inside; only a range straddling the BAR end has no slice.
        let part = whole.sub(0x10, 0x20);
        assert_eq!((part.start(), part.len()), (0x10, 0x20));
        assert_eq!(whole.tail(total + 5).len(), 0);
        assert_eq!(whole.tail(total + 5).start(), total);
        assert!(vram.range_slice(whole.sub(0, 1 << 20)).is_some());
        assert!(vram.range_slice(whole.sub(1 << 20, 1 << 20)).is_some());
        assert!(vram.range_slice(whole.sub((1 << 20) - 1, 2)).is_none());
        drop(vram);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn refuses_sizes_that_are_not_powers_of_two() {
        let path = temp_path("npot");
        assert!(matches!(
            Vram::create(&path, 3 << 20, 0, BarMode::Ivshmem),
            Err(VramError::BadSize(_))
        ));
    }

    #[test]
    fn learns_bar_address_from_a_region_backed_by_the_same_file() {
        let path = temp_path("learn");
        let vram = Vram::create(&path, 1 << 20, 0, BarMode::Ivshmem).unwrap();
        let ram = GuestRegionMmap::<()>::from_range(GuestAddress(0), 1 << 20, None).unwrap();
        let bar = file_region(&path, 1 << 20, 0xf800_0000);
        let mem = GuestMemoryMmap::from_regions(vec![ram, bar]).unwrap();
        assert_eq!(
            vram.observe_memory_table(&mem),
            BarChange::MappedAt(0xf800_0000)
        );
        assert_eq!(vram.locator().generation, 1);
        assert_eq!(vram.guest_window(), Some(0xf800_0000..0xf810_0000));
        assert_eq!(vram.observe_memory_table(&mem), BarChange::Unchanged);

        let ram_only = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        assert_eq!(vram.observe_memory_table(&ram_only), BarChange::Unmapped);
        assert_eq!(vram.locator().generation, 2);
        assert_eq!(vram.wire_locator().state, WDDM_GPU_BAR_STATE_NOT_MAPPED);
        std::fs::remove_file(path).unwrap();
    }
}
