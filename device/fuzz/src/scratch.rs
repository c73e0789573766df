//! Files the targets create (VRAM files): in `$WDDM_FUZZ_TMP` (scripts/fuzz points it at a
//! directory of its own and removes it afterwards) or `/dev/shm`, named with the process id so
//! parallel fuzzing processes never share one, and removed when the process exits normally.

use std::path::PathBuf;
use std::sync::{Mutex, Once};

static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

extern "C" fn remove_files() {
    if let Ok(files) = FILES.lock() {
        for path in files.iter() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A path for a scratch file called `name`, removed at exit.
pub fn path(name: &str) -> PathBuf {
    let dir = std::env::var_os("WDDM_FUZZ_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let path = dir.join(format!("wddm-fuzz-{}-{name}", std::process::id()));
    HOOK.call_once(|| {
        // SAFETY: registers a plain function without captured state; it only removes files.
        unsafe { libc::atexit(remove_files) };
    });
    FILES.lock().unwrap().push(path.clone());
    path
}
