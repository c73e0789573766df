//! What an engine is told while it runs one recorded run again: it is deferred after the
//! packets the recorded run completed when that run was deferred, interrupted at the recorded
//! interruption check when it was interrupted, and every packet goes to the statistics and the
//! trace as it does in the backend. The paging engine's GPU virtual addressing reaches the
//! replay's contexts, rebuilt from the recorded context commands. The same hooks run the
//! virtual node's engine.

use std::cell::Cell;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use wddm_gpu_abi::submit::SubmitStatus;

use crate::engine::record::PacketRecord;
use crate::engine::virtual_engine::VirtualHooks;
use crate::engine::{EngineHooks, Fault, Interruption};
use crate::mmu::contexts::Contexts;
use crate::mmu::space::AddressSpace;
use crate::mmu::walk::TableAddress;
use crate::observe::recording::format::{Run, RunEnd};
use crate::observe::stats::Stats;
use crate::observe::trace::Trace;

/// The hooks of one replayed run.
pub struct ReplayHooks<'a> {
    run: Run,
    /// Packets asked about so far (each asks once, before it runs).
    asked: u32,
    /// Interruption checks answered "go on".
    checks: Cell<u32>,
    /// The injected fault the backend ran this run with: the packet (0 = the run's first) and
    /// its status.
    injected: Option<(u32, SubmitStatus)>,
    stats: &'a Stats,
    trace: Option<&'a Trace>,
    contexts: &'a Contexts,
}

impl<'a> ReplayHooks<'a> {
    /// Hooks that end the run as `run` ended, faulting packet `injected.0` of the run with
    /// `injected.1` as the backend's injection did.
    pub fn new(
        run: Run,
        injected: Option<(u32, SubmitStatus)>,
        stats: &'a Stats,
        trace: Option<&'a Trace>,
        contexts: &'a Contexts,
    ) -> Self {
        Self {
            run,
            asked: 0,
            checks: Cell::new(0),
            injected,
            stats,
            trace,
            contexts,
        }
    }

    /// The interruption the recorded run met at this check, if this is the one.
    fn stop_here(&self) -> Option<Interruption> {
        if let RunEnd::Interrupted { by, checks } = self.run.end {
            if self.checks.get() == checks {
                return Some(by);
            }
        }
        self.checks.set(self.checks.get().saturating_add(1));
        None
    }
}

impl EngineHooks for ReplayHooks<'_> {
    fn interruption(&self) -> Option<Interruption> {
        self.stop_here()
    }

    fn defer(&mut self, _work: u64) -> bool {
        self.asked = self.asked.saturating_add(1);
        self.run.end == RunEnd::Deferred && self.asked > self.run.packets
    }

    fn injected_fault(&mut self, index: u32) -> Option<Fault> {
        let (packet, status) = self.injected?;
        (index == packet).then_some(Fault::Injected(status))
    }

    fn packet(&mut self, record: &PacketRecord) {
        self.stats.record_packet(record);
        if let Some(trace) = self.trace {
            trace.packet(record);
        }
    }

    fn flush_tlb(&mut self, root: TableAddress, range: Option<Range<u64>>) {
        self.contexts.flush(root, range);
    }

    fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        self.contexts.paging_space()
    }

    // The status page and events are the scheduler's: a replay writes none.
    fn monitored_fence(&mut self, _address: u64, _value: u64) {}
}

impl VirtualHooks for ReplayHooks<'_> {
    fn interruption(&self) -> Option<Interruption> {
        self.stop_here()
    }

    fn monitored_fence(&mut self, _address: u64, _value: u64) {}
}
