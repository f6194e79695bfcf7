#!/usr/bin/env bash
# load-tests/shard-ceiling.sh — the Redis-side throughput ceiling of ONE flash sale whose stock is
# split over K sub-sales ("shards") on K different masters of a 3-master Redis Cluster, K = 1, 2, 3.
#
#   load-tests/shard-ceiling.sh                         # ~1 minute (3 runs of 300,000 buys)
#   TOTAL_REQUESTS=60000 load-tests/shard-ceiling.sh    # a quick one
#   K_LIST="1 3" load-tests/shard-ceiling.sh            # only K = 1 and K = 3
#
# Why: all keys of one sale share one hash tag ({sale:<id>}), so one slot, one master, one Redis
# core: that core is the sale's ceiling however big the cluster is. Splitting the stock over K
# sub-sales <S>-<suffix> whose slots sit on K different masters spreads the sale over K cores.
#
# What it does: starts the throwaway servers of scripts/lib/services.sh (a single Redis, Postgres
# and a 3-master Redis Cluster on free 127.0.0.1 ports; only the cluster is used here), loads
# lua/buy.lua on every master, and for each K in K_LIST:
#   1. picks K sub-sale ids S-0, S-1, ... (first suffix per master) whose keys
#      seckill:{sale:S-n}:meta|stock|buyers|orders land on K DIFFERENT masters (CLUSTER KEYSLOT +
#      CLUSTER NODES), and seeds each with lua/seed.lua, stock STOCK_TOTAL / K (never sells out);
#   2. runs K redis-benchmark processes AT THE SAME TIME, one per shard, each against its shard's
#      master (no cluster mode, no redirects): EVALSHA buy.lua on the shard's 4 keys, user
#      u-__rand_int__ with -r 100000000 (almost every call a new buyer), TOTAL_REQUESTS / K calls
#      and TOTAL_CLIENTS / K connections each, so every K sends the same requests with the same
#      total concurrency;
#   3. measures each shard's ops/s and p50/p99 (redis-benchmark --csv), the sale's total (sum of
#      the shards, and total calls / wall time of the whole run), the CPU of each master
#      (utime+stime from /proc/<pid>/stat, pid from the pidfile next to each node's conf), of the
#      redis-benchmark processes (bash `times` in their wrapper) and of everything else
#      (/proc/stat busy time minus those);
#   4. checks each shard: stock_initial = stock + SCARD(buyers), XLEN(orders) = SCARD(buyers), and
#      at least 99% of the calls bought (the rest are random-user repeats: already_purchased),
#      then deletes the shard's keys and rewrites the AOF (outside the measured window) so memory
#      and disk stay bounded.
# It prints one table and writes it, with the settings and a per-shard table, to
# load-tests/results/shard-ceiling.md. Exit status 1 if any check fails.
#
# Settings (environment):
#   K_LIST="1 2 3"          shard counts to run (each 1..3: the cluster has 3 masters)
#   TOTAL_REQUESTS=300000   EVALSHA calls per K, split evenly over the K shards (at most 300,000)
#   TOTAL_CLIENTS=48        connections per K, split evenly over the K shards (48 = 48, 24, 16)
#   STOCK_TOTAL=50000000    the sale's stock, split evenly (integer division) over the K shards
#   LOAD_MAX=0.5 LOAD_WAIT=60  before the runs, wait up to LOAD_WAIT s for the 1-minute load
#                           average to drop below LOAD_MAX (the machine is shared); then go anyway
#
# Caveat: the masters and the load generators share this machine's cores. With 2 cores, 3 masters
# and K redis-benchmark processes compete for them, so the scaling measured here is capped by the
# cores, not by Redis; the CPU columns show where the time went.
#
# Everything runs on 127.0.0.1 only and is bounded: at most 300,000 calls per K, each
# redis-benchmark under `timeout 120`. Everything started is stopped by PID on exit, also on
# Ctrl-C or failure. Needs: redis-server, redis-cli, redis-benchmark (redis-tools), awk, and the
# Postgres binaries services.sh starts.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"

