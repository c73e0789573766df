//! The commands: `probe` (bring-up only), `slice` (the layout and one scattered round trip,
//! printed as checks), `suite` (named valid, layout, VRAM BAR, hostile and paging tests) and
//! `paging` (the paging tests alone); `bench` (a short paging benchmark, also run after the
//! slice with `slice --bench`); `lifecycle` (the GPU in use across VM stop/cont and reset, with
//! a host helper); `scanout` (the primary surface from VRAM, flips and vblanks, with the host's
//! screendumps); `tdr` (the driver's timeout detection and recovery against each injection the
//! host arms).

pub mod bench;
pub mod gpuva;
pub mod lifecycle;
pub mod paging;
pub mod probe;
pub mod scanout;
pub mod setup;
pub mod slice;
pub mod suite;
pub mod tdr;

mod bar;
mod hostile;
mod segments;
mod valid;
