//! Headless Chromium driven through chromedriver (WebDriver, `fantoccini`), for the tests of the
//! pages the binary serves (`browser.rs`: the live sale page; `buyer_page.rs`). Screenshots go to
//! cargo's `CARGO_TARGET_TMPDIR` (`target/tmp/`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

/// Where Debian's `chromium` and `chromium-driver` packages put them, for a test run whose
/// testbed did not locate them (`cargo xtask test` does, and installs them as root).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take to show a change (it polls once a second).
pub const PAGE_DEADLINE: Duration = Duration::from_secs(15);

/// chromedriver, started in its own process group with its own Chromium profile directory; the
/// whole group (Chromium included) is killed and the profile removed on drop, also when the test
/// fails half-way.
struct Driver {
    pid: u32,
    profile: PathBuf,
    _child: tokio::process::Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        testbed::signal_group(self.pid, testbed::Signal::SIGKILL);
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A headless Chromium session.
pub struct Browser {
    pub client: Client,
    _driver: Driver,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session in a 1280x900 window.
    pub async fn start() -> Self {
        let tools = &crate::common::testbed().tools;
        let chromium = tools.chromium.clone().unwrap_or_else(|| CHROMIUM.into()).display().to_string();
        let chromedriver = tools.chromedriver.clone().unwrap_or_else(|| CHROMEDRIVER.into()).display().to_string();
        for binary in [&chromium, &chromedriver] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: apt-get install chromium chromium-driver (cargo xtask test does)"
            );
        }
        // Outside the ephemeral range, where the parallel tests' own connections take ports.
        let port = testbed::free_port();
        // The profile, and the working directory chromedriver and Chromium run in, inside the
        // testbed's directory: if the test process dies without dropping the driver (a Ctrl-C of
        // `cargo xtask test`), the testbed's sweep finds them there and stops them.
        let profile = crate::common::testbed().dir().join(format!("chromium-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir(&profile).expect("the Chromium profile directory");
        let child = tokio::process::Command::new(&chromedriver)
            .current_dir(&profile)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let driver = Driver { pid: child.id().expect("chromedriver pid"), profile, _child: child };

        let until = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < until, "chromedriver did not listen on {port}");
            sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", format!("--user-data-dir={}", driver.profile.display())],
            },
        });
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities.as_object().unwrap().clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Browser { client, _driver: driver }
    }

    /// Runs `script` in the page (a function body: `arguments[i]` are `args`) and returns its value.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.expect("script runs")
    }

    /// Waits until `check` returns `Some` for what the page shows, then returns it.
    pub async fn wait_for<T>(&self, what: &str, mut check: impl AsyncFnMut(&Self) -> Option<T>) -> T {
        let until = Instant::now() + PAGE_DEADLINE;
        loop {
            if let Some(found) = check(self).await {
                return found;
            }
            assert!(Instant::now() < until, "the page never showed {what}");
            sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the element `#id` is displayed.
    pub async fn visible(&self, id: &str) -> bool {
        self.client.find(Locator::Id(id)).await.unwrap().is_displayed().await.unwrap()
    }

    /// The rendered text of `#id`.
    pub async fn text(&self, id: &str) -> String {
        self.client.find(Locator::Id(id)).await.unwrap().text().await.unwrap()
    }

    /// Types `text` into the input `#id`, replacing what it held.
    pub async fn fill(&self, id: &str, text: &str) {
        let input = self.client.find(Locator::Id(id)).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys(text).await.unwrap();
    }

    /// Clicks `#id`.
    pub async fn click(&self, id: &str) {
        self.client.find(Locator::Id(id)).await.unwrap().click().await.unwrap();
    }

    /// Saves a screenshot of the window as `target/tmp/<name>` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::write(&path, self.client.screenshot().await.unwrap()).unwrap();
        println!("screenshot: {}", path.display());
        path
    }
}
