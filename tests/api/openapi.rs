//! `GET /openapi.json` describes exactly the routes the service has.

use reqwest::Method;
use serde_json::Value;

use crate::helpers::{ADMIN_TOKEN, new_sale_id, spawn_app_with};

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

#[tokio::test]
async fn the_openapi_document_lists_every_route_with_exactly_its_methods() {
    let app = spawn_app_with(|_| {}, false).await;
    let response = app.client.get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{}", doc["openapi"]);
    let paths = doc["paths"].as_object().expect("paths");
    let mut documented = vec![];
    for (path, operations) in paths {
        let url = app.url(&path.replace("{sale_id}", &new_sale_id()));
        for method in METHODS {
            let request = app
                .client
                .request(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(), &url)
                .bearer_auth(ADMIN_TOKEN)
                .json(&serde_json::json!({"sale_id": new_sale_id(), "user_id": "u", "stock": 1}));
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            let allow = answer.headers().get("allow").map(|v| v.to_str().unwrap().to_owned());
            let code = answer.json::<Value>().await.ok().and_then(|b| b["error"].as_str().map(str::to_owned));
            let operation = &operations[method];
            if operation.is_object() {
                documented.push(format!("{} {path}", method.to_uppercase()));
                assert!(
                    status != 405 && code.as_deref() != Some("not_found"),
                    "{method} {path}: documented, not routed ({status})"
                );
                let statuses = operation["responses"].as_object().expect("responses");
                assert!(statuses.contains_key(&status.to_string()), "{method} {path}: {status} is not documented");
            } else {
                assert_eq!(status, 405, "{method} {path} answers {status} but is not documented");
                let mut methods: Vec<String> =
                    METHODS.iter().filter(|m| operations[**m].is_object()).map(|m| m.to_uppercase()).collect();
                // HEAD is answered wherever GET is (RFC 9110 §9.3.2), documented or not.
                if methods.iter().any(|m| m == "GET") {
                    methods.push("HEAD".into());
                }
                methods.sort();
                assert_eq!(allow, Some(methods.join(", ")), "{method} {path}: Allow lists the documented methods");
            }
        }
    }
    documented.sort();
    let expected = [
        "DELETE /admin/sales/{sale_id}",
        "DELETE /admin/webhooks/{id}",
        "DELETE /sales/{sale_id}/order",
        "GET /",
        "GET /admin",
        "GET /admin/drops/{drop_id}",
        "GET /admin/drops/{drop_id}/audit",
        "GET /admin/drops/{drop_id}/draw/stats",
        "GET /admin/drops/{drop_id}/orders",
        "GET /admin/events",
        "GET /admin/late-payments",
        "GET /admin/me",
        "GET /admin/sales",
        "GET /admin/sales/{sale_id}",
        "GET /admin/sales/{sale_id}/audit",
        "GET /admin/sales/{sale_id}/orders",
        "GET /admin/sales/{sale_id}/reconcile",
        "GET /admin/webhooks",
        "GET /challenge-worker.js",
        "GET /drop/{drop_id}",
        "GET /drops/{drop_id}",
        "GET /drops/{drop_id}/challenge",
        "GET /drops/{drop_id}/draw",
        "GET /drops/{drop_id}/entry",
        "GET /drops/{drop_id}/queue",
        "GET /favicon.ico",
        "GET /healthz",
        "GET /metrics",
        "GET /openapi.json",
        "GET /readyz",
        "GET /sale/{sale_id}",
        "GET /sales/{sale_id}",
        "GET /sales/{sale_id}/challenge",
        "GET /sales/{sale_id}/order",
        "GET /sales/{sale_id}/queue",
        "POST /admin/drops/{drop_id}/draw",
        "POST /admin/drops/{drop_id}/end",
        "POST /admin/drops/{drop_id}/pause",
        "POST /admin/drops/{drop_id}/resume",
        "POST /admin/drops/{drop_id}/stock",
        "POST /admin/events/{id}/retry",
        "POST /admin/orders/{order_id}/cancel",
        "POST /admin/orders/{order_id}/refund",
        "POST /admin/sales/{sale_id}/end",
        "POST /admin/sales/{sale_id}/pause",
        "POST /admin/sales/{sale_id}/reconcile",
        "POST /admin/sales/{sale_id}/resume",
        "POST /admin/sales/{sale_id}/stock",
        "POST /admin/webhooks",
        "POST /admin/webhooks/{id}/enable",
        "POST /buy",
        "POST /drops/{drop_id}/entries",
        "POST /drops/{drop_id}/queue",
        "POST /payments/events",
        "POST /sales/{sale_id}/queue",
        "PUT /admin/drops/{drop_id}",
        "PUT /admin/sales/{sale_id}",
    ];
    assert_eq!(documented, expected);
    // Every error body the document names is the one the service sends.
    for schema in ["RetireReport", "Refusal"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} is in the document");
    }
    let error_schema = &doc["components"]["schemas"]["ErrorBody"]["required"];
    assert_eq!(error_schema, &serde_json::json!(["error", "message"]));
}

