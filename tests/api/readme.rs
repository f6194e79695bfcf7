//! The README's examples, run verbatim against a running service ([`crate::examples`]): every
//! ```sh block that uses `$APP` is followed by a ```text block with what it prints.

use crate::examples::{blocks, examples, run_verbatim};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_work_verbatim() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() >= 5, "the README's first purchase has its examples: {}", examples.len());
    for (line, info, body) in blocks(&readme) {
        assert!(
            info != "sh" || !body.contains("$APP") || examples.iter().any(|e| e.line == line),
            "README line {line}: an example using $APP with no ```text block of its output after it"
        );
    }
    run_verbatim("README", &examples).await;
}

/// The README is a front page: what seckill is, how to run and try it, where the rest is. The
/// reference (every setting, route and status) lives in docs/.
#[test]
fn the_readme_is_a_front_page() {
    const MOST_LINES: usize = 250;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines > 50, "the README was read: {lines} lines");
    assert!(lines <= MOST_LINES, "README.md has {lines} lines, more than {MOST_LINES}: move the detail into docs/");
}
