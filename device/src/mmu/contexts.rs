//! The contexts with GPU virtual addressing (`DxgkDdiCreateContext` with `VirtualAddressing`):
//! each an address space ([`AddressSpace`]) on a node, with the root `SET_ROOT_PAGE_TABLE`
//! bound. At most one context lives on the paging node (the system paging process).
//!
//! Locks: the table ([`Contexts`], behind the GPU's mutex) before any one address space; the
//! virtual node takes a space's lock for one chunk of work at a time, so a FLUSH_TLB on the
//! paging node waits at most that long.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use wddm_gpu_abi::context::{
    WddmGpuCmdCreateContext, WddmGpuCmdSetRootPageTable, WDDM_GPU_CONTEXT_FLAGS_KNOWN,
    WDDM_GPU_CONTEXT_FLAG_CHECK_TLB, WDDM_GPU_NODE_COUNT, WDDM_GPU_NODE_PAGING,
};
use wddm_gpu_abi::gpummu_rules::MmuGeometry;

use super::space::{AddressSpace, RootError};
use super::walk::TableAddress;
use crate::support::sync::lock;

/// One context.
pub struct Context {
    /// The node it runs on.
    pub node: u32,
    /// Its address space, shared with the node that runs its work.
    pub space: Arc<Mutex<AddressSpace>>,
}

