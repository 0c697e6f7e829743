"""The server's ``capacityModel`` and ``capacity: learned``: a real server (fake clock) over real gRPC, a real
Prometheus holding vLLM's counters and gauges, real capacity files; each value worked by hand."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest

from scaler.capacity import CapacityModel, Fit, Point, document
from support import promfixture as pf
from support.browser import chromium, console_errors, wait_for
from support.clock import FakeClock
from support.scaler import Scaler

REQ = "sum(rate(vllm:request_success_total[2m]))"
INPUT = "sum(rate(vllm:prompt_tokens_total[2m]))"
OUTPUT = "sum(rate(vllm:generation_tokens_total[2m]))"
BASE = {"qpsPerReplica": "5", "mode": "reactive", "hpaTolerance": "0", "tuning": "off", "query": REQ}


def counter(name: str, t: np.ndarray, rate: float) -> pf.SeriesSpec:
    return pf.SeriesSpec(name, {"model_name": "m"}, "counter", t, np.cumsum(np.concatenate([[0.0], np.diff(t) * rate])))


@pytest.fixture(scope="module")
def vllm():
    # 10 requests/s of 2,000 prompt and 30 generated tokens each (20,000 and 300 tokens/s); 6 requests waiting
    # over 2 ready replicas: saturated, 5 served per replica. From 2 h before the test's clock to 1 h after it
    end = float(int(time.time()) // 60 * 60)
    t = pf.sample_times(end - 7200.0, end + 3600.0)
    series = [counter("vllm:request_success", t, 10.0), counter("vllm:prompt_tokens", t, 20000.0),
              counter("vllm:generation_tokens", t, 300.0),
              pf.SeriesSpec("vllm:num_requests_waiting", {"model_name": "m"}, "gauge", t, np.full(len(t), 6.0)),
              pf.SeriesSpec("kube_deployment_status_replicas_ready", {"deployment": "m"}, "gauge", t,
                            np.full(len(t), 2.0)),
              # a TTFT and an ITL percentile as the loop's queries read them (here plain gauges): 0.4 s, 0.03 s
              pf.SeriesSpec("vllm_ttft_p95_seconds", {"model_name": "m"}, "gauge", t, np.full(len(t), 0.4)),
              pf.SeriesSpec("vllm_itl_p95_seconds", {"model_name": "m"}, "gauge", t, np.full(len(t), 0.03))]
    with pf.PrometheusServer(series) as p:
        yield p, end


def model_file(path, lengths: tuple[float, float], name: str = "m") -> str:
    # Q 12.5 req/s, T 500 weighted tokens/s, w 0.02, margin 0.2: in force 10 req/s and 400 tokens/s per replica
    m = CapacityModel(name, "1x H100", Fit(12.5, 500.0, 0.02, 0.04, 0.03), 0.2, lengths, (128.0, 4096.0),
                      (16.0, 256.0), (Point(128, 16, 12.5), Point(4096, 256, 500 / 337.92)))
    path.write_text(json.dumps(document(m, version="test")))
    return str(path)


def gauge(s: Scaler, name: str, so: str, **labels) -> float | None:
    want = tuple(sorted({"namespace": "serving", "scaledobject": so, **labels}.items()))
    for (n, lab), v in s.metrics().items():
        if n == name and tuple(sorted((k, x) for k, x in lab if k != "trigger")) == want:
            return v
    return None


def test_the_capacity_model_is_the_load_and_its_file_is_checked(vllm, tmp_path):
    prom, end = vllm
    allowed, elsewhere = tmp_path / "capacity", tmp_path / "other"
    allowed.mkdir()
    elsewhere.mkdir()
    s = Scaler(FakeClock(end), server={"capacity_dirs": (str(allowed),)})
    try:
        md = {**BASE, "serverAddress": prom.url, "inputTokenQuery": INPUT, "outputTokenQuery": OUTPUT}
        # weighted tokens 0.02 x 20,000 + 300 = 700/s, 70 per request (inside 20 .. 100): the target is 5 req/s
        # per replica, so the requests count 10 x 5 / 10 = 5 and the tokens 700 x 5 / 400 = 8.75: the tokens bind
        wide = {**md, "capacityModel": model_file(allowed / "wide.json", (20.0, 100.0)), "servedModel": "m"}
        assert s.value(wide, name="wide").metricValueFloat == pytest.approx(8.75, rel=1e-6)
        assert gauge(s, "forescale_capacity_model_ok", "wide") == 1.0
        assert gauge(s, "forescale_capacity_clamped", "wide") == 0.0
        assert gauge(s, "forescale_tokens_per_second", "wide", kind="input") == pytest.approx(20000.0, rel=1e-6)
        assert gauge(s, "forescale_tokens_per_second", "wide", kind="output") == pytest.approx(300.0, rel=1e-6)
        # measured only up to 50 weighted tokens per request: 70 is held at 50 (500 tokens/s: 6.25), and said
        narrow = {**md, "capacityModel": model_file(allowed / "narrow.json", (20.0, 50.0))}
        assert s.value(narrow, name="narrow").metricValueFloat == pytest.approx(6.25, rel=1e-6)
        assert gauge(s, "forescale_capacity_clamped", "narrow") == 1.0
        # a file outside --capacity-dir, and one measured on another model: not in force, the request rate alone
        # (10 req/s), and the status page says why
        outside = {**md, "capacityModel": model_file(elsewhere / "c.json", (20.0, 100.0))}
        other = {**md, "capacityModel": str(allowed / "wide.json"), "servedModel": "mistral-7b"}
        for name, spec in (("outside", outside), ("other", other)):
            assert s.value(spec, name=name).metricValueFloat == pytest.approx(10.0, rel=1e-6), name
            assert gauge(s, "forescale_capacity_model_ok", name) == 0.0
        doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{s.server.http_port}/status.json",
                                                timeout=5).read())
        rows = {r["name"]: r for r in doc["scaledobjects"]}
        assert "outside the directories the scaler reads capacity files from" in rows["outside"]["last_error"]
        assert "--capacity-dir" in rows["outside"]["last_error"]
        assert "measured on model 'm' (1x H100), not on servedModel 'mistral-7b'" in rows["other"]["last_error"]
        llm = rows["wide"]["llm"]
        assert llm["model"]["in_force"]["model"] == "m" and llm["model"]["error"] is None
        assert llm["rows"] and llm["rows"][-1][llm["columns"].index("input_tokens")] == pytest.approx(20000.0)
    finally:
        s.close()


def refreshed(s: Scaler, clock: FakeClock, name: str, seconds: float) -> None:
    """Advance the clock by ``seconds`` and wait for the trigger's next refresh (its history grows by a row)."""
    (wl,) = [w for w in s.server.registry.workloads() if w.name == name]
    before = len(wl.llm.rows)
    clock.advance(seconds)
    for _ in range(400):  # only a hang waits this out
        if len(wl.llm.rows) > before:
            return
        time.sleep(0.025)
    raise AssertionError(f"{name}: no refresh after the clock moved {seconds} s")


