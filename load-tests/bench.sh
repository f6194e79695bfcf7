#!/usr/bin/env bash
# load-tests/bench.sh — one command, one table: how fast is seckill on this machine, compared with its
# own HTTP ceiling, and do the promises still hold afterwards?
#
#   load-tests/bench.sh                 # ~2.5-3.5 minutes after the release build
#   DURATION=3 DURATION_ALG=2 LIMITER_REQUESTS=30000 load-tests/bench.sh   # a quick one
#   ALGORITHMS="sliding-log gcra" load-tests/bench.sh                     # two limiter algorithms only
#
# It starts a throwaway Redis and Postgres on free loopback ports (scripts/lib/services.sh), builds
# and starts the release binary (scripts/lib/app.sh), runs every scenario for a bounded time or count
# against 127.0.0.1 only, prints ONE table (plus the per-algorithm one) and writes them to
# load-tests/results/bench.json and load-tests/results/bench.md (the Markdown also says how each
# figure was measured). Everything it started is stopped by PID on exit, also on Ctrl-C or failure.
#
# Rows (every HTTP row uses wrk with load-tests/lib/wrk-bench.lua and the same threads; the same
# connections too, except the paced 80% run, which needs more idle ones):
#   GET /healthz                          the HTTP ceiling of this process on this machine (run first
#                                         and again after the /buy rows; the better run counts)
#   POST /buy in stock                    sale of 10,000,000 items, every request a new user
#   POST /buy in stock, paced at 80%      the same path at 80% of the in-stock peak: p99 there
#   POST /buy in stock, paced at 1,000/s  the same path at light load: the latency floor
#   POST /buy sold out                    sale of 100 items, sold out by the first requests
#   POST /buy rate limited                app restarted with SECKILL_RATE_LIMIT=10/1s, one client IP
#   (these rows run the app's default limiter algorithm, sliding-log)
#   Redis EVALSHA buy.lua                 redis-benchmark, distinct users (the Redis ceiling)
#   worker drain                          the buy.lua run's orders queued with no worker, then
#                                         `seckill worker` drains them into Postgres: orders/s
#   queue lag                             max XLEN and oldest-entry age while the in-stock run
#                                         buys, and persisted_at - created_at from Postgres
# and, for each limiter algorithm (sliding-log, sliding-counter, fixed-window, token-bucket, gcra;
# one table row each, side by side):
#   Redis EVALSHA lua/<alg, - as _>.lua   redis-benchmark, LIMITER_REQUESTS calls each: one hot key
#                                         admitted (limit 100000 per 1000 ms, burst 100000), a key
#                                         per client (1,000,000 random keys, 20 per 1000 ms), one
#                                         hot key refused (10 per 1000 ms)
#   POST /buy in stock                    app restarted with SECKILL_RATE_LIMIT_ALGORITHM=<algorithm>
#                                         and SECKILL_RATE_LIMIT=100000/1s: the limiter admits every
#                                         request, so its cost on the purchase path shows
#   POST /buy rate limited                the same app with SECKILL_RATE_LIMIT=10/1s, one client IP,
#                                         in-stock sale
# with req/s (ops/s, orders/s), p50, p99, the ratio to /healthz, the status counts (so the path is
# visibly the intended one), the CPU of the generator, seckill, Redis, Postgres and of everything
# else on the machine (other sessions' work shows up there: the cores are shared), and the targets
# (in stock >= 50% of /healthz; sold out and rate limited >= 80%; p99 < 10 ms at 80% of peak; drain
# >= 30,000 orders/s; queue lag <= 1 s; the per-algorithm rows have none). Then `seckill reconcile`
# for every sale used.
#
# Exit status: 0 when every sale is consistent after the runs (targets missed, 5xx answers and log
# warnings are reported in the table's "problems", not fatal); non-zero when an invariant fails or
# a step could not run.
#
# Environment knobs:
#   DURATION=6            seconds per HTTP scenario (wrk -d) of the main rows
#   DURATION_ALG=4        seconds per per-algorithm HTTP row (10 of them with every algorithm)
#   ALGORITHMS="sliding-log sliding-counter fixed-window token-bucket gcra"
#                         the limiter algorithms measured, in this order (a subset is fine)
#   THREADS=2             wrk threads (-t); the generator shares the machine's cores with the service
#   CONNECTIONS=64        wrk connections (-c)
#   PACED_CONNECTIONS=256 wrk connections of the paced run: enough idle ones that the schedule, not
#                         the connection count, sets the rate
#   LIGHT_RATE=1000       rate of the light-load paced run (the latency floor, for comparison)
#   DRAIN_ORDERS=100000   orders queued by the buy.lua redis-benchmark run, then drained by the worker
#   LIMITER_REQUESTS=100000  calls per limiter redis-benchmark run (3 runs per algorithm)
#   LIMITED_RATE_LIMIT=10/1s  SECKILL_RATE_LIMIT of the rate-limited apps
#   SECKILL_WORKER_BATCH  worker batch size (default: the app's default, 2000)
#   RESULTS_DIR=load-tests/results   where bench.json and bench.md go
#   QUIET_WAIT=0          before each scenario, wait up to this many seconds for the machine to use
#                         less than 0.3 cores (it is shared: see the "other CPU" column); 0 = no wait
#   KEEP_RAW=1            keep the raw outputs (wrk/redis-benchmark output, app logs) and print where
#                         (they are kept anyway when the run fails)
#
# Needs: wrk, redis-benchmark (redis-tools), python3, curl, psql and the servers services.sh uses
# (installed with apt-get when missing and running as root).
# shellcheck source-path=SCRIPTDIR/..
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/.." && pwd)"
lib="$here/lib"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"