/// Why a context command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The layout has no `[gpummu]`.
    #[error("the layout has no GpuMmu: contexts with GPU virtual addressing need [gpummu]")]
    NoGpuMmu,
    /// The id is at or past `max_contexts`.
    #[error("context id {id} is past max_contexts ({max})")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// `max_contexts`.
        max: u32,
    },
    /// The id is in use.
    #[error("context {0} already exists")]
    InUse(u32),
    /// No context has the id.
    #[error("context {0} does not exist")]
    NoSuchContext(u32),
    /// The node does not exist.
    #[error("node {0} does not exist (nodes 0, paging, and 1, virtual)")]
    BadNode(u32),
    /// A second context on the paging node.
    #[error("the paging node already has its context ({0})")]
    SecondPagingContext(u32),
    /// Unknown flags or a reserved field.
    #[error("{0}")]
    Reserved(&'static str),
    /// The root was refused.
    #[error("{0}")]
    Root(#[from] RootError),
}

/// Every context of the device.
pub struct Contexts {
    geometry: Option<MmuGeometry>,
    slots: Vec<Option<Context>>,
    /// The checker runs: every context checks its cached translations, asked or not.
    check_all: bool,
}

impl Contexts {
    /// No contexts, room for `max_contexts` of the geometry (none without one).
    pub fn new(geometry: Option<MmuGeometry>) -> Self {
        let max = geometry.map_or(0, |geometry| geometry.caps().max_contexts);
        Self {
            geometry,
            slots: (0..max).map(|_| None).collect(),
            check_all: false,
        }
    }

    /// Turns the GpuMmu checking mode on for every context, existing and new (the checker).
    pub fn check_every_context(&mut self) {
        self.check_all = true;
        for context in self.slots.iter().flatten() {
            lock(&context.space).set_checking(true);
        }
    }

    /// The geometry contexts walk.
    pub fn geometry(&self) -> Option<&MmuGeometry> {
        self.geometry.as_ref()
    }

    fn slot(&mut self, id: u32) -> Result<&mut Option<Context>, ContextError> {
        let max = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        usize::try_from(id)
            .ok()
            .and_then(|index| self.slots.get_mut(index))
            .ok_or(ContextError::IdOutOfRange { id, max })
    }

    /// CREATE_CONTEXT.
    pub fn create(&mut self, cmd: &WddmGpuCmdCreateContext) -> Result<(), ContextError> {
        if self.geometry.is_none() {
            return Err(ContextError::NoGpuMmu);
        }
        if cmd.flags & !WDDM_GPU_CONTEXT_FLAGS_KNOWN != 0 {
            return Err(ContextError::Reserved("create_context: unknown flags"));
        }
        if cmd.reserved != 0 {
            return Err(ContextError::Reserved(
                "create_context: reserved is not zero",
            ));
        }
        if cmd.node_ordinal >= WDDM_GPU_NODE_COUNT {
            return Err(ContextError::BadNode(cmd.node_ordinal));
        }
        if cmd.node_ordinal == WDDM_GPU_NODE_PAGING {
            if let Some(existing) = self.paging_context() {
                return Err(ContextError::SecondPagingContext(existing));
            }
        }
        let asked = cmd.flags & WDDM_GPU_CONTEXT_FLAG_CHECK_TLB != 0;
        let check_all = self.check_all;
        let slot = self.slot(cmd.context_id)?;
        if slot.is_some() {
            return Err(ContextError::InUse(cmd.context_id));
        }
        let mut space = AddressSpace::new(asked);
        space.set_checking(asked || check_all);
        *slot = Some(Context {
            node: cmd.node_ordinal,
            space: Arc::new(Mutex::new(space)),
        });
        Ok(())
    }

    /// DESTROY_CONTEXT: work of it already running finishes with the space it holds.
    pub fn destroy(&mut self, id: u32) -> Result<(), ContextError> {
        self.slot(id)?
            .take()
            .map(drop)
            .ok_or(ContextError::NoSuchContext(id))
    }

    /// SET_ROOT_PAGE_TABLE.
    pub fn set_root(&mut self, cmd: &WddmGpuCmdSetRootPageTable) -> Result<(), ContextError> {
        let geometry = self.geometry.ok_or(ContextError::NoGpuMmu)?;
        if cmd.reserved != 0 {
            return Err(ContextError::Reserved(
                "set_root_page_table: reserved is not zero",
            ));
        }
        let context = self
            .slot(cmd.context_id)?
            .as_ref()
            .ok_or(ContextError::NoSuchContext(cmd.context_id))?;
        let table = TableAddress {
            segment: cmd.segment_id,
            address: cmd.address,
        };
        lock(&context.space).set_root(&geometry, table, u64::from(cmd.num_entries))?;
        Ok(())
    }

    /// The address space of context `id`, if it lives on `node`.
    pub fn space(&self, id: u32, node: u32) -> Option<Arc<Mutex<AddressSpace>>> {
        let context = self.slots.get(usize::try_from(id).ok()?)?.as_ref()?;
        (context.node == node).then(|| context.space.clone())
    }

    /// What a submission of context `id` on `node` walks: its address space and the geometry,
    /// if the context lives there (the virtual node and the replay take both at once).
    pub fn walkable(&self, id: u32, node: u32) -> Option<(Arc<Mutex<AddressSpace>>, MmuGeometry)> {
        Some((self.space(id, node)?, self.geometry?))
    }

    /// Context `id`'s node and address space, whatever its node (live inspection).
    pub fn any_space(&self, id: u32) -> Option<(u32, Arc<Mutex<AddressSpace>>)> {
        let context = self.slots.get(usize::try_from(id).ok()?)?.as_ref()?;
        Some((context.node, context.space.clone()))
    }

    /// The paging node's context, if created.
    pub fn paging_context(&self) -> Option<u32> {
        (0u32..)
            .zip(&self.slots)
            .find(|(_, slot)| {
                slot.as_ref()
                    .is_some_and(|c| c.node == WDDM_GPU_NODE_PAGING)
            })
            .map(|(id, _)| id)
    }

    /// The address space of the paging node's context (the paging process's GPU VAs), if
    /// created.
    pub fn paging_space(&self) -> Option<Arc<Mutex<AddressSpace>>> {
        self.space(self.paging_context()?, WDDM_GPU_NODE_PAGING)
    }

    /// FLUSH_TLB: every context whose root is `root` drops the translations of `range`.
    pub fn flush(&self, root: TableAddress, range: Option<Range<u64>>) -> usize {
        let mut flushed = 0;
        for context in self.slots.iter().flatten() {
            let mut space = lock(&context.space);
            if space.root().is_some_and(|bound| bound.table == root) {
                space.flush(range.clone());
                flushed += 1;
            }
        }
        flushed
    }

    /// Device reset: every context is gone.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|slot| *slot = None);
    }
}
