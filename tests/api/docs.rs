//! The examples of docs/, run verbatim as the README's are ([`crate::examples`]), each document
//! in one bash against its own fresh service. The rule is mechanical: in docs/ **every** ```sh
//! block runs and is followed by a ```text block of what it prints; commands that cannot run here
//! (containers, a Kubernetes cluster, a debugger on a fixed port) are ```console blocks, shown and
//! not run, and a ```console block may not talk to the service (no `$APP`, no `curl`).

use std::collections::{BTreeMap, BTreeSet};

use crate::examples::{blocks, examples, run_verbatim};

/// The README and the documents of docs/, sorted: (name, text).
fn documents() -> Vec<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut paths: Vec<_> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.sort();
    let docs = paths.into_iter().map(|path| {
        (format!("docs/{}", path.file_name().unwrap().to_string_lossy()), std::fs::read_to_string(&path).unwrap())
    });
    std::iter::once(("README.md".to_owned(), std::fs::read_to_string(format!("{root}/README.md")).unwrap()))
        .chain(docs)
        .collect()
}

/// The sales an example's commands name (in a path, a body's `sale_id`, `--sale`, `reconcile`,
/// `retire`), and for a sale of a group, `group <g>` too: a buyer's limit spans the group. An id
/// built in the shell (`sneaker.$size`) counts by its group.
fn sales_named(commands: &str) -> BTreeSet<String> {
    let id = r"([A-Za-z0-9_.$-]+)";
    let pattern = format!(r#"(?:/sales/{id}|"sale_id": ?"{id}"|--sale {id}|(?:reconcile|retire) {id})"#);
    let mut named = BTreeSet::new();
    for found in regex::Regex::new(&pattern).unwrap().captures_iter(commands) {
        let sale = found.iter().skip(1).flatten().next().unwrap().as_str();
        if let Some((group, _)) = sale.split_once('.') {
            named.insert(format!("group {group}"));
        }
        if !sale.contains('$') {
            named.insert(sale.to_owned());
        }
    }
    named
}

#[test]
fn the_sale_ids_of_the_examples_are_found() {
    let named = sales_named(
        r#"curl "$APP/admin/sales/first" -d '{"sale_id": "sneaker.42"}'; curl "$APP/sales/t-1/order?x"
for s in 1 2; do curl "$APP/admin/sales/shoe.$s"; done; $SECKILL reconcile tickets; $SECKILL pay --sale w"#,
    );
    let expected = ["first", "group shoe", "group sneaker", "sneaker.42", "t-1", "tickets", "w"];
    assert_eq!(named, expected.map(String::from).into());
}

/// Each document's examples seed and buy in sales of their own, so all of them run against one
/// service (`cargo xtask run`), in any order: no sale, nor group, is named by two documents, nor
/// is `demo`, the sale `cargo xtask run` seeds. (Buyers may recur: what a buyer holds is per sale
/// or per group.)
#[test]
fn no_two_documents_examples_name_one_sale() {
    let mut namers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in documents() {
        for example in examples(&text) {
            for sale in sales_named(&example.commands) {
                namers.entry(sale).or_default().insert(name.clone());
            }
        }
    }
    assert!(namers.len() >= 8, "the examples' sales were found: {namers:?}");
    let shared: Vec<String> =
        namers.iter().filter(|(_, docs)| docs.len() > 1).map(|(sale, docs)| format!("{sale}: {docs:?}")).collect();
    assert!(shared.is_empty(), "sales named by more than one document's examples:\n{}", shared.join("\n"));
    assert!(!namers.contains_key("demo"), "an example uses `cargo xtask run`'s demo sale: {:?}", namers["demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_examples_work_verbatim() {
    let mut ran = 0;
    for (name, text) in documents().into_iter().filter(|(name, _)| name.starts_with("docs/")) {
        let examples = examples(&text);
        for (line, info, body) in blocks(&text) {
            assert!(
                info != "sh" || examples.iter().any(|e| e.line == line),
                "{name} line {line}: a ```sh block with no ```text block of its output after it (or make it ```console)"
            );
            assert!(
                info != "console" || !(body.contains("$APP") || body.contains("curl ")),
                "{name} line {line}: a ```console block that talks to the service must be a ```sh example"
            );
        }
        if !examples.is_empty() {
            run_verbatim(&name, &examples).await;
            ran += examples.len();
        }
    }
    assert!(ran >= 10, "the docs' examples were found and run: {ran}");
}
