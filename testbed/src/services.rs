//! [`Services`]: a private Redis, Postgres and optional Redis Cluster in one temp dir,
//! stopped by PID on drop; and the handle file through which the test binaries attach to them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

use crate::{Cluster, Postgres, Redis, Toolbox, Tools};

/// Prefix of the temp dirs; `seckill-services.` as the bash tooling named them.
const DIR_PREFIX: &str = "seckill-services.";
/// In each temp dir: `PID START_TIME` of the process that owns it (for the stale-dir sweep).
const OWNER_FILE: &str = "owner";

/// What [`Services::start`] starts besides a Redis server and Postgres.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Also a Redis Cluster of this many masters (no replicas); the tests use
    /// [`Cluster::MASTERS`](crate::Cluster::MASTERS).
    pub cluster: Option<usize>,
    /// Also locate (as root: install) Chromium and chromedriver, recorded in
    /// [`Services::tools`] for the browser test.
    pub browser: bool,
}

/// Which Redis the api tests of a pass run against ([`Services::redis_url`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The single server.
    Server,
    /// The cluster's seed nodes.
    Cluster,
}

/// The running servers. Started with [`Services::start`] (the owner: stops them and removes the
/// temp dir on [`Services::stop`] or drop), or read back from a handle file with
/// [`Services::attach`] / [`Services::from_env`] (a view: dropping it stops nothing).
#[derive(Debug, Serialize, Deserialize)]
pub struct Services {
    /// The single Redis server.
    pub redis: Redis,
    /// Postgres.
    pub postgres: Postgres,
    /// The Redis Cluster, if started.
    pub cluster: Option<Cluster>,
    /// The programs the servers (and the browser test) use.
    pub tools: Toolbox,
    /// Which Redis [`Services::redis_url`] names.
    pub target: Target,
    dir: PathBuf,
    #[serde(skip)]
    owned: Option<TempDir>,
}

impl Services {
    /// The environment variable naming the handle file a test run attaches to.
    pub const ENV: &'static str = "SECKILL_TESTBED";

    /// Locates (as root: installs) the programs, sweeps the temp dirs of dead earlier runs, and
    /// starts the servers on free loopback ports in a new temp dir. On failure, stops whatever
    /// it started.
    pub fn start(options: &Options) -> Result<Services> {
        let tools = crate::ensure_tools(Tools { browser: options.browser })?;
        let base = temp_base();
        sweep_stale_dirs(&base);
        let temp = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir_in(&base)?;
        let dir = temp.path().to_owned();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::fs::write(dir.join(OWNER_FILE), owner_line(std::process::id()).context("reading /proc/self/stat")?)?;
        // Until every server is up, a guard stops what has started if a step fails.
        let mut guard = Partial { dir: dir.clone(), redis: None, postgres: None, armed: true };
        let redis =
            Redis::launch(&tools.redis_server, &dir.join("redis"), None, &[]).context("starting redis-server")?;
        guard.redis = Some(redis.clone());
        eprintln!("testbed: redis    {} (pid {})", redis.url(), redis.pid().unwrap_or_default());
        let postgres = Postgres::launch(&tools, &dir).context("starting postgres")?;
        guard.postgres = Some(postgres.clone());
        eprintln!("testbed: postgres {} (data {})", postgres.database_url("seckill"), postgres.data().display());
        let cluster = match options.cluster {
            Some(masters) => {
                Some(Cluster::launch(&tools.redis_server, &tools.redis_cli, &dir.join("cluster"), masters)?)
            }
            None => None,
        };
        guard.armed = false;
        Ok(Services { redis, postgres, cluster, tools, target: Target::Server, dir, owned: Some(temp) })
    }

    /// Reads a handle file written by [`Services::handle_file`]: the same servers, not owned.
    pub fn attach(path: &Path) -> Result<Services> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// [`Services::attach`] to the handle file named by `SECKILL_TESTBED`; fails with a message
    /// naming `cargo xtask test` when it is not set.
    pub fn from_env() -> Result<Services> {
        Self::from_var(std::env::var_os(Self::ENV))
    }

    fn from_var(value: Option<std::ffi::OsString>) -> Result<Services> {
        let path = value.ok_or_else(|| {
            anyhow!(
                "{} is not set: run the tests with `cargo xtask test` (extra arguments go to cargo test), \
                 which starts throwaway Redis and Postgres servers for them",
                Self::ENV
            )
        })?;
        Self::attach(Path::new(&path))
    }

