//! TRANSFER between VRAM, guest frames and device-only VRAM: every byte lands where the
//! endpoints say.

use vm_memory::{GuestAddress, GuestMemoryMmap};
use wddm_gpu_abi::build::transfer;
use wddm_gpu_abi::submit::SubmitStatus;

use crate::testkit::bytes::pattern;
use crate::testkit::engine_rig::{
    command, data_frame, scattered, status, Rig, DATA, DMA, LISTS, PAGE, PAGE_USIZE, RAM_SIZE,
};
use crate::testkit::layouts::DEVICE_ONLY;
use crate::testkit::packets::{frames, in_vram, packet_bytes, seg};

/// Where byte `at` of a frames endpoint lives in guest memory.
fn frame_byte(list: &[u64], at: u64) -> u64 {
    list[(at / PAGE) as usize] * PAGE + at % PAGE
}

#[test]
fn vram_to_scattered_frames_and_back_moves_every_byte() {
    let mut rig = Rig::new("roundtrip");
    let length = (1 << 20) + 123;
    let byte_offset = 0x456;
    let data = pattern(length, 9);
    rig.vram_write(0x1000, &data);
    let list = scattered(258);
    let list_address = rig.list(0, &list);

    let out = transfer(
        length as u64,
        in_vram(0x1000),
        frames(list_address, 258, byte_offset),
    );
    let back = transfer(
        length as u64,
        frames(list_address, 258, byte_offset),
        in_vram(0x20_0000),
    );
    let completion = rig.submit(&[packet_bytes(out), packet_bytes(back)].concat());
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 2);
    assert_eq!(completion.bytes_transferred, 2 * length as u64);
    assert_eq!(rig.vram_read(0x20_0000, length), data);

    // Each guest byte sits where the frame list says.
    for (i, byte) in data.iter().enumerate().step_by(997) {
        let address = frame_byte(&list, u64::from(byte_offset) + i as u64);
        assert_eq!(rig.ram_read(address, 1)[0], *byte, "byte {i}");
    }
}

#[test]
fn contiguous_frames_coalesce_and_frames_to_frames_work() {
    let mut rig = Rig::new("contig");
    let source: Vec<u64> = (0..64).map(data_frame).collect();
    let destination: Vec<u64> = (0..64).map(|i| data_frame(512 + i)).collect();
    let data = pattern(64 * PAGE_USIZE, 3);
    rig.ram_write(DATA, &data);
    let a = rig.list(0, &source);
    let z = rig.list(1, &destination);
    let completion = rig.submit(&packet_bytes(transfer(
        64 * PAGE,
        frames(a, 64, 0),
        frames(z, 64, 0),
    )));
    assert_eq!(completion.stop, None);
    assert_eq!(rig.ram_read(DATA + 512 * PAGE, data.len()), data);
}

#[test]
fn overlapping_vram_moves_have_memmove_semantics() {
    // Small shifts and moves longer than a chunk (1 MiB), both directions.
    for (from, to, len) in [
        (0x1000u64, 0x1800u64, 200_000usize),
        (0x1800, 0x1000, 200_000),
        (0x3, 0x1004, (1 << 20) + 0x8005),
        (0x1004, 0x3, (1 << 20) + 0x8005),
        (0x10, 0x8_0010, (3 << 20) + 5),
    ] {
        let mut rig = Rig::new("overlap");
        let data = pattern(len, 5);
        rig.vram_write(from, &data);
        let completion = rig.submit(&packet_bytes(transfer(
            data.len() as u64,
            in_vram(from),
            in_vram(to),
        )));
        assert_eq!(completion.stop, None);
        assert!(
            rig.vram_read(to, data.len()) == data,
            "{from:#x} -> {to:#x} ({len:#x} bytes)"
        );
    }
}

#[test]
fn zero_length_transfer_completes_without_touching_memory() {
    let mut rig = Rig::new("zero");
    let completion = rig.submit(&packet_bytes(transfer(0, in_vram(0), frames(LISTS, 0, 0))));
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 1);
}

#[test]
fn only_the_submitted_window_of_the_buffer_executes() {
    let mut rig = Rig::new("window");
    let mut skipped = packet_bytes(transfer(16, in_vram(0), in_vram(0x8000)));
    skipped[0] = 0x77; // would fault if executed
    let good = packet_bytes(transfer(16, in_vram(0), in_vram(0x9000)));
    let packets = [skipped.clone(), good].concat();
    rig.ram_write(DMA, &packets);
    let size = u32::try_from(packets.len()).unwrap();
    let start = u32::try_from(skipped.len()).unwrap();
    let completion = rig.execute(&command(0, DMA, size, start, size), &mut ());
    assert_eq!(completion.stop, None);
    assert_eq!(completion.packets_completed, 1);
}

#[test]
fn device_only_vram_segments_take_transfers_like_bar_segments() {
    let mut rig = Rig::with_layout("device-only", DEVICE_ONLY);
    let data = pattern(300_000, 11);
    let list = rig.list(0, &scattered(80));
    rig.ram_write(DATA, &data);
    let contiguous = rig.list(1, &(0..80).map(data_frame).collect::<Vec<_>>());
    let hidden = seg(2, 0x1_0000_0000 + 0x1000);
    let into_hidden = transfer(data.len() as u64, frames(contiguous, 80, 0), hidden);
    let back_out = transfer(data.len() as u64, hidden, frames(list, 80, 0));
    let completion = rig.submit(&[packet_bytes(into_hidden), packet_bytes(back_out)].concat());
    assert_eq!(completion.stop, None);
    let list_frames = scattered(80);
    for (i, byte) in data.iter().enumerate().step_by(911) {
        let address = frame_byte(&list_frames, i as u64);
        assert_eq!(rig.ram_read(address, 1)[0], *byte, "byte {i}");
    }
    // The BAR file was not touched: device-only VRAM is separate storage.
    assert_eq!(rig.vram_read(0x1000, 16), vec![0; 16]);
    let past_end = transfer(
        16,
        seg(2, 0x1_0000_0000 + (2 << 20) - 8),
        frames(list, 80, 0),
    );
    assert_eq!(
        status(&rig.submit(&packet_bytes(past_end))),
        Some(SubmitStatus::SegmentRange)
    );
}

#[test]
fn contiguous_frames_across_two_ram_regions_that_touch_move_a_region_at_a_time() {
    let mut rig = Rig::new("regions");
    // Guest RAM as two regions that meet (QEMU announces sections that touch separately),
    // eight consecutive frames across the line after the third: one run of the list, two slices.
    let half = RAM_SIZE / 2;
    rig.mem = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), usize::try_from(half).unwrap()),
        (GuestAddress(half), usize::try_from(half).unwrap()),
    ])
    .unwrap();
    let first = half / PAGE - 3;
    let list: Vec<u64> = (first..first + 8).collect();
    let list_address = rig.list(0, &list);
    let data = pattern(8 * PAGE_USIZE, 5);
    rig.ram_write(first * PAGE, &data);
    let length = 8 * PAGE - 10;

    rig.ok(&packet_bytes(transfer(
        length,
        frames(list_address, 8, 10),
        in_vram(0),
    )));
    assert!(rig.vram_read(0, data.len() - 10) == data[10..], "into VRAM");

    rig.ram_write(first * PAGE, &vec![0; data.len()]);
    rig.ok(&packet_bytes(transfer(
        length,
        in_vram(0),
        frames(list_address, 8, 10),
    )));
    let mut want = data.clone();
    want[..10].fill(0);
    assert!(
        rig.ram_read(first * PAGE, data.len()) == want,
        "out of VRAM"
    );
}