#[tokio::test]
async fn buy_documents_the_bearer_jwt_its_refusals_and_an_optional_user_id() {
    let app = spawn_app_with(
        |config| {
            config.auth.mode = seckill::identity::AuthMode::Jwt;
            config.auth.jwt_secret = Some(secrecy::SecretString::from("openapi-test-secret-of-32-bytes!!"));
        },
        false,
    )
    .await;
    let doc: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    let scheme = &doc["components"]["securitySchemes"]["bearer_jwt"];
    assert_eq!((scheme["scheme"].as_str(), scheme["bearerFormat"].as_str()), (Some("bearer"), Some("JWT")), "{scheme}");
    let buy = &doc["paths"]["/buy"]["post"];
    let security = buy["security"].as_array().expect("security");
    assert!(security.iter().any(|s| s.get("bearer_jwt").is_some()), "{security:?}");
    assert!(security.iter().any(|s| s.as_object().is_some_and(|o| o.is_empty())), "none mode: no token needed");
    for (status, codes) in [
        ("401", &["unauthenticated", "invalid_token"][..]),
        ("403", &["user_mismatch", "sale_ended"]),
        ("503", &["unavailable", "outcome_unknown", "not_durable"]),
    ] {
        let description = buy["responses"][status]["description"].as_str().unwrap_or_default();
        assert!(codes.iter().all(|c| description.contains(c)), "{status}: {description}");
    }
    let request = &doc["components"]["schemas"]["BuyRequest"];
    let required: Vec<&str> = request["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, ["sale_id"], "user_id is optional: {request}");
    assert_eq!(request["properties"]["user_id"]["type"], "string", "not nullable: {request}");
    let none = spawn_app_with(|_| {}, false).await;
    let doc: Value = none.client.get(none.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    let required = &doc["components"]["schemas"]["BuyRequest"]["required"];
    assert_eq!(required, &serde_json::json!(["sale_id", "user_id"]), "SECKILL_AUTH=none needs user_id");
}

/// The document's `user_id` pattern says what `UserId::parse` accepts, character by character,
/// for every character of the Basic Multilingual Plane at the start, inside and at the end of an
/// id (the fuzz generates what the pattern allows and expects it accepted). Format and
/// default-ignorable characters beyond that plane are refused too; an ECMA-262 pattern without
/// the `u` flag cannot name them. Nor can a pattern say NFC (whether `a` and a combining mark
/// compose): an id not in NFC is refused whatever the pattern says, as the description states.
#[tokio::test]
async fn the_user_id_pattern_is_the_servers_rule() {
    let app = spawn_app_with(|_| {}, false).await;
    let doc: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    let body = doc["components"]["schemas"]["BuyRequest"]["properties"]["user_id"]["pattern"].as_str().unwrap();
    let params = doc["paths"]["/sales/{sale_id}/order"]["get"]["parameters"].as_array().unwrap();
    let query = params.iter().find(|p| p["name"] == "user_id").unwrap()["schema"]["pattern"].as_str().unwrap();
    assert_eq!(body, query, "the body and the query name the buyer alike");
    let pattern = regex::Regex::new(body).unwrap();
    let mut checked = 0;
    for c in (0..=0xFFFF_u32).filter_map(char::from_u32) {
        for id in [format!("{c}"), format!("{c}a"), format!("a{c}"), format!("a{c}a")] {
            let accepted = seckill::domain::UserId::parse(&id).is_ok();
            checked += 1;
            if !unicode_normalization::is_nfc(&id) {
                assert!(!accepted, "{id:?} (U+{:04X}) is not NFC and was accepted", c as u32);
                continue;
            }
            assert_eq!(
                pattern.is_match(&id),
                accepted,
                "{id:?} (U+{:04X}): the pattern and the server disagree",
                c as u32
            );
        }
    }
    assert_eq!(checked, 4 * (0x10000 - 0x800), "every character but the surrogates");
}

/// The fuzz's hooks (`scripts/schemathesis_hooks.py`) drop generated ids that are not in NFC, and
/// those holding a character beyond the Basic Multilingual Plane that the server refuses (format
/// or default-ignorable), which the pattern cannot name: their table must be exactly those
/// characters.
#[test]
fn the_fuzz_hooks_know_the_format_characters_beyond_the_bmp() {
    let hooks = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/schemathesis_hooks.py")).unwrap();
    let pair = regex::Regex::new(r"\(0x([0-9A-F]+), 0x([0-9A-F]+)\)").unwrap();
    let listed: Vec<(u32, u32)> = pair
        .captures_iter(&hooks)
        .map(|c| (u32::from_str_radix(&c[1], 16).unwrap(), u32::from_str_radix(&c[2], 16).unwrap()))
        .collect();
    let mut refused: Vec<(u32, u32)> = vec![];
    for c in (0x10000..=0x10FFFF_u32).filter_map(char::from_u32) {
        let id = format!("a{c}a");
        if unicode_normalization::is_nfc(&id) && seckill::domain::UserId::parse(&id).is_err() {
            match refused.last_mut() {
                Some((_, hi)) if *hi + 1 == c as u32 => *hi = c as u32,
                _ => refused.push((c as u32, c as u32)),
            }
        }
    }
    assert_eq!(listed, refused, "REFUSED_BEYOND_BMP in scripts/schemathesis_hooks.py");
}
