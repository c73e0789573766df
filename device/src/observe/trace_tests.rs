//! Tests of the trace file: valid JSON at every flush, fields, and packets nested in their
//! submission.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use wddm_gpu_abi::packet::{WDDM_GPU_OP_FILL, WDDM_GPU_OP_TRANSFER};
use wddm_gpu_abi::submit::SubmitStatus;

use super::*;
use crate::engine::record::{Direction, PacketRecord, Traffic};
use crate::observe::stats::SubmissionRecord;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wddm-trace-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("trace.json")
}

/// Parses a trace file, closing the array first when the writer has not (yet).
fn events(path: &std::path::Path) -> Vec<Value> {
    let mut text = std::fs::read_to_string(path).unwrap();
    if !text.trim_end().ends_with(']') {
        text.push(']');
    }
    serde_json::from_str::<Vec<Value>>(&text).unwrap()
}

/// A submission queued 5 µs before it ran 100 µs, with a transfer then a fill inside.
fn run_submission(trace: &Trace, fence: u32) {
    let queued = Instant::now();
    let start = queued + Duration::from_micros(5);
    trace.packet(&PacketRecord {
        opcode: WDDM_GPU_OP_TRANSFER,
        dma_offset: 0x40,
        fence,
        start: start + Duration::from_micros(10),
        duration: Duration::from_micros(30),
        bytes: 8192,
        pages: 0,
        traffic: [
            Some(Traffic {
                segment: 0,
                address: 0x1000,
                length: 8192,
                direction: Direction::Read,
            }),
            Some(Traffic {
                segment: 1,
                address: 0xffff_ffff_ffff_0000,
                length: 8192,
                direction: Direction::Write,
            }),
        ],
        faulted: false,
    });
    trace.packet(&PacketRecord {
        opcode: WDDM_GPU_OP_FILL,
        dma_offset: 0x80,
        fence,
        start: start + Duration::from_micros(50),
        duration: Duration::from_micros(20),
        bytes: 4096,
        pages: 0,
        traffic: [
            None,
            Some(Traffic {
                segment: 1,
                address: 0x2000,
                length: 4096,
                direction: Direction::Write,
            }),
        ],
        faulted: true,
    });
    trace.submission(&SubmissionRecord {
        fence,
        queued,
        start,
        duration: Duration::from_micros(100),
        packets: 1,
        bytes: 8192,
        status: SubmitStatus::SegmentRange,
        inline: false,
    });
}

