//! Byte-exact test vectors: each structure is filled with distinct values and compared with the
//! bytes a C compiler produces for the documented layout (computed by hand from the offsets).

use wddm_gpu_abi::caps::*;
use wddm_gpu_abi::ctrl::*;
use wddm_gpu_abi::packet::*;
use wddm_gpu_abi::segment_flags::*;
use wddm_gpu_abi::status::*;
use wddm_gpu_abi::submit::*;
use zerocopy::{FromBytes, IntoBytes};

fn le32(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}
fn le64(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}
fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn hdr_bytes(type_: u32) -> Vec<u8> {
    cat(&[
        le32(type_),
        le32(0x11),
        le64(0x2233_4455_6677_8899),
        le32(0x0a0b_0c0d),
        vec![7, 0, 0, 0],
    ])
}

fn hdr(type_: u32) -> WddmGpuCtrlHdr {
    WddmGpuCtrlHdr {
        type_,
        flags: 0x11,
        fence_id: 0x2233_4455_6677_8899,
        ctx_id: 0x0a0b_0c0d,
        ring_idx: 7,
        padding: [0; 3],
    }
}

#[test]
fn ctrl_hdr_matches_virtio_spec_layout() {
    let h = hdr(VIRTIO_GPU_CMD_GET_CAPSET);
    assert_eq!(
        h.as_bytes(),
        hdr_bytes(VIRTIO_GPU_CMD_GET_CAPSET).as_slice()
    );
    assert_eq!(WddmGpuCtrlHdr::read_from_bytes(h.as_bytes()).unwrap(), h);
}

#[test]
fn standard_virtio_gpu_structs_match_virtio_bindings_sizes() {
    use std::mem::size_of;

    use virtio_bindings::virtio_gpu as vg;
    assert_eq!(
        size_of::<WddmGpuCtrlHdr>(),
        size_of::<vg::virtio_gpu_ctrl_hdr>()
    );
    assert_eq!(
        size_of::<WddmGpuGetCapsetInfo>(),
        size_of::<vg::virtio_gpu_get_capset_info>()
    );
    assert_eq!(
        size_of::<WddmGpuRespCapsetInfo>(),
        size_of::<vg::virtio_gpu_resp_capset_info>()
    );
    assert_eq!(
        size_of::<WddmGpuGetCapset>(),
        size_of::<vg::virtio_gpu_get_capset>()
    );
    assert_eq!(
        size_of::<WddmGpuRespDisplayInfo>(),
        size_of::<vg::virtio_gpu_resp_display_info>()
    );
    assert_eq!(
        size_of::<WddmGpuConfig>(),
        size_of::<vg::virtio_gpu_config>()
    );
    assert_eq!(
        VIRTIO_GPU_CMD_GET_CAPSET,
        vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_GET_CAPSET
    );
    assert_eq!(
        VIRTIO_GPU_CMD_GET_CAPSET_INFO,
        vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_GET_CAPSET_INFO
    );
    assert_eq!(
        VIRTIO_GPU_RESP_ERR_UNSPEC,
        vg::virtio_gpu_ctrl_type_VIRTIO_GPU_RESP_ERR_UNSPEC
    );
}

#[test]
fn submit_command_vector() {
    let cmd = WddmGpuCmdSubmit {
        hdr: hdr(WDDM_GPU_CMD_SUBMIT),
        dma_buffer_address: 0x0000_0001_2345_6000,
        dma_buffer_segment_id: 2,
        flags: WDDM_GPU_SUBMIT_FLAG_PAGING,
        dma_buffer_size: 0x1000,
        start_offset: 0x40,
        end_offset: 0x80,
        submission_fence_id: 0xdead_beef,
        node_ordinal: 0,
        reserved: 0,
    };
    let expected = cat(&[
        hdr_bytes(0x8001),
        le64(0x0000_0001_2345_6000),
        le32(2),
        le32(1),
        le32(0x1000),
        le32(0x40),
        le32(0x80),
        le32(0xdead_beef),
        le32(0),
        le32(0),
    ]);
    assert_eq!(expected.len(), 64);
    assert_eq!(cmd.as_bytes(), expected.as_slice());
}

