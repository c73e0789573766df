//! The capset corpus: valid blobs and one blob per rule of `wddm_gpu_abi::capset_rules` broken.
//! This test checks the Rust validator accepts the valid ones and refuses each broken one for
//! its rule, and that every rule has a blob; it keeps `cdev/tests/capset_corpus.h` equal to the
//! corpus, where the C library's unit test (`test_capset.c`) runs `capset.c` over the same
//! blobs. A rule the two validators disagree on fails one side. `WDDM_GPU_UPDATE_HEADERS=1 cargo
//! test` rewrites the C file.

mod c_corpus;

use std::fmt::Write;
use std::mem::size_of;

use wddm_gpu_abi::caps::{
    WddmGpuCapsHeader, WddmGpuSegmentDesc, WddmGpuVramBar, WDDM_GPU_BAR_MODE_IVSHMEM,
    WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED, WDDM_GPU_CAPSET_VERSION,
    WDDM_GPU_CAPS_MAGIC, WDDM_GPU_NO_BAR_OFFSET, WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0,
};
use wddm_gpu_abi::capset_rules::{validate_capset, CapsetError};
use wddm_gpu_abi::segment_flags::SegmentFlags as F;
use zerocopy::{FromBytes, IntoBytes};

use crate::c_corpus::{hex, keep_header_current};

const MIB: u64 = 1 << 20;
const BAR_ADDRESS: u64 = 0xfe00_0000;
const BAR_SIZE: u64 = 32 * MIB;
const HEADER: usize = size_of::<WddmGpuCapsHeader>();
const DESC: usize = size_of::<WddmGpuSegmentDesc>();

/// A blob being edited: header, three segments, two bank ends; `cut` bytes dropped at the end
/// and `pad` zero bytes added after it.
#[derive(Clone)]
struct Caps {
    h: WddmGpuCapsHeader,
    seg: [WddmGpuSegmentDesc; 3],
    banks: [u64; 2],
    cut: usize,
    pad: usize,
}

