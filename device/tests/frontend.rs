//! The real backend binary driven over a real vhost-user socket by a frontend playing QEMU's
//! part (see `harness`): handshake, the capset and its VRAM BAR locator as the memory table
//! changes, paging submissions moving real bytes between the VRAM file and guest RAM, hostile
//! requests, and a clean exit when the frontend goes away.

use std::time::Duration;

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::VhostBackend;
use wddm_gpu_abi::build::transfer;
use wddm_gpu_abi::caps::{
    WDDM_GPU_BAR_MODE_IVSHMEM, WDDM_GPU_BAR_STATE_KNOWN, WDDM_GPU_BAR_STATE_NOT_MAPPED,
    WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION, WDDM_GPU_CAPS_MAGIC, WDDM_GPU_NO_BAR_OFFSET,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapsetInfo, WddmGpuRespCapsetInfo, VIRTIO_GPU_CMD_GET_CAPSET_INFO,
    VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_ERR_UNSPEC,
    VIRTIO_GPU_RESP_OK_CAPSET_INFO, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::features::{
    VIRTIO_F_ANY_LAYOUT, VIRTIO_F_NOTIFY_ON_EMPTY, VIRTIO_F_RING_RESET, VIRTIO_F_VERSION_1,
    VIRTIO_GPU_F_CONTEXT_INIT, VIRTIO_GPU_F_EDID, VIRTIO_GPU_F_RESOURCE_BLOB, VIRTIO_GPU_F_VIRGL,
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use wddm_gpu_abi::submit::{SubmitStatus, WddmGpuRespSubmit};
use wddm_gpu_frontend_kit::{
    harness::{
        Harness, Reply, AVAIL_RING, BUFFER_SIZE, DATA, DESC_TABLE, DMA_BUFFER, FRAME_LISTS,
        INDIRECT_TABLE, PAGE, PAGE_USIZE, QUEUE_SIZE, RAM_SIZE, REQUEST, RESPONSE, RESPONSE_FILL,
        VRAM_GPA, VRAM_SIZE,
    },
    pattern::pattern,
    requests::{frames, segment, status, submit_command},
    split_ring::{Descriptor, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE},
};
use zerocopy::IntoBytes;

// The device's feature bits are the ABI crate's (checked against virtio-bindings there);
// vhost-user's own bit is not a device feature.
const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;

const HDR_SIZE: usize = std::mem::size_of::<WddmGpuCtrlHdr>();

fn bit(n: u32) -> u64 {
    1 << n
}

/// Checks a completion that ended with `expected` on the first packet, having done nothing.
fn assert_faulted_at_first_packet(response: &WddmGpuRespSubmit, expected: SubmitStatus) {
    assert_eq!(response.hdr.type_, WDDM_GPU_RESP_SUBMIT);
    assert_eq!(status(response), Some(expected), "{response:?}");
    assert_eq!(response.packets_completed, 0, "{response:?}");
    assert_eq!(response.bytes_transferred, 0, "{response:?}");
    assert_eq!(response.fault_packet_offset, 0, "{response:?}");
}

/// The device still serves: GET_CAPSET_INFO is answered and a transfer works.
fn assert_still_serving_and_transferring(h: &mut Harness) {
    h.assert_still_serving();
    assert_valid_transfer_works(h);
}

/// An ERR_UNSPEC answer that is only a header.
#[track_caller]
fn assert_bare_err_unspec(reply: &Reply, what: &str) {
    assert_eq!(reply.used.len as usize, HDR_SIZE, "{what}");
    assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_ERR_UNSPEC, "{what}");
}

/// A small VRAM→frame transfer that must succeed: the "a valid request still works" check.
fn assert_valid_transfer_works(h: &mut Harness) {
    let data = pattern(0x5eed, 300);
    h.write_vram(0x40_0000, &data);
    let frame = DATA / PAGE + 200;
    h.write_ram(frame * PAGE, &[0u8; PAGE_USIZE]);
    h.write_frame_list(FRAME_LISTS + 0x8000, &[frame]);
    let response = h.submit_packets(
        &[transfer(
            data.len() as u64,
            segment(1, 0x40_0000),
            frames(FRAME_LISTS + 0x8000, 1, 0x10),
        )],
        777,
    );
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.submission_fence_id, 777);
    assert_eq!(h.read_ram(frame * PAGE + 0x10, data.len()), data);
}

