//! The stats endpoint and the trace against the real backend binary: `stats` in its three
//! renderings, the default `.stats` path, `--stats-socket`, a missing endpoint, `--trace`; and,
//! with the vhost-user frontend harness, real paging traffic showing up in both.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use prometheus_parse::Value;
use serde_json::Value as Json;
use wddm_gpu_abi::build::transfer;
use wddm_gpu_abi::submit::SubmitStatus;
use wddm_gpu_frontend_kit::{
    backend_process::{wait_for_path, SpawnOptions},
    harness::{Harness, DATA, FRAME_LISTS, PAGE},
    requests::{frames, segment},
    scrape::{self, sample},
};

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
}

fn stats(args: &[&str]) -> Output {
    binary().arg("stats").args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A backend without a frontend, in its own temp dir with its own VRAM file in /dev/shm; both
/// are removed (and the process killed) on drop.
struct Backend {
    child: Child,
    dir: PathBuf,
    vram: PathBuf,
    socket: PathBuf,
}

impl Backend {
    /// Starts the backend with `--socket-path DIR/gpu.sock` plus `args` (relative paths in
    /// `args` are made absolute under DIR) and waits for `wait_for` (relative to DIR).
    fn start(name: &str, args: &[&str], wait_for: &str) -> Self {
        let unique = format!("{}-{name}", std::process::id());
        let dir = std::env::temp_dir().join(format!("wddm-stats-test-{unique}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let vram = PathBuf::from(format!("/dev/shm/wddm-stats-test-{unique}.vram"));
        let socket = dir.join("gpu.sock");
        let args: Vec<String> = args
            .iter()
            .map(|arg| match arg.strip_prefix("DIR/") {
                Some(rest) => dir.join(rest).to_string_lossy().into_owned(),
                None => arg.to_string(),
            })
            .collect();
        let child = binary()
            .arg("--socket-path")
            .arg(&socket)
            .arg("--vram-path")
            .arg(&vram)
            .args(["--vram-size", "16MiB"])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut backend = Self {
            child,
            dir,
            vram,
            socket,
        };
        let target = backend.dir.join(wait_for);
        wait_for_path(&mut backend.child, &target, String::new);
        backend
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.vram);
    }
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Parses a trace file, closing the JSON array when the backend did not get to (the trace
/// event format allows the `]` to be missing).
fn trace_events(path: &Path) -> Vec<Json> {
    let mut text = std::fs::read_to_string(path).unwrap();
    if !text.trim_end().ends_with(']') {
        text.push(']');
    }
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{error}:\n{text}"))
}

#[test]
fn stats_renders_a_running_backend_through_the_default_path() {
    let backend = Backend::start("default", &[], "gpu.sock.stats");
    let socket = text(&backend.socket);

    // The vhost-user socket path: `.stats` is appended because that socket exists.
    let output = stats(&[socket]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.starts_with("uptime "), "{table}");
    for line in [
        "packet ",
        "transfer ",
        "unknown ",
        "submissions ",
        "queue wait ",
        "queue depth: current 0, max 0",
        "segment 0 ",
        "segment 1 ",
        "segment 2 ",
    ] {
        assert!(table.contains(line), "{line:?} missing:\n{table}");
    }

    // The stats socket itself.
    let stats_socket = backend.path("gpu.sock.stats");
    let output = stats(&["--prometheus", text(&stats_socket)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let prometheus = stdout(&output);
    assert!(prometheus.contains("# TYPE wddm_gpu_packets_total counter"));
    let scrape = scrape::parse(&prometheus);
    assert_eq!(
        sample(&scrape, "wddm_gpu_packets_total", &[("kind", "transfer")]),
        Value::Counter(0.0)
    );
    assert_eq!(
        sample(&scrape, "wddm_gpu_submissions_total", &[("status", "ok")]),
        Value::Counter(0.0)
    );
    assert_eq!(
        sample(
            &scrape,
            "wddm_gpu_segment_bytes_total",
            &[("segment", "1"), ("direction", "write")]
        ),
        Value::Counter(0.0)
    );
    let Value::Gauge(uptime) = sample(&scrape, "wddm_gpu_uptime_seconds", &[]) else {
        panic!("uptime is not a gauge");
    };
    assert!(uptime > 0.0);

    let output = stats(&["--json", socket]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: Json = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["submissions"]["count"], 0);
    // Every packet kind and "unknown".
    assert_eq!(json["packets"].as_array().unwrap().len(), 18);
    assert_eq!(json["segments"].as_array().unwrap().len(), 3);
    assert_eq!(json["queue_depth"]["current"], 0);

    // --watch prints again and again.
    let mut watching = binary()
        .args(["stats", "--watch", "0.1", "--json", socket])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    watching.kill().unwrap();
    let output = watching.wait_with_output().unwrap();
    let printed = stdout(&output).matches("\"uptime_ns\"").count();
    assert!(printed >= 2, "{printed} snapshots in 0.5 s");

    // The table's --watch is the live view; --count ends it (off a terminal: frames in turn).
    let output = stats(&["--watch", "0.1", "--count", "3", socket]);
    assert!(output.status.success(), "{}", stderr(&output));
    let live = stdout(&output);
    assert_eq!(
        live.matches("paging queue depth now 0").count(),
        3,
        "{live}"
    );
    assert_eq!(live.matches("rates over the last").count(), 2, "{live}");
    for line in [
        "0 paging ",
        "1 virtual ",
        "system memory ",
        "segment 2 ",
        "latency ",
    ] {
        assert!(live.contains(line), "{line:?} missing:\n{live}");
    }
    assert!(!live.contains('\x1b'), "no escape sequences into a pipe");
}

#[test]
fn stats_socket_option_replaces_the_default_path() {
    let backend = Backend::start("custom", &["--stats-socket", "DIR/custom"], "custom");
    assert!(!backend.path("gpu.sock.stats").exists());
    let output = stats(&["--json", text(&backend.path("custom"))]);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_str::<Json>(&stdout(&output)).unwrap();
}

#[test]
fn a_missing_endpoint_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("wddm-stats-test-{}-missing", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("gpu.sock");
    let output = stats(&[text(&missing)]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("no stats endpoint at"), "{message}");
    assert!(message.contains(text(&missing)), "{message}");
    assert!(stdout(&output).is_empty());

    // A file that is not a socket.
    let file = dir.join("file");
    std::fs::write(&file, b"").unwrap();
    let output = stats(&["--prometheus", text(&file)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no stats endpoint"),
        "{}",
        stderr(&output)
    );

    // Usage errors.
    for args in [
        &["--watch", "0", "x"][..],
        &["--watch", "soon", "x"],
        &["--json", "--prometheus", "x"],
        &["--count", "2", "x"],
        &["--watch", "1", "--count", "0", "x"],
        &[],
    ] {
        let output = stats(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn trace_creates_a_file_that_parses_as_json() {
    let backend = Backend::start("trace", &["--trace", "DIR/trace.json"], "gpu.sock.stats");
    let events = trace_events(&backend.path("trace.json"));
    let thread = events
        .iter()
        .find(|event| event["ph"] == "M" && event["name"] == "thread_name")
        .unwrap();
    assert_eq!(thread["args"]["name"], "GPU engine (node 0)");
    assert_eq!(thread["pid"], backend.child.id());
}

#[test]
fn an_unwritable_trace_is_named() {
    let dir = std::env::temp_dir().join(format!("wddm-stats-badtrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("gpu.sock");
    let output = binary()
        .args([
            "--socket-path",
            socket.to_str().unwrap(),
            "--vram-path",
            &format!(
                "/dev/shm/wddm-stats-test-{}-badtrace.vram",
                std::process::id()
            ),
            "--vram-size",
            "16MiB",
            "--trace",
            "/proc/wddm-gpu-no-trace.json",
        ])
        .output()
        .unwrap();
    let vram_made = Path::new(&format!(
        "/dev/shm/wddm-stats-test-{}-badtrace.vram",
        std::process::id()
    ))
    .exists();
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(1));
    assert!(!vram_made, "a refused start left its VRAM file");
    assert!(left.is_empty(), "a refused start left {left:?}");
    assert!(
        stderr(&output).contains("--trace /proc/wddm-gpu-no-trace.json"),
        "{}",
        stderr(&output)
    );
}

/// Guest-RAM frame number `index` of the harness data area.
fn frame(index: u64) -> u64 {
    DATA / PAGE + index
}

#[test]
fn paging_traffic_shows_in_stats_and_trace() {
    let dir = std::env::temp_dir().join(format!("wddm-stats-test-{}-traffic", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let mut h = Harness::ready_with_options(
        "stats-traffic",
        &SpawnOptions {
            args: vec!["--trace".into(), trace.clone().into()],
            ..SpawnOptions::default()
        },
    );
    // 8 KiB system memory -> VRAM 0x10000, then back to other frames, in two submissions.
    h.write_frame_list(FRAME_LISTS, &[frame(0), frame(1)]);
    h.write_frame_list(FRAME_LISTS + 0x100, &[frame(4), frame(5)]);
    let up = h.submit_packets(
        &[transfer(
            8192,
            frames(FRAME_LISTS, 2, 0),
            segment(1, 0x1_0000),
        )],
        1,
    );
    assert_eq!(up.status, SubmitStatus::Ok as u32, "{up:?}");
    let down = h.submit_packets(
        &[
            transfer(
                4096,
                segment(1, 0x1_0000),
                frames(FRAME_LISTS + 0x100, 2, 0),
            ),
            transfer(
                4096,
                segment(1, 0x1_1000),
                frames(FRAME_LISTS + 0x100, 2, 4096),
            ),
        ],
        2,
    );
    assert_eq!(down.status, SubmitStatus::Ok as u32, "{down:?}");
    // A transfer to a segment the layout does not have faults.
    let bad = h.submit_packets(&[transfer(4096, segment(1, 0), segment(9, 0))], 3);
    assert_eq!(bad.status, SubmitStatus::BadSegment as u32, "{bad:?}");

    let socket = h.backend.socket.clone();
    let output = stats(&["--json", text(&socket)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: Json = serde_json::from_str(&stdout(&output)).unwrap();
    let transfer_stats = &json["packets"][0];
    assert_eq!(transfer_stats["kind"], "transfer");
    assert_eq!(transfer_stats["count"], 4, "{transfer_stats}");
    assert_eq!(transfer_stats["faults"], 1, "{transfer_stats}");
    assert_eq!(transfer_stats["bytes"], 16384, "{transfer_stats}");
    assert_eq!(transfer_stats["latency"]["count"], 4);
    assert!(transfer_stats["latency"]["max_ns"].as_u64().unwrap() > 0);
    let submissions = &json["submissions"];
    assert_eq!(submissions["count"], 3, "{submissions}");
    assert_eq!(submissions["faults"], 1, "{submissions}");
    assert_eq!(submissions["bytes"], 16384, "{submissions}");
    assert_eq!(submissions["execution"]["count"], 3);
    let segments = &json["segments"];
    assert_eq!(segments[0]["read_bytes"], 8192, "{segments}");
    assert_eq!(segments[0]["written_bytes"], 8192, "{segments}");
    assert_eq!(segments[1]["written_bytes"], 8192, "{segments}");
    assert_eq!(segments[1]["read_bytes"], 8192, "{segments}");
    // Control requests: the harness's set-up ones and the three submissions, none refused.
    assert!(json["requests"].as_u64().unwrap() >= 3, "{json}");
    assert_eq!(json["refused_requests"], 0, "{json}");

    let output = stats(&["--prometheus", text(&socket)]);
    let scrape = scrape::parse(&stdout(&output));
    assert_eq!(
        sample(&scrape, "wddm_gpu_packets_total", &[("kind", "transfer")]),
        Value::Counter(4.0)
    );
    assert_eq!(
        sample(
            &scrape,
            "wddm_gpu_submissions_total",
            &[("status", "bad_segment")]
        ),
        Value::Counter(1.0)
    );
    let Value::Untyped(count) = sample(
        &scrape,
        "wddm_gpu_packet_latency_seconds_count",
        &[("kind", "transfer")],
    ) else {
        panic!("count");
    };
    assert_eq!(count, 4.0);

    // Every answered submission is in the trace, its packets inside its span.
    let events = trace_events(&trace);
    for fence in 1..=3u64 {
        let submission = events
            .iter()
            .find(|event| event["name"] == format!("submission fence {fence}").as_str())
            .unwrap_or_else(|| panic!("fence {fence} missing"));
        let start = submission["ts"].as_f64().unwrap();
        let end = start + submission["dur"].as_f64().unwrap();
        let packets: Vec<&Json> = events
            .iter()
            .filter(|event| event["cat"] == "packet" && event["args"]["fence"] == fence)
            .collect();
        assert!(!packets.is_empty(), "fence {fence}");
        for packet in packets {
            assert_eq!(packet["tid"], submission["tid"]);
            let ts = packet["ts"].as_f64().unwrap();
            assert!(ts >= start && ts + packet["dur"].as_f64().unwrap() <= end + 1e-3);
        }
    }
    let faulted = events
        .iter()
        .find(|event| event["name"] == "submission fence 3")
        .unwrap();
    assert_eq!(faulted["args"]["status"], "bad_segment");

    // A frontend hanging up ends the backend, which removes its stats socket.
    let stats_socket = h.backend.stats_socket();
    assert!(stats_socket.exists());
    let mut backend = h.disconnect();
    assert!(backend.wait_exit(Duration::from_secs(10)).success());
    assert!(!stats_socket.exists(), "stats socket left behind");
    // ... and finishes its trace: the file is a complete JSON array.
    let finished = std::fs::read_to_string(&trace).unwrap();
    serde_json::from_str::<Vec<Json>>(&finished).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}