impl Caps {
    /// Segment 1: CPU-visible VRAM in the BAR; 2: banked device-only VRAM (WDDM 2.0: no banks,
    /// 64 KiB pages); 3: the aperture holding the paging buffer.
    fn valid(wddm2: bool) -> Self {
        let total = HEADER + 3 * DESC + 16;
        let h = WddmGpuCapsHeader {
            magic: WDDM_GPU_CAPS_MAGIC,
            version: WDDM_GPU_CAPSET_VERSION,
            total_size: u32::try_from(total).unwrap(),
            wddm_version: if wddm2 {
                WDDM_GPU_WDDM_2_0
            } else {
                WDDM_GPU_WDDM_1_3
            },
            segment_count: 3,
            segment_desc_size: u32::try_from(DESC).unwrap(),
            segments_offset: u32::try_from(HEADER).unwrap(),
            bank_table_offset: u32::try_from(HEADER + 3 * DESC).unwrap(),
            bank_entry_count: if wddm2 { 0 } else { 2 },
            paging_buffer_segment_id: 3,
            paging_buffer_size: 64 << 10,
            paging_buffer_private_data_size: 16,
            max_frame_list_entries: 512,
            max_packet_size: 256,
            vram_bar: WddmGpuVramBar {
                mode: WDDM_GPU_BAR_MODE_IVSHMEM,
                state: WDDM_GPU_BAR_STATE_KNOWN,
                generation: 3,
                pci_function: 1,
                bar_index: 2,
                reserved: 0,
                guest_physical_address: BAR_ADDRESS,
                size: BAR_SIZE,
            },
        };
        let vram = WddmGpuSegmentDesc {
            id: 1,
            flags: F::CPU_VISIBLE.bits(),
            size: 16 * MIB,
            commit_limit: 16 * MIB,
            bar_offset: 0,
            cpu_translated_address: BAR_ADDRESS,
            ..Default::default()
        };
        let banked = WddmGpuSegmentDesc {
            id: 2,
            flags: if wddm2 {
                F::USE_64KB_PAGES
            } else {
                F::USE_BANKING
            }
            .bits(),
            base_address: 16 * MIB,
            size: 8 * MIB,
            commit_limit: 8 * MIB,
            bar_offset: WDDM_GPU_NO_BAR_OFFSET,
            bank_count: if wddm2 { 0 } else { 2 },
            ..Default::default()
        };
        let aperture = WddmGpuSegmentDesc {
            id: 3,
            flags: F::APERTURE.bits(),
            base_address: 0x4000_0000,
            size: 4 * MIB,
            commit_limit: 4 * MIB,
            bar_offset: WDDM_GPU_NO_BAR_OFFSET,
            ..Default::default()
        };
        Self {
            h,
            seg: [vram, banked, aperture],
            banks: [4 * MIB, 8 * MIB],
            cut: 0,
            pad: 0,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut blob = self.h.as_bytes().to_vec();
        blob.extend_from_slice(self.seg.as_bytes());
        blob.extend_from_slice(self.banks.as_bytes());
        blob.truncate(blob.len().saturating_sub(self.cut));
        blob.resize(blob.len() + self.pad, 0);
        blob
    }
}

type Edit = fn(&mut Caps);

/// (name, the rule it breaks or "" for a valid blob, WDDM 2.0 base, edit).
const CORPUS: &[(&str, &str, bool, Edit)] = &[
    ("valid_1_3", "", false, |_| {}),
    ("valid_2_0", "", true, |_| {}),
    ("valid_padded", "", false, |c| c.pad = 24),
    ("valid_not_mapped", "", false, |c| {
        c.h.vram_bar.state = WDDM_GPU_BAR_STATE_NOT_MAPPED;
        c.seg[0].cpu_translated_address = 0;
    }),
    ("short_blob", "truncated", false, |c| c.cut = 3 * DESC + 17),
    ("total_above_blob", "truncated", false, |c| c.cut = 8),
    ("magic", "magic", false, |c| c.h.magic ^= 1),
    ("version", "version", false, |c| c.h.version += 1),
    ("total_below_header", "total_size", false, |c| {
        c.h.total_size = 8
    }),
    ("wddm_version", "wddm_version", false, |c| {
        c.h.wddm_version = 0x0201
    }),
    ("no_frame_list", "limit.no_frame_list_entries", false, |c| {
        c.h.max_frame_list_entries = 0
    }),
    (
        "packet_too_small",
        "limit.packet_size_too_small",
        false,
        |c| c.h.max_packet_size = 8,
    ),
    (
        "packet_unaligned",
        "limit.packet_size_unaligned",
        false,
        |c| c.h.max_packet_size = 260,
    ),
    ("bar_mode", "vram_bar.unknown_mode", false, |c| {
        c.h.vram_bar.mode = 3
    }),
    ("bar_reserved", "vram_bar.reserved_not_zero", false, |c| {
        c.h.vram_bar.reserved = 1
    }),
    (
        "bar_function",
        "vram_bar.pci_function_out_of_range",
        false,
        |c| c.h.vram_bar.pci_function = 8,
    ),
    ("bar_index", "vram_bar.bar_index_out_of_range", false, |c| {
        c.h.vram_bar.bar_index = 6
    }),
    ("bar_state", "vram_bar.unknown_state", false, |c| {
        c.h.vram_bar.state = 2
    }),
    (
        "bar_unaligned",
        "vram_bar.address_not_page_aligned",
        false,
        |c| {
            c.h.vram_bar.guest_physical_address += 0x800;
            c.seg[0].cpu_translated_address += 0x800;
        },
    ),
    (
        "bar_address_wraps",
        "vram_bar.address_overflow",
        false,
        |c| {
            c.h.vram_bar.guest_physical_address = u64::MAX - 4095;
            c.seg[0].cpu_translated_address = u64::MAX - 4095;
        },
    ),
    ("no_segments", "no_segments", false, |c| {
        c.h.segment_count = 0
    }),
    ("desc_size_small", "desc_too_small", false, |c| {
        c.h.segment_desc_size = u32::try_from(DESC).unwrap() - 8
    }),
    ("segments_in_header", "table_out_of_bounds", false, |c| {
        c.h.segments_offset = 8
    }),
    ("segments_past_end", "table_out_of_bounds", false, |c| {
        c.h.segment_desc_size = u32::try_from(DESC).unwrap() + 64
    }),
    ("banks_past_end", "table_out_of_bounds", false, |c| {
        c.h.bank_entry_count = 3
    }),
    // Room for 32 descriptors, so only the count breaks a rule.
    ("too_many_segments", "too_many_segments", false, |c| {
        c.h.segment_count = 32;
        c.pad = 32 * DESC;
        c.h.total_size += u32::try_from(c.pad).unwrap();
    }),
    ("banks_unaligned", "bank_table_unaligned", false, |c| {
        c.h.bank_table_offset -= 4
    }),
    ("segment_id_order", "segment.id_out_of_order", false, |c| {
        c.seg[1].id = 3
    }),
    ("reserved_flag", "segment.reserved_flags", false, |c| {
        c.seg[0].flags |= 1 << 22
    }),
    (
        "wddm2_flag_on_1_3",
        "segment.wddm2_only_flags",
        false,
        |c| c.seg[1].flags |= F::USE_64KB_PAGES.bits(),
    ),
    ("banks_on_2_0", "segment.banks_on_wddm2", false, |c| {
        c.h.wddm_version = WDDM_GPU_WDDM_2_0
    }),
    ("size_zero", "segment.size_zero", false, |c| {
        c.seg[1].size = 0
    }),
    (
        "size_unaligned",
        "segment.size_not_page_multiple",
        false,
        |c| c.seg[1].size += 100,
    ),
    (
        "size_not_64k",
        "segment.size_not_page_multiple",
        true,
        |c| {
            c.seg[1].size += 4096;
            c.seg[1].commit_limit += 4096;
        },
    ),
    ("size_wraps", "segment.base_address_overflow", false, |c| {
        c.seg[2].base_address = u64::MAX - 4095
    }),
    (
        "commit_above_size",
        "segment.commit_limit_above_size",
        false,
        |c| c.seg[1].commit_limit = c.seg[1].size + 4096,
    ),
    (
        "banks_without_flag",
        "segment.banks_without_use_banking",
        false,
        |c| c.seg[1].flags &= !F::USE_BANKING.bits(),
    ),
    (
        "banking_flag_without_banks",
        "segment.use_banking_without_banks",
        false,
        |c| c.seg[0].flags |= F::USE_BANKING.bits(),
    ),
    ("too_many_banks", "segment.too_many_banks", false, |c| {
        c.seg[1].bank_count = 128
    }),
    (
        "banks_past_table",
        "segment.banks_outside_table",
        false,
        |c| c.seg[1].bank_table_index = 1,
    ),
    (
        "banks_not_increasing",
        "segment.bank_end_not_increasing",
        false,
        |c| c.banks[1] = c.banks[0],
    ),
    (
        "bank_past_segment",
        "segment.bank_end_past_size",
        false,
        |c| c.banks[1] = c.seg[1].size + 4096,
    ),
    (
        "bank_unaligned",
        "segment.bank_end_not_page_multiple",
        false,
        |c| c.banks[0] += 512,
    ),
    (
        "cpu_visible_outside_bar",
        "segment.cpu_visible_without_bar_offset",
        false,
        |c| c.seg[1].flags |= F::CPU_VISIBLE.bits(),
    ),
    (
        "cpu_address_outside_bar",
        "segment.cpu_address_outside_bar",
        false,
        |c| c.seg[2].cpu_translated_address = BAR_ADDRESS,
    ),
    (
        "window_unaligned",
        "segment.bar_offset_not_page_multiple",
        false,
        |c| {
            c.seg[0].bar_offset = 512;
            c.seg[0].cpu_translated_address = BAR_ADDRESS + 512;
        },
    ),
    (
        "window_past_bar",
        "segment.bar_window_outside_bar",
        false,
        |c| {
            c.seg[0].bar_offset = BAR_SIZE - 4096;
            c.seg[0].cpu_translated_address = BAR_ADDRESS + BAR_SIZE - 4096;
        },
    ),
    (
        "window_wraps",
        "segment.bar_window_outside_bar",
        false,
        |c| {
            c.seg[0].bar_offset = u64::MAX - 4095;
            c.seg[0].cpu_translated_address = 0;
        },
    ),
    (
        "cpu_address_wrong",
        "segment.cpu_address_mismatch",
        false,
        |c| c.seg[0].cpu_translated_address += 4096,
    ),
    (
        "cpu_address_not_mapped",
        "segment.cpu_address_mismatch",
        false,
        |c| c.h.vram_bar.state = WDDM_GPU_BAR_STATE_NOT_MAPPED,
    ),
    (
        "windows_overlap",
        "segment.bar_window_overlap",
        false,
        |c| {
            c.seg[1].bar_offset = 8 * MIB;
            c.seg[1].cpu_translated_address = BAR_ADDRESS + 8 * MIB;
        },
    ),
    (
        "paging_segment_memory",
        "paging_buffer_segment",
        false,
        |c| c.h.paging_buffer_segment_id = 1,
    ),
    (
        "paging_segment_missing",
        "paging_buffer_segment",
        false,
        |c| c.h.paging_buffer_segment_id = 4,
    ),
];

fn corpus() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    CORPUS
        .iter()
        .map(|&(name, rule, wddm2, edit)| {
            let mut caps = Caps::valid(wddm2);
            edit(&mut caps);
            (name, rule, caps.bytes())
        })
        .collect()
}