DURATION="${DURATION:-6}"
DURATION="${DURATION%s}"
DURATION_ALG="${DURATION_ALG:-4}"
DURATION_ALG="${DURATION_ALG%s}"
ALGORITHMS="${ALGORITHMS:-sliding-log sliding-counter fixed-window token-bucket gcra}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
PACED_CONNECTIONS="${PACED_CONNECTIONS:-256}"
LIGHT_RATE="${LIGHT_RATE:-1000}"
DRAIN_ORDERS="${DRAIN_ORDERS:-100000}"
LIMITER_REQUESTS="${LIMITER_REQUESTS:-100000}"
LIMITED_RATE_LIMIT="${LIMITED_RATE_LIMIT:-10/1s}"
RESULTS_DIR="${RESULTS_DIR:-$here/results}"
KEEP_RAW="${KEEP_RAW:-0}"
QUIET_WAIT="${QUIET_WAIT:-0}"
for knob in DURATION DURATION_ALG THREADS CONNECTIONS PACED_CONNECTIONS LIGHT_RATE DRAIN_ORDERS LIMITER_REQUESTS; do
    if ! [[ "${!knob}" =~ ^[1-9][0-9]*$ ]]; then
        echo "bench: $knob must be a positive integer, got '${!knob}'" >&2
        exit 2
    fi
done
if ! [[ "$QUIET_WAIT" =~ ^[0-9]+$ ]]; then
    echo "bench: QUIET_WAIT must be a number of seconds, got '$QUIET_WAIT'" >&2
    exit 2
fi
if ((DURATION > 120 || DURATION_ALG > 120 || DRAIN_ORDERS > 5000000 || LIMITER_REQUESTS > 5000000)); then
    echo "bench: DURATION and DURATION_ALG <= 120, DRAIN_ORDERS and LIMITER_REQUESTS <= 5,000,000 (keep runs bounded)" >&2
    exit 2
