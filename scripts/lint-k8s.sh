#!/usr/bin/env bash
# Validate deploy/k8s offline: every manifest of a Kubernetes kind against the Kubernetes 1.34
# schemas in strict mode (kubernetes-validate from PyPI, pinned, in target/py-venv, the venv of
# every Python tool: testbed/src/python.rs), then
# scripts/lint_k8s.py: the manifests agree with the binary (`seckill serve/worker --help`, the
# routes) and with each other, and its self-test breaks them in memory to prove it notices.
# Kinds of operators (CloudNativePG's Cluster, the Redis operator's RedisCluster, KEDA's
# ScaledObject) have no schema here: kubernetes-validate warns, lint_k8s.py checks the fields
# seckill depends on.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

KUBERNETES_VALIDATE=1.34.1
venv="${CARGO_TARGET_DIR:-target}/py-venv"
if [ ! -x "$venv/bin/kubernetes-validate" ] || ! "$venv/bin/kubernetes-validate" --version | grep -q "$KUBERNETES_VALIDATE"; then
    if [ ! -x "$venv/bin/python" ] && ! python3 -m venv "$venv" >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ]; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update
            apt-get install -y --no-install-recommends python3-venv
            rm -rf "$venv"
            python3 -m venv "$venv"
        else
            echo "error: python3 -m venv failed; install python3-venv (apt-get install python3-venv) or rerun as root" >&2
            exit 1
        fi
    fi
    echo "==> pip install kubernetes-validate==$KUBERNETES_VALIDATE into $venv (minutes the first time: its schemas)" >&2
    # python -m pip, not bin/pip: a copied venv's scripts run the original's python.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE"
fi

mapfile -t manifests < <(find deploy/k8s -name '*.yaml' | sort)
"$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.34.0 "${manifests[@]}"

cargo build --quiet --locked --bin seckill
"$venv/bin/python" scripts/lint_k8s.py target/debug/seckill --self-test
