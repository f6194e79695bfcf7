//! Where Redis is and how to talk to it: one server (a self-reconnecting multiplexed connection)
//! or a Redis Cluster (redis-rs's async cluster client, which routes each command by its key's
//! slot, follows MOVED/ASK and refreshes the slot map after a failover).
//!
//! `SECKILL_REDIS_URL` names a single server as one `redis://` (or `rediss://`) URL, and a
//! cluster as its seed nodes: several comma-separated URLs, or one URL whose scheme is
//! `redis+cluster://` (`rediss+cluster://`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use secrecy::{ExposeSecret, SecretString};

mod shared;

pub use shared::{IDLE_PROBE, PurchaseConnection, SharedConnection};

/// A parsed `SECKILL_REDIS_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server's URL.
    Single(String),
    /// The seed nodes; the client learns the rest of the cluster from them.
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// Parses the URL (or URLs), or says what is wrong with it.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let urls: Vec<&str> = raw.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
        let plain = |url: &str| -> Result<String, String> {
            let url = url.replacen("redis+cluster://", "redis://", 1).replacen("rediss+cluster://", "rediss://", 1);
            match url.as_str().into_connection_info() {
                Ok(_) if url.starts_with("redis://") || url.starts_with("rediss://") => Ok(url),
                _ => Err("each URL must be a valid redis:// or rediss:// URL".to_owned()),
            }
        };
        match urls.as_slice() {
            [] => Err("SECKILL_REDIS_URL is empty".into()),
            [url] if url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://") => {
                Ok(Self::Cluster(vec![plain(url)?]))
            }
            [url] => Ok(Self::Single(plain(url)?)),
            many => many.iter().map(|u| plain(u)).collect::<Result<_, _>>().map(Self::Cluster),
        }
    }

    /// Every URL given: the server, or each seed node.
    pub fn urls(&self) -> &[String] {
        match self {
            Self::Single(url) => std::slice::from_ref(url),
            Self::Cluster(seeds) => seeds,
        }
    }
}

/// One server's connection or a cluster's; either way a cheap-to-clone multiplexed handle.
#[derive(Clone)]
pub enum RedisConnection {
    /// A single server's self-reconnecting connection.
    Single(Box<SingleServer>),
    /// A cluster's connection, replaced when it wedges.
    Cluster(HealingCluster),
}

/// A single server's self-reconnecting connection, and what opens another one like it.
#[derive(Clone)]
pub struct SingleServer {
    manager: ConnectionManager,
    client: redis::Client,
    config: ConnectionManagerConfig,
}

impl SingleServer {
    fn open(client: redis::Client, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(Self { manager, client, config })
    }
}

/// A cluster connection that is replaced by a fresh one when a command times out.
///
/// redis-rs 1.8.1's async cluster connection can wedge when a master restarts under concurrent
/// load: with 64 callers, every command after the restart hung (or, with an overall response
/// timeout set, timed out) for good, while a fresh connection works at once
/// (`tests/faults/cluster.rs`). So each command gets a deadline, and the first timeout of a
/// connection replaces it; commands already sent on the old one finish or time out there.
#[derive(Clone)]
pub struct HealingCluster {
    inner: Arc<HealingInner>,
}

struct HealingInner {
    client: ClusterClient,
    config: ClusterConfig,
    deadline: Duration,
    /// The connection in use and its generation (bumped by each replacement).
    current: RwLock<(u64, ClusterConnection)>,
}

impl HealingCluster {
    fn new(client: ClusterClient, config: ClusterConfig, deadline: Duration) -> Self {
        let connection = client.get_pending_async_connection_with_config(config.clone());
        Self { inner: Arc::new(HealingInner { client, config, deadline, current: RwLock::new((0, connection)) }) }
    }

    /// Another connection like this one, from the same client, lazily connected on first use on
    /// whichever runtime that is.
    fn fresh(&self) -> Self {
        let inner = &self.inner;
        Self::new(inner.client.clone(), inner.config.clone(), inner.deadline)
    }

    fn current(&self) -> (u64, ClusterConnection) {
        self.inner.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces generation `seen` (unless another caller already did).
    fn replace(&self, seen: u64) {
        let mut current = self.inner.current.write().unwrap_or_else(|e| e.into_inner());
        if current.0 == seen {
            tracing::warn!(generation = seen, "redis cluster command timed out; opening a fresh cluster connection");
            *current =
                (seen + 1, self.inner.client.get_pending_async_connection_with_config(self.inner.config.clone()));
        }
    }

    async fn run<T>(&self, call: impl AsyncFnOnce(&mut ClusterConnection) -> RedisResult<T>) -> RedisResult<T> {
        let (generation, mut connection) = self.current();
        match tokio::time::timeout(self.inner.deadline, call(&mut connection)).await {
            Ok(result) => result,
            Err(_) => {
                self.replace(generation);
                Err(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))
            }
        }
    }
}

