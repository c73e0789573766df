//! PCI access from user space: config-space parsing (pure) and the sysfs files of a function.

pub mod config;
pub mod sysfs;
