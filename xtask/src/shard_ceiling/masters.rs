//! The cluster's masters (m1, m2, ...): their ports and PIDs, which one owns a slot (CLUSTER NODES),
//! buy.lua loaded on each, and the AOF rewrites kept out of the measured windows.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use testbed::{Redis, Services};

use crate::measure::cpu::Watch;

/// The labels of up to 12 masters (`--masters` is at most 12).
const NAMES: [&str; 12] = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11", "m12"];

pub struct Masters {
    pub nodes: Vec<Redis>,
    /// m1, m2, ... in the order of `nodes`.
    pub names: Vec<&'static str>,
    /// (first slot, last slot, port) from CLUSTER NODES.
    slots: Vec<(u16, u16, u16)>,
    pub buy_sha: String,
}

impl Masters {
    pub fn find(services: &Services) -> anyhow::Result<Self> {
        let nodes = services.cluster.as_ref().context("no cluster was started")?.nodes().to_vec();
        ensure!(nodes.len() <= NAMES.len(), "at most {} masters, got {}", NAMES.len(), nodes.len());
        let names = NAMES[..nodes.len()].to_vec();
        // "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges>..."
        let text: String = nodes[0].query(redis::cmd("CLUSTER").arg("NODES"))?;
        let mut slots = vec![];
        for line in text.lines().filter(|l| l.split_whitespace().nth(2).is_some_and(|f| f.contains("master"))) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port: u16 = fields[1].split([':', '@']).nth(1).context("CLUSTER NODES address")?.parse()?;
            for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                slots.push((lo.parse()?, hi.parse()?, port));
            }
        }
        Ok(Self { nodes, names, slots, buy_sha: String::new() })
    }

    /// m1, m2, ... for a port.
    pub fn name(&self, port: u16) -> &str {
        self.nodes.iter().position(|n| n.port == port).map_or("?", |i| self.names[i])
    }

    pub fn node(&self, port: u16) -> &Redis {
        self.nodes.iter().find(|n| n.port == port).expect("a master's port")
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Each master's CPU, labelled m1, m2, ...
    pub fn watch(&self) -> Vec<Watch> {
        self.nodes
            .iter()
            .zip(self.names.iter().copied())
            .filter_map(|(n, name)| n.pid().map(|pid| Watch::process(name, pid)))
            .collect()
    }

    /// The slot of `key` and the port of the master that owns it.
    pub fn owner(&self, key: &str) -> anyhow::Result<(u16, u16)> {
        let slot: u16 = self.nodes[0].query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))?;
        let port = self.slots.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&slot)).map(|s| s.2);
        Ok((slot, port.with_context(|| format!("no master owns slot {slot}"))?))
    }

    /// buy.lua on every master; automatic AOF rewrites off (AOF stays on, appendfsync everysec,
    /// as the app runs) so no fork lands inside a measured run.
    pub fn prepare(&mut self) -> anyhow::Result<()> {
        let source = std::fs::read_to_string(testbed::workspace_root().join("lua/buy.lua"))?;
        for node in &self.nodes {
            let sha: String = node.query(redis::cmd("SCRIPT").arg("LOAD").arg(&source))?;
            ensure!(self.buy_sha.is_empty() || sha == self.buy_sha, "different buy.lua SHAs on the masters");
            self.buy_sha = sha;
            let _: String = node.query(redis::cmd("CONFIG").arg("SET").arg("auto-aof-rewrite-percentage").arg(0))?;
        }
        Ok(())
    }

    /// BGREWRITEAOF on every master, then waits (up to 60 s) until none is rewriting.
    pub fn aof_rewrite_and_wait(&self) {
        for node in &self.nodes {
            let _ = node.query::<String>(&redis::cmd("BGREWRITEAOF"));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for node in &self.nodes {
            if !node.wait_aof_rewritten(deadline.saturating_duration_since(Instant::now())) {
                eprintln!("shard-ceiling: AOF rewrite on {} still running after 60 s; going on", node.port);
            }
        }
    }
}
