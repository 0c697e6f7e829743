"""coldStartFrom: cluster end to end: a real Prometheus backfilled with kube-state-metrics-shaped series for
Deployments with known start-ups, a real scaler over real gRPC, T_cold checked against quantiles worked by hand."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from support import promfixture as pf
from support.clock import FakeClock
from support.ksm import FakePod, pod_series, replicaset_series
from support.scaler import Scaler

NS = "serving"
H = 3600.0
NOW = float(int(time.time()) // 60 * 60)
END = NOW - 10  # the data ends 10 s before the scaler's clock


def hand_quantile(xs, q):
    """Linear interpolation between order statistics: h = (n - 1) q, x[floor h] + frac(h) (x[ceil h] - x[floor h])."""
    xs = sorted(xs)
    h = (len(xs) - 1) * q
    lo = int(np.floor(h))
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def deployment(name, rs, phases, *, first_lives=True):
    """Pods created every hour from NOW - 20 h; each lives 90 min, the first until the end."""
    pods = []
    for i, (sched, start, ready) in enumerate(phases):
        c = NOW - 20 * H + i * H
        pods.append(FakePod(f"{rs}-p{i}", rs, c, sched, start, ready, END if (i == 0 and first_lives) else c + 1.5 * H))
    return pods


FAST = deployment("fast", "fast-7d9f8", [(2, 1, 20 + 3 * i) for i in range(12)])  # totals 23, 26, ..., 56
SLOW = deployment("slow", "slow-5b6c7", [(10, 2, 900 + 40 * i) for i in range(12)])  # totals 912, 952, ..., 1352
# bimodal: 9 starts on a warm node (60..68 s) and 4 that waited for a new node (301, 311, 321, 331 s)
BIMODAL = deployment("bimodal", "bimodal-6f5d4", [(3, 1, 56 + i) for i in range(9)]
                     + [(240 + 10 * j, 1, 60) for j in range(4)])
FEW = deployment("few", "few-4c3b2", [(5, 1, 100), (5, 1, 110), (5, 1, 120)])
# not cold starts caused by scaling, all on the fast Deployment:
OLD = FakePod("fast-7d9f8-old", "fast-7d9f8", NOW - 30 * H, 2, 1, 20, END,  # created before the 1d window and
              restarts_at=(NOW - 5 * H,), ready_at_override=NOW - 5 * H + 30)  # restarted inside it
CRASHED = FakePod("fast-7d9f8-crash", "fast-7d9f8", NOW - 10.5 * H, 2, 1, 600, NOW - 9 * H,
                  restarts_at=(NOW - 10.5 * H + 200,))  # crashed while loading, ready after the retry
SURGE = FakePod("fast-8e7a6-p0", "fast-8e7a6", NOW - 3 * H, 2, 1, 500, END)  # new ReplicaSet while the old runs
DECOY = FakePod("fast-zzz-p0", "fast-zzz", NOW - 4 * H, 2, 1, 5000, END)  # a ReplicaSet named like fast's, not its


def labelled(pods, app):
    return [FakePod(p.name, p.owner, p.created, p.sched, p.start, p.ready, p.until, labels=(("label_app", app),))
            for p in pods]


def series():
    out = []
    for pod in FAST + SLOW + labelled(BIMODAL, "bimodal") + FEW + [OLD, CRASHED, SURGE, DECOY]:
        out += pod_series(pod, NS)
    for rs, dep in (("fast-7d9f8", "fast"), ("fast-8e7a6", "fast"), ("slow-5b6c7", "slow"),
                    ("bimodal-6f5d4", "bimodal"), ("few-4c3b2", "few"), ("fast-zzz", "other")):
        out.append(replicaset_series(rs, dep, NS, NOW - 31 * H, END))
    # the probe's own figure for the slow model: 300 s, far below the cluster's 1308 s (it misses node boot and pull)
    t = pf.sample_times(NOW - 2 * H, NOW + H)
    out.append(pf.SeriesSpec("forescale_cold_start_seconds", {"phase": "total", "model": "slow"}, "gauge", t,
                             [300.0] * len(t)))
    # the request rate: a ramp of +1 req/s per minute over the last 3 h (for the lead in GetMetrics)
    t = pf.sample_times(NOW - 3 * H, NOW + H)
    out.append(pf.SeriesSpec("ramp_requests_total", {"job": "ramp"}, "counter", t,
                             pf.counter_from_rate(t, lambda x: 1.0 + (x - t[0]) / 60.0)))
    return out


@pytest.fixture(scope="module")
def ksm_prom(tmp_path_factory):
    prom = pf.PrometheusServer(series(), base_dir=tmp_path_factory.getbasetemp()).start()
    yield prom
    prom.stop()


def meta(prom, workload, **kw):
    md = {"serverAddress": prom.url, "query": "sum(rate(ramp_requests_total[2m]))", "qpsPerReplica": "10",
          "mode": "reactive", "coldStartFrom": "cluster", "coldStartWorkload": workload, "coldStartWindow": "1d",
          "coldStartSeconds": "30", "bufferSeconds": "0"}
    md.update(kw)
    return md


def cold(scaler, name):
    """forescale_cold_start_seconds of one ScaledObject: {(source, phase): value}."""
    return {(dict(k[1])["source"], dict(k[1])["phase"]): v for k, v in scaler.metrics().items()
            if k[0] == "forescale_cold_start_seconds" and dict(k[1])["scaledobject"] == name}


def wait_reading(scaler, name, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wl = next((w for w in scaler.server.registry.workloads() if w.name == name), None)
        if wl is not None and wl.cluster_cold is not None:
            return wl
        time.sleep(0.1)
    raise AssertionError(f"no cluster reading for {name}")


@pytest.fixture(scope="module")
def scaler():
    s = Scaler(FakeClock(NOW))
    yield s
    s.close()


@pytest.mark.parametrize("name,pods", [("fast", FAST), ("slow", SLOW), ("bimodal", BIMODAL)])
def test_t_cold_is_the_hand_quantile_and_phases_add_up(ksm_prom, scaler, name, pods):
    scaler.value(meta(ksm_prom, f"Deployment/{name}"), name=name)
    wl = wait_reading(scaler, name)
    totals = [p.total for p in pods]
    expected = hand_quantile(totals, 0.9)
    # fast: 23..56 step 3, h = 9.9 -> 50 + 0.9 * 3 = 52.7; slow: 1272 + 0.9 * 40 = 1308;
    # bimodal: 60..68, 301, 311, 321, 331: h = 10.8 -> 311 + 0.8 * 10 = 319
    assert expected == pytest.approx({"fast": 52.7, "slow": 1308.0, "bimodal": 319.0}[name])
    got = cold(scaler, name)
    assert got[("cluster", "total")] == pytest.approx(expected, abs=1e-6)
    phases = [got[("cluster", p)] for p in ("scheduling", "container_start", "start_to_ready")]
    assert sum(phases) == pytest.approx(expected, abs=1e-6)
    assert got[("in_force", "total")] == pytest.approx(expected, abs=1e-6)
    assert wl.t_cold().source == "cluster"
    if name == "bimodal":
        # the tail (>= 319 s) is the 321 and 331 s starts: 260 + 270 s waiting for a node of 652 s
        assert got[("cluster", "scheduling")] == pytest.approx(319 * 530 / 652, abs=1e-6)
    scaler.value(meta(ksm_prom, f"Deployment/{name}"), name=name)  # the next poll's decision exports the lead
    lead = {dict(k[1])["part"]: v for k, v in scaler.metrics().items() if k[0] == "forescale_lead_seconds"
            and dict(k[1])["scaledobject"] == name}
    assert lead["cold_start"] == pytest.approx(expected) and lead["total"] == pytest.approx(expected)  # buffer 0
    doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{scaler.server.http_port}/status.json", timeout=5).read())
    row = next(r for r in doc["scaledobjects"] if r["name"] == name)
    assert row["lead_seconds"] == pytest.approx(expected) and row["t_cold"] == pytest.approx(expected)
    assert row["t_cold_source"] == "cluster" and row["t_cold_cluster"] == pytest.approx(expected)


def test_restarts_rollouts_and_foreign_replicasets_are_excluded(ksm_prom, scaler):
    scaler.value(meta(ksm_prom, "Deployment/fast"), name="fast")
    wl = wait_reading(scaler, "fast")
    est = wl.cluster_cold.estimate
    assert est.samples == 12  # FAST only
    skipped = dict(est.skipped)
    assert skipped["before_window"] == 1  # OLD (its restart moved its ready time into the window)
    assert skipped["restarted"] == 1  # CRASHED
    assert skipped["rollout"] == 1  # SURGE
    assert est.skipped_total == 3  # DECOY is not fast's: not even seen
    m = scaler.metrics()
    got = [v for k, v in m.items() if k[0] == "forescale_cold_start_samples"
           and {("namespace", NS), ("outcome", "rollout"), ("scaledobject", "fast"), ("trigger", wl.trigger)} == set(k[1])]
    assert got == [1.0]


def test_too_few_samples_and_no_pods_fall_back_with_their_reason(ksm_prom, scaler):
    scaler.value(meta(ksm_prom, "Deployment/few"), name="few")
    wl = wait_reading(scaler, "few")
    t = wl.t_cold()
    assert (t.seconds, t.source) == (30.0, "config")
    assert "3 cold starts of Deployment/few in the last 1d, coldStartMinSamples is 10" in t.reason
    assert ("cluster", "total") not in cold(scaler, "few")  # never a T_cold of 0
    scaler.value(meta(ksm_prom, "Deployment/ghost"), name="ghost")
    t = wait_reading(scaler, "ghost").t_cold()
    assert (t.seconds, t.source) == (30.0, "config") and "no pods of Deployment/ghost" in t.reason
    # with enough samples once the minimum is lowered: p90 of 106, 116, 126 = 116 + 0.8 * 10 = 124
    scaler.value(meta(ksm_prom, "Deployment/few", coldStartMinSamples="3"), name="few")
    # the edited trigger is another workload (its metadata digest differs); the old one is retired later
    edited = next(w for w in scaler.server.registry.workloads() if w.name == "few" and w is not wl)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and edited.t_cold().source != "cluster":
        time.sleep(0.1)
    assert edited.t_cold().seconds == pytest.approx(124.0)
    assert wl.t_cold().source == "config"  # the original trigger keeps its own reading


def test_the_lead_in_get_metrics_follows_t_cold(ksm_prom):
    """linear_trend on a ramp of +1 req/s per minute: the plan is the rate T_cold ahead (bufferSeconds 0)."""
    s = Scaler(FakeClock(NOW))
    try:
        md = meta(ksm_prom, "Deployment/slow", mode="forecastAndScale", model="linear_trend", history="3h",
                  minHistory="1h", refitInterval="1h", levelCorrection="0", hpaTolerance="0", quantile="0.5")
        s.value(md, name="slow")
        wl = wait_reading(s, "slow")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and wl.forecast.forecast is None:
            time.sleep(0.1)
        v = s.value(md, name="slow").metricValueFloat
        t0 = NOW - 3 * H
        # the ramp's rate at NOW + 1308 s (the slow Deployment's p90); with coldStartSeconds (30 s) it would be ~21 lower
        expected = 1.0 + (NOW + 1308.0 - t0) / 60.0
        assert v == pytest.approx(expected, rel=0.03)
        assert v > 1.0 + (NOW + 30.0 - t0) / 60.0 + 10
    finally:
        s.close()


class Proxy(ThreadingHTTPServer):
    """A real HTTP proxy on 127.0.0.1 in front of the real Prometheus; ``hang`` makes it a tarpit (never answers)."""

    daemon_threads = True

    def __init__(self, target: str):
        self.target, self.hang = target, threading.Event()
        self.stopping = threading.Event()
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


class ProxyHandler(BaseHTTPRequestHandler):
    server: Proxy

    def do_GET(self):  # noqa: N802
        if self.server.hang.is_set():
            self.server.stopping.wait(30)
            return
        with urllib.request.urlopen(self.server.target + self.path, timeout=30) as r:
            body = r.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_query_that_times_out_keeps_the_value_then_falls_back(ksm_prom):
    proxy = Proxy(ksm_prom.url)
    clock = FakeClock(NOW)
    s = Scaler(clock)
    try:
        md = meta(ksm_prom, "Deployment/fast", refitInterval="5m", timeout="1000")
        md["serverAddress"] = proxy.url
        s.value(md, name="fast")
        wl = wait_reading(s, "fast")
        assert wl.t_cold().seconds == pytest.approx(52.7)
        proxy.hang.set()
        clock.advance(301)  # a refit is due: the query times out (1 s), the last value stands
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not wl.cluster_cold.error:
            time.sleep(0.1)
        assert "did not answer within 1s" in wl.cluster_cold.error
        assert (wl.t_cold().source, wl.t_cold().seconds) == ("cluster", pytest.approx(52.7))
        clock.advance(300)  # 601 s after the last good reading: past 2 x refitInterval (and 10 min)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not wl.cluster_cold.stale:
            time.sleep(0.1)
        t = wl.t_cold()
        assert (t.source, t.seconds) == ("config", 30.0) and "stale" in t.reason and "did not answer" in t.reason
        assert wl.lead().cold_start_seconds == 30.0 and wl.params().lead_seconds == 30.0  # bufferSeconds 0
        proxy.hang.clear()  # Prometheus answers again: the cluster's figure comes back at the next retry
        clock.advance(61)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and wl.t_cold().source != "cluster":
            time.sleep(0.1)
        assert wl.t_cold().seconds == pytest.approx(52.7)
    finally:
        s.close()
        proxy.close()


PROBE = 'max(forescale_cold_start_seconds{phase="total",model="slow",source=""})'


def test_cross_check_exports_both_and_warns_when_the_probe_is_far_below(ksm_prom, scaler, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="scaler.serve.coldstart"):
        scaler.value(meta(ksm_prom, "Deployment/slow", coldStartQuery=PROBE), name="crosscheck")
        wl = wait_reading(scaler, "crosscheck")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("misses part" in r.getMessage() for r in caplog.records):
            scaler.value(meta(ksm_prom, "Deployment/slow", coldStartQuery=PROBE), name="crosscheck")
            time.sleep(0.2)
    got = cold(scaler, "crosscheck")
    assert got[("probe", "total")] == 300.0 and got[("cluster", "total")] == pytest.approx(1308.0)
    ratio = [v for k, v in scaler.metrics().items() if k[0] == "forescale_cold_start_probe_ratio"
             and dict(k[1])["scaledobject"] == "crosscheck"]
    assert ratio == [pytest.approx(300 / 1308)]  # 0.23 < 0.5: warned
    assert wl.t_cold().source == "cluster"  # the cluster's figure leads
    assert any("misses part of the start-up" in r.getMessage() for r in caplog.records)
    # too few samples for the cluster: the probe's metric stands in, with the reason
    scaler.value(meta(ksm_prom, "Deployment/few", coldStartQuery=PROBE), name="probefallback")
    t = wait_reading(scaler, "probefallback").t_cold()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and t.source != "probe":
        time.sleep(0.1)
        t = wait_reading(scaler, "probefallback").t_cold()
    assert (t.source, t.seconds) == ("probe", 300.0) and "coldStartMinSamples is 10" in t.reason


def test_a_label_selector_finds_the_same_pods(ksm_prom, scaler):
    md = meta(ksm_prom, "Deployment/x", coldStartSelector='label_app="bimodal"')
    del md["coldStartWorkload"]
    scaler.value(md, name="selected")
    wl = wait_reading(scaler, "selected")
    assert wl.cluster_cold.estimate.samples == 13 and wl.t_cold().seconds == pytest.approx(319.0)
    md["coldStartSelector"] = 'label_app="nothing"'
    scaler.value(md, name="selected")
    # the edited trigger is another workload (its metadata digest differs)
    wl = next(w for w in scaler.server.registry.workloads() if w.name == "selected" and w is not wl)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (wl.cluster_cold is None or wl.cluster_cold.estimate is None):
        time.sleep(0.1)
    assert wl.cluster_cold.source.selector == 'label_app="nothing"'
    t = wl.t_cold()
    assert t.source == "config" and 'no pods of pods with {label_app="nothing"}' in t.reason


def test_one_range_query_per_refit_not_per_poll(ksm_prom):
    clock = FakeClock(NOW)
    s = Scaler(clock)
    key = ("forescale_prometheus_queries_total", (("purpose", "cold_start_cluster"),))
    try:
        md = meta(ksm_prom, "Deployment/fast", refitInterval="5m")
        s.value(md, name="fast")
        wait_reading(s, "fast")
        for _ in range(5):  # KEDA polls; the scheduler ticks every second meanwhile
            s.value(md, name="fast")
            time.sleep(0.5)
        assert s.metrics()[key] == 1.0
        clock.advance(300)  # refitInterval later: one more
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and s.metrics()[key] < 2:
            time.sleep(0.2)  # the scheduler's tick starts it, polled or not
        time.sleep(1.5)
        assert s.metrics()[key] == 2.0
    finally:
        s.close()


def test_the_status_page_shows_t_cold_and_its_source(ksm_prom, scaler):
    from support.browser import chromium, console_errors, wait_for

    md = meta(ksm_prom, "Deployment/fast")
    scaler.value(md, name="fast")
    wait_reading(scaler, "fast")
    scaler.value(md, name="fast")
    with chromium() as driver:
        driver.get(f"http://127.0.0.1:{scaler.server.http_port}/")
        row = wait_for(driver, "document.getElementById('so:serving/fast')", what="the fast row")
        cells = {td.get_attribute("data-col"): td.text for td in row.find_elements("css selector", "td")}
        # T_cold 52.7 s from the cluster; the lead = T_cold (bufferSeconds 0)
        assert cells["t_cold"] == "53 s (cluster)" and cells["lead_seconds"] == "53 s"
        assert console_errors(driver) == []


def test_a_forgotten_scaledobject_leaves_no_cold_start_series(ksm_prom):
    clock = FakeClock(NOW)
    s = Scaler(clock, forget_seconds=120.0)
    try:
        s.value(meta(ksm_prom, "Deployment/fast"), name="gone")
        wait_reading(s, "gone")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and ("cluster", "total") not in cold(s, "gone"):
            time.sleep(0.1)
        assert cold(s, "gone")[("cluster", "total")] == pytest.approx(52.7)
        clock.advance(121)  # not polled for longer than forget_seconds
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and s.server.registry.workloads():
            time.sleep(0.1)
        time.sleep(2.5)  # two more scheduler ticks: nothing comes back
        gone = [k for k in s.metrics() if k[0].startswith("forescale_cold_start") and ("scaledobject", "gone") in k[1]]
        assert s.server.registry.workloads() == [] and gone == []
    finally:
        s.close()
