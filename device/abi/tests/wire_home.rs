//! One home for the wire: no guest-visible struct or constant is declared outside `wddm-gpu-abi`.
//! Everything a guest sees (the PCI identity and transport, the virtqueues, the virtio-gpu and
//! WDDM commands, packets, capsets) is declared in this crate, exported to C as
//! `include/wddm_gpu.h`, and used from here by the backend, its tests, benches and fuzz targets
//! and the guest reference driver; a second declaration elsewhere could drift from it unseen.
//!
//! The test walks every `.rs` file of the repository outside `device/abi/`, `target/` and hidden
//! folders and fails, naming file and line, on:
//!
//! - a `const` or `static` whose name is in a guest-visible namespace ([`GUEST_PREFIXES`]:
//!   `VIRTIO_`, `VIRTQ_`, `VRING_`, `WDDM_GPU_`; `VHOST_USER_` is the host-side vhost-user
//!   protocol and is allowed);
//! - a `#[repr(C)]` (or `#[repr(C, …)]`) struct deriving zerocopy's `FromBytes` or `IntoBytes`
//!   (a wire struct), unless its name is in [`ALLOWED_BYTE_STRUCTS`] with the reason it is not
//!   a wire format. Entries are names, not paths, so that files may move.

use std::path::{Path, PathBuf};

/// Name prefixes of guest-visible constants.
const GUEST_PREFIXES: [&str; 4] = ["VIRTIO_", "VIRTQ_", "VRING_", "WDDM_GPU_"];

/// `#[repr(C)]` byte-viewable structs outside the ABI crate that are not wire formats: (struct
/// name, why). Keep it short; every entry must still exist.
const ALLOWED_BYTE_STRUCTS: [(&str, &str); 1] = [(
    "Line",
    "the display's PixelBuffer (pixel_buffer.rs): a cache-line-aligned chunk of host pixel \
     memory, viewed as bytes to copy rows in and out; it never crosses to the guest",
)];

