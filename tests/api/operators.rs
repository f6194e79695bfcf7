//! Named operators and their roles: a viewer reads and is refused every write (walking the
//! OpenAPI document's admin routes), and the audit names the actor of every action.

use reqwest::Method;
use seckill::config::Config;
use seckill::operators::{hash_hex, new_token};
use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, new_sale_id, spawn_app_with};

/// A viewer's token, an operator's token, and the app whose roster names them (`vera`, `otto`).
pub struct Crew {
    pub viewer: String,
    pub operator: String,
}

impl Crew {
    pub fn new() -> Self {
        Self { viewer: new_token().unwrap(), operator: new_token().unwrap() }
    }

    /// Puts the two operators in `config`'s roster (inline, as `SECKILL_OPERATORS` would).
    pub fn enlist(&self, config: &mut Config) {
        config.operators.operators =
            Some(format!("vera viewer {}; otto operator {}", hash_hex(&self.viewer), hash_hex(&self.operator)));
    }
}

async fn send(app: &TestApp, method: &str, path: &str, token: &str, body: Option<Value>) -> reqwest::Response {
    let request = app.client.request(Method::from_bytes(method.as_bytes()).unwrap(), app.url(path)).bearer_auth(token);
    let request = if let Some(body) = body { request.json(&body) } else { request };
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_viewer_is_refused_on_every_write_route_of_the_openapi_document_and_served_on_every_read() {
    let crew = Crew::new();
    let app = spawn_app_with(|c| crew.enlist(c), false).await;
    let sale = new_sale_id();
    assert_eq!(
        send(&app, "PUT", &format!("/admin/sales/{sale}"), &crew.operator, Some(json!({"stock": 3}))).await.status(),
        200
    );
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json")).unwrap(),
    )
    .unwrap();
    let (mut reads, mut writes) = (vec![], vec![]);
    for (path, operations) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/admin/") {
            continue;
        }
        // Every path parameter gets a well-formed value: the role is checked before any of them.
        let concrete = path
            .replace("{sale_id}", &sale)
            .replace("{order_id}", &uuid::Uuid::now_v7().to_string())
            .replace("{id}", "1");
        let concrete = regex_free_fill(&concrete);
        for (method, _) in operations.as_object().unwrap() {
            let method = method.to_uppercase();
            let answer = send(&app, &method, &concrete, &crew.viewer, Some(json!({"reason": "x"}))).await;
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            if method == "GET" {
                assert!(![401, 403].contains(&status), "GET {path}: a viewer reads, got {status} {body}");
                reads.push(path.clone());
            } else {
                assert_eq!((status, body["error"].as_str()), (403, Some("forbidden_role")), "{method} {path}: {body}");
                assert!(body["message"].as_str().unwrap().contains("vera"), "{body}");
                writes.push(format!("{method} {path}"));
            }
        }
    }
    assert!(writes.len() >= 11 && reads.len() >= 10, "walked too few routes: {writes:?} {reads:?}");
    assert_eq!(app.status(&sale).await.stock_initial, 3, "the viewer changed nothing");
    // The operator's writes pass the role check (each answers on its own merits).
    let paused = send(&app, "POST", &format!("/admin/sales/{sale}/pause"), &crew.operator, None).await;
    assert_eq!(paused.status(), 200, "{}", paused.text().await.unwrap());
}

#[tokio::test]
async fn who_is_signed_in_and_every_audit_entry_names_its_actor() {
    let crew = Crew::new();
    let app = spawn_app_with(|c| crew.enlist(c), false).await;
    for (token, expected) in [
        (&crew.viewer, json!({"name": "vera", "role": "viewer", "actor": "vera"})),
        (&crew.operator, json!({"name": "otto", "role": "operator", "actor": "otto"})),
        (&ADMIN_TOKEN.to_owned(), json!({"name": null, "role": "operator", "actor": "admin-token"})),
    ] {
        let me = send(&app, "GET", "/admin/me", token, None).await;
        assert_eq!(me.status(), 200);
        assert_eq!(me.json::<Value>().await.unwrap(), expected);
    }
    let forged = format!("{}x", crew.operator);
    assert_error(send(&app, "GET", "/admin/me", &forged, None).await, 401, "unauthorized").await;
    assert_error(send(&app, "GET", "/admin/me", &hash_hex(&crew.operator), None).await, 401, "unauthorized").await;

    let sale = new_sale_id();
    let path = |action: &str| format!("/admin/sales/{sale}/{action}");
    let seed = json!({"stock": 5, "starts_at": "2020-01-01T00:00:00Z"});
    assert_eq!(send(&app, "PUT", &format!("/admin/sales/{sale}"), &crew.operator, Some(seed)).await.status(), 200);
    assert_eq!(send(&app, "POST", &path("pause"), ADMIN_TOKEN, None).await.status(), 200);
    assert_eq!(send(&app, "POST", &path("resume"), &crew.operator, None).await.status(), 200);
    assert_eq!(send(&app, "POST", &path("stock"), &crew.operator, Some(json!({"add": 2}))).await.status(), 200);
    assert_eq!(send(&app, "POST", &path("end"), &crew.operator, None).await.status(), 200);
    assert_eq!(send(&app, "DELETE", &format!("/admin/sales/{sale}"), &crew.operator, None).await.status(), 200);
    let trail: Value = send(&app, "GET", &path("audit"), &crew.viewer, None).await.json().await.unwrap();
    let actors: Vec<(&str, &str)> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["actor"].as_str().unwrap_or("(none)")))
        .collect();
    assert_eq!(
        actors,
        [
            ("retire", "otto"),
            ("end", "otto"),
            ("stock", "otto"),
            ("resume", "otto"),
            ("pause", "admin-token"),
            ("seed", "otto")
        ]
    );
}

#[tokio::test]
async fn named_operators_alone_enable_the_admin_routes() {
    let crew = Crew::new();
    let app = spawn_app_with(
        |c| {
            crew.enlist(c);
            c.admin_token = None;
        },
        false,
    )
    .await;
    assert_eq!(app.client.get(app.url("/admin")).send().await.unwrap().status(), 200);
    assert_eq!(send(&app, "GET", "/admin/sales", &crew.viewer, None).await.status(), 200);
    assert_error(send(&app, "GET", "/admin/sales", ADMIN_TOKEN, None).await, 401, "unauthorized").await;
}

/// Any other `{param}` left in a path, as a valid id.
fn regex_free_fill(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(&rest[..open]);
        out.push_str("p1");
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}
