//! The GPU's MMU for the WDDM 2.x GpuMmu model: it walks the page tables a KMD writes (in the
//! format of `wddm_gpu_abi::gpuva`, in the geometry a layout checked into an
//! [`MmuGeometry`](wddm_gpu_abi::gpummu_rules::MmuGeometry)), caches translations as hardware
//! does, and faults with the reason and level a `DmaPageFaulted` record needs.
//!
//! - [`walk`]: one walk, root to mapping entry, bounded by the level count.
//! - [`tables`]: where tables and pages live (guest RAM, memory segments), checked per read.
//! - [`tlb`]: the translation cache of one address space.
//! - [`space`]: an address space: root, cache, checking mode, runs for copies.
//! - [`placement`]: tables a walk found outside their level's segments, for the checker.
//! - [`fault`]: why a translation failed.
//! - [`contexts`]: every context with GPU virtual addressing, each an address space on a node.

pub mod contexts;
pub mod fault;
pub mod placement;
pub mod space;
pub mod tables;
pub mod tlb;
pub mod walk;

#[cfg(test)]
mod tests;
