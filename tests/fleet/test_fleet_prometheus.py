"""A fleet of 20 workloads from one query on a real Prometheus, through the command line.

The 20 series are cut from the real traces (WorldCup98 per minute, ServeGen
per 10 min, NYC taxi per 30 min, three companies' tweet counts per 5 min),
each ending at a different point of its trace (a phase shift) and scaled
(x0.5 .. x4), backfilled as counters scraped every 30 s under
``namespace``/``service`` labels: 17 of two and a half days, 2 of 1.2 days
(too short) and one constant rate (too flat). Cheap settings (seasonal_naive,
12 h simulated) keep it short; the code path is the fleet's own.
"""

from __future__ import annotations

import csv
import json
import subprocess
import time

import jsonschema
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from support import promfixture as pf
from support.paths import FIXTURES, TRACES
from scaler.cli import main
from scaler.fleet.workloads import fetch
from scaler.prom import PrometheusClient
from scaler.spec import PrometheusTarget, parse_metadata

FLEET_QUERY = "sum by (namespace, service) (rate(fleet_requests_total[2m]))"
SOURCES = [TRACES / "worldcup98" / "per_minute.csv", TRACES / "servegen_m-small" / "per_10min.csv",
           TRACES / "nab_nyc_taxi" / "per_30min.csv", TRACES / "nab_tweets" / "AMZN_per_5min.csv",
           TRACES / "nab_tweets" / "FB_per_5min.csv", TRACES / "nab_tweets" / "GOOG_per_5min.csv"]
LONG, SHORT = 2.5, 1.2  # days
STEP = 60.0


def _cut(src, dst, drop_rows: int) -> None:
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    with open(dst, "w", newline="") as out:
        w = csv.writer(out)
        w.writerow(rows[0][:2])
        w.writerows(r[:2] for r in rows[1:len(rows) - drop_rows])


@pytest.fixture(scope="module")
def fleet_prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet-traces")
    now = float(int(time.time()))
    end_at = now - pf.END_OFFSET_S
    series = []
    for i in range(19):
        src = SOURCES[i % len(SOURCES)]
        cut = tmp / f"w{i}.csv"
        _cut(src, cut, drop_rows=37 * i)  # each ends at another point of its trace
        tr = pf.trace_to_samples(cut, end_at=end_at, scrape_interval=30.0, days=SHORT if i >= 17 else LONG)
        scale = (0.5, 1.0, 2.0, 4.0)[i % 4]
        series.append(pf.SeriesSpec("fleet_requests_total", {"namespace": ("team-a", "team-b")[i % 2],
                                                             "service": f"svc-{i:02d}"}, "counter",
                                    tr.timestamps, tr.values * scale))
    t = pf.sample_times(end_at - LONG * 86400, end_at, 30.0)
    series.append(pf.SeriesSpec("fleet_requests_total", {"namespace": "team-a", "service": "flat"}, "counter",
                                t, pf.counter_from_rate(t, 7.0)))
    server = pf.PrometheusServer(series, base_dir=tmp).start()
    try:
        yield server, now
    finally:
        server.stop()


def test_chunked_fetch_equals_one_range_query(fleet_prom):
    prom, now = fleet_prom
    client = PrometheusClient(PrometheusTarget(prom.url))
    start, end = now - LONG * 86400, now
    # 20 series x 3,601 points = 72,020 samples; a 20,000-sample budget -> 1,000 points a window -> 4 windows
    chunked, requests = fetch(client, FLEET_QUERY, ("namespace", "service"), start, end, STEP, max_samples=20_000)
    whole, one = fetch(client, FLEET_QUERY, ("namespace", "service"), start, end, STEP)
    assert (requests, one) == (5, 2)  # the instant query that counts the series, then the windows
    assert [w.key for w in chunked] == [w.key for w in whole] and len(whole) == 20
    for a, b in zip(chunked, whole):
        np.testing.assert_array_equal(a.series.t, b.series.t)
        np.testing.assert_array_equal(a.series.y, b.series.y)


def test_fleet_from_one_query(fleet_prom, tmp_path):
    prom, now = fleet_prom
    out = tmp_path / "fleet"
    args = ["tune", "--prometheus", prom.url, "--query", FLEET_QUERY, "--by", "namespace,service",
            "--start", str(now - LONG * 86400), "--end", str(now), "--step", "60s", "--model", "seasonal_naive",
            "--span", "12h", "--history", "1d", "--refit", "2h", "--jobs", "2", "--no-progress", "--out", str(out)]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "fleet.json").read_text())
    by = {e["workload"]: e for e in doc["workloads"]}
    assert len(by) == 20 and doc["fleet"]["tuned"] == 17
    for i in (17, 18):
        e = by[f"team-{'ab'[i % 2]}-svc-{i}"]
        assert e["status"] == "not_tuned" and e["reason"].startswith("too short: 1.20 d of history")
        assert f"not tuned team-{'ab'[i % 2]}-svc-{i}: too short" in r.stdout
    assert by["team-a-flat"]["status"] == "not_tuned" and by["team-a-flat"]["reason"].startswith("too flat")

    crd = yaml.safe_load((FIXTURES / "keda" / "keda.sh_scaledobjects.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fleet_now = {(s["metric"]["namespace"], s["metric"]["service"]): float(s["value"][1])
                 for s in prom.query(FLEET_QUERY, time=now)}
    tuned = [e for e in doc["workloads"] if e["status"] == "tuned"]
    for e in tuned:
        so = yaml.safe_load((out / e["file"]).read_text())
        jsonschema.validate(so, schema)  # KEDA's own CRD schema
        ns, name = so["metadata"]["namespace"], so["metadata"]["name"]
        assert (ns, name) == (e["labels"]["namespace"], e["labels"]["service"])
        md = so["spec"]["triggers"][0]["metadata"]
        spec, unknown = parse_metadata(md, name=name, namespace=ns)  # the scaler's parser accepts it
        assert unknown == () and md == e["selection"]["metadata"]
        assert spec.prometheus.server_address == prom.url
        # the trigger's query is this workload's series alone, as one series
        res = prom.query(md["query"], time=now)
        assert len(res) == 1 and float(res[0]["value"][1]) == pytest.approx(fleet_now[(ns, name)], rel=1e-12)
        f = e["figures"]
        assert e["selection"]["met"] is f["met"] and f["gpu_hours"] == pytest.approx(e["selection"]["replica_hours"])
        assert e["workload"] in r.stdout
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kust["resources"] == sorted(e["file"] for e in tuned)
    built = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    assert len([d for d in yaml.safe_load_all(built.stdout) if d]) == 17

    tot = doc["totals"]
    assert tot["gpu_hours"] == pytest.approx(sum(e["figures"]["gpu_hours"] for e in tuned))
    assert tot["saved_vs_keep_alive_gpu_hours"] == pytest.approx(
        sum(e["figures"]["keep_alive_gpu_hours"] - e["figures"]["gpu_hours"] for e in tuned))
    assert tot["saved_vs_keep_alive_gpu_hours"] > 0
    assert tot["saved_vs_reactive_gpu_hours"] >= 0  # reactive at the same miss never beats the cheapest choice
    assert "totals" in r.stdout and "vs reactive at the same miss" in r.stdout

    again = CliRunner().invoke(main, args, catch_exceptions=False)
    assert again.exit_code == 0 and "17 from the cache" in again.stdout
    assert json.loads((out / "fleet.json").read_text())["totals"] == tot