impl RedisConnection {
    /// Whether this is a cluster's connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Another connection to the same server or cluster, with the same settings, that shares
    /// nothing with this one; lazily connected, its I/O on the runtime of its first use.
    fn fresh(&self) -> RedisResult<Self> {
        Ok(match self {
            Self::Single(server) => {
                Self::Single(Box::new(SingleServer::open(server.client.clone(), server.config.clone())?))
            }
            Self::Cluster(cluster) => Self::Cluster(cluster.fresh()),
        })
    }
}

/// Which master serves each slot of the cluster `con` talks to, from `CLUSTER SLOTS`.
pub async fn slot_masters(con: &mut impl ConnectionLike) -> RedisResult<SlotMasters> {
    let reply: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(con).await?;
    let ranges = reply.iter().filter_map(|range| match range.as_slice() {
        [Value::Int(start), Value::Int(end), Value::Array(master), ..] => match master.as_slice() {
            [host, Value::Int(port), ..] => {
                let host: String = redis::from_redis_value_ref(host).ok()?;
                Some((*start as u16, *end as u16, format!("{host}:{port}")))
            }
            _ => None,
        },
        _ => None,
    });
    Ok(SlotMasters(ranges.collect()))
}

/// A cluster's slot ranges and the master (`host:port`) serving each.
#[derive(Debug, Clone)]
pub struct SlotMasters(Vec<(u16, u16, String)>);

impl SlotMasters {
    /// The master serving `slot`, if the cluster said.
    pub fn master_of(&self, slot: u16) -> Option<String> {
        self.0.iter().find(|(start, end, _)| (*start..=*end).contains(&slot)).map(|(_, _, master)| master.clone())
    }
}

/// Opens a lazily connected, self-reconnecting connection whose commands time out after
/// `timeout` (the worker passes a longer one for its blocking reads). Must be called inside a
/// Tokio runtime. Fails only on a malformed URL: an unreachable Redis fails the first command.
pub fn connect(url: &SecretString, timeout: Duration) -> RedisResult<RedisConnection> {
    let target = RedisTarget::parse(url.expose_secret())
        .map_err(|e| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "SECKILL_REDIS_URL", e)))?;
    match target {
        RedisTarget::Single(url) => {
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(timeout))
                .set_connection_timeout(Some(timeout))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(500));
            Ok(RedisConnection::Single(Box::new(SingleServer::open(redis::Client::open(url)?, config)?)))
        }
        RedisTarget::Cluster(seeds) => {
            // Few, short retries: MOVED/ASK after a failover are followed within them, and a
            // request to a down master gets its 503 within a few timeouts. No overall response
            // timeout: with one set, 64 concurrent callers left the client timing out forever
            // after a master restart (tests/faults/cluster.rs found it; redis-rs 1.8.1).
            let client = ClusterClientBuilder::new(seeds).retries(3).min_retry_wait(10).max_retry_wait(200).build()?;
            let config = ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
            Ok(RedisConnection::Cluster(HealingCluster::new(client, config, timeout * 3)))
        }
    }
}

/// How much of Redis answers ([`RedisConnection::reach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The server, or the cluster with every slot served.
    All,
    /// A cluster that answers but says not every slot is served (a master is down): while it
    /// requires full coverage (Redis's default) it refuses every sale, else the sales in those
    /// slots; either way they answer 503.
    Some,
}

impl RedisConnection {
    /// Which part of Redis answers: an error when none of it does. A single server is PINGed. A
    /// cluster is asked its own view (`CLUSTER INFO` of the first master that answers), since its
    /// client's PING of every master skips a master it has lost the connection to, and so would
    /// report a down master as fine: every slot is served when the state is `ok` and no slot is
    /// failing (`cluster_slots_ok:16384`; with full coverage not required the state stays `ok`).
    /// The cluster marks a master failing once it has been silent for `cluster-node-timeout`.
    pub async fn reach(&mut self) -> RedisResult<Reach> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
        let cluster = match self {
            Self::Single(server) => {
                return redis::cmd("PING").query_async::<String>(&mut server.manager).await.map(|_| Reach::All);
            }
            Self::Cluster(cluster) => cluster,
        };
        let info = cluster
            .run(async move |con| {
                let any =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::OneSucceeded)));
                con.route_command(redis::cmd("CLUSTER").arg("INFO").clone(), any).await
            })
            .await?;
        let info: String = redis::from_redis_value(info)?;
        let field = |name: &str| info.lines().find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'));
        let served = field("cluster_state") == Some("ok") && field("cluster_slots_ok") == Some("16384");
        Ok(if served { Reach::All } else { Reach::Some })
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.manager.req_packed_command(cmd),
            Self::Cluster(c) => Box::pin(c.run(async move |con| con.req_packed_command(cmd).await)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.manager.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => {
                Box::pin(c.run(async move |con| con.req_packed_commands(pipeline, offset, count).await))
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.manager.get_db(),
            Self::Cluster(c) => c.current().1.get_db(),
        }
    }
}

