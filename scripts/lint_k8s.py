#!/usr/bin/env python3
"""Checks that deploy/k8s agrees with the binary it deploys.

Run by scripts/lint-k8s.sh from the repository root, after kubernetes-validate --strict:
  python3 scripts/lint_k8s.py path/to/seckill [--self-test]

- every setting a manifest gives seckill (ConfigMap keys, Secret keys, env) is one of the
  subcommand's own (`seckill serve --help`, `seckill worker --help`);
- the probes: liveness and startup on /healthz, readiness on /readyz, both routes of the binary
  (its OpenAPI annotations), on the container ports that SECKILL_LISTEN and
  SECKILL_METRICS_LISTEN open (/readyz moves to the metrics listener when it is set);
- the shutdown fits: preStop sleep + SECKILL_SHUTDOWN_TIMEOUT + SECKILL_WORKER_INSERT_TIMEOUT <
  terminationGracePeriodSeconds;
- Services, the NetworkPolicy (metrics only to the monitoring namespace, the buyer port not to
  every pod), the PDB, the HPA and
  the pre-scaling CronJobs name what exists; every container runs non-root, read-only, with no
  privilege escalation and every capability dropped, with requests and limits;
- the data side: SECKILL_REDIS_URL names the RedisCluster's leaders, SECKILL_DATABASE_URL comes
  from CloudNativePG's secret of the Cluster, and KEDA's stream trigger watches the key and the
  consumer group the worker uses (src/redis/order_stream.rs).
--self-test breaks the manifests in memory in several ways and fails unless each is caught.
Prints one OK line, or every error found and exits non-zero.
"""

import copy
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path("deploy/k8s")
NAMESPACE = "seckill"


