//! A vhost-user *frontend* harness: plays QEMU's part against the real backend binary over a
//! real Unix socket.
//!
//! - Guest RAM is a memfd mapped here and announced at GPA 0, so the test writes requests,
//!   rings and data into it and reads results back.
//! - The VRAM file the backend creates (in `/dev/shm`, one per harness) is mapped here too and
//!   announced as a second memory-table region, the way QEMU announces the ivshmem BAR.
//! - Queue 0 (control) is a split virtqueue in guest RAM with kick and call eventfds. Requests
//!   are either posted one at a time ([`Harness::request`]) or several at once
//!   ([`Harness::post`], each in its own slot, answered in any order, collected by head index
//!   with [`Harness::wait_reply`]), as a driver does with submissions and WAIT_EVENTs that the
//!   device completes later. Every wait is bounded.
//!
//! The backend child is killed, and its files removed, when the harness is dropped; if the test
//! is failing, its log is printed first.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use wddm_gpu_abi::caps::{
    WddmGpuCapsHeader, WddmGpuSegmentDesc, WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION,
};
use wddm_gpu_abi::ctrl::{
    WddmGpuCtrlHdr, WddmGpuGetCapset, WddmGpuGetCapsetInfo, WddmGpuRespCapsetInfo,
    VIRTIO_GPU_CMD_GET_CAPSET, VIRTIO_GPU_CMD_GET_CAPSET_INFO, VIRTIO_GPU_RESP_OK_CAPSET,
    VIRTIO_GPU_RESP_OK_NODATA, WDDM_GPU_CMD_PREEMPT, WDDM_GPU_CMD_QUERY_ENGINE_STATUS,
    WDDM_GPU_CMD_REGISTER_STATUS_PAGE, WDDM_GPU_CMD_RESET, WDDM_GPU_CMD_SET_POWER_STATE,
    WDDM_GPU_CMD_WAIT_EVENT, WDDM_GPU_RESP_ENGINE_STATUS, WDDM_GPU_RESP_EVENT,
    WDDM_GPU_RESP_PREEMPT, WDDM_GPU_RESP_SUBMIT,
};
use wddm_gpu_abi::packet::WddmGpuPacketTransfer;
use wddm_gpu_abi::status::{
    WddmGpuCmdQueryEngineStatus, WddmGpuCmdRegisterStatusPage, WddmGpuCmdSetPowerState,
    WddmGpuFaultRecord, WddmGpuRespEngineStatus, WddmGpuRespEvent, WddmGpuRespPreempt,
    WddmGpuStatusPage, WDDM_GPU_FAULT_RING_ENTRIES, WDDM_GPU_FAULT_RING_OFFSET,
};
use wddm_gpu_abi::submit::{WddmGpuCmdSubmit, WddmGpuRespSubmit};
use zerocopy::{FromBytes, IntoBytes};

use crate::backend_process::{BackendProcess, SpawnOptions, TIMEOUT};
use crate::guest_memory::{map_file, memfd, memory_region, memory_region_part};
use crate::requests::submit_command;
use crate::split_ring::{Descriptor, SplitRing, UsedEntry, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};

/// Guest RAM: 64 MiB at GPA 0.
pub const RAM_SIZE: u64 = 64 << 20;
/// VRAM (and BAR) size given to the backend.
pub const VRAM_SIZE: u64 = 16 << 20;
/// Where the harness announces the VRAM BAR by default (a typical 32-bit PCI hole address).
pub const VRAM_GPA: u64 = 0xe000_0000;
/// Guest page size used by frame lists.
pub const PAGE: u64 = 4096;
/// [`PAGE`] as a buffer length.
pub const PAGE_USIZE: usize = 4096;
const _: () = assert!(PAGE_USIZE as u64 == PAGE);

/// Control-queue size.
pub const QUEUE_SIZE: u16 = 64;
/// Guest-RAM layout of the control queue and its buffers.
pub const DESC_TABLE: u64 = 0x0000;
pub const AVAIL_RING: u64 = 0x1000;
pub const USED_RING: u64 = 0x2000;
/// Indirect descriptor tables.
pub const INDIRECT_TABLE: u64 = 0x3000;
/// Request buffer (64 KiB).
pub const REQUEST: u64 = 0x1_0000;
/// Response buffer (64 KiB).
pub const RESPONSE: u64 = 0x2_0000;
pub const BUFFER_SIZE: u32 = 0x1_0000;
/// DMA buffers (64 KiB).
pub const DMA_BUFFER: u64 = 0x10_0000;
/// Frame lists (64 KiB).
pub const FRAME_LISTS: u64 = 0x11_0000;
/// Free guest RAM for data frames: from here to the end of RAM.
pub const DATA: u64 = 0x20_0000;
/// Request/response slots of asynchronous requests ([`Harness::post`]): slot `k` (1 to
/// [`SLOTS`] - 1) uses descriptors `2k` and `2k + 1`, its request at
/// `SLOT_AREA + k * SLOT_STRIDE` and its response [`SLOT_ROOM`] bytes further. Slot 0 (head 0,
/// [`REQUEST`] and [`RESPONSE`]) belongs to [`Harness::request`].
pub const SLOT_AREA: u64 = 0x3_0000;
pub const SLOT_STRIDE: u64 = 0x800;
pub const SLOT_ROOM: u32 = 0x400;
pub const SLOTS: u16 = QUEUE_SIZE / 2;
/// A spare 4 KiB-aligned page for a status page.
pub const STATUS_PAGE: u64 = 0x5_0000;

