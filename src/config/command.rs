//! What `seckill` runs: its subcommands and their own arguments. The commands that talk to Redis
//! and Postgres take every setting ([`super::Config`]); `token` takes only the JWT settings,
//! `pay` only the payment settings, `solve` and `draw` none, so each `--help` lists what its command
//! reads.

use std::time::Duration;

use clap::Subcommand;

use secrecy::SecretString;

use super::{AuthConfig, Config, duration};
use crate::domain::{SaleId, UserId};
use crate::operators::{Role, check_name};

/// What to run.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Apply migrations, then run the HTTP API and (unless --no-worker) the order worker.
    Serve {
        /// Do not run the order worker in this process (run `seckill worker` elsewhere).
        #[arg(long, env = "SECKILL_NO_WORKER")]
        no_worker: bool,
        #[command(flatten)]
        config: Box<Config>,
    },
    /// Run only the order worker: Redis stream -> Postgres.
    Worker {
        #[command(flatten)]
        config: Box<Config>,
    },
    /// Apply the database migrations and exit.
    Migrate {
        #[command(flatten)]
        config: Box<Config>,
    },
    /// Compare one sale's Redis buyers with its Postgres orders; print the report as JSON.
    ///
    /// Reports buyers with no order in Postgres or the stream (missing_in_postgres), Postgres
    /// orders of users Redis does not know (unknown_to_redis), unbalanced stock and a missing or
    /// different `sales` row. Exit status: 0 consistent (with --repair: nothing left to fix),
    /// 1 differences remain, 2 unknown sale, invalid id or another usage error (clap's), 3 Redis
    /// or Postgres failed (or, with --repair, orders of the shards Redis kept of a sharded sale it
    /// lost are still queued: run it again shortly), 4 (--repair) the sale is retired or being
    /// retired: nothing repaired, 5 the configuration is refused: nothing ran.
    Reconcile {
        /// The sale to reconcile.
        #[arg(value_parser = SaleId::parse)]
        sale_id: SaleId,
        /// Also repair: seed a sale Redis lost from its `sales` row, put buyers Postgres has and
        /// Redis lost back (stock lowered to match), re-enqueue missing orders (under the ids
        /// their buyers were told) and restore a missing `sales` row from Redis.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        config: Box<Config>,
    },
    /// Retire one sale: remove its Redis keys and registrations; Postgres keeps its orders and
    /// its row, marked retired. Prints the report as JSON.
    ///
    /// Only a sale that has ended or sold out, whose queue has drained and that reconciles can be
    /// retired; a retired sale answers 410 sale_retired and cannot be seeded again. Exit status:
    /// 0 retired, 1 refused (the reasons are printed), 2 unknown sale, invalid id or another usage
    /// error (clap's), 3 Redis or Postgres failed, 4 already retired, 5 the configuration is
    /// refused: nothing ran.
    Retire {
        /// The sale to retire.
        #[arg(value_parser = SaleId::parse)]
        sale_id: SaleId,
        #[command(flatten)]
        config: Box<Config>,
    },
    /// Print an HS256 token naming USER, signed with SECKILL_JWT_SECRET (with the configured
    /// user claim, issuer and audience), for `Authorization: Bearer` with SECKILL_AUTH=jwt.
    Token {
        /// The buyer the token names (a valid user_id).
        #[arg(long, value_parser = UserId::parse)]
        user: UserId,
        /// How long the token is valid.
        #[arg(long, default_value = "1h", value_parser = duration)]
        ttl: Duration,
        #[command(flatten)]
        auth: AuthConfig,
    },
    /// Send a signed `order.paid` event for one order to a running service's POST
    /// /payments/events (signed with SECKILL_PAYMENT_SECRET, as the shop's payment system would),
    /// and print its answer. Exit status: 0 paid, 1 answered otherwise (a late payment, an error),
    /// 3 the service could not be reached.
    Pay {
        /// The order's sale.
        #[arg(long, value_parser = SaleId::parse)]
        sale: SaleId,
        /// The order (the order_id of its 201).
        #[arg(long)]
        order: uuid::Uuid,
        /// The service's base URL (plain HTTP).
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The event's id (default: a new UUID): send the same id again to replay an event.
        #[arg(long)]
        event_id: Option<String>,
        /// The key the service checks the event's signature with (SECKILL_PAYMENT_SECRET).
        #[arg(long, env = "SECKILL_PAYMENT_SECRET", value_parser = super::secret, hide_env_values = true)]
        payment_secret: Option<SecretString>,
    },
    /// Solve a sale's proof of work outside a browser; print the Seckill-Challenge header's value.
    ///
    /// Fetches a challenge from a running service's GET /sales/{id}/challenge as the buyer (or
    /// reads one with --challenge), solves it with the altcha crate and prints the header's value,
    /// the one line on stdout, for a POST /sales/{id}/queue (or a POST /buy); what it did goes to
    /// stderr. The algorithm, for a solver of your own: docs/waiting-room.md. Exit status: 0
    /// solved, 1 refused by the service (its answer on stderr) or not solved within --timeout, 3
    /// the service could not be reached or the challenge not read.
    Solve(SolveArgs),
    /// The draw of a drop: check a published draw (docs/draw.md).
    #[command(subcommand)]
    Draw(DrawCommand),
    /// Make a named operator's credential: print a fresh random token (first line: give it to
    /// the operator; seckill never sees it again) and its roster line `name role sha256hex`
    /// (second line: add it to SECKILL_OPERATORS_FILE or SECKILL_OPERATORS, then restart).
    OperatorToken {
        /// The operator's name, as the audit will record it (1-64 of `[A-Za-z0-9_.@-]`).
        #[arg(long, value_parser = operator_name)]
        name: String,
        /// viewer: reads, the live page and the exports; operator: everything.
        #[arg(long, value_enum)]
        role: Role,
    },
}

