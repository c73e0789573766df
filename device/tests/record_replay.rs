//! `--record` and `replay` against the real backend binary: a mix of paging submissions
//! (transfers between RAM, VRAM and the aperture, MAP/UNMAP, FILL, FENCE, a fault, one deferred
//! to the engine thread, a RESET and what it clears) is recorded by a live backend, then
//! replayed offline; the replay's counters equal the live ones, every answer matches, and with
//! `--record-data` the replayed VRAM equals the live VRAM. A packet fault injected in the live
//! run is recorded and injected again. A recording altered after the fact is caught.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;
use wddm_gpu_abi::build::{fence, fill, map_aperture, transfer, unmap_aperture, DmaBufferBuilder};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::backend_process::{SpawnOptions, TIMEOUT};
use wddm_gpu_frontend_kit::harness::{
    Harness, DATA, DMA_BUFFER, FRAME_LISTS, PAGE, PAGE_USIZE, VRAM_SIZE,
};
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::{frames, segment, submit_command};
use zerocopy::IntoBytes;

const VRAM_SEGMENT: u32 = 1;
const APERTURE_SEGMENT: u32 = 2;

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A folder of this test's own, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("wddm-record-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Guest frame `index` of the harness data area.
fn frame(index: u64) -> u64 {
    DATA / PAGE + index
}

/// Submits a DMA buffer from [`DMA_BUFFER`]; returns the command and its answer.
fn submit(
    h: &mut Harness,
    dma: &DmaBufferBuilder,
    fence_id: u32,
) -> (WddmGpuCmdSubmit, WddmGpuRespSubmit) {
    h.write_ram(DMA_BUFFER, dma.bytes());
    let cmd = submit_command(DMA_BUFFER, dma.len(), fence_id);
    (cmd, h.submit(&cmd))
}

#[track_caller]
fn expect(response: &WddmGpuRespSubmit, status: SubmitStatus) {
    assert_eq!(response.status, status as u32, "{response:?}");
}

/// What the live backend did: its stats, its VRAM, and the command of the submission the
/// tampering test alters.
struct Live {
    stats: Json,
    vram: Vec<u8>,
    altered: WddmGpuCmdSubmit,
}