#[test]
fn handshake_offers_qemu_gpu_features_protocol_features_and_one_capset() {
    let mut h = Harness::spawn("handshake");
    let negotiated = h.negotiate();
    let features = negotiated.features;
    for (name, n) in [
        ("VERSION_1", VIRTIO_F_VERSION_1),
        ("EDID", VIRTIO_GPU_F_EDID),
        ("RING_RESET", VIRTIO_F_RING_RESET),
        ("EVENT_IDX", VIRTIO_RING_F_EVENT_IDX),
        ("INDIRECT_DESC", VIRTIO_RING_F_INDIRECT_DESC),
        ("NOTIFY_ON_EMPTY", VIRTIO_F_NOTIFY_ON_EMPTY),
        ("ANY_LAYOUT", VIRTIO_F_ANY_LAYOUT),
        ("PROTOCOL_FEATURES", VHOST_USER_F_PROTOCOL_FEATURES),
    ] {
        assert_ne!(features & bit(n), 0, "{name} not offered in {features:#x}");
    }
    for (name, n) in [
        ("VIRGL", VIRTIO_GPU_F_VIRGL),
        ("RESOURCE_BLOB", VIRTIO_GPU_F_RESOURCE_BLOB),
        ("CONTEXT_INIT", VIRTIO_GPU_F_CONTEXT_INIT),
    ] {
        assert_eq!(features & bit(n), 0, "{name} offered in {features:#x}");
    }

    let protocol = negotiated.protocol_features;
    for (name, feature) in [
        ("CONFIG", VhostUserProtocolFeatures::CONFIG),
        ("REPLY_ACK", VhostUserProtocolFeatures::REPLY_ACK),
        (
            "CONFIGURE_MEM_SLOTS",
            VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS,
        ),
    ] {
        assert!(protocol.contains(feature), "{name} not in {protocol:?}");
    }

    // struct virtio_gpu_config: events_read, events_clear, num_scanouts, num_capsets.
    let num_capsets = u32::from_le_bytes(negotiated.config[12..16].try_into().unwrap());
    assert_eq!(num_capsets, 1, "config {:02x?}", negotiated.config);
}

#[test]
fn acking_a_feature_that_was_not_offered_is_refused() {
    let mut h = Harness::spawn("unoffered");
    let features = h.negotiate().features;
    // REPLY_ACK carries the refusal back to the frontend.
    assert!(h
        .frontend
        .set_features(features | bit(VIRTIO_GPU_F_VIRGL))
        .is_err());
}

#[test]
fn capset_info_and_capset_locate_the_vram_bar_at_the_announced_gpa() {
    let mut h = Harness::ready("capset");

    let info: WddmGpuRespCapsetInfo = h.capset_info();
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_CAPSET_INFO);
    assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
    assert_eq!(info.capset_max_version, WDDM_GPU_CAPSET_VERSION);
    assert_eq!(info.capset_max_version, 1);

    let capset = h.capset();
    assert!(capset.blob.len() <= info.capset_max_size as usize);
    let header = capset.header;
    assert_eq!(header.magic, WDDM_GPU_CAPS_MAGIC);
    assert_eq!(header.version, 1);
    let bar = header.vram_bar;
    assert_eq!(bar.mode, WDDM_GPU_BAR_MODE_IVSHMEM);
    assert_eq!(bar.state, WDDM_GPU_BAR_STATE_KNOWN, "{bar:?}");
    assert_eq!(bar.guest_physical_address, VRAM_GPA);
    assert_eq!(bar.size, VRAM_SIZE);
    assert_ne!(bar.generation, 0);
    assert_eq!((bar.pci_function, bar.bar_index), (1, 2));

    let vram = capset.segment(1);
    assert_ne!(vram.bar_offset, WDDM_GPU_NO_BAR_OFFSET);
    assert_eq!(vram.cpu_translated_address, VRAM_GPA + vram.bar_offset);
    assert_eq!(vram.size, VRAM_SIZE);
    let aperture = capset.segment(2);
    assert_eq!(aperture.bar_offset, WDDM_GPU_NO_BAR_OFFSET);
    assert_eq!(aperture.cpu_translated_address, 0);

    // Only capset index 0 exists.
    let other = h.get_capset_info(1);
    assert_eq!(other.hdr().type_, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER);
    let wrong_version = h.get_capset(WDDM_GPU_CAPSET_ID, 2, BUFFER_SIZE);
    assert_eq!(
        wrong_version.hdr().type_,
        VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER
    );
}

#[test]
fn capset_before_the_bar_is_announced_says_not_mapped() {
    let mut h = Harness::spawn("no-bar");
    h.negotiate();
    h.set_mem_table(None);
    h.setup_control_queue();
    let capset = h.capset();
    let bar = capset.header.vram_bar;
    assert_eq!(bar.state, WDDM_GPU_BAR_STATE_NOT_MAPPED, "{bar:?}");
    assert_eq!(bar.guest_physical_address, 0);
    assert_eq!(bar.generation, 0);
    assert_eq!(capset.segment(1).cpu_translated_address, 0);
}

