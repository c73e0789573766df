//! The control socket's requests (`vhost-user-wddm-gpu ctl SOCKET ...`): fault injections armed,
//! listed and disarmed, and read-only inspection of the device while the guest runs. Each
//! request takes a few short locks (never the engine's, never for a copy of guest data) and
//! answers with a table, or JSON with `--json`.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::context::WddmGpuPageFaultRecord;
use wddm_gpu_abi::status::WddmGpuFaultRecord;
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_abi::WDDM_GPU_PAGE_SHIFT;

use super::checker::Checker;
use super::inject::{Injector, Listing};
use super::reply::Notify;
use super::scheduler::{NodeProbe, NodeState};
use super::virtual_node::{VirtualNodeState, VirtualProbe};
use crate::layout::SegmentLayout;
use crate::memory::gart::MappedRun;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::Vram;
use crate::mmu::contexts::Contexts;
use crate::mmu::fault::Access;
use crate::mmu::tables::DeviceTables;
use crate::mmu::walk::{walk_path, Target, MAX_LEVELS};
use crate::observe::endpoint::ControlHandler;
use crate::support::number::parse_u64;
use crate::support::sync::lock;

/// Most VRAM bytes one `vram` request shows.
pub const MAX_VRAM_DUMP: u64 = 64 << 10;

