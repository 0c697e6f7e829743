"""Reading the apiserver's audit log and replaying the HPA's syncs through the project's rules (worked
arithmetic, milli-quantities, a mismatch caught)."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from scaler.drill import audit
from scaler.drill.audit import Pod, Sync, Timelines
from scaler.drill.fidelity import replay_syncs, rules_of
from scaler.drill.judge import end_to_end, trigger_index

HPA = {"spec": {"minReplicas": 1, "maxReplicas": 20, "metrics": [
    {"type": "External", "external": {"metric": {"name": "s0-forescale-x"},
                                      "target": {"type": "AverageValue", "averageValue": "10"}}}],
    "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                             "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                          {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                 "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                               "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}}}


def timelines(values: dict[float, float], currents: dict[float, int], status: list[tuple[float, int]]) -> Timelines:
    tl = Timelines()
    for t, cur in currents.items():
        tl.syncs["x"].append(Sync(t, cur, {"s0-forescale-x": (t + 0.01, t + 0.02)}))
    tl.status["x"] = status
    tl.hpa["x"] = HPA
    tl.values = values  # type: ignore[attr-defined]
    return tl


def test_the_hpas_syncs_through_the_projects_rules_worked():
    # t = 0: 3 replicas read 30 -> 30000 / (10000 x 3) = 1.0, inside the band: 3.
    # t = 3: 80 -> ratio 2.67 -> ceil(80 / 10) = 8; the scale-up limit from the period's start 3: max(3 + 4, 3 x 2)
    #        = 7 -> 7 (an event +4 at t = 3).
    # t = 6: 7 replicas read 80 -> 8; the event at t = 3 is 3 s old, inside the 15 s period: start = 7 - 4 = 3 ->
    #        limit 7 -> 7 (no write: the status says 7 already).
    # t = 20: the event is 17 s old, out of the period: start 7 -> max(7 + 4, 14) = 14 -> 8.
    # t = 23: 8 replicas read 20 -> 2; the 60 s scale-down window holds the recommendation 8 (t = 20): 8.
    values = {0: 30.0, 3: 80.0, 6: 80.0, 20: 80.0, 23: 20.0}
    currents = {0: 3, 3: 3, 6: 7, 20: 7, 23: 8}
    tl = timelines(values, currents, [(0.1, 3), (3.1, 7), (20.1, 8)])
    fid = replay_syncs(tl, "x", rules_of(HPA, 60.0), lambda s, metric: values[s.at])
    assert [c.ours for c in fid.syncs] == [3, 7, 7, 8, 8]
    assert [c.live for c in fid.syncs] == [3, 7, 7, 8, 8]
    assert fid.mismatches == []
    # the same syncs where the live HPA had written 9 at t = 20: caught
    wrong = timelines(values, currents, [(0.1, 3), (3.1, 7), (20.1, 9)])
    bad = replay_syncs(wrong, "x", rules_of(HPA, 60.0), lambda s, metric: values[s.at])
    assert [(c.at, c.ours, c.live) for c in bad.mismatches] == [(20, 8, 9), (23, 8, 9)]


def test_an_error_served_skips_the_sync_and_zero_replicas_are_not_computed():
    values = {0: 30.0, 3: math.nan, 6: 80.0}
    tl = timelines(values, {0: 3, 3: 3, 6: 0}, [(0.1, 3)])
    fid = replay_syncs(tl, "x", rules_of(HPA, 60.0), lambda s, metric: values[s.at])
    # t = 3: the only metric failed: the HPA keeps 3; t = 6: at 0 replicas the HPA does not compute (KEDA's 0 <-> 1)
    assert [(c.at, c.ours) for c in fid.syncs] == [(0, 3), (3, 3)]


def test_without_behavior_the_legacy_path_and_the_flags_window():
    legacy = {"spec": {**HPA["spec"], "behavior": None}}
    r = rules_of(legacy, 60.0)
    assert r.legacy and r.legacy_down_seconds == 60.0
    # t = 0: 3 -> 80: 8, limited to max(2 x 3, 4) = 6; t = 30: 6 replicas read 10 -> 1, but the highest
    # recommendation not older than 60 s is 8 (t = 0) -> legacy_limit: 8 > max(12, 4)? no -> 8
    values = {0: 80.0, 30: 10.0, 61: 10.0}
    tl = timelines(values, {0: 3, 30: 6, 61: 8}, [])
    tl.hpa["x"] = legacy
    fid = replay_syncs(tl, "x", r, lambda s, metric: values[s.at])
    # t = 61: the t = 0 record is 61 s old (out); t = 30's is 1 -> 1
    assert [c.ours for c in fid.syncs] == [6, 8, 1]


@pytest.mark.parametrize("text, value", [("12345m", Decimal("12.345")), ("10", Decimal(10)), ("1.5k", Decimal(1500)),
                                         ("2Mi", Decimal(2 * 2 ** 20)), ("1e3", Decimal(1000)), ("0", Decimal(0))])
def test_quantities(text, value):
    assert audit.quantity(text) == value


@given(st.integers(min_value=0, max_value=10 ** 12))
def test_milli_round_trips_a_milli_quantity(m):
    assert audit.milli(f"{m}m") == m


def test_a_bad_quantity_is_refused():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        audit.quantity("12 apples")


def ev(verb, user, ref, t, done=None, **extra):
    return json.dumps({"stage": "ResponseComplete", "verb": verb, "user": {"username": user}, "objectRef": ref,
                       "responseStatus": {"code": 200}, "requestReceivedTimestamp": t,
                       "stageTimestamp": done or t, **extra})


def test_the_audit_log_becomes_syncs_scales_status_and_pods(tmp_path):
    kcm, keda = audit.KCM, audit.KEDA
    scale = {"apiGroup": "apps", "resource": "deployments", "subresource": "scale", "name": "x", "namespace": "d"}
    lines = [
        ev("create", keda, {"apiGroup": "autoscaling", "resource": "horizontalpodautoscalers", "name": "keda-hpa-x"},
           "2026-01-01T00:00:00Z", responseObject=HPA),
        ev("get", kcm, scale, "2026-01-01T00:00:01Z", responseObject={"spec": {"replicas": 3}}),
        ev("list", kcm, {"apiGroup": "external.metrics.k8s.io", "resource": "s0-forescale-x", "namespace": "d"},
           "2026-01-01T00:00:01.100Z", "2026-01-01T00:00:01.150Z",
           requestURI="/apis/external.metrics.k8s.io/v1beta1/namespaces/d/s0-forescale-x?labelSelector="
                      "scaledobject.keda.sh%2Fname%3Dx"),
        ev("update", kcm, scale, "2026-01-01T00:00:01.200Z", requestObject={"spec": {"replicas": 5}}),
        ev("update", kcm, {"apiGroup": "autoscaling", "resource": "horizontalpodautoscalers", "name": "keda-hpa-x",
                           "subresource": "status"}, "2026-01-01T00:00:01.300Z",
           requestObject={"status": {"desiredReplicas": 5}}),
        ev("create", kcm, {"resource": "pods", "namespace": "d"}, "2026-01-01T00:00:01.400Z",
           responseObject={"metadata": {"name": "x-5d9f8-abcde"}}),
        ev("patch", "kwok", {"resource": "pods", "name": "x-5d9f8-abcde", "subresource": "status"},
           "2026-01-01T00:00:37Z", "2026-01-01T00:00:37.010Z"),
        ev("delete", kcm, {"resource": "pods", "name": "x-5d9f8-abcde"}, "2026-01-01T00:01:00Z"),
        "not json",
    ]
    log = tmp_path / "audit.log"
    log.write_text("\n".join(lines))
    tl = audit.read(log)
    t0 = audit.ts("2026-01-01T00:00:00Z")
    [s] = tl.syncs["x"]
    assert s.current == 3 and s.at == t0 + 1 and s.metrics["s0-forescale-x"] == pytest.approx((t0 + 1.1, t0 + 1.15))
    assert tl.scales["x"] == [(pytest.approx(t0 + 1.2), kcm, 5)]
    assert tl.status["x"] == [(pytest.approx(t0 + 1.3), 5)] and tl.hpa["x"] is not None
    pod = tl.pods["x"]["x-5d9f8-abcde"]
    assert (pod.created, pod.ready, pod.deleted) == pytest.approx((t0 + 1.4, t0 + 37.01, t0 + 60))
    assert tl.desired_after("x", t0, t0 + 2) == 5 and tl.desired_after("x", t0 + 2, t0 + 9) is None


def test_end_to_end_on_the_replays_ticks(tmp_path):
    # the replay: 2 replicas for 4 ticks, then 3 (ready 2, starting 1); live: 2 from the start, 3 from 61 s
    csv = tmp_path / "r.csv"
    rows = ["timestamp,demand_qps,observed_qps,x_planned_qps,x_ready,x_starting,x_missed_qps"]
    for i in range(8):
        rows.append(f"1970-01-01T00:{i * 15 // 60:02d}:{i * 15 % 60:02d}Z,1,1,1,2,{1 if i >= 4 else 0},0")
    csv.write_text("\n".join(rows) + "\n")
    tl = Timelines()
    tl.scales["x"] = [(61.0, audit.KCM, 3)]
    tl.pods["x"] = {"a": Pod("a", -100.0), "b": Pod("b", -100.0), "c": Pod("c", 61.0)}
    e = end_to_end(tl, "x", 2, csv, lambda t: t, 1.0)
    assert e.within_one_share == 1.0
    # replay: (4 x 2 + 4 x 3) x 15 = 300 pod-seconds; live, 1 s steps over 0..119: 2 x 120 + (119 - 61 + 1) = 299
    assert e.replay_pod_seconds == 300 and e.live_pod_seconds == 299
    assert e.pod_seconds_ratio == pytest.approx(300 / 299)
    # the replay reached 3 at 60 s, live at 61 s
    assert e.scale_up_lag_s == 1.0
    assert trigger_index("s1-prometheus-x") == 1 and trigger_index("weird") == -1
