//! The state of each order stream as the worker finds it, and what it reports of them.
//!
//! About once a second the worker surveys every registered stream ([`survey`]): the key's type,
//! its consumer group (restored if missing, with `XGROUP CREATE` without `MKSTREAM`: a deleted
//! stream is never brought back by the worker) and whether the sale's meta is still in Redis.
//! A stream that is not [`StreamState::Ready`] is skipped (unless it is a lost sale's stream that
//! still holds orders: those drain) and reported in [`StreamHealth`], which `/readyz` and the
//! admin overview show, and in the gauge `seckill_worker_streams{state}`.

use std::sync::RwLock;

use redis::RedisResult;
use serde::{Deserialize, Serialize};

use crate::redis::connection::RedisConnection;
use crate::redis::connection::is_redis_outage;
use crate::redis::order_stream;

/// What the worker last found of one order stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// The stream and its consumer group are there: read every step.
    Ready,
    /// The stream key is gone while the sale's meta is there: skipped (a buy recreates the
    /// stream, and the next survey its group).
    StreamMissing,
    /// The key holds something else than a stream, or reading it fails: skipped.
    Unreadable,
    /// The sale's meta is gone from Redis (an operator's clean-up, an eviction, a failover): the
    /// sale cannot sell; orders still in its stream, if any, are still read.
    Lost,
}

impl StreamState {
    /// Every state, as the gauge publishes them.
    pub const ALL: [Self; 4] = [Self::Ready, Self::StreamMissing, Self::Unreadable, Self::Lost];

    /// The state's name (its JSON and its metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::StreamMissing => "stream_missing",
            Self::Unreadable => "unreadable",
            Self::Lost => "lost",
        }
    }
}

/// One survey of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub state: StreamState,
    /// Why, for an operator (empty when ready).
    pub detail: String,
    /// Whether the worker reads the stream.
    pub readable: bool,
    /// The consumer group was missing and this survey created it again.
    pub group_restored: bool,
}

impl Finding {
    fn new(state: StreamState, detail: impl Into<String>, readable: bool) -> Self {
        Self { state, detail: detail.into(), readable, group_restored: false }
    }
}

/// Surveys one stream: `meta` is its sale's meta key. Fails only on a Redis outage; any other
/// error is the stream's own (unreadable).
pub async fn survey(con: &mut RedisConnection, stream: &str, meta: &str) -> RedisResult<Finding> {
    let kind: String = redis::cmd("TYPE").arg(stream).query_async(con).await?;
    let meta_exists: bool = redis::cmd("EXISTS").arg(meta).query_async(con).await?;
    match (kind.as_str(), meta_exists) {
        ("stream", _) => {}
        ("none", true) => {
            let why = "the order stream is gone (the worker does not recreate it: the next buy does)";
            return Ok(Finding::new(StreamState::StreamMissing, why, false));
        }
        ("none", false) => {
            let why = "the sale's keys are gone from Redis (meta and order stream): `seckill reconcile --repair` \
                restores it from Postgres";
            return Ok(Finding::new(StreamState::Lost, why, false));
        }
        (other, _) => {
            let why = format!("the order stream's key holds a {other}, not a stream");
            return Ok(Finding::new(StreamState::Unreadable, why, false));
        }
    }
    let group_restored = match order_stream::restore_group(con, stream).await {
        Ok(restored) => restored,
        Err(err) if is_redis_outage(&err) => return Err(err),
        Err(err) => {
            return Ok(Finding::new(StreamState::Unreadable, format!("restoring the consumer group: {err}"), false));
        }
    };
    let mut finding = if meta_exists {
        Finding::new(StreamState::Ready, if group_restored { "consumer group restored" } else { "" }, true)
    } else {
        let queued: i64 = redis::cmd("XLEN").arg(stream).query_async(con).await?;
        let why = format!(
            "the sale's meta is gone from Redis; the {queued} entr(ies) of orders left in its stream still drain"
        );
        Finding::new(StreamState::Lost, why, true)
    };
    finding.group_restored = group_restored;
    // Entries a consumer acknowledged but did not trim (it stopped in between) go now.
    match order_stream::trim(con, stream).await {
        Ok(_) => {}
        Err(err) if is_redis_outage(&err) => return Err(err),
        Err(err) => return Ok(Finding::new(StreamState::Unreadable, format!("trimming: {err}"), false)),
    }
    Ok(finding)
}

/// A stream the worker skips or cannot fully serve, as `/readyz` and the admin overview show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamProblem {
    /// The sale the stream belongs to.
    pub sale: String,
    /// The stream's key (a sharded sale has one per shard).
    pub stream: String,
    pub state: StreamState,
    /// What the worker found, for an operator.
    pub detail: String,
}

/// The worker's report: `ok` when every stream is ready, else `degraded` with the problems (the
/// service still sells the other sales).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerReport {
    /// `ok` or `degraded`.
    pub status: String,
    pub problems: Vec<StreamProblem>,
}

/// The worker's problems, shared with the HTTP side of the same process; one entry per stream
/// that is not ready (bounded by the registered streams).
#[derive(Debug, Default)]
pub struct StreamHealth {
    problems: RwLock<Vec<StreamProblem>>,
}

impl StreamHealth {
    /// The current report.
    pub fn report(&self) -> WorkerReport {
        let problems = self.problems.read().unwrap_or_else(|e| e.into_inner()).clone();
        let status = if problems.is_empty() { "ok" } else { "degraded" };
        WorkerReport { status: status.to_owned(), problems }
    }

    /// Replaces the problems (sorted by stream, for a stable report).
    pub(crate) fn publish(&self, mut problems: Vec<StreamProblem>) {
        problems.sort_by(|a, b| a.stream.cmp(&b.stream));
        *self.problems.write().unwrap_or_else(|e| e.into_inner()) = problems;
    }
}
