use super::*;

const ADMIN: &str = "an-admin-token-of-at-least-32-bytes!";

fn roster(lines: &str) -> Result<Vec<NamedOperator>, String> {
    parse_roster(lines, "test")
}

#[test]
fn a_named_token_signs_in_its_operator_with_its_role_and_the_admin_token_an_unnamed_operator() {
    let (alice, bob) = (new_token().unwrap(), new_token().unwrap());
    assert!(alice.starts_with("sko_") && alice.len() == 4 + 43 && alice != bob);
    let text = format!("# ops\nalice viewer {}\n\n  bob operator {}  # on call\n", hash_hex(&alice), hash_hex(&bob));
    let operators = Operators::new(Some(ADMIN), roster(&text).unwrap()).unwrap();
    assert_eq!(operators.named(), 2);
    let signed = operators.identify(&alice).unwrap();
    assert_eq!((signed.actor(), signed.role), ("alice", Role::Viewer));
    assert_eq!(operators.identify(&bob).unwrap().role, Role::Operator);
    let admin = operators.identify(ADMIN).unwrap();
    assert_eq!((admin.name.as_deref(), admin.actor(), admin.role), (None, ADMIN_TOKEN_ACTOR, Role::Operator));
    for wrong in ["", "sko_", &alice[..alice.len() - 1], &hash_hex(&alice), &format!("{alice} ")] {
        assert_eq!(operators.identify(wrong), None, "{wrong:?}");
    }
}

#[test]
fn the_inline_form_separates_entries_with_semicolons_and_an_empty_roster_disables_nothing_else() {
    let text = format!("carol viewer {}; dave operator {}", hash_hex("c"), hash_hex("d"));
    assert_eq!(roster(&text).unwrap().len(), 2);
    assert!(roster("").unwrap().is_empty());
    assert!(Operators::new(None, vec![]).unwrap().is_empty());
    assert!(!Operators::new(Some(ADMIN), vec![]).unwrap().is_empty());
}

#[test]
fn a_bad_roster_is_refused_by_entry_without_echoing_the_hash() {
    let h = hash_hex("x");
    let cases = [
        ("alice viewer".to_owned(), "entry 1: expected"),
        (format!("alice admin {h}"), "neither viewer nor operator"),
        (format!("al ice viewer {h}"), "expected"),
        (format!("al/ice viewer {h}"), "the name must be"),
        (format!("{} viewer {h}", "a".repeat(65)), "the name must be"),
        (format!("janitor operator {h}"), "reserved"),
        (format!("admin-token operator {h}"), "reserved"),
        (format!("alice viewer {}", &h[1..]), "64 hex digits"),
        (format!("alice viewer {h}\nalice operator {}", hash_hex("y")), "entry 2: operator \"alice\" is named twice"),
        (format!("alice viewer {h}\nbob operator {h}"), "same token hash"),
        (format!("alice viewer {}", hash_hex("")), "the hash of an empty token"),
    ];
    for (text, expected) in cases {
        let err = roster(&text).unwrap_err();
        assert!(err.contains(expected), "{text}: {err}");
        assert!(!err.contains(&h[..16]), "echoes the hash: {err}");
    }
    let too_many: String =
        (0..=MAX_OPERATORS).map(|i| format!("op{i} viewer {}\n", hash_hex(&i.to_string()))).collect();
    assert!(roster(&too_many).unwrap_err().contains("at most 1000"));
}

#[test]
fn a_named_operator_may_not_hold_the_admin_tokens_hash() {
    let named = roster(&format!("eve operator {}", hash_hex(ADMIN))).unwrap();
    assert!(Operators::new(Some(ADMIN), named).unwrap_err().contains("\"eve\""));
}
