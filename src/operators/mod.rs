//! Who operates: the admin credentials that name their holder. Each named operator has a role
//! (`viewer`: reads, the live page, exports; `operator`: everything) and a random token of which
//! seckill keeps only the SHA-256 hash (`SECKILL_OPERATORS_FILE` / `SECKILL_OPERATORS`, one
//! `name role sha256hex` per line; `seckill operator-token` makes both). `SECKILL_ADMIN_TOKEN`
//! stays an unnamed operator, recorded in the audit as [`ADMIN_TOKEN_ACTOR`]. A presented token is
//! hashed once and compared in constant time with every configured hash (docs/operators.md).

mod roster;
mod token;

use std::sync::Arc;

pub use self::roster::{MAX_OPERATORS, check_name, parse_roster};
pub use self::token::{hash_hex, new_token};

/// The audit's actor for the shared `SECKILL_ADMIN_TOKEN`, which names nobody.
pub const ADMIN_TOKEN_ACTOR: &str = "admin-token";

/// Names no operator may take: the audit's other actors.
pub const RESERVED_NAMES: [&str; 2] = [ADMIN_TOKEN_ACTOR, "janitor"];

/// What an operator may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Role {
    /// Reads: the live page, every `GET` of the admin API, the exports.
    Viewer,
    /// Everything a viewer does, and every write (seed, pause, stock, retire, webhooks, ...).
    Operator,
}

impl Role {
    /// The role as configured and as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
        }
    }

    /// `viewer` or `operator`.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "viewer" => Some(Self::Viewer),
            "operator" => Some(Self::Operator),
            _ => None,
        }
    }
}

/// Who presented a credential: the audit's actor and the role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The operator's name; `None` for the shared admin token.
    pub name: Option<String>,
    pub role: Role,
}

impl Signed {
    /// What the audit records: the name, or [`ADMIN_TOKEN_ACTOR`].
    pub fn actor(&self) -> &str {
        self.name.as_deref().unwrap_or(ADMIN_TOKEN_ACTOR)
    }
}

/// One configured operator: a name, a role and its token's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedOperator {
    pub name: String,
    pub role: Role,
    pub token_sha256: [u8; 32],
}

/// Every admin credential of this process, built once at start-up.
#[derive(Debug, Clone, Default)]
pub struct Operators {
    /// The credentials' hashes, each with who it signs in (the admin token's first, if set).
    credentials: Arc<[([u8; 32], Signed)]>,
}

impl Operators {
    /// The roster with the shared admin token (an unnamed operator) if one is set. Refuses a named
    /// operator whose hash is the admin token's: the two would be one credential.
    pub fn new(admin_token: Option<&str>, named: Vec<NamedOperator>) -> Result<Self, String> {
        let admin = admin_token.map(|t| (token::sha256(t), Signed { name: None, role: Role::Operator }));
        if let Some((hash, _)) = &admin
            && let Some(op) = named.iter().find(|op| op.token_sha256 == *hash)
        {
            return Err(format!(
                "operator {:?} has the hash of SECKILL_ADMIN_TOKEN: give it a token of its own",
                op.name
            ));
        }
        let credentials = admin
            .into_iter()
            .chain(named.into_iter().map(|op| (op.token_sha256, Signed { name: Some(op.name), role: op.role })))
            .collect();
        Ok(Self { credentials })
    }

    /// No credential configured: the admin routes are disabled.
    pub fn is_empty(&self) -> bool {
        self.credentials.is_empty()
    }

    /// Named operators configured (the admin token aside).
    pub fn named(&self) -> usize {
        self.credentials.iter().filter(|(_, s)| s.name.is_some()).count()
    }

    /// Who `presented` signs in, if anyone. The token is hashed once and its digest compared
    /// with every configured one in constant time, without stopping at a match: the time taken
    /// tells neither the token's length nor which entry, if any, it matched.
    pub fn identify(&self, presented: &str) -> Option<Signed> {
        if presented.is_empty() {
            return None; // no token: no one (a roster cannot name the empty token's hash either)
        }
        let digest = token::sha256(presented);
        let mut found = None;
        for (hash, signed) in self.credentials.iter() {
            let matched = constant_time_eq::constant_time_eq_32(&digest, hash);
            found = if matched && found.is_none() { Some(signed) } else { found };
        }
        found.cloned()
    }
}

#[cfg(test)]
mod tests;
