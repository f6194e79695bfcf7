//! Orders after the purchase: the worker that copies them from the streams into Postgres.

pub mod worker;
