//! The worker's draw entries: the entry streams of the registered draws (`crate::draw::entries`)
//! are tracked, surveyed, read, claimed and acknowledged as the order streams are; their entries
//! go to `draw_entries` in one idempotent statement per batch, acknowledged after the commit.

use std::collections::HashMap;

use anyhow::Context;
use redis::streams::StreamId;

use super::{Tracked, Worker};
use crate::domain::SaleId;
use crate::draw::entries::{store, stream};
use crate::redis::connection::is_redis_outage;
use crate::redis::order_stream;

impl Worker {
    /// The entry stream of every registered draw, as the worker tracks a stream: its drop, and
    /// its draw's meta as the key whose absence means the drop is gone.
    pub(super) async fn draw_streams(&self) -> anyhow::Result<HashMap<String, Tracked>> {
        let listed = stream::streams(self.sales.keyspace()).await.context("listing draws")?;
        Ok(listed
            .into_iter()
            .filter_map(|(key, drop, meta)| {
                let sale = SaleId::parse(drop.as_str()).ok()?;
                Some((key, Tracked { draw: Some(drop), ..Tracked::new(sale, meta) }))
            })
            .collect())
    }

    /// Writes the entries of the draws' streams to Postgres in one statement, then acknowledges
    /// them stream by stream. Answers the stream entries handled (malformed ones included).
    pub(super) async fn persist_entries(&mut self, batches: Vec<(String, Vec<StreamId>)>) -> anyhow::Result<usize> {
        if batches.is_empty() {
            return Ok(0);
        }
        let mut entries = Vec::new();
        let mut handled = 0;
        for (key, ids) in &batches {
            handled += ids.len();
            let Some(drop) = self.streams.get(key).and_then(|t| t.draw.clone()) else { continue };
            for entry in ids {
                match stream::decode(entry, &drop) {
                    Ok(stored) => entries.push(stored),
                    Err(why) => {
                        self.stats.malformed += 1;
                        tracing::error!(stream = key, entry_id = entry.id, fields = ?entry.map, why,
                            "malformed draw entry dropped");
                    }
                }
            }
        }
        let insert = tokio::time::timeout(self.settings.insert_timeout, store::insert(&self.pool, &entries));
        let inserted = insert
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {:?}", self.settings.insert_timeout))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .context("inserting draw entries")?;
        self.stats.draw_entries += inserted;
        self.stats.redelivered += entries.len() as u64 - inserted;
        for (key, ids) in &batches {
            let ids: Vec<&str> = ids.iter().map(|e| e.id.as_str()).collect();
            match order_stream::acknowledge(&mut self.redis, key, &ids).await {
                Ok(_) => {}
                Err(err) if is_redis_outage(&err) => return Err(err).context("acknowledging draw entries"),
                Err(err) => self.suspect(key, &err),
            }
        }
        Ok(handled)
    }
}
