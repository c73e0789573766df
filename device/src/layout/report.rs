//! The layout as a KMD will report it: `DXGK_QUERYSEGMENTOUT3` (WDDM 1.3) or
//! `DXGK_QUERYSEGMENTOUT4` (WDDM 2.0), as text for people and JSON for tools.

use std::fmt::Write;

use serde::Serialize;
use wddm_gpu_abi::caps::WDDM_GPU_WDDM_2_0;
use wddm_gpu_abi::capset_rules::dxgk_structs;
use wddm_gpu_abi::gpuva::{WddmGpuMmuCaps, GPUMMU_CAP_NAMES, PAGE_TABLE_UPDATE_MODE_NAMES};

use crate::layout::rules::human;
use crate::layout::{SegmentKind, SegmentLayout};

/// One segment in `check-layout --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SegmentReport {
    /// Segment id.
    pub id: u32,
    /// "memory" or "aperture".
    pub kind: &'static str,
    /// Whether the guest CPU reaches it through the VRAM BAR.
    pub cpu_visible: bool,
    /// `Flags.Value`.
    pub flags: u32,
    /// Member names, `|`-joined.
    pub flag_names: String,
    /// `BaseAddress`.
    pub base_address: u64,
    /// `Size`.
    pub size: u64,
    /// `CommitLimit`.
    pub commit_limit: u64,
    /// Offset in the VRAM BAR (CPU-visible memory segments), else null.
    pub bar_offset: Option<u64>,
    /// Offset in the device's VRAM (memory segments), else null: the BAR's offsets first, then
    /// device-only VRAM past the BAR's end. Where `ctl SOCKET vram` reads the segment.
    pub vram_offset: Option<u64>,
    /// `SystemMemoryEndAddress`.
    pub system_memory_end_address: u64,
    /// The bank table (`NbOfBanks` end offsets).
    pub banks: Vec<u64>,
}

/// One `DXGK_PAGE_TABLE_LEVEL_DESC` in `check-layout --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PageTableLevelReport {
    /// Level (0 = leaf).
    pub level: u32,
    /// `PageTableIndexBitCount`.
    pub page_table_index_bit_count: u32,
    /// `PageTableSegmentId`.
    pub page_table_segment_id: u32,
    /// `PagingProcessPageTableSegmentId`.
    pub paging_process_page_table_segment_id: u32,
    /// `PageTableSizeInBytes`.
    pub page_table_size_in_bytes: u64,
    /// `PageTableAlignmentInBytes`.
    pub page_table_alignment_in_bytes: u64,
}

/// `DXGK_GPUMMUCAPS` in `check-layout --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct GpuMmuReport {
    /// `Flags.Value`.
    pub flags: u32,
    /// Member names, `|`-joined.
    pub flag_names: String,
    /// `PageTableUpdateMode`.
    pub page_table_update_mode: u32,
    /// `VirtualAddressBitCount`.
    pub virtual_address_bit_count: u32,
    /// `LeafPageTableSizeFor64KPagesInBytes`.
    pub leaf_page_table_size_for_64k_pages: u32,
    /// `PageTableLevelCount`.
    pub page_table_level_count: u32,
    /// Contexts with GPU virtual addressing the device holds.
    pub max_contexts: u32,
    /// The levels, leaf first.
    pub levels: Vec<PageTableLevelReport>,
}

impl GpuMmuReport {
    fn new(caps: &WddmGpuMmuCaps) -> Self {
        let names: Vec<&str> = GPUMMU_CAP_NAMES
            .iter()
            .filter(|(_, bit)| caps.flags & bit != 0)
            .map(|(name, _)| *name)
            .collect();
        Self {
            flags: caps.flags,
            flag_names: names.join("|"),
            page_table_update_mode: caps.page_table_update_mode,
            virtual_address_bit_count: caps.virtual_address_bit_count,
            leaf_page_table_size_for_64k_pages: caps.leaf_page_table_size_for_64k_pages,
            page_table_level_count: caps.page_table_level_count,
            max_contexts: caps.max_contexts,
            levels: (0..caps.page_table_level_count)
                .zip(&caps.levels)
                .map(|(level, desc)| PageTableLevelReport {
                    level,
                    page_table_index_bit_count: desc.page_table_index_bit_count,
                    page_table_segment_id: desc.page_table_segment_id,
                    paging_process_page_table_segment_id: desc.paging_process_page_table_segment_id,
                    page_table_size_in_bytes: desc.page_table_size_in_bytes,
                    page_table_alignment_in_bytes: desc.page_table_alignment_in_bytes,
                })
                .collect(),
        }
    }

