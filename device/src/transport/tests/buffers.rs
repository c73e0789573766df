//! A chain's buffers as the device reads and writes them: a request and a response spread over
//! several buffers, and buffers that are not guest RAM.

use wddm_gpu_abi::ctrl::WddmGpuRespDisplayInfo;

use super::requests::display_info;
use super::rig::{Posted, Rig, RAM, UNTOUCHED};
use crate::transport::queue::CONTROL_QUEUE;

/// Where the split request's pieces and response buffers go.
const REQUEST: u64 = 0x70_0000;
const RESPONSE: u64 = 0x78_0000;
const SPLIT_RESPONSE: u32 = 100;
/// Bytes of a GET_DISPLAY_INFO response.
const ANSWER: usize = size_of::<WddmGpuRespDisplayInfo>();

#[test]
fn a_request_and_its_response_spread_over_several_buffers_read_and_write_as_one() {
    let mut rig = Rig::new("buffers-split", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    // The answer to the same request in one buffer each way, for comparison.
    let whole = ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    let expected = ring.read(whole.response, ANSWER);

    // The request's header in two pieces a page apart, the response in 100 bytes and the rest.
    let request = display_info();
    let (head, tail) = request.split_at(10);
    ring.write(REQUEST, head);
    ring.write(REQUEST + 0x1000, tail);
    ring.write(RESPONSE, &[UNTOUCHED; ANSWER]);
    ring.write(RESPONSE + 0x1000, &[UNTOUCHED; ANSWER + 64]);
    let rest = u32::try_from(ANSWER).unwrap() - SPLIT_RESPONSE;
    let split = ring.post_chain(&[
        (REQUEST, 10, false),
        (REQUEST + 0x1000, u32::try_from(tail.len()).unwrap(), false),
        (RESPONSE, SPLIT_RESPONSE, true),
        (RESPONSE + 0x1000, rest + 64, true),
    ]);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(
        ring.used()[1],
        Posted {
            head: split,
            response: RESPONSE
        }
        .used_entry(ANSWER),
        "the whole response was written"
    );
    let first = ring.read(RESPONSE, usize::try_from(SPLIT_RESPONSE).unwrap());
    let second = ring.read(RESPONSE + 0x1000, usize::try_from(rest).unwrap());
    assert_eq!([first, second].concat(), expected);
    // Nothing past the response.
    assert!(ring
        .read(RESPONSE + 0x1000 + u64::from(rest), 64)
        .iter()
        .all(|&byte| byte == UNTOUCHED));
}

#[test]
fn a_chain_with_a_readable_buffer_outside_ram_is_completed_with_nothing_written() {
    let mut rig = Rig::new("buffers-unreadable", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    ring.write(REQUEST, &display_info());
    ring.write(RESPONSE, &[UNTOUCHED; ANSWER]);
    let answer = u32::try_from(ANSWER).unwrap();
    // A readable buffer running past the end of RAM, after a good one.
    let head = ring.post_chain(&[
        (REQUEST, 24, false),
        (RAM - 8, 16, false),
        (RESPONSE, answer, true),
    ]);
    rig.kick(CONTROL_QUEUE);
    let posted = Posted {
        head,
        response: RESPONSE,
    };
    assert_eq!(ring.used(), [posted.used_entry(0)]);
    assert!(ring.untouched(posted, ANSWER));
    assert_eq!(rig.requests(), (0, 0), "the request reached the GPU");
    assert!(rig.called(CONTROL_QUEUE));
}

#[test]
fn a_chain_with_a_writable_buffer_outside_ram_has_no_room_and_gets_nothing_written() {
    let mut rig = Rig::new("buffers-unwritable", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    ring.write(REQUEST, &display_info());
    ring.write(RESPONSE, &[UNTOUCHED; ANSWER]);
    let answer = u32::try_from(ANSWER).unwrap();
    // The first writable buffer is RAM, the second is not: the response has nowhere whole to
    // go, so none of it is written (the request itself is answered, and counted).
    let head = ring.post_chain(&[
        (REQUEST, 24, false),
        (RESPONSE, answer, true),
        (RAM - 8, 16, true),
    ]);
    rig.kick(CONTROL_QUEUE);
    let posted = Posted {
        head,
        response: RESPONSE,
    };
    assert_eq!(ring.used(), [posted.used_entry(0)]);
    assert!(ring.untouched(posted, ANSWER));
    assert_eq!(rig.requests().0, 1);
}
