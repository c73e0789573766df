//! The recording format: written and read back, through the recorder's writer thread too; and
//! every cut of a file and corrupted fields refused with the entry and field named.

use wddm_gpu_abi::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdDestroyContext, WddmGpuCmdSetRootPageTable,
    WddmGpuCmdSubmitVirtual,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuCmdSubmit};

use super::format::*;
use super::read::{read_header, EntryReader, Place, ReadError};
use super::Recorder;
use crate::engine::Interruption;
use crate::memory::capture::{Captured, CapturedRead, ReadKind, Store};
use crate::testkit::scratch::ScratchDir;

fn header() -> Header {
    Header {
        data: true,
        vram_size: 16 << 20,
        layout: Some("# a layout\n".into()),
    }
}

fn submission() -> Submission {
    Submission {
        at_ns: 1_000,
        queue_wait_ns: 20,
        duration_ns: 300,
        inline: true,
        cmd: WddmGpuCmdSubmit {
            dma_buffer_address: 0x10_0000,
            dma_buffer_size: 64,
            end_offset: 64,
            submission_fence_id: 7,
            ..Default::default()
        },
        runs: vec![
            Run {
                packets: 2,
                end: RunEnd::Deferred,
            },
            Run {
                packets: 1,
                end: RunEnd::Interrupted {
                    by: Interruption::Preempted,
                    checks: 5,
                },
            },
        ],
        outcome: Outcome {
            status: 15,
            packets_completed: 3,
            bytes_transferred: 8192,
            fault_packet_offset: 48,
            fault_address: 0,
            fault_opcode: 0,
        },
        captured: Captured {
            reads: vec![
                CapturedRead {
                    store: Store::Ram,
                    kind: ReadKind::Metadata,
                    address: 0x10_0000,
                    length: 3,
                },
                CapturedRead {
                    store: Store::Vram,
                    kind: ReadKind::Data,
                    address: 0x2000,
                    length: 2,
                },
            ],
            bytes: vec![1, 2, 3, 4, 5],
            data_dropped: 9,
        },
    }
}

fn virtual_submission(start: VirtualStart) -> VirtualSubmission {
    VirtualSubmission {
        at_ns: 5_000,
        duration_ns: 70,
        cmd: WddmGpuCmdSubmitVirtual {
            context_id: 3,
            node_ordinal: 1,
            dma_buffer_address: 0x40_0000,
            dma_buffer_size: 96,
            end_offset: 96,
            submission_fence_id: 70,
            ..Default::default()
        },
        start,
        outcome: Outcome {
            status: 20,
            packets_completed: 1,
            bytes_transferred: 4096,
            fault_packet_offset: 32,
            fault_address: 0x12_3401_0000,
            fault_opcode: 0,
        },
        captured: Captured {
            reads: vec![CapturedRead {
                store: Store::Vram,
                kind: ReadKind::Metadata,
                address: 0x80_0000,
                length: 2,
            }],
            bytes: vec![6, 7],
            data_dropped: 0,
        },
    }
}

/// The entries version 3 added, after [`entries`]' six.
fn virtual_entries() -> Vec<Entry> {
    vec![
        Entry::Context(ContextCommand::Create(WddmGpuCmdCreateContext {
            context_id: 3,
            node_ordinal: 1,
            ..Default::default()
        })),
        Entry::Context(ContextCommand::SetRoot(WddmGpuCmdSetRootPageTable {
            context_id: 3,
            segment_id: 0,
            address: 0x100_0000,
            num_entries: 512,
            ..Default::default()
        })),
        Entry::VirtualSubmission(virtual_submission(VirtualStart::Ran(RunEnd::Interrupted {
            by: Interruption::Reset,
            checks: 4,
        }))),
        Entry::VirtualSubmission(virtual_submission(VirtualStart::NodeFaulted)),
        Entry::VirtualSubmission(virtual_submission(VirtualStart::Stopped(
            Interruption::Preempted,
        ))),
        Entry::VirtualSubmission(virtual_submission(VirtualStart::InjectedPageFault {
            address: 0x432_1000,
            write: true,
        })),
        Entry::EngineReset {
            at_ns: 6_000,
            node: 1,
        },
        Entry::Context(ContextCommand::Destroy(WddmGpuCmdDestroyContext {
            context_id: 3,
            ..Default::default()
        })),
    ]
}

