"""``backtest --scaledobject`` with a forescale trigger that sets ``eventsFile``: the path is one in the scaler's pod,
so the replay reads ``--events-map PATH=FILE``, else ``--events``, else PATH itself when it is a file here, else
exits 2 naming the field and what is accepted; the events then apply to the trigger as the server applies them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from scaler.cli import main
from support.traces import write_daily

FAST = ("--model", "naive", "--span", "6h", "--history", "1d", "--no-progress", "--qps-per-replica", "10")
MOUNT = "/etc/forescale/events.csv"  # where the ConfigMap would be mounted in the scaler's pod (not a file here)
# the trace: 3 days of write_daily from 2023-11-15 00:00 UTC; the span is its last 6 h, 2023-11-17 18:00 .. 24:00.
# A floor of 300 req/s (above the ramp's 193 req/s peak) from 18:30 to 20:00.
EVENTS = "name,start,end,multiplier,floor_qps\nlaunch,2023-11-17T18:30:00Z,2023-11-17T20:00:00Z,,300\n"


def manifest(path: Path, events_file: str = MOUNT, max_replicas: int = 100) -> Path:
    path.write_text(f"""
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {{name: pred-so}}
spec:
  scaleTargetRef: {{name: llm}}
  maxReplicaCount: {max_replicas}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior: {{}}
  triggers:
    - type: external
      metadata:
        scalerAddress: "forescale.forescale.svc:6000"
        serverAddress: "http://prometheus:9090"
        query: "sum(rate(x[2m]))"
        qpsPerReplica: "10"
        model: "naive"
        eventsFile: "{events_file}"
""")
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, ["backtest", *args], catch_exceptions=False)


def test_events_file_not_here_exits_2_naming_the_field_and_the_options(tmp_path):
    tr, so = write_daily(tmp_path / "t.csv", 3.0), manifest(tmp_path / "so.yaml")
    r = invoke(str(tr), *FAST, "--policies", "reactive", "--scaledobject", str(so))
    assert r.exit_code == 2
    assert (f"so.yaml document 1 (ScaledObject 'pred-so'): spec.triggers[0].metadata.eventsFile '{MOUNT}' is not a "
            "file here") in r.output
    assert "accepted: --events FILE" in r.output and f"--events-map {MOUNT}=FILE" in r.output
    assert "Traceback" not in r.output
    ev = tmp_path / "ev.csv"
    ev.write_text(EVENTS)
    r = invoke(str(tr), *FAST, "--policies", "reactive", "--scaledobject", str(so), "--events-map", f"/other.csv={ev}")
    assert r.exit_code == 2 and "--events-map /other.csv: no forescale trigger" in r.output and repr(MOUNT) in r.output
    r = invoke(str(tr), *FAST, "--policies", "reactive", "--scaledobject", str(so), "--events-map", "nonsense")
    assert r.exit_code == 2 and "accepted is PATH=FILE" in r.output
    # a floor the ScaledObject cannot reach: maxReplicaCount 20 x qpsPerReplica 10 = 200 < 300
    small = manifest(tmp_path / "small.yaml", max_replicas=20)
    r = invoke(str(tr), *FAST, "--policies", "reactive", "--scaledobject", str(small), "--events", str(ev))
    assert r.exit_code == 2 and "floor_qps 300 is above maxReplicaCount x qpsPerReplica = 200" in r.output


def test_the_trigger_applies_its_events_as_the_family_does(tmp_path):
    tr, so = write_daily(tmp_path / "t.csv", 3.0), manifest(tmp_path / "so.yaml")
    ev = tmp_path / "ev.csv"
    ev.write_text(EVENTS)
    docs = {}
    for how, extra in (("--events", ("--events", str(ev))), ("--events-map", ("--events-map", f"{MOUNT}={ev}")),
                       ("the path", ())):
        so_here = so if extra else manifest(tmp_path / "here.yaml", events_file=str(ev))  # eventsFile a file here
        out = tmp_path / f"{how.strip('-').replace(' ', '_')}.json"
        r = invoke(str(tr), *FAST, "--policies", "reactive,predictive", "--scaledobject", str(so_here), *extra,
                   "--json", str(out))
        assert r.exit_code == 0, r.output
        docs[how] = json.loads(out.read_text())["policies"]
    pols = docs["--events"]
    # KEDA asks at every HPA sync (15 s) in [18:30 - L, 20:00], L = 180 + 105 = 285 s: 18:25:15 .. 20:00:00,
    # 5685 / 15 + 1 = 380 decisions at the floor (above the ramp: the event sets the value at every one)
    assert pols["pred-so"]["reasons"]["event"] == 380
    # the trigger with --events is the predictive family with --events (same metadata defaults, model naive)
    keys = ("underprovisioned_fraction", "violation_minutes", "replica_hours", "scale_ups", "peak_replicas", "reasons")
    assert [pols["pred-so"][k] for k in keys] == [pols["predictive"][k] for k in keys]
    assert "eventsFile /etc/forescale/events.csv read from --events (1 events)" in pols["pred-so"]["note"]
    # the same events through the mapping, or the path itself: the same replay
    for how in ("--events-map", "the path"):
        assert [docs[how]["pred-so"][k] for k in keys] == [pols["pred-so"][k] for k in keys], how
    assert f"read from {ev}" in docs["--events-map"]["pred-so"]["note"]
    # the floor costs replica-hours: 300 req/s = 30 replicas for 1.5 h against the ramp's ~20 (x 10 req/s)
    assert docs["--events"]["pred-so"]["replica_hours"] > docs["--events"]["reactive"]["replica_hours"] + 10
