//! The shard-ceiling tables, printed and written to `load-tests/results/shard-ceiling.md`.

use super::Args;
use super::http::Http;
use super::masters::Masters;
use super::redis_rows::Ceiling;
use crate::measure::stats::group;

fn cores(cpu: Option<f64>, wall: f64) -> String {
    format!("{:.2}", cpu.unwrap_or(0.0) / wall)
}

/// "× K=1" of a figure, "-" without a K=1 run.
fn ratio(figures: &[(u32, f64)], value: f64) -> String {
    figures.iter().find(|(k, _)| *k == 1).map_or("-".into(), |(_, one)| format!("{:.2}", value / one))
}

fn ceiling_rows(masters: &Masters, ceiling: &[Ceiling]) -> (Vec<String>, Vec<String>) {
    let totals: Vec<(u32, f64)> =
        ceiling.iter().map(|c| (c.k, c.shards.iter().map(|s| s.bench.rate.round()).sum())).collect();
    let (mut rows, mut shard_rows) = (vec![], vec![]);
    for (c, (_, total)) in ceiling.iter().zip(&totals) {
        let (u, wall) = (&c.usage, c.usage.wall_s);
        let names: Vec<&str> = c.shards.iter().map(|s| masters.name(s.port)).collect();
        let ops: Vec<String> = c.shards.iter().map(|s| group(s.bench.rate)).collect();
        let lat: Vec<String> = c
            .shards
            .iter()
            .map(|s| format!("{}/{}", s.bench.p50_ms.unwrap_or(0.0), s.bench.p99_ms.unwrap_or(0.0)))
            .collect();
        let redis: Vec<String> = masters.names.iter().map(|m| cores(u.get(m), wall)).collect();
        let redis_s: f64 = masters.names.iter().filter_map(|m| u.get(m)).sum();
        let sent: u64 = c.shards.iter().map(|s| s.calls).sum();
        let other = (u.get("machine_busy").unwrap_or(0.0) - redis_s - u.generator()).max(0.0);
        rows.push(format!(
            "| {} | {} | {} | {} ({} by wall) | {} | {} | {} | {:.1} | {:.2} | {:.2} | {} | {wall:.3}s | {} |",
            c.k,
            names.join(" + "),
            ops.join(" + "),
            group(*total),
            group(sent as f64 / wall),
            ratio(&totals, *total),
            lat.join(" · "),
            redis.join(" · "),
            redis_s / sent as f64 * 1e6,
            u.generator() / wall,
            other / wall,
            cores(u.get("machine_steal"), wall),
            if c.ok { "ok" } else { "FAIL" }
        ));
        for s in &c.shards {
            let [initial, stock, buyers, xlen] = s.counts;
            shard_rows.push(format!(
                "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} ({:.2}%) | {} | {} |",
                c.k,
                s.tag,
                s.slot,
                masters.name(s.port),
                s.port,
                group(s.calls as f64),
                s.clients,
                group(s.bench.rate),
                s.bench.p50_ms.unwrap_or(0.0),
                s.bench.p99_ms.unwrap_or(0.0),
                group(initial as f64),
                group(stock as f64),
                group(buyers as f64),
                100.0 * buyers as f64 / s.calls as f64,
                group(xlen as f64),
                if s.ok { "ok" } else { "FAIL" }
            ));
        }
    }
    (rows, shard_rows)
}

