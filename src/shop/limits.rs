//! The rate limits a buyer's request passes before it touches a sale: the client's address
//! limit, then the buyer's (if one is set), counted as `SECKILL_RATE_LIMIT_SCOPE` says. A
//! purchase checks them in its own script call ([`Meter::gates`], then [`Meter::settle`] of their
//! decisions); the other buyer routes in calls of their own ([`Meter::check`]). A limit that
//! refused a client (or buyer) lately answers from memory until it could admit it again; if a
//! limit cannot answer, the request is refused (fail closed). [`Limited`] is what a limited use
//! case answers: its outcome, and the decision its `RateLimit` fields report.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use uuid::Uuid;

use super::Error;
use crate::domain::{SaleId, UserId};
use crate::limiter::local::LocalLimiter;
use crate::limiter::{self, Decision, Gate, Limiter, Policy, Scope};
use crate::metrics::Metrics;
use crate::redis::Keyspace;

/// The limits of the buyer routes, built once per process.
pub struct Limits {
    /// The per-client-address limiter and the clients it refused lately.
    pub address: Limiter,
    /// The per-buyer limiter, if a per-buyer limit is set.
    pub buyer: Option<Limiter>,
    /// Where the limits count.
    pub scope: Scope,
    /// The in-process limit on answers from memory (a sale known sold out or retired).
    pub from_memory: LocalLimiter,
    /// The in-process per-client limit on proofs of work checked (each check costs two HMACs):
    /// the address limit's rate, asked before a proof is checked, so a client sending bogus
    /// solutions is refused at the cost of a table lookup.
    pub proof_checks: LocalLimiter,
    /// The in-process per-client quota of requests naming sales that exist nowhere, at the
    /// address limit's rate, whatever the scope: inventing sale ids buys no fresh quota, and
    /// costs Redis nothing.
    pub unknown_sales: LocalLimiter,
}

impl Limits {
    /// The `RateLimit-Policy` field of each limit: the address's, and the buyer's if set.
    pub fn policy_fields(&self) -> (String, Option<String>) {
        (self.address.policy.policy_field(), self.buyer.as_ref().map(|b| b.policy.policy_field()))
    }

    /// The in-process per-client limit on proofs of work checked.
    pub(super) fn check_proof(&self, metrics: &Metrics, client: IpAddr) -> Result<(), Error> {
        self.proof_checks.check(client).map_err(|wait| {
            metrics.limiter_decision("proof_check_refused");
            rate_limited(wait)
        })
    }

    /// The in-process per-client limit on answers from memory.
    pub(super) fn answer_from_memory(&self, metrics: &Metrics, client: IpAddr) -> Result<(), Error> {
        self.from_memory.check(client).map_err(|wait| {
            metrics.limiter_decision("sold_out_refused");
            rate_limited(wait)
        })
    }
}

/// Which limit decided, so which one the `RateLimit` fields describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The per-client-address limit.
    Address,
    /// The per-buyer limit.
    Buyer,
}

/// The decision a limited answer reports: whose, and its `RateLimit` field (`"buy";r=19;t=1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// The limit closer to refusing: the one that refused, or the one with fewer requests left.
    pub limit: Limit,
    /// The `RateLimit` field of its decision.
    pub state: String,
}

/// A rate-limited use case's answer: the outcome, and the decision to report (`None` when no
/// limit decided: an answer from memory before the limiters, or a malformed request).
#[derive(Debug)]
pub struct Limited<T> {
    /// What the use case did or why not.
    pub outcome: Result<T, Error>,
    /// The limit decision its `RateLimit` fields report.
    pub reported: Option<Reported>,
}

/// One request's pass through the limits: the gates it checks and the decision to report.
pub(super) struct Meter<'a> {
    limits: &'a Limits,
    metrics: &'a Metrics,
    decided: Option<(Limit, Decision)>,
}

impl<'a> Meter<'a> {
    pub(super) fn new(limits: &'a Limits, metrics: &'a Metrics) -> Self {
        Self { limits, metrics, decided: None }
    }

