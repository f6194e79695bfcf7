#!/usr/bin/env python3
"""Checks what docker-compose.yml mounts and what its services must agree on.

Run by scripts/lint-compose.sh from the repository root, after `docker-compose config`:
- deploy/prometheus.yml scrapes the app's /metrics on its metrics listener (SECKILL_METRICS_LISTEN);
- Grafana (deploy/grafana): the image is pinned, the datasource is the compose Prometheus, the
  dashboard provider reads where compose mounts the dashboards, and every dashboard query uses
  only metrics the service exports (string literals in src/);
- the edge proxy: pinned, the only service clients reach, its fixed address is exactly what the
  app trusts (SECKILL_TRUSTED_PROXIES), and its nginx config replaces X-Forwarded-For; the app
  verifies buyers' tokens (SECKILL_AUTH=jwt), as the proxy authenticates nobody.
Prints one OK line per part, or every error found and exits non-zero.
"""

import ipaddress
import json
import os
import pathlib
import re
import sys

import yaml

errors = []
compose = yaml.safe_load(open("docker-compose.yml"))
services = compose.get("services", {})


def bind_mounts(service):
    """Container path and options of each bind mount of a service, by normalised host path."""
    mounts = {}
    for volume in service.get("volumes", []):
        parts = str(volume).split(":")
        if parts[0].startswith((".", "/")) and len(parts) >= 2:
            mounts[os.path.normpath(parts[0])] = (parts[1], parts[2:])
    return mounts


