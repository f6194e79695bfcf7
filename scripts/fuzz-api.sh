#!/usr/bin/env bash
# Fuzzes the HTTP API from its own OpenAPI document (GET /openapi.json) with schemathesis:
# every check (no 5xx, responses match the document, schema-valid requests accepted, 405s carry
# Allow, ...), a fixed seed and at most 60 examples per operation, so a run is repeatable and
# bounded (a few seconds; 300 s at most). Before it, one sale is seeded in each state (open,
# sharded, sold out, not started, ended), and schemathesis.toml makes most generated purchases
# name one of them, so POST /buy is fuzzed through the purchase itself, not only to a 404.
#
# Run by scripts/test.sh after `seckill_start_services`; it needs that shell's SECKILL_* settings.
# Installs schemathesis (pinned) with pip when missing. Starts `seckill serve` (the debug binary
# `cargo test` built) on a free loopback port and stops it by PID on exit.
set -euo pipefail

SCHEMATHESIS_VERSION=4.32.5
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
export SECKILL_APP_PROFILE=debug
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"

if ! st --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    echo "==> pip install schemathesis==$SCHEMATHESIS_VERSION" >&2
    python3 -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

trap seckill_app_stop EXIT
seckill_app_start SECKILL_KEY_PREFIX="fuzz-$$" SECKILL_RATE_LIMIT=1000000/1s RUST_LOG=warn
seed() { # seed SALE JSON
    curl -fsS --max-time 10 -X PUT -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" \
        -H 'content-type: application/json' -d "$2" "$SECKILL_APP_URL/admin/sales/$1" >/dev/null
}
seed fuzz-open '{"stock": 1000000}'
seed fuzz-sharded '{"stock": 1000000, "shards": 3}'
seed fuzz-sold-out '{"stock": 0}'
seed fuzz-not-started '{"stock": 100, "starts_at": "2999-01-01T00:00:00Z"}'
seed fuzz-ended '{"stock": 100, "starts_at": "2000-01-01T00:00:00Z", "ends_at": "2000-01-02T00:00:00Z"}'
cd "$repo_root" # schemathesis.toml
timeout 300 st run "$SECKILL_APP_URL/openapi.json" --checks all --max-examples 60 --seed 1 \
    --request-timeout 5 -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN"
