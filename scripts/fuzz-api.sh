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
seckill_app_seed fuzz-open 1000000 >/dev/null
seckill_app_seed fuzz-sharded 1000000 3 >/dev/null
seckill_app_seed fuzz-sold-out 0 >/dev/null
seckill_app_put_sale fuzz-not-started '{"stock": 100, "starts_at": "2999-01-01T00:00:00Z"}' >/dev/null
seckill_app_put_sale fuzz-ended \
    '{"stock": 100, "starts_at": "2000-01-01T00:00:00Z", "ends_at": "2000-01-02T00:00:00Z"}' >/dev/null
cd "$repo_root" # schemathesis.toml
timeout 300 st run "$SECKILL_APP_URL/openapi.json" --checks all --max-examples 60 --seed 1 \
    --request-timeout 5 -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN"
