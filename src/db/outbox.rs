//! The order events' outbox (`migrations/20261129000000_webhook_outbox.sql`): where the writers of
//! an order's changes put the event that reports it, in the same statement or transaction. The
//! dispatcher that sends them is `crate::webhooks`.

use std::sync::Arc;

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// The webhook endpoints every event goes to. Empty (the default): no event is written, and the
/// writers skip the outbox entirely.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    endpoints: Arc<[String]>,
}

impl Outbox {
    /// Events to these endpoints (none: off).
    pub fn to(endpoints: Vec<String>) -> Self {
        Self { endpoints: endpoints.into() }
    }

    /// The endpoints, as the `text[]` the SQL functions take.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Whether events are written.
    pub fn is_on(&self) -> bool {
        !self.endpoints.is_empty()
    }
}

/// SQL that writes an order's event of type `kind` (an SQL expression) from the columns of the
/// row `row` (a table alias, or "" for a `RETURNING` list's own), the endpoints bound at
/// `endpoints`; `extra` is appended to its data (`|| <jsonb>`, or ""). Null, and no call at all,
/// without endpoints.
pub(crate) fn order_event(endpoints: &str, kind: &str, extra: &str, row: &str) -> String {
    let c = |column: &str| if row.is_empty() { column.to_owned() } else { format!("{row}.{column}") };
    let (order, sale) = (c("order_id"), c("sale_id"));
    format!(
        "case when cardinality({endpoints}::text[]) > 0 then webhook_emit({endpoints}, {kind}, {sale}, {order}, \
         webhook_order_data({order}, {sale}, {user}, {status}, {quantity}, {pay_by}){extra}) end",
        user = c("user_id"),
        status = c("status"),
        quantity = c("quantity"),
        pay_by = c("pay_by"),
    )
}

/// Writes the event `kind` of the reservation `order_id` of `sale` as it stands in `tx`, with
/// `extra` fields in its data.
pub(crate) async fn emit_order(
    tx: &mut Transaction<'_, Postgres>,
    outbox: &Outbox,
    kind: &str,
    sale: &str,
    order_id: Uuid,
    extra: serde_json::Value,
) -> Result<(), sqlx::Error> {
    if !outbox.is_on() {
        return Ok(());
    }
    let event = order_event("$1", "$2", " || $3::jsonb", "");
    sqlx::query(&format!("select {event} from orders where order_id = $4 and sale_id = $5 and pay_by is not null"))
        .bind(outbox.endpoints())
        .bind(kind)
        .bind(extra)
        .bind(order_id)
        .bind(sale)
        .execute(&mut **tx)
        .await
        .map(drop)
}

/// Writes `sale.sold_out` for each of `sales` whose units held by orders (all but those given
/// back) reach its `stock_initial`. Once per sale, `stock_initial` and units given back (the
/// event's `dedup_key`): a redelivered batch writes nothing again, a sale restocked or given
/// units back and sold out again writes a new one.
pub(crate) async fn sold_out(
    tx: &mut Transaction<'_, Postgres>,
    outbox: &Outbox,
    sales: &[&str],
) -> Result<(), sqlx::Error> {
    if !outbox.is_on() || sales.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "select webhook_emit($1, 'sale.sold_out', s.sale_id, null,
                jsonb_build_object('sale_id', s.sale_id, 'stock_initial', s.stock_initial,
                                   'units_returned', u.returned),
                'sale.sold_out:' || s.sale_id || ':' || s.stock_initial || ':' || u.returned)
         from sales s
         cross join lateral (
             select coalesce(sum(quantity) filter (where restocked_at is null), 0) as held,
                    coalesce(sum(quantity) filter (where restocked_at is not null), 0) as returned
             from orders o where o.sale_id = s.sale_id) u
         where s.sale_id = any($2) and s.stock_initial > 0 and u.held >= s.stock_initial",
    )
    .bind(outbox.endpoints())
    .bind(sales)
    .execute(&mut **tx)
    .await
    .map(drop)
}
