//! The roster's text: one `name role sha256hex` per line (or per `;`-separated entry), blank
//! lines and `#` comments ignored.

use std::collections::HashSet;

use super::{NamedOperator, RESERVED_NAMES, Role};

/// Most named operators one roster may hold (each request compares its digest with every one).
pub const MAX_OPERATORS: usize = 1000;

/// Longest operator name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// A name an operator may take (the audit's actor): 1-64 characters of `[A-Za-z0-9_.@-]`, not a
/// reserved one.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = (1..=MAX_NAME_CHARS).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b));
    if !valid {
        return Err(format!("the name must be 1-{MAX_NAME_CHARS} characters of A-Z, a-z, 0-9, '_', '.', '@' or '-'"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!("{name:?} is reserved (the audit uses it for another actor)"));
    }
    Ok(())
}

/// The operators `text` names, or what is wrong, by line (never echoing a hash). `source` names
/// the text in errors (`SECKILL_OPERATORS_FILE /etc/...`).
pub fn parse_roster(text: &str, source: &str) -> Result<Vec<NamedOperator>, String> {
    let mut operators = Vec::new();
    let (mut names, mut hashes) = (HashSet::new(), HashSet::new());
    let entries = text.split(['\n', ';']).map(|l| l.split('#').next().unwrap_or_default().trim());
    for (n, entry) in entries.enumerate().filter(|(_, l)| !l.is_empty()) {
        let at = |what: String| format!("{source}, entry {}: {what}", n + 1);
        let fields: Vec<&str> = entry.split_whitespace().collect();
        let [name, role, hash] = fields[..] else {
            return Err(at(format!("expected `name role sha256hex`, got {} field(s)", fields.len())));
        };
        check_name(name).map_err(at)?;
        let role = Role::parse(role).ok_or_else(|| at(format!("role {role:?} is neither viewer nor operator")))?;
        let mut token_sha256 = [0u8; 32];
        hex::decode_to_slice(hash, &mut token_sha256)
            .map_err(|_| at("the hash must be 64 hex digits (the token's SHA-256)".into()))?;
        // A request without a bearer token presents the empty one: its hash would sign it in.
        if token_sha256 == super::token::sha256("") {
            return Err(at(format!("operator {name:?} has the hash of an empty token")));
        }
        if !names.insert(name.to_owned()) {
            return Err(at(format!("operator {name:?} is named twice")));
        }
        if !hashes.insert(token_sha256) {
            return Err(at(format!("operator {name:?} has the same token hash as another: one token per operator")));
        }
        if operators.len() == MAX_OPERATORS {
            return Err(at(format!("at most {MAX_OPERATORS} operators")));
        }
        operators.push(NamedOperator { name: name.to_owned(), role, token_sha256 });
    }
    Ok(operators)
}
