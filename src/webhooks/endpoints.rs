//! The webhook endpoints (`webhook_endpoints`, `migrations/20261201120000_webhook_endpoints.sql`):
//! data every instance sees. Registered by `SECKILL_WEBHOOK_URL` at start and by the admin
//! routes, which also list, remove and re-enable them; read in SQL by every writer of events
//! (`crate::db::outbox`) and by the dispatcher, which disables one that fails for too long.

use std::time::Duration;

use sqlx::PgPool;
use time::OffsetDateTime;

/// Most endpoints registered at once (each has a claim loop of its own in every dispatcher).
pub const MAX_ENDPOINTS: i64 = 16;
/// Longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// An http(s) URL with a host, as the dispatcher posts to it (normalised: the scheme and host in
/// lower case, `/` for an empty path), at most [`MAX_URL_BYTES`].
pub fn parse_url(s: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(s.trim()).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err("a webhook endpoint is an http:// or https:// URL with a host".into());
    }
    let url = url.to_string();
    if url.len() > MAX_URL_BYTES {
        return Err(format!("a webhook endpoint's URL is at most {MAX_URL_BYTES} bytes"));
    }
    Ok(url)
}

/// `url` as the logs show it: without its user, password and query, which may hold credentials
/// (the scheme, host, port and path say which endpoint it is).
pub fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// One endpoint as the operators see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub id: i64,
    pub url: String,
    pub created_at: OffsetDateTime,
    /// When its current run of failed attempts began (`None`: its last attempt was accepted).
    pub failing_since: Option<OffsetDateTime>,
    /// When the dispatcher disabled it (`None`: enabled).
    pub disabled_at: Option<OffsetDateTime>,
    pub disabled_reason: Option<String>,
    /// Its deliveries open: due, in flight or waiting for a retry.
    pub open: i64,
    /// Its deliveries failed for good (those its disabling closed among them).
    pub failed: i64,
}

impl Endpoint {
    pub fn enabled(&self) -> bool {
        self.disabled_at.is_none()
    }
}

type EndpointRow =
    (i64, String, OffsetDateTime, Option<OffsetDateTime>, Option<OffsetDateTime>, Option<String>, i64, i64);

const SELECT: &str = "select w.id, w.url, w.created_at, w.failing_since, w.disabled_at, w.disabled_reason,
        (select count(*) from webhook_deliveries d
         where d.endpoint = w.url and d.delivered_at is null and d.failed_at is null),
        (select count(*) from webhook_deliveries d where d.endpoint = w.url and d.failed_at is not null)
 from webhook_endpoints w";

fn endpoint((id, url, created_at, failing_since, disabled_at, disabled_reason, open, failed): EndpointRow) -> Endpoint {
    Endpoint { id, url, created_at, failing_since, disabled_at, disabled_reason, open, failed }
}

/// Every endpoint, in the order registered, with its counts.
pub async fn list(pool: &PgPool) -> Result<Vec<Endpoint>, sqlx::Error> {
    let rows: Vec<EndpointRow> = sqlx::query_as(&format!("{SELECT} order by w.id")).fetch_all(pool).await?;
    Ok(rows.into_iter().map(endpoint).collect())
}

/// The endpoint `id`, with its counts.
pub async fn get(pool: &PgPool, id: i64) -> Result<Option<Endpoint>, sqlx::Error> {
    let row: Option<EndpointRow> =
        sqlx::query_as(&format!("{SELECT} where w.id = $1")).bind(id).fetch_optional(pool).await?;
    Ok(row.map(endpoint))
}

/// What registering a URL did.
#[derive(Debug, Clone, PartialEq)]
pub enum Registered {
    /// Registered now: it gets every event written from now on.
    New(Endpoint),
    /// Already registered, left as it was (a disabled one stays disabled).
    Existing(Endpoint),
    /// [`MAX_ENDPOINTS`] are registered: not registered.
    Full,
}

/// Registers `url` (a [`parse_url`] result), once: registering it again changes nothing.
pub async fn register(pool: &PgPool, url: &str) -> Result<Registered, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // Registrations one at a time, so the bound holds; the writers only read the table and are
    // not blocked.
    sqlx::query("lock table webhook_endpoints in share row exclusive mode").execute(&mut *tx).await?;
    let (existing, count): (Option<i64>, i64) = sqlx::query_as(
        "select (select id from webhook_endpoints where url = $1), (select count(*) from webhook_endpoints)",
    )
    .bind(url)
    .fetch_one(&mut *tx)
    .await?;
    let id = match existing {
        Some(id) => id,
        None if count >= MAX_ENDPOINTS => return Ok(Registered::Full),
        None => {
            sqlx::query_scalar("insert into webhook_endpoints (url) values ($1) returning id")
                .bind(url)
                .fetch_one(&mut *tx)
                .await?
        }
    };
    tx.commit().await?;
    let found = get(pool, id).await?.ok_or(sqlx::Error::RowNotFound)?;
    Ok(if existing.is_some() { Registered::Existing(found) } else { Registered::New(found) })
}

