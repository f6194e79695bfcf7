//! The bodies of the commands other than `serve`: `seckill worker`, `migrate`, `reconcile`, `retire`,
//! `token`, `pay` and `solve`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::background::{build_dispatcher, build_worker, register_endpoints};
use crate::challenge::solve::{self as solver, SolveError};
use crate::config::{AuthConfig, Config, SolveArgs};
use crate::controls::audit;
use crate::db;
use crate::domain::{SaleId, UserId};
use crate::identity;
use crate::metrics::Metrics;
use crate::operators::{self, Role};
use crate::purchase::Sales;
use crate::reconcile;
use crate::redis::Keyspace;
use crate::redis::connection;
use crate::reservations::Reservations;
use crate::retire::{RetireOutcome, Retirer};

/// The `seckill worker` command: the worker alone, until `shutdown` fires.
pub async fn run_worker(config: &Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pool = connect_and_migrate(config).await?;
    register_endpoints(config, &pool).await?;
    let metrics = Arc::new(Metrics::new());
    let redis = connection::connect(&config.redis_url, config.redis_timeout).context("redis url")?;
    let sales = Sales::new(Keyspace::new(redis, config.key_prefix.clone()));
    let reservations = Reservations::new(sales, pool, metrics.clone());
    let sweeper = tokio::spawn(reservations.sweep(shutdown.clone()));
    let dispatcher_stop = CancellationToken::new();
    let dispatcher = build_dispatcher(config, metrics.clone(), Default::default())?
        .map(|d| tokio::spawn(d.run(dispatcher_stop.clone())));
    build_worker(config, "worker", metrics)?.run(shutdown).await;
    sweeper.await.context("reservation sweeper")?;
    // The dispatcher stops last: the worker's last batch may have written events.
    dispatcher_stop.cancel();
    if let Some(dispatcher) = dispatcher {
        dispatcher.await.context("webhook dispatcher")?;
    }
    Ok(())
}

/// The `seckill migrate` command.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    connect_and_migrate(config).await.map(drop)
}

/// A lazily connected pool, after the pending migrations were applied with it.
pub(super) async fn connect_and_migrate(config: &Config) -> anyhow::Result<PgPool> {
    let pool = db::connect_with_timeouts(
        &config.database_url,
        config.database_max_connections,
        &config.database.session_parameters(),
    )
    .context("database url")?;
    db::migrate(&pool).await.context("applying migrations (is Postgres reachable?)")?;
    Ok(pool)
}

/// Exit status of `seckill reconcile` when differences remain (and of `seckill retire` when refused).
const EXIT_DIFFERENCES: u8 = 1;
/// Exit status when the sale was never seeded (clap also exits 2 on an invalid id).
const EXIT_UNKNOWN_SALE: u8 = 2;
/// Exit status when Redis or Postgres failed.
const EXIT_FAILED: u8 = 3;
/// Exit status of `seckill reconcile` and `seckill retire` when the configuration is refused (a
/// `SECKILL_*` value clap reads but the service does not accept, such as a short admin token):
/// nothing ran. Its own status, as their statuses are read by scripts.
pub const EXIT_CONFIG_REFUSED: u8 = 5;

