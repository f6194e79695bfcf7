//! Buying: the checks a purchase passes in order, then one atomic purchase in Redis.

use std::net::IpAddr;
use std::time::Instant;

use uuid::Uuid;

use super::limits::{Limited, Meter};
use super::{Error, Shop};
use crate::admission::token::Refused as NotAdmitted;
use crate::challenge::{Refused, Spent};
use crate::domain::{SaleId, UserId};
use crate::orders::lookup;
use crate::purchase::sold_out::{self, Flagged};
use crate::purchase::{Admitted, BuyError, BuyOutcome, Purchase, Receipt};
use crate::redis::connection::is_redis_outage;

/// The buyer's admission token to a queued sale, as the request carried it.
#[derive(Debug, Clone, Copy)]
pub enum AdmissionToken<'a> {
    /// No token.
    None,
    /// A token that is not text.
    Malformed,
    /// The token.
    Presented(&'a str),
}

/// What a purchase's proof of work came to before its purchase call.
#[derive(Debug)]
enum Proof {
    /// None carried, none asked, or a queued sale's (its join asked it).
    None,
    /// Verified and spent now.
    Spent(Spent),
    /// Genuine, but spent before: maybe by this buyer's own attempt whose answer was lost. The
    /// purchase call says which: 409 with the order, else this refusal.
    Replayed,
}

/// A purchase made: the order the worker will store in Postgres under the same id.
#[derive(Debug, Clone, Copy)]
pub struct Bought {
    pub order_id: Uuid,
    /// Units bought.
    pub quantity: u32,
    /// In a sale with a payment window: the reservation's deadline (the Redis server's clock),
    /// in milliseconds since the epoch.
    pub pay_by_ms: Option<i64>,
}

impl Shop {
    /// `user` buys in `sale`, asking from `client`. A sale this instance knows to be sold out (or
    /// retired) is answered from memory, held only to the in-process per-client limit (cheaper
    /// than the Redis limiter, and it keeps anyone from probing at an unlimited rate who bought).
    /// A present admission token is always checked, in process. Then the limits (the client's,
    /// then the buyer's) run in the purchase's own script call, so an abusive client costs one
    /// call, not a purchase attempt; once refused, it is answered from memory until the limit
    /// could admit it again. If a limit cannot answer, nothing is bought (fail closed).
    /// `quantity` units are bought, all or none (the caller bounds it to
    /// [`crate::domain::MAX_PER_BUYER`]). In a sale without a waiting room that asks a proof of
    /// work, `proof` (the `Seckill-Challenge` header) is checked in process and spent once in Redis
    /// before the purchase (a queued sale's join asked for it instead).
    pub async fn buy(
        &self,
        sale: &SaleId,
        (user, quantity): (&UserId, u32),
        client: IpAddr,
        (token, proof): (AdmissionToken<'_>, Option<&str>),
    ) -> Limited<Bought> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = self.purchase(sale, (user, quantity), client, (token, proof), &mut meter).await;
        meter.finish(outcome)
    }

