"""deploy/: every manifest renders, validates and agrees with the code.

Offline and real: ``kubectl kustomize`` renders each kustomization; every
rendered object is validated against the Kubernetes OpenAPI schemas
(``kubernetes-validate``, strict: unknown fields fail) or, for KEDA's custom
resources, against the CRD's openAPIV3Schema made strict the same way (the API
server would silently prune an unknown field; here it fails). The
ScaledObject's trigger metadata goes through the scaler's own parser, the
container arguments through the real CLI, the recording rules through
``promtool``, and each Dockerfile's COPY + pip steps are replayed in a fresh
virtualenv. A missing ``kubectl`` or ``promtool`` FAILS (``tests/system-deps.sh``
installs them); nothing here is skipped because a tool is absent.

Cost: ~40 s of CPU, almost all of it the fresh-venv ``pip install .`` of the scaler
image; the probe image's steps are resolved with ``pip --dry-run`` (torch is
not unpacked) unless FORESCALE_TEST_PROBE_IMAGE=full.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from scaler.replay.manifest import POLLING_SECONDS
from support.helm import helm, render as helm_chart_render

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DEPLOY_DOC = ROOT / "docs" / "deploying.md"  # the deploy instructions (deploy/README.md points there)
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KEDA_CRDS = {
    "ScaledObject": FIXTURES / "keda" / "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": FIXTURES / "keda" / "keda.sh_triggerauthentications.yaml",
    # KEDA's ClusterTriggerAuthentication CRD has the same spec (TriggerAuthenticationSpec) and is cluster-scoped
    "ClusterTriggerAuthentication": FIXTURES / "keda" / "keda.sh_triggerauthentications.yaml",
}
RULES = DEPLOY / "example" / "monitoring" / "forescale-rules.yml"
RULES_TEST = FIXTURES / "promrules" / "forescale-rules.test.yml"
DASHBOARD = DEPLOY / "example" / "monitoring" / "forescale-dashboard.json"

# The kustomizations a user applies (components are rendered through overlays).
RENDER_ROOTS = ("scaler", "example", "example/vllm", "overlays/tls", "overlays/hpa-tolerance")
# Oldest Kubernetes the manifests support (gRPC probes GA 1.27, preStop
# `sleep` on by default 1.30) and the newest schema checked.
K8S_VERSIONS = ("1.30", "1.35")
# HPA behavior.*.tolerance: in the autoscaling/v2 schema from 1.33 (feature
# gate HPAConfigurableTolerance; alpha 1.33-1.34, beta 1.35).
HPA_TOLERANCE_SINCE = "1.33"
HPA_DEFAULT_TOLERANCE = 0.1
HPA_SYNC_SECONDS = 15

# Metric names the dashboard is built on (the scaler's and the probe's);
# test_dashboard_uses_only_exported_metrics checks them against the metrics
# the code really registers, plus kube-state-metrics'.
DASHBOARD_METRICS = {
    "forescale_observed_qps",
    "forescale_forecast_qps",
    "forescale_planned_qps",
    "forescale_lead_seconds",
    "forescale_decisions_total",
    "forescale_fit_duration_seconds",
    "forescale_fit_failures_total",
    "forescale_cold_start_seconds",
}
KUBE_STATE_METRICS = {"kube_deployment_status_replicas", "kube_deployment_status_replicas_ready"}


# --------------------------------------------------------------------------
# rendering


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl not found: the deploy tests need `kubectl kustomize` "
                    "(offline). Run tests/system-deps.sh or install kubectl.", pytrace=False)
    return path


@lru_cache(maxsize=None)
def _render(root: str) -> tuple[dict, ...]:
    proc = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize deploy/{root} failed:\n{proc.stderr}"
    objs = tuple(o for o in yaml.safe_load_all(proc.stdout) if o is not None)
    assert objs, f"deploy/{root} rendered nothing"
    return objs


def rendered(root: str) -> tuple[dict, ...]:
    return _render(root)


def one(objs, kind: str, name: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(obj: dict):
    if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        yield obj["spec"]["template"]["spec"]


def containers(pod: dict):
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def oid(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


@pytest.mark.parametrize("root", RENDER_ROOTS)
def test_kustomization_renders(root):
    kinds = {o["kind"] for o in rendered(root)}
    expected = {
        "scaler": {"Namespace", "ServiceAccount", "Secret", "Deployment", "Service",
                   "PodDisruptionBudget", "NetworkPolicy"},
        "example": {"Namespace", "Deployment", "Service", "DaemonSet", "ScaledObject", "ConfigMap", "PriorityClass"},
        "example/vllm": {"Deployment", "ScaledObject"},
        "overlays/tls": {"Deployment", "ScaledObject", "TriggerAuthentication"},
        "overlays/hpa-tolerance": {"ScaledObject"},
    }[root]
    assert expected <= kinds, f"deploy/{root} lacks {expected - kinds}"
    ids = [oid(o) for o in rendered(root)]
    assert len(ids) == len(set(ids)), "duplicate objects"


def _kustomization_files(directory: Path, seen: set[Path]) -> None:
    """Every file a kustomization (and what it includes) reads."""
    kfile = directory / "kustomization.yaml"
    seen.add(kfile)
    k = yaml.safe_load(kfile.read_text())
    for entry in k.get("resources", []) + k.get("components", []):
        p = (directory / entry).resolve()
        if p.is_dir():
            _kustomization_files(p, seen)
        else:
            seen.add(p)
    for patch in k.get("patches", []):
        if "path" in patch:
            seen.add((directory / patch["path"]).resolve())
    for gen in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        for f in gen.get("files", []):
            seen.add((directory / f.split("=", 1)[-1]).resolve())


def test_every_manifest_file_is_rendered():
    """No manifest in deploy/ escapes the checks below by not being rendered."""
    seen: set[Path] = set()
    for root in RENDER_ROOTS:
        _kustomization_files((DEPLOY / root).resolve(), seen)
    files = {p.resolve() for p in DEPLOY.rglob("*")  # the Helm chart is rendered by Helm (test_helm_*)
             if p.suffix in (".yaml", ".yml", ".json") and not {"docker", "helm"} & set(p.relative_to(DEPLOY).parts)}
    assert files - seen == set(), f"manifests no rendered kustomization reads: {sorted(files - seen)}"


# --------------------------------------------------------------------------
# schema validation


def _strict(schema):
    """A CRD structural schema with unknown fields forbidden (the API server prunes them)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(schema["additionalProperties"])
    if "items" in schema:
        out["items"] = _strict(schema["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [_strict(s) for s in schema[key]]
    return out


@lru_cache(maxsize=None)
def _crd_validator(kind: str) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(KEDA_CRDS[kind].read_text())
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def validate_custom(obj: dict) -> None:
    assert obj["apiVersion"] == "keda.sh/v1alpha1", oid(obj)
    errors = sorted(_crd_validator(obj["kind"]).iter_errors(obj), key=lambda e: list(e.absolute_path))
    assert not errors, f"{oid(obj)} fails KEDA's CRD schema:\n" + "\n".join(
        f"  {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    if obj["kind"] == "ScaledObject":  # the CRD's x-kubernetes-validations rule
        spec = obj["spec"]
        assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)


def _validate_builtin(obj: dict, version: str) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(f"{oid(obj)} invalid for Kubernetes {version}: "
                             f"{'/'.join(map(str, e.path))}: {e.message}") from None


@pytest.mark.parametrize("root", RENDER_ROOTS)
def test_every_object_validates(root):
    checked = 0
    for obj in rendered(root):
        if obj["kind"] in KEDA_CRDS:
            validate_custom(obj)
        else:  # anything else must have a Kubernetes schema (SchemaNotFoundError fails)
            for version in K8S_VERSIONS:
                _validate_builtin(obj, version)
        checked += 1
    assert checked == len(rendered(root))


def test_validators_are_strict():
    """The checks above would catch a misspelt field, not prune it silently."""
    so = json.loads(json.dumps(one(rendered("example"), "ScaledObject", "llm-inference")))
    so["spec"]["fallback"]["behaviour"] = "static"
    with pytest.raises(AssertionError, match="behaviour"):
        validate_custom(so)
    so = json.loads(json.dumps(one(rendered("example"), "ScaledObject", "llm-inference")))
    so["spec"]["triggers"][0]["metadata"]["quantile"] = 0.9  # unquoted in YAML
    with pytest.raises(AssertionError, match="quantile"):
        validate_custom(so)
    dep = json.loads(json.dumps(one(rendered("scaler"), "Deployment")))
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(AssertionError):
        _validate_builtin(dep, K8S_VERSIONS[0])


# --------------------------------------------------------------------------
# pod hardening, common to every workload


@pytest.mark.parametrize("root", RENDER_ROOTS)
def test_pods_are_hardened(root):
    for obj in rendered(root):
        assert_hardened(obj)


def assert_hardened(obj: dict) -> None:
    for pod in pod_specs(obj):
        psc = pod.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True, oid(obj)
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", oid(obj)
        assert pod.get("automountServiceAccountToken") is False, oid(obj)
        for c in containers(pod):
            where = f"{oid(obj)} container {c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            res = c.get("resources", {})
            assert res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory"), where
            assert res.get("limits", {}).get("memory"), where
            assert ":" in c["image"] and not c["image"].endswith(":latest"), f"{where}: unpinned image"


# --------------------------------------------------------------------------
# the scaler


def _args_value(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def _mounts(pod: dict, container: dict) -> dict[str, dict]:
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return {m["mountPath"]: {**volumes[m["name"]], "readOnly": m.get("readOnly", False)}
            for m in container.get("volumeMounts", [])}


def test_scaler_deployment_matches_the_cli_and_service():
    objs = rendered("scaler")
    dep, svc = one(objs, "Deployment", "forescale"), one(objs, "Service", "forescale")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = c["args"]
    assert args[0] == "serve"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(_args_value(args, "--port")) == ports["grpc"]
    assert int(_args_value(args, "--http-port")) == ports["http-metrics"]
    assert _args_value(args, "--host") == "0.0.0.0"
    # readiness and liveness on the gRPC health service
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"], probe
    # graceful stop: the grace period covers the preStop sleep plus the server's drain
    assert pod["terminationGracePeriodSeconds"] >= c["lifecycle"]["preStop"]["sleep"]["seconds"] + 10
    # writable state dir on a volume, read-only root fs
    mounts = _mounts(pod, c)
    state = mounts[_args_value(args, "--state-dir")]
    assert "emptyDir" in state or "persistentVolumeClaim" in state
    assert not state["readOnly"]
    assert "/tmp" in mounts and "emptyDir" in mounts["/tmp"]
    # Service exposes both ports by name
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert svc_ports["grpc"]["targetPort"] == "grpc" and svc_ports["grpc"]["appProtocol"] == "grpc"
    assert svc_ports["http-metrics"]["targetPort"] == "http-metrics"
    assert svc["spec"]["selector"].items() <= pod_labels(dep).items()
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(ports["http-metrics"])


def pod_labels(obj: dict) -> dict:
    return obj["spec"]["template"]["metadata"]["labels"]


def credential_sets(dep: dict) -> dict[str, set[str]]:
    """{set name: files} as the scaler sees <credentials-dir>/<name>/<file>."""
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    vol = _mounts(pod, c)[_args_value(c["args"], "--credentials-dir")]
    assert vol["readOnly"]
    sets: dict[str, set[str]] = {}
    for source in vol["projected"]["sources"]:
        for item in source["secret"]["items"]:
            name, _, file = item["path"].partition("/")
            sets.setdefault(name, set()).add(file)
    return sets


def test_scaler_credentials_are_files_from_the_secret():
    objs = rendered("scaler")
    dep, secret = one(objs, "Deployment", "forescale"), one(objs, "Secret", "forescale-credentials")
    sets = credential_sets(dep)
    assert sets, "no credential set mounted"
    valid = ({"token"}, {"username", "password"})
    for name, files in sets.items():
        # every set names the Prometheus it may be sent to (the scaler refuses a set without allowed-urls)
        assert "allowed-urls" in files, (name, files)
        auth = files - {"ca.crt", "tls.crt", "tls.key", "allowed-urls"}
        assert auth in valid or (not auth and {"tls.crt", "tls.key"} <= files), (name, files)
    # every projected key exists in the Secret
    keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    pod = dep["spec"]["template"]["spec"]
    for v in pod["volumes"]:
        for source in v.get("projected", {}).get("sources", []):
            if source["secret"]["name"] == secret["metadata"]["name"]:
                assert {i["key"] for i in source["secret"]["items"]} <= keys


def test_scaler_network_policy_and_pdb():
    objs = rendered("scaler")
    dep = one(objs, "Deployment", "forescale")
    labels = pod_labels(dep)
    np_ = one(objs, "NetworkPolicy", "forescale")
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(np_["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    grpc_rules = [r for r in np_["spec"]["ingress"] if {"port": 6000, "protocol": "TCP"} in r["ports"]]
    assert len(grpc_rules) == 1
    assert grpc_rules[0]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}]
    egress_ports = {(p["port"], p["protocol"]) for r in np_["spec"]["egress"] for p in r["ports"]}
    assert {(53, "UDP"), (9090, "TCP")} <= egress_ports
    pdb = one(objs, "PodDisruptionBudget", "forescale")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert dep["spec"]["replicas"] >= 2 and pdb["spec"]["maxUnavailable"] < dep["spec"]["replicas"]


# --------------------------------------------------------------------------
# the container arguments go through the real CLI


def _cli_parse(args: list[str]) -> None:
    """Parse (and type-check) a container's arguments with the real click CLI, without running it."""
    import click
    from scaler.cli import main

    name, rest = args[0], list(args[1:])
    cmd = main.commands.get(name)
    assert cmd is not None, f"`forescale {name}` is not a command of scaler/cli.py"
    try:
        cmd.make_context(name, rest)
    except click.ClickException as e:
        raise AssertionError(f"`forescale {' '.join(args)}` is rejected by the CLI: {e.format_message()}") from None


def _container_args(root: str, kind: str, name: str) -> list[str]:
    (c,) = one(rendered(root), kind, name)["spec"]["template"]["spec"]["containers"]
    return c["args"]


def test_scaler_args_parse():
    _cli_parse(_container_args("scaler", "Deployment", "forescale"))


def test_scaler_tls_args_parse():
    args = _container_args("overlays/tls", "Deployment", "forescale")
    assert args[-6:] == ["--tls-cert", "/etc/forescale/tls/tls.crt", "--tls-key", "/etc/forescale/tls/tls.key",
                         "--tls-client-ca", "/etc/forescale/tls/ca.crt"]
    _cli_parse(args)


def test_probe_args_parse():
    _cli_parse(_container_args("example", "Deployment", "llm-inference"))


def test_tls_overlay_wiring():
    objs = rendered("overlays/tls")
    dep = one(objs, "Deployment", "forescale")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    mounts = _mounts(pod, c)
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
        path = Path(_args_value(c["args"], flag))
        vol = mounts[str(path.parent)]
        assert vol["readOnly"] and vol["secret"]["secretName"] == "forescale-grpc-tls"
    # kubelet gRPC probes cannot do TLS: the probes moved to HTTP /healthz
    http_port = {p["name"]: p["containerPort"] for p in c["ports"]}["http-metrics"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz" and c[probe]["httpGet"]["port"] in ("http-metrics", http_port)
    so = one(objs, "ScaledObject", "llm-inference")
    ta = one(objs, "TriggerAuthentication", "forescale-grpc-tls")
    assert so["spec"]["triggers"][0]["authenticationRef"]["name"] == ta["metadata"]["name"]
    assert ta["metadata"]["namespace"] == so["metadata"]["namespace"]
    assert {r["parameter"] for r in ta["spec"]["secretTargetRef"]} == {"caCert", "tlsClientCert", "tlsClientKey"}
    # the Service DNS name in scalerAddress is the one the server certificate must carry
    assert so["spec"]["triggers"][0]["metadata"]["scalerAddress"].startswith("forescale.forescale.svc")
    # every forescale trigger (the placeholder's two as well) dials the scaler with the client certificate
    for obj in objs:
        if obj["kind"] == "ScaledObject":
            for trig in obj["spec"]["triggers"]:
                assert trig.get("authenticationRef", {}).get("name") == ta["metadata"]["name"], oid(obj)


# --------------------------------------------------------------------------
# the example workload and its ScaledObject


def _trigger(so: dict) -> dict:
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "external"
    return trigger


def _parse(so: dict):
    from scaler.spec import parse_metadata

    md = _trigger(so)["metadata"]
    return parse_metadata(md, name=so["metadata"]["name"], namespace=so["metadata"]["namespace"])


def _quantity(q) -> float:
    s = str(q)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


@pytest.mark.parametrize("root", ["example", "overlays/tls", "overlays/hpa-tolerance"])
def test_scaledobject_metadata_is_accepted_by_the_scaler(root):
    so = one(rendered(root), "ScaledObject", "llm-inference")
    md = _trigger(so)["metadata"]
    assert all(isinstance(v, str) for v in md.values()), {k: v for k, v in md.items() if not isinstance(v, str)}
    spec, unknown = _parse(so)
    assert unknown == (), f"keys the scaler does not know: {unknown}"
    # keys the scaler's credential store must hold
    if spec.prometheus.credentials:
        assert spec.prometheus.credentials in credential_sets(one(rendered("scaler"), "Deployment", "forescale"))
    # the address KEDA dials is the scaler Service
    svc = one(rendered("scaler"), "Service", "forescale")
    host, port = md["scalerAddress"].rsplit(":", 1)
    assert host.split(".")[:2] == [svc["metadata"]["name"], svc["metadata"]["namespace"]]
    assert int(port) in {p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"}
    # KEDA's external scaler also reads `unsafeSsl` (for its gRPC connection):
    # the key is shared with forescale's Prometheus meaning; never set it here.
    assert "unsafeSsl" not in md


@pytest.mark.parametrize("root", ["example", "overlays/hpa-tolerance"])
def test_hpa_behavior_and_tolerance(root):
    so = one(rendered(root), "ScaledObject", "llm-inference")
    spec, _ = _parse(so)
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    up, down = behavior["scaleUp"], behavior["scaleDown"]
    assert up["stabilizationWindowSeconds"] == 0  # the value already looks L ahead
    # a dip shorter than the lead time must not shed a replica needed again
    assert down["stabilizationWindowSeconds"] >= spec.lead.seconds
    # the trigger's hpaTolerance is the tolerance the HPA really applies
    tolerance = _quantity(up["tolerance"]) if "tolerance" in up else HPA_DEFAULT_TOLERANCE
    assert math.isclose(spec.hpa_tolerance, tolerance), (spec.hpa_tolerance, tolerance)
    if root == "example":
        assert "tolerance" not in up and "tolerance" not in down, \
            "the base must not depend on HPAConfigurableTolerance (see deploy/example/hpa-tolerance)"
    else:
        assert tolerance < HPA_DEFAULT_TOLERANCE


def _emulated_hpa(so: dict) -> dict:
    """The HorizontalPodAutoscaler KEDA creates from this ScaledObject."""
    spec, _ = _parse(so)
    s = so["spec"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"keda-hpa-{so['metadata']['name']}", "namespace": so["metadata"]["namespace"]},
        "spec": {
            "scaleTargetRef": s["scaleTargetRef"],
            "minReplicas": max(1, s.get("minReplicaCount", 0)),
            "maxReplicas": s.get("maxReplicaCount", 100),
            "metrics": [{"type": "External", "external": {
                "metric": {"name": f"s0-{spec.metric_name}",
                           "selector": {"matchLabels": {"scaledobject.keda.sh/name": so["metadata"]["name"]}}},
                "target": {"type": "AverageValue", "averageValue": str(spec.qps_per_replica)}}}],
            "behavior": s["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
        },
    }


def test_hpa_keda_creates_is_valid():
    """behavior passes to the HPA unchanged: it must be a valid autoscaling/v2 behavior,
    and `tolerance` only exists from Kubernetes 1.33 on (why it is not in the base)."""
    base = _emulated_hpa(one(rendered("example"), "ScaledObject", "llm-inference"))
    for version in K8S_VERSIONS:
        _validate_builtin(base, version)
    tol = _emulated_hpa(one(rendered("overlays/hpa-tolerance"), "ScaledObject", "llm-inference"))
    _validate_builtin(tol, HPA_TOLERANCE_SINCE)
    _validate_builtin(tol, K8S_VERSIONS[-1])
    with pytest.raises(AssertionError, match="tolerance"):
        _validate_builtin(tol, "1.32")


def test_scaledobject_bounds_and_fallback():
    so = one(rendered("example"), "ScaledObject", "llm-inference")
    s = so["spec"]
    assert s["scaleTargetRef"]["name"] == one(rendered("example"), "Deployment", "llm-inference")["metadata"]["name"]
    assert 1 <= s["minReplicaCount"] <= s["maxReplicaCount"]
    fb = s["fallback"]
    assert fb["failureThreshold"] >= 1
    assert s["minReplicaCount"] <= fb["replicas"] <= s["maxReplicaCount"]
    assert _trigger(so).get("metricType", "AverageValue") == "AverageValue"  # fallback needs it


def test_probe_thresholds_follow_the_documented_cold_start():
    """T_cold is written once (annotation + coldStartSeconds); the probes derive from it."""
    objs = rendered("example")
    dep, so = one(objs, "Deployment", "llm-inference"), one(objs, "ScaledObject", "llm-inference")
    spec, _ = _parse(so)
    t_cold = float(dep["metadata"]["annotations"]["forescale.io/cold-start-seconds"])
    assert spec.lead.cold_start_seconds == t_cold
    comment = (DEPLOY / "example" / "deployment.yaml").read_text()
    assert f"T_cold = {t_cold:g} s" in comment, "the documented figure in deployment.yaml is stale"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    startup, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    assert (startup["httpGet"]["path"], ready["httpGet"]["path"], live["httpGet"]["path"]) == \
        ("/health/startup", "/health/ready", "/health/live")
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget >= 2 * t_cold, f"startupProbe allows {budget} s < 2 x T_cold = {2 * t_cold} s"
    assert f"{startup['periodSeconds']} x failureThreshold {startup['failureThreshold']} = {budget} s" in comment
    # warm-up done -> Ready within startup period + readiness period: the trigger's readinessSeconds
    assert spec.lead.readiness_seconds >= startup["periodSeconds"] + ready["periodSeconds"]
    # KEDA poll + HPA sync fit in schedulingSeconds
    assert spec.lead.scheduling_seconds >= so["spec"].get("pollingInterval", POLLING_SECONDS) + HPA_SYNC_SECONDS
    # the lead time stated in scaledobject.yaml is the one the parser computes
    assert f"L = T_cold + T_buffer = {t_cold:g} + " in (DEPLOY / "example" / "scaledobject.yaml").read_text()
    assert f"= {spec.lead.seconds:g} s" in (DEPLOY / "example" / "scaledobject.yaml").read_text()


def test_inference_pod_runs_on_gpus_and_prepuller_matches():
    objs = rendered("example")
    dep, ds = one(objs, "Deployment", "llm-inference"), one(objs, "DaemonSet", "llm-inference-prepuller")
    pod, pre = dep["spec"]["template"]["spec"], ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert pod["nodeSelector"] and pod["tolerations"]
    assert pre["nodeSelector"] == pod["nodeSelector"] and pre["tolerations"] == pod["tolerations"]
    # the pre-puller pulls exactly the workload's images and asks for no GPU
    assert {i["image"] for i in pre["initContainers"]} == {x["image"] for x in pod["containers"]}
    assert all("nvidia.com/gpu" not in str(x.get("resources", {})) for x in containers(pre))
    assert "replicas" not in dep["spec"], "KEDA's HPA owns the replica count"
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == {p["name"]: p["containerPort"] for p in c["ports"]}["http"]


# --------------------------------------------------------------------------
# Prometheus rules


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run tests/system-deps.sh (Debian package prometheus)", pytrace=False)
    return path


def test_promtool_check_rules():
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules():
    proc = subprocess.run([_promtool(), "test", "rules", RULES_TEST.name], cwd=RULES_TEST.parent,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def _recorded() -> set[str]:
    return {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}


def test_queries_read_recorded_series_and_the_configmap_is_the_file():
    so = one(rendered("example"), "ScaledObject", "llm-inference")
    md = _trigger(so)["metadata"]
    recorded = _recorded()
    for key in ("query", "coldStartQuery"):
        names = promql_metric_names(md[key])
        assert names and names <= recorded, f"{key} reads {names - recorded}, not a recorded series"
    cm = one(rendered("example"), "ConfigMap", "forescale-recording-rules")
    assert cm["data"][RULES.name] == RULES.read_text()
    cm = one(rendered("example"), "ConfigMap", "forescale-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


# --------------------------------------------------------------------------
# Grafana dashboard

_PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "group",
    "count_values", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile",
    "max_over_time", "min_over_time", "avg_over_time", "sum_over_time", "count_over_time",
    "quantile_over_time", "last_over_time", "abs", "ceil", "floor", "round", "clamp", "clamp_min",
    "clamp_max", "label_replace", "label_join", "vector", "scalar", "time", "timestamp", "absent",
    "absent_over_time", "changes", "resets", "sort", "sort_desc", "label_values", "query_result",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (strings, label matchers, ranges and grouping removed)."""
    e = re.sub(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", r"\1", expr)  # label_values(series, label)
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    tokens = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e)
    return {t for t in tokens if t not in _PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]|e|Inf|NaN", t)}


def _dashboard_exprs(dash: dict) -> list[str]:
    exprs = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dash["panels"]):
        exprs += [t["expr"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def exported_metric_names() -> set[str]:
    """Series names the scaler and the probe register (read from the code, not a list)."""
    from scaler.serve.metrics import ScalerMetrics
    from scaler.probe.metrics import ProbeMetrics

    from scaler.serve.watch import Watch

    names = set()
    watch = Watch().collect(0.0)  # the live scores: a collector's families, built at scrape time
    for families in (ScalerMetrics().registry.collect(), ProbeMetrics("m").registry.collect(), watch):
        for family in families:
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                        "summary": ("_sum", "_count", "")}.get(family.type, ("",))
            names |= {family.name + sfx for sfx in suffixes}
    return names


def test_dashboard_uses_only_exported_metrics():
    exported = exported_metric_names()
    assert DASHBOARD_METRICS - {"forescale_fit_duration_seconds"} <= exported, DASHBOARD_METRICS - exported
    assert "forescale_fit_duration_seconds_count" in exported
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    exprs = _dashboard_exprs(dash)
    used = set().union(*(promql_metric_names(e) for e in exprs))
    allowed = exported | KUBE_STATE_METRICS | _recorded()
    assert used <= allowed, f"metrics the code does not export: {used - allowed}"
    # what the dashboard is for: observed vs forecast vs planned, replicas, T_cold, reasons
    for needed in ("forescale_observed_qps", "forescale_forecast_qps", "forescale_planned_qps",
                   "kube_deployment_status_replicas", "kube_deployment_status_replicas_ready",
                   "forescale_cold_start_seconds", "forescale_decisions_total", "forescale_lead_seconds"):
        assert needed in used, f"dashboard does not show {needed}"
    variables = {v["name"] for v in dash["templating"]["list"]}
    for e in exprs:
        for var in re.findall(r"\$\{?(\w+)\}?", e):
            assert var in variables or var.startswith("__"), f"undefined variable ${var} in {e}"
    # label values the dashboard filters on exist on those metrics
    from scaler.serve.metrics import SO
    assert set(SO) == {"namespace", "scaledobject"}


def test_promql_metric_names_parser():
    assert promql_metric_names(
        'sum by (reason) (rate(forescale_decisions_total{namespace="$ns",x=~"a|b"}[$__rate_interval]))'
    ) == {"forescale_decisions_total"}
    assert promql_metric_names("a_sum / on(x) b_count > 2") == {"a_sum", "b_count"}
    assert promql_metric_names("max(ns:foo:rate2m{a='b'})") == {"ns:foo:rate2m"}
    assert promql_metric_names('label_values(kube_x{namespace="$namespace"}, deployment)') == {"kube_x"}


# --------------------------------------------------------------------------
# Dockerfiles: linted, and their install steps replayed without Docker

DOCKERFILES = {"scaler": DEPLOY / "docker" / "scaler.Dockerfile", "probe": DEPLOY / "docker" / "probe.Dockerfile"}


def parse_dockerfile(path: Path) -> list[list[tuple[str, str]]]:
    """Stages of (INSTRUCTION, argument) with ARG defaults substituted."""
    text = re.sub(r"\\\n", " ", "\n".join(ln for ln in path.read_text().splitlines()
                                          if not ln.lstrip().startswith("#")))
    args: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []

    def subst(s: str) -> str:
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), s)

    for line in text.splitlines():
        if not line.strip():
            continue
        instr, _, rest = line.strip().partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if instr == "ARG":
            name, eq, default = rest.partition("=")
            if eq:
                args[name] = subst(default)
            elif name not in args:
                args[name] = f"${{{name}}}"
            continue
        if instr == "FROM":
            stages.append([])
        assert stages, f"{path}: {instr} before FROM"
        stages[-1].append((instr, subst(rest)))
    return stages


def _glob_regex(pattern: str) -> str:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def _dockerignored(rel: str, patterns: list[str]) -> bool:
    """Whether a context path is excluded (a matched directory excludes what is under it)."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for pat in patterns:
        neg = pat.startswith("!")
        regex = _glob_regex(pat.lstrip("!").strip("/"))
        if any(re.fullmatch(regex, p) for p in prefixes):
            ignored = not neg
    return ignored


def _dockerignore() -> list[str]:
    f = ROOT / ".dockerignore"
    lines = f.read_text().splitlines() if f.exists() else []
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_dockerfile_lint(image):
    stages = parse_dockerfile(DOCKERFILES[image])
    assert len(stages) >= 2, "multi-stage: build stage + runtime stage"
    for stage in stages:
        base = stage[0][1].split()[0]
        assert "$" not in base, f"unresolved base image {base}"
        assert "@sha256:" in base or re.search(r":\d+\.\d+\.\d+", base), f"base not pinned: {base}"
        # the image's Python is the one the tests run (same minor)
        assert f":{sys.version_info.major}.{sys.version_info.minor}." in base
    runtime = stages[-1]
    user = [rest for instr, rest in runtime if instr == "USER"]
    assert user and user[-1].split(":")[0].isdigit() and int(user[-1].split(":")[0]) != 0, "runtime must be non-root"
    entry = [json.loads(rest) for instr, rest in runtime if instr == "ENTRYPOINT"]
    assert entry == [["forescale"]]
    cmd = [json.loads(rest) for instr, rest in runtime if instr == "CMD"][-1]
    assert cmd[0] == ("serve" if image == "scaler" else "probe")
    copies = [rest for instr, rest in runtime if instr == "COPY"]
    assert copies == ["--from=build /opt/forescale /opt/forescale"]
    # no torch in the scaler; the probe's torch pin is the project's
    text = DOCKERFILES[image].read_text()
    probe_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["probe"]
    torch_pin = next(d for d in probe_extra if d.startswith("torch"))
    if image == "scaler":
        assert "torch" not in "".join(rest for _, rest in stages[0])
    else:
        assert re.findall(r"torch==[\w.+]+", text) == [torch_pin] * len(re.findall(r"torch==[\w.+]+", text))
        assert torch_pin == "torch==2.13.0"
    # the main CMD is accepted by the CLI
    _cli_parse(cmd)


def replay_build_stage(image: str, fsroot: Path, pip_extra=lambda step: []) -> Path:
    """Run the build stage's COPY and RUN steps with ``fsroot`` as the image's /.

    Supported: WORKDIR, ENV (ignored: pip settings only), COPY from the build
    context (honouring .dockerignore), RUN `python -m venv DIR` and
    RUN `DIR/bin/pip install ...`. ``--index-url`` is dropped: here pip takes
    packages (torch==2.13.0 CPU included) from the machine's configured
    indexes, as the PyPI/PyTorch indexes would in a real build. ``pip_extra(n)``
    gives extra arguments for the n-th pip step. Returns the venv.
    """
    stage = parse_dockerfile(DOCKERFILES[image])[0]
    ignore = _dockerignore()
    workdir = fsroot
    venv = None
    pip_steps = 0

    def at(path: str) -> Path:
        return fsroot / path.lstrip("/") if path.startswith("/") else workdir / path

    for instr, rest in stage[1:]:
        if instr in ("ENV", "LABEL", "ARG"):
            continue
        if instr == "WORKDIR":
            workdir = at(rest)
            workdir.mkdir(parents=True, exist_ok=True)
        elif instr == "COPY":
            *srcs, dst = shlex.split(rest)
            assert not any(s.startswith("--from") for s in srcs), "build stage copies from the context only"
            for src in srcs:
                s = ROOT / src
                assert s.exists(), f"COPY {src}: not in the build context"
                assert not _dockerignored(src.rstrip("/"), ignore), f"COPY {src}: excluded by .dockerignore"
                target = at(dst)
                if s.is_dir():  # a directory's contents go into dst
                    shutil.copytree(s, target, dirs_exist_ok=True, ignore=lambda d, names: [
                        n for n in names if _dockerignored(str((Path(d) / n).relative_to(ROOT)), ignore)])
                elif dst.endswith("/"):
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(s, target / s.name)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(s, target)
        elif instr == "RUN":
            argv = shlex.split(rest)
            if argv[:3] == ["python", "-m", "venv"]:
                venv = at(argv[3])
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
            elif argv[0].endswith("/bin/pip") and argv[1] == "install":
                assert venv is not None and at(argv[0]) == venv / "bin" / "pip"
                pip_args = []
                it = iter(argv[2:])
                for a in it:
                    if a == "--index-url":
                        next(it)
                    elif not a.startswith("--index-url="):
                        pip_args.append(a)
                proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                       *pip_args, *pip_extra(pip_steps)],
                                      cwd=workdir, capture_output=True, text=True, timeout=900)
                assert proc.returncode == 0, f"{image}: RUN {rest}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                pip_steps += 1
            else:
                pytest.fail(f"{image}: RUN step the test cannot replay (teach replay_build_stage): {rest}")
        else:
            pytest.fail(f"{image}: build-stage instruction the test cannot replay: {instr} {rest}")
    assert venv is not None
    return venv


def _venv_env() -> dict:
    """The environment for a fresh venv's programs: without PYTHONPATH, which would import a checkout's code."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _py(venv: Path, code: str, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp,
                          capture_output=True, text=True, timeout=300, env=_venv_env())


def _probe_full() -> bool:
    return os.environ.get("FORESCALE_TEST_PROBE_IMAGE") == "full"


@pytest.fixture(scope="module")
def image_builds(tmp_path_factory):
    """Both images' build stages replayed side by side, each in its own tree under ``root``: (root, {image: the
    future of its venv}). pip spends most of a replay waiting on the package index and the disk, not on the CPU.
    Each test takes its own image's result (a failed replay fails that image's test only)."""
    root = tmp_path_factory.mktemp("images")
    full = _probe_full()

    def probe_extra(step: int) -> list[str]:
        return ["--no-compile"] if full else ["--dry-run", "--report", str(root / f"report{step}.json")]

    with ThreadPoolExecutor(2) as ex:
        builds = {"scaler": ex.submit(replay_build_stage, "scaler", root / "scaler-fs", lambda step: ["--no-compile"]),
                  "probe": ex.submit(replay_build_stage, "probe", root / "probe-fs", probe_extra)}
    try:
        yield root, builds
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the replayed trees are hundreds of MB: not kept in pytest's tmp


def test_scaler_image_install(image_builds, tmp_path):
    """The scaler image's install, for real: `pip install .` in a fresh venv (what `make backtest` installs).
    The result runs the CLI, imports every module but the probe's and the drill's (their extras, torch and
    cryptography, are not in the image), has no torch, says its version, runs `forescale backtest` on the bundled
    trace, and `forescale drill` there names the extra it needs instead of a traceback."""
    venv = image_builds[1]["scaler"].result()
    exe = venv / "bin" / "forescale"
    for argv in (["--help"], ["serve", "--help"]):
        proc = subprocess.run([str(exe), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=_venv_env())
        assert proc.returncode == 0, proc.stderr
    code = (
        "import importlib, importlib.util, pkgutil, scaler, forecaster\n"
        "assert importlib.util.find_spec('torch') is None, 'torch in the scaler image'\n"
        "mods = []\n"
        "for pkg in (scaler, forecaster):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name in ('scaler.probe', 'scaler.drill') or m.name.startswith(('scaler.probe.', 'scaler.drill.')):\n"
        "            continue\n"
        "        importlib.import_module(m.name); mods.append(m.name)\n"
        "assert scaler.__file__.startswith(%r), scaler.__file__\n"
        "print(len(mods))\n" % str(venv)
    )
    proc = _py(venv, code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) >= 3
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    proc = subprocess.run([str(exe), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=_venv_env())
    assert proc.stdout.strip() == f"forescale, version {version}", proc.stdout + proc.stderr
    proc = subprocess.run([str(exe), "backtest", "--span", "2h", "--refit", "1h", "--model", "naive",
                           "--policies", "reactive,oracle", "--no-progress", "--json", "-"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_venv_env())
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["trace"]["name"].startswith("worldcup98") and set(doc["policies"]) == {"reactive", "oracle"}
    assert doc["policies"]["oracle"]["underprovisioned_fraction"] == 0
    proc = subprocess.run([str(exe), "drill", "--no-isolate", "--scenarios", "step", "--out", str(tmp_path / "d")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_venv_env())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "forescale[drill]" in proc.stderr and not (tmp_path / "d").exists(), proc.stderr


def test_probe_image_install(image_builds, tmp_path):
    """The probe image's install steps resolved in a fresh venv: torch==2.13.0 first,
    then `pip install '.[probe]'` (the project built from the copied context).
    `pip --dry-run` by default (unpacking torch costs ~20 s of CI per run);
    FORESCALE_TEST_PROBE_IMAGE=full installs for real and runs `forescale probe --help`."""
    full = _probe_full()
    runs = [r for i, r in parse_dockerfile(DOCKERFILES["probe"])[0] if i == "RUN" and "pip install" in r]
    assert len(runs) == 2 and "torch==2.13.0" in runs[0] and ".[probe]" in runs[1]
    reports, builds = image_builds
    venv = builds["probe"].result()
    if full:
        proc = subprocess.run([str(venv / "bin" / "forescale"), "probe", "--help"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        proc = _py(venv, "import torch; print(torch.__version__)", tmp_path)
        assert proc.stdout.startswith("2.13.0"), proc.stdout + proc.stderr
        return
    for step in (0, 1):
        rep = json.loads((reports / f"report{step}.json").read_text())
        versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in rep["install"]}
        assert versions["torch"].split("+")[0] == "2.13.0", versions["torch"]
        if step == 1:
            assert "forescale" in versions and "safetensors" in versions, sorted(versions)


# --------------------------------------------------------------------------
# docs


def test_deploy_docs_name_real_paths():
    text = DEPLOY_DOC.read_text()
    for path in re.findall(r"kubectl apply -k ([\w/.-]+)", text):
        assert (ROOT / path / "kustomization.yaml").exists(), path
    for path in re.findall(r"-f (deploy/docker/[\w.-]+)", text):
        assert (ROOT / path).exists(), path
    assert "coldStartSeconds" in text and "forescale probe" in text


# --------------------------------------------------------------------------
# placeholder pods ahead of node boots (deploy/example/placeholder.yaml)

T_NODE_SECONDS = 420  # the node provisioning time the example assumes (its comment)


def test_placeholder_pods_hold_gpus_at_a_priority_every_real_pod_preempts():
    objs = rendered("example")
    pc = one(objs, "PriorityClass", "llm-inference-placeholder")
    assert pc["value"] < 0 and pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False
    real = one(objs, "Deployment", "llm-inference")
    ph = one(objs, "Deployment", "llm-inference-placeholder")
    pod, rpod = ph["spec"]["template"]["spec"], real["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == pc["metadata"]["name"] and "priorityClassName" not in rpod
    assert "replicas" not in ph["spec"], "the placeholder ScaledObject owns the count"
    # the same nodes, one GPU per placeholder as per inference pod
    assert pod["nodeSelector"] == rpod["nodeSelector"] and pod["tolerations"] == rpod["tolerations"]
    (c,), (rc,) = pod["containers"], rpod["containers"]
    for kind in ("requests", "limits"):
        assert c["resources"][kind]["nvidia.com/gpu"] == rc["resources"][kind]["nvidia.com/gpu"] == 1


def test_placeholder_scaledobject_asks_for_the_growth_one_node_boot_ahead():
    objs = rendered("example")
    so = one(objs, "ScaledObject", "llm-inference-placeholder")
    real = one(objs, "ScaledObject", "llm-inference")
    assert so["spec"]["scaleTargetRef"]["name"] == one(objs, "Deployment", "llm-inference-placeholder")["metadata"]["name"]
    assert so["spec"]["maxReplicaCount"] <= real["spec"]["maxReplicaCount"] and so["spec"]["minReplicaCount"] == 0
    from scaler.spec import parse_metadata

    specs = {}
    for trig in so["spec"]["triggers"]:
        md = trig["metadata"]
        assert trig["type"] == "external" and all(isinstance(v, str) for v in md.values())
        spec, unknown = parse_metadata(md, name=so["metadata"]["name"], namespace=so["metadata"]["namespace"])
        assert unknown == (), unknown
        specs[trig["name"]] = spec
    assert set(specs) == {"ahead", "pods"}
    real_spec, _ = _parse(real)
    # `pods` forecasts what the inference Deployment is sized for: the same query, replica size and lead
    assert specs["pods"].lead.seconds == real_spec.lead.seconds
    assert _trigger(real)["metadata"]["query"] == so["spec"]["triggers"][0]["metadata"]["query"]
    # `ahead` looks one node boot further: L + T_node, as the comment's arithmetic says
    assert specs["ahead"].lead.seconds == real_spec.lead.seconds + T_NODE_SECONDS
    text = (DEPLOY / "example" / "placeholder.yaml").read_text()
    assert f"T_node = {T_NODE_SECONDS} s" in text and f"= {specs['ahead'].lead.seconds:g} s" in text
    # the formula: max(0, ahead - pods) in req/s, one placeholder per qpsPerReplica of it
    mod = so["spec"]["advanced"]["scalingModifiers"]
    assert mod["formula"] == "ahead - pods > 0 ? ahead - pods : 0"
    assert float(mod["target"]) == float(_trigger(real)["metadata"]["qpsPerReplica"])
    assert mod["metricType"] == "AverageValue"


# Helm chart deploy/helm/forescale, rendered by a real Helm engine: helm-python-sdk
# (Helm's own Go SDK as a shared library, a PyPI wheel: offline, no helm binary)

CHART = DEPLOY / "helm" / "forescale"
ALERTS = CHART / "files" / "forescale-alerts.yml"
ALERTS_TEST = FIXTURES / "promrules" / "forescale-alerts.test.yml"
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
CERT_MANAGER_KINDS = {"Certificate", "ClusterIssuer", "Issuer"}
EVERYTHING = {
    "networkPolicy": {"enabled": True},
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "additionalAlertLabels": {"team": "ml"}},
    "dashboard": {"enabled": True, "namespace": "monitoring"},
    "credentials": {"existingSecret": "forescale-credentials",
                    "items": [{"key": "prometheus.allowed-urls", "path": "prometheus/allowed-urls"},
                              {"key": "prometheus.token", "path": "prometheus/token"}]},
}


def _helm():
    return helm()


def helm_render(values: dict | None = None, name: str = "forescale", namespace: str = "forescale") -> list[dict]:
    return helm_chart_render(values, name=name, namespace=namespace)


@lru_cache(maxsize=None)
def _helm_cached(key: str) -> tuple[dict, ...]:
    return tuple(helm_render(json.loads(key)))


def helm_objs(values: dict | None = None) -> tuple[dict, ...]:
    return _helm_cached(json.dumps(values or {}, sort_keys=True))


def test_helm_chart_lints_and_follows_the_package_version():
    helm = _helm()
    lint = helm.lint(str(CHART))
    assert lint["errors"] == [] and not [m for m in lint["messages"] if m["severity"] >= 2], lint
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert meta["version"] == meta["appVersion"] == version


def test_helm_default_render_is_the_scaler_with_mtls_without_crds():
    objs = helm_objs()
    kinds = sorted(o["kind"] for o in objs)
    # mTLS by default, from cert-manager: the chart's CA (self-signed ClusterIssuer, CA Certificate, CA
    # ClusterIssuer), the server's and KEDA's Certificates, and KEDA's ClusterTriggerAuthentication; the
    # NetworkPolicy is opt-in
    assert kinds == ["Certificate", "Certificate", "Certificate", "ClusterIssuer", "ClusterIssuer",
                     "ClusterTriggerAuthentication", "Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"]
    dep = one(objs, "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/forescale/forescale:0.2.0"
    # without TLS, the same scaler as the kustomize base: same args, ports, probes, hardening
    objs = helm_objs({"tls": {"enabled": False}})
    assert sorted(o["kind"] for o in objs) == ["Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"]
    dep, svc = one(objs, "Deployment"), one(objs, "Service")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    (k,) = one(rendered("scaler"), "Deployment", "forescale")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == k["image"] and c["ports"] == k["ports"] and c["startupProbe"] == k["startupProbe"]
    assert c["securityContext"] == k["securityContext"] and c["resources"] == k["resources"]
    assert svc["spec"]["ports"] == one(rendered("scaler"), "Service", "forescale")["spec"]["ports"]


@pytest.mark.parametrize("variant", ["default", "everything", "tls"])
def test_helm_objects_validate_and_pods_are_hardened(variant):
    values = {"default": {}, "everything": {**EVERYTHING, "tls": {"enabled": False}},
              "tls": {**EVERYTHING, "tls": {"enabled": True, "source": "secret", "secretName": "forescale-grpc-tls"}}
              }[variant]
    objs = helm_objs(values)
    ids = [oid(o) for o in objs]
    assert len(ids) == len(set(ids))
    for obj in objs:
        if obj["kind"] in PROMETHEUS_OPERATOR_KINDS:  # no CRD schema offline: checked field by field below
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        if obj["kind"] in CERT_MANAGER_KINDS:  # no CRD schema offline: test_helm_cert_manager_* check the fields
            assert obj["apiVersion"] == "cert-manager.io/v1"
            continue
        if obj["kind"] in KEDA_CRDS:
            validate_custom({k: v for k, v in obj.items() if k != "metadata"} | {
                "metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}})  # cluster-scoped
            continue
        for version in K8S_VERSIONS:
            _validate_builtin(obj, version)
        assert_hardened(obj)
    dep = one(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    _cli_parse(c["args"])  # the real CLI accepts the chart's arguments
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(_args_value(c["args"], "--port")) == ports["grpc"]
    assert int(_args_value(c["args"], "--http-port")) == ports["http-metrics"]
    svc = one(objs, "Service")
    assert svc["spec"]["selector"].items() <= pod_labels(dep).items()
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(dep).items()
    if variant != "default":
        np_ = one(objs, "NetworkPolicy")
        assert np_["spec"]["podSelector"]["matchLabels"].items() <= pod_labels(dep).items()
    assert pdb["spec"]["maxUnavailable"] < dep["spec"]["replicas"]
    if variant in ("default", "tls"):  # mTLS is the default
        for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
            mount = _mounts(dep["spec"]["template"]["spec"], c)[str(Path(_args_value(c["args"], flag)).parent)]
            assert mount["secret"]["secretName"] == "forescale-grpc-tls" and mount["readOnly"]
        assert all(c[p]["httpGet"]["path"] == "/healthz" for p in ("startupProbe", "readinessProbe", "livenessProbe"))
    if variant != "default":
        assert credential_sets(dep) == {"prometheus": {"allowed-urls", "token"}}


def test_helm_monitors_keep_the_scalers_labels_and_match_the_service():
    objs = helm_objs(EVERYTHING)
    dep, svc = one(objs, "Deployment"), one(objs, "Service")
    # one of the two monitors at a time (values.schema.json refuses both: the same scrape twice)
    pm = one(helm_objs({**EVERYTHING, "serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}}),
             "PodMonitor")
    sm = one(objs, "ServiceMonitor")
    assert not [o for o in objs if o["kind"] == "PodMonitor"]
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels(dep).items()
    for mon, ep_key in ((sm, "endpoints"), (pm, "podMetricsEndpoints")):
        (ep,) = mon["spec"][ep_key]
        # the scaler exports the ScaledObject's namespace as `namespace`; without honorLabels the operator's
        # target label wins and it becomes exported_namespace: every dashboard panel and alert would be empty
        assert ep["honorLabels"] is True and ep["path"] == "/metrics"
        assert set(ep) <= {"port", "path", "interval", "honorLabels"}
        assert mon["spec"]["namespaceSelector"] == {"matchNames": ["forescale"]}
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in {
        p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    from scaler.serve.metrics import SO
    assert "namespace" in SO  # the label honorLabels keeps


def test_helm_prometheus_rule_is_the_tested_alert_file(tmp_path):
    rule = one(helm_objs(EVERYTHING), "PrometheusRule")
    assert set(rule["spec"]) == {"groups"}
    shipped = yaml.safe_load(ALERTS.read_text())["groups"]
    got = rule["spec"]["groups"]
    assert [g["name"] for g in got] == [g["name"] for g in shipped]
    for g_got, g_shipped in zip(got, shipped):
        for r_got, r_shipped in zip(g_got["rules"], g_shipped["rules"], strict=True):
            assert r_got["labels"] == {**r_shipped["labels"], "team": "ml"}
            assert {k: v for k, v in r_got.items() if k != "labels"} == {k: v for k, v in r_shipped.items()
                                                                         if k != "labels"}
    # the rendered groups are a valid rule file (templates like {{ $labels.namespace }} survive Helm)
    f = tmp_path / "rendered-rules.yml"
    f.write_text(yaml.safe_dump({"groups": got}))
    proc = subprocess.run([_promtool(), "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SUCCESS: 7 rules found" in proc.stdout, proc.stdout + proc.stderr
    alerts = {r["alert"] for g in got for r in g["rules"]}
    assert alerts == {"ForescaleStuckOnFallback", "ForescaleFitsFailing", "ForescalePrometheusErrorsRising",
                      "ForescaleForecastStale", "ForescalePlannedBelowObserved", "ForescaleForecastDrift",
                      "ForescaleCapacityMisconfigured"}
    # every alert has a promtool case, and every metric it reads is exported by the scaler
    cases = {t["alertname"] for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
             for t in test.get("alert_rule_test", [])}
    assert cases == alerts
    exported = exported_metric_names()
    for g in got:
        for r in g["rules"]:
            assert promql_metric_names(r["expr"]) <= exported, r["alert"]


def test_promtool_test_alerts():
    proc = subprocess.run([_promtool(), "test", "rules", ALERTS_TEST.name], cwd=ALERTS_TEST.parent,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_helm_dashboard_is_the_example_dashboard():
    cm = one(helm_objs(EVERYTHING), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["forescale-dashboard.json"]) == json.loads(DASHBOARD.read_text())
    assert (CHART / "files" / "forescale-dashboard.json").read_text() == DASHBOARD.read_text()


def test_helm_values_are_documented():
    """Every leaf of values.yaml sits under a comment or in a documented block (the chart's reference)."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    assert helm_objs() and values["image"]["repository"] == "ghcr.io/forescale/forescale"
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-zA-Z]\w*:", line):  # a top-level key: a comment right above it or its block
            block = lines[i - 1:i + 6]
            assert any(ln.strip().startswith("#") for ln in block), f"values.yaml: {line.strip()} undocumented"


# --------------------------------------------------------------------------
# chart defaults that fit real clusters (issue 24 item 5): mTLS, no fixed UID, opt-in NetworkPolicy, port 6000


def _pem(secret: dict, key: str) -> bytes:
    import base64

    return base64.b64decode(secret["data"][key])


def test_helm_chart_generated_mtls_certificates_chain_name_the_service_and_shake_hands(tmp_path):
    import socket
    import ssl
    import threading

    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    objs = helm_objs({"tls": {"source": "chart"}})  # generated by Helm (the default is cert-manager)
    server, client = one(objs, "Secret", "forescale-grpc-tls"), one(objs, "Secret", "forescale-keda-client-tls")
    assert server["metadata"]["namespace"] == "forescale" and client["metadata"]["namespace"] == "keda"
    ca = x509.load_pem_x509_certificate(_pem(server, "ca.crt"))
    assert _pem(client, "ca.crt") == _pem(server, "ca.crt")  # one CA signs both sides
    srv = x509.load_pem_x509_certificate(_pem(server, "tls.crt"))
    cli = x509.load_pem_x509_certificate(_pem(client, "tls.crt"))
    for cert in (srv, cli):
        cert.verify_directly_issued_by(ca)
    names = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert set(names) == {"forescale", "forescale.forescale", "forescale.forescale.svc",
                          "forescale.forescale.svc.cluster.local"}
    assert ExtendedKeyUsageOID.CLIENT_AUTH in cli.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # the deployment mounts the server Secret and asks for client certificates
    dep = one(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert _args_value(c["args"], "--tls-client-ca") == "/etc/forescale/tls/ca.crt"
    # KEDA's ClusterTriggerAuthentication hands the client Secret's keys to the trigger
    cta = one(objs, "ClusterTriggerAuthentication", "forescale-mtls")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in cta["spec"]["secretTargetRef"]}
    assert refs == {"caCert": ("forescale-keda-client-tls", "ca.crt"),
                    "tlsClientCert": ("forescale-keda-client-tls", "tls.crt"),
                    "tlsClientKey": ("forescale-keda-client-tls", "tls.key")}
    # a real mutual-TLS handshake on 127.0.0.1 with these files: the server requires the client certificate,
    # the client checks the server's name as KEDA dials it
    for name, secret in (("server", server), ("client", client)):
        for key in ("tls.crt", "tls.key", "ca.crt"):
            (tmp_path / f"{name}-{key}").write_bytes(_pem(secret, key))
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tmp_path / "server-ca.crt")
    sctx.load_cert_chain(tmp_path / "server-tls.crt", tmp_path / "server-tls.key")
    sctx.verify_mode = ssl.CERT_REQUIRED
    cctx = ssl.create_default_context(cafile=tmp_path / "client-ca.crt")
    cctx.load_cert_chain(tmp_path / "client-tls.crt", tmp_path / "client-tls.key")
    seen: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        port = lsock.getsockname()[1]

        def serve_one():
            conn, _ = lsock.accept()
            with sctx.wrap_socket(conn, server_side=True) as tls:
                seen.append(dict(x[0] for x in tls.getpeercert()["subject"])["commonName"])
                tls.sendall(b"ok")

        th = threading.Thread(target=serve_one, daemon=True)
        th.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with cctx.wrap_socket(raw, server_hostname="forescale.forescale.svc") as tls:
                assert tls.recv(2) == b"ok"
        th.join(10)
    assert seen == ["keda"]


def test_helm_cert_manager_certificates_from_a_given_issuer():
    values = {"tls": {"source": "cert-manager", "certManager": {"issuerRef": {"name": "internal-ca"}}}}
    objs = helm_objs(values)
    assert not [o for o in objs if o["kind"] == "ClusterIssuer"]  # the given issuer, not the chart's own CA
    assert not [o for o in objs if o["kind"] == "Secret"]  # cert-manager writes them
    srv, cli = one(objs, "Certificate", "forescale-grpc"), one(objs, "Certificate", "forescale-keda-client")
    assert srv["apiVersion"] == cli["apiVersion"] == "cert-manager.io/v1"
    assert srv["spec"]["secretName"] == "forescale-grpc-tls" and srv["metadata"]["namespace"] == "forescale"
    assert cli["spec"]["secretName"] == "forescale-keda-client-tls" and cli["metadata"]["namespace"] == "keda"
    assert "forescale.forescale.svc" in srv["spec"]["dnsNames"] and "server auth" in srv["spec"]["usages"]
    assert "client auth" in cli["spec"]["usages"]
    for cert in (srv, cli):
        assert cert["spec"]["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
        assert cert["spec"]["privateKey"] == {"rotationPolicy": "Always"}
    # the Deployment reads the Secret cert-manager writes; KEDA's side is the same ClusterTriggerAuthentication
    dep = one(objs, "Deployment")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["grpc-tls"]["secret"]["secretName"] == "forescale-grpc-tls"
    one(objs, "ClusterTriggerAuthentication", "forescale-mtls")


@pytest.mark.parametrize("values", [{}, EVERYTHING, {"tls": {"enabled": False}}])
def test_helm_pods_have_no_fixed_user_id(values):
    for obj in [*helm_objs(values), *rendered("scaler")]:
        for pod in pod_specs(obj):
            psc = pod["securityContext"]
            assert psc["runAsNonRoot"] is True
            assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(psc), oid(obj)  # OpenShift assigns them
            for c in containers(pod):
                assert "runAsUser" not in c.get("securityContext", {}), oid(obj)
            for v in pod.get("volumes", []):  # secrets stay readable by whatever UID runs the container
                mode = (v.get("secret") or v.get("projected") or {}).get("defaultMode")
                assert mode in (None, 0o444), (oid(obj), v["name"])


def test_helm_network_policy_is_opt_in_with_selectable_sources_and_ports():
    assert not [o for o in helm_objs() if o["kind"] == "NetworkPolicy"]
    peers = [{"namespaceSelector": {"matchLabels": {"team": "platform"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "keda-operator"}}}]
    values = {"networkPolicy": {"enabled": True, "grpcFrom": peers,
                                "metricsFrom": [{"podSelector": {"matchLabels": {"app": "vmagent"}}}],
                                "prometheus": {"to": [{"namespaceSelector": {}}], "port": 8428}},
              "serve": {"grpcPort": 7000}}
    np_ = one(helm_objs(values), "NetworkPolicy")
    for version in K8S_VERSIONS:
        _validate_builtin(np_, version)
    grpc, http = np_["spec"]["ingress"]
    assert grpc == {"from": peers, "ports": [{"port": 7000, "protocol": "TCP"}]}
    assert http["from"] == [{"podSelector": {"matchLabels": {"app": "vmagent"}}}]
    assert {"to": [{"namespaceSelector": {}}], "ports": [{"port": 8428, "protocol": "TCP"}]} in np_["spec"]["egress"]


def test_helm_state_volume_fits_the_state_cap_times_the_scaledobject_cap():
    # agreed with the server: at most 2,000 tracked ScaledObjects (scaler/limits.py), a state file capped at
    # 512 KiB: 2,000 x 512 KiB = 1,024,000 KiB = 1,000 MiB <= the 1 GiB emptyDir
    dep = one(helm_objs(), "Deployment")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["state"]["emptyDir"]["sizeLimit"] == "1Gi"
    assert 2000 * 512 * 1024 <= 1 << 30  # 1Gi
    kdep = one(rendered("scaler"), "Deployment", "forescale")
    assert {v["name"]: v for v in kdep["spec"]["template"]["spec"]["volumes"]}["state"]["emptyDir"]["sizeLimit"] == "1Gi"


def test_service_monitor_labels_are_documented_with_the_kube_prometheus_stack_example():
    values_text = (CHART / "values.yaml").read_text()
    assert "labels: {release: kube-prometheus-stack}" in values_text
    docs = (ROOT / "docs" / "deploying.md").read_text()
    assert "serviceMonitor.labels.release=kube-prometheus-stack" in docs
    sm = one(helm_objs({"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}), "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kps"


def test_the_grpc_port_is_6000_everywhere():
    from scaler.cli import main
    from scaler.scaledobject import DEFAULT_SCALER_ADDRESS
    from scaler.serve.server import ServerConfig
    from scaler.spec import GRPC_PORT

    assert GRPC_PORT == 6000 and ServerConfig().grpc_port == GRPC_PORT
    assert next(p for p in main.commands["serve"].params if p.name == "port").default == GRPC_PORT
    assert DEFAULT_SCALER_ADDRESS.endswith(":6000")
    svc = one(helm_objs(), "Service")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["grpc"] == 6000
    ksvc = one(rendered("scaler"), "Service", "forescale")
    assert {p["name"]: p["port"] for p in ksvc["spec"]["ports"]}["grpc"] == 6000
    for root in ("example", "overlays/tls"):
        for so in (o for o in rendered(root) if o["kind"] == "ScaledObject"):
            for t in so["spec"]["triggers"]:
                if t["type"] == "external":
                    assert t["metadata"]["scalerAddress"].endswith(":6000"), oid(so)
    docker = (DEPLOY / "docker" / "scaler.Dockerfile").read_text()
    assert "EXPOSE 6000 8080" in docker and '"--port", "6000"' in docker


# --------------------------------------------------------------------------
# images: built by the Dockerfiles under the names deploy/ references, named once (docs/deploying.md)


def test_images_referenced_are_the_documented_builds():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    readme = DEPLOY_DOC.read_text()
    builds = dict(re.findall(r"docker build -f (deploy/docker/[\w.-]+) -t ([\w./-]+:[\w.-]+) \.", readme))
    assert builds == {"deploy/docker/scaler.Dockerfile": f"ghcr.io/forescale/forescale:{version}",
                      "deploy/docker/probe.Dockerfile": f"ghcr.io/forescale/forescale-probe:{version}"}, builds
    for image in builds.values():
        assert f"docker push {image}" in readme
    used = {c["image"] for root in RENDER_ROOTS for o in rendered(root) for pod in pod_specs(o)
            for c in containers(pod)}
    used |= {c["image"] for o in helm_objs() for pod in pod_specs(o) for c in containers(pod)}
    ours = {i for i in used if "forescale" in i}
    assert ours == set(builds.values()), ours
