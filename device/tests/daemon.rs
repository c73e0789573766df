//! The backend as a daemon, against the real binary: a second instance, stray clients and a
//! frontend's neighbours never end it; SIGTERM and SIGINT end it in order; a refused start
//! leaves no file; sizes and modes are checked before anything is made.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use vhost::VhostBackend;
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::harness::{Harness, DATA, DMA_BUFFER, FRAME_LISTS, PAGE};
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::{frames, segment, submit_command};

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
}

/// A folder of this test's own, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("wddm-daemon-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names in the folder, sorted.
    fn listing(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A backend on `dir/gpu.sock` with its VRAM file in `dir`, and more `args`; its log in
/// `dir/backend.log`. Killed when dropped if still running.
struct Backend {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Backend {
    fn start(dir: &Dir, args: &[&str]) -> Self {
        let vram = dir.join("gpu.vram");
        let mut all = vec!["--vram-path", vram.to_str().unwrap(), "--vram-size", "1MiB"];
        all.extend_from_slice(args);
        Self::spawn(dir, "backend.log", &all)
    }

    /// The binary on `dir/gpu.sock` with `args`, logging to `dir/LOG`, once it waits.
    fn spawn(dir: &Dir, log: &str, args: &[&str]) -> Self {
        let socket = dir.join("gpu.sock");
        let log = dir.join(log);
        let child = binary()
            .arg("--socket-path")
            .arg(&socket)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut backend = Self { child, socket, log };
        backend.wait_for_log("waiting for the frontend");
        backend
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for_log(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().contains(text) {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "exited:\n{}",
                self.log()
            );
            assert!(Instant::now() < deadline, "no {text:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill sends a signal to the child this test started; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits (bounded) for the exit; its code.
    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "still running:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A client that speaks vhost-user: GET_FEATURES, answered.
    fn frontend(&self) -> vhost::vhost_user::Frontend {
        let frontend = vhost::vhost_user::Frontend::connect(&self.socket, 2).unwrap();
        frontend.get_features().unwrap();
        frontend
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects to `socket`, writes `bytes` (maybe none) and closes.
fn knock(socket: &Path, bytes: &[u8]) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(bytes).unwrap();
}

#[test]
fn a_second_backend_is_refused_from_the_lock_and_the_first_serves_on() {
    let dir = Dir::new("second");
    let mut first = Backend::start(&dir, &[]);
    let second = binary()
        .arg("--socket-path")
        .arg(&first.socket)
        .arg("--vram-path")
        .arg(dir.join("second.vram"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "served by another backend, pid {}",
            first.child.id()
        )),
        "{said}"
    );
    assert!(!dir.join("second.vram").exists());
    std::thread::sleep(Duration::from_millis(200));
    assert!(first.is_running(), "{}", first.log());
    assert!(!first.log().contains("client"), "{}", first.log());
    drop(first.frontend());
    assert_eq!(first.exit_code(), Some(0), "{}", first.log());
}

#[test]
fn stray_clients_before_the_frontend_do_not_end_the_backend() {
    let dir = Dir::new("strays");
    // The stats socket elsewhere, so `stats` given the vhost-user socket talks to it.
    let stats = dir.join("elsewhere.stats");
    let mut backend = Backend::start(&dir, &["--stats-socket", stats.to_str().unwrap()]);
    let output = binary().arg("stats").arg(&backend.socket).output().unwrap();
    assert!(!output.status.success());
    knock(&backend.socket, b"");
    knock(&backend.socket, b"table\n");
    knock(&backend.socket, &[0xff; 64]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(backend.is_running(), "{}", backend.log());
    let log = backend.log();
    assert!(
        log.contains("left before any valid vhost-user request"),
        "{log}"
    );
    // Four clients, one line: the rest are held back for the next.
    assert_eq!(
        log.matches("still waiting for the frontend").count(),
        1,
        "{log}"
    );
    drop(backend.frontend());
    assert_eq!(backend.exit_code(), Some(0), "{}", backend.log());
    assert!(backend.log().contains("frontend disconnected; exiting"));
}

#[test]
fn a_silent_client_is_dropped_and_the_frontend_served_after_it() {
    let dir = Dir::new("silent");
    let mut backend = Backend::start(&dir, &[]);
    let mut silent = UnixStream::connect(&backend.socket).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    // The backend closes it: end of stream, not a timeout.
    assert_eq!(silent.read(&mut byte).unwrap(), 0);
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    assert!(backend.is_running(), "{}", backend.log());
    drop(backend.frontend());
    assert_eq!(backend.exit_code(), Some(0), "{}", backend.log());
}

#[test]
fn clients_knocking_while_the_frontend_is_connected_are_closed() {
    let dir = Dir::new("knock");
    let mut backend = Backend::start(&dir, &[]);
    let frontend = backend.frontend();
    for _ in 0..3 {
        let mut other = UnixStream::connect(&backend.socket).unwrap();
        other
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(other.read(&mut byte).unwrap(), 0, "not closed");
    }
    // The frontend is still served.
    frontend.get_features().unwrap();
    assert!(backend.is_running());
    let log = backend.log();
    assert_eq!(
        log.matches("refused a client of the vhost-user socket")
            .count(),
        1,
        "{log}"
    );
    drop(frontend);
    assert_eq!(backend.exit_code(), Some(0), "{}", backend.log());
    assert!(
        backend.log().contains("3 other client(s) were refused"),
        "{}",
        backend.log()
    );
}

#[test]
fn sigterm_and_sigint_end_a_waiting_backend_in_order() {
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let dir = Dir::new(name);
        let mut backend = Backend::start(&dir, &[]);
        assert!(dir.join("gpu.sock.lock").exists());
        backend.signal(signal);
        assert_eq!(backend.exit_code(), Some(0), "{}", backend.log());
        assert!(backend.log().contains(&format!("stopped by {name}")));
        // The VRAM file was named by the user: kept. Every socket and the lock: gone.
        assert_eq!(dir.listing(), ["backend.log", "gpu.vram"], "{name}");
    }
}

#[test]
fn sighup_is_logged_and_ignored() {
    let dir = Dir::new("sighup");
    let mut backend = Backend::start(&dir, &[]);
    backend.signal(libc::SIGHUP);
    backend.wait_for_log("SIGHUP: ignored");
    assert!(backend.is_running());
    drop(backend.frontend());
    assert_eq!(backend.exit_code(), Some(0));
}

#[test]
fn sigterm_with_a_frontend_at_work_flushes_the_trace_recording_and_checker() {
    let dir = Dir::new("sigterm-session");
    let trace = dir.join("trace.json");
    let record = dir.join("session.wgpurec");
    let options = SpawnOptions {
        args: [
            "--check",
            "--trace",
            trace.to_str().unwrap(),
            "--record",
            record.to_str().unwrap(),
        ]
        .map(Into::into)
        .to_vec(),
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("sigterm-session", &options);
    let data = pattern(0x5e, 0x2000);
    h.write_ram(DATA, &data);
    h.write_frame_list(FRAME_LISTS, &[DATA / PAGE, DATA / PAGE + 1]);
    let packet = wddm_gpu_abi::build::transfer(0x2000, frames(FRAME_LISTS, 2, 0), segment(1, 0));
    h.write_ram(DMA_BUFFER, zerocopy::IntoBytes::as_bytes(&packet));
    let response = h.submit(&submit_command(
        DMA_BUFFER,
        u32::try_from(std::mem::size_of_val(&packet)).unwrap(),
        1,
    ));
    assert_eq!(response.status, 0, "{}", h.backend.log());
    let pid = libc::pid_t::try_from(h.backend.pid().unwrap()).unwrap();
    // SAFETY: kill sends a signal to the backend this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // The stop, not the frontend's hang-up below, ends the session.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !h.backend.log().contains("stopped by SIGTERM") {
        assert!(Instant::now() < deadline, "{}", h.backend.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut backend = h.disconnect();
    backend.assert_exits_cleanly(Duration::from_secs(10));
    let log = backend.log();
    assert!(log.contains("stopped by SIGTERM"), "{log}");
    assert!(log.contains("checker summary"), "{log}");
    assert!(!backend.socket.exists(), "the socket is left");
    let events: Json = serde_json::from_slice(&std::fs::read(&trace).unwrap())
        .expect("the trace is a whole JSON document");
    assert!(events.as_array().is_some_and(|events| !events.is_empty()));
    let replay = binary().arg("replay").arg(&record).output().unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let summary = String::from_utf8_lossy(&replay.stdout);
    assert!(summary.contains("replay: 1 submissions"), "{summary}");
    assert!(summary.contains("every answer matched"), "{summary}");
}

/// A start with `args` that must be refused, in one line; what it said.
fn refused(args: &[&str]) -> Output {
    let output = binary().args(args).stdin(Stdio::null()).output().unwrap();
    assert!(!output.status.success(), "{args:?} started");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(said.lines().count(), 1, "{args:?}: {said}");
    assert!(said.starts_with("vhost-user-wddm-gpu: error: "), "{said}");
    output
}

#[test]
fn a_refused_start_leaves_no_file() {
    let dir = Dir::new("refused");
    let socket = dir.join("gpu.sock");
    let vram = dir.join("gpu.vram");
    let bad_plan = dir.join("bad.plan");
    std::fs::write(&bad_plan, "hang fence=1\nexplode now\n").unwrap();
    let missing = dir.join("missing/x");
    let device_only = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../qemu-configs/layouts/device-only-vram.toml");
    let socket = socket.to_str().unwrap();
    let vram = vram.to_str().unwrap();
    let missing = missing.to_str().unwrap();
    let cases: Vec<(&str, &str)> = vec![
        ("--socket-path", missing),
        ("--inject-plan", missing),
        ("--inject-plan", bad_plan.to_str().unwrap()),
        ("--inject-plan", dir.0.to_str().unwrap()),
        ("--trace", missing),
        ("--record", missing),
        ("--stats-socket", missing),
        ("--ctl-socket", missing),
        ("--device-vram-path", missing),
    ];
    for (option, value) in cases {
        let mut args = vec!["--vram-path", vram, "--vram-size", "256MiB"];
        if option != "--socket-path" {
            args.extend(["--socket-path", socket]);
        }
        if option == "--device-vram-path" {
            args.extend(["--layout", device_only.to_str().unwrap()]);
        }
        args.extend([option, value]);
        let output = refused(&args);
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains(option), "{args:?}: {said}");
        assert_eq!(dir.listing(), ["bad.plan"], "{args:?}: {said}");
    }
}

#[test]
fn a_bad_fd_is_refused_before_the_vram_file_it_would_name() {
    // stdin is /dev/null: not a socket. The backend would name the VRAM file after its pid.
    let child = binary()
        .args(["--fd", "0", "--vram-size", "1MiB"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let vram = format!("/dev/shm/vhost-user-wddm-gpu-pid-{}.vram", child.id());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--fd 0 is not a Unix socket"));
    assert!(!Path::new(&vram).exists(), "{vram} left behind");
}

#[test]
fn vram_larger_than_the_free_space_is_refused_naming_both() {
    let dir = Dir::new("too-big");
    let vram = format!("/dev/shm/wddm-daemon-{}-too-big.vram", std::process::id());
    let output = refused(&[
        "--socket-path",
        dir.join("gpu.sock").to_str().unwrap(),
        "--vram-path",
        &vram,
        "--vram-size",
        "1024GiB",
    ]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("1024 GiB of VRAM"), "{said}");
    assert!(said.contains("the filesystem of /dev/shm has"), "{said}");
    assert!(said.contains("free"), "{said}");
    assert!(!Path::new(&vram).exists());
    assert!(dir.listing().is_empty());
}

#[test]
fn file_mode_is_applied_to_an_existing_vram_file() {
    let dir = Dir::new("mode");
    let vram = dir.join("gpu.vram");
    std::fs::write(&vram, vec![0u8; 1 << 20]).unwrap();
    std::fs::set_permissions(&vram, std::fs::Permissions::from_mode(0o600)).unwrap();
    let backend = Backend::start(&dir, &["--file-mode", "0660"]);
    let mode = std::fs::metadata(&vram).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "{}", backend.log());
}

#[test]
fn a_layout_syntax_error_is_one_line_with_line_and_column() {
    let dir = Dir::new("toml");
    let layout = dir.join("broken.toml");
    std::fs::write(&layout, "wddm = \"1.3\"\n\n[[segments]]\nsize = = 4\n").unwrap();
    for args in [
        vec!["check-layout", layout.to_str().unwrap()],
        vec![
            "--socket-path",
            "unused.sock",
            "--layout",
            layout.to_str().unwrap(),
        ],
    ] {
        let output = refused(&args);
        assert_eq!(output.status.code(), Some(2));
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("broken.toml: line 4, column 8: "), "{said}");
    }
    assert_eq!(dir.listing(), ["broken.toml"]);
}

/// The VRAM file a backend on `dir/gpu.sock` named, from its log.
fn named_vram(backend: &Backend) -> PathBuf {
    let log = backend.log();
    let word = log
        .split_whitespace()
        .find(|word| word.starts_with("/dev/shm/vhost-user-wddm-gpu-socket-"))
        .unwrap_or_else(|| panic!("no VRAM file named in:\n{log}"));
    PathBuf::from(word)
}

/// A backend on `dir/gpu.sock` whose VRAM file it names itself.
fn start_naming_vram(dir: &Dir, size: &str) -> Backend {
    Backend::spawn(dir, &format!("backend-{size}.log"), &["--vram-size", size])
}

#[test]
fn a_vram_file_the_backend_named_goes_with_it_and_a_killed_ones_is_replaced() {
    let dir = Dir::new("named-vram");
    // Killed: the file stays behind, as a crash would leave it.
    let mut killed = start_naming_vram(&dir, "1MiB");
    let vram = named_vram(&killed);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert!(vram.exists());
    // The next backend on the socket, with another size, replaces it rather than refusing.
    let mut next = start_naming_vram(&dir, "2MiB");
    assert_eq!(named_vram(&next), vram);
    assert!(next
        .log()
        .contains("left by a backend that ended without removing it"));
    assert_eq!(std::fs::metadata(&vram).unwrap().len(), 2 << 20);
    next.signal(libc::SIGTERM);
    assert_eq!(next.exit_code(), Some(0), "{}", next.log());
    assert!(!vram.exists(), "{}", next.log());
}
