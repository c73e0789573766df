//! Why a test failed: a sentence for the log. Any error converts into one, so test bodies can
//! use `?` on every driver call.

use std::fmt;

/// A test failure reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(err: E) -> Self {
        Self(err.to_string())
    }
}

/// Result of a test step.
pub type Outcome<T = ()> = Result<T, Failure>;

/// Fails with `reason` unless `cond` holds.
pub fn ensure(cond: bool, reason: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(Failure(reason()))
    }
}