K_LIST="${K_LIST:-1 2 3}"
TOTAL_REQUESTS="${TOTAL_REQUESTS:-300000}"
TOTAL_CLIENTS="${TOTAL_CLIENTS:-48}"
STOCK_TOTAL="${STOCK_TOTAL:-50000000}"
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
read -r -a ks <<<"$K_LIST"
((${#ks[@]} > 0)) || die "K_LIST is empty"
for k in "${ks[@]}"; do
    [[ "$k" =~ ^[123]$ ]] || die "K_LIST entries must be 1, 2 or 3 (got '$k')"
done

for tool in redis-cli redis-benchmark awk; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (redis-benchmark: apt-get install redis-tools)"
done

work=""
bench_pids=()
cleanup() {
    local pid
    for pid in "${bench_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
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

# "busy steal" jiffies of the whole machine from /proc/stat.
machine_ticks() {
    awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $9; exit }' /proc/stat
}

# Seconds from bash `times`-style "XmY.YYYs".
times_to_s() { awk '{ split($0, a, "m"); sub("s", "", a[2]); print a[1] * 60 + a[2] }' <<<"$1"; }

seckill_ensure_tools
seckill_start_services
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
    per_stock=$((STOCK_TOTAL / k))

    # Pick K sub-sale ids on K different masters: the first suffix that lands on each master.
    ids=()
    ports=()
    names=()
    slots=()
    declare -A used=()
    for ((suffix = 0; suffix < 1000 && ${#ids[@]} < k; suffix++)); do
        id="$sale-$suffix"
        slot="$(rcli "${master_ports[0]}" CLUSTER KEYSLOT "seckill:{sale:$id}:meta" | tr -d '\r')"
        owner="$(slot_owner "$slot")"
        [[ -n "$owner" ]] || die "no master owns slot $slot"
        [[ -z "${used[$owner]:-}" ]] || continue
        used[$owner]=1
        ids+=("$id")
        ports+=("$owner")
        names+=("${master_name[$owner]}")
        slots+=("$slot")
    done
    unset used
    ((${#ids[@]} == k)) || die "could not place $k shards on distinct masters"

    for ((i = 0; i < k; i++)); do
        p="seckill:{sale:${ids[i]}}"
        out="$(timeout 30 redis-cli -c -h 127.0.0.1 -p "${ports[i]}" --eval lua/seed.lua \
            "$p:meta" "$p:stock" "$p:buyers" "$p:orders" , "$per_stock" '' '' seckill-workers | tr -d '\r')"
        [[ "$out" == ok ]] || die "seeding ${ids[i]} on ${ports[i]}: $out"
        # Plain (non-cluster) read on the shard's own port: MOVED here would mean a wrong owner.
        [[ "$(rcli "${ports[i]}" GET "$p:stock" | tr -d '\r')" == "$per_stock" ]] \
            || die "${ids[i]} is not served by ${ports[i]}"
    done
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
        p="seckill:{sale:${ids[i]}}"
        (
            rc=0
            timeout "$BENCH_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "${ports[i]}" -c "$per_clients" \
                -n "$per_requests" -r "$USER_RANGE" --csv \
                EVALSHA "$buy_sha" 4 "$p:meta" "$p:stock" "$p:buyers" "$p:orders" \
                "${ids[i]}" "u-__rand_int__" "$ORDER_ID" >"$work/k$k-$i.csv" 2>"$work/k$k-$i.err" || rc=$?
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
        p="seckill:{sale:${ids[i]}}"
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
    ratio="-"
    if [[ -n "${total_ops[1]:-}" ]]; then
        ratio="$(awk -v a="$sum_ops" -v b="${total_ops[1]}" 'BEGIN { printf "%.2f", a / b }')"
    fi
    # Redis CPU per call, all masters together: the figure the cores do not cap.
    us_call="$(awk -v r="$redis_ticks" -v hz="$hz" -v n="$sent" 'BEGIN { printf "%.1f", r / hz / n * 1e6 }')"
    bench_cpu="$(awk -v s="$bench_cpu_s" -v w="$wall" 'BEGIN { printf "%.2f", s / w }')"
    read -r other_cpu steal_cpu < <(awk -v b="$((busy1 - busy0))" -v st="$((steal1 - steal0))" \
        -v r="$redis_ticks" -v g="$bench_cpu_s" -v hz="$hz" -v w="$wall" \
        'BEGIN { o = (b - r) / hz - g; if (o < 0) o = 0; printf "%.2f %.2f\n", o / w, st / hz / w }')
    ops_joined="$(join ' + ' "${ops_cells[@]}")"
    lat_joined="$(join ' · ' "${lat_cells[@]}")"
    cpu_joined="$(join ' · ' "${redis_cpu_cells[@]}")"
    table_rows+=("| $k | $(join ' + ' "${names[@]}") | $ops_joined | $(group "$sum_ops") ($(group "$wall_ops") by wall) | $ratio | $lat_joined | $cpu_joined | $us_call | $bench_cpu | $other_cpu | $steal_cpu | ${wall}s | $checks |")
    say "K=$k: total $sum_ops ops/s (wall ${wall}s, $wall_ops by wall), redis CPU ${cpu_joined}, benchmark CPU $bench_cpu, other $other_cpu, steal $steal_cpu: $checks"

    aof_rewrite_and_wait
done

load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
cpu_model="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
header='| K | shards on | per-shard ops/s | total ops/s | × K=1 | p50/p99 ms per shard | redis CPU m1 · m2 · m3 | redis µs/call | bench CPU | other CPU | steal | wall | checks |'
align='|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'

table="$(printf '%s\n' "$header" "$align" "${table_rows[@]}")"
printf '\n%s\n' "$table"

mkdir -p "$(dirname "$results_md")"
# shellcheck disable=SC2016 # the backticks below are Markdown code spans
{
    printf '# One sale over K masters: the Redis-side ceiling\n\n'
    printf 'Generated by `load-tests/shard-ceiling.sh` at %s.\n\n' "$started_at"
    printf -- '- machine: %s, %s cores (shared by the 3 masters, the K load generators and other work), load average %s at start, %s at the first run, %s at the end; Linux %s\n' \
        "${cpu_model:-unknown CPU}" "$(nproc)" "$load_start" "$load_run" "$load_end" "$(uname -r)"
    printf -- '- %s; redis-benchmark (one thread per process)\n' "$(redis-server --version | awk '{ print $1, $2, $3 }')"
    printf -- '- servers: the 3-master Redis Cluster of `scripts/lib/services.sh` on 127.0.0.1 (no replicas, appendonly yes, appendfsync everysec); automatic AOF rewrites off during the runs (`auto-aof-rewrite-percentage 0`), the AOF is rewritten between runs\n'
    printf -- '- load: per K, K redis-benchmark processes at the same time, one per shard, against that shard'"'"'s master: `EVALSHA <buy.lua> 4 seckill:{sale:<S-n>}:meta|stock|buyers|orders <S-n> u-__rand_int__ <order id>`, `-r %s`, `-n %s / K`, `-c %s / K` (same total calls and total connections for every K), no pipelining\n' \
        "$USER_RANGE" "$(group "$TOTAL_REQUESTS")" "$TOTAL_CLIENTS"
    printf -- '- sale: stock %s split over the K shards (never sells out); shard ids are the first suffixes S-0, S-1, ... whose slot lands on a master not yet used\n' "$(group "$STOCK_TOTAL")"
    printf -- '- columns: per-shard ops/s and p50/p99 as redis-benchmark reports them; total = sum of the shards (in brackets: all calls / wall time from the first start to the last exit); × K=1 on the sum; CPU columns in cores (CPU-seconds per wall second, 1.00 = one core) over the wall time: redis CPU of each master m1 · m2 · m3 (ports %s; utime+stime of each redis-server), redis µs/call = CPU-seconds of all masters together / all calls, bench = all redis-benchmark processes together, other = machine busy time minus those (other sessions and the idle single Redis/Postgres), steal = taken by the hypervisor\n' \
        "${master_ports[*]}"
    printf -- '- checks per shard: stock_initial = stock + SCARD(buyers), XLEN(orders) = SCARD(buyers), and SCARD(buyers) >= 99%% of the calls (the rest are users drawn twice: already_purchased)\n\n'
    printf '%s\n\n' "$table"
    printf 'This machine has %s cores. The 3 masters and the K load generators share them (the bench CPU column is what the generators took), so the scaling measured here is capped by the cores, not by Redis: the sum of the redis CPU column cannot exceed what the cores have left after the generators and other work. At K=1 one master (one core at most) does all the work; at K>1 the same work spreads over K masters. This run does not show what K masters on K dedicated cores (generators elsewhere) would reach.\n\n' "$(nproc)"
    printf '## Per shard\n\n'
    printf '| K | sub-sale | slot | master (port) | calls | clients | ops/s | p50 ms | p99 ms | stock_initial | stock | buyers (bought) | XLEN orders | check |\n'
    printf '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
    printf '%s\n' "${shard_rows[@]}"
} >"$results_md"
say "wrote ${results_md#"$repo_root"/}"

((any_fail == 0)) || die "a check failed (see FAIL above)"
