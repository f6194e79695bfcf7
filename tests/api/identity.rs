//! `SECKILL_AUTH=jwt`: the buyer is the bearer token's, verified before the limiter; every refused
//! token is a 401 that changes nothing; a body naming someone else is a 403.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use redis::AsyncCommands;
use seckill::identity::{AuthMode, JwtAlgorithm};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, new_sale_id, spawn_app_with};

const SECRET: &str = "identity-test-secret-of-32-bytes!";
const ISSUER: &str = "shop";
const AUDIENCE: &str = "seckill";
const STOCK: i64 = 3;

/// A key of `tests/keys/`.
fn key_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys").join(name)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Claims the jwt app accepts for `sub`, with `extra` on top.
fn claims(sub: &str, extra: Value) -> Value {
    let mut claims = json!({"sub": sub, "exp": now() + 600, "iss": ISSUER, "aud": AUDIENCE});
    claims.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    claims
}

fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).unwrap()
}

/// An HS256 token the jwt app accepts, naming `sub`.
fn token(sub: &str) -> String {
    sign(Algorithm::HS256, &EncodingKey::from_secret(SECRET.as_bytes()), &claims(sub, json!({})))
}

/// A service with `SECKILL_AUTH=jwt`, the HS256 secret, an issuer and an audience.
async fn jwt_app() -> TestApp {
    spawn_app_with(
        |config| {
            config.auth.mode = AuthMode::Jwt;
            config.auth.jwt_secret = Some(SecretString::from(SECRET));
            config.auth.jwt_issuer = Some(ISSUER.into());
            config.auth.jwt_audience = Some(AUDIENCE.into());
        },
        false,
    )
    .await
}

async fn buy_with(app: &TestApp, authorization: Option<&str>, body: Value) -> reqwest::Response {
    let mut request = app.client.post(app.url("/buy")).json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap()
}

/// Stock untouched, no buyer, nothing in the stream.
async fn assert_unchanged(app: &TestApp, sale: &str) {
    let status = app.status(sale).await;
    assert_eq!((status.stock_left, status.sold), (STOCK, 0), "{status:?}");
    assert!(app.buyers(sale).await.is_empty());
    let (stream, _) = app.orders_stream(sale);
    let queued: i64 = app.redis.clone().xlen(&stream).await.unwrap();
    assert_eq!(queued, 0, "the stream holds orders");
}

