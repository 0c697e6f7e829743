"""Two scaler replicas behind one Service: the same ScaledObject answered alike, and one SIGKILLed.

Two real ``forescale serve`` processes (each with its own state directory,
as two pods of one Deployment) read one real Prometheus whose series is
live at the wall clock (a daily sine, 50 +- 40 req/s, on its rising side
now, backfilled four days back and an hour ahead). The ScaledObject asks
for a ``seasonal_naive`` forecast (a fast, deterministic fit on the same
three days of history), so both replicas fit the same curve: their answers
must agree within 1 %. A client balancing over both (gRPC ``round_robin``,
as KEDA through the Service) keeps getting the forecast's answer after one
replica is killed with SIGKILL.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.procs import stop
from support import promfixture as pf
from support.paths import REPO
from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc

RATE = "sum(rate(replica_requests_total[2m]))"
DAY = 86400.0


def close_all(channels, replicas) -> None:
    """Close the test's channels, stop its replicas and close their logs."""
    for ch in channels:
        ch.close()
    for proc, _, _, log in replicas:
        stop(proc)
        log.close()


def start_replica(tmp_path, name: str):
    grpc_port, http_port = pf.find_free_port(), pf.find_free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    log = open(tmp_path / f"{name}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "scaler.cli", "serve", "--host", "127.0.0.1", "--port",
                             str(grpc_port), "--http-port", str(http_port), "--state-dir", str(tmp_path / name)],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, grpc_port, http_port, log


def reason(http_port: int) -> str | None:
    body = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5).read().decode()
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name == "forescale_decision_reason" and s.value == 1 and s.labels.get("scaledobject") == "llm":
                return s.labels["reason"]
    return None


def value(stub, ref) -> float:
    resp = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=""), timeout=10,
                           wait_for_ready=True)
    return resp.metricValues[0].metricValueFloat


def test_two_replicas_agree_and_one_survives_the_others_sigkill(prometheus_factory, tmp_path):
    now = time.time()
    t = pf.sample_times(now - 4 * DAY, now + 3600)
    # rising now: 50 + 40 sin(2 pi (t - now) / 1 d); the counter's slope is that rate
    prom = prometheus_factory([pf.SeriesSpec("replica_requests_total", {"job": "llm"}, "counter", t,
                                             pf.counter_from_rate(t, lambda x: 50 + 40 * np.sin(2 * math.pi * (x - now) / DAY)))])
    md = {"serverAddress": prom.url, "query": RATE, "qpsPerReplica": "10", "model": "seasonal_naive",
          "history": "3d", "minHistory": "1d", "step": "60s", "hpaTolerance": "0", "coldStartSeconds": "900"}
    ref = pb.ScaledObjectRef(name="llm", namespace="serving", scalerMetadata=md)
    replicas = [start_replica(tmp_path, n) for n in ("a", "b")]
    channels = []
    try:
        stubs = []
        for _, port, _, _ in replicas:
            ch = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(ch).result(timeout=60)
            channels.append(ch)
            stubs.append(pb_grpc.ExternalScalerStub(ch))
        deadline = time.monotonic() + 90
        while True:  # the first calls answer the observed rate; then each replica's own fit lands
            for s in stubs:
                value(s, ref)
            reasons = [reason(r[2]) for r in replicas]
            if reasons == ["forecast", "forecast"]:
                break
            assert time.monotonic() < deadline, f"no forecast on both replicas in 90 s: {reasons}"
            time.sleep(0.5)

        observed = prom.query_value(RATE)
        pairs = [(value(stubs[0], ref), value(stubs[1], ref)) for _ in range(5)]
        for a, b in pairs:
            assert abs(a - b) <= 0.01 * max(a, b), pairs
            # the forecast leads: with a 900 s cold start on the rising side, more than what comes in now
            assert a > 1.02 * observed, (a, observed)

        balanced = grpc.insecure_channel(",".join(f"127.0.0.1:{r[1]}" for r in replicas).join(["ipv4:", ""]),
                                         options=[("grpc.lb_policy_name", "round_robin")])
        channels.append(balanced)
        via_service = pb_grpc.ExternalScalerStub(balanced)
        before = [value(via_service, ref) for _ in range(4)]
        assert max(before) - min(before) <= 0.01 * max(before)

        victim = replicas[0][0]
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        with pytest.raises(grpc.RpcError) as e:
            stubs[0].GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=2)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        after = [value(via_service, ref) for _ in range(6)]  # every call now reaches the survivor
        print(f"observed {observed:.3f}; replicas {pairs}; via the service {before} -> {after}")
        assert all(abs(v - before[0]) <= 0.01 * before[0] for v in after), (before, after)
        assert reason(replicas[1][2]) == "forecast"  # warm: its own forecast, no fallback
    finally:
        close_all(channels, replicas)