fn operator_name(raw: &str) -> Result<String, String> {
    check_name(raw).map(|()| raw.to_owned())
}

/// `seckill draw`'s subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum DrawCommand {
    /// Check a drop's published draw: the seed is the one committed to, and the winners, the
    /// waitlist and the losers are what the seed and the entries give. Prints a summary, or the
    /// first entrant whose result differs.
    ///
    /// The record is the newline-delimited JSON a drop publishes once its draw is done and its seed
    /// revealed (the draw line with the seed, the commitment and the stock, then every entry and
    /// every result, entrants named by pseudonym). The method, a worked example and how to find
    /// your own pseudonym: docs/draw.md. Exit status: 0 verified, 1 it does not verify (a result
    /// differs, the commitment does not match, or the record is malformed, its line named), 3
    /// the file could not be read.
    Verify {
        /// The draw's record: a file, or - for stdin.
        record: std::path::PathBuf,
    },
}

/// `seckill solve`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SolveArgs {
    /// The sale whose challenge to fetch.
    #[arg(long, value_parser = SaleId::parse, required_unless_present = "challenge")]
    pub sale: Option<SaleId>,
    /// The buyer's bearer token (SECKILL_AUTH=jwt): the challenge is bound to its buyer.
    #[arg(long)]
    pub token: Option<String>,
    /// The buyer, as `user_id` (SECKILL_AUTH=none; with a token, it must be the token's).
    #[arg(long, value_parser = UserId::parse)]
    pub user: Option<UserId>,
    /// The service's base URL (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Solve this challenge instead of fetching one: a file holding the JSON answer of GET
    /// /sales/{id}/challenge, or - for stdin.
    #[arg(long, conflicts_with_all = ["sale", "token", "user"])]
    pub challenge: Option<std::path::PathBuf>,
    /// Give up if no solution is found within this long.
    #[arg(long, default_value = "90s", value_parser = duration)]
    pub timeout: Duration,
}

impl Command {
    /// The service's settings, for the commands that have them (not `token`, `pay`, `solve`,
    /// `operator-token`, `draw`).
    pub fn config(&self) -> Option<&Config> {
        match self {
            Self::Serve { config, .. }
            | Self::Worker { config }
            | Self::Migrate { config }
            | Self::Reconcile { config, .. }
            | Self::Retire { config, .. } => Some(config),
            Self::Token { .. } | Self::Pay { .. } | Self::Solve(_) | Self::OperatorToken { .. } | Self::Draw(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Cli;

    /// Each command's long help, by name ("" for `seckill --help`, "draw verify" for a subcommand's).
    fn helps() -> Vec<(String, String)> {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let mut helps = vec![(String::new(), cli.render_long_help().to_string())];
        for sub in cli.get_subcommands_mut() {
            helps.push((sub.get_name().to_owned(), sub.render_long_help().to_string()));
            let name = sub.get_name().to_owned();
            for nested in sub.get_subcommands_mut().filter(|nested| nested.get_name() != "help") {
                helps.push((format!("{name} {}", nested.get_name()), nested.render_long_help().to_string()));
            }
        }
        helps
    }

    #[test]
    fn each_command_lists_only_the_settings_it_reads() {
        let helps: std::collections::HashMap<String, String> = helps().into_iter().collect();
        for server in ["serve", "worker", "migrate", "reconcile", "retire"] {
            assert!(helps[server].contains("--redis-url") && helps[server].contains("--jwt-secret"), "{server}");
        }
        assert!(helps["token"].contains("--jwt-secret") && helps["pay"].contains("--payment-secret"));
        for (command, foreign) in [
            ("token", "--payment-secret"),
            ("pay", "--jwt-secret"),
            ("solve", "--jwt-secret"),
            ("draw verify", "--jwt-secret"),
            ("", "--redis-url"),
        ] {
            for server_setting in ["--listen", "--redis-url", "--database-url", "--rate-limit", foreign] {
                assert!(!helps[command].contains(server_setting), "`seckill {command} --help` lists {server_setting}");
            }
        }
    }

    #[test]
    fn every_file_a_help_points_to_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut pointed = 0;
        for (command, help) in helps() {
            let text = help.replace('\n', " ");
            for word in text.split(|c: char| c.is_whitespace() || "(),;\"`".contains(c)) {
                let path = word.trim_end_matches(['.', ':']);
                if path.starts_with("docs/") || path.starts_with("lua/") || path == "README.md" {
                    let file = path.split('#').next().unwrap();
                    assert!(
                        root.join(file).is_file(),
                        "`seckill {command} --help` points to {path}, which is not a file"
                    );
                    pointed += 1;
                }
            }
            assert!(!text.contains("README: "), "`seckill {command} --help` points into the README by a title");
        }
        assert!(pointed > 0, "the helps point to the docs");
    }
}
