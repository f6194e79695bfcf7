//! Orders after the purchase: the queue of each sale's orders in Redis (`queue`) and the worker
//! that copies them into Postgres (`worker`).

pub mod queue;
pub mod worker;
