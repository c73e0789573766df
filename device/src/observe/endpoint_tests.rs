//! Tests of the stats endpoint over real sockets.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::*;
use crate::layout::SegmentLayout;
use crate::observe::stats::{RequestOutcome, Stats};
use crate::testkit::scratch::ScratchDir;

fn stats() -> Arc<Stats> {
    Arc::new(Stats::new(&SegmentLayout::default_for_vram(16 << 20)))
}

/// An echo port that is on (`--bench-echo`) but has no vring worker yet: echo requests are
/// refused until a test gives it one.
fn no_echo() -> Arc<EchoPort> {
    let port = Arc::<EchoPort>::default();
    port.enable();
    port
}

/// A server of these counters and this echo port at `stats` in a scratch directory.
fn serve(name: &str, stats: Arc<Stats>, echo: Arc<EchoPort>) -> (ScratchDir, PathBuf, StatsServer) {
    let dir = ScratchDir::new(name);
    let path = dir.join("stats");
    let server = start(&path, 0o600, stats, echo).unwrap();
    (dir, path, server)
}

/// Sends `request` with descriptors `fds`; returns everything the server wrote.
fn send_with_fds(path: &Path, request: &[u8], fds: &[RawFd]) -> String {
    let stream = UnixStream::connect(path).unwrap();
    stream.send_with_fds(&[request], fds).unwrap();
    let mut answer = String::new();
    (&stream).read_to_string(&mut answer).unwrap();
    answer
}

/// Sends raw bytes, closes the write side, returns everything the server wrote.
fn raw(path: &Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(path).unwrap();
    stream.write_all(bytes).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn answers_every_rendering_and_removes_its_socket() {
    let dir = ScratchDir::new("render");
    let path = dir.join("gpu.sock.stats");
    let stats = stats();
    stats.request(RequestOutcome::Refused);
    let server = start(&path, 0o600, stats.clone(), no_echo()).unwrap();
    assert_eq!(server.path(), path);

    let table = query(&path, "table").unwrap();
    assert!(table.starts_with("uptime "), "{table}");
    assert!(table.contains("control requests 1 answered, 1 refused"));
    let prometheus = query(&path, "prometheus").unwrap();
    assert!(prometheus.contains("wddm_gpu_control_requests_refused_total 1\n"));
    let json: serde_json::Value = serde_json::from_str(&query(&path, "json").unwrap()).unwrap();
    assert_eq!(json["refused_requests"], 1);
    // Values are live.
    stats.request(RequestOutcome::Taken);
    let json: serde_json::Value = serde_json::from_str(&query(&path, "json").unwrap()).unwrap();
    assert_eq!(json["requests"], 2);

    server.shutdown();
    assert!(!path.exists());
    assert!(query(&path, "table").is_err());
    dir.remove();
}

#[test]
fn malformed_requests_get_one_error_line() {
    let (dir, path, _server) = serve("malformed", stats(), no_echo());
    let cases: [(&[u8], &str); 6] = [
        (b"tables\n", "unknown request \"tables\""),
        (b"", "empty request"),
        (b"\n", "empty request"),
        (b"\xff\xfe\n", "not text"),
        (&[b'x'; 1000], "longer than"),
        (b"echo\n", "two eventfds"),
    ];
    for (request, expected) in cases {
        let answer = raw(&path, request);
        assert!(answer.starts_with("error: "), "{request:?}: {answer}");
        assert!(answer.contains(expected), "{request:?}: {answer}");
        assert_eq!(answer.lines().count(), 1, "{answer}");
    }
    let error = query(&path, "bogus").unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("unknown request"), "{error}");
    // Surrounding blanks and a missing newline are accepted.
    assert!(raw(&path, b"  json \r\n").starts_with('{'));
    assert!(raw(&path, b"table").starts_with("uptime"));
    // The server still answers after all that.
    assert!(query(&path, "table").is_ok());
    dir.remove();
}

