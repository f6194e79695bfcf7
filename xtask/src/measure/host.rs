//! This machine: a temp dir of our own for raw outputs, the tools a run needs (installed with
//! apt-get when we are root), their versions, and the CPU, cores, kernel and load.

use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use procfs::Current;

/// A temp dir of our own for raw outputs: `$TMPDIR/seckill-bench.<pid>.<nanos>`.
pub fn raw_dir(what: &str) -> anyhow::Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.subsec_nanos();
    let dir = std::env::temp_dir().join(format!("seckill-{what}.{}.{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The first line of `cmd --version` (stdout or stderr), cut to `words` words.
pub fn version(cmd: &str, words: usize) -> String {
    let out = Command::new(cmd).arg("--version").output();
    let text = out.map(|o| if o.stdout.is_empty() { o.stderr } else { o.stdout }).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .unwrap_or("?")
        .split_whitespace()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Fails unless every generator is on PATH (apt-get installs them when we are root).
pub fn need_tools(tools: &[(&str, &str)]) -> anyhow::Result<()> {
    for (tool, package) in tools {
        if Command::new("sh").args(["-c", &format!("command -v {tool}")]).output()?.status.success() {
            continue;
        }
        anyhow::ensure!(unsafe { libc::geteuid() } == 0, "{tool} is missing (apt-get install {package})");
        eprintln!("==> installing {package}");
        let ok = Command::new("timeout")
            .args(["900", "apt-get", "install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success();
        anyhow::ensure!(ok, "apt-get install {package} failed");
    }
    Ok(())
}

/// The machine's CPU model, cores, kernel and 1/5/15-minute load.
pub fn machine() -> (String, usize, String, String) {
    let cpu =
        procfs::CpuInfo::current().ok().and_then(|c| c.model_name(0).map(str::to_string)).unwrap_or("unknown".into());
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = Command::new("uname")
        .arg("-sr")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let load = procfs::LoadAverage::current()
        .map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen))
        .unwrap_or_default();
    (cpu, nproc, kernel, load)
}
