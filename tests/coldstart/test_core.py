"""The pure core of coldStartFrom: cluster (scaler.coldstart): worked arithmetic, exclusions, fallbacks, keys."""

from __future__ import annotations

import math

import pytest

from scaler.coldstart import PodStart, cross_check, estimate, quantile, resolve
from scaler.coldstartkeys import ClusterSource, ColdStartKeyError, parse_selector, parse_source, to_metadata
from scaler.spec import DEFAULTS

NOW = 1_000_000.0
WEEK = 7 * 86400.0


def pod(i: int, sched: float, start: float, ready: float, *, created: float | None = None, owner: str = "rs-a",
        restarts: float = 0, name: str | None = None, last_seen: float | None = NOW) -> PodStart:
    """A pod created at NOW - 100000 + 1000 i whose phases last sched, start and ready seconds."""
    c = NOW - 100_000 + 1000 * i if created is None else created
    return PodStart(name or f"p{i}", c, c + sched, c + sched + start, c + sched + start + ready, restarts, owner,
                    last_seen)


# ten starts: created->ready 60, 62, ..., 76 (sched 10, start 2, ready 48..64) and one of 120 (30 + 5 + 85)
TEN = [pod(i, 10, 2, 48 + 2 * i) for i in range(9)] + [pod(9, 30, 5, 85)]


def test_p90_and_phases_worked():
    est = estimate(TEN, ClusterSource("Deployment", "vllm", quantile=0.9, min_samples=10), NOW)
    # sorted 60 62 64 66 68 70 72 74 76 120; h = (10 - 1) * 0.9 = 8.1 -> x8 + 0.1 (x9 - x8) = 76 + 4.4 = 80.4
    assert est.seconds == pytest.approx(80.4, abs=1e-9)
    assert est.samples == 10 and est.skipped_total == 0
    # the tail (starts >= 80.4) is the 120 s one: 30 / 5 / 85 of 120, scaled to 80.4
    phases = dict(est.phases)
    assert phases["scheduling"] == pytest.approx(80.4 * 30 / 120)  # 20.1
    assert phases["container_start"] == pytest.approx(80.4 * 5 / 120)  # 3.35
    assert phases["start_to_ready"] == pytest.approx(80.4 * 85 / 120)  # 56.95
    assert sum(phases.values()) == pytest.approx(est.seconds)


def test_median_interpolates():
    est = estimate(TEN, ClusterSource("Deployment", "vllm", quantile=0.5, min_samples=1), NOW)
    # h = 9 * 0.5 = 4.5 -> x4 + 0.5 (x5 - x4) = 68 + 1 = 69
    assert est.seconds == pytest.approx(69.0)
    # tail: starts >= 69 are 70, 72, 74, 76, 120: sched 10*4 + 30 = 70, start 2*4 + 5 = 13, ready (58+60+62+64) + 85 = 329
    phases = dict(est.phases)
    assert phases["scheduling"] == pytest.approx(69 * 70 / 412)
    assert phases["start_to_ready"] == pytest.approx(69 * 329 / 412)
    assert quantile([1, 2, 3, 4], 0.25) == pytest.approx(1.75)  # h = 0.75 -> 1 + 0.75 * 1


def test_exclusions_are_counted():
    src = ClusterSource("Deployment", "vllm", quantile=0.9, min_samples=1)
    bad = [
        pod(20, 10, 2, 48, created=NOW - WEEK - 1),  # before the window
        PodStart("starting", NOW - 500, NOW - 490, NOW - 480, None, owner="rs-a", last_seen=NOW),  # not ready
        pod(21, 10, 2, 48, restarts=1),  # a container restarted: its ready time is the restart's
        pod(22, -5, 2, 48),  # scheduled 5 s before created: clock skew
        pod(23, 10, 2, 90_000),  # created->ready over a day
    ]
    est = estimate(TEN + bad, src, NOW)
    assert est.samples == 10 and est.seconds == pytest.approx(80.4)  # the same as without them
    assert dict(est.skipped) == {"before_window": 1, "not_ready": 1, "restarted": 1, "rollout": 0, "replacement": 0,
                                 "negative": 1, "absurd": 1}


