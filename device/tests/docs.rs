//! The documentation speaks of this repository alone: every repository path a document names
//! (`device/...`, `guest-tests/...`, `scripts/...`, `docs/...`, `qemu-configs/...`) exists, a
//! source file named alone (`gpu.rs`) is the name of one, every relative link and `../` path
//! resolves to a file inside the repository, and no document names a path of one person's
//! machine.
//!
//! Documents are every Markdown file of the repository and the doc comments of `device/src/`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Folders at the top of the repository that documents name paths in.
const ROOTS: [&str; 5] = [
    "device/",
    "guest-tests/",
    "scripts/",
    "docs/",
    "qemu-configs/",
];

/// Paths that running the tools creates and git does not hold, with why.
const GENERATED: [(&str, &str); 1] = [(
    "device/fuzz/artifacts/",
    "libFuzzer writes crash inputs there",
)];

/// Beginnings of paths that exist only on someone's machine.
const MACHINE_PATHS: [&str; 4] = ["/work/", "/home/", "/Users/", "/root/"];

/// Folders never searched: build output and fuzz inputs (hidden folders neither).
const SKIPPED_DIRS: [&str; 3] = ["target", "corpus", "artifacts"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives one folder below the repository root")
        .to_owned()
}

/// Every file under `dir`, build output, fuzz inputs and hidden folders left out.
fn repository_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !path.is_dir() {
            out.push(path);
        } else if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
            repository_files(&path, out);
        }
    }
}

/// The documents among `files`: Markdown files, and the Rust sources of `device/src/` (for
/// their doc comments).
fn documents(repo: &Path, files: &[PathBuf]) -> Vec<PathBuf> {
    let sources = repo.join("device/src");
    files
        .iter()
        .filter(|file| {
            let extension = file.extension().and_then(|ext| ext.to_str());
            extension == Some("md") || (extension == Some("rs") && file.starts_with(&sources))
        })
        .cloned()
        .collect()
}

/// The names of `files`.
fn file_names(files: &[PathBuf]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|file| Some(file.file_name()?.to_str()?.to_owned()))
        .collect()
}

/// The prose of a document: all of a Markdown file, the doc-comment lines of a Rust file.
fn prose(path: &Path, text: &str) -> Vec<(usize, String)> {
    let is_rust = path.extension().is_some_and(|ext| ext == "rs");
    text.lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let trimmed = line.trim_start();
            let kept = if !is_rust {
                Some(line)
            } else {
                trimmed
                    .strip_prefix("//!")
                    .or_else(|| trimmed.strip_prefix("///"))
            };
            kept.map(|kept| (index + 1, kept.to_owned()))
        })
        .collect()
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// Repository paths named in a line, each with whether a placeholder (`<name>`, `*`, `...`)
/// follows it (then only its folder is checked).
fn repository_paths(line: &str) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    for root in ROOTS {
        for (at, _) in line.match_indices(root) {
            let before = line[..at].chars().next_back();
            // `../docs/x` is a relative path, `foo/docs/` another folder: not from the root.
            if before.is_some_and(|c| is_path_char(c) || c == '@') {
                continue;
            }
            let rest = &line[at..];
            let end = rest.find(|c| !is_path_char(c)).unwrap_or(rest.len());
            let token = &rest[..end];
            let after = rest[end..].chars().next();
            let placeholder = token.ends_with("...")
                || token.contains('*')
                || matches!(after, Some('<' | '*' | '{'));
            let token = token.trim_end_matches('.');
            found.push((token.to_owned(), placeholder));
        }
    }
    found
}

/// Rust source files named without a folder (`gpu.rs`).
fn bare_sources(line: &str) -> Vec<&str> {
    line.split(|c: char| !is_path_char(c))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| {
            word.ends_with(".rs")
                && !word.contains('/')
                && word.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
        .collect()
}

/// Relative links of a Markdown line: `[text](target)`, without anchors; web links and
/// in-page anchors are left out.
fn links(line: &str) -> Vec<String> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next().unwrap_or_default();
            let external = ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme));
            (!external && !target.is_empty()).then(|| target.to_owned())
        })
        .collect()
}

/// `../` paths named outside links.
fn parent_paths(line: &str) -> Vec<String> {
    line.match_indices("../")
        .filter(|(at, _)| {
            !line[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| is_path_char(c) || c == '(')
        })
        .map(|(at, _)| {
            let rest = &line[at..];
            let end = rest.find(|c| !is_path_char(c)).unwrap_or(rest.len());
            rest[..end].trim_end_matches('.').to_owned()
        })
        .collect()
}

