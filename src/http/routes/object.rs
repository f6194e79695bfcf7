//! A JSON body is an object: [`Object`] reads a struct only from a JSON object, never from an
//! array of its fields (which serde's derived `Deserialize` accepts too: `["s", "u"]` would be a
//! purchase). Checked in the one pass that reads the body, with no second parse.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// A `T` that was written as a JSON object: any other JSON value (an array, a string, a number,
/// `null`) is refused as `invalid type: ..., expected a JSON object`.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OnlyMaps(PhantomData)).map(Object)
    }
}

/// Hands the object's entries to `T`'s own `Deserialize`, which then checks its fields as usual.
struct OnlyMaps<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for OnlyMaps<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

/// The `T` of an optional JSON object body: an empty body or `null` (the OpenAPI document's "no
/// body" as JSON) is `T::default()`; anything else must be a JSON object (400 `invalid_request`).
pub fn optional<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, crate::http::error::ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let read: Option<Object<T>> = serde_json::from_slice(body)
        .map_err(|err| crate::http::error::ApiError::InvalidRequest(format!("body: {err}")))?;
    Ok(read.map(|Object(t)| t).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::Object;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: String,
        #[serde(default)]
        b: Option<u32>,
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        let read = |json: &str| serde_json::from_str::<Object<Pair>>(json).map(|o| o.0);
        assert_eq!(read(r#" {"a": "x", "b": 2} "#).unwrap(), Pair { a: "x".into(), b: Some(2) });
        assert_eq!(read(r#"{"a": "x"}"#).unwrap(), Pair { a: "x".into(), b: None });
        assert!(read(r#"{"a": "x", "c": 1}"#).unwrap_err().to_string().contains("unknown field"));
        assert!(serde_json::from_str::<Pair>(r#"["x", 2]"#).is_ok(), "what serde alone accepts");
        for refused in [r#"["x", 2]"#, r#"["x"]"#, "[]", r#""x""#, "2", "null", "true"] {
            let error = read(refused).unwrap_err().to_string();
            assert!(error.contains("expected a JSON object"), "{refused}: {error}");
        }
    }
}