fn http_rows(masters: &Masters, http: &Http) -> Vec<String> {
    let rates: Vec<(u32, f64)> =
        http.rows.iter().filter(|r| !r.on_server).map(|r| (r.k, r.out.rate().round())).collect();
    http.rows
        .iter()
        .map(|r| {
            let (u, wall, n) = (&r.usage, r.usage.wall_s, r.out.requests.max(1) as f64);
            let (servers, k) = match (r.on_server, r.k) {
                (true, 0) => (&["server"][..], "1 Redis".to_string()),
                (true, k) => (&["server"][..], format!("{k} on 1 Redis")),
                (false, k) => (&masters.names[..], k.to_string()),
            };
            let redis: Vec<String> = servers.iter().map(|m| cores(u.get(m), wall)).collect();
            let redis_s: f64 = servers.iter().filter_map(|m| u.get(m)).sum();
            let app = u.get("seckill").unwrap_or(0.0);
            let other = (u.get("machine_busy").unwrap_or(0.0) - redis_s - app - u.generator()).max(0.0);
            format!(
                "| {} | {} | {} | {}/{} | {:.2}% | {} | {:.2} | {:.1} | {:.1} | {:.2} + {:.2} | {:.1} | {} | {:.2} | {:.2} | {} |",
                k,
                group(r.out.rate()),
                ratio(&rates, r.out.rate().round()),
                r.out.latency_us.p50 / 1000.0,
                r.out.latency_us.p99 / 1000.0,
                100.0 * r.out.status("201") as f64 / n,
                r.out.failed(),
                app / wall,
                app / n * 1e6,
                redis_s / n * 1e6,
                r.switches.voluntary as f64 / n,
                r.switches.involuntary as f64 / n,
                n / r.script_calls.max(1) as f64,
                redis.join(" · "),
                u.generator() / wall,
                other / wall,
                cores(u.get("machine_steal"), wall)
            )
        })
        .collect()
}

