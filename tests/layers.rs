//! The layer rule of the `# Layout` list in `src/lib.rs`: a module imports only from its own
//! layer and the layers below, and the modules of one layer import each other in no circle; below
//! `http`, no module uses actix-web. The layers are read from that list; the imports are the
//! `crate::<module>` paths of every file in `src/` outside comments (and `super::<module>` in a
//! module's root file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Each module of the `# Layout` list (lines `- [`name`]: …`) with its layer, numbered from 1.
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let docs = lib.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).map(str::trim);
    let (mut layers, mut number) = (BTreeMap::new(), 0);
    for line in docs.skip_while(|l| *l != "# Layout").skip(1).take_while(|l| !l.starts_with('#')) {
        if line.split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()) {
            number += 1;
        } else if let Some(rest) = line.strip_prefix("- [`") {
            layers.insert(rest.split('`').next().unwrap_or_default().to_owned(), number);
        }
    }
    layers
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()) {
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `source` without its comments, line breaks kept (a `//` inside a string literal cuts the rest
/// of its line: harmless, as no path follows a URL on one line here).
fn code(source: &str) -> String {
    let (mut out, mut rest) = (String::new(), source);
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = match &rest[..rest.len().min(2)] {
            "//" => rest.find('\n').unwrap_or(rest.len()),
            "/*" => rest.find("*/").map_or(rest.len(), |end| end + 2),
            _ => 1,
        };
        out.extend(if end == 1 { vec!["/"] } else { rest[..end].matches('\n').collect() });
        rest = &rest[end..];
    }
    out + rest
}

/// The names `code` reaches as `crate::<name>` or `crate::{<name>, …}` (and, if `super_too`, as
/// `super::<name>`), with their line numbers and whether through `super::`.
fn imports(code: &str, super_too: bool) -> Vec<(usize, String, bool)> {
    let ident =
        |s: &str| -> String { s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut found = vec![];
    for prefix in ["crate::", "super::"].into_iter().filter(|p| super_too || *p == "crate::") {
        for (at, _) in code.match_indices(prefix) {
            if code[..at].ends_with(|c: char| c.is_alphanumeric() || "_$:".contains(c)) {
                continue;
            }
            let (line, rest) = (code[..at].matches('\n').count() + 1, &code[at + prefix.len()..]);
            let mut items = vec![rest]; // of `crate::{a, b::{c, d}}`, the items at depth 0
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                items = vec![group];
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(&group[i + 1..]),
                        _ => {}
                    }
                }
            }
            found.extend(items.into_iter().map(|item| (line, ident(item), prefix == "super::")));
        }
    }
    found.retain(|(_, name, _)| !name.is_empty());
    found
}

#[test]
fn modules_import_only_their_own_layer_and_the_layers_below_without_circles() {
    let lib = std::fs::read_to_string(format!("{SRC}/lib.rs")).unwrap();
    let layer = layers(&lib);
    let module =
        |l: &str| Some(l.strip_prefix("pub mod ").or_else(|| l.strip_prefix("mod "))?.strip_suffix(';')?.to_owned());
    let declared: BTreeSet<String> = lib.lines().filter_map(|l| module(l.trim())).collect();
    let mut problems: Vec<String> = declared
        .symmetric_difference(&layer.keys().cloned().collect())
        .map(|m| format!("src/lib.rs: `{m}` is not both declared and in the `# Layout` list (a module needs a layer)"))
        .collect();
    let mut same_layer: BTreeSet<(String, String)> = BTreeSet::new();
    let (mut files, mut checked) = (vec![], 0);
    rust_files(Path::new(SRC), &mut files);
    for file in files.iter().filter(|f| !f.ends_with("lib.rs") && !f.ends_with("main.rs")) {
        let relative = file.strip_prefix(SRC).unwrap();
        let from = relative.iter().next().unwrap().to_str().unwrap().trim_end_matches(".rs");
        let root_file = relative.components().count() == 1 || relative.ends_with(format!("{from}/mod.rs"));
        let code = code(&std::fs::read_to_string(file).unwrap());
        if layer.get(from) < layer.get("http") && code.contains("actix_web") {
            problems.push(format!("src/{}: `{from}`, below `http`, uses actix-web", relative.display()));
        }
        for (line, to, via_super) in imports(&code, root_file) {
            let at = format!("src/{}:{line}", relative.display());
            checked += 1;
            match (layer.get(from), layer.get(&to)) {
                _ if to == from => {}
                (None, _) => {}              // reported above
                (_, None) if via_super => {} // `super::` to a child module, not out of the module
                (_, None) => problems.push(format!("{at}: `crate::{to}` is no module of the `# Layout` list")),
                (Some(a), Some(b)) if b > a => problems
                    .push(format!("{at}: `{from}` (layer {a}) imports `crate::{to}` (layer {b}), a layer above")),
                (Some(a), Some(b)) if a == b => drop(same_layer.insert((from.to_owned(), to))),
                _ => {}
            }
        }
    }
    assert!(checked > 50, "only {checked} `crate::` paths found in src/: is the check still reading it?");
    for (a, b) in &same_layer {
        // A circle: some path leads from `b` back to `a`.
        let (mut seen, mut todo) = (BTreeSet::from([b]), vec![b]);
        while let Some(m) = todo.pop() {
            todo.extend(same_layer.iter().filter(|(x, y)| x == m && seen.insert(y)).map(|(_, y)| y));
        }
        if seen.contains(a) {
            problems.push(format!("`{a}` imports `{b}`, and `{b}` leads back to `{a}`: a circle within one layer"));
        }
    }
    assert!(problems.is_empty(), "the layer rule of src/lib.rs (# Layout) is broken:\n{}", problems.join("\n"));
}

