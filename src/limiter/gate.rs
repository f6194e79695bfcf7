//! One request's limits as the purchase runs them: where a limit counts ([`Scope`]) and the limit
//! for one key ([`Gate`]), checked in the purchase's own call (`lua/buy_limited.lua`) when its
//! key can share it, else in a call of its own.

use std::net::IpAddr;

use redis::RedisResult;
use redis::aio::ConnectionLike;

use super::{Decision, Policy};
use crate::domain::{SaleId, UserId};
use crate::redis::keys::{buyer_rate_limit_key, rate_limit_key, sale_buyer_rate_limit_key, sale_rate_limit_key};
use crate::redis::lua;

/// Where the limits count a client's (or buyer's) requests: `SECKILL_RATE_LIMIT_SCOPE`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// One count per client across every sale. The limits join the purchase's call on a single
    /// Redis server; on a Cluster each is a call of its own (its key has its own slot).
    Global,
    /// One count per client per sale, and per shard on a sharded sale: the keys share the hash
    /// tag of the shard the purchase's first call goes to (the buyer's home shard), so the limits
    /// join that call everywhere, a Cluster included: one call per purchase.
    #[default]
    Sale,
}

impl Scope {
    /// The name in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Sale => "sale",
        }
    }

    /// `policy`'s limit on `client` (its limiting address) for a request to `sale`.
    pub fn client_gate<'p>(self, policy: &'p Policy, prefix: &str, sale: &SaleId, client: IpAddr) -> Gate<'p> {
        let algorithm = policy.algorithm.name();
        let key = match self {
            Self::Global => return Gate::client_everywhere(policy, prefix, client),
            Self::Sale => sale_rate_limit_key(prefix, sale, algorithm, client),
        };
        Gate { policy, key }
    }

    /// `policy`'s limit on the buyer `user` for a request to `sale`.
    pub fn buyer_gate<'p>(self, policy: &'p Policy, prefix: &str, sale: &SaleId, user: &UserId) -> Gate<'p> {
        let algorithm = policy.algorithm.name();
        let key = match self {
            Self::Global => buyer_rate_limit_key(prefix, algorithm, user),
            Self::Sale => sale_buyer_rate_limit_key(prefix, sale, algorithm, user),
        };
        Gate { policy, key }
    }
}

/// One limit on one key, for one request.
#[derive(Debug, Clone)]
pub struct Gate<'p> {
    /// The policy.
    pub policy: &'p Policy,
    /// The key it counts under.
    pub key: String,
}

impl<'p> Gate<'p> {
    /// `policy`'s limit on `client` across every sale, whatever the scope (the `global` scope's
    /// key): where requests naming sales that do not exist are counted.
    pub fn client_everywhere(policy: &'p Policy, prefix: &str, client: IpAddr) -> Self {
        Gate { policy, key: rate_limit_key(prefix, policy.algorithm.name(), client) }
    }

    /// The gate as it counts on the shard whose hash tag is `shard_tag`: a key of the sale's shard
    /// 0 (under `<prefix>:{<sale_tag>}:`, the `sale` scope) moves to that shard's slot, so it joins
    /// the purchase's call there; any other key stays. Only the sale's own keys: a `global` key
    /// whose buyer's id happens to read as the sale's tag (`user:{sale:demo}`) is that buyer's,
    /// and moved it would be the key of the buyer `sale:demo:<shard>`.
    pub fn on_shard(&self, prefix: &str, sale_tag: &str, shard_tag: &str) -> Gate<'p> {
        let key = match self.key.strip_prefix(&format!("{prefix}:{{{sale_tag}}}:")) {
            Some(rest) => format!("{prefix}:{{{shard_tag}}}:{rest}"),
            None => self.key.clone(),
        };
        Gate { policy: self.policy, key }
    }

    /// Checks the limit in a call of its own (the limiter's script alone).
    pub async fn check(&self, con: &mut impl ConnectionLike, nonce: &str) -> RedisResult<Decision> {
        let reply = lua::run(&self.policy.invocation(&self.key, nonce, None), con).await?;
        Ok(Decision::from_reply(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Algorithm, RateLimit};

    #[test]
    fn only_the_sales_own_keys_move_to_a_shard() {
        let rate = RateLimit { limit: 1, window: std::time::Duration::from_secs(60) };
        let policy = Policy::new(Algorithm::Gcra, rate, None).unwrap();
        let sale = SaleId::parse("demo").unwrap();
        let moved = |scope: Scope, user: &str| {
            let gate = scope.buyer_gate(&policy, "p", &sale, &UserId::parse(user).unwrap());
            (gate.key.clone(), gate.on_shard("p", "sale:demo", "sale:demo:3").key)
        };
        let (before, after) = moved(Scope::Sale, "ann");
        assert_eq!(
            (before.as_str(), after.as_str()),
            ("p:{sale:demo}:ratelimit:gcra:user:ann", "p:{sale:demo:3}:ratelimit:gcra:user:ann")
        );
        // A buyer whose id reads as the sale's tag keeps its own global key, not that of the
        // buyer "sale:demo:3".
        for user in ["sale:demo", "sale:demo}:x"] {
            let (before, after) = moved(Scope::Global, user);
            assert_eq!(before, after, "{user}");
        }
    }
}