def check_prometheus():
    config = yaml.safe_load(open("deploy/prometheus.yml"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs.get("seckill")
    if job is None:
        return errors.append("deploy/prometheus.yml: no 'seckill' scrape job")
    targets = [t for s in job["static_configs"] for t in s["targets"]]
    listen = str(((services.get("app") or {}).get("environment") or {}).get("SECKILL_METRICS_LISTEN", ""))
    if not listen:
        return errors.append("docker-compose.yml: app has no SECKILL_METRICS_LISTEN: /metrics would be on the public port")
    expected = f"app:{listen.rsplit(':', 1)[-1]}"
    if job.get("metrics_path") != "/metrics" or targets != [expected]:
        errors.append(f"deploy/prometheus.yml: expected /metrics on {expected}, got {job.get('metrics_path')} {targets}")


def check_grafana():
    grafana = services.get("grafana")
    if grafana is None:
        return errors.append("docker-compose.yml: no 'grafana' service")
    image = str(grafana.get("image", ""))
    if not re.fullmatch(r"grafana/grafana:\d+(\.\d+)+(@sha256:[0-9a-f]{64})?", image):
        errors.append(f"docker-compose.yml: grafana image must be pinned to an exact version (grafana/grafana:X.Y.Z), got {image!r}")
    mounts = bind_mounts(grafana)
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

    source = "".join(p.read_text() for p in pathlib.Path("src").rglob("*.rs"))
    dashboards = sorted(f for f in os.listdir("deploy/grafana/dashboards") if f.endswith(".json"))
    if not dashboards:
        errors.append("deploy/grafana/dashboards: no dashboard")
    for name in dashboards:
        check_dashboard(f"deploy/grafana/dashboards/{name}", source)


def check_dashboard(path, source):
    try:
        dashboard = json.load(open(path))
    except ValueError as e:
        return errors.append(f"{path}: invalid JSON: {e}")
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
                if f'"{metric}"' not in source:
                    errors.append(f"{where}: {token} is not a metric the service exports (no \"{metric}\" in src/)")


def check_proxy():
    proxy, app = services.get("proxy"), services.get("app")
    if proxy is None or app is None:
        return errors.append("docker-compose.yml: no 'proxy' or no 'app' service")
    image = str(proxy.get("image", ""))
    if not re.fullmatch(r"nginx:\d+\.\d+\.\d+(-alpine)?(@sha256:[0-9a-f]{64})?", image):
        errors.append(f"docker-compose.yml: proxy image must be pinned to an exact version (nginx:X.Y.Z), got {image!r}")
    if app.get("ports"):
        errors.append("docker-compose.yml: app publishes ports; clients must reach it only through proxy")
    if str((app.get("environment") or {}).get("SECKILL_AUTH", "")) != "jwt":
        errors.append("docker-compose.yml: app must set SECKILL_AUTH=jwt: the proxy authenticates nobody, and with "
                      "`none` anyone could buy, read or cancel as anyone (the body's user_id)")
    if not proxy.get("ports"):
        errors.append("docker-compose.yml: proxy publishes no port")
    address = ((proxy.get("networks") or {}).get("default") or {}).get("ipv4_address")
    if address is None:
        return errors.append("docker-compose.yml: proxy has no fixed ipv4_address on the default network")
    trusted = str((app.get("environment") or {}).get("SECKILL_TRUSTED_PROXIES", ""))
    nets = [ipaddress.ip_network(n.strip(), strict=False) for n in trusted.split(",") if n.strip()]
    if nets != [ipaddress.ip_network(address)]:
        errors.append(f"docker-compose.yml: app's SECKILL_TRUSTED_PROXIES ({trusted!r}) must be exactly the proxy's address {address}")
    subnets = [c.get("subnet") for c in (((compose.get("networks") or {}).get("default") or {}).get("ipam") or {}).get("config", [])]
    if not any(ipaddress.ip_address(address) in ipaddress.ip_network(s) for s in subnets if s):
        errors.append(f"docker-compose.yml: the proxy's address {address} is not in the default network's subnet {subnets}")
    mounts = bind_mounts(proxy)
    conf = next((host for host, (container, _) in mounts.items() if container.startswith("/etc/nginx/")), None)
    if conf is None:
        return errors.append("docker-compose.yml: proxy mounts no nginx config from the repository")
    text = open(conf).read()
    if not re.search(r"proxy_set_header\s+X-Forwarded-For\s+\$remote_addr\s*;", text):
        errors.append(f"{conf}: must set X-Forwarded-For to $remote_addr (replace, never append a client's chain)")
    if "proxy_add_x_forwarded_for" in text:
        errors.append(f"{conf}: $proxy_add_x_forwarded_for keeps the client's own X-Forwarded-For")
    check_public_server(conf, text, proxy)


def check_public_server(conf, text, proxy):
    """The server block that listens on the published public port answers /admin, /metrics and
    /readyz itself and forwards nothing else of the operator's; any other port is loopback-only."""
    servers = re.findall(r"^server\s*\{(.*?)^\}", text, re.S | re.M)
    public_ports = [str(p).split(":")[-1] for p in proxy.get("ports", []) if str(p).count(":") == 1]
    for block in servers:
        ports = re.findall(r"^\s*listen\s+(?:\[::\]:)?(\d+)", block, re.M)
        if not set(ports) & set(public_ports):
            continue
        for path, pattern in [("/admin", r"location\s+\^~\s+/admin\s*\{[^}]*return\s+404"),
                              ("/metrics", r"location\s+=\s+/metrics\s*\{[^}]*return\s+404"),
                              ("/readyz", r"location\s+=\s+/readyz\s*\{[^}]*return\s+404")]:
            if not re.search(pattern, block):
                errors.append(f"{conf}: the public server (port {', '.join(ports)}) must answer {path} with 404, not forward it")
    for published in proxy.get("ports", []):
        parts = str(published).split(":")
        if len(parts) == 3 and parts[0] not in ("127.0.0.1", "[::1]"):
            errors.append(f"docker-compose.yml: proxy port {published} is not loopback-only")


for part, check in [("deploy/prometheus.yml", check_prometheus), ("deploy/grafana", check_grafana), ("edge proxy", check_proxy)]:
    before = len(errors)
    check()
    print(f"{part}: {'OK' if len(errors) == before else 'FAILED'}")
if errors:
    sys.exit("\n".join(errors))
