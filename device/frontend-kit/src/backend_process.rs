//! The backend under test as a child process: started with its socket (or `--fd`), VRAM file
//! and log in a directory of its own, connected to with bounded waits, killed and cleaned up
//! when dropped (its log printed first if the test is failing).

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vhost::vhost_user::Frontend;

use crate::harness::{RAM_SIZE, VRAM_SIZE};

/// The backend's binary as cargo builds it for the package's tests and benches: those run from
/// `target/<profile>/deps/`, the package's binaries sit one folder up. (`CARGO_BIN_EXE_*` is
/// only given to the package's own targets, not to this crate.)
pub fn backend_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary in target/<profile>/deps");
    profile.join(format!(
        "vhost-user-wddm-gpu{}",
        std::env::consts::EXE_SUFFIX
    ))
}

/// Every wait for the backend gives up after this long.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// The end of a bounded wait that polls every 10 ms.
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Self {
        Self(Instant::now() + timeout)
    }

    /// Panics with `why` once the deadline has passed; otherwise waits before the next poll.
    pub(crate) fn wait_or_panic(&self, why: impl FnOnce() -> String) {
        assert!(Instant::now() < self.0, "{}", why());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (up to [`TIMEOUT`]) until `path` exists while `child` keeps running; panics, with
/// `context()` (the backend's log, say) after the message, if the child exits first or the
/// time runs out.
pub fn wait_for_path(child: &mut Child, path: &Path, context: impl Fn() -> String) {
    let deadline = Deadline::after(TIMEOUT);
    while !path.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the backend exited before creating {}:\n{}",
            path.display(),
            context()
        );
        deadline.wait_or_panic(|| format!("no {}:\n{}", path.display(), context()));
    }
}

/// How to start a backend and size the guest: [`Default`] is what [`crate::harness::Harness::ready`] uses.
#[derive(Clone, Debug)]
pub struct SpawnOptions {
    /// `--vram-size` (a power of two).
    pub vram_size: u64,
    /// Guest RAM at GPA 0 (memfd-backed; pages are only allocated when touched).
    pub ram_size: u64,
    /// A layout file's text: written into the backend's directory and given as `--layout`.
    pub layout: Option<String>,
    /// More backend arguments (after `--layout`).
    pub args: Vec<OsString>,
    /// `RUST_LOG` of the backend.
    pub log_filter: String,
    /// Hand the backend one end of a socketpair with `--fd` (as libvirt does) instead of a
    /// socket path: every message then goes through the backend's relay.
    pub via_fd: bool,
    /// The backend binary ([`backend_binary`] unless a test says otherwise).
    pub binary: PathBuf,
}

impl SpawnOptions {
    /// The defaults with `vram_size` bytes of VRAM.
    pub fn with_vram(vram_size: u64) -> Self {
        Self {
            vram_size,
            ..Self::default()
        }
    }
}

impl Default for SpawnOptions {
    fn default() -> Self {
        Self {
            vram_size: VRAM_SIZE,
            ram_size: RAM_SIZE,
            layout: None,
            args: Vec::new(),
            log_filter: "debug".to_string(),
            via_fd: false,
            binary: backend_binary(),
        }
    }
}

/// The backend binary running as a child, with its socket, VRAM file and log.
pub struct BackendProcess {
    pub(crate) child: Option<Child>,
    pub(crate) dir: PathBuf,
    pub socket: PathBuf,
    pub vram_path: PathBuf,
    /// The `--vram-size` given.
    pub vram_size: u64,
    pub(crate) log: PathBuf,
    /// With [`SpawnOptions::via_fd`]: the frontend's end of the socketpair, until connected.
    pub(crate) paired: std::sync::Mutex<Option<UnixStream>>,
}

