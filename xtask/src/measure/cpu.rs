//! CPU accounting from `/proc` (through the `procfs` crate): what one process, one process tree
//! (a postmaster and its backends) and the whole machine used between two snapshots, plus the
//! CPU of this process's waited-for children (the load generators) from `getrusage`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use procfs::process::Process;
use procfs::{CurrentSI, KernelStats};

/// A process to account for: `tree` also counts its direct children (Postgres backends).
#[derive(Debug, Clone)]
pub struct Watch {
    pub label: &'static str,
    pub pid: i32,
    pub tree: bool,
}

impl Watch {
    pub fn process(label: &'static str, pid: u32) -> Self {
        Self { label, pid: pid as i32, tree: false }
    }

    pub fn tree(label: &'static str, pid: u32) -> Self {
        Self { label, pid: pid as i32, tree: true }
    }
}

fn ticks() -> f64 {
    procfs::ticks_per_second() as f64
}

/// utime + stime of one process (all its threads) in seconds, or None when it is gone.
pub fn process_cpu(pid: i32) -> Option<f64> {
    let stat = Process::new(pid).ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / ticks())
}

/// CPU seconds of `root` and of its direct children, by pid.
fn tree_cpu(root: i32) -> BTreeMap<i32, f64> {
    let mut out = BTreeMap::new();
    let Ok(all) = procfs::process::all_processes() else { return out };
    for process in all.flatten() {
        if let Ok(stat) = process.stat()
            && (stat.pid == root || stat.ppid == root)
        {
            out.insert(stat.pid, (stat.utime + stat.stime) as f64 / ticks());
        }
    }
    out
}

/// Context switches so far, summed over the threads of a process: voluntary (a thread waited for
/// something) and involuntary (the scheduler gave its core to another).
#[derive(Debug, Clone, Copy, Default)]
pub struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Switches {
    /// Those made since `before`.
    pub fn since(self, before: Switches) -> Switches {
        Switches {
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
        }
    }
}

/// The context switches of `pid`'s threads so far.
pub fn switches(pid: i32) -> Option<Switches> {
    let tasks = Process::new(pid).ok()?.tasks().ok()?;
    let mut total = Switches::default();
    for task in tasks.flatten() {
        if let Ok(status) = task.status() {
            total.voluntary += status.voluntary_ctxt_switches.unwrap_or(0);
            total.involuntary += status.nonvoluntary_ctxt_switches.unwrap_or(0);
        }
    }
    Some(total)
}

/// The whole machine's busy and steal CPU seconds since boot (`/proc/stat`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Machine {
    pub busy: f64,
    pub steal: f64,
}

pub fn machine() -> Machine {
    let Ok(stats) = KernelStats::current() else { return Machine::default() };
    let t = &stats.total;
    let busy = t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0);
    Machine { busy: busy as f64 / ticks(), steal: t.steal.unwrap_or(0) as f64 / ticks() }
}

/// User and system CPU seconds of every child this process has waited for.
fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// The counters at one moment.
pub struct Snapshot {
    at: Instant,
    watch: Vec<Watch>,
    single: Vec<Option<f64>>,
    trees: Vec<BTreeMap<i32, f64>>,
    machine: Machine,
    children: (f64, f64),
}

/// What was used between two snapshots, in CPU seconds (`watched`: one entry per label that
/// could be read both times, plus `machine_busy` and `machine_steal`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Usage {
    pub wall_s: f64,
    /// CPU of the waited-for children meanwhile: the load generator(s).
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub watched_cpu_s: BTreeMap<String, f64>,
}

impl Usage {
    pub fn generator(&self) -> f64 {
        self.cpu_user_s + self.cpu_sys_s
    }

    pub fn get(&self, label: &str) -> Option<f64> {
        self.watched_cpu_s.get(label).copied()
    }

    /// CPU seconds per wall second of `label`.
    pub fn per_wall(&self, label: &str) -> Option<f64> {
        self.get(label).filter(|_| self.wall_s > 0.0).map(|cpu| cpu / self.wall_s)
    }
}

impl Snapshot {
    pub fn take(watch: &[Watch]) -> Self {
        Self {
            at: Instant::now(),
            watch: watch.to_vec(),
            single: watch.iter().map(|w| if w.tree { None } else { process_cpu(w.pid) }).collect(),
            trees: watch.iter().map(|w| if w.tree { tree_cpu(w.pid) } else { BTreeMap::new() }).collect(),
            machine: machine(),
            children: children_cpu(),
        }
    }

    /// The usage from this snapshot until now.
    pub fn usage(&self) -> Usage {
        let mut watched = BTreeMap::new();
        for (i, w) in self.watch.iter().enumerate() {
            if w.tree {
                let before = &self.trees[i];
                let used: f64 = tree_cpu(w.pid).iter().map(|(pid, cpu)| cpu - before.get(pid).unwrap_or(&0.0)).sum();
                watched.insert(w.label.to_string(), round3(used));
            } else if let (Some(before), Some(after)) = (self.single[i], process_cpu(w.pid)) {
                watched.insert(w.label.to_string(), round3(after - before));
            }
        }
        let now = machine();
        watched.insert("machine_busy".into(), round3(now.busy - self.machine.busy));
        watched.insert("machine_steal".into(), round3(now.steal - self.machine.steal));
        let (user, sys) = children_cpu();
        Usage {
            wall_s: round3(self.at.elapsed().as_secs_f64()),
            cpu_user_s: round3(user - self.children.0),
            cpu_sys_s: round3(sys - self.children.1),
            watched_cpu_s: watched,
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Waits (up to `max`) until the machine's busy CPU over a 2 s window is below `threshold`
/// cores; returns the last measured busy cores and whether it got that quiet.
pub fn wait_quiet(max: Duration, threshold: f64) -> (f64, bool) {
    let deadline = Instant::now() + max;
    loop {
        let before = machine();
        std::thread::sleep(Duration::from_secs(2));
        let busy = (machine().busy - before.busy) / 2.0;
        if busy < threshold || Instant::now() >= deadline {
            return (busy, busy < threshold);
        }
    }
}
