//! Processes and ports: free loopback ports, stopping a process by PID (signal, bounded wait,
//! SIGKILL), and the sweep that finds server processes left running inside a directory.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use wait_timeout::ChildExt;

/// Ports handed out by [`free_port`]: below Linux's default ephemeral range (32768-60999), so an
/// outgoing connection never takes one between the check and the server's bind, and below
/// 30000-32767, the bus ports of Redis Cluster nodes (on 20000-22767, `crate::redis`), which a
/// restarted node binds again.
const PORTS: std::ops::RangeInclusive<u16> = 20000..=29999;

/// A TCP port on 127.0.0.1 that nothing listens on or is bound to right now.
///
/// # Panics
/// If 1000 random tries in 20000-29999 all find the port taken.
pub fn free_port() -> u16 {
    free_port_where(|_| true).expect("no free TCP port on 127.0.0.1 in 20000-29999")
}

/// A free port for which `accept` holds too (e.g. a Redis Cluster node's bus port is free).
///
/// Never one this process handed out before: two tests that pick a port at once would otherwise
/// both find it free before either's server binds it, and the second server's start fails (or,
/// worse, its readiness check is answered by the first).
pub(crate) fn free_port_where(mut accept: impl FnMut(u16) -> bool) -> Option<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let port = (0..1000)
        .map(|_| fastrand::u16(PORTS))
        .find(|&port| !handed_out.contains(&port) && port_is_free(port) && accept(port))?;
    handed_out.insert(port);
    Some(port)
}

/// Whether a server could listen on 127.0.0.1:`port` now: a socket with `SO_REUSEADDR` (as
/// redis-server and Postgres set it) binds there. It never listens, so a process forked meanwhile
/// by another thread (tests spawn many) does not hold a listener on the port.
pub fn port_is_free(port: u16) -> bool {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, setsockopt, socket, sockopt};
    let Ok(socket) = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) else {
        return false;
    };
    setsockopt(&socket, sockopt::ReuseAddr, &true).is_ok()
        && bind(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            &SockaddrIn::from(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
        )
        .is_ok()
}

/// Whether process `pid` exists and has not exited. A zombie counts as exited: a daemonized
/// server is reaped by PID 1, which in some containers does that only every few seconds.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|s| s != "Z"),
        Err(_) => false,
    }
}

/// Sends `signal` to `pid`; false if there is no such process (or it is not ours to signal).
pub fn signal_pid(pid: u32, signal: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), signal).is_ok())
}

/// Sends `signal` to every process of process group `pgid`; false if there is none.
pub fn signal_group(pgid: u32, signal: Signal) -> bool {
    i32::try_from(pgid).is_ok_and(|pgid| nix::sys::signal::killpg(Pid::from_raw(pgid), signal).is_ok())
}

/// Waits up to `limit` for `pid` to exit; true if it did.
pub fn wait_pid_gone(pid: u32, limit: Duration) -> bool {
    wait_until(limit, || !pid_alive(pid))
}

/// SIGTERM, waits up to `grace` for the process to exit, then SIGKILL (and waits up to 5 s).
/// Returns false if it took the SIGKILL; true if it exited in time or was already gone. The
/// caller reaps its own child afterwards.
pub fn stop_pid(pid: u32, grace: Duration) -> bool {
    stop_pid_with(pid, Signal::SIGTERM, grace)
}

/// [`stop_pid`] with another first signal (Postgres: SIGINT is its fast shutdown).
pub fn stop_pid_with(pid: u32, first: Signal, grace: Duration) -> bool {
    if !pid_alive(pid) || !signal_pid(pid, first) {
        return true;
    }
    if wait_pid_gone(pid, grace) {
        return true;
    }
    eprintln!("testbed: pid {pid} did not exit within {grace:?} of {first}; sending SIGKILL");
    signal_pid(pid, Signal::SIGKILL);
    wait_pid_gone(pid, Duration::from_secs(5));
    false
}

/// Waits up to `limit` for `child` to exit; on time-out stops it ([`stop_pid`], 5 s grace),
/// reaps it and returns `None`.
pub(crate) fn wait_bounded(child: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let status = child.wait_timeout(limit)?;
    if status.is_none() {
        stop_pid(child.id(), Duration::from_secs(5));
        child.wait()?;
    }
    Ok(status)
}

/// Polls `done` every 50 ms until it holds or `limit` has passed; returns its last answer.
pub(crate) fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` runs with its working directory inside `dir` (our servers chdir there).
pub(crate) fn pid_works_in(pid: u32, dir: &Path) -> bool {
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
}

/// The PID in a pidfile (first line), if it names a live process working inside `dir`.
pub(crate) fn pid_from_file(file: &Path, dir: &Path) -> Option<u32> {
    let pid = std::fs::read_to_string(file).ok()?.lines().next()?.trim().parse().ok()?;
    (pid_alive(pid) && pid_works_in(pid, dir)).then_some(pid)
}

/// Last resort: stops every redis-server, postgres, chromedriver or Chromium process working
/// inside `dir` (the browser test runs them there).
pub(crate) fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if !pid_works_in(pid, dir) || !pid_alive(pid) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let ours = ["redis-server", "redis-check", "postgres", "postmaster", "chromedriver", "chromium", "chrome"];
        if ours.iter().any(|name| comm.starts_with(name)) {
            eprintln!("testbed: stopping leftover {} (pid {pid}) in {}", comm.trim(), dir.display());
            stop_pid(pid, Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_on_loopback() {
        let port = free_port();
        assert!(PORTS.contains(&port));
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn a_port_is_handed_out_once() {
        let ports: std::collections::BTreeSet<u16> = (0..200).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 200, "none handed out twice, though each was free again at once");
    }

    #[test]
    fn stop_pid_ends_a_child_process() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        assert!(pid_alive(child.id()));
        stop_pid(child.id(), Duration::from_secs(5));
        assert!(!child.wait().unwrap().success());
        assert!(!pid_alive(child.id()));
    }
}
