use secrecy::SecretString;
use serde_json::json;

use super::*;

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn settings(key: JwtKey) -> JwtSettings {
    JwtSettings {
        key,
        algorithm: None,
        user_claim: "sub".into(),
        issuer: None,
        audience: None,
        leeway: Duration::from_secs(30),
        max_lifetime: Duration::from_secs(24 * 3600),
    }
}

fn secret() -> SecretString {
    SecretString::from(SECRET)
}

fn hs256(claims: serde_json::Value, secret: &str) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes());
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn a_signed_token_verifies_as_its_user() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    let user = UserId::parse("alice").unwrap();
    let token = sign_hs256(&secret(), &user, "sub", Duration::from_secs(3600), None, None).unwrap();
    assert_eq!(verifier.verify(&token), Ok(user));
}

/// The secret is used raw, its UTF-8 bytes as the HMAC key, never base64-decoded
/// (docs/configuration.md): a token signed with the decoded bytes of a base64-looking secret fails.
#[test]
fn the_secret_is_its_raw_bytes_not_base64_decoded() {
    use base64::Engine as _;
    let looks_base64 = "c2Vja2lsbC1zZWNyZXQtb2YtYXQtbGVhc3QtMzItYnl0ZXM=";
    let verifier = Verifier::new(settings(JwtKey::Secret(SecretString::from(looks_base64)))).unwrap();
    let claims = json!({"sub": "a", "exp": now() + 60});
    assert!(verifier.verify(&hs256(claims.clone(), looks_base64)).is_ok(), "the raw bytes sign");
    let decoded = base64::engine::general_purpose::STANDARD.decode(looks_base64).unwrap();
    let signed_decoded =
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(&decoded)).unwrap();
    assert_eq!(verifier.verify(&signed_decoded).unwrap_err().0, "the token's signature does not verify");
}

#[test]
fn a_short_secret_or_a_secret_with_a_public_key_algorithm_is_refused() {
    assert!(Verifier::new(settings(JwtKey::Secret(SecretString::from("short")))).is_err());
    let mut with_rs256 = settings(JwtKey::Secret(secret()));
    with_rs256.algorithm = Some(JwtAlgorithm::Rs256);
    assert!(Verifier::new(with_rs256).is_err());
    assert!(Verifier::new(settings(JwtKey::PublicKeyPem(b"not a pem".to_vec()))).is_err());
}

#[test]
fn time_signature_algorithm_and_claims_are_checked() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    let refused = |token: &str| verifier.verify(token).unwrap_err().0;
    assert_eq!(refused(&hs256(json!({"sub": "a", "exp": now() - 120}), SECRET)), "the token has expired");
    assert!(verifier.verify(&hs256(json!({"sub": "a", "exp": now() - 10}), SECRET)).is_ok(), "within the leeway");
    let early = hs256(json!({"sub": "a", "exp": now() + 600, "nbf": now() + 300}), SECRET);
    assert_eq!(refused(&early), "the token is not valid yet (nbf)");
    assert!(refused(&hs256(json!({"sub": "a"}), SECRET)).contains("required claim"));
    let other_secret = hs256(json!({"sub": "a", "exp": now() + 60}), "another-secret-of-thirty-two-bytes!");
    assert_eq!(refused(&other_secret), "the token's signature does not verify");
    assert!(refused(&hs256(json!({"sub": 7, "exp": now() + 60}), SECRET)).contains("not a string"));
    assert!(refused(&hs256(json!({"sub": "a\u{7}", "exp": now() + 60}), SECRET)).contains("valid user_id"));
    assert_eq!(refused("garbage"), "the token is malformed");
    let hs384 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS384),
        &json!({"sub": "a", "exp": now() + 60}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    assert_eq!(refused(&hs384), "the token's algorithm is not the one accepted");
}

#[test]
fn alg_none_is_refused() {
    use base64::Engine as _;
    let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let token =
        format!("{}.{}.", b64(json!({"alg": "none", "typ": "JWT"})), b64(json!({"sub": "a", "exp": now() + 60})));
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    assert!(verifier.verify(&token).is_err());
}

#[test]
fn a_configured_issuer_and_audience_must_be_in_the_token() {
    let mut both = settings(JwtKey::Secret(secret()));
    both.issuer = Some("shop".into());
    both.audience = Some("seckill".into());
    both.user_claim = "uid".into();
    let verifier = Verifier::new(both).unwrap();
    let user = UserId::parse("bob").unwrap();
    let ttl = Duration::from_secs(60);
    let good = sign_hs256(&secret(), &user, "uid", ttl, Some("shop"), Some("seckill")).unwrap();
    assert_eq!(verifier.verify(&good), Ok(user.clone()));
    for (iss, aud) in
        [(None, Some("seckill")), (Some("shop"), None), (Some("evil"), Some("seckill")), (Some("shop"), Some("x"))]
    {
        let token = sign_hs256(&secret(), &user, "uid", ttl, iss, aud).unwrap();
        assert!(verifier.verify(&token).is_err(), "iss {iss:?} aud {aud:?} accepted");
    }
    let wrong_claim = sign_hs256(&secret(), &user, "sub", ttl, Some("shop"), Some("seckill")).unwrap();
    assert_eq!(verifier.verify(&wrong_claim), Err(InvalidToken("the token has no user claim")));
}

