#!/usr/bin/env bash
# Validate deploy/k8s offline: every manifest of a Kubernetes kind against the Kubernetes 1.34
# schemas in strict mode (kubernetes-validate from PyPI, pinned, in target/py-venv, the venv of
# every Python tool: scripts/py-venv.sh), then
# scripts/lint_k8s.py: the manifests agree with the binary (`seckill serve/worker --help`, the
# routes) and with each other, and its self-test breaks them in memory to prove it notices.
# Kinds of operators (CloudNativePG's Cluster, the Redis operator's RedisCluster, KEDA's
# ScaledObject) have no schema here: kubernetes-validate warns, lint_k8s.py checks the fields
# seckill depends on.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

KUBERNETES_VALIDATE=1.34.1
source scripts/py-venv.sh
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE"; then
    py_install "kubernetes-validate==$KUBERNETES_VALIDATE" "minutes the first time: its schemas"
fi

mapfile -t manifests < <(find deploy/k8s -name '*.yaml' | sort)
"$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.34.0 "${manifests[@]}"

cargo build --quiet --locked --bin seckill
"$venv/bin/python" scripts/lint_k8s.py target/debug/seckill --self-test
