//! Renders a validated layout the way a KMD would hand it to dxgkrnl (`DXGK_QUERYSEGMENTOUT3`),
//! for people (text) and for harnesses (JSON values).

use serde_json::{json, Value};
use wddm_gpu_abi::caps::{
    WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_MODE_SHMEM, WDDM_GPU_BAR_STATE_KNOWN,
    WDDM_GPU_BAR_STATE_NOT_MAPPED,
};

use crate::caps::{Layout, Segment};

/// The layout as `DXGK_QUERYSEGMENTOUT3` would hold it, one field per line.
pub fn layout_text(layout: &Layout) -> String {
    let h = &layout.header;
    let mut out = String::from("DXGK_QUERYSEGMENTOUT3\n");
    out += &format!(
        "  NbSegment                     {}\n",
        layout.segments.len()
    );
    for segment in &layout.segments {
        out += &segment_text(segment);
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
    out += &format!(
        "WDDM version {:#06x}; device limits: {} frame-list entries, {} bytes per packet\n",
        h.wddm_version, h.max_frame_list_entries, h.max_packet_size
    );
    out += &format!("VRAM BAR locator: {}\n", vram_bar_text(&h.vram_bar));
    out
}

fn segment_text(s: &Segment) -> String {
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
    let bar_offset = s
        .bar_offset()
        .map_or_else(|| "(not in the BAR)".to_string(), |o| format!("{o:#x}"));
    format!(
        "  Segment {id} ({kind})\n\
         \x20   Flags.Value                 {flags:#010x} {names}\n\
         \x20   BaseAddress                 {base:#x}\n\
         \x20   CpuTranslatedAddress        {cpu:#x}\n\
         \x20   Size                        {size}\n\
         \x20   CommitLimit                 {commit}\n\
         \x20   NbOfBanks                   {nbanks}\n\
         \x20   pBankRangeTable             {banks}\n\
         \x20   SystemMemoryEndAddress      {sysend:#x}\n\
         \x20   (device) bar_offset         {bar_offset}\n",
        id = d.id,
        kind = s.kind(),
        flags = d.flags,
        names = s.flags().names(),
        base = d.base_address,
        cpu = d.cpu_translated_address,
        size = size_text(d.size),
        commit = size_text(d.commit_limit),
        nbanks = d.bank_count,
        sysend = d.system_memory_end_address,
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
        .find(|(unit, _)| bytes >= *unit && bytes % unit == 0)
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
    use super::*;
    use crate::caps::{self, tests::default_blob};

    #[test]
    fn text_names_every_dxgk_field() {
        let layout = caps::parse(&default_blob()).unwrap();
        let text = layout_text(&layout);
        for field in [
            "NbSegment                     2",
            "Segment 1 (memory)",
            "Segment 2 (aperture)",
            "0x00000004 CpuVisible",
            "0x00000011 Aperture|CacheCoherent",
            "Size                        0x10000000 (256 MiB)",
            "CpuTranslatedAddress        0xfe0000000000",
            "NbOfBanks",
            "SystemMemoryEndAddress",
            "PagingBufferSegmentId         0",
            "PagingBufferSize              0x10000 (64 KiB)",
            "PagingBufferPrivateDataSize",
            "mode=ivshmem state=known generation=1 pci_function=1 bar_index=2",
        ] {
            assert!(text.contains(field), "missing {field:?} in\n{text}");
        }
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
