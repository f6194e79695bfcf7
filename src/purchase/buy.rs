//! The purchase: `lua/buy.lua` on one shard or, for a sharded sale ([`super::shards`]), on each
//! shard in the user's visit order until one decides. The request's rate limits ride in the
//! first call (`lua/buy_limited.lua`) when their keys can share it. Purchases that queue up for
//! a shard share a call (`lua/buy_batch.lua`, [`super::batch`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use redis::aio::ConnectionLike;
use tracing::Instrument;
use uuid::Uuid;

use super::batch::{self, Part, Target};
use super::reply::{BuyOutcome, ShardReply, Verdict, shard_reply};
use super::{BuyError, Sales};
use crate::domain::{SaleId, UserId};
use crate::limiter::{Decision, Gate};
use crate::purchase::shards::Layout;
use crate::redis::keys::{SaleKeys, drop_line_bought_key, hash_tag};
use crate::redis::lua::unexpected_reply;
use crate::telemetry::traces;

/// A buyer's admission, from the token the caller verified (`crate::admission`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The buyer's place in its line.
    pub place: u64,
    /// When the admission ends (Unix ms, Redis time, as its token was signed): `lua/buy.lua`
    /// compares it with Redis `TIME`, the clock the line admits by, not with this instance's.
    pub expires_ms: u64,
    /// Admitted by the line of the sale's drop (a size of a drop with a line), not the sale's
    /// own: the place goes to `lua/buy.lua` marked `d<place>.<expires_ms>`, which takes it only in a sale whose
    /// meta says `line` = `drop` (and a plain one only in a sale whose meta does not).
    pub by_drop: bool,
}

/// The limits of one purchase, checked once, in the first call that can carry them.
struct Limits<'g, 'p> {
    gates: &'g [Gate<'p>],
    decisions: Vec<Decision>,
    /// The order id, as text: also the limits' nonce (unique per request).
    order_id: String,
    /// The buyer's place in a queued sale's line and its admission's end, from its admission
    /// token, as text (`<place>.<expires_ms>`; "": none; `d<place>.<expires_ms>` from a drop's line).
    place: String,
    /// A drop-admitted purchase: the drop line's buyers (buy.lua's KEYS[6] instead of the sale's).
    line_bought: Option<String>,
    /// The buyer's proof of work was verified and spent (`crate::challenge`).
    proven: bool,
    /// The purchase's trace context for its stream entry ("": traces are off).
    traceparent: String,
    /// Units to buy.
    quantity: u32,
}

/// Purchases one instance has on Redis at once. A command's response timeout
/// (`SECKILL_REDIS_TIMEOUT`) runs from when it is queued on the connection, so without a bound a
/// crowd of connections (10,000 in the benchmark) queued more purchases on Redis than it answers
/// in that time: they failed with a 503 though Redis was well, and might still have been bought.
/// Waiting for a turn before the command is queued keeps that wait out of the timeout; 256 in
/// flight is a few milliseconds of Redis's work.
pub const IN_FLIGHT_PURCHASES: usize = 256;

/// How long a purchase waits for a turn before it fails (503, never sent): long enough for any
/// queue a healthy Redis works through, short enough that a hung one does not hold requests
/// forever.
pub const TURN_WAIT: Duration = Duration::from_secs(10);

