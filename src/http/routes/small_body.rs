//! [`SmallBody`]: a request body read whole, at most [`MAX_BODY_BYTES`], refused as JSON like
//! every other bad input (actix's `Bytes` extractor answers a body over its 256 KiB default with
//! a plain-text 413). The bodies of the operators' switches and order actions, which may be empty.

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures::future::LocalBoxFuture;

use super::MAX_BODY_BYTES;
use crate::http::error::ApiError;

/// The request's body, at most [`MAX_BODY_BYTES`].
pub struct SmallBody(pub web::Bytes);

impl FromRequest for SmallBody {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let payload = web::Payload::from_request(req, payload).into_inner();
        Box::pin(async move {
            let payload = payload.map_err(|e| ApiError::InvalidRequest(format!("unreadable request body: {e}")))?;
            read_small(payload).await.map(SmallBody)
        })
    }
}

/// `payload` read whole: at most [`MAX_BODY_BYTES`] (413 beyond), else a 400 for a body that
/// could not be read. For a handler that checks the request before it reads the body.
pub async fn read_small(payload: web::Payload) -> Result<web::Bytes, ApiError> {
    payload
        .to_bytes_limited(MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(MAX_BODY_BYTES))?
        .map_err(|e| ApiError::InvalidRequest(format!("unreadable request body: {e}")))
}
