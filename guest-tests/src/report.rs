//! Renders a validated layout the way a KMD would hand it to dxgkrnl, for people (text) and for
//! harnesses (JSON values). The text follows the capset's `wddm_version`: WDDM 1.3 fills
//! `DXGK_QUERYSEGMENTOUT3` with `DXGK_SEGMENTDESCRIPTOR3`s (banks included), WDDM 2.0 fills
//! `DXGK_QUERYSEGMENTOUT4` with `DXGK_SEGMENTDESCRIPTOR4`s (no banks; `CpuTranslatedAddress`
//! shares a union with `CpuHostAperture`).

use serde_json::{json, Value};
use wddm_gpu_abi::caps::{
    WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_WDDM_2_0,
};
/// The DXGK structures a layout is reported in: `(query output, segment descriptor)`.
pub use wddm_gpu_abi::capset_rules::dxgk_structs;
use wddm_gpu_abi::segment_flags::SegmentFlags;

use crate::caps::{Layout, Segment};

/// The layout as `DXGK_QUERYSEGMENTOUT3` (WDDM 1.3) or `DXGK_QUERYSEGMENTOUT4` (WDDM 2.0) would
/// hold it, one field per line.
pub fn layout_text(layout: &Layout) -> String {
    let h = &layout.header;
    let wddm2 = h.wddm_version == WDDM_GPU_WDDM_2_0;
    let (out_struct, desc_struct) = dxgk_structs(h.wddm_version);
    let mut out = format!("{out_struct}\n");
    out += &format!(
        "  NbSegment                     {}\n",
        layout.segments.len()
    );
    out += &format!(
        "  pSegmentDescriptor            {desc_struct}[{}]\n",
        layout.segments.len()
    );
    for segment in &layout.segments {
        out += &if wddm2 {
            descriptor4_text(segment)
        } else {
            descriptor3_text(segment)
        };
    }
    out += &format!(
        "  PagingBufferSegmentId         {}\n",
        h.paging_buffer_segment_id
    );
    out += &format!(
        "  PagingBufferSize              {}\n",
        size_text(u64::from(h.paging_buffer_size))
    );
    out += &format!(
        "  PagingBufferPrivateDataSize   {}\n",
        h.paging_buffer_private_data_size
    );
    if wddm2 {
        out += "  SegmentDescriptorStride       sizeof(DXGK_SEGMENTDESCRIPTOR4)\n";
    }
    out += &format!(
        "WDDM version {:#06x}; device limits: {} frame-list entries, {} bytes per packet\n",
        h.wddm_version, h.max_frame_list_entries, h.max_packet_size
    );
    out += &format!("VRAM BAR locator: {}\n", vram_bar_text(&h.vram_bar));
    out
}

/// The segment heading: id, kind and where the segment lives.
fn heading(s: &Segment) -> String {
    let place = match s.bar_offset() {
        Some(offset) => format!(", CPU-visible VRAM at BAR offset {offset:#x}"),
        None if s.is_aperture() => String::new(),
        None => ", device-only VRAM, not in the BAR".to_string(),
    };
    format!("Segment {} ({}{place})", s.desc.id, s.kind())
}

fn bar_offset_text(s: &Segment) -> String {
    s.bar_offset()
        .map_or_else(|| "(not in the BAR)".to_string(), |o| format!("{o:#x}"))
}

