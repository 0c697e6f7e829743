"""What forescale prints is a manifest: KEDA's schema accepts it, ``forescale check`` accepts it, and the scaler
runs what the replay ranked (the family table's one mapping, ``families.to_spec`` -> ``specwrite.to_metadata``)."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from forecaster.base import Series
from scaler.cli import main, render
from scaler.policy import PolicyParams
from scaler.replay import engine, families, variants
from scaler.serve.workload import Workload
from scaler.spec import parse_metadata
from support.paths import FIXTURES

T0 = 1_700_006_400  # a Wednesday 00:00 UTC
DAY = 86400.0


def schema() -> dict:
    crd = yaml.safe_load((FIXTURES / "keda" / "keda.sh_scaledobjects.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def invoke(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


@pytest.fixture(scope="module")
def run() -> engine.Result:
    """Every selectable family once (one knob value each), on a daily cycle with a quiet night (20 req/s)."""
    t = T0 + 60.0 * np.arange(int(3 * 1440))
    hour = (t % DAY) / 3600
    y = 20 + 173 / (1 + np.exp(-(hour - 8) * 6)) - 173 / (1 + np.exp(-(hour - 18) * 6))
    s = engine.Settings(cold_start_seconds=600, qps_per_replica=10, model="naive", history_seconds=1.5 * DAY,
                        span_seconds=1.5 * DAY, refit_seconds=7200, hpa_tolerance=0.05)
    grid = variants.Grid(reactive_headroom=(1.1,), quantiles=(0.9,), level_corrections=(1800.0,), headroom=(1.1,),
                         simple_quantiles=(0.9,), hybrid_floor_percentiles=(25.0,), envelope_windows=(3600.0,),
                         anchor_margins=(1.2,), window_band_quantiles=(),
                         families=(*families.SELECTABLE, "oracle"))
    return engine.run(engine.Trace("daily", Series(t, y, 60.0), "synthetic", "memory"), s, variants.variants(grid, s))


def test_every_familys_manifest_is_keda_valid_checks_and_means_its_knobs(run):
    seen = set()
    for p in run.points:
        if not p.selectable:
            continue
        seen.add(p.policy)
        md = render.metadata_for(p, run, server_address="http://prometheus:9090", query="sum(rate(x[2m]))")
        doc = render.manifest_for(p, run, md, name="llm", namespace="serving")
        text = render.manifest_yaml(doc, ["a comment"], notes=render.PLACEHOLDER_NOTES)
        so = yaml.safe_load(text)
        assert so == doc
        jsonschema.validate(so, schema())  # KEDA's own CRD schema
        # the emulated HPA's tolerance 0.05 is not Kubernetes' default: the manifest says it
        assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["tolerance"] == "0.05"
        r = invoke("check", "-", stdin=text)
        assert r.exit_code == 0 and "trigger 0 (external): ok" in r.stdout, r.output
        got = so["spec"]["triggers"][0]["metadata"]
        spec, unknown = parse_metadata(got, name="llm", namespace="serving")
        assert unknown == () and got["tuning"] == "off"
        base = render.base_spec(run, server_address="http://prometheus:9090", query="sum(rate(x[2m]))")
        base = replace(base, metric_name=spec.metric_name)  # derived from the ScaledObject's name
        assert spec == families.to_spec(p.variant, base, tolerance=0.05, extra=p.extra)
        # and the trigger block alone, already indented for spec.triggers, pastes into a ScaledObject
        block = render.render_metadata(md, ["pasted"])
        pasted = yaml.safe_load("spec:\n  scaleTargetRef: {name: llm}\n  triggers:\n" + block)
        assert pasted["spec"]["triggers"][0]["metadata"] == md
    assert seen == set(families.SELECTABLE)


def test_the_hybrid_manifest_makes_the_server_decide_as_the_replay_did(run):
    p = next(p for p in run.points if p.policy == "hybrid")
    v = p.variant
    # the floor: p25 of the history's rate is the 20 req/s night -> ceil(20 / 10) = 2 replicas of 10 req/s
    assert p.extra["floorReplicas"] == 2 and p.extra["minReplicaCount"] == 2
    md = render.metadata_for(p, run, server_address="http://prometheus:9090", query="q")
    doc = render.manifest_for(p, run, md, name="llm")
    assert doc["spec"]["minReplicaCount"] == 2 and md["floorReplicas"] == "2"
    spec, _ = parse_metadata(doc["spec"]["triggers"][0]["metadata"], name="llm", namespace="serving")
    wl = Workload("serving", "llm", spec, client=None, created=0.0, last_polled=0.0)
    # what policies.base_values + finish replay for this variant: decide with the floor of 2 x 10 req/s added
    assert wl.params() == PolicyParams(mode="forecastAndScale", lead_seconds=run.lead.seconds, quantile=v.quantile,
                                       qps_per_replica=10.0, headroom=v.headroom, hpa_tolerance=0.05,
                                       level_correction_seconds=v.level_correction_seconds, floor_qps=20.0)


MIXED = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: llm, namespace: serving}
spec:
  scaleTargetRef: {name: llm}
  triggers:
    - type: prometheus
      metadata: {serverAddress: "http://prometheus:9090", query: "sum(rate(x[2m]))", threshold: "10"}
    - type: external
      metadata:
        scalerAddress: "forescale.forescale.svc.cluster.local:6000"
        serverAddress: "http://prometheus:9090"
        query: "sum(rate(x[2m]))"
        qpsPerReplica: "10"
    - type: cron
      metadata: {timezone: Etc/UTC, start: "0 8 * * *", end: "0 18 * * *", desiredReplicas: "4"}
    - type: external
      metadata: {scalerAddress: "other-scaler.keda:9000", anything: "goes"}
"""


