//! Markdown examples run verbatim against a running service: a ```sh block directly followed by
//! a ```text block is an example (the commands and what they print; in an expected line `[..]`
//! stands for any text). A document's examples run in order in one bash, with the variables
//! `cargo xtask run` writes to `target/seckill-run.env` (`APP`, `TOKEN`, `ADMIN_TOKEN`,
//! `SECKILL`, `SECKILL_JWT_SECRET`, `SECKILL_JWT_AUDIENCE`, `SECKILL_PAYMENT_SECRET`,
//! `SECKILL_WEBHOOK_SECRET`) and the Redis, Postgres and key prefix settings the CLI needs.
//! (trycmd, the crate for tests of commands in Markdown, runs programs without a shell: no
//! variables, pipes or `$(…)`, which these examples need.)

use seckill::identity::AuthMode;
use secrecy::{ExposeSecret, SecretString};

use crate::helpers::{ADMIN_TOKEN, spawn_app_with};

const SECRET: &str = "readme-test-secret-of-at-least-32-bytes";
/// How long one document's examples may run together.
const EXAMPLES_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);
/// The audience `cargo xtask run` sets (`SECKILL_JWT_AUDIENCE`).
const AUDIENCE: &str = "seckill-demo";

/// One example: the commands and what they print.
pub struct Example {
    pub line: usize,
    pub commands: String,
    pub expected: String,
}

/// A Markdown document's fenced blocks: (line of the fence, info string, body).
pub fn blocks(markdown: &str) -> Vec<(usize, String, String)> {
    let mut blocks = vec![];
    let mut lines = markdown.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if let Some(info) = line.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().map(|(_, l)| l).take_while(|l| !l.starts_with("```")).collect();
            blocks.push((n + 1, info.trim().to_owned(), body.join("\n")));
        }
    }
    blocks
}

/// The examples: each ```sh block directly followed by a ```text block.
pub fn examples(markdown: &str) -> Vec<Example> {
    let blocks = blocks(markdown);
    let mut examples = vec![];
    for pair in blocks.windows(2) {
        if let [(line, info, commands), (_, next, expected)] = pair
            && info == "sh"
            && next == "text"
        {
            examples.push(Example { line: *line, commands: commands.clone(), expected: expected.clone() });
        }
    }
    examples
}

/// Whether `actual` is `expected`, where `[..]` in an expected line matches any text.
pub fn matches(expected: &str, actual: &str) -> bool {
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

/// Runs `name`'s examples in one bash against a fresh service (`SECKILL_AUTH=jwt`, as `cargo
/// xtask run` serves) and asserts each printed what its ```text block says.
pub async fn run_verbatim(name: &str, examples: &[Example]) {
    let app = spawn_app_with(
        |config| {
            config.auth.mode = AuthMode::Jwt;
            config.auth.jwt_secret = Some(SecretString::from(SECRET));
            config.auth.jwt_audience = Some(AUDIENCE.to_owned());
            // Order events on, to a port nobody answers (as `cargo xtask run` without a receiver).
            crate::webhooks::webhooks_to(config, &format!("http://127.0.0.1:{}/", testbed::free_port()), 8);
        },
        true,
    )
    .await;
    let seckill = env!("CARGO_BIN_EXE_seckill");
    let mut command = tokio::process::Command::new(seckill);
    command.args(["token", "--user", "alice"]).env("SECKILL_JWT_SECRET", SECRET).env("SECKILL_JWT_AUDIENCE", AUDIENCE);
    let token = crate::common::output_within(command, std::time::Duration::from_secs(60)).await;
    assert!(token.status.success(), "{token:?}");

    // One bash runs them all, in order, a marker line between two examples' outputs.
    const MARK: &str = "----8<---- example ----8<----";
    let script: String = examples.iter().map(|e| format!("echo '{MARK}'\n{}\n", e.commands)).collect();
    let mut bash = tokio::process::Command::new("bash");
    bash.args(["-c", &format!("set -uo pipefail\n{script}echo '{MARK}'")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("APP", &app.address)
        .env("TOKEN", String::from_utf8(token.stdout).unwrap().trim())
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SECKILL", seckill)
        .env("SECKILL_JWT_SECRET", SECRET)
        .env("SECKILL_JWT_AUDIENCE", AUDIENCE)
        .env("SECKILL_PAYMENT_SECRET", crate::common::PAYMENT_SECRET)
        .env("SECKILL_WEBHOOK_SECRET", crate::common::receiver::WEBHOOK_SECRET)
        .env("SECKILL_REDIS_URL", app.config.redis_url.expose_secret())
        .env("SECKILL_DATABASE_URL", app.config.database_url.expose_secret())
        .env("SECKILL_KEY_PREFIX", &app.config.key_prefix)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    // The examples' commands (curl without --max-time, a loop that waits for a state) get a
    // deadline of their own: past it, bash and everything it started are stopped by its group.
    let child = bash.spawn().unwrap();
    let group = child.id().unwrap();
    let Ok(output) = tokio::time::timeout(EXAMPLES_DEADLINE, child.wait_with_output()).await else {
        testbed::signal_group(group, testbed::Signal::SIGKILL);
        panic!("{name}: the examples did not finish within {EXAMPLES_DEADLINE:?}");
    };
    let output = output.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let outputs: Vec<&str> = stdout.split(&format!("{MARK}\n")).skip(1).collect();
    assert_eq!(outputs.len(), examples.len() + 1, "{name}: every example ran: {stdout}\n{stderr}");
    for (example, actual) in examples.iter().zip(&outputs) {
        assert!(
            matches(&example.expected, actual),
            "{name} line {}:\n{}\nprinted:\n{actual}\nexpected:\n{}\nstderr: {stderr}",
            example.line,
            example.commands,
            example.expected,
        );
    }
}