/// Registers the URLs of `SECKILL_WEBHOOK_URL` at start, each once. One that is registered and
/// disabled stays disabled (the dispatcher disabled it for failing; only an operator re-enables
/// it), and the log says so, as it says that the table is full.
pub async fn register_configured(pool: &PgPool, urls: &[String]) -> Result<(), sqlx::Error> {
    for url in urls {
        match register(pool, url).await? {
            Registered::New(e) => {
                tracing::info!(endpoint_id = e.id, url = shown(url), "SECKILL_WEBHOOK_URL: endpoint registered")
            }
            Registered::Existing(e) if !e.enabled() => tracing::warn!(
                endpoint_id = e.id,
                url = shown(url),
                disabled_at = ?e.disabled_at,
                reason = e.disabled_reason,
                "SECKILL_WEBHOOK_URL names an endpoint that is disabled; it stays disabled: POST \
                 /admin/webhooks/{{id}}/enable re-enables it"
            ),
            Registered::Existing(_) => {}
            Registered::Full => tracing::warn!(
                url = shown(url),
                max = MAX_ENDPOINTS,
                "SECKILL_WEBHOOK_URL: endpoint not registered: as many endpoints as allowed are registered \
                 (DELETE /admin/webhooks/{{id}} removes one)"
            ),
        }
    }
    Ok(())
}

/// Removes the endpoint `id`: it gets no event from now on and its open deliveries are dropped
/// (those settled stay listed until their retention). Its URL and the deliveries dropped; `None`:
/// no such endpoint.
pub async fn remove(pool: &PgPool, id: i64) -> Result<Option<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "with gone as (delete from webhook_endpoints where id = $1 returning url),
              dropped as (delete from webhook_deliveries d using gone
                          where d.endpoint = gone.url and d.delivered_at is null and d.failed_at is null
                          returning 1)
         select url, (select count(*) from dropped) from gone",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Enables the endpoint `id` again, with a fresh failure clock, and reopens the deliveries its
/// disabling closed (due at once, a fresh schedule); the events written while it was disabled
/// have no delivery to it. The endpoint and the deliveries reopened; `None`: no such endpoint.
/// An enabled endpoint is left as it is.
pub async fn enable(pool: &PgPool, id: i64) -> Result<Option<(Endpoint, u64)>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let found: Option<(String, Option<OffsetDateTime>)> =
        sqlx::query_as("select url, disabled_at from webhook_endpoints where id = $1 for update")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((url, disabled_at)) = found else {
        return Ok(None);
    };
    let mut reopened = 0;
    if let Some(disabled_at) = disabled_at {
        sqlx::query(
            "update webhook_endpoints set disabled_at = null, disabled_reason = null, failing_since = null,
                 last_failed_at = null
             where id = $1",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        reopened = sqlx::query(
            "update webhook_deliveries
             set failed_at = null, attempts = 0, next_attempt_at = now(), last_error = null
             where endpoint = $1 and failed_at = $2 and delivered_at is null",
        )
        .bind(&url)
        .bind(disabled_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    }
    tx.commit().await?;
    Ok(get(pool, id).await?.map(|endpoint| (endpoint, reopened)))
}

/// Every endpoint's URL and whether it is enabled (the dispatcher's refresh).
pub async fn states(pool: &PgPool) -> Result<Vec<(String, bool)>, sqlx::Error> {
    sqlx::query_as("select url, disabled_at is null from webhook_endpoints order by id").fetch_all(pool).await
}

/// Records that `url` accepted an attempt: its run of failures, if any, is over. Writes nothing
/// when none was recorded.
pub async fn succeeded(pool: &PgPool, url: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update webhook_endpoints set failing_since = null, last_failed_at = null
         where url = $1 and failing_since is not null",
    )
    .bind(url)
    .execute(pool)
    .await
    .map(drop)
}

/// An endpoint the dispatcher just disabled.
#[derive(Debug, Clone, PartialEq)]
pub struct Disabled {
    pub failing_since: OffsetDateTime,
    /// Its open deliveries, closed as failed.
    pub closed: i64,
}

