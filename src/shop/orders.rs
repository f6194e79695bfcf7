//! A buyer's own order: reading it and giving a reservation back. Both share `POST /buy`'s rate
//! limits, so polling spends the same budget as buying.

use std::net::IpAddr;

use uuid::Uuid;

use super::limits::{Limited, Meter};
use super::sales::Existing;
use super::{Error, Shop};
use crate::domain::{SaleId, UserId};
use crate::orders::lookup::{self, Found, Lookup};
use crate::reservations::store::Cancel;

/// A reservation given back: its order, now `cancelled`, whose unit went back to the sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    pub order_id: Uuid,
}

impl Shop {
    /// `user`'s order in `sale` (`crate::orders::lookup`; `None`: the buyer has not bought in it):
    /// a queued order costs one Redis read, a stored one a Postgres read; a retired sale's buyers
    /// still get theirs (from Postgres). A sale that exists nowhere costs no read of its own
    /// ([`Shop::existing`]).
    pub async fn order(&self, sale: &SaleId, user: &UserId, client: IpAddr) -> Limited<Option<Found>> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let existing = self.existing(sale, client, &mut meter).await?;
            meter.check(self.sales.keyspace(), client, user, sale).await?;
            match lookup::lookup(&self.sales, &self.pool, sale, user).await? {
                Lookup::UnknownSale if existing == Existing::Retired => Err(Error::SaleRetired),
                Lookup::UnknownSale => Err(Error::UnknownSale),
                Lookup::NotBought => Ok(None),
                Lookup::Found(found) => Ok(Some(found)),
            }
        }
        .await;
        meter.finish(outcome)
    }

    /// `user` gives its reservation in `sale` back before its deadline: the order becomes
    /// `cancelled`, its unit goes back to the sale, and the buyer cannot buy again in it. A sale
    /// that exists nowhere costs no Postgres statement ([`Shop::existing`]).
    pub async fn cancel(&self, sale: &SaleId, user: &UserId, client: IpAddr) -> Limited<Cancelled> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            self.existing(sale, client, &mut meter).await?;
            meter.check(self.sales.keyspace(), client, user, sale).await?;
            match self.reservations.cancel(sale, user).await? {
                Cancel::Cancelled(order_id) => Ok(Cancelled { order_id }),
                Cancel::Not(standing) => Err(Error::NotReserved(standing)),
                Cancel::Missing => Err(Error::NoOrder),
            }
        }
        .await;
        meter.finish(outcome)
    }
}
