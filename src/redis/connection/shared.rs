//! The connection the request path shares ([`SharedConnection`]), the purchase path's per-thread
//! connections ([`PurchaseConnection`]) and the idle probe ([`IDLE_PROBE`]) both use.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::{Reach, RedisConnection};

/// The connection the request path shares, its I/O always owned by the runtime that created it.
///
/// actix-web serves each worker thread from a runtime of its own, and the connection manager
/// spawns its connection's I/O task on the runtime of whichever call (re)connects: on a worker's
/// runtime, that task would die when actix stops that worker at shutdown, breaking the connection
/// for the requests the other workers are still finishing. So every command's future is polled
/// with the home runtime entered ([`OnHome`]): whatever it spawns (the I/O task of a new
/// connection, the cluster client's) is spawned there, while the command itself runs on the
/// caller's task, with no hop to another task and back.
///
/// The purchase path may instead use a connection of the HTTP worker's own
/// ([`SharedConnection::for_purchase`]).
#[derive(Clone)]
pub struct SharedConnection {
    inner: RedisConnection,
    home: tokio::runtime::Handle,
    /// What opens a thread's own connection for the purchase path.
    local: Arc<LocalSource>,
    /// When a command last ran on it (see [`IDLE_PROBE`]).
    last_used: Arc<UseClock>,
}

impl SharedConnection {
    /// Spawns `conn`'s tasks on the current Tokio runtime (which must outlive its users).
    pub fn on_current_runtime(conn: RedisConnection) -> Self {
        let local = Arc::new(LocalSource { id: NEXT_SOURCE.fetch_add(1, Ordering::Relaxed), origin: conn.clone() });
        Self { inner: conn, home: tokio::runtime::Handle::current(), local, last_used: Arc::default() }
    }

    /// The connection a purchase runs on. Called on a runtime other than the home one (an actix
    /// HTTP worker's), it is that thread's own connection (to the single server, or its own
    /// cluster connection), opened on first use: its I/O tasks run on the worker's runtime, so a
    /// command and its answer do not cross threads (about 0.87 x the app's CPU per purchase on a
    /// single server, measured; docs/benchmarks.md for the Cluster). Only that worker's requests
    /// use it, so it lives as long as they need it. Otherwise it is the shared connection.
    pub async fn for_purchase(&self) -> PurchaseConnection {
        let on_a_worker = tokio::runtime::Handle::try_current().is_ok_and(|current| current.id() != self.home.id());
        match Some(&self.local).filter(|_| on_a_worker).and_then(|source| source.thread_connection()) {
            Some((mut manager, idle)) => {
                probe_if(idle, &mut manager).await;
                PurchaseConnection::Local(manager)
            }
            None => PurchaseConnection::Shared(Box::new(self.clone())),
        }
    }

    /// `call` on the inner connection, after the idle probe, polled with the home runtime
    /// entered ([`OnHome`]).
    fn on_home<'a, T: 'a>(
        &'a mut self,
        call: impl AsyncFnOnce(&mut RedisConnection) -> RedisResult<T> + 'a,
    ) -> OnHome<impl Future<Output = RedisResult<T>> + Unpin + 'a> {
        let idle = self.last_used.idle();
        let inner = &mut self.inner;
        OnHome {
            home: self.home.clone(),
            call: Box::pin(async move {
                probe_if(idle, inner).await;
                call(inner).await
            }),
        }
    }

    /// The runtime the connection's I/O lives on (the process's main one), which outlives the
    /// HTTP workers' runtimes.
    pub fn home(&self) -> &tokio::runtime::Handle {
        &self.home
    }

    /// Whether the connection is a cluster's.
    pub fn is_cluster(&self) -> bool {
        self.inner.is_cluster()
    }

    /// Which part of Redis answers ([`RedisConnection::reach`]).
    pub async fn reach(&mut self) -> RedisResult<Reach> {
        self.on_home(async move |con| con.reach().await).await
    }
}

