#!/usr/bin/env bash
# load-tests/shard-ceiling.sh — the throughput of ONE flash sale whose stock is split over K shards
# (`{"shards": K}` when seeding, docs/stock-sharding.md) on a 3-master Redis Cluster, K = 1, 2, 3:
# the Redis-side ceiling, and what `POST /buy` delivers end to end.
#
#   load-tests/shard-ceiling.sh                         # ~2 minutes after the release build
#   TOTAL_REQUESTS=60000 DURATION=3 load-tests/shard-ceiling.sh    # a quick one
#   K_LIST="1 3" load-tests/shard-ceiling.sh            # only K = 1 and K = 3
#
# Why: all keys of one shard share one hash tag, so one slot, one master, one Redis core: with one
# shard, that core is the sale's ceiling however big the cluster is. A sale of K shards spreads
# over K masters (the app places them by the cluster's slot map).
#
# What it does: starts the throwaway servers of scripts/lib/services.sh (a single Redis, Postgres
# and a 3-master Redis Cluster on free 127.0.0.1 ports; the app uses the cluster and Postgres),
# builds the release binary, and for each K in K_LIST:
#   A. Redis ceiling. A `seckill serve` under key prefix `ceiling` (no worker) seeds the sale
#      ceiling-kK with stock STOCK_TOTAL and K shards; the script reads its layout (shard 0's
#      `shard_suffixes`) and finds each shard's master (CLUSTER KEYSLOT + CLUSTER NODES), then
#      runs K redis-benchmark processes AT THE SAME TIME, one per shard, each against its shard's
#      master (no cluster mode, no redirects): EVALSHA buy.lua on the shard's 4 keys with the
#      sale's shard count, user u-__rand_int__ with -r 100000000 (almost every call a new buyer),
#      TOTAL_REQUESTS / K calls and TOTAL_CLIENTS / K connections each, so every K sends the same
#      requests with the same total concurrency. It measures each shard's ops/s and p50/p99
#      (redis-benchmark --csv), the sale's total, the CPU of each master (utime+stime from
#      /proc/<pid>/stat), of the redis-benchmark processes and of everything else (/proc/stat),
#      and checks each shard: stock_initial = stock + SCARD(buyers), XLEN(orders) = SCARD(buyers),
#      at least 99% of the calls bought (the rest are random-user repeats: already_purchased), and
#      that the K shards sit on K masters. Then it deletes the shards' keys and rewrites the AOF
#      (outside the measured window) so memory and disk stay bounded.
#   B. HTTP. A `seckill serve` under the default prefix, with its worker and
#      SECKILL_RATE_LIMIT=1000000/1s, serves the sale http-kK (stock HTTP_STOCK, K shards) to
#      wrk (load-tests/lib/wrk-bench.lua: every request a new user) for DURATION seconds, with
#      the CPU of the app and of each master. After the last K, `seckill reconcile` must find
#      every HTTP sale consistent once its queue has drained.
# It prints the tables and writes them, with the settings and a per-shard table, to
# load-tests/results/shard-ceiling.md. Exit status 1 if any check fails.
#
# Settings (environment):
#   K_LIST="1 2 3"          shard counts to run (each 1..3: the cluster has 3 masters)
#   TOTAL_REQUESTS=300000   EVALSHA calls per K, split evenly over the K shards (at most 300,000)
#   TOTAL_CLIENTS=48        connections per K, split evenly over the K shards (48 = 48, 24, 16)
#   STOCK_TOTAL=10000000    the Redis-row sale's stock, split over the K shards (the API allows 10,000,000)
#   DURATION=6              seconds of each HTTP row (at most 60)
#   HTTP_STOCK=10000000     the HTTP-row sale's stock (never sells out within DURATION)
#   THREADS=2 CONNECTIONS=64  wrk threads and connections
#   LOAD_MAX=0.5 LOAD_WAIT=60  before the runs, wait up to LOAD_WAIT s for the 1-minute load
#                           average to drop below LOAD_MAX (the machine is shared); then go anyway
#
# Caveat: the masters, the app and the load generators share this machine's cores. With 2 cores,
# 3 masters and K redis-benchmark processes (or the app and wrk) compete for them, so the scaling
# measured here is capped by the cores, not by Redis; the CPU columns show where the time went.
#
# Everything runs on 127.0.0.1 only and is bounded: at most 300,000 calls per K, each
# redis-benchmark under `timeout 120`, each wrk run DURATION seconds under `timeout`. Everything
# started is stopped by PID on exit, also on Ctrl-C or failure. Needs: redis-server, redis-cli,
# redis-benchmark (redis-tools), wrk, curl, awk, and the Postgres binaries services.sh starts.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"