    fn text(&self, out: &mut String) {
        let mode = PAGE_TABLE_UPDATE_MODE_NAMES
            .iter()
            .find(|(_, value)| *value == self.page_table_update_mode)
            .map_or("?", |(name, _)| name);
        let _ = writeln!(out, "DXGK_GPUMMUCAPS (DXGKQAITYPE_GPUMMUCAPS)");
        let _ = writeln!(
            out,
            "  Flags.Value                          {:#010x}  {}",
            self.flags, self.flag_names
        );
        let _ = writeln!(
            out,
            "  PageTableUpdateMode                  {} ({mode})",
            self.page_table_update_mode
        );
        let _ = writeln!(
            out,
            "  VirtualAddressBitCount               {}",
            self.virtual_address_bit_count
        );
        let _ = writeln!(
            out,
            "  LeafPageTableSizeFor64KPagesInBytes  {:#x}",
            self.leaf_page_table_size_for_64k_pages
        );
        let _ = writeln!(
            out,
            "  PageTableLevelCount                  {}",
            self.page_table_level_count
        );
        let _ = writeln!(out, "  (contexts the device holds: {})", self.max_contexts);
        for level in &self.levels {
            let _ = writeln!(
                out,
                "DXGK_PAGE_TABLE_LEVEL_DESC level {} (DXGKQAITYPE_PAGETABLELEVELDESC, LevelIndex {}): \
                 IndexBits {}, SegmentId {}, PagingProcessSegmentId {}, SizeInBytes {:#x}, AlignmentInBytes {:#x}",
                level.level,
                level.level,
                level.page_table_index_bit_count,
                level.page_table_segment_id,
                level.paging_process_page_table_segment_id,
                level.page_table_size_in_bytes,
                level.page_table_alignment_in_bytes
            );
        }
    }
}

/// `check-layout --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct LayoutReport {
    /// "1.3" or "2.0".
    pub wddm: &'static str,
    /// The capset's `wddm_version`.
    pub wddm_version: u32,
    /// The VRAM BAR size the layout was checked against.
    pub vram_size: u64,
    /// Segments in id order.
    pub segments: Vec<SegmentReport>,
    /// `PagingBufferSegmentId`.
    pub paging_buffer_segment_id: u32,
    /// `PagingBufferSize`.
    pub paging_buffer_size: u32,
    /// `PagingBufferPrivateDataSize`.
    pub paging_buffer_private_data_size: u32,
    /// The GpuMmu geometry, when the layout has one.
    pub gpummu: Option<GpuMmuReport>,
}

impl LayoutReport {
    /// The report of a validated layout.
    pub fn new(layout: &SegmentLayout, vram_size: u64) -> Self {
        let wddm2 = layout.wddm_version == WDDM_GPU_WDDM_2_0;
        Self {
            wddm: if wddm2 { "2.0" } else { "1.3" },
            wddm_version: layout.wddm_version,
            vram_size,
            segments: layout
                .segments
                .iter()
                .map(|segment| {
                    let (bar_offset, vram_offset) = match segment.kind {
                        SegmentKind::Memory {
                            bar_offset,
                            vram_offset,
                        } => (bar_offset, Some(vram_offset)),
                        SegmentKind::Aperture => (None, None),
                    };
                    SegmentReport {
                        id: segment.id,
                        kind: match segment.kind {
                            SegmentKind::Memory { .. } => "memory",
                            SegmentKind::Aperture => "aperture",
                        },
                        cpu_visible: bar_offset.is_some(),
                        flags: segment.flags.bits(),
                        flag_names: segment.flags.names(),
                        base_address: segment.base_address,
                        size: segment.size,
                        commit_limit: segment.commit_limit,
                        bar_offset,
                        vram_offset,
                        system_memory_end_address: segment.system_memory_end_address,
                        banks: segment.banks.clone(),
                    }
                })
                .collect(),
            paging_buffer_segment_id: layout.paging_buffer_segment_id,
            paging_buffer_size: layout.paging_buffer_size,
            paging_buffer_private_data_size: layout.paging_buffer_private_data_size,
            gpummu: layout
                .gpummu
                .as_ref()
                .map(|geometry| GpuMmuReport::new(geometry.caps())),
        }
    }

