//! A chain's buffers as the device reads and writes them: a request and a response spread over
//! several buffers, and buffers that are not guest RAM.

use wddm_gpu_abi::ctrl::WddmGpuRespDisplayInfo;
use wddm_gpu_abi::request::MAX_REQUEST_SIZE;

use super::requests::display_info;
use super::rig::{Posted, Rig, RAM, UNTOUCHED};
use crate::transport::queue::CONTROL_QUEUE;

/// Where the split request's pieces and response buffers go.
const REQUEST: u64 = 0x70_0000;
const RESPONSE: u64 = 0x78_0000;
/// Where the largest requests go, 320 KiB apart.
const LARGEST: u64 = 0x80_0000;
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
fn a_chain_with_a_buffer_outside_ram_is_completed_with_nothing_written() {
    // A readable buffer running past the end of RAM (after a good one) refuses the chain before
    // the GPU sees the request. A writable one (after a good one) leaves the response nowhere
    // whole to go: the request is answered and counted, and none of the response is written.
    let answer = u32::try_from(ANSWER).unwrap();
    let past_ram = |writable| (RAM - 8, 16, writable);
    for (name, chain, requests_taken) in [
        (
            "buffers-unreadable",
            [
                (REQUEST, 24, false),
                past_ram(false),
                (RESPONSE, answer, true),
            ],
            0,
        ),
        (
            "buffers-unwritable",
            [
                (REQUEST, 24, false),
                (RESPONSE, answer, true),
                past_ram(true),
            ],
            1,
        ),
    ] {
        let mut rig = Rig::new(name, false);
        let mem = rig.memory();
        let mut ring = rig.ring(&mem, CONTROL_QUEUE);
        ring.write(REQUEST, &display_info());
        ring.write(RESPONSE, &[UNTOUCHED; ANSWER]);
        let posted = Posted {
            head: ring.post_chain(&chain),
            response: RESPONSE,
        };
        rig.kick(CONTROL_QUEUE);
        assert_eq!(ring.used(), [posted.used_entry(0)], "{name}");
        assert!(ring.untouched(posted, ANSWER), "{name}");
        assert_eq!(rig.requests().0, requests_taken, "{name}");
        assert!(rig.called(CONTROL_QUEUE), "{name}");
    }
}

/// Requests as long as the device reads them fill a pass's request bytes after about two: one
/// kick still answers them all, a pass after another.
#[test]
fn one_kick_answers_more_of_the_largest_requests_than_one_pass_holds() {
    const CHAINS: u64 = 5;
    let largest = u32::try_from(MAX_REQUEST_SIZE).unwrap();
    let mut rig = Rig::new("buffers-largest", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let mut request = display_info();
    request.resize(MAX_REQUEST_SIZE, 0);
    let heads: Vec<_> = (0..CHAINS)
        .map(|index| {
            let at = LARGEST + index * 0x50000;
            ring.write(at, &request);
            ring.post_chain(&[
                (at, largest, false),
                (RESPONSE + index * 0x1000, 1024, true),
            ])
        })
        .collect();
    rig.kick(CONTROL_QUEUE);
    let answered: Vec<_> = heads
        .iter()
        .map(|&head| Posted { head, response: 0 }.used_entry(ANSWER))
        .collect();
    assert_eq!(ring.used(), answered);
}
