#!/usr/bin/env bash
# The one test command: fmt check, clippy, cargo test against throwaway Redis + Postgres.
# Usage: scripts/test.sh [extra cargo test args...]   (works from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"

trap 'trap "" INT TERM; seckill_stop_services' EXIT # cleanup is not interruptible
trap 'exit 130' INT
trap 'exit 143' TERM

seckill_ensure_tools
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
run_step test cargo test --locked "$@"

if ((${#failed[@]} > 0)); then
    printf '\n==> test.sh: failed steps: %s\n' "${failed[*]}"
    exit 1
fi
# Nothing is printed after a passing `cargo test`: its own summary stays the last output.
