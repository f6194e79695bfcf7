//! The order events' outbox (`migrations/20261129000000_webhook_outbox.sql`,
//! `20261201120000_webhook_endpoints.sql`): where the writers of an order's changes put the event
//! that reports it, in the same statement or transaction, with one delivery to every enabled
//! endpoint of the `webhook_endpoints` table. What is written is decided there, in SQL, never by
//! an instance's settings, so every instance writes every event. The dispatcher that sends them
//! is `crate::webhooks`.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// SQL that is true when any webhook endpoint is registered (enabled or not: the events of a
/// disabled one's time are kept for the listing). Uncorrelated, so Postgres evaluates it once per
/// statement (an InitPlan), and a statement that finds it false skips the outbox entirely: one
/// probe of a table of a few rows.
pub(crate) const HOOKED: &str = "exists (select 1 from webhook_endpoints)";

/// SQL that writes an order's event of type `kind` (an SQL expression) from the columns of the
/// row `row` (a table alias, or "" for a `RETURNING` list's own); `extra` is appended to its
/// data (`|| <jsonb>`, or ""). The event's id, or null (and no call at all) without endpoints.
pub(crate) fn order_event(kind: &str, extra: &str, row: &str) -> String {
    let c = |column: &str| if row.is_empty() { column.to_owned() } else { format!("{row}.{column}") };
    let (order, sale) = (c("order_id"), c("sale_id"));
    format!(
        "case when {HOOKED} then webhook_publish({kind}, {sale}, {order}, \
         webhook_order_data({order}, {sale}, {user}, {status}, {quantity}, {pay_by}){extra}) end",
        user = c("user_id"),
        status = c("status"),
        quantity = c("quantity"),
        pay_by = c("pay_by"),
    )
}

/// SQL that writes `sale.sold_out` for each sale of `new` (the batch's inserted rows, with
/// `sale_id` and `quantity` columns) whose units held by orders reach its `stock_initial`, among
/// `$watched` (a `text[]`; null: any). The statement's own snapshot of `orders` does not see
/// `new` yet (nor does `webhook_sale_units`, a stable function), so its units are added. Once per
/// sale, `stock_initial` and units given back (the event's `dedup_key`): a redelivered batch
/// writes nothing again, a sale restocked or given units back and sold out again writes a new
/// one. Yields `(null, sale_id, event id)` rows, and none (the branch not even run) without
/// endpoints; its estimate is a function call per sale, never a scan of the sale's orders, which
/// would make Postgres JIT-compile the whole insert.
pub(crate) fn sold_out_events(new: &str, watched: &str) -> String {
    format!(
        "select null::uuid, s.sale_id,
                webhook_publish('sale.sold_out', s.sale_id, null,
                    jsonb_build_object('sale_id', s.sale_id, 'stock_initial', s.stock_initial,
                                       'units_returned', u.returned),
                    'sale.sold_out:' || s.sale_id || ':' || s.stock_initial || ':' || u.returned)
         from sales s cross join lateral webhook_sale_units(s.sale_id) u
         where {HOOKED} and s.sale_id in (select sale_id from {new})
           and ({watched}::text[] is null or s.sale_id = any({watched}))
           and s.stock_initial > 0
           and u.held + (select coalesce(sum(n.quantity), 0) from {new} n where n.sale_id = s.sale_id)
               >= s.stock_initial"
    )
}

/// SQL that writes `draw.offered` for each row of `new` (the batch's inserted rows) that is an
/// offer of units that came back to a draw's waitlisted entrant (`crate::draw::offers`): the
/// buyer's draw result in the sale's drop is `waitlisted`. Its data is the order's with `drop_id`
/// and `position`; its `order_id` the new reservation's, so it goes before that order's
/// `order.created` when selected first. Yields `(null, sale_id, event id)` rows, none without
/// endpoints.
pub(crate) fn offered_events(new: &str) -> String {
    format!(
        "select null::uuid, n.sale_id,
                webhook_publish('draw.offered', n.sale_id, n.order_id,
                    webhook_order_data(n.order_id, n.sale_id, n.user_id, n.status, n.quantity, n.pay_by)
                        || jsonb_build_object('drop_id', r.drop_id, 'position', r.position),
                    'draw.offered:' || n.order_id)
         from {new} n join draw_results r
              on r.drop_id = split_part(n.sale_id, '.', 1) and r.user_id = n.user_id
         where {HOOKED} and strpos(n.sale_id, '.') > 0 and r.outcome = 'waitlisted'"
    )
}

/// SQL that writes `draw.lost` for every entrant among the users `$2` (a `text[]`) the drop `$1`'s
/// draw left without a unit or a place, once each (its `dedup_key`); nothing without endpoints.
/// The event's `sale_id` is the drop's id; its data `drop_id`, `user_id` and `entrant` (the public
/// pseudonym).
pub(crate) fn lost_events() -> String {
    format!(
        "select webhook_publish('draw.lost', drop_id, null,
                    jsonb_build_object('drop_id', drop_id, 'user_id', user_id, 'entrant', entrant),
                    'draw.lost:' || drop_id || ':' || user_id)
         from draw_results where {HOOKED} and drop_id = $1 and user_id = any($2) and outcome = 'lost'"
    )
}

/// Writes the event `kind` of the reservation `order_id` of `sale` as it stands in `tx`, with
/// `extra` fields in its data (nothing without endpoints).
pub(crate) async fn emit_order(
    tx: &mut Transaction<'_, Postgres>,
    kind: &str,
    sale: &str,
    order_id: Uuid,
    extra: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let event = order_event("$1", " || $2::jsonb", "");
    sqlx::query(&format!("select {event} from orders where order_id = $3 and sale_id = $4 and pay_by is not null"))
        .bind(kind)
        .bind(extra)
        .bind(order_id)
        .bind(sale)
        .execute(&mut **tx)
        .await
        .map(drop)
}