/// True when a Redis error means "Redis is not reachable right now" rather than a bug. On a
/// cluster that includes MOVED/ASK/TRYAGAIN/CLUSTERDOWN still standing after the client's retries
/// (a master is down or its slots are moving) and a node the client cannot reach; anywhere, a
/// server that takes no writes for now (`READONLY`: a master demoted by a failover; `OOM`: at its
/// `maxmemory`).
pub fn is_redis_outage(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_cluster_error()
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(err.code(), Some("LOADING" | "MASTERDOWN" | "BUSY" | "READONLY" | "OOM"))
}

/// True when a failed call to one server is known never to have run there: the connection was
/// refused (nothing was sent), or Redis answered with an error it gives before running a command
/// at all (a script busy, a script unknown, the data still loading, a replica that takes no
/// writes, a cluster redirect, no authentication). Anything else (a timeout, a connection reset
/// or dropped after the call was queued, an error the script raised as it ran, a reply not
/// understood) may have followed the call's run: false. `NOPERM` among them: an ACL refuses a
/// command inside a script with it as well, after the script's writes before that command. Not
/// for a cluster's calls, which its client retries by itself (an attempt before the last one may
/// have run).
pub fn never_ran(err: &redis::RedisError) -> bool {
    err.is_connection_refusal()
        || err.is_cluster_error()
        || matches!(
            err.code(),
            Some("BUSY" | "NOSCRIPT" | "LOADING" | "MASTERDOWN" | "READONLY" | "CROSSSLOT" | "NOAUTH")
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_url_is_a_server_and_several_or_the_cluster_scheme_a_cluster() {
        assert_eq!(RedisTarget::parse("redis://h:1").unwrap(), RedisTarget::Single("redis://h:1".into()));
        assert_eq!(
            RedisTarget::parse("redis://a:1, redis://b:2,").unwrap(),
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(
            RedisTarget::parse("redis+cluster://:pw@a:1").unwrap(),
            RedisTarget::Cluster(vec!["redis://:pw@a:1".into()])
        );
        for bad in ["", " , ", "http://a:1", "redis://a:1,nonsense"] {
            assert!(RedisTarget::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_refused_connection_or_an_error_given_before_running_proves_a_call_never_ran() {
        use std::io::{Error, ErrorKind};
        assert!(never_ran(&Error::from(ErrorKind::ConnectionRefused).into()));
        for kind in [ErrorKind::TimedOut, ErrorKind::ConnectionReset, ErrorKind::BrokenPipe, ErrorKind::UnexpectedEof] {
            assert!(!never_ran(&Error::from(kind).into()), "{kind:?}");
        }
        assert!(!never_ran(&crate::redis::lua::unexpected_reply("buy.lua", "?")));
        let refused_inside = redis::make_extension_error(
            "NOPERM".to_owned(),
            Some("this user has no permissions to run the 'decrby' command".to_owned()),
        );
        assert_eq!(refused_inside.code(), Some("NOPERM"));
        assert!(!never_ran(&refused_inside), "an ACL's refusal may come after the script's writes");
    }

    #[test]
    fn a_server_that_takes_no_writes_for_now_is_an_outage_and_a_script_error_is_not() {
        for (code, detail) in [
            ("READONLY", "You can't write against a read only replica."),
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            ("LOADING", "Redis is loading the dataset in memory"),
        ] {
            let err = redis::make_extension_error(code.to_owned(), Some(detail.to_owned()));
            assert!(is_redis_outage(&err), "{code}: a 503, not a 500");
        }
        assert!(!is_redis_outage(&crate::redis::lua::unexpected_reply("buy.lua", "?")));
        let raised = redis::make_extension_error("ERR".to_owned(), Some("user_script:1: damaged".to_owned()));
        assert!(!is_redis_outage(&raised), "a script's own error is a bug, not an outage");
    }
}