/// The requests, for `help` and refusals.
const USAGE: &str = "\
requests (add --json for JSON):
  arm SPEC            arm a fault injection (see docs/fault-injection.md), e.g. `arm hang fence=7`
  disarm ID|all       disarm one injection, or all
  list                armed injections and the latest firings
  node                the paging node: last completed fence, running, queued, hung, held answers
  faults              the latest fault records and each node's latest page fault
  warnings            what the checker (--check) found: counts and the latest warnings
  gart                the aperture mappings: runs of pages on consecutive guest frames
  walk CONTEXT VA     a GPU VA's walk through the context's page tables, level by level
  vram OFFSET LENGTH [raw]
                      VRAM bytes (at most 64 KiB) as a hexdump, or raw bytes; past the BAR's
                      end is device-only VRAM (check-layout prints each segment's VRAM offset)
  help                this text
";

/// The requests, for a refusal's hint.
const REQUESTS: &str = "arm, disarm, list, node, faults, warnings, gart, walk, vram or help";

/// What the control socket reaches.
pub struct GpuControl {
    pub(super) injector: Arc<Injector>,
    pub(super) node: NodeProbe,
    pub(super) virtual_node: VirtualProbe,
    pub(super) layout: Arc<SegmentLayout>,
    pub(super) vram: Arc<Vram>,
    pub(super) notify: Arc<Mutex<Notify>>,
    pub(super) contexts: Arc<Mutex<Contexts>>,
    pub(super) checker: Arc<Checker>,
    /// The latest memory table the frontend sent (`None` before the first).
    pub(super) memory: Arc<Mutex<Option<GuestMemoryMmap>>>,
}

/// Most GART runs one `gart` request lists.
pub const MAX_GART_RUNS: usize = 4096;

/// How long `gart` waits for the engine to be between submissions.
const GART_PATIENCE: Duration = Duration::from_millis(500);

#[derive(Serialize)]
struct NodeView {
    node: u32,
    last_completed_fence: u32,
    running_fence: Option<u32>,
    queued: usize,
    hung: bool,
    paused: bool,
    held_answers: usize,
}

impl From<NodeState> for NodeView {
    fn from(state: NodeState) -> Self {
        Self {
            node: 0,
            last_completed_fence: state.last_completed,
            running_fence: state.running,
            queued: state.queued,
            hung: state.hung,
            paused: state.paused,
            held_answers: state.held,
        }
    }
}

#[derive(Serialize)]
struct FaultView {
    sequence: u64,
    fence: u32,
    packet_offset: u32,
    opcode: u32,
    status: String,
    address: u64,
}

impl From<&WddmGpuFaultRecord> for FaultView {
    fn from(record: &WddmGpuFaultRecord) -> Self {
        Self {
            sequence: record.sequence,
            fence: record.fence_id,
            packet_offset: record.packet_offset,
            opcode: record.opcode,
            status: SubmitStatus::from_raw(record.status)
                .map_or_else(|| record.status.to_string(), |status| status.name().into()),
            address: record.address,
        }
    }
}

#[derive(Serialize)]
struct PageFaultView {
    node: u32,
    sequence: u64,
    fence: u32,
    context: u32,
    virtual_address: u64,
    level: u32,
    kind: u32,
    flags: u32,
}

impl From<&WddmGpuPageFaultRecord> for PageFaultView {
    fn from(record: &WddmGpuPageFaultRecord) -> Self {
        Self {
            node: record.node_ordinal,
            sequence: record.sequence,
            fence: record.fence_id,
            context: record.context_id,
            virtual_address: record.fault.virtual_address,
            level: record.fault.page_table_level,
            kind: record.fault.kind,
            flags: record.flags,
        }
    }
}

#[derive(Serialize)]
struct LevelView {
    level: u32,
    index: u64,
    entry: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum WalkResult {
    Page {
        base: u64,
        size: u64,
        level: u32,
        target: String,
        read_only: bool,
        no_execute: bool,
    },
    Fault {
        reason: String,
        level: u32,
    },
}

#[derive(Serialize)]
struct WalkView {
    context: u32,
    node: u32,
    address: u64,
    root: u64,
    root_segment: u32,
    levels: Vec<LevelView>,
    result: WalkResult,
}

#[derive(Serialize)]
struct FaultsView {
    faults: Vec<FaultView>,
    page_faults: Vec<PageFaultView>,
}

fn json(value: &impl Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec_pretty(value)
        .map(|mut text| {
            text.push(b'\n');
            text
        })
        .map_err(|error| error.to_string())
}

/// A number in decimal or with a `0x` prefix.
fn number(word: &str, what: &str) -> Result<u64, String> {
    parse_u64(word).ok_or_else(|| format!("{what} {word:?} is not a number (decimal or 0x hex)"))
}

impl GpuControl {
    fn gart(&self, as_json: bool) -> Result<Vec<u8>, String> {
        let (runs, left_out) = self
            .node
            .gart_runs(MAX_GART_RUNS, GART_PATIENCE)
            .ok_or("the engine stayed busy (a long submission is running); ask again")?;
        if as_json {
            #[derive(Serialize)]
            struct Gart {
                runs: Vec<MappedRun>,
                left_out: usize,
            }
            return json(&Gart { runs, left_out });
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "aperture mappings ({} runs{}):",
            runs.len(),
            if left_out > 0 {
                format!(", {left_out} more left out")
            } else {
                String::new()
            }
        );
        for run in &runs {
            let _ = writeln!(
                out,
                "  segment {} pages {:#x}..{:#x} ({} page{}) -> guest frames {:#x}..{:#x} (GPA {:#x})",
                run.segment,
                run.first_page,
                run.first_page + run.pages,
                run.pages,
                if run.pages == 1 { "" } else { "s" },
                run.first_frame,
                run.first_frame + run.pages,
                run.first_frame << WDDM_GPU_PAGE_SHIFT
            );
        }
        Ok(out.into_bytes())
    }

    fn walk(&self, words: &[&str], as_json: bool) -> Result<Vec<u8>, String> {
        let [context, address] = words else {
            return Err("walk CONTEXT VA".to_string());
        };
        let context = u32::try_from(number(context, "context")?)
            .map_err(|_| format!("no context {context}"))?;
        let address = number(address, "VA")?;
        let (node, space, geometry) = {
            let contexts = lock(&self.contexts);
            let (node, space) = contexts
                .any_space(context)
                .ok_or_else(|| format!("no context {context}"))?;
            let geometry = contexts
                .geometry()
                .copied()
                .ok_or("the layout has no GpuMmu")?;
            (node, space, geometry)
        };
        let root = lock(&space)
            .root()
            .ok_or_else(|| format!("context {context} has no root page table"))?;
        let memory = lock(&self.memory)
            .clone()
            .ok_or("no memory table yet (the guest has not started the device)")?;
        let ram = GuestRam::new(&memory, self.vram.guest_window());
        let tables = DeviceTables::new(&ram, &self.vram, &self.layout);
        let mut path = [0; MAX_LEVELS];
        let walked = walk_path(&geometry, &root, address, Access::Read, &tables, &mut path);
        let levels: Vec<LevelView> = (0..=geometry.root_level())
            .rev()
            .filter_map(|level| {
                let desc = geometry.level(level)?;
                let index = (address >> desc.shift()) & (desc.entries() - 1);
                Some(LevelView {
                    level,
                    index,
                    entry: path.get(usize::try_from(level).ok()?).copied()?,
                })
            })
            .collect();
        let view = WalkView {
            context,
            node,
            address,
            root: root.table.address,
            root_segment: root.table.segment,
            levels,
            result: match &walked {
                Ok(page) => WalkResult::Page {
                    base: page.base,
                    size: page.size(),
                    level: page.level,
                    target: match page.target {
                        Target::System(address) => format!("system memory GPA {address:#x}"),
                        Target::Segment { segment, offset } => {
                            format!("segment {segment} offset {offset:#x}")
                        }
                        Target::Zero => "the zero page".to_string(),
                    },
                    read_only: page.read_only.is_some(),
                    no_execute: page.no_execute.is_some(),
                },
                Err(fault) => WalkResult::Fault {
                    reason: fault.to_string(),
                    level: fault.level,
                },
            },
        };
        if as_json {
            return json(&view);
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "context {context} (node {node}) VA {address:#x}: root at {}{:#x}",
            if view.root_segment == 0 {
                "GPA ".to_string()
            } else {
                format!("segment {} offset ", view.root_segment)
            },
            view.root
        );
        for level in &view.levels {
            let _ = writeln!(
                out,
                "  level {} index {:#x}: entry {:#018x}",
                level.level, level.index, level.entry
            );
        }
        match &view.result {
            WalkResult::Page {
                base,
                size,
                level,
                target,
                read_only,
                no_execute,
            } => {
                let _ = writeln!(
                    out,
                    "  -> page {base:#x} ({size:#x} bytes, mapped at level {level}) in {target}{}{}",
                    if *read_only { ", read-only" } else { "" },
                    if *no_execute { ", no-execute" } else { "" }
                );
            }
            WalkResult::Fault { reason, level } => {
                let _ = writeln!(out, "  -> fault at level {level}: {reason}");
            }
        }
        Ok(out.into_bytes())
    }

    fn warnings(&self, as_json: bool) -> Result<Vec<u8>, String> {
        let view = self.checker.view();
        if as_json {
            return json(&view);
        }
        let mut out = String::new();
        if !view.enabled {
            out.push_str("the checker is off (start the backend with --check)\n");
        }
        let counts: Vec<String> = view
            .counts
            .iter()
            .map(|(name, count)| format!("{name} {count}"))
            .collect();
        let _ = writeln!(out, "warnings: {}", counts.join(", "));
        for warning in &view.latest {
            let _ = writeln!(out, "  {warning}");
        }
        Ok(out.into_bytes())
    }

    fn arm(&self, spec: &str) -> Result<Vec<u8>, String> {
        let id = self.injector.arm(spec).map_err(|error| error.to_string())?;
        Ok(format!("armed injection {id}: {spec}\n").into_bytes())
    }

    fn disarm(&self, which: &str) -> Result<Vec<u8>, String> {
        if which == "all" {
            let count = self.injector.disarm_all();
            return Ok(format!("disarmed {count} injection(s)\n").into_bytes());
        }
        let id = u32::try_from(number(which, "injection id")?)
            .map_err(|_| format!("no injection {which}"))?;
        if self.injector.disarm(id) {
            Ok(format!("disarmed injection {id}\n").into_bytes())
        } else {
            Err(format!("no injection {id} is armed (see `list`)"))
        }
    }

    fn list(&self, as_json: bool) -> Result<Vec<u8>, String> {
        let listing = self.injector.listing();
        if as_json {
            return json(&listing);
        }
        Ok(listing_table(&listing).into_bytes())
    }

    fn node(&self, as_json: bool) -> Result<Vec<u8>, String> {
        let view = NodeView::from(self.node.state());
        let virtual_node = self.virtual_node.state();
        if as_json {
            #[derive(Serialize)]
            struct Nodes {
                paging: NodeView,
                #[serde(rename = "virtual")]
                virtual_node: VirtualNodeState,
            }
            return json(&Nodes {
                paging: view,
                virtual_node,
            });
        }
        let mut out = format!(
            "node 0 (paging): {}\n  last completed fence {}\n  running fence {}\n  queued {}\n  answers held by a lost interrupt {}\n",
            state_words(&[(view.hung, "HUNG"), (view.paused, "paused")]),
            view.last_completed_fence,
            fence_or_none(view.running_fence),
            view.queued,
            view.held_answers
        );
        let _ = write!(
            out,
            "node 1 (virtual): {}\n  running fence {}\n  queued {}\n  page faults {}\n",
            state_words(&[
                (virtual_node.hung, "HUNG"),
                (virtual_node.faulted, "FAULTED (until RESET_ENGINE)"),
                (virtual_node.paused, "paused"),
            ]),
            fence_or_none(virtual_node.running_fence),
            virtual_node.queued,
            virtual_node.page_faults
        );
        Ok(out.into_bytes())
    }

    fn faults(&self, as_json: bool) -> Result<Vec<u8>, String> {
        let (faults, page_faults) = lock(&self.notify).status.recent_faults();
        let view = FaultsView {
            faults: faults.iter().map(FaultView::from).collect(),
            page_faults: page_faults.iter().map(PageFaultView::from).collect(),
        };
        if as_json {
            return json(&view);
        }
        let mut out = String::new();
        let _ = writeln!(out, "faults (latest {}):", view.faults.len());
        for fault in &view.faults {
            let _ = writeln!(
                out,
                "  #{} fence {} packet offset {:#x} opcode {} status {} address {:#x}",
                fault.sequence,
                fault.fence,
                fault.packet_offset,
                fault.opcode,
                fault.status,
                fault.address
            );
        }
        let _ = writeln!(out, "page faults (latest per node):");
        for fault in &view.page_faults {
            let _ = writeln!(
                out,
                "  node {} #{} fence {} context {} VA {:#x} level {} kind {} flags {:#x}",
                fault.node,
                fault.sequence,
                fault.fence,
                fault.context,
                fault.virtual_address,
                fault.level,
                fault.kind,
                fault.flags
            );
        }
        Ok(out.into_bytes())
    }

    fn vram(&self, words: &[&str], as_json: bool) -> Result<Vec<u8>, String> {
        let (offset, length, raw) = match words {
            [offset, length] => (offset, length, false),
            [offset, length, "raw"] => (offset, length, true),
            _ => return Err("vram OFFSET LENGTH [raw]".to_string()),
        };
        let offset = number(offset, "offset")?;
        let length = number(length, "length")?;
        if length == 0 || length > MAX_VRAM_DUMP {
            return Err(format!("length must be 1..={MAX_VRAM_DUMP}"));
        }
        let range = self.vram.range(offset, length).ok_or_else(|| {
            format!(
                "{offset:#x}+{length:#x} is outside the VRAM ({:#x} bytes)",
                self.vram.total_size()
            )
        })?;
        let slice = self
            .vram
            .range_slice(range)
            .ok_or_else(|| format!("{offset:#x}+{length:#x} straddles the BAR's end"))?;
        let mut bytes = vec![0u8; usize::try_from(length).unwrap_or(0)];
        slice.copy_to(&mut bytes[..]);
        if raw {
            return Ok(bytes);
        }
        if as_json {
            #[derive(Serialize)]
            struct Dump {
                offset: u64,
                hex: String,
            }
            let hex = bytes.iter().fold(String::new(), |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            });
            return json(&Dump { offset, hex });
        }
        Ok(hexdump(offset, &bytes).into_bytes())
    }
}

/// `list`'s table.
fn listing_table(listing: &Listing) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "armed ({}):", listing.armed.len());
    for armed in &listing.armed {
        let _ = writeln!(
            out,
            "  {:>3}  {}  (seen {}, fired {})",
            armed.id, armed.spec, armed.seen, armed.fired
        );
    }
    let _ = writeln!(
        out,
        "fired ({} in all, latest {}):",
        listing.fired_total,
        listing.fired.len()
    );
    for fired in &listing.fired {
        let on = match (fired.fence, fired.occasion) {
            (Some(fence), _) => format!("fence {fence}"),
            (None, "power-down") => "a power-down".to_string(),
            (None, _) => "a PREEMPT".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:>8} ms  injection {} {} on {on}",
            fired.at_ms, fired.id, fired.action
        );
    }
    out
}