#[test]
fn a_flushed_trace_parses_even_before_it_is_finished() {
    let path = scratch("unfinished");
    let trace = Trace::create(&path).unwrap();
    // The header alone is valid once closed.
    assert_eq!(events(&path).len(), 2);
    run_submission(&trace, 7);
    // Flushed at the submission (once the writer thread has reached it): readable as a killed
    // backend would leave it.
    trace.sync();
    let events = events(&path);
    assert_eq!(events.len(), 5);
    drop(trace);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.trim_end().ends_with(']'));
    serde_json::from_str::<Vec<Value>>(&text).unwrap();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn packets_nest_in_their_submission_on_the_named_track() {
    let path = scratch("nesting");
    let trace = Trace::create(&path).unwrap();
    run_submission(&trace, 7);
    run_submission(&trace, 8);
    trace.finish().unwrap();
    // Finished: later events are dropped, the file stays valid.
    run_submission(&trace, 9);
    let events = events(&path);
    assert_eq!(events.len(), 2 + 2 * 3);

    let metadata: Vec<&Value> = events.iter().filter(|e| e["ph"] == "M").collect();
    assert_eq!(metadata.len(), 2);
    let thread = metadata
        .iter()
        .find(|e| e["name"] == "thread_name")
        .unwrap();
    assert_eq!(thread["args"]["name"], "GPU engine (node 0)");
    let track = thread["tid"].clone();

    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(complete.iter().all(|e| e["tid"] == track));
    assert!(complete.iter().all(|e| e["pid"] == thread["pid"]));
    let submission = complete
        .iter()
        .find(|e| e["name"] == "submission fence 7")
        .unwrap();
    let args = &submission["args"];
    assert_eq!(args["fence"], 7);
    assert_eq!(args["status"], "segment_range");
    assert_eq!(args["packets"], 1);
    assert_eq!(args["bytes"], 8192);
    assert_eq!(args["inline"], false);
    assert!((args["queue_wait_us"].as_f64().unwrap() - 5.0).abs() < 1e-6);
    let start = submission["ts"].as_f64().unwrap();
    let end = start + submission["dur"].as_f64().unwrap();
    assert!((submission["dur"].as_f64().unwrap() - 100.0).abs() < 1e-6);

    let packets: Vec<&&Value> = complete
        .iter()
        .filter(|e| e["cat"] == "packet" && e["args"]["fence"] == 7)
        .collect();
    assert_eq!(packets.len(), 2);
    for packet in &packets {
        let ts = packet["ts"].as_f64().unwrap();
        let dur = packet["dur"].as_f64().unwrap();
        assert!(
            ts >= start && ts + dur <= end,
            "{packet} not inside {submission}"
        );
    }
    let transfer = packets[0];
    assert_eq!(transfer["name"], "transfer");
    assert_eq!(transfer["args"]["bytes"], 8192);
    assert_eq!(transfer["args"]["pages"], 0);
    assert_eq!(transfer["args"]["dma_offset"], "0x40");
    assert_eq!(transfer["args"]["faulted"], false);
    assert_eq!(transfer["args"]["source"]["segment"], 0);
    assert_eq!(transfer["args"]["source"]["address"], "0x1000");
    assert_eq!(transfer["args"]["destination"]["segment"], 1);
    assert_eq!(
        transfer["args"]["destination"]["address"],
        "0xffffffffffff0000"
    );
    let fill = packets[1];
    assert_eq!(fill["name"], "fill");
    assert_eq!(fill["args"]["faulted"], true);
    assert!(fill["args"].get("source").is_none());
    assert_eq!(fill["args"]["destination"]["length"], 4096);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn an_uncreatable_file_is_an_error() {
    assert!(Trace::create(std::path::Path::new("/proc/wddm-gpu-no-trace.json")).is_err());
}

#[test]
fn the_file_stops_growing_at_its_limit_and_still_closes() {
    let path = scratch("limit");
    let trace = Trace::create(&path).unwrap().with_max_size(2000);
    for fence in 1..=50 {
        run_submission(&trace, fence);
    }
    trace.sync();
    assert!(trace.dropped() > 0, "50 submissions exceed 2000 bytes");
    trace.finish().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    // The limit counts events; the header and the closing bracket come on top.
    assert!(size < 2000 + 400, "{size} bytes");
    let text = std::fs::read_to_string(&path).unwrap();
    let parsed: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(parsed.iter().any(|event| event["cat"] == "packet"));
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn recording_never_waits_for_the_file_and_a_full_queue_drops_with_a_count() {
    let path = scratch("queue");
    let trace = Trace::create(&path).unwrap();
    // Far more records than the queue holds, recorded as fast as the engine could: each call
    // only queues (or drops), so this takes milliseconds whatever the disk does.
    let records = u32::try_from(super::QUEUE_RECORDS).unwrap() * 4;
    let start = Instant::now();
    for fence in 0..records {
        run_submission(&trace, fence);
    }
    let recording = start.elapsed();
    trace.finish().unwrap();
    let written = events(&path).len() as u64 - 2;
    // Every record is either in the file or counted as left out.
    assert_eq!(written + trace.dropped(), 3 * u64::from(records));
    println!(
        "{} records recorded in {recording:?}; {written} written, {} left out",
        3 * records,
        trace.dropped()
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_stalled_file_never_blocks_recording() {
    // The trace goes into a pipe nobody reads: once its buffer is full, every write blocks.
    let dir = std::env::temp_dir().join(format!("wddm-trace-{}-stalled", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("trace.fifo");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    // A reader must exist for the writer's open to return; this one reads nothing yet.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let trace = Trace::create(&fifo).unwrap();
    let start = Instant::now();
    for fence in 0..u32::try_from(super::QUEUE_RECORDS).unwrap() {
        run_submission(&trace, fence);
    }
    let recording = start.elapsed();
    // The engine's side went on: the records that found the queue full were counted.
    assert!(
        trace.dropped() > 0,
        "nothing dropped although the file stalls"
    );
    assert!(
        recording < Duration::from_secs(5),
        "recording waited for the file: {recording:?}"
    );
    // Unstall the pipe so the writer thread can finish.
    let drain = std::thread::spawn(move || {
        let mut reader = reader;
        let mut sink = Vec::new();
        loop {
            match std::io::Read::read_to_end(&mut reader, &mut sink) {
                Ok(_) => break,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => panic!("{error}"),
            }
        }
    });
    trace.finish().unwrap();
    drain.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn injections_and_checker_warnings_each_have_their_category() {
    let path = scratch("marks");
    let trace = Trace::create(&path).unwrap();
    let at = Instant::now();
    trace.mark(Mark {
        at,
        name: "hang",
        fence: Some(7),
        source: MarkSource::Injection { id: 3 },
    });
    trace.mark(Mark {
        at,
        name: "dummy-page-access",
        fence: Some(8),
        source: MarkSource::Checker {
            packet_offset: Some(0x40),
        },
    });
    trace.mark(Mark {
        at,
        name: "no-status-page",
        fence: Some(9),
        source: MarkSource::Checker {
            packet_offset: None,
        },
    });
    trace.finish().unwrap();
    let instants: Vec<Value> = events(&path)
        .into_iter()
        .filter(|e| e["ph"] == "i")
        .map(|e| serde_json::json!({"name": e["name"], "cat": e["cat"], "args": e["args"]}))
        .collect();
    assert_eq!(
        instants,
        [
            serde_json::json!({"name": "inject hang", "cat": "injection",
                "args": {"injection": 3, "fence": 7}}),
            serde_json::json!({"name": "check dummy-page-access", "cat": "checker",
                "args": {"fence": 8, "packet_offset": 0x40}}),
            serde_json::json!({"name": "check no-status-page", "cat": "checker",
                "args": {"fence": 9}}),
        ]
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