/// Runs the mix of submissions on a backend recording to `record`.
fn record_a_session(name: &str, record: &Path, data: bool) -> Live {
    let mut args = vec!["--record".into(), record.into()];
    if data {
        args.push("--record-data".into());
    }
    let mut h = Harness::ready_with_options(
        name,
        &SpawnOptions {
            args,
            ..SpawnOptions::default()
        },
    );
    // Scattered source frames with a pattern.
    let list: Vec<u64> = [9u64, 2, 3, 14, 0, 7].iter().map(|&i| frame(i)).collect();
    for (index, &page) in list.iter().enumerate() {
        h.write_ram(page * PAGE, &pattern(0x40 + index as u64, PAGE_USIZE));
    }
    h.write_frame_list(FRAME_LISTS, &list);

    // 1. RAM -> VRAM through the frame list.
    let mut dma = DmaBufferBuilder::new();
    dma.push(&transfer(
        6 * PAGE,
        frames(FRAME_LISTS, 6, 0),
        segment(VRAM_SEGMENT, 0x1_0000),
    ));
    expect(&submit(&mut h, &dma, 1).1, SubmitStatus::Ok);

    // 2. Map the aperture, move through it both ways, a FENCE among them.
    let mut dma = DmaBufferBuilder::new();
    dma.push(&map_aperture(APERTURE_SEGMENT, 0, 16, 6, FRAME_LISTS, 6, 0));
    dma.push(&transfer(
        3 * PAGE,
        segment(APERTURE_SEGMENT, 17 * PAGE),
        segment(VRAM_SEGMENT, 0x4_0000),
    ));
    dma.push(&fence(2));
    dma.push(&transfer(
        PAGE,
        segment(VRAM_SEGMENT, 0x1_0000),
        segment(APERTURE_SEGMENT, 21 * PAGE),
    ));
    expect(&submit(&mut h, &dma, 3).1, SubmitStatus::Ok);

    // 3. FILL, and UNMAP onto a dummy page.
    let mut dma = DmaBufferBuilder::new();
    dma.push(&fill(
        0x5a5a_a5a5,
        64 << 10,
        segment(VRAM_SEGMENT, 0x8_0000),
    ));
    dma.push(&unmap_aperture(APERTURE_SEGMENT, 20, 2, frame(40) * PAGE));
    expect(&submit(&mut h, &dma, 4).1, SubmitStatus::Ok);

    // 4. A fault: a segment the layout does not have, after one good packet.
    let mut dma = DmaBufferBuilder::new();
    dma.push(&fill(7, PAGE, segment(VRAM_SEGMENT, 0x9_0000)));
    dma.push(&transfer(PAGE, segment(VRAM_SEGMENT, 0), segment(9, 0)));
    expect(&submit(&mut h, &dma, 5).1, SubmitStatus::BadSegment);

    // 5. More than the control-queue thread's budget: the rest runs on the engine thread.
    let contiguous: Vec<u64> = (0..256).map(|i| frame(64 + i)).collect();
    for (index, &page) in contiguous.iter().enumerate().step_by(16) {
        h.write_ram(page * PAGE, &pattern(0x100 + index as u64, PAGE_USIZE));
    }
    h.write_frame_list(FRAME_LISTS + 0x1000, &contiguous);
    let mut dma = DmaBufferBuilder::new();
    dma.push(&fill(0x0102_0304, PAGE, segment(VRAM_SEGMENT, 0xa_0000)));
    dma.push(&transfer(
        256 * PAGE,
        frames(FRAME_LISTS + 0x1000, 256, 0),
        segment(VRAM_SEGMENT, 0x10_0000),
    ));
    dma.push(&transfer(
        16 * PAGE,
        segment(VRAM_SEGMENT, 0x10_0000),
        segment(VRAM_SEGMENT, 0x10_8000),
    ));
    let (altered, response) = submit(&mut h, &dma, 6);
    expect(&response, SubmitStatus::Ok);
    assert_eq!(response.packets_completed, 3);

    // 6. RESET: the GART is cleared, so the aperture no longer reaches the frames.
    let pending = h.post_reset();
    h.wait_reset(pending);
    let mut dma = DmaBufferBuilder::new();
    dma.push(&transfer(
        PAGE,
        segment(APERTURE_SEGMENT, 16 * PAGE),
        segment(VRAM_SEGMENT, 0xc_0000),
    ));
    expect(&submit(&mut h, &dma, 7).1, SubmitStatus::UnmappedAperture);

    // 7. VRAM -> RAM after the reset.
    h.write_frame_list(FRAME_LISTS + 0x3000, &[frame(50), frame(51)]);
    let mut dma = DmaBufferBuilder::new();
    dma.push(&transfer(
        2 * PAGE,
        segment(VRAM_SEGMENT, 0x4_0000),
        frames(FRAME_LISTS + 0x3000, 2, 0),
    ));
    expect(&submit(&mut h, &dma, 8).1, SubmitStatus::Ok);

    // 8. An injected fault: the second of two FILLs faults SEGMENT_RANGE; the recording says
    // so, and the replay faults it too.
    h.backend
        .ctl_ok("arm fault packet=1 status=segment_range fence=9");
    let mut dma = DmaBufferBuilder::new();
    dma.push(&fill(0x1111_2222, PAGE, segment(VRAM_SEGMENT, 0xd_0000)));
    dma.push(&fill(0x3333_4444, PAGE, segment(VRAM_SEGMENT, 0xd_1000)));
    let (_, injected) = submit(&mut h, &dma, 9);
    expect(&injected, SubmitStatus::SegmentRange);
    assert_eq!(injected.packets_completed, 1, "{injected:?}");

    let output = binary()
        .args(["stats", "--json"])
        .arg(&h.backend.socket)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let stats: Json = serde_json::from_str(&stdout).unwrap();
    let vram = h.read_vram(0, usize::try_from(VRAM_SIZE).unwrap());
    let mut backend = h.disconnect();
    assert!(backend.wait_exit(TIMEOUT).success());
    Live {
        stats,
        vram,
        altered,
    }
}