/// One rule broken at one line.
#[derive(Debug, PartialEq, Eq)]
struct Offence {
    line: usize,
    what: String,
    /// The struct, for a byte-viewable `#[repr(C)]` struct.
    byte_struct: Option<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under `dir`, skipping `skip` (the ABI crate), `target` and hidden folders.
fn rust_files(dir: &Path, skip: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && path != skip {
                rust_files(&path, skip, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// `line` without its leading whitespace and visibility (`pub`, `pub(crate)`, …).
fn after_visibility(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = after.trim_start();
        if rest.starts_with('(') {
            rest = &rest[rest.find(')')? + 1..];
        }
        rest = rest.trim_start();
    }
    Some(rest)
}

/// The identifier `rest` starts with.
fn leading_identifier(rest: &str) -> &str {
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The name a `const`/`static` item on `line` declares, if it is one.
fn const_name(line: &str) -> Option<&str> {
    let rest = after_visibility(line)?;
    let rest = rest
        .strip_prefix("const ")
        .or_else(|| rest.strip_prefix("static "))?
        .trim_start();
    let rest = rest.strip_prefix("mut ").unwrap_or(rest).trim_start();
    Some(leading_identifier(rest))
}

/// The name a `struct` item on `line` declares, if it is one.
fn struct_name(line: &str) -> Option<&str> {
    let rest = after_visibility(line)?
        .strip_prefix("struct ")?
        .trim_start();
    Some(leading_identifier(rest))
}

/// Every broken rule in `source` (the text of one file); `allowed` names byte-viewable
/// structs that are not wire formats.
fn offences(source: &str, allowed: &[&str]) -> Vec<Offence> {
    let mut found = Vec::new();
    // The attributes seen since the last item, whitespace removed, and the bracket depth of the
    // attribute being read (attributes may span lines).
    let mut attributes = String::new();
    let mut depth = 0i32;
    for (index, line) in source.lines().enumerate() {
        let trimmed = line.trim();
        if depth > 0 || trimmed.starts_with("#[") {
            for c in trimmed.chars() {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    c if c.is_whitespace() => continue,
                    _ => {}
                }
                attributes.push(c);
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        if let Some(name) = const_name(line) {
            if GUEST_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
                found.push(Offence {
                    line: index + 1,
                    what: format!(
                        "constant {name} is in a guest-visible namespace: declare it in \
                         wddm-gpu-abi"
                    ),
                    byte_struct: None,
                });
            }
        }
        if let Some(name) = struct_name(line) {
            let repr_c = attributes.contains("repr(C)") || attributes.contains("repr(C,");
            let bytes = attributes.contains("FromBytes") || attributes.contains("IntoBytes");
            if repr_c && bytes && !allowed.contains(&name) {
                found.push(Offence {
                    line: index + 1,
                    what: format!(
                        "struct {name} is #[repr(C)] with FromBytes/IntoBytes, a wire struct: \
                         declare it in wddm-gpu-abi (or allow-list it in wire_home.rs with why \
                         it is not one)"
                    ),
                    byte_struct: Some(name.to_string()),
                });
            }
        }
        attributes.clear();
    }
    found
}

#[test]
fn no_guest_visible_declaration_outside_the_abi_crate() {
    let root = repo_root();
    let abi = Path::new(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .unwrap();
    let mut files = Vec::new();
    rust_files(&root, &abi, &mut files);
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("guest-tests/src/driver.rs")),
        "the walk missed the guest driver: it looked in {}",
        root.display()
    );
    let allowed: Vec<&str> = ALLOWED_BYTE_STRUCTS.iter().map(|(name, _)| *name).collect();
    let mut report = Vec::new();
    let mut allowed_seen = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let relative = file.strip_prefix(&root).unwrap().display().to_string();
        for offence in offences(&source, &[]) {
            match offence.byte_struct.as_deref() {
                Some(name) if allowed.contains(&name) => allowed_seen.push(name.to_string()),
                _ => report.push(format!("{relative}:{}: {}", offence.line, offence.what)),
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    for (name, why) in ALLOWED_BYTE_STRUCTS {
        assert!(
            allowed_seen.iter().any(|seen| seen == name),
            "allow-listed struct {name} ({why}) no longer exists: remove its entry"
        );
    }
}

#[test]
fn the_scanner_flags_an_offending_snippet() {
    let snippet = r#"
/// The vendor.
pub const VIRTIO_VENDOR: u16 = 0x1af4;
    pub(crate) static mut WDDM_GPU_THING: u32 = 1;
const VIRTQ_DESC_F_NEXT: u16 = 1;

#[derive(Clone, Copy,
    FromBytes, IntoBytes, Immutable)]
/// A descriptor.
#[repr(C)]
pub struct Desc {
    addr: u64,
}

#[derive(zerocopy::IntoBytes)]
#[repr(C, packed)]
struct Packed(u32);
"#;
    let lines: Vec<usize> = offences(snippet, &[]).iter().map(|o| o.line).collect();
    assert_eq!(lines, [3, 4, 5, 11, 17]);
    // The allow-list is by name.
    let lines: Vec<usize> = offences(snippet, &["Packed"])
        .iter()
        .map(|o| o.line)
        .collect();
    assert_eq!(lines, [3, 4, 5, 11]);
}

#[test]
fn the_scanner_passes_a_clean_snippet() {
    let snippet = r#"
// const VIRTIO_IN_A_COMMENT: u8 = 1;
/// `VIRTIO_F_VERSION_1` is the abi crate's.
use wddm_gpu_abi::features::VIRTIO_F_VERSION_1;
pub const VHOST_USER_PROTOCOL_F_MQ: u64 = 0;
const QUEUE_SIZE: u16 = 64;
const _: () = assert!(VIRTIO_F_VERSION_1 == 32);
let x = VIRTIO_F_VERSION_1;

#[derive(FromBytes, IntoBytes)]
#[repr(transparent)]
struct Wrapper(u32);

#[derive(Clone, Copy)]
#[repr(C)]
struct HostOnly {
    a: u32,
}

#[repr(C)]
#[derive(Debug)]
struct AlsoHostOnly;
#[derive(FromBytes)]
struct NotReprC;
"#;
    assert_eq!(offences(snippet, &[]), []);
}
