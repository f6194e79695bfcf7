//! The HTTP API: routes, the error type and its mapping, the client address.

pub mod client_ip;
pub mod error;
pub mod routes;
