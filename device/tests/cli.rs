//! The backend binary's command line: clear messages and non-zero exits for bad input.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn backend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wddm-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(args: &[&str]) -> Output {
    backend().args(args).output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn print_capabilities_names_a_gpu_backend() {
    let output = run(&["--print-capabilities"]);
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["type"], "gpu");
    assert!(json["features"].is_array());
}

#[test]
fn vram_size_must_be_a_power_of_two() {
    let dir = scratch("npot");
    let vram = dir.join("vram");
    let socket = dir.join("sock");
    let output = run(&[
        "--socket-path",
        socket.to_str().unwrap(),
        "--vram-path",
        vram.to_str().unwrap(),
        "--vram-size",
        "96MiB",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("power of two"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn unparsable_sizes_are_usage_errors() {
    let output = run(&["--socket-path", "/nonexistent/s", "--vram-size", "lots"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--vram-size"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn unwritable_vram_path_is_named() {
    let dir = scratch("unwritable");
    let output = run(&[
        "--socket-path",
        dir.join("sock").to_str().unwrap(),
        "--vram-path",
        "/proc/wddm-gpu-cannot-create.vram",
        "--vram-size",
        "16MiB",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("cannot create the VRAM file /proc/wddm-gpu-cannot-create.vram"),
        "{message}"
    );
}

#[test]
fn a_socket_in_use_is_refused_and_left_alone() {
    let dir = scratch("inuse");
    let socket = dir.join("sock");
    let _owner = UnixListener::bind(&socket).unwrap();
    let output = run(&[
        "--socket-path",
        socket.to_str().unwrap(),
        "--vram-path",
        dir.join("vram").to_str().unwrap(),
        "--vram-size",
        "16MiB",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("in use"), "{}", stderr(&output));
    assert!(socket.exists());
}

#[test]
fn a_stale_socket_file_is_replaced_and_served() {
    let dir = scratch("stale");
    let socket = dir.join("sock");
    drop(UnixListener::bind(&socket).unwrap());
    let mut child = backend()
        .args([
            "--socket-path",
            socket.to_str().unwrap(),
            "--vram-path",
            dir.join("vram").to_str().unwrap(),
            "--vram-size",
            "16MiB",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut connected = false;
    while Instant::now() < deadline && !connected {
        connected = std::os::unix::net::UnixStream::connect(&socket).is_ok();
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(connected, "backend never listened on the replaced socket");
}

fn layouts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../qemu-configs/layouts")
}

#[test]
fn every_shipped_layout_passes_check_layout() {
    let mut checked = 0;
    for entry in std::fs::read_dir(layouts_dir()).unwrap() {
        let path = entry.unwrap().path();
        let output = run(&["check-layout", path.to_str().unwrap()]);
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            stderr(&output)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("NbSegment = "), "{text}");
        checked += 1;
    }
    assert!(checked >= 5);
}

#[test]
fn check_layout_json_holds_the_descriptor_fields() {
    let path = layouts_dir().join("banked.toml");
    let output = run(&["check-layout", path.to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let vram = &json["segments"][0];
    assert_eq!(vram["id"], 1);
    assert_eq!(vram["flags"], 0x4 | 0x8);
    assert_eq!(vram["size"], 256u64 << 20);
    assert_eq!(vram["commit_limit"], 256u64 << 20);
    assert_eq!(vram["base_address"], 0);
    assert_eq!(
        vram["banks"],
        serde_json::json!([32u64 << 20, 96u64 << 20, 160u64 << 20, 256u64 << 20])
    );
    assert_eq!(json["segments"][1]["flags"], 0x11);
    assert_eq!(json["paging_buffer_segment_id"], 0);
    assert_eq!(json["paging_buffer_size"], 65536);
}

#[test]
fn a_broken_layout_exits_2_with_one_line_per_rule() {
    let dir = scratch("broken-layout");
    let path = dir.join("broken.toml");
    std::fs::write(
        &path,
        "paging_buffer_segment = 1\n[[segments]]\nflags = [\"CpuVisible\", \"CacheCoherent\"]\nsize = \"512MiB\"\n",
    )
    .unwrap();
    let output = run(&["check-layout", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines.len(), 3, "{message}");
    assert!(lines
        .iter()
        .any(|l| l.contains("layout (paging_buffer_segment): PagingBufferSegmentId 1")));
    assert!(lines
        .iter()
        .any(|l| l
            .contains("segment 1 (flags): CacheCoherent may only be set together with Aperture")));
    assert!(lines
        .iter()
        .any(|l| l.contains("segment 1 (bar_offset, size)")
            && l.contains("does not fit in the 256 MiB VRAM BAR")));

    // The backend refuses to start on it, with the same lines.
    let socket = dir.join("sock");
    let served = run(&[
        "--socket-path",
        socket.to_str().unwrap(),
        "--vram-path",
        dir.join("vram").to_str().unwrap(),
        "--layout",
        path.to_str().unwrap(),
    ]);
    assert_eq!(served.status.code(), Some(2));
    for line in lines {
        assert!(stderr(&served).contains(line), "{}", stderr(&served));
    }
    assert!(
        !socket.exists(),
        "the backend must not listen with an invalid layout"
    );
}

#[test]
fn check_layout_vram_size_must_be_a_power_of_two() {
    let path = layouts_dir().join("banked.toml");
    let output = run(&[
        "check-layout",
        path.to_str().unwrap(),
        "--vram-size",
        "384MiB",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("power of two"));
}

#[test]
fn decode_and_encode_round_trip_and_refuse_bad_input() {
    let encoded = run(&["encode", "segment-preference", "2:top-down", "1"]);
    assert!(encoded.status.success());
    assert_eq!(
        String::from_utf8_lossy(&encoded.stdout).trim(),
        "0x00000062"
    );
    let decoded = run(&["decode", "segment-preference", "0x62"]);
    let text = String::from_utf8_lossy(&decoded.stdout);
    assert!(text.contains("SegmentId0 = 2"), "{text}");
    assert!(text.contains("SegmentId1 = 1"), "{text}");
    let flags = run(&["encode", "segment-flags", "Aperture", "CacheCoherent"]);
    assert_eq!(String::from_utf8_lossy(&flags.stdout).trim(), "0x00000011");
    for bad in [
        &["decode", "segment-preference", "0x40000000"][..],
        &["decode", "segment-flags", "0x80000000"],
        &["encode", "segment-preference", "32"],
        &["encode", "bank-preference", "128"],
        &["encode", "segment-flags", "Bogus"],
        &["decode", "colour", "1"],
    ] {
        let output = run(bad);
        assert_eq!(output.status.code(), Some(2), "{bad:?}");
        assert!(stderr(&output).contains("error:"), "{bad:?}");
    }
}