#[test]
fn submit_response_vector() {
    let resp = WddmGpuRespSubmit {
        hdr: hdr(WDDM_GPU_RESP_SUBMIT),
        submission_fence_id: 9,
        status: SubmitStatus::FrameInVram as u32,
        packets_completed: 3,
        fault_packet_offset: 0xc0,
        fault_address: 0xf800_0000,
        bytes_transferred: 0x10_0000,
    };
    let expected = cat(&[
        hdr_bytes(0x9001),
        le32(9),
        le32(9),
        le32(3),
        le32(0xc0),
        le64(0xf800_0000),
        le64(0x10_0000),
    ]);
    assert_eq!(expected.len(), 56);
    assert_eq!(resp.as_bytes(), expected.as_slice());
}

#[test]
fn transfer_packet_vector() {
    let packet = WddmGpuPacketTransfer {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_TRANSFER,
            flags: 0,
            size: 64,
        },
        length: 0x10_007b,
        source: WddmGpuEndpoint {
            segment_id: 1,
            frame_count: 0,
            address: 0x10_0000,
            byte_offset: 0,
            reserved: 0,
        },
        destination: WddmGpuEndpoint {
            segment_id: 0,
            frame_count: 258,
            address: 0x3fe0_0000,
            byte_offset: 0x123,
            reserved: 0,
        },
    };
    let expected = cat(&[
        vec![1, 0, 0, 0],
        le32(64),
        le64(0x10_007b),
        le32(1),
        le32(0),
        le64(0x10_0000),
        le32(0),
        le32(0),
        le32(0),
        le32(258),
        le64(0x3fe0_0000),
        le32(0x123),
        le32(0),
    ]);
    assert_eq!(expected.len(), 64);
    assert_eq!(packet.as_bytes(), expected.as_slice());
}

#[test]
fn caps_header_and_segment_vectors() {
    let header = WddmGpuCapsHeader {
        magic: WDDM_GPU_CAPS_MAGIC,
        version: WDDM_GPU_CAPSET_VERSION,
        total_size: 0x100,
        wddm_version: WDDM_GPU_WDDM_1_3,
        segment_count: 2,
        segment_desc_size: 64,
        segments_offset: 96,
        bank_table_offset: 224,
        bank_entry_count: 0,
        paging_buffer_segment_id: 0,
        paging_buffer_size: 0x1_0000,
        paging_buffer_private_data_size: 0,
        max_frame_list_entries: WDDM_GPU_MAX_FRAME_LIST_ENTRIES,
        max_packet_size: WDDM_GPU_MAX_PACKET_SIZE,
        vram_bar: WddmGpuVramBar {
            mode: WDDM_GPU_BAR_MODE_IVSHMEM,
            state: WDDM_GPU_BAR_STATE_KNOWN,
            generation: 3,
            pci_function: 1,
            bar_index: 2,
            reserved: 0,
            guest_physical_address: 0xf000_0000,
            size: 0x1000_0000,
        },
    };
    let expected = cat(&[
        b"WDGC".to_vec(),
        le32(1),
        le32(0x100),
        le32(0x0103),
        le32(2),
        le32(64),
        le32(96),
        le32(224),
        le32(0),
        le32(0),
        le32(0x1_0000),
        le32(0),
        le32(262_144),
        le32(4096),
        le32(1),
        le32(1),
        le32(3),
        le32(1),
        le32(2),
        le32(0),
        le64(0xf000_0000),
        le64(0x1000_0000),
    ]);
    assert_eq!(expected.len(), 96);
    assert_eq!(header.as_bytes(), expected.as_slice());

    let segment = WddmGpuSegmentDesc {
        id: 2,
        flags: (SegmentFlags::APERTURE | SegmentFlags::CACHE_COHERENT).bits(),
        base_address: 0x1_0000_0000,
        size: 0x2000_0000,
        commit_limit: 0x2000_0000,
        bar_offset: WDDM_GPU_NO_BAR_OFFSET,
        cpu_translated_address: 0,
        system_memory_end_address: 0,
        bank_count: 0,
        bank_table_index: 0,
    };
    let expected = cat(&[
        le32(2),
        le32(0x11),
        le64(0x1_0000_0000),
        le64(0x2000_0000),
        le64(0x2000_0000),
        le64(u64::MAX),
        le64(0),
        le64(0),
        le32(0),
        le32(0),
    ]);
    assert_eq!(expected.len(), 64);
    assert_eq!(segment.as_bytes(), expected.as_slice());
}

