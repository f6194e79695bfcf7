//! The worker's reads of its readable streams: claims of stale entries (XAUTOCLAIM), reads of
//! its own pending and of new entries (XREADGROUP), and the queue samples for `/metrics`. A
//! command that fails on one stream takes only that stream out ([`Worker::suspect`]); only a
//! Redis outage fails the step.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamRangeReply, StreamReadOptions};
use redis::{FromRedisValue, ParsingError, Value};

use super::{CLUSTER_POLL, QUEUE_SAMPLE, Worker};
use crate::domain::SaleId;
use crate::redis::connection::is_redis_outage;
use crate::redis::order_stream::CONSUMER_GROUP;

/// Entries read, by stream.
pub(super) type Batches = Vec<(String, Vec<StreamId>)>;

impl Worker {
    /// Every [`QUEUE_SAMPLE`]: each sale's queue length and the age of its oldest order, for
    /// `/metrics`, over its readable streams. A failed sample of one stream is skipped: the
    /// step's own commands report the outage.
    pub(super) async fn sample_queues(&mut self) {
        if self.queues_sampled_at.is_some_and(|t| t.elapsed() < QUEUE_SAMPLE) {
            return;
        }
        self.queues_sampled_at = Some(Instant::now());
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        // Per sale: orders queued in all its shards, and the age of the oldest.
        let mut queues: HashMap<&SaleId, (i64, f64)> = HashMap::new();
        for (stream, tracked) in self.streams.iter().filter(|(_, t)| t.readable && t.draw.is_none()) {
            let mut con = self.redis.clone();
            let Ok(length) = redis::cmd("XLEN").arg(stream).query_async::<i64>(&mut con).await else { continue };
            let Ok(oldest) = redis::cmd("XRANGE")
                .arg(stream)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async::<StreamRangeReply>(&mut con)
                .await
            else {
                continue;
            };
            // Entry ids start with the Redis time of the XADD, in milliseconds.
            let added_ms = oldest.ids.first().and_then(|e| e.id.split('-').next()?.parse::<u128>().ok());
            let lag = added_ms.map_or(0.0, |ms| now_ms.saturating_sub(ms) as f64 / 1000.0);
            let queue = queues.entry(&tracked.sale).or_default();
            *queue = (queue.0 + length, queue.1.max(lag));
        }
        for (sale, (length, lag)) in queues {
            self.metrics.queue_length.with_label_values(&[sale.as_str()]).set(length);
            self.metrics.queue_lag_seconds.with_label_values(&[sale.as_str()]).set(lag);
        }
    }