def test_the_capacity_learned_at_saturation_is_exported_and_used_when_asked(vllm):
    # configured 8 req/s per replica; Prometheus says 10 req/s served by 2 ready replicas while 6 requests wait:
    # saturated, 5 per replica. Settled from the first sample, 3 samples (the test's knobs; the server's are
    # 120 s and 10): the estimate 5, the ratio 5 / 8 = 0.625. With capacity: learned the figure in force is 5
    # (inside [4, 16], 37.5 % from 8), and the plan is in replicas of 5: 10 x 8 / 5 = 16 req/s for the HPA's 8
    prom, end = vllm
    clock = FakeClock(end)
    s = Scaler(clock, capacity_settle_seconds=0.0, capacity_min_samples=3)
    try:
        md = {**BASE, "serverAddress": prom.url, "qpsPerReplica": "8", "refreshInterval": "5s",
              "queueQuery": "sum(vllm:num_requests_waiting)",
              "readyReplicasQuery": "max(kube_deployment_status_replicas_ready)"}
        learned = {**md, "capacity": "learned"}
        assert s.value(md, name="seen").metricValueFloat == pytest.approx(10.0, rel=1e-6)
        assert s.value(learned, name="used").metricValueFloat == pytest.approx(10.0, rel=1e-6)  # nothing learned yet
        for _ in range(3):
            refreshed(s, clock, "used", 5.0)
        for name in ("seen", "used"):
            assert gauge(s, "forescale_capacity_learned_qps_per_replica", name) == pytest.approx(5.0, rel=1e-6)
            assert gauge(s, "forescale_capacity_learned_ratio", name) == pytest.approx(0.625, rel=1e-6)
        assert gauge(s, "forescale_capacity_in_force_ratio", "seen") == 1.0  # configured: exported, not used
        assert gauge(s, "forescale_capacity_in_force_ratio", "used") == pytest.approx(0.625, rel=1e-6)
        assert s.value(md, name="seen").metricValueFloat == pytest.approx(10.0, rel=1e-6)
        assert s.value(learned, name="used").metricValueFloat == pytest.approx(16.0, rel=1e-6)
    finally:
        s.close()


