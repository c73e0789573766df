//! The programming guide's values are the ABI crate's: every event kind, submission status, MMU
//! fault kind, access code and page-fault flag in its tables, every packet's opcode, structure
//! and size, every command's type, structures and sizes, every PTE bit, every constant it gives
//! a value for (`` `WDDM_GPU_CMD_SUBMIT` 0x8001 ``, `` `WDDM_GPU_CAPSET_ID` (63) ``) and every
//! structure it gives a size for (`` `WddmGpuPacketFence` (16) ``) is checked against
//! `wddm-gpu-abi`, and a family constant the crate declares that the guide's table lacks fails
//! too (the crate's sources are scanned for its members), so a KMD author reading the guide
//! reads what the device does.

use std::collections::BTreeSet;
use std::fs;
use std::mem::size_of;
use std::path::{Path, PathBuf};

use wddm_gpu_abi::caps::*;
use wddm_gpu_abi::context::*;
use wddm_gpu_abi::ctrl::*;
use wddm_gpu_abi::gpuva::*;
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::status::*;
use wddm_gpu_abi::submit::*;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives one folder below the repository root")
        .to_owned()
}

fn guide() -> String {
    fs::read_to_string(repository().join("docs/programming-guide.md")).unwrap()
}

/// `(name, value)` of each constant, by its Rust name.
macro_rules! named {
    ($($constant:ident),* $(,)?) => {
        vec![$((stringify!($constant), u64::from($constant))),*]
    };
}

/// `(name, bytes)` of each structure.
macro_rules! sized {
    ($($structure:ident),* $(,)?) => {
        vec![$((stringify!($structure), size_of::<$structure>())),*]
    };
}

/// Every constant the guide may give a value for.
fn constants() -> Vec<(&'static str, u64)> {
    named![
        VIRTIO_GPU_CMD_GET_DISPLAY_INFO,
        VIRTIO_GPU_CMD_GET_CAPSET_INFO,
        VIRTIO_GPU_CMD_GET_CAPSET,
        WDDM_GPU_CMD_SUBMIT,
        WDDM_GPU_CMD_REGISTER_STATUS_PAGE,
        WDDM_GPU_CMD_WAIT_EVENT,
        WDDM_GPU_CMD_PREEMPT,
        WDDM_GPU_CMD_RESET,
        WDDM_GPU_CMD_SET_SCANOUT_VRAM,
        WDDM_GPU_CMD_CREATE_CONTEXT,
        WDDM_GPU_CMD_DESTROY_CONTEXT,
        WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE,
        WDDM_GPU_CMD_SUBMIT_VIRTUAL,
        WDDM_GPU_CMD_RESET_ENGINE,
        WDDM_GPU_CMD_QUERY_ENGINE_STATUS,
        WDDM_GPU_CMD_SET_POWER_STATE,
        WDDM_GPU_RESP_SUBMIT,
        WDDM_GPU_RESP_EVENT,
        WDDM_GPU_RESP_PREEMPT,
        WDDM_GPU_RESP_SUBMIT_VIRTUAL,
        WDDM_GPU_RESP_ENGINE_STATUS,
        WDDM_GPU_OP_TRANSFER,
        WDDM_GPU_OP_FILL,
        WDDM_GPU_OP_DISCARD_CONTENT,
        WDDM_GPU_OP_READ_PHYSICAL,
        WDDM_GPU_OP_WRITE_PHYSICAL,
        WDDM_GPU_OP_MAP_APERTURE,
        WDDM_GPU_OP_UNMAP_APERTURE,
        WDDM_GPU_OP_FENCE,
        WDDM_GPU_OP_MAP_APERTURE2,
        WDDM_GPU_OP_UPDATE_PAGE_TABLE,
        WDDM_GPU_OP_FLUSH_TLB,
        WDDM_GPU_OP_VIRTUAL_TRANSFER,
        WDDM_GPU_OP_VIRTUAL_FILL,
        WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES,
        WDDM_GPU_OP_SIGNAL_MONITORED_FENCE,
        WDDM_GPU_OP_NOTIFY_RESIDENCY,
        WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION,
        WDDM_GPU_VOP_COPY,
        WDDM_GPU_VOP_FILL,
        WDDM_GPU_VOP_SIGNAL,
        WDDM_GPU_CAPSET_ID,
        WDDM_GPU_MAX_SEGMENTS_WDDM_1_3,
        WDDM_GPU_MAX_SEGMENTS_WDDM_2_0,
        WDDM_GPU_MAX_DMA_BUFFER_SIZE,
        WDDM_GPU_FAULT_RING_ENTRIES,
        WDDM_GPU_SUBMIT_FLAG_PAGING,
        WDDM_GPU_CONTEXT_FLAG_CHECK_TLB,
    ]
}

