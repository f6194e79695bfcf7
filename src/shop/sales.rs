//! Reading a sale: its public snapshot (`GET /sales/{id}`) and the check the waiting-room routes
//! make before they touch its line.

use std::sync::Arc;

use super::{Error, Shop};
use crate::domain::SaleId;
use crate::purchase::board::Snapshot;

impl Shop {
    /// The sale's public snapshot, this instance's (at most 200 ms old; read again at once when
    /// the sale sells out here): under a polling crowd Redis sees a bounded number of reads per
    /// instance and second whatever the request rate. A retired sale is `sale_retired`.
    pub async fn sale(&self, sale: &SaleId) -> Result<Arc<Snapshot>, Error> {
        if self.retired.known(sale) {
            return Err(Error::SaleRetired);
        }
        match self.board.snapshot(sale).await? {
            Some(snapshot) => Ok(snapshot),
            None if self.retired.check(sale).await => Err(Error::SaleRetired),
            None => Err(Error::UnknownSale),
        }
    }

    /// The sale, once this instance's snapshot of it (no Redis call for a made-up id) says it
    /// has a waiting room.
    pub(super) async fn queued_sale(&self, sale: &SaleId) -> Result<Arc<Snapshot>, Error> {
        let snapshot = self.sale(sale).await?;
        match snapshot.state.queue {
            Some(_) => Ok(snapshot),
            None => Err(Error::NotQueued),
        }
    }
}