#[test]
fn bar_region_removal_and_re_add_elsewhere_bump_the_generation() {
    let mut h = Harness::ready("bar-rem-add");
    let first = h.capset().header.vram_bar;
    assert_eq!(first.state, WDDM_GPU_BAR_STATE_KNOWN);
    assert_eq!(first.guest_physical_address, VRAM_GPA);

    // VHOST_USER_REM_MEM_REG: the guest turned memory decode off.
    h.remove_vram_region();
    let removed = h.capset();
    let bar = removed.header.vram_bar;
    assert_eq!(bar.state, WDDM_GPU_BAR_STATE_NOT_MAPPED, "{bar:?}");
    assert_ne!(bar.generation, first.generation, "generation not bumped");
    assert_eq!(removed.segment(1).cpu_translated_address, 0);

    // VHOST_USER_ADD_MEM_REG at a new address: the guest moved the BAR.
    let moved_to = 0xd000_0000;
    h.add_vram_region(moved_to);
    let readded = h.capset();
    let bar2 = readded.header.vram_bar;
    assert_eq!(bar2.state, WDDM_GPU_BAR_STATE_KNOWN, "{bar2:?}");
    assert_eq!(bar2.guest_physical_address, moved_to);
    assert_ne!(bar2.generation, bar.generation, "generation not bumped");
    assert_ne!(bar2.generation, first.generation);
    let vram = readded.segment(1);
    assert_eq!(vram.cpu_translated_address, moved_to + vram.bar_offset);

    // The VRAM window the engine refuses follows the BAR: a frame at the new address is
    // VRAM, one at the old address is simply not memory any more.
    h.write_frame_list(FRAME_LISTS, &[moved_to / PAGE]);
    let response = h.submit_packets(&[transfer(16, segment(1, 0), frames(FRAME_LISTS, 1, 0))], 1);
    assert_faulted_at_first_packet(&response, SubmitStatus::FrameInVram);
    assert_eq!(response.fault_address, moved_to);
    h.write_frame_list(FRAME_LISTS, &[VRAM_GPA / PAGE]);
    let response = h.submit_packets(&[transfer(16, segment(1, 0), frames(FRAME_LISTS, 1, 0))], 2);
    assert_faulted_at_first_packet(&response, SubmitStatus::FrameNotInRam);
    assert_valid_transfer_works(&mut h);
}

#[test]
fn bar_moves_with_a_whole_new_memory_table() {
    let mut h = Harness::ready("bar-set-mem-table");
    let first = h.capset().header.vram_bar;

    h.set_mem_table(None);
    let gone = h.capset().header.vram_bar;
    assert_eq!(gone.state, WDDM_GPU_BAR_STATE_NOT_MAPPED);
    assert_ne!(gone.generation, first.generation);

    // The same table again changes nothing.
    h.set_mem_table(None);
    assert_eq!(h.capset().header.vram_bar.generation, gone.generation);

    h.set_mem_table(Some(0x1_0000_0000));
    let back = h.capset().header.vram_bar;
    assert_eq!(back.state, WDDM_GPU_BAR_STATE_KNOWN);
    assert_eq!(back.guest_physical_address, 0x1_0000_0000);
    assert_ne!(back.generation, gone.generation);
    assert_valid_transfer_works(&mut h);
}

