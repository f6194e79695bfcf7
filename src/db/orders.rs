//! The `orders` table: the worker's idempotent batch insert, and the reads of reconciliation and
//! of a sale's state.

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use super::ms_to_time;
use super::outbox::{self, HOOKED};
use crate::domain::{Order, SaleId, Standing, UserId};

/// What one batch insert did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InsertReport {
    /// New rows written.
    pub inserted: usize,
    /// Entries whose order id was already stored (a redelivery): nothing to do.
    pub already_stored: usize,
    /// Entries refused because the user already has a *different* order in that sale.
    pub conflicts: Vec<Order>,
    /// Events are being written (an endpoint is registered), as this insert saw it: the hint
    /// for the next one.
    pub hooked: bool,
}

/// Whether the last batch insert wrote events, as the caller remembers it. Only a hint: the
/// statement reads the endpoints itself, and a wrong hint costs a second statement, never an
/// event.
#[derive(Debug, Clone, Copy)]
pub enum Hint<'a> {
    /// None were written: the orders alone, with no outbox in the statement (an `exists` Postgres
    /// evaluates once); if an endpoint is registered after all, it stores nothing and the batch
    /// goes again as `Hooked(None)`.
    Quiet,
    /// Events are written: each new order's `order.created`, and the `sale.sold_out` of a sale
    /// the batch sold out, among these sales (`None`: any of the batch; the check sums the
    /// sale's orders, so the worker names only the sales whose Redis stock is gone).
    Hooked(Option<&'a HashSet<String>>),
}

/// Inserts a batch of orders in one statement (idempotent: redeliveries are no-ops), with their
/// events when an endpoint is registered ([`Hint`]), then sorts the entries that were not
/// inserted into redeliveries (their (sale, user) row holds their order id) and conflicts (it
/// holds another).
pub async fn insert_orders(pool: &PgPool, orders: &[Order], hint: Hint<'_>) -> Result<InsertReport, sqlx::Error> {
    if orders.is_empty() {
        return Ok(InsertReport::default());
    }
    let batch = Batch::of(orders);
    let (inserted, hooked) = match hint {
        Hint::Quiet => match batch.insert_quiet(pool).await? {
            Some(inserted) => (inserted, false),
            None => batch.insert_hooked(pool, None).await?,
        },
        Hint::Hooked(may_sell_out) => batch.insert_hooked(pool, may_sell_out).await?,
    };
    let missing: Vec<&Order> = orders.iter().filter(|o| !inserted.contains(&o.order_id)).collect();
    if missing.is_empty() {
        return Ok(InsertReport { inserted: inserted.len(), hooked, ..Default::default() });
    }
    // The rows that kept them out, by key: the same order id is a redelivery, another a conflict.
    let stored: HashSet<Uuid> = sqlx::query_scalar(
        "select o.order_id from orders o
         join unnest($1::text[], $2::text[]) as m (sale_id, user_id) using (sale_id, user_id)",
    )
    .bind(missing.iter().map(|o| o.sale_id.as_str()).collect::<Vec<_>>())
    .bind(missing.iter().map(|o| o.user_id.as_str()).collect::<Vec<_>>())
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    let (already, conflicts): (Vec<&Order>, Vec<&Order>) =
        missing.into_iter().partition(|o| stored.contains(&o.order_id));
    Ok(InsertReport {
        inserted: inserted.len(),
        already_stored: already.len(),
        conflicts: conflicts.into_iter().cloned().collect(),
        hooked,
    })
}

/// A batch's columns, as the insert binds them.
struct Batch<'a> {
    ids: Vec<Uuid>,
    sales: Vec<&'a str>,
    users: Vec<&'a str>,
    times: Vec<OffsetDateTime>,
    pay_by: Vec<Option<OffsetDateTime>>,
    quantities: Vec<i32>,
}

