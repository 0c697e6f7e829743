"""``forescale backtest --scaledobject``: manifests replayed as policies, bad manifests, the shipped examples."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scaler.cli import main

REPO = Path(__file__).resolve().parents[2]
FAST = ("--model", "naive", "--span", "6h", "--history", "1d", "--no-progress", "--qps-per-replica", "10")
CONTRACT = {"underprovisioned_fraction", "violation_minutes", "replica_hours", "scale_ups", "peak_replicas",
            "missed_requests", "cold_start_requests", "cost_ratio", "note"}


def invoke(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, ["backtest", *args], input=stdin, catch_exceptions=False)


def daily(path: Path, days: float = 3.0) -> Path:
    from support.traces import write_daily

    return write_daily(path, days)


FORESCALE = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: pred-so, namespace: inference}
spec:
  scaleTargetRef: {name: llm}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior: {}
  triggers:
    - type: external
      metadata:
        scalerAddress: "forescale.forescale.svc:6000"
        serverAddress: "http://prometheus:9090"
        query: "sum(rate(x[2m]))"
        qpsPerReplica: "10"
        model: "naive"
"""
PROMETHEUS = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: prom-so}
spec:
  scaleTargetRef: {name: llm}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior: {}
  triggers:
    - type: prometheus
      name: rate
      metadata: {serverAddress: "http://prometheus:9090", query: "sum(rate(x[2m]))", threshold: "10"}
