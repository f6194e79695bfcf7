//! A drop's keys and a line's (a queued sale's or a drop's), in the sale's or the group's slot.

use super::QueueKeys;
use crate::domain::DropId;

/// A drop's own keys, in its group's slot `{group:<drop>}` beside its sizes' ([`super::SaleKeys`]).
#[derive(Debug, Clone)]
pub struct DropKeys {
    /// Hash: the group's `per_buyer`, `payment_window_ms`, and `drop` = "1" for a drop seeded whole.
    pub meta: String,
    /// Set: the ids of the drop's sales (its sizes).
    pub sales: String,
    /// The drop's line (waiting room): its meta hash (`stock_initial` as a marker, times, rate,
    /// `paused`, `challenge_cost`, as a queued sale's meta).
    pub line_meta: String,
    /// Hash: the line's shuffle seed and admission progress (`lua/admit.lua`'s state).
    pub line_state: String,
    /// Hash: a draw's meta (`lua/drop_seed.lua`): `opens_at_ms`, `closes_at_ms`, `per_buyer`,
    /// `sizes` (short names, comma-joined), `commitment`, `waitlist`, `state`, `challenge_cost`.
    pub draw: String,
    /// Hash: a draw's entries, buyer -> `"<sizes comma-joined> <quantity> <entered_ms>"`
    /// (`lua/draw_enter.lua`); one field per entrant, gone with the drop.
    pub entries: String,
    /// Stream: the accepted entries not yet in Postgres (the worker copies and trims them).
    pub entry_stream: String,
    /// Hash: the draw's waitlist once drawn, place -> `"<quantity> <sizes> <state> <user>"`
    /// (`lua/draw_waitlist.lua`); each size's waiting places are [`DropKeys::waiting`].
    pub waitlist: String,
}

impl DropKeys {
    /// The drop's keys under `prefix`.
    pub fn new(prefix: &str, drop: &DropId) -> Self {
        let group = format!("{prefix}:{{group:{drop}}}");
        Self {
            meta: format!("{group}:meta"),
            sales: format!("{group}:sales"),
            line_meta: format!("{group}:line:meta"),
            line_state: format!("{group}:line:queue:state"),
            draw: format!("{group}:draw"),
            entries: format!("{group}:draw:entries"),
            entry_stream: format!("{group}:draw:stream"),
            waitlist: format!("{group}:draw:waitlist"),
        }
    }

    /// Sorted set: the waitlist's places still waiting that listed `size` (a short name), by place.
    pub fn waiting(&self, size: &str) -> String {
        format!("{}:{size}", self.waitlist)
    }
}

/// A line's keys (`crate::admission`): a queued sale's own (its meta, [`super::SaleKeys::line`]), or a
/// drop's, under `<prefix>:{group:<drop>}:line` in the drop's slot beside its sizes' keys
/// ([`LineKeys::of_drop`]).
#[derive(Debug, Clone)]
pub struct LineKeys {
    /// Hash: the line's settings (`stock_initial` as a marker, `starts_at_ms`, `ends_at_ms`,
    /// `queue_rate`, `queue_ttl_ms`, `queue_opens_at_ms`, `paused`, `challenge_cost`).
    pub meta: String,
    /// The waiting room's keys.
    pub queue: QueueKeys,
    /// Sorted set: the nonces of the proof-of-work solutions spent at the line's joins.
    pub challenges: String,
}

impl LineKeys {
    /// The line of drop `drop` (a group's name: its sizes are the sales `<drop>.<size>`).
    pub fn of_drop(prefix: &str, drop: &str) -> Self {
        Self::under(&drop_line_base(prefix, drop))
    }

    /// A drop's line's keys under `base` (`<prefix>:{group:<drop>}:line`).
    pub(super) fn under(base: &str) -> Self {
        Self { meta: format!("{base}:meta"), queue: QueueKeys::under(base), challenges: format!("{base}:challenges") }
    }

    /// KEYS[1..5] of queue_join.lua.
    pub fn joining(&self) -> [&str; 5] {
        [&self.meta, &self.queue.prequeue, &self.queue.late, &self.queue.state, &self.challenges]
    }

    /// KEYS of admit.lua: the meta, the first stock, the waiting room, then the other stocks
    /// and the sizes' metas (a drop's line sums the stocks of its sizes the repair does not hold;
    /// a sale's line passes its stock alone and no meta).
    pub fn admitting<'a>(&'a self, stocks: &'a [String], metas: &'a [String]) -> Vec<&'a str> {
        let q = &self.queue;
        let mut keys = Vec::with_capacity(6 + stocks.len() + metas.len());
        keys.extend([self.meta.as_str(), stocks.first().map_or("", String::as_str)]);
        keys.extend([q.prequeue.as_str(), &q.late, &q.bought, &q.admits, &q.state]);
        keys.extend(stocks.iter().skip(1).map(String::as_str));
        keys.extend(metas.iter().map(String::as_str));
        keys
    }
}

/// What every key of drop `drop`'s line starts with: `<prefix>:{group:<drop>}:line`.
pub fn drop_line_base(prefix: &str, drop: &str) -> String {
    format!("{prefix}:{{group:{drop}}}:line")
}

/// Sorted set: buyer -> place, the buyers admitted by drop `drop`'s line who bought (any size):
/// a drop-admitted purchase's KEYS[6] of lua/buy.lua ([`LineKeys::of_drop`]'s `queue.bought`).
pub fn drop_line_bought_key(prefix: &str, drop: &str) -> String {
    format!("{}:queue:bought", drop_line_base(prefix, drop))
}