/// rustfmt keeps code within 120 columns but not string literals, attributes or macros: this
/// keeps them there too (a long description is a `\` line continuation, which reads the same).
#[test]
fn no_line_in_src_is_over_120_columns() {
    let mut files = vec![];
    rust_files(Path::new(SRC), &mut files);
    let long: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let source = std::fs::read_to_string(file).unwrap();
            let name = file.strip_prefix(SRC).unwrap().display().to_string();
            let lines: Vec<(usize, usize)> =
                source.lines().enumerate().map(|(i, line)| (i + 1, line.chars().count())).collect();
            lines.into_iter().filter(|&(_, width)| width > 120).map(move |(n, width)| format!("src{name}:{n}: {width}"))
        })
        .collect();
    assert!(long.is_empty(), "lines over 120 columns:\n{}", long.join("\n"));
}

/// What `http` may reach below it: the use cases, the ids, the settings, and the process's
/// metrics and telemetry. Everything else (a database query, a capability's own type) goes
/// through `crate::shop`, so a handler only extracts, calls one use case and maps its outcome.
const HTTP_MAY_IMPORT: [&str; 5] = ["shop", "domain", "config", "metrics", "telemetry"];

/// Most fields the handlers' state (`http::AppState`) may have: what is not a use case's is the
/// request's own business (who is buying, the client's key, the limit header fields, the admin
/// token).
const MAX_APP_STATE_FIELDS: usize = 8;

#[test]
fn http_reaches_the_layers_below_only_through_the_use_cases() {
    let mut files = vec![];
    rust_files(&Path::new(SRC).join("http"), &mut files);
    let mut reached = BTreeSet::new();
    for file in &files {
        let code = code(&std::fs::read_to_string(file).unwrap());
        for (line, to, _) in imports(&code, false) {
            if to != "http" {
                reached.insert(to.clone());
                let at = format!("{}:{line}", file.strip_prefix(SRC).unwrap().display());
                assert!(HTTP_MAY_IMPORT.contains(&to.as_str()), "src/{at}: `http` imports `crate::{to}`");
            }
        }
    }
    assert!(reached.contains("shop"), "no `crate::shop` import found in src/http: is the check still reading it?");
    let state = std::fs::read_to_string(format!("{SRC}/http/mod.rs")).unwrap();
    let body = state.split("pub struct AppState {").nth(1).and_then(|rest| rest.split("\n}").next()).unwrap();
    let fields = body.lines().filter(|l| l.trim_start().starts_with("pub ")).count();
    assert!(
        (1..=MAX_APP_STATE_FIELDS).contains(&fields),
        "AppState has {fields} fields (at most {MAX_APP_STATE_FIELDS})"
    );
}
