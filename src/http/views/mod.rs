//! The answers' types that come from the layers below, as the HTTP API shows them: each is the
//! JSON shape and the OpenAPI schema (`utoipa::ToSchema`) of one lower type, built `From` it, so
//! the layers below know nothing of the document.

/// `impl From<$lower> for $view`, every field moved as it is. The lower value is destructured whole,
/// so a field added below fails to compile here until the view says whether to show it.
macro_rules! moved_from {
    ($lower:path => $view:ident { $($field:ident),+ $(,)? }) => {
        impl From<$lower> for $view {
            fn from(lower: $lower) -> Self {
                let $lower { $($field),+ } = lower;
                Self { $($field),+ }
            }
        }
    };
}

mod orders;
mod reconcile;
mod retire;
mod webhooks;
mod worker;

pub use self::orders::{HeldOrder, LatePayment, OrderStatus};
pub use self::reconcile::ReconcileReport;
pub use self::retire::{Refusal, RetireReport};
pub use self::webhooks::EndpointView;
pub use self::worker::{StreamProblem, StreamState, WorkerReport};
