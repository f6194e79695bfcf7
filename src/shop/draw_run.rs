//! The draw's run (`crate::draw::run`) as use cases: an operator's run now (early, or again after
//! a crash), the automatic run of every draw whose entries closed, a buyer's result, the
//! published record once the draw is drawn, and the draw's counts for the live page.

use std::net::IpAddr;

use futures::StreamExt;
use time::OffsetDateTime;
use uuid::Uuid;

use super::limits::{Meter, rate_limited};
use super::{Error, Shop};
use crate::controls::audit;
use crate::domain::{DropId, UserId};
use crate::draw::run::{self, DRAIN_WAIT, RunError, Summary, publish, store};
use crate::draw::{Outcome, offers};
use crate::orders::lookup::{self, Lookup};

/// A buyer's result in a drawn draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrawResult {
    /// Won `quantity` units of `size`: the reservation `order_id`, to pay by `pay_by`.
    Won {
        size: String,
        quantity: u32,
        order_id: Uuid,
        pay_by: Option<OffsetDateTime>,
    },
    /// On the waitlist at `position` (1 first).
    Waitlisted {
        position: u32,
    },
    /// On the waitlist at `position`, and offered `quantity` units of `size` that came back: the
    /// reservation `order_id`, to pay by `pay_by` (`crate::draw::offers`).
    Offered {
        position: u32,
        size: String,
        quantity: u32,
        order_id: Uuid,
        pay_by: Option<OffsetDateTime>,
    },
    Lost,
}

/// The published record, chunk by chunk (NDJSON); a failure mid-way cuts the answer short.
pub type RecordChunks = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Vec<u8>, sqlx::Error>> + Send>>;

impl From<RunError> for Error {
    fn from(err: RunError) -> Self {
        match err {
            RunError::NotADraw => Self::NotADraw,
            RunError::EntriesQueued { stored, accepted } => Self::EntriesQueued { stored, accepted },
            RunError::Redis(err) => err.into(),
            RunError::Postgres(err) => err.into(),
            RunError::Award(why) => Self::AwardRefused(why),
            RunError::Allocation(why) => Self::Internal(anyhow::anyhow!(why)),
        }
    }
}

impl Shop {
    /// Runs the drop's draw now (early: its entries close at once), or again after a run that
    /// stopped midway; a drawn draw answers its summary and changes nothing. One audit entry.
    /// The run goes on the background runtime: its seconds of reading and writing 200,000 rows
    /// do not hold this HTTP worker's other requests, and a caller that hangs up does not cut it.
    pub async fn run_draw(&self, drop: &DropId, actor: Option<&str>) -> Result<Summary, Error> {
        self.drawable(drop).await?;
        let (redis, pool, id) = (self.sales.keyspace().clone(), self.pool.clone(), drop.clone());
        let summary = self
            .background
            .spawn(async move { run::run(&redis, &pool, &id, DRAIN_WAIT).await })
            .await
            .map_err(|err| Error::Internal(anyhow::anyhow!("the draw's run stopped: {err}")))??;
        let effect = serde_json::json!({
            "entries": summary.entries, "won": summary.won, "waitlisted": summary.waitlisted,
            "lost": summary.lost, "units_awarded": summary.units_awarded,
        });
        let mut conn = self.pool.acquire().await?;
        audit::record_drop(&mut conn, drop, "draw", None, &effect, actor).await?;
        Ok(summary)
    }

    /// The buyer's result once the draw is drawn, `None` before (or without an entry).
    pub async fn draw_result(&self, drop: &DropId, user: &UserId) -> Result<Option<DrawResult>, Error> {
        let Some(result) = store::result(&self.pool, drop, user).await? else { return Ok(None) };
        Ok(Some(match result.outcome {
            Outcome::Won { size, quantity } => {
                let order_id =
                    result.order_id.ok_or_else(|| Error::Internal(anyhow::anyhow!("a win without order")))?;
                let pay_by = self.pay_by(drop, &size, user, order_id).await?;
                DrawResult::Won { size, quantity, order_id, pay_by }
            }
            Outcome::Waitlisted { position } => match offers::standing(self.sales.keyspace(), drop, position).await? {
                offers::Standing::Offered { size, order_id } => {
                    let pay_by = self.pay_by(drop, &size, user, order_id).await?;
                    DrawResult::Offered { position, size, quantity: result.quantity, order_id, pay_by }
                }
                _ => DrawResult::Waitlisted { position },
            },
            Outcome::Lost => DrawResult::Lost,
        }))
    }

    /// The draw's counts for the live page: `unknown_drop`, `not_a_draw` as for the run.
    pub async fn draw_stats(&self, drop: &DropId) -> Result<crate::draw::stats::Stats, Error> {
        match crate::draw::stats::read(&self.pool, drop).await? {
            Some(stats) => Ok(stats),
            None => Err(self.drawable(drop).await.err().unwrap_or(Error::NotADraw)),
        }
    }

    /// The draw's published record (NDJSON), once drawn: `not_a_draw`, `draw_not_revealed` before.
    /// A drop that does not exist counts against `client`'s quota of requests naming unknown
    /// sales, and a client past that quota is refused from memory, before any Postgres query
    /// (the record outlives the drop's Redis state, so Postgres is what knows it). At most
    /// `readers::MAX_CONCURRENT` records stream at once, one to each client: `too_many_draw_records`.
    pub async fn draw_record(&self, drop: &DropId, client: IpAddr) -> Result<RecordChunks, Error> {
        let meter = Meter::new(&self.limits, &self.metrics);
        if let Some(wait) = meter.unknown_sales_refused(client) {
            return Err(rate_limited(wait));
        }
        let draw = match self.drawable(drop).await {
            Err(Error::UnknownDrop) => {
                meter.check_unknown_sale(client)?;
                return Err(Error::UnknownDrop);
            }
            found => found?,
        };
        if draw.state != "drawn" {
            return Err(Error::DrawNotRevealed);
        }
        let reader = self.draw_readers.admit(client).ok_or(Error::TooManyDrawRecords)?;
        let mut chunks: RecordChunks = Box::pin(publish::stream(self.pool.clone(), drop.clone(), draw, reader));
        let first = futures::TryStreamExt::try_next(&mut chunks).await?;
        Ok(Box::pin(futures::stream::iter(first.map(Ok)).chain(chunks)))
    }

    /// The drop's draw row: `unknown_drop` for a drop with no size, `not_a_draw` without a draw.
    async fn drawable(&self, drop: &DropId) -> Result<store::Draw, Error> {
        if let Some(draw) = store::draw(&self.pool, drop).await? {
            return Ok(draw);
        }
        let sizes = crate::exports::drop_sales(&self.pool, drop.as_str()).await?;
        Err(if sizes.is_empty() { Error::UnknownDrop } else { Error::NotADraw })
    }

    /// A winner's deadline, read as a buyer's order is read (`crate::orders::lookup`): Redis
    /// first, then Postgres. The other way round, an order the worker stored between the two
    /// reads (its stream entry, which carries the deadline, trimmed) was read without it.
    async fn pay_by(
        &self,
        drop: &DropId,
        size: &str,
        user: &UserId,
        order: Uuid,
    ) -> Result<Option<OffsetDateTime>, Error> {
        let sale = drop.size(size).map_err(Error::Invalid)?;
        Ok(match lookup::lookup(&self.sales, &self.pool, &sale, user).await? {
            Lookup::Found(found) if found.order_id == Some(order) => found.pay_by,
            _ => None,
        })
    }
}
