use std::process::ExitCode;

use clap::Parser;
use seckill::app::{self, Application};
use seckill::config::{Cli, Command, DrawCommand};
use seckill::telemetry;

/// mimalloc: the request path makes many small, short-lived allocations (the README's benchmark
/// section has the before/after figures).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // Every command that connects checks what clap cannot (`seckill worker` too: it ran with a
    // zero insert timeout, storing nothing).
    if let Some(config) = cli.command.config()
        && let Err(err) = config.validate()
    {
        // The commands whose exit statuses scripts read say so in a status of its own.
        if matches!(cli.command, Command::Reconcile { .. } | Command::Retire { .. }) {
            eprintln!("Error: configuration: {err}");
            return Ok(ExitCode::from(app::EXIT_CONFIG_REFUSED));
        }
        return Err(anyhow::Error::msg(err).context("configuration"));
    }
    // Outside the runtime: the trace exporter's client blocks, and its flush at exit too.
    let log_format = cli.command.config().map(|config| config.log_format).unwrap_or_default();
    let telemetry = telemetry::init(log_format);
    let code = tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(cli));
    drop(telemetry);
    code
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve { no_worker, config } => {
            let shutdown = app::shutdown_on_signals();
            Application::build(&config, !no_worker).await?.run_until_stopped(shutdown).await?
        }
        Command::Worker { config } => app::run_worker(&config, app::shutdown_on_signals()).await?,
        Command::Migrate { config } => app::migrate(&config).await?,
        Command::Token { user, ttl, auth } => app::print_token(&auth, &user, ttl)?,
        Command::Pay { sale, order, url, event_id, payment_secret } => {
            return Ok(app::send_payment(payment_secret.as_ref(), &sale, order, &url, event_id).await);
        }
        // Ctrl-C keeps its default meaning: an interrupted check or repair is simply run again.
        Command::Reconcile { sale_id, repair, config } => {
            return Ok(app::run_reconcile(&config, &sale_id, repair).await);
        }
        Command::Retire { sale_id, config } => return Ok(app::run_retire(&config, &sale_id).await),
        Command::Solve(args) => return Ok(app::solve(args).await),
        Command::OperatorToken { name, role } => app::print_operator_token(&name, role)?,
        Command::Draw(DrawCommand::Verify { record }) => return Ok(app::verify_draw(&record)),
    }
    Ok(ExitCode::SUCCESS)
}
