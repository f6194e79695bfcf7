#!/usr/bin/env bash
# Four bounded oha runs against a throwaway seckill stack, then the invariants.
#
# Starts a private Redis + Postgres (scripts/lib/services.sh) and the release binary
# (scripts/lib/app.sh) on free loopback ports. oha sends every request from 127.0.0.1, so:
#   app 1, SECKILL_RATE_LIMIT=$OPEN_LIMIT (the limiter runs but never refuses):
#     in-stock   POST /buy, a random user per request from a file of distinct users (-Z)
#     sold-out   POST /buy on a sale seeded with stock 0
#     healthz    GET /healthz
#   app 2, SECKILL_RATE_LIMIT=$SECKILL_RATE_LIMIT (default 20/1s):
#     limited    POST /buy from one address, far over the limit → 429
# Prints one line per run (req/s, p50, p99, status counts), then per sale waits for the queue to
# drain and checks `seckill reconcile` and that the 201s oha saw are the orders in Postgres.
# Exits non-zero when a run or an invariant failed. Always stops the app and the servers.
#
# Knobs (environment): DURATION CONNECTIONS IN_STOCK_REQUESTS OPEN_LIMIT SECKILL_RATE_LIMIT
# RESULTS_DIR. See load-tests/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"
# shellcheck source=load-tests/lib/common.sh
source "$repo_root/load-tests/lib/common.sh"
LOAD_TEST_NAME=oha.sh

DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-50}"
IN_STOCK_REQUESTS="${IN_STOCK_REQUESTS:-50000}"
OPEN_LIMIT="${OPEN_LIMIT:-100000/1s}"
SECKILL_RATE_LIMIT="${SECKILL_RATE_LIMIT:-20/1s}"
RESULTS_DIR="${RESULTS_DIR:-$repo_root/load-tests/results}"
# The -Z file holds this many users per request: oha picks a line at random (with replacement)
# for each request, so about 1/(2*USERS_PER_REQUEST) of the requests repeat a user (→ 409).
USERS_PER_REQUEST=20
RUN_ID="$(date +%s)"

failures=0
bodies=""

need_tools() {
    if ! command -v oha >/dev/null 2>&1; then
        log "oha not found: install it (cargo install oha --locked)"
        return 1
    fi
    need_jq_and_servers
}

# oha_run NAME TIMEOUT_SECS oha-args...: one bounded oha run, JSON to $RESULTS_DIR/oha-NAME.json,
# then its one-line summary.
oha_run() {
    local name="$1" limit="$2" out="$RESULTS_DIR/oha-$1.json"
    shift 2
    local -a cmd=(oha --no-tui --output-format json -o "$out" -c "$CONNECTIONS" -t 5s "$@")
    log "timeout $limit $(quote_cmd "${cmd[@]}")"
    if ! run_bounded "$limit" "${cmd[@]}"; then
        log "oha $name failed or did not finish within ${limit}s"
        failures=$((failures + 1))
        return 0
    fi
    summary_line "$name" "$out"
}

summary_line() {
    jq -r --arg name "$1" '
        def ms: . * 100 | round / 100 | tostring + "ms";
        "oha \($name | . + " " * (9 - length)) \(.summary.requestsPerSec | round) req/s"
        + "  p50 \(.metrics.latency_ms.p50 | ms)  p99 \(.metrics.latency_ms.p99 | ms)"
        + "  statuses \(.statusCodeDistribution | to_entries | map("\(.key)=\(.value)") | join(" "))"
        + (if (.errorDistribution | length) > 0
           then "  errors \(.errorDistribution | to_entries | map("\(.key)=\(.value)") | join(", "))"
           else "" end)' "$2"
}

# expect_statuses NAME STATUS...: every response of run NAME had one of these statuses and no
# request failed.
expect_statuses() {
    local name="$1" file="$RESULTS_DIR/oha-$1.json"
    shift
    local allowed
    allowed="$(printf '"%s",' "$@")"
    if [[ ! -f "$file" ]] || ! jq -e "(.errorDistribution | length) == 0
            and ([.statusCodeDistribution | keys[] | IN(${allowed%,})] | all)" "$file" >/dev/null; then
        log "oha $name: expected only statuses $* and no errors"
        failures=$((failures + 1))
    fi
}

# status_count NAME STATUS: how many responses of run NAME had this status.
status_count() {
    jq -r --arg s "$2" '.statusCodeDistribution[$s] // 0' "$RESULTS_DIR/oha-$1.json" 2>/dev/null || echo 0
}

write_bodies() {
    local n=$((IN_STOCK_REQUESTS * USERS_PER_REQUEST))
    bodies="$SECKILL_SERVICES_DIR/oha-bodies.jsonl"
    seq 1 "$n" | awk -v run="$RUN_ID" '{ printf "{\"sale_id\":\"oha-stock\",\"user_id\":\"oha-%s-%d\"}\n", run, $1 }' \
        >"$bodies"
    log "wrote $n distinct users to $bodies"
}

run_open_limit() {
    local url="$SECKILL_APP_URL" limit
    limit=$(($(secs "$DURATION") + 60))
    seckill_app_seed oha-stock "$IN_STOCK_REQUESTS" >/dev/null
    seckill_app_seed oha-soldout 0 >/dev/null
    write_bodies

    oha_run in-stock 120 -n "$IN_STOCK_REQUESTS" -m POST -T application/json -Z "$bodies" "$url/buy"
    expect_statuses in-stock 201 409
    oha_run sold-out "$limit" -z "$DURATION" -w -m POST -T application/json \
        -d '{"sale_id":"oha-soldout","user_id":"late-user"}' "$url/buy"
    expect_statuses sold-out 410
    oha_run healthz "$limit" -z "$DURATION" -w "$url/healthz"
    expect_statuses healthz 200
}

run_limited() {
    local url="$SECKILL_APP_URL" limit
    limit=$(($(secs "$DURATION") + 60))
    seckill_app_seed oha-limited 1000000 >/dev/null
    oha_run limited "$limit" -z "$DURATION" -w -m POST -T application/json \
        -d '{"sale_id":"oha-limited","user_id":"greedy-user"}' "$url/buy"
    expect_statuses limited 201 409 429
    if (($(status_count limited 429) == 0)); then
        log "oha limited: no 429 at all"
        failures=$((failures + 1))
    fi
}

main() {
    need_tools
    mkdir -p "$RESULTS_DIR"
    rm -f "$RESULTS_DIR"/oha-*.json
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    SECKILL_TEST_CLUSTER=0 seckill_start_services # single node: no cluster needed
    seckill_app_start SECKILL_RATE_LIMIT="$OPEN_LIMIT"
    run_open_limit
    seckill_app_stop

    seckill_app_start SECKILL_RATE_LIMIT="$SECKILL_RATE_LIMIT"
    run_limited

    check_sale oha-stock in-stock
    check_sale oha-soldout sold-out
    check_sale oha-limited limited
    log "results: $(cd "$RESULTS_DIR" && echo oha-*.json)"
    if ((failures > 0)); then
        log "FAILED: $failures problem(s), see above"
        return 1
    fi
    log "all runs and invariants held"
}

main "$@"