/// Every structure the guide may give a size for.
fn structures() -> Vec<(&'static str, usize)> {
    sized![
        WddmGpuCtrlHdr,
        WddmGpuRespDisplayInfo,
        WddmGpuGetCapsetInfo,
        WddmGpuRespCapsetInfo,
        WddmGpuGetCapset,
        WddmGpuCmdSubmit,
        WddmGpuRespSubmit,
        WddmGpuCmdRegisterStatusPage,
        WddmGpuRespEvent,
        WddmGpuRespPreempt,
        WddmGpuCmdSetScanoutVram,
        WddmGpuCmdQueryEngineStatus,
        WddmGpuRespEngineStatus,
        WddmGpuCmdSetPowerState,
        WddmGpuCmdCreateContext,
        WddmGpuCmdDestroyContext,
        WddmGpuCmdSetRootPageTable,
        WddmGpuCmdSubmitVirtual,
        WddmGpuRespSubmitVirtual,
        WddmGpuCmdResetEngine,
        WddmGpuPacketTransfer,
        WddmGpuPacketFill,
        WddmGpuPacketSegmentAccess,
        WddmGpuPacketMapAperture,
        WddmGpuPacketUnmapAperture,
        WddmGpuPacketFence,
        WddmGpuPacketMapAperture2,
        WddmGpuPacketUpdatePageTable,
        WddmGpuPacketFlushTlb,
        WddmGpuPacketVirtualTransfer,
        WddmGpuPacketVirtualFill,
        WddmGpuPacketCopyPageTableEntries,
        WddmGpuPacketSignalMonitoredFence,
        WddmGpuPacketNotifyResidency,
        WddmGpuPacketUpdateContextAllocation,
        WddmGpuCopyRange,
        WddmGpuVirtualCopy,
        WddmGpuVirtualFill,
        WddmGpuVirtualSignal,
        WddmGpuMmuFault,
        WddmGpuPageFaultRecord,
    ]
}

/// One table of short names and values: the guide's table starting at `header`, the crate's
/// members (`prefix` + name) with their values.
struct Family {
    what: &'static str,
    header: &'static str,
    prefix: &'static str,
    members: Vec<(String, u64)>,
}

