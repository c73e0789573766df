//! The cursor queue has no responses: its chains are consumed with nothing written.

use wddm_gpu_abi::build::display::move_cursor;
use zerocopy::IntoBytes;

use super::rig::Rig;
use crate::transport::queue::CURSOR_QUEUE;

#[test]
fn a_cursor_chain_is_consumed_with_zero_bytes_written() {
    let mut rig = Rig::new("cursor", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CURSOR_QUEUE);
    let command = move_cursor(0, (10, 20));
    let posted = ring.post(command.as_bytes(), 64);
    rig.kick(CURSOR_QUEUE);
    assert_eq!(ring.used(), [posted.used_entry(0)]);
    assert!(ring.untouched(posted, 64));
    assert!(rig.called(CURSOR_QUEUE));
    assert_eq!(
        rig.requests(),
        (0, 0),
        "a cursor command counted as a control request"
    );
}
