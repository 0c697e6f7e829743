"""Issue 40 (hardening round 3), files and the HTTP port, from outside against a real server: events files that
block (FIFOs, pipes, /dev/stdout, a symlink out), a missing or broken one surfaced, a forged state file and a
symlinked temporary file, a 1,000-pod Deployment's kube-state-metrics answer, and who may read the status page."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from support import promfixture as pf
from support.fakes import sample_value
from support.ksm import FakePod, pod_series, replicaset_series
from support.live import FLAT_QPS, Vitals, health, metadata

HEADER = "name,start,end,multiplier,floor_qps\n"


def events_csv(path, floor: float) -> None:
    now = time.time()
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    path.write_text(HEADER + f"launch,{iso(now - 60)},{iso(now + 3600)},,{floor:g}\n")


def http(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_events_files_that_block_hold_no_one(live_prom, live_scaler, tmp_path):
    """Item 2: an eventsFile that blocks (/proc/self/fd/1, /dev/stdout, a FIFO) was read under one process-wide lock
    on the RPC thread: victims with their own valid eventsFile timed out, threads grew 120 -> 1,083 in 55 s, every
    RPC, the health check, /status.json, /healthz and /metrics timed out. Now they are refused in the background
    (not regular, or outside --events-dir), and the victims get their event's floor on every call."""
    allowed = tmp_path / "events"
    allowed.mkdir()
    fifo = allowed / "fifo.csv"
    os.mkfifo(fifo)
    (allowed / "to-stdout.csv").symlink_to("/proc/self/fd/1")
    good = allowed / "good.csv"
    events_csv(good, 40.0)
    s = live_scaler(events_dirs=(str(allowed),))
    vitals = Vitals()
    hostile = [str(fifo), "/proc/self/fd/1", "/dev/stdout", str(allowed / "to-stdout.csv")]

    def attack(i: int) -> None:
        try:
            s.get(metadata(live_prom.url, eventsFile=hostile[i % 4]), f"blocking-{i}", timeout=10)
        except Exception:  # noqa: BLE001 - the attacker's own answer does not matter
            pass
    with ThreadPoolExecutor(16, thread_name_prefix="Thread-attacker") as ex:
        list(ex.map(attack, range(64)))
        got = []
        for _ in range(10):  # the victims, while the attacker keeps calling
            ex.submit(attack, len(got))
            got.append(s.get(metadata(live_prom.url, eventsFile=str(good)), "victim", timeout=5))
            assert health(s.channel) == "SERVING"
            for path in ("/healthz", "/metrics", "/status.json"):
                assert http(s.server.http_port, path)[0] == 200
            vitals.sample()
    assert got == [40.0] * 10  # the event's floor (the rate is 5)
    reasons = {w.name: w for w in s.server.registry.workloads()}
    fifo_wl = next(w for w in reasons.values() if w.spec.events_file == str(fifo))
    from scaler.events import FILES

    assert "not a regular file" in FILES.get(str(fifo)).error and fifo_wl.spec.events_file
    assert "outside the directories" in FILES.get("/dev/stdout").error
    assert vitals.worst[0] - vitals.base[0] <= 64, vitals.figures()  # before: 120 -> 1,083 in 55 s
    print(f"blocking events files: 64 hostile triggers, victim {len(got)} of {len(got)} served with its floor; "
          f"{vitals.figures()}")