def load():
    docs = []
    for path in sorted(ROOT.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((str(path), doc))
    return docs


def help_settings(binary, subcommand):
    """The SECKILL_* settings `seckill <subcommand> --help` lists, and the help text."""
    text = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\[env: (SECKILL_[A-Z0-9_]+)", text)), text


def default_of(help_text, name):
    """A setting's default as `--help` prints it ("[env: NAME=]" then "[default: X]")."""
    match = re.search(r"\[env: " + re.escape(name) + r"=[^\]]*\]\s*\[default: ([^\]]+)\]", help_text)
    return match.group(1) if match else None


def routes():
    """The paths the binary documents in its OpenAPI annotations."""
    paths = set()
    for source in pathlib.Path("src/http/routes").glob("*.rs"):
        paths.update(re.findall(r'path\s*=\s*"([^"]+)"', source.read_text()))
    return paths


def src_constant(pattern):
    for source in pathlib.Path("src").rglob("*.rs"):
        match = re.search(pattern, source.read_text())
        if match:
            return match.group(1)
    return None


def seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m)", str(text).strip())
    if not match:
        return None
    value = int(match.group(1))
    return {"ms": value / 1000, "s": value, "m": value * 60}[match.group(2)]


def port_of(address):
    return int(str(address).rsplit(":", 1)[1]) if address else None


def find(docs, kind, name=None):
    return [doc for _, doc in docs if doc.get("kind") == kind and (name is None or doc["metadata"]["name"] == name)]


def check(docs, binary_help, route_paths, group, errors):
    def error(text):
        errors.append(text)

    settings_maps = find(docs, "ConfigMap", "seckill-settings")
    if not settings_maps:
        error("no ConfigMap seckill-settings")
    secrets = find(docs, "Secret", "seckill-secrets")
    for _, doc in docs:
        if doc.get("metadata", {}).get("namespace", NAMESPACE) != NAMESPACE and doc.get("kind") != "Namespace":
            error(f"{doc['kind']}/{doc['metadata']['name']}: not in namespace {NAMESPACE}")

    # Every setting given is one of the subcommand's own.
    deployments = {doc["metadata"]["name"]: doc for doc in find(docs, "Deployment")}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if "seckill" not in container["image"]:
                continue
            subcommand = container.get("args", ["serve"])[0]
            known, _ = binary_help[subcommand]
            given = []
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    for cm in find(docs, "ConfigMap", source["configMapRef"]["name"]):
                        given += list(cm.get("data", {}))
                if "secretRef" in source:
                    for secret in find(docs, "Secret", source["secretRef"]["name"]):
                        given += list(secret.get("stringData", {})) + list(secret.get("data", {}))
            given += [env["name"] for env in container.get("env", [])]
            for setting in given:
                # RUST_LOG and the standard OTEL_* variables are read by the libraries (`--help`
                # points to them), not by clap.
                if setting != "RUST_LOG" and not setting.startswith("OTEL_") and setting not in known:
                    error(f"Deployment/{name}: {setting} is not a setting of `seckill {subcommand} --help`")
            check_container(f"Deployment/{name}", pod, container, error)

    api = deployments.get("seckill")
    if api is None:
        return error("no Deployment seckill")
    pod = api["spec"]["template"]["spec"]
    container = pod["containers"][0]
    _, serve_help = binary_help["serve"]
    for cm in settings_maps:
        data = cm.get("data", {})
        listen = data.get("SECKILL_LISTEN") or default_of(serve_help, "SECKILL_LISTEN")
        metrics_listen = data.get("SECKILL_METRICS_LISTEN")
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        if ports.get("http") != port_of(listen):
            error(f"Deployment/seckill: port http {ports.get('http')} is not SECKILL_LISTEN's {listen}")
        if metrics_listen and ports.get("metrics") != port_of(metrics_listen):
            error(f"Deployment/seckill: port metrics {ports.get('metrics')} is not SECKILL_METRICS_LISTEN's {metrics_listen}")
        probes = {kind: container.get(kind, {}).get("httpGet", {}) for kind in ("livenessProbe", "readinessProbe", "startupProbe")}
        for kind, want_path, want_port in (
            ("livenessProbe", "/healthz", "metrics" if metrics_listen else "http"),
            ("startupProbe", "/healthz", "metrics" if metrics_listen else "http"),
            ("readinessProbe", "/readyz", "metrics" if metrics_listen else "http"),
        ):
            got = probes[kind]
            if got.get("path") != want_path or got.get("port") != want_port:
                error(f"Deployment/seckill: {kind} is {got.get('path')} on {got.get('port')}, want {want_path} on {want_port}")
            if got.get("path") not in route_paths:
                error(f"Deployment/seckill: {kind} path {got.get('path')} is no route of the binary")
        shutdown = seconds(data.get("SECKILL_SHUTDOWN_TIMEOUT") or default_of(serve_help, "SECKILL_SHUTDOWN_TIMEOUT"))
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        # The worker's last batch (its insert, bounded by SECKILL_WORKER_INSERT_TIMEOUT) runs after the drain.
        insert = seconds(data.get("SECKILL_WORKER_INSERT_TIMEOUT") or default_of(serve_help, "SECKILL_WORKER_INSERT_TIMEOUT"))
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if shutdown is None or insert is None or pre_stop + shutdown + insert >= grace:
            error(f"Deployment/seckill: preStop {pre_stop} s + SECKILL_SHUTDOWN_TIMEOUT {shutdown} s + "
                  f"SECKILL_WORKER_INSERT_TIMEOUT {insert} s must be under terminationGracePeriodSeconds {grace}")
        # The Redis Cluster's leaders are the seed nodes.
        urls = [u for u in data.get("SECKILL_REDIS_URL", "").split(",") if u]
        for cluster in find(docs, "RedisCluster"):
            if len(urls) < 2:
                continue
            name, size = cluster["metadata"]["name"], cluster["spec"]["clusterSize"]
            want = [f"redis://{name}-leader-{i}.{name}-leader-headless:6379" for i in range(size)]
            if urls != want:
                error(f"ConfigMap seckill-settings: SECKILL_REDIS_URL {urls} is not RedisCluster/{name}'s leaders {want}")
            for scaled in find(docs, "ScaledObject"):
                for trigger in scaled["spec"]["triggers"]:
                    addresses = ["redis://" + a for a in trigger["metadata"].get("addresses", "").split(",")]
                    if addresses != want:
                        error(f"ScaledObject/{scaled['metadata']['name']}: addresses are not the Redis Cluster's leaders")

    for secret in secrets:
        for key, value in secret.get("stringData", {}).items():
            if len(value) < 32:
                error(f"Secret seckill-secrets: {key} is shorter than 32 bytes (the service refuses it)")

    # The database URL comes from CloudNativePG's secret of the Cluster.
    refs = [env["valueFrom"]["secretKeyRef"] for env in container.get("env", []) if env["name"] == "SECKILL_DATABASE_URL"]
    for cluster in find(docs, "Cluster"):
        want = {"name": cluster["metadata"]["name"] + "-app", "key": "uri"}
        if refs != [want]:
            error(f"Deployment/seckill: SECKILL_DATABASE_URL is {refs}, want CloudNativePG's {want}")

    # Services, NetworkPolicy, PDB, HPA and the pre-scaling name what exists.
    port_names = {p["name"] for p in container.get("ports", [])}
    labels = pod_labels = api["spec"]["template"]["metadata"]["labels"]
    for service in find(docs, "Service"):
        selector = service["spec"]["selector"]
        if selector.get("app.kubernetes.io/name") != "seckill":
            continue
        if not all(pod_labels.get(k) == v for k, v in selector.items()):
            error(f"Service/{service['metadata']['name']}: its selector matches no API pod")
        for port in service["spec"]["ports"]:
            if port["targetPort"] not in port_names:
                error(f"Service/{service['metadata']['name']}: targetPort {port['targetPort']} is no port of the API pods")
    for policy in find(docs, "NetworkPolicy", "seckill"):
        rules = policy["spec"]["ingress"]
        metrics_rules = [r for r in rules if any(p["port"] == "metrics" for p in r.get("ports", []))]
        open_rules = [r for r in rules if "from" not in r]
        if any(p["port"] == "metrics" for r in open_rules for p in r.get("ports", [])) or not metrics_rules:
            error("NetworkPolicy/seckill: the metrics port must be reachable from the monitoring namespace only")
        if any(r.get("ports") is None or any(p["port"] == "http" for p in r["ports"]) for r in open_rules):
            error("NetworkPolicy/seckill: the buyer port is open to every pod: any of them could pick its "
                  "client address through X-Forwarded-For (SECKILL_TRUSTED_PROXIES is the pod network)")
        for rule in metrics_rules:
            for peer in rule.get("from", []):
                ns = peer.get("namespaceSelector", {}).get("matchLabels", {})
                if ns != {"kubernetes.io/metadata.name": "monitoring"}:
                    error(f"NetworkPolicy/seckill: metrics reachable from {peer}")
        for rule in rules:
            for port in rule.get("ports", []):
                if port["port"] not in port_names:
                    error(f"NetworkPolicy/seckill: port {port['port']} is no port of the API pods")
    for pdb in find(docs, "PodDisruptionBudget"):
        if not all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()):
            error(f"PodDisruptionBudget/{pdb['metadata']['name']}: selects no API pod")
    hpas = find(docs, "HorizontalPodAutoscaler")
    for hpa in hpas:
        if hpa["spec"]["scaleTargetRef"]["name"] not in deployments:
            error(f"HorizontalPodAutoscaler/{hpa['metadata']['name']}: scales no Deployment of these manifests")
    hpa_names = {hpa["metadata"]["name"] for hpa in hpas}
    for role in find(docs, "Role"):
        for rule in role["rules"]:
            for name in rule.get("resourceNames", []):
                if "horizontalpodautoscalers" in rule["resources"] and name not in hpa_names:
                    error(f"Role/{role['metadata']['name']}: patches HPA {name}, which does not exist")
    for cron in find(docs, "CronJob"):
        job = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for c in job["containers"]:
            args = c.get("args", [])
            if "hpa" in args and args[args.index("hpa") + 1] not in hpa_names:
                error(f"CronJob/{cron['metadata']['name']}: patches an HPA that does not exist")
            check_container(f"CronJob/{cron['metadata']['name']}", job, c, error)
    for kind in ("StatefulSet",):
        for set_ in find(docs, kind):
            spec = set_["spec"]["template"]["spec"]
            for c in spec["containers"]:
                check_container(f"{kind}/{set_['metadata']['name']}", spec, c, error)

    # KEDA watches the worker's stream and group.
    prefix = default_of(serve_help, "SECKILL_KEY_PREFIX")
    for scaled in find(docs, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            meta = trigger["metadata"]
            if meta.get("consumerGroup") != group:
                error(f"ScaledObject/{scaled['metadata']['name']}: consumerGroup {meta.get('consumerGroup')} is not the worker's {group}")
            if not re.fullmatch(re.escape(prefix) + r":\{sale:[A-Za-z0-9_-]+\}:orders", meta.get("stream", "")):
                error(f"ScaledObject/{scaled['metadata']['name']}: stream {meta.get('stream')} is not {prefix}:{{sale:<id>}}:orders")
        if scaled["spec"]["scaleTargetRef"]["name"] not in deployments:
            error(f"ScaledObject/{scaled['metadata']['name']}: scales no Deployment of these manifests")


def check_container(where, pod, container, error):
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})
    if not (pod_sc.get("runAsNonRoot") or sc.get("runAsNonRoot")):
        error(f"{where}: container {container['name']} may run as root")
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
        error(f"{where}: container {container['name']} must have a read-only root and no privilege escalation")
    if sc.get("capabilities", {}).get("drop") != ["ALL"]:
        error(f"{where}: container {container['name']} must drop every capability")
    resources = container.get("resources", {})
    if not resources.get("requests") or not resources.get("limits"):
        error(f"{where}: container {container['name']} needs resource requests and limits")


