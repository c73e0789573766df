//! Rings and chains the guest broke: each is refused or completed with nothing written, and
//! `handle_event` never fails (that would end the vring worker).

use vm_memory::GuestMemoryMmap;
use wddm_gpu_abi::ctrl::WddmGpuRespDisplayInfo;
use wddm_gpu_abi::status::{WddmGpuRespEvent, WDDM_GPU_EVENT_BAR_CHANGED};

use super::requests::{display_info, post_wait_event};
use super::rig::{Rig, QUEUE_SIZE, VRAM_GPA};
use crate::testkit::guest;
use crate::testkit::scratch::ScratchFile;
use crate::transport::queue::CONTROL_QUEUE;

#[test]
fn an_avail_index_past_the_queue_size_is_refused_until_the_ring_is_set_up_again() {
    // With EVENT_IDX: a refused ring must not be drained again and again.
    let mut rig = Rig::new("broken-avail", true);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let posted = ring.post(&display_info(), 1024);
    ring.set_avail_index(QUEUE_SIZE + 5);
    assert!(rig.try_kick(CONTROL_QUEUE).is_ok());
    assert!(rig.try_kick(CONTROL_QUEUE).is_ok());
    assert!(ring.used().is_empty());
    assert!(ring.untouched(posted, 1024));
    assert!(!rig.called(CONTROL_QUEUE));
    assert_eq!(rig.requests(), (0, 0));

    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let posted = ring.post(&display_info(), 1024);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(
        ring.used(),
        [posted.used_entry(size_of::<WddmGpuRespDisplayInfo>())]
    );
}

#[test]
fn a_head_posted_again_while_held_is_completed_empty_and_counted_refused() {
    let mut rig = Rig::new("head-twice", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let event = post_wait_event(&mut ring);
    rig.kick(CONTROL_QUEUE);
    assert!(ring.used().is_empty());

    ring.repost(event.head);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(ring.used(), [event.used_entry(0)]);
    assert!(ring.untouched(event, size_of::<WddmGpuRespEvent>()));
    assert_eq!(rig.requests(), (2, 1), "the repost was not counted refused");

    // The WAIT_EVENT itself is still posted, and answered when an event comes.
    rig.move_bar(0xd000_0000);
    let used = ring.used();
    assert_eq!(used[1], event.used_entry(size_of::<WddmGpuRespEvent>()));
    let answer: WddmGpuRespEvent = ring.response(event);
    assert_eq!(answer.kind, WDDM_GPU_EVENT_BAR_CHANGED);
}

#[test]
fn a_chain_with_a_buffer_in_the_vram_bar_is_completed_with_nothing_written() {
    let mut rig = Rig::new("vram-chain", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    rig.vram_write(0, &[0x5a; 1024]);
    let posted = ring.post_to(&display_info(), VRAM_GPA, 1024);
    rig.kick(CONTROL_QUEUE);
    assert_eq!(ring.used(), [posted.used_entry(0)]);
    assert!(
        rig.vram(0, 1024).iter().all(|&byte| byte == 0x5a),
        "VRAM written through a descriptor"
    );
    assert_eq!(rig.requests(), (0, 0), "the request reached the GPU");
    assert!(rig.called(CONTROL_QUEUE));
}

#[test]
fn a_memory_table_mapping_past_its_file_is_refused_and_nothing_is_touched_after() {
    let mut rig = Rig::new("past-eof", false);
    let mem = rig.memory();
    let mut ring = rig.ring(&mem, CONTROL_QUEUE);
    let posted = ring.post(&display_info(), 1024);

    // A region of 64 KiB over a file cut to 4 KiB after it was mapped (mmap allows it; touching
    // the rest would raise SIGBUS).
    let file = ScratchFile::new("past-eof-region");
    std::fs::write(file.path(), vec![0u8; 64 << 10]).unwrap();
    let region = guest::file_region(file.path(), 64 << 10, 0x8000_0000);
    std::fs::File::options()
        .write(true)
        .open(file.path())
        .unwrap()
        .set_len(4096)
        .unwrap();
    let table: GuestMemoryMmap = (*rig.memory())
        .insert_region(std::sync::Arc::new(region))
        .unwrap();
    assert!(rig.install(table).is_err(), "the memory table was accepted");

    rig.kick(CONTROL_QUEUE);
    assert!(ring.used().is_empty());
    assert!(ring.untouched(posted, 1024));
    assert_eq!(rig.requests(), (0, 0));
}
