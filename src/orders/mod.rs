//! Orders after the purchase. `lua/buy.lua` appends each order to its sale's stream in Redis in
//! the same atomic step that decrements the stock (the entry's format and the consumer group:
//! `crate::redis::order_stream`); from there the worker (`worker`) copies it into Postgres
//! (`crate::db::insert_orders`) and only then acknowledges it, skipping and reporting a sale whose
//! stream is broken or gone (`streams`). `queue` lists the streams and
//! reads or appends entries for reconciliation. `lookup` finds one buyer's order, queued or
//! committed.

pub mod lookup;
pub mod queue;
pub mod streams;
pub mod worker;
