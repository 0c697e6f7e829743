"""Capacity learned online, end to end (issue 37, acceptance): a fake vLLM (its capacity set by the clock, vLLM's
metric names on /metrics) scraped every second by a real Prometheus, read by a real ``forescale serve`` process
whose trigger overstates ``qpsPerReplica`` by half: the estimate, the ratio exported and the plan it puts in force.

No wall-clock assertion: the figures are the clock's (2 replicas of 0.1 s per request serve 20 req/s while a
queue waits); the waits below only bound a hang.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from support import promfixture as pf
from support.fakevllm import FakeVllm
from support.serveproc import Serve

SCRAPE = """\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: vllm
    static_configs: [{{targets: ["{target}"]}}]
"""


def closed_loop(url: str, workers: int, stop: threading.Event) -> list[threading.Thread]:
    """``workers`` clients, each sending its next completion when the last is answered: the server always holds
    about ``workers`` requests, ``workers - replicas`` of them waiting."""
    body = json.dumps({"model": "fake-vllm", "prompt": "one two three four", "max_tokens": 8}).encode()

    def run() -> None:
        while not stop.is_set():
            req = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except OSError:
                time.sleep(0.05)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    return threads


def test_the_server_learns_a_replicas_real_capacity_from_a_saturated_vllm(prometheus_factory, tmp_path):
    fake = FakeVllm(replicas=2, service=0.1)  # 10 req/s per replica, 20 in all
    now = float(int(time.time()))
    t = pf.sample_times(now - 120, now)
    prom = prometheus_factory([pf.SeriesSpec("unused", {"job": "x"}, "gauge", t, [0.0] * len(t))],
                              extra_args=["--web.enable-lifecycle"])
    (prom.workdir / "prometheus.yml").write_text(SCRAPE.format(target=fake.target))
    assert prom.session.post(f"{prom.url}/-/reload", timeout=10).status_code == 200
    stop = threading.Event()
    clients = closed_loop(fake.url, 12, stop)
    # settled 5 s (the query's rate window) and 5 samples (the server's defaults: 120 s, a 2m window, and 10)
    serve = Serve(tmp_path, "--capacity-learn", "5,5").ready()
    try:
        # a rate window of scrapes first (Prometheus extrapolates a younger series' rate() low), as a live
        # Prometheus has
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not prom.query("count_over_time(vllm:request_success_total[6s]) >= 6"):
            time.sleep(0.25)
        md = {"serverAddress": prom.url, "query": "sum(rate(vllm:request_success_total[5s]))",
              "qpsPerReplica": "15",  # overstated: a replica serves 10
              "queueQuery": "sum(vllm:num_requests_waiting)", "readyReplicasQuery": "count(vllm:num_requests_waiting)",
              "capacity": "learned", "refreshInterval": "1s", "mode": "reactive", "hpaTolerance": "0",
              "tuning": "off"}
        serve.get(md, "llm")
        ratio = serve.wait_metric("forescale_capacity_learned_ratio", '{namespace="chaos",scaledobject="llm"}',
                                  lambda v: v > 0, timeout=45)
        # 20 req/s served by 2 ready replicas while 10 wait: 10 per replica, 10 / 15 = 0.667 of the configured
        assert ratio == pytest.approx(10 / 15, rel=0.10)
        learned = serve.metric("forescale_capacity_learned_qps_per_replica", '{namespace="chaos",scaledobject="llm"}')
        assert learned == pytest.approx(10.0, rel=0.10)
        in_force = serve.metric("forescale_capacity_in_force_ratio", '{namespace="chaos",scaledobject="llm"}')
        assert in_force == pytest.approx(ratio, rel=0.10)  # 33 % from 1: past the hysteresis, inside [0.5, 2]
        # the plan is in replicas of the learned figure: the observed load x 15 / 10, for the HPA's 15 per replica
        observed = serve.metric("forescale_observed_qps", '{namespace="chaos",scaledobject="llm"}')
        value = serve.get(md, "llm")
        assert value == pytest.approx(serve.metric("forescale_observed_qps",
                                                   '{namespace="chaos",scaledobject="llm"}') / in_force, rel=0.05)
        assert observed == pytest.approx(20.0, rel=0.10)
        doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{serve.http_port}/status.json", timeout=5).read())
        (row,) = [r for r in doc["scaledobjects"] if r["name"] == "llm"]
        assert row["llm"]["learned"]["estimate"] == pytest.approx(10.0, rel=0.10)
        assert row["llm"]["capacity_mode"] == "learned" and row["llm"]["rows"]
    finally:
        stop.set()
        out = serve.close()
        fake.stop()
        for c in clients:
            c.join(35)
    assert "Traceback" not in out
