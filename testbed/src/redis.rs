//! One throwaway `redis-server` (the single server, or one node of the cluster): its config file,
//! start on a free loopback port, restart from the same config (same port, directory and AOF),
//! and stop by the PID in its pidfile.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::process::{pid_alive, pid_from_file, stop_pid, wait_bounded, wait_until};

/// A `redis-server` in a directory of its own (config, pidfile, log and append-only file), on
/// 127.0.0.1. It is a plain description: a copy read back from the handle file controls the
/// same server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Redis {
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// Its directory: `redis.conf`, `redis.pid`, `redis.log`, the AOF (and `nodes.conf`).
    pub dir: PathBuf,
    /// The `redis-server` that runs it.
    server: PathBuf,
}

impl Redis {
    /// Starts a new server in `dir` on a free port (up to 3 tries, a new port each): append-only
    /// (`appendfsync everysec`), no RDB snapshots, loopback only, daemonized. With
    /// `cluster_node_timeout` (ms) it is a cluster node whose bus port (port + 10000) is free
    /// too; `taken` are ports (with their bus ports) it must not use.
    pub(crate) fn launch(server: &Path, dir: &Path, cluster_node_timeout: Option<u32>, taken: &[u16]) -> Result<Redis> {
        std::fs::create_dir_all(dir)?;
        let mut last_error = None;
        for attempt in 1..=3 {
            let port = crate::process::free_port_where(|port| match cluster_node_timeout {
                None => true,
                Some(_) => {
                    // Its bus port below the ephemeral range too (a restart binds it again).
                    port + 10000 < 32768
                        && crate::process::port_is_free(port + 10000)
                        && !taken.iter().any(|&t| [t, t + 10000].contains(&port) || t == port + 10000)
                }
            })
            .context("no free TCP port for redis-server")?;
            for stale in ["redis.pid", "redis.log", "nodes.conf", "appendonly.aof"] {
                let _ = std::fs::remove_file(dir.join(stale));
            }
            let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
            let redis = Redis { port, dir: dir.to_owned(), server: server.to_owned() };
            std::fs::write(redis.conf(), redis.config_text(cluster_node_timeout))?;
            match redis.start() {
                Ok(()) => return Ok(redis),
                Err(error) => {
                    eprintln!("testbed: redis-server on port {port} failed to start (attempt {attempt}): {error:#}");
                    redis.stop();
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.expect("three attempts"))
    }

    /// The settings the bash tooling's servers had: `--bind 127.0.0.1 --port P --daemonize yes
    /// --appendonly yes --appendfsync everysec --save ""`, the files in the server's directory.
    fn config_text(&self, cluster_node_timeout: Option<u32>) -> String {
        let dir = self.dir.display();
        let mut text = format!(
            "bind 127.0.0.1\nport {}\nprotected-mode yes\ndaemonize yes\ndir \"{dir}\"\nlogfile \"{dir}/redis.log\"\n\
             pidfile \"{dir}/redis.pid\"\nappendonly yes\nappendfsync everysec\nsave \"\"\n",
            self.port
        );
        if let Some(timeout) = cluster_node_timeout {
            text.push_str(&format!(
                "cluster-enabled yes\ncluster-config-file \"{dir}/nodes.conf\"\ncluster-node-timeout {timeout}\n"
            ));
        }
        text
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its config file: `redis-server CONF` starts it as itself.
    pub fn conf(&self) -> PathBuf {
        self.dir.join("redis.conf")
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The PID of the running server (from its pidfile, which every start rewrites), if it runs.
    pub fn pid(&self) -> Option<u32> {
        pid_from_file(&self.dir.join("redis.pid"), &self.dir)
    }

    /// Whether it answers PING.
    pub fn is_up(&self) -> bool {
        self.query::<String>(&redis::cmd("PING")).is_ok_and(|pong| pong == "PONG")
    }

    /// Runs one command on this server alone (no cluster redirection), with 3 s timeouts.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let client = redis::Client::open(self.url())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(3))?;
        con.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(cmd.query(&mut con)?)
    }

    /// Starts the server from its config file (same port, directory and AOF) and waits up to
    /// 30 s until it answers PING. Used to restart it after [`Redis::stop`].
    pub fn start(&self) -> Result<()> {
        let mut child = Command::new(&self.server)
            .arg(self.conf())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("running {}", self.server.display()))?;
        // Daemonized: the command returns once the server has forked off.
        match wait_bounded(&mut child, Duration::from_secs(30))? {
            Some(status) if status.success() => {}
            Some(status) => bail!("redis-server {}: {status}{}", self.conf().display(), self.log_tail()),
            None => bail!("redis-server {} did not daemonize within 30 s", self.conf().display()),
        }
        let mut started = false;
        let up = wait_until(Duration::from_secs(30), || {
            if self.is_up() {
                return true;
            }
            // Fail fast once the daemon has died (e.g. the port was taken meanwhile).
            let pid = std::fs::read_to_string(self.dir.join("redis.pid")).ok();
            let pid = pid.and_then(|p| p.trim().parse::<u32>().ok());
            started |= pid.is_some();
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            log.contains("Address already in use") || (started && pid.is_some_and(|p| !pid_alive(p)))
        });
        if !up || !self.is_up() {
            bail!("redis-server on port {} does not answer PING{}", self.port, self.log_tail());
        }
        Ok(())
    }

    /// SIGTERM (Redis writes its AOF and exits), waits up to 20 s for it to exit, then SIGKILL.
    /// Returns false if it took the SIGKILL. Does nothing if it is not running.
    pub fn stop(&self) -> bool {
        self.pid().is_none_or(|pid| stop_pid(pid, Duration::from_secs(20)))
    }

    /// Starts one more plain server (not a cluster node) in `dir`, with this one's program and
    /// settings, on a free port: e.g. a private master for a test that kills it.
    pub fn launch_sibling(&self, dir: &Path) -> Result<Redis> {
        Redis::launch(&self.server, dir, None, &[])
    }

    /// Starts a new server in `dir` as a replica of this one ([`Redis::replicate`]) and waits
    /// until it has synced. Its config file does not name the master: started again from it, it
    /// is a master of its own.
    pub fn launch_replica(&self, dir: &Path) -> Result<Redis> {
        let replica = self.launch_sibling(dir)?;
        if let Err(error) = replica.replicate(self) {
            replica.stop();
            return Err(error);
        }
        Ok(replica)
    }

    /// `REPLICAOF 127.0.0.1 <master's port>`; waits up to 30 s until the link is up and the
    /// master counts it among its connected replicas.
    pub fn replicate(&self, master: &Redis) -> Result<()> {
        let _: String = self.query(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(master.port))?;
        let linked = wait_until(Duration::from_secs(30), || {
            let up = self.info_field("replication", "master_link_status").as_deref() == Some("up");
            let listed = master.replication_info().contains(&format!("port={},state=online", self.port));
            up && listed
        });
        if !linked {
            bail!("redis {} did not sync with its master {}{}", self.port, master.port, self.log_tail());
        }
        Ok(())
    }

    /// Cuts this replica off its master without losing its data: `REPLICAOF` a closed port, so
    /// it keeps what it has and retries in vain (until [`Redis::replicate`] or
    /// [`Redis::promote`]).
    pub fn cut_off(&self) -> Result<()> {
        let dead_port = crate::process::free_port();
        let _: String = self.query(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(dead_port))?;
        Ok(())
    }

    /// `REPLICAOF NO ONE`: a replica becomes a master, with the data it has.
    pub fn promote(&self) -> Result<()> {
        let _: String = self.query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"))?;
        Ok(())
    }

    /// SIGKILL, as in a crash (no AOF rewrite, no goodbye to replicas); waits up to 10 s until it
    /// is gone. Returns whether it was running.
    pub fn kill(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        crate::process::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
        crate::process::wait_pid_gone(pid, Duration::from_secs(10))
    }

    /// `INFO replication`'s text.
    pub fn replication_info(&self) -> String {
        self.query::<String>(redis::cmd("INFO").arg("replication")).unwrap_or_default()
    }

    /// One `field:value` line of `INFO section`, if the server answers and has it.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info = self.query::<String>(redis::cmd("INFO").arg(section)).ok()?;
        info.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':').map(|v| v.trim().to_owned()))
    }

    /// Waits up to `max` until no AOF rewrite is running or scheduled (`INFO persistence`; a
    /// server that does not answer counts as done); whether none is.
    pub fn wait_aof_rewritten(&self, max: Duration) -> bool {
        let deadline = Instant::now() + max;
        let rewriting = || {
            ["aof_rewrite_in_progress", "aof_rewrite_scheduled"]
                .iter()
                .any(|field| self.info_field("persistence", field).as_deref() == Some("1"))
        };
        while rewriting() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }

    /// The last lines of its log, for an error message.
    fn log_tail(&self) -> String {
        crate::log_tail(&self.log())
    }
}
