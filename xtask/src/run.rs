//! `cargo xtask run`: the service (release build) on throwaway Redis and Postgres from `testbed`,
//! with a demo sale seeded; prints where everything is, then streams the service's log until
//! Ctrl-C (or SIGTERM), which stops the service, then the servers. The service runs with
//! `SECKILL_AUTH=jwt` and a fresh random HS256 secret; a token for `alice` is printed with the
//! curl example. The demo sale has a payment window: the `seckill pay` line for alice's order is
//! printed too (with the fresh `SECKILL_PAYMENT_SECRET`). Order events go out as webhooks to a
//! free loopback port, and the line that starts `scripts/webhook_receiver.py` there is printed.
//! `SECKILL_*` settings in the environment reach the service (e.g.
//! `SECKILL_RATE_LIMIT=100000/1s cargo xtask run`).

use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use testbed::{App, Options, Profile, Services};

use crate::steps;

/// `cargo xtask run` (no options: `SECKILL_*` settings come from the environment).
#[derive(clap::Args)]
pub struct Args {}

/// How long after launch the demo sale opens, so its buyer page shows a countdown first.
const DEMO_OPENS_IN: Duration = Duration::from_secs(60);

/// The demo sale's payment window: a win is a reservation, paid within it (`seckill pay`, printed)
/// or its unit goes back to the sale.
const DEMO_PAYMENT_WINDOW: &str = "3m";

/// The demo's JWT audience (`SECKILL_JWT_AUDIENCE`): the service refuses tokens for another.
const DEMO_AUDIENCE: &str = "seckill-demo";

/// Runs the task; the exit code is the task's result.
pub fn run(_args: Args) -> Result<ExitCode> {
    steps::handle_signals()?;
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    build.args(Profile::Release.cargo_args()).current_dir(testbed::workspace_root());
    eprintln!("==> cargo {}", Profile::Release.cargo_args().join(" "));
    let status = steps::run(&mut build, Instant::now() + Duration::from_secs(3600))?;
    if let Some(code) = steps::interrupted() {
        return Ok(code);
    }
    ensure!(status.success(), "cargo build: {status}");

    let services = Services::start(&Options::default())?; // the app runs against the single node
    let secret: String = (0..64).map(|_| fastrand::alphanumeric()).collect();
    let payment_secret: String = (0..64).map(|_| fastrand::alphanumeric()).collect();
    // Order events go to a port where `scripts/webhook_receiver.py` can listen (printed below);
    // 32 alphanumerics are valid base64, a 24-byte key.
    let webhook_url = format!("http://127.0.0.1:{}/", testbed::free_port());
    let webhook_secret = format!("whsec_{}", (0..32).map(|_| fastrand::alphanumeric()).collect::<String>());
    let auth = [
        ("SECKILL_AUTH", "jwt"),
        ("SECKILL_JWT_SECRET", secret.as_str()),
        // An audience, as production should have: tokens `seckill token` signs here carry it.
        ("SECKILL_JWT_AUDIENCE", DEMO_AUDIENCE),
        ("SECKILL_PAYMENT_SECRET", payment_secret.as_str()),
        ("SECKILL_WEBHOOK_URL", webhook_url.as_str()),
        ("SECKILL_WEBHOOK_SECRET", webhook_secret.as_str()),
    ];
    let mut app = App::start(&services, &Profile::Release.binary(), &auth)?;
    let alice = token(&app, "alice")?;
    // From here on the service's log streams to the terminal.
    let mut log = std::fs::File::open(&app.log).context("opening the service's log")?;
    let mut stdout = std::io::stdout();
    std::io::copy(&mut log, &mut stdout)?;
    println!(
        "==> seeding demo sale (stock 100, opens {DEMO_OPENS_IN:?} from now: the buyer page counts down; \
         payment window {DEMO_PAYMENT_WINDOW})"
    );
    let starts_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + DEMO_OPENS_IN);
    let demo =
        serde_json::json!({"stock": 100, "starts_at": starts_at.to_string(), "payment_window": DEMO_PAYMENT_WINDOW});
    app.put_sale("demo", &demo).context("seeding the demo sale")?;
    std::io::copy(&mut log, &mut stdout)?;
    print_info(&services, &app, &alice);
    let env_file = EnvFile::write(&services, &app, &alice)?;

    let exit = loop {
        std::io::copy(&mut log, &mut stdout)?;
        stdout.flush()?;
        if let Some(status) = app.try_wait() {
            break status;
        }
        if steps::signalled() {
            eprintln!("xtask run: stopping seckill (pid {})", app.pid());
            app.stop();
            std::io::copy(&mut log, &mut stdout)?;
            let code = steps::interrupted().unwrap_or(ExitCode::FAILURE);
            clean_up(env_file, services);
            return Ok(code);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::io::copy(&mut log, &mut stdout)?;
    eprintln!("xtask run: seckill exited with {exit}");
    clean_up(env_file, services);
    Ok(ExitCode::from(exit.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)))
}

/// Removes the env file, stops the servers and deletes their temp dir, then says so in a last line.
fn clean_up(env_file: EnvFile, services: Services) {
    drop(env_file);
    let dir = services.dir().display().to_string();
    drop(services);
    eprintln!("xtask run: stopped, cleaned up (Redis and Postgres stopped; {dir} and target/seckill-run.env removed)");
}

