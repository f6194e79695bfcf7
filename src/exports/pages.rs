//! The export's stream: page after page of one sale's orders in key order, the sales one after
//! the other. Each page is one short query (a statement timeout bounds it, not the whole export),
//! and the next is read only when the answer's body asks for more, so a slow reader holds one
//! page in memory and no Postgres connection.

use futures::Stream;
use sqlx::PgPool;
use tokio::sync::OwnedSemaphorePermit;

use super::{Format, OrderLine};
use crate::domain::SaleId;

/// Orders read per query (and written per chunk of the answer).
pub const PAGE_ROWS: i64 = 1000;

/// The sales of the drop (the group) `drop`, `<drop>.<size>`, by id.
pub async fn drop_sales(pool: &PgPool, drop: &str) -> Result<Vec<SaleId>, sqlx::Error> {
    let ids: Vec<String> =
        sqlx::query_scalar("select sale_id from sales where starts_with(sale_id, $1 || '.') order by sale_id")
            .bind(drop)
            .fetch_all(pool)
            .await?;
    Ok(ids.into_iter().filter_map(|id| SaleId::parse(&id).ok()).collect())
}

struct Cursor {
    pool: PgPool,
    format: Format,
    sales: std::vec::IntoIter<SaleId>,
    sale: Option<SaleId>,
    /// The last user of the sale written (the key's second part).
    after: Option<String>,
    statuses: Vec<String>,
    header: bool,
    _permit: Option<OwnedSemaphorePermit>,
}

/// The orders of `sales` whose status is in `statuses` (every status if empty), in `format`, as
/// chunks of about a page each. `permit` is held until the stream is dropped.
pub fn stream(
    pool: PgPool,
    sales: Vec<SaleId>,
    statuses: Vec<String>,
    format: Format,
    permit: Option<OwnedSemaphorePermit>,
) -> impl Stream<Item = Result<String, sqlx::Error>> + Send + 'static {
    let mut sales = sales.into_iter();
    let sale = sales.next();
    let cursor = Cursor { pool, format, sales, sale, after: None, statuses, header: false, _permit: permit };
    futures::stream::try_unfold(cursor, |mut cursor| async move {
        let mut out = String::new();
        if !cursor.header {
            cursor.header = true;
            out.push_str(cursor.format.header());
        }
        // One page with orders per chunk: the sales without any (of those statuses) are skipped.
        while let Some(sale) = cursor.sale.clone() {
            let page = page(&cursor.pool, &sale, cursor.after.as_deref(), &cursor.statuses).await?;
            for order in &page {
                cursor.format.write(order, &mut out);
            }
            if (page.len() as i64) < PAGE_ROWS {
                cursor.sale = cursor.sales.next();
                cursor.after = None;
            } else {
                cursor.after = page.last().map(|o| o.user_id.clone());
            }
            if !page.is_empty() {
                break;
            }
        }
        Ok(if out.is_empty() { None } else { Some((out, cursor)) })
    })
}

async fn page(
    pool: &PgPool,
    sale: &SaleId,
    after: Option<&str>,
    statuses: &[String],
) -> Result<Vec<OrderLine>, sqlx::Error> {
    sqlx::query_as(
        "select order_id, sale_id, user_id, quantity, status, created_at, persisted_at, pay_by, resolved_at,
                resolved_by, restocked_at
         from orders
         where sale_id = $1 and ($2::text is null or user_id > $2)
           and (cardinality($3::text[]) = 0 or status = any($3))
         order by user_id
         limit $4",
    )
    .bind(sale.as_str())
    .bind(after)
    .bind(statuses)
    .bind(PAGE_ROWS)
    .fetch_all(pool)
    .await
}