#[test]
fn the_rust_validator_refuses_each_broken_blob_for_its_rule() {
    for (name, rule, blob) in corpus() {
        match validate_capset(&blob) {
            Ok(_) => assert_eq!(rule, "", "{name}: accepted"),
            Err(err) => assert_eq!(err.rule(), rule, "{name}: {err}"),
        }
    }
}

#[test]
fn every_rule_has_a_broken_blob() {
    for rule in CapsetError::RULES {
        assert!(
            CORPUS.iter().any(|entry| entry.1 == rule),
            "no corpus blob breaks {rule}"
        );
    }
}

#[test]
fn the_padded_blob_has_the_valid_header() {
    // Padding past total_size is not part of the blob the header describes.
    let padded = &corpus()[2].2;
    let (header, _) = WddmGpuCapsHeader::read_from_prefix(padded).unwrap();
    assert!((header.total_size as usize) < padded.len());
}

/// One run of bytes in which a corpus blob differs from its valid base (at most 8 bytes, the
/// widest field).
struct Patch {
    offset: usize,
    bytes: Vec<u8>,
}

/// Where `blob` differs from `base` (read as zero past its end), in runs of at most 8 bytes.
fn patches(base: &[u8], blob: &[u8]) -> Vec<Patch> {
    let mut patches: Vec<Patch> = Vec::new();
    for (offset, &byte) in blob.iter().enumerate() {
        if base.get(offset).copied().unwrap_or(0) == byte {
            continue;
        }
        match patches.last_mut() {
            Some(last) if last.offset + last.bytes.len() == offset && last.bytes.len() < 8 => {
                last.bytes.push(byte);
            }
            _ => patches.push(Patch {
                offset,
                bytes: vec![byte],
            }),
        }
    }
    patches
}

