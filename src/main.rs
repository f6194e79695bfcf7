use clap::Parser;
use seckill::config::{Cli, Command};
use seckill::startup::{self, Application};
use seckill::telemetry;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init();
    let shutdown = startup::shutdown_on_signals();
    match cli.command {
        Command::Serve { no_worker } => {
            Application::build(&cli.config, !no_worker).await?.run_until_stopped(shutdown).await
        }
        Command::Worker => startup::run_worker(&cli.config, shutdown).await,
        Command::Migrate => startup::migrate(&cli.config).await,
    }
}
