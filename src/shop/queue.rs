//! A line's waiting room (`crate::admission`), a queued sale's or a drop's: joining it and asking
//! where the buyer stands; both hand out the ticket for the next poll and, once admitted, the
//! admission token a purchase wants (a drop's buys any size of the drop).

use std::net::IpAddr;
use std::sync::Arc;

use super::limits::{Limited, Meter};
use super::{Error, Shop};
use crate::admission::line::Line;
use crate::admission::{Answer, LineId, QueueError};
use crate::challenge::Refused;
use crate::domain::{DropId, UserId};

impl Shop {
    /// `user` joins the line (the pre-queue before the start, the end of the line after it);
    /// joining again keeps the buyer's one place. Shares `POST /buy`'s rate limits. A line that
    /// asks a proof of work needs `solution` (the `Seckill-Challenge` header), checked here before
    /// any Redis call and spent in the join's own call: one per join, not one per size of a drop.
    pub async fn join(&self, line: &LineId, user: &UserId, client: IpAddr, solution: Option<&str>) -> Limited<Answer> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let spent = match self.door(line, client, &mut meter).await? {
                Some(_) => Some(self.proof(&line.tag(), user, client, solution)?),
                None => None,
            };
            meter.check(self.sales.keyspace(), client, user, &line.limited_as()).await?;
            match self.admission.join(line, user, spent.as_ref()).await {
                Err(QueueError::ChallengeReplayed) => Err(self.refused(Refused::Replayed)),
                Err(QueueError::ChallengeRequired) => Err(self.required()),
                joined => {
                    let (answer, replayed) = joined?;
                    if let Some(spent) = &spent
                        && !replayed
                    {
                        self.solved(spent);
                    }
                    Ok(answer)
                }
            }
        }
        .await;
        meter.finish(outcome)
    }

    /// Where `user` stands in the line. With the last answer's `ticket` the answer comes from
    /// this instance's view of the line (read from Redis at most every 200 ms, whatever the
    /// number of pollers) and skips the rate limits; without one, or with a pre-queue ticket
    /// after the start, the place is looked up in Redis under `POST /buy`'s rate limits.
    pub async fn standing(
        &self,
        line: &LineId,
        user: &UserId,
        client: IpAddr,
        ticket: Option<&str>,
    ) -> Limited<Answer> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            self.door(line, client, &mut meter).await?;
            if let Some(ticket) = ticket
                && let Some(answer) = self.admission.from_ticket(line, user, ticket).await?
            {
                return Ok(answer);
            }
            meter.check(self.sales.keyspace(), client, user, &line.limited_as()).await?;
            Ok(self.admission.ask(line, user).await?)
        }
        .await;
        meter.finish(outcome)
    }

    /// The line's door, once this instance knows it to exist and be queued (no Redis call for a
    /// made-up id): the proof of work it asks, if any. A size of a drop with a line has none of
    /// its own (`drop_line`, naming the drop's).
    pub(super) async fn door(
        &self,
        line: &LineId,
        client: IpAddr,
        meter: &mut Meter<'_>,
    ) -> Result<Option<u32>, Error> {
        match line {
            LineId::Sale(sale) => {
                let snapshot = self.sale_metered(sale, client, meter).await?;
                if let (true, Some(drop)) = (snapshot.state.drop_line, sale.group()) {
                    return Err(Error::DropLine { drop: drop.to_owned() });
                }
                snapshot.state.queue.as_ref().ok_or(Error::NotQueued)?;
                Ok(snapshot.state.challenge_cost)
            }
            LineId::Drop(drop) => Ok(self.drop_line(drop, client, meter).await?.challenge_cost),
        }
    }

    /// A drop's line as this instance last read it: `unknown_drop` for a drop none of whose
    /// sizes the registry holds (counted against `client`'s quota of unknown ids, no Redis call).
    /// A line this instance read within the last 200 ms exists: a polling crowd costs no look-up.
    async fn drop_line(&self, drop: &DropId, client: IpAddr, meter: &mut Meter<'_>) -> Result<Arc<Line>, Error> {
        let line = LineId::Drop(drop.clone());
        if let Some(known) = self.admission.cached_line(&line).await {
            return Ok(known);
        }
        if !self.board.group_registered(drop.as_str()).await? {
            meter.check_unknown_sale(client)?;
            return Err(Error::UnknownDrop);
        }
        Ok(self.admission.line(&line).await?)
    }
}
