//! The buyer of a `POST /buy` under `SECKILL_AUTH=jwt`: the `Authorization: Bearer` token read
//! from the request, bounded, and handed to the [`Verifier`] (which knows nothing of HTTP).

use actix_web::HttpRequest;
use actix_web::http::header;

use crate::domain::UserId;
use crate::http::error::ApiError;
use crate::shop::Verifier;

/// The longest `Authorization` header looked at; a longer one is refused unparsed.
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;

/// The buyer the request's bearer token names: 401 `unauthenticated` without a well-formed
/// `Authorization: Bearer <token>` header, 401 `invalid_token` for a header over
/// [`MAX_AUTHORIZATION_BYTES`] or a token the verifier refuses. Touches no state.
pub fn buyer(req: &HttpRequest, verifier: &Verifier) -> Result<UserId, ApiError> {
    let token = bearer_token(req)?;
    verifier.verify(token).map_err(|refused| ApiError::InvalidToken(refused.0))
}

/// The token of the one `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer_token(req: &HttpRequest) -> Result<&str, ApiError> {
    let mut values = req.headers().get_all(header::AUTHORIZATION);
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(ApiError::Unauthenticated);
    };
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Err(ApiError::InvalidToken("the Authorization header is too long"));
    }
    let value = value.to_str().map_err(|_| ApiError::Unauthenticated)?;
    let (scheme, token) = value.split_once(' ').ok_or(ApiError::Unauthenticated)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err(ApiError::Unauthenticated);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    fn token_of(value: &str) -> Result<String, &'static str> {
        let req = TestRequest::default().insert_header((header::AUTHORIZATION, value)).to_http_request();
        bearer_token(&req).map(str::to_owned).map_err(|e| e.code())
    }

    #[test]
    fn only_a_bearer_header_within_bounds_yields_a_token() {
        assert_eq!(token_of("Bearer abc.def.ghi"), Ok("abc.def.ghi".into()));
        assert_eq!(token_of("bearer abc"), Ok("abc".into()));
        for malformed in ["Basic YWxhZGRpbjpvcGVu", "Bearer", "Bearer ", "Bearer a b", "abc"] {
            assert_eq!(token_of(malformed), Err("unauthenticated"), "{malformed:?}");
        }
        let long = format!("Bearer {}", "a".repeat(MAX_AUTHORIZATION_BYTES));
        assert_eq!(token_of(&long), Err("invalid_token"));
        let none = TestRequest::default().to_http_request();
        assert_eq!(bearer_token(&none).map_err(|e| e.code()), Err("unauthenticated"));
    }
}
