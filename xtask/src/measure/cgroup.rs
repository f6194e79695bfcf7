//! A process held to a share of a CPU core: a CPU cgroup of its own under the one it is in, whose
//! quota is `cores` × the period (cgroup v1's `cpu.cfs_quota_us`, v2's `cpu.max`). Dropping it
//! moves the process back and removes the cgroup. For a run where Redis, not the app, is the limit
//! on a host with few cores (`cargo xtask ab --redis-cores`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The scheduler's period the quota is a share of: 100 ms, both versions' default.
const PERIOD_US: u64 = 100_000;

/// A process in a CPU cgroup of its own, capped; released on drop.
#[derive(Debug)]
pub struct CpuCap {
    pid: u32,
    /// The cgroup the process was in, given it back on drop.
    home: PathBuf,
    /// The cgroup made for it.
    dir: PathBuf,
}

/// Where a process's CPU cgroup lives: the v1 `cpu` controller's, else the unified (v2) one's.
struct Place {
    mount: PathBuf,
    path: String,
    v2: bool,
}

/// The CPU cgroup `pid` is in, from `/proc/<pid>/cgroup` and `/proc/self/mounts`.
fn place_of(pid: u32) -> anyhow::Result<Place> {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("reading /proc/{pid}/cgroup"))?;
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, mount, kind, options, ..] = fields[..] else { continue };
        let v1 = kind == "cgroup" && options.split(',').any(|o| o == "cpu");
        let v2 = kind == "cgroup2";
        if !(v1 || v2) {
            continue;
        }
        // "<id>:<controllers>:<path>": v1's line names the cpu controller, v2's none ("0::<path>").
        let path = groups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let ours = if v1 { controllers.split(',').any(|c| c == "cpu") } else { controllers.is_empty() };
            ours.then(|| path.to_owned())
        });
        if let Some(path) = path
            && (v1 || Path::new(mount).join("cgroup.controllers").exists())
        {
            return Ok(Place { mount: mount.into(), path, v2 });
        }
    }
    bail!("no CPU cgroup controller is mounted for process {pid} (cgroup v1 `cpu` or cgroup2)")
}

impl CpuCap {
    /// Moves `pid` (every thread of it) into a new cgroup that may use `cores` of CPU time. Needs
    /// write access to the cgroup tree (root, outside a container that mounts it read-only).
    pub fn new(pid: u32, cores: f64) -> anyhow::Result<Self> {
        anyhow::ensure!(cores > 0.0, "a CPU cap must be above 0 cores");
        let place = place_of(pid)?;
        let home = place.mount.join(place.path.trim_start_matches('/'));
        let dir = home.join(format!("seckill-xtask-{}-{pid}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating the cgroup {} (are we root?)", dir.display()))?;
        // From here on, dropping `cap` removes the cgroup, whatever fails next.
        let cap = Self { pid, home, dir };
        let write = |file: &str, text: &str| {
            let at = cap.dir.join(file);
            std::fs::write(&at, text).with_context(|| format!("writing {text:?} to {}", at.display()))
        };
        let quota = ((cores * PERIOD_US as f64).round() as u64).max(1_000);
        if place.v2 {
            write("cpu.max", &format!("{quota} {PERIOD_US}"))?;
        } else {
            write("cpu.cfs_period_us", &PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", &quota.to_string())?;
        }
        write("cgroup.procs", &pid.to_string())?;
        Ok(cap)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        // The process may be gone already: then the cgroup is empty anyway.
        let _ = std::fs::write(self.home.join("cgroup.procs"), self.pid.to_string());
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("==> could not remove the cgroup {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cgroup tree refused us (a container's read-only mount, no rights), not our code.
    fn not_writable(e: &anyhow::Error) -> bool {
        e.chain().filter_map(|c| c.downcast_ref::<std::io::Error>()).any(|io| {
            matches!(io.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem)
        })
    }

    /// Holds a busy child to a tenth of a core, and reads back its cgroup and its CPU time; skips
    /// where the cgroup tree is not writable (not root, a container), where the command fails too.
    #[test]
    fn a_capped_process_gets_its_share_and_its_cgroup_goes_away() {
        let mut child = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let pid = child.id();
        let cap = match CpuCap::new(pid, 0.1) {
            Ok(cap) => cap,
            Err(e) if not_writable(&e) => {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("skipped: the cgroup tree is not writable here ({e:#})");
                return;
            }
            Err(e) => panic!("a cgroup of a tenth of a core: {e:#}"),
        };
        let dir = cap.dir().to_owned();
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), pid.to_string(), "the child is the cgroup's only process");
        let ticks = || -> u64 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<&str> = after.split_whitespace().collect();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        let (t0, w0) = (ticks(), std::time::Instant::now());
        // Until the child has used 20 ticks (0.2 s of CPU): about 2 s at a tenth of a core, 0.2 s uncapped.
        while ticks() - t0 < 20 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let share = (ticks() - t0) as f64 / 100.0 / w0.elapsed().as_secs_f64();
        drop(cap);
        let _ = child.kill();
        let _ = child.wait();
        assert!(share < 0.3, "the child used {share:.2} of a core under a cap of 0.1");
        assert!(!dir.exists(), "the cgroup was removed");
    }
}
