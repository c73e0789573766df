//! Engine hooks for the tests: counting interruption checks, stopping on request, recording
//! fences and TLB flushes, and rewriting guest memory while a packet executes.

use std::cell::Cell;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::engine::{EngineHooks, Interruption};
use crate::mmu::space::AddressSpace;
use crate::mmu::walk::TableAddress;

/// Counts interruption checks (stopping with `stop` from call `stop.0` on) and records fences,
/// sampling guest memory (RAM or, through the window, VRAM) at each.
#[derive(Default)]
pub(super) struct Hooks {
    pub(super) calls: Cell<u32>,
    pub(super) stop: Option<(u32, Interruption)>,
    pub(super) fences: Vec<u32>,
    pub(super) sample: Option<(GuestMemoryMmap<()>, Vec<u64>)>,
    pub(super) samples: Vec<Vec<u8>>,
    pub(super) flushes: Vec<(TableAddress, Option<Range<u64>>)>,
    pub(super) paging_space: Option<Arc<Mutex<AddressSpace>>>,
    pub(super) monitored: Vec<(u64, u64)>,
}

impl EngineHooks for Hooks {
    fn interruption(&self) -> Option<Interruption> {
        let call = self.calls.get() + 1;
        self.calls.set(call);
        match self.stop {
            Some((from, fault)) if call >= from => Some(fault),
            _ => None,
        }
    }

    fn fence(&mut self, fence_id: u32) {
        self.fences.push(fence_id);
        if let Some((mem, addresses)) = &self.sample {
            let bytes = addresses
                .iter()
                .map(|&a| mem.read_obj::<u8>(GuestAddress(a)).unwrap())
                .collect();
            self.samples.push(bytes);
        }
    }

    fn flush_tlb(&mut self, root: TableAddress, range: Option<Range<u64>>) {
        self.flushes.push((root, range));
    }

    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        self.paging_space.clone()
    }

    fn monitored_fence(&mut self, address: u64, value: u64) {
        self.monitored.push((address, value));
    }
}

/// From its second interruption check on (the first one inside the first packet, which the
/// engine has copied by then), writes `writes` into guest memory.
pub(super) struct Rewriter {
    pub(super) mem: GuestMemoryMmap<()>,
    pub(super) calls: Cell<u32>,
    pub(super) writes: Vec<(u64, Vec<u8>)>,
}

impl EngineHooks for Rewriter {
    fn interruption(&self) -> Option<Interruption> {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() >= 2 {
            for (address, bytes) in &self.writes {
                self.mem.write_slice(bytes, GuestAddress(*address)).unwrap();
            }
        }
        None
    }

    fn flush_tlb(&mut self, _root: TableAddress, _range: Option<Range<u64>>) {}

    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        None
    }

    fn monitored_fence(&mut self, _address: u64, _value: u64) {}
}
