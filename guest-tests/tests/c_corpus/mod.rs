//! What the corpus tests share: writing bytes as a C array's body, and keeping a generated C
//! header of `cdev/tests/` equal to what its test makes of the corpus.

use std::path::PathBuf;

/// Bytes as C hex literals, comma-separated.
pub fn hex(bytes: &[u8]) -> String {
    let bytes: Vec<String> = bytes.iter().map(|b| format!("0x{b:02x}")).collect();
    bytes.join(", ")
}

/// Checks that `cdev/tests/<header>` holds `out`, which the integration test `test` makes;
/// with `WDDM_GPU_UPDATE_HEADERS` set, writes it instead.
pub fn keep_header_current(header: &str, test: &str, out: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("cdev/tests")
        .join(header);
    if std::env::var_os("WDDM_GPU_UPDATE_HEADERS").is_some() {
        std::fs::write(&path, out).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == out,
        "{} is stale: run `WDDM_GPU_UPDATE_HEADERS=1 cargo test -p wddm-guest-tests --test {test}`",
        path.display()
    );
}