#[test]
fn transfer_vram_to_scattered_frames_and_back_moves_every_byte() {
    let mut h = Harness::ready("transfer");
    const SENTINEL: u8 = 0xee;
    const GUARD: u8 = 0x5a;
    let length: u64 = 5 * PAGE + 0x321;
    let byte_offset: u32 = 0x234;
    // Out of order, with one physically contiguous pair (3, 4) so runs are exercised too.
    let list: Vec<u64> = [17u64, 3, 4, 40, 22, 9]
        .iter()
        .map(|i| DATA / PAGE + i)
        .collect();
    assert!(u64::from(byte_offset) + length <= list.len() as u64 * PAGE);
    for frame in &list {
        h.write_ram(frame * PAGE, &[SENTINEL; PAGE_USIZE]);
    }
    h.write_frame_list(FRAME_LISTS, &list);

    let source: u64 = 0x10_0040;
    let destination: u64 = 0x80_0007;
    let data = pattern(1, usize::try_from(length).unwrap());
    h.write_vram(source, &data);
    h.write_vram(
        destination - 64,
        &vec![GUARD; usize::try_from(length).unwrap() + 128],
    );

    let response = h.submit_packets(
        &[
            transfer(
                length,
                segment(1, source),
                frames(FRAME_LISTS, u32::try_from(list.len()).unwrap(), byte_offset),
            ),
            transfer(
                length,
                frames(FRAME_LISTS, u32::try_from(list.len()).unwrap(), byte_offset),
                segment(1, destination),
            ),
        ],
        0x1234_5678,
    );
    assert_eq!(response.hdr.type_, WDDM_GPU_RESP_SUBMIT);
    assert_eq!(status(&response), Some(SubmitStatus::Ok), "{response:?}");
    assert_eq!(response.submission_fence_id, 0x1234_5678);
    assert_eq!(response.packets_completed, 2);
    assert_eq!(response.bytes_transferred, 2 * length);
    assert_eq!(
        (response.fault_packet_offset, response.fault_address),
        (0, 0)
    );

    // Every byte of every frame: the data where the list puts it, the sentinel elsewhere.
    for (index, frame) in list.iter().enumerate() {
        let actual = h.read_ram(frame * PAGE, PAGE_USIZE);
        for (in_frame, &byte) in actual.iter().enumerate() {
            let position = index as u64 * PAGE + in_frame as u64;
            let expected = position
                .checked_sub(u64::from(byte_offset))
                .filter(|&i| i < length)
                .map_or(SENTINEL, |i| data[usize::try_from(i).unwrap()]);
            assert_eq!(
                byte, expected,
                "frame #{index} ({frame:#x}) byte {in_frame:#x}"
            );
        }
    }
    // Every byte of the VRAM destination, and the guard bytes around it untouched.
    let landed = h.read_vram(destination - 64, usize::try_from(length).unwrap() + 128);
    assert_eq!(&landed[..64], &[GUARD; 64]);
    assert!(
        landed[64..64 + usize::try_from(length).unwrap()] == data[..],
        "VRAM destination differs"
    );
    assert_eq!(
        &landed[64 + usize::try_from(length).unwrap()..],
        &[GUARD; 64]
    );
    assert!(
        h.read_vram(source, usize::try_from(length).unwrap()) == data,
        "source changed"
    );
}

#[test]
fn frame_lists_pointing_into_the_vram_window_are_refused_as_frame_in_vram() {
    let mut h = Harness::ready("frame-in-vram");
    let victim = 3 * PAGE;
    let untouched = pattern(2, PAGE_USIZE);
    h.write_vram(victim, &untouched);
    h.write_vram(0, &pattern(3, PAGE_USIZE));

    // VRAM → a frame inside the BAR: would overwrite VRAM through the back door.
    h.write_frame_list(FRAME_LISTS, &[(VRAM_GPA + victim) / PAGE]);
    let response = h.submit_packets(
        &[transfer(0x100, segment(1, 0), frames(FRAME_LISTS, 1, 0))],
        10,
    );
    assert_faulted_at_first_packet(&response, SubmitStatus::FrameInVram);
    assert!(
        (VRAM_GPA..VRAM_GPA + VRAM_SIZE).contains(&response.fault_address),
        "{response:?}"
    );
    assert_eq!(h.read_vram(victim, PAGE_USIZE), untouched);

    // A frame inside the BAR as the source.
    let response = h.submit_packets(
        &[transfer(
            0x100,
            frames(FRAME_LISTS, 1, 0),
            segment(1, 0x1000),
        )],
        11,
    );
    assert_faulted_at_first_packet(&response, SubmitStatus::FrameInVram);

    // A good frame followed by a BAR frame: refused as a whole, the good frame untouched.
    let good = DATA / PAGE + 7;
    h.write_ram(good * PAGE, &[0x11; PAGE_USIZE]);
    h.write_frame_list(FRAME_LISTS, &[good, (VRAM_GPA + victim) / PAGE]);
    let response = h.submit_packets(
        &[transfer(2 * PAGE, segment(1, 0), frames(FRAME_LISTS, 2, 0))],
        12,
    );
    assert_faulted_at_first_packet(&response, SubmitStatus::FrameInVram);
    assert_eq!(h.read_ram(good * PAGE, PAGE_USIZE), vec![0x11; PAGE_USIZE]);
    assert_eq!(h.read_vram(victim, PAGE_USIZE), untouched);

    // The frame list itself stored in the BAR.
    let response = h.submit_packets(
        &[transfer(0x100, segment(1, 0), frames(VRAM_GPA, 1, 0))],
        13,
    );
    assert_faulted_at_first_packet(&response, SubmitStatus::BadFrameList);

    assert_still_serving_and_transferring(&mut h);
}

