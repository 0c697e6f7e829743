"""``forescale tune --series-column ... --out DIR``: a CSV fleet, and the fleet options' bad inputs (exit 2)."""

from __future__ import annotations

import json

import pytest
import yaml

from scaler.fleet.workloads import shard
from scaler.spec import parse_metadata
from support.fleetcsv import FAST, invoke, write_fleet


def test_csv_fleet_writes_scaled_objects_with_placeholders(tmp_path):
    csv = write_fleet(tmp_path / "fleet.csv", {"chat": (2.5, 1.0, 0.0), "embed": (2.5, 3.0, 0.0),
                                              "new": (1.0, 1.0, 0.0)})
    out = tmp_path / "out"
    r = invoke("tune", str(csv), "--series-column", "team,service", "--out", str(out), "--shards", "3",
               "--scaler-address", "forescale-{shard}.forescale.svc:6000", *FAST)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "fleet.json").read_text())
    st = {e["workload"]: e["status"] for e in doc["workloads"]}
    assert st == {"ml-chat": "tuned", "ml-embed": "tuned", "ml-new": "not_tuned"}
    assert "not tuned ml-new: too short: 1.00 d of history, 2 d needed" in r.stdout
    so = yaml.safe_load((out / "ml-chat.yaml").read_text())
    md = so["spec"]["triggers"][0]["metadata"]
    # no namespace label: the ScaledObject goes to kubectl's namespace; its name is the other labels
    assert "namespace" not in so["metadata"] and so["metadata"]["name"] == "ml-chat"
    assert md["query"] == 'sum(rate(http_requests_total{team="ml",service="chat"}[2m]))'
    assert "# replace: your request rate" in (out / "ml-chat.yaml").read_text()
    spec, unknown = parse_metadata(md, name="ml-chat", namespace="default")
    assert unknown == () and spec.qps_per_replica == 10
    assert md["scalerAddress"] == f"forescale-{shard('', 'ml-chat', 3)}.forescale.svc:6000"
    # counts per minute became req/s: chat peaks at 193 req/s = 20 replicas of 10, so 12 h cost < 12 x 25
    # replica-hours (unconverted, 60x the rate, it would sit at the 100-replica cap: ~1,200); embed = chat x3
    assert doc["workloads"][0]["selection"]["replica_hours"] < 12 * 25

    # a workload of the fleet is tuned exactly as `forescale tune` tunes its series alone (grid + search)
    alone = tmp_path / "chat.csv"
    rows = [ln.split(",") for ln in csv.read_text().splitlines()[1:]]
    alone.write_text("timestamp,count\n" + "".join(f"{t},{c}\n" for t, _, svc, c in rows if svc == "chat"))
    r1 = invoke("tune", str(alone), "--json", str(tmp_path / "chat.json"), *FAST)
    assert r1.exit_code == 0, r1.output
    single_doc = json.loads((tmp_path / "chat.json").read_text())
    single, fleet_chat = single_doc["selection"], doc["workloads"][0]["selection"]
    # the same configurations: the grid and the headroom values searched for the target
    assert doc["workloads"][0]["configurations"] == len(single_doc["frontier"])
    for k in ("policy", "label", "knobs", "underprovisioned_fraction", "replica_hours", "cost_ratio", "met"):
        assert fleet_chat[k] == single[k], k

    # the same fleet as Ray tasks on a Ray cluster the command starts (and stops) itself: the same selections
    ray_out = tmp_path / "ray"
    r2 = invoke("tune", str(csv), "--series-column", "team,service", "--out", str(ray_out), "--shards", "3",
                "--scaler-address", "forescale-{shard}.forescale.svc:6000", "--ray", "local",
                *[a if a != "1" else "2" for a in FAST])
    assert r2.exit_code == 0, r2.output
    assert "(ray local, 0 from the cache)" in r2.stdout
    doc2 = json.loads((ray_out / "fleet.json").read_text())
    assert [e.get("selection") for e in doc2["workloads"]] == [e.get("selection") for e in doc["workloads"]]
    assert (ray_out / "ml-chat.yaml").read_text() == (out / "ml-chat.yaml").read_text()
    import ray

    assert not ray.is_initialized()  # the command shut its cluster down
    assert doc["workloads"][1]["selection"]["replica_hours"] > 2.5 * doc["workloads"][0]["selection"]["replica_hours"]


@pytest.mark.parametrize("args,fragment", [
    (["--ray", "local"], "--ray runs a fleet"),
    (["--by", "service", "--out", "X"], "--by needs --prometheus"),
    (["--series-column", "service"], "a fleet needs --out DIR"),
    (["--prometheus", "http://127.0.0.1:1", "--query", "q", "--by", "a b", "--out", "X"],
     "--by 'a b': accepted is a comma-separated list of label names"),
    (["--series-column", "region", "--out", "X"], "lacks region"),
    (["--series-column", "service", "--out", "X", "--report", "R"], "--report is for one series"),
    (["--series-column", "service", "--out", "X", "--shards", "2"], "several shards need {shard} in the address"),
    (["--prometheus", "http://127.0.0.1:1", "--query", "sum by (s) (r)", "--by", "s", "--out", "X"],
     "Prometheus query 'sum by (s) (r)' at http://127.0.0.1:1"),
])
def test_bad_fleet_input_exits_2_with_the_reason(tmp_path, args, fragment):
    csv = write_fleet(tmp_path / "f.csv", {"a": (0.1, 1.0, 0.0)})
    args = [a.replace("X", str(tmp_path / "out")).replace("R", str(tmp_path / "rep")) for a in args]
    src = [] if "--prometheus" in args else [str(csv)]
    r = invoke("tune", *src, *args, *FAST)
    assert r.exit_code == 2, r.output
    assert fragment in r.output and "Traceback" not in r.output
