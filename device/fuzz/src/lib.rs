//! Shared code of the fuzz targets (`fuzz_targets/`): the byte reader every target decodes its
//! input with, the writer the seed generator (`examples/seeds.rs`) encodes seeds with, the fixed
//! world of the engine target, the in-process vhost-user frontend of the backend target, and the
//! page-table memory and operations of the gpummu_walk target.
//!
//! Inputs are decoded field by field from the front; a field past the end of the input reads as
//! zero, so every byte string is a valid input and short ones mean "the defaults".

pub mod engine_world;
pub mod frontend;
pub mod input;
pub mod scratch;
pub mod virtual_world;
pub mod walk_input;

/// `WDDM_FUZZ_DEBUG=1` in the environment: the targets print what each input does (to see what a
/// seed does); read once.
pub fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("WDDM_FUZZ_DEBUG").is_some())
}
