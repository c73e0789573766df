//! The backend binary's command line: clear messages and non-zero exits for bad input.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use wddm_gpu_frontend_kit::backend_process::wait_for_path;

fn backend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
}

/// A folder of one test's own, removed when the test ends.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("wddm-cli-{}-{name}", std::process::id()));
    // Empty: an earlier run whose process had this pid may have left a socket here.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn run(args: &[&str]) -> Output {
    backend().args(args).output().unwrap()
}

/// The backend on `socket` with `vram_size` of VRAM at `vram`, run until it exits.
fn run_backend(socket: impl AsRef<Path>, vram: impl AsRef<Path>, vram_size: &str) -> Output {
    run(&[
        "--socket-path",
        socket.as_ref().to_str().unwrap(),
        "--vram-path",
        vram.as_ref().to_str().unwrap(),
        "--vram-size",
        vram_size,
    ])
}

/// What the run said on stderr must contain `text`.
#[track_caller]
fn assert_said(output: &Output, text: &str) {
    let message = stderr(output);
    assert!(message.contains(text), "{message}");
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
fn the_usage_line_says_socket_path_or_fd_is_required() {
    let output = run(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let usage = help
        .lines()
        .find(|line| line.starts_with("Usage: "))
        .unwrap_or_else(|| panic!("no usage line in:\n{help}"));
    assert!(
        usage.contains("<--socket-path <SOCKET_PATH>|--fd <FD>|--print-capabilities>"),
        "{usage}"
    );
}

#[test]
fn a_start_with_neither_socket_path_nor_fd_is_a_usage_error() {
    for args in [&[][..], &["--vram-size", "16MiB"][..], &["--check"][..]] {
        let output = run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_said(
            &output,
            "the following required arguments were not provided",
        );
        assert_said(
            &output,
            "<--socket-path <SOCKET_PATH>|--fd <FD>|--print-capabilities>",
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn socket_path_and_fd_together_are_a_usage_error() {
    let output = run(&["--socket-path", "/nonexistent/s", "--fd", "3"]);
    assert_eq!(output.status.code(), Some(2));
    assert_said(&output, "cannot be used with");
}

#[test]
fn print_capabilities_is_answered_alone_and_refused_with_other_options() {
    let output = run(&["--print-capabilities"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["type"], "gpu");
    let output = run(&["--print-capabilities", "--vram-size", "16MiB"]);
    assert_eq!(output.status.code(), Some(2));
    assert_said(&output, "--print-capabilities");
}

#[test]
fn vram_size_must_be_a_power_of_two() {
    let dir = scratch("npot");
    let vram = dir.join("vram");
    let socket = dir.join("sock");
    let output = run_backend(socket, vram, "96MiB");
    assert_eq!(output.status.code(), Some(2));
    assert_said(&output, "power of two");
}

#[test]
fn unparsable_sizes_are_usage_errors() {
    let output = run(&["--socket-path", "/nonexistent/s", "--vram-size", "lots"]);
    assert_eq!(output.status.code(), Some(2));
    assert_said(&output, "--vram-size");
}

#[test]
fn unwritable_vram_path_is_named() {
    let dir = scratch("unwritable");
    let output = run_backend(
        dir.join("sock"),
        "/proc/wddm-gpu-cannot-create.vram",
        "16MiB",
    );
    assert_eq!(output.status.code(), Some(1));
    assert_said(
        &output,
        "cannot create the VRAM file /proc/wddm-gpu-cannot-create.vram",
    );
}

#[test]
fn a_socket_in_use_is_refused_and_left_alone() {
    let dir = scratch("inuse");
    let socket = dir.join("sock");
    let _owner = UnixListener::bind(&socket).unwrap();
    let output = run_backend(&socket, dir.join("vram"), "16MiB");
    assert_eq!(output.status.code(), Some(1));
    assert_said(&output, "in use");
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
        assert_said(&served, line);
    }
    assert!(
        !socket.exists(),
        "the backend must not listen with an invalid layout"
    );
}

/// A WDDM 2.0 layout: CPU-visible VRAM (segment 1), an aperture (segment 2), then `gpummu`.
fn gpummu_layout(gpummu: &str) -> String {
    format!(
        "wddm = \"2.0\"\n[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"64MiB\"\n\
         [[segments]]\nflags = [\"Aperture\"]\nsize = \"64MiB\"\n[gpummu]\n{gpummu}"
    )
}

#[test]
fn check_layout_prints_every_broken_gpummu_rule_with_its_source() {
    let dir = scratch("gpummu-rules");
    let path = dir.join("gpummu.toml");
    let layout = gpummu_layout(
        "index_bits = [9, 9]\nupdate_mode = \"gpu_virtual\"\nmax_contexts = 0\n\
         table_segments = [2, 0]\n",
    );
    std::fs::write(&path, layout).unwrap();
    let output = run(&["check-layout", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    // Each line: the program, the file, then the violation.
    let lines: Vec<&str> = message
        .lines()
        .map(|line| line.split_once(".toml: ").map_or(line, |(_, rule)| rule))
        .collect();
    assert_eq!(
        lines,
        [
            "layout (gpummu.update_mode): PageTableUpdateMode GPU_VIRTUAL is not offered: the paging node's UPDATE_PAGE_TABLE addresses page tables physically; use gpu_physical, or cpu_virtual [limit of this device]",
            "layout (gpummu): max_contexts 0 is outside 1..=4096 [limit of this device]",
            "layout (gpummu): level 0: page_table_segment_id 2 is neither 0 (system memory) nor a memory segment [WDK: DXGK_PAGE_TABLE_LEVEL_DESC]",
            "layout (gpummu): level 0: paging_process_page_table_segment_id 2 is neither 0 (system memory) nor a memory segment [WDK: DXGK_PAGE_TABLE_LEVEL_DESC]",
        ],
        "{message}"
    );
}

#[test]
fn check_layout_refuses_a_root_of_0_index_bits_as_this_devices_limit() {
    let dir = scratch("gpummu-root");
    let path = dir.join("gpummu.toml");
    std::fs::write(&path, gpummu_layout("index_bits = [9, 0]\n")).unwrap();
    let output = run(&["check-layout", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message
            .contains(".toml: layout (gpummu): level 1: page_table_index_bit_count 0 is below 1"),
        "{message}"
    );
    assert!(message.contains("resizable root"), "{message}");
    assert!(!message.contains("64 KiB"), "the leaf's rule: {message}");
    assert!(
        message.trim_end().ends_with("[limit of this device]"),
        "{message}"
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

fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// A backend serving `socket` with `args`, stopped (killed) when dropped; its log is kept.
struct Serving {
    child: std::process::Child,
    log: PathBuf,
}

impl Serving {
    fn start(dir: &std::path::Path, socket: &std::path::Path, args: &[&str]) -> Self {
        let log = dir.join(format!(
            "{}.log",
            socket.file_name().unwrap().to_string_lossy()
        ));
        let mut child = backend()
            .arg("--socket-path")
            .arg(socket)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        wait_for_path(&mut child, socket, || read_log(&log));
        Self { child, log }
    }

    fn log(&self) -> String {
        read_log(&self.log)
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_second_backend_on_the_same_vram_file_is_refused() {
    let dir = scratch("vram-lock");
    let vram = dir.join("vram");
    let vram = vram.to_str().unwrap();
    let mut first = Serving::start(
        &dir,
        &dir.join("a"),
        &["--vram-path", vram, "--vram-size", "1MiB"],
    );
    let second = run_backend(dir.join("b"), vram, "1MiB");
    assert!(!second.status.success());
    assert_said(&second, "in use by another backend");
    assert!(!dir.join("b").exists(), "the second backend listened");
    assert!(first.is_running(), "{}", first.log());
}

#[test]
fn an_existing_vram_file_of_another_size_is_refused_and_left_as_is() {
    let dir = scratch("vram-size");
    let vram = dir.join("vram");
    std::fs::write(&vram, vec![0x11; 2 << 20]).unwrap();
    let output = run_backend(dir.join("s"), &vram, "4MiB");
    assert!(!output.status.success());
    assert_said(&output, "holds 0x200000 bytes, not the 0x400000");
    assert_eq!(std::fs::metadata(&vram).unwrap().len(), 2 << 20);
}

#[test]
fn a_socket_in_use_is_refused_before_any_vram_file_is_made() {
    let dir = scratch("socket-first");
    let socket = dir.join("s");
    let _first = Serving::start(
        &dir,
        &socket,
        &[
            "--vram-path",
            dir.join("v1").to_str().unwrap(),
            "--vram-size",
            "1MiB",
        ],
    );
    let second_vram = dir.join("v2");
    let output = run_backend(&socket, &second_vram, "1MiB");
    assert_said(&output, "is served by another backend, pid");
    assert!(
        !second_vram.exists(),
        "a VRAM file was made for a backend that cannot serve"
    );
}

#[test]
fn files_and_sockets_are_the_owners_unless_file_mode_says_otherwise() {
    let dir = scratch("modes");
    for (mode, expected) in [(None, 0o600), (Some("0660"), 0o660)] {
        let name = format!("m{expected:o}");
        let socket = dir.join(&name);
        let vram = dir.join(format!("{name}.vram"));
        let mut args = vec!["--vram-path", vram.to_str().unwrap(), "--vram-size", "1MiB"];
        if let Some(mode) = mode {
            args.extend(["--file-mode", mode]);
        }
        let serving = Serving::start(&dir, &socket, &args);
        let stats = dir.join(format!("{name}.stats"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stats.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for path in [&socket, &vram, &stats] {
            assert_eq!(
                mode_of(path),
                expected,
                "{}:\n{}",
                path.display(),
                serving.log()
            );
        }
    }
    for bad in ["0400", "0755x", "01777"] {
        let output = run(&["--socket-path", "/nonexistent/s", "--file-mode", bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {}", stderr(&output));
    }
}

#[test]
fn backends_without_a_vram_path_get_one_of_their_own_per_socket() {
    let dir = scratch("default-vram");
    let first = Serving::start(&dir, &dir.join("a"), &["--vram-size", "1MiB"]);
    let second = Serving::start(&dir, &dir.join("b"), &["--vram-size", "1MiB"]);
    let path_of = |serving: &Serving| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = serving.log();
            if let Some(path) = log
                .split_whitespace()
                .find(|word| word.starts_with("/dev/shm/vhost-user-wddm-gpu-socket-"))
            {
                return PathBuf::from(path);
            }
            assert!(Instant::now() < deadline, "no VRAM path in the log:\n{log}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let (a, b) = (path_of(&first), path_of(&second));
    drop((first, second));
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    assert_ne!(a, b, "two sockets, one VRAM file");
}
