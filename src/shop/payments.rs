//! Payments: the shop's payment system tells seckill an order is paid (a signed event, checked
//! on the raw bytes before anything is parsed), and the payments to refund.

use secrecy::ExposeSecret;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{Error, Shop};
use crate::domain::SaleId;
use crate::reservations::signature;
use crate::reservations::store::{self, LatePayment, Settled};

/// Most late payments one answer lists.
pub const MAX_LISTED_LATE_PAYMENTS: i64 = 1000;

impl Shop {
    /// Whether payment events are taken at all (`SECKILL_PAYMENT_SECRET` is set).
    pub fn payments_enabled(&self) -> Result<(), Error> {
        self.settings.payment_secret.as_ref().map(|_| ()).ok_or(Error::PaymentsDisabled)
    }

    /// Checks a payment event's signature (`presented`, the `Seckill-Signature` value) on its
    /// raw `body`, now.
    pub fn verify_payment(&self, presented: Option<&str>, body: &[u8]) -> Result<(), Error> {
        let secret = self.settings.payment_secret.as_ref().ok_or(Error::PaymentsDisabled)?;
        let now = OffsetDateTime::now_utc().unix_timestamp();
        signature::verify(presented, body, secret.expose_secret().as_bytes(), now).map_err(Error::InvalidSignature)
    }

    /// Applies a verified payment event: a reservation paid before its deadline becomes `paid`;
    /// after it (or after a cancel) the payment is a late one, to refund. The same `event_id`
    /// again is answered as the first time and changes nothing.
    pub async fn pay(&self, event_id: &str, sale: &SaleId, order_id: Uuid) -> Result<Settled, Error> {
        Ok(self.reservations.pay(event_id, sale, order_id).await?)
    }

    /// The payments to refund (of `sale`, or of every sale), oldest first, at most
    /// [`MAX_LISTED_LATE_PAYMENTS`]; retired sales' too.
    pub async fn late_payments(&self, sale: Option<&SaleId>) -> Result<Vec<LatePayment>, Error> {
        Ok(store::late_payments(&self.pool, sale, MAX_LISTED_LATE_PAYMENTS).await?)
    }
}