/// The insert of a batch (`$1` to `$6`), its new rows as the CTE `new`; `filter` a condition on
/// the rows to insert.
fn insert_new(filter: &str) -> String {
    // A reservation (a sale with a payment window) is 'reserved' until its deadline; any other
    // order is 'confirmed', final at once.
    format!(
        "with new as (
             insert into orders (order_id, sale_id, user_id, created_at, pay_by, quantity, status)
             select o.*, case when o.pay_by is null then 'confirmed' else 'reserved' end
             from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::integer[])
                  as o (order_id, sale_id, user_id, created_at, pay_by, quantity)
             where {filter}
             on conflict do nothing
             returning order_id, sale_id, user_id, status, quantity, pay_by)"
    )
}

impl<'a> Batch<'a> {
    fn of(orders: &'a [Order]) -> Self {
        Self {
            ids: orders.iter().map(|o| o.order_id).collect(),
            sales: orders.iter().map(|o| o.sale_id.as_str()).collect(),
            users: orders.iter().map(|o| o.user_id.as_str()).collect(),
            times: orders.iter().map(|o| ms_to_time(o.created_at_ms)).collect(),
            pay_by: orders.iter().map(|o| o.pay_by_ms.map(ms_to_time)).collect(),
            quantities: orders.iter().map(|o| o.quantity as i32).collect(),
        }
    }

    fn bind<'q>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, Row, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, Row, sqlx::postgres::PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.sales)
            .bind(&self.users)
            .bind(&self.times)
            .bind(&self.pay_by)
            .bind(&self.quantities)
    }

    /// The orders alone, while no endpoint is registered: the new orders' ids; `None` (nothing
    /// stored) when one is. Its only cost over a bare insert is two probes of the endpoints
    /// table, each evaluated once.
    async fn insert_quiet(&self, pool: &PgPool) -> Result<Option<HashSet<Uuid>>, sqlx::Error> {
        let sql = format!(
            "{}
             select order_id, sale_id, null::bigint from new
             union all
             select null, null, null where {HOOKED}",
            insert_new(&format!("not {HOOKED}")),
        );
        let rows = self.bind(sqlx::query_as(&sql)).fetch_all(pool).await?;
        if rows.iter().any(|(order, _, _)| order.is_none()) {
            return Ok(None);
        }
        Ok(Some(rows.into_iter().filter_map(|(order, _, _)| order).collect()))
    }

    /// The orders and their events in one statement (no transaction): an offer's `draw.offered`
    /// (selected first: it precedes its order's), each new order's `order.created`, then
    /// `sale.sold_out` for the sales it sold out among `may_sell_out` (selected, so the calls cannot
    /// be planned away). The new orders' ids, and whether events are written (true when nothing was
    /// inserted: no new word).
    async fn insert_hooked(
        &self,
        pool: &PgPool,
        may_sell_out: Option<&HashSet<String>>,
    ) -> Result<(HashSet<Uuid>, bool), sqlx::Error> {
        let watched: Option<Vec<&str>> = may_sell_out.map(|sales| sales.iter().map(String::as_str).collect());
        let sql = format!(
            "{}
             {}
             union all
             select order_id, sale_id, {} from new
             union all
             {}",
            insert_new("true"),
            outbox::offered_events("new"),
            outbox::order_event("'order.created'", "", ""),
            outbox::sold_out_events("new", "$7"),
        );
        let rows = self.bind(sqlx::query_as(&sql)).bind(watched).fetch_all(pool).await?;
        let inserted: HashSet<Uuid> = rows.iter().filter_map(|(order, _, _)| *order).collect();
        let hooked = inserted.is_empty() || rows.iter().any(|(_, _, event)| event.is_some());
        Ok((inserted, hooked))
    }
}

/// A row of the batch insert: a new order's id and sale with its event's id; `(null, sale,
/// event)` for a `sale.sold_out`; `(null, null, null)` when the quiet insert found an endpoint.
type Row = (Option<Uuid>, Option<String>, Option<i64>);

/// The users with an order in the sale (one each: the primary key `(sale_id, user_id)`).
pub async fn order_users(pool: &PgPool, sale: &SaleId) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select user_id from orders where sale_id = $1").bind(sale.as_str()).fetch_all(pool).await
}

