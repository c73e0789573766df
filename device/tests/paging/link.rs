//! The link model (`--link`): paging takes at least the modelled time, the bytes are the same,
//! a PREEMPT still stops a submission the model keeps long, and the stats say what it did.

use std::process::Command;
use std::time::{Duration, Instant};

use wddm_gpu_abi::build::{fill, transfer};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::harness::{Harness, FRAME_LISTS, PAGE, PAGE_USIZE};
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::{frames, segment, submit_command};

use crate::common::*;

/// A backend modelling `link`.
fn linked(name: &str, link: &str) -> Harness {
    let options = SpawnOptions {
        args: vec!["--link".into(), link.into()],
        vram_size: BIG_VRAM,
        ..SpawnOptions::default()
    };
    Harness::ready_with_options(name, &options)
}

/// An upload of `pages` frames, in reverse order (none contiguous), to VRAM offset 0.
fn upload(h: &mut Harness, pages: u64) -> Dma {
    let list: Vec<u64> = (0..pages).rev().map(frame).collect();
    for (index, &frame) in (0u64..).zip(&list) {
        h.write_ram(frame * PAGE, &pattern(index, PAGE_USIZE));
    }
    h.write_frame_list(FRAME_LISTS, &list);
    let mut dma = Dma::default();
    dma.push(&transfer(
        pages * PAGE,
        frames(FRAME_LISTS, u32::try_from(pages).unwrap(), 0),
        segment(VRAM_SEGMENT, 0),
    ));
    dma
}

#[test]
fn an_upload_takes_the_modelled_time_and_moves_the_same_bytes() {
    // 100 MB/s, 2 ms a transfer, 10 µs a page: 256 pages (1 MiB) take
    // 2 ms + 10.48576 ms + 2.56 ms = 15.04576 ms.
    let mut h = linked("link-upload", "bandwidth=100MB/s,latency=2ms,page=10us");
    let dma = upload(&mut h, 256);
    let sent = Instant::now();
    submit_ok(&mut h, &dma, 1);
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_nanos(15_045_760),
        "answered after {took:?}"
    );
    for index in [0u64, 100, 255] {
        assert_bytes(
            &h.read_vram(index * PAGE, PAGE_USIZE),
            &pattern(index, PAGE_USIZE),
            "uploaded page",
        );
    }
    let stats = h.backend.stats_table();
    assert!(
        stats.contains(
            "link model (0.10 GB/s, 2ms a transfer, 10µs a page, VRAM at host speed): 1 packets given 15.05 ms"
        ),
        "{stats}"
    );
    // The live view's source says the same, in JSON.
    let json: serde_json::Value = serde_json::from_str(&h.backend.stats_json()).unwrap();
    assert_eq!(json["link"]["packets"], 1, "{json}");
    assert_eq!(json["link"]["modelled_ns"], 15_045_760, "{json}");
    assert!(
        json["link"]["waited_ns"].as_u64().unwrap() > 10_000_000,
        "{json}"
    );
}

#[test]
fn vram_fills_move_at_the_vram_bandwidth_and_a_preempt_still_stops_the_work() {
    // VRAM at 1 GB/s: each 16 MiB fill takes 16.8 ms; 64 of them a second.
    let mut h = linked("link-preempt", "bandwidth=16GB/s,vram=1GB/s");
    let mut dma = Dma::default();
    for _ in 0..64 {
        dma.push(&fill(0x5a5a_5a5a, 16 << 20, segment(VRAM_SEGMENT, 0)));
    }
    h.write_ram(LONG_DMA, dma.bytes());
    let sent = Instant::now();
    let long = h.post_submit(&submit_command(LONG_DMA, dma.len(), 7));
    std::thread::sleep(Duration::from_millis(100));
    let preempt = h.post_preempt();
    let preempted = h.wait_preempt(preempt);
    let response: WddmGpuRespSubmit = h.wait_reply(long).exact();
    let took = sent.elapsed();
    assert_eq!(
        (preempted.preempted_fence, preempted.preempted_count),
        (7, 1),
        "{preempted:?}"
    );
    assert_eq!(
        status(&response),
        Some(SubmitStatus::Preempted),
        "{response:?}"
    );
    // Stopped between packets, part way: not all 64 (how many ran in the 100 ms depends on how
    // busy the machine is, so no lower bound beyond the preemption's answer).
    assert!(
        response.packets_completed < 64,
        "{response:?} after {took:?}"
    );
    // The same submission runs to its end afterwards, at the modelled pace.
    let sent = Instant::now();
    submit_ok(&mut h, &dma, 8);
    assert!(sent.elapsed() >= Duration::from_micros(64 * 16_777));
}

#[test]
fn a_bad_link_is_refused_naming_the_word_and_the_rule() {
    let output = Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
        .args([
            "--socket-path",
            "unused.sock",
            "--link",
            "pcie4x16,vram=fast",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--link") && stderr.contains("vram: \"fast\" is not a rate"),
        "{stderr}"
    );
}
