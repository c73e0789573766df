//! The segment layout: the model of segments and how GPU addresses resolve, the `--layout` file,
//! the WDDM rules a layout obeys, its `DXGK_QUERYSEGMENTOUT3`/`4` report, the capability-set blob
//! the driver reads, and the decoder of raw DXGK values for the command line.

pub mod capset;
pub mod dxgk_values;
pub mod file;
pub mod link;
mod model;
pub mod report;
pub mod rules;

pub use self::model::*;
