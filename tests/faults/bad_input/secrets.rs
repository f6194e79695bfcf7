//! Secrets never leave the process (issue 25: "the start-up error prints the admin token it
//! refuses"): not in `--help`, not in a refused setting's error, not in a failed connection's
//! error, not in the log of a service whose Redis is down.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::harness::Deployment;

/// Distinct values, so that any of them showing up anywhere is a leak.
const ADMIN: &str = "admin-secret-4a7c9e2f-but-short";
const JWT: &str = "jwt-secret-8d1b3f6a";
const REDIS_PASSWORD: &str = "redis-pw-5e0a2c7d";
const PG_PASSWORD: &str = "pg-pw-9b4f1e3a";
const SECRETS: [&str; 4] = [ADMIN, JWT, REDIS_PASSWORD, PG_PASSWORD];

/// `seckill ARGS` with `env` (nothing else from `SECKILL_*`), within 30 s: its exit success and
/// everything it printed.
async fn seckill(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("SECKILL_")) {
        command.env_remove(name);
    }
    command.args(args).envs(env.iter().copied()).stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output()).await.expect("exits").unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// A command that must refuse to run, saying why (`says`).
struct Refused<'a> {
    name: &'static str,
    args: &'static [&'static str],
    env: Vec<(&'static str, &'a str)>,
    says: &'static str,
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows a secret:\n{text}");
    }
}

#[tokio::test]
async fn secrets_appear_in_no_help_error_or_log_line() {
    let dead_redis = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:1");
    let dead_postgres = format!("postgres://seckill:{PG_PASSWORD}@127.0.0.1:1/seckill");
    let all = [
        ("SECKILL_ADMIN_TOKEN", ADMIN),
        ("SECKILL_JWT_SECRET", JWT),
        ("SECKILL_REDIS_URL", dead_redis.as_str()),
        ("SECKILL_DATABASE_URL", dead_postgres.as_str()),
    ];
    for args in [&["--help"][..], &["serve", "--help"], &["token", "--help"], &["worker", "--help"]] {
        let (ok, text) = seckill(args, &all).await;
        assert!(ok, "{args:?}: {text}");
        assert_no_secret(&format!("{args:?}"), &text);
    }

    // Refused at start: each names what is wrong, not the value.
    let refusals = [
        Refused {
            name: "short admin token",
            args: &["serve"],
            env: vec![("SECKILL_ADMIN_TOKEN", ADMIN)],
            says: "32 bytes",
        },
        Refused {
            name: "short admin token flag",
            args: &["serve", "--admin-token", ADMIN],
            env: vec![],
            says: "32 bytes",
        },
        Refused {
            name: "short jwt secret",
            args: &["serve", "--auth", "jwt"],
            env: vec![("SECKILL_JWT_SECRET", JWT)],
            says: "32 bytes",
        },
        Refused {
            name: "token with a short secret",
            args: &["token", "--user", "alice"],
            env: vec![("SECKILL_JWT_SECRET", JWT)],
            says: "32 bytes",
        },
        Refused {
            name: "unreachable postgres",
            args: &["migrate"],
            env: vec![("SECKILL_DATABASE_URL", &dead_postgres), ("SECKILL_REDIS_URL", &dead_redis)],
            says: "",
        },
    ];
    for Refused { name, args, env, says } in refusals {
        let (ok, text) = seckill(args, &env).await;
        assert!(!ok, "{name}: started anyway:\n{text}");
        assert!(text.contains(says), "{name}: does not say why:\n{text}");
        assert_no_secret(name, &text);
    }
    let bad_url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:notaport");
    // With a dead Postgres too: the default URL would be the machine's own on 5432.
    let (ok, text) =
        seckill(&["serve"], &[("SECKILL_REDIS_URL", &bad_url), ("SECKILL_DATABASE_URL", &dead_postgres)]).await;
    assert!(!ok, "a malformed Redis URL: started anyway:\n{text}");
    assert!(text.contains("redis url"), "refused for its Redis URL, before Postgres is reached:\n{text}");
    assert_no_secret("malformed redis url", &text);

    // Running, with its Redis down: failed purchases and probes are logged without the URL.
    let mut deployment = Deployment::new(&[("SECKILL_REDIS_URL", &dead_redis)]).await;
    let service = deployment.start().await;
    for _ in 0..3 {
        assert_eq!(deployment.buy("secrets", "alice").await.status(), 503);
        assert_eq!(deployment.client.get(deployment.url("/readyz")).send().await.unwrap().status(), 503);
    }
    service.wait_for_log("dependency unavailable").await;
    let log = service.log_text();
    assert!(log.contains("redis"), "the outage is logged:\n{log}");
    assert_no_secret("the service's log", &log);
}
