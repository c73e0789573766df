//! `--record` files (`vhost_user_wddm_gpu::recording_read`) on arbitrary bytes: the header,
//! then the entries until the end of the input or the first error. A recording is a host file
//! that may come from another machine (a bug report), so its reader checks every length, count
//! and address against the format's caps.
//!
//! Checked: every header and entry read encodes again (`recording_format`) and reads back
//! equal, so the reader and the encoder agree on every field; an error after the header names
//! the entry it was reading (its index after the header), and a header error the header.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu::recording_format::{encode_entry, encode_header};
use vhost_user_wddm_gpu::recording_read::{read_header, EntryReader, Place, ReadError};

/// Entries read per input, at most (each input is small; this bounds a run of tiny entries).
const MAX_ENTRIES: u64 = 4096;

/// Where an error says it was.
fn place(error: &ReadError) -> Option<Place> {
    match error {
        ReadError::BadMagic | ReadError::Version { .. } => None,
        ReadError::Truncated { at, .. }
        | ReadError::BadField { at, .. }
        | ReadError::Trailing { at, .. }
        | ReadError::Io { at, .. } => Some(*at),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let header = match read_header(&mut input) {
        Ok(header) => header,
        Err(error) => {
            let at = place(&error);
            assert!(matches!(at, None | Some(Place::Header)), "{error}");
            return;
        }
    };
    let mut again = Vec::new();
    encode_header(&header, &mut again).expect("a header that was read encodes");
    let reread = read_header(&mut again.as_slice()).expect("an encoded header reads");
    assert_eq!(reread, header);

    let mut entries = EntryReader::new(input);
    for index in 0..MAX_ENTRIES {
        assert_eq!(entries.index(), index);
        match entries.next_entry() {
            Ok(None) => break,
            Ok(Some(entry)) => {
                let mut bytes = Vec::new();
                encode_entry(&entry, &mut bytes).expect("an entry that was read encodes");
                let reread = EntryReader::new(bytes.as_slice())
                    .next_entry()
                    .expect("an encoded entry reads")
                    .expect("an encoded entry is there");
                assert_eq!(reread, entry);
            }
            Err(error) => {
                match place(&error) {
                    Some(Place::Entry { index: at, .. }) => assert_eq!(at, index, "{error}"),
                    _ => panic!("an entry's error names no entry: {error}"),
                }
                break;
            }
        }
    }
});