/// Issue 25: with only `SECKILL_JWT_SECRET` set (no issuer, no audience), tokens issued for
/// another audience, valid for years, with critical header extensions or naming a look-alike
/// buyer are refused, each with a 401 whose message names the reason; a plain token still buys.
#[tokio::test]
async fn with_only_a_secret_the_defaults_refuse_what_another_service_or_a_year_long_token_would_pass() {
    let app = spawn_app_with(
        |config| {
            config.auth.mode = AuthMode::Jwt;
            config.auth.jwt_secret = Some(SecretString::from(SECRET));
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let mut crit = Header::new(Algorithm::HS256);
    crit.crit = Some(vec!["exp".into()]);
    let plain = |extra: Value| {
        let mut claims = json!({"sub": "mallory", "exp": now() + 600});
        claims.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        sign(Algorithm::HS256, &key, &claims)
    };
    let cases = [
        ("another audience", plain(json!({"aud": "other"})), "audience"),
        // Issue 39: an audience that is not a string names one all the same.
        ("a numeric audience", plain(json!({"aud": 5})), "audience"),
        ("a boolean audience", plain(json!({"aud": true})), "audience"),
        ("an object audience", plain(json!({"aud": {}})), "audience"),
        ("a list of numbers", plain(json!({"aud": [5]})), "audience"),
        ("exp in 9999", plain(json!({"exp": 253_402_300_799_u64})), "lifetime"),
        ("two days", plain(json!({"iat": now(), "exp": now() + 2 * 86_400})), "lifetime"),
        (
            "crit header",
            jsonwebtoken::encode(&crit, &json!({"sub": "mallory", "exp": now() + 600}), &key).unwrap(),
            "crit",
        ),
        ("zero-width sub", plain(json!({"sub": "mallory\u{200b}"})), "user_id"),
        ("default-ignorable sub", plain(json!({"sub": "mallory\u{34f}"})), "user_id"),
        ("decomposed sub", plain(json!({"sub": "zoe\u{301}"})), "user_id"),
        ("trailing space sub", plain(json!({"sub": "mallory "})), "user_id"),
    ];
    for (name, token, reason) in cases {
        let response = buy_with(&app, Some(&format!("Bearer {token}")), json!({"sale_id": sale})).await;
        assert_eq!(response.status(), 401, "{name}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_token", "{name}: {body}");
        assert!(body["message"].as_str().unwrap().contains(reason), "{name}: {body}");
    }
    assert_unchanged(&app, &sale).await;
    let fine =
        buy_with(&app, Some(&format!("Bearer {}", plain(json!({"iat": now()})))), json!({"sale_id": sale})).await;
    assert_eq!(fine.status(), 201, "a token for no audience, valid for minutes, still buys");
}

#[tokio::test]
async fn a_valid_token_buys_as_its_subject_with_or_without_user_id() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let response = buy_with(&app, Some(&format!("Bearer {}", token("alice"))), json!({"sale_id": sale})).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["user_id"], "alice");
    let bob = format!("bearer {}", token("bob"));
    assert_eq!(buy_with(&app, Some(&bob), json!({"sale_id": sale, "user_id": "bob"})).await.status(), 201);
    assert_eq!(app.buyers(&sale).await, ["alice".to_owned(), "bob".to_owned()].into());
    let again = buy_with(&app, Some(&format!("Bearer {}", token("alice"))), json!({"sale_id": sale})).await;
    assert_error(again, 409, "already_purchased").await;
}

