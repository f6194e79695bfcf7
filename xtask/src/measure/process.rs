//! Runs one load generator, bounded in time and stopped by PID, with the CPU it and the watched
//! processes used meanwhile; its output goes to `<raw>/<name>.out` and `.err`.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cpu::{Snapshot, Usage, Watch};

/// One finished command.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    pub name: String,
    pub cmd: Vec<String>,
    pub rc: i32,
    pub timed_out: bool,
    #[serde(flatten)]
    pub usage: Usage,
    #[serde(skip)]
    pub stdout: String,
}

/// The command line as text (program and arguments).
pub fn argv(cmd: &Command) -> Vec<String> {
    std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|s| s.to_string_lossy().into_owned()).collect()
}

/// SIGTERM, then SIGKILL after `grace`; waits for the child either way.
pub fn stop_child(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    // SAFETY: kill(2) on our own, not yet reaped child's PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for `child` up to `timeout` (then stops it); returns (exit code, timed out). A signal
/// to xtask (Ctrl-C, SIGTERM) stops it too, and is an error.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> anyhow::Result<(i32, bool)> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status.code().unwrap_or(-1), false));
        }
        if crate::steps::signalled() {
            stop_child(child, Duration::from_secs(5));
            anyhow::bail!("interrupted");
        }
        if Instant::now() > deadline {
            stop_child(child, Duration::from_secs(5));
            return Ok((-1, true));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns `cmd` with stdout and stderr to `<raw>/<name>.out|.err` and no stdin.
pub fn spawn_logged(cmd: &mut Command, raw: &Path, name: &str) -> anyhow::Result<Child> {
    let out = File::create(raw.join(format!("{name}.out")))?;
    let err = File::create(raw.join(format!("{name}.err")))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    cmd.spawn().with_context(|| format!("starting {}", argv(cmd).join(" ")))
}

/// Runs `cmd` under the name `name` for at most `timeout`, measuring the CPU of `watch`.
pub fn run(name: &str, mut cmd: Command, timeout: Duration, watch: &[Watch], raw: &Path) -> anyhow::Result<Run> {
    let before = Snapshot::take(watch);
    let mut child = spawn_logged(&mut cmd, raw, name)?;
    let (rc, timed_out) = wait_bounded(&mut child, timeout)?;
    let usage = before.usage();
    let stdout = std::fs::read_to_string(raw.join(format!("{name}.out"))).unwrap_or_default();
    let run = Run { name: name.to_string(), cmd: argv(&cmd), rc, timed_out, usage, stdout };
    std::fs::write(raw.join(format!("{name}.run.json")), serde_json::to_string_pretty(&run)?)?;
    if rc != 0 {
        let err = std::fs::read_to_string(raw.join(format!("{name}.err"))).unwrap_or_default();
        anyhow::bail!(
            "{name}: {} exited {rc}{}:\n{}{err}",
            run.cmd[0],
            if timed_out { " (timed out)" } else { "" },
            run.stdout
        );
    }
    Ok(run)
}
