//! A backend over a real GPU, driven as the vring worker and the request thread drive it: rings
//! in guest memory written from the driver's side with virtio-queue's mock queue, a
//! `VringRwLock` over each, and call eventfds read back without blocking.

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vhost_user_backend::{VhostUserBackendMut, VringRwLock, VringT};
use virtio_queue::desc::split::{Descriptor as SplitDescriptor, VirtqUsedElem};
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{
    Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard,
    GuestMemoryMmap,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use zerocopy::{FromBytes, IntoBytes};

use crate::observe::stats::Stats;
use crate::testkit::scratch::ScratchFile;
use crate::testkit::{gpu_rig, guest};
use crate::transport::backend::{BarModeRequest, WddmGpuBackend};
use crate::transport::queue::{CONTROL_QUEUE, CURSOR_QUEUE};

pub const RAM: u64 = 32 << 20;
pub const VRAM: u64 = 64 << 20;
pub const VRAM_GPA: u64 = 0xe000_0000;
/// Descriptors per ring.
pub const QUEUE_SIZE: u16 = 16;
/// Where each ring's descriptor table starts (the available ring follows it).
const RING_BASE: [u64; 2] = [0x10_0000, 0x11_0000];
/// Where each ring's used ring starts, past the available ring. Not where virtio-queue's mock
/// puts it: the mock ends the available ring one byte per entry after its start, not two, so
/// its used ring overlaps the available ring's second half and `used_event`, and the device's
/// used entries overwrite what the driver wrote there.
const USED_OFFSET: u64 = 0x400;
/// Request buffer `n` of queue `q` at `REQUESTS + q * 1 MiB + n * 4 KiB`, responses likewise.
const REQUESTS: u64 = 0x20_0000;
const RESPONSES: u64 = 0x40_0000;
/// DMA buffers of submissions.
pub const DMA: u64 = 0x60_0000;
/// What a response buffer holds before the device writes it.
pub const UNTOUCHED: u8 = 0xa5;
/// How long a test waits for an answer before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The backend, its GPU's counters, the memory table QEMU would share, and the two rings as the
/// vhost-user-backend crate holds them.
pub struct Rig {
    pub backend: WddmGpuBackend,
    pub stats: Arc<Stats>,
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    vrings: Vec<VringRwLock>,
    /// The test's end of each ring's call eventfd.
    calls: Vec<Option<EventFd>>,
    event_idx: bool,
    bar: u64,
    vram_file: ScratchFile,
}

impl Rig {
    /// A backend with `VRAM` bytes of VRAM whose BAR is at `VRAM_GPA`, `RAM` bytes of guest RAM,
    /// and EVENT_IDX negotiated or not; its memory table is installed, the rings are not set up.
    pub fn new(name: &str, event_idx: bool) -> Self {
        let vram_file = ScratchFile::new(&format!("transport-{name}"));
        let (gpu, stats) = gpu_rig::gpu_without_vblanks(&vram_file, VRAM);
        let mut backend = WddmGpuBackend::new(gpu, BarModeRequest::Ivshmem);
        backend.set_event_idx(event_idx);
        let mem = guest::ram_and_window(RAM, vram_file.path(), VRAM, VRAM_GPA);
        let atomic = GuestMemoryAtomic::new(mem);
        let vrings = (0..2)
            .map(|_| VringRwLock::new(atomic.clone(), 1024).unwrap())
            .collect();
        backend.update_memory(atomic.clone()).unwrap();
        Self {
            backend,
            stats,
            atomic,
            vrings,
            calls: vec![None, None],
            event_idx,
            bar: VRAM_GPA,
            vram_file,
        }
    }

    /// The memory table of this moment, for the driver's side of the rings.
    pub fn memory(&self) -> GuestMemoryLoadGuard<GuestMemoryMmap> {
        self.atomic.memory()
    }

    /// Sets `ring` up on its queue at avail and used index 0 (SET_VRING_NUM, _BASE, _ADDR,
    /// _KICK, _CALL, _ENABLE), with a fresh call eventfd.
    pub fn set_up(&mut self, ring: &Ring<'_>) {
        let vring = &self.vrings[ring.queue];
        vring.set_queue_size(QUEUE_SIZE);
        vring
            .set_queue_info(
                ring.mock.desc_table_addr().0,
                ring.mock.avail_addr().0,
                ring.used_addr(),
            )
            .unwrap();
        vring.set_queue_event_idx(self.event_idx);
        vring.set_queue_next_avail(0);
        vring.set_queue_next_used(0);
        self.start(ring.queue);
    }

    /// A new ring for `queue` in `mem`, set up on its queue as [`Rig::set_up`] does.
    pub fn ring<'m>(&mut self, mem: &'m GuestMemoryMmap, queue: u16) -> Ring<'m> {
        let ring = Ring::new(mem, queue);
        self.set_up(&ring);
        ring
    }

    fn start(&mut self, queue: usize) {
        let vring = &self.vrings[queue];
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        let call = EventFd::new(EFD_NONBLOCK).unwrap();
        let theirs = call.try_clone().unwrap().into_raw_fd();
        // SAFETY: `theirs` is a fresh duplicate that nothing else owns.
        vring.set_call(Some(unsafe { File::from_raw_fd(theirs) }));
        self.calls[queue] = Some(call);
    }

    /// What QEMU sends at a VM stop: both rings disabled, GET_VRING_BASE of the control ring
    /// (the ring stopped, then the backend told); returns the index it stopped at.
    pub fn stop(&mut self) -> u16 {
        for vring in &self.vrings {
            vring.set_enabled(false);
        }
        let control = &self.vrings[usize::from(CONTROL_QUEUE)];
        control.set_queue_ready(false);
        self.backend.stop_vring(u32::from(CONTROL_QUEUE)).unwrap();
        let stopped = control.queue_next_avail();
        control.set_call(None);
        self.calls[usize::from(CONTROL_QUEUE)] = None;
        stopped
    }

    /// What QEMU sends at `cont`: the control ring started again at avail index `base`, both
    /// rings enabled; then the kick eventfd QEMU hands over already signalled.
    pub fn restart(&mut self, base: u16) {
        self.vrings[usize::from(CONTROL_QUEUE)].set_queue_next_avail(base);
        self.start(usize::from(CONTROL_QUEUE));
        self.vrings[usize::from(CURSOR_QUEUE)].set_enabled(true);
        self.kick(CONTROL_QUEUE);
    }

    /// A kick of `queue`, handled as the vring worker handles it; it must not fail.
    pub fn kick(&mut self, queue: u16) {
        self.try_kick(queue)
            .expect("handle_event failed: the vring worker would end");
    }

    pub fn try_kick(&mut self, queue: u16) -> io::Result<()> {
        self.backend
            .handle_event(queue, EventSet::IN, &self.vrings, 0)
    }

    /// Whether the device signalled `queue`'s call eventfd since the last look.
    pub fn called(&self, queue: u16) -> bool {
        let Some(call) = &self.calls[usize::from(queue)] else {
            return false;
        };
        match call.read() {
            Ok(_) => true,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => false,
            Err(error) => panic!("call eventfd unreadable: {error}"),
        }
    }

    /// A new memory table with the VRAM BAR at `address`, as QEMU sends after the guest moved
    /// it; RAM stays the same region.
    pub fn move_bar(&mut self, address: u64) {
        let next = guest::bar_moved(
            &self.atomic.memory(),
            self.vram_file.path(),
            VRAM,
            self.bar,
            address,
        );
        self.bar = address;
        self.install(next).unwrap();
    }

    /// Installs `table` where the rings see it, then tells the backend (SET_MEM_TABLE).
    pub fn install(&mut self, table: GuestMemoryMmap) -> io::Result<()> {
        let _ = self.atomic.lock().map(|guard| guard.replace(table));
        self.backend.update_memory(self.atomic.clone())
    }

    /// `len` bytes of VRAM from `offset`, read through the BAR.
    pub fn vram(&self, offset: u64, len: usize) -> Vec<u8> {
        guest::read(&self.memory(), self.bar + offset, len)
    }

    pub fn vram_write(&self, offset: u64, bytes: &[u8]) {
        guest::write(&self.memory(), self.bar + offset, bytes);
    }

    /// Control requests answered or refused so far, and of those refused.
    pub fn requests(&self) -> (u64, u64) {
        let snapshot = self.stats.snapshot();
        (snapshot.requests, snapshot.refused_requests)
    }
}

