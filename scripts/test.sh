#!/usr/bin/env bash
# The one test command: fmt check, clippy, cargo test against throwaway Redis + Postgres, then
# the in-process api integration tests (purchase path, limiters, sharded sales, worker, admin, the
# live page in headless Chromium...) once more against a throwaway 3-master Redis Cluster
# (SECKILL_TEST_REDIS_URL set to its seed URLs); in between, scripts/fuzz-api.sh fuzzes the API
# from its OpenAPI document (schemathesis, bounded) and scripts/lint-compose.sh lints
# docker-compose.yml and the Prometheus/Grafana files it mounts.
# Usage: scripts/test.sh [extra cargo test args...]   (works from any directory)
# Extra args go to the first `cargo test` only; the fuzz, compose lint and cluster steps run only
# without them.
# SECKILL_TEST_CLUSTER=0 skips the cluster (not started, not tested).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"

trap 'trap "" INT TERM; seckill_stop_services' EXIT # cleanup is not interruptible
trap 'exit 130' INT
trap 'exit 143' TERM

seckill_ensure_tools --browser # chromium + chromedriver: tests/api/browser.rs
seckill_start_services

cd "$repo_root"

failed=()
run_step() {
    local name="$1"
    shift
    printf '\n==> %s: %s\n' "$name" "$*"
    local rc=0
    "$@" || rc=$?
    if ((rc != 0)); then
        printf '==> %s: FAILED (exit %s)\n' "$name" "$rc"
        failed+=("$name")
    fi
}

run_step fmt cargo fmt --all -- --check
run_step clippy cargo clippy --all-targets --locked -- -D warnings
if (($# > 0)) && [[ -n "${SECKILL_TEST_REDIS_CLUSTER_URL:-}" ]]; then
    printf '\n==> test (Redis Cluster): skipped (extra cargo test args given)\n'
fi
run_step test cargo test --locked "$@"
if (($# == 0)); then
    run_step "api fuzz (schemathesis)" "$repo_root/scripts/fuzz-api.sh"
    run_step "compose lint" "$repo_root/scripts/lint-compose.sh"
fi
if (($# == 0)) && [[ -n "${SECKILL_TEST_REDIS_CLUSTER_URL:-}" ]]; then
    run_step "test (Redis Cluster)" env SECKILL_TEST_REDIS_URL="$SECKILL_TEST_REDIS_CLUSTER_URL" \
        cargo test --locked --test api
fi

if ((${#failed[@]} > 0)); then
    printf '\n==> test.sh: failed steps: %s\n' "${failed[*]}"
    exit 1
fi
# Nothing is printed after a passing `cargo test`: its own summary stays the last output.
