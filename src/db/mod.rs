//! Everything the service asks of Postgres: the pool and the migrations (here), orders
//! (`orders`), the sale records (`sales`) and their retirement mark (`retired`), the order events'
//! outbox (`outbox`).

mod orders;
mod outbox;
mod retired;
mod sales;

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgPool};

pub(crate) use orders::RETURNS_UNITS;
pub use orders::{
    Hint, InsertReport, StoredOrder, count_group_orders_besides, count_orders, count_orders_by_sale, group_units_page,
    insert_orders, order_of, order_users, orders_of_users,
};
pub(crate) use outbox::{emit_order, lost_events, order_event};
pub use retired::{
    last_activity, last_seeded, lock_retired, mark_retired, retired_between, rows_among, sale_retired, unmark_retired,
};
pub use sales::{SaleRow, insert_sale_if_missing, sale_row, sales_row_stock, set_ended, set_queue_seed, upsert_sale};

/// The migrations in `migrations/`, compiled into the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// How long a caller waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// A lazily connected pool: the process starts even while Postgres is down, and each call fails
/// after `acquire_timeout` instead of hanging. No statement timeout nor keepalives (tools and
/// tests); the service's pools come from [`connect_with_timeouts`].
pub fn connect_lazy(url: &SecretString, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy(url.expose_secret())
}

/// [`connect_lazy`], each connection starting with these run-time parameters (the statement
/// timeout and server-side TCP keepalives of `DatabaseConfig::session_parameters`, set as startup
/// parameters: no extra round trip).
pub fn connect_with_timeouts(
    url: &SecretString,
    max_connections: u32,
    session_parameters: &[(&str, String)],
) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.expose_secret().parse()?;
    let options = options.options(session_parameters.iter().map(|(k, v)| (*k, v.as_str())));
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with(options))
}

/// Applies pending migrations, on a connection of their own without a statement timeout (a
/// migration may rewrite a big table).
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    let mut connection = pool.acquire().await?.detach();
    connection.execute("set statement_timeout = 0").await?;
    let migrated = MIGRATOR.run(&mut connection).await;
    connection.close().await?;
    migrated
}

/// Whether `err` says Postgres could not do the work now rather than refused it: no connection
/// (I/O, TLS, the pool's wait), or a server that cancelled or could not run the statement for
/// reasons of its own state (SQLSTATE class 08 connection but 08P01, a protocol violation; 53
/// resources; 57 operator intervention: a statement timeout, a shutdown, a failover; 40001
/// serialization; 55P03 a lock not available; 25006 a read-only server, a replica after a
/// failover). Not a deadlock (40P01): the code takes its rows' locks in one order, so one is a
/// bug. The caller may try again; nothing it asked was committed unless the commit itself is
/// what failed.
pub fn is_postgres_outage(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            (["08", "53", "57"].iter().any(|class| code.starts_with(class)) && code != "08P01")
                || ["40001", "55P03", "25006"].contains(&code.as_ref())
        }),
        _ => false,
    }
}

/// `select 1`, for readiness.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("select 1").execute(pool).await.map(drop)
}

pub use crate::domain::ms_to_time;