#[test]
fn segment_flag_values_are_the_documented_bits() {
    let hand_computed: [(&str, u32); 22] = [
        ("Aperture", 0x1),
        ("Agp", 0x2),
        ("CpuVisible", 0x4),
        ("UseBanking", 0x8),
        ("CacheCoherent", 0x10),
        ("PitchAlignment", 0x20),
        ("PopulatedFromSystemMemory", 0x40),
        ("PreservedDuringStandby", 0x80),
        ("PreservedDuringHibernate", 0x100),
        ("PartiallyPreservedDuringHibernate", 0x200),
        ("DirectFlip", 0x400),
        ("Use64KBPages", 0x800),
        ("ReservedSysMem", 0x1000),
        ("SupportsCpuHostAperture", 0x2000),
        ("SupportsCachedCpuHostAperture", 0x4000),
        ("ApplicationTarget", 0x8000),
        ("VprSupported", 0x1_0000),
        ("VprPreservedDuringStandby", 0x2_0000),
        ("EncryptedPagingSupported", 0x4_0000),
        ("LocalBudgetGroup", 0x8_0000),
        ("NonLocalBudgetGroup", 0x10_0000),
        ("PopulatedByReservedDDRByFirmware", 0x20_0000),
    ];
    for (name, value) in hand_computed {
        assert_eq!(
            SegmentFlags::from_member_name(name).map(|f| f.bits()),
            Some(value),
            "{name}"
        );
    }
    assert_eq!(SegmentFlags::all().bits(), !SEGMENT_FLAGS_RESERVED_MASK);
    assert_eq!(
        (SegmentFlags::CPU_VISIBLE | SegmentFlags::DIRECT_FLIP).names(),
        "CpuVisible|DirectFlip"
    );
}

#[test]
fn submit_status_round_trips() {
    for status in SubmitStatus::ALL {
        assert_eq!(SubmitStatus::from_raw(status as u32), Some(status));
    }
    assert_eq!(
        SubmitStatus::from_raw(u32::try_from(SubmitStatus::ALL.len()).unwrap()),
        None
    );
}

#[test]
fn map_aperture_packets_vector() {
    let map = WddmGpuPacketMapAperture {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_MAP_APERTURE,
            flags: 0,
            size: 48,
        },
        segment_id: 2,
        flags: WDDM_GPU_MAP_FLAG_CACHE_COHERENT,
        first_page: 0x10,
        page_count: 3,
        frame_list_address: 0x20_0000,
        frame_count: 8,
        frame_offset: 5,
    };
    let expected = cat(&[
        vec![6, 0, 0, 0],
        le32(48),
        le32(2),
        le32(1),
        le64(0x10),
        le64(3),
        le64(0x20_0000),
        le32(8),
        le32(5),
    ]);
    assert_eq!(map.as_bytes(), expected.as_slice());

    let map2 = WddmGpuPacketMapAperture2 {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_MAP_APERTURE2,
            flags: 0,
            size: 56,
        },
        segment_id: 2,
        flags: 0,
        first_page: 7,
        page_count: 4,
        adl_flags: WDDM_GPU_ADL_FLAG_CONTIGUOUS,
        adl_offset: 1,
        adl_base: 0x1234,
        adl_page_count: 5,
        reserved: 0,
    };
    let expected = cat(&[
        vec![9, 0, 0, 0],
        le32(56),
        le32(2),
        le32(0),
        le64(7),
        le64(4),
        le32(1),
        le32(1),
        le64(0x1234),
        le32(5),
        le32(0),
    ]);
    assert_eq!(map2.as_bytes(), expected.as_slice());

    let unmap = WddmGpuPacketUnmapAperture {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_UNMAP_APERTURE,
            flags: 0,
            size: 40,
        },
        segment_id: 2,
        reserved: 0,
        first_page: 0x10,
        page_count: 3,
        dummy_page: 0x7000,
    };
    let expected = cat(&[
        vec![7, 0, 0, 0],
        le32(40),
        le32(2),
        le32(0),
        le64(0x10),
        le64(3),
        le64(0x7000),
    ]);
    assert_eq!(unmap.as_bytes(), expected.as_slice());
}

