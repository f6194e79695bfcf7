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

# The compose file requires SECKILL_ADMIN_TOKEN and GRAFANA_ADMIN_PASSWORD
# (${...:?}); use dummy values so interpolation succeeds. Nothing is started and
# no secret is printed.
SECKILL_ADMIN_TOKEN=lint-dummy-token GRAFANA_ADMIN_PASSWORD=lint-dummy-password \
    docker-compose -f docker-compose.yml config -q
# ...and it must refuse to render without the Grafana admin password.
if env -u GRAFANA_ADMIN_PASSWORD SECKILL_ADMIN_TOKEN=lint-dummy-token \
    docker-compose -f docker-compose.yml config -q >/dev/null 2>&1; then
    echo "error: docker-compose.yml renders without GRAFANA_ADMIN_PASSWORD; it must be required (\${GRAFANA_ADMIN_PASSWORD:?...})" >&2
    exit 1
fi
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

# Grafana (deploy/grafana): the image is pinned, the datasource is the compose Prometheus, the
# dashboard provider reads the directory compose mounts the dashboards into, and every dashboard
# query uses only metrics the service exports (string literals in src/metrics.rs).
python3 - <<'PY'
import json, os, re, sys, yaml

errors = []
compose = yaml.safe_load(open("docker-compose.yml"))
grafana = compose.get("services", {}).get("grafana") or sys.exit("docker-compose.yml: no 'grafana' service")

image = str(grafana.get("image", ""))
if not re.fullmatch(r"grafana/grafana:\d+(\.\d+)+(@sha256:[0-9a-f]{64})?", image):
    errors.append(f"docker-compose.yml: grafana image must be pinned to an exact version (grafana/grafana:X.Y.Z), got {image!r}")

# Container path and options of each bind mount of the grafana service, by host path.
mounts = {}
for volume in grafana.get("volumes", []):
    parts = str(volume).split(":")
    if parts[0].startswith((".", "/")) and len(parts) >= 2:
        mounts[os.path.normpath(parts[0])] = (parts[1], parts[2:])
for host, container in [("deploy/grafana/provisioning", "/etc/grafana/provisioning"), ("deploy/grafana/dashboards", None)]:
    if host not in mounts:
        errors.append(f"docker-compose.yml: grafana does not mount ./{host}")
    elif "ro" not in mounts[host][1]:
        errors.append(f"docker-compose.yml: grafana must mount ./{host} read-only (:ro)")
    elif container and mounts[host][0] != container:
        errors.append(f"docker-compose.yml: ./{host} must be mounted at {container}, not {mounts[host][0]}")

datasources = yaml.safe_load(open("deploy/grafana/provisioning/datasources/prometheus.yml")).get("datasources") or []
prometheus = [d for d in datasources if d.get("type") == "prometheus"]
if len(prometheus) != 1:
    errors.append(f"deploy/grafana/provisioning/datasources/prometheus.yml: expected one prometheus datasource, got {len(prometheus)}")
elif (prometheus[0].get("url"), prometheus[0].get("uid")) != ("http://prometheus:9090", "prometheus"):
    errors.append("deploy/grafana/provisioning/datasources/prometheus.yml: expected url http://prometheus:9090 and uid prometheus, "
                  f"got {prometheus[0].get('url')!r} and {prometheus[0].get('uid')!r}")

providers = yaml.safe_load(open("deploy/grafana/provisioning/dashboards/seckill.yml")).get("providers") or []
mounted = mounts.get("deploy/grafana/dashboards", (None,))[0]
paths = [(p.get("options") or {}).get("path") for p in providers]
if not paths:
    errors.append("deploy/grafana/provisioning/dashboards/seckill.yml: no dashboard provider")
for path in paths:
    if path is None or os.path.normpath(path) != mounted:
        errors.append(f"deploy/grafana/provisioning/dashboards/seckill.yml: provider path {path!r} is not where "
                      f"docker-compose.yml mounts ./deploy/grafana/dashboards ({mounted!r})")

metrics_src = open("src/metrics.rs").read()
dashboards = sorted(f for f in os.listdir("deploy/grafana/dashboards") if f.endswith(".json"))
if not dashboards:
    errors.append("deploy/grafana/dashboards: no dashboard")
for name in dashboards:
    path = f"deploy/grafana/dashboards/{name}"
    try:
        dashboard = json.load(open(path))
    except ValueError as e:
        errors.append(f"{path}: invalid JSON: {e}")
        continue
    if not dashboard.get("uid"):
        errors.append(f"{path}: no uid")
    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # a collapsed row holds its panels
    panels = [p for p in panels if p.get("type") != "row"]
    if not panels:
        errors.append(f"{path}: no panels")
    for panel in panels:
        where = f"{path}: panel {panel.get('title')!r}"
        if (panel.get("datasource") or {}).get("uid") != "prometheus":
            errors.append(f"{where}: datasource uid is not 'prometheus'")
        if not panel.get("targets"):
            errors.append(f"{where}: no targets")
        for target in panel.get("targets", []):
            if (target.get("datasource") or {"uid": "prometheus"}).get("uid") != "prometheus":
                errors.append(f"{where}: target {target.get('refId')} datasource uid is not 'prometheus'")
            expr = target.get("expr") or ""
            if not expr:
                errors.append(f"{where}: target {target.get('refId')} has no expr")
            for token in re.findall(r"seckill_[a-z_]+", expr):
                metric = re.sub(r"_(bucket|sum|count)$", "", token)
                if f'"{metric}"' not in metrics_src:
                    errors.append(f"{where}: {token} is not a metric the service exports (no \"{metric}\" in src/metrics.rs)")

if errors:
    sys.exit("\n".join(["deploy/grafana: FAILED"] + errors))
print("deploy/grafana: OK")
PY
