//! The errors of the layers below (Redis, Postgres, the capabilities' own) made [`Error`]s, each
//! once: an outage is `unavailable`, a refusal keeps its meaning.

use super::error::Error;
use crate::challenge::{IssueError, Refused as ChallengeRefused};
use crate::redis::connection::is_redis_outage;

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        if is_redis_outage(&err) {
            Self::Unavailable(anyhow::Error::new(err).context("redis"))
        } else {
            Self::Internal(anyhow::Error::new(err).context("redis"))
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        if crate::db::is_postgres_outage(&err) {
            Self::Unavailable(anyhow::Error::new(err).context("postgres"))
        } else {
            Self::Internal(anyhow::Error::new(err).context("postgres"))
        }
    }
}

impl From<std::sync::Arc<redis::RedisError>> for Error {
    /// A read shared by several requests (`crate::purchase::board`).
    fn from(err: std::sync::Arc<redis::RedisError>) -> Self {
        let outage = is_redis_outage(&err);
        let cause = anyhow::Error::new(err).context("redis");
        if outage { Self::Unavailable(cause) } else { Self::Internal(cause) }
    }
}

impl From<crate::admission::QueueError> for Error {
    fn from(err: crate::admission::QueueError) -> Self {
        use crate::admission::QueueError as E;
        match err {
            E::NotQueued => Self::NotQueued,
            E::UnknownSale => Self::UnknownSale,
            E::NotOpen => Self::QueueNotOpen,
            E::NotInQueue => Self::NotInQueue,
            E::Ended => Self::SaleEnded,
            E::Disabled => Self::AdmissionDisabled,
            E::ChallengeRequired => Self::ChallengeRequired,
            E::ChallengeReplayed => Self::ChallengeFailed(ChallengeRefused::Replayed),
            E::Redis(err) => Self::from(err),
        }
    }
}

impl From<IssueError> for Error {
    fn from(err: IssueError) -> Self {
        match err {
            IssueError::Disabled => Self::AdmissionDisabled,
            IssueError::Redis(err) => Self::from(err),
            IssueError::Internal(why) => Self::Internal(anyhow::anyhow!(why)),
        }
    }
}

impl From<crate::orders::lookup::LookupError> for Error {
    fn from(err: crate::orders::lookup::LookupError) -> Self {
        use crate::orders::lookup::LookupError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}

impl From<crate::retire::RetireError> for Error {
    fn from(err: crate::retire::RetireError) -> Self {
        use crate::retire::RetireError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
        }
    }
}

impl From<crate::reservations::ReservationError> for Error {
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

impl From<crate::reconcile::ReconcileError> for Error {
    fn from(err: crate::reconcile::ReconcileError) -> Self {
        use crate::reconcile::ReconcileError as E;
        match err {
            E::Redis(err) => err.into(),
            E::Postgres(err) => err.into(),
            E::Retired => Self::SaleRetired,
            E::OrdersQueued { queued } => Self::OrdersQueued { queued },
        }
    }
}