def test_rollout_surge_pods_excluded():
    # rs-a's pods are alive until NOW; rs-b's pod created while they were: a rollout's surge pod
    surge = pod(30, 10, 2, 500, owner="rs-b")
    # after rs-a's pods were gone (last seen NOW - 10000), rs-b scaled up: counts
    gone = [dataclass_replace(p, last_seen=NOW - 10_000) for p in TEN]
    later = pod(95, 10, 2, 48, owner="rs-b")  # created NOW - 5000
    src = ClusterSource("Deployment", "vllm", quantile=0.9, min_samples=1)
    est = estimate(TEN + [surge], src, NOW)
    assert dict(est.skipped)["rollout"] == 1 and est.samples == 10
    est2 = estimate(gone + [later], src, NOW)
    assert dict(est2.skipped)["rollout"] == 0 and est2.samples == 11


def test_statefulset_replacement_excluded():
    a0 = PodStart("db-0", NOW - 9000, NOW - 8990, NOW - 8980, NOW - 8900, owner="db", uid="u1")
    a1 = PodStart("db-1", NOW - 8000, NOW - 7990, NOW - 7980, NOW - 7900, owner="db", uid="u2")
    a0_again = PodStart("db-0", NOW - 3000, NOW - 2990, NOW - 2980, NOW - 2000, owner="db", uid="u3")
    est = estimate([a0, a1, a0_again], ClusterSource("StatefulSet", "db", min_samples=1), NOW)
    assert est.samples == 2 and dict(est.skipped)["replacement"] == 1
    assert est.durations == (100.0, 100.0)


def test_too_few_and_none():
    src = ClusterSource("Deployment", "vllm", min_samples=20)
    est = estimate(TEN, src, NOW)
    assert est.seconds is None and est.samples == 10
    assert "10 cold starts of Deployment/vllm" in est.reason and "coldStartMinSamples is 20" in est.reason
    empty = estimate([], src, NOW)
    assert empty.seconds is None and "no pods of Deployment/vllm" in empty.reason
    r = resolve(est, "", 240.0, 180.0)
    assert (r.seconds, r.source) == (240.0, "probe") and "coldStartMinSamples" in r.reason
    r = resolve(empty, "", None, 180.0)
    assert (r.seconds, r.source) == (180.0, "config") and "coldStartSeconds=180" in r.reason
    good = estimate(TEN, ClusterSource("Deployment", "vllm"), NOW)
    assert resolve(good, "", 10.0, 180.0).source == "cluster"
    r = resolve(good, "query timed out 3 times, last value too old", None, 180.0)
    assert r.source == "cluster"  # a good estimate handed in is used; the caller drops a stale one


def test_cross_check():
    ratio, warning = cross_check(30.0, 80.4)
    assert ratio == pytest.approx(30 / 80.4) and "misses part" in warning  # 0.37 < 0.5
    ratio, warning = cross_check(70.0, 80.4)
    assert ratio == pytest.approx(70 / 80.4) and warning == ""
    assert cross_check(None, 80.4) == (None, "")


def md(**kw):
    return lambda key: kw.get(key)


def test_parse_source():
    assert parse_source(md(), DEFAULTS) is None  # coldStartFrom defaults to metadata
    s = parse_source(md(coldStartFrom="cluster", coldStartWorkload="Deployment/vllm"), DEFAULTS)
    assert s == ClusterSource("Deployment", "vllm", "", 0.9, 7 * 86400.0, 10)
    s = parse_source(md(coldStartFrom="cluster", coldStartWorkload="statefulset/db", coldStartQuantile="0.95",
                        coldStartWindow="2d", coldStartMinSamples="4"), DEFAULTS)
    assert (s.kind, s.name, s.quantile, s.window_seconds, s.min_samples) == ("StatefulSet", "db", 0.95, 172800.0, 4)
    s = parse_source(md(coldStartFrom="cluster", coldStartSelector='label_app = "vllm", label_tier=~"gpu-.*"'), DEFAULTS)
    assert s.selector == 'label_app="vllm",label_tier=~"gpu-.*"' and s.describe() == 'pods with {label_app="vllm",label_tier=~"gpu-.*"}'
    back = parse_source(lambda k: to_metadata(s).get(k), DEFAULTS)
    assert back == s


