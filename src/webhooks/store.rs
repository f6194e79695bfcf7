//! The dispatcher's and the operators' statements on the outbox (`webhook_events`,
//! `webhook_deliveries`; the writers are in `crate::db::outbox`).

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

/// A delivery claimed for one attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The event's row id.
    pub event: i64,
    pub endpoint: String,
    /// Attempts so far, this one included.
    pub attempts: i32,
    /// The `webhook-id`.
    pub message_id: String,
    /// The exact bytes every attempt sends.
    pub body: String,
}

/// Claims up to `limit` due deliveries to `endpoint` for `lease_secs` (their next attempt moves
/// past the lease, so a dispatcher that dies mid-attempt leaves them due again), skipping rows
/// another dispatcher holds and every delivery whose order has an earlier event still open to
/// the same endpoint (one order's events arrive in order).
///
/// Its cost is the batch's, not the backlog's, whatever other endpoints have piled up: the
/// endpoint's due rows are read in the order of the index `webhook_deliveries_due` (endpoint,
/// next attempt, event) until `limit` are taken, and the update finds them by `ctid` (a TID scan;
/// they are locked, so their `ctid` holds until it runs), where a join on the key let Postgres
/// hash the whole table, delivered rows included, every round.
pub async fn claim(pool: &PgPool, endpoint: &str, limit: i64, lease_secs: f64) -> Result<Vec<Claimed>, sqlx::Error> {
    let rows: Vec<(i64, String, i32, String, String)> = sqlx::query_as(
        "with due as (
             select d.ctid from webhook_deliveries d
             where d.endpoint = $1 and d.delivered_at is null and d.failed_at is null and d.next_attempt_at <= now()
               and (d.order_id is null or not exists (
                   select 1 from webhook_deliveries p
                   where p.order_id = d.order_id and p.endpoint = d.endpoint and p.event_id < d.event_id
                     and p.delivered_at is null and p.failed_at is null))
             order by d.next_attempt_at, d.event_id limit $2
             for update of d skip locked)
         update webhook_deliveries d
         set attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $3)
         from webhook_events e
         where d.ctid = any(array(select ctid from due)) and e.id = d.event_id
         returning d.event_id, d.endpoint, d.attempts, e.event_id, e.body",
    )
    .bind(endpoint)
    .bind(limit)
    .bind(lease_secs)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(event, endpoint, attempts, message_id, body)| Claimed { event, endpoint, attempts, message_id, body })
        .collect())
}

/// Gives back claims never attempted (the dispatcher stopping mid-round): due again at once, their
/// attempt not counted. A claim another dispatcher took since (its lease lapsed) is left alone.
pub async fn release(pool: &PgPool, claims: &[Claimed]) -> Result<(), sqlx::Error> {
    let events: Vec<i64> = claims.iter().map(|c| c.event).collect();
    let endpoints: Vec<&str> = claims.iter().map(|c| c.endpoint.as_str()).collect();
    let attempts: Vec<i32> = claims.iter().map(|c| c.attempts).collect();
    sqlx::query(
        "update webhook_deliveries d set attempts = d.attempts - 1, next_attempt_at = now()
         from unnest($1::bigint[], $2::text[], $3::integer[]) as c (event_id, endpoint, attempts)
         where d.event_id = c.event_id and d.endpoint = c.endpoint and d.attempts = c.attempts
           and d.delivered_at is null and d.failed_at is null",
    )
    .bind(&events)
    .bind(&endpoints)
    .bind(&attempts)
    .execute(pool)
    .await
    .map(drop)
}

/// Records a delivery's 2xx (also over a failure its endpoint's disabling recorded meanwhile: the
/// receiver has it).
pub async fn delivered(pool: &PgPool, claimed: &Claimed, status: u16) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update webhook_deliveries set delivered_at = now(), failed_at = null, last_status = $3, last_error = null
         where event_id = $1 and endpoint = $2 and delivered_at is null",
    )
    .bind(claimed.event)
    .bind(&claimed.endpoint)
    .bind(i32::from(status))
    .execute(pool)
    .await
    .map(drop)
}

/// Records a failed attempt: the next one in `retry_in_secs`, or (`None`) the delivery failed
/// for good. A claim that lost its lease to a later one records nothing.
pub async fn attempt_failed(
    pool: &PgPool,
    claimed: &Claimed,
    status: Option<u16>,
    error: &str,
    retry_in_secs: Option<f64>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update webhook_deliveries
         set last_status = $3, last_error = $4,
             next_attempt_at = case when $5::float8 is null then next_attempt_at
                                    else now() + make_interval(secs => $5) end,
             failed_at = case when $5::float8 is null then now() end
         where event_id = $1 and endpoint = $2 and attempts = $6 and delivered_at is null and failed_at is null",
    )
    .bind(claimed.event)
    .bind(&claimed.endpoint)
    .bind(status.map(i32::from))
    .bind(error)
    .bind(retry_in_secs)
    .bind(claimed.attempts)
    .execute(pool)
    .await
    .map(drop)
}

/// Age in seconds of the oldest event with a delivery still open (0: none).
pub async fn oldest_open_age(pool: &PgPool) -> Result<f64, sqlx::Error> {
    let age: Option<f64> = sqlx::query_scalar(
        "select extract(epoch from now() - min(e.created_at))::float8
         from webhook_deliveries d join webhook_events e on e.id = d.event_id
         where d.delivered_at is null and d.failed_at is null",
    )
    .fetch_one(pool)
    .await?;
    Ok(age.unwrap_or(0.0).max(0.0))
}

