//! The client's side, for scripts and tests (`seckill solve`): solve a challenge of
//! `GET /sales/{id}/challenge` with the altcha crate's solver and make the `Seckill-Challenge`
//! header's value, as the buyer page's Web Worker does (docs/waiting-room.md, "Solving it
//! outside a browser").

use std::time::{Duration, Instant};

use altcha::{Challenge, Payload, SolveChallengeOptions};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// A challenge solved.
#[derive(Debug, Clone)]
pub struct Solved {
    /// The `Seckill-Challenge` header's value: the ALTCHA payload, base64 of its JSON.
    pub header: String,
    /// The counter found (the solver tries 0, 1, 2, … in turn).
    pub counter: u32,
    /// How long the solve took.
    pub took: Duration,
}

impl Solved {
    /// The derivations it took: the counter found, plus one.
    pub fn tries(&self) -> u64 {
        u64::from(self.counter) + 1
    }
}

/// Why a challenge was not solved.
#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    #[error("not a challenge of GET /sales/{{sale_id}}/challenge: {0}")]
    NotAChallenge(#[from] serde_json::Error),
    #[error("the challenge cannot be solved: {0}")]
    Unsolvable(String),
    #[error("no solution within {0:?}")]
    TimedOut(Duration),
}

/// Solves `answer`, the JSON body of `GET /sales/{id}/challenge` (its `parameters` and
/// `signature`; the other fields are ignored), trying counters from 0 up for at most `timeout`.
pub fn solve(answer: &[u8], timeout: Duration) -> Result<Solved, SolveError> {
    let challenge: Challenge = serde_json::from_slice(answer)?;
    let started = Instant::now();
    let mut options = SolveChallengeOptions::new(&challenge);
    options.timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1);
    let solution = altcha::solve_challenge(options)
        .map_err(|err| SolveError::Unsolvable(err.to_string()))?
        .ok_or(SolveError::TimedOut(timeout))?;
    let counter = solution.counter;
    let payload = serde_json::to_vec(&Payload { challenge, solution })?;
    Ok(Solved { header: STANDARD.encode(payload), counter, took: started.elapsed() })
}
