//! The proof of work at the door (`crate::challenge`): issuing a sale's challenge, and the check
//! a join (or a purchase in a sale without a waiting room) passes before any Redis call.

use std::net::IpAddr;

use super::limits::{Limited, Meter};
use super::{Error, Shop};
use crate::challenge::{Issued, Refused, Spent};
use crate::domain::{SaleId, UserId};

impl Shop {
    /// A challenge for `user` in `sale` from `client`: the sale's cost, raised for an address that
    /// took many lately (`crate::challenge::Curve`). Shares `POST /buy`'s rate limits.
    pub async fn challenge(&self, sale: &SaleId, user: &UserId, client: IpAddr) -> Limited<Issued> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let cost =
                self.sale_metered(sale, client, &mut meter).await?.state.challenge_cost.ok_or(Error::NoChallenge)?;
            self.challenges.learn_asked(sale);
            meter.check(self.sales.keyspace(), client, user, sale).await?;
            let issued = self.challenges.issue(sale, user, client, cost).await?;
            self.metrics.challenge("issued", issued.factor);
            Ok(issued)
        }
        .await;
        meter.finish(outcome)
    }

    /// The solution `header` carries, checked in process (no Redis call): `challenge_required`
    /// without one, `challenge_failed` if refused. The nonce is spent by the caller's Redis call,
    /// which then counts it solved ([`Shop::solved`]).
    pub(super) fn proof(
        &self,
        sale: &SaleId,
        user: &UserId,
        client: IpAddr,
        header: Option<&str>,
    ) -> Result<Spent, Error> {
        let Some(header) = header else { return Err(self.required()) };
        self.limits.check_proof(&self.metrics, client)?;
        self.challenges.verify(header, sale, user, client).map_err(|refused| self.refused(refused))
    }

    /// Counts a solution spent: it let its buyer in.
    pub(super) fn solved(&self, spent: &Spent) {
        self.metrics.challenge("solved", spent.factor);
    }

    /// Counts a request that carried no solution where one is asked.
    pub(super) fn required(&self) -> Error {
        self.metrics.challenge_refused("missing");
        Error::ChallengeRequired
    }

    /// Counts a refused solution and says why.
    pub(super) fn refused(&self, refused: Refused) -> Error {
        self.metrics.challenge_refused(refused.label());
        Error::ChallengeFailed(refused)
    }
}