/// Records that every attempt to `url` of a round failed, the last with `last_error`: starts its
/// run of failures if none is recorded, or if the last failed round was more than `silence` ago
/// (nothing was attempted meanwhile: no evidence that it kept failing), and when the run has
/// lasted `disable_after` (`None`: never), disables it, closing its open deliveries as failed at
/// that instant, in the same statement. `Some`: disabled now.
pub async fn failed(
    pool: &PgPool,
    url: &str,
    (disable_after, silence): (Option<Duration>, Duration),
    last_error: &str,
) -> Result<Option<Disabled>, sqlx::Error> {
    let after = disable_after.map(|d| d.as_secs_f64());
    let after_text = disable_after.map(|d| humantime::format_duration(d).to_string());
    let disabled: Option<(OffsetDateTime, i64)> = sqlx::query_as(
        "with run as (
             select id, failing_since,
                 failing_since is null or last_failed_at is null
                     or last_failed_at < now() - make_interval(secs => $5) as fresh
             from webhook_endpoints where url = $1 and disabled_at is null
             for update),
         failing as (
             select id, failing_since, not fresh and $2::float8 is not null
                 and failing_since <= now() - make_interval(secs => $2) as over
             from run),
         updated as (
             update webhook_endpoints w
             set last_failed_at = now(),
                 failing_since = case when r.fresh then now() else w.failing_since end,
                 disabled_at = case when f.over then now() end,
                 disabled_reason = case when f.over then format(
                     'no attempt accepted since %s (%s or more); the last: %s',
                     to_char(w.failing_since at time zone 'utc', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), $4::text, $3::text)
                 end
             from run r join failing f using (id)
             where w.id = r.id
             returning w.url, w.failing_since, w.disabled_at),
         disabled as (select url, failing_since, disabled_at from updated where disabled_at is not null),
         closed as (
             update webhook_deliveries d
             set failed_at = x.disabled_at,
                 last_error = 'endpoint disabled; ' || coalesce(d.last_error, 'not attempted')
             from disabled x
             where d.endpoint = x.url and d.delivered_at is null and d.failed_at is null
             returning 1)
         select failing_since, (select count(*) from closed) from disabled",
    )
    .bind(url)
    .bind(after)
    .bind(last_error)
    .bind(after_text)
    .bind(silence.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(disabled.map(|(failing_since, closed)| Disabled { failing_since, closed }))
}

/// Open deliveries to an endpoint that is not enabled: written by a writer that read the table
/// just before the endpoint was removed or disabled. Those of a removed endpoint are dropped,
/// those of a disabled one closed as its disabling closed the others (re-enabling reopens them).
/// Finds them with one step of the due index per endpoint with open deliveries. Returns how many
/// were dropped and closed.
pub async fn settle_strays(pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "with recursive open_to (url) as (
             (select endpoint from webhook_deliveries where delivered_at is null and failed_at is null
              order by endpoint limit 1)
             union all
             select (select endpoint from webhook_deliveries
                     where delivered_at is null and failed_at is null and endpoint > o.url
                     order by endpoint limit 1)
             from open_to o where o.url is not null),
         strays as (
             select o.url, w.disabled_at from open_to o left join webhook_endpoints w on w.url = o.url
             where o.url is not null and (w.id is null or w.disabled_at is not null)),
         dropped as (
             delete from webhook_deliveries d using strays s
             where s.disabled_at is null and d.endpoint = s.url and d.delivered_at is null and d.failed_at is null
             returning 1),
         closed as (
             update webhook_deliveries d
             set failed_at = s.disabled_at,
                 last_error = 'endpoint disabled; ' || coalesce(d.last_error, 'not attempted')
             from strays s
             where s.disabled_at is not null and d.endpoint = s.url and d.delivered_at is null and d.failed_at is null
             returning 1)
         select (select count(*) from dropped), (select count(*) from closed)",
    )
    .fetch_one(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_logged_without_what_may_be_credentials() {
        let url = "https://hook:s3cret@example.com:8443/in/seckill?token=abc#x";
        assert_eq!(shown(url), "https://example.com:8443/in/seckill");
        assert_eq!(shown("http://example.com/"), "http://example.com/");
        assert_eq!(shown("no"), "(not a URL)");
    }

    #[test]
    fn endpoints_are_http_urls_with_a_host_of_bounded_length() {
        assert_eq!(parse_url(" HTTP://Shop.Test ").unwrap(), "http://shop.test/");
        assert_eq!(parse_url("https://shop.test/hook?k=1").unwrap(), "https://shop.test/hook?k=1");
        for refused in ["ftp://shop.test/x", "file:///etc/passwd", "shop.test/hook", "http://", "javascript:alert(1)"] {
            assert!(parse_url(refused).is_err(), "{refused}");
        }
        let long = format!("https://shop.test/{}", "a".repeat(MAX_URL_BYTES));
        assert!(parse_url(&long).unwrap_err().contains("at most"));
    }
}