#[test]
fn fill_fence_and_access_vectors() {
    let fill = WddmGpuPacketFill {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_FILL,
            flags: 0,
            size: 48,
        },
        pattern: 0xdead_beef,
        reserved: 0,
        length: 0x1000,
        destination: WddmGpuEndpoint {
            segment_id: 1,
            frame_count: 0,
            address: 0x40,
            byte_offset: 0,
            reserved: 0,
        },
    };
    let expected = cat(&[
        vec![2, 0, 0, 0],
        le32(48),
        le32(0xdead_beef),
        le32(0),
        le64(0x1000),
        le32(1),
        le32(0),
        le64(0x40),
        le32(0),
        le32(0),
    ]);
    assert_eq!(fill.as_bytes(), expected.as_slice());
    let fence = WddmGpuPacketFence {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_FENCE,
            flags: 0,
            size: 16,
        },
        fence_id: 77,
        reserved: 0,
    };
    assert_eq!(
        fence.as_bytes(),
        cat(&[vec![8, 0, 0, 0], le32(16), le32(77), le32(0)]).as_slice()
    );
    let access = WddmGpuPacketSegmentAccess {
        header: WddmGpuPacketHeader {
            opcode: WDDM_GPU_OP_READ_PHYSICAL,
            flags: 0,
            size: 24,
        },
        segment_id: 1,
        flags_or_size: 8,
        address: 0x100,
    };
    assert_eq!(
        access.as_bytes(),
        cat(&[vec![4, 0, 0, 0], le32(24), le32(1), le32(8), le64(0x100)]).as_slice()
    );
}

#[test]
fn status_page_layout_leaves_room_for_the_fault_ring() {
    use std::mem::size_of;
    assert_eq!(size_of::<WddmGpuFaultRecord>(), 32);
    assert_eq!(size_of::<WddmGpuStatusPage>(), 96);
    let ring_bytes = WDDM_GPU_FAULT_RING_ENTRIES as usize * size_of::<WddmGpuFaultRecord>();
    assert!(128 + ring_bytes <= WDDM_GPU_STATUS_PAGE_SIZE as usize);
    assert_eq!(WDDM_GPU_STATUS_MAGIC.to_le_bytes(), *b"WDSP");
}