/// The Markdown file; the two main tables are also printed.
pub fn render(
    args: &Args,
    masters: &Masters,
    ceiling: &[Ceiling],
    http: &Http,
    load: [&str; 3],
    started_at: &str,
) -> String {
    let (rows, shard_rows) = ceiling_rows(masters, ceiling);
    let (names, n) = (masters.names.join(" · "), masters.names.len());
    let table = [
        format!("| K | shards on | per-shard ops/s | total ops/s | × K=1 | p50/p99 ms per shard | redis CPU {names} | redis µs/call | bench CPU | other CPU | steal | wall | checks |"),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|".into(),
    ]
    .into_iter()
    .chain(rows)
    .collect::<Vec<_>>()
    .join("\n");
    let http_table = [
        format!("| K | POST /buy req/s | × K=1 | p50/p99 ms | 201 | errors | app CPU | app µs/req | redis µs/req | app context switches/req (voluntary + involuntary) | req per script call | redis CPU {names} | wrk CPU | other CPU | steal |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ]
    .into_iter()
    .chain(http_rows(masters, http))
    .collect::<Vec<_>>()
    .join("\n");
    println!("\n{table}\n\n{http_table}");
    let (cpu, nproc, kernel, _) = crate::measure::host::machine();
    let ports: Vec<String> = masters.ports().iter().map(u16::to_string).collect();
    let mut md = format!(
        "# One sale over K shards on K masters: the Redis ceiling and POST /buy\n\nGenerated by `cargo xtask shard-ceiling` at {started_at}.\n\n"
    );
    md += &format!(
        "- machine: {cpu}, {nproc} cores (shared by the {n} masters, the K load generators and other work), load average {} at start, {} at the first run, {} at the end; {kernel}\n",
        load[0], load[1], load[2]
    );
    md +=
        &format!("- {}; redis-benchmark (one thread per process)\n", crate::measure::host::version("redis-server", 3));
    md += &format!(
        "- servers: a {n}-master Redis Cluster of the testbed crate on 127.0.0.1 (no replicas, appendonly yes, appendfsync everysec); automatic AOF rewrites off during the runs (`auto-aof-rewrite-percentage 0`), the AOF is rewritten between runs\n"
    );
    md += &format!(
        "- load: per K, K redis-benchmark processes at the same time, one per shard, against that shard's master: `EVALSHA <buy.lua> 4 ceiling:{{sale:<S>[:<suffix>]}}:meta|stock|buyers|orders <S> u-__rand_int__ <order id> <K>`, `-r 100000000`, `-n {} / K`, `-c {} / K` (same total calls and total connections for every K), no pipelining\n",
        group(args.total_requests as f64),
        args.total_clients
    );
    md += &format!(
        "- sale: ceiling-kK, stock {} over K shards (never sells out), seeded through `PUT /admin/sales/ceiling-kK {{\"shards\": K}}`: the app split the stock and placed the shards by the slot map; the layout is read from shard 0's `shard_suffixes`\n",
        group(args.stock_total as f64)
    );
    md += &format!(
        "- columns: per-shard ops/s and p50/p99 as redis-benchmark reports them; total = sum of the shards (in brackets: all calls / wall time from the first start to the last exit); × K=1 on the sum; CPU columns in cores (CPU-seconds per wall second, 1.00 = one core) over the wall time: redis CPU of each master {names} (ports {}; utime+stime of each redis-server), redis µs/call = CPU-seconds of all masters together / all calls, bench = all redis-benchmark processes together, other = machine busy time minus those (other sessions and the idle single Redis/Postgres), steal = taken by the hypervisor\n",
        ports.join(" ")
    );
    md += "- checks per shard: stock_initial = stock + SCARD(buyers), XLEN(orders) = SCARD(buyers), and SCARD(buyers) >= 99% of the calls (the rest are users drawn twice: already_purchased)\n\n";
    md += &format!("{table}\n\n");
    md += &format!(
        "This machine has {nproc} cores. The {n} masters and the K load generators share them (the bench CPU column is what the generators took), so the scaling measured here is capped by the cores, not by Redis: the sum of the redis CPU column cannot exceed what the cores have left after the generators and other work. At K=1 one master (one core at most) does all the work; at K>1 the same work spreads over K masters. This run does not show what K masters on K dedicated cores (generators elsewhere) would reach.\n\n"
    );
    md += "## POST /buy end to end\n\n";
    md += &format!(
        "One `seckill serve` (worker in the process, SECKILL_RATE_LIMIT=1000000/1s{}, {}) on the cluster; per K the sale http-kK (stock {}, K shards); first, the row `1 Redis`: the same app settings on the single Redis server (appendonly yes, appendfsync everysec, as the masters), one unsharded sale. `wrk -t{} -c{} -d{}s` with `load-tests/lib/wrk-bench.lua` (every request a new user). CPU in cores over the run: the app, each master, wrk; other = the rest of the machine (Postgres among it). App µs/req = the app's CPU-seconds / requests, redis µs/req the same for the Redis servers together; context switches/req = voluntary + involuntary switches of all the app's threads (/proc/<pid>/task/*/status) / requests: fewer voluntary ones means each wake-up handled more work, involuntary ones are the app's threads giving their core to another process (on a small host, the masters); req per script call = requests / `EVALSHA` calls on the row's servers (`INFO commandstats`; the worker's scripts count too). Rows `K on 1 Redis` (`--server-k`): a sale of K shards on the single server, the same app as the `1 Redis` row.\n\n",
        args.app_env.iter().map(|(n, v)| format!(", {n}={v}")).collect::<String>(),
        args.bin.as_ref().map_or(format!("{:?} build", args.profile), |bin| format!("binary {}", bin.display())),
        group(args.http_stock as f64),
        args.threads,
        args.connections,
        args.duration
    );
    md += &format!("{http_table}\n\nAfter the runs (queues drained), `seckill reconcile`:\n\n");
    md += &http.reconciled.iter().map(|(line, _)| format!("- {line}\n")).collect::<String>();
    md += "\n## Per shard (Redis ceiling)\n\n| K | sub-sale | slot | master (port) | calls | clients | ops/s | p50 ms | p99 ms | stock_initial | stock | buyers (bought) | XLEN orders | check |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    md += &shard_rows.join("\n");
    md + "\n"
}
