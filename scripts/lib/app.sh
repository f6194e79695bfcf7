# shellcheck shell=bash
# The seckill release binary as a background process, for scripts/run-local.sh and load-tests/.
#
# Source after scripts/lib/services.sh and seckill_start_services, then:
#   seckill_app_build                 cargo build --release --locked (once per shell); with
#                                     SECKILL_APP_PROFILE=debug, the debug binary `cargo test` uses
#   seckill_app_start [VAR=VALUE...]  start `seckill serve` on a free loopback port with these extra
#                                     SECKILL_* settings; waits for /readyz; sets SECKILL_APP_URL,
#                                     SECKILL_APP_PID, SECKILL_APP_LOG, exports SECKILL_ADMIN_TOKEN
#   seckill_app_stop                  SIGTERM (then SIGKILL after 40 s) by PID; idempotent
#   seckill_stop_pid PID [SECONDS]    the same for any process
#   seckill_app_seed SALE STOCK [SHARDS]  create or re-seed a sale open now (over SHARDS shards)
#   seckill_app_put_sale SALE JSON    PUT /admin/sales/SALE with this body (any seed request)
#   seckill_app_check SALE            wait for the queue to drain, then print `seckill reconcile`'s
#                                     report; returns its exit code (0 = the promises hold)

_seckill_app_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ "${SECKILL_APP_PROFILE:-release}" == debug ]]; then
    SECKILL_APP_BIN="$_seckill_app_root/target/debug/seckill"
    # --tests: the binary `cargo test` builds (dev-dependency features unified), so after
    # `cargo test` this compiles nothing instead of a second crate graph.
    _seckill_app_build_args=(--locked --tests)
else
    SECKILL_APP_BIN="$_seckill_app_root/target/release/seckill"
    _seckill_app_build_args=(--release --locked)
fi
SECKILL_APP_PID=""
SECKILL_APP_URL=""
SECKILL_APP_LOG=""
_seckill_app_built=0
_seckill_app_starts=0

seckill_app_build() {
    if ((_seckill_app_built == 0)); then
        echo "==> cargo build ${_seckill_app_build_args[*]}" >&2
        (cd "$_seckill_app_root" && cargo build "${_seckill_app_build_args[@]}") || return 1
        _seckill_app_built=1
    fi
}

seckill_app_start() {
    seckill_app_build || return 1
    if [[ -z "${SECKILL_ADMIN_TOKEN:-}" ]]; then
        SECKILL_ADMIN_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    fi
    export SECKILL_ADMIN_TOKEN SECKILL_REDIS_URL SECKILL_DATABASE_URL
    local port
    port="$(seckill_free_port)" || return 1
    _seckill_app_starts=$((_seckill_app_starts + 1))
    SECKILL_APP_URL="http://127.0.0.1:$port"
    SECKILL_APP_LOG="$SECKILL_SERVICES_DIR/seckill-$_seckill_app_starts.log"
    echo "==> seckill serve on $SECKILL_APP_URL $*" >&2
    env SECKILL_LISTEN="127.0.0.1:$port" "$@" "$SECKILL_APP_BIN" serve >"$SECKILL_APP_LOG" 2>&1 </dev/null &
    SECKILL_APP_PID=$!
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$SECKILL_APP_PID" 2>/dev/null; then
            break
        fi
        if curl -fsS --max-time 2 "$SECKILL_APP_URL/readyz" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    echo "seckill did not become ready on $SECKILL_APP_URL/readyz; its log:" >&2
    cat "$SECKILL_APP_LOG" >&2 || true
    seckill_app_stop
    return 1
}

# seckill_stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (default 15), then SIGKILL; reaps
# the process when it is this shell's child. Does nothing for an empty or finished PID.
seckill_stop_pid() {
    local pid="$1" limit="${2:-15}" deadline
    if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + limit))
    while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "pid $pid did not exit within $limit s of SIGTERM; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

seckill_app_stop() {
    local pid="$SECKILL_APP_PID"
    SECKILL_APP_PID=""
    seckill_stop_pid "$pid" 40 # the app's own shutdown timeout defaults to 30 s
}

seckill_app_put_sale() {
    curl -fsS --max-time 10 -X PUT -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" \
        -H 'content-type: application/json' -d "$2" "$SECKILL_APP_URL/admin/sales/$1"
}

seckill_app_seed() {
    local body="{\"stock\":$2}"
    if [[ -n "${3:-}" ]]; then
        body="{\"stock\":$2,\"shards\":$3}"
    fi
    seckill_app_put_sale "$1" "$body"
}

seckill_app_check() {
    local sale="$1" status deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)); do
        status="$(curl -fsS --max-time 10 -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" \
            "$SECKILL_APP_URL/admin/sales/$sale")" || status=""
        if [[ "$status" =~ \"queued\":0[,}] ]]; then
            break
        fi
        sleep 0.2
    done
    "$SECKILL_APP_BIN" reconcile "$sale"
}