fi
read -r -a algorithms <<<"$ALGORITHMS"
if ((${#algorithms[@]} == 0)); then
    echo "bench: ALGORITHMS is empty" >&2
    exit 2
fi
for alg in "${algorithms[@]}"; do
    case "$alg" in
        sliding-log | sliding-counter | fixed-window | token-bucket | gcra) ;;
        *)
            echo "bench: unknown algorithm '$alg' in ALGORITHMS (sliding-log sliding-counter fixed-window token-bucket gcra)" >&2
            exit 2
            ;;
    esac
    if [[ ! -f "$repo_root/lua/${alg//-/_}.lua" ]]; then
        echo "bench: lua/${alg//-/_}.lua is missing" >&2
        exit 2
    fi
done

# Far above what one address sends (REQUESTS x WINDOW in us is bounded by 2^50, so 1000000000/1s
# is refused at start-up): the in-stock rows send ~16,000 req/s,
# all from 127.0.0.1 (one limiter key), so the limiter runs on every request but never refuses
# (bench.py reports any 429 in those rows as a problem).
HIGH_RATE_LIMIT="100000/1s"
# Each app gets its settings from this script; none leak in from the caller's environment.
unset SECKILL_NO_WORKER SECKILL_RATE_LIMIT SECKILL_RATE_LIMIT_ALGORITHM SECKILL_RATE_LIMIT_BURST \
    SECKILL_TRUSTED_PROXIES SECKILL_LISTEN
export SECKILL_KEY_PREFIX="${SECKILL_KEY_PREFIX:-bench}"
SECKILL_ADMIN_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export SECKILL_ADMIN_TOKEN
if [[ -n "${SECKILL_WORKER_BATCH:-}" ]]; then
    export SECKILL_WORKER_BATCH
fi
export RUST_LOG="${RUST_LOG:-info,sqlx=warn}"

raw=""
sampler_pid=""
drain_pid=""
failed=1

# shellcheck disable=SC2317 # called from traps
stop_pid() {
    seckill_stop_pid "$1" 15
}

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    trap '' INT TERM
    stop_pid "$sampler_pid"
    sampler_pid=""
    stop_pid "$drain_pid" # stops the worker it started
    drain_pid=""
    seckill_app_stop
    collect_logs
    seckill_stop_services
    if [[ -n "$raw" && -d "$raw" ]]; then
        if ((failed)) || [[ "$KEEP_RAW" == 1 ]]; then
            echo "bench: raw outputs and logs kept in $raw" >&2
        else
            rm -rf -- "$raw"
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() {
    printf '==> %s\n' "$*" >&2
}

meta() {
    printf '%s\t%s\n' "$1" "$2" >>"$raw/meta.tsv"
}

# Copies the app logs (seckill-N.log, in the services' temp dir) next to the raw outputs.
collect_logs() {
    if [[ -n "$raw" && -d "$raw" && -n "${SECKILL_SERVICES_DIR:-}" && -d "$SECKILL_SERVICES_DIR" ]]; then
        cp "$SECKILL_SERVICES_DIR"/seckill-*.log "$raw/" 2>/dev/null || true
    fi
}

# ---------------------------------------------------------------- tools and machine

seckill_ensure_tools
for tool in wrk redis-benchmark python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
            pkg="$tool"
            [[ "$tool" == redis-benchmark ]] && pkg=redis-tools
            [[ "$tool" == python3 ]] && pkg=python3
            say "installing $pkg"
            DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y --no-install-recommends "$pkg"
        else
            echo "bench: $tool is missing (apt-get install wrk redis-tools python3)" >&2
            exit 1
        fi
    fi
done

raw="$(mktemp -d "${TMPDIR:-/tmp}/seckill-bench.XXXXXXXX")"
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
meta machine.nproc "$(nproc)"
meta machine.cpu "${cpu_model:-unknown}"
meta machine.kernel "$(uname -sr)"
meta machine.versions "$(wrk --version 2>&1 | head -n 1 | cut -d' ' -f1-2); $(redis-server --version | cut -d' ' -f1-3); $(psql --version)"
meta setting.duration "${DURATION} s"
meta setting.duration_alg "${DURATION_ALG} s"
meta setting.high_rate_limit "$HIGH_RATE_LIMIT"
meta setting.limited_rate_limit "$LIMITED_RATE_LIMIT"
meta algorithms "${algorithms[*]}"
meta setting.generator "wrk -t$THREADS -c$CONNECTIONS --latency --timeout 5s -s load-tests/lib/wrk-bench.lua (closed loop)"
meta setting.redis_generator "redis-benchmark -c 50 -P 1 (one thread), EVALSHA"
meta setting.app "main rows: the default limiter algorithm (sliding-log), SECKILL_RATE_LIMIT=$HIGH_RATE_LIMIT except the rate-limited row ($LIMITED_RATE_LIMIT); per-algorithm rows: SECKILL_RATE_LIMIT_ALGORITHM=<algorithm>, SECKILL_RATE_LIMIT=$HIGH_RATE_LIMIT (in stock) or $LIMITED_RATE_LIMIT (rate limited), burst the default (= REQUESTS); SECKILL_WORKER_BATCH=${SECKILL_WORKER_BATCH:-2000 (default)}; SECKILL_KEY_PREFIX=$SECKILL_KEY_PREFIX; RUST_LOG=$RUST_LOG; Redis appendonly yes + appendfsync everysec; Postgres fsync=off (throwaway servers of scripts/lib/services.sh)"
meta worker.batch "${SECKILL_WORKER_BATCH:-2000}"

# ---------------------------------------------------------------- servers and binary

SECKILL_TEST_CLUSTER=0 seckill_start_services # single node: no cluster needed
started_build=$SECONDS
seckill_app_build
say "release build took $((SECONDS - started_build)) s"
bench_started=$SECONDS

redis_pid="$(tr -dc '0-9' <"$SECKILL_SERVICES_DIR/redis/redis.pid")"
pg_pid="$(head -n 1 "$SECKILL_SERVICES_DIR/pg/postmaster.pid" | tr -dc '0-9')"
rcli() {
    timeout 30 redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" "$@"
}
pg() {
    timeout 60 psql -X -Atq -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$SECKILL_PG_PORT" -U seckill -d seckill -c "$1"
}
stream_key() {
    printf '%s:{sale:%s}:orders' "$SECKILL_KEY_PREFIX" "$1"
}

# With QUIET_WAIT, waits (bounded) until the machine is nearly idle before a scenario.
wait_quiet() {
    ((QUIET_WAIT > 0)) || return 0
    local busy
    if ! busy="$(python3 "$lib/bench.py" quiet --max-seconds "$QUIET_WAIT" --threshold 0.3)"; then
        say "the machine is still busy ($busy cores) after $QUIET_WAIT s; running anyway"
    fi
}

# Runs NAME under bench.py run, watching seckill (when running), Redis and Postgres.
measured() {
    local name="$1" timeout="$2"
    shift 2
    local -a watch=(--watch "redis=$redis_pid" --pgtree "$pg_pid")
    if [[ -n "$SECKILL_APP_PID" ]]; then
        watch+=(--watch "seckill=$SECKILL_APP_PID")
    fi
    python3 "$lib/bench.py" run --dir "$raw" --timeout "$timeout" "${watch[@]}" "$name" -- "$@"
}

# wrk_run NAME DURATION CONNECTIONS MODE [SALE PREFIX]: one wrk scenario; prints its summary line.
wrk_run() {
    local name="$1" seconds="$2" conns="$3"
    shift 3
    wait_quiet
    say "$name: wrk -t$THREADS -c$conns -d${seconds}s $*"
    if ! measured "$name" $((seconds + 30)) wrk "-t$THREADS" "-c$conns" "-d${seconds}s" --latency \
        --timeout 5s -s "$lib/wrk-bench.lua" "$SECKILL_APP_URL" -- "$@"; then
        echo "bench: wrk failed for $name:" >&2
        cat "$raw/$name.out" "$raw/$name.err" >&2 || true
        return 1
    fi
    grep '^BENCH_WRK ' "$raw/$name.out" | sed 's/^BENCH_WRK /    /' >&2 || true
}

# One second of GET /healthz against a freshly started app (not reported).
warm_up() {
    say "warm-up: 1 s of GET /healthz (not reported)"
    measured "warmup-$1" 30 wrk "-t$THREADS" "-c$CONNECTIONS" -d1s -s "$lib/wrk-bench.lua" "$SECKILL_APP_URL" -- \
        healthz >/dev/null
}

seed() {
    say "seed sale $1 (stock $2)"
    seckill_app_seed "$1" "$2" >"$raw/seed-$1.json"
}

# drained SALE: waits (up to 120 s) until the sale's queue is empty, so that an app is not stopped
# with a batch of orders still in flight (its worker would log a failed insert at shutdown and leave
# the batch to the next worker).
drained() {
    local sale="$1" status deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)); do
        status="$(curl -fsS --max-time 10 -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" \
            "$SECKILL_APP_URL/admin/sales/$sale")" || status=""
        if [[ "$status" =~ \"queued\":0[,}] ]]; then
            return 0
        fi
        sleep 0.2
    done
    say "the queue of $sale did not drain within 120 s"
}

# check SALE: wait for the queue to drain, then `seckill reconcile SALE`; records its exit code.
check() {
    local sale="$1" rc=0
    say "check invariants of $sale"
    seckill_app_check "$sale" >"$raw/check-$sale.out" 2>"$raw/check-$sale.err" || rc=$?
    meta "check.$sale" "$rc"
    if ((rc != 0)); then
        echo "bench: seckill reconcile $sale exited $rc:" >&2
        cat "$raw/check-$sale.out" "$raw/check-$sale.err" >&2 || true
    fi
}

# ---------------------------------------------------------------- A: worker on, no effective limit

busy_before="$(python3 "$lib/bench.py" quiet --max-seconds 0 --threshold 0.3)" || true
meta machine.busy_before "$busy_before"
meta machine.loadavg "$(cut -d' ' -f1-3 /proc/loadavg)"

seckill_app_start SECKILL_RATE_LIMIT="$HIGH_RATE_LIMIT"
seed bench-instock 10000000
seed bench-soldout 100

warm_up main

wrk_run http-healthz "$DURATION" "$CONNECTIONS" healthz
meta http-healthz.detail "no I/O: the cost of HTTP in this process"

python3 "$lib/bench.py" sample-queue --port "$SECKILL_REDIS_PORT" --stream "$(stream_key bench-instock)" \
    --out "$raw/queue-instock.json" --interval 0.1 --max-seconds $((DURATION + 60)) &
sampler_pid=$!
wrk_run http-buy-instock "$DURATION" "$CONNECTIONS" buy bench-instock u
meta http-buy-instock.detail "stock 10,000,000, worker in the app; limiter (sliding-log, $HIGH_RATE_LIMIT) admits every request (one hot key)"
sleep 1 # the queue's tail drains after the last request
stop_pid "$sampler_pid"
sampler_pid=""

peak="$(python3 "$lib/bench.py" rate http-buy-instock --dir "$raw")"
paced_rate=$((peak * 8 / 10))
meta paced.target_rate "$paced_rate"
meta paced.connections "$PACED_CONNECTIONS"
say "paced run at 80% of the in-stock peak ($peak req/s): $paced_rate req/s"
BENCH_RATE="$paced_rate" BENCH_THREADS="$THREADS" wrk_run http-buy-instock-paced "$DURATION" "$PACED_CONNECTIONS" buy bench-instock p
meta light.target_rate "$LIGHT_RATE"
meta light.connections "$CONNECTIONS"
BENCH_RATE="$LIGHT_RATE" BENCH_THREADS="$THREADS" wrk_run http-buy-instock-light "$DURATION" "$CONNECTIONS" buy bench-instock q

wrk_run http-buy-soldout "$DURATION" "$CONNECTIONS" buy bench-soldout s
meta http-buy-soldout.detail "stock 100, sold out by the first requests"
# The ceiling again, so that a burst of other load on the shared machine during one of the two
# /healthz runs does not skew every ratio: the report uses the better of the two.
wrk_run http-healthz-2 "$DURATION" "$CONNECTIONS" healthz

check bench-instock
check bench-soldout
pg "select json_build_object(
      'orders', count(*),
      'p50_ms', percentile_cont(0.5) within group (order by extract(epoch from persisted_at - created_at) * 1000),
      'p99_ms', percentile_cont(0.99) within group (order by extract(epoch from persisted_at - created_at) * 1000),
      'max_ms', max(extract(epoch from persisted_at - created_at) * 1000))
    from orders where sale_id = 'bench-instock' and user_id like 'u-%'" >"$raw/lag-instock.json"
