//! Who is buying ([`Buyer`]): under `SECKILL_AUTH=jwt` the bearer token's buyer, verified from
//! the token alone before any limiter; else the buyer the request names (a body's or a query's
//! `user_id`).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use super::AppState;
use super::bearer;
use super::error::ApiError;
use crate::domain::UserId;

/// The request's credentials, checked: the token's buyer (`Some`) under `SECKILL_AUTH=jwt`, or
/// `None` when the request names its buyer. The verdict waits until the handler asks
/// ([`Buyer::named`]), so a request whose body is malformed is answered 400 first.
pub struct Buyer(Result<Option<UserId>, ApiError>);

impl FromRequest for Buyer {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let verifier = req.app_data::<web::Data<AppState>>().and_then(|state| state.verifier.clone());
        ready(Ok(Self(verifier.map(|verifier| bearer::buyer(req, &verifier)).transpose())))
    }
}

impl Buyer {
    /// The buyer: the token's (a `claimed` user other than it is refused with 403
    /// `user_mismatch`), else the `claimed` one, which is then required.
    pub fn named(self, claimed: Option<String>) -> Result<UserId, ApiError> {
        match self.0? {
            Some(buyer) => {
                if claimed.is_some_and(|claimed| claimed != buyer.as_str()) {
                    return Err(ApiError::UserMismatch);
                }
                Ok(buyer)
            }
            None => UserId::parse(&claimed.ok_or_else(|| ApiError::InvalidRequest("user_id is required".into()))?)
                .map_err(ApiError::InvalidRequest),
        }
    }
}