/// What the C test rebuilds from a base and its patches: `size` bytes of `base` (zero past its
/// end), patched.
fn rebuilt(base: &[u8], size: usize, patches: &[Patch]) -> Vec<u8> {
    let mut blob = vec![0; size];
    let kept = size.min(base.len());
    blob[..kept].copy_from_slice(&base[..kept]);
    for patch in patches {
        blob[patch.offset..patch.offset + patch.bytes.len()].copy_from_slice(&patch.bytes);
    }
    blob
}

/// The C form of the corpus: the valid WDDM 1.3 blob in full, and every entry as its size and the
/// bytes in which it differs from that blob, so each entry shows what it changes.
fn c_corpus() -> String {
    let mut out = String::from(
        "/* Generated by guest-tests/tests/capset_corpus.rs; do not edit (regenerate with\n * WDDM_GPU_UPDATE_HEADERS=1 cargo test -p wddm-guest-tests --test capset_corpus).\n * The capset corpus: valid blobs (rule \"\") and one blob per wddm-gpu-abi capset rule broken,\n * each as corpus_base (the valid WDDM 1.3 blob) cut or zero-padded to `size` bytes, then
 * patched. */\n\n#ifndef CDEV_TEST_CAPSET_CORPUS_H\n#define CDEV_TEST_CAPSET_CORPUS_H\n\n#include <stddef.h>\n#include <stdint.h>\n\ntypedef struct capset_patch {\n    uint16_t offset;\n    uint8_t len;\n    uint8_t bytes[8];\n} capset_patch;\n\ntypedef struct capset_corpus_entry {\n    const char *name;\n    const char *rule; /* the wddm-gpu-abi rule name, \"\" for a valid blob */\n    uint32_t size;\n    uint32_t patch_count;\n    const capset_patch *patches;\n} capset_corpus_entry;\n\n",
    );
    let base = Caps::valid(false).bytes();
    let _ = writeln!(out, "static const uint8_t corpus_base[{}] = {{", base.len());
    for line in base.chunks(16) {
        let _ = writeln!(out, "    {},", hex(line));
    }
    out.push_str("};\n");
    let mut entries = String::new();
    for (name, rule, blob) in corpus() {
        let patches = patches(&base, &blob);
        assert_eq!(rebuilt(&base, blob.len(), &patches), blob, "{name}");
        let patch_array = if patches.is_empty() {
            "NULL".to_string()
        } else {
            let _ = writeln!(out, "static const capset_patch corpus_{name}[] = {{");
            for patch in &patches {
                let _ = writeln!(
                    out,
                    "    {{{}, {}, {{{}}}}},",
                    patch.offset,
                    patch.bytes.len(),
                    hex(&patch.bytes)
                );
            }
            out.push_str("};\n");
            format!("corpus_{name}")
        };
        let _ = writeln!(
            entries,
            "    {{\"{name}\", \"{rule}\", {}, {}, {patch_array}}},",
            blob.len(),
            patches.len()
        );
    }
    out.push_str("\nstatic const capset_corpus_entry capset_corpus[] = {\n");
    out.push_str(&entries);
    out.push_str("};\n\n#endif\n");
    out
}

#[test]
fn c_corpus_is_current() {
    keep_header_current("capset_corpus.h", "capset_corpus", &c_corpus());
}