    /// The text form, as the descriptor structures name their fields.
    pub fn text(&self) -> String {
        let wddm2 = self.wddm_version == WDDM_GPU_WDDM_2_0;
        let (out_struct, desc_struct) = dxgk_structs(self.wddm_version);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{out_struct} (WDDM {}, {desc_struct}); VRAM BAR {}",
            self.wddm,
            human(self.vram_size)
        );
        let _ = writeln!(out, "NbSegment = {}", self.segments.len());
        for s in &self.segments {
            let place = match (s.bar_offset, s.vram_offset) {
                (Some(offset), _) => format!("CPU-visible VRAM at BAR offset {offset:#x}"),
                (None, Some(offset)) => format!(
                    "device-only VRAM (not CPU-visible) at VRAM offset {offset:#x}, past the BAR"
                ),
                (None, None) => "aperture (GART)".to_string(),
            };
            let _ = writeln!(out, "segment {} [{}]: {place}", s.id, s.kind);
            let _ = writeln!(
                out,
                "  Flags.Value             {:#010x}  {}",
                s.flags, s.flag_names
            );
            let _ = writeln!(out, "  BaseAddress             {:#x}", s.base_address);
            let translated = match s.bar_offset {
                Some(offset) => {
                    format!("VRAM BAR address + {offset:#x} (from the capset at run time)")
                }
                None => "0 (not CPU-visible)".to_string(),
            };
            let _ = writeln!(out, "  CpuTranslatedAddress    {translated}");
            let _ = writeln!(
                out,
                "  Size                    {:#x} ({})",
                s.size,
                human(s.size)
            );
            let _ = writeln!(
                out,
                "  CommitLimit             {:#x} ({})",
                s.commit_limit,
                human(s.commit_limit)
            );
            if !wddm2 {
                let _ = writeln!(out, "  NbOfBanks               {}", s.banks.len());
                for (index, end) in s.banks.iter().enumerate() {
                    let _ = writeln!(out, "    bank {:<3} ends at      {end:#x}", index + 1);
                }
            }
            let _ = writeln!(
                out,
                "  SystemMemoryEndAddress  {:#x}",
                s.system_memory_end_address
            );
        }
        let paging_place = match self.paging_buffer_segment_id {
            0 => "system memory".to_string(),
            id => format!("aperture segment {id}"),
        };
        let _ = writeln!(
            out,
            "PagingBufferSegmentId       {} ({paging_place})",
            self.paging_buffer_segment_id
        );
        let _ = writeln!(
            out,
            "PagingBufferSize            {:#x} ({})",
            self.paging_buffer_size,
            human(u64::from(self.paging_buffer_size))
        );
        let _ = writeln!(
            out,
            "PagingBufferPrivateDataSize {}",
            self.paging_buffer_private_data_size
        );
        if let Some(gpummu) = &self.gpummu {
            gpummu.text(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_follow_the_descriptor_form() {
        let layout = SegmentLayout::default_for_vram(256 << 20);
        let report = LayoutReport::new(&layout, 256 << 20);
        let text = report.text();
        assert!(text.starts_with("DXGK_QUERYSEGMENTOUT3 (WDDM 1.3, DXGK_SEGMENTDESCRIPTOR3); VRAM BAR 256 MiB\nNbSegment = 2\n"));
        assert!(text.contains("  Flags.Value             0x00000011  Aperture|CacheCoherent\n"));
        assert!(text.contains("NbOfBanks"));
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["segments"][0]["flags"], 4);
        assert_eq!(json["segments"][0]["bar_offset"], 0);
        assert_eq!(json["segments"][1]["bar_offset"], serde_json::Value::Null);
        assert_eq!(json["segments"][1]["size"], 512u64 << 20);
        assert_eq!(json["paging_buffer_size"], 65536);

        let mut wddm2 = layout;
        wddm2.wddm_version = WDDM_GPU_WDDM_2_0;
        let text = LayoutReport::new(&wddm2, 256 << 20).text();
        assert!(text.starts_with("DXGK_QUERYSEGMENTOUT4 (WDDM 2.0, DXGK_SEGMENTDESCRIPTOR4)"));
        assert!(!text.contains("NbOfBanks"));
        assert!(!text.contains("DXGK_GPUMMUCAPS"));
    }

    #[test]
    fn a_gpummu_layout_reports_its_caps_and_every_level() {
        use wddm_gpu_abi::build::gpuva::gpummu_caps;
        use wddm_gpu_abi::gpummu_rules::validate_gpummu;
        use wddm_gpu_abi::gpuva::WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL;

        let mut layout = SegmentLayout::default_for_vram(256 << 20);
        layout.wddm_version = WDDM_GPU_WDDM_2_0;
        let caps = gpummu_caps(&[9, 9, 9, 9], WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL);
        layout.gpummu = Some(validate_gpummu(&caps, &[4, 0x11]).unwrap());
        let report = LayoutReport::new(&layout, 256 << 20);
        let text = report.text();
        assert!(text.contains("  PageTableUpdateMode                  2 (gpu_physical)\n"));
        assert!(text.contains("  VirtualAddressBitCount               48\n"));
        assert!(text.contains(
            "level 3 (DXGKQAITYPE_PAGETABLELEVELDESC, LevelIndex 3): IndexBits 9, SegmentId 0"
        ));
        assert!(text.contains("InvalidTlbEntriesNotCached"));
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["gpummu"]["page_table_level_count"], 4);
        assert_eq!(
            json["gpummu"]["levels"][0]["page_table_size_in_bytes"],
            4096
        );
        assert_eq!(json["gpummu"]["levels"].as_array().unwrap().len(), 4);
    }
}