#[test]
fn set_scanout_vram_command_vector() {
    let cmd = WddmGpuCmdSetScanoutVram {
        hdr: hdr(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        scanout_id: 1,
        segment_id: 3,
        address: 0x0123_4567_89ab_c000,
        format: 2,
        width: 1024,
        height: 768,
        pitch: 4096,
    };
    let bytes = cat(&[
        hdr_bytes(WDDM_GPU_CMD_SET_SCANOUT_VRAM),
        le32(1),
        le32(3),
        le64(0x0123_4567_89ab_c000),
        le32(2),
        le32(1024),
        le32(768),
        le32(4096),
    ]);
    assert_eq!(bytes.len(), 56);
    assert_eq!(cmd.as_bytes(), bytes.as_slice());
    assert_eq!(
        WddmGpuCmdSetScanoutVram::read_from_bytes(&bytes).unwrap(),
        cmd
    );
}

#[test]
fn vblank_event_vector() {
    let event = WddmGpuRespEvent {
        hdr: hdr(WDDM_GPU_RESP_EVENT),
        kind: WDDM_GPU_EVENT_VBLANK,
        scanout_id: 2,
        scanout_segment_id: 1,
        vblank_count: 0x1_0000_0007,
        scanout_address: 0x40_0000,
        ..Default::default()
    };
    let bytes = cat(&[
        hdr_bytes(WDDM_GPU_RESP_EVENT),
        le32(5),
        vec![0; 3 * 4 + 8 + 32],
        le32(2),
        le32(1),
        le64(0x1_0000_0007),
        le64(0x40_0000),
        // The page-fault record, the monitored fence and the stale translation: unused here.
        vec![0; 64 + 8 + 8 + 32],
    ]);
    assert_eq!(bytes.len(), 216);
    assert_eq!(event.as_bytes(), bytes.as_slice());
}

#[test]
fn page_fault_event_vector() {
    use wddm_gpu_abi::context::WddmGpuPageFaultRecord;
    use wddm_gpu_abi::gpuva::WddmGpuMmuFault;

    let event = WddmGpuRespEvent {
        hdr: hdr(WDDM_GPU_RESP_EVENT),
        kind: 6,
        page_fault: WddmGpuPageFaultRecord {
            sequence: 3,
            fault: WddmGpuMmuFault {
                virtual_address: 0x12_3401_0008,
                kind: 1,
                page_table_level: 2,
                access: 1,
                reserved: 0,
                entry: 0x8000_0000_0000_1001,
            },
            fence_id: 90,
            flags: 0x9,
            node_ordinal: 1,
            context_id: 3,
            error_code: 0,
            packet_offset: 32,
        },
        ..Default::default()
    };
    let bytes = cat(&[
        hdr_bytes(WDDM_GPU_RESP_EVENT),
        le32(6),
        vec![0; 3 * 4 + 8 + 32 + 4 + 4 + 8 + 8],
        le64(3),
        le64(0x12_3401_0008),
        le32(1),
        le32(2),
        le32(1),
        le32(0),
        le64(0x8000_0000_0000_1001),
        le32(90),
        le32(0x9),
        le32(1),
        le32(3),
        le32(0),
        le32(32),
        vec![0; 8 + 8 + 32],
    ]);
    assert_eq!(bytes.len(), 216);
    assert_eq!(event.as_bytes(), bytes.as_slice());
}

#[test]
fn update_page_table_packet_vector() {
    use wddm_gpu_abi::build::gpuva::{update_page_table_repeat, TableAt};

    let table = TableAt {
        segment: 1,
        address: 0x80_1000,
    };
    let packet = update_page_table_repeat(0, table, 8, 504, 0x20_0001);
    let bytes = cat(&[
        // opcode 10 and no flags, in one little-endian word.
        le32(10),
        le32(56),
        le32(1),
        le32(0),
        le32(1),
        le32(8),
        le64(0x80_1000),
        le32(504),
        le32(0),
        le64(0),
        le64(0x20_0001),
    ]);
    assert_eq!(packet.as_bytes(), bytes.as_slice());
}

#[test]
fn the_2d_device_and_feature_bits_match_virtio_bindings() {
    use std::mem::size_of;

    use virtio_bindings::virtio_config as vc;
    use virtio_bindings::virtio_gpu as vg;
    use virtio_bindings::virtio_ring as vr;
    use wddm_gpu_abi::display::*;
    use wddm_gpu_abi::features::*;
    let sizes = [
        (size_of::<WddmGpuRect>(), size_of::<vg::virtio_gpu_rect>()),
        (
            size_of::<WddmGpuResourceCreate2d>(),
            size_of::<vg::virtio_gpu_resource_create_2d>(),
        ),
        (
            size_of::<WddmGpuResourceUnref>(),
            size_of::<vg::virtio_gpu_resource_unref>(),
        ),
        (
            size_of::<WddmGpuResourceDetachBacking>(),
            size_of::<vg::virtio_gpu_resource_detach_backing>(),
        ),
        (
            size_of::<WddmGpuSetScanout>(),
            size_of::<vg::virtio_gpu_set_scanout>(),
        ),
        (
            size_of::<WddmGpuResourceFlush>(),
            size_of::<vg::virtio_gpu_resource_flush>(),
        ),
        (
            size_of::<WddmGpuTransferToHost2d>(),
            size_of::<vg::virtio_gpu_transfer_to_host_2d>(),
        ),
        (
            size_of::<WddmGpuResourceAttachBacking>(),
            size_of::<vg::virtio_gpu_resource_attach_backing>(),
        ),
        (
            size_of::<WddmGpuMemEntry>(),
            size_of::<vg::virtio_gpu_mem_entry>(),
        ),
        (
            size_of::<WddmGpuGetEdid>(),
            size_of::<vg::virtio_gpu_cmd_get_edid>(),
        ),
        (
            size_of::<WddmGpuRespEdid>(),
            size_of::<vg::virtio_gpu_resp_edid>(),
        ),
        (
            size_of::<WddmGpuCursorPos>(),
            size_of::<vg::virtio_gpu_cursor_pos>(),
        ),
        (
            size_of::<WddmGpuUpdateCursor>(),
            size_of::<vg::virtio_gpu_update_cursor>(),
        ),
    ];
    for (index, (ours, theirs)) in sizes.into_iter().enumerate() {
        assert_eq!(ours, theirs, "structure {index}");
    }
    let types = [
        (
            VIRTIO_GPU_CMD_RESOURCE_CREATE_2D,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_RESOURCE_CREATE_2D,
        ),
        (
            VIRTIO_GPU_CMD_RESOURCE_UNREF,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_RESOURCE_UNREF,
        ),
        (
            VIRTIO_GPU_CMD_SET_SCANOUT,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_SET_SCANOUT,
        ),
        (
            VIRTIO_GPU_CMD_RESOURCE_FLUSH,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_RESOURCE_FLUSH,
        ),
        (
            VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_TRANSFER_TO_HOST_2D,
        ),
        (
            VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_RESOURCE_ATTACH_BACKING,
        ),
        (
            VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_RESOURCE_DETACH_BACKING,
        ),
        (
            VIRTIO_GPU_CMD_GET_EDID,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_GET_EDID,
        ),
        (
            VIRTIO_GPU_CMD_UPDATE_CURSOR,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_UPDATE_CURSOR,
        ),
        (
            VIRTIO_GPU_CMD_MOVE_CURSOR,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_CMD_MOVE_CURSOR,
        ),
        (
            VIRTIO_GPU_RESP_OK_EDID,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_RESP_OK_EDID,
        ),
        (
            VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
        ),
        (
            VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
        ),
        (
            VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
            vg::virtio_gpu_ctrl_type_VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
        ),
        (
            VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_B8G8R8A8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_B8G8R8X8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_A8R8G8B8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_X8R8G8B8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_R8G8B8A8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_X8B8G8R8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_A8B8G8R8_UNORM,
        ),
        (
            VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM,
            vg::virtio_gpu_formats_VIRTIO_GPU_FORMAT_R8G8B8X8_UNORM,
        ),
        (VIRTIO_GPU_FLAG_FENCE, vg::VIRTIO_GPU_FLAG_FENCE),
        (
            VIRTIO_GPU_FLAG_INFO_RING_IDX,
            vg::VIRTIO_GPU_FLAG_INFO_RING_IDX,
        ),
        (VIRTIO_GPU_F_VIRGL, vg::VIRTIO_GPU_F_VIRGL),
        (VIRTIO_GPU_F_EDID, vg::VIRTIO_GPU_F_EDID),
        (VIRTIO_GPU_F_RESOURCE_BLOB, vg::VIRTIO_GPU_F_RESOURCE_BLOB),
        (VIRTIO_GPU_F_CONTEXT_INIT, vg::VIRTIO_GPU_F_CONTEXT_INIT),
        (VIRTIO_F_NOTIFY_ON_EMPTY, vc::VIRTIO_F_NOTIFY_ON_EMPTY),
        (VIRTIO_F_ANY_LAYOUT, vc::VIRTIO_F_ANY_LAYOUT),
        (VIRTIO_RING_F_INDIRECT_DESC, vr::VIRTIO_RING_F_INDIRECT_DESC),
        (VIRTIO_RING_F_EVENT_IDX, vr::VIRTIO_RING_F_EVENT_IDX),
        (VIRTIO_F_VERSION_1, vc::VIRTIO_F_VERSION_1),
        (VIRTIO_F_RING_RESET, vc::VIRTIO_F_RING_RESET),
    ];
    for (index, (ours, theirs)) in types.into_iter().enumerate() {
        assert_eq!(ours, theirs, "value {index}");
    }
    // Never offered: 3D, blobs, context types.
    for bit in [
        VIRTIO_GPU_F_VIRGL,
        VIRTIO_GPU_F_RESOURCE_BLOB,
        VIRTIO_GPU_F_CONTEXT_INIT,
    ] {
        assert_eq!(WDDM_GPU_DEVICE_FEATURES & (1 << bit), 0, "bit {bit}");
    }
}

#[test]
fn the_pci_transport_and_split_ring_match_virtio_bindings() {
    use std::mem::{offset_of, size_of};

    use virtio_bindings::virtio_config as vc;
    use virtio_bindings::virtio_ids as vi;
    use virtio_bindings::virtio_ring as vr;
    use wddm_gpu_abi::pci::*;
    use wddm_gpu_abi::ring::*;
    // virtio-bindings has no virtio_pci module: the ids, capabilities and common registers are
    // checked by the unit tests of `pci`; what it has is checked here.
    assert_eq!(u32::from(VIRTIO_ID_GPU), vi::VIRTIO_ID_GPU);
    let statuses = [
        (VIRTIO_STATUS_ACKNOWLEDGE, vc::VIRTIO_CONFIG_S_ACKNOWLEDGE),
        (VIRTIO_STATUS_DRIVER, vc::VIRTIO_CONFIG_S_DRIVER),
        (VIRTIO_STATUS_DRIVER_OK, vc::VIRTIO_CONFIG_S_DRIVER_OK),
        (VIRTIO_STATUS_FEATURES_OK, vc::VIRTIO_CONFIG_S_FEATURES_OK),
        (
            VIRTIO_STATUS_DEVICE_NEEDS_RESET,
            vc::VIRTIO_CONFIG_S_NEEDS_RESET,
        ),
        (VIRTIO_STATUS_FAILED, vc::VIRTIO_CONFIG_S_FAILED),
    ];
    for (ours, theirs) in statuses {
        assert_eq!(u32::from(ours), theirs);
    }
    let ring_flags = [
        (VIRTQ_DESC_F_NEXT, vr::VRING_DESC_F_NEXT),
        (VIRTQ_DESC_F_WRITE, vr::VRING_DESC_F_WRITE),
        (VIRTQ_DESC_F_INDIRECT, vr::VRING_DESC_F_INDIRECT),
        (VIRTQ_AVAIL_F_NO_INTERRUPT, vr::VRING_AVAIL_F_NO_INTERRUPT),
        (VIRTQ_USED_F_NO_NOTIFY, vr::VRING_USED_F_NO_NOTIFY),
    ];
    for (ours, theirs) in ring_flags {
        assert_eq!(u32::from(ours), theirs);
    }
    assert_eq!(VIRTQ_DESC_ALIGN, vr::VRING_DESC_ALIGN_SIZE as usize);
    assert_eq!(VIRTQ_AVAIL_ALIGN, vr::VRING_AVAIL_ALIGN_SIZE as usize);
    assert_eq!(VIRTQ_USED_ALIGN, vr::VRING_USED_ALIGN_SIZE as usize);
    assert_eq!(size_of::<WddmGpuVirtqDesc>(), size_of::<vr::vring_desc>());
    assert_eq!(
        offset_of!(WddmGpuVirtqDesc, flags),
        offset_of!(vr::vring_desc, flags)
    );
    assert_eq!(
        offset_of!(WddmGpuVirtqDesc, next),
        offset_of!(vr::vring_desc, next)
    );
    assert_eq!(
        size_of::<WddmGpuVirtqUsedElem>(),
        size_of::<vr::vring_used_elem>()
    );
    assert_eq!(offset_of!(vr::vring_avail, idx), VIRTQ_RING_IDX_OFFSET);
    assert_eq!(offset_of!(vr::vring_avail, ring), VIRTQ_RING_ENTRIES_OFFSET);
    assert_eq!(offset_of!(vr::vring_used, idx), VIRTQ_RING_IDX_OFFSET);
    assert_eq!(offset_of!(vr::vring_used, ring), VIRTQ_RING_ENTRIES_OFFSET);
    assert_eq!(VIRTQ_AVAIL_ENTRY_SIZE, size_of::<u16>());
    // A descriptor as the spec lays it out: addr, len, flags, next.
    let desc = WddmGpuVirtqDesc {
        addr: 0x1122_3344_5566_7788,
        len: 0x99aa_bbcc,
        flags: VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE,
        next: 7,
    };
    let bytes = cat(&[
        le64(0x1122_3344_5566_7788),
        le32(0x99aa_bbcc),
        vec![3, 0, 7, 0],
    ]);
    assert_eq!(desc.as_bytes(), bytes.as_slice());
}