# ----------------------------------------------------------------------------- the default path (issue 22, item 6)

# Two replicas on Prophet with tuning auto: the tuned choice and the cutoffs identical. The curves are mostly
# identical having fitted the same cutoffs, but differ by the newest points each read when the choice
# level-corrects, and by up to WARM_RTOL of the peak when a refit was warm-started from another fit than the
# other replica's (docs/performance.md); GetMetrics also within ANSWER_RTOL or that bound.
ANSWER_RTOL = 0.01
WARM_RTOL = 0.05


def status_of(http_port: int) -> dict | None:
    """This trigger's row of /status.json (None before the first call)."""
    doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status.json", timeout=5).read())
    rows = [r for r in doc["scaledobjects"] if r["name"] == "llm"]
    return rows[0] if rows else None


def settled(row: dict | None) -> bool:
    """Tuned, and a forecast fitted for the tuned configuration (or none needed: reactive)."""
    if row is None or row.get("tuned") is None or row.get("fitted_at") is None:
        return False
    return row["mode"] == "reactive" or (row.get("band") is not None and row["reason"] in ("forecast", "observed_floor"))


def test_two_replicas_on_prophet_with_tuning_auto_reach_the_same_choice_and_answers(prometheus_factory, tmp_path):
    """Two real servers, one real Prometheus, the default path: model prophet, tuning auto (history and
    tuningMinHistory shortened, a 5-minute step, so that the sweeps fit in a minute or two of CPU). The second
    replica starts after the first has tuned and fitted -- mid-interval -- and works at once on the same
    cutoffs' windows: both hold the same choice, fitted on the same cutoff, and answer alike."""
    now = time.time()
    t = pf.sample_times(now - 4.5 * DAY, now + 3600)
    rng = np.random.default_rng(7)
    wiggle = rng.normal(0.0, 12.0, 1000)  # a fixed, seeded irregularity (per 5 minutes), the same each run

    def qps(x):  # a working day: 20 req/s at night, a steep rise to 190 at 08:00 (now is 07:00), down at 18:00
        hour = ((np.asarray(x) - now) / 3600 + 7) % 24
        day = 20 + 170 / (1 + np.exp(-(hour - 8) * 4)) - 170 / (1 + np.exp(-(hour - 18) * 4))
        return np.maximum(day + wiggle[((np.asarray(x) - t[0]) // 300).astype(int) % 1000], 1.0)

    prom = prometheus_factory([pf.SeriesSpec("replica_requests_total", {"job": "llm"}, "counter", t,
                                             pf.counter_from_rate(t, qps))])
    md = {"serverAddress": prom.url, "query": RATE, "qpsPerReplica": "10", "history": "4d", "minHistory": "1d",
          "tuningMinHistory": "4d", "step": "300s", "coldStartSeconds": "1800"}  # model prophet, tuning auto
    ref = pb.ScaledObjectRef(name="llm", namespace="serving", scalerMetadata=md)
    replicas, channels, stubs = [], [], []
    try:
        first_cutoff = None
        for n in ("a", "b"):
            replicas.append(start_replica(tmp_path, n))
            ch = grpc.insecure_channel(f"127.0.0.1:{replicas[-1][1]}")
            grpc.channel_ready_future(ch).result(timeout=60)
            channels.append(ch)
            stubs.append(pb_grpc.ExternalScalerStub(ch))
            deadline = time.monotonic() + 400
            while not settled(status_of(replicas[-1][2])):  # KEDA polls; the fit and the sweep run meanwhile
                value(stubs[-1], ref)
                assert time.monotonic() < deadline, f"replica {n} not tuned and fitted: {status_of(replicas[-1][2])}"
                time.sleep(1.0)
            first_cutoff = first_cutoff or status_of(replicas[-1][2])["fitted_at"]
        rows = [status_of(r[2]) for r in replicas]
        deadline = time.monotonic() + 400
        # a boundary may pass between the two (a new cutoff): both then work on it and agree again
        while (rows[0]["fitted_at"], rows[0]["tuned"]["at"]) != (rows[1]["fitted_at"], rows[1]["tuned"]["at"]) \
                or not all(settled(r) for r in rows):
            assert time.monotonic() < deadline, rows
            for s in stubs:
                value(s, ref)
            time.sleep(1.0)
            rows = [status_of(r[2]) for r in replicas]
        a, b = rows
        print("replica a:", {k: a[k] for k in ("fitted_at", "tuned", "model", "mode", "reason")})
        print("replica b:", {k: b[k] for k in ("fitted_at", "tuned", "model", "mode", "reason")})
        # the same cutoffs, at least the settle time old, on whole minutes; the same choice
        assert a["fitted_at"] == b["fitted_at"] <= time.time() - 60 and a["fitted_at"] % 60 == 0
        assert a["tuned"]["at"] == b["tuned"]["at"] <= time.time() - 60 and a["tuned"]["at"] % 60 == 0
        assert a["tuned"]["chosen"] == b["tuned"]["chosen"] and a["model"] == b["model"]
        assert a["tuned"]["expected_miss"] == pytest.approx(b["tuned"]["expected_miss"], rel=1e-6, abs=1e-9)
        same_chain = a["fitted_at"] == first_cutoff  # no cutoff passed since the first replica's first fit
        # the stated bound (docs/self-watch.md): most runs show identical curves (0 difference), but runs on the
        # same cutoffs have also shown 0.5-1.1 % (a level-corrected choice re-predicted from each replica's own
        # newest points; one run not explained), so the tested bound is the warm-start one
        rtol = WARM_RTOL
        # on this trace (a steep morning rise, a 30-min cold start) the sweep picks Prophet's forecast; should it
        # pick reactive one day (the window moves with the cutoff), the choice and the answers are still compared
        if a["mode"] != "reactive":
            assert a["model"] == b["model"] == "prophet"
            ta, tb = np.array(a["band"]["t"]), np.array(b["band"]["t"])
            common = np.intersect1d(ta, tb)  # the curves over the times both show
            assert len(common) >= 30
            for part in ("mid", "provisioned"):
                va = np.array(a["band"][part], float)[np.isin(ta, common)]
                vb = np.array(b["band"][part], float)[np.isin(tb, common)]
                rel = float(np.max(np.abs(va - vb)) / np.max(np.abs(va)))
                print(f"forecast {part}: max difference / peak {rel:.2e} over {len(common)} points "
                      f"(same chain: {same_chain})")
                assert rel <= rtol, (part, rel, same_chain)
        # the answers: each replica observes Prometheus on its own refresh schedule, and where the observed rate
        # is above the forecast the answer is that rate (the observed floor); the trace moves every minute, so a
        # refresh on either side of a sample gives another observed rate (a CI run answered 39.9 against 44.0,
        # both curves within 0.5 %). Compared: answers made on the same observation (within 1 %), 5 of them
        pairs, seen = [], []
        deadline = time.monotonic() + 120
        while len(pairs) < 5:
            x, y = value(stubs[0], ref), value(stubs[1], ref)
            oa, ob = (status_of(r[2])["observed"] for r in replicas)  # the observed rate of each answer just made
            seen.append((x, y, oa, ob))
            if abs(oa - ob) <= 0.01 * max(oa, ob):
                pairs.append((x, y))
            else:
                assert time.monotonic() < deadline, seen[-20:]
                time.sleep(0.5)
        print("answers", pairs)
        for x, y in pairs:
            assert x > 0 and abs(x - y) <= max(ANSWER_RTOL, rtol) * max(x, y), (pairs, seen[-20:])
    finally:
        close_all(channels, replicas)
