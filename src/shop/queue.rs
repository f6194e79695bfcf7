//! A queued sale's waiting room (`crate::admission`): joining it and asking where the buyer
//! stands; both hand out the ticket for the next poll and, once admitted, the admission token
//! a purchase wants.

use std::net::IpAddr;

use super::Shop;
use super::limits::{Limited, Meter};
use crate::admission::{Answer, QueueError};
use crate::challenge::Refused;
use crate::domain::{SaleId, UserId};

impl Shop {
    /// `user` joins `sale`'s waiting room (the pre-queue before the start, the end of the line
    /// after it); joining again keeps the buyer's one place. Shares `POST /buy`'s rate limits. A
    /// sale that asks a proof of work needs `solution` (the `Seckill-Challenge` header), checked
    /// here before any Redis call and spent in the join's own call.
    pub async fn join(&self, sale: &SaleId, user: &UserId, client: IpAddr, solution: Option<&str>) -> Limited<Answer> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let snapshot = self.queued_sale(sale, client, &mut meter).await?;
            let spent = match snapshot.state.challenge_cost {
                Some(_) => Some(self.proof(sale, user, client, solution)?),
                None => None,
            };
            meter.check(self.sales.keyspace(), client, user, sale).await?;
            match self.admission.join(sale, user, spent.as_ref()).await {
                Err(QueueError::ChallengeReplayed) => Err(self.refused(Refused::Replayed)),
                Err(QueueError::ChallengeRequired) => Err(self.required()),
                joined => {
                    let answer = joined?;
                    if let Some(spent) = &spent {
                        self.solved(spent);
                    }
                    Ok(answer)
                }
            }
        }
        .await;
        meter.finish(outcome)
    }

    /// Where `user` stands in `sale`'s line. With the last answer's `ticket` the answer comes
    /// from this instance's view of the line (read from Redis at most every 200 ms, whatever the
    /// number of pollers) and skips the rate limits; without one, or with a pre-queue ticket
    /// after the start, the place is looked up in Redis under `POST /buy`'s rate limits.
    pub async fn standing(
        &self,
        sale: &SaleId,
        user: &UserId,
        client: IpAddr,
        ticket: Option<&str>,
    ) -> Limited<Answer> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            self.queued_sale(sale, client, &mut meter).await?;
            if let Some(ticket) = ticket
                && let Some(answer) = self.admission.from_ticket(sale, user, ticket).await?
            {
                return Ok(answer);
            }
            meter.check(self.sales.keyspace(), client, user, sale).await?;
            Ok(self.admission.ask(sale, user).await?)
        }
        .await;
        meter.finish(outcome)
    }
}
