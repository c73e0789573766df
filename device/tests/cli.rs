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
    assert_eq!(output.status.code(), Some(1));
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

#[test]
fn fd_must_be_a_listening_socket() {
    let output = run(&[
        "--fd",
        "0",
        "--vram-path",
        "/dev/null",
        "--vram-size",
        "16MiB",
    ]);
    assert_ne!(output.status.code(), Some(0));
}
