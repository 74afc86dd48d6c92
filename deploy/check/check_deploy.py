"""Offline checks of deploy/ and k8s/ (run by scripts/check-deploy inside its venv).

1. Every YAML document under k8s/ (as written, and each kustomization rendered) parses and
   is valid against the Kubernetes JSON schemas (kubernetes-validate, strict).
2. deploy/compose.yml parses and describes Redis with AOF, three roomd nodes with distinct
   ids and a shared secret, and a load balancer.
3. One source of truth with the code: deploy/roomd.example.toml has every setting of
   gateway/src/config.rs with its default; every ROOMD__ variable used in deploy/ or k8s/
   names one of its keys; ports, probe paths, the drain budget and the release build agree
   between gateway/, the Dockerfile, compose and the manifests.
4. Each node's own address (ROOMD__NODE__PUBLIC_URL, a room's `nodeUrl`): in compose, each
   node's URL is published by nginx and leads to that node alone; in every rendered
   kustomization that sets it (each overlay of k8s/overlays must), it is built from the
   pod's name, and for every pod the autoscaler may start (roomd-0 .. roomd-(maxReplicas-1))
   the ingress routes that URL's `/ws` (and any other path under that URL) to a Service
   that selects that pod alone, on its http port, with TLS for https.

Usage: check_deploy.py REPO_ROOT K8S_VERSION [RENDERED.yaml ...]
Prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import operator
import re
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import yaml

problems: list[str] = []


def problem(msg: str) -> None:
    problems.append(msg)
    print(f"  FAIL {msg}")


def ok(msg: str) -> None:
    print(f"  ok   {msg}")


# ---------------------------------------------------------------- settings (config.rs)

_OPS = {ast.Mult: operator.mul, ast.Add: operator.add, ast.Sub: operator.sub}


def _int_expr(text: str) -> int:
    """Evaluates the integer arithmetic of a Rust literal such as `64 * 1024`."""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(text)

    return ev(ast.parse(text.replace("_", ""), mode="eval").body)


def code_settings(root: Path) -> tuple[dict[str, object], set[str]]:
    """(defaults by "section.key", every "section.key") from gateway/src/config.rs."""
    src = (root / "gateway/src/config.rs").read_text()
    defaults: dict[str, object] = {}
    for key, raw in re.findall(r'set_default\("([a-z_]+\.[a-z_]+)",\s*(.+?)\)\?', src):
        raw = raw.strip()
        if raw.startswith('"'):
            value: object = raw.strip('"')
        elif raw in ("true", "false"):
            value = raw == "true"
        else:
            const = re.fullmatch(r"[A-Z_]+", raw)
            if const:
                m = re.search(rf'const {raw}: &str = "([^"]*)"', src)
                value = m.group(1) if m else raw
            else:
                value = _int_expr(raw)
        defaults[key] = value
    m = re.search(r'fn default_prefix\(\) -> String \{\s*"([^"]*)"', src)
    if m:
        defaults["redis.prefix"] = m.group(1)
    # Settings { pub http: Http, ... } maps sections to structs; structs list their keys.
    settings = re.search(r"pub struct Settings \{(.*?)\n\}", src, re.S)
    sections = dict(re.findall(r"pub (\w+): (\w+),", settings.group(1))) if settings else {}
    keys: set[str] = set()
    for section, struct in sections.items():
        body = re.search(rf"pub struct {struct} \{{(.*?)\n\}}", src, re.S)
        if body:
            keys |= {f"{section}.{k}" for k in re.findall(r"pub (\w+):", body.group(1))}
    return defaults, keys


def example_settings(root: Path) -> tuple[dict[str, object], set[str]]:
    """(values, every key including commented-out `# key = ...` ones) of the example."""
    path = root / "deploy/roomd.example.toml"
    text = path.read_text()
    data = tomllib.loads(text)
    values = {f"{s}.{k}": v for s, table in data.items() for k, v in table.items()}
    keys = set(values)
    section = None
    for line in text.splitlines():
        m = re.fullmatch(r"\[(\w+)\]", line.strip())
        if m:
            section = m.group(1)
            continue
        m = re.fullmatch(r"#\s*([a-z_]+)\s*=.*", line.strip())
        if m and section:
            keys.add(f"{section}.{m.group(1)}")
    return values, keys


def check_settings(root: Path) -> set[str]:
    print("settings: deploy/roomd.example.toml against gateway/src/config.rs")
    before = len(problems)
    defaults, code_keys = code_settings(root)
    values, example_keys = example_settings(root)
    if not code_keys or not defaults:
        problem("could not read the settings out of gateway/src/config.rs")
    for key in sorted(code_keys - example_keys):
        problem(f"roomd.example.toml lacks the setting {key}")
    for key in sorted(example_keys - code_keys):
        problem(f"roomd.example.toml has {key}, which gateway/src/config.rs does not know")
    for key, default in sorted(defaults.items()):
        if key in values and values[key] != default:
            problem(f"roomd.example.toml: {key} = {values[key]!r}, but the default is {default!r}")
        if key not in values:
            problem(f"roomd.example.toml: {key} has a default ({default!r}) but is not set")
    for key in sorted(example_keys - set(values)):
        if key in defaults:
            problem(f"roomd.example.toml comments out {key}, which has a default")
    if len(problems) == before:
        ok(f"{len(code_keys)} settings, {len(defaults)} defaults match")
    return example_keys


def env_key(name: str) -> str | None:
    m = re.fullmatch(r"ROOMD__([A-Z0-9]+)__([A-Z0-9_]+)", name)
    return f"{m.group(1).lower()}.{m.group(2).lower()}" if m else None


def check_env_names(names: dict[str, set[str]], example_keys: set[str]) -> None:
    print("ROOMD__ variables used in deploy/ and k8s/ name real settings")
    count = 0
    for where, found in sorted(names.items()):
        for name in sorted(found):
            count += 1
            key = env_key(name)
            if key is None or key not in example_keys:
                problem(f"{where}: {name} is not a setting (no {key or name} in deploy/roomd.example.toml)")
    ok(f"{count} uses checked")


# ---------------------------------------------------------------- Kubernetes

def load_docs(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        problem(f"{path}: does not parse: {e}")
        return []
    for d in docs:
        if not isinstance(d, dict):
            problem(f"{path}: a document is not a mapping")
    return [d for d in docs if isinstance(d, dict)]


def validate_k8s(docs: list[tuple[str, dict]], version: str) -> None:
    import kubernetes_validate

    for where, doc in docs:
        kind = doc.get("kind", "?")
        name = (doc.get("metadata") or {}).get("name", "?")
        if str(doc.get("apiVersion", "")).startswith("kustomize.config.k8s.io/"):
            continue
        # Prometheus Operator objects (k8s/components/monitoring) have no Kubernetes schema;
        # scripts/check-observability checks their rules with promtool.
        if str(doc.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            problem(f"{where}: {kind}/{name}: {e.message} (at {path or 'top'})")
        except kubernetes_validate.utils.SchemaNotFoundError as e:
            problem(f"{where}: {kind}/{name}: no schema ({e})")
        except Exception as e:  # noqa: BLE001 - report any validator failure as a problem
            problem(f"{where}: {kind}/{name}: {type(e).__name__}: {e}")


def find(docs: list[dict], kind: str, name: str) -> dict | None:
    for d in docs:
        if d.get("kind") == kind and (d.get("metadata") or {}).get("name") == name:
            return d
    return None


def k8s_env_names(docs: list[dict]) -> set[str]:
    names: set[str] = set()
    for d in docs:
        if d.get("kind") == "ConfigMap":
            names |= {k for k in (d.get("data") or {}) if k.startswith("ROOMD")}
        spec = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            names |= {e["name"] for e in c.get("env", []) if str(e.get("name", "")).startswith("ROOMD")}
    return names


def routes(root: Path) -> set[str]:
    src = (root / "gateway/src/api.rs").read_text() + (root / "gateway/src/server.rs").read_text()
    return set(re.findall(r'\.route\("(/[a-z]*)"', src))


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def selects_roomd(svc: dict, template_labels: dict) -> bool:
    """Whether a Service's selector picks roomd pods (all of them, or one by its name)."""
    sel = dict((svc.get("spec") or {}).get("selector") or {})
    pod = sel.pop(POD_NAME_LABEL, None)
    if pod is not None and not re.fullmatch(r"roomd-\d+", str(pod)):
        return False
    return bool(sel or pod) and all(template_labels.get(k) == v for k, v in sel.items())


