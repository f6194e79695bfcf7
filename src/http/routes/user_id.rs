//! The buyer's `user_id` as the OpenAPI document describes it, in the body of `POST /buy` and in
//! the query of the order and queue routes: one pattern ([`USER_ID_PATTERN`]), one [`schema`].

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};

/// The characters a user id holds nowhere: control, format and default-ignorable ones (those of
/// the Basic Multilingual Plane; `domain::UserId::parse` refuses the few beyond it too).
macro_rules! invisible {
    () => {
        "\\u0000-\\u001F\\u007F-\\u009F\\u00AD\\u034F\\u0600-\\u0605\\u061C\\u06DD\\u070F\\u0890-\\u0891\\u08E2\
        \\u115F-\\u1160\\u17B4-\\u17B5\\u180B-\\u180F\\u200B-\\u200F\\u202A-\\u202E\\u2060-\\u206F\\u3164\
        \\uFE00-\\uFE0F\\uFEFF\\uFFA0\\uFFF0-\\uFFFB"
    };
}

/// The whitespace a user id neither starts nor ends with.
macro_rules! space {
    () => {
        "\\u0020\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000"
    };
}

/// A user id's pattern: no invisible character, no whitespace at either end. (Its NFC form, which
/// the server requires too, a pattern cannot say.)
pub const USER_ID_PATTERN: &str =
    concat!("^[^", invisible!(), space!(), "]([^", invisible!(), "]*[^", invisible!(), space!(), "])?$");

/// A `user_id`'s schema: a string of 1-128 characters matching [`USER_ID_PATTERN`].
pub fn schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(128))
        .pattern(Some(USER_ID_PATTERN))
        .build()
}

/// [`schema`] for a query's `#[param(value_type = Option<UserIdParam>, inline)]`: unlike
/// `#[param(schema_with = …)]`, which drops it, that keeps the field's doc comment as the
/// parameter's description.
pub struct UserIdParam;

impl utoipa::PartialSchema for UserIdParam {
    fn schema() -> RefOr<Schema> {
        schema().into()
    }
}

impl utoipa::ToSchema for UserIdParam {}