/// The deliveries as the live page shows them: how many are open, how many failed for good, and
/// the age of the oldest open one's event (the delivery lag), in one read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub open: i64,
    pub failed: i64,
    pub oldest_open_age_secs: f64,
}

/// The [`Summary`] of every delivery kept.
pub async fn summary(pool: &PgPool) -> Result<Summary, sqlx::Error> {
    let (open, failed, age): (i64, i64, Option<f64>) = sqlx::query_as(
        "select count(*) filter (where d.delivered_at is null and d.failed_at is null),
                count(*) filter (where d.failed_at is not null),
                extract(epoch from now() - min(e.created_at)
                    filter (where d.delivered_at is null and d.failed_at is null))::float8
         from webhook_deliveries d join webhook_events e on e.id = d.event_id",
    )
    .fetch_one(pool)
    .await?;
    Ok(Summary { open, failed, oldest_open_age_secs: age.unwrap_or(0.0).max(0.0) })
}

/// Deletes up to `limit` events older than `retention_secs` none of whose deliveries is open
/// (delivered, or failed for good). Returns how many.
pub async fn purge(pool: &PgPool, retention_secs: f64, limit: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "delete from webhook_events where id in (
             select e.id from webhook_events e
             where e.created_at < now() - make_interval(secs => $1)
               and not exists (select 1 from webhook_deliveries d
                               where d.event_id = e.id and d.delivered_at is null and d.failed_at is null)
             order by e.created_at limit $2)",
    )
    .bind(retention_secs)
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Most events one listing returns.
pub const MAX_LISTED: i64 = 500;

/// Which events a listing returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Every event.
    All,
    /// Events with a delivery that failed for good.
    Failed,
}

/// One event as the operators see it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The cursor.
    pub id: i64,
    pub message_id: String,
    pub kind: String,
    pub sale_id: String,
    pub order_id: Option<Uuid>,
    /// The body every attempt sends.
    pub body: String,
    pub created_at: OffsetDateTime,
    /// Its deliveries, one per endpoint.
    pub deliveries: Vec<Delivery>,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub endpoint: String,
    pub attempts: i32,
    pub next_attempt_at: OffsetDateTime,
    pub delivered_at: Option<OffsetDateTime>,
    pub failed_at: Option<OffsetDateTime>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

type EventRow = (i64, String, String, String, Option<Uuid>, String, OffsetDateTime);
type DeliveryRow =
    (i64, String, i32, OffsetDateTime, Option<OffsetDateTime>, Option<OffsetDateTime>, Option<i32>, Option<String>);

/// Events after the cursor `after`, in order, at most `limit` (1 to [`MAX_LISTED`]). An event
/// shows once every transaction that began before its own has ended, so one that commits late
/// with a lower id is not skipped by a reader already past it in the common case (see
/// docs/webhooks.md for the limit of that promise).
pub async fn list(pool: &PgPool, after: i64, limit: i64, listing: Listing) -> Result<Vec<Event>, sqlx::Error> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "select e.id, e.event_id, e.type, e.sale_id, e.order_id, e.body, e.created_at from webhook_events e
         where e.id > $1 and e.txid < pg_snapshot_xmin(pg_current_snapshot())
           and ($3 = false or exists (select 1 from webhook_deliveries d
                                      where d.event_id = e.id and d.failed_at is not null))
         order by e.id limit $2",
    )
    .bind(after)
    .bind(limit.clamp(1, MAX_LISTED))
    .bind(listing == Listing::Failed)
    .fetch_all(pool)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let deliveries: Vec<DeliveryRow> = sqlx::query_as(
        "select event_id, endpoint, attempts, next_attempt_at, delivered_at, failed_at, last_status, last_error
         from webhook_deliveries where event_id = any($1) order by event_id, endpoint",
    )
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    let mut events: Vec<Event> = rows
        .into_iter()
        .map(|(id, message_id, kind, sale_id, order_id, body, created_at)| Event {
            id,
            message_id,
            kind,
            sale_id,
            order_id,
            body,
            created_at,
            deliveries: vec![],
        })
        .collect();
    for (event, endpoint, attempts, next_attempt_at, delivered_at, failed_at, last_status, last_error) in deliveries {
        if let Ok(i) = events.binary_search_by_key(&event, |e| e.id) {
            let delivery =
                Delivery { endpoint, attempts, next_attempt_at, delivered_at, failed_at, last_status, last_error };
            events[i].deliveries.push(delivery);
        }
    }
    Ok(events)
}

/// Sends the event again to every enabled endpoint it has a delivery to: each delivery that is
/// closed (delivered or failed) is due at once with a fresh schedule (those to an endpoint removed
/// or disabled stay as they are). `None`: no such event.
pub async fn retry(pool: &PgPool, id: i64) -> Result<Option<u64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let exists: Option<i64> =
        sqlx::query_scalar("select id from webhook_events where id = $1").bind(id).fetch_optional(&mut *tx).await?;
    if exists.is_none() {
        return Ok(None);
    }
    let reopened = sqlx::query(
        "update webhook_deliveries
         set attempts = 0, next_attempt_at = now(), delivered_at = null, failed_at = null, last_error = null
         where event_id = $1 and (delivered_at is not null or failed_at is not null)
           and endpoint in (select url from webhook_endpoints where disabled_at is null)",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(reopened.rows_affected()))
}
