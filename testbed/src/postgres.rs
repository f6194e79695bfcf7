//! The throwaway Postgres: `initdb` (trust auth, user `seckill`) and `pg_ctl start` as an
//! unprivileged user when we are root (Postgres refuses to run as root), loopback only, its socket
//! in the temp dir, `fsync=off`; stopped by the postmaster's PID.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;
use nix::unistd::User;
use serde::{Deserialize, Serialize};

use crate::Toolbox;
use crate::process::{pid_from_file, stop_pid_with, wait_bounded};

/// The system user that owns the cluster when we run as root.
const RUN_AS: &str = "postgres";

/// A Postgres server on 127.0.0.1 with its data directory in the temp dir. A plain description:
/// a copy read back from the handle file controls the same server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Postgres {
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// The temp dir holding `pg/` (data), `pgsock/` (socket) and `postgres.log`.
    dir: PathBuf,
    /// The directory of `pg_ctl`.
    pg_bin: PathBuf,
    /// The user the server runs as (`postgres` when we are root), or none for ourselves.
    run_as: Option<String>,
}

impl Postgres {
    /// initdb, then start on a free port (up to 3 tries), then `create database seckill`.
    pub(crate) fn launch(tools: &Toolbox, dir: &Path) -> Result<Postgres> {
        let run_as = nix::unistd::Uid::effective().is_root().then(|| RUN_AS.to_owned());
        let mut pg = Postgres { port: 0, dir: dir.to_owned(), pg_bin: tools.pg_bin.clone(), run_as };
        let owner = pg.owner()?;
        for sub in ["pg", "pgsock"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::File::create(pg.log())?;
        if let Some(user) = &owner {
            for path in [pg.data(), dir.join("pgsock"), pg.log()] {
                std::os::unix::fs::chown(&path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
            }
        }
        std::fs::set_permissions(pg.data(), std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let data = pg.data();
        let mut initdb = pg.command(&tools.initdb())?;
        initdb.arg("-D").arg(&data).args(["--auth=trust", "--username=seckill", "--encoding=UTF8", "--locale=C"]);
        run_logged(initdb.arg("--no-sync"), &dir.join("initdb.log"), 180)?;

        let mut last_error = None;
        for attempt in 1..=3 {
            pg.port = crate::free_port();
            // Later lines win: a plain `pg_ctl start` comes back on the same port and socket dir.
            let settings = format!(
                "\n# seckill testbed (attempt {attempt})\nport = {}\nlisten_addresses = '127.0.0.1'\n\
                 unix_socket_directories = '{}'\nfsync = off\nmax_connections = 300\n",
                pg.port,
                dir.join("pgsock").display()
            );
            let conf = pg.data().join("postgresql.conf");
            let mut text = std::fs::read_to_string(&conf)?;
            text.push_str(&settings);
            std::fs::write(&conf, text)?;
            match pg.start() {
                Ok(()) => {
                    pg.psql(tools, "create database seckill")?;
                    return Ok(pg);
                }
                Err(error) => {
                    eprintln!("testbed: postgres failed to start on port {} (attempt {attempt}): {error:#}", pg.port);
                    pg.stop();
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.expect("three attempts"))
    }

    /// The URL of the maintenance database `postgres` (user `seckill`, trust auth); tests create
    /// their own databases through it.
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// The URL of database `name` on this server.
    pub fn database_url(&self, name: &str) -> String {
        format!("postgres://seckill@127.0.0.1:{}/{name}", self.port)
    }

    /// The data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.join("pg")
    }

    /// The server log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// The postmaster's PID, if it runs.
    pub fn pid(&self) -> Option<u32> {
        pid_from_file(&self.data().join("postmaster.pid"), &self.dir)
    }

    /// Starts the server again (`pg_ctl start -w`, same port and socket dir), waiting up to 60 s.
    pub fn start(&self) -> Result<()> {
        let mut pg_ctl = self.command(&self.pg_bin.join("pg_ctl"))?;
        pg_ctl.arg("-D").arg(self.data()).arg("-l").arg(self.log()).args(["-w", "-t", "60", "start"]);
        run_logged(&mut pg_ctl, &self.dir.join("pg_ctl.log"), 90)
            .map_err(|error| anyhow::anyhow!("{error:#}{}", crate::log_tail(&self.log())))
    }

    /// Fast shutdown (SIGINT to the postmaster: clients are disconnected), waiting up to 60 s,
    /// then SIGKILL. Returns false if it took the SIGKILL. Does nothing if it is not running.
    pub fn stop(&self) -> bool {
        self.pid().is_none_or(|pid| stop_pid_with(pid, Signal::SIGINT, Duration::from_secs(60)))
    }

    /// Creates database `name` (a plain identifier) and returns its URL.
    pub fn create_database(&self, tools: &Toolbox, name: &str) -> Result<String> {
        anyhow::ensure!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "database name {name:?}");
        self.psql(tools, &format!("create database {name}"))?;
        Ok(self.database_url(name))
    }

    /// Runs one SQL statement on the maintenance database with psql.
    fn psql(&self, tools: &Toolbox, sql: &str) -> Result<()> {
        let mut psql = Command::new(&tools.psql);
        psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &self.port.to_string()]);
        run_logged(psql.args(["-U", "seckill", "-d", "postgres", "-c", sql]), &self.dir.join("psql.log"), 30)
    }

    /// The account the server runs as (`None`: ourselves); created as a system user if missing.
    fn owner(&self) -> Result<Option<User>> {
        let Some(name) = &self.run_as else { return Ok(None) };
        if User::from_name(name)?.is_none() {
            eprintln!("testbed: creating system user {name}");
            crate::tools::run(Command::new("useradd").args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ]))?;
        }
        User::from_name(name)?.with_context(|| format!("no user {name}")).map(Some)
    }

    /// `program` as the server's owner, from the temp dir (which that owner can read).
    fn command(&self, program: &Path) -> Result<Command> {
        let mut command = Command::new(program);
        command.current_dir(&self.dir).stdin(Stdio::null());
        if let Some(user) = self.owner()? {
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw()).env("HOME", &self.dir);
        }
        Ok(command)
    }
}

/// Runs `command` with its output in `log`, bounded by `limit_secs`; fails with the log's tail.
fn run_logged(command: &mut Command, log: &Path, limit_secs: u64) -> Result<()> {
    let file = std::fs::File::create(log)?;
    let mut child =
        command.stdout(file.try_clone()?).stderr(file).spawn().with_context(|| format!("running {command:?}"))?;
    match wait_bounded(&mut child, Duration::from_secs(limit_secs))? {
        Some(status) if status.success() => Ok(()),
        Some(status) => bail!("{command:?}: {status}{}", crate::log_tail(log)),
        None => bail!("{command:?} took more than {limit_secs} s{}", crate::log_tail(log)),
    }
}