#[tokio::test]
async fn refused_tokens_answer_401_before_the_limiter_and_change_nothing() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let hs256 = |secret: &[u8], claims: &Value| sign(Algorithm::HS256, &EncodingKey::from_secret(secret), claims);
    let ours = SECRET.as_bytes();
    let rsa = EncodingKey::from_rsa_pem(&std::fs::read(key_file("rsa-private.pem")).unwrap()).unwrap();
    let b64 = |v: Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let alg_none = format!("{}.{}.", b64(json!({"alg": "none", "typ": "JWT"})), b64(claims("mallory", json!({}))));
    let bearer = |token: String| Some(format!("Bearer {token}"));
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no header", None, "unauthenticated"),
        ("basic scheme", Some("Basic bWFsbG9yeTpwdw==".into()), "unauthenticated"),
        ("bearer without token", Some("Bearer".into()), "unauthenticated"),
        ("garbage token", bearer("not.a.jwt".into()), "invalid_token"),
        ("expired", bearer(hs256(ours, &claims("mallory", json!({"exp": now() - 3600})))), "invalid_token"),
        ("not yet valid", bearer(hs256(ours, &claims("mallory", json!({"nbf": now() + 3600})))), "invalid_token"),
        ("no exp", bearer(hs256(ours, &json!({"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE}))), "invalid_token"),
        (
            "wrong key",
            bearer(hs256(b"another-secret-of-at-least-32-bytes", &claims("mallory", json!({})))),
            "invalid_token",
        ),
        (
            "HS384",
            bearer(sign(Algorithm::HS384, &EncodingKey::from_secret(ours), &claims("mallory", json!({})))),
            "invalid_token",
        ),
        ("RS256", bearer(sign(Algorithm::RS256, &rsa, &claims("mallory", json!({})))), "invalid_token"),
        ("alg none", bearer(alg_none), "invalid_token"),
        ("wrong issuer", bearer(hs256(ours, &claims("mallory", json!({"iss": "evil"})))), "invalid_token"),
        ("wrong audience", bearer(hs256(ours, &claims("mallory", json!({"aud": "other"})))), "invalid_token"),
        ("numeric audience", bearer(hs256(ours, &claims("mallory", json!({"aud": 5})))), "invalid_token"),
        ("audiences without ours", bearer(hs256(ours, &claims("mallory", json!({"aud": ["other"]})))), "invalid_token"),
        ("ours among numbers", bearer(hs256(ours, &claims("mallory", json!({"aud": [AUDIENCE, 5]})))), "invalid_token"),
        ("too long", bearer("a".repeat(5000)), "invalid_token"),
    ];
    for (name, authorization, code) in cases {
        let response = buy_with(&app, authorization.as_deref(), json!({"sale_id": sale, "user_id": "mallory"})).await;
        let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
        let expected = if code == "invalid_token" { r#"Bearer error="invalid_token""# } else { "Bearer" };
        assert_eq!(challenge.as_deref(), Some(expected), "{name}");
        assert!(response.headers().get("ratelimit").is_none(), "{name}: the limiter was asked");
        assert_eq!(response.status(), 401, "{name}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], code, "{name}: {body}");
    }
    assert_unchanged(&app, &sale).await;
}

#[tokio::test]
async fn nobody_buys_for_a_victim_without_the_victims_token() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let attacker = format!("Bearer {}", token("mallory"));
    let as_victim = json!({"sale_id": sale, "user_id": "victim"});
    assert_error(buy_with(&app, Some(&attacker), as_victim.clone()).await, 403, "user_mismatch").await;
    assert_error(buy_with(&app, None, as_victim.clone()).await, 401, "unauthenticated").await;
    assert_unchanged(&app, &sale).await;
    let victim = buy_with(&app, Some(&format!("Bearer {}", token("victim"))), as_victim).await;
    assert_eq!(victim.status(), 201);
    assert_eq!(app.buyers(&sale).await, ["victim".to_owned()].into());
}

#[tokio::test]
async fn the_token_command_prints_a_token_the_service_accepts() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
    command
        .args(["token", "--user", "carol", "--ttl", "10m"])
        .env("SECKILL_JWT_SECRET", SECRET)
        .env("SECKILL_JWT_ISSUER", ISSUER)
        .env("SECKILL_JWT_AUDIENCE", AUDIENCE);
    let output = crate::common::output_within(command, std::time::Duration::from_secs(60)).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let token = String::from_utf8(output.stdout).unwrap();
    let response = buy_with(&app, Some(&format!("Bearer {}", token.trim())), json!({"sale_id": sale})).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.json::<Value>().await.unwrap()["user_id"], "carol");
}

#[tokio::test]
async fn an_eddsa_key_accepts_its_tokens_and_refuses_hs256_signed_with_it() {
    let public = key_file("ed25519-public.pem");
    let app = spawn_app_with(
        |config| {
            config.auth.mode = AuthMode::Jwt;
            config.auth.jwt_public_key_file = Some(public.clone());
            config.auth.jwt_algorithm = Some(JwtAlgorithm::EdDsa);
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let private = EncodingKey::from_ed_pem(&std::fs::read(key_file("ed25519-private.pem")).unwrap()).unwrap();
    let claims = json!({"sub": "dave", "exp": now() + 600});
    let confused = sign(Algorithm::HS256, &EncodingKey::from_secret(&std::fs::read(&public).unwrap()), &claims);
    let refused = buy_with(&app, Some(&format!("Bearer {confused}")), json!({"sale_id": sale})).await;
    assert_error(refused, 401, "invalid_token").await;
    assert_unchanged(&app, &sale).await;
    let eddsa = format!("Bearer {}", sign(Algorithm::EdDSA, &private, &claims));
    assert_eq!(buy_with(&app, Some(&eddsa), json!({"sale_id": sale})).await.status(), 201);
}

#[tokio::test]
async fn without_auth_the_body_must_name_the_buyer() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let response = buy_with(&app, Some(&format!("Bearer {}", token("alice"))), json!({"sale_id": sale})).await;
    assert_error(response, 400, "invalid_request").await;
    assert_unchanged(&app, &sale).await;
}

#[tokio::test]
async fn under_jwt_a_buyer_reads_only_its_own_order() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let alice = format!("Bearer {}", token("alice"));
    let bought = buy_with(&app, Some(&alice), json!({"sale_id": sale})).await;
    assert_eq!(bought.status(), 201);
    let order_id = bought.json::<Value>().await.unwrap()["order_id"].clone();
    let order = |query: &'static str, authorization: Option<String>| {
        let mut request = app.client.get(app.url(&format!("/sales/{sale}/order{query}")));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };

    let own: Value = order("", Some(alice.clone())).await.unwrap().json().await.unwrap();
    assert_eq!((own["status"].as_str(), &own["order_id"]), (Some("queued"), &order_id));
    let named: Value = order("?user_id=alice", Some(alice.clone())).await.unwrap().json().await.unwrap();
    assert_eq!(named["order_id"], order_id);
    assert_error(order("?user_id=alice", None).await.unwrap(), 401, "unauthenticated").await;
    assert_error(
        order("?user_id=alice", Some(format!("Bearer {}", token("bob")))).await.unwrap(),
        403,
        "user_mismatch",
    )
    .await;
    let bob: Value = order("", Some(format!("Bearer {}", token("bob")))).await.unwrap().json().await.unwrap();
    assert_eq!(bob, json!({"status": "none"}), "bob sees his own (no) order, never alice's");
}

#[tokio::test]
async fn under_jwt_a_buyer_cancels_only_its_own_reservation() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": STOCK, "payment_window": "1m"})).await;
    assert_eq!(seeded.status(), 200);
    let alice = format!("Bearer {}", token("alice"));
    assert_eq!(buy_with(&app, Some(&alice), json!({"sale_id": sale})).await.status(), 201);
    let cancel = |query: &'static str, authorization: Option<String>| {
        let mut request = app.client.delete(app.url(&format!("/sales/{sale}/order{query}")));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };
    let bob = format!("Bearer {}", token("bob"));
    assert_error(cancel("?user_id=alice", Some(bob.clone())).await.unwrap(), 403, "user_mismatch").await;
    assert_error(cancel("", Some(bob)).await.unwrap(), 404, "no_order").await;
    assert_error(cancel("?user_id=alice", None).await.unwrap(), 401, "unauthenticated").await;
    let own = cancel("", Some(alice)).await.unwrap();
    assert_eq!(own.status(), 200);
    assert_eq!(own.json::<Value>().await.unwrap()["status"], "cancelled");
}