    /// Writes the handle file for a test pass against `target` and returns its path (pass it in
    /// [`Services::ENV`]).
    pub fn handle_file(&self, target: Target) -> Result<PathBuf> {
        if target == Target::Cluster && self.cluster.is_none() {
            bail!("no Redis Cluster was started (Options::cluster)");
        }
        let json = serde_json::to_string_pretty(&self.view(target))?;
        let path = self.dir.join(format!("testbed-{}.json", serde_json::to_value(target)?.as_str().unwrap_or("x")));
        std::fs::write(&path, json)?;
        Ok(path)
    }

    /// The Redis URL of the [`Target`]: the server's, or the cluster's comma-separated seeds.
    ///
    /// # Panics
    /// If the target is the cluster but none was started (a handle file never says so).
    pub fn redis_url(&self) -> String {
        match self.target {
            Target::Server => self.redis.url(),
            Target::Cluster => self.cluster.as_ref().expect("the handle names a cluster").url(),
        }
    }

    /// The URL of the application database `seckill` (created at start).
    pub fn database_url(&self) -> String {
        self.postgres.database_url("seckill")
    }

    /// The temp dir holding the servers' files (logs of started apps go there too).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops every server by PID and removes the temp dir; idempotent. Does nothing for an
    /// attached view.
    pub fn stop(&mut self) {
        let Some(temp) = self.owned.take() else { return };
        stop_all(&self.dir, Some(&self.redis), Some(&self.postgres), self.cluster.as_ref());
        if let Err(error) = temp.close() {
            eprintln!("testbed: could not remove {}: {error}", self.dir.display());
        }
    }

    /// A copy of the handles for a pass against `target`, owning nothing.
    fn view(&self, target: Target) -> Services {
        Services {
            redis: self.redis.clone(),
            postgres: self.postgres.clone(),
            cluster: self.cluster.clone(),
            tools: self.tools.clone(),
            target,
            dir: self.dir.clone(),
            owned: None,
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Stops what [`Services::start`] has started so far if it fails half-way (the temp dir itself
/// is removed by its `TempDir`).
struct Partial {
    dir: PathBuf,
    redis: Option<Redis>,
    postgres: Option<Postgres>,
    armed: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.armed {
            stop_all(&self.dir, self.redis.as_ref(), self.postgres.as_ref(), None);
        }
    }
}

fn stop_all(dir: &Path, redis: Option<&Redis>, postgres: Option<&Postgres>, cluster: Option<&Cluster>) {
    // Whether each went in time or took a SIGKILL, it is gone: nothing more to do.
    let _ = postgres.map(Postgres::stop);
    let _ = redis.map(Redis::stop);
    let _ = cluster.map(Cluster::stop);
    crate::process::sweep(dir);
}

/// Where the temp dir goes: `$TMPDIR` if set, short (the Postgres socket path must stay under
/// 108 bytes) and, when root, reachable by the postgres user; else `/dev/shm` when it is a
/// directory everyone may enter (tmpfs: the servers' data never needs a disk, and removing a
/// test run's thousands of Postgres files is instant instead of minutes on a disk mounted with
/// `discard`); else `/tmp`.
fn temp_base() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let usable = |base: &Path| {
        let short = base.is_dir() && base.as_os_str().len() <= 60;
        let everyone_can_enter = base
            .ancestors()
            .all(|dir| dir.as_os_str().is_empty() || dir.metadata().is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
        short && (!nix::unistd::Uid::effective().is_root() || everyone_can_enter)
    };
    let candidates = std::env::var_os("TMPDIR").map(PathBuf::from).into_iter().chain([PathBuf::from("/dev/shm")]);
    candidates.into_iter().find(|base| usable(base)).unwrap_or_else(|| "/tmp".into())
}

/// `PID START_TIME` of a process (the start time tells a reused PID apart).
fn owner_line(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 (starttime) is the 20th after the parenthesised command name.
    let start = stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.to_owned();
    Some(format!("{pid} {start}"))
}

/// Removes the temp dirs whose owner process is gone, after stopping any server still running
/// in them. Dirs without an owner file (another tool's, or one being created) are left alone.
fn sweep_stale_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for dir in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let is_ours = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(DIR_PREFIX));
        let Ok(owner) = std::fs::read_to_string(dir.join(OWNER_FILE)) else { continue };
        let pid = owner.split_whitespace().next().and_then(|p| p.parse().ok());
        if !is_ours || pid.is_some_and(|pid| owner_line(pid).as_deref() == Some(owner.trim())) {
            continue;
        }
        eprintln!("testbed: removing {} of a run that is gone", dir.display());
        crate::process::sweep(&dir);
        if let Err(error) = std::fs::remove_dir_all(&dir) {
            eprintln!("testbed: could not remove {}: {error}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_variable_the_error_names_the_test_command() {
        let error = Services::from_var(None).unwrap_err().to_string();
        assert!(error.contains("SECKILL_TESTBED") && error.contains("cargo xtask test"), "{error}");
    }
}
