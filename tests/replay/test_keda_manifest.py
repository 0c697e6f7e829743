"""ScaledObjects replayed as KEDA and the HPA run them, with the arithmetic in the comments.

Every case runs on 15 s ticks with the HPA syncing every tick and KEDA polling every 2 ticks (30 s);
targets are 10 (or 5) req/s per replica as KEDA's milli-quantities; a window or period of s seconds
holds the events less than s / 15 ticks old. The manifests go through the product's parser
(``manifest.plans``) and are checked against KEDA's CRD schema (tests/fixtures/keda).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import numpy as np
import pytest
import yaml

from scaler.replay.hpa import Hpa, ScalingPolicy, ScalingRules
from scaler.replay.keda import run_hpa
from scaler.replay.manifest import plans
from scaler.replay.manifestfields import ManifestError
from scaler.replay.scenario import Scenario
from scaler.replay.triggers import replay_plan

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "keda" / "keda.sh_scaledobjects.yaml"


@pytest.fixture(scope="module")
def schema():
    return yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def flat(n: int, cold: float = 0.0) -> Scenario:
    d = np.full(n, 10.0)
    return Scenario(0.0, d, d.copy(), cold, 10.0)


def so(text: str, schema=None):
    doc = yaml.safe_load(text)
    if schema is not None:
        jsonschema.validate(doc["spec"], schema)
    return plans([("test", doc)])[0]


def series(n: int, values) -> tuple[np.ndarray, np.ndarray]:
    """A sample every 15 s (tick i at t = 15 i) with the given value per tick."""
    return np.arange(n) * 15.0, np.asarray(values, dtype=float)


def replay(plan, n: int, trig: dict, cold: float = 0.0):
    return replay_plan(flat(n, cold), plan, curves=lambda t: [], series=trig, cluster_tolerance=0.1)[0]


HEAD = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: t}
spec:
  scaleTargetRef: {name: d}
"""


def prom(name: str, threshold: float, activation: float = 0.0, extra: str = "") -> str:
    return f"""
    - type: prometheus
      name: {name}
      metadata: {{serverAddress: "http://p:9090", query: "q", threshold: "{threshold:g}",
                  activationThreshold: "{activation:g}"{extra}}}"""


# --------------------------------------------------------------------------- behavior


def test_pods_policy_one_pod_per_120s_after_a_drop(schema):
    # the shipped example's scale-down: 1 pod per 120 s (8 ticks), here without a stabilisation window
    p = so(HEAD + """
  minReplicaCount: 1
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown:
          stabilizationWindowSeconds: 0
          selectPolicy: Min
          policies: [{type: Pods, value: 1, periodSeconds: 120}]
  triggers:""" + prom("rate", 10), schema)
    n = 60
    y = [100.0] * 2 + [30.0] * (n - 2)
    tl = replay(p, n, {"rate": series(n, y)})
    # tick 0: 100 / 10 = 10 replicas. Poll at tick 2 reads 30: 30000 / (10000 x 10) = 0.3 -> ceil(3) = 3;
    # the period start is 10 (no event in the last 120 s) -> at least 10 - 1 = 9: 9 at tick 2.
    # tick 3..9: the removal at tick 2 is < 8 ticks old: start 9 + 1 = 10 -> limit 9: stays 9.
    # tick 10: it is 8 ticks = 120 s old (out) -> start 9 -> 8; then one pod every 8 ticks:
    # 7 at 18, 6 at 26, 5 at 34, 4 at 42, 3 at 50 (the recommendation) and no further.
    expect = [10] * 2 + [9] * 8 + [8] * 8 + [7] * 8 + [6] * 8 + [5] * 8 + [4] * 8 + [3] * 10
    assert tl.replicas.tolist() == expect