/// Units each buyer bought over the sales of `group` (`<group>.<name>`), released orders included,
/// for up to `limit` buyers after `after` in user id order (a page of a walk over every buyer).
pub async fn group_units_page(
    pool: &PgPool,
    group: &str,
    after: &str,
    limit: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "select user_id, sum(quantity)::bigint from orders
         where left(sale_id, length($1) + 1) = $1 || '.' and user_id > $2
         group by user_id order by user_id limit $3",
    )
    .bind(group)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Orders committed for a sale.
pub async fn count_orders(pool: &PgPool, sale: &SaleId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from orders where sale_id = $1").bind(sale.as_str()).fetch_one(pool).await
}

/// Orders committed in the sales of `group` other than `sale` that are not retired and still
/// hold their units (not given back: [`RETURNS_UNITS`]); the sales rows `<group>.*` name them,
/// each count a lookup by the orders' key.
pub async fn count_group_orders_besides(pool: &PgPool, group: &str, sale: &SaleId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "select count(*) from orders where not ({RETURNS_UNITS}) and sale_id in (
             select sale_id from sales
             where starts_with(sale_id, $1 || '.') and sale_id <> $2 and retired_at is null)"
    ))
    .bind(group)
    .bind(sale.as_str())
    .fetch_one(pool)
    .await
}

/// Orders committed per sale, for the given sales (a sale without orders is absent).
pub async fn count_orders_by_sale(pool: &PgPool, sales: &[SaleId]) -> Result<HashMap<String, i64>, sqlx::Error> {
    let ids: Vec<&str> = sales.iter().map(SaleId::as_str).collect();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("select sale_id, count(*) from orders where sale_id = any($1) group by sale_id")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().collect())
}

/// SQL true for an order that gives its units back to the stock: cancelled or expired, or refunded
/// with restock (an operator's refund, `crate::reservations::actions`). Its release is owed while
/// `restocked_at` is null (the partial index `orders_release_owed` has this predicate).
pub(crate) const RETURNS_UNITS: &str =
    "(status in ('cancelled', 'expired') or (status = 'refunded' and refund_restock))";

/// One order as Postgres holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOrder {
    pub order_id: Uuid,
    pub user_id: String,
    /// Redis time of the purchase.
    pub created_at: OffsetDateTime,
    pub standing: Standing,
    /// A reservation's deadline (a sale with a payment window).
    pub pay_by: Option<OffsetDateTime>,
    /// Units bought.
    pub quantity: u32,
    /// The order gives its units back ([`RETURNS_UNITS`]).
    pub returns_units: bool,
}

type OrderTuple = (Uuid, String, OffsetDateTime, String, Option<OffsetDateTime>, i32, bool);

/// The columns of an [`OrderTuple`].
fn order_columns() -> String {
    format!("order_id, user_id, created_at, status, pay_by, quantity, {RETURNS_UNITS}")
}

fn stored(
    (order_id, user_id, created_at, status, pay_by, quantity, returns_units): OrderTuple,
) -> Result<StoredOrder, sqlx::Error> {
    let standing = Standing::parse(&status).ok_or_else(|| sqlx::Error::Decode(format!("status {status:?}").into()))?;
    let quantity = quantity.max(1) as u32;
    Ok(StoredOrder { order_id, user_id, created_at, standing, pay_by, quantity, returns_units })
}

/// The user's order in the sale, if Postgres has it.
pub async fn order_of(pool: &PgPool, sale: &SaleId, user: &UserId) -> Result<Option<StoredOrder>, sqlx::Error> {
    let row: Option<OrderTuple> =
        sqlx::query_as(&format!("select {} from orders where sale_id = $1 and user_id = $2", order_columns()))
            .bind(sale.as_str())
            .bind(user.as_str())
            .fetch_optional(pool)
            .await?;
    row.map(stored).transpose()
}

/// The orders of the given users in the sale.
pub async fn orders_of_users(pool: &PgPool, sale: &SaleId, users: &[String]) -> Result<Vec<StoredOrder>, sqlx::Error> {
    let rows: Vec<OrderTuple> =
        sqlx::query_as(&format!("select {} from orders where sale_id = $1 and user_id = any($2)", order_columns()))
            .bind(sale.as_str())
            .bind(users)
            .fetch_all(pool)
            .await?;
    rows.into_iter().map(stored).collect()
}
