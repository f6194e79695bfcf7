//! A webhook endpoint as the admin routes show it (`GET /admin/webhooks`, the live page's
//! overview).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::shop::lower::webhooks::{Endpoint, shown};

/// One endpoint: where the order events go, whether they still do, and its deliveries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointView {
    /// The id of the routes `/admin/webhooks/{id}`.
    pub id: i64,
    /// Its URL without the user, password, query and fragment, which may hold the receiver's
    /// credentials: a viewer reads this listing too (the scheme, host, port and path say which
    /// endpoint it is).
    pub url: String,
    /// `enabled` (it gets every event), or `disabled` (it failed every attempt for
    /// `SECKILL_WEBHOOK_DISABLE_AFTER`: it gets none until re-enabled).
    pub state: String,
    /// When its current run of failed attempts began (`null`: its last attempt was accepted).
    #[serde(with = "time::serde::rfc3339::option")]
    pub failing_since: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub disabled_at: Option<OffsetDateTime>,
    /// Why it was disabled: since when no attempt was accepted, and the last attempt's error.
    pub disabled_reason: Option<String>,
    /// Its deliveries not yet accepted (due, in flight, or waiting for a retry).
    pub open: i64,
    /// Its deliveries that failed for good (`GET /admin/events?status=failed`).
    pub failed: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl From<Endpoint> for EndpointView {
    fn from(e: Endpoint) -> Self {
        Self {
            id: e.id,
            state: if e.enabled() { "enabled" } else { "disabled" }.to_owned(),
            url: shown(&e.url),
            failing_since: e.failing_since,
            disabled_at: e.disabled_at,
            disabled_reason: e.disabled_reason,
            open: e.open,
            failed: e.failed,
            created_at: e.created_at,
        }
    }
}