impl Sales {
    /// Buys through `lua/buy.lua`: one atomic decision per shard, and on success the order is in
    /// that shard's stream. An unsharded sale costs one call. A sharded sale is tried shard by
    /// shard in the user's visit order, moving on only after `sold_out`.
    ///
    /// The layout is not read first: a sale this instance has not seen is assumed unsharded, and the
    /// script answers `wrong_shards` (writing nothing) if it is not; then the layout is read and
    /// the purchase asked again.
    ///
    /// `gates` are the request's rate limits, checked first, in order, until one refuses. They
    /// run inside the first purchase call (`lua/buy_limited.lua`: one round trip in all) when
    /// their keys can share it: always on a single server, and on a Cluster when the keys carry
    /// the shard's hash tag (`SECKILL_RATE_LIMIT_SCOPE=sale`, the default); otherwise each runs
    /// in a call of its own just before.
    ///
    /// Without `SECKILL_CONFIRM_REPLICAS`, a purchase that finds a call of its thread in flight
    /// for its shard waits and goes in the next one with the others that queued up
    /// ([`super::batch`]; `SECKILL_PURCHASE_BATCH`). With it, the purchase runs alone on a
    /// dedicated connection and, once bought, `WAIT`s there for the replicas
    /// ([`crate::redis::confirm`]).
    ///
    /// At most `IN_FLIGHT_PURCHASES` purchases of this instance are on Redis at once; the others
    /// wait for a turn here, up to `TURN_WAIT`, then fail without being sent.
    ///
    /// A failure says whether the purchase may have bought under `order_id`
    /// ([`BuyError::OutcomeUnknown`]: its call was sent and no verdict came back) or surely did
    /// not ([`BuyError::NotRun`]).
    ///
    /// `place` is the buyer's place in a queued sale's line, from the admission token the caller
    /// verified (`crate::admission`); a queued sale refuses a purchase without one
    /// ([`BuyOutcome::NotAdmitted`]). `proven`: the buyer's proof of work was verified and spent
    /// (`crate::challenge`); a sale without a waiting room that asks one refuses a purchase
    /// without it ([`BuyOutcome::ChallengeRequired`]). `quantity` is the units bought (1 to
    /// [`crate::domain::MAX_PER_BUYER`]), all or none.
    pub async fn buy(
        &self,
        sale: &SaleId,
        (user, quantity): (&UserId, u32),
        order_id: Uuid,
        (place, proven): (Option<Admitted>, bool),
        gates: &[Gate<'_>],
    ) -> Result<Verdict, BuyError> {
        let user = (user, quantity);
        let place = (place, proven);
        if !traces::on() {
            return self.buy_once(sale, user, order_id, place, gates, String::new()).await;
        }
        let span = tracing::info_span!(
            "redis.buy",
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = "EVALSHA buy.lua",
            seckill.sale_id = %sale,
            seckill.outcome = tracing::field::Empty,
        );
        let traceparent = traces::traceparent(&span).unwrap_or_default();
        let verdict = self.buy_once(sale, user, order_id, place, gates, traceparent).instrument(span.clone()).await;
        let outcome = match &verdict {
            Ok(Verdict { outcome: Some(outcome), .. }) => outcome.label(),
            Ok(Verdict { outcome: None, .. }) => "rate_limited",
            Err(BuyError::NotRun(_)) => "redis_error",
            Err(BuyError::OutcomeUnknown(_)) => "outcome_unknown",
        };
        span.record("seckill.outcome", outcome);
        verdict
    }

    async fn buy_once(
        &self,
        sale: &SaleId,
        (user, quantity): (&UserId, u32),
        order_id: Uuid,
        (place, proven): (Option<Admitted>, bool),
        gates: &[Gate<'_>],
        traceparent: String,
    ) -> Result<Verdict, BuyError> {
        let _turn = match tokio::time::timeout(TURN_WAIT, self.turns.acquire()).await {
            Ok(Ok(turn)) => turn,
            _ => {
                let waited = std::io::Error::new(std::io::ErrorKind::TimedOut, "no turn for the purchase");
                return Err(BuyError::NotRun(waited.into()));
            }
        };
        let mut limits = Limits {
            gates,
            decisions: Vec::with_capacity(gates.len()),
            order_id: order_id.to_string(),
            place: match place {
                Some(Admitted { place, expires_ms, by_drop: true }) => format!("d{place}.{expires_ms}"),
                Some(Admitted { place, expires_ms, by_drop: false }) => format!("{place}.{expires_ms}"),
                None => String::new(),
            },
            line_bought: place
                .filter(|admitted| admitted.by_drop)
                .and_then(|_| sale.group())
                .map(|drop| drop_line_bought_key(self.redis.prefix(), drop)),
            proven,
            traceparent,
            quantity,
        };
        let Some(pool) = &self.confirm else {
            let outcome = self.buy_with(&mut self.redis.purchase_conn().await, sale, user, &mut limits).await?;
            return Ok(Verdict { limits: limits.decisions, outcome });
        };
        let mut conn = pool.get().await.map_err(BuyError::NotRun)?;
        let outcome = self.buy_with(&mut conn, sale, user, &mut limits).await?;
        let outcome = match outcome {
            Some(BuyOutcome::Purchased { pay_by_ms }) => Some(match conn.wait_for_replicas().await {
                Ok(replicas) if replicas >= pool.replicas => BuyOutcome::Purchased { pay_by_ms },
                Ok(replicas) => BuyOutcome::NotDurable { replicas },
                Err(error) => {
                    tracing::warn!(%error, %order_id, "WAIT for replicas failed after a purchase");
                    BuyOutcome::NotDurable { replicas: 0 }
                }
            }),
            other => other,
        };
        Ok(Verdict { limits: limits.decisions, outcome })
    }

    async fn buy_with(
        &self,
        con: &mut impl ConnectionLike,
        sale: &SaleId,
        user: &UserId,
        limits: &mut Limits<'_, '_>,
    ) -> Result<Option<BuyOutcome>, BuyError> {
        let cached = self.cached_layout(sale);
        let assumed = cached.clone().unwrap_or_default();
        match self.buy_on(con, &assumed, sale, user, limits).await? {
            ShardReply::Limited => return Ok(None),
            // A kept layout leading nowhere: the sale's keys were lost and it was seeded anew.
            ShardReply::Decided(BuyOutcome::UnknownSale) if cached.is_some() => {}
            ShardReply::Decided(outcome) => return Ok(Some(outcome)),
            ShardReply::WrongShards => {}
        }
        let Some(layout) = self.read_layout(sale).await.map_err(BuyError::NotRun)? else {
            return Ok(Some(BuyOutcome::UnknownSale));
        };
        match self.buy_on(con, &layout, sale, user, limits).await? {
            ShardReply::Limited => Ok(None),
            ShardReply::Decided(outcome) => Ok(Some(outcome)),
            // The script wrote nothing: wrong_shards is decided first.
            ShardReply::WrongShards => {
                Err(BuyError::NotRun(unexpected_reply("buy.lua", "wrong_shards after reading the layout")))
            }
        }
    }

    async fn buy_on(
        &self,
        con: &mut impl ConnectionLike,
        layout: &Layout,
        sale: &SaleId,
        user: &UserId,
        limits: &mut Limits<'_, '_>,
    ) -> Result<ShardReply, BuyError> {
        // Only the keys of the shards visited (usually one), not every shard's, per purchase.
        let sharded_tag = layout.is_sharded().then(|| SaleKeys::tag(sale, None));
        for shard in layout.visit_order(user) {
            let keys = match shard {
                0 => self.sale_keys(sale),
                _ => Arc::new(layout.shard_keys(self.redis.prefix(), sale, shard)),
            };
            let sale_tag = sharded_tag.as_deref().unwrap_or(hash_tag(&keys.meta)); // shard 0's
            let Some(gates) = self.gates_joining(con, &keys, sale_tag, limits).await.map_err(BuyError::NotRun)? else {
                return Ok(ShardReply::Limited);
            };
            let mut target = Target::new(sale.as_str(), &keys, layout.shards());
            if let Some(bought) = &limits.line_bought {
                target.keys[5] = bought;
            }
            let part = Part {
                user: user.as_str().to_owned(),
                order_id: limits.order_id.clone(),
                place: limits.place.clone(),
                proven: limits.proven,
                traceparent: limits.traceparent.clone(),
                quantity: limits.quantity,
                limits: gates.iter().map(|gate| (gate.key.clone(), *gate.policy)).collect(),
            };
            let reply = match &self.batcher {
                Some(batcher) => batcher.buy(&self.redis, con, &target, part).await?,
                None => {
                    let reply = batch::run_one(con, &target, &part).await;
                    reply.map_err(|err| BuyError::of_call(err, self.redis.is_cluster()))?
                }
            };
            // A reply not understood: the script ran, and what it decided is not known.
            match shard_reply(reply, gates.len(), &mut limits.decisions).map_err(BuyError::OutcomeUnknown)? {
                Some(ShardReply::Decided(BuyOutcome::SoldOut)) => continue,
                Some(reply) => return Ok(reply),
                None => return Ok(ShardReply::Limited),
            }
        }
        Ok(ShardReply::Decided(BuyOutcome::SoldOut))
    }

    /// The gates still to check that join the call on `keys` (a shard of the sale whose shard 0
    /// has the hash tag `sale_tag`): all of them (taken, so no later call checks them again), a `sale`-scoped one
    /// moved into the shard's slot ([`Gate::on_shard`]), when their keys then share its slot or
    /// Redis is one server; else none, after checking each in a call of its own. `None` when one
    /// of those refused.
    async fn gates_joining<'g, 'p>(
        &self,
        con: &mut impl ConnectionLike,
        keys: &SaleKeys,
        sale_tag: &str,
        limits: &mut Limits<'g, 'p>,
    ) -> RedisResult<Option<Cow<'g, [Gate<'p>]>>> {
        let gates = std::mem::take(&mut limits.gates);
        let shard_tag = hash_tag(&keys.meta);
        // Shard 0 (every unsharded sale) takes the gates as they are; only another shard's call
        // needs its `sale`-scoped keys moved into its slot.
        let gates: Cow<'g, [Gate<'p>]> = match sale_tag == shard_tag {
            true => Cow::Borrowed(gates),
            false => {
                Cow::Owned(gates.iter().map(|gate| gate.on_shard(self.redis.prefix(), sale_tag, shard_tag)).collect())
            }
        };
        let cluster = self.redis.conn().is_cluster();
        if !cluster || gates.iter().all(|gate| hash_tag(&gate.key) == shard_tag) {
            return Ok(Some(gates));
        }
        for gate in gates.iter() {
            let decision = gate.check(con, &limits.order_id).await?;
            limits.decisions.push(decision);
            if !decision.allowed {
                return Ok(None);
            }
        }
        Ok(Some(Cow::Borrowed(&[])))
    }
}
