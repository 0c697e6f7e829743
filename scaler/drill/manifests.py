"""What the drill applies and what it hands the replay: the trace CSV, the two cache modes' ScaledObjects, their
Deployments, and the same ScaledObjects uncompressed for ``forescale backtest --scaledobject``."""

from __future__ import annotations

import copy
import csv
from datetime import datetime, timezone
from pathlib import Path

import yaml

from .cluster import GPU_NODE_LABELS, NODE_NAME
from .config import READY_ANNOTATION
from .scenarios import STEP, Scenario, compress

NAMESPACE = "drill"
MODES = {"live": False, "cached": True}  # the ScaledObject's suffix -> useCachedMetrics


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_trace(sc: Scenario, path: Path) -> Path:
    """``timestamp,qps`` per ``STEP`` interval, history and span."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "qps"])
        for t, y in zip(sc.times, sc.rates):
            w.writerow([iso(float(t)), f"{float(y):.6g}"])
    return path


def requests_query(scenario: str) -> str:
    return f'sum(rate(drill_requests_total{{scenario="{scenario}"}}[2m]))'


def observed_query(scenario: str) -> str:
    return f'drill_observed_rate{{scenario="{scenario}"}}'


def for_mode(sc: Scenario, mode: str, *, scaler: str | None, prometheus: str | None) -> dict:
    """The scenario's ScaledObject for one cache mode (uncompressed), pointed at the drill's forescale and
    Prometheus (``None``: left as written, for the replay, which reads neither)."""
    m = copy.deepcopy(sc.manifest)
    name = f"{m['metadata']['name']}-{mode}"
    m["metadata"] = {**m["metadata"], "name": name, "namespace": NAMESPACE}
    m["spec"]["scaleTargetRef"] = {**m["spec"]["scaleTargetRef"], "name": name}
    for t in m["spec"]["triggers"]:
        t["useCachedMetrics"] = MODES[mode]
        meta = t.setdefault("metadata", {})
        if t["type"] == "external":
            if scaler:
                meta["scalerAddress"] = scaler
            if prometheus:
                meta["serverAddress"] = prometheus
            meta["query"] = requests_query(sc.name)
        elif t["type"] == "prometheus":
            if prometheus:
                meta["serverAddress"] = prometheus
            meta["query"] = observed_query(sc.name)
    return m


def deployment(name: str, replicas: int, cold_start_seconds: float, k: float) -> dict:
    """The scale target: pods bound to the KWOK GPU node (no scheduler), Ready ``cold_start_seconds / k`` after
    they are created (KWOK's pod-ready stage reads the annotation)."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {READY_ANNOTATION: f"{cold_start_seconds / k:.3f}s"}},
                                  "spec": {"nodeName": NODE_NAME, "nodeSelector": dict(GPU_NODE_LABELS),
                                           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                            "effect": "NoSchedule"}],
                                           "terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "model", "image": "drill/model-server:0",
                                                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def applied(sc: Scenario, k: float, scaler: str, prometheus: str) -> list[dict]:
    """Both modes' ScaledObjects as the drill applies them (compressed by ``k``)."""
    return [compress(for_mode(sc, mode, scaler=scaler, prometheus=prometheus), k) for mode in MODES]


def write_replay_manifest(sc: Scenario, path: Path) -> Path:
    docs = [for_mode(sc, mode, scaler=None, prometheus=None) for mode in MODES]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def backtest_argv(sc: Scenario, trace: Path, manifest: Path, json_path: Path, series_path: Path) -> list[str]:
    """``forescale backtest`` of the very same manifests on the very same trace."""
    argv = [str(trace), "--scaledobject", str(manifest), "--sim-start", iso(sc.span_start),
            "--span", f"{int(sc.span_seconds)}s", "--step", f"{int(STEP)}s", "--cold-start", f"{sc.cold_start_seconds:g}",
            "--qps-per-replica", f"{sc.qps_per_replica:g}", "--policies", "reactive", "--history", "2d",
            "--json", str(json_path), "--timeseries", str(series_path), "--no-progress"]
    for name in sc.extra_series:
        argv += ["--trigger-series", f"{name}=observed"]
    for ev in sc.events:
        argv += ["--scenario", ev.replay_spec()]
    return argv