/// One ring from the driver's side.
pub struct Ring<'m> {
    mock: MockSplitQueue<'m, GuestMemoryMmap>,
    mem: &'m GuestMemoryMmap,
    queue: usize,
    next_descriptor: u16,
    next_buffer: u64,
}

/// A chain the driver posted.
#[derive(Clone, Copy, Debug)]
pub struct Posted {
    pub head: u16,
    /// Its device-writable buffer.
    pub response: u64,
}

impl Posted {
    /// Its entry in the used ring once the device wrote `written` bytes into it, as
    /// [`Ring::used`] lists it.
    pub fn used_entry(self, written: usize) -> (u32, u32) {
        (u32::from(self.head), u32::try_from(written).unwrap())
    }
}

impl<'m> Ring<'m> {
    /// A new ring for `queue` (its indices and flags zero), laid out at that queue's place.
    pub fn new(mem: &'m GuestMemoryMmap, queue: u16) -> Self {
        let queue = usize::from(queue);
        let ring = Self {
            mock: MockSplitQueue::create(mem, GuestAddress(RING_BASE[queue]), QUEUE_SIZE),
            mem,
            queue,
            next_descriptor: 0,
            next_buffer: 0,
        };
        // The used ring of a ring set up before at this place starts over too.
        let used_bytes = 4 + 8 * usize::from(QUEUE_SIZE) + 2;
        guest::write(mem, ring.used_addr(), &vec![0; used_bytes]);
        ring
    }