/// docs/http-api.md ("Look-alikes are distinct buyers"): ids that only look like another are other
/// accounts, each buying once; the spellings of one id that an exact comparison would miss are
/// refused instead (the NFD spelling of `zoé` here).
#[tokio::test]
async fn look_alike_ids_are_distinct_buyers() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    for user in ["carol", "ｃａｒｏｌ", "сarol", "carol\u{2800}", "zoé"] {
        let bought = app.buy(&sale, user).await;
        assert_eq!(bought.status(), 201, "{user:?} is a buyer of its own");
        let body: Value = bought.json().await.unwrap();
        assert_eq!(body["user_id"], user, "the id a buyer sends is the id its order carries");
    }
    assert_error(app.buy(&sale, "zoe\u{301}").await, 400, "invalid_request").await;
    assert_eq!(app.status(&sale).await.stock_left, 5);
}

/// RFC 7519's NumericDate is any JSON number: times with a fraction, as some identity providers
/// issue them, are read as the signature's check reads them (they were refused as malformed).
#[tokio::test]
async fn a_token_whose_times_have_fractions_buys() {
    let app = jwt_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, STOCK).await;
    let secret = EncodingKey::from_secret(SECRET.as_bytes());
    let times = json!({"exp": now() as f64 + 600.5, "iat": now() as f64 - 0.25});
    let token = sign(Algorithm::HS256, &secret, &claims("frac", times));
    let response = buy_with(&app, Some(&format!("Bearer {token}")), json!({"sale_id": sale})).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}
