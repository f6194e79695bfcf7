//! A Redis server's `INFO commandstats`: every command's calls and µs (`cmdstat_<name>:
//! calls=..,usec=..`). Redis 7 counts the commands a script runs under their own names as well as
//! in the script call's µs.

use std::collections::BTreeMap;

use testbed::Redis;

/// Calls and µs by command name.
pub struct CommandStats(BTreeMap<String, (u64, u64)>);

impl CommandStats {
    /// From the text of `INFO commandstats`.
    pub fn parse(info: &str) -> Self {
        let parse = |line: &str| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| fields.split(',').find_map(|kv| kv.strip_prefix(key)?.parse().ok()).unwrap_or(0);
            Some((name.to_owned(), (field("calls="), field("usec="))))
        };
        Self(info.lines().filter_map(parse).collect())
    }

    /// `server`'s so far (none if it does not answer).
    pub fn of(server: &Redis) -> Self {
        Self::parse(&server.query::<String>(redis::cmd("INFO").arg("commandstats")).unwrap_or_default())
    }

    /// The calls and µs since `before`.
    pub fn since(&self, before: &CommandStats) -> CommandStats {
        let diff = |(name, (calls, usec)): (&String, &(u64, u64))| {
            let (c0, u0) = before.0.get(name).copied().unwrap_or_default();
            (name.clone(), (calls.saturating_sub(c0), usec.saturating_sub(u0)))
        };
        CommandStats(self.0.iter().map(diff).filter(|(_, (calls, _))| *calls > 0).collect())
    }

    /// One command's calls and µs.
    pub fn get(&self, name: &str) -> (u64, u64) {
        self.0.get(name).copied().unwrap_or_default()
    }

    /// Every command's calls.
    pub fn calls(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.0.iter().map(|(name, (calls, _))| (name.clone(), *calls))
    }

    /// "Redis µs per request by command: evalsha 19.1 (0.072 calls), zadd 1.4 (1.000 calls), ...;
    /// outside script calls 8.4": the commands by µs, and what Redis's CPU (`redis_us` per request)
    /// spent outside script calls (the worker's own commands, reading and writing connections, the
    /// AOF, the event loop). Redis 7 counts the commands a script runs under their own names as
    /// well as in the script call's µs, so the figures overlap and do not add up.
    pub fn breakdown(&self, requests: u64, redis_us: f64) -> String {
        let n = requests.max(1) as f64;
        let mut by_usec: Vec<_> = self.0.iter().collect();
        by_usec.sort_by_key(|(_, (_, usec))| std::cmp::Reverse(*usec));
        let top: Vec<String> = by_usec
            .iter()
            .take(8)
            .map(|(name, (calls, usec))| format!("{name} {:.2} ({:.3} calls)", *usec as f64 / n, *calls as f64 / n))
            .collect();
        let scripts = (self.get("evalsha").1 + self.get("eval").1) as f64 / n;
        format!("Redis µs per request by command: {}; outside script calls {:.1}", top.join(", "), redis_us - scripts)
    }
}
