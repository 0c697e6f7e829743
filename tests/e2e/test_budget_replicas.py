"""A fleet GPU budget served live by two scaler replicas: three ScaledObjects over one real Prometheus whose summed
demand exceeds the budget.

Two real ``forescale serve`` processes (``--budget-file``: 10 GPUs, the value rule; each the other's
``--budget-peers``) read one real Prometheus backfilled with promtool: three counters rising at 50, 40 and 30 req/s
(5, 4 and 3 replicas of 10 req/s, 1 GPU each: 12 GPUs asked). KEDA's two connections reach different replicas: one
replica is asked about ``a`` and ``b``, the other about ``c``, so neither holds every claim until they share them.
Once they have (each fetches the other's ``/budget/claims``), at every poll: the answers sum within the budget, ``c``
(the cheapest requests: $0.001 against $0.01 and $0.1) is capped to exactly 1 replica's worth with the reason
``budget_capped``, and both replicas give every ScaledObject the same answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.budget import desired_replicas
from support import promfixture as pf
from support.paths import REPO
from support.procs import stop

RATES = {"a": 50.0, "b": 40.0, "c": 30.0}
VALUES = {"a": "0.01", "b": "0.1", "c": "0.001"}
BUDGET = 10


def start(tmp_path, name: str, ports: dict, peer: str, budget_file) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "scaler.cli", "serve", "--host", "127.0.0.1", "--port",
                             str(ports[name][0]), "--http-port", str(ports[name][1]), "--budget-file", str(budget_file),
                             "--budget-peers", f"http://127.0.0.1:{ports[peer][1]}", "--budget-sync-seconds", "0.5"],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def get(port: int, path: str):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read().decode()


def reasons(port: int) -> dict[str, str]:
    out = {}
    for fam in text_string_to_metric_families(get(port, "/metrics")):
        for s in fam.samples:
            if s.name == "forescale_decision_reason" and s.value == 1:
                out[s.labels["scaledobject"]] = s.labels["reason"]
    return out


def test_two_replicas_hold_three_scaled_objects_within_one_budget(prometheus_factory, tmp_path):
    now = time.time()
    t = pf.sample_times(now - 3600, now + 3600)
    prom = prometheus_factory([pf.SeriesSpec("req_total", {"job": w}, "counter", t,
                                             pf.counter_from_rate(t, lambda x, r=r: np.full(len(x), r)))
                               for w, r in RATES.items()])
    budget_file = tmp_path / "budgets.yaml"
    budget_file.write_text(f"budgets:\n  - name: gpus\n    gpus: {BUDGET}\n    rule: value\n")

    def ref(w: str) -> pb.ScaledObjectRef:
        md = {"serverAddress": prom.url, "query": f'sum(rate(req_total{{job="{w}"}}[2m]))', "qpsPerReplica": "10",
              "mode": "reactive", "hpaTolerance": "0", "gpuBudget": "gpus", "gpusPerReplica": "1",
              "valuePerRequest": VALUES[w]}
        return pb.ScaledObjectRef(name=w, namespace="serving", scalerMetadata=md)

    ports = {n: (pf.find_free_port(), pf.find_free_port()) for n in ("one", "two")}
    procs = [start(tmp_path, "one", ports, "two", budget_file), start(tmp_path, "two", ports, "one", budget_file)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{ports[n][0]}") for n in ("one", "two")]
    try:
        for ch in channels:
            grpc.channel_ready_future(ch).result(timeout=60)
        one, two = (pb_grpc.ExternalScalerStub(ch) for ch in channels)

        def value(stub, w: str) -> float:
            r = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(w)), timeout=10, wait_for_ready=True)
            return r.metricValues[0].metricValueFloat

        def members(n: str) -> dict:
            return json.loads(get(ports[n][1], "/status.json"))["budgets"][0]["members"]

        deadline = time.monotonic() + 60
        while True:  # KEDA polls: one is asked about a and b, two about c; they share their claims meanwhile
            value(one, "a"), value(one, "b"), value(two, "c")
            m1, m2 = members("one"), members("two")
            if len(m1) == len(m2) == 3 and {k: v["granted"] for k, v in m1.items()} == \
                    {k: v["granted"] for k, v in m2.items()}:
                break
            assert time.monotonic() < deadline, (m1, m2)
            time.sleep(0.3)
        seen = []
        for _ in range(12):  # every poll from here on: both connections, both replicas
            answers = {"a": value(one, "a"), "b": value(one, "b"), "c": value(two, "c")}
            mirror = {"a": value(two, "a"), "b": value(two, "b"), "c": value(one, "c")}
            seen.append((answers, mirror))
            # what the HPA makes of the answers: within 10 GPUs; by value, c (the cheapest requests) gives way
            assert sum(desired_replicas(v, 10.0) for v in answers.values()) <= BUDGET, seen
            assert answers == pytest.approx({"a": 50.0, "b": 40.0, "c": 10.0}, rel=1e-6), seen
            assert mirror == pytest.approx(answers, rel=1e-9), seen  # the two replicas agree
            time.sleep(0.2)
        assert reasons(ports["two"][1])["c"] == "budget_capped" and reasons(ports["one"][1])["c"] == "budget_capped"
        assert reasons(ports["one"][1])["a"] == "mode_reactive"
        print("answers, both replicas:", seen[-1])
    finally:
        for ch in channels:
            ch.close()
        for p in procs:
            stop(p)