/// The members of `named` (full constant names) without `prefix`.
fn short(prefix: &str, named: Vec<(&'static str, u64)>) -> Vec<(String, u64)> {
    named
        .into_iter()
        .map(|(name, value)| (name.strip_prefix(prefix).unwrap().to_owned(), value))
        .collect()
}

fn families() -> Vec<Family> {
    vec![
        Family {
            what: "event kinds (section 7)",
            header: "| kind | value | fields |",
            prefix: "WDDM_GPU_EVENT_",
            members: short(
                "WDDM_GPU_EVENT_",
                named![
                    WDDM_GPU_EVENT_FAULT,
                    WDDM_GPU_EVENT_BAR_CHANGED,
                    WDDM_GPU_EVENT_FENCE,
                    WDDM_GPU_EVENT_CANCELLED,
                    WDDM_GPU_EVENT_VBLANK,
                    WDDM_GPU_EVENT_PAGE_FAULT,
                    WDDM_GPU_EVENT_MONITORED_FENCE,
                    WDDM_GPU_EVENT_STALE_TRANSLATION,
                ],
            ),
        },
        Family {
            what: "submission statuses (section 5)",
            header: "| status | value | meaning |",
            // `SubmitStatus` is an enum: its `ALL` is every member by construction.
            prefix: "",
            members: SubmitStatus::ALL
                .iter()
                .map(|status| (status.name().to_uppercase(), *status as u64))
                .collect(),
        },
        Family {
            what: "MMU fault kinds (section 12)",
            header: "| kind | value | cause |",
            prefix: "WDDM_GPU_MMU_FAULT_",
            members: short(
                "WDDM_GPU_MMU_FAULT_",
                named![
                    WDDM_GPU_MMU_FAULT_NOT_PRESENT,
                    WDDM_GPU_MMU_FAULT_READ_ONLY,
                    WDDM_GPU_MMU_FAULT_NO_EXECUTE,
                    WDDM_GPU_MMU_FAULT_ROOT_OVERRUN,
                    WDDM_GPU_MMU_FAULT_NO_ROOT,
                    WDDM_GPU_MMU_FAULT_ADDRESS_RANGE,
                    WDDM_GPU_MMU_FAULT_RESERVED_BITS,
                    WDDM_GPU_MMU_FAULT_OUTSIDE_RAM,
                    WDDM_GPU_MMU_FAULT_IN_VRAM_WINDOW,
                    WDDM_GPU_MMU_FAULT_BAD_SEGMENT,
                    WDDM_GPU_MMU_FAULT_MISALIGNED,
                    WDDM_GPU_MMU_FAULT_BAD_FLAGS,
                ],
            ),
        },
        Family {
            what: "MMU access codes (section 12)",
            header: "| access | value | the translation was for |",
            prefix: "WDDM_GPU_MMU_ACCESS_",
            members: short(
                "WDDM_GPU_MMU_ACCESS_",
                named![
                    WDDM_GPU_MMU_ACCESS_READ,
                    WDDM_GPU_MMU_ACCESS_WRITE,
                    WDDM_GPU_MMU_ACCESS_EXECUTE,
                ],
            ),
        },
        Family {
            what: "page-fault flags (section 12)",
            header: "| flag | value | `DXGK_PAGE_FAULT_FLAGS` | set |",
            prefix: "WDDM_GPU_PAGE_FAULT_FLAG_",
            members: short(
                "WDDM_GPU_PAGE_FAULT_FLAG_",
                named![
                    WDDM_GPU_PAGE_FAULT_FLAG_WRITE,
                    WDDM_GPU_PAGE_FAULT_FLAG_FENCE_INVALID,
                    WDDM_GPU_PAGE_FAULT_FLAG_ENGINE_RESET_REQUIRED,
                ],
            ),
        },
    ]
}

/// Each packet: its opcode's name and value, its structure and size.
fn packets() -> Vec<(&'static str, u64, &'static str, usize)> {
    macro_rules! packet {
        ($($opcode:ident => $structure:ident),* $(,)?) => {
            vec![$((
                stringify!($opcode),
                u64::from($opcode),
                stringify!($structure),
                size_of::<$structure>(),
            )),*]
        };
    }
    packet![
        WDDM_GPU_OP_TRANSFER => WddmGpuPacketTransfer,
        WDDM_GPU_OP_FILL => WddmGpuPacketFill,
        WDDM_GPU_OP_DISCARD_CONTENT => WddmGpuPacketSegmentAccess,
        WDDM_GPU_OP_READ_PHYSICAL => WddmGpuPacketSegmentAccess,
        WDDM_GPU_OP_WRITE_PHYSICAL => WddmGpuPacketSegmentAccess,
        WDDM_GPU_OP_MAP_APERTURE => WddmGpuPacketMapAperture,
        WDDM_GPU_OP_UNMAP_APERTURE => WddmGpuPacketUnmapAperture,
        WDDM_GPU_OP_FENCE => WddmGpuPacketFence,
        WDDM_GPU_OP_MAP_APERTURE2 => WddmGpuPacketMapAperture2,
        WDDM_GPU_OP_UPDATE_PAGE_TABLE => WddmGpuPacketUpdatePageTable,
        WDDM_GPU_OP_FLUSH_TLB => WddmGpuPacketFlushTlb,
        WDDM_GPU_OP_VIRTUAL_TRANSFER => WddmGpuPacketVirtualTransfer,
        WDDM_GPU_OP_VIRTUAL_FILL => WddmGpuPacketVirtualFill,
        WDDM_GPU_OP_COPY_PAGE_TABLE_ENTRIES => WddmGpuPacketCopyPageTableEntries,
        WDDM_GPU_OP_SIGNAL_MONITORED_FENCE => WddmGpuPacketSignalMonitoredFence,
        WDDM_GPU_OP_NOTIFY_RESIDENCY => WddmGpuPacketNotifyResidency,
        WDDM_GPU_OP_UPDATE_CONTEXT_ALLOCATION => WddmGpuPacketUpdateContextAllocation,
        WDDM_GPU_VOP_COPY => WddmGpuVirtualCopy,
        WDDM_GPU_VOP_FILL => WddmGpuVirtualFill,
        WDDM_GPU_VOP_SIGNAL => WddmGpuVirtualSignal,
    ]
}

/// Each command the guide's tables describe: its type's name and value, its request structure
/// (`None`: the header alone) and its response structure (`None`: a header), with sizes.
type Command = (
    &'static str,
    u64,
    Option<(&'static str, usize)>,
    Option<(&'static str, usize)>,
);

fn commands() -> Vec<Command> {
    macro_rules! structure {
        (header) => {
            None
        };
        ($structure:ident) => {
            Some((stringify!($structure), size_of::<$structure>()))
        };
    }
    macro_rules! command {
        ($($kind:ident: $request:ident => $response:ident),* $(,)?) => {
            vec![$((
                stringify!($kind),
                u64::from($kind),
                structure!($request),
                structure!($response),
            )),*]
        };
    }
    command![
        VIRTIO_GPU_CMD_GET_DISPLAY_INFO: header => WddmGpuRespDisplayInfo,
        VIRTIO_GPU_CMD_GET_CAPSET_INFO: WddmGpuGetCapsetInfo => WddmGpuRespCapsetInfo,
        VIRTIO_GPU_CMD_GET_CAPSET: WddmGpuGetCapset => header,
        WDDM_GPU_CMD_SUBMIT: WddmGpuCmdSubmit => WddmGpuRespSubmit,
        WDDM_GPU_CMD_REGISTER_STATUS_PAGE: WddmGpuCmdRegisterStatusPage => header,
        WDDM_GPU_CMD_WAIT_EVENT: header => WddmGpuRespEvent,
        WDDM_GPU_CMD_PREEMPT: header => WddmGpuRespPreempt,
        WDDM_GPU_CMD_RESET: header => header,
        WDDM_GPU_CMD_SET_SCANOUT_VRAM: WddmGpuCmdSetScanoutVram => header,
        WDDM_GPU_CMD_CREATE_CONTEXT: WddmGpuCmdCreateContext => header,
        WDDM_GPU_CMD_DESTROY_CONTEXT: WddmGpuCmdDestroyContext => header,
        WDDM_GPU_CMD_SET_ROOT_PAGE_TABLE: WddmGpuCmdSetRootPageTable => header,
        WDDM_GPU_CMD_SUBMIT_VIRTUAL: WddmGpuCmdSubmitVirtual => WddmGpuRespSubmitVirtual,
        WDDM_GPU_CMD_RESET_ENGINE: WddmGpuCmdResetEngine => header,
        WDDM_GPU_CMD_QUERY_ENGINE_STATUS: WddmGpuCmdQueryEngineStatus => WddmGpuRespEngineStatus,
        WDDM_GPU_CMD_SET_POWER_STATE: WddmGpuCmdSetPowerState => header,
    ]
}

/// The single-bit PTE flags, each a row `| bit | `NAME` | ...` of the entry table.
fn pte_bits() -> Vec<(&'static str, u64)> {
    named![
        WDDM_GPU_PTE_VALID,
        WDDM_GPU_PTE_ZERO,
        WDDM_GPU_PTE_CACHE_COHERENT,
        WDDM_GPU_PTE_READ_ONLY,
        WDDM_GPU_PTE_NO_EXECUTE,
        WDDM_GPU_PTE_LARGE_PAGE,
        WDDM_GPU_PTE_PAGE_TABLE_64KB,
    ]
}

/// The names of the constants starting with `prefix` that the ABI crate's sources declare.
fn declared(prefix: &str) -> BTreeSet<String> {
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    sources(&repository().join("device/abi/src"), &mut files);
    let needle = format!("pub const {prefix}");
    files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).unwrap();
            text.lines()
                .filter_map(|line| {
                    let rest = line.trim_start().strip_prefix(&needle)?;
                    let name = rest.split(':').next()?;
                    Some(format!("{prefix}{name}"))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A number as the guide writes one: decimal or `0x` hex, `_` allowed; `None` otherwise.
fn number(text: &str) -> Option<u64> {
    let text = text.replace('_', "");
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The number at the start of `text` (a `0x` hex or decimal token), scaled by a `KiB`, `MiB` or
/// `GiB` after it; `None` when `text` does not start with a digit.
fn leading_number(text: &str) -> Option<u64> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let value = number(&text[..end])?;
    let scale = [(" KiB", 10), (" MiB", 20), (" GiB", 30)]
        .iter()
        .find(|(unit, _)| text[end..].starts_with(unit))
        .map_or(0, |(_, shift)| *shift);
    value.checked_shl(scale)
}

/// Every `` `NAME` `` in `text` with the number written right after it (`` `NAME` 12 ``,
/// `` `NAME` (0x1) ``), as `(line, name, value)`.
fn backticked_values(text: &str) -> Vec<(usize, String, u64)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(open) = rest.find('`') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('`') else {
                break;
            };
            let name = &after[..close];
            let tail = &after[close + 1..];
            let value = tail
                .strip_prefix(' ')
                .map(|tail| tail.strip_prefix('(').unwrap_or(tail))
                .and_then(leading_number);
            if let Some(value) = value {
                found.push((index + 1, name.to_owned(), value));
            }
            rest = tail;
        }
    }
    found
}

/// The cells of a table row (`None` for a line that is not one).
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// The rows of the table whose header line is `header` (each row's cells).
fn table<'t>(text: &'t str, header: &str) -> Option<Vec<Vec<&'t str>>> {
    let mut lines = text.lines().skip_while(|line| line.trim() != header);
    lines.next()?;
    // The separator row, then the rows up to the first line that is not one.
    Some(lines.skip(1).map_while(cells).collect())
}