/// `hexdump -C`'s layout: offset, 16 bytes in hex, the printable ones.
fn hexdump(base: u64, bytes: &[u8]) -> String {
    let mut out = String::new();
    for (row, chunk) in (0u64..).zip(bytes.chunks(16)) {
        let _ = write!(out, "{:010x}  ", base + row * 16);
        for column in 0..16 {
            match chunk.get(column) {
                Some(byte) => {
                    let _ = write!(out, "{byte:02x} ");
                }
                None => out.push_str("   "),
            }
            if column == 7 {
                out.push(' ');
            }
        }
        out.push_str(" |");
        out.extend(chunk.iter().map(|&byte| {
            if byte.is_ascii_graphic() || byte == b' ' {
                char::from(byte)
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    out
}

impl ControlHandler for GpuControl {
    fn requests(&self) -> &'static str {
        REQUESTS
    }

    fn handle(&self, request: &str) -> Result<Vec<u8>, String> {
        let mut words: Vec<&str> = request.split_whitespace().collect();
        let as_json = match words.iter().position(|&word| word == "--json") {
            Some(at) => {
                words.remove(at);
                true
            }
            None => false,
        };
        match words.as_slice() {
            ["arm", spec @ ..] if !spec.is_empty() => self.arm(&spec.join(" ")),
            ["disarm", which] => self.disarm(which),
            ["list"] => self.list(as_json),
            ["node"] => self.node(as_json),
            ["faults"] => self.faults(as_json),
            ["gart"] => self.gart(as_json),
            ["walk", rest @ ..] => self.walk(rest, as_json),
            ["warnings"] => self.warnings(as_json),
            ["vram", rest @ ..] => self.vram(rest, as_json),
            ["help"] | [] => Ok(USAGE.as_bytes().to_vec()),
            _ => Err(format!("unknown request {request:?}\n{USAGE}")),
        }
    }
}

/// A node's state in words: the conditions that hold, or `running` when none does.
fn state_words(conditions: &[(bool, &str)]) -> String {
    let words: Vec<&str> = conditions
        .iter()
        .filter(|(holds, _)| *holds)
        .map(|(_, word)| *word)
        .collect();
    if words.is_empty() {
        "running".to_string()
    } else {
        words.join(", ")
    }
}

/// A fence, or `none`.
fn fence_or_none(fence: Option<u32>) -> String {
    fence.map_or("none".to_string(), |fence| fence.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdump_rows_show_offsets_bytes_and_text() {
        let dump = hexdump(0x1000, b"WDDM\x00\x01 gpu\xff0123456789");
        let mut rows = dump.lines();
        assert_eq!(
            rows.next(),
            Some(
                "0000001000  57 44 44 4d 00 01 20 67  70 75 ff 30 31 32 33 34  |WDDM.. gpu.01234|"
            )
        );
        assert_eq!(
            rows.next(),
            Some("0000001010  35 36 37 38 39                                    |56789|")
        );
        assert_eq!(rows.next(), None);
    }

    #[test]
    fn the_refusal_hint_names_every_request_of_the_usage() {
        let usage: Vec<&str> = USAGE
            .lines()
            .skip(1)
            .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        let hinted: Vec<&str> = REQUESTS
            .split([',', ' '])
            .filter(|word| !word.is_empty() && *word != "or")
            .collect();
        assert_eq!(hinted, usage);
    }

    #[test]
    fn numbers_take_decimal_and_hex() {
        assert_eq!(number("4096", "offset"), Ok(4096));
        assert_eq!(number("0x1000", "offset"), Ok(4096));
        assert!(number("ten", "offset").is_err());
    }
}
