//! The engine target's world, made once per process and cleared before every input: guest RAM
//! with a hole, the VRAM file also mapped into the memory table (where the guest sees the BAR),
//! device-only VRAM, and one [`Engine`] per layout, kept across the submissions of an input so
//! aperture mappings carry over from one to the next.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

use vhost_user_wddm_gpu::parse_layout;
use vhost_user_wddm_gpu::rules::validate;
use vhost_user_wddm_gpu::Engine;
use vhost_user_wddm_gpu::SegmentLayout;
use vhost_user_wddm_gpu::{BarMode, Vram};
use vm_memory::{
    FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestRegionMmap, MmapRegion,
};

/// Guest RAM below the hole: `[0, RAM_LOW_END)`.
pub const RAM_LOW_END: u64 = 2 << 20;
/// Guest RAM above the hole: `[RAM_HIGH, RAM_HIGH + RAM_HIGH_SIZE)`.
pub const RAM_HIGH: u64 = 3 << 20;
/// Size of the RAM above the hole.
pub const RAM_HIGH_SIZE: u64 = 1 << 20;
/// Every guest address the inputs write lies below this (hole included).
pub const RAM_SPAN: u64 = RAM_HIGH + RAM_HIGH_SIZE;
/// Where the memory table shows the VRAM file (the BAR).
pub const VRAM_GPA: u64 = 16 << 20;
/// The VRAM file (BAR) size.
pub const VRAM_SIZE: u64 = 1 << 20;
/// Device-only VRAM reserved after the BAR.
pub const DEVICE_ONLY: u64 = 1 << 20;
/// Where DMA buffers in RAM are written.
pub const DMA: u64 = 0x1_0000;

/// A layout with every kind of segment: two CPU-visible ones (one banked, at an explicit BAR
/// offset and base address), device-only VRAM above 4 GiB of GPU address space, and a small
/// aperture that holds the paging buffer and commits less than its size.
pub const LAYOUT_MIXED: &str = r#"
wddm = "1.3"
paging_buffer_segment = 4
paging_buffer_size = "64KiB"

[[segments]]
flags = ["CpuVisible", "DirectFlip"]
size = "512KiB"

[[segments]]
flags = ["CpuVisible", "UseBanking"]
size = "256KiB"
bar_offset = "768KiB"
base_address = 0x40000000
banks = ["64KiB", "128KiB"]

[[segments]]
flags = ["PreservedDuringStandby"]
size = "1MiB"
base_address = 0x100000000

[[segments]]
flags = ["Aperture", "CacheCoherent"]
size = "4MiB"
commit_limit = "2MiB"
"#;

/// A WDDM 2.0 layout: 64 KiB pages, one aperture.
pub const LAYOUT_WDDM2: &str = r#"
wddm = "2.0"

[[segments]]
flags = ["CpuVisible", "Use64KBPages", "LocalBudgetGroup"]
size = "1MiB"

[[segments]]
flags = ["Aperture", "CacheCoherent", "NonLocalBudgetGroup"]
size = "2MiB"
"#;

/// Parses and validates one of the fixed layouts above.
pub fn fixed_layout(text: &str, bar_size: u64) -> SegmentLayout {
    let spec = parse_layout(text).expect("fixed layout parses");
    validate(&spec, bar_size).expect("fixed layout is valid")
}

/// Aperture size of the default layout here (512 MiB in `default_for_vram`): small enough that
/// clearing its GART for every input costs little.
pub const DEFAULT_LAYOUT_APERTURE: u64 = 16 << 20;

/// Where a world's memory is: guest RAM `[0, ram_low_end)` and `[ram_high, ram_high +
/// ram_high_size)` with a hole between, the VRAM file (`vram_size` bytes) shown at `vram_gpa`,
/// and `device_only` bytes of device-only VRAM.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// End of the RAM below the hole.
    pub ram_low_end: u64,
    /// Start of the RAM above the hole.
    pub ram_high: u64,
    /// Size of the RAM above the hole.
    pub ram_high_size: u64,
    /// Where the memory table shows the VRAM file.
    pub vram_gpa: u64,
    /// The VRAM file (BAR) size.
    pub vram_size: u64,
    /// Device-only VRAM after the BAR.
    pub device_only: u64,
}

