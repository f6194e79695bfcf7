//! Throwaway servers for seckill's tests and tools: a Redis, a Postgres and a 3-master Redis
//! Cluster on free loopback ports in a temp dir, stopped by PID. Both `cargo xtask` and the
//! integration tests start and reach servers through this crate, so there is one implementation
//! of the server lifecycle and no environment-variable contract between two languages.
