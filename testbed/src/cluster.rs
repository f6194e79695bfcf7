//! The throwaway Redis Cluster (no replicas; 3 masters for the tests): cluster-mode `redis-server` nodes
//! with the single server's settings, joined by `redis-cli --cluster create` and waited for until
//! every node reports `cluster_state:ok` with all 16384 slots.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::Redis;
use crate::process::{wait_bounded, wait_until};

/// `cluster-node-timeout` of the nodes, in milliseconds.
pub const NODE_TIMEOUT_MS: u32 = 3000;

/// A Redis Cluster of masters only; each node is a [`Redis`] that can be stopped and restarted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cluster {
    nodes: Vec<Redis>,
}

impl Cluster {
    /// The masters of the cluster the tests run against (`redis-cli --cluster create` needs 3).
    pub const MASTERS: usize = 3;

    /// Starts `masters` nodes in `dir/node1..` and creates the cluster. On failure, stops the
    /// nodes it started.
    pub(crate) fn launch(redis_server: &Path, redis_cli: &Path, dir: &Path, masters: usize) -> Result<Cluster> {
        if masters < 3 {
            bail!("a Redis Cluster needs at least 3 masters, not {masters}");
        }
        let started = Instant::now();
        let mut cluster = Cluster { nodes: vec![] };
        let result = cluster.create(redis_server, redis_cli, dir, masters);
        if let Err(error) = result {
            let _ = cluster.stop();
            return Err(error);
        }
        eprintln!(
            "testbed: redis cluster {} ({masters} masters, node timeout {NODE_TIMEOUT_MS} ms, up in {:.3} s)",
            cluster.url(),
            started.elapsed().as_secs_f64()
        );
        Ok(cluster)
    }

    fn create(&mut self, redis_server: &Path, redis_cli: &Path, dir: &Path, masters: usize) -> Result<()> {
        for index in 1..=masters {
            let taken: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
            let node = Redis::launch(redis_server, &dir.join(format!("node{index}")), Some(NODE_TIMEOUT_MS), &taken)
                .with_context(|| format!("starting Redis Cluster node {index}"))?;
            self.nodes.push(node);
        }
        // --cluster create assigns the slots, introduces the nodes and waits until they agree on
        // the configuration; cluster_state:ok on every node can still lag behind by a moment.
        let log = dir.join("create.log");
        let mut child = Command::new(redis_cli)
            .arg("--cluster")
            .arg("create")
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("running redis-cli --cluster create")?;
        let status = wait_bounded(&mut child, Duration::from_secs(60))?;
        if !status.is_some_and(|s| s.success()) {
            bail!("redis-cli --cluster create {} failed{}", self.url(), crate::log_tail(&log));
        }
        if !self.wait_ok(Duration::from_secs(30)) {
            let infos: Vec<String> = self.nodes.iter().map(|n| format!("{}: {:?}", n.port, cluster_info(n))).collect();
            bail!("Redis Cluster {} did not reach cluster_state:ok within 30 s: {infos:?}", self.url());
        }
        Ok(())
    }

    /// The seed URLs, comma-separated: `redis://127.0.0.1:P1,redis://127.0.0.1:P2,...`.
    pub fn url(&self) -> String {
        self.nodes.iter().map(Redis::url).collect::<Vec<_>>().join(",")
    }

    /// The nodes, each stoppable and restartable as itself (same port, nodes.conf and AOF).
    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// Whether every node reports `cluster_state:ok`, all 16384 slots assigned and ok, and knows
    /// all the nodes.
    pub fn is_ok(&self) -> bool {
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        self.nodes.iter().all(|node| {
            cluster_info(node).is_some_and(|info| {
                let lines: Vec<&str> = info.lines().map(str::trim).collect();
                ["cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384", &known]
                    .iter()
                    .all(|wanted| lines.contains(wanted))
            })
        })
    }

    /// Waits up to `limit` until [`Cluster::is_ok`]; true if it got there.
    pub fn wait_ok(&self, limit: Duration) -> bool {
        wait_until(limit, || self.is_ok())
    }

    /// Stops every node (by PID); does nothing for nodes that are down. Returns false if one
    /// took a SIGKILL.
    pub fn stop(&self) -> bool {
        let clean: Vec<bool> = self.nodes.iter().map(Redis::stop).collect(); // every node, first
        clean.iter().all(|&clean| clean)
    }
}

fn cluster_info(node: &Redis) -> Option<String> {
    node.query(redis::cmd("CLUSTER").arg("INFO")).ok()
}
