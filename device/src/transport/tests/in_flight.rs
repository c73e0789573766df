//! Head claims across a ring set up anew: an old claim released late frees nothing of the new
//! ring's.

use std::sync::Arc;

use crate::transport::in_flight::InFlight;

#[test]
fn forget_all_frees_every_head_and_old_claims_release_nothing() {
    let in_flight = Arc::new(InFlight::new(8));
    let old = in_flight.claim(3).expect("a free head");
    assert!(in_flight.claim(3).is_none(), "a held head claimed twice");

    in_flight.forget_all();
    let new = in_flight.claim(3).expect("the head of a ring set up anew");
    drop(old);
    assert!(
        in_flight.claim(3).is_none(),
        "the old ring's claim freed the new ring's head"
    );
    drop(new);
    assert!(in_flight.claim(3).is_some());
    assert!(in_flight.claim(8).is_none(), "a head past the ring");
}