fn entries() -> Vec<Entry> {
    vec![
        Entry::MemoryTable(MemoryTable {
            vram_window: Some(0xe000_0000..0xe100_0000),
            regions: vec![0..0x400_0000, 0x1_0000_0000..0x1_1000_0000],
        }),
        Entry::Submission(submission()),
        Entry::Reset {
            at_ns: 2_000,
            by: ResetBy::Driver,
        },
        Entry::Preempt {
            at_ns: 3_000,
            count: 2,
        },
        Entry::Reset {
            at_ns: 4_000,
            by: ResetBy::Frontend,
        },
        Entry::InjectedFault {
            fence: 9,
            packet: 2,
            status: SubmitStatus::SegmentRange,
        },
    ]
}

fn file(header: &Header, entries: &[Entry]) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_header(header, &mut bytes).unwrap();
    for entry in entries {
        encode_entry(entry, &mut bytes).unwrap();
    }
    bytes
}

/// Reads a whole file: its header and every entry.
fn parse(mut bytes: &[u8]) -> Result<(Header, Vec<Entry>), ReadError> {
    let header = read_header(&mut bytes)?;
    let mut reader = EntryReader::new(bytes);
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry()? {
        entries.push(entry);
    }
    Ok((header, entries))
}

#[test]
fn a_file_reads_back_as_written() {
    let bytes = file(&header(), &entries());
    assert_eq!(&bytes[..8], b"WGPUREC\n");
    assert_eq!(bytes[8..12], VERSION.to_le_bytes());
    assert_eq!(parse(&bytes).unwrap(), (header(), entries()));
    // The virtual node's entries, every start of a virtual submission among them.
    let all = [entries(), virtual_entries()].concat();
    assert_eq!(parse(&file(&header(), &all)).unwrap(), (header(), all));
    // The default layout and a recording without data.
    let plain = Header {
        data: false,
        vram_size: 1 << 30,
        layout: None,
    };
    assert_eq!(parse(&file(&plain, &[])).unwrap(), (plain, Vec::new()));
}

