//! Layout files (`--layout`) for the tests, the benchmark and the fuzz targets, written from
//! their parts: the WDDM version, the segments and the GpuMmu. Several of them want the same
//! segments or the same GpuMmu (the shipped `qemu-configs/layouts/gpummu.toml`'s) with other
//! sizes; each says only what is its own.

use std::fmt::Write as _;

/// The flags of CPU-visible VRAM.
pub const CPU_VISIBLE: &[&str] = &["CpuVisible"];
/// The flags of a cache-coherent aperture.
pub const APERTURE: &[&str] = &["Aperture", "CacheCoherent"];
/// The flags of device-only VRAM (kept across standby).
pub const DEVICE_ONLY: &[&str] = &["PreservedDuringStandby"];

/// One `[[segments]]` entry: DXGK_SEGMENTFLAGS member names and a layout-file size (`"16MiB"`).
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    pub flags: &'a [&'a str],
    pub size: &'a str,
}

/// A `[gpummu]` table updated through GPU-physical addresses (`update_mode = "gpu_physical"`).
#[derive(Clone, Copy, Debug)]
pub struct Gpummu<'a> {
    /// Index bits per level, the root first.
    pub index_bits: &'a [u32],
    /// Per level, the segment its tables are in (0: system memory); left out when empty.
    pub table_segments: &'a [u32],
    /// Per level, the paging process's; left out when empty.
    pub paging_process_table_segments: &'a [u32],
    pub max_contexts: u32,
}

impl Gpummu<'static> {
    /// The shipped `gpummu.toml`'s 4-level 48-bit GpuMmu: leaf tables in segment 1 (the
    /// CPU-visible VRAM), directories in system memory, the paging process's all in system
    /// memory; `max_contexts` contexts.
    pub const fn four_levels(max_contexts: u32) -> Self {
        Self {
            index_bits: &[9, 9, 9, 9],
            table_segments: &[1, 0, 0, 0],
            paging_process_table_segments: &[0, 0, 0, 0],
            max_contexts,
        }
    }
}

/// The text of a layout file: `wddm` (`"2.0"`), `segments` in order (segment 1 first) and,
/// with `gpummu`, its table.
pub fn layout(wddm: &str, segments: &[Segment], gpummu: Option<&Gpummu>) -> String {
    let mut text = format!("wddm = \"{wddm}\"\n");
    for segment in segments {
        let flags: Vec<String> = segment
            .flags
            .iter()
            .map(|flag| format!("\"{flag}\""))
            .collect();
        write!(
            text,
            "\n[[segments]]\nflags = [{}]\nsize = \"{}\"\n",
            flags.join(", "),
            segment.size
        )
        .unwrap();
    }
    if let Some(mmu) = gpummu {
        write!(
            text,
            "\n[gpummu]\nindex_bits = {:?}\nupdate_mode = \"gpu_physical\"\n",
            mmu.index_bits
        )
        .unwrap();
        if !mmu.table_segments.is_empty() {
            writeln!(text, "table_segments = {:?}", mmu.table_segments).unwrap();
        }
        if !mmu.paging_process_table_segments.is_empty() {
            writeln!(
                text,
                "paging_process_table_segments = {:?}",
                mmu.paging_process_table_segments
            )
            .unwrap();
        }
        writeln!(text, "max_contexts = {}", mmu.max_contexts).unwrap();
    }
    text
}

/// A WDDM 2.0 layout of CPU-visible VRAM (segment 1, `vram`) and a cache-coherent aperture
/// (segment 2, `aperture`), with `gpummu`'s table.
pub fn vram_and_aperture(vram: &str, aperture: &str, gpummu: &Gpummu) -> String {
    layout(
        "2.0",
        &[
            Segment {
                flags: CPU_VISIBLE,
                size: vram,
            },
            Segment {
                flags: APERTURE,
                size: aperture,
            },
        ],
        Some(gpummu),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_shipped_gpummu_layout_as_a_file_would_say_it() {
        assert_eq!(
            vram_and_aperture("16MiB", "64MiB", &Gpummu::four_levels(16)),
            r#"wddm = "2.0"

[[segments]]
flags = ["CpuVisible"]
size = "16MiB"

[[segments]]
flags = ["Aperture", "CacheCoherent"]
size = "64MiB"

[gpummu]
index_bits = [9, 9, 9, 9]
update_mode = "gpu_physical"
table_segments = [1, 0, 0, 0]
paging_process_table_segments = [0, 0, 0, 0]
max_contexts = 16
"#
        );
    }
}
