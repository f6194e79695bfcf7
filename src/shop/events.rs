//! The operators' view of the order events out (`crate::webhooks`): the events in order after a
//! cursor, those with a failed delivery, and sending one again.

use super::{Error, Shop};
use crate::webhooks::store::{self, Event, Listing};

impl Shop {
    /// The events after the cursor `after` (0: from the first kept), oldest first, at most
    /// `limit` (1 to `store::MAX_LISTED`, default 100); with `failed`, only those with a
    /// delivery that failed for good.
    pub async fn events(&self, after: Option<i64>, limit: Option<i64>, failed: bool) -> Result<Vec<Event>, Error> {
        let limit = limit.unwrap_or(100);
        if !(1..=store::MAX_LISTED).contains(&limit) {
            return Err(Error::Invalid(format!("limit must be between 1 and {}", store::MAX_LISTED)));
        }
        let after = after.unwrap_or(0);
        if after < 0 {
            return Err(Error::Invalid("after must be 0 or an event id".into()));
        }
        let listing = if failed { Listing::Failed } else { Listing::All };
        Ok(store::list(&self.pool, after, limit, listing).await?)
    }

    /// Sends the event `id` again to every endpoint it was delivered to or failed for that is
    /// still registered and enabled (its receivers drop a duplicate by its `webhook-id`): the
    /// deliveries reopened.
    pub async fn retry_event(&self, id: i64, actor: Option<&str>) -> Result<u64, Error> {
        let reopened = store::retry(&self.pool, id).await?.ok_or(Error::UnknownEvent)?;
        tracing::info!(actor, event = id, reopened, "webhook event sent again");
        Ok(reopened)
    }
}
