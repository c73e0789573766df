//! Tests of `stats --watch` against a real stats endpoint.

use std::sync::Arc;

use super::*;
use crate::layout::SegmentLayout;
use crate::observe::echo::EchoPort;
use crate::observe::stats::{Stats, VirtualSubmissionRecord};
use crate::testkit::scratch::ScratchDir;

fn options(terminal: bool) -> WatchOptions {
    WatchOptions {
        interval: Duration::from_millis(20),
        frames: Some(3),
        terminal,
    }
}

fn served(name: &str) -> (ScratchDir, PathBuf, Arc<Stats>, endpoint::StatsServer) {
    let dir = ScratchDir::new(name);
    let path = dir.join("gpu.sock.stats");
    let stats = Arc::new(Stats::new(&SegmentLayout::default_for_vram(16 << 20)));
    let server = endpoint::start(&path, 0o600, stats.clone(), Arc::<EchoPort>::default()).unwrap();
    (dir, path, stats, server)
}

#[test]
fn frames_follow_each_other_off_a_terminal() {
    let (_dir, path, stats, _server) = served("watch-pipe");
    stats.record_virtual_submission(&VirtualSubmissionRecord {
        duration: Duration::from_micros(3),
        packets: 1,
        bytes: 4096,
        status: wddm_gpu_abi::submit::SubmitStatus::Ok,
    });
    let mut out = Vec::new();
    watch(&path, options(false), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("vhost-user-wddm-gpu ").count(), 3, "{text}");
    assert_eq!(text.matches("rates since start").count(), 1, "{text}");
    assert_eq!(text.matches("rates over the last").count(), 2, "{text}");
    assert!(text.contains("1 virtual"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no escape sequences off a terminal: {text:?}"
    );
}

#[test]
fn a_terminal_is_drawn_in_place_and_given_back() {
    let (_dir, path, _stats, _server) = served("watch-tty");
    let mut out = Vec::new();
    watch(&path, options(true), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("\x1b[?1049h\x1b[?25l"), "{text:?}");
    assert_eq!(text.matches("\x1b[H").count(), 3, "{text:?}");
    assert!(text.ends_with("\x1b[?25h\x1b[?1049l"), "{text:?}");
}

#[test]
fn a_backend_that_goes_away_ends_the_watch_and_gives_the_terminal_back() {
    let (dir, path, _stats, server) = served("watch-gone");
    drop(server);
    let mut out = Vec::new();
    let error = watch(&path, options(true), &mut out).unwrap_err();
    assert!(
        matches!(&error, WatchError::Query { source, .. } if source.kind() == io::ErrorKind::NotFound),
        "{error}"
    );
    assert!(error.to_string().contains("gpu.sock.stats"), "{error}");
    let text = String::from_utf8(out).unwrap();
    assert!(text.ends_with("\x1b[?25h\x1b[?1049l"), "{text:?}");

    // Something that is not the stats endpoint.
    let other = dir.join("other");
    let listener = std::os::unix::net::UnixListener::bind(&other).unwrap();
    let answering = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 16];
        let _ = std::io::Read::read(&mut stream, &mut request);
        stream.write_all(b"not json\n").unwrap();
    });
    let error = watch(&other, options(false), Vec::new()).unwrap_err();
    assert!(matches!(error, WatchError::Decode { .. }), "{error}");
    answering.join().unwrap();
}

#[test]
fn a_closed_output_ends_the_watch_quietly() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (_dir, path, _stats, _server) = served("watch-closed");
    let endless = WatchOptions {
        frames: None,
        ..options(false)
    };
    watch(&path, endless, Closed).unwrap();
}
