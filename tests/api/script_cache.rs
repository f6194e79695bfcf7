//! Running scripts by SHA when they keep disappearing (SCRIPT FLUSH, restarts, failovers).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
use seckill::redis::connection::RedisConnection;
use seckill::redis::lua;
use secrecy::SecretString;

use crate::helpers::PrivateRedis;

/// A connection that runs SCRIPT FLUSH just before each of its first `flushes` EVALSHA calls,
/// as if an operator flushed the scripts at the worst possible moment, again and again.
struct FlushingConnection {
    inner: RedisConnection,
    flushes: usize,
}

impl ConnectionLike for FlushingConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let is_evalsha = matches!(cmd.args_iter().next(), Some(Arg::Simple(name)) if name == b"EVALSHA");
            if is_evalsha && self.flushes > 0 {
                self.flushes -= 1;
                redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(&mut self.inner).await?;
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test]
async fn a_script_flushed_again_between_its_reload_and_its_retry_still_runs() {
    // A Redis of its own: a flush of the shared one would take the scripts of every test running
    // beside it, twice in a row, more than a caller that reloads once survives.
    let private = PrivateRedis::start();
    let inner =
        seckill::redis::connection::connect(&SecretString::from(private.url()), Duration::from_secs(5)).unwrap();
    // A script no other test runs: a concurrent test that loads a shared script (every /buy loads
    // the limiter) between our flush and our EVALSHA would make the first call pass by luck.
    let tag = uuid::Uuid::now_v7().simple().to_string();
    let script = redis::Script::new(&format!("-- {tag}\nreturn redis.call('INCR', KEYS[1])"));
    let key = format!("test-{tag}:script:{{{tag}}}");
    let mut counter = script.prepare_invoke();
    counter.key(&key);

    // redis-rs alone reloads once: a flush before both its EVALSHAs fails the call.
    let mut twice = FlushingConnection { inner: inner.clone(), flushes: 2 };
    let plain: redis::RedisResult<i64> = counter.invoke_async(&mut twice).await;
    assert!(plain.is_err_and(|e| e.code() == Some("NOSCRIPT")), "the failure this test guards against");

    let mut twice = FlushingConnection { inner, flushes: 2 };
    let count: i64 = lua::run(&counter, &mut twice).await.expect("lua::run starts over");
    assert_eq!(count, 1, "the script ran exactly once");
    assert_eq!(twice.flushes, 0, "both flushes happened");
}