seckill_app_stop

# ---------------------------------------------------------------- B: rate limited

seckill_app_start SECKILL_RATE_LIMIT="$LIMITED_RATE_LIMIT"
seed bench-limited 1000000
wrk_run http-buy-limited "$DURATION" "$CONNECTIONS" buy bench-limited l
meta http-buy-limited.detail "app with SECKILL_RATE_LIMIT=$LIMITED_RATE_LIMIT (default algorithm, sliding-log), all requests from 127.0.0.1; sale in stock"
check bench-limited
seckill_app_stop

# ---------------------------------------------------------------- C: each limiter algorithm on /buy

# The limiter key of the one client (127.0.0.1) under algorithm $1.
client_limiter_key() {
    printf '%s:ratelimit:%s:{127.0.0.1}' "$SECKILL_KEY_PREFIX" "$1"
}

# For each algorithm: an app that admits everything (in stock), then one at LIMITED_RATE_LIMIT, on
# the same in-stock sale (distinct users per row). The client's limiter key is deleted before each
# app, so the limited row does not start with the in-stock row's state (e.g. a full log or count).
for alg in "${algorithms[@]}"; do
    sale="bench-alg-$alg"
    rcli DEL "$(client_limiter_key "$alg")" >/dev/null
    seckill_app_start SECKILL_RATE_LIMIT_ALGORITHM="$alg" SECKILL_RATE_LIMIT="$HIGH_RATE_LIMIT"
    seed "$sale" 10000000
    warm_up "$alg-instock"
    wrk_run "alg-$alg-instock" "$DURATION_ALG" "$CONNECTIONS" buy "$sale" i
    # Which script kept the state: a zset (sliding-log), a hash (sliding-counter, fixed-window); the
    # token-bucket and gcra keys expire about 1 ms after the last request at this limit.
    key_type="$(rcli TYPE "$(client_limiter_key "$alg")")"
    [[ "$key_type" == none ]] && key_type="none (expired)"
    meta "alg-$alg-instock.detail" "app with SECKILL_RATE_LIMIT_ALGORITHM=$alg, SECKILL_RATE_LIMIT=$HIGH_RATE_LIMIT: the limiter admits every request (one hot key, $(client_limiter_key "$alg"), Redis TYPE right after the row: $key_type); sale $sale, stock 10,000,000"
    drained "$sale"
    seckill_app_stop

    rcli DEL "$(client_limiter_key "$alg")" >/dev/null
    seckill_app_start SECKILL_RATE_LIMIT_ALGORITHM="$alg" SECKILL_RATE_LIMIT="$LIMITED_RATE_LIMIT"
    warm_up "$alg-limited"
    wrk_run "alg-$alg-limited" "$DURATION_ALG" "$CONNECTIONS" buy "$sale" l
    meta "alg-$alg-limited.detail" "app with SECKILL_RATE_LIMIT_ALGORITHM=$alg, SECKILL_RATE_LIMIT=$LIMITED_RATE_LIMIT, all requests from 127.0.0.1; sale $sale in stock"
    check "$sale"
    seckill_app_stop
    rcli DEL "$(client_limiter_key "$alg")" >/dev/null