impl BackendProcess {
    /// Starts the backend with `options` (its VRAM size, extra arguments and log filter) and
    /// waits until its socket exists.
    pub fn spawn_with_options(name: &str, options: &SpawnOptions) -> Self {
        let vram_size = options.vram_size;
        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{instance}-{name}", std::process::id());
        let dir = std::env::temp_dir().join(format!("wddm-frontend-{unique}"));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("backend.sock");
        let vram_path = PathBuf::from(format!("/dev/shm/wddm-frontend-test-{unique}.vram"));
        let log = dir.join("backend.log");
        let mut command = Command::new(&options.binary);
        let mut paired = None;
        let mut backend_end = None;
        if options.via_fd {
            let (ours, theirs) = UnixStream::pair().unwrap();
            // SAFETY: F_SETFD on a descriptor this test owns: the child inherits it.
            let inheritable = unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_SETFD, 0) };
            assert_eq!(inheritable, 0);
            command.arg("--fd").arg(theirs.as_raw_fd().to_string());
            paired = Some(ours);
            backend_end = Some(theirs);
        } else {
            command.arg("--socket-path").arg(&socket);
        }
        if let Some(text) = &options.layout {
            let layout = dir.join("layout.toml");
            std::fs::write(&layout, text).unwrap();
            command.arg("--layout").arg(layout);
        }
        let child = command
            .arg("--vram-path")
            .arg(&vram_path)
            .arg("--vram-size")
            .arg(format!("{vram_size:#x}"))
            .args(&options.args)
            .env("RUST_LOG", &options.log_filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // Only the child holds its end now: its hang-up is seen when it exits.
        drop(backend_end);
        let via_fd = paired.is_some();
        let mut process = Self {
            child: Some(child),
            dir,
            socket,
            vram_path,
            vram_size,
            log,
            paired: std::sync::Mutex::new(paired),
        };
        let deadline = Deadline::after(TIMEOUT);
        // With --fd there is no socket to wait for: the backend says when it is ready.
        let ready = |process: &Self| {
            if via_fd {
                process.log().contains("waiting for the frontend")
            } else {
                process.socket.exists()
            }
        };
        while !ready(&process) {
            if let Some(status) = process.try_wait() {
                panic!(
                    "backend exited ({status}) before listening:\n{}",
                    process.log()
                );
            }
            deadline.wait_or_panic(|| {
                format!(
                    "backend never created {}:\n{}",
                    process.socket.display(),
                    process.log()
                )
            });
        }
        process
    }

    /// Connects a frontend, retrying while the listener is not accepting yet. Socket reads and
    /// writes time out, so a backend that stops answering fails the test instead of hanging it.
    pub fn connect(&self) -> Frontend {
        if let Some(stream) = self.paired.lock().unwrap().take() {
            stream.set_read_timeout(Some(TIMEOUT)).unwrap();
            stream.set_write_timeout(Some(TIMEOUT)).unwrap();
            return Frontend::from_stream(stream, 2);
        }
        let deadline = Deadline::after(TIMEOUT);
        let stream = loop {
            match UnixStream::connect(&self.socket) {
                Ok(stream) => break stream,
                Err(error) => deadline.wait_or_panic(|| {
                    format!(
                        "cannot connect to {}: {error}\n{}",
                        self.socket.display(),
                        self.log()
                    )
                }),
            }
        };
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        Frontend::from_stream(stream, 2)
    }

    /// The backend's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The stats socket the backend serves by default: the vhost-user socket path + `.stats`.
    pub fn stats_socket(&self) -> PathBuf {
        let mut path = self.socket.clone().into_os_string();
        path.push(".stats");
        PathBuf::from(path)
    }

    /// The control socket the backend serves by default: the vhost-user socket path + `.ctl`.
    pub fn control_socket(&self) -> PathBuf {
        let mut path = self.socket.clone().into_os_string();
        path.push(".ctl");
        PathBuf::from(path)
    }

    /// `vhost-user-wddm-gpu ctl SOCKET words...` against this backend, as a user runs it.
    pub fn ctl(&self, words: &str) -> Output {
        Command::new(backend_binary())
            .arg("ctl")
            .arg(&self.socket)
            .args(words.split_whitespace())
            .output()
            .expect("run ctl")
    }

    /// [`Self::ctl`], which must succeed: what it printed.
    #[track_caller]
    pub fn ctl_ok(&self, words: &str) -> String {
        let output = self.ctl(words);
        assert!(
            output.status.success(),
            "ctl {words}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("ctl prints text")
    }

    /// `vhost-user-wddm-gpu stats SOCKET` (the table), which must succeed.
    pub fn stats_table(&self) -> String {
        self.stats(&[])
    }

    /// `vhost-user-wddm-gpu stats --json SOCKET`, which must succeed.
    pub fn stats_json(&self) -> String {
        self.stats(&["--json"])
    }

    fn stats(&self, options: &[&str]) -> String {
        let output = Command::new(backend_binary())
            .arg("stats")
            .args(options)
            .arg(&self.socket)
            .output()
            .expect("run stats");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).expect("stats print text")
    }

    /// A `VmRSS`-style field of `/proc/PID/status` (e.g. `RssAnon`), in bytes.
    pub fn status_kib_field(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status.lines().find_map(|line| {
            let value = line.strip_prefix(field)?.strip_prefix(':')?;
            let kib: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kib * 1024)
        })
    }

    /// The exit status if the backend has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }

    /// Whether the backend is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// Waits (bounded) for the backend to exit and returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Deadline::after(timeout);
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            deadline.wait_or_panic(|| {
                format!(
                    "backend still running {timeout:?} after the frontend went away:\n{}",
                    self.log()
                )
            });
        }
    }

    /// Waits (bounded) for the backend to exit, which must be with status 0.
    pub fn assert_exits_cleanly(&mut self, timeout: Duration) {
        let status = self.wait_exit(timeout);
        assert!(
            status.success(),
            "backend exited with {status}:\n{}",
            self.log()
        );
    }

    /// What the backend logged so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- backend log ----\n{}---- end ----", self.log());
        }
        let _ = std::fs::remove_file(&self.vram_path);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