/// A `DXGK_SEGMENTDESCRIPTOR3`, in its field order.
fn descriptor3_text(s: &Segment) -> String {
    let d = &s.desc;
    let banks = if s.banks.is_empty() {
        "(none)".to_string()
    } else {
        s.banks
            .iter()
            .map(|b| format!("{b:#x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "  {heading}: DXGK_SEGMENTDESCRIPTOR3\n\
         \x20   Flags.Value                 {flags:#010x} {names}\n\
         \x20   BaseAddress                 {base:#x}\n\
         \x20   CpuTranslatedAddress        {cpu:#x}\n\
         \x20   Size                        {size}\n\
         \x20   CommitLimit                 {commit}\n\
         \x20   NbOfBanks                   {nbanks}\n\
         \x20   pBankRangeTable             {banks}\n\
         \x20   SystemMemoryEndAddress      {sysend:#x}\n\
         \x20   (device) bar_offset         {bar_offset}\n",
        heading = heading(s),
        flags = d.flags,
        names = s.flags().names(),
        base = d.base_address,
        cpu = d.cpu_translated_address,
        size = size_text(d.size),
        commit = size_text(d.commit_limit),
        nbanks = d.bank_count,
        sysend = d.system_memory_end_address,
        bar_offset = bar_offset_text(s),
    )
}

/// A `DXGK_SEGMENTDESCRIPTOR4`, in its field order: no banks; `CpuTranslatedAddress` is one arm
/// of a union whose other arm, `CpuHostAperture`, is used when `SupportsCpuHostAperture` is set.
fn descriptor4_text(s: &Segment) -> String {
    let d = &s.desc;
    let translated = if s.flags().contains(SegmentFlags::SUPPORTS_CPU_HOST_APERTURE) {
        format!(
            "CpuHostAperture             (union arm in use: SupportsCpuHostAperture is set; \
             the capset describes no host aperture, cpu_translated_address {:#x})",
            d.cpu_translated_address
        )
    } else {
        format!(
            "CpuTranslatedAddress        {:#x} (union with CpuHostAperture; \
             SupportsCpuHostAperture is clear)",
            d.cpu_translated_address
        )
    };
    format!(
        "  {heading}: DXGK_SEGMENTDESCRIPTOR4\n\
         \x20   Flags.Value                 {flags:#010x} {names}\n\
         \x20   BaseAddress                 {base:#x}\n\
         \x20   Size                        {size}\n\
         \x20   CommitLimit                 {commit}\n\
         \x20   SystemMemoryEndAddress      {sysend:#x}\n\
         \x20   {translated}\n\
         \x20   NumInvalidMemoryRanges      0\n\
         \x20   Vpr* (5 fields)             0 (the capset describes no video protected region)\n\
         \x20   NumUEFIFrameBufferRanges    0\n\
         \x20   (device) bar_offset         {bar_offset}\n",
        heading = heading(s),
        flags = d.flags,
        names = s.flags().names(),
        base = d.base_address,
        size = size_text(d.size),
        commit = size_text(d.commit_limit),
        sysend = d.system_memory_end_address,
        bar_offset = bar_offset_text(s),
    )
}

/// One-line description of the BAR locator.
pub fn vram_bar_text(bar: &WddmGpuVramBar) -> String {
    format!(
        "mode={} state={} generation={} pci_function={} bar_index={} guest_physical_address={:#x} size={}",
        bar_mode_name(bar.mode),
        bar_state_name(bar.state),
        bar.generation,
        bar.pci_function,
        bar.bar_index,
        bar.guest_physical_address,
        size_text(bar.size)
    )
}

fn bar_mode_name(mode: u32) -> &'static str {
    match mode {
        WDDM_GPU_BAR_MODE_IVSHMEM => "ivshmem",
        WDDM_GPU_BAR_MODE_SHMEM => "shmem",
        _ => "unknown",
    }
}

fn bar_state_name(state: u32) -> &'static str {
    match state {
        WDDM_GPU_BAR_STATE_NOT_MAPPED => "not_mapped",
        WDDM_GPU_BAR_STATE_KNOWN => "known",
        _ => "unknown",
    }
}

/// `0x10000000 (256 MiB)`.
fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
    {
        Some((unit, name)) => format!("{bytes:#x} ({} {name})", bytes / unit),
        None => format!("{bytes:#x}"),
    }
}

/// The `segments` array of the JSON report.
pub fn segments_json(layout: &Layout) -> Value {
    layout
        .segments
        .iter()
        .map(|s| {
            json!({
                "id": s.desc.id,
                "kind": s.kind(),
                "flags": s.desc.flags,
                "flag_names": s.flags().names(),
                "size": s.desc.size,
                "base_address": s.desc.base_address,
                "commit_limit": s.desc.commit_limit,
                "cpu_translated_address": s.desc.cpu_translated_address,
                "bar_offset": s.bar_offset(),
                "system_memory_end_address": s.desc.system_memory_end_address,
                "banks": s.banks,
            })
        })
        .collect()
}

/// The `vram_bar` object of the JSON report.
pub fn vram_bar_json(bar: &WddmGpuVramBar) -> Value {
    json!({
        "mode": bar.mode,
        "mode_name": bar_mode_name(bar.mode),
        "state": bar.state,
        "state_name": bar_state_name(bar.state),
        "generation": bar.generation,
        "pci_function": bar.pci_function,
        "bar_index": bar.bar_index,
        "guest_physical_address": bar.guest_physical_address,
        "size": bar.size,
    })
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::caps::WDDM_GPU_WDDM_1_3;

    use super::*;
    use crate::caps::tests::{
        aperture_desc, build_version, default_blob, device_only_then_aperture, vram_desc, BAR, MIB,
    };
    use crate::caps::{self};

    fn assert_has(text: &str, fields: &[&str]) {
        for field in fields {
            assert!(text.contains(field), "missing {field:?} in\n{text}");
        }
    }

    fn assert_lacks(text: &str, fields: &[&str]) {
        for field in fields {
            assert!(!text.contains(field), "unexpected {field:?} in\n{text}");
        }
    }

    #[test]
    fn text_names_every_dxgk_field() {
        let layout = caps::parse(&default_blob()).unwrap();
        let text = layout_text(&layout);
        assert!(text.starts_with("DXGK_QUERYSEGMENTOUT3\n"), "{text}");
        assert_has(
            &text,
            &[
                "NbSegment                     2",
                "pSegmentDescriptor            DXGK_SEGMENTDESCRIPTOR3[2]",
                "Segment 1 (memory, CPU-visible VRAM at BAR offset 0x0): DXGK_SEGMENTDESCRIPTOR3",
                "Segment 2 (aperture): DXGK_SEGMENTDESCRIPTOR3",
                "0x00000004 CpuVisible",
                "0x00000011 Aperture|CacheCoherent",
                "Size                        0x10000000 (256 MiB)",
                "CpuTranslatedAddress        0xfe0000000000\n",
                "NbOfBanks                   0",
                "pBankRangeTable             (none)",
                "SystemMemoryEndAddress",
                "PagingBufferSegmentId         0",
                "PagingBufferSize              0x10000 (64 KiB)",
                "PagingBufferPrivateDataSize",
                "WDDM version 0x0103",
                "mode=ivshmem state=known generation=1 pci_function=1 bar_index=2",
            ],
        );
        assert_lacks(
            &text,
            &[
                "DESCRIPTOR4",
                "QUERYSEGMENTOUT4",
                "CpuHostAperture",
                "Stride",
            ],
        );
    }

    /// WDDM 1.3, banked VRAM, device-only VRAM at a non-zero BaseAddress.
    #[test]
    fn descriptor3_text_shows_banks_and_device_only_vram() {
        let mut vram = vram_desc();
        vram.flags |= SegmentFlags::USE_BANKING.bits();
        vram.bank_count = 2;
        let [local, aperture] =
            device_only_then_aperture(SegmentFlags::PRESERVED_DURING_STANDBY.bits());
        let blob = build_version(
            WDDM_GPU_WDDM_1_3,
            &[vram, local, aperture],
            &[128 * MIB, 256 * MIB],
        );
        let text = layout_text(&caps::parse(&blob).unwrap());
        assert!(text.starts_with("DXGK_QUERYSEGMENTOUT3\n"), "{text}");
        assert_has(
            &text,
            &[
                "NbSegment                     3",
                "0x0000000c CpuVisible|UseBanking",
                "NbOfBanks                   2",
                "pBankRangeTable             0x8000000 0x10000000",
                "Segment 2 (memory, device-only VRAM, not in the BAR): DXGK_SEGMENTDESCRIPTOR3",
                "BaseAddress                 0x100000000",
                "(device) bar_offset         (not in the BAR)",
                "Segment 3 (aperture): DXGK_SEGMENTDESCRIPTOR3",
            ],
        );
    }

    #[test]
    fn wddm2_text_uses_descriptor4_without_banks() {
        let mut vram = vram_desc();
        vram.flags |= (SegmentFlags::USE_64KB_PAGES | SegmentFlags::LOCAL_BUDGET_GROUP).bits();
        let mut aperture = aperture_desc();
        aperture.flags |= SegmentFlags::NON_LOCAL_BUDGET_GROUP.bits();
        let blob = build_version(WDDM_GPU_WDDM_2_0, &[vram, aperture], &[]);
        let layout = caps::parse(&blob).unwrap();
        let text = layout_text(&layout);
        assert!(text.starts_with("DXGK_QUERYSEGMENTOUT4\n"), "{text}");
        assert_has(
            &text,
            &[
                "NbSegment                     2",
                "pSegmentDescriptor            DXGK_SEGMENTDESCRIPTOR4[2]",
                "Segment 1 (memory, CPU-visible VRAM at BAR offset 0x0): DXGK_SEGMENTDESCRIPTOR4",
                "Segment 2 (aperture): DXGK_SEGMENTDESCRIPTOR4",
                "0x00080804 CpuVisible|Use64KBPages|LocalBudgetGroup",
                "0x00100011 Aperture|CacheCoherent|NonLocalBudgetGroup",
                &format!(
                    "CpuTranslatedAddress        {BAR:#x} (union with CpuHostAperture; \
                     SupportsCpuHostAperture is clear)"
                ),
                "CpuTranslatedAddress        0x0 (union with CpuHostAperture",
                "NumInvalidMemoryRanges      0",
                "NumUEFIFrameBufferRanges    0",
                "SystemMemoryEndAddress      0x0",
                "PagingBufferSegmentId         0",
                "PagingBufferSize              0x10000 (64 KiB)",
                "PagingBufferPrivateDataSize   0",
                "SegmentDescriptorStride       sizeof(DXGK_SEGMENTDESCRIPTOR4)",
                "WDDM version 0x0200",
            ],
        );
        assert_lacks(
            &text,
            &[
                "NbOfBanks",
                "pBankRangeTable",
                "DESCRIPTOR3",
                "QUERYSEGMENTOUT3",
            ],
        );
        // DESCRIPTOR4 field order: SystemMemoryEndAddress comes before the union.
        let sysend = text.find("SystemMemoryEndAddress").unwrap();
        let translated = text.find("CpuTranslatedAddress").unwrap();
        assert!(sysend < translated, "{text}");
    }

    #[test]
    fn wddm2_host_aperture_arm_is_named() {
        let mut vram = vram_desc();
        vram.flags |= SegmentFlags::SUPPORTS_CPU_HOST_APERTURE.bits();
        let blob = build_version(WDDM_GPU_WDDM_2_0, &[vram, aperture_desc()], &[]);
        let text = layout_text(&caps::parse(&blob).unwrap());
        assert_has(
            &text,
            &["CpuHostAperture             (union arm in use: SupportsCpuHostAperture is set"],
        );
    }

    #[test]
    fn dxgk_structs_follow_the_version() {
        assert_eq!(
            dxgk_structs(WDDM_GPU_WDDM_1_3),
            ("DXGK_QUERYSEGMENTOUT3", "DXGK_SEGMENTDESCRIPTOR3")
        );
        assert_eq!(
            dxgk_structs(WDDM_GPU_WDDM_2_0),
            ("DXGK_QUERYSEGMENTOUT4", "DXGK_SEGMENTDESCRIPTOR4")
        );
    }

    #[test]
    fn json_has_null_bar_offset_outside_the_bar() {
        let layout = caps::parse(&default_blob()).unwrap();
        let segs = segments_json(&layout);
        assert_eq!(segs[0]["bar_offset"], json!(0));
        assert_eq!(segs[0]["flags"], json!(4));
        assert_eq!(segs[1]["bar_offset"], Value::Null);
        assert_eq!(segs[1]["flag_names"], json!("Aperture|CacheCoherent"));
        assert_eq!(
            vram_bar_json(&layout.header.vram_bar)["bar_index"],
            json!(2)
        );
    }
}
