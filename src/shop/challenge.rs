//! The proof of work at the door (`crate::challenge`): issuing a line's challenge (a sale's or a
//! drop's), and the check a join (or a purchase in a sale without a waiting room) passes before
//! any Redis call.

use std::net::IpAddr;

use super::limits::{Limited, Meter};
use super::{Error, Shop};
use crate::admission::LineId;
use crate::challenge::{Issued, Refused, Spent};
use crate::domain::UserId;

impl Shop {
    /// A challenge for `user` at a sale's door (its line's join, or its purchase without a waiting
    /// room) or a drop line's join, from `client`: the cost asked, raised for an address that took
    /// many lately (`crate::challenge::Curve`). Shares `POST /buy`'s rate limits.
    pub async fn challenge(&self, line: &LineId, user: &UserId, client: IpAddr) -> Limited<Issued> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let cost = match line {
                LineId::Sale(sale) => {
                    let cost = self.sale_metered(sale, client, &mut meter).await?.state.challenge_cost;
                    let cost = cost.ok_or(Error::NoChallenge)?;
                    self.challenges.learn_asked(sale);
                    cost
                }
                // A drop in draw mode has no line: its entries ask the draw's proof of work.
                LineId::Drop(drop) => match self.door(line, client, &mut meter).await {
                    Err(Error::NotQueued) => crate::draw::entries::info(self.sales.keyspace(), drop)
                        .await?
                        .and_then(|draw| draw.challenge_cost)
                        .ok_or(Error::NoChallenge)?,
                    cost => cost?.ok_or(Error::NoChallenge)?,
                },
            };
            meter.check(self.sales.keyspace(), client, user, &line.limited_as()).await?;
            let issued = self.challenges.issue(&line.tag(), user, client, cost).await?;
            self.metrics.challenge("issued", issued.factor);
            Ok(issued)
        }
        .await;
        meter.finish(outcome)
    }

    /// The solution `header` carries, checked in process (no Redis call): `challenge_required`
    /// without one, `challenge_failed` if refused. The nonce is spent by the caller's Redis call,
    /// which then counts it solved ([`Shop::solved`]).
    /// `door` is the sale's id, or a drop line's tag (`crate::admission::LineId::tag`).
    pub(super) fn proof(
        &self,
        door: &str,
        user: &UserId,
        client: IpAddr,
        header: Option<&str>,
    ) -> Result<Spent, Error> {
        let Some(header) = header else { return Err(self.required()) };
        self.limits.check_proof(&self.metrics, client)?;
        self.challenges.verify(header, door, user, client).map_err(|refused| self.refused(refused))
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
