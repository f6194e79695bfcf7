//! Malformed requests: each gets a 4xx with the JSON error body, and none changes any state;
//! the hostile edge cases (slow bodies, large heads, log floods) in `edge`, connect floods in
//! `flood`; secrets in `secrets`.

mod edge;
mod flood;
mod secrets;

use redis::AsyncCommands;
use reqwest::Method;

use crate::common::{ADMIN_TOKEN, assert_error, new_sale_id};
use crate::harness::Deployment;

/// One malformed request and the answer it must get.
struct Case {
    name: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn json_headers() -> Vec<(&'static str, String)> {
    vec![("content-type", "application/json".into())]
}

/// `POST /buy` with a JSON content type and this raw body.
fn buy(name: &'static str, body: impl Into<Vec<u8>>, status: u16, code: &'static str) -> Case {
    Case { name, method: Method::POST, path: "/buy".into(), headers: json_headers(), body: body.into(), status, code }
}

/// An admin request with this Authorization header (if any) and JSON body.
fn admin(
    name: &'static str,
    method: Method,
    path: String,
    authorization: Option<String>,
    body: &str,
    status: u16,
    code: &'static str,
) -> Case {
    let mut headers = json_headers();
    headers.extend(authorization.map(|a| ("authorization", a)));
    Case { name, method, path, headers, body: body.into(), status, code }
}

fn cases(sale: &str) -> Vec<Case> {
    // A well-formed purchase of the seeded sale, for cases that break only the envelope: if one
    // of them got through, a purchase would show up in the state snapshot.
    let valid = format!(r#"{{"sale_id":"{sale}","user_id":"mallory"}}"#);
    let with_user = |user: &str| format!(r#"{{"sale_id":"{sale}","user_id":"{user}"}}"#);
    let with_sale = |id: &str| format!(r#"{{"sale_id":"{id}","user_id":"mallory"}}"#);
    let bearer = |token: &str| Some(format!("Bearer {token}"));
    let good = bearer(ADMIN_TOKEN);
    let (last_char_off, prefix) =
        (format!("{}m", &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]), &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]);
    let other_sale = format!("/admin/sales/{}", new_sale_id());
    let seed = r#"{"stock":5}"#;
    let put = Method::PUT;
    let mut nested = "[".repeat(1_000);
    nested.push_str(&"]".repeat(1_000));

    vec![
        // Broken and truncated JSON.
        buy("empty body", "", 400, "invalid_request"),
        buy("not json", "buy me", 400, "invalid_request"),
        buy("lone brace", "{", 400, "invalid_request"),
        buy("truncated object", format!(r#"{{"sale_id":"{sale}","user_id":"#), 400, "invalid_request"),
        buy("truncated string", format!(r#"{{"sale_id":"{sale}","user_id":"mall"#), 400, "invalid_request"),
        buy("trailing garbage", format!("{valid} x"), 400, "invalid_request"),
        buy("two objects", format!("{valid}{valid}"), 400, "invalid_request"),
        buy("single quotes", format!("{{'sale_id':'{sale}','user_id':'mallory'}}"), 400, "invalid_request"),
        buy("invalid utf-8", b"{\"sale_id\":\"\xff\xfe\",\"user_id\":\"m\"}".to_vec(), 400, "invalid_request"),
        buy("deep nesting", nested, 400, "invalid_request"),
        buy("huge body", with_user(&"x".repeat(8 * 1024)), 413, "payload_too_large"),
        buy("megabyte body", vec![b' '; 1024 * 1024], 413, "payload_too_large"),
        // Wrong shapes and types.
        buy("null", "null", 400, "invalid_request"),
        buy("array", "[]", 400, "invalid_request"),
        buy("string", r#""buy""#, 400, "invalid_request"),
        buy("number", "42", 400, "invalid_request"),
        buy("empty object", "{}", 400, "invalid_request"),
        buy("missing user", format!(r#"{{"sale_id":"{sale}"}}"#), 400, "invalid_request"),
        buy("missing sale", r#"{"user_id":"mallory"}"#, 400, "invalid_request"),
        buy("number user", format!(r#"{{"sale_id":"{sale}","user_id":42}}"#), 400, "invalid_request"),
        buy("null user", format!(r#"{{"sale_id":"{sale}","user_id":null}}"#), 400, "invalid_request"),
        buy("object user", format!(r#"{{"sale_id":"{sale}","user_id":{{"id":1}}}}"#), 400, "invalid_request"),
        buy("array sale", format!(r#"{{"sale_id":["{sale}"],"user_id":"m"}}"#), 400, "invalid_request"),
        buy("boolean sale", r#"{"sale_id":true,"user_id":"m"}"#, 400, "invalid_request"),
        buy("unknown field", format!(r#"{{"sale_id":"{sale}","user_id":"m","qty":2}}"#), 400, "invalid_request"),
        buy(
            "duplicate field",
            format!(r#"{{"sale_id":"{sale}","user_id":"m","user_id":"n"}}"#),
            400,
            "invalid_request",
        ),
        // Ids out of bounds, with braces or control characters.
        buy("empty user", with_user(""), 400, "invalid_request"),
        buy("user too long", with_user(&"u".repeat(129)), 400, "invalid_request"),
        buy("user nul", with_user(r"a\u0000b"), 400, "invalid_request"),
        buy("user bell", with_user(r"a\u0007b"), 400, "invalid_request"),
        buy("user newline", with_user(r"a\nb"), 400, "invalid_request"),
        buy("user tab", with_user(r"a\tb"), 400, "invalid_request"),
        buy("user delete", with_user(r"a\u007fb"), 400, "invalid_request"),
        // Look-alikes of a real buyer (issue 25): invisible format characters, edge whitespace.
        buy("user zero-width space", with_user(r"mallory\u200b"), 400, "invalid_request"),
        buy("user trailing space", with_user("mallory "), 400, "invalid_request"),
        buy("user leading no-break space", with_user(r"\u00a0mallory"), 400, "invalid_request"),
        buy("user RTL override", with_user(r"\u202eyrollam"), 400, "invalid_request"),
        buy("user word joiner", with_user(r"mal\u2060lory"), 400, "invalid_request"),
        Case {
            method: Method::GET,
            path: format!("/sales/{sale}/order?user_id=mallory%E2%80%8B"),
            ..buy("order of a zero-width look-alike", "", 400, "invalid_request")
        },
        buy("empty sale", with_sale(""), 400, "invalid_request"),
        buy("sale too long", with_sale(&"s".repeat(65)), 400, "invalid_request"),
        buy("sale with braces", with_sale("{sale}x"), 400, "invalid_request"),
        buy("sale hash tag injection", with_sale(&format!("x}}:{{{sale}")), 400, "invalid_request"),
        buy("sale with colon", with_sale("a:b"), 400, "invalid_request"),
        buy("sale with space", with_sale("a b"), 400, "invalid_request"),
        buy("sale with wildcard", with_sale("sale-*"), 400, "invalid_request"),
        buy("sale non-ascii", with_sale("sal\u{e9}"), 400, "invalid_request"),
        // Wrong content type, method or route.
        Case { headers: vec![], ..buy("no content type", valid.clone(), 415, "unsupported_media_type") },
        Case {
            headers: vec![("content-type", "text/plain".into())],
            ..buy("text/plain", valid.clone(), 415, "unsupported_media_type")
        },
        Case {
            headers: vec![("content-type", "application/x-www-form-urlencoded".into())],
            ..buy("form", format!("sale_id={sale}&user_id=mallory"), 415, "unsupported_media_type")
        },
        Case { method: Method::GET, ..buy("GET /buy", "", 405, "method_not_allowed") },
        Case { method: Method::PUT, ..buy("PUT /buy", valid.clone(), 405, "method_not_allowed") },
        Case { method: Method::DELETE, ..buy("DELETE /buy", "", 405, "method_not_allowed") },
        Case { path: "/buy/now".into(), ..buy("unknown route", valid.clone(), 404, "not_found") },
        // Admin calls without the right token: a new sale would appear if one got through.
        admin("no token", put.clone(), other_sale.clone(), None, seed, 401, "unauthorized"),
        admin("empty bearer", put.clone(), other_sale.clone(), bearer(""), seed, 401, "unauthorized"),
        admin("wrong token", put.clone(), other_sale.clone(), bearer("letmein"), seed, 401, "unauthorized"),
        admin("last char off", put.clone(), other_sale.clone(), bearer(&last_char_off), seed, 401, "unauthorized"),
        admin("token prefix", put.clone(), other_sale.clone(), bearer(prefix), seed, 401, "unauthorized"),
        admin(
            "token plus one",
            put.clone(),
            other_sale.clone(),
            bearer(&format!("{ADMIN_TOKEN}x")),
            seed,
            401,
            "unauthorized",
        ),
        admin(
            "upper case token",
            put.clone(),
            other_sale.clone(),
            bearer(&ADMIN_TOKEN.to_uppercase()),
            seed,
            401,
            "unauthorized",
        ),
        admin(
            "basic scheme",
            put.clone(),
            other_sale.clone(),
            Some(format!("Basic {ADMIN_TOKEN}")),
            seed,
            401,
            "unauthorized",
        ),
        admin("bare token", put.clone(), other_sale.clone(), Some(ADMIN_TOKEN.into()), seed, 401, "unauthorized"),
        admin("token on status", Method::GET, format!("/admin/sales/{sale}"), bearer("x"), "", 401, "unauthorized"),
        // Admin calls with the token but bad stock, timestamps or ids.
        admin(
            "negative stock",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":-1}"#,
            400,
            "invalid_request",
        ),
        admin(
            "absurd stock",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":10000000000}"#,
            400,
            "invalid_request",
        ),
        admin(
            "stock overflow",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":1e30}"#,
            400,
            "invalid_request",
        ),
        admin(
            "fractional stock",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":1.5}"#,
            400,
            "invalid_request",
        ),
        admin(
            "string stock",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":"5"}"#,
            400,
            "invalid_request",
        ),
        admin("missing stock", put.clone(), other_sale.clone(), good.clone(), "{}", 400, "invalid_request"),
        admin(
            "unknown seed field",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"price":1}"#,
            400,
            "invalid_request",
        ),
        admin(
            "word timestamp",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"starts_at":"yesterday"}"#,
            400,
            "invalid_request",
        ),
        admin(
            "month 13",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"starts_at":"2026-13-01T00:00:00Z"}"#,
            400,
            "invalid_request",
        ),
        admin(
            "timestamp without zone",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"ends_at":"2030-01-01T00:00:00"}"#,
            400,
            "invalid_request",
        ),
        admin(
            "numeric timestamp",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"starts_at":1700000000}"#,
            400,
            "invalid_request",
        ),
        admin(
            "ends before it starts",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"starts_at":"2030-01-02T00:00:00Z","ends_at":"2030-01-01T00:00:00Z"}"#,
            400,
            "invalid_request",
        ),
        admin(
            "ends in the past",
            put.clone(),
            other_sale.clone(),
            good.clone(),
            r#"{"stock":5,"ends_at":"1900-01-01T00:00:00Z"}"#,
            400,
            "invalid_request",
        ),
        admin("braces in path", put.clone(), "/admin/sales/%7Bx%7D".into(), good.clone(), seed, 400, "invalid_request"),
        admin(
            "long id in path",
            put.clone(),
            format!("/admin/sales/{}", "s".repeat(65)),
            good.clone(),
            seed,
            400,
            "invalid_request",
        ),
        admin("seed body not json", put.clone(), other_sale.clone(), good.clone(), "stock=5", 400, "invalid_request"),
        admin("PATCH a sale", Method::PATCH, other_sale.clone(), good.clone(), "", 405, "method_not_allowed"),
        admin("retire an unknown sale", Method::DELETE, other_sale.clone(), good.clone(), "", 404, "unknown_sale"),
        Case {
            headers: vec![("authorization", format!("Bearer {ADMIN_TOKEN}"))],
            ..admin("seed without content type", put, other_sale, None, seed, 415, "unsupported_media_type")
        },
    ]
}

/// Every key of the deployment with its contents, and the Postgres rows: what must not change.
async fn snapshot(deployment: &Deployment) -> Vec<String> {
    let mut redis = deployment.redis.clone();
    let mut keys: Vec<String> = redis.keys(format!("{}*", deployment.key_prefix)).await.unwrap();
    keys.sort();
    let mut state = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut redis).await.unwrap();
        let value = match kind.as_str() {
            "string" => redis.get::<_, String>(&key).await.unwrap(),
            "hash" => {
                format!("{:?}", redis.hgetall::<_, std::collections::BTreeMap<String, String>>(&key).await.unwrap())
            }
            "set" => format!("{:?}", redis.smembers::<_, std::collections::BTreeSet<String>>(&key).await.unwrap()),
            "zset" => format!("{:?}", redis.zrange_withscores::<_, Vec<(String, f64)>>(&key, 0, -1).await.unwrap()),
            "stream" => {
                let entries: redis::streams::StreamRangeReply = redis.xrange_all(&key).await.unwrap();
                format!("{:?}", entries.ids.iter().map(|e| (&e.id, &e.map)).collect::<Vec<_>>())
            }
            other => panic!("unexpected key type {other} for {key}"),
        };
        state.push(format!("{key} {kind} {value}"));
    }
    let rows: Vec<(String, i64)> =
        sqlx::query_as("select 'sale ' || sale_id, stock_initial from sales union all select 'order ' || user_id, 0 from orders order by 1")
            .fetch_all(&deployment.pool)
            .await
            .unwrap();
    state.extend(rows.into_iter().map(|(row, stock)| format!("{row} {stock}")));
    state
}

#[tokio::test]
async fn malformed_requests_get_a_4xx_json_error_and_change_nothing() {
    let mut deployment = Deployment::new(&[]).await;
    let (_service, sale) = deployment.start_with_sale(5).await;
    assert_eq!(deployment.buy(&sale, "alice").await.status(), 201);
    deployment.wait_for_drain(&sale).await;
    let before = snapshot(&deployment).await;

    let cases = cases(&sale);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    for case in &cases {
        let mut request = deployment.client.request(case.method.clone(), deployment.url(&case.path));
        for (name, value) in &case.headers {
            request = request.header(*name, value);
        }
        let response = request.body(case.body.clone()).send().await.unwrap();
        assert_eq!(response.status(), case.status, "case {:?}", case.name);
        assert_error(response, case.status, case.code).await;
    }

    assert_eq!(snapshot(&deployment).await, before, "a malformed request changed Redis or Postgres");
    eprintln!("figures bad-input: cases={} state_unchanged=true", cases.len());
}
