//! `--fd` in both forms QEMU's backend convention allows: a listening socket, and a connected
//! socket as libvirt passes (one end of a socketpair). The frontend negotiates through it and a
//! hang-up ends the backend cleanly.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::VhostBackend;
use wddm_gpu_frontend_kit::backend_process::SpawnOptions;
use wddm_gpu_frontend_kit::harness::{Harness, DATA, DMA_BUFFER, FRAME_LISTS, PAGE};
use wddm_gpu_frontend_kit::pattern::pattern;
use wddm_gpu_frontend_kit::requests::{frames, segment, submit_command};

/// Lets the child inherit `fd` (Rust opens everything close-on-exec).
fn inheritable(fd: RawFd) {
    // SAFETY: F_SETFD on a descriptor this test owns; no memory is involved.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    assert_eq!(rc, 0);
}

fn spawn_with_fd(fd: RawFd, name: &str) -> Child {
    inheritable(fd);
    let vram = format!("/dev/shm/wddm-fd-test-{}-{name}.vram", std::process::id());
    Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
        .args([
            "--fd",
            &fd.to_string(),
            "--vram-path",
            &vram,
            "--vram-size",
            "16MiB",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn negotiate(frontend: &mut Frontend) {
    frontend.set_owner().unwrap();
    let features = frontend.get_features().unwrap();
    assert_ne!(
        features & (1 << 32),
        0,
        "VERSION_1 offered through the socket"
    );
    frontend.set_features(features).unwrap();
    let protocol = frontend.get_protocol_features().unwrap();
    assert!(protocol.contains(VhostUserProtocolFeatures::CONFIG));
}

fn wait_exit(mut child: Child, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let _ = std::fs::remove_file(format!(
                "/dev/shm/wddm-fd-test-{}-{name}.vram",
                std::process::id()
            ));
            assert!(status.success(), "backend exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("backend did not exit after the frontend hung up");
}

#[test]
fn a_connected_socket_from_a_socketpair_is_served() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = spawn_with_fd(theirs.as_raw_fd(), "pair");
    drop(theirs);
    let mut frontend = Frontend::from_stream(ours, 2);
    negotiate(&mut frontend);
    drop(frontend);
    wait_exit(child, "pair");
}

#[test]
fn a_listening_socket_is_served() {
    let dir = std::env::temp_dir().join(format!("wddm-fd-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let child = spawn_with_fd(listener.as_raw_fd(), "listen");
    drop(listener);
    let mut frontend = Frontend::connect(&path, 2).unwrap();
    negotiate(&mut frontend);
    drop(frontend);
    wait_exit(child, "listen");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_descriptor_that_is_not_a_socket_is_refused() {
    let file = std::fs::File::open("/dev/null").unwrap();
    let child = spawn_with_fd(file.as_raw_fd(), "null");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a Unix socket"));
}

#[test]
fn memory_eventfds_and_requests_pass_through_the_relay_of_a_connected_socket() {
    // Every message of a real session, memory-table fds (guest RAM's memfd, the VRAM file) and
    // the kick and call eventfds among them, goes through the relay; the device then works.
    let options = SpawnOptions {
        via_fd: true,
        ..SpawnOptions::default()
    };
    let mut h = Harness::ready_with_options("fd-relay-session", &options);
    let info = h.capset_info();
    assert_eq!(info.capset_id, wddm_gpu_abi::caps::WDDM_GPU_CAPSET_ID);
    let data = pattern(0xfd, 0x3000);
    h.write_ram(DATA, &data);
    let frame_numbers: Vec<u64> = (0..3).map(|i| DATA / PAGE + i).collect();
    h.write_frame_list(FRAME_LISTS, &frame_numbers);
    let packet = wddm_gpu_abi::build::transfer(
        data.len() as u64,
        frames(FRAME_LISTS, 3, 0),
        segment(1, 0x1000),
    );
    let packet = zerocopy::IntoBytes::as_bytes(&packet);
    h.write_ram(DMA_BUFFER, packet);
    let response = h.submit(&submit_command(
        DMA_BUFFER,
        u32::try_from(packet.len()).unwrap(),
        1,
    ));
    assert_eq!(
        response.bytes_transferred,
        data.len() as u64,
        "{response:?}"
    );
    assert_eq!(h.read_vram(0x1000, data.len()), data);
    assert!(h.backend.log().contains("serving it through a relay"));
}

#[test]
fn a_connected_socket_whose_frontend_leaves_at_once_ends_the_backend() {
    // The connected socket libvirt hands over is the only frontend there will ever be: even a
    // hang-up before any request ends the session (a listening socket would wait for another).
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = spawn_with_fd(theirs.as_raw_fd(), "pair-early");
    drop(theirs);
    drop(ours);
    wait_exit(child, "pair-early");
}

#[test]
fn the_vram_file_the_backend_named_is_removed_at_exit() {
    // libvirt passes only --fd: the backend names the VRAM file after its pid, and a file no
    // one can name again must not outlive it.
    let (ours, theirs) = UnixStream::pair().unwrap();
    inheritable(theirs.as_raw_fd());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vhost-user-wddm-gpu"))
        .args([
            "--fd",
            &theirs.as_raw_fd().to_string(),
            "--vram-size",
            "1MiB",
        ])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(theirs);
    let vram = format!("/dev/shm/vhost-user-wddm-gpu-pid-{}.vram", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::path::Path::new(&vram).exists() {
        assert!(Instant::now() < deadline, "{vram} was never made");
        assert!(child.try_wait().unwrap().is_none(), "the backend exited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut frontend = Frontend::from_stream(ours, 2);
    negotiate(&mut frontend);
    drop(frontend);
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");
    assert!(
        !std::path::Path::new(&vram).exists(),
        "{vram} left behind:\n{log}"
    );
    assert!(log.contains(&format!("removed {vram}")), "{log}");
}
