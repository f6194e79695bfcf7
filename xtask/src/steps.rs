//! The child processes of a task: each runs in a process group of its own, so a SIGINT, SIGTERM
//! or SIGHUP to xtask is passed on to the whole step (cargo, the test binaries and the services
//! they start) and xtask then stops its servers itself; each is bounded by a deadline.

use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use testbed::Signal;

/// The process group of the running step (0: none).
static GROUP: AtomicU32 = AtomicU32::new(0);
/// The first signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// From now on SIGINT, SIGTERM and SIGHUP no longer end xtask at once: they are passed on to the
/// running step's process group and recorded for [`interrupted`].
pub fn handle_signals() -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let _ = RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
            let group = GROUP.load(Ordering::SeqCst);
            if group != 0 {
                testbed::signal_group(group, Signal::try_from(signal).unwrap_or(Signal::SIGTERM));
            }
        }
    });
    Ok(())
}

/// Whether a signal was received.
pub fn signalled() -> bool {
    RECEIVED.load(Ordering::SeqCst) != 0
}

/// The exit code for the signal received (128 + its number), if one was.
pub fn interrupted() -> Option<ExitCode> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => {
            eprintln!("\n==> interrupted (signal {signal}); stopping");
            Some(ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)))
        }
    }
}

/// Runs `command` to completion in a process group of its own; at `deadline` (or on a signal
/// received before it started) the group gets SIGTERM, then SIGKILL, and this returns an error.
pub fn run(command: &mut Command, deadline: Instant) -> Result<ExitStatus> {
    supervise(command, deadline, |_| ())?.0
}

/// Runs `command` as [`run`] does, its stdout echoed line by line as it comes and also returned,
/// the lines it printed before a timeout too (the outer error: it could not start).
pub fn run_echoing(command: &mut Command, deadline: Instant) -> Result<(Result<ExitStatus>, Vec<String>)> {
    use std::io::{BufRead, Write};
    command.stdout(std::process::Stdio::piped());
    let (status, echo) = supervise(command, deadline, |child| {
        let stdout = child.stdout.take();
        std::thread::spawn(move || {
            let mut lines = vec![];
            for line in stdout.into_iter().flat_map(|out| std::io::BufReader::new(out).lines().map_while(Result::ok)) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
                lines.push(line);
            }
            lines
        })
    })?;
    Ok((status, echo.join().unwrap_or_default()))
}

/// Spawns `command` in a process group of its own, hands the child to `attach` (before waiting),
/// then waits for it as [`run`] describes; the outer error: it could not start.
fn supervise<T>(
    command: &mut Command,
    deadline: Instant,
    attach: impl FnOnce(&mut std::process::Child) -> T,
) -> Result<(Result<ExitStatus>, T)> {
    use std::os::unix::process::CommandExt;
    if signalled() {
        anyhow::bail!("interrupted");
    }
    let mut child = command.process_group(0).spawn().with_context(|| format!("starting {command:?}"))?;
    let attached = attach(&mut child);
    GROUP.store(child.id(), Ordering::SeqCst);
    let result = wait(&mut child, deadline);
    GROUP.store(0, Ordering::SeqCst);
    Ok((result.with_context(|| format!("{command:?}")), attached))
}

fn wait(child: &mut std::process::Child, deadline: Instant) -> Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let group = child.id();
            testbed::signal_group(group, Signal::SIGTERM);
            testbed::wait_pid_gone(group, Duration::from_secs(20));
            testbed::signal_group(group, Signal::SIGKILL); // whatever of the group is left
            child.wait()?;
            anyhow::bail!("timed out");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A command line for the step reports: the program's name and the arguments, space-separated.
pub fn describe(command: &Command) -> String {
    let program = std::path::Path::new(command.get_program());
    std::iter::once(program.file_name().unwrap_or(program.as_os_str()))
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
