#!/usr/bin/env bash
# load-tests/ab.sh — A/B two seckill binaries on the in-stock POST /buy path, alternating runs so
# that the shared machine's drift hits both alike.
#
#   load-tests/ab.sh OLD_BINARY NEW_BINARY          # e.g. a build of an earlier commit vs target/release/seckill
#   ROUNDS=3 DURATION=4 load-tests/ab.sh A B
#
# It starts a throwaway Redis and Postgres on free loopback ports (scripts/lib/services.sh, no
# cluster), starts both binaries (`serve`, worker in the process, SECKILL_RATE_LIMIT=1000000/1s,
# key prefixes ab-a and ab-b, one sale of 10,000,000 items each), then ROUNDS times runs wrk
# (load-tests/lib/wrk-bench.lua, every request a new user) DURATION seconds against each, A first
# in odd rounds and B first in even ones (the second run of a pair gained 3-7 % in either order),
# waiting before each run until both queues have drained. It prints one line per run, the median
# req/s and app CPU µs per request of each with B / A, and B / A paired within each round (median
# and range), which the drift of a shared machine between rounds disturbs less. Everything
# started is stopped by PID on exit.
#
# Settings: ROUNDS=4, DURATION=5 (1..60), THREADS=2, CONNECTIONS=64.
# Needs: wrk, curl, python3 and the servers services.sh starts.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/services.sh
source "$repo_root/scripts/lib/services.sh"
# shellcheck source=scripts/lib/app.sh
source "$repo_root/scripts/lib/app.sh"

(($# == 2)) || { echo "usage: load-tests/ab.sh OLD_BINARY NEW_BINARY" >&2; exit 2; }
bins=("$1" "$2")
for bin in "${bins[@]}"; do
    [[ -x "$bin" ]] || { echo "ab: $bin is not an executable" >&2; exit 2; }
done
ROUNDS="${ROUNDS:-4}"
DURATION="${DURATION:-5}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
for knob in ROUNDS DURATION THREADS CONNECTIONS; do
    [[ "${!knob}" =~ ^[0-9]+$ ]] && ((${!knob} >= 1)) || { echo "ab: $knob must be a positive integer" >&2; exit 2; }
done
((ROUNDS <= 20 && DURATION <= 60)) || { echo "ab: ROUNDS <= 20 and DURATION <= 60 (keep runs bounded)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "ab: wrk is missing (apt-get install wrk)" >&2; exit 2; }

pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do seckill_stop_pid "$pid" 40; done
    seckill_stop_services
}
trap 'trap "" INT TERM; cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

seckill_ensure_tools
SECKILL_TEST_CLUSTER=0 seckill_start_services
SECKILL_ADMIN_TOKEN="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export SECKILL_ADMIN_TOKEN SECKILL_REDIS_URL SECKILL_DATABASE_URL

names=(a b)
urls=()
for i in 0 1; do
    port="$(seckill_free_port)"
    urls+=("http://127.0.0.1:$port")
    env SECKILL_LISTEN="127.0.0.1:$port" SECKILL_KEY_PREFIX="ab-${names[i]}" SECKILL_RATE_LIMIT=1000000/1s \
        RUST_LOG=warn "${bins[i]}" serve >"$SECKILL_SERVICES_DIR/ab-${names[i]}.log" 2>&1 </dev/null &
    pids+=("$!")
done
for i in 0 1; do
    deadline=$((SECONDS + 30))
    until curl -fsS --max-time 2 "${urls[i]}/readyz" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { cat "$SECKILL_SERVICES_DIR/ab-${names[i]}.log" >&2; exit 1; }
        sleep 0.2
    done
    curl -fsS --max-time 10 -X PUT -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" -H 'content-type: application/json' \
        -d '{"stock": 10000000}' "${urls[i]}/admin/sales/ab-${names[i]}" >/dev/null
done

# queued URL SALE: the sale's queued orders, from the admin status.
queued() {
    curl -fsS --max-time 10 -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" "$1/admin/sales/$2" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["queued"])'
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"
results="$SECKILL_SERVICES_DIR/ab-results.txt"
: >"$results"
for ((round = 1; round <= ROUNDS; round++)); do
    order=(0 1)
    ((round % 2 == 1)) || order=(1 0) # whichever runs second gains a few %: alternate who does
    for i in "${order[@]}"; do
        for j in 0 1; do # both queues drained: no worker catching up during the run
            deadline=$((SECONDS + 60))
            until [[ "$(queued "${urls[j]}" "ab-${names[j]}")" == 0 ]]; do
                ((SECONDS < deadline)) || { echo "ab: ${names[j]}'s queue did not drain" >&2; exit 1; }
                sleep 0.2
            done
        done
        cpu0="$(cpu_ticks "${pids[i]}")"
        out="$SECKILL_SERVICES_DIR/ab-wrk.out"
        timeout $((DURATION + 30)) wrk "-t$THREADS" "-c$CONNECTIONS" "-d${DURATION}s" \
            -s "$repo_root/load-tests/lib/wrk-bench.lua" "${urls[i]}" -- buy "ab-${names[i]}" "r$round" >"$out"
        cpu1="$(cpu_ticks "${pids[i]}")"
        python3 - "${names[i]}" "$round" "$((cpu1 - cpu0))" "$hz" "$out" >>"$results" <<'PY'
import json, sys
name, round_, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
line = next(l for l in open(sys.argv[5]) if l.startswith("BENCH_WRK "))
d = json.loads(line[len("BENCH_WRK "):])
n = d["requests"]
created = d["statuses"].get("201", 0)
print(name, round_, round(n / (d["duration_us"] / 1e6)), round(ticks / hz / n * 1e6, 1), created, n)
PY
        tail -n 1 "$results" | awk '{ printf "ab: round %s %s: %s req/s, app %s µs/req, 201 %s of %s\n", $2, $1, $3, $4, $5, $6 }' >&2
    done
done
python3 - "$results" "${bins[@]}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
med = {}
for name in ("a", "b"):
    mine = [r for r in rows if r[0] == name]
    med[name] = (statistics.median(int(r[2]) for r in mine), statistics.median(float(r[3]) for r in mine))
    assert all(r[4] == r[5] for r in mine), f"{name}: not every request bought"
for name, binary in zip(("a", "b"), sys.argv[2:]):
    print(f"{name} = {binary}: median {med[name][0]:,.0f} req/s, {med[name][1]:.1f} µs app CPU per purchase")
print(f"b / a: {med['b'][0] / med['a'][0]:.3f} × req/s, {med['b'][1] / med['a'][1]:.3f} × app CPU per purchase")
# Paired: b / a within each round (the two runs of a round are seconds apart, so drift of the
# shared machine between rounds cancels out), then the median and the range over rounds.
pairs = {}
for r in rows:
    pairs.setdefault(r[1], {})[r[0]] = (int(r[2]), float(r[3]))
rps = sorted(p["b"][0] / p["a"][0] for p in pairs.values())
cpu = sorted(p["b"][1] / p["a"][1] for p in pairs.values())
print(f"paired b / a over {len(rps)} rounds: median {statistics.median(rps):.3f} × req/s "
      f"({rps[0]:.2f}–{rps[-1]:.2f}), median {statistics.median(cpu):.3f} × app CPU per purchase ({cpu[0]:.2f}–{cpu[-1]:.2f})")
PY