#[test]
fn dma_buffers_outside_guest_ram_are_refused_as_bad_dma_buffer() {
    let mut h = Harness::ready("bad-dma");
    let packet = transfer(16, segment(1, 0), segment(1, 0x1000));
    // A valid packet in VRAM at the BAR start: it must not be executed from there.
    h.write_vram(0, packet.as_bytes());
    let size = u32::try_from(packet.as_bytes().len()).unwrap();
    for (what, address) in [
        ("straddling the end of RAM", RAM_SIZE - 32),
        ("past the end of RAM", RAM_SIZE + PAGE),
        ("in the hole below 4 GiB", 0x8000_0000),
        ("inside the VRAM BAR", VRAM_GPA),
        ("at the top of the address space", u64::MAX - 15),
    ] {
        let response = h.submit(&submit_command(address, size, 20));
        assert_faulted_at_first_packet(&response, SubmitStatus::BadDmaBuffer);
        assert_eq!(response.fault_address, address, "{what}");
        assert_eq!(response.submission_fence_id, 20, "{what}");
        assert!(h.backend.is_running(), "{what}");
    }
    assert_still_serving_and_transferring(&mut h);
}

#[test]
fn truncated_submit_commands_get_err_unspec() {
    let mut h = Harness::ready("truncated");
    let command = submit_command(DMA_BUFFER, 64, 30);
    for length in [0, 10, HDR_SIZE, 40, command.as_bytes().len() - 1] {
        let reply = h.request(&command.as_bytes()[..length], BUFFER_SIZE);
        assert_bare_err_unspec(&reply, &format!("length {length}"));
    }
    assert_still_serving_and_transferring(&mut h);
}

#[test]
fn unknown_command_types_get_err_unspec() {
    let mut h = Harness::ready("unknown");
    // CTX_CREATE, SUBMIT_3D, RESOURCE_CREATE_BLOB, the response type of SUBMIT, garbage.
    for type_ in [0x0200, 0x0207, 0x010c, WDDM_GPU_RESP_SUBMIT, 0xdead_beef] {
        let mut request = vec![0u8; 64];
        request[..HDR_SIZE].copy_from_slice(WddmGpuCtrlHdr::with_type(type_).as_bytes());
        let reply = h.request(&request, BUFFER_SIZE);
        assert_bare_err_unspec(&reply, &format!("type {type_:#x}"));
    }
    assert_still_serving_and_transferring(&mut h);
}

#[test]
fn response_buffers_too_small_for_the_capset_still_complete() {
    let mut h = Harness::ready("small-response");
    let full = u32::try_from(HDR_SIZE + h.capset().blob.len()).unwrap();

    // Exactly enough room: the capset.
    let exact = h.get_capset(WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION, full);
    assert_eq!(exact.used.len, full);
    assert_eq!(
        exact.hdr().type_,
        wddm_gpu_abi::ctrl::VIRTIO_GPU_RESP_OK_CAPSET
    );

    // One byte short, header-sized, less than a header: an error header (cut to the room),
    // never a write past the buffer.
    for room in [full - 1, 32, u32::try_from(HDR_SIZE).unwrap(), 8] {
        let reply = h.get_capset(WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION, room);
        let written = room.min(u32::try_from(HDR_SIZE).unwrap());
        assert_eq!(reply.used.len, written, "room {room}");
        let expected = WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_ERR_UNSPEC);
        assert_eq!(
            reply.bytes,
            expected.as_bytes()[..written as usize],
            "room {room}"
        );
        let after = h.read_ram(RESPONSE + u64::from(written), 64);
        assert_eq!(
            after,
            vec![RESPONSE_FILL; 64],
            "room {room}: wrote past used length"
        );
    }

    // No writable descriptor at all.
    let request = wddm_gpu_abi::ctrl::WddmGpuGetCapset {
        hdr: WddmGpuCtrlHdr::with_type(wddm_gpu_abi::ctrl::VIRTIO_GPU_CMD_GET_CAPSET),
        capset_id: WDDM_GPU_CAPSET_ID,
        capset_version: WDDM_GPU_CAPSET_VERSION,
    };
    let reply = h.request(request.as_bytes(), 0);
    assert_eq!(reply.used.len, 0);

    assert_still_serving_and_transferring(&mut h);
}