"""


def test_a_multi_document_file_replays_each_scaledobject_as_a_policy(tmp_path):
    tr = daily(tmp_path / "t.csv")
    so = tmp_path / "so.yaml"
    so.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped}\n---" + FORESCALE + "---" + PROMETHEUS)
    out, ts, rep = tmp_path / "r.json", tmp_path / "ts.csv", tmp_path / "report"
    res = invoke(str(tr), *FAST, "--policies", "reactive,predictive", "--scaledobject", str(so),
                 "--trigger-series", "rate=observed", "--json", str(out), "--timeseries", str(ts), "--report", str(rep))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    pols = doc["policies"]
    assert list(pols) == ["reactive", "predictive", "pred-so", "prom-so"]
    assert CONTRACT <= set(pols["pred-so"]) and CONTRACT <= set(pols["prom-so"])
    assert "pred-so" in res.output and "prom-so" in res.output
    # the same configuration as the families, spelled as a manifest, replays to the same numbers: forescale's
    # trigger with its metadata defaults and model naive is the predictive family (--model naive, qps 10);
    # a prometheus trigger on the trace's own rate with threshold = qps per replica is reactive KEDA
    keys = ("underprovisioned_fraction", "violation_minutes", "replica_hours", "scale_ups", "peak_replicas")
    assert [pols["pred-so"][k] for k in keys] == [pols["predictive"][k] for k in keys]
    assert [pols["prom-so"][k] for k in keys] == [pols["reactive"][k] for k in keys]
    with open(ts) as f:
        head = next(csv.reader(f))
    assert {"pred-so_ready", "pred-so_starting", "prom-so_ready", "prom-so_planned_qps"} <= set(head)
    page = (rep / "index.html").read_text()
    assert "pred-so" in page and "prom-so" in page


def test_stdin_a_list_and_a_repeated_flag(tmp_path):
    tr = daily(tmp_path / "t.csv")
    so = tmp_path / "p.yaml"
    so.write_text(PROMETHEUS)
    # what `kubectl get scaledobjects -o yaml` prints: a List, with status and server-side metadata
    listed = {"apiVersion": "v1", "kind": "List", "items": [dict(yaml.safe_load(FORESCALE), status={
        "conditions": [{"type": "Ready", "status": "True"}]})]}
    listed["items"][0]["metadata"].update(uid="0d5c", resourceVersion="42", finalizers=["finalizer.keda.sh"])
    res = invoke(str(tr), *FAST, "--policies", "reactive", "--scaledobject", "-", "--scaledobject", str(so),
                 "--trigger-series", "rate=observed", "--json", "-", stdin=yaml.safe_dump(listed))
    assert res.exit_code == 0, res.output
    assert list(json.loads(res.stdout)["policies"]) == ["reactive", "pred-so", "prom-so"]


@pytest.mark.parametrize("patch, needles", [
    # a behavior field the replay does not know
    (lambda d: d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"].update(scaleUp={"foo": 1}),
     ["spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.foo", "document 1", "pred-so"]),
    # a spec field KEDA does not know (its schema, strict as kubectl apply)
    (lambda d: d["spec"].update(paused=True), ["spec.paused: unknown field", "kubectl apply refuses it"]),
    # a trigger type the replay cannot evaluate
    (lambda d: d["spec"]["triggers"].append({"type": "kafka", "metadata": {"topic": "t"}}),
     ["spec.triggers[1].type 'kafka'", "accepted"]),
    # a metadata key that is not forescale's
    (lambda d: d["spec"]["triggers"][0]["metadata"].update(bogusKey="1"), ["spec.triggers[0].metadata.bogusKey"]),
    # a formula outside expr's supported subset
    (lambda d: (d["spec"]["triggers"][0].update(name="t0"),
                d["spec"]["advanced"].update(scalingModifiers={"formula": "t0 ?? 1", "target": "1"})),
     ["scalingModifiers.formula", "'??'"]),
    # KEDA's formula reads named triggers only (the replay's own name trigger0 is not one)
    (lambda d: d["spec"]["advanced"].update(scalingModifiers={"formula": "trigger0 + 1", "target": "1"}),
     ["spec.advanced.scalingModifiers.formula: unknown name 'trigger0'", "give the triggers names"]),
    # the name of a policy of the table
    (lambda d: d["metadata"].update(name="reactive"), ["'reactive' has the name of a policy", "rename it"]),
])
def test_a_field_outside_what_the_replay_supports_exits_2_naming_it(tmp_path, patch, needles):
    doc = yaml.safe_load(FORESCALE)
    patch(doc)
    so = tmp_path / "bad.yaml"
    so.write_text(yaml.safe_dump(doc))
    res = invoke(*FAST, "--scaledobject", str(so))
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for n in needles:
        assert n in res.output, (n, res.output)


@pytest.mark.parametrize("text, needles", [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", ["no ScaledObject", "1 document"]),
    ("spec: [unclosed\n", ["not valid YAML", "line"]),
])
def test_files_without_a_replayable_scaledobject_exit_2(tmp_path, text, needles):
    so = tmp_path / "x.yaml"
    so.write_text(text)
    res = invoke(*FAST, "--scaledobject", str(so))
    assert res.exit_code == 2 and all(n in res.output for n in needles), res.output


def test_a_prometheus_trigger_without_a_series_exits_2_naming_the_option(tmp_path):
    so = tmp_path / "p.yaml"
    so.write_text(PROMETHEUS)
    tr = str(daily(tmp_path / "t.csv"))
    res = invoke(tr, *FAST, "--policies", "reactive", "--scaledobject", str(so))
    assert res.exit_code == 2 and "--trigger-series rate=" in res.output and "prom-so" in res.output, res.output
    # and a series no trigger reads
    res = invoke(tr, *FAST, "--scaledobject", str(so), "--trigger-series", "rate=observed", "--trigger-series",
                 "queue=observed")
    assert res.exit_code == 2 and "--trigger-series queue" in res.output and "prom-so/rate" in res.output, res.output


def test_the_shipped_examples_replay(tmp_path):
    # deploy/example: the inference ScaledObject (prophet, 1 pod per 120 s down, fallback, min 1, max 8) and the
    # placeholder one (two forescale triggers and a scalingModifiers formula, min 0, max 8)
    from support.traces import T0

    tr = daily(tmp_path / "t.csv", days=3.0)
    out = tmp_path / "r.json"
    # the third morning, 06:00 .. 10:00: the rate ramps from 20 to 193 req/s around 08:00
    res = invoke(str(tr), "--sim-start", str(T0 + 2 * 86400 + 6 * 3600), "--span", "4h", "--history", "2d", "--no-progress", "--qps-per-replica", "4",
                 "--policies", "reactive", "--scaledobject", str(REPO / "deploy/example/scaledobject.yaml"),
                 "--scaledobject", str(REPO / "deploy/example/placeholder.yaml"), "--json", str(out))
    assert res.exit_code == 0, res.output
    pols = json.loads(out.read_text())["policies"]
    inf, ph = pols["llm-inference"], pols["llm-inference-placeholder"]
    # the morning needs up to ceil(193 / 4) = 49 replicas: the example's maxReplicaCount 8 caps it (8 x 4 = 32
    # req/s of 193 served at the top: most requests missed), and 20 / 4 = 5 before the ramp
    assert inf["peak_replicas"] == 8 and inf["underprovisioned_fraction"] > 0.5
    assert inf["replica_hours"] >= 4 * 5  # never below the 5 the night needs over the 4 h
    # placeholders for the growth the next T_node = 420 s brings: some during the ramp, capped at 8
    assert 1 <= ph["peak_replicas"] <= 8
    assert "formula 'ahead - pods > 0 ? ahead - pods : 0'" in ph["note"]


def test_a_prometheus_trigger_has_its_query_fetched_from_prometheus(prometheus, tmp_path):
    # the traffic and the trigger's own query come from a real Prometheus (backfilled by the fixture); the
    # trigger's query is the request rate itself, so the replayed ScaledObject is reactive KEDA reading
    # Prometheus' rate[2m] samples instead of the trace's 2-minute mean: the same cost to within 10 %
    q = 'sum(rate(forescale_requests_total{job="llm"}[2m]))'
    doc = yaml.safe_load(PROMETHEUS)
    doc["spec"]["triggers"][0]["metadata"]["query"] = q
    so = tmp_path / "p.yaml"
    so.write_text(yaml.safe_dump(doc))
    end = prometheus.end_at
    out = tmp_path / "r.json"
    res = invoke("--prometheus", prometheus.url, "--query", q, "--start", str(end - 3 * 86400), "--end", str(end),
                 *FAST, "--policies", "reactive", "--scaledobject", str(so), "--json", str(out))
    assert res.exit_code == 0, res.output
    pols = json.loads(out.read_text())["policies"]
    r, p = pols["reactive"]["replica_hours"], pols["prom-so"]["replica_hours"]
    assert p > 0 and abs(p - r) <= 0.1 * r, (p, r)


def test_the_test_manifests_and_the_examples_are_valid_for_kedas_crd():
    import jsonschema

    crd = yaml.safe_load((REPO / "tests/fixtures/keda/keda.sh_scaledobjects.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    docs = [yaml.safe_load(FORESCALE), yaml.safe_load(PROMETHEUS)]
    for f in ("deploy/example/scaledobject.yaml", "deploy/example/placeholder.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO / f).read_text()) if d and d.get("kind") == "ScaledObject"]
    assert len(docs) == 4
    for d in docs:
        jsonschema.validate(d, schema)
