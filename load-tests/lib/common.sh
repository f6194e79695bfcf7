# shellcheck shell=bash
# Shared by load-tests/k6.sh and load-tests/oha.sh (sourced after scripts/lib/services.sh and
# scripts/lib/app.sh): bounded runs of a load generator, cleanup, and the per-sale invariant line.
# The sourcing script sets LOAD_TEST_NAME (its log prefix).

log() {
    printf '%s: %s\n' "${LOAD_TEST_NAME:-load-test}" "$*" >&2
}

# run_bounded SECS cmd...: run cmd under `timeout` in the background and wait for it, so a Ctrl-C
# or SIGTERM reaches our trap at once (cleanup then stops it by PID); returns cmd's exit code
# (124 or 137: it was still running after SECS and was stopped).
child_pid=""
sale_orders=0 # set by check_sale: the number of orders of the sale in Postgres

run_bounded() {
    local limit="$1" rc=0
    shift
    timeout --kill-after=10 "$limit" "$@" &
    child_pid=$!
    wait "$child_pid" || rc=$?
    child_pid=""
    return "$rc"
}

# shellcheck disable=SC2317 # called from cleanup
stop_child() {
    local pid="$child_pid"
    child_pid=""
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        log "stopping the running load generator (timeout pid $pid)"
        seckill_stop_pid "$pid" 15
    fi
}

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local rc=$?
    trap '' INT TERM
    stop_child
    if ((rc != 0)) && [[ -n "$SECKILL_APP_LOG" && -f "$SECKILL_APP_LOG" ]]; then
        log "last lines of the seckill log ($SECKILL_APP_LOG):"
        tail -n 20 "$SECKILL_APP_LOG" >&2 || true
    fi
    seckill_app_stop
    seckill_stop_services
    exit "$rc"
}

# "1m", "20s", "500ms" -> whole seconds, rounded up
secs() {
    local d="$1"
    case "$d" in
        *ms) echo $(((${d%ms} + 999) / 1000)) ;;
        *s) echo "${d%s}" ;;
        *m) echo $((${d%m} * 60)) ;;
        *)
            log "bad duration $d (use e.g. 500ms, 10s, 1m)"
            return 1
            ;;
    esac
}

# The command line as a reader would type it (arguments with shell characters in single quotes).
quote_cmd() {
    local arg out=""
    for arg in "$@"; do
        if [[ "$arg" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
            out+="$arg "
        else
            out+="'${arg//\'/\'\\\'\'}' "
        fi
    done
    printf '%s\n' "${out% }"
}

check_sale() {
    local sale="$1" report rc=0
    sale_orders=0
    report="$(seckill_app_check "$sale")" || rc=$?
    if [[ -z "$report" ]] || ! jq -e . >/dev/null 2>&1 <<<"$report"; then
        log "$sale: no reconcile report (exit $rc)"
        return 1
    fi
    # shellcheck disable=SC2034 # read by the sourcing scripts
    sale_orders="$(jq -r '.persisted' <<<"$report")"
    jq -r '
        def v(ok): if ok then "ok" else "BROKEN" end;
        "invariant \(.sale_id): stock_initial \(.stock_initial) = stock_left \(.stock_left) + sold \(.buyers) [\(v(.stock_initial == .stock_left + .buyers))]"
        + ", stock_left >= 0 [\(v(.stock_left >= 0))]"
        + ", buyers \(.buyers) = Postgres orders \(.persisted) [\(v(.buyers == .persisted))]"
        + ", queued \(.queued), consistent \(.consistent)"' <<<"$report"
    if ((rc != 0)) || ! jq -e '.consistent and .stock_left >= 0 and .buyers == .persisted and .queued == 0' \
        >/dev/null <<<"$report"; then
        log "$sale: invariant failed; report: $report"
        return 1
    fi
}

# jq (installed with apt-get when root), redis-server and Postgres (seckill_ensure_tools).
need_jq_and_servers() {
    if ! command -v jq >/dev/null 2>&1; then
        if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
            log "installing jq"
            DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends jq >&2
        else
            log "jq not found: install it (apt-get install jq)"
            return 1
        fi
    fi
    seckill_ensure_tools
}
