//! DMA buffers in VRAM and in the aperture: executed through the segment, only their window.

use wddm_gpu_abi::build::{fence, fill, map_aperture, transfer};
use wddm_gpu_abi::packet::{WddmGpuPacketFence, WddmGpuPacketFill, WddmGpuPacketTransfer};
use wddm_gpu_abi::submit::SubmitStatus;

use super::hooks::Hooks;
use super::model::{Loc, Model};
use super::unmapped_at;
use crate::engine::Fault;
use crate::testkit::engine_rig::{command, data_frames, status, Rig, PAGE, RAM_SIZE, VRAM_SIZE};
use crate::testkit::packets::{in_vram, packet_bytes, APERTURE_SEGMENT};

/// 16 bytes of unknown opcode: faults if it ever executes.
pub(super) fn poison() -> Vec<u8> {
    let mut p = packet_bytes(fence(0));
    p[0] = 0x55;
    p
}

/// A stream of FILL, TRANSFER and FENCE packets (between poison packets) and the model effect.
fn stream(seed: u32, count: u64) -> (Vec<u8>, Vec<WddmGpuPacketFill>, Vec<WddmGpuPacketTransfer>) {
    let mut bytes = poison();
    let (mut fills, mut transfers) = (Vec::new(), Vec::new());
    for k in 0..count {
        let f = fill(
            seed.wrapping_mul(0x0101_0101)
                .wrapping_add(u32::try_from(k).unwrap() * 0x0102_0304),
            100 + k * 7,
            in_vram(0x1000 * k + k),
        );
        let t = transfer(
            0x800 + k,
            in_vram(0x20_0000 + k * 0x1000),
            in_vram(0x28_0000 + k * 0x1000 + 3),
        );
        bytes.extend(packet_bytes(f));
        bytes.extend(packet_bytes(t));
        bytes.extend(packet_bytes(fence(u32::try_from(k).unwrap())));
        fills.push(f);
        transfers.push(t);
    }
    bytes.extend(poison());
    (bytes, fills, transfers)
}

fn apply_stream(
    model: &mut Model,
    fills: &[WddmGpuPacketFill],
    transfers: &[WddmGpuPacketTransfer],
) -> u64 {
    let mut total = 0;
    for (f, t) in fills.iter().zip(transfers) {
        model.fill(f.destination.address, f.length, f.pattern);
        let (s, d) = (t.source.address, t.destination.address);
        model.copy(t.length, |_, i| Loc::Vram(s + i), |_, i| Loc::Vram(d + i));
        total += f.length + t.length;
    }
    total
}

#[test]
fn a_dma_buffer_in_the_aperture_executes_through_scattered_frames() {
    let mut rig = Rig::new("dma-aperture");
    let mut model = Model::new(&rig, 512);
    let (bytes, fills, transfers) = stream(1, 80);
    let base = 300 * PAGE + 0x7c8;
    let pages = (0x7c8 + bytes.len() as u64).div_ceil(PAGE);
    assert!(pages >= 3, "packets must cross page boundaries");
    let scattered = data_frames(&[700, 12, 513, 99, 250, 251, 1]);
    let list = rig.list(0, &scattered);
    rig.ok(&packet_bytes(map_aperture(
        APERTURE_SEGMENT,
        0,
        300,
        pages,
        list,
        u32::try_from(scattered.len()).unwrap(),
        0,
    )));
    model.map(300, &scattered[..usize::try_from(pages).unwrap()]);
    model.write_aperture(&rig, base, &bytes);
    model.check(&rig);

    let size = u32::try_from(bytes.len()).unwrap();
    let mut hooks = Hooks::default();
    let completion = rig.execute(
        &command(APERTURE_SEGMENT, base, size, 16, size - 16),
        &mut hooks,
    );
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.packets_completed, 3 * 80);
    assert_eq!(
        completion.bytes_transferred,
        apply_stream(&mut model, &fills, &transfers)
    );
    assert_eq!(hooks.fences, (0..80).collect::<Vec<_>>());
    model.check(&rig);

    // Up to the end of the buffer, the trailing poison runs and faults at its offset.
    let completion = rig.execute(&command(APERTURE_SEGMENT, base, size, 16, size), &mut ());
    assert_eq!(
        completion.fault(),
        Some((size - 16, Fault::UnknownOpcode(0x55)))
    );
    assert_eq!(completion.packets_completed, 3 * 80);
    // A buffer running into an unmapped page is refused before any packet.
    let to_next_page = u32::try_from(pages * PAGE - 0x7c8).unwrap() + 1;
    let completion = rig.execute(
        &command(APERTURE_SEGMENT, base, to_next_page, 16, size - 16),
        &mut (),
    );
    assert_eq!(completion.fault(), unmapped_at(16, 300 + pages));
    assert_eq!(completion.packets_completed, 0);
}

#[test]
fn a_dma_buffer_in_vram_executes_and_only_its_window_runs() {
    let mut rig = Rig::new("dma-vram");
    let mut model = Model::new(&rig, 16);
    let (bytes, fills, transfers) = stream(9, 40);
    let base = 0x38_0004;
    rig.vram_write(base, &bytes);
    model.vram[usize::try_from(base).unwrap()..usize::try_from(base).unwrap() + bytes.len()]
        .copy_from_slice(&bytes);
    let size = u32::try_from(bytes.len()).unwrap();
    let completion = rig.execute(&command(1, base, size, 16, size - 16), &mut ());
    assert_eq!(completion.stop, None, "{completion:?}");
    assert_eq!(completion.packets_completed, 3 * 40);
    assert_eq!(
        completion.bytes_transferred,
        apply_stream(&mut model, &fills, &transfers)
    );
    model.check(&rig);
    let completion = rig.execute(&command(1, base, size, 0, size), &mut ());
    assert_eq!(completion.fault(), Some((0, Fault::UnknownOpcode(0x55))));
    let completion = rig.execute(&command(1, VRAM_SIZE - 8, 16, 0, 16), &mut ());
    assert_eq!(status(&completion), Some(SubmitStatus::BadDmaBuffer));
}

#[test]
fn a_packet_is_read_no_further_than_end_offset_and_the_end_of_ram() {
    // A packet's first read brings more than its header, but never a byte past end_offset: a
    // buffer that ends at the last byte of guest RAM runs to its end, and the poison after a
    // short end_offset is neither read into a fault nor run.
    let mut rig = Rig::new("dma-end-of-ram");
    let fill_then_fence = [
        packet_bytes(fill(0x1234_5678, 8, in_vram(0x40))),
        packet_bytes(fence(5)),
    ]
    .concat();
    let fence_then_poison = [packet_bytes(fence(6)), poison()].concat();
    for (bytes, end_offset, packets) in [
        (fill_then_fence.clone(), fill_then_fence.len(), 2),
        (fence_then_poison, size_of::<WddmGpuPacketFence>(), 1),
    ] {
        let size = u32::try_from(bytes.len()).unwrap();
        let at = RAM_SIZE - u64::from(size);
        rig.ram_write(at, &bytes);
        let end_offset = u32::try_from(end_offset).unwrap();
        let completion = rig.execute(&command(0, at, size, 0, end_offset), &mut ());
        assert_eq!(completion.stop, None, "{completion:?}");
        assert_eq!(completion.packets_completed, packets);
    }
    assert_eq!(rig.vram_read(0x40, 8), [0x78, 0x56, 0x34, 0x12].repeat(2));
}