done

# ---------------------------------------------------------------- D: Redis ceilings, worker drain

seckill_app_start SECKILL_RATE_LIMIT="$HIGH_RATE_LIMIT" SECKILL_NO_WORKER=true
seed bench-drain 10000000
buy_sha="$(rcli SCRIPT LOAD "$(cat "$repo_root/lua/buy.lua")")"
declare -A limiter_sha=()
for alg in "${algorithms[@]}"; do
    limiter_sha[$alg]="$(rcli SCRIPT LOAD "$(cat "$repo_root/lua/${alg//-/_}.lua")")"
done
drain_keys=()
for part in meta stock buyers orders; do
    drain_keys+=("$SECKILL_KEY_PREFIX:{sale:bench-drain}:$part")
done
rbench() {
    local name="$1" count="$2" keyspace="$3"
    shift 3
    wait_quiet
    say "$name: redis-benchmark -n $count -r $keyspace $*"
    meta "$name.count" "$count"
    if ! measured "$name" 120 redis-benchmark -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" -c 50 -n "$count" \
        -r "$keyspace" --csv "$@"; then
        echo "bench: redis-benchmark failed for $name:" >&2
        cat "$raw/$name.out" "$raw/$name.err" >&2 || true
        return 1
    fi
    tail -n 1 "$raw/$name.out" | sed 's/^/    /' >&2
}
# User id and order id each from two independent 12-digit placeholders: no repeats in practice.
# The order id is 32 digits (a UUID in its simple form, as the worker parses it). The last
# argument is the sale's shard count (1: the drain sale is unsharded).
rbench redis-buy "$DRAIN_ORDERS" 2147483647 EVALSHA "$buy_sha" 4 "${drain_keys[@]}" bench-drain \
    "rb-__rand_int__-__rand_int__" "0190b7a2__rand_int____rand_int__" 1