def check_workload(where: str, docs: list[dict], sts: dict) -> None:
    """The StatefulSet, its autoscaler, its disruption budget and its governing Service
    fit together and keep drains one at a time."""
    spec = sts["spec"]
    labels = spec["template"]["metadata"].get("labels") or {}
    if "replicas" in spec:
        problem(f"{where}: StatefulSet/roomd sets replicas: every apply would reset what the autoscaler chose")
    if spec.get("podManagementPolicy") != "Parallel":
        problem(f"{where}: StatefulSet/roomd needs podManagementPolicy Parallel (identical nodes: one pod that "
                "is not ready must not hold up scaling)")
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        problem(f"{where}: StatefulSet/roomd must roll its pods (updateStrategy RollingUpdate)")
    if (strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1) not in (1, "1"):
        problem(f"{where}: StatefulSet/roomd must replace one pod at a time (no rollingUpdate.maxUnavailable > 1)")
    governing = find(docs, "Service", str(spec.get("serviceName")))
    if governing is None or (governing.get("spec") or {}).get("clusterIP") != "None" \
            or not selects_roomd(governing, labels):
        problem(f"{where}: StatefulSet/roomd serviceName {spec.get('serviceName')!r} is not a headless "
                "Service of its pods")
    hpa = next((d for d in docs if d.get("kind") == "HorizontalPodAutoscaler"
                and ((d.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == "roomd"), None)
    ref = ((hpa or {}).get("spec") or {}).get("scaleTargetRef") or {}
    if hpa is None or ref.get("kind") != "StatefulSet" or ref.get("apiVersion") != "apps/v1":
        problem(f"{where}: no HorizontalPodAutoscaler scales apps/v1 StatefulSet roomd")
    elif int(hpa["spec"].get("minReplicas", 1)) < 3:
        problem(f"{where}: HorizontalPodAutoscaler roomd: minReplicas below 3 (a draining pod's rooms need "
                "two live nodes to move to)")
    pdbs = [d for d in docs if d.get("kind") == "PodDisruptionBudget"
            and (((d.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}).items() <= labels.items()
            and (((d.get("spec") or {}).get("selector") or {}).get("matchLabels"))]
    if not pdbs or any(str((d.get("spec") or {}).get("maxUnavailable")) != "1" for d in pdbs):
        problem(f"{where}: no PodDisruptionBudget with maxUnavailable 1 selects roomd's pods")


def max_pods(docs: list[dict], sts: dict) -> int:
    """How many pods the StatefulSet may have: the autoscaler's maxReplicas, or its replicas."""
    for d in docs:
        spec = d.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        if d.get("kind") == "HorizontalPodAutoscaler" and ref.get("kind") == "StatefulSet" \
                and ref.get("name") == sts["metadata"]["name"]:
            return int(spec["maxReplicas"])
    return int(sts["spec"].get("replicas", 1))


def _host_matches(pattern: str, host: str) -> bool:
    """Ingress host matching: exact, or `*.domain` for one more label."""
    if pattern.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host


def _path_matches(entry: dict, path: str) -> int:
    """How well an Ingress path matches a request path: -1 not at all, else its length
    (Exact beats every Prefix)."""
    want = str(entry.get("path") or "/")
    if entry.get("pathType") == "Exact":
        return 1 << 20 if path == want else -1
    want = want.rstrip("/")
    return len(want) if not want or path == want or path.startswith(want + "/") else -1


def check_node_addresses(where: str, docs: list[dict]) -> bool:
    """Each pod's ROOMD__NODE__PUBLIC_URL comes from its name, and that address (its host,
    path `/ws`) reaches that pod alone through the ingress. True when the rendering gives
    pods addresses at all."""
    before = len(problems)
    sts = find(docs, "StatefulSet", "roomd")
    if sts is None:
        return False
    for cm in (d for d in docs if d.get("kind") == "ConfigMap"):
        if "ROOMD__NODE__PUBLIC_URL" in (cm.get("data") or {}):
            problem(f"{where}: ConfigMap {cm['metadata']['name']} sets ROOMD__NODE__PUBLIC_URL: one value for "
                    "every pod, and Kubernetes never expands $(POD_NAME) there; set it in the container's env")
    ctr = next((c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "roomd"), {})
    env = ctr.get("env") or []
    index = {e.get("name"): i for i, e in enumerate(env)}
    labels = sts["spec"]["template"]["metadata"].get("labels") or {}
    per_pod = [d for d in docs if d.get("kind") == "Service"
               and POD_NAME_LABEL in ((d.get("spec") or {}).get("selector") or {})]
    if "ROOMD__NODE__PUBLIC_URL" not in index:
        if per_pod:
            problem(f"{where}: per-pod Services ({per_pod[0]['metadata']['name']}, ...) but no "
                    "ROOMD__NODE__PUBLIC_URL: no room names its owner's address")
        return False
    at = index["ROOMD__NODE__PUBLIC_URL"]
    entry = env[at]
    template = entry.get("value")
    if not template or entry.get("valueFrom"):
        problem(f"{where}: ROOMD__NODE__PUBLIC_URL must be a value built from the pod's name, e.g. "
                "https://$(POD_NAME).rooms.example.com")
        return True
    # $(VAR) is expanded by Kubernetes from variables defined before it; one of them must
    # be the pod's name (downward API), or every pod would name the same address.
    pod_vars = []
    for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", template):
        i = index.get(var)
        if i is None or i > at:
            problem(f"{where}: ROOMD__NODE__PUBLIC_URL uses $({var}), which is not defined before it in the "
                    "container's env: Kubernetes would leave it as written")
            continue
        field = ((env[i].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.name":
            pod_vars.append(var)
    if not pod_vars:
        problem(f"{where}: ROOMD__NODE__PUBLIC_URL {template!r} is not built from the pod's name "
                "($(VAR) of a variable with fieldRef metadata.name)")
        return True
    ingresses = [d for d in docs if d.get("kind") == "Ingress"]
    services = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Service"}
    http = next((p for p in ctr.get("ports", []) if p.get("name") == "http"), {})
    count = max_pods(docs, sts)
    seen: dict[tuple[str, str], str] = {}
    default_backends: set[str] = set()
    for ordinal in range(count):
        pod = f"{sts['metadata']['name']}-{ordinal}"
        url = template
        for var in pod_vars:
            url = url.replace(f"$({var})", pod)
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or u.username \
                or u.password:
            problem(f"{where}: {pod}: ROOMD__NODE__PUBLIC_URL {url!r} is not an http(s) base URL without "
                    "query, fragment or credentials (roomd refuses to start)")
            continue
        host, ws = u.hostname, u.path.rstrip("/") + "/ws"
        if (host, ws) in seen:
            problem(f"{where}: {pod} and {seen[(host, ws)]} have the same address {url}")
            continue
        seen[(host, ws)] = pod
        # The rules that serve this host: exact hosts before wildcards before no host.
        rules = []
        for rank in (0, 1, 2):
            for ing in ingresses:
                for rule in (ing.get("spec") or {}).get("rules", []):
                    h = rule.get("host")
                    if (rank == 0 and h == host) or (rank == 1 and h and h != host and _host_matches(h, host)) \
                            or (rank == 2 and not h):
                        rules.append((ing, rule))
            if rules:
                break
        if not rules:
            problem(f"{where}: {pod}: no Ingress rule serves {host} (its ROOMD__NODE__PUBLIC_URL)")
            continue
        best, best_score = None, -1
        for ing, rule in rules:
            ing_name = ing["metadata"]["name"]
            if (ing.get("spec") or {}).get("defaultBackend") and ing_name not in default_backends:
                default_backends.add(ing_name)
                problem(f"{where}: Ingress {ing_name} has a defaultBackend: a pod's host could lead elsewhere")
            for route in ((rule.get("http") or {}).get("paths") or []):
                score = _path_matches(route, ws)
                if score > best_score:
                    best, best_score = (ing, route), score
                # Whatever the path under this pod's address (its host, and its URL's path
                # when it has one), it leads to this pod or nowhere.
                prefix, path = u.path.rstrip("/"), str(route.get("path") or "/")
                if prefix and path != prefix and not path.startswith(prefix + "/"):
                    continue
                at_path = f"{host}{path}"
                backend = (route.get("backend") or {}).get("service") or {}
                svc = services.get(str(backend.get("name")))
                if svc is None:
                    problem(f"{where}: {at_path} leads to Service {backend.get('name')}, which does not exist")
                    continue
                spec = svc.get("spec") or {}
                selector = spec.get("selector") or {}
                if selector.get(POD_NAME_LABEL) != pod or spec.get("type", "ClusterIP") == "ExternalName" \
                        or not all(labels.get(k) == v for k, v in selector.items() if k != POD_NAME_LABEL):
                    problem(f"{where}: {at_path} leads to Service {backend.get('name')}, which does not select "
                            f"{pod} alone ({POD_NAME_LABEL}: {pod} and roomd's pod labels)")
                    continue
                if spec.get("publishNotReadyAddresses"):
                    problem(f"{where}: Service {backend.get('name')} publishes {pod} while it is not ready "
                            "(starting, draining)")
                want = backend.get("port") or {}
                port = next((p for p in spec.get("ports", [])
                             if ("name" in want and p.get("name") == want["name"])
                             or ("number" in want and p.get("port") == want["number"])), None)
                if port is None or port.get("targetPort", port.get("port")) not in ("http", http.get("containerPort")):
                    problem(f"{where}: {at_path} reaches Service {backend.get('name')} on a port that is not the "
                            "pod's http port")
        if best is None:
            problem(f"{where}: {pod}: no path of {host} serves {ws}")
            continue
        ing = best[0]
        if u.scheme == "https" and not any(
                t.get("secretName") and any(_host_matches(h, host) for h in t.get("hosts") or [])
                for t in (ing.get("spec") or {}).get("tls") or []):
            problem(f"{where}: {pod}: {url} is https but Ingress {ing['metadata']['name']} has no TLS "
                    f"certificate for {host}")
    if count and len(problems) == before:
        first = template.replace(f"$({pod_vars[0]})", "roomd-N")
        ok(f"{where}: roomd-0 .. roomd-{count - 1} each at {first} (/ws to that pod alone)")
    return True


def check_rendered(where: str, docs: list[dict], root: Path, drain_default: int) -> None:
    """The rendered roomd objects agree with the code."""
    dep = find(docs, "StatefulSet", "roomd")
    cm = find(docs, "ConfigMap", "roomd-config")
    if dep is None or cm is None:
        problem(f"{where}: no StatefulSet/roomd or ConfigMap/roomd-config")
        return
    data = cm.get("data") or {}
    pod = dep["spec"]["template"]["spec"]
    ctr = next((c for c in pod["containers"] if c["name"] == "roomd"), None)
    if ctr is None:
        problem(f"{where}: StatefulSet/roomd has no container 'roomd'")
        return
    check_workload(where, docs, dep)
    port = int(data.get("ROOMD__HTTP__PORT", 8080))
    http = [p for p in ctr.get("ports", []) if p.get("name") == "http"]
    if not http or http[0]["containerPort"] != port:
        problem(f"{where}: containerPort 'http' is not ROOMD__HTTP__PORT ({port})")
    if data.get("ROOMD__HTTP__BIND") != "0.0.0.0":
        problem(f"{where}: ROOMD__HTTP__BIND must be 0.0.0.0 in a pod")
    env_names = {e.get("name") for e in ctr.get("env", [])}
    one = bool(data.get("ROOMD__REDIS__URL")) or "ROOMD__REDIS__URL" in env_names
    cluster = bool(data.get("ROOMD__REDIS__CLUSTER_URLS")) or "ROOMD__REDIS__CLUSTER_URLS" in env_names
    if not (one or cluster):
        problem(f"{where}: neither ROOMD__REDIS__URL nor ROOMD__REDIS__CLUSTER_URLS is set: pods would be "
                "unconnected single nodes")
    if one and cluster:
        problem(f"{where}: both ROOMD__REDIS__URL and ROOMD__REDIS__CLUSTER_URLS are set: roomd refuses to start")
    known = routes(root)
    for probe, want in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        got = ((ctr.get(probe) or {}).get("httpGet") or {})
        if got.get("path") != want or want not in known:
            problem(f"{where}: {probe} must GET {want} (a route of gateway/src/api.rs)")
        if got.get("port") not in ("http", port):
            problem(f"{where}: {probe} port {got.get('port')} is not the http port")
    # /metrics on a port of its own (ROOMD__METRICS__PORT), never carried by the public
    # Service; scraped there by the pod annotations and any ServiceMonitor.
    metrics_port = data.get("ROOMD__METRICS__PORT")
    scrape_port, scrape_name = (int(metrics_port), "metrics") if metrics_port else (port, "http")
    if metrics_port:
        named = [p for p in ctr.get("ports", []) if p.get("name") == "metrics"]
        if not named or named[0]["containerPort"] != scrape_port:
            problem(f"{where}: containerPort 'metrics' is not ROOMD__METRICS__PORT ({scrape_port})")
    # Only the metrics Service (component: metrics) carries the metrics port; no Service
    # carries the peer port (links go pod to pod). The public Service roomd and the per-pod
    # Services carry the player port alone.
    listen = re.search(r":(\d+)$", str(data.get("ROOMD__CLUSTER__PEER_LISTEN", "")))
    peer_port = int(listen.group(1)) if listen else None
    labels = dep["spec"]["template"]["metadata"].get("labels") or {}
    for svc in (d for d in docs if d.get("kind") == "Service"):
        if not selects_roomd(svc, labels):
            continue
        name = svc["metadata"]["name"]
        is_metrics = ((svc["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "metrics")
        for p in (svc.get("spec") or {}).get("ports", []):
            to = (p.get("targetPort"), p.get("port"))
            if metrics_port and not is_metrics and ("metrics" in to or scrape_port in to):
                problem(f"{where}: Service {name} carries the metrics port")
            if "peer" in to or (peer_port and peer_port in to):
                problem(f"{where}: Service {name} carries the peer-link port (links go pod to pod)")
    ann = dep["spec"]["template"]["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/path") != "/metrics" or "/metrics" not in known:
        problem(f"{where}: pod annotation prometheus.io/path must be /metrics")
    if str(ann.get("prometheus.io/port")) != str(scrape_port):
        problem(f"{where}: pod annotation prometheus.io/port must be {scrape_port}")
    for monitor in (d for d in docs if d.get("kind") == "ServiceMonitor"):
        wanted = ((monitor.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        services = [d for d in docs if d.get("kind") == "Service"
                    and wanted.items() <= ((d.get("metadata") or {}).get("labels") or {}).items()]
        for endpoint in (monitor.get("spec") or {}).get("endpoints", []):
            if endpoint.get("port") != scrape_name or endpoint.get("path") != "/metrics":
                problem(f"{where}: ServiceMonitor {monitor['metadata']['name']} must scrape port "
                        f"'{scrape_name}', path /metrics")
            if not any(p.get("name") == endpoint.get("port")
                       for svc in services for p in (svc.get("spec") or {}).get("ports", [])):
                problem(f"{where}: no Service selected by ServiceMonitor {monitor['metadata']['name']} has a port "
                        f"named {endpoint.get('port')!r}")
    env = {e["name"]: e for e in ctr.get("env", [])}
    node = ((env.get("ROOMD__NODE__ID") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if node.get("fieldPath") != "metadata.name":
        problem(f"{where}: ROOMD__NODE__ID must come from the pod name (fieldRef metadata.name)")
    secret = ((env.get("ROOMD__AUTH__SECRET") or {}).get("valueFrom") or {}).get("secretKeyRef")
    if not secret or "ROOMD__AUTH__SECRET" in data:
        problem(f"{where}: ROOMD__AUTH__SECRET must come from a Secret (secretKeyRef), not a ConfigMap")
    for d in docs:
        if d.get("kind") == "Secret":
            problem(f"{where}: renders a Secret ({d['metadata']['name']}): secrets are created with kubectl, not applied")
    # Drain budget: preStop pause + drain grace + actix shutdown (5 s) must fit the grace.
    drain = int(data.get("ROOMD__CLUSTER__DRAIN_GRACE_S", drain_default))
    cmd = (((ctr.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    pause = int(cmd[cmd.index("--sleep") + 1]) if "--sleep" in cmd else 0
    grace = int(pod.get("terminationGracePeriodSeconds", 30))
    if grace < pause + drain + 5 + 5:
        problem(f"{where}: terminationGracePeriodSeconds {grace} < preStop {pause} + drain {drain} + shutdown 5 + margin 5")
    if cmd and cmd[0] != "/usr/local/bin/roomd-probe":
        problem(f"{where}: preStop runs {cmd[0]}, which the image does not have")
    sc = ctr.get("securityContext") or {}
    psc = pod.get("securityContext") or {}
    if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and (sc.get("capabilities") or {}).get("drop") == ["ALL"]
            and (psc.get("runAsNonRoot") or sc.get("runAsNonRoot"))
            and (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault"):
        problem(f"{where}: roomd's securityContext lost one of: read-only root, no privilege "
                "escalation, drop ALL, runAsNonRoot, seccomp RuntimeDefault")
    for kind in ("Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet"):
        if not any(d.get("kind") == kind for d in docs):
            problem(f"{where}: no {kind}")
    sts = find(docs, "StatefulSet", "redis")
    rcm = find(docs, "ConfigMap", "redis-config")
    if sts is not None and (rcm is None or "appendonly yes" not in (rcm.get("data") or {}).get("redis.conf", "")):
        problem(f"{where}: Redis runs without AOF (appendonly yes)")


# ---------------------------------------------------------------- compose & Dockerfile

def check_compose(root: Path, drain_default: int) -> set[str]:
    print("deploy/compose.yml")
    before = len(problems)
    path = root / "deploy/compose.yml"
    try:
        compose = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        problem(f"{path}: does not parse: {e}")
        return set()
    services = compose.get("services") or {}
    names: set[str] = set()
    env_file = dict(
        line.split("=", 1)
        for line in (root / "deploy/roomd.env").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    names |= set(env_file)
    redis = services.get("redis") or {}
    cmd = " ".join(str(c) for c in redis.get("command") or [])
    if "--appendonly yes" not in cmd or not re.search(r"--appendfsync (everysec|always)", cmd):
        problem("compose: redis must run with --appendonly yes and --appendfsync everysec|always")
    nodes = {k: v for k, v in services.items() if k.startswith("roomd")}
    ids = set()
    for name, svc in nodes.items():
        env = dict(env_file)
        env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
        names |= set(svc.get("environment") or {})
        ids.add(env.get("ROOMD__NODE__ID"))
        if "roomd.env" not in (svc.get("env_file") or []):
            problem(f"compose: {name} does not read roomd.env")
        if env.get("ROOMD__HTTP__BIND") != "0.0.0.0":
            problem(f"compose: {name} does not bind 0.0.0.0")
        if not env.get("ROOMD__REDIS__URL", "").startswith("redis://redis:"):
            problem(f"compose: {name} does not use the compose Redis")
        secret = env.get("ROOMD__AUTH__SECRET", "")
        if not secret or secret == "roomd-dev-secret-change-me":
            problem(f"compose: {name} has no auth secret of its own (roomd refuses the default)")
        grace = str(svc.get("stop_grace_period", "10s"))
        secs = int(grace.rstrip("s")) if re.fullmatch(r"\d+s", grace) else 0
        drain = int(env.get("ROOMD__CLUSTER__DRAIN_GRACE_S", drain_default))
        if secs < drain + 5:
            problem(f"compose: {name} stop_grace_period {grace} < drain {drain} s + 5 s shutdown")
    if len(nodes) != 3 or len(ids) != 3 or None in ids:
        problem(f"compose: want 3 roomd nodes with distinct ROOMD__NODE__ID, got {sorted(map(str, ids))}")
    lb = services.get("lb") or {}
    conf = (root / "deploy/nginx.conf").read_text()
    port = env_file.get("ROOMD__HTTP__PORT", "8080")
    for name in nodes:
        if f"server {name}:{port}" not in conf:
            problem(f"nginx.conf: upstream lacks {name}:{port}")
    if "proxy_set_header Upgrade $http_upgrade" not in conf:
        problem("nginx.conf: no WebSocket upgrade")
    # Each node's public URL (its rooms' `nodeUrl`) is published by the lb and leads to
    # that node alone.
    servers = re.findall(r"server \{(.*?)\n  \}", conf, re.S)
    published = {str(p).split(":")[0] for p in lb.get("ports") or []}
    for name, svc in nodes.items():
        env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
        url = env.get("ROOMD__NODE__PUBLIC_URL", "")
        m = re.fullmatch(r"https?://[^/:]+:(\d+)", url)
        if not m:
            problem(f"compose: {name} has no ROOMD__NODE__PUBLIC_URL http://host:port of its own ({url!r})")
            continue
        public = m.group(1)
        if public not in published:
            problem(f"compose: lb does not publish {name}'s public port {public}")
        to = [b for b in servers if re.search(rf"listen {public};", b)]
        if len(to) != 1 or f"proxy_pass http://{name}:{port};" not in to[0]:
            problem(f"nginx.conf: port {public} ({name}'s ROOMD__NODE__PUBLIC_URL) does not lead to {name}:{port} alone")
        elif "proxy_set_header Upgrade $http_upgrade" not in to[0]:
            problem(f"nginx.conf: port {public} does not upgrade WebSockets")
    if not any("nginx.conf" in str(v) for v in lb.get("volumes") or []):
        problem("compose: lb does not mount deploy/nginx.conf")
    if len(problems) == before:
        ok(f"{len(services)} services, node ids {sorted(ids)}")
    return names


def check_dockerfile(root: Path) -> set[str]:
    print("deploy/Dockerfile")
    before = len(problems)
    text = (root / "deploy/Dockerfile").read_text()
    cargo = (root / "gateway/Cargo.toml").read_text()
    if not re.search(r'\[\[bin\]\]\s*name = "roomd"', cargo):
        problem("gateway/Cargo.toml no longer builds a binary named roomd")
    if "cargo build --release --locked -p gateway --bin roomd" not in text:
        problem("Dockerfile: roomd must be built with `cargo build --release --locked -p gateway --bin roomd`")
    if "target/release/roomd" not in text or 'ENTRYPOINT ["/usr/local/bin/roomd"]' not in text:
        problem("Dockerfile: the image must run the release roomd binary")
    env = dict(re.findall(r"(ROOMD__[A-Z_]+)=(\S+)", text))
    if env.get("ROOMD__HTTP__BIND") != "0.0.0.0" or env.get("ROOMD__LOG__FORMAT") != "json":
        problem("Dockerfile: ENV must bind 0.0.0.0 and log json")
    port = env.get("ROOMD__HTTP__PORT", "8080")
    if not re.search(rf"^EXPOSE {port}$", text, re.M):
        problem(f"Dockerfile: EXPOSE {port} missing (ROOMD__HTTP__PORT)")
    if "/healthz" not in text or "/healthz" not in routes(root):
        problem("Dockerfile: HEALTHCHECK must probe /healthz")
    if not re.search(r"^USER \d+", text, re.M):
        problem("Dockerfile: USER must be numeric and non-root")
    if len(problems) == before:
        ok("release build of roomd, port, health check, user")
    return set(env)


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    version = sys.argv[2]
    rendered = [Path(p) for p in sys.argv[3:]]
    defaults, _ = code_settings(root)
    drain_default = int(defaults.get("cluster.drain_grace_s", 20))  # type: ignore[arg-type]

    example_keys = check_settings(root)
    names: dict[str, set[str]] = {}
    names["deploy/compose.yml + roomd.env"] = check_compose(root, drain_default)
    names["deploy/Dockerfile"] = check_dockerfile(root)

    print(f"k8s/: every YAML document against the Kubernetes {version} schemas (strict)")
    before = len(problems)
    raw: list[tuple[str, dict]] = []
    for path in sorted((root / "k8s").rglob("*.y*ml")):
        for doc in load_docs(path):
            raw.append((str(path.relative_to(root)), doc))
    validate_k8s(raw, version)
    names["k8s/ (as written)"] = k8s_env_names([d for _, d in raw])
    rendered_docs: dict[str, list[dict]] = {}
    for path in rendered:
        docs = load_docs(path)
        if not docs:
            problem(f"{path}: rendered nothing")
        validate_k8s([(path.name, d) for d in docs], version)
        # The monitoring component is checked with every rendering (an overlay adds it).
        monitors = [d for _, d in raw if d.get("kind") == "ServiceMonitor"]
        check_rendered(path.name, docs + [m for m in monitors if m not in docs], root, drain_default)
        names[path.name] = k8s_env_names(docs)
        rendered_docs[path.name] = docs
    if len(problems) == before:
        ok(f"{len(raw)} documents as written, {len(rendered)} rendered kustomizations")

    print("k8s/: each pod's own address (ROOMD__NODE__PUBLIC_URL from the pod's name, routed to that pod alone)")
    for name, docs in rendered_docs.items():
        addressed = check_node_addresses(name, docs)
        # The overlays this repository ships give each pod an address
        # (k8s/components/node-addresses); the base alone is the any-node setup.
        if not addressed and name.startswith("k8s-overlays-"):
            problem(f"{name}: pods have no address of their own (add k8s/components/node-addresses)")
        elif not addressed:
            ok(f"{name}: no ROOMD__NODE__PUBLIC_URL: any node serves every room, rooms carry no nodeUrl")

    check_env_names(names, example_keys)
    if problems:
        print(f"check_deploy: {len(problems)} problem(s)")
        return 1
    print("check_deploy: all good")
    return 0


if __name__ == "__main__":
    sys.exit(main())
