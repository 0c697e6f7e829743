"""The fleet's pure parts: windows under Prometheus' limits, merging, names, per-workload queries, screening,
input hashes, the cache and the totals (worked arithmetic in the comments)."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Series
from scaler.fleet.jobs import Cache, Job, Row, Tuned, input_hash, totals
from scaler.fleet.workloads import (FleetError, Workload, chunk_windows, merge, names, parse_by, screen, shard,
                                    split, workload_query)
from scaler.replay import engine, variants

DAY = 86400.0


def test_windows_stay_under_both_limits_and_tile_the_range():
    # 21 days at 60 s: 30,241 points per series. One series: 11,000 points per window -> 3 windows
    # (11,000 + 11,000 + 8,241). 1,000 series: 1,000,000 / 1,000 = 1,000 points per window -> 31 windows.
    start, step = 1_700_000_000.0, 60.0
    end = start + 21 * DAY
    for n, expected in ((1, 3), (1000, 31)):
        w = chunk_windows(start, end, step, n)
        assert len(w) == expected
        pts = [round((b - a) / step) + 1 for a, b in w]
        assert max(pts) * n <= 1_000_000 and max(pts) <= 11_000
        assert sum(pts) == 30_241  # every grid point once
        assert w[0][0] == start and w[-1][1] == end
        assert all(b2 == pytest.approx(a1 + step) for (_, a1), (b2, _) in zip(w, w[1:]))
    with pytest.raises(FleetError, match="end >= start"):
        chunk_windows(end, start, step)


def test_merge_joins_windows_per_workload_and_refuses_an_unaggregated_query():
    a = {"metric": {"namespace": "x", "service": "a", "pod": "1"}, "values": [[0, "1"], [60, "2"]]}
    b = {"metric": {"namespace": "x", "service": "b"}, "values": [[0, "5"]]}
    later = {"metric": {"namespace": "x", "service": "a"}, "values": [[120, "3"]]}
    m = merge([[a, b], [later]], ("namespace", "service"))
    t, y = m[(("namespace", "x"), ("service", "a"))]
    assert list(t) == [0.0, 60.0, 120.0] and list(y) == [1.0, 2.0, 3.0]
    ws = split(m, 60.0)
    assert [w.title for w in ws] == ["namespace=x,service=a", "namespace=x,service=b"]
    assert list(ws[0].series.y) == [1.0, 2.0, 3.0]
    with pytest.raises(FleetError, match=r"several series for namespace=x,service=a.*sum by \(namespace, service\)"):
        merge([[a, dict(a, metric={"namespace": "x", "service": "a", "pod": "2"})]], ("namespace", "service"))
    with pytest.raises(FleetError, match="comma-separated list of label names"):
        parse_by("namespace,se rvice")


def _w(**labels) -> Workload:
    return Workload(tuple(labels.items()), Series(np.arange(3.0), np.ones(3), 1.0), "")


def test_names_namespace_label_and_collisions():
    ws = [_w(namespace="serving", service="llm"), _w(namespace="Batch", service="Big_Model"),
          _w(service="a.b"), _w(service="a-b"), _w(service="x" * 80)]
    got = names(ws)
    assert got[0] == ("serving-llm", "serving", "llm")
    assert got[1] == ("batch-big-model", "batch", "big-model")
    # "a.b" and "a-b" both clean to "a-b": each gets a 6-hex hash of its own key
    assert got[2][0] != got[3][0] and got[2][0].startswith("a-b-") and len(got[2][0]) == 3 + 1 + 6
    assert len(got[4][0]) == 63 and len(got[4][2]) == 63
    assert len({g[0] for g in got}) == len(got)


def test_shards_are_stable_and_spread():
    got = [shard("team", f"svc-{i}", 4) for i in range(400)]
    assert got == [shard("team", f"svc-{i}", 4) for i in range(400)]  # a rerun keeps every ScaledObject's shard
    counts = [got.count(k) for k in range(4)]
    assert sum(counts) == 400 and min(counts) >= 70  # about 100 each (a binomial's sd is ~9)
    assert {shard("a", "b", 1)} == {0}


def test_workload_query_keeps_one_workload():
    q = workload_query('sum by (namespace, service) (rate(r_total[2m]))', (("namespace", "a"), ("service", "b$1")))
    assert q == ('sum((sum by (namespace, service) (rate(r_total[2m]))) and on(namespace, service) '
                 'label_replace(label_replace(vector(1), "namespace", "a", "", ""), "service", "b$$1", "", ""))')


def test_screen_reasons():
    t = np.arange(0, 3 * DAY, 60.0)
    daily = 10 + 5 * np.sin(2 * np.pi * t / DAY)
    ok = Workload((("s", "ok"),), Series(t, daily, 60.0), "")
    assert screen(ok, DAY) is None
    short = Workload((("s", "short"),), Series(t[: int(1.5 * 1440)], daily[: int(1.5 * 1440)], 60.0), "")
    assert screen(short, DAY).startswith("too short: 1.50 d of history, 2 d needed")
    # 5 +- 0.04 req/s: a range of 0.08 = 1.6 % of the mean (< 2 %)
    flat = Workload((("s", "flat"),), Series(t, 5 + 0.04 * np.sign(np.sin(t)), 60.0), "")
    assert screen(flat, DAY).startswith("too flat")
    zero = Workload((("s", "zero"),), Series(t, np.zeros_like(t), 60.0), "")
    assert screen(zero, DAY) == "no traffic: the rate is 0 throughout"


def _job(y=None, **settings) -> Job:
    t = np.arange(0, 3 * DAY, 60.0)
    y = 10 + 5 * np.sin(2 * np.pi * t / DAY) if y is None else y
    return Job((("s", "a"),), t, y, 60.0, "", engine.Settings(**settings), variants.Grid(), 0.005)


def test_input_hash_follows_every_input():
    base = _job()
    assert input_hash(base) == input_hash(_job())
    y = base.y.copy()
    y[100] += 1e-9
    others = [_job(y), _job(cold_start_seconds=181.0), Job(base.key, base.t, base.y, 60.0, "", base.settings,
                                                             variants.Grid(quantiles=(0.9,)), 0.005),
              Job(base.key, base.t, base.y, 60.0, "", base.settings, base.grid, 0.01)]
    assert len({input_hash(base), *map(input_hash, others)}) == 5


def test_cache_round_trip_skips_errors_and_unreadable_files(tmp_path):
    c = Cache(tmp_path)
    ok = Tuned((("s", "a"),), None, None, None, seconds=1.5)
    c.put("h1", ok)
    c.put("h2", Tuned((("s", "b"),), None, None, "ReplayError: too short"))
    got = c.get("h1")
    assert got.cached and got.seconds == 1.5 and got.key == (("s", "a"),)
    assert c.get("h2") is None  # a failure is not stored: a rerun tries again
    c.path("h3").write_bytes(b"not a pickle")
    assert c.get("h3") is None


def test_totals_arithmetic():
    def r(hours, reactive, keep, miss, req, met=True):
        return Row((("s", str(hours)),), "predictive", "", met, miss, 1.0, hours, reactive, "", keep, None, None,
                   7.0, miss * req, req)

    rows = [r(100.0, 130.0, 400.0, 0.001, 1e6), r(50.0, None, 300.0, 0.004, 3e6, met=False)]
    t = totals(rows, gpus_per_replica=2)
    # chosen: (100 + 50) x 2 GPUs = 300; reactive only for the first: (130 - 100) x 2 = 60 saved
    assert t["gpu_hours"] == 300.0 and t["saved_vs_reactive_gpu_hours"] == 60.0
    assert t["reactive_same_miss_gpu_hours"] == 260.0
    assert (t["compared_with_reactive"], t["reactive_unreachable"], t["target_met"]) == (1, 1, 1)
    # keep-alive: (400 + 300 - 150) x 2 = 1100 saved
    assert t["saved_vs_keep_alive_gpu_hours"] == 1100.0 and t["keep_alive_gpu_hours"] == 1400.0
    # missed: (1000 + 12000) / 4e6 = 0.00325
    assert t["missed_fraction"] == pytest.approx(0.00325)
    assert t["simulated_days"] == 14.0
