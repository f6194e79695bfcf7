//! Who calls an admin route: [`Viewer`] (any admin credential) and [`Operator`] (one with the
//! role `operator`), extracted before the body from `Authorization: Bearer <token>`: 403
//! `admin_disabled` when no credential is configured, 401 `unauthorized` without a valid one,
//! 403 `forbidden_role` for a viewer on an operator's route (docs/operators.md).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};

use super::AppState;
use super::error::ApiError;
use crate::shop::{Role, Signed};

/// Any admin credential: reads, the live page's data, the exports.
#[derive(Debug)]
pub struct Viewer(pub Signed);

/// An admin credential with the role `operator`: every write.
#[derive(Debug)]
pub struct Operator(pub Signed);

impl Operator {
    /// The audit's actor: the operator's name, or `admin-token`.
    pub fn actor(&self) -> Option<&str> {
        Some(self.0.actor())
    }
}

/// Who the request's bearer token signs in.
fn signed_in(req: &HttpRequest) -> Result<Signed, ApiError> {
    let Some(state) = req.app_data::<web::Data<AppState>>() else {
        return Err(ApiError::AdminDisabled);
    };
    if state.operators.is_empty() {
        return Err(ApiError::AdminDisabled);
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    state.operators.identify(presented).ok_or(ApiError::Unauthorized)
}

impl FromRequest for Viewer {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(signed_in(req).map(Viewer))
    }
}

impl FromRequest for Operator {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(signed_in(req).and_then(|signed| match signed.role {
            Role::Operator => Ok(Operator(signed)),
            Role::Viewer => {
                Err(ApiError::ForbiddenRole { name: signed.actor().to_owned(), role: signed.role.as_str() })
            }
        }))
    }
}
