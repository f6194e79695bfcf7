//! Seeding a drop: `lua/drop_seed.lua` over every size at once.

use redis::RedisResult;

use super::keys;
use crate::domain::{DropId, QueueSpec, SaleId};
use crate::draw::entries as draw_entries;
use crate::purchase::{Sales, registry};
use crate::redis::lua::{self, unexpected_reply};
use crate::redis::order_stream;

/// A drop as an operator seeds it: every size and the settings they share.
#[derive(Debug, Clone)]
pub struct DropSpec {
    /// Each size's sale and its stock.
    pub sizes: Vec<(SaleId, i64)>,
    /// The start, Unix ms (`None`: open at once).
    pub starts_at_ms: Option<i64>,
    /// The end, Unix ms (`None`: never).
    pub ends_at_ms: Option<i64>,
    /// Milliseconds a reservation has to be paid (`None`: final at once).
    pub payment_window_ms: Option<i64>,
    /// Units one buyer may buy across the sizes.
    pub per_buyer: u32,
    /// The proof of work's average tries (`None`: none): at the line's join with a line, else at
    /// each purchase.
    pub challenge_cost: Option<u32>,
    /// The drop's line (waiting room), one for every size.
    pub line: Option<QueueSpec>,
    /// Draw mode (`crate::draw`): entries for a window instead of purchases (never with a line).
    pub draw: Option<DropDraw>,
}

/// A drop's draw as its seed writes it in Redis (the secret seed stays in Postgres).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropDraw {
    /// When entries open and close, Unix ms.
    pub opens_at_ms: i64,
    pub closes_at_ms: i64,
    /// SHA-256 of the secret seed's hex digits, hex.
    pub commitment: String,
    /// Places on the waitlist.
    pub waitlist: i64,
    /// A restore's state of the draw, as Postgres records it (`open`, `drawing`, `drawn`), for a
    /// draw meta Redis lost; `None` for a seed, which keeps the state Redis has (else `open`).
    pub state: Option<String>,
}

/// What the seed decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropSeed {
    /// Every size, the group and the line are seeded.
    Seeded,
    /// The group's sales were seeded one by one (`PUT /admin/sales`), not as a drop.
    NotADrop,
    /// This size of the drop is not in the seed (a size is never removed).
    SizeMissing(String),
    /// This size has buyers: the drop is not re-seeded.
    InProgress(String),
}

/// Registers every size (so workers read their streams) and creates their streams' consumer
/// groups, then seeds the whole drop in one call. The registries are separate keys, written first:
/// no size is live without its stream being known. On success every instance drops its sold-out
/// flags of the sizes; a refusal takes back the registrations it made
/// ([`registry::unregister_unseeded`]).
pub async fn seed(sales: &Sales, drop: &DropId, spec: &DropSpec) -> RedisResult<DropSeed> {
    let line_stock: i64 = spec.sizes.iter().map(|(_, stock)| stock).sum();
    let ids: Vec<&SaleId> = spec.sizes.iter().map(|(sale, _)| sale).collect();
    let added = registry::register_sales(sales.keyspace(), &ids).await?;
    let draw_added = spec.draw.is_some() && registry::register_draw(sales.keyspace(), drop).await?;
    let outcome = decide(sales, drop, spec, line_stock).await?;
    if outcome != DropSeed::Seeded {
        // A refusal leaves nothing behind: the sizes and the draw this seed registered go again.
        let undone = async {
            registry::unregister_unseeded(sales.keyspace(), &added).await?;
            if draw_added {
                registry::unregister_unseeded_draw(sales.keyspace(), drop).await?;
            }
            RedisResult::Ok(())
        };
        if let Err(err) = undone.await {
            tracing::warn!(drop_id = %drop, error = %err, "a refused drop seed's registrations were not taken back");
        }
    }
    Ok(outcome)
}

