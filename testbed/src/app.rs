//! [`App`]: the `seckill` binary as a child process on the servers of a [`Services`] (build,
//! start on a free loopback port with a log file, wait until ready, seed sales, stop by PID).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::Services;
use crate::process::{stop_pid, wait_until};

/// How long a stopping app gets before SIGKILL (its own shutdown timeout defaults to 30 s).
const STOP_GRACE: Duration = Duration::from_secs(40);

static STARTS: AtomicUsize = AtomicUsize::new(0);

/// The build of the `seckill` binary to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// `target/debug/seckill`, as `cargo test --workspace` builds it (so building it after the
    /// tests compiles nothing).
    Debug,
    /// `target/release/seckill`.
    Release,
}

impl Profile {
    /// Where cargo puts the binary (`$CARGO_TARGET_DIR` or the workspace's `target/`).
    pub fn binary(self) -> PathBuf {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"));
        target.join(if self == Profile::Debug { "debug" } else { "release" }).join("seckill")
    }

    /// The cargo arguments that build it.
    pub fn cargo_args(self) -> &'static [&'static str] {
        match self {
            Profile::Debug => &["build", "--workspace", "--tests", "--locked"],
            Profile::Release => &["build", "--release", "--locked", "--package", "seckill"],
        }
    }

    /// Builds the binary (`cargo build`, in the workspace root) and returns its path.
    pub fn build(self) -> Result<PathBuf> {
        eprintln!("==> cargo {}", self.cargo_args().join(" "));
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(self.cargo_args())
            .current_dir(workspace_root())
            .status()
            .context("running cargo build")?;
        if !status.success() {
            bail!("cargo {}: {status}", self.cargo_args().join(" "));
        }
        Ok(self.binary())
    }
}

/// The workspace root (the `seckill` package's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testbed/ is in the workspace").to_owned()
}

/// A running `seckill serve`, in its own process group (a terminal's Ctrl-C does not reach it:
/// its owner stops it, before the servers). Stopped by PID on [`App::stop`] or drop.
#[derive(Debug)]
pub struct App {
    child: Child,
    exit: Option<ExitStatus>,
    /// The binary it runs.
    pub binary: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Its admin token: `$SECKILL_ADMIN_TOKEN`, or a random one.
    pub admin_token: String,
    /// The environment it was given on top of ours (URLs, token, listen address, `env`).
    pub env: Vec<(String, String)>,
    http: ureq::Agent,
}

impl App {
    /// Starts `binary serve` on a free port against `services` (its Redis target and the
    /// `seckill` database), with `env` (`SECKILL_*` settings) on top; logs to
    /// `seckill-N.log` in the services' temp dir; waits up to 30 s for `/readyz`.
    pub fn start(services: &Services, binary: &Path, env: &[(&str, &str)]) -> Result<App> {
        let port = crate::free_port();
        let admin_token =
            std::env::var("SECKILL_ADMIN_TOKEN").unwrap_or_else(|_| (0..32).map(|_| fastrand::digit(16)).collect());
        let mut vars = vec![
            ("SECKILL_LISTEN".to_owned(), format!("127.0.0.1:{port}")),
            ("SECKILL_REDIS_URL".to_owned(), services.redis_url()),
            ("SECKILL_DATABASE_URL".to_owned(), services.database_url()),
            ("SECKILL_ADMIN_TOKEN".to_owned(), admin_token.clone()),
        ];
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = services.dir().join(format!("seckill-{}.log", STARTS.fetch_add(1, Ordering::Relaxed) + 1));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(binary)
            .arg("serve")
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("http://127.0.0.1:{port}");
        let mut app =
            App { child, exit: None, binary: binary.to_owned(), port, url, log, admin_token, env: vars, http };
        eprintln!("==> seckill serve on {} (pid {}, log {})", app.url, app.pid(), app.log.display());
        let ready = wait_until(Duration::from_secs(30), || app.is_ready() || app.has_exited());
        if !ready || !app.is_ready() {
            app.stop();
            bail!("seckill did not become ready on {}/readyz; its log:\n{}", app.url, app.log_text());
        }
        Ok(app)
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether `GET /readyz` answers 200 (Redis and Postgres answer it).
    pub fn is_ready(&self) -> bool {
        let response =
            self.http.get(format!("{}/readyz", self.url)).config().timeout_global(Some(Duration::from_secs(2)));
        response.build().call().is_ok_and(|r| r.status() == 200)
    }

    fn has_exited(&mut self) -> bool {
        self.try_wait().is_some()
    }

    /// Its exit status, if it has exited (reaped here).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Waits until it exits by itself.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        let status = self.child.wait()?;
        self.exit = Some(status);
        Ok(status)
    }

    /// SIGTERM (a graceful shutdown), SIGKILL after 40 s; reaps it. Idempotent.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.try_wait().is_none() {
            stop_pid(self.pid(), STOP_GRACE);
        }
        self.wait().ok()
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `PUT /admin/sales/SALE` with this body (any seed request); fails unless 2xx.
    pub fn put_sale(&self, sale: &str, body: &Value) -> Result<Value> {
        let response = self
            .http
            .put(format!("{}/admin/sales/{sale}", self.url))
            .header("Authorization", format!("Bearer {}", self.admin_token))
            .send_json(body)?;
        read_json(response, &format!("PUT /admin/sales/{sale}"))
    }

    /// `PUT /admin/drops/DROP` with this body (a drop's seed, issue 52); fails unless 2xx.
    pub fn put_drop(&self, drop: &str, body: &Value) -> Result<Value> {
        let response = self
            .http
            .put(format!("{}/admin/drops/{drop}", self.url))
            .header("Authorization", format!("Bearer {}", self.admin_token))
            .send_json(body)?;
        read_json(response, &format!("PUT /admin/drops/{drop}"))
    }

    /// Creates or re-seeds a sale open now with `stock`, over `shards` stock shards if given.
    pub fn seed(&self, sale: &str, stock: u64, shards: Option<u32>) -> Result<Value> {
        let body = match shards {
            Some(shards) => json!({"stock": stock, "shards": shards}),
            None => json!({"stock": stock}),
        };
        self.put_sale(sale, &body)
    }

    /// `GET /admin/sales/SALE`.
    pub fn sale_status(&self, sale: &str) -> Result<Value> {
        let response = self
            .http
            .get(format!("{}/admin/sales/{sale}", self.url))
            .header("Authorization", format!("Bearer {}", self.admin_token))
            .call()?;
        read_json(response, &format!("GET /admin/sales/{sale}"))
    }

    /// Waits up to `limit` until the sale's queue has drained (`queued` 0); whether it did.
    pub fn wait_drained(&self, sale: &str, limit: Duration) -> bool {
        wait_until(limit, || self.sale_status(sale).is_ok_and(|status| status["queued"] == 0))
    }

    /// `seckill reconcile SALE` with the app's settings: its exit status (0: the promises hold),
    /// its JSON report on stdout, and stderr. Call it once the queue has drained.
    pub fn reconcile(&self, sale: &str) -> Result<Output> {
        Command::new(&self.binary)
            .args(["reconcile", sale])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .context("running seckill reconcile")
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_json(mut response: ureq::http::Response<ureq::Body>, what: &str) -> Result<Value> {
    let status = response.status();
    let text = response.body_mut().read_to_string()?;
    if !status.is_success() {
        bail!("{what}: {status}: {text}");
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
}
