//! Purchases that queue up go to Redis together. While a call is on Redis for a shard of a sale,
//! the purchases for that shard arriving on the same lane (below) wait, and go
//! together in the next call (`lua/buy_batch.lua`), up to `SECKILL_PURCHASE_BATCH` of them, each
//! with its own limits, order id and verdict, each as atomic as alone. There is no timer: a
//! purchase that finds no call in flight is sent at once, and alone (unless others arrived in the
//! same instant) through `lua/buy.lua` (or `lua/buy_limited.lua`), as without batching; so a quiet
//! sale pays nothing for it, and a hot one shares each call's fixed cost on Redis
//! (docs/benchmarks.md, "Several purchases per call").
//!
//! A lane is a shard and a thread: with no more HTTP worker threads than CPUs, a purchase waits
//! only behind a call of its own thread, so its answer never crosses threads. With more threads
//! than CPUs ([`Batcher::shared_by`]), the threads share lanes, in as many groups as there are
//! CPUs: each thread's own lanes would carry few purchases a call (1.8 with 16 threads on 2 CPUs
//! against 13 with 2), and a call costs the app and Redis far more than an answer handed to
//! another thread (docs/benchmarks.md, "Lanes when the workers outnumber the CPUs").
//!
//! The purchase that finds its lane idle makes its call itself, in its own request, as without
//! batching; the purchases that queue up behind it are then sent by a task of the lane, so a
//! request that goes away (its client disconnected) cannot take the others' answers with it.
//! That task runs on the purchase's thread, or, when threads share the lane, on the runtime of
//! the shared connection, which outlives every worker: an HTTP worker stopping at shutdown then
//! takes no other worker's purchase with it. If that task ends early (its runtime stops, or it
//! panics), the lane goes with it and its waiting purchases fail unsent, so no purchase ever
//! waits on a lane nobody drives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::oneshot;

use super::BuyError;
use crate::limiter::{Algorithm, Policy};
use crate::redis::Keyspace;
use crate::redis::keys::SaleKeys;
use crate::redis::lua::{self, unexpected_reply};

/// Most purchases in one call by default (`SECKILL_PURCHASE_BATCH`): a call of 64 takes Redis
/// about a millisecond here, well inside the command timeout, and leaves little to gain from more.
pub const DEFAULT_PURCHASE_BATCH: u32 = 64;

/// Where a purchase goes: one shard of a sale, and the shard count the caller assumes.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The sale id (buy.lua's `ARGV[1]`).
    pub sale: &'a str,
    /// The shard's keys, as buy.lua's KEYS.
    pub keys: [&'a str; 7],
    /// How many shards the caller believes the sale has (buy.lua's `ARGV[4]`).
    pub shards: u32,
}

impl<'a> Target<'a> {
    /// The shard `keys` of `sale`, which the caller believes has `shards` shards.
    pub fn new(sale: &'a str, keys: &'a SaleKeys, shards: u32) -> Self {
        Self { sale, keys: keys.all(), shards }
    }
}

/// A [`Target`] a lane owns.
struct OwnedTarget {
    sale: String,
    keys: [String; 7],
    shards: u32,
}

impl OwnedTarget {
    fn as_target(&self) -> Target<'_> {
        Target { sale: &self.sale, keys: self.keys.each_ref().map(String::as_str), shards: self.shards }
    }
}

/// One purchase's part of a call: buy.lua's ARGV of the buyer, and the limits to check first.
pub struct Part {
    /// The buyer's user id.
    pub user: String,
    /// The order id, also the limits' nonce.
    pub order_id: String,
    /// The buyer's place in a queued sale's line and its admission's end, `<place>.<expires_ms>`
    /// ("": none; `d<place>.<expires_ms>`: admitted by the drop's line).
    pub place: String,
    /// The purchase's trace context ("": traces are off).
    pub traceparent: String,
    /// Units to buy.
    pub quantity: u32,
    /// The buyer's proof of work was verified and spent (`crate::challenge`).
    pub proven: bool,
    /// The limits to check first, in order: each key and its policy (one algorithm for all).
    pub limits: Vec<(String, Policy)>,
}

impl Part {
    fn algorithm(&self) -> Option<Algorithm> {
        self.limits.first().map(|(_, policy)| policy.algorithm)
    }
}

/// Runs one purchase alone on `con`: `lua/buy.lua`, or `lua/buy_limited.lua` with its limits.
/// The reply is that script's.
pub async fn run_one(con: &mut impl ConnectionLike, target: &Target<'_>, part: &Part) -> RedisResult<Value> {
    let mut call = match part.algorithm() {
        None => lua::BUY.key(&target.keys[..]),
        Some(algorithm) => algorithm.with_purchase().key(&target.keys[..]),
    };
    call.arg(target.sale)
        .arg(&part.user)
        .arg(&part.order_id)
        .arg(target.shards)
        .arg(&part.place)
        .arg(&part.traceparent)
        .arg(part.quantity)
        .arg(proven(part));
    if !part.limits.is_empty() {
        call.arg(part.limits.len());
        for (key, policy) in &part.limits {
            call.key(key);
            policy.push_args(&mut call, &part.order_id, None); // nonce: the order id; Redis time
        }
    }
    lua::run(&call, con).await
}