/// Seeds the registered drop and reads what `lua/drop_seed.lua` decided.
async fn decide(sales: &Sales, drop: &DropId, spec: &DropSpec, line_stock: i64) -> RedisResult<DropSeed> {
    let reply = run(sales, drop, spec, ("seed", ""), line_stock).await?;
    let outcome = match reply {
        redis::Value::Array(_) => {
            let words: Vec<String> = redis::from_redis_value(reply)?;
            match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["not_a_drop"] => DropSeed::NotADrop,
                ["size_missing", size] => DropSeed::SizeMissing(size.to_owned()),
                ["drop_in_progress", size] => DropSeed::InProgress(size.to_owned()),
                _ => return Err(unexpected_reply("drop_seed.lua", &words.join(" "))),
            }
        }
        word => match redis::from_redis_value::<String>(word)?.as_str() {
            "ok" => DropSeed::Seeded,
            other => return Err(unexpected_reply("drop_seed.lua", other)),
        },
    };
    if outcome == DropSeed::Seeded {
        announce(sales, spec).await;
    }
    Ok(outcome)
}

/// Writes again what a drop's seed wrote and Redis lost (reconciliation's repair): the sizes of
/// `spec` whose keys are gone (with their stock as seeded: their buyers are restored next), the
/// group's `per_buyer`, window and drop mark, and the line's meta if gone, with `spec`'s shuffle
/// seed unless Redis still has one; `line_stock` is the drop's stock over all its sizes (the
/// line's `stock_initial`). Nothing Redis still has is reset. A size written back is paused with
/// the drop's pause if its line still holds one, else with `hold` (the repair's, until its buyers
/// are back). Answers how many sizes it wrote.
pub async fn restore(sales: &Sales, drop: &DropId, spec: &DropSpec, line_stock: i64, hold: &str) -> RedisResult<u32> {
    let ids: Vec<&SaleId> = spec.sizes.iter().map(|(sale, _)| sale).collect();
    registry::register_sales(sales.keyspace(), &ids).await?;
    if spec.draw.is_some() {
        registry::register_draw(sales.keyspace(), drop).await?;
    }
    let written: u32 = redis::from_redis_value(run(sales, drop, spec, ("restore", hold), line_stock).await?)?;
    if written > 0 {
        announce(sales, spec).await;
    }
    Ok(written)
}

/// Every instance forgets what it knew of the sizes (layout, snapshot, sold-out flags).
async fn announce(sales: &Sales, spec: &DropSpec) {
    for (sale, _) in &spec.sizes {
        sales.forget_layout(sale.as_str());
        sales.announce(sale, "drop seed").await;
    }
}

/// Creates the (registered) sizes' and draw's stream groups, and runs `lua/drop_seed.lua` in `mode`.
async fn run(
    sales: &Sales,
    drop: &DropId,
    spec: &DropSpec,
    (mode, hold): (&str, &str),
    line_stock: i64,
) -> RedisResult<redis::Value> {
    let redis = sales.keyspace();
    let size_keys: Vec<_> = spec.sizes.iter().map(|(sale, _)| redis.sale_keys(sale)).collect();
    for keys in &size_keys {
        order_stream::create_group(&mut redis.conn(), &keys.orders).await?;
    }
    if spec.draw.is_some() {
        draw_entries::stream::create_group(redis, drop).await?;
    }
    let drop_keys = keys(sales, drop);
    let opt = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let mut call = lua::DROP_SEED.key(&drop_keys.meta);
    call.key(&drop_keys.sales).key(&drop_keys.line_meta).key(&drop_keys.line_state).key(&drop_keys.draw);
    for keys in &size_keys {
        call.key(&keys.meta).key(&keys.stock).key(&keys.buyers);
    }
    call.arg(drop.as_str())
        .arg(opt(spec.starts_at_ms))
        .arg(opt(spec.ends_at_ms))
        .arg(opt(spec.payment_window_ms))
        .arg(spec.per_buyer)
        .arg(opt(spec.challenge_cost.map(i64::from)));
    match &spec.line {
        Some(line) => call.arg(line.opens_at_ms).arg(line.rate).arg(line.ttl_ms).arg(hex::encode(line.seed)),
        None => call.arg("").arg("").arg("").arg(""),
    };
    call.arg(mode).arg(line_stock);
    match &spec.draw {
        Some(draw) => call.arg(draw.opens_at_ms).arg(draw.closes_at_ms).arg(&draw.commitment).arg(draw.waitlist),
        None => call.arg("").arg("").arg("").arg(""),
    };
    for (sale, stock) in &spec.sizes {
        call.arg(sale.as_str()).arg(stock);
    }
    call.arg(hold).arg(spec.draw.as_ref().and_then(|draw| draw.state.as_deref()).unwrap_or(""));
    lua::run(&call, &mut redis.conn()).await
}
