//! What an [`Error`] says to a machine: its stable code (the JSON `error` field) and, for a
//! dependency's failure, its cause.

use super::Error;

impl Error {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_request",
            Self::UnknownSale => "unknown_sale",
            Self::UnknownDrop => "unknown_drop",
            Self::NotADrop | Self::TooManySizes => "not_a_drop",
            Self::DropInProgress(_) => "drop_in_progress",
            Self::DropSizeMissing(_) => "drop_size_missing",
            Self::DropSize => "drop_size",
            Self::DropStock { refusal, .. } => refusal.code(),
            Self::DropLine { .. } => "drop_line",
            Self::DrawOnly => "draw_only",
            Self::NotADraw => "not_a_draw",
            Self::EntriesNotOpen => "entries_not_open",
            Self::EntriesClosed => "entries_closed",
            Self::AlreadyEntered(_) => "already_entered",
            Self::NoEntry => "no_entry",
            Self::EntriesQueued { .. } => "entries_queued",
            Self::OrdersQueued { .. } => "orders_queued",
            Self::DrawNotRevealed => "draw_not_revealed",
            Self::AwardRefused(_) => "draw_award_refused",
            Self::SaleNotStarted => "sale_not_started",
            Self::SaleEnded => "sale_ended",
            Self::SalePaused => "sale_paused",
            Self::StockBelowZero { .. } => "stock_below_zero",
            Self::StockTooLarge { .. } => "stock_too_large",
            Self::Sharded => "sale_sharded",
            Self::DrawStockFixed => "draw_stock_fixed",
            Self::AlreadyPurchased(_) => "already_purchased",
            Self::SoldOut => "sold_out",
            Self::LimitReached { .. } => "limit_reached",
            Self::InsufficientStock { .. } => "insufficient_stock",
            Self::SaleInProgress => "sale_in_progress",
            Self::GroupLimitDiffers { .. } => "group_limit_differs",
            Self::GroupWindowDiffers { .. } => "group_window_differs",
            Self::SaleHasOrders { .. } | Self::GroupHasOrders { .. } => "sale_has_orders",
            Self::SaleStarted => "sale_started",
            Self::ShardsFixed { .. } => "shards_fixed",
            Self::SaleRetired | Self::SeedRetired | Self::RestockRetired => "sale_retired",
            Self::SaleRestoring => "sale_restoring",
            Self::NotRetirable(_) => "not_retirable",
            Self::RateLimited { .. } => "rate_limited",
            Self::InvalidSignature(_) => "invalid_signature",
            Self::UnknownOrder | Self::UnknownOrderId => "unknown_order",
            Self::NotPaid(_) => "not_paid",
            Self::UnknownEvent => "unknown_event",
            Self::UnknownEndpoint => "unknown_endpoint",
            Self::TooManyEndpoints { .. } => "too_many_endpoints",
            Self::NoOrder => "no_order",
            Self::NotReserved(_) => "not_reserved",
            Self::EventReused => "event_reused",
            Self::PaymentsDisabled => "payments_disabled",
            Self::NotAdmitted(_) => "not_admitted",
            Self::QueueNotOpen => "queue_not_open",
            Self::ChallengeRequired => "challenge_required",
            Self::ChallengeFailed(_) => "challenge_failed",
            Self::NoChallenge => "no_challenge",
            Self::NotInQueue => "not_in_queue",
            Self::NotQueued => "not_queued",
            Self::AdmissionDisabled => "admission_disabled",
            Self::NotDurable { .. } => "not_durable",
            Self::Unavailable(_) => "unavailable",
            Self::OutcomeUnknown { .. } => "outcome_unknown",
            Self::TooManyExports => "too_many_exports",
            Self::TooManyDrawRecords => "too_many_draw_records",
            Self::NotRecorded(_) => "not_recorded",
            Self::Internal(_) => "internal",
        }
    }

    /// The cause of a dependency's failure (`unavailable`, `outcome_unknown`, `internal`).
    pub fn cause(&self) -> Option<&anyhow::Error> {
        match self {
            Self::Unavailable(cause)
            | Self::OutcomeUnknown { cause, .. }
            | Self::NotRecorded(cause)
            | Self::Internal(cause) => Some(cause),
            _ => None,
        }
    }
}