    /// The request's limits for a purchase to check in its own call: the client's address
    /// limit, then the buyer's (if set). A limit that refused this key lately answers 429 from
    /// memory instead.
    pub(super) fn gates(
        &mut self,
        prefix: &str,
        client: IpAddr,
        user: &UserId,
        sale: &SaleId,
    ) -> Result<Vec<Gate<'a>>, Error> {
        let (limits, metrics) = (self.limits, self.metrics);
        let address = limits.scope.client_gate(&limits.address.policy, prefix, sale, client);
        if let Some(refusal) = limits.address.remembered(&address.key) {
            metrics.limiter_decision("refused_from_memory");
            self.decided = Some((Limit::Address, refusal));
            return Err(rate_limited(refusal.retry_after));
        }
        let mut gates = vec![address];
        if let Some(buyers) = &limits.buyer {
            let buyer = limits.scope.buyer_gate(&buyers.policy, prefix, sale, user);
            if let Some(refusal) = buyers.remembered(&buyer.key) {
                metrics.limiter_decision("buyer_refused_from_memory");
                self.decided = Some((Limit::Buyer, refusal));
                return Err(rate_limited(refusal.retry_after));
            }
            gates.push(buyer);
        }
        Ok(gates)
    }

    /// The decisions of the [`Self::gates`] (as many as were checked, in order), asked at
    /// `asked`: a refusal answers 429 and is remembered.
    pub(super) fn settle(&mut self, gates: &[Gate<'_>], asked: Instant, decisions: &[Decision]) -> Result<(), Error> {
        let (limits, metrics) = (self.limits, self.metrics);
        if let (Some(decision), Some(gate)) = (decisions.first(), gates.first()) {
            self.decided = Some((Limit::Address, *decision));
            if !decision.allowed {
                metrics.limiter_decision("refused");
                limits.address.remember(&gate.key, asked, decision);
                return Err(rate_limited(decision.retry_after));
            }
        }
        if let (Some(decision), Some(gate), Some(buyers)) = (decisions.get(1), gates.get(1), &limits.buyer) {
            if !decision.allowed {
                metrics.limiter_decision("buyer_refused");
                self.decided = Some((Limit::Buyer, *decision));
                buyers.remember(&gate.key, asked, decision);
                return Err(rate_limited(decision.retry_after));
            }
            // The fields describe the limit closer to refusing.
            if self.decided.is_none_or(|(_, address)| decision.remaining < address.remaining) {
                self.decided = Some((Limit::Buyer, *decision));
            }
        }
        metrics.limiter_decision("allowed");
        Ok(())
    }

    /// The limits checked one by one, each in a call of its own (for a route that buys nothing).
    pub(super) async fn check(
        &mut self,
        keyspace: &Keyspace,
        client: IpAddr,
        user: &UserId,
        sale: &SaleId,
    ) -> Result<(), Error> {
        let gates = self.gates(keyspace.prefix(), client, user, sale)?;
        self.run(keyspace, &gates).await
    }

    /// A request that names a sale that does not exist: it counts against the client's quota of
    /// such requests ([`Limits::unknown_sales`]); past it, 429.
    pub(super) fn check_unknown_sale(&self, client: IpAddr) -> Result<(), Error> {
        self.limits.unknown_sales.check(client).map_err(|wait| {
            self.metrics.limiter_decision("unknown_sale_refused");
            rate_limited(wait)
        })
    }

    /// Whether the client's quota of requests naming unknown sales refused it and it must still
    /// wait (memory only, nothing spent).
    pub(super) fn unknown_sales_refused(&self, client: IpAddr) -> Option<Duration> {
        self.limits.unknown_sales.refused(client)
    }

    /// `gates` checked one by one, each in a call of its own, until one refuses.
    async fn run(&mut self, keyspace: &Keyspace, gates: &[Gate<'a>]) -> Result<(), Error> {
        let (asked, nonce) = (Instant::now(), Uuid::now_v7().simple().to_string());
        let mut decisions = Vec::with_capacity(gates.len());
        for gate in gates {
            let decision = gate.check(&mut keyspace.conn(), &nonce).await.context("rate limiter").map_err(|err| {
                self.metrics.limiter_decision("error");
                Error::Unavailable(err)
            })?;
            decisions.push(decision);
            if !decision.allowed {
                break;
            }
        }
        self.settle(gates, asked, &decisions)
    }

    /// The use case's answer with the decision to report.
    pub(super) fn finish<T>(self, outcome: Result<T, Error>) -> Limited<T> {
        let policy = |limit| match limit {
            Limit::Buyer => self.limits.buyer.as_ref().map_or(&self.limits.address.policy, |b| &b.policy),
            Limit::Address => &self.limits.address.policy,
        };
        let reported = self
            .decided
            .map(|(limit, decision)| Reported { limit, state: Policy::state_field(policy(limit), &decision) });
        Limited { outcome, reported }
    }
}

/// 429 with the wait in whole seconds, rounded up (at least 1).
pub(super) fn rate_limited(wait: Duration) -> Error {
    Error::RateLimited { retry_after_secs: limiter::ceil_secs(wait).max(1) }
}
