//! Dedicated connections for purchases that wait for replicas (`SECKILL_CONFIRM_REPLICAS`).
//!
//! `WAIT N timeout` counts the replicas that acknowledged every write *of the connection it is
//! sent on*, and blocks that connection meanwhile. So the purchase script and its `WAIT` must run
//! on one connection that nobody else uses in between: not the shared multiplexed connection,
//! where other requests' commands would queue behind the `WAIT`. [`ConfirmPool`] keeps a few such
//! connections (one purchase each at a time); one that failed is dropped, not reused, because a
//! timed-out command may still be running on it.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Up to `size` dedicated connections to one Redis server, and how many replicas a purchase
/// waits for, for how long.
pub struct ConfirmPool {
    client: Client,
    config: AsyncConnectionConfig,
    /// Connections not in use.
    idle: Mutex<Vec<MultiplexedConnection>>,
    /// One permit per connection that may be open.
    permits: Semaphore,
    /// Where the connections' I/O tasks run: the process's main runtime, which outlives the
    /// HTTP workers' (see `SharedConnection`).
    home: tokio::runtime::Handle,
    /// How long a caller waits for a free connection.
    timeout: Duration,
    /// Replicas a purchase waits for.
    pub replicas: u32,
    /// The longest wait for them.
    pub wait: Duration,
}

impl ConfirmPool {
    /// A pool of `size` connections to the server at `url` (opened when first needed), whose
    /// commands time out after `timeout`. Must be called on the runtime that outlives its users.
    pub fn new(url: &str, size: usize, timeout: Duration, replicas: u32, wait: Duration) -> RedisResult<Self> {
        let config =
            AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout));
        Ok(Self {
            client: Client::open(url)?,
            config,
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
            home: tokio::runtime::Handle::current(),
            timeout,
            replicas,
            wait,
        })
    }

    /// A connection for this caller alone, once one is free (at most the command timeout).
    pub async fn get(&self) -> RedisResult<Dedicated<'_>> {
        let timed_out = || redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let permit = tokio::time::timeout(self.timeout, self.permits.acquire())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| timed_out())?;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let (client, config) = (self.client.clone(), self.config.clone());
                let opening =
                    self.home.spawn(async move { client.get_multiplexed_async_connection_with_config(&config).await });
                opening.await.map_err(|e| {
                    redis::RedisError::from((redis::ErrorKind::Io, "redis connect aborted", e.to_string()))
                })??
            }
        };
        Ok(Dedicated { conn, pool: self, in_flight: false, broken: false, _permit: permit })
    }
}

/// One pooled connection, back in the pool when dropped unless a command on it failed.
pub struct Dedicated<'a> {
    conn: MultiplexedConnection,
    pool: &'a ConfirmPool,
    /// A command was sent and its answer not (yet) received.
    in_flight: bool,
    /// A command failed without an answer from Redis (a timeout, a broken connection).
    broken: bool,
    _permit: SemaphorePermit<'a>,
}

impl Dedicated<'_> {
    /// `WAIT replicas timeout`: how many replicas acknowledged this connection's writes.
    pub async fn wait_for_replicas(&mut self) -> RedisResult<u32> {
        let (replicas, wait) = (self.pool.replicas, self.pool.wait.as_millis().max(1) as u64);
        redis::cmd("WAIT").arg(replicas).arg(wait).query_async(self).await
    }

    /// Keeps the connection for reuse only after an answer from Redis (a reply or a Redis
    /// error); not after a timeout or a broken connection, nor when the caller gave up mid-command
    /// (the request was dropped), since a command may still be running on it.
    fn note<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        self.in_flight = false;
        if let Err(err) = &result {
            self.broken |= err.code().is_none();
        }
        result
    }
}

impl Drop for Dedicated<'_> {
    fn drop(&mut self) {
        if !self.in_flight && !self.broken {
            self.pool.idle.lock().unwrap_or_else(|e| e.into_inner()).push(self.conn.clone());
        }
    }
}

impl ConnectionLike for Dedicated<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.in_flight = true;
            let result = self.conn.req_packed_command(cmd).await;
            self.note(result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.in_flight = true;
            let result = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.note(result)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
