//! The worker's report on its order streams ([`WorkerReport`]), as `/readyz` and the admin
//! overview show it (read back too: the overview, which holds it, is `Deserialize`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::shop::lower::streams;

/// What the worker last found of one order stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// The stream and its consumer group are there: read every step.
    Ready,
    /// The stream key is gone while the sale's meta is there: skipped (a buy recreates the
    /// stream, and the next survey its group).
    StreamMissing,
    /// The key holds something else than a stream, or reading it fails: skipped.
    Unreadable,
    /// The sale's meta is gone from Redis (an operator's clean-up, an eviction, a failover): the
    /// sale cannot sell; orders still in its stream, if any, are still read.
    Lost,
}

impl From<streams::StreamState> for StreamState {
    fn from(state: streams::StreamState) -> Self {
        use streams::StreamState as Lower;
        match state {
            Lower::Ready => Self::Ready,
            Lower::StreamMissing => Self::StreamMissing,
            Lower::Unreadable => Self::Unreadable,
            Lower::Lost => Self::Lost,
        }
    }
}

/// A stream the worker skips or cannot fully serve, as `/readyz` and the admin overview show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StreamProblem {
    /// The sale the stream belongs to.
    pub sale: String,
    /// The stream's key (a sharded sale has one per shard).
    pub stream: String,
    pub state: StreamState,
    /// What the worker found, for an operator.
    pub detail: String,
}

impl From<streams::StreamProblem> for StreamProblem {
    fn from(streams::StreamProblem { sale, stream, state, detail }: streams::StreamProblem) -> Self {
        Self { sale, stream, state: state.into(), detail }
    }
}

/// The worker's report: `ok` when every stream is ready, else `degraded` with the problems (the
/// service still sells the other sales).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkerReport {
    /// `ok` or `degraded`.
    pub status: String,
    pub problems: Vec<StreamProblem>,
}

impl From<streams::WorkerReport> for WorkerReport {
    fn from(streams::WorkerReport { status, problems }: streams::WorkerReport) -> Self {
        Self { status, problems: problems.into_iter().map(StreamProblem::from).collect() }
    }
}
