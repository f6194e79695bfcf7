#!/usr/bin/env bash
# The one run command: builds seckill (release) and runs it against throwaway Redis + Postgres,
# with a demo sale seeded. Ctrl-C stops the app, then the servers. Works from any directory.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"

tail_pid=""

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    trap '' INT TERM # a second Ctrl-C must not abandon the cleanup half way
    if [[ -n "$SECKILL_APP_PID" ]]; then
        echo "run-local: stopping seckill (pid $SECKILL_APP_PID)" >&2
    fi
    seckill_app_stop
    if [[ -n "$tail_pid" ]]; then
        sleep 0.3 # let tail print the last log lines
        kill "$tail_pid" 2>/dev/null || true
        wait "$tail_pid" 2>/dev/null || true
    fi
    seckill_stop_services
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

seckill_ensure_tools
SECKILL_TEST_CLUSTER=0 seckill_start_services # the app runs against the single node
# shellcheck disable=SC2119 # started with the default settings
seckill_app_start

# From here on the app's logs stream to the terminal.
tail -n +1 -f --pid="$SECKILL_APP_PID" "$SECKILL_APP_LOG" &
tail_pid=$!

echo "==> seeding demo sale (stock 100)"
if ! seckill_app_seed demo 100; then
    echo "run-local: seeding the demo sale failed" >&2
    exit 1
fi
echo

cat <<INFO

seckill is running (pid $SECKILL_APP_PID). Ctrl-C stops it and the throwaway Redis/Postgres.

  app:         $SECKILL_APP_URL
  live page:   $SECKILL_APP_URL/admin   (it asks for the admin token)
  admin token: $SECKILL_ADMIN_TOKEN
  redis:       $SECKILL_REDIS_URL
  postgres:    $SECKILL_DATABASE_URL

Buy one (sale "demo", stock 100):
  curl -i -X POST $SECKILL_APP_URL/buy -H 'content-type: application/json' -d '{"sale_id":"demo","user_id":"alice"}'
Sale status:
  curl -s -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" $SECKILL_APP_URL/admin/sales/demo
Check the promises (drained queue, Redis buyers = Postgres orders):
  SECKILL_REDIS_URL=$SECKILL_REDIS_URL SECKILL_DATABASE_URL=$SECKILL_DATABASE_URL $SECKILL_APP_BIN reconcile demo
Orders:
  psql $SECKILL_DATABASE_URL -c 'select * from orders'

INFO

set +e
wait "$SECKILL_APP_PID"
rc=$?
set -e
SECKILL_APP_PID=""
echo "run-local: seckill exited with status $rc" >&2
exit "$rc"
