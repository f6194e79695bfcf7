//! The README's examples, run verbatim against a running service: every ```sh block that uses
//! `$APP` is followed by a ```text block with what it prints, and the blocks run in order in one
//! bash, with the variables `cargo xtask run` writes to `target/seckill-run.env` (`APP`, `TOKEN`,
//! `ADMIN_TOKEN`, `SECKILL`, `SECKILL_JWT_SECRET`, `SECKILL_PAYMENT_SECRET`). In an expected
//! line `[..]` stands for any text. (trycmd, the crate for tests of commands in Markdown, runs
//! programs without a shell: no variables, pipes or `$(…)`, which these examples need.)

use std::process::Command;

use seckill::identity::AuthMode;
use secrecy::{ExposeSecret, SecretString};

use crate::helpers::{ADMIN_TOKEN, spawn_app_with};

const SECRET: &str = "readme-test-secret-of-at-least-32-bytes";

/// One example: the commands and what they print.
struct Example {
    line: usize,
    commands: String,
    expected: String,
}

/// The README's examples: each ```sh block directly followed by a ```text block.
fn examples(readme: &str) -> Vec<Example> {
    let mut blocks = vec![]; // (line, info, body)
    let mut lines = readme.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if let Some(info) = line.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().map(|(_, l)| l).take_while(|l| !l.starts_with("```")).collect();
            blocks.push((n + 1, info.trim().to_owned(), body.join("\n")));
        }
    }
    let mut examples = vec![];
    for pair in blocks.windows(2) {
        if let [(line, info, commands), (_, next, expected)] = pair
            && info == "sh"
            && next == "text"
        {
            examples.push(Example { line: *line, commands: commands.clone(), expected: expected.clone() });
        }
    }
    for (line, info, body) in &blocks {
        assert!(
            info != "sh" || !body.contains("$APP") || examples.iter().any(|e| e.line == *line),
            "README line {line}: an example using $APP with no ```text block of its output after it"
        );
    }
    examples
}

/// Whether `actual` is `expected`, where `[..]` in an expected line matches any text.
fn matches(expected: &str, actual: &str) -> bool {
    let (expected, actual): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    expected.len() == actual.len() && expected.iter().zip(&actual).all(|(e, a)| line_matches(e, a))
}

fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = actual.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[test]
fn the_wildcard_matches_any_text_and_nothing_else() {
    assert!(line_matches("a [..] c", "a bb c"));
    assert!(line_matches("[..]", ""));
    assert!(line_matches(r#"{"id":"[..]","n":1}"#, r#"{"id":"x-y","n":1}"#));
    assert!(!line_matches(r#"{"id":"[..]","n":1}"#, r#"{"id":"x-y","n":2}"#));
    assert!(!line_matches("abc", "abcd"));
    assert!(!matches("a\nb", "a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_work_verbatim() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() >= 5, "the README's first purchase has its examples: {}", examples.len());
    let app = spawn_app_with(
        |config| {
            config.auth.mode = AuthMode::Jwt;
            config.auth.jwt_secret = Some(SecretString::from(SECRET));
        },
        true,
    )
    .await;
    let seckill = env!("CARGO_BIN_EXE_seckill");
    let token =
        Command::new(seckill).args(["token", "--user", "alice"]).env("SECKILL_JWT_SECRET", SECRET).output().unwrap();
    assert!(token.status.success(), "{token:?}");

    // One bash runs them all, in order, a marker line between two examples' outputs.
    const MARK: &str = "----8<---- readme example ----8<----";
    let script: String = examples.iter().map(|e| format!("echo '{MARK}'\n{}\n", e.commands)).collect();
    let mut bash = Command::new("bash");
    bash.args(["-c", &format!("set -uo pipefail\n{script}echo '{MARK}'")])
        .env("APP", &app.address)
        .env("TOKEN", String::from_utf8(token.stdout).unwrap().trim())
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SECKILL", seckill)
        .env("SECKILL_JWT_SECRET", SECRET)
        .env("SECKILL_PAYMENT_SECRET", crate::common::PAYMENT_SECRET)
        .env("SECKILL_REDIS_URL", app.config.redis_url.expose_secret())
        .env("SECKILL_DATABASE_URL", app.config.database_url.expose_secret())
        .env("SECKILL_KEY_PREFIX", &app.config.key_prefix);
    // Off the runtime's threads: the service under test answers on them.
    let output = tokio::task::spawn_blocking(move || bash.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outputs: Vec<&str> = stdout.split(&format!("{MARK}\n")).skip(1).collect();
    assert_eq!(
        outputs.len(),
        examples.len() + 1,
        "every example ran: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (example, actual) in examples.iter().zip(&outputs) {
        assert!(
            matches(&example.expected, actual),
            "README line {}:\n{}\nprinted:\n{actual}\nexpected:\n{}\nstderr: {}",
            example.line,
            example.commands,
            example.expected,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
