//! The five rate limiters: scripts against reference models, their edge behaviour, memory,
//! and what `/buy` answers with each.

mod against_models;
mod behaviour;
mod http;
mod models;
