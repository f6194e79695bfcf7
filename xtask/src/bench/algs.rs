//! The per-limiter-algorithm part of the report: for each algorithm, three redis-benchmark rows
//! of its script and two `/buy` rows through an app running it, side by side.

use std::collections::BTreeMap;

use super::builder::Builder;
use super::model::{Algorithm, REDIS_KINDS, script};

/// The HTTP rows of each algorithm: kind, label, expected status.
const HTTP_KINDS: [(&str, &str, &str); 2] =
    [("instock", "POST /buy in stock (limiter admits all)", "201"), ("limited", "POST /buy rate limited", "429")];

/// One entry per algorithm the run measured (the `algorithms` meta, in run order).
pub fn algorithms(b: &mut Builder) -> Vec<Algorithm> {
    let names: Vec<String> = b.r.meta("algorithms").unwrap_or("").split_whitespace().map(str::to_string).collect();
    names.iter().map(|alg| entry(b, alg)).collect()
}

fn entry(b: &mut Builder, alg: &str) -> Algorithm {
    let script = script(alg);
    let mut entry = Algorithm {
        algorithm: alg.into(),
        script: script.clone(),
        redis: BTreeMap::new(),
        http: BTreeMap::new(),
        server_errors: 0,
        limited_429_share: None,
        instock_429: None,
    };
    for (kind, label) in REDIS_KINDS {
        if let Some(row) = b.redis_row(&format!("redis-{alg}-{kind}"), &format!("Redis {}, {label}", &script[4..])) {
            entry.redis.insert(kind.into(), row);
        }
    }
    for (kind, label, code) in HTTP_KINDS {
        let key = format!("alg-{alg}-{kind}");
        let full = format!("{alg}: {label}");
        let (run, out) = match b.r.wrk(&key) {
            Ok(found) => found,
            Err(why) => {
                b.problems.push(format!("{full}: no result ({why})"));
                continue;
            }
        };
        let (path_ok, _) = b.expect_share(&out, code, 0.99, &full);
        if kind == "instock" && out.status("429") > 0 {
            b.problems.push(format!(
                "{full}: the limiter refused {} requests (429) although it should admit every one",
                super::model::group(out.status("429") as f64)
            ));
        }
        let mut row = b.http_row(&key, full, run, &out);
        let detail = b.r.meta(&format!("{key}.detail")).unwrap_or("").to_string();
        row.detail = [detail, super::model::status_text(&out.statuses)]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        row.path_ok = Some(path_ok);
        for (label, proc_) in [("app_us_per_req", "seckill"), ("redis_us_per_req", "redis")] {
            row.extra(label, super::model::us_per_request(run, out.requests, proc_));
        }
        entry.http.insert(kind.into(), row);
    }
    let mut statuses: BTreeMap<&str, u64> = BTreeMap::new();
    for row in entry.http.values() {
        for (code, n) in row.statuses.iter().flatten() {
            *statuses.entry(code).or_default() += n;
        }
    }
    entry.server_errors = statuses.iter().filter(|(c, _)| c.starts_with('5')).map(|(_, n)| n).sum();
    if let Some(limited) = entry.http.get("limited").and_then(|r| r.statuses.as_ref()) {
        let total: u64 = limited.values().sum();
        entry.limited_429_share = (total > 0).then(|| *limited.get("429").unwrap_or(&0) as f64 / total as f64);
    }
    if let Some(instock) = entry.http.get("instock").and_then(|r| r.statuses.as_ref()) {
        entry.instock_429 = Some(*instock.get("429").unwrap_or(&0));
    }
    entry
}