#[test]
fn descriptors_outside_guest_memory_complete_with_nothing_written() {
    let mut h = ready_with_request("bad-descriptors");
    let cases: [(&str, Descriptor, Descriptor); 3] = [
        (
            "request past the end of RAM",
            Descriptor::new(RAM_SIZE - 8, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(RESPONSE, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
        (
            "response in unmapped memory",
            Descriptor::new(REQUEST, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(0x8000_0000, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
        (
            "4 GiB request",
            Descriptor::new(0, u32::MAX, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(RESPONSE, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
    ];
    assert_completed_with_nothing_written(&mut h, &cases, |_, _| {});
}

#[test]
fn a_looping_descriptor_chain_completes_and_the_queue_keeps_working() {
    let mut h = ready_with_request("loop");
    // 0 → 1 → 0 → ...: the device must give up after at most the queue size.
    h.write_descriptors(
        DESC_TABLE,
        &[
            Descriptor::new(REQUEST, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(RESPONSE, 64, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    h.publish(0);
    let used = h.expect_used();
    assert_eq!(used.id, 0);
    h.assert_still_serving();
}

#[test]
fn requests_through_an_indirect_descriptor_table_are_answered() {
    let mut h = ready_with_request("indirect");
    h.write_ram(RESPONSE, &[RESPONSE_FILL; 64]);
    // The request split over two readable descriptors (ANY_LAYOUT), then the response.
    h.write_descriptors(
        INDIRECT_TABLE,
        &[
            Descriptor::new(REQUEST, 10, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(REQUEST + 10, 22, VIRTQ_DESC_F_NEXT, 2),
            Descriptor::new(RESPONSE, 64, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    h.write_descriptors(
        DESC_TABLE,
        &[Descriptor::new(
            INDIRECT_TABLE,
            3 * 16,
            VIRTQ_DESC_F_INDIRECT,
            0,
        )],
    );
    h.publish(0);
    let used = h.expect_used();
    assert_eq!(used.id, 0);
    assert_eq!(
        used.len as usize,
        std::mem::size_of::<WddmGpuRespCapsetInfo>()
    );
    let info: WddmGpuRespCapsetInfo =
        zerocopy::FromBytes::read_from_bytes(&h.read_ram(RESPONSE, used.len as usize)[..]).unwrap();
    assert_eq!(info.hdr.type_, VIRTIO_GPU_RESP_OK_CAPSET_INFO);
    assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
}

#[test]
fn many_requests_wrap_the_rings() {
    let mut h = Harness::ready("wrap");
    for round in 0..(3 * u32::from(QUEUE_SIZE) + 7) {
        let info = h.capset_info();
        assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID, "round {round}");
    }
    assert_valid_transfer_works(&mut h);
}

#[test]
fn requests_are_answered_without_event_idx() {
    let mut h = Harness::spawn("no-event-idx");
    let negotiated = h.negotiate();
    h.frontend
        .set_features(negotiated.features & !bit(VIRTIO_RING_F_EVENT_IDX))
        .unwrap();
    h.set_mem_table(Some(VRAM_GPA));
    h.setup_control_queue();
    for _ in 0..5 {
        assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
    }
    assert_valid_transfer_works(&mut h);
}

#[test]
fn control_queue_is_answered_again_after_a_stop_and_restart() {
    // What QEMU 11.1 does on a guest reset or reboot of vhost-user-test-device-pci:
    // GET_VRING_BASE stops the ring (a pause), then the ring is set up anew (a reset).
    let mut h = Harness::ready("restart");
    assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
    h.restart_control_queue();
    assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
    assert_valid_transfer_works(&mut h);
}

#[test]
fn an_out_of_range_head_index_does_not_wedge_the_device_until_restart() {
    let mut h = Harness::ready("bad-head");
    // A head index past the queue size in the available ring.
    h.publish(QUEUE_SIZE + 5);
    let _ = h.wait_used_for(Duration::from_secs(1));
    assert!(h.backend.is_running());
    // Even if the device gives up on the ring, a ring restart (guest reset) must bring it back.
    h.restart_control_queue();
    assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
}

#[test]
fn backend_exits_with_status_zero_when_the_frontend_disconnects() {
    let mut h = Harness::ready("exit");
    assert_valid_transfer_works(&mut h);
    let mut backend = h.disconnect();
    backend.assert_exits_cleanly(Duration::from_secs(10));
}

#[test]
fn a_client_that_leaves_before_any_request_does_not_end_the_backend() {
    let h = Harness::spawn("exit-early");
    let mut backend = h.disconnect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(backend.is_running(), "{}", backend.log());
    // The next client speaks vhost-user: it is the frontend, and its hang-up ends the backend.
    let frontend = backend.connect();
    frontend.get_features().unwrap();
    drop(frontend);
    backend.assert_exits_cleanly(Duration::from_secs(10));
    let log = backend.log();
    assert_eq!(
        log.matches("left before any valid vhost-user request")
            .count(),
        1,
        "{log}"
    );
}

#[test]
fn an_avail_index_far_ahead_is_reported_once_and_never_holds_the_backend() {
    let mut h = Harness::ready("avail-ahead");
    assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
    let ahead = h.avail_idx().wrapping_add(QUEUE_SIZE + 193);
    for _ in 0..20 {
        h.write_avail_idx(ahead);
        std::thread::sleep(Duration::from_millis(5));
    }
    // A worker spinning on the ring would hold the backend's lock: GET_VRING_BASE (answered
    // within the frontend socket's timeout) proves it does not.
    let started = std::time::Instant::now();
    h.stop_device();
    println!("GET_VRING_BASE answered after {:?}", started.elapsed());
    let log = h.backend.log();
    assert_eq!(
        log.matches("available ring refused").count(),
        1,
        "reported once:\n{log}"
    );
    // The guest sets the ring up again: the device serves.
    h.start_device_anew();
    assert_eq!(h.capset_info().capset_id, WDDM_GPU_CAPSET_ID);
    assert_valid_transfer_works(&mut h);
}

#[test]
fn get_vring_base_while_the_ring_is_busy_is_always_answered() {
    // QEMU stops the ring (VM stop, reset, shutdown) whenever it likes, also while the vring
    // worker is taking requests with EVENT_IDX on: the worker must not keep re-checking a ring
    // that was stopped under it.
    let mut h = Harness::ready("busy-stop");
    assert!(h.negotiated.unwrap().features & (1 << 29) != 0, "EVENT_IDX");
    let request = capset_info_request();
    for round in 0..200 {
        let posted: Vec<_> = (0..8).map(|_| h.post(request.as_bytes(), 64)).collect();
        let base = h.stop_device();
        if round % 2 == 0 {
            // A pause: every request is answered after the restart.
            h.resume_device(base);
            for pending in posted {
                let reply = h.wait_reply(pending);
                assert_eq!(
                    reply.bytes.len(),
                    std::mem::size_of::<WddmGpuRespCapsetInfo>()
                );
            }
        } else {
            // A reset: the requests go with the old ring.
            h.start_device_anew();
        }
    }
    h.assert_still_serving();
}

#[test]
fn buffers_in_the_vram_bar_window_are_refused_and_vram_is_untouched() {
    let mut h = ready_with_request("vram-window-buffers");
    // The same request also placed in VRAM, where the guest sees it through the BAR.
    h.write_vram(0x1000, capset_info_request().as_bytes());
    h.write_vram(0x2000, &[0x5a; 64]);
    let cases = [
        (
            "request in the BAR window",
            Descriptor::new(VRAM_GPA + 0x1000, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(RESPONSE, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
        (
            "response in the BAR window",
            Descriptor::new(REQUEST, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(VRAM_GPA + 0x2000, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
        (
            "response straddling the window's start",
            Descriptor::new(REQUEST, 32, VIRTQ_DESC_F_NEXT, 1),
            Descriptor::new(VRAM_GPA - 16, 64, VIRTQ_DESC_F_WRITE, 0),
        ),
    ];
    assert_completed_with_nothing_written(&mut h, &cases, |h, what| {
        assert_eq!(
            h.read_vram(0x2000, 64),
            vec![0x5a; 64],
            "{what}: VRAM written"
        );
    });
    assert!(h.backend.log().contains("in the VRAM BAR window"));
}

#[test]
fn a_head_posted_again_while_held_is_completed_at_once_and_queues_nothing() {
    let mut h = Harness::ready("head-reposted");
    let event = h.post_wait_event();
    h.flush_queue();
    // A hostile guest makes the WAIT_EVENT's head available again and again: each copy must be
    // completed at once with nothing written instead of being queued behind the first.
    for round in 0..2_000u32 {
        let used_before = h.device_used_idx();
        h.publish(event.head);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while h.device_used_idx() == used_before {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the copy was queued, not completed:\n{}",
                h.backend.log()
            );
            std::thread::yield_now();
        }
        let used = h.used_entry(used_before);
        assert_eq!(
            (used.id, used.len),
            (u32::from(event.head), 0),
            "round {round}"
        );
    }
    // The first WAIT_EVENT is still held, and the device serves.
    h.skip_used();
    assert!(!h.is_answered(&event));
    h.assert_still_serving();
    assert!(h
        .backend
        .log()
        .contains("made available again before its answer"));
}

#[test]
fn a_guest_looping_on_bad_requests_gets_rate_limited_log_lines() {
    let mut h = Harness::ready("log-flood");
    let started = std::time::Instant::now();
    let unknown = WddmGpuCtrlHdr::with_type(0x7777);
    for _ in 0..3_000 {
        let reply = h.request(unknown.as_bytes(), 64);
        assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_ERR_UNSPEC);
    }
    let seconds = started.elapsed().as_secs() + 1;
    std::thread::sleep(Duration::from_millis(1100));
    // One more refusal opens a new window, which reports what the last ones suppressed.
    h.request(unknown.as_bytes(), 64);
    let log = h.backend.log();
    let written = log.matches("unsupported control command").count() as u64;
    assert!(
        written <= 20 * (seconds + 2),
        "{written} lines for 3,001 refusals in about {seconds} s"
    );
    assert!(log.contains("guest-caused warning(s) suppressed"), "{log}");
}

/// A backend ready for requests, with a GET_CAPSET_INFO request written at [`REQUEST`].
fn ready_with_request(name: &str) -> Harness {
    let h = Harness::ready(name);
    h.write_ram(REQUEST, capset_info_request().as_bytes());
    h
}

/// GET_CAPSET_INFO for index 0.
fn capset_info_request() -> WddmGpuGetCapsetInfo {
    WddmGpuGetCapsetInfo {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
        capset_index: 0,
        padding: 0,
    }
}

/// Each case's two-descriptor chain (request at [`REQUEST`], response buffer somewhere) must
/// complete with nothing written to [`RESPONSE`]; `check` looks at whatever else must be left
/// alone. The device serves afterwards.
fn assert_completed_with_nothing_written(
    h: &mut Harness,
    cases: &[(&str, Descriptor, Descriptor)],
    check: impl Fn(&Harness, &str),
) {
    for &(what, first, second) in cases {
        h.write_ram(RESPONSE, &[RESPONSE_FILL; 64]);
        h.write_descriptors(DESC_TABLE, &[first, second]);
        h.publish(0);
        let used = h.expect_used();
        assert_eq!((used.id, used.len), (0, 0), "{what}");
        assert_eq!(h.read_ram(RESPONSE, 64), vec![RESPONSE_FILL; 64], "{what}");
        check(h, what);
    }
    h.assert_still_serving();
}

#[test]
fn a_memory_region_past_the_end_of_its_file_is_refused_and_the_session_ends_cleanly() {
    let mut h = Harness::ready("region-past-eof");
    assert_valid_transfer_works(&mut h);
    let mut region = h.ram_region();
    // Twice the memfd's size: a touch of the second half would raise SIGBUS in the backend.
    region.memory_size *= 2;
    let refused = h.frontend.set_mem_table(&[region, h.vram_region(VRAM_GPA)]);
    assert!(
        refused.is_err(),
        "a region past the end of its file was accepted"
    );
    let mut backend = h.disconnect();
    let status = backend.wait_exit(Duration::from_secs(10));
    let log = backend.log();
    assert!(
        status.code().is_some(),
        "killed by a signal ({status}):\n{log}"
    );
    assert!(
        log.contains("memory table refused: region at guest-physical 0x0 maps"),
        "{log}"
    );
}

#[test]
fn a_transfer_onto_the_drivers_own_avail_ring_never_holds_the_backend() {
    let mut h = Harness::ready("dma-onto-avail");
    // The guest points a TRANSFER at its own avail ring's page: 0xff bytes land on the avail
    // index (EVENT_IDX on, as the Linux driver negotiates).
    h.write_vram(0x8000, &[0xff; PAGE_USIZE]);
    h.write_frame_list(FRAME_LISTS, &[AVAIL_RING / PAGE]);
    let packet = transfer(PAGE, segment(1, 0x8000), frames(FRAME_LISTS, 1, 0));
    h.write_ram(DMA_BUFFER, packet.as_bytes());
    let pending = h.post(
        submit_command(
            DMA_BUFFER,
            u32::try_from(packet.as_bytes().len()).unwrap(),
            1,
        )
        .as_bytes(),
        64,
    );
    // Its answer may or may not make it to the used ring; what matters is what follows.
    std::thread::sleep(Duration::from_millis(100));
    h.abandon(pending);
    h.write_avail_idx(0xffff);
    std::thread::sleep(Duration::from_millis(100));
    // QEMU's messages are still answered (GET_VRING_BASE needs the lock a spinning worker
    // would hold), and the guest's reset of the ring brings the device back.
    h.stop_device();
    assert!(h.backend.is_running(), "{}", h.backend.log());
    h.start_device_anew();
    assert_still_serving_and_transferring(&mut h);
}