    /// XAUTOCLAIM on every readable stream: entries idle longer than the claim timeout become ours.
    pub(super) async fn claim_stale(&mut self) -> anyhow::Result<Batches> {
        let min_idle = self.settings.claim_timeout.as_millis() as u64;
        let mut claimed = Vec::new();
        let mut more = false;
        for stream in self.readable() {
            let reply: Result<StreamAutoClaimReply, _> = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(CONSUMER_GROUP)
                .arg(&self.settings.consumer)
                .arg(min_idle)
                .arg("0-0")
                .arg(StreamAutoClaimOptions::default().count(self.settings.batch))
                .query_async(&mut self.redis)
                .await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(err) if is_redis_outage(&err) => return Err(err).context("claiming stale orders"),
                Err(err) => {
                    self.suspect(&stream, &err);
                    continue;
                }
            };
            more |= reply.claimed.len() >= self.settings.batch;
            if !reply.claimed.is_empty() {
                tracing::info!(
                    stream,
                    entries = reply.claimed.len(),
                    "claimed orders left pending by another consumer"
                );
                claimed.push((stream, reply.claimed));
            }
        }
        let interval = (self.settings.claim_timeout / 2).max(Duration::from_millis(100));
        self.next_claim_at = if more { Instant::now() } else { Instant::now() + interval };
        Ok(claimed)
    }

    /// XREADGROUP over every readable stream from `id` ("0": own pending entries; ">": new
    /// entries). On a single node, one read spans every stream; should it fail for another
    /// reason than an outage (one stream's NOGROUP, WRONGTYPE), the streams are read one by one
    /// to find the culprit, so the others still drain.
    pub(super) async fn read(&mut self, id: &str, block: Option<Duration>) -> anyhow::Result<Batches> {
        let keys = self.readable();
        if self.redis.is_cluster() {
            return self.read_each(&keys, id, block).await;
        }
        let ids = vec![id; keys.len()];
        let mut options = self.read_options();
        if let Some(block) = block {
            options = options.block(block.as_millis() as usize);
        }
        let reply: Result<Option<GroupRead>, _> = redis::cmd("XREADGROUP")
            .arg(&options)
            .arg("STREAMS")
            .arg(&keys)
            .arg(&ids)
            .query_async(&mut self.redis.clone())
            .await;
        match reply {
            Ok(reply) => Ok(reply.map(|r| r.0).unwrap_or_default()),
            Err(err) if is_redis_outage(&err) => Err(err).context("reading orders"),
            Err(err) => {
                tracing::debug!(error = %err, "reading every stream at once failed: reading them one by one");
                self.read_each(&keys, id, None).await
            }
        }
    }

    fn read_options(&self) -> StreamReadOptions {
        StreamReadOptions::default().group(CONSUMER_GROUP, &self.settings.consumer).count(self.settings.batch)
    }

    /// One read per stream, all at once, without BLOCK (on a cluster each sale's stream has a
    /// slot of its own, one XREADGROUP may not span slots, and a blocking read would hold the
    /// node's shared connection). When every stream is empty and the caller would have blocked,
    /// it waits [`CLUSTER_POLL`] instead, so orders wait at most that long to be read.
    async fn read_each(&mut self, keys: &[String], id: &str, block: Option<Duration>) -> anyhow::Result<Batches> {
        let options = self.read_options();
        let reads = keys.iter().map(|stream| {
            let (mut con, mut cmd) = (self.redis.clone(), redis::cmd("XREADGROUP"));
            cmd.arg(&options).arg("STREAMS").arg(stream).arg(id);
            async move { (stream, cmd.query_async::<Option<GroupRead>>(&mut con).await) }
        });
        let mut batches = Vec::new();
        for (stream, reply) in futures::future::join_all(reads).await {
            match reply {
                Ok(reply) => batches.extend(reply.map(|r| r.0).unwrap_or_default()),
                Err(err) if is_redis_outage(&err) => return Err(err).context("reading orders"),
                Err(err) => self.suspect(stream, &err),
            }
        }
        if batches.is_empty()
            && let Some(block) = block
        {
            tokio::time::sleep(block.min(CLUSTER_POLL)).await;
        }
        Ok(batches)
    }
}

/// An XREADGROUP reply, taken apart as it is (`[[stream, [[id, [field, value, ...] or nil], ...]],
/// ...]`), keeping the streams that had entries. redis-rs's `StreamReadReply` clones the whole
/// reply before converting it (to try a second layout), which showed in the worker's profile.
struct GroupRead(Batches);

impl FromRedisValue for GroupRead {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        type Entry = (String, Option<Vec<(String, Value)>>);
        let streams: Vec<(String, Vec<Entry>)> = redis::from_redis_value(v)?;
        let entry = |(id, fields): Entry| StreamId {
            id,
            map: fields.unwrap_or_default().into_iter().collect(),
            ..StreamId::default()
        };
        Ok(Self(
            streams
                .into_iter()
                .filter(|(_, entries)| !entries.is_empty())
                .map(|(stream, entries)| (stream, entries.into_iter().map(entry).collect()))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use redis::{FromRedisValue, Value};

    use super::GroupRead;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_group_read_keeps_streams_with_entries_and_takes_a_deleted_entry_as_empty() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("s1"),
                Value::Array(vec![
                    Value::Array(vec![
                        bulk("1-0"),
                        Value::Array(vec![bulk("order_id"), bulk("o1"), bulk("user_id"), bulk("u1")]),
                    ]),
                    Value::Array(vec![bulk("2-0"), Value::Nil]),
                ]),
            ]),
            Value::Array(vec![bulk("empty"), Value::Array(vec![])]),
            Value::Array(vec![
                bulk("s2"),
                Value::Array(vec![Value::Array(vec![bulk("3-0"), Value::Array(vec![bulk("k"), bulk("v")])])]),
            ]),
        ]);
        let GroupRead(batches) = GroupRead::from_redis_value(reply).unwrap();
        let seen: Vec<(&str, Vec<(&str, usize)>)> = batches
            .iter()
            .map(|(stream, entries)| (stream.as_str(), entries.iter().map(|e| (e.id.as_str(), e.map.len())).collect()))
            .collect();
        assert_eq!(seen, [("s1", vec![("1-0", 2), ("2-0", 0)]), ("s2", vec![("3-0", 1)])]);
        assert_eq!(batches[0].1[0].map["user_id"], bulk("u1"));
        assert!(GroupRead::from_redis_value(Value::Array(vec![bulk("not a stream")])).is_err());
    }
}
