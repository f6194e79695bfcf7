//! The `orders` table: the worker's idempotent batch insert, and the reads of reconciliation and
//! of a sale's state.

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use super::ms_to_time;
use super::outbox;
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
    /// The insert wrote the new orders' events: a webhook endpoint is registered (false when
    /// nothing was inserted).
    pub hooked: bool,
}

/// Inserts a batch of orders in one statement (idempotent: redeliveries are no-ops), then sorts
/// the entries that were not inserted into redeliveries (their (sale, user) row holds their order
/// id) and conflicts (it holds another). When a webhook endpoint is registered, the same statement
/// writes each new order's `order.created`, and the `sale.sold_out` of a sale it sold out, among
/// `may_sell_out` (`None`: any; the check sums the sale's orders, so the worker names only the
/// sales whose Redis stock is gone); without one, it writes neither and the check is not made.
pub async fn insert_orders(
    pool: &PgPool,
    orders: &[Order],
    may_sell_out: Option<&HashSet<String>>,
) -> Result<InsertReport, sqlx::Error> {
    if orders.is_empty() {
        return Ok(InsertReport::default());
    }
    let inserted = insert(pool, orders, may_sell_out).await?;
    let hooked = inserted.iter().any(|(_, _, event)| event.is_some());
    let inserted: HashSet<Uuid> = inserted.into_iter().filter_map(|(order, _, _)| order).collect();
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

/// The batch insert itself, with each new order's event and the sales it sold out's, in one
/// statement (no transaction: nothing to begin nor commit when no endpoint is registered). Rows:
/// each new order's id and sale with its event's id, then `(null, sale, event)` per sale sold
/// out (selected, so the calls cannot be planned away).
async fn insert(
    pool: &PgPool,
    orders: &[Order],
    may_sell_out: Option<&HashSet<String>>,
) -> Result<Vec<(Option<Uuid>, String, Option<i64>)>, sqlx::Error> {
    let ids: Vec<Uuid> = orders.iter().map(|o| o.order_id).collect();
    let sales: Vec<&str> = orders.iter().map(|o| o.sale_id.as_str()).collect();
    let users: Vec<&str> = orders.iter().map(|o| o.user_id.as_str()).collect();
    let times: Vec<OffsetDateTime> = orders.iter().map(|o| ms_to_time(o.created_at_ms)).collect();
    // A reservation (a sale with a payment window) is 'reserved' until its deadline; any other
    // order is 'confirmed', final at once.
    let pay_by: Vec<Option<OffsetDateTime>> = orders.iter().map(|o| o.pay_by_ms.map(ms_to_time)).collect();
    let quantities: Vec<i32> = orders.iter().map(|o| o.quantity as i32).collect();
    let watched: Option<Vec<&str>> = may_sell_out.map(|sales| sales.iter().map(String::as_str).collect());
    let event = outbox::order_event("'order.created'", "", "");
    let sold_out = outbox::sold_out_events("new", "$7");
    sqlx::query_as(&format!(
        "with new as (
             insert into orders (order_id, sale_id, user_id, created_at, pay_by, quantity, status)
             select o.*, case when o.pay_by is null then 'confirmed' else 'reserved' end
             from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::integer[])
                  as o (order_id, sale_id, user_id, created_at, pay_by, quantity)
             on conflict do nothing
             returning order_id, sale_id, user_id, status, quantity, pay_by)
         select order_id, sale_id, {event} from new
         union all
         {sold_out}"
    ))
    .bind(&ids)
    .bind(&sales)
    .bind(&users)
    .bind(&times)
    .bind(&pay_by)
    .bind(&quantities)
    .bind(watched)
    .fetch_all(pool)
    .await
}

/// The users with an order in the sale (one each: the primary key `(sale_id, user_id)`).
pub async fn order_users(pool: &PgPool, sale: &SaleId) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select user_id from orders where sale_id = $1").bind(sale.as_str()).fetch_all(pool).await
}

/// Orders committed for a sale.
pub async fn count_orders(pool: &PgPool, sale: &SaleId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from orders where sale_id = $1").bind(sale.as_str()).fetch_one(pool).await
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
}

type OrderTuple = (Uuid, String, OffsetDateTime, String, Option<OffsetDateTime>, i32);

fn stored((order_id, user_id, created_at, status, pay_by, quantity): OrderTuple) -> Result<StoredOrder, sqlx::Error> {
    let standing = Standing::parse(&status).ok_or_else(|| sqlx::Error::Decode(format!("status {status:?}").into()))?;
    Ok(StoredOrder { order_id, user_id, created_at, standing, pay_by, quantity: quantity.max(1) as u32 })
}

/// The user's order in the sale, if Postgres has it.
pub async fn order_of(pool: &PgPool, sale: &SaleId, user: &UserId) -> Result<Option<StoredOrder>, sqlx::Error> {
    let row: Option<OrderTuple> = sqlx::query_as(
        "select order_id, user_id, created_at, status, pay_by, quantity from orders \
         where sale_id = $1 and user_id = $2",
    )
    .bind(sale.as_str())
    .bind(user.as_str())
    .fetch_optional(pool)
    .await?;
    row.map(stored).transpose()
}

/// The orders of the given users in the sale.
pub async fn orders_of_users(pool: &PgPool, sale: &SaleId, users: &[String]) -> Result<Vec<StoredOrder>, sqlx::Error> {
    let rows: Vec<OrderTuple> = sqlx::query_as(
        "select order_id, user_id, created_at, status, pay_by, quantity from orders \
         where sale_id = $1 and user_id = any($2)",
    )
    .bind(sale.as_str())
    .bind(users)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(stored).collect()
}