def test_a_missing_or_broken_events_file_is_surfaced(live_prom, live_scaler, tmp_path, caplog):
    """Item 9 (and issue 36, item 2): a missing eventsFile was accepted silently (no log, status '-', last error
    'none'); a bad edit's error never logged, exported or shown. Now each is logged once, exported
    (forescale_events_file_ok 0), on the status page and in the decision log."""
    s = live_scaler(events_dirs=(str(tmp_path),))
    missing, broken = tmp_path / "nonexistent.csv", tmp_path / "events.csv"
    events_csv(broken, 20.0)
    with caplog.at_level(logging.WARNING, logger="scaler.events"):
        assert s.get(metadata(live_prom.url, eventsFile=str(missing)), "missing") == pytest.approx(FLAT_QPS)
        assert s.get(metadata(live_prom.url, eventsFile=str(broken)), "broken") == 20.0
        broken.write_text("not,an,events,file\n")
        os.utime(broken, ns=(1, 1))
        deadline = time.monotonic() + 15
        while "broken" not in caplog.text or "header" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            s.get(metadata(live_prom.url, eventsFile=str(broken)), "broken")
            time.sleep(0.5)
    assert "does not exist" in caplog.text
    assert s.get(metadata(live_prom.url, eventsFile=str(broken)), "broken") == 20.0  # the last good events stay
    reg = s.server.metrics.registry
    for name in ("missing", "broken"):
        assert sample_value(reg, "forescale_events_file_ok", {"namespace": "chaos", "scaledobject": name}) == 0.0
    rows = {r["name"]: r for r in json.loads(http(s.server.http_port, "/status.json")[1])["scaledobjects"]}
    assert "does not exist" in rows["missing"]["last_error"] and "header" in rows["broken"]["events_file"]["error"]
    log = json.loads(http(s.server.http_port, "/api/scaledobjects/chaos/missing/decisions")[1])
    assert log["triggers"][0]["events_file"][0]["outcome"] == "error"


def test_a_thousand_pod_deployment_measures_its_cold_start(live_scaler, tmp_path):
    """Item 10: coldStartFrom: cluster on a 300-pod Deployment: the range answer (8.9 MB) passed the 8 MiB cap and
    fell back to coldStartSeconds with advice that did not apply. Now one point per pod and term: 1,000 pods (a 1 h
    window) measured from the cluster."""
    now = float(int(time.time()) // 60 * 60)
    series = []
    for i in range(1000):
        c = now - 3500 + (i % 50) * 10
        series += pod_series(FakePod(f"vllm-5f6d7-{i}", "vllm-5f6d7", c, 3, 1, 60 + i % 40, now), "chaos")
    series.append(replicaset_series("vllm-5f6d7", "vllm", "chaos", now - 3600, now))
    t = pf.sample_times(now - 3600, now + 600)
    series.append(pf.SeriesSpec("chaos_requests", {"job": "flat"}, "counter", t, pf.counter_from_rate(t, FLAT_QPS)))
    prom = pf.PrometheusServer(series).start()
    try:
        s = live_scaler()
        vitals = Vitals()
        md = metadata(prom.url, coldStartFrom="cluster", coldStartWorkload="Deployment/vllm", coldStartWindow="1h")
        assert s.get(md, "big") == pytest.approx(FLAT_QPS)
        wl = s.server.registry.workloads()[0]
        deadline = time.monotonic() + 60
        while wl.cluster_cold is None or wl.cluster_cold.estimate is None:
            assert time.monotonic() < deadline, wl.cluster_cold
            time.sleep(0.2)
        est = wl.cluster_cold.estimate
        vitals.sample()
    finally:
        prom.stop()
    assert est.samples == 1000 and wl.t_cold().source == "cluster"
    assert 60 + 3 + 1 <= est.seconds <= 100 + 3 + 1  # created -> ready: 64 .. 103 s
    print(f"1,000 pods: T_cold {est.seconds:.1f}s from {est.samples} starts (the cluster's); {vitals.figures()}")


def test_the_status_page_can_be_closed_and_its_queries_hidden(live_prom, live_scaler, tmp_path):
    """Item 13: /status.json quoted failing triggers' PromQL and listed every namespace/name to anyone on port
    8080. With --http-token-file and --http-hide-queries: 401 without the token (but /healthz), no PromQL shown."""
    token = tmp_path / "token"
    token.write_text("0123456789abcdef-token")
    s = live_scaler(http_token_file=str(token), http_hide_queries=True)
    secret = 'sum(rate(payments_secret_total{team="pay"}[2m]))'
    with pytest.raises(Exception):
        s.get(metadata(live_prom.url, query=secret, ignoreNullValues="false"), "failing")
    port = s.server.http_port
    assert http(port, "/healthz") == (200, "ok\n")
    for path in ("/", "/status.json", "/metrics", "/api/scaledobjects/chaos/failing/decisions"):
        code, body = http(port, path)
        assert code == 401 and "failing" not in body
    code, body = http(port, "/status.json", "0123456789abcdef-token")
    assert code == 200 and "failing" in body and "payments_secret_total" not in body and "<query hidden>" in body