queued="$(rcli XLEN "$(stream_key bench-drain)")"
if ((queued * 100 < DRAIN_ORDERS * 99)); then
    echo "bench: buy.lua appended $queued orders for $DRAIN_ORDERS calls: the script refused them" >&2
    exit 1
fi
meta drain.orders "$queued"
meta redis-buy.ok "$queued"
meta redis-buy.detail "$DRAIN_ORDERS calls on sale bench-drain: $queued orders appended (ok), $((DRAIN_ORDERS - queued)) not (repeats)"

# probe NAME SHA KEY LIMIT WINDOW_MS BURST: one more call right after a run, recorded as
# NAME.probe "allowed remaining retry_after_us reset_us" (shows the state the run left behind).
probe() {
    local name="$1" sha="$2" key="$3"
    shift 3
    meta "$name.probe" "$(rcli EVALSHA "$sha" 1 "$key" "$@" "probe-$name" | tr '\n' ' ' | sed 's/ $//')"
}
# Every limiter script takes limit, window_ms, burst, nonce (ARGV[5], a fake clock for tests, is
# never passed here). The nonce is n-__rand_int__: redis-benchmark draws it from -r, so it can
# repeat; only sliding-log uses it (log member "<now_us>-<nonce>"), where a repeat within the same
# microsecond on the same key would collapse two members into one.
for alg in "${algorithms[@]}"; do
    sha="${limiter_sha[$alg]}"
    if [[ "$alg" == sliding-log ]]; then
        nonce_note="nonce n-__rand_int__: it can repeat under -r, and two calls on the same key in the same microsecond with the same nonce would collapse into one log member (practically never with -r 2147483647, rarely with -r 1000000; at worst the log undercounts by one)"
    else
        nonce_note="nonce n-__rand_int__ (unused by this script; repeats under -r are harmless)"
    fi
    hot_admit="$SECKILL_KEY_PREFIX:ratelimit:$alg:{bench-hot-admit}"
    hot="$SECKILL_KEY_PREFIX:ratelimit:$alg:{bench-hot}"
    rcli DEL "$hot_admit" "$hot" >/dev/null

    rbench "redis-$alg-hot-admit" "$LIMITER_REQUESTS" 2147483647 EVALSHA "$sha" 1 "$hot_admit" 100000 1000 100000 \
        "n-__rand_int__"
    probe "redis-$alg-hot-admit" "$sha" "$hot_admit" 100000 1000 100000
    meta "redis-$alg-hot-admit.detail" "one key $hot_admit, limit 100000 per 1000 ms, burst 100000: every call admitted (as in the in-stock HTTP rows), -r 2147483647; $nonce_note"

    rbench "redis-$alg-perclient" "$LIMITER_REQUESTS" 1000000 EVALSHA "$sha" 1 \
        "$SECKILL_KEY_PREFIX:ratelimit:$alg:{c__rand_int__}" 20 1000 20 "n-__rand_int__"
    meta "redis-$alg-perclient.detail" "key per client $SECKILL_KEY_PREFIX:ratelimit:$alg:{c__rand_int__}, -r 1000000 random clients (so most calls meet a new or expired key), limit 20 per 1000 ms, burst 20: admitted; $nonce_note"

    rbench "redis-$alg-hot-refused" "$LIMITER_REQUESTS" 2147483647 EVALSHA "$sha" 1 "$hot" 10 1000 10 "n-__rand_int__"
    probe "redis-$alg-hot-refused" "$sha" "$hot" 10 1000 10
    meta "redis-$alg-hot-refused.detail" "one key $hot, limit 10 per 1000 ms, burst 10: all but ~10 per second refused (what the app sends to Redis for a refused client is far less: it answers 429 from memory until the retry time), -r 2147483647; $nonce_note"
    rcli DEL "$hot_admit" "$hot" >/dev/null