/// The purchase scripts' `proven` argument.
fn proven(part: &Part) -> &'static str {
    if part.proven { "1" } else { "" }
}

/// Runs several purchases of one shard in one call of `lua/buy_batch.lua`: each one's reply, in
/// order, as [`run_one`] would have answered it (an error for a part that raised one).
async fn run_many(
    con: &mut impl ConnectionLike,
    target: &Target<'_>,
    algorithm: Option<Algorithm>,
    parts: &[Part],
) -> RedisResult<Vec<RedisResult<Value>>> {
    let algorithm = algorithm.unwrap_or(Algorithm::ALL[0]); // without limits, the limiter is never called
    let mut call = algorithm.with_purchases().key(&target.keys[..]);
    call.arg(target.sale).arg(target.shards).arg(parts.len());
    for part in parts {
        call.arg(&part.user).arg(&part.order_id).arg(&part.place).arg(&part.traceparent);
        call.arg(part.quantity).arg(proven(part)).arg(part.limits.len());
        for (key, policy) in &part.limits {
            call.key(key);
            policy.push_args(&mut call, &part.order_id, None); // nonce: the order id; Redis time
        }
    }
    let replies = match lua::run(&call, con).await? {
        Value::Array(replies) if replies.len() == parts.len() => replies,
        other => return Err(unexpected_reply("buy_batch.lua", &format!("{other:?}"))),
    };
    Ok(replies.into_iter().map(part_reply).collect())
}

/// One purchase's reply in `lua/buy_batch.lua`'s: `{"failed", message}` is the error its part
/// raised.
fn part_reply(reply: Value) -> RedisResult<Value> {
    if let Value::Array(words) = &reply
        && let [Value::BulkString(first), message] = &words[..]
        && first == b"failed"
    {
        let message: String = redis::from_redis_value_ref(message).unwrap_or_default();
        return Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "purchase script error",
            message,
        )));
    }
    Ok(reply)
}

/// A lane: a shard, and the thread (or group of threads, [`Batcher::shared_by`]) whose purchases
/// wait behind each other's calls.
#[derive(Clone, PartialEq, Eq, Hash)]
struct LaneKey {
    group: usize,
    meta: String,
    shards: u32,
    algorithm: Option<Algorithm>,
    /// Admitted by a drop's line: its KEYS[6] is the drop line's, not the sale's.
    by_drop: bool,
}

/// The calling thread's number: threads are numbered in the order they first buy.
fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! { static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed); }
    NUMBER.with(|number| *number)
}

/// A waiting purchase and where its reply goes.
struct Job {
    part: Part,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// The busy lanes of one process ([`Batcher::buy`]), each with the purchases waiting for its
/// next call. A lane exists only while a call of it is in flight or purchases wait for one, so
/// the map holds at most a lane per thread (or group) and hot shard.
pub struct Batcher {
    max: usize,
    /// With threads sharing lanes: how many groups they share them in.
    groups: Option<usize>,
    lanes: Mutex<HashMap<LaneKey, Vec<Job>>>,
    /// Purchases per call, when the process counts them.
    sizes: Option<prometheus::Histogram>,
}

impl Batcher {
    /// Calls of at most `max` (at least 2) purchases; each call's size observed in `sizes`.
    pub fn new(max: u32, sizes: Option<prometheus::Histogram>) -> Self {
        Self { max: max.max(2) as usize, groups: None, lanes: Mutex::default(), sizes }
    }

    /// The same batcher for `threads` HTTP worker threads on `cpus` CPUs: lanes per thread when
    /// the threads are no more than the CPUs, else shared by the threads in `cpus` groups.
    pub fn shared_by(self, threads: usize, cpus: usize) -> Self {
        let cpus = cpus.max(1);
        Self { groups: (threads > cpus).then_some(cpus), ..self }
    }

    /// The lane group of the calling thread.
    fn group(&self) -> usize {
        match self.groups {
            None => thread_number(),
            Some(groups) => thread_number() % groups,
        }
    }