#[test]
fn a_token_for_another_audience_is_refused_when_none_is_configured() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    let user = UserId::parse("alice").unwrap();
    let ttl = Duration::from_secs(60);
    for aud in ["other", "seckill"] {
        let token = sign_hs256(&secret(), &user, "sub", ttl, None, Some(aud)).unwrap();
        assert_eq!(verifier.verify(&token), Err(InvalidToken("the token's audience (aud) is not this service's")));
    }
    let listed = hs256(json!({"sub": "a", "exp": now() + 60, "aud": ["x", "y"]}), SECRET);
    assert!(verifier.verify(&listed).is_err(), "a list of audiences too");
    // Issue 39: an `aud` of any other type names an audience all the same (jsonwebtoken skips
    // what it cannot read as a string or a list of strings).
    for aud in [json!(5), json!(true), json!({}), json!([5]), json!([]), json!(null), json!(["x", 5])] {
        let token = hs256(json!({"sub": "a", "exp": now() + 60, "aud": aud}), SECRET);
        assert_eq!(
            verifier.verify(&token),
            Err(InvalidToken("the token's audience (aud) is not this service's")),
            "aud {aud}"
        );
    }
    assert!(verifier.verify(&sign_hs256(&secret(), &user, "sub", ttl, None, None).unwrap()).is_ok());
}

#[test]
fn a_token_valid_for_longer_than_the_maximum_lifetime_is_refused() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    let refused = |claims: serde_json::Value| verifier.verify(&hs256(claims, SECRET)).err().map(|e| e.0);
    let day = 24 * 3600;
    let too_long = Some("the token's lifetime (exp - iat) is longer than this service accepts");
    assert_eq!(refused(json!({"sub": "a", "exp": 253_402_300_799_u64})), too_long, "exp in 9999, no iat");
    assert_eq!(refused(json!({"sub": "a", "iat": now(), "exp": now() + day + 1})), too_long);
    assert_eq!(refused(json!({"sub": "a", "iat": now() - 3600, "exp": now() + day - 1800})), too_long, "exp - iat");
    let future = refused(json!({"sub": "a", "iat": now() + 3600, "exp": now() + 7200}));
    assert_eq!(future, Some("the token was issued in the future (iat)"), "iat moved up to shorten exp - iat");
    assert!(refused(json!({"sub": "a", "iat": "yesterday", "exp": now() + 60})).is_some());
    assert_eq!(refused(json!({"sub": "a", "iat": now(), "exp": now() + day})), None, "exactly the maximum");
    assert_eq!(refused(json!({"sub": "a", "exp": now() + day - 5})), None, "no iat: exp - now");
}

#[test]
fn a_token_with_critical_header_extensions_is_refused() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let mut header = Header::new(Algorithm::HS256);
    header.crit = Some(vec!["exp".into()]);
    let token = jsonwebtoken::encode(&header, &json!({"sub": "a", "exp": now() + 60}), &key).unwrap();
    let refused = verifier.verify(&token).unwrap_err().0;
    assert!(refused.contains("crit"), "{refused}");
    header.crit = Some(vec![]);
    let empty = jsonwebtoken::encode(&header, &json!({"sub": "a", "exp": now() + 60}), &key).unwrap();
    assert!(verifier.verify(&empty).is_err(), "an empty crit list is invalid too (RFC 7515 §4.1.11)");
}

#[test]
fn look_alike_subjects_are_refused() {
    let verifier = Verifier::new(settings(JwtKey::Secret(secret()))).unwrap();
    for sub in ["alice\u{200b}", "alice ", "\u{202e}ecila"] {
        let refused = verifier.verify(&hs256(json!({"sub": sub, "exp": now() + 60}), SECRET)).unwrap_err().0;
        assert!(refused.contains("valid user_id"), "{sub:?}: {refused}");
    }
}

#[test]
fn a_configured_audience_is_a_matching_string_or_a_list_of_strings_holding_it() {
    let mut with_audience = settings(JwtKey::Secret(secret()));
    with_audience.audience = Some("seckill".into());
    let verifier = Verifier::new(with_audience).unwrap();
    let verify =
        |aud: serde_json::Value| verifier.verify(&hs256(json!({"sub": "a", "exp": now() + 60, "aud": aud}), SECRET));
    for fine in [json!("seckill"), json!(["seckill"]), json!(["shop", "seckill"])] {
        assert!(verify(fine.clone()).is_ok(), "aud {fine}");
    }
    let refused = [
        json!("other"),
        json!("Seckill"),
        json!(["other"]),
        json!([]),
        json!(["seckill", 5]),
        json!([5]),
        json!(5),
        json!(true),
        json!({"seckill": true}),
        json!(null),
    ];
    for aud in refused {
        assert!(verify(aud.clone()).is_err(), "aud {aud}");
    }
}