impl Sizes {
    /// Every guest address inputs write lies below this (hole included).
    pub fn ram_span(&self) -> u64 {
        self.ram_high + self.ram_high_size
    }

    /// The RAM regions, as (start, length).
    pub fn ram_regions(&self) -> [(u64, u64); 2] {
        [(0, self.ram_low_end), (self.ram_high, self.ram_high_size)]
    }
}

/// The engine target's memory.
pub const ENGINE_SIZES: Sizes = Sizes {
    ram_low_end: RAM_LOW_END,
    ram_high: RAM_HIGH,
    ram_high_size: RAM_HIGH_SIZE,
    vram_gpa: VRAM_GPA,
    vram_size: VRAM_SIZE,
    device_only: DEVICE_ONLY,
};

/// The world.
pub struct World {
    /// Guest memory: RAM with a hole, plus the VRAM window.
    pub mem: GuestMemoryMmap<()>,
    /// The VRAM.
    pub vram: Vram,
    /// Each layout with its engine, kept for the steps of one input.
    pub layouts: Vec<(SegmentLayout, Engine)>,
    /// Where the memory is.
    pub sizes: Sizes,
    /// The VRAM file, for clearing it.
    vram_file: File,
}

/// Drops the pages of `len` bytes of private anonymous memory at `ptr`: they read as zero again.
fn discard(ptr: *mut u8, len: u64) {
    // SAFETY: `ptr..ptr + len` is a page-aligned private anonymous mapping owned by the world
    // (guest RAM or device-only VRAM), only ever accessed through volatile slices; MADV_DONTNEED
    // replaces its pages with zero-fill-on-demand ones and touches no other memory.
    let rc = unsafe {
        libc::madvise(
            ptr.cast(),
            usize::try_from(len).unwrap(),
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
}

impl World {
    /// The engine target's world: [`ENGINE_SIZES`], the default layout (with a
    /// [`DEFAULT_LAYOUT_APERTURE`] aperture), [`LAYOUT_MIXED`] and [`LAYOUT_WDDM2`].
    pub fn new() -> Self {
        let mut default = SegmentLayout::default_for_vram(VRAM_SIZE);
        default.segments[1].size = DEFAULT_LAYOUT_APERTURE;
        default.segments[1].commit_limit = DEFAULT_LAYOUT_APERTURE;
        let layouts: Vec<SegmentLayout> = vec![
            default,
            fixed_layout(LAYOUT_MIXED, VRAM_SIZE),
            fixed_layout(LAYOUT_WDDM2, VRAM_SIZE),
        ];
        Self::with("engine.vram", ENGINE_SIZES, layouts)
    }

    /// Creates the VRAM file (scratch file `name`) and maps everything.
    pub fn with(name: &str, sizes: Sizes, layouts: Vec<SegmentLayout>) -> Self {
        let path = crate::scratch::path(name);
        let _ = std::fs::remove_file(&path);
        let vram = Vram::create(&path, sizes.vram_size, sizes.device_only, BarMode::Ivshmem)
            .expect("VRAM file in the scratch directory");
        let vram_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("VRAM file opens");
        let file = vram_file.try_clone().expect("VRAM file dup");
        let window = GuestRegionMmap::new(
            MmapRegion::from_file(
                FileOffset::new(file, 0),
                usize::try_from(sizes.vram_size).unwrap(),
            )
            .expect("VRAM maps"),
            GuestAddress(sizes.vram_gpa),
        )
        .expect("VRAM region");
        let [low, high] = sizes.ram_regions().map(|(start, len)| {
            GuestRegionMmap::<()>::from_range(
                GuestAddress(start),
                usize::try_from(len).unwrap(),
                None,
            )
            .expect("RAM region")
        });
        let mem = GuestMemoryMmap::from_regions(vec![low, high, window]).expect("memory table");
        vram.observe_memory_table(&mem);
        assert_eq!(
            vram.guest_window(),
            Some(sizes.vram_gpa..sizes.vram_gpa + sizes.vram_size)
        );
        for layout in &layouts {
            assert!(layout.device_only_vram(sizes.vram_size) <= sizes.device_only);
        }
        Self {
            mem,
            vram,
            layouts: layouts
                .into_iter()
                .map(|layout| {
                    let engine = Engine::new(&layout);
                    (layout, engine)
                })
                .collect(),
            sizes,
            vram_file,
        }
    }

    /// Back to the state `new` left: RAM and VRAM zero, every GART empty. Each input starts
    /// from here, so a crash input reproduces on its own.
    pub fn clear(&mut self) {
        let sizes = self.sizes;
        for (start, len) in sizes.ram_regions() {
            let ram = self
                .mem
                .get_slice(GuestAddress(start), usize::try_from(len).unwrap())
                .expect("RAM region");
            discard(ram.ptr_guard_mut().as_ptr(), len);
        }
        if sizes.device_only > 0 {
            let local = self
                .vram
                .slice(sizes.vram_size, usize::try_from(sizes.device_only).unwrap())
                .expect("device-only VRAM");
            discard(local.ptr_guard_mut().as_ptr(), sizes.device_only);
        }
        // SAFETY: fallocate on a descriptor the world owns; punching out the file's pages makes
        // them read as zero through every mapping (the backend's and the BAR window).
        let rc = unsafe {
            libc::fallocate(
                self.vram_file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                libc::off_t::try_from(sizes.vram_size).unwrap(),
            )
        };
        assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
        for (_, engine) in &mut self.layouts {
            engine.reset();
        }
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

/// Step opcodes of the engine target's input (each a byte, then its fields).
pub mod step {
    /// Guest RAM bytes: u32 address (modulo [`super::RAM_SPAN`]), blob.
    pub const RAM: u8 = 0;
    /// A frame list: u32 address, u32 first frame, u16 count, u8 stride.
    pub const FRAMES: u8 = 1;
    /// VRAM bytes: u32 offset, blob.
    pub const VRAM: u8 = 2;
    /// A submission with the command derived from the buffer ([`super::Submission`]).
    pub const SUBMIT: u8 = 3;
    /// A submission followed by raw command fields: u32 dma_buffer_size, start_offset,
    /// end_offset, flags, then u8 node_ordinal and reserved (each modulo 2).
    pub const SUBMIT_RAW: u8 = 4;
    /// A device reset (the GART forgets every mapping).
    pub const RESET: u8 = 5;
}

/// A submission step's fields, in input order (for seeds).
pub struct Submission<'a> {
    /// Where the DMA buffer is: 0 = guest RAM at [`DMA`] + `at` (written), 1 = guest-physical
    /// address `at` (written), 2 = segment `segment` at GPU address `at` (written when that is
    /// VRAM), 3 = the same but not written (an aperture's pages hold it).
    pub place: u8,
    /// `submission_fence_id`.
    pub fence: u32,
    /// Interrupt at this interruption check (0 = only when the work gets long); bit 7 makes it a
    /// reset rather than a preemption.
    pub stop: u8,
    /// Defer (and continue) every this many packets (0 = never; taken modulo 8).
    pub defer_every: u8,
    /// Offset (place 0) or address.
    pub at: u64,
    /// Segment id (places 2 and 3).
    pub segment: u8,
    /// The packets.
    pub packets: &'a [u8],
}

impl Submission<'_> {
    /// Encodes the step (opcode [`step::SUBMIT`]).
    pub fn write(&self, out: &mut crate::input::Writer) {
        out.u8(step::SUBMIT)
            .u8(self.place)
            .u32(self.fence)
            .u8(self.stop)
            .u8(self.defer_every);
        match self.place % 4 {
            0 => {
                out.u16((self.at & 0xffff) as u16);
            }
            1 => {
                out.u64(self.at);
            }
            _ => {
                out.u64(self.at).u8(self.segment);
            }
        }
        out.blob(self.packets);
    }
}