def test_check_reads_stdin_and_leaves_other_scalers_triggers_alone():
    jsonschema.validate(yaml.safe_load(MIXED), schema())
    r = invoke("check", "-", stdin=MIXED)
    assert r.exit_code == 0, r.output
    assert "<stdin>: ScaledObject serving/llm: trigger 1 (external): ok" in r.stdout
    assert "trigger 3 (external): another external scaler's (scalerAddress other-scaler.keda:9000" in r.stdout
    assert "trigger 0" not in r.output and "trigger 2" not in r.output  # prometheus and cron: KEDA's own


def test_check_names_each_problems_document_and_path():
    bad = MIXED.replace('qpsPerReplica: "10"', 'qpsPerReplica: "10"\n        quantile: "1.5"\n        colour: blue')
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n" + bad
    r = invoke("check", "-", stdin=text)
    assert r.exit_code == 2
    assert ("<stdin>: ScaledObject serving/llm: trigger 1 (external): error parsing forescale metadata: metadata key "
            "'quantile': got '1.5'; accepted: a number strictly between 0 and 1, e.g. 0.9 -- document 2, "
            "spec.triggers[1].metadata.quantile") in r.stderr
    assert "unknown to forescale, ignored -- document 2, spec.triggers[1].metadata.colour" in r.stderr
    assert "1 of 1 trigger(s) or object(s) rejected" in r.stderr


def test_floor_replicas_is_a_whole_number_of_replicas():
    base = {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "10"}
    assert parse_metadata({**base, "floorReplicas": "3"})[0].floor_replicas == 3
    spec, _ = parse_metadata(base)
    assert spec.floor_replicas == 0 and spec.tuning == "auto"
    assert parse_metadata({**base, "floorReplicas": "3"})[0].tuning == "off"  # a policy knob: tuning off
    for bad in ("1.5", "-1", "lots", "10001"):
        with pytest.raises(ValueError, match="floorReplicas.*a whole number of replicas in \\[0, 10000\\]"):
            parse_metadata({**base, "floorReplicas": bad})


# --------------------------------------------------------------------------- backtest --advise: a plan


