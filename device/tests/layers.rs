//! The source tree is its layers: a module imports only from its own layer or the layers below,
//! never from a sibling layer beside it, and no two modules import each other, directly or
//! around a longer loop. Read from the source text, so a new `use` that breaks the order fails
//! here with the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top. Layers on one level are siblings: neither may import the other.
const LAYERS: [&[&str]; 11] = [
    &["support"],
    &["layout"],
    &["memory"],
    &["mmu"],
    &["engine"],
    &["observe"],
    &["display", "gpu", "replay"],
    &["model"],
    &["transport"],
    &["daemon"],
    &["cli"],
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is, as `layer::name`; `None` for test files (and files in test folders),
/// the test toolkit and the crate roots.
fn module_of(relative: &Path) -> Option<String> {
    let text = relative.with_extension("");
    let mut name = text.to_str()?.replace('/', "::");
    if let Some(stripped) = name.strip_suffix("::mod") {
        name = stripped.to_owned();
    }
    let is_test = name
        .split("::")
        .any(|part| part == "tests" || part.ends_with("_tests") || part.starts_with("tests_"));
    // The test toolkit is test-only code (`#[cfg(test)]`): it may reach every layer.
    let is_toolkit = name == "testkit" || name.starts_with("testkit::");
    (!is_test && !is_toolkit && name != "lib" && name != "main").then_some(name)
}

/// The code of a file up to its test module, without comment lines.
fn code(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| line.trim() != "#[cfg(test)]")
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(index, line)| (index + 1, line))
}

/// Every `crate::a::b::c` path in a line.
fn crate_paths(line: &str) -> Vec<Vec<&str>> {
    line.match_indices("crate::")
        .map(|(at, _)| {
            line[at + "crate::".len()..]
                .split("::")
                .map(|part| {
                    let end = part
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(part.len());
                    &part[..end]
                })
                .take_while(|part| !part.is_empty())
                .collect()
        })
        .collect()
}

struct Graph {
    /// Module to the modules it names, with the place of the first mention.
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

fn graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .filter_map(|file| Some((module_of(file.strip_prefix(&root).ok()?)?, file.clone())))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let text = fs::read_to_string(file).unwrap();
        let mut named = BTreeMap::new();
        for (line_number, line) in code(&text) {
            for path in crate_paths(line) {
                // The longest prefix that is a module of this crate.
                let target = (1..=path.len())
                    .rev()
                    .map(|len| path[..len].join("::"))
                    .find(|candidate| modules.contains_key(candidate));
                if let Some(target) = target.filter(|target| target != module) {
                    let place = format!("{}:{line_number}: {}", file.display(), line.trim());
                    named.entry(target).or_insert(place);
                }
            }
        }
        edges.insert(module.clone(), named);
    }
    Graph { edges }
}

fn layer_of(module: &str) -> &str {
    module.split("::").next().unwrap()
}

fn layer_rank(module: &str) -> usize {
    let layer = layer_of(module);
    LAYERS
        .iter()
        .position(|level| level.contains(&layer))
        .unwrap_or_else(|| panic!("{module} is in no layer: add its folder to LAYERS"))
}

/// Whether `module` may name `target`: its own layer, or a layer on a lower level.
fn may_import(module: &str, target: &str) -> bool {
    layer_of(module) == layer_of(target) || layer_rank(target) < layer_rank(module)
}

#[test]
fn every_module_imports_only_its_own_layer_or_those_below_never_a_sibling() {
    let graph = graph();
    assert!(
        graph.edges.len() > 20,
        "found {} modules",
        graph.edges.len()
    );
    let upward: Vec<&String> = graph
        .edges
        .iter()
        .flat_map(|(module, named)| {
            named
                .iter()
                .filter(|(target, _)| !may_import(module, target))
                .map(|(_, place)| place)
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports from a higher or a sibling layer:\n{upward:#?}"
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = graph();
    // Depth-first search; a module met again while still on the path closes a cycle.
    fn visit<'a>(
        module: &'a str,
        graph: &'a Graph,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| *on_path == module) {
            let mut cycle: Vec<String> = path[start..].iter().map(|m| m.to_string()).collect();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if !done.insert(module) {
            return None;
        }
        path.push(module);
        for target in graph.edges[module].keys() {
            if let Some(cycle) = visit(target, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.edges.keys() {
        let cycle = visit(module, &graph, &mut Vec::new(), &mut done);
        assert_eq!(cycle, None, "modules that import each other");
    }
}

#[test]
fn the_checks_see_an_upward_import_and_a_cycle() {
    // The parser the two tests above rely on.
    assert_eq!(
        crate_paths("use crate::model::router::{Gpu, X}; crate::support::sync::lock(&m)"),
        vec![vec!["model", "router"], vec!["support", "sync", "lock"]]
    );
    assert_eq!(
        module_of(Path::new("model/router.rs")).as_deref(),
        Some("model::router")
    );
    assert_eq!(
        module_of(Path::new("engine/mod.rs")).as_deref(),
        Some("engine")
    );
    assert_eq!(module_of(Path::new("model/router_tests.rs")), None);
    assert_eq!(module_of(Path::new("gpu/tests/events.rs")), None);
    assert_eq!(module_of(Path::new("engine/tests/fill.rs")), None);
    assert_eq!(module_of(Path::new("testkit/engine_rig.rs")), None);
    assert_eq!(module_of(Path::new("testkit/mod.rs")), None);
    assert!(layer_rank("transport::backend") > layer_rank("model::router"));
    assert!(may_import("model::router", "gpu::scheduler"));
    assert!(may_import("gpu::scheduler", "gpu::reply"));
    assert!(!may_import("gpu::reply", "model::router"));
    // Siblings: the display and the GPU know nothing of each other.
    assert!(!may_import("display::vblank", "gpu::reply"));
    assert!(!may_import("gpu", "display"));
    let text = "use crate::a;\n// crate::b\n#[cfg(test)]\nuse crate::c;";
    let lines: Vec<usize> = code(text).map(|(number, _)| number).collect();
    assert_eq!(lines, vec![1]);
}