/// `relative` resolved from `dir` without touching the file system; `None` when it climbs above
/// the repository root.
fn resolve(repo: &Path, dir: &Path, relative: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = dir.strip_prefix(repo).ok()?.components().collect();
    for component in Path::new(relative).components() {
        match component {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::Normal(_) => parts.push(component),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// What is wrong with one line of a document.
fn problems(repo: &Path, names: &BTreeSet<String>, document: &Path, line: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for name in bare_sources(line) {
        if !names.contains(name) {
            wrong.push(format!(
                "names {name}, which no file of the repository is called"
            ));
        }
    }
    for machine in MACHINE_PATHS {
        if line.contains(machine) {
            wrong.push(format!("names a machine path ({machine}...)"));
        }
    }
    for (path, placeholder) in repository_paths(line) {
        let checked = if placeholder {
            &path[..path.rfind('/').map_or(0, |slash| slash + 1)]
        } else {
            path.as_str()
        };
        let generated = GENERATED
            .iter()
            .any(|(prefix, _)| checked.starts_with(prefix));
        if !generated && !repo.join(checked).exists() {
            wrong.push(format!("names {path}, which does not exist"));
        }
    }
    let dir = document.parent().unwrap();
    let is_markdown = document.extension().is_some_and(|ext| ext == "md");
    let relative = if is_markdown { links(line) } else { Vec::new() };
    for target in relative.into_iter().chain(parent_paths(line)) {
        match resolve(repo, dir, &target) {
            None => wrong.push(format!("points outside the repository: {target}")),
            Some(path) if !repo.join(&path).exists() => wrong.push(format!(
                "points at {}, which does not exist",
                path.display()
            )),
            Some(_) => {}
        }
    }
    wrong
}

#[test]
fn documents_name_only_what_the_repository_holds() {
    let repo = repository();
    let mut all = Vec::new();
    repository_files(&repo, &mut all);
    let names = file_names(&all);
    let files = documents(&repo, &all);
    let markdown = files
        .iter()
        .filter(|file| file.extension().is_some_and(|ext| ext == "md"))
        .count();
    assert!(
        markdown >= 14,
        "found only {markdown} Markdown files in {}",
        repo.display()
    );
    let mut wrong = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(&repo).unwrap().display().to_string();
        for (number, line) in prose(file, &text) {
            for problem in problems(&repo, &names, file, &line) {
                wrong.push(format!("{shown}:{number}: {problem}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "documents out of date:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_missing_paths_outside_links_and_machine_paths() {
    let repo = repository();
    let doc = repo.join("docs/architecture.md");
    let guest_readme = repo.join("guest-tests/README.md");
    let mut all = Vec::new();
    repository_files(&repo, &mut all);
    let names = file_names(&all);
    let found = |document: &Path, line: &str| problems(&repo, &names, document, line);
    assert!(found(&doc, "see `device/src/model/gpu.rs` and `scripts/test`.").is_empty());
    assert!(found(&doc, "read [the guide](programming-guide.md#4-packets)").is_empty());
    assert!(found(&doc, "[viewer](https://ui.perfetto.dev), [top](#tests)").is_empty());
    assert!(found(&guest_readme, "([docs](../docs/vram-bar.md))").is_empty());
    assert!(found(&doc, "written to `device/fuzz/artifacts/<target>/`").is_empty());
    assert!(found(&doc, "`device/fuzz/artifacts/engine/crash-...`").is_empty());
    assert_eq!(found(&doc, "the old `device/src/gpu.rs`.").len(), 1);
    assert_eq!(found(&doc, "[notes](../../shared/notes.md)").len(), 1);
    assert_eq!(found(&doc, "[gone](layout-rules.md)").len(), 1);
    assert_eq!(found(&doc, "kept in `../shared/findings.md`").len(), 1);
    assert_eq!(found(&doc, "run `/work/x/scripts/demo`").len(), 1);
    assert_eq!(found(&doc, "`device/nowhere/<name>.rs`").len(), 1);
    assert!(found(&doc, "the GPU (`gpu.rs`), the `layout*.rs` files").is_empty());
    assert_eq!(found(&doc, "the glue in `device.rs`.").len(), 1);
    assert_eq!(
        repository_paths("(`scripts/bench`, `docs/x.md`)."),
        vec![
            ("scripts/bench".to_owned(), false),
            ("docs/x.md".to_owned(), false)
        ]
    );
}

/// Where `docs/architecture.md` must name the module in `file` (a path below `device/src/`):
/// a folder's `mod.rs` by its folder (`engine/`), any other file by its path (`engine/ops.rs`),
/// or, in its top folder's row of the layers table, by its path inside that folder (`ops.rs`,
/// `stats/render.rs`). Test modules and the test kit are not part of the design it draws.
fn architecture_misses(architecture: &str, file: &str) -> Option<String> {
    let parts: Vec<&str> = file.split('/').collect();
    let is_test = parts.iter().any(|part| {
        *part == "tests" || *part == "tests.rs" || *part == "testkit" || part.contains("_tests")
    });
    if is_test {
        return None;
    }
    // A folder's `mod.rs` is named by its folder.
    let module = match file.strip_suffix("mod.rs") {
        Some(folder) => folder.to_owned(),
        None => file.to_owned(),
    };
    if architecture.contains(&format!("`{module}`"))
        || architecture.contains(&format!("/{module}`"))
    {
        return None;
    }
    let named_in_row = parts.len() > 1 && {
        let top = parts[0];
        let inside = &module[top.len() + 1..];
        architecture
            .lines()
            .filter(|line| line.starts_with(&format!("| `{top}/`")))
            .any(|row| row.contains(&format!("`{inside}`")))
    };
    (!named_in_row).then_some(module)
}

#[test]
fn the_architecture_names_every_module_of_the_backend() {
    let repo = repository();
    let architecture = fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let sources = repo.join("device/src");
    let mut files = Vec::new();
    repository_files(&sources, &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .filter(|file| file.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|file| {
            let relative = file.strip_prefix(&sources).unwrap().to_string_lossy();
            architecture_misses(&architecture, &relative)
        })
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name these modules of device/src: {}",
        missing.join(", ")
    );
}

#[test]
fn the_architecture_check_finds_a_module_it_does_not_name() {
    let architecture = "| `engine/` | packets (`mod.rs`), one function a kind (`ops.rs`), \
                        `stats/render.rs` |\n`daemon.rs` and `memory/vram.rs`";
    for named in [
        "engine/mod.rs",
        "engine/ops.rs",
        "engine/stats/render.rs",
        "daemon.rs",
        "memory/vram.rs",
        "engine/tests/fill.rs",
        "engine/describe_tests.rs",
        "testkit/rig.rs",
    ] {
        assert_eq!(architecture_misses(architecture, named), None, "{named}");
    }
    for missing in [
        "engine/access.rs",
        "memory/gart.rs",
        "main.rs",
        "observe/mod.rs",
    ] {
        assert!(
            architecture_misses(architecture, missing).is_some(),
            "{missing}"
        );
    }
}

/// The options of launching.md's table: the `--name` each row starts with.
fn table_options(launching: &str) -> BTreeSet<String> {
    launching
        .lines()
        .filter_map(|line| line.strip_prefix("| `--"))
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(rest.len());
            format!("--{}", &rest[..end])
        })
        .collect()
}

/// The backend's long options as clap knows them (help and version left out: clap's own).
fn backend_options() -> BTreeSet<String> {
    use clap::CommandFactory;
    vhost_user_wddm_gpu::cli::Cli::command()
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .filter(|long| !matches!(*long, "help" | "version"))
        .map(|long| format!("--{long}"))
        .collect()
}

#[test]
fn launching_lists_every_option_of_the_backend_and_no_other() {
    let launching = fs::read_to_string(repository().join("docs/launching.md")).unwrap();
    let documented = table_options(&launching);
    let known = backend_options();
    assert!(known.len() >= 20, "clap knows only {known:?}");
    let missing: Vec<&String> = known.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&known).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/launching.md's option table lacks {missing:?} and names options the backend does \
         not have: {unknown:?}"
    );
}

#[test]
fn launching_shows_the_usage_line_clap_prints() {
    use clap::CommandFactory;
    let launching = fs::read_to_string(repository().join("docs/launching.md")).unwrap();
    let usage = vhost_user_wddm_gpu::cli::Cli::command()
        .render_usage()
        .to_string();
    let first = usage
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("Usage: ")
        .to_owned();
    assert!(
        first.contains("<--socket-path <SOCKET_PATH>|--fd <FD>|--print-capabilities>"),
        "{first}"
    );
    assert!(
        launching.contains(&first),
        "docs/launching.md does not show the usage line `{first}`"
    );
}

#[test]
fn the_option_table_check_reads_rows_and_sees_a_missing_option() {
    let table = "| option | meaning |\n|---|---|\n| `--socket-path PATH` | listen |\n\
                 | `--bar-mode auto\\|ivshmem` | mode |\n| `--record-data` | bytes |\nprose `--fd N`";
    let found = table_options(table);
    let expected: BTreeSet<String> = ["--socket-path", "--bar-mode", "--record-data"]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(found, expected);
    assert!(backend_options().contains("--fd"));
    assert!(!found.contains("--fd"));
}

#[test]
fn the_layout_example_in_the_docs_is_the_file_the_tests_parse() {
    // docs/layout-example.toml is the one copy: the layout file's unit test and the fuzz seeds
    // include it, and docs/layouts.md shows it verbatim as its first TOML block.
    let repo = repository();
    let example = fs::read_to_string(repo.join("docs/layout-example.toml")).unwrap();
    let guide = fs::read_to_string(repo.join("docs/layouts.md")).unwrap();
    let start = guide.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let end = start + guide[start..].find("```\n").expect("the block's end");
    assert_eq!(
        &guide[start..end],
        example,
        "docs/layouts.md's first TOML block and docs/layout-example.toml differ"
    );
}