#[test]
fn every_cut_of_a_file_is_an_error_naming_its_place() {
    let all = [entries(), virtual_entries()].concat();
    let bytes = file(&header(), &all);
    let header_len = file(&header(), &[]).len();
    // Cuts at entry boundaries are whole files with fewer entries.
    let mut boundaries = vec![header_len];
    for count in 1..=all.len() {
        boundaries.push(file(&header(), &all[..count]).len());
    }
    for cut in 0..bytes.len() {
        let result = parse(&bytes[..cut]);
        if boundaries.contains(&cut) {
            assert!(result.is_ok(), "cut at {cut}: {result:?}");
            continue;
        }
        match result {
            Err(ReadError::BadMagic) => assert!(cut < 8, "cut at {cut}"),
            Err(ReadError::Truncated { at, field }) => {
                assert_eq!(
                    at == Place::Header,
                    cut < header_len,
                    "cut at {cut}: {field}"
                );
                let message = ReadError::Truncated { at, field }.to_string();
                assert!(message.contains(field), "{message}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

/// The file with one byte changed at `at`.
fn corrupted(at: usize, value: u8) -> Vec<u8> {
    let mut bytes = file(&header(), &entries());
    bytes[at] = value;
    bytes
}

fn field_error(bytes: &[u8]) -> (Place, &'static str) {
    match parse(bytes) {
        Err(ReadError::BadField { at, field, .. }) => (at, field),
        Err(ReadError::Truncated { at, field }) => (at, field),
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_fields_are_refused_by_name() {
    let header_len = file(&header(), &[]).len();
    let table_len = file(&header(), &entries()[..1]).len() - header_len;
    let first = Place::Entry { index: 0, tag: 1 };
    let second = Place::Entry { index: 1, tag: 2 };

    assert!(matches!(
        parse(&corrupted(0, b'X')),
        Err(ReadError::BadMagic)
    ));
    assert!(matches!(
        parse(&corrupted(8, 9)),
        Err(ReadError::Version { found: 9 })
    ));
    assert_eq!(field_error(&corrupted(12, 0x80)), (Place::Header, "flags"));
    // vram_size 16 MiB + 1: not a power of two.
    assert_eq!(field_error(&corrupted(16, 1)), (Place::Header, "vram_size"));
    // A layout length past its cap.
    assert_eq!(
        field_error(&corrupted(27, 0xff)),
        (Place::Header, "layout_len")
    );
    // An unknown tag.
    let tag_error = field_error(&corrupted(header_len, 9));
    assert_eq!(tag_error.1, "tag");
    // A payload length past the cap, and one the file does not hold.
    assert_eq!(
        field_error(&corrupted(header_len + 8, 0xff)).1,
        "payload_len"
    );
    assert_eq!(
        field_error(&corrupted(header_len + 3, 1)),
        (first, "payload")
    );
    // The window flag, then a region start that is not page aligned.
    assert_eq!(
        field_error(&corrupted(header_len + 9, 2)),
        (first, "has_vram_window")
    );
    assert_eq!(
        field_error(&corrupted(header_len + 9 + 17 + 4, 1)),
        (first, "region.start")
    );
    // In the submission: inline not a boolean, a run count of 3, a run end past 3.
    let submission = header_len + table_len + 9;
    assert_eq!(
        field_error(&corrupted(submission + 24, 2)),
        (second, "inline")
    );
    let cmd_len = size_of::<WddmGpuCmdSubmit>();
    let runs = submission + 25 + cmd_len;
    assert_eq!(field_error(&corrupted(runs, 3)), (second, "run_count"));
    assert_eq!(
        field_error(&corrupted(runs + 1 + 4, 7)),
        (second, "run.end")
    );
    // The last run marked deferred.
    assert_eq!(
        field_error(&corrupted(runs + 1 + 9 + 4, 1)),
        (second, "run.end")
    );
    // A read count the entry cannot hold, and a read length that does not add up.
    let reads = runs + 1 + 18 + 30 + 8;
    assert_eq!(
        field_error(&corrupted(reads + 3, 0x10)),
        (second, "read_count")
    );
    assert_eq!(
        field_error(&corrupted(reads + 4, 7)),
        (second, "read.store")
    );
    assert_eq!(
        field_error(&corrupted(reads + 4 + 10, 4)),
        (second, "read bytes")
    );
    // A read running past 64 bits.
    let mut bytes = file(&header(), &entries());
    bytes[reads + 4 + 2..reads + 4 + 10].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(field_error(&bytes), (second, "read.length"));
}

#[test]
fn version_1_files_still_read_and_an_injected_fault_names_a_known_status() {
    // A version 1 file (no injected-fault entries) reads as it always did.
    let mut old = file(&header(), &entries()[..4]);
    old[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(parse(&old).unwrap(), (header(), entries()[..4].to_vec()));
    let mut newer = file(&header(), &[]);
    newer[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
    assert!(matches!(
        parse(&newer),
        Err(ReadError::Version { found }) if found == VERSION + 1
    ));
    // The status field (the entry's last four bytes) past every SubmitStatus.
    let mut bytes = file(&header(), &entries());
    let end = bytes.len();
    bytes[end - 4..].copy_from_slice(&99u32.to_le_bytes());
    assert_eq!(
        field_error(&bytes),
        (Place::Entry { index: 5, tag: 5 }, "status")
    );
}

/// The file of [`entries`] and one more entry, and where that entry's payload starts.
fn with_entry(entry: &Entry) -> (Vec<u8>, usize) {
    let mut bytes = file(&header(), &entries());
    let payload = bytes.len() + 9;
    encode_entry(entry, &mut bytes).unwrap();
    (bytes, payload)
}

#[test]
fn corrupt_fields_of_the_virtual_node_entries_are_refused_by_name() {
    let context = Place::Entry { index: 6, tag: 6 };
    let submission = Place::Entry { index: 6, tag: 7 };
    let (mut bytes, payload) = with_entry(&virtual_entries()[0]);
    bytes[payload] = 3;
    assert_eq!(field_error(&bytes), (context, "command"));

    // at_ns, duration_ns, the command; then start, end, checks, address, write.
    let fields = 16 + size_of::<WddmGpuCmdSubmitVirtual>();
    let ran = Entry::VirtualSubmission(virtual_submission(VirtualStart::Ran(RunEnd::Finished)));
    let (bytes, start) = with_entry(&ran);
    let start = start + fields;
    let corrupt = |at: usize, value: u8| {
        let mut bytes = bytes.clone();
        bytes[at] = value;
        field_error(&bytes)
    };
    assert_eq!(corrupt(start, 4), (submission, "start"));
    // The virtual node defers nothing; an end past 3.
    assert_eq!(corrupt(start + 1, 1), (submission, "end"));
    assert_eq!(corrupt(start + 1, 9), (submission, "end"));
    // An address or a write flag only an injected page fault has.
    assert_eq!(corrupt(start + 6, 1), (submission, "address"));
    assert_eq!(corrupt(start + 14, 1), (submission, "write"));
    assert_eq!(corrupt(start + 14, 2), (submission, "write"));
    // A stopped submission that ended finished; a faulted node with checks.
    assert_eq!(corrupt(start, 2), (submission, "end"));
    let faulted = Entry::VirtualSubmission(virtual_submission(VirtualStart::NodeFaulted));
    let (mut bytes, at) = with_entry(&faulted);
    bytes[at + fields + 2] = 1;
    assert_eq!(field_error(&bytes), (submission, "checks"));
    // Its reads are checked as a paging submission's are: after the start's 15 bytes, the
    // answer's 30, data_dropped and read_count.
    let reads = start + 15 + 30 + 8;
    assert_eq!(corrupt(reads, 2), (submission, "read_count"));
    assert_eq!(corrupt(reads + 4, 2), (submission, "read.store"));
}

#[test]
fn an_entry_with_bytes_after_its_fields_is_refused() {
    let mut bytes = file(&header(), &[]);
    let mut entry = Vec::new();
    encode_entry(&Entry::Preempt { at_ns: 1, count: 1 }, &mut entry).unwrap();
    entry.push(0);
    entry[1..9].copy_from_slice(&13u64.to_le_bytes());
    bytes.extend_from_slice(&entry);
    assert!(matches!(
        parse(&bytes),
        Err(ReadError::Trailing { extra: 1, .. })
    ));
}

#[test]
fn a_recorder_writes_what_it_is_handed_in_order() {
    let dir = ScratchDir::new("recording");
    let path = dir.join("run.wgpurec");
    let recorder = Recorder::create(&path, &header()).unwrap();
    let regions = [0..0x400_0000u64, 0xe000_0000..0xe100_0000];
    let window = Some(0xe000_0000..0xe100_0000);
    // The same table twice: written once, without the VRAM window's region.
    recorder.submission(
        regions.iter().cloned(),
        window.clone(),
        Entry::Submission(submission()),
    );
    recorder.reset(ResetBy::Driver);
    recorder.submission(
        regions.iter().cloned(),
        window.clone(),
        Entry::Submission(submission()),
    );
    recorder.preempt(1);
    recorder.finish().unwrap();
    let (read_header, entries) = parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(read_header, header());
    let names: Vec<&str> = entries.iter().map(Entry::name).collect();
    assert_eq!(
        names,
        [
            "memory table",
            "submission",
            "reset",
            "submission",
            "preempt"
        ]
    );
    assert_eq!(
        entries[0],
        Entry::MemoryTable(MemoryTable {
            vram_window: window,
            regions: Vec::from_iter(std::iter::once(0..0x400_0000)),
        })
    );
    assert_eq!(entries[1], Entry::Submission(submission()));
}
