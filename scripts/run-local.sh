#!/usr/bin/env bash
# The one run command: builds seckill (release) and runs it against throwaway Redis + Postgres,
# with a demo sale seeded. Ctrl-C stops the app, then the servers. Works from any directory.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"

app_pid=""
tail_pid=""

# shellcheck disable=SC2317 # called from the EXIT trap
stop_app() {
    if [[ -n "$app_pid" ]] && kill -0 "$app_pid" 2>/dev/null; then
        echo "run-local: stopping seckill (pid $app_pid)" >&2
        kill -TERM "$app_pid" 2>/dev/null || true
        local deadline=$((SECONDS + 40)) # the app's own shutdown timeout defaults to 30 s
        while ((SECONDS < deadline)) && kill -0 "$app_pid" 2>/dev/null; do
            sleep 0.1
        done
        if kill -0 "$app_pid" 2>/dev/null; then
            echo "run-local: seckill did not exit after 40 s; sending SIGKILL" >&2
            kill -KILL "$app_pid" 2>/dev/null || true
        fi
        wait "$app_pid" 2>/dev/null || true
    fi
    app_pid=""
    if [[ -n "$tail_pid" ]]; then
        sleep 0.3 # let tail print the last log lines
        kill "$tail_pid" 2>/dev/null || true
        wait "$tail_pid" 2>/dev/null || true
        tail_pid=""
    fi
}

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    trap '' INT TERM # a second Ctrl-C must not abandon the cleanup half way
    stop_app
    seckill_stop_services
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

seckill_ensure_tools
seckill_start_services

cd "$repo_root"
echo "==> cargo build --release --locked"
cargo build --release --locked

app_port="$(seckill_free_port)"
if [[ -z "${SECKILL_ADMIN_TOKEN:-}" ]]; then
    SECKILL_ADMIN_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
fi
export SECKILL_ADMIN_TOKEN
export SECKILL_LISTEN="127.0.0.1:$app_port"
export SECKILL_REDIS_URL SECKILL_DATABASE_URL
base_url="http://127.0.0.1:$app_port"
app_log="$SECKILL_SERVICES_DIR/seckill.log"

echo "==> starting seckill serve on $base_url"
"$repo_root/target/release/seckill" serve >"$app_log" 2>&1 </dev/null &
app_pid=$!

ready=0
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
    if ! kill -0 "$app_pid" 2>/dev/null; then
        break
    fi
    if curl -fsS --max-time 2 "$base_url/readyz" >/dev/null 2>&1; then
        ready=1
        break
    fi
    sleep 0.2
done
if ((ready == 0)); then
    if kill -0 "$app_pid" 2>/dev/null; then
        echo "run-local: seckill did not become ready on $base_url/readyz within 30 s" >&2
    else
        app_rc=0
        wait "$app_pid" || app_rc=$?
        app_pid=""
        echo "run-local: seckill exited with status $app_rc before becoming ready" >&2
    fi
    echo "--- seckill log ---" >&2
    cat "$app_log" >&2 || true
    echo "--- end of seckill log ---" >&2
    exit 1
fi

# From here on the app's logs stream to the terminal.
tail -n +1 -f --pid="$app_pid" "$app_log" &
tail_pid=$!

echo "==> seeding demo sale (stock 100)"
if ! curl -fsS --max-time 10 -X PUT -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" \
    -H 'content-type: application/json' -d '{"stock":100}' "$base_url/admin/sales/demo"; then
    echo "run-local: seeding the demo sale failed" >&2
    exit 1
fi
echo

cat <<INFO

seckill is running (pid $app_pid). Ctrl-C stops it and the throwaway Redis/Postgres.

  app:         $base_url
  admin token: $SECKILL_ADMIN_TOKEN
  redis:       $SECKILL_REDIS_URL
  postgres:    $SECKILL_DATABASE_URL

Buy one (sale "demo", stock 100):
  curl -i -X POST $base_url/buy -H 'content-type: application/json' -d '{"sale_id":"demo","user_id":"alice"}'
Sale status:
  curl -s -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" $base_url/admin/sales/demo
Orders:
  psql $SECKILL_DATABASE_URL -c 'select * from orders'

INFO

set +e
wait "$app_pid"
rc=$?
set -e
app_pid=""
echo "run-local: seckill exited with status $rc" >&2
exit "$rc"