def _yaml_docs(stdout: str) -> list[tuple[str, str]]:
    """(heading comment, YAML text) of every manifest printed after '# --advise'."""
    out, cur, head = [], None, ""
    for line in stdout.splitlines() + [""]:
        if line.startswith("# --advise"):
            cur, head = [], line
        elif cur is not None and (line.strip() == "" or line.startswith(("data:", "wrote"))):
            out.append((head, "\n".join(cur)))
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def test_advise_searches_the_knobs_and_prints_the_pick_and_the_runner_up(tmp_path):
    from support.traces import write_daily

    csv = write_daily(tmp_path / "daily.csv", days=3)
    out = tmp_path / "o.json"
    r = invoke("backtest", str(csv), "--model", "seasonal_naive", "--span", "1d", "--history", "1d", "--refit", "2h",
               "--qps-per-replica", "10", "--cold-start", "600", "--no-progress", "--service-seconds", "0.2",
               "--advise", "--target-miss", "0.005", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    a = doc["advice"]
    docs = _yaml_docs(r.stdout)
    assert [h.split(":")[0] for h, _ in docs] == ["# --advise pick", "# --advise runner-up"]
    assert f"# --advise pick: {a['pick']} (" in docs[0][0] and f"# --advise runner-up: {a['runner_up']} (" in docs[1][0]
    by = {o["policy"]: o for o in a["options"]}
    for (_, text), name in zip(docs, (a["pick"], a["runner_up"])):
        so = yaml.safe_load(text)
        jsonschema.validate(so, schema())
        assert so == by[name]["manifest"]  # the JSON carries what is printed
        if so["spec"]["triggers"][0]["type"] == "external":
            assert invoke("check", "-", stdin=text).exit_code == 0
    # the search covers the family default: an option is never costlier than its default row when that meets
    # the SLO (the backtest table's reactive and predictive, replayed in the same world)
    for fam in ("reactive", "predictive"):
        row = doc["policies"][fam]
        if row["underprovisioned_fraction"] <= 0.005:
            assert by[fam]["cost"] <= row["replica_hours"] + 1e-9
        assert by[fam]["configurations_tried"] >= 6
    # hybrid's default (floor p10 = 2 replicas of the 20 req/s night, headroom 1) already meets 0.5 % on this trace
    # and every other floor or headroom costs more: the option is the backtest's own hybrid row, same numbers
    assert by["hybrid"]["detail"] == "floor 2 replicas (p10 of the history), headroom 1"
    assert by["hybrid"]["underprovisioned_fraction"] == pytest.approx(doc["policies"]["hybrid"]["underprovisioned_fraction"])
    assert by["hybrid"]["cost"] == pytest.approx(doc["policies"]["hybrid"]["replica_hours"])
    assert by["hybrid"]["manifest"]["spec"]["minReplicaCount"] == 2
    assert by["hybrid"]["manifest"]["spec"]["triggers"][0]["metadata"]["floorReplicas"] == "2"
    # scheduled: KEDA cron windows in UTC, each hour's replicas from one lead time (705 s -> 12 min) early
    cron = by["scheduled"]["manifest"]["spec"]["triggers"]
    assert {t["type"] for t in cron} == {"cron"} and len(cron) == 24
    assert cron[8]["metadata"] == {"timezone": "Etc/UTC", "start": "48 7 * * *", "end": "0 9 * * *",
                                   "desiredReplicas": cron[8]["metadata"]["desiredReplicas"]}
    # the why is this trace's numbers: its peak of 193 req/s = ceil(193 / 10) = 20 replicas of 10
    assert "the demand peaks at 193 req/s (20 replicas of 10)" in a["paragraph"]
    assert "its quiet hours run at 20 req/s" in a["paragraph"]


# --------------------------------------------------------------------------- tune in the cluster's world


def test_tune_with_a_node_pool_ranks_on_the_numbers_backtest_reports_in_that_pool(tmp_path):
    from support.traces import write_daily

    csv = write_daily(tmp_path / "daily.csv", days=3)
    common = ["--model", "seasonal_naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica",
              "10", "--cold-start", "600", "--no-progress", "--gpus-per-node", "4", "--node-provision-seconds", "300"]
    r = invoke("tune", str(csv), *common, "--jobs", "1", "--target-miss", "0.01", "--json", str(tmp_path / "t.json"))
    assert r.exit_code == 0, r.output
    b = invoke("backtest", str(csv), *common, "--json", str(tmp_path / "b.json"))
    assert b.exit_code == 0, b.output
    tuned, bt = json.loads((tmp_path / "t.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    plain = invoke("tune", str(csv), *common[:-4], "--jobs", "1", "--target-miss", "0.01", "--json",
                   str(tmp_path / "p.json"))
    assert plain.exit_code == 0, plain.output
    flat = json.loads((tmp_path / "p.json").read_text())
    for fam in ("reactive", "predictive"):
        # the family default of tune's frontier (the backtest's row) has the backtest's numbers in the same pool ...
        world = next(d for d in tuned["frontier"] if d["policy"] == fam and d["default"])
        assert world["underprovisioned_fraction"] == pytest.approx(bt["policies"][fam]["underprovisioned_fraction"])
        # ... and a new node takes 300 s before the 600 s start: more is missed than in the plain replay
        alone = next(d for d in flat["frontier"] if d["policy"] == fam and d["default"])
        assert world["underprovisioned_fraction"] > alone["underprovisioned_fraction"]
    sel = tuned["selection"]
    chosen = next(d for d in tuned["frontier"] if d["label"] == sel["label"])
    assert sel["underprovisioned_fraction"] == chosen["underprovisioned_fraction"]
    assert sel["met"] is (sel["underprovisioned_fraction"] <= 0.01)


def test_check_accepts_a_scaledobject_with_only_kedas_triggers_and_says_so():
    only_keda = MIXED.split("    - type: external\n      metadata:\n        scalerAddress: \"forescale")[0]
    r = invoke("check", "-", stdin=only_keda)
    assert r.exit_code == 0, r.output
    assert "ScaledObject serving/llm: no forescale trigger (prometheus): KEDA's alone, nothing to check" in r.stdout
    r = invoke("check", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert r.exit_code == 2 and "no ScaledObject" in r.stderr
    # a bounded read: megabytes on stdin are refused by size, not parsed (4 MiB + 1 byte here)
    r = invoke("check", "-", stdin="#" * (4 * 1024 * 1024 + 1))
    assert r.exit_code == 2 and "<stdin>: larger than 4 MiB" in r.stderr and "Traceback" not in r.output


def test_a_fleets_files_are_keda_valid_scaledobjects_that_check_accepts(tmp_path):
    t = T0 + 60 * np.arange(int(2.5 * 1440))
    h = (t % DAY) / 3600
    qps = 20 + 173 / (1 + np.exp(-(h - 8) * 6)) - 173 / (1 + np.exp(-(h - 18) * 6))
    with open(tmp_path / "fleet.csv", "w") as f:
        f.write("timestamp,service,qps\n")
        for name, scale in (("chat", 1.0), ("embed", 3.0)):
            f.writelines(f"{a},{name},{scale * b:.3f}\n" for a, b in zip(t, qps))
    out = tmp_path / "out"
    r = invoke("tune", str(tmp_path / "fleet.csv"), "--series-column", "service", "--out", str(out), "--model",
               "seasonal_naive", "--target-miss", "0.005", "--span", "12h", "--history", "1d", "--refit", "2h",
               "--qps-per-replica", "10", "--jobs", "1", "--no-progress")
    assert r.exit_code == 0, r.output
    entries = json.loads((out / "fleet.json").read_text())["workloads"]
    assert [e["status"] for e in entries] == ["tuned", "tuned"]
    for e in entries:
        text = (out / e["file"]).read_text()
        so = yaml.safe_load(text)
        jsonschema.validate(so, schema())
        assert so == e["selection"]["manifest"]  # fleet.json carries each file's ScaledObject
        assert so["spec"]["triggers"][0]["metadata"]["tuning"] == "off"
        # the world each workload was ranked in, for backtest --scaledobject (issue 36 item 5)
        assert so["metadata"]["annotations"]["forescale.io/replay"] == \
            "--span 12h --qps-per-replica 10 --cold-start 180 --refit 2h --history 1d --model seasonal_naive"
        chk = invoke("check", "-", stdin=text)
        assert chk.exit_code == 0 and "trigger 0 (external): ok" in chk.stdout, chk.output