    async fn purchase(
        &self,
        sale: &SaleId,
        (user, quantity): (&UserId, u32),
        client: IpAddr,
        (token, proof): (AdmissionToken<'_>, Option<&str>),
        meter: &mut Meter<'_>,
    ) -> Result<Bought, Error> {
        if self.retired.known(sale) {
            self.limits.answer_from_memory(&self.metrics, client)?;
            return Err(Error::SaleRetired);
        }
        let token = match token {
            AdmissionToken::None => None,
            AdmissionToken::Malformed => return Err(Error::NotAdmitted(NotAdmitted::Malformed)),
            AdmissionToken::Presented(token) => Some(token),
        };
        let place = self.admission.admitted(sale, user, token).map_err(Error::NotAdmitted)?;
        if let Some(flagged) = self.sold_out.check(sale, user) {
            self.limits.answer_from_memory(&self.metrics, client)?;
            return Err(match flagged {
                Flagged::SoldOut => Error::SoldOut,
                Flagged::AlreadyPurchased(receipt) => self.already_purchased(sale, user, receipt).await?,
                Flagged::AskRedis => match self.sales.purchase_of(sale, user).await? {
                    Purchase::Bought(receipt) => self.already_purchased(sale, user, receipt).await?,
                    Purchase::NotBought | Purchase::UnknownSale => Error::SoldOut,
                },
            });
        }

        let prefix = self.sales.keyspace().prefix();
        // A client refused lately for naming sales that do not exist stays refused for them
        // (memory, then this instance's registry: no Redis call of its own).
        if let Some(wait) = meter.unknown_sales_refused(client)
            && !self.board.registered(sale).await?
        {
            self.metrics.limiter_decision("unknown_sale_refused");
            return Err(super::limits::rate_limited(wait));
        }
        // The refusals remembered come before the proof of work is spent: a client answered 429
        // keeps its solution for when it may ask again.
        let gates = meter.gates(prefix, client, user, sale)?;
        let proof = match place {
            Some(_) => Proof::None, // a queued sale: its join asked for the proof of work
            None => self.spend_proof(sale, user, client, proof).await?,
        };
        let bought = self.proven_purchase(sale, (user, quantity), client, (place, &proof), gates, meter).await;
        if let (Err(refused), Proof::Spent(spent)) = (&bought, &proof)
            && may_ask_again(refused)
        {
            self.challenges.give_back(sale, spent).await;
        }
        bought
    }

    /// The purchase's call once its proof of work is settled, and what its answer means.
    async fn proven_purchase(
        &self,
        sale: &SaleId,
        (user, quantity): (&UserId, u32),
        client: IpAddr,
        (place, proof): (Option<Admitted>, &Proof),
        gates: Vec<crate::limiter::Gate<'_>>,
        meter: &mut Meter<'_>,
    ) -> Result<Bought, Error> {
        let proven = matches!(proof, Proof::Spent(_));
        let (asked, order_id) = (Instant::now(), Uuid::now_v7());
        let verdict =
            self.sales.buy(sale, (user, quantity), order_id, (place, proven), &gates).await.map_err(|err| {
                // The limits ran in the failed call, or were to: they could not decide (fail closed).
                self.metrics.limiter_decision("error");
                let context = "the purchase and its rate limits";
                match err {
                    BuyError::NotRun(err) if is_redis_outage(&err) => Error::from(err),
                    BuyError::NotRun(err) => Error::Unavailable(anyhow::Error::new(err).context(context)),
                    BuyError::OutcomeUnknown(err) => Error::OutcomeUnknown {
                        order_id,
                        sale_id: sale.to_string(),
                        cause: anyhow::Error::new(err).context(context),
                    },
                }
            })?;
        meter.settle(&gates, asked, &verdict.limits)?;
        let Some(outcome) = verdict.outcome else {
            return Err(Error::Unavailable(anyhow::anyhow!("the limits admitted the purchase but it did not run")));
        };
        match outcome {
            BuyOutcome::Purchased { pay_by_ms } => Ok(Bought { order_id, quantity, pay_by_ms }),
            BuyOutcome::NotDurable { replicas } => {
                // One line per order, unbudgeted: the only server-side record of which orders only
                // the master may hold (docs/durability.md); replica lag causes it, not a client.
                tracing::warn!(%order_id, replicas, "purchase not confirmed by enough replicas: 503 not_durable");
                Err(Error::NotDurable { order_id })
            }
            BuyOutcome::UnknownSale => {
                meter.check_unknown_sale(client)?;
                Err(self.unknown_or_retired(sale).await)
            }
            BuyOutcome::NotStarted => Err(Error::SaleNotStarted),
            BuyOutcome::Ended => Err(Error::SaleEnded),
            BuyOutcome::Paused => Err(Error::SalePaused),
            BuyOutcome::DrawOnly => Err(Error::DrawOnly),
            // This request's own order: its call was sent again (a Redis Cluster client re-sends one
            // that timed out) after its first run bought, which is what the request asked.
            BuyOutcome::AlreadyPurchased(Some(receipt)) if receipt.order_id == order_id => {
                // The order stands: a window that cannot be read now must not make the answer
                // say nothing was bought (503 unavailable), only that the outcome is unknown.
                let window = self.payment_window(sale).await.map_err(|err| Error::OutcomeUnknown {
                    order_id,
                    sale_id: sale.to_string(),
                    cause: anyhow::Error::new(err).context("the sale's payment window, after a re-sent call bought"),
                })?;
                Ok(Bought {
                    order_id,
                    quantity: receipt.quantity,
                    pay_by_ms: window.map(|w| receipt.created_at_ms + w),
                })
            }
            BuyOutcome::AlreadyPurchased(receipt) => Err(self.already_purchased(sale, user, receipt).await?),
            BuyOutcome::ChallengeRequired => {
                self.challenges.learn_asked(sale);
                Err(if matches!(proof, Proof::Replayed) { self.refused(Refused::Replayed) } else { self.required() })
            }
            BuyOutcome::NotAdmitted => {
                self.admission.learn_queued(sale);
                Err(Error::NotAdmitted(NotAdmitted::Missing))
            }
            BuyOutcome::AdmissionExpired => Err(Error::NotAdmitted(NotAdmitted::Expired)),
            BuyOutcome::LimitReached { held, per_buyer } => {
                // A refusal's read, on the group's slot: which orders hold the buyer's units.
                let orders = self.sales.group_orders(sale, user).await.unwrap_or_else(|error| {
                    if let Some(suppressed) = crate::telemetry::dependency_failure_line(Some("redis")) {
                        tracing::warn!(%error, %sale, suppressed, "the buyer's orders in the group could not be read");
                    }
                    Vec::new()
                });
                Err(Error::LimitReached { per_buyer, held, orders })
            }
            BuyOutcome::InsufficientStock { left } => Err(Error::InsufficientStock { stock_left: left }),
            BuyOutcome::SoldOut => {
                if let Some(epoch) = self.sold_out.set_since(sale, asked) {
                    self.board.invalidate(sale).await;
                    let (flags, sales) = (self.sold_out.clone(), self.sales.clone());
                    tokio::spawn(sold_out::load_buyers(flags, sales, sale.clone(), epoch));
                }
                Err(Error::SoldOut)
            }
        }
    }

    /// The proof of work of a purchase without an admission token: the one it carries, checked in
    /// process and then spent in a call of its own, [`Proof::Spent`], or [`Proof::Replayed`] if
    /// it was spent before (`lua/buy.lua` then answers a buyer who bought with their order, and
    /// refuses anyone else as unproven); none, [`Proof::None`] (for a sale this instance knows to
    /// ask one, `challenge_required` at once; otherwise `lua/buy.lua` refuses it where the sale
    /// asks one). A sale without a challenge costs nothing.
    async fn spend_proof(
        &self,
        sale: &SaleId,
        user: &UserId,
        client: IpAddr,
        proof: Option<&str>,
    ) -> Result<Proof, Error> {
        if proof.is_none() && !self.challenges.asks(sale) {
            return Ok(Proof::None);
        }
        let spent = self.proof(sale.as_str(), user, client, proof)?;
        if !self.challenges.spend(sale, &spent).await? {
            return Ok(Proof::Replayed);
        }
        self.solved(&spent);
        Ok(Proof::Spent(spent))
    }

    /// The refusal of a repeat purchase, naming the order as `GET /sales/{sale_id}/order` reads
    /// it: in a sale with a payment window (this instance's snapshot of the sale says so) its
    /// payment state (`crate::orders::lookup::repeat_status`: one primary-key read in Postgres,
    /// the receipt's own status if Postgres cannot answer), otherwise the receipt as the script
    /// or the sold-out copy gave it, at no further cost than the snapshot.
    async fn already_purchased(&self, sale: &SaleId, user: &UserId, receipt: Option<Receipt>) -> Result<Error, Error> {
        let Some(receipt) = receipt else {
            return Ok(Error::AlreadyPurchased(None));
        };
        let window = self.payment_window(sale).await?;
        let receipt = lookup::repeat_status(&self.pool, sale, user, receipt, window.is_some()).await;
        Ok(Error::AlreadyPurchased(Some(receipt)))
    }

    /// The sale's payment window in milliseconds, `None` without one.
    async fn payment_window(&self, sale: &SaleId) -> Result<Option<i64>, Error> {
        Ok(match self.board.snapshot(sale).await? {
            Some(snapshot) => snapshot.state.payment_window_ms,
            // Seeded since this instance last read the registry of sales.
            None => self.sales.sale_state(sale).await?.and_then(|sale| sale.payment_window_ms),
        })
    }
}

/// Whether a purchase refused this way bought nothing and may be asked again as it was: refused by
/// a limit, before the start, while paused, short of stock, over the buyer's limit, or never run.
/// Its proof of work is given back, so the same solution buys when it may (a sold-out or ended
/// sale, or a buyer who bought, has nothing more to ask: theirs stays spent). Not while Redis is
/// down: the give-back would wait out its timeout a second time, and fail.
fn may_ask_again(refused: &Error) -> bool {
    if let Error::Unavailable(cause) = refused {
        return !cause.downcast_ref::<redis::RedisError>().is_some_and(is_redis_outage);
    }
    matches!(
        refused,
        Error::RateLimited { .. }
            | Error::SaleNotStarted
            | Error::SalePaused
            | Error::InsufficientStock { .. }
            | Error::LimitReached { .. }
    )
}