/// The control queue's rings in guest RAM.
pub const CONTROL_RING: SplitRing = SplitRing {
    desc: DESC_TABLE,
    avail: AVAIL_RING,
    used: USED_RING,
    size: QUEUE_SIZE,
};

/// Byte written into response buffers before each request, to see what the device wrote.
pub const RESPONSE_FILL: u8 = 0xcc;

/// What the handshake learned.
#[derive(Clone, Copy, Debug)]
pub struct Negotiated {
    pub features: u64,
    pub protocol_features: VhostUserProtocolFeatures,
    pub config: [u8; 16],
}

/// The answer to one control request.
#[derive(Clone, Debug)]
pub struct Reply {
    pub used: UsedEntry,
    /// The first `used.len` bytes of the response buffer.
    pub bytes: Vec<u8>,
    /// Position of the used entry among all entries collected on this ring (answers compare
    /// by it to check their order).
    pub order: u64,
}

impl Reply {
    /// The response header (panics if fewer than 24 bytes were written).
    pub fn hdr(&self) -> WddmGpuCtrlHdr {
        WddmGpuCtrlHdr::read_from_prefix(&self.bytes)
            .unwrap_or_else(|_| panic!("response too short for a header: {:?}", self.used))
            .0
    }

    /// The whole response as `T`, which must be exactly what was written.
    pub fn exact<T: FromBytes>(&self) -> T {
        T::read_from_bytes(&self.bytes).unwrap_or_else(|_| {
            panic!(
                "response is {} bytes, expected {}",
                self.bytes.len(),
                std::mem::size_of::<T>()
            )
        })
    }
}

/// The capset blob, parsed with the offsets and strides its header gives.
#[derive(Clone, Debug)]
pub struct Capset {
    pub header: WddmGpuCapsHeader,
    pub segments: Vec<WddmGpuSegmentDesc>,
    pub blob: Vec<u8>,
}

impl Capset {
    /// The segment with this id.
    pub fn segment(&self, id: u32) -> WddmGpuSegmentDesc {
        *self
            .segments
            .iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("no segment {id} in {:?}", self.segments))
    }
}

/// A request on the control queue whose answer has not been collected yet
/// ([`Harness::post`]); hand it to [`Harness::wait_reply`] to get the answer.
#[derive(Debug)]
#[must_use = "a posted request holds its slot until its reply is collected"]
pub struct Pending {
    /// Head descriptor index: the used entry's id.
    pub head: u16,
    response: u64,
    room: u32,
}

/// A frontend connected to a running backend, with guest RAM, the VRAM mapping and the control
/// queue.
pub struct Harness {
    pub frontend: Frontend,
    /// Guest RAM (GPA 0, memfd-backed, shared with the backend).
    pub ram: GuestMemoryMmap<()>,
    /// The VRAM file mapped here; "guest addresses" of this mapping are VRAM offsets.
    pub vram: GuestMemoryMmap<()>,
    /// Size of the VRAM file (and of the BAR region announced).
    pub vram_size: u64,
    /// Size of guest RAM ([`RAM_SIZE`] unless [`SpawnOptions`] said otherwise).
    pub ram_size: u64,
    /// Where the VRAM region is announced now, if it is.
    pub vram_gpa: Option<u64>,
    kick: EventFd,
    call: EventFd,
    next_avail: u16,
    last_used: u16,
    /// Heads posted and not answered yet.
    outstanding: HashSet<u16>,
    /// UsedEntry entries collected from the ring and not handed out yet, by head, with their
    /// position.
    completed: HashMap<u16, (UsedEntry, u64)>,
    /// UsedEntry entries collected so far on this ring.
    collected: u64,
    /// Free asynchronous slots (1 to SLOTS - 1).
    free_slots: Vec<u16>,
    /// When the latest kick was written, and when the call eventfd was last read after a
    /// wait ([`Self::last_round_trip`]).
    kicked_at: Option<Instant>,
    notified_at: Option<Instant>,
    pub negotiated: Option<Negotiated>,
    /// Declared last: dropped (killed) after the frontend socket closed.
    pub backend: BackendProcess,
}

impl Harness {
    /// Starts a backend and connects; nothing negotiated yet.
    pub fn spawn(name: &str) -> Self {
        Self::spawn_with_options(name, &SpawnOptions::default())
    }

    /// Like [`Self::spawn`] with `options` (VRAM and RAM sizes, extra backend arguments).
    pub fn spawn_with_options(name: &str, options: &SpawnOptions) -> Self {
        let vram_size = options.vram_size;
        let ram_size = options.ram_size;
        let backend = BackendProcess::spawn_with_options(name, options);
        let frontend = backend.connect();
        frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);

        let ram = map_file(memfd(c"wddm-guest-ram", ram_size), ram_size);

