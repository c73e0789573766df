//! What decoding a request from the guest shares across queues: reading a command's fixed
//! structure, and why that fails.

use zerocopy::FromBytes;

/// Why a request could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its command's structure.
    #[error("request type {type_:#x} is {len} bytes, shorter than its {needed}-byte structure")]
    Truncated {
        /// Command type (0 if even the header is missing).
        type_: u32,
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
}

/// The `T` at the start of a request of type `type_`.
pub fn body<T: FromBytes>(type_: u32, bytes: &[u8]) -> Result<T, DecodeError> {
    T::read_from_prefix(bytes)
        .map(|(value, _)| value)
        .map_err(|_| DecodeError::Truncated {
            type_,
            len: bytes.len(),
            needed: std::mem::size_of::<T>(),
        })
}
