//! The stats endpoint: a Unix socket answering `table`, `prometheus` and `json` requests while
//! the GPU runs (and `echo`, see [`crate::echo`]).
