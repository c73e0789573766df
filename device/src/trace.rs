//! `--trace FILE`: every submission and packet as a Chrome trace-event JSON timeline, which
//! Perfetto and chrome://tracing open.

use std::io;
use std::path::Path;

use crate::stats::{PacketRecord, SubmissionRecord};

/// The timeline file being written.
pub struct Trace {}

impl Trace {
    /// Creates (truncates) the trace file.
    pub fn create(_path: &Path) -> io::Result<Self> {
        Ok(Self {})
    }

    /// A packet executed.
    pub fn packet(&self, _packet: &PacketRecord) {}

    /// A submission was answered; the file is flushed here.
    pub fn submission(&self, _submission: &SubmissionRecord) {}
}
