"""End to end on CPU: `forescale probe --serve` with the built-in model, then `forescale loadtest` against it.

The probe runs as its own process (real HTTP over loopback, real torch generating tokens), configured
as a server with admission control: batches of up to 8 requests, a queue of 8 (beyond it: 503). What
keeps the figures steady on a small machine shared with other work: one intra-op thread
(OMP_NUM_THREADS=1: a tiny model gains nothing from two and loses much when the cores are busy) and a
batch step that lasts at least 150 ms on the clock (the probe's hidden testing aid: a device's step
time, costing no CPU; the step's own CPU work, milliseconds, is done within it), so time, not the
contended CPU, sets the capacity: a request of 2 tokens takes 2 steps, 8 requests per 2 steps at most,
C = 8 / 0.3 s = 26.7 req/s, as long as a step's CPU work stays under 150 ms. Beyond the capacity the
queue overflows and answers 503s, a sharp knee; the SLO (1 s) is above the slowest admitted request (~5
steps, 0.75 s: a partial step, its turn in the queue, then its own two), so only those 503s miss it.
The SLO is the 90th percentile, so one or two requests delayed by the machine's scheduler do not decide
a step.

Where a step of T seconds at r req/s breaks the SLO: the probe serves C T in it and holds 16 (8 in the
batch, 8 queued) to serve after, within the SLO; the rest, r T - C T - 16, is 503s, more than 10 % when
r > (C T + 16) / (0.9 T). The ramp's 6 s steps break at K6 = (160 + 16) / 5.4 = 32.6 req/s, the
replay's 30 s at K30 = (800 + 16) / 27 = 30.2: the ramp's capacity p (its highest passing rate, within
one bisection, x 2^(1/8), of K6: 29.9-32.6) recommends 0.8 p <= 26.1, 14 % below K30 (it holds), and
1.5 x that, 1.2 p >= 35.9, is 19 % above (it does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from scaler.cli import main
from support.procs import announced_url, stop

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent.parent
STARTUP_HANG_S = 600.0
COMMON = ["--slo", "1s", "--percentile", "90", "--max-tokens", "2", "--no-progress"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except TimeoutError:  # a probe busy warming up on a loaded machine answers late: not ready yet
        return 0, ""


@pytest.fixture(scope="module")
def probe_url(tmp_path_factory):
    cache = tmp_path_factory.mktemp("lt-probe-cache")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "scaler.cli", "probe", "--model-size", "1M",
                             "--cache-dir", str(cache),
                             "--steady-requests", "3", "--shallow-requests", "1", "--shallow-tokens", "64",
                             "--request-tokens", "32", "--max-input-tokens", "256", "--no-raw-read", "-q",
                             "--serve", "0", "--host", "127.0.0.1", "--max-batch", "8", "--max-queue", "8",
                             "--test-step-delay", "0.15"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # starting and warming up is not what this test measures (torch's import, the model, the timed warm-up
        # requests: all CPU; beside two burners at a load average of 13-15 it took over the 90 s this loop once
        # allowed): these limits only catch a probe that hangs
        url, lines = announced_url(proc, timeout=STARTUP_HANG_S)
        assert url is not None, "the probe never announced its address: " + "".join(lines)
        deadline = time.monotonic() + STARTUP_HANG_S
        while get(url + "/report")[0] != 200:  # ready, and the after-readiness timing finished
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        yield url
    finally:
        stop(proc)


def loadtest(*args: str):
    return CliRunner().invoke(main, ["loadtest", *args], catch_exceptions=False)


def test_loadtest_finds_a_rate_that_holds_and_one_that_does_not(probe_url, tmp_path):
    out = tmp_path / "lt.json"
    r = loadtest(probe_url, "--ramp", "--start-rate", "8", "--ramp-factor", "2", "--refine", "3",
                 "--duration", "6s", "--json", str(out), *COMMON)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert doc["schema"] == "forescale.loadtest/v1" and doc["url"] == probe_url + "/v1/completions"
    assert len(steps) == r.output.count("loadtest: ") >= 3  # every step run is in the JSON
    for s in steps:
        assert {"offered_rps", "achieved_rps", "p50_s", "p95_s", "p99_s", "errors", "timeouts"} <= set(s)
        assert s["offered_rps"] == pytest.approx(s["target_rps"], rel=0.05)
        assert s["ttft_p50_s"] is not None and s["ttft_p50_s"] < s["p50_s"]  # streamed: first token before the last
    assert doc["recommendation_basis"] == "slo"  # a higher rate broke the SLO
    rec = doc["recommended_qps_per_replica"]
    assert rec == pytest.approx(doc["capacity_rps"] * 0.8)
    # the clock bounds the capacity from above: a passing step of 6 s had >= 90 % of its 6 r requests answered
    # within 1 s of their time, so by 7 s; in 7 s the probe ends at most 7 / 0.15 = 46 steps, each finishing at
    # most 4 requests (8 in a batch, 2 steps each), plus the 8 it began with: 0.9 x 6 r <= 4 x 46 + 8, r <= 35.6.
    # And from below: 16 req/s, 60 % of C, holds (the ramp's second step); 32 is within a bisection of K6
    assert 16 <= doc["capacity_rps"] <= 35.6, doc["capacity_rps"]

    # replayed for 30 s (the check): the recommended rate meets the SLO, 50 % more does not
    again = tmp_path / "again.json"
    r = loadtest(probe_url, "--rates", f"{rec:.4f},{rec * 1.5:.4f}", "--duration", "30s", "--json", str(again),
                 *COMMON)
    assert r.exit_code == 0, r.output
    at_rec, above = json.loads(again.read_text())["steps"]
    assert at_rec["meets_slo"] and not at_rec["generator_limited"], at_rec
    assert not above["meets_slo"] and not above["generator_limited"], above
    assert above["within_slo"] < at_rec["within_slo"]

    # the step test on one replica: 60 % of the capacity, then at once 120 %
    step = tmp_path / "step.json"
    r = loadtest(probe_url, "--step", "0.6,1.2", "--capacity-from", str(out), "--duration", "3s", "--json", str(step),
                 *COMMON)
    assert r.exit_code == 0, r.output
    sdoc = json.loads(step.read_text())
    low, high = sdoc["steps"]
    assert low["target_rps"] == pytest.approx(0.6 * doc["capacity_rps"])
    assert high["target_rps"] == pytest.approx(1.2 * doc["capacity_rps"])
    assert low["meets_slo"] and high["within_slo"] < low["within_slo"]
    assert len(sdoc["timeline"]) == 6
    assert sum(w["arrivals"] for w in sdoc["timeline"]) == low["requests"] + high["requests"]

    # the server counted what the client sent: every ok answer is a 200 in its histogram
    families = {f.name: f for f in text_string_to_metric_families(get(probe_url + "/metrics")[1])}
    ok = sum(s.value for s in families["forescale_requests"].samples
             if s.name == "forescale_requests_total" and s.labels["code"] == "200")
    sent_ok = sum(s["ok"] for s in steps) + at_rec["ok"] + above["ok"] + low["ok"] + high["ok"]
    assert ok >= sent_ok  # plus the preflight requests and the settling ones
    count = next(s.value for s in families["forescale_request_duration_seconds"].samples
                 if s.name.endswith("_count"))
    assert count == ok