impl ConnectionLike for SharedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.on_home(async move |con| con.req_packed_command(cmd).await))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.on_home(async move |con| con.req_packed_commands(pipeline, offset, count).await))
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// A purchase's connection ([`SharedConnection::for_purchase`]).
pub enum PurchaseConnection {
    /// The shared connection.
    Shared(Box<SharedConnection>),
    /// The calling HTTP worker's own connection (to the single server, or to the cluster).
    Local(RedisConnection),
}

impl ConnectionLike for PurchaseConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Shared(c) => c.req_packed_command(cmd),
            Self::Local(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Shared(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Local(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Shared(c) => c.get_db(),
            Self::Local(c) => c.get_db(),
        }
    }
}

/// A connection unused this long is probed with a PING before its next command: redis-rs
/// notices a dropped connection only when a command on it fails, so after a Redis restart the
/// first command on a connection idle during the outage (an HTTP worker's own, or the shared one
/// when purchases run on those) would fail with a 503. The PING takes that failure, which starts
/// the reconnection the command then waits for; the command itself is never sent twice.
pub const IDLE_PROBE: Duration = Duration::from_secs(1);

/// PINGs `con` if `idle`; the answer does not matter (see [`IDLE_PROBE`]).
async fn probe_if(idle: bool, con: &mut impl ConnectionLike) {
    if idle {
        let _: RedisResult<Value> = redis::cmd("PING").query_async(con).await;
    }
}

/// When a shared connection last ran a command, in milliseconds since [`EPOCH`].
#[derive(Default)]
struct UseClock(AtomicU64);

/// The origin of [`UseClock`]'s readings.
static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

impl UseClock {
    /// Records a use now; true if the previous one was [`IDLE_PROBE`] or more ago (or never).
    fn idle(&self) -> bool {
        let now = EPOCH.elapsed().as_millis() as u64 + 1;
        let before = self.0.swap(now, Ordering::Relaxed);
        before == 0 || now.saturating_sub(before) >= IDLE_PROBE.as_millis() as u64
    }
}

/// Ids of [`LocalSource`]s: a thread may serve several deployments (the tests run many apps in
/// one process), each with connections of its own.
static NEXT_SOURCE: AtomicU64 = AtomicU64::new(0);

/// Opens the per-thread connections that stand in for one shared connection.
struct LocalSource {
    id: u64,
    /// The shared connection, whose settings each thread's own connection copies.
    origin: RedisConnection,
}

/// A thread's own connection and when it was last handed out.
struct ThreadConnection {
    source: u64,
    manager: RedisConnection,
    last_used: Instant,
}

thread_local! {
    /// This thread's own connections, one per [`LocalSource`] it has served (one, in the service).
    static THREAD_CONNECTIONS: RefCell<Vec<ThreadConnection>> = const { RefCell::new(Vec::new()) };
}

impl LocalSource {
    /// This thread's connection (opened lazily on the current runtime) and whether it sat unused
    /// for [`IDLE_PROBE`]; `None` if it cannot be opened (the shared one serves then).
    fn thread_connection(&self) -> Option<(RedisConnection, bool)> {
        THREAD_CONNECTIONS.with_borrow_mut(|connections| {
            let now = Instant::now();
            if let Some(known) = connections.iter_mut().find(|c| c.source == self.id) {
                let idle = now.duration_since(known.last_used) >= IDLE_PROBE;
                known.last_used = now;
                return Some((known.manager.clone(), idle));
            }
            let manager = self.origin.fresh().ok()?;
            connections.push(ThreadConnection { source: self.id, manager: manager.clone(), last_used: now });
            Some((manager, false))
        })
    }
}

/// A future polled with the `home` runtime entered: `tokio::spawn` (and any timer or socket
/// created) inside `call` lands on `home`, whichever runtime polls it. The guard is taken and
/// dropped within each poll, so guards always nest.
struct OnHome<F> {
    home: tokio::runtime::Handle,
    call: F,
}

impl<F: Future + Unpin> Future for OnHome<F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.home.enter();
        std::pin::Pin::new(&mut this.call).poll(cx)
    }
}
