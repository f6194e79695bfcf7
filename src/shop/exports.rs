//! The order exports: a sale's orders, or a drop's (the orders of its sales `<drop>.<size>`), as
//! CSV or NDJSON, streamed a page at a time (`crate::exports`).

use futures::Stream;

use super::{Error, Shop};
use crate::domain::SaleId;
use crate::exports::{self, Format, STATUSES};

/// One export's lines, chunk by chunk; a failure mid-way ends it (the answer is cut short).
pub type Lines = std::pin::Pin<Box<dyn Stream<Item = Result<String, sqlx::Error>> + Send>>;

impl Shop {
    /// The orders of `sale` (retired or not: Postgres keeps them) whose status is one of
    /// `statuses` (all if none), in `format`. The first chunk is read before answering, so an
    /// unknown sale or an outage is an error, not an empty export.
    pub async fn export_sale(&self, sale: &SaleId, statuses: Vec<String>, format: Format) -> Result<Lines, Error> {
        self.existing_now(sale).await?;
        self.export(vec![sale.clone()], statuses, format).await
    }

    /// The orders of every sale of the drop `drop` (`<drop>.<size>`), sale after sale; a drop
    /// with no sale in Postgres is `unknown_drop`.
    pub async fn export_drop(&self, drop: &str, statuses: Vec<String>, format: Format) -> Result<Lines, Error> {
        SaleId::parse(drop)
            .ok()
            .filter(|id| id.group().is_none())
            .ok_or_else(|| Error::Invalid("a drop id is 1-64 characters of A-Z, a-z, 0-9, '_' or '-'".into()))?;
        let sales = exports::drop_sales(&self.pool, drop).await?;
        if sales.is_empty() {
            return Err(Error::UnknownDrop);
        }
        self.export(sales, statuses, format).await
    }

    async fn export(&self, sales: Vec<SaleId>, statuses: Vec<String>, format: Format) -> Result<Lines, Error> {
        if let Some(bad) = statuses.iter().find(|s| !STATUSES.contains(&s.as_str())) {
            return Err(Error::Invalid(format!("status {bad:?} is none of {}", STATUSES.join(", "))));
        }
        let permit = self.exports.clone().try_acquire_owned().map_err(|_| Error::TooManyExports)?;
        let mut lines: Lines = Box::pin(exports::stream(self.pool.clone(), sales, statuses, format, Some(permit)));
        let first = futures::TryStreamExt::try_next(&mut lines).await?;
        Ok(Box::pin(futures::StreamExt::chain(futures::stream::iter(first.map(Ok)), lines)))
    }
}
