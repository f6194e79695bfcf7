#!/usr/bin/env python3
"""Helpers for load-tests/bench.sh (standard library only).

  bench.py run --dir D [--timeout S] [--watch LABEL=PID ...] [--pgtree PID] NAME -- CMD ...
      Runs CMD (stdout to D/NAME.out, stderr to D/NAME.err), kills it by PID after S seconds,
      and writes D/NAME.run.json: exit code, wall time, the command's own CPU (user+sys, from
      wait4) and the CPU each watched process used meanwhile (/proc/PID/stat; --pgtree sums a
      postmaster and its children). Exits with CMD's exit code.
  bench.py sample-queue --port P --stream KEY --out F [--interval 0.1] [--max-seconds S]
      Until SIGTERM (or S seconds): every interval, XLEN of the stream and the age of its oldest
      entry (Redis TIME minus the entry id's milliseconds). Writes the maxima to F.
  bench.py drain --port P --stream KEY --out F --log F [--timeout S] [--watch ...] [--pgtree PID] -- CMD
      Starts CMD (the worker), polls XLEN every 5 ms until it is 0, stops CMD by PID (SIGTERM, then
      SIGKILL after 20 s); writes when it started, when the first batch left and when the last did,
      and the CPU used by CMD, Redis and Postgres meanwhile.
  bench.py quiet [--max-seconds S] [--threshold CORES]
      Waits until the machine's busy CPU over 2 s is below CORES (or S seconds passed); prints it.
  bench.py rate NAME --dir D
      Prints the request rate of wrk run NAME.
  bench.py report --dir D --json OUT --md OUT
      Reads D/meta.tsv and the files above, prints the table, writes bench.json and bench.md.
"""

import argparse
import json
import re
import os
import signal
import socket
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- /proc CPU accounting


def proc_cpu(pid):
    """utime+stime of one process in seconds, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is state (field 3); utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu(root):
    """CPU seconds of `root` and its direct children (a postmaster and its backends), by pid."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2 :].split()
        ppid = int(fields[1])
        if pid == root or ppid == root:
            out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def machine_cpu():
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


def watched_before(args):
    watch = {}
    for spec in args.watch or []:
        label, _, pid = spec.partition("=")
        if pid.isdigit():
            watch[label] = int(pid)
    state = {
        "watch": watch,
        "cpu": {label: proc_cpu(pid) for label, pid in watch.items()},
        "pg": tree_cpu(args.pgtree) if args.pgtree else {},
        "machine": machine_cpu(),
    }
    return state


def watched_after(args, state):
    out = {}
    for label, pid in state["watch"].items():
        after = proc_cpu(pid)
        if state["cpu"][label] is not None and after is not None:
            out[label] = round(after - state["cpu"][label], 3)
    if args.pgtree:
        pg_after = tree_cpu(args.pgtree)
        out["postgres"] = round(sum(cpu - state["pg"].get(pid, 0.0) for pid, cpu in pg_after.items()), 3)
    busy, steal = machine_cpu()
    out["machine_busy"] = round(busy - state["machine"][0], 3)
    out["machine_steal"] = round(steal - state["machine"][1], 3)
    return out


