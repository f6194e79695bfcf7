//! The webhook endpoints (`crate::webhooks::endpoints`): list them with their state and counts,
//! register one, remove one, re-enable one the dispatcher disabled. Each change wakes this
//! instance's dispatcher; the others read the endpoints within seconds. Each change logs one line
//! naming its operator (`actor`), the record of who sent the order events where (the endpoints
//! are the deployment's, not a sale's: no sale's audit trail holds them).

use super::{Error, Shop};
use crate::webhooks::endpoints::{self, Endpoint, Registered};

/// What removing an endpoint did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedEndpoint {
    pub id: i64,
    /// Its URL as answers show it (`endpoints::shown`: no user, password, query or fragment).
    pub url: String,
    /// Its open deliveries, dropped.
    pub dropped: i64,
}

impl Shop {
    /// Every registered endpoint, in the order registered, with its state and counts.
    pub async fn webhook_endpoints(&self) -> Result<Vec<Endpoint>, Error> {
        Ok(endpoints::list(&self.pool).await?)
    }

    /// Registers `url` (an http(s) URL with a host): it gets every event written from now on.
    /// Registering it again changes nothing (a disabled endpoint stays disabled). The endpoint,
    /// and whether it is new.
    pub async fn register_webhook(&self, url: &str, actor: Option<&str>) -> Result<(Endpoint, bool), Error> {
        let url = endpoints::parse_url(url).map_err(Error::Invalid)?;
        let registered = match endpoints::register(&self.pool, &url).await? {
            Registered::New(endpoint) => (endpoint, true),
            Registered::Existing(endpoint) => return Ok((endpoint, false)),
            Registered::Full => return Err(Error::TooManyEndpoints { max: endpoints::MAX_ENDPOINTS }),
        };
        tracing::info!(
            actor,
            endpoint_id = registered.0.id,
            url = endpoints::shown(&url),
            "webhook endpoint registered"
        );
        self.endpoint_changes.notify();
        Ok(registered)
    }

    /// Removes the endpoint `id`: no event goes to it from now on, its open deliveries are dropped.
    pub async fn remove_webhook(&self, id: i64, actor: Option<&str>) -> Result<RemovedEndpoint, Error> {
        let (url, dropped) = endpoints::remove(&self.pool, id).await?.ok_or(Error::UnknownEndpoint)?;
        let url = endpoints::shown(&url);
        tracing::info!(actor, endpoint_id = id, url, dropped, "webhook endpoint removed");
        self.endpoint_changes.notify();
        Ok(RemovedEndpoint { id, url, dropped })
    }

    /// Re-enables the endpoint `id` (an enabled one is left as it is): it gets the events
    /// written from now on, and the deliveries its disabling closed are sent again. The endpoint
    /// and how many deliveries were reopened.
    pub async fn enable_webhook(&self, id: i64, actor: Option<&str>) -> Result<(Endpoint, u64), Error> {
        let enabled = endpoints::enable(&self.pool, id).await?.ok_or(Error::UnknownEndpoint)?;
        tracing::info!(actor, endpoint_id = id, reopened = enabled.1, "webhook endpoint enabled");
        self.endpoint_changes.notify();
        Ok(enabled)
    }
}
