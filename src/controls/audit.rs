//! The operators' audit trail: every seed, pause, resume, end, stock change and retirement of a
//! sale, one row of `sale_audit` each (migration `20261128000000_sale_audit.sql`), written by the
//! use case that did it, in the transaction of its Postgres change when it has one.

use serde_json::Value;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::domain::{DropId, SaleId};

/// Most entries one listing returns.
pub const MAX_LISTED: i64 = 100;

/// Longest reason kept, in characters.
pub const MAX_REASON_CHARS: usize = 200;

/// One operator action.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `seed`, `pause`, `resume`, `end`, `stock` or `retire`.
    pub action: String,
    /// The operator's reason, if given.
    pub reason: Option<String>,
    /// What the action did.
    pub effect: Value,
    /// Who did it, when known.
    pub actor: Option<String>,
    /// When it was recorded (Postgres's clock).
    pub at: OffsetDateTime,
}

/// An instant as an entry's `effect` writes it: RFC 3339 in UTC (`null` for none), as `at` is,
/// whichever action wrote it (docs/http-api.md).
pub fn instant(at: Option<OffsetDateTime>) -> Value {
    at.and_then(|t| t.to_offset(time::UtcOffset::UTC).format(&time::format_description::well_known::Rfc3339).ok())
        .map_or(Value::Null, Value::from)
}

/// Records `action` on `sale` (inside the caller's transaction, or on a connection of its own).
pub async fn record(
    conn: &mut PgConnection,
    sale: &SaleId,
    action: &str,
    reason: Option<&str>,
    effect: &Value,
    actor: Option<&str>,
) -> Result<(), sqlx::Error> {
    insert(conn, (Some(sale.as_str()), None), action, reason, effect, actor).await
}

/// Records `action` (`drop_seed`, `drop_pause`, ...) on the whole `drop`: one entry for all its
/// sizes, inside the caller's transaction.
pub async fn record_drop(
    conn: &mut PgConnection,
    drop: &DropId,
    action: &str,
    reason: Option<&str>,
    effect: &Value,
    actor: Option<&str>,
) -> Result<(), sqlx::Error> {
    insert(conn, (None, Some(drop.as_str())), action, reason, effect, actor).await
}

/// One entry, of a sale or of a drop (`(sale_id, drop_id)`).
async fn insert(
    conn: &mut PgConnection,
    (sale, drop): (Option<&str>, Option<&str>),
    action: &str,
    reason: Option<&str>,
    effect: &Value,
    actor: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into sale_audit (sale_id, drop_id, action, reason, effect, actor)
         values ($1, $2, $3, $4, $5::jsonb, $6)",
    )
    .bind(sale)
    .bind(drop)
    .bind(action)
    .bind(reason.filter(|r| !r.is_empty()))
    .bind(effect.to_string())
    .bind(actor)
    .execute(conn)
    .await
    .map(|_| ())
}

/// The sale's latest `limit` entries (at most [`MAX_LISTED`]), newest first, its drop's among
/// them for a size of a drop.
pub async fn list(pool: &sqlx::PgPool, sale: &SaleId, limit: i64) -> Result<Vec<Entry>, sqlx::Error> {
    listed(pool, "sale_id = $1 or (drop_id is not null and drop_id = $3)", sale.as_str(), sale.group(), limit).await
}

/// The drop's own latest `limit` entries (at most [`MAX_LISTED`]), newest first.
pub async fn list_drop(pool: &sqlx::PgPool, drop: &DropId, limit: i64) -> Result<Vec<Entry>, sqlx::Error> {
    listed(pool, "drop_id = $1 and $3::text is null", drop.as_str(), None, limit).await
}

async fn listed(
    pool: &sqlx::PgPool,
    filter: &str,
    id: &str,
    drop: Option<&str>,
    limit: i64,
) -> Result<Vec<Entry>, sqlx::Error> {
    type Row = (String, Option<String>, String, Option<String>, OffsetDateTime);
    let sql = format!(
        "select action, reason, effect::text, actor, at from sale_audit where {filter} order by id desc limit $2"
    );
    let rows: Vec<Row> =
        sqlx::query_as(&sql).bind(id).bind(limit.clamp(1, MAX_LISTED)).bind(drop).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|(action, reason, effect, actor, at)| Entry {
            action,
            reason,
            effect: serde_json::from_str(&effect).unwrap_or(Value::Null),
            actor,
            at,
        })
        .collect())
}

/// Records a retirement that has happened (by `actor`: the operator's for the admin route,
/// `"janitor"` for the janitor's, `"seckill retire"` for the command's). A failure is logged, not returned:
/// the sale is retired all the same.
pub async fn record_retirement(
    pool: &sqlx::PgPool,
    sale: &SaleId,
    effect: &impl serde::Serialize,
    actor: Option<&str>,
) {
    let effect = serde_json::to_value(effect).unwrap_or(Value::Null);
    let recorded = match pool.acquire().await {
        Ok(mut conn) => record(&mut conn, sale, "retire", None, &effect, actor).await,
        Err(err) => Err(err),
    };
    if let Err(err) = recorded {
        tracing::warn!(sale_id = %sale, error = %err, "retirement not recorded in the audit trail");
    }
}
