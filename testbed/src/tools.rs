//! The programs the servers need, found on this machine or installed with apt-get (as root):
//! redis-server and redis-cli, the Postgres server binaries (initdb, pg_ctl, postgres) and psql,
//! and optionally Chromium and chromedriver for the browser test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// What to look for besides the servers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tools {
    /// Also Chromium and chromedriver (the live page's browser test).
    pub browser: bool,
}

/// Where the programs are.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Toolbox {
    /// `redis-server`.
    pub redis_server: PathBuf,
    /// `redis-cli`.
    pub redis_cli: PathBuf,
    /// The directory holding `initdb`, `pg_ctl` and `postgres` (the highest
    /// `/usr/lib/postgresql/<version>/bin`, else from `PATH`).
    pub pg_bin: PathBuf,
    /// `psql`, next to the server binaries if it is there.
    pub psql: PathBuf,
    /// `chromium`, when asked for.
    pub chromium: Option<PathBuf>,
    /// `chromedriver`, when asked for.
    pub chromedriver: Option<PathBuf>,
}

impl Toolbox {
    /// Finds the programs without installing anything; the error lists what is missing.
    pub fn find(tools: Tools) -> Result<Toolbox> {
        let missing = missing_packages(tools);
        if !missing.is_empty() {
            bail!("missing programs; install them first, e.g.: apt-get install -y {}", missing.join(" "));
        }
        let pg_bin = find_pg_bin().expect("checked above");
        Ok(Toolbox {
            redis_server: which("redis-server").expect("checked above"),
            redis_cli: which("redis-cli").expect("checked above"),
            psql: find_psql(&pg_bin).expect("checked above"),
            pg_bin,
            chromium: tools.browser.then(|| which("chromium")).flatten(),
            chromedriver: tools.browser.then(|| which("chromedriver")).flatten(),
        })
    }

    /// `pg_ctl` in [`Toolbox::pg_bin`].
    pub fn pg_ctl(&self) -> PathBuf {
        self.pg_bin.join("pg_ctl")
    }

    /// `initdb` in [`Toolbox::pg_bin`].
    pub fn initdb(&self) -> PathBuf {
        self.pg_bin.join("initdb")
    }
}

/// Finds the programs, first installing the Debian packages of the missing ones when running as
/// root (service auto-start blocked while apt runs); fails naming them otherwise.
pub fn ensure_tools(tools: Tools) -> Result<Toolbox> {
    let missing = missing_packages(tools);
    if missing.is_empty() {
        return Toolbox::find(tools);
    }
    if !nix::unistd::Uid::effective().is_root() {
        bail!(
            "missing programs; install them first, e.g.: sudo apt-get install -y {} (needed: redis-server and \
             redis-cli; Postgres server binaries initdb, pg_ctl, postgres and psql; for the tests chromium and chromedriver)",
            missing.join(" ")
        );
    }
    if which("apt-get").is_none() {
        bail!("missing {} and apt-get is not available; install them by hand", missing.join(" "));
    }
    eprintln!("testbed: installing {}", missing.join(" "));
    crate::apt::install(&missing)?;
    Toolbox::find(tools).context("still missing after apt-get install")
}

/// The Debian packages of what is missing.
fn missing_packages(tools: Tools) -> Vec<&'static str> {
    let mut missing = vec![];
    if which("redis-server").is_none() || which("redis-cli").is_none() {
        missing.push("redis-server");
    }
    if find_pg_bin().and_then(|bin| find_psql(&bin)).is_none() {
        missing.push("postgresql");
    }
    // The examples `cargo xtask run` prints and the README's (tests/api/readme.rs) use curl.
    if which("curl").is_none() {
        missing.push("curl");
    }
    if tools.browser {
        if which("chromium").is_none() {
            missing.push("chromium");
        }
        if which("chromedriver").is_none() {
            missing.push("chromium-driver");
        }
    }
    missing
}

/// The first executable `name` on `PATH`.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"].iter().all(|b| is_executable(&dir.join(b)))
}

/// The highest `/usr/lib/postgresql/<version>/bin` with initdb, pg_ctl and postgres; else the
/// directory of `initdb` on `PATH` (symlinks resolved, so pg_ctl finds its sibling binaries).
fn find_pg_bin() -> Option<PathBuf> {
    let versioned = std::fs::read_dir("/usr/lib/postgresql").into_iter().flatten().filter_map(|entry| {
        let entry = entry.ok()?;
        let version = version_key(entry.file_name().to_str()?)?;
        let bin = entry.path().join("bin");
        has_server_binaries(&bin).then_some((version, bin))
    });
    if let Some((_, bin)) = versioned.max_by(|a, b| a.0.cmp(&b.0)) {
        return Some(bin);
    }
    let initdb = which("initdb")?;
    let resolved = std::fs::canonicalize(&initdb).ok()?.parent()?.to_path_buf();
    if has_server_binaries(&resolved) {
        Some(resolved)
    } else {
        initdb.parent().filter(|dir| has_server_binaries(dir)).map(Path::to_path_buf)
    }
}

/// `"15"` or `"9.6"` as numbers, for a version sort.
fn version_key(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

fn find_psql(pg_bin: &Path) -> Option<PathBuf> {
    let beside = pg_bin.join("psql");
    if is_executable(&beside) { Some(beside) } else { which("psql") }
}

/// Runs `command` and fails with its output if it does not succeed.
pub(crate) fn run(command: &mut Command) -> Result<()> {
    let output = command.output().with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?}: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_numbers() {
        assert!(version_key("15").unwrap() > version_key("9.6").unwrap());
        assert!(version_key("main").is_none());
    }
}