/// Each `NAME` + `between` + a number in the prose of `text` (`PAGE_FAULT (17)`,
/// `PAGE_FAULT event (kind 6`), `NAME` a whole word: `(line, value)`.
fn prose_values(text: &str, name: &str, between: &str) -> Vec<(usize, u64)> {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(name) {
            let after = &line[at + name.len()..];
            if word(line[..at].chars().next_back()) || word(after.chars().next()) {
                continue;
            }
            if let Some(value) = after.strip_prefix(between).and_then(leading_number) {
                found.push((index + 1, value));
            }
        }
    }
    found
}

/// Everything the guide `text` says that the crate does not.
fn disagreements(text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    // Statuses and events named in the prose with their values: `PAGE_FAULT (17)`.
    let families = families();
    for (family, between) in [(&families[1], " ("), (&families[0], " event (kind ")] {
        for (member, actual) in &family.members {
            for (line, value) in prose_values(text, member, between) {
                if value != *actual {
                    wrong.push(format!(
                        "line {line}: {} {member} is {actual}, the guide says {value}",
                        family.what
                    ));
                }
            }
        }
    }
    let constants = constants();
    let structures = structures();
    let abi_name = |name: &str| {
        ["WDDM_GPU_", "VIRTIO_", "VIRTQ_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    for (line, name, value) in backticked_values(text) {
        if abi_name(&name) {
            match constants.iter().find(|(known, _)| *known == name) {
                Some((_, actual)) if *actual == value => {}
                Some((_, actual)) => wrong.push(format!(
                    "line {line}: `{name}` is {actual:#x} in the crate, the guide says {value:#x}"
                )),
                None => wrong.push(format!(
                    "line {line}: the guide gives `{name}` a value; add it to this test's constants()"
                )),
            }
        } else if name.starts_with("WddmGpu") {
            match structures.iter().find(|(known, _)| *known == name) {
                Some((_, size)) if u64::try_from(*size) == Ok(value) => {}
                Some((_, size)) => wrong.push(format!(
                    "line {line}: `{name}` is {size} bytes, the guide says {value}"
                )),
                None => wrong.push(format!(
                    "line {line}: the guide gives `{name}` a size; add it to this test's structures()"
                )),
            }
        }
    }
    for family in families {
        let Some(rows) = table(text, family.header) else {
            wrong.push(format!("no table of {} (`{}`)", family.what, family.header));
            continue;
        };
        let mut listed = BTreeSet::new();
        for row in rows {
            let name = row[0].trim_matches('`');
            let value = row.get(1).and_then(|cell| number(cell));
            match family.members.iter().find(|(member, _)| member == name) {
                Some((_, actual)) if Some(*actual) == value => {}
                Some((_, actual)) => wrong.push(format!(
                    "{}: {name} is {actual:#x} in the crate, the guide's row says {}",
                    family.what,
                    row.get(1).unwrap_or(&"nothing")
                )),
                None => wrong.push(format!("{}: {name} is not in the crate", family.what)),
            }
            listed.insert(name.to_owned());
        }
        for (member, _) in &family.members {
            if !listed.contains(member) {
                wrong.push(format!("{}: the table lacks {member}", family.what));
            }
        }
        if !family.prefix.is_empty() {
            let known: BTreeSet<String> = family
                .members
                .iter()
                .map(|(member, _)| format!("{}{member}", family.prefix))
                .collect();
            for name in declared(family.prefix).difference(&known) {
                wrong.push(format!(
                    "{}: the crate declares {name}, which this test and the guide's table lack",
                    family.what
                ));
            }
        }
    }
    let rows: Vec<Vec<&str>> = text.lines().filter_map(cells).collect();
    for (name, value, structure, size) in packets() {
        let short = name
            .strip_prefix("WDDM_GPU_OP_")
            .or_else(|| name.strip_prefix("WDDM_GPU_VOP_"))
            .unwrap();
        let names_it = |cell: &str| {
            cell.contains(&format!("`{name}` ({value})"))
                || cell.contains(&format!("`{name}` ({value:#x})"))
                || cell
                    .split(',')
                    .any(|part| part.trim() == format!("{value} {short}"))
        };
        let described = format!("`{structure}` ({size})");
        let rows_of: Vec<_> = rows.iter().filter(|row| names_it(row[0])).collect();
        if !rows_of
            .iter()
            .any(|row| row.len() > 1 && row[1].contains(&described))
        {
            wrong.push(format!(
                "packet {name} ({value:#x}): no table row names it with {described} ({} rows name it)",
                rows_of.len()
            ));
        }
    }
    for (name, value, request, response) in commands() {
        let names_it = |cell: &str| {
            cell.starts_with(&format!("`{name}` {value:#06x}"))
                || cell.starts_with(&format!("`{name}` ({value:#x})"))
        };
        let holds = |cell: &str, structure: Option<(&str, usize)>| match structure {
            Some((structure, size)) => cell.contains(&format!("`{structure}` ({size})")),
            None => cell.contains("header") || cell.contains("OK_NODATA") || cell.is_empty(),
        };
        let described = rows.iter().any(|row| {
            row.len() > 2
                && names_it(row[0])
                && holds(row[1], request)
                && (response.is_none() || holds(row[2], response))
        });
        if !described {
            wrong.push(format!(
                "command {name} ({value:#x}): no table row names it with its request {request:?} and response {response:?}"
            ));
        }
    }
    for (name, bit) in pte_bits() {
        let row = rows
            .iter()
            .find(|row| row.len() > 1 && row[1] == format!("`{name}`"));
        match row.and_then(|row| row[0].parse::<u32>().ok()) {
            Some(at) if 1u64.checked_shl(at) == Some(bit) => {}
            Some(at) => wrong.push(format!("{name} is {bit:#x}, the entry table says bit {at}")),
            None => wrong.push(format!("the entry table has no bit row for {name}")),
        }
    }
    wrong
}

#[test]
fn the_programming_guide_gives_the_abi_crates_values() {
    let wrong = disagreements(&guide());
    assert!(
        wrong.is_empty(),
        "docs/programming-guide.md disagrees with wddm-gpu-abi:\n{}",
        wrong.join("\n")
    );
}

/// The check finds each kind of drift: a value changed, a row missing, a size wrong, a
/// constant it does not know.
#[test]
fn the_check_finds_a_guide_that_drifted() {
    let guide = guide();
    let drifted = [
        ("| `VBLANK` | 5 |", "| `VBLANK` | 9 |", "event kinds"),
        (
            "NODE_FAULTED (18)",
            "NODE_FAULTED (16)",
            "the guide says 16",
        ),
        (
            "PAGE_FAULT event (kind 6",
            "PAGE_FAULT event (kind 7",
            "the guide says 7",
        ),
        (
            "| `STALE_TRANSLATION` | 8 |",
            "| `STALE` | 8 |",
            "lacks STALE_TRANSLATION",
        ),
        (
            "| `BAD_CONTEXT` | 19 |",
            "| `BAD_CONTEXT` | 20 |",
            "statuses",
        ),
        ("| `EXECUTE` | 2 |", "| `EXECUTE` | 3 |", "access codes"),
        ("| `WRITE` | 0x1 |", "| `WRITE` | 0x4 |", "page-fault flags"),
        (
            "| `BAD_FLAGS` | 12 |",
            "| `BAD_FLAGS` | 13 |",
            "fault kinds",
        ),
        (
            "`WddmGpuPacketFence` (16)",
            "`WddmGpuPacketFence` (24)",
            "packet",
        ),
        (
            "`WDDM_GPU_CMD_SUBMIT` 0x8001",
            "`WDDM_GPU_CMD_SUBMIT` 0x8011",
            "0x8011",
        ),
        (
            "`WddmGpuRespPreempt` (56)",
            "`WddmGpuRespPreempt` (40)",
            "40",
        ),
        (
            "| 3 | `WDDM_GPU_PTE_READ_ONLY` |",
            "| 4 | `WDDM_GPU_PTE_READ_ONLY` |",
            "bit 4",
        ),
        (
            "`WDDM_GPU_FAULT_RING_ENTRIES` (120)",
            "`WDDM_GPU_FAULT_RING_COUNT` (120)",
            "add it",
        ),
    ];
    for (from, to, said) in drifted {
        assert!(guide.contains(from), "the guide no longer says {from}");
        let wrong = disagreements(&guide.replacen(from, to, 1));
        assert!(
            wrong.iter().any(|problem| problem.contains(said)),
            "{from} -> {to} went unnoticed: {wrong:?}"
        );
    }
}