/// `target/seckill-run.env`: the variables the README's examples use, for `source` in another
/// shell; removed when dropped (when the service stops).
struct EnvFile(std::path::PathBuf);

impl EnvFile {
    /// Where the file goes.
    fn path() -> std::path::PathBuf {
        testbed::workspace_root().join("target/seckill-run.env")
    }

    fn write(services: &Services, app: &App, alice: &str) -> Result<Self> {
        let setting = |name: &str| setting(app, name).to_owned();
        let vars = [
            ("APP", app.url.clone()),
            ("TOKEN", alice.to_owned()),
            ("ADMIN_TOKEN", app.admin_token.clone()),
            ("SECKILL", app.binary.display().to_string()),
            ("SECKILL_JWT_SECRET", setting("SECKILL_JWT_SECRET")),
            ("SECKILL_JWT_AUDIENCE", setting("SECKILL_JWT_AUDIENCE")),
            ("SECKILL_PAYMENT_SECRET", setting("SECKILL_PAYMENT_SECRET")),
            ("SECKILL_WEBHOOK_SECRET", setting("SECKILL_WEBHOOK_SECRET")),
            ("SECKILL_REDIS_URL", services.redis_url()),
            ("SECKILL_DATABASE_URL", services.database_url()),
        ];
        let mut text =
            String::from("# Written by `cargo xtask run` for the README's examples; removed when it stops.\n");
        for (name, value) in vars {
            text += &format!("export {name}='{value}'\n");
        }
        let path = Self::path();
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("The README's examples: in another shell, `source {}`", path.display());
        Ok(Self(path))
    }
}

impl Drop for EnvFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A token for `user` from `seckill token`, signed with the app's secret.
fn token(app: &App, user: &str) -> Result<String> {
    let output = Command::new(&app.binary)
        .args(["token", "--user", user, "--ttl", "24h"])
        .envs(app.env.iter().map(|(k, v)| (k, v)))
        .output()
        .context("running seckill token")?;
    ensure!(output.status.success(), "seckill token: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

/// The app's setting `name` ("" when it has none).
fn setting<'a>(app: &'a App, name: &str) -> &'a str {
    app.env.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

fn print_info(services: &Services, app: &App, alice: &str) {
    let (url, token) = (&app.url, &app.admin_token);
    let (redis, database, binary) = (services.redis_url(), services.database_url(), app.binary.display());
    println!(
        r#"
seckill is running (pid {pid}). Ctrl-C stops it and the throwaway Redis/Postgres.

  app:         {url}
  buyer page:  {url}/sale/demo#token={alice}
               (as alice: the page moves the token into the tab's sessionStorage)
               {url}/sale/demo   (paste a token, e.g. bob's from the command below)
  live page:   {url}/admin#token={token}   (signed in: the page moves the token into the tab)
  admin token: {token}
  redis:       {redis}
  postgres:    {database}
  auth:        SECKILL_AUTH=jwt with a fresh HS256 secret; alice's token (24h):
               {alice}

Buy one as alice once the sale is open (sale "demo", stock 100; the buyer is the token's sub):
  curl -i -X POST {url}/buy -H "Authorization: Bearer {alice}" -H 'content-type: application/json' -d '{{"sale_id":"demo"}}'
Another user's token:
  {env} {binary} token --user bob
Public sale status (countdown on the server's clock) and alice's order:
  curl -s {url}/sales/demo
  curl -s -H "Authorization: Bearer {alice}" {url}/sales/demo/order
A win is a reservation ({window} to pay, else the unit goes back). Pay for alice's order, as the
shop's payment system would (a signed order.paid event):
  ORDER=$(curl -s -H "Authorization: Bearer {alice}" {url}/sales/demo/order | sed -n 's/.*"order_id":"\([^"]*\)".*/\1/p')
  SECKILL_PAYMENT_SECRET={payment_secret} {binary} pay --sale demo --order "$ORDER" --url {url}
Or give it back (the unit returns to the sale):
  curl -s -X DELETE -H "Authorization: Bearer {alice}" {url}/sales/demo/order
Sale status (admin):
  curl -s -H "Authorization: Bearer {token}" {url}/admin/sales/demo
Check the promises (drained queue, Redis buyers = Postgres orders):
  SECKILL_REDIS_URL={redis} SECKILL_DATABASE_URL={database} {binary} reconcile demo
Orders:
  psql {database} -c 'select * from orders'
Order events (webhooks to {webhook}): watch them arrive, signatures checked, in another shell:
  source target/seckill-run.env && python3 scripts/webhook_receiver.py {webhook_port}
"#,
        webhook = setting(app, "SECKILL_WEBHOOK_URL"),
        webhook_port = setting(app, "SECKILL_WEBHOOK_URL").trim_end_matches('/').rsplit(':').next().unwrap_or_default(),
        pid = app.pid(),
        window = DEMO_PAYMENT_WINDOW,
        payment_secret = setting(app, "SECKILL_PAYMENT_SECRET"),
        env = app
            .env
            .iter()
            .filter(|(k, _)| k == "SECKILL_JWT_SECRET" || k == "SECKILL_JWT_AUDIENCE")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
}
