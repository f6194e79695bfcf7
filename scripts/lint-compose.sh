#!/usr/bin/env bash
# Validate docker-compose.yml with docker-compose (Debian's 1.29 is enough).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

if ! command -v docker-compose >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y --no-install-recommends docker-compose
    else
        echo "error: docker-compose not found; install it (apt-get install docker-compose) or rerun as root" >&2
        exit 1
    fi
fi

# The compose file requires SECKILL_ADMIN_TOKEN (${...:?}); use a dummy value
# so interpolation succeeds. Nothing is started and no secret is printed.
SECKILL_ADMIN_TOKEN=lint-dummy-token docker-compose -f docker-compose.yml config -q
echo "docker-compose.yml: OK"

# The Prometheus config it mounts: valid YAML that scrapes the app's /metrics on its port.
python3 - <<'PY'
import sys, yaml
config = yaml.safe_load(open("deploy/prometheus.yml"))
jobs = {job["job_name"]: job for job in config["scrape_configs"]}
job = jobs.get("seckill") or sys.exit("deploy/prometheus.yml: no 'seckill' scrape job")
targets = [t for s in job["static_configs"] for t in s["targets"]]
if job.get("metrics_path") != "/metrics" or targets != ["app:8080"]:
    sys.exit(f"deploy/prometheus.yml: expected /metrics on app:8080, got {job.get('metrics_path')} {targets}")
print("deploy/prometheus.yml: OK")
PY
