//! The check that holds a folder's modules to the `# Layout` list of its doc comment (`main.rs`,
//! `bench/mod.rs`, `measure/mod.rs`): each numbered item is a layer, lowest first, naming its
//! modules in backticks before the first `(`. A module imports from the layers below its own,
//! and, where the folder allows it, from its own layer without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layer of each module, from the `# Layout` list of `doc` (`a/` names the folder `a`).
pub fn layers(doc: &str) -> BTreeMap<String, usize> {
    let mut items: Vec<(usize, String)> = vec![];
    let (mut in_layout, mut open) = (false, false);
    for line in doc.lines() {
        let Some(text) = line.strip_prefix("//!").map(str::trim) else {
            if in_layout {
                break;
            }
            continue;
        };
        if text == "# Layout" {
            in_layout = true;
        } else if !in_layout {
            continue;
        } else if let Some((n, rest)) = text.split_once(". ")
            && let Ok(n) = n.parse::<usize>()
        {
            items.push((n, rest.to_string()));
            open = true;
        } else if text.is_empty() {
            open = false;
        } else if open && let Some((_, item)) = items.last_mut() {
            item.push(' ');
            item.push_str(text);
        }
    }
    let mut layers = BTreeMap::new();
    for (layer, item) in items {
        let names = item.split_once(": ").map_or(item.as_str(), |(_, rest)| rest).split(" (").next().unwrap();
        for name in names.split('`').skip(1).step_by(2) {
            layers.insert(name.trim_end_matches('/').to_string(), layer);
        }
    }
    layers
}

/// The modules of `names` a source names through `prefix` (`super::` or `crate::`), directly or
/// in a `use prefix{…}` group.
pub fn imports(source: &str, prefix: &str, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for part in source.split(prefix).skip(1) {
        let used: Vec<&str> = match part.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap().split(',').collect(),
            None => vec![part],
        };
        for name in used {
            let name: String = name.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if names.contains(&name) {
                found.insert(name);
            }
        }
    }
    found
}

/// The source of each module in `dir`: a file but `main.rs` and `mod.rs`, or a folder (all its
/// `.rs` files, at any depth, together).
pub fn modules(dir: &Path) -> BTreeMap<String, String> {
    fn read_all(dir: &Path, into: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                read_all(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") {
                into.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut source = String::new();
            read_all(&path, &mut source);
            modules.insert(name, source);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" && name != "main" {
            modules.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    modules
}

/// Checks the modules of `dir` (`src/<dir>` of this crate) against the layout in `doc`, their
/// imports read through `prefix`; `sideways`: whether a module may import one of its own layer
/// (never in a circle).
pub fn check(dir: &str, doc: &str, prefix: &str, sideways: bool) {
    let files = modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir));
    let layers = layers(doc);
    let names: BTreeSet<String> = files.keys().cloned().collect();
    assert_eq!(names, layers.keys().cloned().collect(), "src/{dir}: every module has a line in the layout");
    let mut edges = BTreeMap::new();
    for (name, source) in &files {
        let used = imports(source, prefix, &names);
        for other in used.iter().filter(|o| *o != name) {
            let (mine, theirs) = (layers[name], layers[other]);
            assert!(
                theirs < mine || sideways && theirs == mine,
                "src/{dir}: {name} (layer {mine}) imports {other} (layer {theirs})"
            );
        }
        edges.insert(
            name.clone(),
            used.into_iter().filter(|o| o != name && layers[o] == layers[name]).collect::<Vec<_>>(),
        );
    }
    // No circle within a layer: each module's imports of its own layer reach back to it never.
    for start in edges.keys() {
        let mut stack: Vec<&String> = edges[start].iter().collect();
        let mut seen = BTreeSet::new();
        while let Some(next) = stack.pop() {
            assert_ne!(next, start, "src/{dir}: {start} is in an import circle");
            if seen.insert(next) {
                stack.extend(edges[next].iter());
            }
        }
    }
}
