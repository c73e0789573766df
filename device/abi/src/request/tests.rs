use zerocopy::IntoBytes;

use super::*;
use crate::display::WddmGpuCursorPos;

#[test]
fn decodes_known_commands_and_refuses_truncated_ones() {
    let info = WddmGpuGetCapsetInfo {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
        capset_index: 3,
        padding: 0,
    };
    let decoded = decode_control(info.as_bytes()).unwrap();
    assert_eq!(decoded.command, Ok(ControlCommand::GetCapsetInfo(3)));
    assert_eq!(
        decode_control(&info.as_bytes()[..30]).unwrap().command,
        Err(DecodeError::Truncated {
            type_: VIRTIO_GPU_CMD_GET_CAPSET_INFO,
            len: 30,
            needed: 32
        })
    );
    let submit = WddmGpuCmdSubmit {
        hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SUBMIT),
        submission_fence_id: 5,
        ..Default::default()
    };
    assert!(matches!(
        decode_control(submit.as_bytes()).unwrap().command,
        Ok(ControlCommand::Submit(s)) if s.submission_fence_id == 5
    ));
    assert!(decode_control(&submit.as_bytes()[..63])
        .unwrap()
        .command
        .is_err());
    assert_eq!(
        decode_control(&[0u8; 10]),
        Err(DecodeError::Truncated {
            type_: 0,
            len: 10,
            needed: 24
        })
    );
    assert_eq!(
        decode_control(WddmGpuCtrlHdr::with_type(0x0200).as_bytes())
            .unwrap()
            .command,
        Ok(ControlCommand::Unknown(0x0200))
    );
}

#[test]
fn the_echo_carries_the_fence_fields_even_when_the_body_is_short() {
    let hdr = WddmGpuCtrlHdr {
        type_: WDDM_GPU_CMD_SUBMIT,
        flags: VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX | 0x80,
        fence_id: 0x1234_5678_9abc,
        ctx_id: 7,
        ring_idx: 2,
        padding: [0; 3],
    };
    let request = decode_control(hdr.as_bytes()).unwrap();
    assert!(request.command.is_err());
    assert!(request.echo.is_fenced());
    let mut response = WddmGpuCtrlHdr::with_type(0x1100).as_bytes().to_vec();
    request.echo.stamp(&mut response);
    let (stamped, _) = WddmGpuCtrlHdr::read_from_prefix(&response[..]).unwrap();
    // Unknown flag bits are not echoed.
    assert_eq!(
        stamped.flags,
        VIRTIO_GPU_FLAG_FENCE | VIRTIO_GPU_FLAG_INFO_RING_IDX
    );
    assert_eq!(
        (
            stamped.type_,
            stamped.fence_id,
            stamped.ctx_id,
            stamped.ring_idx
        ),
        (0x1100, 0x1234_5678_9abc, 7, 2)
    );
    // A response cut shorter than a header is left alone.
    let mut short = [0u8; 4];
    request.echo.stamp(&mut short);
    assert_eq!(short, [0; 4]);
}

#[test]
fn attach_backing_needs_every_entry_it_announces() {
    let command = WddmGpuResourceAttachBacking {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING),
        resource_id: 9,
        nr_entries: 2,
    };
    let entry = WddmGpuMemEntry {
        addr: 0x10_0000,
        length: 0x1000,
        padding: 0,
    };
    let mut bytes = command.as_bytes().to_vec();
    bytes.extend_from_slice(entry.as_bytes());
    assert_eq!(
        decode_control(&bytes).unwrap().command,
        Err(DecodeError::Truncated {
            type_: VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
            len: 48,
            needed: 64
        })
    );
    // Unaligned entries decode as well: the request's bytes start one byte in.
    let mut unaligned = vec![0u8];
    unaligned.extend_from_slice(&bytes);
    unaligned.extend_from_slice(entry.as_bytes());
    assert_eq!(
        decode_control(&unaligned[1..]).unwrap().command,
        Ok(ControlCommand::Display(DisplayCommand::AttachBacking {
            resource_id: 9,
            entries: vec![entry, entry]
        }))
    );
    // A hostile count is refused without allocating for it.
    let hostile = WddmGpuResourceAttachBacking {
        nr_entries: u32::MAX,
        ..command
    };
    assert!(matches!(
        decode_control(hostile.as_bytes()).unwrap().command,
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn cursor_commands_decode_by_type() {
    let update = WddmGpuUpdateCursor {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_UPDATE_CURSOR),
        pos: WddmGpuCursorPos {
            scanout_id: 0,
            x: 10,
            y: 20,
            padding: 0,
        },
        resource_id: 4,
        hot_x: 3,
        hot_y: 4,
        padding: 0,
    };
    assert_eq!(
        decode_cursor(update.as_bytes()),
        Ok(CursorCommand::Update {
            scanout_id: 0,
            x: 10,
            y: 20,
            resource_id: 4,
            hot_x: 3,
            hot_y: 4
        })
    );
    let moved = WddmGpuUpdateCursor {
        hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_MOVE_CURSOR),
        ..update
    };
    assert_eq!(
        decode_cursor(moved.as_bytes()),
        Ok(CursorCommand::Move {
            scanout_id: 0,
            x: 10,
            y: 20
        })
    );
    assert!(decode_cursor(&moved.as_bytes()[..40]).is_err());
    assert_eq!(
        decode_cursor(WddmGpuCtrlHdr::with_type(0x0101).as_bytes()),
        Ok(CursorCommand::Unknown(0x0101))
    );
}