def test_select_policy_min_and_max_on_scale_up():
    sc = flat(12)
    vals = np.array([20.0] + [200.0] * 5)
    pols = (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
    h_min = Hpa(cached_metrics=True, target=10.0, scale_up=ScalingRules(0.0, "Min", pols))
    h_max = Hpa(cached_metrics=True, target=10.0, scale_up=ScalingRules(0.0, "Max", pols))
    # 20 / 10 = 2 replicas at tick 0; the poll at tick 2 reads 200 -> 20 wanted. Each 15 s period starts at the
    # count the last sync left (its event is 1 tick = 15 s old: out of the period).
    # Min: min(start + 4, start x 2): 2 -> min(6, 4) = 4 -> min(8, 8) = 8 -> min(12, 16) = 12 -> 16 -> 20
    assert run_hpa(sc, vals, h_min).replicas.tolist() == [2, 2, 4, 8, 12, 16, 20, 20, 20, 20, 20, 20]
    # Max: 2 -> max(6, 4) = 6 -> max(10, 12) = 12 -> max(16, 24) = 24, capped by the recommendation 20
    assert run_hpa(sc, vals, h_max).replicas.tolist() == [2, 2, 6, 12, 20, 20, 20, 20, 20, 20, 20, 20]


def test_select_policy_disabled_never_scales_down(schema):
    p = so(HEAD + """
  minReplicaCount: 1
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown: {selectPolicy: Disabled, stabilizationWindowSeconds: 0}
  triggers:""" + prom("rate", 10), schema)
    n = 20
    y = [100.0] * 4 + [10.0] * 6 + [150.0] * 10
    tl = replay(p, n, {"rate": series(n, y)})
    # 10 replicas; the drop to 10 req/s (poll at tick 4) asks for 1, but Disabled keeps the limit at the current
    # count; the rise to 150 at tick 10 (150000 / 100000 = 1.5 -> 15) scales up as usual: max(10 + 4, 20) >= 15
    assert tl.replicas.tolist() == [10] * 10 + [15] * 10


# --------------------------------------------------------------------------- several triggers, modifiers


def test_two_triggers_the_second_wins_for_a_window(schema):
    p = so(HEAD + """
  minReplicaCount: 1
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown: {stabilizationWindowSeconds: 0}
  triggers:""" + prom("a", 10) + prom("b", 5), schema)
    n = 60
    a = [50.0] * n
    b = [10.0] * 20 + [40.0] * 20 + [10.0] * 20
    tl = replay(p, n, {"a": series(n, a), "b": series(n, b)})
    # tick 0: a 50 / 10 = 5, b 10 / 5 = 2: the largest, 5.
    # poll at tick 20 (t = 300 s): b 40 -> 40000 / (5000 x 5) = 1.6 -> ceil(40 / 5) = 8; a 50000 / (10000 x 5) = 1.0
    #   (inside the band) -> 5; the HPA takes 8 (within max(5 + 4, 10))
    # poll at tick 40: b 10 -> 10000 / (5000 x 8) = 0.25 -> 2; a 50000 / 80000 = 0.625 -> 5: 5 (window 0)
    assert tl.replicas.tolist() == [5] * 20 + [8] * 20 + [5] * 20


def test_scaling_modifiers_formula_and_activation_target(schema):
    p = so(HEAD + """
  cooldownPeriod: 60
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown: {stabilizationWindowSeconds: 0}
    scalingModifiers:
      formula: "x - y > 0 ? x - y : 0"
      target: "10"
      activationTarget: "5"
      metricType: AverageValue
  triggers:""" + prom("x", 1) + prom("y", 1), schema)
    n = 30
    tl = replay(p, n, {"x": series(n, [60.0] * n), "y": series(n, [20.0] * 20 + [58.0] * 10)})
    # ticks 0..19: 60 - 20 = 40 -> 40 / 10 = 4 replicas, active (40 > activationTarget 5)
    # poll at tick 20: 60 - 58 = 2 -> 2000 / (10000 x 4) = 0.05 -> ceil(0.2) = 1 (window 0);
    #   2 > 5 is false: inactive. Last active poll: tick 18; cooldown 60 s = 4 ticks: tick 22 is 4 ticks
    #   after (not more), tick 24 is 6: KEDA scales to 0 there (minReplicaCount 0)
    assert tl.replicas.tolist() == [4] * 20 + [1] * 4 + [0] * 6
    assert tl.value[19] == 40.0 and tl.value[21] == 2.0  # the composite metric is what the HPA saw


def test_idle_replica_count_with_activation(schema):
    p = so(HEAD + """
  minReplicaCount: 2
  idleReplicaCount: 0
  cooldownPeriod: 30
  triggers:""" + prom("rate", 10, activation=5), schema)
    n = 40
    y = [3.0] * 10 + [30.0] * 20 + [3.0] * 10
    tl = replay(p, n, {"rate": series(n, y)})
    # ticks 0..9: 3 <= activationThreshold 5: inactive, at the idle count 0 (the HPA is off at 0)
    # poll at tick 10: 30 > 5: active; 0 < minReplicaCount: KEDA sets 2 (after the tick's sync, which did not run)
    # tick 11: 30000 / (10000 x 2) = 1.5 -> 3 (within max(2 + 4, 4))
    # poll at tick 30: 3 -> inactive; the HPA's 1 (lifted to min 2) is held at 3 by the 300 s window.
    #   Last active poll tick 28; cooldown 30 s = 2 ticks: tick 30 is 2 ticks after (not more); at tick 32 KEDA
    #   scales to idleReplicaCount 0
    assert tl.replicas.tolist() == [0] * 10 + [2] + [3] * 21 + [0] * 8


def test_fallback_after_failures(schema):
    text = HEAD + """
  minReplicaCount: 1
  fallback: {failureThreshold: 2, replicas: 6}
  triggers:""" + prom("rate", 10, extra=', ignoreNullValues: "false"')
    n = 24
    y = [30.0] * 10 + [np.nan] * 14
    tl = replay(so(text, schema), n, {"rate": series(n, y)})
    # ticks 0..9: 30 / 10 = 3. KEDA asks the trigger at every HPA sync (every tick, useCachedMetrics false):
    # ticks 10, 11, 12 fail: 1, 2, 3 failures in a row; at ticks 10 and 11 the HPA cannot read its only metric
    # and skips the sync (stays 3). At tick 12, 3 > failureThreshold 2: KEDA serves 10 x 6 = 60 ->
    # 60000 / (10000 x 3) = 2 -> 6 (within max(3 + 4, 6)); KEDA's own loop sets 6 as well
    assert tl.replicas.tolist() == [3] * 12 + [6] * 12
    cached = so(text.replace("      metadata: {serverAddress", "      useCachedMetrics: true\n      metadata: {serverAddress"),
                schema)
    # cached: the HPA reads the poll's value: polls at ticks 10, 12, 14 fail (1, 2, 3 in a row): 6 from tick 14
    assert replay(cached, n, {"rate": series(n, y)}).replicas.tolist() == [3] * 14 + [6] * 10
    # behavior currentReplicasIfHigher with replicas 2: max(current 3, 2) = 3 -> KEDA serves 10 x 3 = 30:
    # 30000 / (10000 x 3) = 1.0, inside the band: 3 stays
    higher = so(text.replace("replicas: 6}", "replicas: 2, behavior: currentReplicasIfHigher}"), schema)
    assert replay(higher, n, {"rate": series(n, y)}).replicas.tolist() == [3] * n
    # without a fallback the failed polls change nothing
    no_fb = so(text.replace("  fallback: {failureThreshold: 2, replicas: 6}\n", ""), schema)
    assert replay(no_fb, n, {"rate": series(n, y)}).replicas.tolist() == [3] * n


# --------------------------------------------------------------------------- what cannot be replayed


@pytest.mark.parametrize("patch, field", [
    ("  advanced:\n    horizontalPodAutoscalerConfig:\n      behavior:\n        scaleUp: {foo: 1}\n",
     "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.foo"),
    ("  advanced:\n    scalingModifiers: {formula: 'rate ?? 0', target: '1'}\n", "scalingModifiers.formula"),
    ("  idleReplicaCount: 1\n  minReplicaCount: 3\n", "spec.idleReplicaCount"),
    ("  fallback: {failureThreshold: 3, replicas: 2, behavior: scalingModifiers}\n", "spec.fallback.behavior"),
])
def test_a_field_outside_the_replay_is_an_error_naming_it(patch, field):
    with pytest.raises(ManifestError, match=field.replace(".", r"\.")):
        so(HEAD + patch + "  triggers:" + prom("rate", 10))


def test_an_unknown_trigger_type_is_named():
    with pytest.raises(ManifestError, match=r"spec\.triggers\[0\]\.type 'kafka'"):
        so(HEAD + "  triggers:\n    - type: kafka\n      metadata: {topic: x}\n")


def test_no_behavior_is_the_controllers_legacy_path(schema):
    # KEDA passes no behavior to the HPA when the ScaledObject has none, and the HPA controller then takes its
    # legacy path: scale-up to at most max(2 x current, 4) per sync, the highest recommendation not OLDER than
    # 300 s (age <= 300 s), no scale-down rate limit. `behavior: {}` is the behavior defaults instead.
    legacy = so(HEAD + "  minReplicaCount: 1\n  triggers:" + prom("rate", 10), schema)
    defaults = so(HEAD + "  minReplicaCount: 1\n  advanced:\n    horizontalPodAutoscalerConfig:\n      behavior: {}\n"
                  "  triggers:" + prom("rate", 10), schema)
    assert legacy.hpa.legacy and not defaults.hpa.legacy
    n = 10
    up = [10.0] * 2 + [100.0] * 8
    # 1 replica; the poll at tick 2 reads 100 -> 10. legacy: max(2, 4) = 4 -> max(8, 4) = 8 -> 10;
    # behavior defaults: max(1 + 4, 2) = 5 -> max(9, 10) = 10
    assert replay(legacy, n, {"rate": series(n, up)}).replicas.tolist() == [1, 1, 4, 8, 10, 10, 10, 10, 10, 10]
    assert replay(defaults, n, {"rate": series(n, up)}).replicas.tolist() == [1, 1, 5, 10, 10, 10, 10, 10, 10, 10]
    n = 26
    down = [100.0] * 2 + [30.0] * 24
    # 10 replicas; from the poll at tick 2 the recommendation is 3. The last record of 10 is tick 1's.
    # legacy: kept while its age <= 20 ticks (300 s): until tick 21, 3 at tick 22;
    # behavior: kept while age < 20 ticks: until tick 20, 3 at tick 21
    assert replay(legacy, n, {"rate": series(n, down)}).replicas.tolist() == [10] * 22 + [3] * 4
    assert replay(defaults, n, {"rate": series(n, down)}).replicas.tolist() == [10] * 21 + [3] * 5


def test_cron_trigger_in_its_timezone(schema):
    text = HEAD + """
  minReplicaCount: 1
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown: {stabilizationWindowSeconds: 0}
  triggers:
    - type: cron
      metadata: {timezone: "TZ", start: "START", end: "END", desiredReplicas: "5"}
"""
    p = so(text.replace("TZ", "Etc/UTC").replace("START", "*/10 * * * *").replace("END", "5-59/10 * * * *"), schema)
    n = 60
    tl = replay(p, n, {})
    # t = 0 (1970-01-01 00:00 UTC): the next start is 00:10, the next end 00:05: the end comes first, so active:
    # value 5 over target 1 -> 5 replicas. At tick 20 (00:05) the next start (00:10) comes before the next end
    # (00:15): inactive, value 1 -> 1000 / (1000 x 5) = 0.2 -> 1 (window 0). At tick 40 (00:10) active again:
    # 5000 / 1000 = 5 -> within max(1 + 4, 2) = 5
    assert tl.replicas.tolist() == [5] * 20 + [1] * 20 + [5] * 20
    # Asia/Kolkata is UTC+05:30: minute 0 there is minute 30 in UTC, so '0,10,...' there is '30,40,...,20' here
    from scaler.replay.triggers import cron_active

    kol = so(text.replace("TZ", "Asia/Kolkata").replace("START", "*/10 * * * *").replace("END", "5-59/10 * * * *"))
    utc = so(text.replace("TZ", "Etc/UTC").replace("START", "*/10 * * * *").replace("END", "5-59/10 * * * *"))
    times = np.arange(0.0, 7200.0, 30.0)
    assert np.array_equal(cron_active(kol.triggers[0], times), cron_active(utc.triggers[0], times))
    shifted = so(text.replace("TZ", "Asia/Kolkata").replace("START", "0 * * * *").replace("END", "15 * * * *"))
    # 'from :00 to :15 every hour' in Kolkata: 00:30 .. 00:45 UTC, 01:30 .. 01:45 UTC
    act = cron_active(shifted.triggers[0], times)
    assert act.tolist() == [(1800 <= t % 3600 < 2700) for t in times]


def test_value_metric_type_is_not_divided_by_the_replicas(schema):
    p = so(HEAD + """
  minReplicaCount: 1
  maxReplicaCount: 20
  triggers:
    - type: prometheus
      name: queue
      metricType: Value
      metadata: {serverAddress: "http://p:9090", query: "q", threshold: "100"}
""", schema)
    n = 10
    tl = replay(p, n, {"queue": series(n, [100.0] * 2 + [300.0] * 8)})
    # Value target: ratio = value / target, recommendation ceil(ratio x current). 100 / 100 = 1 -> 1 replica.
    # from tick 2 the value is 300: ratio 3 whatever the count, so the HPA keeps multiplying, within the
    # legacy limit max(2 x current, 4): ceil(3 x 1) = 3; ceil(3 x 3) = 9 -> 6; 18 -> 12; 36 -> 24 -> max 20
    assert tl.replicas.tolist() == [1, 1, 3, 6, 12, 20, 20, 20, 20, 20]


def test_initial_cooldown_holds_the_scale_to_zero(schema):
    text = HEAD + "  cooldownPeriod: 30\nINITIAL  triggers:" + prom("rate", 10)
    n = 50
    y = [30.0] * 4 + [0.0] * (n - 4)
    # 30 / 10 = 3 replicas, active (30 > 0) at the polls of ticks 0 and 2; from tick 4 the value is 0: inactive.
    # Without initialCooldownPeriod KEDA scales to 0 at the first poll more than 30 s (2 ticks) after tick 2: tick 6
    plain = so(text.replace("INITIAL", ""), schema)
    assert replay(plain, n, {"rate": series(n, y)}).replicas.tolist() == [3] * 6 + [0] * 44
    # with 600 s (40 ticks) KEDA waits for the first poll after tick 40: tick 42. Meanwhile the HPA's 0 is held at
    # 3 (no behavior: the legacy path) while the last record of 3 (tick 3) is at most 20 ticks old (until tick
    # 23), then lifted to its min 1 at tick 24
    held = so(text.replace("INITIAL", "  initialCooldownPeriod: 600\n"), schema)
    assert replay(held, n, {"rate": series(n, y)}).replicas.tolist() == [3] * 24 + [1] * 18 + [0] * 8


def test_an_unreachable_forescale_gets_no_fallback_a_failing_source_does(schema):
    # KEDA v2.21 asks an external scaler for its metric spec before its value; while forescale is unreachable
    # that fails first (an empty spec), so nothing is observed: the HPA cannot read the metric and holds, and
    # no failure is counted, so the fallback never engages (seen on the real KEDA by the drill's scaler-down)
    text = HEAD + """
  minReplicaCount: 1
  fallback: {failureThreshold: 2, replicas: 6}
  triggers:
    - type: external
      name: fs
      metadata: {scalerAddress: "s:6000", serverAddress: "http://p:9090", query: "q", qpsPerReplica: "10",
                 mode: reactive, hpaTolerance: "0"}"""
    n = 24
    sc = Scenario(0.0, np.full(n, 30.0), np.full(n, 30.0), 0.0, 10.0)
    plan = so(text, schema)
    # reactive without compensation: value = observed 30 -> 30 / 10 = 3 replicas
    up = replay_plan(sc, plan, curves=lambda t: [], series={}, cluster_tolerance=0.1)[0]
    assert up.replicas.tolist() == [3] * n
    # forescale down from tick 10 (150 s) to the end: the HPA holds 3, no fallback to 6
    down = replay_plan(sc, plan, curves=lambda t: [], series={}, cluster_tolerance=0.1, down=[(150.0, 400.0)])[0]
    assert down.replicas.tolist() == [3] * n
    # the same failures from a source whose spec KEDA has (a prometheus query that fails): 6 from tick 12
    prom_text = text.split("  triggers:")[0] + "  triggers:" + prom("rate", 10, extra=', ignoreNullValues: "false"')
    failing = replay(so(prom_text, schema), n, {"rate": series(n, [30.0] * 10 + [np.nan] * 14)})
    assert failing.replicas.tolist() == [3] * 12 + [6] * 12


def test_a_forescale_trigger_is_replayed_with_the_servers_drift_response(schema):
    from forecaster.base import Forecast
    from scaler.policy import PolicyParams
    from scaler.replay.selfwatch import drift_response
    from scaler.replay.forecasts import Curve
    from scaler.replay.hpa import sync_ticks
    from scaler.replay.policies import polled_decisions

    # a forecast of 20 req/s while 60 arrive for an hour: the live scores see every answer miss, the
    # self-watch alarms and serves the safe policy (fallback_forecast_drift), as `forescale serve` always does
    text = HEAD + """
  minReplicaCount: 1
  triggers:
    - type: external
      name: fs
      metadata: {scalerAddress: "s:6000", serverAddress: "http://p:9090", query: "q", qpsPerReplica: "10",
                 levelCorrection: "0", hpaTolerance: "0", model: seasonal_naive}"""
    n = 240
    sc = Scenario(0.0, np.full(n, 60.0), np.full(n, 60.0), 0.0, 10.0)
    t = 60.0 * np.arange(-1, 80)
    fc = Forecast(t, np.full(t.size, 20.0), {q: np.full(t.size, 20.0) for q in (0.5, 0.8, 0.9)})
    plan = so(text, schema)
    tl, reasons = replay_plan(sc, plan, curves=lambda trig: [Curve(0.0, fc)], series={}, cluster_tolerance=0.1)
    assert reasons.get("fallback_forecast_drift", 0) > 0 and reasons.get("observed_floor", 0) > 0
    # the one implementation: the trigger's answers are drift_response over decide at each HPA sync
    s = plan.triggers[0].spec
    params = PolicyParams(mode=s.mode, lead_seconds=s.lead.seconds, quantile=s.quantile, qps_per_replica=10.0,
                          headroom=1.0, hpa_tolerance=0.0, level_correction_seconds=0.0)
    calls = sync_ticks(n, plan.hpa, sc.tick)
    times, obs, d = polled_decisions(sc, plan.hpa, params, [Curve(0.0, fc)], ticks=calls)
    planned, reason, _ = drift_response(times, obs, d, params, step=60.0)
    assert np.array_equal(tl.value, planned)
