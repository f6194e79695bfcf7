//! Reading a sale: its public snapshot (`GET /sales/{id}`), the check the waiting-room routes
//! make before they touch its line, and the check every route that names a sale makes before it
//! reads or writes anything of it: does the sale exist at all ([`Shop::existing`])?
//!
//! A made-up sale id costs no Postgres statement of its own: Redis's registry of sales (this
//! instance's copy, at most 200 ms old) is asked first, then Postgres in batches
//! (`crate::purchase::retired`: at most ten queries a second per instance whatever the number of
//! ids), and each such request counts against the client's quota of requests naming unknown
//! sales, one per client whatever `SECKILL_RATE_LIMIT_SCOPE` (`Meter::check_unknown_sale`).

use std::net::IpAddr;
use std::sync::Arc;

use super::limits::Meter;
use super::{Error, Shop};
use crate::domain::SaleId;
use crate::purchase::board::Snapshot;
use crate::purchase::retired::{Stored, Unanswered};

/// Where a sale named by a route stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Existing {
    /// In Redis's registry of sales.
    InRedis,
    /// Not in Redis: Postgres holds its row (a sale Redis lost, or one seeded since the registry
    /// was read).
    Kept,
    /// Retired: Postgres keeps its orders.
    Retired,
}

impl Shop {
    /// The sale's public snapshot, this instance's (at most 200 ms old; read again at once when
    /// the sale sells out here): under a polling crowd Redis sees a bounded number of reads per
    /// instance and second whatever the request rate. A retired sale is `sale_retired`; an id
    /// that names no sale counts against `client`'s quota of unknown sales.
    pub async fn sale(&self, sale: &SaleId, client: IpAddr) -> Result<Arc<Snapshot>, Error> {
        self.sale_metered(sale, client, &mut Meter::new(&self.limits, &self.metrics)).await
    }

    /// [`Shop::sale`] for a route that reports its rate limits.
    pub(super) async fn sale_metered(
        &self,
        sale: &SaleId,
        client: IpAddr,
        meter: &mut Meter<'_>,
    ) -> Result<Arc<Snapshot>, Error> {
        if self.retired.known(sale) {
            return Err(Error::SaleRetired);
        }
        match self.board.snapshot(sale).await? {
            Some(snapshot) => Ok(snapshot),
            None => match self.stored(sale, client, meter).await? {
                Existing::Retired => Err(Error::SaleRetired),
                // Redis lost it (or it was seeded a moment ago): no state to show.
                Existing::InRedis | Existing::Kept => Err(Error::UnknownSale),
            },
        }
    }

    /// Whether the sale a buyer's route names exists, before the route spends anything on it:
    /// `unknown_sale` for an id that names no sale anywhere.
    pub(super) async fn existing(
        &self,
        sale: &SaleId,
        client: IpAddr,
        meter: &mut Meter<'_>,
    ) -> Result<Existing, Error> {
        if self.retired.known(sale) {
            return Ok(Existing::Retired);
        }
        if self.board.registered(sale).await? {
            return Ok(Existing::InRedis);
        }
        self.stored(sale, client, meter).await
    }

    /// The same for an operator's route: never the negative cache (the sale may have been seeded
    /// a moment ago on another instance), and no quota (the operator is trusted).
    pub(super) async fn existing_now(&self, sale: &SaleId) -> Result<Existing, Error> {
        if self.retired.known(sale) {
            return Ok(Existing::Retired);
        }
        if self.board.registered(sale).await? {
            return Ok(Existing::InRedis);
        }
        existing_of(self.retired.stored_now(sale).await)
    }

    /// The refusal for a sale Redis does not know: `sale_retired` or `unknown_sale` as Postgres
    /// says, or 503 `unavailable` when it cannot say (an outage must not pass for a missing sale).
    pub(super) async fn unknown_or_retired(&self, sale: &SaleId) -> Error {
        match self.retired.check(sale).await {
            Ok(true) => Error::SaleRetired,
            Ok(false) => Error::UnknownSale,
            Err(err) => Error::Unavailable(anyhow::Error::new(err).context("whether the sale was retired")),
        }
    }

    /// A sale Redis's registry does not hold: the request counts against the client's quota of
    /// unknown sales, then Postgres says (in a batch) whether it holds the sale.
    async fn stored(&self, sale: &SaleId, client: IpAddr, meter: &mut Meter<'_>) -> Result<Existing, Error> {
        meter.check_unknown_sale(client)?;
        existing_of(self.retired.stored(sale).await)
    }
}

/// What Postgres said, as a route's answer.
fn existing_of(stored: Result<Stored, Unanswered>) -> Result<Existing, Error> {
    match stored {
        Ok(Stored::Absent) => Err(Error::UnknownSale),
        Ok(Stored::Kept) => Ok(Existing::Kept),
        Ok(Stored::Retired) => Ok(Existing::Retired),
        Err(err) => Err(Error::Unavailable(anyhow::Error::new(err).context("is the sale in Postgres?"))),
    }
}