def breakages(docs):
    """Copies of the manifests, each broken in one way the checks must catch."""
    def broken(what, change):
        copy_ = copy.deepcopy(docs)
        for _, doc in copy_:
            if doc.get("kind") in ("Deployment", "ConfigMap", "NetworkPolicy") and doc["metadata"]["name"] in (
                "seckill", "seckill-settings"):
                change(doc)
        return what, copy_

    def container(doc):
        return doc["spec"]["template"]["spec"]["containers"][0] if doc["kind"] == "Deployment" else None

    def probe_path(doc):
        if doc["kind"] == "Deployment":
            container(doc)["readinessProbe"]["httpGet"]["path"] = "/ready"

    def setting_name(doc):
        if doc["kind"] == "ConfigMap":
            doc["data"]["SECKILL_LISTN"] = doc["data"].pop("SECKILL_LISTEN")

    def port(doc):
        if doc["kind"] == "Deployment":
            container(doc)["ports"][0]["containerPort"] = 8081

    def grace(doc):
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20

    def metrics_probe_port(doc):
        if doc["kind"] == "Deployment":
            container(doc)["readinessProbe"]["httpGet"]["port"] = "http"

    def liveness_on_public_port(doc):
        if doc["kind"] == "Deployment":
            container(doc)["livenessProbe"]["httpGet"]["port"] = "http"

    def grace_without_the_worker(doc):
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 40

    def buyer_port_open(doc):
        if doc["kind"] == "NetworkPolicy":
            for rule in doc["spec"]["ingress"]:
                if any(p["port"] == "http" for p in rule.get("ports", [])):
                    rule.pop("from", None)

    return [
        broken("the buyer port open to every pod", buyer_port_open),
        broken("a readiness probe on a path the binary has not", probe_path),
        broken("a setting name the binary does not know", setting_name),
        broken("a container port that is not SECKILL_LISTEN's", port),
        broken("a grace period shorter than the shutdown", grace),
        broken("/readyz asked on the buyer port while the metrics listener serves it", metrics_probe_port),
        broken("the liveness probe on the buyer port, inside its connection budget", liveness_on_public_port),
        broken("a grace period that leaves out the worker's last batch", grace_without_the_worker),
    ]


def main():
    binary = sys.argv[1]
    binary_help = {sub: help_settings(binary, sub) for sub in ("serve", "worker")}
    route_paths = routes()
    group = src_constant(r'CONSUMER_GROUP: &str = "([^"]+)"')
    docs = load()
    errors = []
    check(docs, binary_help, route_paths, group, errors)
    if "--self-test" in sys.argv and not errors:
        for what, broken in breakages(docs):
            found = []
            check(broken, binary_help, route_paths, group, found)
            if not found:
                errors.append(f"self-test: {what} went unnoticed")
    if errors:
        for error in dict.fromkeys(errors):
            print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"deploy/k8s: OK ({len(docs)} resources agree with `seckill serve/worker --help`, the routes and each other)")


if __name__ == "__main__":
    main()