        let vram_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&backend.vram_path)
            .unwrap();
        assert_eq!(vram_file.metadata().unwrap().len(), vram_size);
        let vram = map_file(vram_file, vram_size);
        Self::from_parts(frontend, backend, (ram, ram_size), (vram, vram_size))
    }

    /// A harness over a connected frontend and its backend, with guest RAM and a VRAM mapping
    /// (each with its size); nothing negotiated, no request outstanding.
    pub fn from_parts(
        frontend: Frontend,
        backend: BackendProcess,
        (ram, ram_size): (GuestMemoryMmap<()>, u64),
        (vram, vram_size): (GuestMemoryMmap<()>, u64),
    ) -> Self {
        Self {
            frontend,
            ram,
            vram,
            vram_size,
            ram_size,
            vram_gpa: None,
            kick: EventFd::new(EFD_NONBLOCK).unwrap(),
            call: EventFd::new(EFD_NONBLOCK).unwrap(),
            next_avail: 0,
            last_used: 0,
            outstanding: HashSet::new(),
            completed: HashMap::new(),
            collected: 0,
            free_slots: (1..SLOTS).rev().collect(),
            kicked_at: None,
            notified_at: None,
            negotiated: None,
            backend,
        }
    }

    /// Starts a backend and brings it to where a guest driver could use it: features
    /// negotiated (all offered ones acked), guest RAM and the VRAM BAR (at [`VRAM_GPA`]) in the
    /// memory table, control queue enabled.
    pub fn ready(name: &str) -> Self {
        Self::ready_with_vram(name, VRAM_SIZE)
    }

    /// Like [`Self::ready`] with `vram_size` bytes of VRAM (a power of two).
    pub fn ready_with_vram(name: &str, vram_size: u64) -> Self {
        Self::ready_with_options(name, &SpawnOptions::with_vram(vram_size))
    }

    /// Like [`Self::ready`] with `options` (VRAM and RAM sizes, extra backend arguments).
    pub fn ready_with_options(name: &str, options: &SpawnOptions) -> Self {
        let mut harness = Self::spawn_with_options(name, options);
        harness.negotiate();
        harness.set_mem_table(Some(VRAM_GPA));
        harness.setup_control_queue();
        harness
    }

    /// What QEMU does when it creates the device: features, protocol features (all acked),
    /// SET_OWNER. Nothing runs yet; the shared-memory tests ask GET_SHMEM_CONFIG and open the
    /// backend channel here, as QEMU 11.1 does.
    pub fn realize(&mut self) -> Negotiated {
        self.realize_with(|_| {})
    }

    /// [`Self::realize`] in QEMU 11.1's order, with `before_owner` where QEMU opens the backend
    /// channel: GET_FEATURES, protocol features, GET_MAX_MEM_SLOTS, (the backend channel),
    /// SET_OWNER, GET_FEATURES.
    pub fn realize_with(&mut self, before_owner: impl FnOnce(&mut Frontend)) -> Negotiated {
        let features = self.frontend.get_features().unwrap();
        let protocol_features = self.frontend.get_protocol_features().unwrap();
        self.frontend
            .set_protocol_features(protocol_features)
            .unwrap();
        self.frontend.get_max_mem_slots().unwrap();
        before_owner(&mut self.frontend);
        self.frontend.set_owner().unwrap();
        assert_eq!(self.frontend.get_features().unwrap(), features);
        let negotiated = Negotiated {
            features,
            protocol_features,
            config: [0; 16],
        };
        self.negotiated = Some(negotiated);
        negotiated
    }

    /// What QEMU does when the guest sets DRIVER_OK, up to the memory table: GET_CONFIG, then
    /// SET_FEATURES (all offered features acked), which starts the device.
    pub fn start_features(&mut self) -> Negotiated {
        let mut negotiated = self.negotiated.expect("realized before");
        let (_, payload) = self
            .frontend
            .get_config(0, 16, VhostUserConfigFlags::empty(), &[0u8; 16])
            .unwrap();
        negotiated.config = payload.as_slice().try_into().unwrap();
        self.frontend.set_features(negotiated.features).unwrap();
        self.negotiated = Some(negotiated);
        negotiated
    }

    /// [`Self::realize`], then [`Self::start_features`].
    pub fn negotiate(&mut self) -> Negotiated {
        self.realize();
        self.start_features()
    }

    /// The memory-table entry for guest RAM.
    pub fn ram_region(&self) -> VhostUserMemoryRegionInfo {
        memory_region(&self.ram, 0, self.ram_size)
    }

    /// The memory-table entry for the VRAM BAR at `gpa` (backed by the backend's VRAM file).
    pub fn vram_region(&self, gpa: u64) -> VhostUserMemoryRegionInfo {
        memory_region(&self.vram, gpa, self.vram_size)
    }

    /// SET_MEM_TABLE with guest RAM and, when `vram_gpa` is given, the VRAM BAR there.
    pub fn set_mem_table(&mut self, vram_gpa: Option<u64>) {
        let mut regions = vec![self.ram_region()];
        regions.extend(vram_gpa.map(|gpa| self.vram_region(gpa)));
        self.frontend.set_mem_table(&regions).unwrap();
        self.vram_gpa = vram_gpa;
    }

    /// SET_MEM_TABLE with guest RAM as two adjacent regions that meet at `split` (as a frontend
    /// announces memory sections that touch), and the VRAM BAR at `vram_gpa`.
    pub fn set_mem_table_split_ram(&mut self, split: u64, vram_gpa: u64) {
        assert!(split > 0 && split < self.ram_size, "split inside RAM");
        let regions = [
            memory_region_part(&self.ram, 0, 0, split),
            memory_region_part(&self.ram, split, split, self.ram_size - split),
            self.vram_region(vram_gpa),
        ];
        self.frontend.set_mem_table(&regions).unwrap();
        self.vram_gpa = Some(vram_gpa);
    }

    /// REM_MEM_REG of the VRAM BAR region.
    pub fn remove_vram_region(&mut self) {
        let gpa = self
            .vram_gpa
            .expect("VRAM region is not in the memory table");
        let region = self.vram_region(gpa);
        self.frontend.remove_mem_region(&region).unwrap();
        self.vram_gpa = None;
    }

    /// ADD_MEM_REG of the VRAM BAR region at `gpa`.
    pub fn add_vram_region(&mut self, gpa: u64) {
        assert!(self.vram_gpa.is_none(), "VRAM region already announced");
        let region = self.vram_region(gpa);
        self.frontend.add_mem_region(&region).unwrap();
        self.vram_gpa = Some(gpa);
    }

    fn host(&self, gpa: u64) -> u64 {
        self.ram.get_host_address(GuestAddress(gpa)).unwrap() as u64
    }

    /// Queue 0 as a split ring in guest RAM: size, addresses (frontend virtual addresses, as
    /// vhost-user wants), base 0, call and kick eventfds, enabled.
    pub fn setup_control_queue(&mut self) {
        self.ram
            .write_slice(&[0u8; 0x3000], GuestAddress(DESC_TABLE))
            .unwrap();
        self.configure_control_queue(0);
        self.next_avail = 0;
        self.last_used = 0;
        // Requests on the old ring are gone with it.
        self.outstanding.clear();
        self.completed.clear();
        self.collected = 0;
        self.free_slots = (1..SLOTS).rev().collect();
    }

    /// Queue 0 over the ring memory as it is, in QEMU's order: size, addresses, `base`, call
    /// and kick eventfds, enabled. Like QEMU, the kick eventfd is handed over already signalled.
    fn configure_control_queue(&mut self, base: u16) {
        self.frontend.set_vring_num(0, QUEUE_SIZE).unwrap();
        let config = VringConfigData {
            queue_max_size: QUEUE_SIZE,
            queue_size: QUEUE_SIZE,
            flags: 0,
            desc_table_addr: self.host(DESC_TABLE),
            used_ring_addr: self.host(USED_RING),
            avail_ring_addr: self.host(AVAIL_RING),
            log_addr: None,
        };
        self.frontend.set_vring_addr(0, &config).unwrap();
        self.frontend.set_vring_base(0, base).unwrap();
        self.frontend.set_vring_call(0, &self.call).unwrap();
        self.kick.write(1).unwrap();
        self.frontend.set_vring_kick(0, &self.kick).unwrap();
        self.frontend.set_vring_enable(0, true).unwrap();
    }

    /// QEMU's device stop (VM `stop`, a snapshot, and the first step of a guest reset): both
    /// rings disabled, then GET_VRING_BASE on the one the guest set up. Returns its base.
    pub fn stop_device(&mut self) -> u16 {
        self.frontend.set_vring_enable(0, false).unwrap();
        self.frontend.set_vring_enable(1, false).unwrap();
        let base = self.frontend.get_vring_base(0).unwrap();
        u16::try_from(base).expect("a split ring's index is 16 bits")
    }

    /// QEMU's device start after a guest reset: SET_FEATURES and the control ring set up anew
    /// from index 0 over cleared ring memory (the memory table did not change, so QEMU sends
    /// none).
    pub fn start_device_anew(&mut self) {
        let features = self.negotiated.expect("negotiated before").features;
        self.frontend.set_features(features).unwrap();
        self.setup_control_queue();
        self.frontend.set_vring_enable(1, true).unwrap();
    }

    /// RESET_DEVICE (QEMU 10's vhost-user-gpu-pci sends it after GET_VRING_BASE on a guest
    /// reset).
    pub fn reset_device(&mut self) {
        self.frontend.reset_device().unwrap();
    }

    /// QEMU's device start after `cont`: SET_FEATURES and the control ring at `base` over the
    /// same ring memory (no memory table: it did not change). The guest does not kick: it may
    /// be waiting for answers with nothing new to post.
    pub fn resume_device(&mut self, base: u16) {
        let features = self.negotiated.expect("negotiated before").features;
        self.frontend.set_features(features).unwrap();
        self.configure_control_queue(base);
        self.frontend.set_vring_enable(1, true).unwrap();
    }

    /// Stops queue 0 (GET_VRING_BASE, as QEMU does when the guest resets the device) and sets
    /// it up again from empty rings.
    pub fn restart_control_queue(&mut self) {
        self.stop_control_queue();
        self.setup_control_queue();
    }

    /// GET_VRING_BASE on queue 0: the ring stops. Returns the base (next available index) the
    /// backend reports. The ring memory is left as the backend left it.
    pub fn stop_control_queue(&mut self) -> u32 {
        self.frontend.get_vring_base(0).unwrap()
    }

    /// The used ring's index as the device last wrote it.
    pub fn device_used_idx(&self) -> u16 {
        self.used_idx()
    }

    /// The used-ring entry at `index` (modulo the queue size), as the device wrote it.
    pub fn used_entry(&self, index: u16) -> UsedEntry {
        CONTROL_RING.used_entry(&self.ram, index)
    }

    /// Closes the frontend connection (as QEMU does when it quits) and hands back the backend
    /// process, still running, to watch how it ends.
    pub fn disconnect(self) -> BackendProcess {
        let Harness { backend, .. } = self;
        backend
    }

    // ---- guest memory ----

    pub fn write_ram(&self, gpa: u64, bytes: &[u8]) {
        self.ram.write_slice(bytes, GuestAddress(gpa)).unwrap();
    }

    pub fn read_ram(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        self.ram.read_slice(&mut bytes, GuestAddress(gpa)).unwrap();
        bytes
    }

    pub fn write_vram(&self, offset: u64, bytes: &[u8]) {
        self.vram.write_slice(bytes, GuestAddress(offset)).unwrap();
    }

    pub fn read_vram(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        self.vram
            .read_slice(&mut bytes, GuestAddress(offset))
            .unwrap();
        bytes
    }

    /// Host address of `len` bytes of guest RAM at `gpa` in this process's mapping of the
    /// memfd the backend maps too (for copies that bypass the device, e.g. a benchmark's
    /// limit). Panics unless the whole range is guest RAM.
    pub fn ram_ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        assert!(
            gpa.checked_add(len as u64)
                .is_some_and(|end| end <= self.ram_size),
            "{len:#x} bytes at {gpa:#x} are not all guest RAM"
        );
        self.ram.get_host_address(GuestAddress(gpa)).unwrap()
    }

    /// Host address of `len` bytes of VRAM at `offset` in this process's mapping of the VRAM
    /// file. Panics unless the whole range is in the file.
    pub fn vram_ptr(&self, offset: u64, len: usize) -> *mut u8 {
        assert!(
            offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.vram_size),
            "{len:#x} bytes at VRAM offset {offset:#x} are outside the VRAM file"
        );
        self.vram.get_host_address(GuestAddress(offset)).unwrap()
    }

    /// The guest-RAM memfd (shared with the backend).
    pub fn ram_file(&self) -> &File {
        let region = self.ram.find_region(GuestAddress(0)).unwrap();
        vm_memory::GuestMemoryRegion::file_offset(region)
            .unwrap()
            .file()
    }

    /// The time from the latest kick to the latest read of the call eventfd after waiting on
    /// it: for a request waited for alone, its kick-to-completion round trip.
    pub fn last_round_trip(&self) -> Option<Duration> {
        let (kicked, notified) = (self.kicked_at?, self.notified_at?);
        notified.checked_duration_since(kicked)
    }

    // ---- the split ring ----

    /// Writes descriptors at consecutive indices of the table at `table` (GPA).
    pub fn write_descriptors(&self, table: u64, descs: &[Descriptor]) {
        for (index, desc) in (0..).zip(descs) {
            desc.write(&self.ram, table, index);
        }
    }

    /// Makes `head` available, asks for a notification on the next used entry, and kicks.
    pub fn publish(&mut self, head: u16) {
        self.add_to_avail_ring(head);
        // Forget stale notifications, so the one awaited is for this request.
        let _ = self.call.read();
        self.kick_queue();
    }

    /// Writes `head` into the next available slot and used_event (interrupt once the entry
    /// after `last_used` is used), then advances the available index.
    fn add_to_avail_ring(&mut self, head: u16) {
        self.write_used_event();
        self.next_avail = CONTROL_RING.make_available(&self.ram, self.next_avail, head);
    }

    /// Kicks queue 0, noting when (for [`Self::last_round_trip`]).
    fn kick_queue(&mut self) {
        self.kicked_at = Some(Instant::now());
        self.kick.write(1).unwrap();
    }

    /// A hostile guest's avail index: written as is (no entries behind it), then a kick.
    pub fn write_avail_idx(&mut self, idx: u16) {
        CONTROL_RING.write_avail_idx(&self.ram, idx);
        self.kick.write(1).unwrap();
    }

    fn used_idx(&self) -> u16 {
        CONTROL_RING.used_idx(&self.ram)
    }

    /// Waits (bounded by [`TIMEOUT`]) for the next used entry and its call notification.
    pub fn wait_used(&mut self) -> Result<UsedEntry, String> {
        self.wait_used_for(TIMEOUT)
    }

    /// Waits at most `timeout` for the next used entry and its call notification. Only for
    /// heads published with [`Self::publish`] while no [`Self::post`]ed request is pending.
    pub fn wait_used_for(&mut self, timeout: Duration) -> Result<UsedEntry, String> {
        assert!(
            self.outstanding.is_empty() && self.completed.is_empty(),
            "wait_used_for while posted requests are pending: use wait_reply"
        );
        let deadline = Instant::now() + timeout;
        let mut notified = false;
        loop {
            if notified && self.used_idx() != self.last_used {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(if self.used_idx() != self.last_used {
                    "a used entry appeared but the call eventfd was never signalled".to_string()
                } else {
                    format!(
                        "no used entry within {timeout:?} (used idx stays {})",
                        self.last_used
                    )
                });
            }
            let mut pollfd = libc::pollfd {
                fd: self.call.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = left.as_millis().clamp(1, 1000) as libc::c_int;
            // SAFETY: one valid pollfd, which outlives the call.
            let ready = unsafe { libc::poll(&mut pollfd, 1, millis) };
            if ready > 0 && self.call.read().is_ok() {
                self.notified_at = Some(Instant::now());
                notified = true;
            }
        }
        let used_idx = self.used_idx();
        assert_eq!(
            used_idx,
            self.last_used.wrapping_add(1),
            "more than one used entry for one request"
        );
        let used = self.used_entry(self.last_used);
        self.last_used = used_idx;
        Ok(used)
    }

    /// Like [`Self::wait_used`], panicking with the backend log on timeout.
    pub fn expect_used(&mut self) -> UsedEntry {
        match self.wait_used() {
            Ok(used) => used,
            Err(why) => panic!("{why}\n---- backend log ----\n{}", self.backend.log()),
        }
    }

    /// Posts `request` in one readable descriptor and a `response_room`-byte writable one (none
    /// when 0), and returns what the device wrote. Uses head 0 with [`REQUEST`] and
    /// [`RESPONSE`]; requests posted with [`Self::post`] may be pending meanwhile.
    pub fn request(&mut self, request: &[u8], response_room: u32) -> Reply {
        assert!(request.len() <= BUFFER_SIZE as usize && response_room <= BUFFER_SIZE);
        self.write_ram(RESPONSE, &vec![RESPONSE_FILL; BUFFER_SIZE as usize]);
        let pending = self.post_chain(0, REQUEST, request, RESPONSE, response_room);
        self.wait_reply(pending)
    }

    /// Posts `request` in a free slot with a `response_room`-byte response buffer (at most
    /// [`SLOT_ROOM`]; none when 0) and returns at once; the answer is collected with
    /// [`Self::wait_reply`], in any order.
    pub fn post(&mut self, request: &[u8], response_room: u32) -> Pending {
        assert!(request.len() as u64 <= SLOT_STRIDE - u64::from(SLOT_ROOM));
        assert!(response_room <= SLOT_ROOM);
        let slot = self
            .free_slots
            .pop()
            .expect("every asynchronous slot is in use");
        let base = SLOT_AREA + u64::from(slot) * SLOT_STRIDE;
        let response = base + SLOT_STRIDE - u64::from(SLOT_ROOM);
        self.write_ram(response, &vec![RESPONSE_FILL; SLOT_ROOM as usize]);
        self.post_chain(2 * slot, base, request, response, response_room)
    }

    fn post_chain(
        &mut self,
        head: u16,
        request_gpa: u64,
        request: &[u8],
        response_gpa: u64,
        response_room: u32,
    ) -> Pending {
        assert!(
            !self.outstanding.contains(&head) && !self.completed.contains_key(&head),
            "head {head} is still in use"
        );
        self.write_ram(request_gpa, request);
        let mut descs = vec![Descriptor {
            addr: request_gpa,
            len: u32::try_from(request.len()).unwrap(),
            flags: 0,
            next: 0,
        }];
        if response_room > 0 {
            descs[0].flags = VIRTQ_DESC_F_NEXT;
            descs[0].next = head + 1;
            descs.push(Descriptor {
                addr: response_gpa,
                len: response_room,
                flags: VIRTQ_DESC_F_WRITE,
                next: 0,
            });
        }
        self.write_descriptors(DESC_TABLE + 16 * u64::from(head), &descs);
        if self.outstanding.is_empty() && self.completed.is_empty() {
            // Nothing is pending, so any notification now is stale: forget it, so the one
            // awaited is for this request.
            let _ = self.call.read();
        }
        self.outstanding.insert(head);
        self.make_available(head);
        Pending {
            head,
            response: response_gpa,
            room: response_room,
        }
    }

    /// Makes `head` available, asks for a notification on the next used entry, and kicks
    /// (without forgetting notifications: other requests may be pending).
    fn make_available(&mut self, head: u16) {
        self.add_to_avail_ring(head);
        self.kick_queue();
    }

    /// used_event (after the available ring): interrupt once the entry after `last_used` is
    /// used.
    fn write_used_event(&self) {
        CONTROL_RING.write_used_event(&self.ram, self.last_used);
    }

    /// Moves every new used entry into `completed`. Each must be the head of a pending
    /// request, and only once.
    /// Takes the used entries written so far as seen, without matching them to requests: for
    /// tests that made the device answer chains the harness did not post (a re-posted head).
    pub fn skip_used(&mut self) {
        self.last_used = self.used_idx();
        self.write_used_event();
    }

    fn harvest(&mut self) {
        loop {
            let used_idx = self.used_idx();
            while self.last_used != used_idx {
                let used = self.used_entry(self.last_used);
                let head = u16::try_from(used.id).unwrap_or(u16::MAX);
                assert!(
                    self.outstanding.remove(&head),
                    "used entry {used:?} is not for a pending request (pending: {:?})\n{}",
                    self.outstanding,
                    self.backend.log()
                );
                self.completed.insert(head, (used, self.collected));
                self.collected += 1;
                self.last_used = self.last_used.wrapping_add(1);
            }
            // Ask for the next notification, then look again: an entry added before the
            // device saw the new used_event is not notified.
            self.write_used_event();
            fence(Ordering::SeqCst);
            if self.used_idx() == used_idx {
                return;
            }
        }
    }

    /// Reads pending call notifications without waiting and collects what was answered.
    fn poll_notifications(&mut self, wait: Duration) -> bool {
        let mut pollfd = libc::pollfd {
            fd: self.call.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = wait.as_millis().min(1000) as libc::c_int;
        // SAFETY: one valid pollfd, which outlives the call.
        let ready = unsafe { libc::poll(&mut pollfd, 1, millis) };
        if ready > 0 && self.call.read().is_ok() {
            self.notified_at = Some(Instant::now());
            self.harvest();
            return true;
        }
        false
    }

    /// Whether the request was answered (does not wait; the reply stays for
    /// [`Self::wait_reply`]).
    pub fn is_answered(&mut self, pending: &Pending) -> bool {
        self.poll_notifications(Duration::ZERO);
        // An answer without a notification counts too; wait_reply does not check it again.
        self.harvest();
        self.completed.contains_key(&pending.head)
    }

    /// Waits at most `timeout` for the answer to `pending` and its call notification.
    pub fn wait_reply_for(
        &mut self,
        pending: &Pending,
        timeout: Duration,
    ) -> Result<Reply, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((used, order)) = self.completed.remove(&pending.head) {
                if pending.head != 0 {
                    self.free_slots.push(pending.head / 2);
                }
                let mut reply = self.read_reply(pending, used);
                reply.order = order;
                return Ok(reply);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let idx = self.used_idx();
                return Err(if idx != self.last_used {
                    format!(
                        "used entries appeared (used idx {idx}, collected up to {}) but the call eventfd was never signalled",
                        self.last_used
                    )
                } else {
                    format!(
                        "no answer for head {} within {timeout:?} (used idx stays {idx}; pending: {:?})",
                        pending.head, self.outstanding
                    )
                });
            }
            self.poll_notifications(left.max(Duration::from_millis(1)));
        }
    }

    /// Waits (bounded by [`TIMEOUT`]) for the answer to `pending`, panicking with the backend
    /// log on timeout.
    pub fn wait_reply(&mut self, pending: Pending) -> Reply {
        match self.wait_reply_for(&pending, TIMEOUT) {
            Ok(reply) => reply,
            Err(why) => panic!("{why}\n---- backend log ----\n{}", self.backend.log()),
        }
    }

    /// What the device wrote for `pending` according to `used` (which may come from
    /// [`Self::used_entry`] for a ring the harness no longer collects from).
    pub fn read_reply(&self, pending: &Pending, used: UsedEntry) -> Reply {
        assert_eq!(
            used.id,
            u32::from(pending.head),
            "used entry for another head"
        );
        assert!(
            used.len <= pending.room,
            "used length {} exceeds the {}-byte response buffer",
            used.len,
            pending.room
        );
        Reply {
            used,
            bytes: self.read_ram(pending.response, used.len as usize),
            order: u64::MAX,
        }
    }

    /// The available index: requests made available so far on this ring.
    pub fn avail_idx(&self) -> u16 {
        self.next_avail
    }

    /// The used index up to which the harness has collected entries.
    pub fn collected_used(&self) -> u16 {
        self.last_used
    }

    /// Forgets a pending request whose ring is gone (after a virtio reset) without waiting.
    pub fn abandon(&mut self, pending: Pending) {
        self.outstanding.remove(&pending.head);
        self.completed.remove(&pending.head);
    }

    // ---- typed requests ----

    pub fn get_capset_info(&mut self, index: u32) -> Reply {
        let request = WddmGpuGetCapsetInfo {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET_INFO),
            capset_index: index,
            padding: 0,
        };
        self.request(request.as_bytes(), BUFFER_SIZE)
    }

    pub fn capset_info(&mut self) -> WddmGpuRespCapsetInfo {
        self.get_capset_info(0).exact()
    }

    pub fn get_capset(&mut self, id: u32, version: u32, response_room: u32) -> Reply {
        let request = WddmGpuGetCapset {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_CMD_GET_CAPSET),
            capset_id: id,
            capset_version: version,
        };
        self.request(request.as_bytes(), response_room)
    }

    /// GET_CAPSET for the device's capset, parsed.
    pub fn capset(&mut self) -> Capset {
        let reply = self.get_capset(WDDM_GPU_CAPSET_ID, WDDM_GPU_CAPSET_VERSION, BUFFER_SIZE);
        assert_eq!(reply.hdr().type_, VIRTIO_GPU_RESP_OK_CAPSET);
        let blob = reply.bytes[std::mem::size_of::<WddmGpuCtrlHdr>()..].to_vec();
        let (header, _) = WddmGpuCapsHeader::read_from_prefix(&blob).unwrap();
        assert_eq!(header.total_size as usize, blob.len(), "total_size");
        let segments = (0..header.segment_count as usize)
            .map(|index| {
                let at =
                    header.segments_offset as usize + index * header.segment_desc_size as usize;
                WddmGpuSegmentDesc::read_from_prefix(&blob[at..]).unwrap().0
            })
            .collect();
        Capset {
            header,
            segments,
            blob,
        }
    }

    /// Submits `cmd` and returns the completion (which must be a SUBMIT response).
    pub fn submit(&mut self, cmd: &WddmGpuCmdSubmit) -> WddmGpuRespSubmit {
        let reply = self.request(cmd.as_bytes(), BUFFER_SIZE);
        assert_eq!(reply.hdr().type_, WDDM_GPU_RESP_SUBMIT, "{reply:?}");
        reply.exact()
    }

    /// Writes `packets` as a DMA buffer at [`DMA_BUFFER`] and submits all of it.
    pub fn submit_packets(
        &mut self,
        packets: &[WddmGpuPacketTransfer],
        fence_id: u32,
    ) -> WddmGpuRespSubmit {
        let bytes: Vec<u8> = packets.iter().flat_map(|p| p.as_bytes().to_vec()).collect();
        self.write_ram(DMA_BUFFER, &bytes);
        self.submit(&submit_command(
            DMA_BUFFER,
            u32::try_from(bytes.len()).unwrap(),
            fence_id,
        ))
    }

    /// Posts a submission; the engine answers it when it ends.
    pub fn post_submit(&mut self, cmd: &WddmGpuCmdSubmit) -> Pending {
        self.post(cmd.as_bytes(), SLOT_ROOM)
    }

    /// Waits for the completion of a posted submission (which must be a SUBMIT response of
    /// exactly its size).
    pub fn wait_submit(&mut self, pending: Pending) -> WddmGpuRespSubmit {
        self.wait_typed(pending, WDDM_GPU_RESP_SUBMIT)
    }

    /// Waits for the answer to `pending`, which must have type `type_` and be exactly a `T`.
    fn wait_typed<T: FromBytes>(&mut self, pending: Pending, type_: u32) -> T {
        let reply = self.wait_reply(pending);
        assert_eq!(reply.hdr().type_, type_, "{reply:?}");
        reply.exact()
    }

    /// Posts a command that is only a header of `type_`.
    fn post_bare(&mut self, type_: u32) -> Pending {
        self.post(WddmGpuCtrlHdr::with_type(type_).as_bytes(), SLOT_ROOM)
    }

    /// Posts a WAIT_EVENT with room for the event (and more, to see what is written).
    pub fn post_wait_event(&mut self) -> Pending {
        self.post_bare(WDDM_GPU_CMD_WAIT_EVENT)
    }

    /// Waits for a posted WAIT_EVENT to complete (an EVENT response of exactly its size).
    pub fn wait_event(&mut self, pending: Pending) -> WddmGpuRespEvent {
        self.wait_typed(pending, WDDM_GPU_RESP_EVENT)
    }

    /// Posts a PREEMPT.
    pub fn post_preempt(&mut self) -> Pending {
        self.post_bare(WDDM_GPU_CMD_PREEMPT)
    }

    /// Waits for the answer to a PREEMPT (a PREEMPT response of exactly its size).
    pub fn wait_preempt(&mut self, pending: Pending) -> WddmGpuRespPreempt {
        self.wait_typed(pending, WDDM_GPU_RESP_PREEMPT)
    }

    /// QUERY_ENGINE_STATUS of `node`, and its answer (an ENGINE_STATUS response of exactly its
    /// size).
    pub fn query_engine_status(&mut self, node: u32) -> WddmGpuRespEngineStatus {
        let request = WddmGpuCmdQueryEngineStatus {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_QUERY_ENGINE_STATUS),
            node_ordinal: node,
            reserved: 0,
        };
        let pending = self.post(request.as_bytes(), SLOT_ROOM);
        self.wait_typed(pending, WDDM_GPU_RESP_ENGINE_STATUS)
    }

    /// SET_POWER_STATE (`DxgkDdiSetPowerState`) to `state` for `action`; returns the answer.
    pub fn set_power_state(&mut self, state: u32, action: u32) -> Reply {
        let request = WddmGpuCmdSetPowerState {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_SET_POWER_STATE),
            device_power_state: state,
            action,
        };
        self.request(request.as_bytes(), SLOT_ROOM)
    }

    /// Posts a RESET (the driver's, `DxgkDdiResetFromTimeout`).
    pub fn post_reset(&mut self) -> Pending {
        self.post_bare(WDDM_GPU_CMD_RESET)
    }

    /// Waits for the answer to a RESET, which must be a bare OK_NODATA header.
    pub fn wait_reset(&mut self, pending: Pending) {
        let reply = self.wait_reply(pending);
        assert_eq!(
            reply.bytes,
            WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_NODATA).as_bytes(),
            "{reply:?}"
        );
    }

    /// REGISTER_STATUS_PAGE at `address` (0 unregisters); returns the answer.
    pub fn register_status_page(&mut self, address: u64) -> Reply {
        let request = WddmGpuCmdRegisterStatusPage {
            hdr: WddmGpuCtrlHdr::with_type(WDDM_GPU_CMD_REGISTER_STATUS_PAGE),
            address,
        };
        self.request(request.as_bytes(), BUFFER_SIZE)
    }

    /// The status page's header at `address`, as the device last wrote it.
    pub fn status_page(&self, address: u64) -> WddmGpuStatusPage {
        fence(Ordering::SeqCst);
        let bytes = self.read_ram(address, std::mem::size_of::<WddmGpuStatusPage>());
        WddmGpuStatusPage::read_from_bytes(&bytes).unwrap()
    }

    /// Fault-ring record `sequence` (taken modulo the ring size) of the status page at
    /// `address`.
    pub fn fault_record(&self, address: u64, sequence: u32) -> WddmGpuFaultRecord {
        fence(Ordering::SeqCst);
        let slot = u64::from(sequence % WDDM_GPU_FAULT_RING_ENTRIES);
        let at = address
            + u64::from(WDDM_GPU_FAULT_RING_OFFSET)
            + slot * std::mem::size_of::<WddmGpuFaultRecord>() as u64;
        let bytes = self.read_ram(at, std::mem::size_of::<WddmGpuFaultRecord>());
        WddmGpuFaultRecord::read_from_bytes(&bytes).unwrap()
    }

    /// Writes a frame list (little-endian page-frame numbers) at `gpa`.
    pub fn write_frame_list(&self, gpa: u64, frames: &[u64]) {
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_le_bytes()).collect();
        self.write_ram(gpa, &bytes);
    }

    /// Returns once the device has taken every request posted so far from the ring: it takes
    /// them in order, so an answer to a later request proves the earlier ones were seen. Needed
    /// before something that does not go through the queue (a memory-table change, a ring
    /// stop) is expected to find posted WAIT_EVENTs.
    pub fn flush_queue(&mut self) {
        let info = self.capset_info();
        assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
    }

    /// Proves the backend still serves: the process runs and GET_CAPSET_INFO is answered.
    pub fn assert_still_serving(&mut self) {
        assert!(
            self.backend.is_running(),
            "backend died:\n{}",
            self.backend.log()
        );
        let info = self.capset_info();
        assert_eq!(info.capset_id, WDDM_GPU_CAPSET_ID);
    }
}