def test_capacity_keys_are_checked_together():
    from scaler.spec import MetadataError, parse_metadata

    base = {"serverAddress": "http://p:9090", "query": REQ, "qpsPerReplica": "5"}
    for extra, needle in (
            ({"capacityModel": "/etc/forescale/c.json"}, "'inputTokenQuery': got missing"),
            ({"capacityModel": "c.json", "inputTokenQuery": INPUT, "outputTokenQuery": OUTPUT},
             "'capacityModel': got 'c.json'; accepted: an absolute path"),
            ({"capacityModel": "/c.json", "inputTokenQuery": INPUT, "outputTokenQuery": OUTPUT, "tokenQuery": OUTPUT,
              "tokensPerReplica": "100"}, "'tokenQuery'"),
            ({"inputTokenQuery": INPUT}, "absent without capacityModel"),
            ({"capacity": "learned"}, "'queueQuery': got missing"),
            ({"capacity": "auto"}, "'capacity': got 'auto'; accepted: configured | learned")):
        with pytest.raises(MetadataError, match=needle.replace("(", r"\(")):
            parse_metadata({**base, **extra})


def test_the_status_page_shows_the_token_mix_capacity_queue_latency_and_the_learned_capacity(vllm, tmp_path):
    # one trigger with everything: a capacity file (its model's name with HTML in it: text, never markup), the
    # loop's queries and targets, capacity: learned. Three refreshes 5 s apart give the history rows; the page
    # (a real headless Chromium) shows the capacity cell and, in the detail view, the three panels and the figures
    prom, end = vllm
    clock = FakeClock(end)
    s = Scaler(clock, capacity_settle_seconds=0.0, capacity_min_samples=3, server={"capacity_dirs": (str(tmp_path),)})
    evil = "<img src=x onerror=window.__pwned=1>"
    try:
        md = {**BASE, "serverAddress": prom.url, "qpsPerReplica": "8", "refreshInterval": "5s",
              "inputTokenQuery": INPUT, "outputTokenQuery": OUTPUT,
              "capacityModel": model_file(tmp_path / "c.json", (20.0, 100.0), name=evil),
              "queueQuery": "sum(vllm:num_requests_waiting)", "queueTarget": "10",
              "readyReplicasQuery": "max(kube_deployment_status_replicas_ready)",
              "ttftQuery": "max(vllm_ttft_p95_seconds)", "ttftTarget": "1", "itlQuery": "max(vllm_itl_p95_seconds)",
              "itlTarget": "0.05", "capacity": "learned"}
        s.value(md, name="llm")
        for _ in range(3):
            refreshed(s, clock, "llm", 5.0)
        base = f"http://127.0.0.1:{s.server.http_port}"
        with chromium() as driver:
            driver.get(base + "/")
            rid = "so:serving/llm"
            wait_for(driver, f"document.getElementById({rid!r})", what="the row")
            cell = driver.find_element("css selector", f"[id={json.dumps(rid)}] td[data-col=capacity]").text
            # the load served is the binding one, at qpsPerReplica 8: max(10 x 8 / 10, 700 x 8 / 400) = 14
            # req/s-equivalents over 2 ready replicas: 7 per replica, 7 / 8 = 0.88 learned, 12.5 % from 1: past the
            # hysteresis, in force
            assert cell.startswith("0.88x learned (in force 0.88x)") and evil in cell
            driver.execute_script(f"document.getElementById({rid!r}).querySelector('td[data-col=name]').click()")
            wait_for(driver, "!document.getElementById('llm').hidden", what="the LLM section")
            wait_for(driver, "Number(document.getElementById('llmchart').dataset.points || 0) > 0", what="points")
            text = {k: driver.find_element("id", k).text for k in ("l_capacity", "l_model", "l_mix", "l_used",
                                                                   "l_latency")}
            # the first refresh and three more: four samples, every one saturated (6 waiting)
            assert text["l_capacity"] == ("8 req/s per replica configured; planned on: learned; learned 7 (0.88x, 4 "
                                          "samples), in force 7, saturated now")
            assert text["l_model"] == evil + " on 1x H100: 10 req/s, 400 tokens/s at w 0.02 (fit error 4.0 %)"
            assert text["l_mix"] == "20000.0 prompt + 300.0 generated tokens/s, 10.00 req/s"
            # 14 / (2 replicas x 7 in force) = 100 %; 6 waiting over 2 ready
            assert text["l_used"] == "100.0 % of the ready replicas' capacity; 6 waiting over 2 ready"
            assert text["l_latency"] == "TTFT 0.400 s (target 1), ITL 0.030 s (target 0.05)"
            lines = driver.execute_script("return Array.from(document.querySelectorAll('#llmchart polyline'))"
                                          ".map(e => e.getAttribute('class'))")
            assert sorted(lines) == ["in", "itl", "out", "queue", "ttft", "used"]
            targets = driver.execute_script("return document.querySelectorAll('#llmchart line.target').length")
            assert targets == 3  # queue, TTFT and ITL
            assert driver.execute_script("return document.querySelectorAll('img').length") == 0
            assert driver.execute_script("return window.__pwned === undefined") is True
            assert console_errors(driver) == []
    finally:
        s.close()


def test_forgetting_a_trigger_removes_its_capacity_and_token_series():
    from scaler.serve.metrics import ScalerMetrics

    m = ScalerMetrics()
    mine, sibling = ("serving", "llm", "aaaa0000"), ("serving", "llm", "bbbb1111")
    for labels in (mine, sibling):
        for kind in ("input", "output"):
            m.tokens.labels(*labels, kind).set(1.0)
        for g in (m.capacity_model_ok, m.capacity_clamped, m.capacity_learned, m.capacity_ratio, m.capacity_in_force,
                  m.capacity_samples):
            g.labels(*labels).set(1.0)

    def series(trigger: str) -> set:
        return {(s.name, tuple(sorted(s.labels.items()))) for fam in m.registry.collect() for s in fam.samples
                if s.labels.get("trigger") == trigger}

    assert len(series(mine[2])) == len(series(sibling[2])) == 8  # 2 token kinds, 6 capacity gauges
    m.forget(*mine, whole=False)
    assert series(mine[2]) == set() and len(series(sibling[2])) == 8
