#!/usr/bin/env bash
# Validate docker-compose.yml with docker-compose (Debian's 1.29 is enough), then the files it
# mounts with scripts/lint_compose.py (PyYAML, pinned, in target/py-venv: scripts/py-venv.sh).
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

# The compose file requires SECKILL_ADMIN_TOKEN, SECKILL_JWT_SECRET and GRAFANA_ADMIN_PASSWORD
# (${...:?}); use dummy values so interpolation succeeds. Nothing is started and
# no secret is printed.
export SECKILL_ADMIN_TOKEN=lint-dummy-token SECKILL_JWT_SECRET=lint-dummy-jwt-secret-of-32-bytes-at-least
export GRAFANA_ADMIN_PASSWORD=lint-dummy-password
docker-compose -f docker-compose.yml config -q
# ...and it must refuse to render without each of them.
for required in SECKILL_ADMIN_TOKEN SECKILL_JWT_SECRET GRAFANA_ADMIN_PASSWORD; do
    if env -u "$required" docker-compose -f docker-compose.yml config -q >/dev/null 2>&1; then
        echo "error: docker-compose.yml renders without $required; it must be required (\${$required:?...})" >&2
        exit 1
    fi
done
echo "docker-compose.yml: OK"

# The files it mounts and what they must agree on (Prometheus, Grafana, the edge proxy).
PYYAML=6.0.4
source scripts/py-venv.sh
if ! "$venv/bin/python" -c "import yaml; assert yaml.__version__ == '$PYYAML'" 2>/dev/null; then
    py_install "PyYAML==$PYYAML"
fi
"$venv/bin/python" scripts/lint_compose.py