    /// Posts `request` (device-readable) and a response buffer of `room` bytes
    /// (device-writable, filled with [`UNTOUCHED`]).
    pub fn post(&mut self, request: &[u8], room: u32) -> Posted {
        let (address, response) = self.buffers();
        self.mem
            .write_slice(&vec![UNTOUCHED; room as usize], GuestAddress(response))
            .unwrap();
        self.post_request(address, request, response, room)
    }

    /// Posts `request` with a response buffer at `response` (anywhere, e.g. in the VRAM BAR).
    pub fn post_to(&mut self, request: &[u8], response: u64, room: u32) -> Posted {
        let (address, _) = self.buffers();
        self.post_request(address, request, response, room)
    }

    /// Writes `request` at `address` and posts it with the `room` bytes at `response`.
    fn post_request(&mut self, address: u64, request: &[u8], response: u64, room: u32) -> Posted {
        self.mem
            .write_slice(request, GuestAddress(address))
            .unwrap();
        let head = self.post_chain(&[
            (address, u32::try_from(request.len()).unwrap(), false),
            (response, room, true),
        ]);
        Posted { head, response }
    }

    fn buffers(&mut self) -> (u64, u64) {
        let offset = self.queue as u64 * (1 << 20) + self.next_buffer * 0x1000;
        self.next_buffer += 1;
        (REQUESTS + offset, RESPONSES + offset)
    }