def cmd_run(args):
    os.makedirs(args.dir, exist_ok=True)
    before = watched_before(args)
    out_path = os.path.join(args.dir, args.name + ".out")
    err_path = os.path.join(args.dir, args.name + ".err")
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        timed_out = False
        deadline = t0 + args.timeout
        try:
            while True:
                pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                if pid == child.pid:
                    break
                if time.monotonic() > deadline and not timed_out:
                    timed_out = True
                    child.terminate()  # by PID
                    deadline = time.monotonic() + 5
                    continue
                if timed_out and time.monotonic() > deadline:
                    child.kill()
                    pid, status, usage = os.wait4(child.pid, 0)
                    break
                time.sleep(0.02)
        except KeyboardInterrupt:
            child.terminate()
            child.wait()
            raise
    wall = time.monotonic() - t0
    watched = watched_after(args, before)
    result = {
        "name": args.name,
        "cmd": cmd,
        "rc": os.waitstatus_to_exitcode(status),
        "timed_out": timed_out,
        "wall_s": round(wall, 3),
        "cpu_user_s": round(usage.ru_utime, 3),
        "cpu_sys_s": round(usage.ru_stime, 3),
        "watched_cpu_s": watched,
    }
    with open(os.path.join(args.dir, args.name + ".run.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return result["rc"]


# ---------------------------------------------------------------- a tiny Redis client


class Redis:
    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.file = self.sock.makefile("rb")

    def pipeline(self, *commands):
        buf = bytearray()
        for command in commands:
            buf += b"*%d\r\n" % len(command)
            for arg in command:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                buf += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(buf)
        return [self._read() for _ in commands]

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


class Stop(Exception):
    pass


def _raise_stop(*_):
    raise Stop()


def cmd_sample_queue(args):
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    r = Redis(args.port)
    stats = {"stream": args.stream, "interval_s": args.interval, "samples": 0, "max_xlen": 0,
             "max_oldest_age_ms": 0, "sum_xlen": 0, "nonempty_samples": 0}
    end = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < end:
            now, xlen, oldest = r.pipeline(("TIME",), ("XLEN", args.stream),
                                           ("XRANGE", args.stream, "-", "+", "COUNT", "1"))
            now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
            stats["samples"] += 1
            stats["sum_xlen"] += xlen
            stats["max_xlen"] = max(stats["max_xlen"], xlen)
            if oldest:
                stats["nonempty_samples"] += 1
                age = now_ms - int(oldest[0][0].split("-")[0])
                stats["max_oldest_age_ms"] = max(stats["max_oldest_age_ms"], age)
            time.sleep(args.interval)
    except Stop:
        pass
    finally:
        stats["mean_xlen"] = round(stats["sum_xlen"] / stats["samples"], 1) if stats["samples"] else 0
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=1)
    return 0


def cmd_drain(args):
    """Starts the worker command, polls XLEN every 5 ms until 0, then stops the worker by PID."""
    r = Redis(args.port)
    before = watched_before(args)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    (initial,) = r.pipeline(("XLEN", args.stream))
    first = None
    xlen = initial
    with open(args.log, "wb") as log:
        started = time.time()
        child = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        stop = {"signal": None}

        def on_signal(signum, _frame):
            stop["signal"] = signum

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            deadline = started + args.timeout
            while stop["signal"] is None:
                (xlen,) = r.pipeline(("XLEN", args.stream))
                t = time.time()
                if first is None and xlen < initial:
                    first = (t, xlen)
                if xlen == 0 or t > deadline or child.poll() is not None:
                    break
                time.sleep(0.005)
            ended = time.time()
            worker_cpu = proc_cpu(child.pid)
            watched = watched_after(args, before)
            if worker_cpu is not None:
                watched["worker"] = round(worker_cpu, 3)
        finally:
            if child.poll() is None:
                child.terminate()  # by PID
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
    result = {"stream": args.stream, "initial_xlen": initial, "final_xlen": xlen, "started": started,
              "first_drop_at": first[0] if first else None, "xlen_at_first_drop": first[1] if first else None,
              "ended_at": ended, "timed_out": xlen != 0, "worker_exit": child.returncode,
              "interrupted": stop["signal"] is not None, "wall_s": round(ended - started, 3),
              "watched_cpu_s": watched}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0 if xlen == 0 and stop["signal"] is None else 1


# ---------------------------------------------------------------- the report


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_meta(directory):
    meta = {}
    try:
        with open(os.path.join(directory, "meta.tsv"), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("\t")
                if key:
                    meta[key] = value
    except OSError:
        pass
    return meta


def wrk_result(directory, name):
    run = load_json(os.path.join(directory, name + ".run.json"))
    if run is None:
        return None
    data = None
    try:
        with open(os.path.join(directory, name + ".out"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("BENCH_WRK "):
                    data = json.loads(line[len("BENCH_WRK "):])
    except OSError:
        pass
    if data is None:
        return {"name": name, "run": run, "error": "no BENCH_WRK line in wrk output"}
    seconds = data["duration_us"] / 1e6
    lat = data["latency_us"]
    return {
        "name": name,
        "requests": data["requests"],
        "duration_s": round(seconds, 3),
        "rate": data["requests"] / seconds if seconds else 0.0,
        "p50_ms": lat["p50"] / 1000,
        "p90_ms": lat["p90"] / 1000,
        "p99_ms": lat["p99"] / 1000,
        "p999_ms": lat["p999"] / 1000,
        "max_ms": lat["max"] / 1000,
        "mean_ms": lat["mean"] / 1000,
        "statuses": {k: v for k, v in sorted(data["statuses"].items())},
        "socket_errors": {k: v for k, v in data["errors"].items() if k != "status" and v},
        "run": run,
    }


def redis_bench_result(directory, name):
    run = load_json(os.path.join(directory, name + ".run.json"))
    if run is None:
        return None
    out = {"name": name, "run": run}
    try:
        with open(os.path.join(directory, name + ".out"), encoding="utf-8", errors="replace") as f:
            rows = [line.strip() for line in f if line.strip()]
    except OSError:
        rows = []
    header = None
    for row in rows:
        cells = [c.strip('"') for c in row.split('","')]
        if cells and cells[0].startswith("test"):
            header = cells
            continue
        if header and len(cells) == len(header):
            rec = dict(zip(header, cells))
            out["rate"] = float(rec.get("rps", 0))
            for key, label in (("p50_latency_ms", "p50_ms"), ("p99_latency_ms", "p99_ms"),
                               ("avg_latency_ms", "mean_ms"), ("max_latency_ms", "max_ms")):
                if key in rec:
                    out[label] = float(rec[key])
    if "rate" not in out:
        out["error"] = "no CSV result from redis-benchmark"
    return out


def per_wall(run, cpu):
    wall = run.get("wall_s") or 0
    return cpu / wall if wall else None


def fmt_rate(value):
    return "-" if value is None else f"{value:,.0f}"


def fmt_ms(value):
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt_ratio(value):
    return "-" if value is None else f"{value:.2f}"


def fmt_cpu(value):
    return "-" if value is None else f"{value:.2f}"


def status_text(statuses, total=None):
    total = total or sum(statuses.values())
    if not total:
        return "-"
    parts = []
    for code, count in sorted(statuses.items(), key=lambda kv: -kv[1]):
        share = 100.0 * count / total
        parts.append(f"{code}: {count:,} ({share:.2f}%)" if share < 99.995 else f"{code}: {count:,} (100%)")
    return ", ".join(parts)


ANSI = re.compile(r"\x1b\[[0-9;]*m")
LEVEL = re.compile(r"^\S+\s+(WARN|ERROR)\b")
STATS = re.compile(r"WorkerStats \{ inserted: (\d+), redelivered: (\d+), conflicts: (\d+), malformed: (\d+), "
                   r"reclaimed: (\d+) \}")


def scan_logs(directory):
    """Warnings, errors and panics in the seckill logs, and the worker's final stats."""
    logs = {}
    for name in sorted(os.listdir(directory)):
        if not (name.startswith("seckill-") or name == "worker.log") or not name.endswith(".log"):
            continue
        info = {"warn": 0, "error": 0, "panic": 0, "first_problem": None, "worker_stats": None}
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = ANSI.sub("", line).rstrip("\n")
                level = LEVEL.match(line)
                bad = None
                if level:
                    bad = level.group(1).lower()
                elif "panicked" in line:
                    bad = "panic"
                if bad:
                    info[bad] += 1
                    info["first_problem"] = info["first_problem"] or line[:300]
                stats = STATS.search(line)
                if stats:
                    info["worker_stats"] = dict(zip(("inserted", "redelivered", "conflicts", "malformed",
                                                     "reclaimed"), map(int, stats.groups())))
        logs[name] = info
    return logs


def cost_text(watched, ops, gen_cpu_s=None):
    """CPU microseconds per operation of each process."""
    if not ops:
        return ""
    parts = []
    for label, key in (("app", "seckill"), ("worker", "worker"), ("redis", "redis"), ("postgres", "postgres")):
        if key in watched and watched[key] > 0.0005:
            parts.append(f"{label} {watched[key] / ops * 1e6:,.1f}")
    if gen_cpu_s:
        parts.append(f"generator {gen_cpu_s / ops * 1e6:,.1f}")
    return "CPU µs per operation: " + ", ".join(parts) if parts else ""


def cmd_quiet(args):
    """Waits (up to max_seconds) until the machine's busy CPU over a 2 s window is below threshold."""
    deadline = time.monotonic() + args.max_seconds
    busy_cores = None
    while True:
        b0, _ = machine_cpu()
        time.sleep(2)
        b1, _ = machine_cpu()
        busy_cores = (b1 - b0) / 2
        if busy_cores < args.threshold or time.monotonic() >= deadline:
            break
    print(f"{busy_cores:.2f}")
    return 0 if busy_cores < args.threshold else 1


def cmd_rate(args):
    res = wrk_result(args.dir, args.name)
    if not res or "rate" not in res:
        print(f"no wrk result for {args.name}", file=sys.stderr)
        return 1
    print(f"{res['rate']:.0f}")
    return 0


def cmd_report(args):
    d = args.dir
    meta = read_meta(d)
    rows = []  # dicts: key, scenario, unit, rate, p50, p99, ratio, detail, gen_cpu, app_cpu, redis_cpu, target, met
    problems = []

    healthz_runs = [r for r in (wrk_result(d, "http-healthz"), wrk_result(d, "http-healthz-2"))
                    if r and "rate" in r]
    best_healthz = max(healthz_runs, key=lambda r: r["rate"]) if healthz_runs else None
    ceiling = best_healthz["rate"] if best_healthz else None

    def cpu_cols(res, gen=True):
        run = res.get("run") or {}
        w = run.get("watched_cpu_s", {})
        cols = {
            "gen_cpu": per_wall(run, run.get("cpu_user_s", 0) + run.get("cpu_sys_s", 0)) if gen else None,
            "app_cpu": per_wall(run, w["seckill"]) if "seckill" in w else None,
            "redis_cpu": per_wall(run, w["redis"]) if "redis" in w else None,
            "pg_cpu": per_wall(run, w["postgres"]) if "postgres" in w else None,
            "busy_cpu": per_wall(run, w["machine_busy"]) if "machine_busy" in w else None,
            "steal_cpu": per_wall(run, w["machine_steal"]) if "machine_steal" in w else None,
        }
        ours = sum(v for k, v in cols.items() if k in ("gen_cpu", "app_cpu", "redis_cpu", "pg_cpu") and v)
        cols["other_cpu"] = max(0.0, cols["busy_cpu"] - ours) if cols["busy_cpu"] is not None else None
        return cols

    def count_of(key):
        return int(meta.get(key + ".count", "0") or 0)

    def ratio(rate):
        return rate / ceiling if (ceiling and rate is not None) else None

    def expect_share(res, code, minimum, label):
        total = sum(res["statuses"].values())
        share = res["statuses"].get(code, 0) / total if total else 0
        ok = share >= minimum
        server_errors = {k: v for k, v in res["statuses"].items() if k.startswith("5")}
        if server_errors:
            problems.append(f"{label}: server errors {server_errors} (see the app log)")
        if res.get("socket_errors"):
            problems.append(f"{label}: wrk socket errors {res['socket_errors']}")
        if not ok:
            problems.append(f"{label}: only {share:.2%} {code} (expected >= {minimum:.0%}); path not as intended")
        return ok, share

    http_rows = [
        ("http-healthz", "GET /healthz (HTTP ceiling)", "200", 0.9999, None, None),
        ("http-buy-instock", "POST /buy in stock, distinct users", "201", 0.99, 0.5,
         "≥ 0.50 × healthz"),
        ("http-buy-soldout", "POST /buy sold out", "410", 0.99, 0.8,
         "≥ 0.80 × healthz"),
        ("http-buy-limited", "POST /buy rate limited", "429", 0.99, 0.8,
         "≥ 0.80 × healthz"),
    ]
    for key, label, code, share_min, target_ratio, target_text in http_rows:
        res = best_healthz if key == "http-healthz" else wrk_result(d, key)
        if res is None or "rate" not in res:
            problems.append(f"{label}: no result ({res.get('error') if res else 'not run'})")
            rows.append({"key": key, "scenario": label, "unit": "req/s", "met": None,
                         "target": target_text or "", "detail": "not run"})
            continue
        path_ok, _ = expect_share(res, code, share_min, label)
        r = ratio(res["rate"])
        met = None if target_ratio is None else (r is not None and r >= target_ratio)
        row = {"key": key, "scenario": label, "unit": "req/s", "rate": res["rate"], "p50_ms": res["p50_ms"],
               "p99_ms": res["p99_ms"], "ratio": r,
               "detail": "; ".join(x for x in (meta.get(key + ".detail"), status_text(res["statuses"])) if x),
               "source": res["name"],
               "path_ok": path_ok, "target": target_text or "(reference)", "met": met,
               "requests": res["requests"], "duration_s": res["duration_s"], "statuses": res["statuses"],
               "socket_errors": res.get("socket_errors", {}), "p90_ms": res["p90_ms"],
               "p999_ms": res["p999_ms"], "max_ms": res["max_ms"]}
        row.update(cpu_cols(res))
        row["cost"] = cost_text(res["run"]["watched_cpu_s"], res["requests"],
                                res["run"]["cpu_user_s"] + res["run"]["cpu_sys_s"])
        if key == "http-healthz" and len(healthz_runs) > 1:
            runs = ", ".join(f"{'first' if r['name'] == 'http-healthz' else 'after the /buy rows'} "
                             f"{r['rate']:,.0f} req/s (p99 {fmt_ms(r['p99_ms'])} ms)" for r in healthz_runs)
            row["detail"] += f"; the better of two runs: {runs}"
            row["runs"] = [{"name": r["name"], "rate": r["rate"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
                           for r in healthz_runs]
        rows.append(row)

    paced = wrk_result(d, "http-buy-instock-paced")
    if paced and "rate" in paced:
        target_rate = float(meta.get("paced.target_rate", "0") or 0)
        path_ok, _ = expect_share(paced, "201", 0.99, "paced in-stock")
        reached = paced["rate"] >= 0.95 * target_rate if target_rate else False
        met = paced["p99_ms"] < 10.0 and reached
        note = "" if reached else f" (rate reached only {paced['rate']:,.0f} of {target_rate:,.0f}/s)"
        row = {"key": "http-buy-instock-paced",
               "scenario": "POST /buy in stock, paced at 80% of peak",
               "unit": "req/s", "rate": paced["rate"], "p50_ms": paced["p50_ms"], "p99_ms": paced["p99_ms"],
               "ratio": ratio(paced["rate"]),
               "detail": (f"scheduled {target_rate:,.0f}/s = 80% of the in-stock peak, over "
                          f"{meta.get('paced.connections', '?')} connections; " + status_text(paced["statuses"]) + note),
               "path_ok": path_ok, "target": "p99 < 10 ms", "met": met,
               "target_rate": target_rate, "requests": paced["requests"], "duration_s": paced["duration_s"],
               "statuses": paced["statuses"], "p90_ms": paced["p90_ms"], "p999_ms": paced["p999_ms"],
               "max_ms": paced["max_ms"]}
        row.update(cpu_cols(paced))
        row["cost"] = cost_text(paced["run"]["watched_cpu_s"], paced["requests"],
                                paced["run"]["cpu_user_s"] + paced["run"]["cpu_sys_s"])
        rows.append(row)
    else:
        problems.append("paced in-stock run: no result")

    light = wrk_result(d, "http-buy-instock-light")
    if light and "rate" in light:
        target_rate = float(meta.get("light.target_rate", "0") or 0)
        path_ok, _ = expect_share(light, "201", 0.99, "light in-stock")
        row = {"key": "http-buy-instock-light",
               "scenario": f"POST /buy in stock, paced at {target_rate:,.0f}/s",
               "unit": "req/s", "rate": light["rate"], "p50_ms": light["p50_ms"], "p99_ms": light["p99_ms"],
               "ratio": ratio(light["rate"]),
               "detail": f"light load, {meta.get('light.connections', '?')} connections; " + status_text(light["statuses"]),
               "path_ok": path_ok,
               "target": "(latency floor)", "met": None, "target_rate": target_rate,
               "requests": light["requests"], "duration_s": light["duration_s"], "statuses": light["statuses"],
               "p90_ms": light["p90_ms"], "p999_ms": light["p999_ms"], "max_ms": light["max_ms"]}
        row.update(cpu_cols(light))
        row["cost"] = cost_text(light["run"]["watched_cpu_s"], light["requests"],
                                light["run"]["cpu_user_s"] + light["run"]["cpu_sys_s"])
        rows.append(row)

    def redis_row(key, label):
        res = redis_bench_result(d, key)
        if res is None or "rate" not in res:
            problems.append(f"{label}: no result")
            return None
        detail = meta.get(key + ".detail", "")
        probe = meta.get(key + ".probe")
        if probe:
            detail += f"; one more call right after the run answered {{{probe.replace(' ', ', ')}}} " \
                      "(allowed, remaining, retry_after_us, reset_us)"
        row = {"key": key, "scenario": label, "unit": "ops/s", "rate": res["rate"], "p50_ms": res.get("p50_ms"),
               "p99_ms": res.get("p99_ms"), "ratio": ratio(res["rate"]), "detail": detail,
               "target": "(Redis ceiling)", "met": None, "calls": count_of(key)}
        if probe:
            row["probe"] = dict(zip(("allowed", "remaining", "retry_after_us", "reset_us"),
                                    (int(x) for x in probe.split())))
        ok = meta.get(key + ".ok")
        if ok is not None and count_of(key):
            row["statuses"] = {"ok": int(ok)}
            if count_of(key) > int(ok):
                row["statuses"]["other"] = count_of(key) - int(ok)
        row.update(cpu_cols(res))
        watched = res["run"]["watched_cpu_s"]
        row["redis_us_per_op"] = watched["redis"] / count_of(key) * 1e6 if count_of(key) and "redis" in watched \
            else None
        row["cost"] = cost_text(watched, count_of(key), res["run"]["cpu_user_s"] + res["run"]["cpu_sys_s"])
        return row

    row = redis_row("redis-buy", "Redis buy.lua, distinct users")
    if row:
        rows.append(row)

    # Per limiter algorithm: three redis-benchmark rows and two HTTP rows, side by side.
    algorithms = []
    for alg in meta.get("algorithms", "").split():
        entry = {"algorithm": alg, "script": f"lua/{alg.replace('-', '_')}.lua", "redis": {}, "http": {}}
        for kind, label in (("hot-admit", "one hot key, admitted"), ("perclient", "key per client"),
                            ("hot-refused", "one hot key, refused")):
            row = redis_row(f"redis-{alg}-{kind}", f"Redis {entry['script'][4:]}, {label}")
            if row:
                entry["redis"][kind] = row
        for kind, label, code in (("instock", "POST /buy in stock (limiter admits all)", "201"),
                                  ("limited", "POST /buy rate limited", "429")):
            key = f"alg-{alg}-{kind}"
            full = f"{alg}: {label}"
            res = wrk_result(d, key)
            if res is None or "rate" not in res:
                problems.append(f"{full}: no result ({res.get('error') if res else 'not run'})")
                continue
            path_ok, share = expect_share(res, code, 0.99, full)
            if kind == "instock" and res["statuses"].get("429"):
                problems.append(f"{full}: the limiter refused {res['statuses']['429']:,} requests (429) although it "
                                "should admit every one")
            row = {"key": key, "scenario": full, "unit": "req/s", "rate": res["rate"], "p50_ms": res["p50_ms"],
                   "p99_ms": res["p99_ms"], "ratio": ratio(res["rate"]),
                   "detail": "; ".join(x for x in (meta.get(key + ".detail"), status_text(res["statuses"])) if x),
                   "path_ok": path_ok, "target": "", "met": None, "requests": res["requests"],
                   "duration_s": res["duration_s"], "statuses": res["statuses"],
                   "socket_errors": res.get("socket_errors", {}), "p90_ms": res["p90_ms"],
                   "p999_ms": res["p999_ms"], "max_ms": res["max_ms"]}
            row.update(cpu_cols(res))
            watched = res["run"]["watched_cpu_s"]
            for label_, proc in (("app_us_per_req", "seckill"), ("redis_us_per_req", "redis")):
                row[label_] = watched[proc] / res["requests"] * 1e6 if res["requests"] and proc in watched else None
            row["cost"] = cost_text(watched, res["requests"], res["run"]["cpu_user_s"] + res["run"]["cpu_sys_s"])
            entry["http"][kind] = row
        statuses = {}
        for row in entry["http"].values():
            for code, n in row["statuses"].items():
                statuses[code] = statuses.get(code, 0) + n
        entry["server_errors"] = sum(n for code, n in statuses.items() if code.startswith("5"))
        limited = entry["http"].get("limited")
        if limited:
            total = sum(limited["statuses"].values())
            entry["limited_429_share"] = limited["statuses"].get("429", 0) / total if total else None
        instock = entry["http"].get("instock")
        if instock:
            entry["instock_429"] = instock["statuses"].get("429", 0)
        algorithms.append(entry)

    drain = load_json(os.path.join(d, "drain.json"))
    if drain and drain.get("first_drop_at"):
        orders = int(meta.get("drain.orders", drain["initial_xlen"] or 0))
        steady_s = drain["ended_at"] - drain["first_drop_at"]
        total_s = drain["ended_at"] - drain["started"]
        steady = drain["xlen_at_first_drop"] / steady_s if steady_s > 0 else None
        overall = orders / total_s if total_s > 0 else None
        pg_rows = int(meta.get("drain.pg_rows", "-1"))
        ok_rows = pg_rows == orders
        if not ok_rows:
            problems.append(f"worker drain: Postgres has {pg_rows} rows for the drain sale, expected {orders}")
        if drain.get("timed_out"):
            problems.append("worker drain: the queue did not drain in time")
        wcpu = drain.get("watched_cpu_s", {})
        wall = drain["ended_at"] - drain["started"]
        w = {f"{k}_cpu_per_s": (v / wall if wall > 0 else None) for k, v in wcpu.items()}
        row = {"key": "worker-drain", "scenario": "worker drain, Redis → Postgres",
               "unit": "orders/s", "rate": steady, "ratio": ratio(steady),
               "detail": (f"{orders:,} orders queued, batch {meta.get('worker.batch', '?')}; all drained in {total_s:.2f} s from "
                          f"`seckill worker` start = {overall:,.0f}/s incl. start-up; Postgres rows "
                          f"{pg_rows:,}"),
               "target": "≥ 30,000/s", "met": steady is not None and steady >= 30000 and ok_rows,
               "overall_rate": overall, "steady_seconds": steady_s, "total_seconds": total_s,
               "pg_rows": pg_rows,
               "gen_cpu": None, "app_cpu": w.get("worker_cpu_per_s"), "redis_cpu": w.get("redis_cpu_per_s"),
               "pg_cpu": w.get("postgres_cpu_per_s"), "busy_cpu": w.get("machine_busy_cpu_per_s"),
               "steal_cpu": w.get("machine_steal_cpu_per_s")}
        ours = sum(v for v in (row["app_cpu"], row["redis_cpu"], row["pg_cpu"]) if v is not None)
        row["other_cpu"] = max(0.0, row["busy_cpu"] - ours) if row["busy_cpu"] is not None else None
        row["cost"] = cost_text(wcpu, orders)
        rows.append(row)
    else:
        problems.append("worker drain: no result")

    queue = load_json(os.path.join(d, "queue-instock.json"))
    lag = load_json(os.path.join(d, "lag-instock.json"))
    if queue or lag:
        max_lag_ms = lag.get("max_ms") if lag else None
        parts = []
        if queue:
            parts.append(f"max XLEN {queue['max_xlen']:,} (mean {queue['mean_xlen']:,}), oldest entry at most "
                         f"{queue['max_oldest_age_ms']:,} ms old ({queue['samples']} samples every "
                         f"{int(queue['interval_s'] * 1000)} ms)")
        if lag:
            parts.append(f"Postgres persisted_at − created_at over {lag.get('orders', 0):,} orders: "
                         f"p50 {fmt_ms(lag.get('p50_ms'))} ms, p99 {fmt_ms(lag.get('p99_ms'))} ms, "
                         f"max {fmt_ms(max_lag_ms)} ms")
        worst = max(x for x in (max_lag_ms, queue and queue["max_oldest_age_ms"]) if x is not None) \
            if (max_lag_ms is not None or queue) else None
        rows.append({"key": "queue-lag", "scenario": "queue lag, in-stock run",
                     "unit": "ms", "rate": None, "lag_ms": worst, "p50_ms": lag.get("p50_ms") if lag else None,
                     "p99_ms": lag.get("p99_ms") if lag else None, "ratio": None, "detail": "; ".join(parts),
                     "target": "≤ 1 s", "met": worst is not None and worst <= 1000,
                     "max_xlen": queue["max_xlen"] if queue else None,
                     "max_oldest_age_ms": queue["max_oldest_age_ms"] if queue else None,
                     "pg_lag": lag})
    else:
        problems.append("queue lag: no result")

    checks = []
    for key, value in meta.items():
        if key.startswith("check."):
            sale = key[len("check."):]
            report = None
            try:
                with open(os.path.join(d, f"check-{sale}.out"), encoding="utf-8") as f:
                    report = json.loads(f.read().strip() or "null")
            except (OSError, ValueError):
                pass
            checks.append({"sale": sale, "rc": int(value), "consistent": int(value) == 0, "report": report})
    checks.sort(key=lambda c: c["sale"])
    for c in checks:
        if not c["consistent"]:
            problems.append(f"invariants: sale {c['sale']} is NOT consistent (reconcile exit {c['rc']})")

    order = ["http-healthz", "http-buy-instock", "http-buy-instock-paced", "http-buy-instock-light",
             "http-buy-soldout", "http-buy-limited"]
    rows.sort(key=lambda r: order.index(r["key"]) if r["key"] in order else len(order))

    all_rows = rows + [r for a in algorithms for part in ("redis", "http") for r in a[part].values()]
    others = [r["other_cpu"] for r in all_rows if r.get("other_cpu") is not None]
    notes = []
    if others and max(others) > 0.25:
        notes.append(f"other processes kept up to {max(others):.2f} cores busy during the rows (mean "
                     f"{sum(others) / len(others):.2f}; see the other CPU column): the machine was shared, so "
                     "rates are lower and tails longer than on an idle machine; ratios within one row set are "
                     "affected too, as the load varied between rows")
    above = [r for r in all_rows if (r.get("ratio") or 0) > 1.0 and r.get("unit") == "req/s"]
    if above and best_healthz:
        ceiling_other = cpu_cols(best_healthz).get("other_cpu")
        notes.append("above 1.00 × healthz: " + ", ".join(
            f"{r['scenario']} ({r['ratio']:.2f}, other CPU {fmt_cpu(r.get('other_cpu'))})" for r in above)
            + f"; the /healthz ceiling ran while other processes used {fmt_cpu(ceiling_other)} cores. Rates taken "
            "at different moments of a shared machine are not comparable; the CPU µs per request are much less "
            "affected")
    steals = [r["steal_cpu"] for r in all_rows if r.get("steal_cpu") is not None]
    if steals and max(steals) > 0.05:
        notes.append(f"the hypervisor took up to {max(steals):.2f} cores (steal)")

    logs = scan_logs(d)
    for name, info in logs.items():
        if info["warn"] or info["error"] or info["panic"]:
            problems.append(f"{name}: {info['warn']} warnings, {info['error']} errors, {info['panic']} panics; "
                            f"first: {info['first_problem']}")
        ws = info["worker_stats"]
        if ws and (ws["conflicts"] or ws["malformed"]):
            problems.append(f"{name}: worker stats {ws}")
    drain_stats = (logs.get("worker.log") or {}).get("worker_stats")
    for row in rows:
        if row["key"] == "worker-drain" and drain_stats:
            row["detail"] += "; `seckill worker` stats at exit: " + ", ".join(f"{k} {v}" for k, v in drain_stats.items())
            row["worker_stats"] = drain_stats

    result = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {k[len("machine."):]: v for k, v in meta.items() if k.startswith("machine.")},
        "settings": {k[len("setting."):]: v for k, v in meta.items() if k.startswith("setting.")},
        "healthz_rate": ceiling,
        "rows": rows,
        "algorithms": algorithms,
        "invariants": checks,
        "logs": logs,
        "notes": notes,
        "problems": problems,
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")

    md = render_markdown(result)
    with open(args.md, "w", encoding="utf-8") as f:
        f.write(md)
    print(render_text(result))
    return 0


def met_text(met):
    return "-" if met is None else ("met" if met else "NOT MET")


def figure(row):
    if row["key"] == "queue-lag":
        return (f"{row['lag_ms']:,.0f} ms" if row.get("lag_ms") is not None else "-")
    return f"{fmt_rate(row.get('rate'))} {row['unit']}"


def main_status(row):
    statuses = row.get("statuses")
    if not statuses:
        return "-"
    total = sum(statuses.values())
    code, count = max(statuses.items(), key=lambda kv: kv[1])
    share = 100.0 * count / total
    text = f"{code} {share:.2f}%" if share < 99.995 else f"{code} 100%"
    return text if row.get("path_ok", True) else text + " (!)"


def table_cells(row):
    return [row["scenario"], figure(row), main_status(row), fmt_ms(row.get("p50_ms")), fmt_ms(row.get("p99_ms")),
            fmt_ratio(row.get("ratio")), fmt_cpu(row.get("gen_cpu")), fmt_cpu(row.get("app_cpu")),
            fmt_cpu(row.get("redis_cpu")), fmt_cpu(row.get("pg_cpu")), fmt_cpu(row.get("other_cpu")),
            fmt_cpu(row.get("steal_cpu")), row.get("target", ""),
            met_text(row.get("met"))]


HEAD = ["scenario", "figure", "status", "p50 ms", "p99 ms", "× healthz", "gen CPU", "app CPU", "redis CPU", "pg CPU",
        "other CPU", "steal", "target", "result"]
TARGET_COL = HEAD.index("target")


ALG_HEAD = ["algorithm", "EVALSHA hot admitted", "key per client", "hot refused", "/buy limited req/s (× healthz)",
            "/buy in stock req/s (× healthz)", "429 share", "5xx"]
ALG_COST_HEAD = ["algorithm", "Redis CPU µs/call: hot admitted", "key per client", "hot refused",
                 "EVALSHA p99 ms (admitted / per client / refused)", "/buy in stock p50 / p99 ms",
                 "/buy in stock CPU µs/req (app / Redis)", "/buy limited p50 / p99 ms", "/buy limited app CPU µs/req"]


def fmt_us(value):
    return "-" if value is None else f"{value:.1f}"


def alg_cells(a):
    redis, http = a["redis"], a["http"]

    def ops(kind):
        row = redis.get(kind)
        return f"{fmt_rate(row['rate'])} ops/s" if row else "-"

    def req(kind):
        row = http.get(kind)
        if not row:
            return "-"
        return f"{fmt_rate(row['rate'])} ({fmt_ratio(row.get('ratio'))})" + ("" if row.get("path_ok", True) else " (!)")

    share = a.get("limited_429_share")
    share_text = "-" if share is None else (f"{share * 100:.2f}%" if share < 0.99995 else "100%")
    if a.get("instock_429"):
        share_text += f" (in stock: {a['instock_429']:,} × 429!)"
    return [a["algorithm"], ops("hot-admit"), ops("perclient"), ops("hot-refused"), req("limited"), req("instock"),
            share_text, f"{a.get('server_errors', 0):,}"]


def alg_cost_cells(a):
    redis, http = a["redis"], a["http"]

    def us(kind):
        row = redis.get(kind)
        return fmt_us(row.get("redis_us_per_op")) if row else "-"

    p99s = " / ".join(fmt_ms(redis[k].get("p99_ms")) if k in redis else "-"
                      for k in ("hot-admit", "perclient", "hot-refused"))

    def lat(kind):
        row = http.get(kind)
        return f"{fmt_ms(row['p50_ms'])} / {fmt_ms(row['p99_ms'])}" if row else "-"

    instock = http.get("instock")
    limited = http.get("limited")
    return [a["algorithm"], us("hot-admit"), us("perclient"), us("hot-refused"), p99s, lat("instock"),
            f"{fmt_us(instock.get('app_us_per_req'))} / {fmt_us(instock.get('redis_us_per_req'))}" if instock else "-",
            lat("limited"), fmt_us(limited.get("app_us_per_req")) if limited else "-"]


def text_table(head, cells, left=(0,)):
    cells = [head] + cells
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(head))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(str(v).ljust(widths[i]) if i in left else str(v).rjust(widths[i])
                               for i, v in enumerate(c)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def md_table(head, cells, left=(0,)):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i in left else "---:" for i in range(len(head))) + "|"]
    for c in cells:
        out.append("| " + " | ".join(str(v).replace("|", "\\|") for v in c) + " |")
    return out


ALG_INTRO = ("Each algorithm's script (`lua/sliding_log.lua` for sliding-log, and so on) under `redis-benchmark` EVALSHA, and `POST /buy` "
             "through an app restarted with `SECKILL_RATE_LIMIT_ALGORITHM=<algorithm>`: rate limited = "
             "`SECKILL_RATE_LIMIT={limited}`, one client address, in-stock sale; in stock = "
             "`SECKILL_RATE_LIMIT={high}`, every request admitted, so the row shows what the limiter costs the "
             "purchase path. {seconds} per HTTP row; × healthz is against the main table's ceiling. "
             "429 share = of the rate-limited row; 5xx = of both HTTP rows.")


def render_text(result):
    lines = []
    m = result["machine"]
    s = result["settings"]
    lines.append(f"seckill bench — {result['generated_at']} — {m.get('cpu', '?')}, {m.get('nproc', '?')} cores, "
                 f"load avg at start {m.get('loadavg', '?')}, busy before the runs {m.get('busy_before', '?')} cores")
    lines.append(f"HTTP generator: {s.get('generator', '?')}; {s.get('duration', '?')} per HTTP scenario.")
    lines.append("CPU columns: CPU-seconds per wall second during the row (1.00 = one core): gen = the load "
                 "generator, app = seckill (drain row: `seckill worker`), pg = Postgres, other = the rest of the "
                 "machine (/proc/stat busy minus those), steal = time the hypervisor took.")
    lines.append("")
    cells = [HEAD] + [table_cells(r) for r in result["rows"]]
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(HEAD))]
    for n, c in enumerate(cells):
        lines.append("  ".join(str(v).ljust(widths[i]) if i in (0, TARGET_COL) else str(v).rjust(widths[i])
                               for i, v in enumerate(c)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if result.get("algorithms"):
        lines.append("")
        lines.append("rate limiter, per algorithm: " + ALG_INTRO.format(
            limited=s.get("limited_rate_limit", "?"), high=s.get("high_rate_limit", "?"),
            seconds=s.get("duration_alg", "?")).replace("`", ""))
        lines.append("")
        lines += text_table(ALG_HEAD, [alg_cells(a) for a in result["algorithms"]])
        lines.append("")
        lines += text_table(ALG_COST_HEAD, [alg_cost_cells(a) for a in result["algorithms"]])
    lines.append("")
    lines.append("details:")
    for r in result["rows"]:
        detail = "; ".join(x for x in (r.get("detail"), r.get("cost")) if x)
        if detail:
            lines.append(f"  {r['scenario']}: {detail}")
    lines.append("")
    lines.append("invariants (seckill reconcile, after the queue drained):")
    for c in result["invariants"]:
        rep = c["report"] or {}
        lines.append(f"  {c['sale']}: {'consistent' if c['consistent'] else 'NOT CONSISTENT'} "
                     f"(stock_initial {rep.get('stock_initial', '?')}, stock_left {rep.get('stock_left', '?')}, "
                     f"buyers {rep.get('buyers', '?')}, persisted {rep.get('persisted', '?')}, "
                     f"queued {rep.get('queued', '?')}, missing {len(rep.get('missing_in_postgres') or [])}, "
                     f"unknown {len(rep.get('unknown_to_redis') or [])})")
    if result["notes"]:
        lines.append("")
        lines.append("notes:")
        for n in result["notes"]:
            lines.append(f"  - {n}")
    if result["problems"]:
        lines.append("")
        lines.append("problems:")
        for p in result["problems"]:
            lines.append(f"  - {p}")
    return "\n".join(lines)


def render_markdown(result):
    m = result["machine"]
    s = result["settings"]
    out = ["# seckill bench results", "",
           f"Generated by `load-tests/bench.sh` at {result['generated_at']}.", "",
           f"- machine: {m.get('cpu', '?')}, {m.get('nproc', '?')} cores (shared by the generator, seckill, "
           f"Redis and Postgres), load average at start {m.get('loadavg', '?')}, busy CPU just before the runs "
           f"{m.get('busy_before', '?')} cores, {m.get('kernel', '?')}",
           f"- versions: {m.get('versions', '?')}",
           f"- HTTP generator: {s.get('generator', '?')}, {s.get('duration', '?')} per HTTP scenario; "
           f"Redis generator: {s.get('redis_generator', '?')}",
           f"- settings: {s.get('app', '?')}",
           "- CPU columns: CPU-seconds per wall second while the row ran (1.00 = one core); gen = the load "
           "generator itself, app = the seckill process (for the drain row: `seckill worker`), pg = the "
           "postmaster and its backends, other = everything else on the machine (busy time from /proc/stat "
           "minus the four before: other sessions' work shares these cores), steal = CPU time the "
           "hypervisor gave to other guests.", "",
           "| " + " | ".join(HEAD) + " |",
           "|" + "|".join("---" if i in (0, TARGET_COL) else "---:" for i in range(len(HEAD))) + "|"]
    for r in result["rows"]:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in table_cells(r)) + " |")
    if result.get("algorithms"):
        out += ["", "## Rate limiter, per algorithm", "",
                ALG_INTRO.format(limited=s.get("limited_rate_limit", "?"), high=s.get("high_rate_limit", "?"),
                                 seconds=s.get("duration_alg", "?")), ""]
        out += md_table(ALG_HEAD, [alg_cells(a) for a in result["algorithms"]])
        out += ["", "What each costs: Redis CPU per limiter call (from Redis's own CPU time during the run, far less "
                "sensitive to other load on the machine than the rates), the EVALSHA p99, and the latency and CPU "
                "per request of the two `/buy` rows.", ""]
        out += md_table(ALG_COST_HEAD, [alg_cost_cells(a) for a in result["algorithms"]])
    out += ["", "## Details", ""]
    for r in result["rows"]:
        detail = "; ".join(x for x in (r.get("detail"), r.get("cost")) if x)
        if detail:
            out.append(f"- **{r['scenario']}**: {detail}")
    for a in result.get("algorithms") or []:
        for r in list(a["redis"].values()) + list(a["http"].values()):
            detail = "; ".join(x for x in (r.get("detail"), r.get("cost")) if x)
            extra = (f"p50 {fmt_ms(r.get('p50_ms'))} ms, p99 {fmt_ms(r.get('p99_ms'))} ms, CPU per wall second: "
                     + ", ".join(f"{k[:-4]} {fmt_cpu(r.get(k))}" for k in ("gen_cpu", "app_cpu", "redis_cpu",
                                                                            "pg_cpu", "other_cpu")
                                 if r.get(k) is not None))
            out.append(f"- **{a['algorithm']}, {r['scenario'].split(': ', 1)[-1] if r['key'].startswith('alg-') else r['scenario']}**"
                       f": {fmt_rate(r.get('rate'))} {r['unit']}; {extra}; {detail}")
    out += ["", "## Invariants", "", "`seckill reconcile SALE` after the queue drained, for every sale used:", ""]
    for c in result["invariants"]:
        rep = c["report"] or {}
        out.append(f"- `{c['sale']}`: {'consistent' if c['consistent'] else '**NOT CONSISTENT**'} — "
                   f"stock_initial {rep.get('stock_initial', '?')}, stock_left {rep.get('stock_left', '?')}, "
                   f"buyers {rep.get('buyers', '?')}, persisted {rep.get('persisted', '?')}, queued "
                   f"{rep.get('queued', '?')}, missing_in_postgres {len(rep.get('missing_in_postgres') or [])}, "
                   f"unknown_to_redis {len(rep.get('unknown_to_redis') or [])}")
    if result["notes"]:
        out += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    if result["problems"]:
        out += ["", "## Problems", ""] + [f"- {p}" for p in result["problems"]]
    out += ["", "## How each figure is measured", "", HOW_MEASURED.strip(), ""]
    return "\n".join(out)


HOW_MEASURED = """
- **HTTP rows**: `wrk` with `load-tests/lib/wrk-bench.lua` (same script and threads for every row; same
  connections too, except the paced 80% row). The script builds each `/buy` body in `request()` with a new user id
  `<run prefix>-<counter>-<wrk thread>`, and counts statuses in `response()`; `done()` prints requests,
  duration and wrk's latency percentiles (closed loop: each connection sends its next request when the
  previous answer arrived, so the rate is the throughput at that concurrency).
- **in stock**: a sale seeded with 10,000,000 items (never sells out in the run); the app's limit is the
  highest it accepts (`SECKILL_RATE_LIMIT=100000/1s`, see settings), ten times what the row sends, so the
  limiter runs on every request but never refuses (a 429 there is reported as a problem): all traffic comes
  from 127.0.0.1, so it is one hot limiter key (for sliding-log, a log holding about one window of requests).
- **sold out**: a sale seeded with 100 items, sold out by the first requests of the run.
- **rate limited**: a separate app with `SECKILL_RATE_LIMIT=10/1s` on an in-stock sale; about 10 requests
  per second are admitted (201), everything else answers 429. A refused client is answered from memory until
  its retry time, so this path mostly does not touch Redis.
- **main rows and algorithms**: the main table runs the app's default limiter algorithm (sliding-log). The
  per-algorithm table repeats the rate-limited and in-stock rows for each `SECKILL_RATE_LIMIT_ALGORITHM`
  (`DURATION_ALG` seconds each, burst left at its default, = REQUESTS), each pair on its own in-stock sale
  `bench-alg-<algorithm>` with a new app process per row, 1 s of `/healthz` to warm it up, and the client's
  limiter key deleted before each app starts (so the limited row does not inherit the in-stock row's state).
- **paced at 80%**: the same wrk script with `delay()` handing out send times on a fixed schedule of 80% of
  the in-stock peak just measured (in-stock path, distinct users), over more connections
  (`PACED_CONNECTIONS`, default 256) so that the schedule and not the connection count sets the rate.
  wrk measures latency from the moment a request is written, so this is not corrected for coordinated
  omission; the achieved rate is shown, and the target counts as met only if it reached 95% of the
  scheduled rate and p99 < 10 ms. The light-load row is the same at `LIGHT_RATE` (default 1,000/s) over
  `CONNECTIONS`: the latency floor of the path on this machine.
- **Redis rows**: `redis-benchmark` against the same throwaway Redis, `EVALSHA` of the script loaded with
  `SCRIPT LOAD` (no pipelining, 50 connections, single-threaded generator). buy.lua runs on the drain sale
  (seeded through the admin API with 10,000,000 items, app started with `--no-worker`): user id and order id
  are built from two independent `__rand_int__` placeholders each (`-r 2147483647`), so repeats are
  practically impossible; its orders are the queue the worker drains afterwards. Each limiter script
  (`limit window_ms burst nonce`, never the tests' fake clock) runs `LIMITER_REQUESTS` calls three ways: one
  hot key at 100000 per 1000 ms with burst 100000 (admitted path, like the in-stock HTTP rows; sliding-log
  keeps a log of about one second of calls), a random key per client (`{c__rand_int__}`, `-r 1000000`) at
  20 per 1000 ms (the admitted path of a crowd: mostly new or expired keys), and one hot key at 10 per
  1000 ms, burst 10 (the refused path). The nonce is `n-__rand_int__`: it can repeat under `-r`, which only
  sliding-log would notice (two calls in the same microsecond with the same nonce would be one log member).
  One more call right after each hot-key run shows the state it left (allowed, remaining, ...).
- **worker drain**: with that queue in the drain sale's stream and no worker running (the app runs
  `--no-worker`), `load-tests/lib/bench.py drain` starts `seckill worker` (same settings) and polls XLEN every
  5 ms. orders/s = entries left after the first batch ÷ time from the first batch to XLEN 0 (start-up
  excluded; the figure including start-up is in the details). Postgres then has to hold exactly the
  queued number of rows for the sale. Postgres runs with `fsync=off` (throwaway server), so this is the
  worker's and Postgres's CPU cost, not disk flush latency.
- **queue lag**: during the closed-loop in-stock run, with the worker in the app: every 100 ms XLEN of the
  sale's stream and the age of its oldest entry (Redis TIME − the entry id's milliseconds); afterwards from
  Postgres, `persisted_at − created_at` of every order of the run (Redis time of the purchase to the
  worker's insert transaction). The figure is the larger of the two maxima.
- **× healthz**: the row's rate (req/s, ops/s or orders/s) divided by the /healthz req/s of the same run
  (/healthz runs twice, first and after the sold-out row; the better run is the ceiling).
- **CPU**: the generator's user+sys CPU from `wait4`; the app's, Redis's and Postgres's (postmaster and its
  children) from `/proc/PID/stat` before and after the row; the whole machine's busy and steal time from
  `/proc/stat`. "other" = machine busy − the four. "CPU µs per operation" in the details = each process's
  CPU during the row ÷ the row's requests (or calls, or orders): it shows where the time goes and is far
  less sensitive to other load than the rates. At light load it is high (the worker commits one or two
  orders per batch, and every request wakes idle threads), so compare it between the saturated rows.
- **invariants**: `seckill_app_check` (scripts/lib/app.sh) waits for `queued: 0`, then runs
  `seckill reconcile SALE`; bench.sh exits non-zero when any sale is not consistent.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run")
    p.add_argument("name")
    p.add_argument("--dir", required=True)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--watch", action="append")
    p.add_argument("--pgtree", type=int)
    p.add_argument("cmd", nargs=argparse.REMAINDER)

    p = sub.add_parser("sample-queue")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--max-seconds", type=float, default=120)

    p = sub.add_parser("drain")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--watch", action="append")
    p.add_argument("--pgtree", type=int)
    p.add_argument("cmd", nargs=argparse.REMAINDER)

    p = sub.add_parser("quiet")
    p.add_argument("--max-seconds", type=float, default=0)
    p.add_argument("--threshold", type=float, default=0.3)

    p = sub.add_parser("rate")
    p.add_argument("name")
    p.add_argument("--dir", required=True)

    p = sub.add_parser("report")
    p.add_argument("--dir", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)

    args = parser.parse_args()
    handler = {"run": cmd_run, "sample-queue": cmd_sample_queue, "drain": cmd_drain,
               "rate": cmd_rate, "quiet": cmd_quiet, "report": cmd_report}[args.command]
    sys.exit(handler(args))


if __name__ == "__main__":
    main()
