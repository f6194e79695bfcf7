//! How actix-web's refusal of a JSON body becomes an [`ApiError`] (the use cases' errors are
//! wrapped whole: `ApiError::Shop`).

use super::ApiError;

impl From<actix_web::error::JsonPayloadError> for ApiError {
    fn from(err: actix_web::error::JsonPayloadError) -> Self {
        use actix_web::error::JsonPayloadError as E;
        match err {
            E::OverflowKnownLength { limit, .. } | E::Overflow { limit } => Self::PayloadTooLarge(limit),
            E::ContentType => Self::UnsupportedMediaType,
            E::Deserialize(e) => Self::InvalidRequest(format!("invalid JSON body: {e}")),
            other => Self::InvalidRequest(format!("unreadable request body: {other}")),
        }
    }
}