done

wait_quiet
say "worker drain: $queued orders queued in $(stream_key bench-drain); seckill worker drains them"
python3 "$lib/bench.py" drain --port "$SECKILL_REDIS_PORT" --stream "$(stream_key bench-drain)" \
    --out "$raw/drain.json" --log "$raw/worker.log" --timeout 120 --watch "redis=$redis_pid" --pgtree "$pg_pid" \
    -- "$SECKILL_APP_BIN" worker &
drain_pid=$!
drain_rc=0
wait "$drain_pid" || drain_rc=$?
drain_pid=""
if ((drain_rc != 0)); then
    echo "bench: the drain did not finish (see $raw/worker.log)" >&2
fi
meta drain.pg_rows "$(pg "select count(*) from orders where sale_id = 'bench-drain'")"
check bench-drain
seckill_app_stop
collect_logs
say "scenarios took $((SECONDS - bench_started)) s"

# ---------------------------------------------------------------- the table

mkdir -p "$RESULTS_DIR"
python3 "$lib/bench.py" report --dir "$raw" --json "$RESULTS_DIR/bench.json" --md "$RESULTS_DIR/bench.md"
echo
echo "written: $RESULTS_DIR/bench.json $RESULTS_DIR/bench.md"

if grep -qv $'\t0$' <(grep '^check\.' "$raw/meta.tsv"); then
    echo "bench: an invariant failed (see the invariants above)" >&2
    exit 1
fi
failed=0
