//! The commands: `probe` (bring-up only), `slice` (the layout and one scattered round trip,
//! printed as checks) and `suite` (named valid, layout, VRAM BAR and hostile tests).

pub mod probe;
pub mod setup;
pub mod slice;
pub mod suite;

mod bar;
mod hostile;
mod segments;
mod valid;
