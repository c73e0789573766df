//! Tests of the aperture and the packets beyond TRANSFER.