#[test]
fn a_request_line_sent_in_pieces_is_read_whole() {
    let (dir, path, _server) = serve("pieces", stats(), no_echo());
    let mut stream = UnixStream::connect(&path).unwrap();
    stream.write_all(b"prom").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stream.write_all(b"etheus\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("# HELP"), "{answer}");
    dir.remove();
}

#[test]
fn descriptors_are_refused_except_with_echo() {
    let (dir, path, _server) = serve("fds", stats(), no_echo());
    let event = EventFd::new(EFD_NONBLOCK).unwrap();

    let answer = send_with_fds(&path, b"table\n", &[event.as_raw_fd()]);
    assert!(answer.contains("only echo takes descriptors"), "{answer}");

    // Echo with something other than eventfds.
    let file = std::fs::File::open("/dev/null").unwrap();
    let answer = send_with_fds(&path, b"echo\n", &[file.as_raw_fd(), file.as_raw_fd()]);
    assert!(answer.contains("must be eventfds"), "{answer}");

    // One eventfd only.
    let answer = send_with_fds(&path, b"echo\n", &[event.as_raw_fd()]);
    assert!(answer.contains("got 1 descriptors"), "{answer}");

    // Eventfds the vring worker could block or spin on: blocking ones, or one eventfd twice.
    let blocking = EventFd::new(0).unwrap();
    let other = EventFd::new(EFD_NONBLOCK).unwrap();
    for fds in [
        [blocking.as_raw_fd(), other.as_raw_fd()],
        [other.as_raw_fd(), blocking.as_raw_fd()],
        [event.as_raw_fd(), event.as_raw_fd()],
    ] {
        let answer = send_with_fds(&path, b"echo\n", &fds);
        assert!(
            answer.contains("two different non-blocking eventfds"),
            "{answer}"
        );
    }
    dir.remove();
}

#[test]
fn echo_gets_both_eventfds_and_answers_kicks() {
    let echo = no_echo();
    crate::observe::echo::spawn_test_worker(&echo);
    let (dir, path, _server) = serve("echo", stats(), echo);
    let peer = crate::observe::echo::connect(&path).unwrap();
    for _ in 0..3 {
        peer.kick.write(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match peer.call.read() {
                Ok(count) => {
                    assert!(count >= 1);
                    break;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no call within 5 s");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => panic!("{error}"),
            }
        }
    }
    drop(peer);
    // Other requests are still served.
    assert!(query(&path, "table").is_ok());
    dir.remove();
}

#[test]
fn echo_without_a_vring_worker_is_refused_with_a_reason() {
    let (dir, path, _server) = serve("echo-none", stats(), no_echo());
    let peer = crate::observe::echo::connect(&path).unwrap();
    let mut answer = String::new();
    peer.stream().read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("error: echo: no vring worker"),
        "{answer}"
    );
    dir.remove();
}

#[test]
fn a_silent_client_blocks_neither_others_nor_the_recorder() {
    let stats = stats();
    let (dir, path, _server) = serve("slow", stats.clone(), no_echo());
    // Connected, never sends, never reads.
    let _silent: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    let started = Instant::now();
    stats.request(RequestOutcome::Taken);
    assert!(query(&path, "json").unwrap().contains("\"requests\": 1"));
    assert!(started.elapsed() < Duration::from_secs(2));
    dir.remove();
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_or_foreign_path_refused() {
    let dir = ScratchDir::new("stale");
    let stale = dir.join("stale");
    drop(UnixListener::bind(&stale).unwrap());
    let server = start(&stale, 0o600, stats(), no_echo()).unwrap();
    assert!(query(&stale, "table").is_ok());

    // Served by the running server: refused, and left alone.
    let error = start(&stale, 0o600, stats(), no_echo()).err().unwrap();
    assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
    assert!(query(&stale, "table").is_ok());
    drop(server);
    assert!(!stale.exists());

    let file = dir.join("file");
    std::fs::write(&file, b"keep").unwrap();
    let error = start(&file, 0o600, stats(), no_echo()).err().unwrap();
    assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    dir.remove();
}

#[test]
fn the_default_path_appends_dot_stats() {
    assert_eq!(
        default_path(Path::new("/run/gpu/vhost.sock")),
        PathBuf::from("/run/gpu/vhost.sock.stats")
    );
}

/// A control handler answering `ping`, for the control socket's own behaviour.
struct Ping;

impl ControlHandler for Ping {
    fn handle(&self, request: &str) -> Result<Vec<u8>, String> {
        match request {
            "ping" => Ok(b"pong\n".to_vec()),
            other => Err(format!("unknown request {other:?}")),
        }
    }

    fn requests(&self) -> &'static str {
        "ping or help"
    }
}

fn serve_control(name: &str) -> (ScratchDir, PathBuf, StatsServer) {
    let dir = ScratchDir::new(name);
    let path = dir.join("ctl");
    let server = start_control(&path, Arc::new(Ping)).unwrap();
    (dir, path, server)
}

#[test]
fn the_control_socket_hints_at_its_own_requests() {
    let (dir, path, _server) = serve_control("ctl-hint");
    assert_eq!(raw(&path, b"ping\n"), "pong\n");
    for (request, expected) in [
        (
            &b"\xff\xfe\n"[..],
            "error: the request is not text (send one line: ping or help)\n",
        ),
        (
            &b""[..],
            "error: empty request (send one line: ping or help)\n",
        ),
    ] {
        let answer = raw(&path, request);
        assert_eq!(answer, expected, "{request:?}");
        assert!(
            !answer.contains("prometheus"),
            "the stats socket's hint: {answer}"
        );
    }
    dir.remove();
}

#[test]
fn a_silent_control_client_is_closed_after_the_io_timeout() {
    let (dir, path, _server) = serve_control("ctl-silent");
    let mut silent = UnixStream::connect(&path).unwrap();
    silent
        .set_read_timeout(Some(IO_TIMEOUT + Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    silent.read_to_end(&mut answer).unwrap();
    let waited = started.elapsed();
    assert!(answer.is_empty(), "{answer:?}");
    assert!(
        waited >= IO_TIMEOUT - Duration::from_millis(100)
            && waited < IO_TIMEOUT + Duration::from_secs(3),
        "closed after {waited:?}"
    );
    dir.remove();
}

#[test]
fn the_security_page_states_the_io_timeout() {
    let page = include_str!("../../../docs/security.md");
    let stated = format!("{} s (`IO_TIMEOUT`)", IO_TIMEOUT.as_secs());
    // Once for the stats socket, once for the control socket.
    assert_eq!(
        page.matches(&stated).count(),
        2,
        "docs/security.md must say {stated:?}"
    );
}