fn replay(record: &Path, args: &[&str]) -> Output {
    binary()
        .arg("replay")
        .arg(record)
        .args(args)
        .output()
        .unwrap()
}

/// The counters a replay must reproduce: per packet kind, per submission status, traffic.
fn counters(stats: &Json) -> Json {
    let packets: Vec<Json> = stats["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kind| {
            serde_json::json!([
                kind["kind"],
                kind["count"],
                kind["faults"],
                kind["bytes"],
                kind["pages"]
            ])
        })
        .collect();
    let submissions = &stats["submissions"];
    serde_json::json!({
        "packets": packets,
        "submissions": [
            submissions["count"], submissions["inline"], submissions["engine"],
            submissions["faults"], submissions["bytes"], submissions["packets"],
            submissions["by_status"],
        ],
        "segments": stats["segments"],
        "unknown_segment": stats["unknown_segment"],
    })
}

#[test]
fn a_recorded_session_replays_with_the_same_counts_answers_and_vram() {
    let dir = Dir::new("data");
    let record = dir.join("session.wgpurec");
    let live = record_a_session("record-data", &record, true);

    let dump = dir.join("vram.bin");
    let output = replay(&record, &["--json", "--dump-vram", dump.to_str().unwrap()]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}\n{stdout}");
    let replayed: Json = serde_json::from_str(&stdout).unwrap();
    assert_eq!(counters(&replayed), counters(&live.stats));
    // The backend left its statistics at exit beside the recording, the same counts.
    let mut at_exit = record.clone().into_os_string();
    at_exit.push(".stats.json");
    let at_exit: Json = serde_json::from_slice(&std::fs::read(&at_exit).unwrap()).unwrap();
    assert_eq!(counters(&at_exit), counters(&live.stats));
    assert_eq!(replayed["submissions"]["count"], 8, "{replayed}");
    // The bad segment, the unmapped aperture, the injected SEGMENT_RANGE.
    assert_eq!(replayed["submissions"]["faults"], 3, "{replayed}");
    assert!(replayed["submissions"]["engine"].as_u64().unwrap() >= 1);
    let summary = &replayed["replay"];
    assert_eq!(summary["submissions"], 8, "{summary}");
    assert_eq!(summary["resets"], 1, "{summary}");
    assert_eq!(summary["data"], true);
    assert_eq!(summary["mismatches"], serde_json::json!([]));
    let vram = std::fs::read(&dump).unwrap();
    assert!(
        vram == live.vram,
        "the replayed VRAM differs from the live VRAM"
    );
    assert!(vram[0x1_0000..0x1_1000].iter().any(|&byte| byte != 0));

    // The table form: the stats table, then the replay's verdict.
    let output = replay(&record, &[]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    println!("{stdout}");
    assert!(stdout.contains("transfer"), "{stdout}");
    assert!(
        stdout.contains(
            "replay: 8 submissions (0 on the virtual node), 0 context commands, 1 resets"
        ) && stdout.contains("every answer matched"),
        "{stdout}"
    );

    // A trace of the replay holds every submission.
    let trace = dir.join("replay.json");
    let output = replay(&record, &["--trace", trace.to_str().unwrap()]);
    assert!(output.status.success());
    let timeline = std::fs::read_to_string(&trace).unwrap();
    for fence in 1..=9 {
        if fence == 2 {
            continue;
        }
        assert!(
            timeline.contains(&format!("submission fence {fence}")),
            "fence {fence}"
        );
    }
}

#[test]
fn a_metadata_recording_replays_with_the_same_counts_and_tampering_is_caught() {
    let dir = Dir::new("metadata");
    let record = dir.join("session.wgpurec");
    let live = record_a_session("record-metadata", &record, false);
    let output = replay(&record, &["--json"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let replayed: Json = serde_json::from_str(&stdout).unwrap();
    assert_eq!(counters(&replayed), counters(&live.stats));
    assert_eq!(replayed["replay"]["data"], false);

    // The deferred submission's command with its end moved to its start: it replays with no
    // packets, which is not what the backend answered.
    let mut bytes = std::fs::read(&record).unwrap();
    let wanted = live.altered.as_bytes();
    let at = bytes
        .windows(wanted.len())
        .position(|window| window == wanted)
        .expect("the command is in the recording");
    let end_offset = std::mem::offset_of!(WddmGpuCmdSubmit, end_offset);
    bytes[at + end_offset..at + end_offset + 4].copy_from_slice(&0u32.to_le_bytes());
    let tampered = dir.join("tampered.wgpurec");
    std::fs::write(&tampered, &bytes).unwrap();
    let output = replay(&tampered, &[]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stderr}\n{stdout}");
    assert!(
        stderr.contains("(node 0, fence 6) answered differently"),
        "{stderr}"
    );
    assert!(stdout.contains("1 answer(s) differ"), "{stdout}");

    // A recording cut short is named, entry and field.
    let whole = std::fs::read(&record).unwrap();
    let cut = dir.join("cut.wgpurec");
    std::fs::write(&cut, &whole[..whole.len() - 3]).unwrap();
    let output = replay(&cut, &[]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the file ends inside field"), "{stderr}");
    assert!(stderr.contains("entry "), "{stderr}");
}

#[test]
fn a_preempted_submission_replays_stopped_where_it_was() {
    let dir = Dir::new("preempt");
    let record = dir.join("session.wgpurec");
    let mut h = Harness::ready_with_options(
        "record-preempt",
        &SpawnOptions {
            vram_size: 64 << 20,
            args: vec!["--record".into(), record.clone().into()],
            ..SpawnOptions::default()
        },
    );
    // Hundreds of 16 MiB VRAM -> VRAM packets: seconds of copying unless preempted.
    let mut dma = DmaBufferBuilder::new();
    for _ in 0..400 {
        dma.push(&transfer(
            16 << 20,
            segment(VRAM_SEGMENT, 0),
            segment(VRAM_SEGMENT, 32 << 20),
        ));
    }
    let long_dma = 0x300_0000;
    h.write_ram(long_dma, dma.bytes());
    let long = h.post_submit(&submit_command(long_dma, dma.len(), 1));
    std::thread::sleep(std::time::Duration::from_millis(30));
    let preempt = h.post_preempt();
    h.wait_preempt(preempt);
    let long = h.wait_submit(long);
    expect(&long, SubmitStatus::Preempted);
    assert!(long.packets_completed < 400, "{long:?}");
    let mut dma = DmaBufferBuilder::new();
    dma.push(&fill(1, PAGE, segment(VRAM_SEGMENT, 0x100_0000)));
    expect(&submit(&mut h, &dma, 2).1, SubmitStatus::Ok);
    let output = binary()
        .args(["stats", "--json"])
        .arg(&h.backend.socket)
        .output()
        .unwrap();
    let live: Json = serde_json::from_str(&text(&output).0).unwrap();
    let mut backend = h.disconnect();
    assert!(backend.wait_exit(TIMEOUT).success());

    let output = replay(&record, &["--json"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}\n{stdout}");
    let replayed: Json = serde_json::from_str(&stdout).unwrap();
    assert_eq!(counters(&replayed), counters(&live));
    assert_eq!(
        replayed["submissions"]["preemptions"], live["submissions"]["preemptions"],
        "{replayed}"
    );
    assert_eq!(replayed["replay"]["preempts"], 1);
    assert_eq!(replayed["replay"]["mismatches"], serde_json::json!([]));
}