    /// Buys `part` on `target`: at once on `con`, alone, when no call of its lane is in flight;
    /// otherwise it waits for that call and goes in the next with the others that queued up. The
    /// reply is the one [`run_one`] would give; a failure says whether the call may have run
    /// ([`BuyError::of_call`]: a failed call of several purchases fails each of them alike), and a
    /// purchase whose lane stopped before its call is [`BuyError::NotRun`].
    pub async fn buy(
        self: &Arc<Self>,
        redis: &Keyspace,
        con: &mut impl ConnectionLike,
        target: &Target<'_>,
        part: Part,
    ) -> Result<Value, BuyError> {
        let key = LaneKey {
            group: self.group(),
            meta: target.keys[0].to_owned(),
            shards: target.shards,
            algorithm: part.algorithm(),
            by_drop: part.place.starts_with('d'),
        };
        let queued = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            match lanes.get_mut(&key) {
                Some(waiting) => {
                    let (reply, answer) = oneshot::channel();
                    waiting.push(Job { part, reply });
                    Ok(answer)
                }
                None => {
                    lanes.insert(key.clone(), vec![]);
                    Err(part)
                }
            }
        };
        let part = match queued {
            Ok(answer) => {
                return match answer.await {
                    Ok(reply) => reply.map_err(|err| BuyError::of_call(err, redis.is_cluster())),
                    Err(_) => Err(BuyError::NotRun(
                        std::io::Error::other("the purchase's lane stopped before its call (the process is stopping)")
                            .into(),
                    )),
                };
            }
            Err(part) => part,
        };
        // The lane was idle: this purchase's call is the one in flight. Whatever queues behind it
        // goes next, from a task, when the call ends, or if this request goes away first.
        let _hand_off = HandOff { batcher: self, redis, key: Some(key), target };
        if let Some(sizes) = &self.sizes {
            sizes.observe(1.0);
        }
        run_one(con, target, &part).await.map_err(|err| BuyError::of_call(err, redis.is_cluster()))
    }

    /// Makes the lane's calls, each with the purchases waiting when the one before answered,
    /// until none wait; then the lane is gone. `ends` removes the lane if this stops early.
    async fn drive(self: Arc<Self>, redis: Keyspace, target: OwnedTarget, mut ends: EndsLane) {
        let key = ends.key.clone();
        let mut con = redis.purchase_conn().await;
        loop {
            let jobs = {
                let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
                let Some(waiting) = lanes.get_mut(&key) else {
                    ends.ended = true; // not ours to remove
                    return;
                };
                // A purchase whose request went away is not sent.
                waiting.retain(|job| !job.reply.is_closed());
                if waiting.is_empty() {
                    lanes.remove(&key);
                    ends.ended = true;
                    return;
                }
                let take = waiting.len().min(self.max);
                waiting.drain(..take).collect::<Vec<Job>>()
            };
            if let Some(sizes) = &self.sizes {
                sizes.observe(jobs.len() as f64);
            }
            let target = target.as_target();
            let (parts, replies): (Vec<Part>, Vec<_>) = jobs.into_iter().map(|job| (job.part, job.reply)).unzip();
            let answers = match &parts[..] {
                [one] => vec![run_one(&mut con, &target, one).await],
                many => match run_many(&mut con, &target, key.algorithm, many).await {
                    Ok(answers) => answers,
                    Err(err) => vec![Err(err); many.len()],
                },
            };
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer); // a request gone away takes no answer
            }
        }
    }
}

/// Held by the purchase whose own call is in flight on its lane: when that call ends (or the
/// request goes away during it), the purchases queued behind it are handed to a task that makes
/// their calls; with none queued the lane is removed.
struct HandOff<'a, 't> {
    batcher: &'a Arc<Batcher>,
    redis: &'a Keyspace,
    key: Option<LaneKey>,
    target: &'a Target<'t>,
}

impl Drop for HandOff<'_, '_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        {
            let mut lanes = self.batcher.lanes.lock().unwrap_or_else(|e| e.into_inner());
            if lanes.get(&key).is_none_or(Vec::is_empty) {
                lanes.remove(&key);
                return;
            }
        }
        // The guard goes into the task: if the task never runs (its runtime is stopping), dropping
        // it removes the lane, and the queued purchases fail unsent.
        let ends = EndsLane { batcher: self.batcher.clone(), key, ended: false };
        let target = OwnedTarget {
            sale: self.target.sale.to_owned(),
            keys: self.target.keys.map(str::to_owned),
            shards: self.target.shards,
        };
        let drive = self.batcher.clone().drive(self.redis.clone(), target, ends);
        match self.batcher.groups {
            // Shared lanes: on the runtime that outlives the workers, whose purchases wait there.
            Some(_) => drop(self.redis.conn().home().spawn(drive)),
            None => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(drive);
                }
            }
        }
    }
}

/// Removes its lane when the task driving it ends without having removed it (cancelled with its
/// runtime, never started, or panicked): the purchases waiting there then fail at once instead
/// of waiting for a call that will not come, and the next purchase starts a new lane.
struct EndsLane {
    batcher: Arc<Batcher>,
    key: LaneKey,
    ended: bool,
}

impl Drop for EndsLane {
    fn drop(&mut self) {
        if !self.ended {
            self.batcher.lanes.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
        }
    }
}