/// The `seckill reconcile` command: checks (or repairs) the sale, prints the report as pretty
/// JSON on stdout, and exits 0 when nothing is left to fix
/// ([`reconcile::ReconcileReport::resolved`]), 1 when differences remain, 2 when the sale is
/// unknown, 3 when Redis or Postgres failed, 4 when a repair finds the sale retired.
pub async fn run_reconcile(config: &Config, sale: &SaleId, repair: bool) -> ExitCode {
    let outcome: anyhow::Result<Option<(String, bool)>> = async {
        let pool = connect_and_migrate(config).await?;
        let redis = connection::connect(&config.redis_url, config.redis_timeout).context("redis url")?;
        let sales = Sales::new(Keyspace::new(redis, config.key_prefix.clone()));
        let report = if repair {
            reconcile::repair(&sales, &pool, sale).await
        } else {
            reconcile::check(&sales, &pool, sale).await
        };
        let Some(report) = report.context("reconciling")? else {
            return Ok(None);
        };
        Ok(Some((serde_json::to_string_pretty(&report)?, report.resolved())))
    }
    .await;
    match outcome {
        Ok(Some((json, resolved))) => {
            println!("{json}");
            if resolved { ExitCode::SUCCESS } else { ExitCode::from(EXIT_DIFFERENCES) }
        }
        Ok(None) => {
            eprintln!(
                "seckill reconcile: unknown sale '{sale}': not seeded in Redis under key prefix '{}' (nor, for \
                    --repair, in the sales table)",
                config.key_prefix
            );
            ExitCode::from(EXIT_UNKNOWN_SALE)
        }
        Err(err) if matches!(err.downcast_ref(), Some(reconcile::ReconcileError::Retired)) => {
            eprintln!("seckill reconcile: sale '{sale}' is retired, or being retired: nothing repaired");
            ExitCode::from(EXIT_ALREADY_RETIRED)
        }
        Err(err) => {
            eprintln!("seckill reconcile: {err:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Exit status of `seckill retire` when the sale was retired before (and of `seckill reconcile
/// --repair` when it finds the sale retired).
const EXIT_ALREADY_RETIRED: u8 = 4;

/// The `seckill retire` command: retires the sale (`crate::retire`), prints the report (or the
/// reasons it is refused) as pretty JSON on stdout, and exits 0 retired, 1 refused, 2 unknown
/// sale, 3 Redis or Postgres failed, 4 already retired.
pub async fn run_retire(config: &Config, sale: &SaleId) -> ExitCode {
    let outcome: anyhow::Result<RetireOutcome> = async {
        let pool = connect_and_migrate(config).await?;
        let redis = connection::connect(&config.redis_url, config.redis_timeout).context("redis url")?;
        let sales = Sales::new(Keyspace::new(redis, config.key_prefix.clone()));
        let retirer = Retirer::new(sales, pool.clone(), Arc::new(Metrics::new()), config.worker_block);
        let outcome = retirer.retire(sale).await.map_err(|err| anyhow::Error::new(err).context("retiring"))?;
        if let RetireOutcome::Retired(report) = &outcome {
            audit::record_retirement(&pool, sale, report, Some("seckill retire")).await;
        }
        Ok(outcome)
    }
    .await;
    let json = |value: serde_json::Value| println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
    match outcome {
        Ok(RetireOutcome::Retired(report)) => {
            json(serde_json::to_value(report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(RetireOutcome::Refused(reasons)) => {
            json(serde_json::json!({"sale_id": sale.as_str(), "error": "not_retirable", "reasons": reasons}));
            ExitCode::from(EXIT_DIFFERENCES)
        }
        Ok(RetireOutcome::UnknownSale) => {
            eprintln!(
                "seckill retire: unknown sale '{sale}': not seeded in Redis under key prefix '{}'",
                config.key_prefix
            );
            ExitCode::from(EXIT_UNKNOWN_SALE)
        }
        Ok(RetireOutcome::AlreadyRetired) => {
            eprintln!("seckill retire: sale '{sale}' was retired before");
            ExitCode::from(EXIT_ALREADY_RETIRED)
        }
        Err(err) => {
            eprintln!("seckill retire: {err:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The `seckill operator-token` command: a fresh token on stdout's first line, its roster line on
/// the second; what to do with them on stderr.
pub fn print_operator_token(name: &str, role: Role) -> anyhow::Result<()> {
    let token = operators::new_token().map_err(anyhow::Error::msg)?;
    println!("{token}");
    println!("{name} {} {}", role.as_str(), operators::hash_hex(&token));
    eprintln!(
        "Give the token (first line) to {name}: it is shown only now, and seckill keeps only its hash. Add the \
         second line to SECKILL_OPERATORS_FILE (or SECKILL_OPERATORS) and restart the service."
    );
    Ok(())
}

/// The `seckill token` command: prints an HS256 token naming `user`, valid for `ttl`, signed with
/// `SECKILL_JWT_SECRET` and carrying the configured user claim, issuer and audience.
pub fn print_token(auth: &AuthConfig, user: &UserId, ttl: Duration) -> anyhow::Result<()> {
    let secret = auth.jwt_secret.as_ref().context("seckill token signs with SECKILL_JWT_SECRET, which is not set")?;
    anyhow::ensure!(
        secret.expose_secret().len() >= identity::MIN_SECRET_BYTES,
        "SECKILL_JWT_SECRET must be at least {} bytes",
        identity::MIN_SECRET_BYTES
    );
    anyhow::ensure!(
        ttl <= auth.jwt_max_lifetime,
        "--ttl {} is longer than SECKILL_JWT_MAX_LIFETIME ({}): the service would refuse the token",
        humantime::format_duration(ttl),
        humantime::format_duration(auth.jwt_max_lifetime)
    );
    let token = identity::sign_hs256(
        secret,
        user,
        &auth.jwt_user_claim,
        ttl,
        auth.jwt_issuer.as_deref(),
        auth.jwt_audience.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    println!("{token}");
    Ok(())
}

/// The `seckill pay` command: signs an `order.paid` event for `order` with
/// SECKILL_PAYMENT_SECRET, posts it to `url`'s `/payments/events`, prints the answer.
pub async fn send_payment(
    payment_secret: Option<&SecretString>,
    sale: &SaleId,
    order: uuid::Uuid,
    url: &str,
    event_id: Option<String>,
) -> ExitCode {
    let Some(secret) = payment_secret else {
        eprintln!("seckill pay: SECKILL_PAYMENT_SECRET is not set");
        return ExitCode::from(EXIT_DIFFERENCES);
    };
    let id = event_id.unwrap_or_else(|| format!("evt_{}", uuid::Uuid::now_v7().simple()));
    let body =
        serde_json::json!({"id": id, "type": "order.paid", "sale_id": sale.as_str(), "order_id": order}).to_string();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let signature = crate::reservations::signature::sign(body.as_bytes(), secret.expose_secret().as_bytes(), now);
    let endpoint = format!("{}/payments/events", url.trim_end_matches('/'));
    let sent = reqwest::Client::new()
        .post(&endpoint)
        .header("content-type", "application/json")
        .header(crate::reservations::signature::HEADER, signature)
        .body(body)
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(err) => {
            eprintln!("seckill pay: {endpoint}: {err}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    println!("{text}");
    let paid = status.is_success()
        && serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v["status"] == "paid" && v["late_payment"] == false);
    if paid {
        ExitCode::SUCCESS
    } else {
        eprintln!("seckill pay: event {id}: HTTP {status}");
        ExitCode::from(EXIT_DIFFERENCES)
    }
}

/// The `seckill solve` command: fetches a challenge of `args.sale` from `args.url` as the buyer
/// (or reads `args.challenge`), solves it, prints the `Seckill-Challenge` header's value on
/// stdout and what it did on stderr; exits 0 solved, 1 refused or not solved in time, 3 the
/// service could not be reached or the challenge not read.
pub async fn solve(args: SolveArgs) -> ExitCode {
    let answer = match &args.challenge {
        Some(path) => read_challenge(path),
        None => fetch_challenge(&args).await,
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(code) => return code,
    };
    let asked: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
    let timeout = args.timeout;
    let solved = tokio::task::spawn_blocking(move || solver::solve(&answer, timeout)).await;
    match solved {
        Ok(Ok(solved)) => {
            println!("{}", solved.header);
            eprintln!(
                "seckill solve: {} tries ({} on average, {}x the sale's cost) of {} iterations each in {:.2} s; \
                 valid until {}",
                solved.tries(),
                asked["tries"],
                asked["factor"],
                asked["parameters"]["cost"],
                solved.took.as_secs_f64(),
                asked["expires_at"].as_str().unwrap_or("?"),
            );
            ExitCode::SUCCESS
        }
        Ok(Err(err @ SolveError::NotAChallenge(_))) => {
            eprintln!("seckill solve: {err}");
            ExitCode::from(EXIT_FAILED)
        }
        Ok(Err(err)) => {
            eprintln!("seckill solve: {err}");
            ExitCode::from(EXIT_DIFFERENCES)
        }
        Err(err) => {
            eprintln!("seckill solve: the solver stopped: {err}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// A challenge from a file, or stdin for `-`.
fn read_challenge(path: &std::path::Path) -> Result<Vec<u8>, ExitCode> {
    let read = if path.as_os_str() == "-" {
        let mut bytes = vec![];
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).map(|_| bytes)
    } else {
        std::fs::read(path)
    };
    read.map_err(|err| {
        eprintln!("seckill solve: {}: {err}", path.display());
        ExitCode::from(EXIT_FAILED)
    })
}

/// `GET /sales/{sale}/challenge` as the buyer: its body, or the exit code of a refusal.
async fn fetch_challenge(args: &SolveArgs) -> Result<Vec<u8>, ExitCode> {
    let sale = args.sale.as_ref().expect("clap asks --sale without --challenge");
    let endpoint = format!("{}/sales/{sale}/challenge", args.url.trim_end_matches('/'));
    let mut request = reqwest::Client::new().get(&endpoint).timeout(Duration::from_secs(10));
    if let Some(user) = &args.user {
        request = request.query(&[("user_id", user.as_str())]);
    }
    if let Some(token) = &args.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|err| {
        eprintln!("seckill solve: {endpoint}: {err}");
        ExitCode::from(EXIT_FAILED)
    })?;
    let status = response.status();
    let body = response.bytes().await.map_err(|err| {
        eprintln!("seckill solve: {endpoint}: {err}");
        ExitCode::from(EXIT_FAILED)
    })?;
    if !status.is_success() {
        eprintln!("seckill solve: {endpoint}: HTTP {status}: {}", String::from_utf8_lossy(&body));
        return Err(ExitCode::from(EXIT_DIFFERENCES));
    }
    Ok(body.to_vec())
}