    /// Writes a chain of `(address, length, device-writable)` buffers into the descriptor
    /// table and makes it available; returns its head.
    pub fn post_chain(&mut self, buffers: &[(u64, u32, bool)]) -> u16 {
        let head = self.next_descriptor;
        let last = buffers.len() - 1;
        let descriptors: Vec<RawDescriptor> = buffers
            .iter()
            .enumerate()
            .map(|(index, &(address, len, writable))| {
                let mut flags = 0;
                if writable {
                    flags |=
                        u16::try_from(virtio_bindings::bindings::virtio_ring::VRING_DESC_F_WRITE)
                            .unwrap();
                }
                let mut next = 0;
                if index < last {
                    flags |=
                        u16::try_from(virtio_bindings::bindings::virtio_ring::VRING_DESC_F_NEXT)
                            .unwrap();
                    next = head + u16::try_from(index).unwrap() + 1;
                }
                RawDescriptor::from(SplitDescriptor::new(address, len, flags, next))
            })
            .collect();
        assert!(usize::from(head) + descriptors.len() <= usize::from(QUEUE_SIZE));
        self.mock.add_desc_chains(&descriptors, head).unwrap();
        self.next_descriptor += u16::try_from(descriptors.len()).unwrap();
        head
    }

    /// Makes `head` available again, as a driver re-posting a head it does not own would.
    pub fn repost(&self, head: u16) {
        let avail = self.mock.avail();
        let index = avail.idx().load();
        avail
            .ring()
            .ref_at(usize::from(index % QUEUE_SIZE))
            .unwrap()
            .store(head);
        avail.idx().store(index.wrapping_add(1));
    }

    /// Sets the avail index the driver publishes, whatever it is.
    pub fn set_avail_index(&self, index: u16) {
        self.mock.avail().idx().store(index);
    }

    /// Sets `used_event` (EVENT_IDX): the device is to signal once the used index passes it.
    pub fn set_used_event(&self, index: u16) {
        let address = self.mock.avail_addr().0 + 4 + 2 * u64::from(QUEUE_SIZE);
        self.mem.write_obj(index, GuestAddress(address)).unwrap();
    }

    /// `avail_event` (EVENT_IDX): the avail index the device wants a kick after.
    pub fn avail_event(&self) -> u16 {
        let address = self.used_addr() + 4 + 8 * u64::from(QUEUE_SIZE);
        self.mem.read_obj(GuestAddress(address)).unwrap()
    }

    /// Where the used ring is ([`USED_OFFSET`]).
    fn used_addr(&self) -> u64 {
        RING_BASE[self.queue] + USED_OFFSET
    }

    /// Every used entry so far, as `(head, bytes written)`.
    pub fn used(&self) -> Vec<(u32, u32)> {
        let ring = self.used_addr();
        let used_index: u16 = self.mem.read_obj(GuestAddress(ring + 2)).unwrap();
        (0..used_index)
            .map(|index| {
                let entry = ring + 4 + 8 * u64::from(index % QUEUE_SIZE);
                let element: VirtqUsedElem = self.mem.read_obj(GuestAddress(entry)).unwrap();
                (element.id(), element.len())
            })
            .collect()
    }

    /// Waits until `count` chains are used (the engine thread answers some); fails after `WAIT`.
    pub fn wait_used(&self, count: usize) -> Vec<(u32, u32)> {
        let start = Instant::now();
        loop {
            let used = self.used();
            if used.len() >= count {
                return used;
            }
            assert!(
                start.elapsed() < WAIT,
                "{} of {count} chains used after {WAIT:?}",
                used.len()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Writes `bytes` at `address` of guest RAM.
    pub fn write(&self, address: u64, bytes: &[u8]) {
        guest::write(self.mem, address, bytes);
    }

    /// The `len` bytes at `address`.
    pub fn read(&self, address: u64, len: usize) -> Vec<u8> {
        guest::read(self.mem, address, len)
    }

    /// The response of type `T` the device wrote for `posted`.
    pub fn response<T: FromBytes + IntoBytes>(&self, posted: Posted) -> T {
        let bytes = self.read(posted.response, size_of::<T>());
        T::read_from_bytes(&bytes).unwrap()
    }

    /// Whether `posted`'s response buffer still holds only what the driver put there.
    pub fn untouched(&self, posted: Posted, room: usize) -> bool {
        self.read(posted.response, room)
            .iter()
            .all(|&byte| byte == UNTOUCHED)
    }
}