@pytest.mark.parametrize("bad,key", [
    ({"coldStartFrom": "kube"}, "coldStartFrom"),
    ({"coldStartFrom": "cluster"}, "coldStartWorkload"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "DaemonSet/x"}, "coldStartWorkload"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/Bad_Name"}, "coldStartWorkload"),
    ({"coldStartFrom": "cluster", "coldStartSelector": 'app="x"} or vector(1)'}, "coldStartSelector"),
    ({"coldStartFrom": "cluster", "coldStartSelector": 'namespace="other"'}, "coldStartSelector"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/x", "coldStartQuantile": "1"}, "coldStartQuantile"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/x", "coldStartWindow": "10m"}, "coldStartWindow"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/x", "coldStartMinSamples": "2.5"}, "coldStartMinSamples"),
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/x", "coldStartMinSamples": "0"}, "coldStartMinSamples"),
])
def test_parse_source_rejects(bad, key):
    with pytest.raises(ColdStartKeyError) as e:
        parse_source(md(**bad), DEFAULTS)
    assert e.value.key == key


def test_selector_is_only_matchers():
    assert parse_selector('a="1"') == 'a="1"'
    for bad in ('a=1', 'a="1",', '', 'a="1" b="2"', '__name__="x"'):
        with pytest.raises(ValueError):
            parse_selector(bad)


def dataclass_replace(p, **kw):
    import dataclasses
    return dataclasses.replace(p, **kw)


def test_quantile_is_finite():
    assert math.isfinite(quantile([5.0], 0.9)) and quantile([5.0], 0.9) == 5.0


def test_trigger_keys_round_trip_through_spec():
    from scaler.spec import MetadataError, parse_metadata
    from scaler.specwrite import to_metadata as spec_metadata
    base = {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "4"}
    spec, unknown = parse_metadata({**base, "coldStartFrom": "cluster", "coldStartWorkload": "Deployment/vllm",
                                    "coldStartWindow": "36h"}, namespace="serving")
    assert unknown == () and spec.cold_start_cluster == ClusterSource("Deployment", "vllm", "", 0.9, 36 * 3600.0, 10)
    short = spec_metadata(spec, namespace="serving")
    assert short == {**base, "coldStartFrom": "cluster", "coldStartWorkload": "Deployment/vllm",
                     "coldStartWindow": "36h"}  # quantile 0.9 and min samples 10 are the defaults
    assert parse_metadata(short, namespace="serving")[0] == spec
    assert parse_metadata(base)[0].cold_start_cluster is None
    with pytest.raises(MetadataError, match="coldStartWorkload.*got 'Job/x'; accepted: Deployment/NAME"):
        parse_metadata({**base, "coldStartFrom": "cluster", "coldStartWorkload": "Job/x"})


def test_forescale_check_reports_the_cold_start_keys(tmp_path):
    from click.testing import CliRunner

    from scaler.cli import main
    so = """apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: llm, namespace: serving}
spec:
  scaleTargetRef: {name: vllm}
  triggers:
  - type: external
    metadata:
      scalerAddress: forescale:6000
      serverAddress: http://prom:9090
      query: sum(rate(x[2m]))
      qpsPerReplica: "4"
      coldStartFrom: cluster
      coldStartWorkload: WORKLOAD
"""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(so.replace("WORKLOAD", "Deployment/vllm"))
    bad.write_text(so.replace("WORKLOAD", "Pod/vllm"))
    r = CliRunner().invoke(main, ["check", str(good)])
    assert r.exit_code == 0 and "ok" in r.output
    r = CliRunner().invoke(main, ["check", str(bad)])
    assert r.exit_code == 2 and "coldStartWorkload': got 'Pod/vllm'; accepted: Deployment/NAME or StatefulSet/NAME" in r.output


def test_in_force_follows_the_reading():
    from scaler.coldstart import ClusterReading, in_force
    src = ClusterSource("Deployment", "vllm", min_samples=10)
    good = estimate(TEN, src, NOW)
    # coldStartFrom metadata: the probe's value, else coldStartSeconds, as before
    assert in_force(None, None, 240.0, 180.0).seconds == 240.0 and in_force(None, None, None, 180.0).source == "config"
    assert in_force(src, ClusterReading(src, good, NOW), None, 180.0).seconds == pytest.approx(80.4)
    # the last query failed but the value is recent: kept (stale value)
    assert in_force(src, ClusterReading(src, good, NOW, "timed out"), None, 180.0).source == "cluster"
    # too old: the fallback, with the reason
    r = in_force(src, ClusterReading(src, good, NOW, "timed out", stale=True), 240.0, 180.0)
    assert (r.source, r.seconds) == ("probe", 240.0) and "stale (timed out)" in r.reason
    # a reading for other keys does not apply
    other = ClusterSource("Deployment", "other")
    assert in_force(src, ClusterReading(other, good, NOW), None, 180.0).source == "config"