K_LIST="${K_LIST:-1 2 3}"
TOTAL_REQUESTS="${TOTAL_REQUESTS:-300000}"
TOTAL_CLIENTS="${TOTAL_CLIENTS:-48}"
STOCK_TOTAL="${STOCK_TOTAL:-10000000}"
DURATION="${DURATION:-6}"
HTTP_STOCK="${HTTP_STOCK:-10000000}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
LOAD_MAX="${LOAD_MAX:-0.5}"
LOAD_WAIT="${LOAD_WAIT:-60}"
USER_RANGE=100000000
ORDER_ID=0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69
BENCH_TIMEOUT=120
results_md="$repo_root/load-tests/results/shard-ceiling.md"

say() { printf 'shard-ceiling: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
if ! is_uint "$TOTAL_REQUESTS" || ((TOTAL_REQUESTS < 3 || TOTAL_REQUESTS > 300000)); then
    die "TOTAL_REQUESTS must be 3..300000"
fi
if ! is_uint "$TOTAL_CLIENTS" || ((TOTAL_CLIENTS < 3 || TOTAL_CLIENTS > 3000)); then
    die "TOTAL_CLIENTS must be 3..3000"
fi
if ! is_uint "$STOCK_TOTAL" || ((STOCK_TOTAL < 3 * TOTAL_REQUESTS)); then
    die "STOCK_TOTAL must be an integer >= 3 x TOTAL_REQUESTS (the sale must never sell out)"
fi
is_uint "$LOAD_WAIT" || die "LOAD_WAIT must be a number of seconds"
if ! is_uint "$DURATION" || ((DURATION < 1 || DURATION > 60)); then
    die "DURATION must be 1..60 seconds"
fi
is_uint "$HTTP_STOCK" || die "HTTP_STOCK must be an integer"
for knob in THREADS CONNECTIONS; do
    if ! is_uint "${!knob}" || ((${!knob} < 1 || ${!knob} > 1000)); then
        die "$knob must be 1..1000"
    fi
done
read -r -a ks <<<"$K_LIST"
((${#ks[@]} > 0)) || die "K_LIST is empty"
for k in "${ks[@]}"; do
    [[ "$k" =~ ^[123]$ ]] || die "K_LIST entries must be 1, 2 or 3 (got '$k')"
done

for tool in redis-cli redis-benchmark wrk curl awk; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (redis-benchmark: apt-get install redis-tools)"
done

work=""
bench_pids=()
cleanup() {
    local pid
    for pid in "${bench_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    seckill_app_stop
    seckill_stop_services
    if [[ -n "$work" && -d "$work" ]]; then
        rm -rf -- "$work"
    fi
}
trap 'trap "" INT TERM; cleanup' EXIT # cleanup is not interruptible
trap 'exit 130' INT
trap 'exit 143' TERM

join() { # join SEP WORDS...
    local sep="$1" out="$2" w
    shift 2
    for w in "$@"; do out+="$sep$w"; done
    printf '%s' "$out"
}

# 1,234,567
group() { printf '%s' "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|[,.]\)/\1,\2\3/' -e 'ta'; }

rcli() { # rcli PORT ARGS...: one command on one node, no redirects followed
    local port="$1"
    shift
    timeout 30 redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# CPU-seconds used so far by PID $1 (utime + stime, all threads).
proc_cpu_ticks() {
    local stat
    stat="$(cat "/proc/$1/stat")" || return 1
    stat="${stat##*) }" # fields from 3 (state) on; comm may contain spaces
    awk '{ print $12 + $13 }' <<<"$stat"
}

# Context switches (voluntary + involuntary) so far, summed over the threads of PID $1.
proc_switches() { cat "/proc/$1"/task/*/status | awk '/ctxt_switches:/ { n += $2 } END { print n }'; }

# "busy steal" jiffies of the whole machine from /proc/stat.
machine_ticks() {
    awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $9; exit }' /proc/stat
}

# Seconds from bash `times`-style "XmY.YYYs".
times_to_s() { awk '{ split($0, a, "m"); sub("s", "", a[2]); print a[1] * 60 + a[2] }' <<<"$1"; }

seckill_ensure_tools
seckill_start_services
# Every seckill process here (serve, and reconcile in seckill_app_check) uses the cluster.
SECKILL_REDIS_URL="${SECKILL_TEST_REDIS_CLUSTER_URL:?services.sh did not start the cluster}"
work="$(mktemp -d "${TMPDIR:-/tmp}/shard-ceiling.XXXXXXXX")"
hz="$(getconf CLK_TCK)"
cd "$repo_root"

# Masters: port, pid (from the pidfile next to each node's conf).
read -r -a node_specs <<<"${SECKILL_TEST_REDIS_CLUSTER_NODES:?services.sh did not start the cluster}"
master_ports=()
declare -A master_pidfile=() master_name=()
for spec in "${node_specs[@]}"; do
    port="${spec%%:*}"
    master_ports+=("$port")
    master_name[$port]="m${#master_ports[@]}"
    master_pidfile[$port]="$(dirname "${spec#*:}")/redis.pid"
done
((${#master_ports[@]} == 3)) || die "expected 3 cluster masters, got: ${node_specs[*]}"
master_pid() { tr -dc '0-9' <"${master_pidfile[$1]}"; }

# slot -> master port, from CLUSTER NODES ("<id> <ip:port@bus> <flags> ... <slot ranges>").
rcli "${master_ports[0]}" CLUSTER NODES | tr -d '\r' >"$work/nodes.txt"
slot_owner() {
    awk -v s="$1" '$3 ~ /master/ {
        split($2, a, "[:@]")
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, r, "-"); lo = r[1] + 0; hi = (n > 1 ? r[2] : r[1]) + 0
            if (s >= lo && s <= hi) { print a[2]; exit }
        }
    }' "$work/nodes.txt"
}

# buy.lua on every master; AOF stays on (appendfsync everysec, as the app runs), but automatic AOF
# rewrites are turned off so no fork lands inside a measured run (the script rewrites between runs).
buy_sha=""
for port in "${master_ports[@]}"; do
    sha="$(rcli "$port" SCRIPT LOAD "$(cat lua/buy.lua)" | tr -d '\r')"
    [[ "$sha" =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD on $port failed: $sha"
    [[ -z "$buy_sha" || "$sha" == "$buy_sha" ]] || die "different buy.lua SHAs on the masters"
    buy_sha="$sha"
    [[ "$(rcli "$port" CONFIG SET auto-aof-rewrite-percentage 0 | tr -d '\r')" == OK ]] \
        || die "CONFIG SET on $port failed"
done

aof_rewrite_and_wait() {
    local port deadline
    for port in "${master_ports[@]}"; do
        rcli "$port" BGREWRITEAOF >/dev/null 2>&1 || true
    done
    deadline=$((SECONDS + 60))
    for port in "${master_ports[@]}"; do
        until rcli "$port" INFO persistence | tr -d '\r' | grep -qx 'aof_rewrite_in_progress:0' \
            && ! rcli "$port" INFO persistence | tr -d '\r' | grep -qx 'aof_rewrite_scheduled:1'; do
            ((SECONDS < deadline)) || {
                say "AOF rewrite on $port still running after 60 s; going on"
                break
            }
            sleep 0.2
        done
    done
}

# A. The Redis ceiling: this app only seeds (the measured calls go straight to the masters).
seckill_app_start SECKILL_KEY_PREFIX=ceiling SECKILL_NO_WORKER=true RUST_LOG=warn || die "seckill did not start"

# The machine is shared: wait (bounded) for a quiet moment.
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
deadline=$((SECONDS + LOAD_WAIT))
while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$LOAD_MAX" 'BEGIN { exit !(l >= m) }' \
    && ((SECONDS < deadline)); do
    sleep 2
done
load_run="$(cut -d' ' -f1-3 /proc/loadavg)"
say "load average at start $load_start, at the first run $load_run"
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

declare -A total_ops=()
table_rows=()
shard_rows=()
any_fail=0

for k in "${ks[@]}"; do
    sale="ceiling-k$k"
    per_requests=$((TOTAL_REQUESTS / k))
    per_clients=$((TOTAL_CLIENTS / k))

    # Seed through the app: it splits the stock and places the K shards by the slot map.
    out="$(seckill_app_seed "$sale" "$STOCK_TOTAL" "$k")" || die "seeding $sale: $out"
    suffixes="$(timeout 30 redis-cli -c -h 127.0.0.1 -p "${master_ports[0]}" HGET "ceiling:{sale:$sale}:meta" shard_suffixes | tr -d '\r')"
    tags=("$sale")
    if [[ -n "$suffixes" ]]; then
        IFS=, read -r -a extra <<<"$suffixes"
        for suffix in "${extra[@]}"; do tags+=("$sale:$suffix"); done
    fi
    ((${#tags[@]} == k)) || die "$sale: expected $k shards, shard 0 records suffixes '$suffixes'"
    ids=()
    ports=()
    names=()
    slots=()
    declare -A used=()
    for tag in "${tags[@]}"; do
        slot="$(rcli "${master_ports[0]}" CLUSTER KEYSLOT "ceiling:{sale:$tag}:meta" | tr -d '\r')"
        owner="$(slot_owner "$slot")"
        [[ -n "$owner" ]] || die "no master owns slot $slot"
        used[$owner]=1
        ids+=("$tag")
        ports+=("$owner")
        names+=("${master_name[$owner]}")
        slots+=("$slot")
        p="ceiling:{sale:$tag}"
        # Plain (non-cluster) read on the shard's own port: MOVED here would mean a wrong owner.
        [[ "$(rcli "$owner" HGET "$p:meta" shards | tr -d '\r')" == "$k" ]] || die "$tag is not a shard of $k on $owner"
    done
    ((${#used[@]} == k)) || die "K=$k: the app put the shards on ${#used[@]} masters, not $k"
    unset used
    say "K=$k: shards ${ids[*]} on ports ${ports[*]} (slots ${slots[*]}), $per_requests calls and $per_clients clients each"

    # Measured window: K redis-benchmark processes started together.
    declare -A cpu0=()
    for port in "${master_ports[@]}"; do
        cpu0[$port]="$(proc_cpu_ticks "$(master_pid "$port")")"
    done
    read -r busy0 steal0 < <(machine_ticks)
    t0="$(date +%s%N)"
    bench_pids=()
    for ((i = 0; i < k; i++)); do
        p="ceiling:{sale:${ids[i]}}"
        (
            rc=0
            timeout "$BENCH_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "${ports[i]}" -c "$per_clients" \
                -n "$per_requests" -r "$USER_RANGE" --csv \
                EVALSHA "$buy_sha" 4 "$p:meta" "$p:stock" "$p:buyers" "$p:orders" \
                "$sale" "u-__rand_int__" "$ORDER_ID" "$k" >"$work/k$k-$i.csv" 2>"$work/k$k-$i.err" || rc=$?
            times >"$work/k$k-$i.times" # line 2: children (not in a pipe: that would be a new process)
            exit "$rc"
        ) &
        bench_pids+=("$!")
    done
    bench_failed=0
    for pid in "${bench_pids[@]}"; do
        wait "$pid" || bench_failed=1
    done
    bench_pids=()
    t1="$(date +%s%N)"
    read -r busy1 steal1 < <(machine_ticks)
    declare -A cpu1=()
    for port in "${master_ports[@]}"; do
        cpu1[$port]="$(proc_cpu_ticks "$(master_pid "$port")")"
    done
    if ((bench_failed)); then
        for ((i = 0; i < k; i++)); do cat "$work/k$k-$i.err" >&2 || true; done
        die "K=$k: a redis-benchmark run failed"
    fi
    wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"

    # CPU in cores (CPU-seconds per wall second) for each master, in master order.
    redis_cpu_cells=()
    redis_ticks=0
    for port in "${master_ports[@]}"; do
        d=$((cpu1[$port] - cpu0[$port]))
        redis_ticks=$((redis_ticks + d))
        redis_cpu_cells+=("$(awk -v d="$d" -v hz="$hz" -v w="$wall" 'BEGIN { printf "%.2f", d / hz / w }')")
    done
    unset cpu0 cpu1

    # Per-shard results and checks.
    ops_cells=()
    lat_cells=()
    bench_cpu_s=0
    sum_ops=0
    checks="ok"
    for ((i = 0; i < k; i++)); do
        p="ceiling:{sale:${ids[i]}}"
        # --csv: "test","rps","avg","min","p50","p95","p99","max" (latencies in ms); last line.
        line="$(tr -d '\r"' <"$work/k$k-$i.csv" | awk 'NF { l = $0 } END { print l }')"
        read -r ops p50 p99 < <(awk -F, '{ printf "%.0f %s %s\n", $(NF-6), $(NF-3), $(NF-1) }' <<<"$line")
        if ! is_uint "$ops" || ((ops == 0)); then
            die "K=$k shard $i: cannot parse redis-benchmark output: $line"
        fi
        sum_ops=$((sum_ops + ops))
        ops_cells+=("$(group "$ops")")
        lat_cells+=("$p50/$p99")
        read -r tu ts < <(sed -n 2p "$work/k$k-$i.times")
        bench_cpu_s="$(awk -v a="$bench_cpu_s" -v u="$(times_to_s "$tu")" -v s="$(times_to_s "$ts")" \
            'BEGIN { print a + u + s }')"
        errors="$(grep -c . "$work/k$k-$i.err" || true)"

        initial="$(rcli "${ports[i]}" HGET "$p:meta" stock_initial | tr -d '\r')"
        stock="$(rcli "${ports[i]}" GET "$p:stock" | tr -d '\r')"
        buyers="$(rcli "${ports[i]}" SCARD "$p:buyers" | tr -d '\r')"
        xlen="$(rcli "${ports[i]}" XLEN "$p:orders" | tr -d '\r')"
        check=ok
        balance=FAIL
        stream=FAIL
        if is_uint "$initial" && is_uint "$stock" && is_uint "$buyers" && is_uint "$xlen"; then
            ((initial == stock + buyers)) && balance=ok
            ((xlen == buyers)) && stream=ok
            ((buyers * 100 >= per_requests * 99)) || check=FAIL
        else
            check=FAIL
        fi
        [[ "$balance" == ok && "$stream" == ok ]] || check=FAIL
        if [[ "$check" != ok ]]; then
            checks=FAIL
            any_fail=1
        fi
        bought="$(awk -v b="$buyers" -v n="$per_requests" 'BEGIN { printf "%.2f%%", 100 * b / n }')"
        say "K=$k ${ids[i]} @${ports[i]}: $ops ops/s, p50/p99 $p50/$p99 ms; stock_initial $initial = stock $stock + buyers $buyers: $balance; XLEN $xlen = SCARD: $stream; bought $bought; benchmark stderr lines $errors -> $check"
        shard_rows+=("| $k | ${ids[i]} | ${slots[i]} | ${names[i]} (${ports[i]}) | $(group "$per_requests") | $per_clients | $(group "$ops") | $p50 | $p99 | $(group "$initial") | $(group "$stock") | $(group "$buyers") ($bought) | $(group "$xlen") | $check |")
        # Free the memory before the next K (the AOF is rewritten below).
        rcli "${ports[i]}" UNLINK "$p:meta" "$p:stock" "$p:buyers" "$p:orders" >/dev/null
    done

    sent=$((per_requests * k))
    wall_ops="$(awk -v n="$sent" -v w="$wall" 'BEGIN { printf "%.0f", n / w }')"
    total_ops[$k]="$sum_ops"
    # Redis CPU per call, all masters together: the figure the cores do not cap.
    us_call="$(awk -v r="$redis_ticks" -v hz="$hz" -v n="$sent" 'BEGIN { printf "%.1f", r / hz / n * 1e6 }')"
    bench_cpu="$(awk -v s="$bench_cpu_s" -v w="$wall" 'BEGIN { printf "%.2f", s / w }')"
    read -r other_cpu steal_cpu < <(awk -v b="$((busy1 - busy0))" -v st="$((steal1 - steal0))" \
        -v r="$redis_ticks" -v g="$bench_cpu_s" -v hz="$hz" -v w="$wall" \
        'BEGIN { o = (b - r) / hz - g; if (o < 0) o = 0; printf "%.2f %.2f\n", o / w, st / hz / w }')
    ops_joined="$(join ' + ' "${ops_cells[@]}")"
    lat_joined="$(join ' · ' "${lat_cells[@]}")"
    cpu_joined="$(join ' · ' "${redis_cpu_cells[@]}")"
    table_rows+=("| $k | $(join ' + ' "${names[@]}") | $ops_joined | $(group "$sum_ops") ($(group "$wall_ops") by wall) | @RATIO$k@ | $lat_joined | $cpu_joined | $us_call | $bench_cpu | $other_cpu | $steal_cpu | ${wall}s | $checks |")
    say "K=$k: total $sum_ops ops/s (wall ${wall}s, $wall_ops by wall), redis CPU ${cpu_joined}, benchmark CPU $bench_cpu, other $other_cpu, steal $steal_cpu: $checks"

    aof_rewrite_and_wait
done

seckill_app_stop

# B. HTTP: POST /buy through the app (worker included), one sale per K.
cpu_cores() { awk -v d="$1" -v hz="$hz" -v w="$2" 'BEGIN { printf "%.2f", d / hz / w }'; }
seckill_app_start SECKILL_RATE_LIMIT=1000000/1s RUST_LOG=warn || die "seckill did not start"
declare -A http_ops=()
http_rows=()
http_sales=()
for k in "${ks[@]}"; do
    sale="http-k$k"
    http_sales+=("$sale")
    out="$(seckill_app_seed "$sale" "$HTTP_STOCK" "$k")" || die "seeding $sale: $out"
    declare -A cpu0=()
    for port in "${master_ports[@]}"; do
        cpu0[$port]="$(proc_cpu_ticks "$(master_pid "$port")")"
    done
    app0="$(proc_cpu_ticks "$SECKILL_APP_PID")"
    sw0="$(proc_switches "$SECKILL_APP_PID")"
    read -r busy0 steal0 < <(machine_ticks)
    t0="$(date +%s%N)"
    say "K=$k: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s POST /buy $sale"
    (
        rc=0
        timeout $((DURATION + 30)) wrk "-t$THREADS" "-c$CONNECTIONS" "-d${DURATION}s" --latency \
            -s load-tests/lib/wrk-bench.lua "$SECKILL_APP_URL" -- buy "$sale" "k$k" >"$work/http-k$k.out" 2>&1 || rc=$?
        times >"$work/http-k$k.times"
        exit "$rc"
    ) || die "K=$k: wrk failed: $(cat "$work/http-k$k.out")"
    t1="$(date +%s%N)"
    read -r busy1 steal1 < <(machine_ticks)
    app1="$(proc_cpu_ticks "$SECKILL_APP_PID")"
    sw1="$(proc_switches "$SECKILL_APP_PID")"
    wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
    redis_cpu_cells=()
    redis_ticks=0
    for port in "${master_ports[@]}"; do
        d=$(($(proc_cpu_ticks "$(master_pid "$port")") - cpu0[$port]))
        redis_ticks=$((redis_ticks + d))
        redis_cpu_cells+=("$(cpu_cores "$d" "$wall")")
    done
    unset cpu0
    # BENCH_WRK {"requests":…,"duration_us":…,"latency_us":{"p50":…,"p99":…},"statuses":{…}}
    read -r requests rps p50 p99 created errors < <(python3 -c '
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("BENCH_WRK "))
d = json.loads(line[len("BENCH_WRK "):])
n = d["requests"]
print(n, round(n / (d["duration_us"] / 1e6)), d["latency_us"]["p50"] / 1000, d["latency_us"]["p99"] / 1000,
      d["statuses"].get("201", 0), sum(d["errors"].values()) + n - sum(d["statuses"].values()))
' "$work/http-k$k.out") || die "K=$k: no BENCH_WRK line in $(cat "$work/http-k$k.out")"
    read -r tu ts < <(sed -n 2p "$work/http-k$k.times")
    wrk_s="$(awk -v u="$(times_to_s "$tu")" -v s="$(times_to_s "$ts")" 'BEGIN { print u + s }')"
    app_cpu="$(cpu_cores $((app1 - app0)) "$wall")"
    wrk_cpu="$(awk -v s="$wrk_s" -v w="$wall" 'BEGIN { printf "%.2f", s / w }')"
    read -r other_cpu steal_cpu < <(awk -v b="$((busy1 - busy0))" -v st="$((steal1 - steal0))" \
        -v r="$((redis_ticks + app1 - app0))" -v g="$wrk_s" -v hz="$hz" -v w="$wall" \
        'BEGIN { o = (b - r) / hz - g; if (o < 0) o = 0; printf "%.2f %.2f\n", o / w, st / hz / w }')
    http_ops[$k]="$rps"
    share="$(awk -v c="$created" -v n="$requests" 'BEGIN { printf "%.2f%%", 100 * c / n }')"
    app_us="$(awk -v d="$((app1 - app0))" -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", d / hz / n * 1e6 }')"
    sw_per="$(awk -v d="$((sw1 - sw0))" -v n="$requests" 'BEGIN { printf "%.2f", d / n }')"
    http_rows+=("| $k | $(group "$rps") | @RATIO$k@ | $p50/$p99 | $share | $errors | $app_cpu | $app_us | $sw_per | $(join ' · ' "${redis_cpu_cells[@]}") | $wrk_cpu | $other_cpu | $steal_cpu |")
    say "K=$k: $rps req/s, p50/p99 $p50/$p99 ms, 201 $share, errors $errors; app CPU $app_cpu, redis ${redis_cpu_cells[*]}, wrk $wrk_cpu"
done
reconciled=()
for sale in "${http_sales[@]}"; do
    if report="$(seckill_app_check "$sale")"; then
        reconciled+=("$sale: consistent ($(tr -d ' \n' <<<"$report" | grep -o '"buyers":[0-9]*,"persisted":[0-9]*'))")
    else
        reconciled+=("$sale: NOT consistent: $(tr -d '\n' <<<"$report")")
        any_fail=1
    fi
    say "${reconciled[-1]}"
done
seckill_app_stop

# "× K=1" of every row, whatever order K_LIST ran in ("-" without a K=1 run).
with_ratios() { # with_ratios ARRAY_NAME ASSOC_NAME: fills @RATIO<k>@ in each row of the array
    local -n rows="$1" figures="$2"
    local i k ratio
    for i in "${!rows[@]}"; do
        for k in "${!figures[@]}"; do
            ratio="-"
            if [[ -n "${figures[1]:-}" ]]; then
                ratio="$(awk -v a="${figures[$k]}" -v b="${figures[1]}" 'BEGIN { printf "%.2f", a / b }')"
            fi
            rows[i]="${rows[i]//@RATIO$k@/$ratio}"
        done
    done
}
with_ratios table_rows total_ops
with_ratios http_rows http_ops

load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
cpu_model="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
header='| K | shards on | per-shard ops/s | total ops/s | × K=1 | p50/p99 ms per shard | redis CPU m1 · m2 · m3 | redis µs/call | bench CPU | other CPU | steal | wall | checks |'
align='|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'

table="$(printf '%s\n' "$header" "$align" "${table_rows[@]}")"
printf '\n%s\n' "$table"
http_table="$(printf '%s\n' '| K | POST /buy req/s | × K=1 | p50/p99 ms | 201 | errors | app CPU | app µs/req | app context switches/req | redis CPU m1 · m2 · m3 | wrk CPU | other CPU | steal |' \
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|' "${http_rows[@]}")"
printf '\n%s\n' "$http_table"

mkdir -p "$(dirname "$results_md")"
# shellcheck disable=SC2016 # the backticks below are Markdown code spans
{
    printf '# One sale over K shards on K masters: the Redis ceiling and POST /buy\n\n'
    printf 'Generated by `load-tests/shard-ceiling.sh` at %s.\n\n' "$started_at"
    printf -- '- machine: %s, %s cores (shared by the 3 masters, the K load generators and other work), load average %s at start, %s at the first run, %s at the end; Linux %s\n' \
        "${cpu_model:-unknown CPU}" "$(nproc)" "$load_start" "$load_run" "$load_end" "$(uname -r)"
    printf -- '- %s; redis-benchmark (one thread per process)\n' "$(redis-server --version | awk '{ print $1, $2, $3 }')"
    printf -- '- servers: the 3-master Redis Cluster of `scripts/lib/services.sh` on 127.0.0.1 (no replicas, appendonly yes, appendfsync everysec); automatic AOF rewrites off during the runs (`auto-aof-rewrite-percentage 0`), the AOF is rewritten between runs\n'
    printf -- '- load: per K, K redis-benchmark processes at the same time, one per shard, against that shard'"'"'s master: `EVALSHA <buy.lua> 4 ceiling:{sale:<S>[:<suffix>]}:meta|stock|buyers|orders <S> u-__rand_int__ <order id> <K>`, `-r %s`, `-n %s / K`, `-c %s / K` (same total calls and total connections for every K), no pipelining\n' \
        "$USER_RANGE" "$(group "$TOTAL_REQUESTS")" "$TOTAL_CLIENTS"
    printf -- '- sale: ceiling-kK, stock %s over K shards (never sells out), seeded through `PUT /admin/sales/ceiling-kK {"shards": K}`: the app split the stock and placed the shards by the slot map; the script reads the layout from shard 0'"'"'s `shard_suffixes`\n' "$(group "$STOCK_TOTAL")"
    printf -- '- columns: per-shard ops/s and p50/p99 as redis-benchmark reports them; total = sum of the shards (in brackets: all calls / wall time from the first start to the last exit); × K=1 on the sum; CPU columns in cores (CPU-seconds per wall second, 1.00 = one core) over the wall time: redis CPU of each master m1 · m2 · m3 (ports %s; utime+stime of each redis-server), redis µs/call = CPU-seconds of all masters together / all calls, bench = all redis-benchmark processes together, other = machine busy time minus those (other sessions and the idle single Redis/Postgres), steal = taken by the hypervisor\n' \
        "${master_ports[*]}"
    printf -- '- checks per shard: stock_initial = stock + SCARD(buyers), XLEN(orders) = SCARD(buyers), and SCARD(buyers) >= 99%% of the calls (the rest are users drawn twice: already_purchased)\n\n'
    printf '%s\n\n' "$table"
    printf 'This machine has %s cores. The 3 masters and the K load generators share them (the bench CPU column is what the generators took), so the scaling measured here is capped by the cores, not by Redis: the sum of the redis CPU column cannot exceed what the cores have left after the generators and other work. At K=1 one master (one core at most) does all the work; at K>1 the same work spreads over K masters. This run does not show what K masters on K dedicated cores (generators elsewhere) would reach.\n\n' "$(nproc)"
    printf '## POST /buy end to end\n\n'
    printf 'One `seckill serve` (release build, worker in the process, SECKILL_RATE_LIMIT=1000000/1s) on the cluster; per K the sale http-kK (stock %s, K shards), `wrk -t%s -c%s -d%ss` with `load-tests/lib/wrk-bench.lua` (every request a new user). CPU in cores over the run: the app, each master, wrk; other = the rest of the machine (Postgres among it). App µs/req = the app'"'"'s CPU-seconds / requests; context switches/req = voluntary and involuntary switches of all the app'"'"'s threads (/proc/<pid>/task/*/status) / requests: fewer means each wake-up handled more work.\n\n' \
        "$(group "$HTTP_STOCK")" "$THREADS" "$CONNECTIONS" "$DURATION"
    printf '%s\n\n' "$http_table"
    printf 'After the runs (queues drained), `seckill reconcile`:\n\n'
    printf -- '- %s\n' "${reconciled[@]}"
    printf '\n## Per shard (Redis ceiling)\n\n'
    printf '| K | sub-sale | slot | master (port) | calls | clients | ops/s | p50 ms | p99 ms | stock_initial | stock | buyers (bought) | XLEN orders | check |\n'
    printf '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
    printf '%s\n' "${shard_rows[@]}"
} >"$results_md"
say "wrote ${results_md#"$repo_root"/}"

((any_fail == 0)) || die "a check failed (see FAIL above)"
