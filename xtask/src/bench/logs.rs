//! Warnings, errors and panics in the app and worker logs of a run, and the worker's final
//! `WorkerStats { .. }` line.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct LogInfo {
    pub warn: u64,
    pub error: u64,
    pub panic: u64,
    pub first_problem: Option<String>,
    pub worker_stats: Option<BTreeMap<String, u64>>,
}

/// The line without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// "warn", "error" or "panic" when the line is one (level as tracing's second field).
fn problem(line: &str) -> Option<&'static str> {
    match line.split_whitespace().nth(1) {
        Some("WARN") => Some("warn"),
        Some("ERROR") => Some("error"),
        _ if line.contains("panicked") => Some("panic"),
        _ => None,
    }
}

/// `WorkerStats { inserted: 1, redelivered: 0, ... }` as a map.
fn worker_stats(line: &str) -> Option<BTreeMap<String, u64>> {
    let rest = &line[line.find("WorkerStats {")? + "WorkerStats {".len()..];
    let body = &rest[..rest.find('}')?];
    body.split(',')
        .map(|kv| kv.split_once(':').and_then(|(k, v)| Some((k.trim().to_string(), v.trim().parse().ok()?))))
        .collect()
}

pub fn scan_log(text: &str) -> LogInfo {
    let mut info = LogInfo::default();
    for line in text.lines().map(strip_ansi) {
        if let Some(kind) = problem(&line) {
            *match kind {
                "warn" => &mut info.warn,
                "error" => &mut info.error,
                _ => &mut info.panic,
            } += 1;
            info.first_problem.get_or_insert_with(|| line.chars().take(300).collect());
        }
        if let Some(stats) = worker_stats(&line) {
            info.worker_stats = Some(stats);
        }
    }
    info
}

/// `seckill-*.log` and `worker.log` in `dir`, by file name.
pub fn scan_logs(dir: &Path) -> BTreeMap<String, LogInfo> {
    let mut logs = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return logs };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if (name.starts_with("seckill-") || name == "worker.log") && name.ends_with(".log") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            logs.insert(name, scan_log(&text));
        }
    }
    logs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_problems_and_worker_stats() {
        let log = "2026-01-01T00:00:00Z  INFO seckill: up\n\x1b[2m2026\x1b[0m \x1b[33m WARN\x1b[0m slow\n2026 ERROR boom\n\
                   thread 'x' panicked at src/a.rs\n2026  INFO worker: done WorkerStats { inserted: 5, redelivered: 0, conflicts: 0, malformed: 0, reclaimed: 1 }\n";
        let info = scan_log(log);
        assert_eq!((info.warn, info.error, info.panic), (1, 1, 1));
        assert_eq!(info.first_problem.as_deref(), Some("2026  WARN slow"));
        assert_eq!(info.worker_stats.unwrap()["reclaimed"], 1);
    }
}
