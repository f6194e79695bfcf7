//! How the errors of the layers below become [`ApiError`]s: a malformed body, a Redis or Postgres
//! failure, and each capability's own refusals.

use super::ApiError;
use crate::redis::connection::is_redis_outage;

impl From<actix_web::error::JsonPayloadError> for ApiError {
    fn from(err: actix_web::error::JsonPayloadError) -> Self {
        use actix_web::error::JsonPayloadError as E;
        match err {
            E::OverflowKnownLength { limit, .. } | E::Overflow { limit } => Self::PayloadTooLarge(limit),
            E::ContentType => Self::UnsupportedMediaType,
            E::Deserialize(e) => Self::InvalidRequest(format!("invalid JSON body: {e}")),
            other => Self::InvalidRequest(format!("unreadable request body: {other}")),
        }
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        if is_redis_outage(&err) {
            Self::Unavailable(anyhow::Error::new(err).context("redis"))
        } else {
            Self::Internal(anyhow::Error::new(err).context("redis"))
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
                Self::Unavailable(anyhow::Error::new(err).context("postgres"))
            }
            other => Self::Internal(anyhow::Error::new(other).context("postgres")),
        }
    }
}

impl From<std::sync::Arc<redis::RedisError>> for ApiError {
    /// A read shared by several requests (`crate::purchase::board`).
    fn from(err: std::sync::Arc<redis::RedisError>) -> Self {
        let outage = is_redis_outage(&err);
        let cause = anyhow::Error::new(err).context("redis");
        if outage { Self::Unavailable(cause) } else { Self::Internal(cause) }
    }
}

impl From<crate::admission::QueueError> for ApiError {
    fn from(err: crate::admission::QueueError) -> Self {
        use crate::admission::QueueError as E;
        match err {
            E::NotQueued => Self::NotQueued,
            E::UnknownSale => Self::UnknownSale,
            E::NotOpen => Self::QueueNotOpen,
            E::NotInQueue => Self::NotInQueue,
            E::Ended => Self::SaleEnded,
            E::Disabled => Self::AdmissionDisabled,
            E::Redis(err) => Self::from(err),
        }
    }
}

impl From<crate::orders::lookup::LookupError> for ApiError {
    fn from(err: crate::orders::lookup::LookupError) -> Self {
        use crate::orders::lookup::LookupError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}

impl From<crate::retire::RetireError> for ApiError {
    fn from(err: crate::retire::RetireError) -> Self {
        use crate::retire::RetireError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}

impl From<crate::reservations::ReservationError> for ApiError {
    fn from(err: crate::reservations::ReservationError) -> Self {
        use crate::reservations::ReservationError as E;
        match err {
            E::UnknownOrder => Self::UnknownOrder,
            E::EventReused => Self::EventReused,
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}

impl From<crate::reconcile::ReconcileError> for ApiError {
    fn from(err: crate::reconcile::ReconcileError) -> Self {
        use crate::reconcile::ReconcileError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}
