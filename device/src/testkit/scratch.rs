//! Scratch files and directories in the temporary directory, one name per test of this process,
//! removed when dropped (also when the test panics).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// `wddm-test-<pid>-<n>-<what>` in the temporary directory, nothing there yet.
fn fresh_path(what: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("wddm-test-{}-{number}-{what}", std::process::id());
    let path = std::env::temp_dir().join(name);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&path);
    path
}

/// A file path no other test uses; the file is removed when this is dropped.
pub struct ScratchFile {
    path: PathBuf,
}

impl ScratchFile {
    /// A fresh path; `what` names it for whoever finds it left behind.
    pub fn new(what: &str) -> Self {
        Self {
            path: fresh_path(what),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An empty directory no other test uses; removed with its contents when this is dropped.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// A fresh, empty directory; `what` names it.
    pub fn new(what: &str) -> Self {
        let path = fresh_path(what);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Removes the directory now, failing the test if that fails.
    pub fn remove(self) {
        std::fs::remove_dir_all(&self.path).unwrap();
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
