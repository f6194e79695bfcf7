//! The examples of docs/, run verbatim as the README's are ([`crate::examples`]), each document
//! in one bash against its own fresh service. The rule is mechanical: in docs/ **every** ```sh
//! block runs and is followed by a ```text block of what it prints; commands that cannot run here
//! (containers, a Kubernetes cluster, a debugger on a fixed port) are ```console blocks, shown and
//! not run, and a ```console block may not talk to the service (no `$APP`, no `curl`).

use crate::examples::{blocks, examples, run_verbatim};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_examples_work_verbatim() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
    let mut documents: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    documents.sort();
    let mut ran = 0;
    for path in documents {
        let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&path).unwrap();
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
